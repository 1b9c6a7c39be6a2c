//! The run log writer, shared by the relay thread (harness lines) and the main loop (hangar lines).
//! Each write is whole lines under one lock, so lines never interleave.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use hangar_protocol::runlog::HangarLine;

/// A cloneable handle on the run log.
#[derive(Clone, Debug)]
pub struct RunLog {
    file: Arc<Mutex<File>>,
}

impl RunLog {
    /// Opens (creating, mode 0600) the run log for appending.
    pub fn open(path: &Path) -> io::Result<RunLog> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(RunLog {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Appends bytes that end with a newline.
    pub fn write_raw(&self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut f = self
            .file
            .lock()
            .map_err(|_| io::Error::other("run log lock poisoned"))?;
        f.write_all(bytes)
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
