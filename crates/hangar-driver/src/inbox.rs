//! The driver's side of the mailbox: a doorbell (inotify on `in/`) that wakes the main loop,
//! reading and checking command files, signed acks, and closing `in/` when the turn ends.

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc::Sender;

use hangar_mailbox::ControlDir;
use hangar_mailbox::ctl::safe_ack_name;
use hangar_protocol::runlog::HangarLine;
use hangar_protocol::{Ack, AckStatus, Command, MAX_COMMAND_BYTES, Refusal, Verified, Verifier};

use crate::folder::Folder;
use crate::runlog::RunLog;
use crate::turn::Event;

/// A command that passed the verifier, with the file name it came in.
#[derive(Debug)]
pub struct Incoming {
    pub name: String,
    pub verified: Verified,
}

/// The names of the mailbox's folders in the control folder.
const IN: &str = "in";
const ACKS: &str = "acks";

/// The mailbox as the driver sees it. `in/` and `acks/` are held by descriptor (see
/// `folder.rs`): a link or another folder put in their place is refused, and the turn stops.
#[derive(Debug)]
pub struct Inbox {
    ctl: ControlDir,
    root: Folder,
    /// `in/` while it is open; after the turn's end renamed it away, the same folder under its
    /// new name until the commands in it are taken.
    inbox: Folder,
    acks: Folder,
    verifier: Verifier,
    inotify: Option<OwnedFd>,
    /// `in/` is watched: a command rings the doorbell.
    doorbell: bool,
    seen: HashSet<OsString>,
    closings: u32,
    open: bool,
    /// Why the mailbox can no longer be trusted (a folder was swapped), once it happened.
    broken: Option<String>,
}

impl Inbox {
    /// Opens the mailbox's folders. An `in/` or `acks/` that is not a real folder (a symbolic
    /// link, a file, missing) is refused, saying which and what it is.
    pub fn new(ctl: ControlDir, verifier: Verifier) -> Result<Inbox, String> {
        let refused = |what: String| {
            format!(
                "the control folder {}: {what}; the driver takes commands and writes acks only in real folders (the agent may have replaced it), so the turn is refused",
                ctl.root().display()
            )
        };
        let root =
            Folder::open_root(ctl.root()).map_err(|e| refused(format!("cannot be opened: {e}")))?;
        let inbox = root.child(IN).map_err(&refused)?;
        let acks = root.child(ACKS).map_err(&refused)?;
        // SAFETY: inotify_init1 takes flags only; a valid fd (>= 0) is owned by nobody else.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        let inotify = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        let mut inbox = Inbox {
            ctl,
            root,
            inbox,
            acks,
            verifier,
            inotify,
            doorbell: false,
            seen: HashSet::new(),
            closings: 0,
            open: true,
            broken: None,
        };
        inbox.watch();
        Ok(inbox)
    }

    /// Why the mailbox was given up (a folder of it was replaced), if it was: the turn stops.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Whether `name` in the control folder still is `folder`; if not, the mailbox is given up
    /// (once, with a `hangar.error` line).
    fn still_there(&mut self, name: &str, log: &RunLog) -> bool {
        if self.broken.is_some() {
            return false;
        }
        let folder = if name == ACKS {
            &self.acks
        } else {
            &self.inbox
        };
        let Some(what) = folder.moved_from(&self.root, name) else {
            return true;
        };
        let message = format!(
            "the control folder {}: {what}; the driver takes commands and writes acks only in the folders it opened at the start, so the turn is stopped",
            self.ctl.root().display()
        );
        log.hangar(&HangarLine::Error {
            message: message.clone(),
        });
        crate::diag(&message);
        self.broken = Some(message);
        false
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
                libc::IN_MOVED_TO | libc::IN_CLOSE_WRITE | libc::IN_ONLYDIR | libc::IN_DONT_FOLLOW,
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
    /// Nothing is taken once `in/` is not the folder the driver opened ([`Inbox::broken`]).
    pub fn take(&mut self, log: &RunLog) -> Vec<Incoming> {
        // Both folders are looked at on every scan, so a swap is noticed within one even when
        // no command comes.
        if !self.open || !self.still_there(IN, log) || !self.still_there(ACKS, log) {
            return Vec::new();
        }
        self.take_here(log)
    }

    /// Every new command in the folder held as `in/` (open or renamed away).
    fn take_here(&mut self, log: &RunLog) -> Vec<Incoming> {
        let mut names: Vec<OsString> = match self.inbox.names() {
            Ok(all) => all.into_iter().filter(|n| !self.seen.contains(n)).collect(),
            Err(_) => return Vec::new(),
        };
        names.sort();
        let mut out = Vec::new();
        for os_name in names {
            self.seen.insert(os_name.clone());
            let name = safe_ack_name(&os_name.to_string_lossy());
            let bytes = read_command_file(self.inbox.open_file(&os_name));
            let _ = self.inbox.remove(&os_name);
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
        if !self.still_there(IN, log) {
            return Vec::new();
        }
        self.closings += 1;
        let away = format!("in.ended-{}", self.closings);
        if let Err(e) = self.root.rename(IN, &away) {
            log.hangar(&HangarLine::Warning {
                message: format!("could not rename in/ away: {e}"),
            });
            return Vec::new();
        }
        // What was renamed must be the folder held (it could have been swapped in between).
        if !self.still_there_as(&away, log) {
            return Vec::new();
        }
        self.take_here(log)
    }

    /// [`Inbox::still_there`] for `in/` under the name it was renamed to.
    fn still_there_as(&mut self, away: &str, log: &RunLog) -> bool {
        match self.inbox.moved_from(&self.root, away) {
            None => true,
            Some(_) => {
                let message = format!(
                    "the control folder {}: in/ was replaced while the turn's end renamed it; the driver takes commands only in the folder it opened, so the turn is stopped",
                    self.ctl.root().display()
                );
                log.hangar(&HangarLine::Error {
                    message: message.clone(),
                });
                self.broken = Some(message);
                false
            }
        }
    }

    /// Opens a fresh `in/` after a late message continued the turn (made here, opened without
    /// following a link, as at the start).
    pub fn reopen(&mut self, log: &RunLog) {
        if self.open || self.broken.is_some() {
            return;
        }
        match self.root.make_child(IN) {
            Ok(folder) => {
                self.inbox = folder;
                self.open = true;
                self.watch();
            }
            Err(what) => {
                log.hangar(&HangarLine::Warning {
                    message: format!("could not open a fresh in/: {what}"),
                });
            }
        }
    }

    /// Writes the signed ack for a command, in the `acks/` opened at the start; none once
    /// `acks/` is not that folder any more ([`Inbox::broken`]).
    pub fn ack(
        &mut self,
        log: &RunLog,
        name: &str,
        cmd: Option<&Command>,
        status: AckStatus,
        reason: &str,
    ) {
        if !self.still_there(ACKS, log) {
            return;
        }
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
        if let Err(e) = self.acks.write_via(
            &format!(".{name}.tmp"),
            &format!("{name}.ack"),
            &ack.to_bytes(),
            0o600,
        ) {
            crate::diag(&format!("cannot write the ack for {name}: {e}"));
        }
    }

    /// Refuses a command: signed ack and a `hangar.refused` line; nothing is executed.
    pub fn refuse(&mut self, log: &RunLog, name: &str, cmd: Option<&Command>, refusal: &Refusal) {
        let reason = refusal.to_string();
        log.hangar(&HangarLine::Refused {
            name: name.to_owned(),
            seq: cmd.map(|c| c.seq),
            kind: cmd.map(|c| c.kind.clone()),
            code: refusal.code().to_owned(),
            reason: reason.clone(),
        });
        self.ack(log, name, cmd, AckStatus::Refused, &reason);
    }
}

/// Reads a command file without following symlinks or blocking on a FIFO, refusing anything that
/// is not a regular file or is larger than the limit (without reading past it).
fn read_command_file(opened: io::Result<File>) -> Result<Vec<u8>, Refusal> {
    let unreadable = |e: io::Error| Refusal::Unreadable(e.to_string());
    let f: File = opened.map_err(unreadable)?;
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
