//! The run log writer, shared by the relay thread (harness lines) and the main loop (hangar lines).
//! Each write is whole lines under one lock, so lines never interleave.
//!
//! Every write is sealed (`hangar_protocol::logseal`): the content and a `hangar.seal` line that
//! covers it go out in one `write` with `O_APPEND`, so they sit side by side in the log whatever
//! an agent of the driver's own uid appends around them, and the control plane takes only what
//! a valid seal covers. The seals continue those the control plane wrote before the driver
//! started. The log is never opened through a symbolic link.

use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use hangar_protocol::logseal::{self, SealKey, Sealer};
use hangar_protocol::runlog::HangarLine;

/// A cloneable handle on the run log.
#[derive(Clone, Debug)]
pub struct RunLog {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    file: File,
    sealer: Option<Sealer>,
}

impl RunLog {
    /// Opens (creating, mode 0600) the run log for appending, unsealed (the relay's tests).
    #[cfg(test)]
    pub fn open(path: &Path) -> io::Result<RunLog> {
        Ok(RunLog::with(logseal::open_for_append(path)?, None))
    }

    /// Opens the run log for appending with every write sealed with `key`, going on from the
    /// seals already in it.
    pub fn open_sealed(path: &Path, key: SealKey, run: &str) -> io::Result<RunLog> {
        let file = logseal::open_for_append(path)?;
        let last = logseal::last_seal(path, &key, run)?;
        Ok(RunLog::with(file, Some(Sealer::new(key, run, last))))
    }

    fn with(file: File, sealer: Option<Sealer>) -> RunLog {
        RunLog {
            inner: Arc::new(Mutex::new(Inner { file, sealer })),
        }
    }

    /// Appends bytes that end with a newline.
    pub fn write_raw(&self, bytes: &[u8]) -> io::Result<()> {
        self.write_parts(&[bytes])
    }

    /// Appends whole lines given in pieces, as one write with their seal.
    pub fn write_parts(&self, parts: &[&[u8]]) -> io::Result<()> {
        if parts.iter().all(|p| p.is_empty()) {
            return Ok(());
        }
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| io::Error::other("run log lock poisoned"))?;
        let Inner { file, sealer } = &mut *inner;
        let seal = sealer.as_ref().map(|s| s.seal(parts));
        let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        if let Some(seal) = &seal {
            slices.push(IoSlice::new(seal));
        }
        write_all_vectored(file, &mut slices)?;
        if let Some(s) = sealer {
            s.written();
        }
        Ok(())
    }

    /// Appends one JSON value as a line (Codex's translated lines).
    pub fn write_json(&self, v: &serde_json::Value) {
        let mut s = v.to_string();
        s.push('\n');
        if let Err(e) = self.write_raw(s.as_bytes()) {
            crate::diag(&format!("cannot write the run log: {e}"));
        }
    }

    /// Appends one of hangar's lines. A failure to write the run log is reported on stderr: the
    /// turn goes on (the harness's own output is what matters most).
    pub fn hangar(&self, line: &HangarLine) {
        let mut s = line.to_json();
        s.push('\n');
        if let Err(e) = self.write_raw(s.as_bytes()) {
            crate::diag(&format!("cannot write the run log: {e}"));
        }
    }
}

/// The mailbox's inbox writes its lines (commands carried out, refused, answered `ended`) into
/// the run log and its notes to the driver's stderr.
impl hangar_mailbox::Journal for RunLog {
    fn line(&self, line: &HangarLine) {
        self.hangar(line);
    }

    fn diag(&self, message: &str) {
        crate::diag(message);
    }
}

/// `writev` until every slice is written. One call writes them all (a regular file's append is
/// one step); a short write goes on where it stopped.
fn write_all_vectored(file: &mut File, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use hangar_protocol::RunKey;
    use hangar_protocol::logseal::{Order, Piece, scan};

    #[test]
    fn each_write_is_followed_by_its_seal_going_on_from_the_logs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let key = SealKey::derive(&RunKey::from_bytes([4; 32]));
        logseal::append_sealed(&path, &key, "r", b"{\"type\":\"hangar.warning\"}\n").unwrap();
        let log = RunLog::open_sealed(&path, key.clone(), "r").unwrap();
        log.write_parts(&[b"{\"a\":1}\n{\"b\"", b":2}\n"]).unwrap();
        log.write_raw(b"").unwrap();
        log.hangar(&HangarLine::Warning {
            message: "w".into(),
        });
        let f = File::open(&path).unwrap();
        let s = scan(&f, 0, u64::MAX, 1 << 20, &key, "r", Order::After(0)).unwrap();
        let kept: Vec<(u64, Vec<u8>)> = s
            .pieces
            .into_iter()
            .map(|p| match p {
                Piece::Sealed { n, bytes, .. } => (n, bytes.unwrap()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(kept[1], (2, b"{\"a\":1}\n{\"b\":2}\n".to_vec()));
        assert_eq!(kept[2].0, 3);
        assert_eq!(kept.len(), 3);
        assert_eq!(s.resolved, std::fs::metadata(&path).unwrap().len());
    }
}
