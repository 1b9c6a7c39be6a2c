//! The driver's side of the mailbox: a doorbell (inotify on `in/`) that wakes the main loop,
//! reading and checking command files, signed acks, and closing `in/` when the turn ends.

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use hangar_protocol::atomic::{Durability, write_via_with};
use hangar_protocol::ctl::safe_ack_name;
use hangar_protocol::runlog::HangarLine;
use hangar_protocol::{
    Ack, AckStatus, Command, ControlDir, MAX_COMMAND_BYTES, Refusal, Verified, Verifier,
};

use crate::runlog::RunLog;
use crate::turn::Event;

/// A command that passed the verifier, with the file name it came in.
#[derive(Debug)]
pub struct Incoming {
    pub name: String,
    pub verified: Verified,
}

/// The mailbox as the driver sees it.
#[derive(Debug)]
pub struct Inbox {
    ctl: ControlDir,
    verifier: Verifier,
    inotify: Option<OwnedFd>,
    /// `in/` is watched: a command rings the doorbell.
    doorbell: bool,
    seen: HashSet<OsString>,
    closings: u32,
    open: bool,
}

impl Inbox {
    pub fn new(ctl: ControlDir, verifier: Verifier) -> Inbox {
        // SAFETY: inotify_init1 takes flags only; a valid fd (>= 0) is owned by nobody else.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        let inotify = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        let mut inbox = Inbox {
            ctl,
            verifier,
            inotify,
            doorbell: false,
            seen: HashSet::new(),
            closings: 0,
            open: true,
        };
        inbox.watch();
        inbox
    }

    fn watch(&mut self) {
        let (Some(fd), Ok(path)) = (
            &self.inotify,
            CString::new(self.ctl.inbox().as_os_str().as_bytes()),
        ) else {
            self.doorbell = false;
            return;
        };
        // SAFETY: fd is our inotify instance and path a valid NUL-terminated string.
        let wd = unsafe {
            libc::inotify_add_watch(
                fd.as_raw_fd(),
                path.as_ptr(),
                libc::IN_MOVED_TO | libc::IN_CLOSE_WRITE | libc::IN_ONLYDIR,
            )
        };
        self.doorbell = wd >= 0;
    }

    /// Whether a command landing in `in/` wakes the main loop (inotify instances are limited per
    /// user, 128 by default: many drivers of one user run without).
    pub fn has_doorbell(&self) -> bool {
        self.doorbell
    }

    /// Starts the doorbell thread: each batch of inotify events sends one [`Event::Wake`]. Without
    /// inotify the main loop's periodic scan still finds every command.
    pub fn start_doorbell(&self, tx: Sender<Event>) {
        let Some(fd) = &self.inotify else { return };
        let raw: RawFd = fd.as_raw_fd();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: raw stays open for the process's life (the Inbox lives until exit);
                // buf is a valid writable buffer of the given length.
                let n = unsafe { libc::read(raw, buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if n <= 0 || tx.send(Event::Wake).is_err() {
                    return;
                }
            }
        });
    }

    /// Reads, checks and removes every new command file in `in/`, in name (= sequence) order.
    /// Refused ones are answered and logged here; the rest are returned to be carried out.
    pub fn take(&mut self, log: &RunLog) -> Vec<Incoming> {
        if !self.open {
            return Vec::new();
        }
        let dir = self.ctl.inbox();
        self.take_from(&dir, log)
    }

    fn take_from(&mut self, dir: &Path, log: &RunLog) -> Vec<Incoming> {
        let mut names: Vec<OsString> = match fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .filter(|n| !self.seen.contains(n))
                .collect(),
            Err(_) => return Vec::new(),
        };
        names.sort();
        let mut out = Vec::new();
        for os_name in names {
            self.seen.insert(os_name.clone());
            let path = dir.join(&os_name);
            let name = safe_ack_name(&os_name.to_string_lossy());
            let bytes = read_command_file(&path);
            let _ = fs::remove_file(&path);
            let checked = match bytes {
                Ok(b) => self
                    .verifier
                    .check(&b)
                    .map_err(|r| (r.command.map(|c| *c), r.refusal)),
                Err(refusal) => Err((None, refusal)),
            };
            match checked {
                Ok(verified) => out.push(Incoming { name, verified }),
                Err((cmd, refusal)) => self.refuse(log, &name, cmd.as_ref(), &refusal),
            }
        }
        out
    }

    /// Renames `in/` away (S18): from now on a client's rename into `in/` fails at once. Returns
    /// the commands that landed before the rename, checked, for the caller to carry out.
    pub fn close(&mut self, log: &RunLog) -> Vec<Incoming> {
        if !self.open {
            return Vec::new();
        }
        self.open = false;
        self.closings += 1;
        let away = self.ctl.ended_inbox(self.closings);
        if let Err(e) = fs::rename(self.ctl.inbox(), &away) {
            log.hangar(&HangarLine::Warning {
                message: format!("could not rename in/ away: {e}"),
            });
            return Vec::new();
        }
        self.take_from(&away, log)
    }

    /// Opens a fresh `in/` after a late message continued the turn.
    pub fn reopen(&mut self) {
        if self.open {
            return;
        }
        if fs::DirBuilder::new()
            .mode(0o700)
            .create(self.ctl.inbox())
            .is_ok()
        {
            self.open = true;
            self.watch();
        }
    }

    /// Writes the signed ack for a command.
    pub fn ack(&self, name: &str, cmd: Option<&Command>, status: AckStatus, reason: &str) {
        let (seq, nonce) = cmd.map_or((0, ""), |c| (c.seq, c.nonce.as_str()));
        let ack = Ack::seal(
            self.verifier.key(),
            self.verifier.run(),
            name,
            seq,
            nonce,
            status,
            reason,
        );
        let tmp = self.ctl.acks().join(format!(".{name}.tmp"));
        if let Err(e) = write_via_with(
            &tmp,
            &self.ctl.ack_for(name),
            &ack.to_bytes(),
            0o600,
            Durability::Visible,
        ) {
            crate::diag(&format!("cannot write the ack for {name}: {e}"));
        }
    }

    /// Refuses a command: signed ack and a `hangar.refused` line; nothing is executed.
    pub fn refuse(&self, log: &RunLog, name: &str, cmd: Option<&Command>, refusal: &Refusal) {
        let reason = refusal.to_string();
        log.hangar(&HangarLine::Refused {
            name: name.to_owned(),
            seq: cmd.map(|c| c.seq),
            kind: cmd.map(|c| c.kind.clone()),
            code: refusal.code().to_owned(),
            reason: reason.clone(),
        });
        self.ack(name, cmd, AckStatus::Refused, &reason);
    }
}

/// Reads a command file without following symlinks or blocking on a FIFO, refusing anything that
/// is not a regular file or is larger than the limit (without reading past it).
fn read_command_file(path: &PathBuf) -> Result<Vec<u8>, Refusal> {
    let unreadable = |e: io::Error| Refusal::Unreadable(e.to_string());
    let f: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(unreadable)?;
    let meta = f.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(Refusal::Unreadable("not a regular file".into()));
    }
    if meta.len() > MAX_COMMAND_BYTES {
        return Err(Refusal::TooLarge);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    f.take(MAX_COMMAND_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    Ok(bytes)
}
