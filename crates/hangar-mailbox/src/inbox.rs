//! The inbox: taking command files out of `in/`, checking them ([`Verifier`]), answering them
//! with signed acks, and closing `in/` at a turn's end, answering what waited there `ended`.
//!
//! The driver reads its run's inbox for the whole turn (with a doorbell: the control folder's
//! bell FIFO, or else inotify on `in/`, wakes its main loop). The control plane closes it in the driver's place when the driver stopped
//! without doing so (the orphan sweeper) and closes a remote run's mirror of it when the
//! driver in the pod closed its own: one implementation of the close for all three.

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use hangar_protocol::runlog::{CommandOutcome, HangarLine};
use hangar_protocol::{
    Ack, AckStatus, Command, Kind, MAX_COMMAND_BYTES, Refusal, Verified, Verifier,
};

use crate::ctl::{ControlDir, safe_ack_name};
use crate::folder::Folder;

/// Where the inbox says what happened: the driver's run log (and its stderr). The control
/// plane, which never writes a driver's run log, passes `&()`.
pub trait Journal {
    /// One of hangar's lines for the run log.
    fn line(&self, line: &HangarLine);
    /// A note for whoever reads the process's diagnostics (the driver's stderr).
    fn diag(&self, _message: &str) {}
}

/// Nothing is written: the control plane's side (the run log is the driver's).
impl Journal for () {
    fn line(&self, _line: &HangarLine) {}
}

/// The reason every `ended` ack gives.
pub const ENDED: &str = "the turn has ended";

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
    /// The control folder's doorbell FIFO, listened to (`bell.rs`).
    bell: Option<std::sync::Arc<OwnedFd>>,
    seen: HashSet<OsString>,
    closings: u32,
    open: bool,
    /// Why the mailbox can no longer be trusted (a folder was swapped), once it happened.
    broken: Option<String>,
}

impl Inbox {
    /// Opens the mailbox's folders, with a doorbell ([`Inbox::start_doorbell`]) when an inotify
    /// instance is to be had (the driver). An `in/` or `acks/` that is not a real folder (a
    /// symbolic link, a file, missing) is refused, saying which and what it is.
    pub fn with_doorbell(ctl: ControlDir, verifier: Verifier) -> Result<Inbox, String> {
        Inbox::new(ctl, verifier, true)
    }

    /// [`Inbox::with_doorbell`] without the doorbell: for closing `in/` in the driver's place.
    pub fn open(ctl: ControlDir, verifier: Verifier) -> Result<Inbox, String> {
        Inbox::new(ctl, verifier, false)
    }

    fn new(ctl: ControlDir, verifier: Verifier, doorbell: bool) -> Result<Inbox, String> {
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
        let bell = if doorbell {
            crate::bell::listen(&ctl.bell()).map(std::sync::Arc::new)
        } else {
            None
        };
        // inotify only without a bell: its instances are few per user, left to the drivers
        // whose folders have none (a remote sandbox's).
        let inotify = if doorbell && bell.is_none() {
            // SAFETY: inotify_init1 takes flags only; a valid fd (>= 0) is owned by nobody else.
            let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        } else {
            None
        };
        let mut inbox = Inbox {
            ctl,
            root,
            inbox,
            acks,
            verifier,
            inotify,
            doorbell: false,
            bell,
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
    fn still_there(&mut self, name: &str, log: &dyn Journal) -> bool {
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
        log.line(&HangarLine::Error {
            message: message.clone(),
        });
        log.diag(&message);
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

    /// Whether a command landing in `in/` wakes the main loop: the control folder's bell, or
    /// inotify on `in/` (inotify instances are limited per user, 128 by default: past that, a
    /// driver whose folder has no bell runs without).
    pub fn has_doorbell(&self) -> bool {
        self.doorbell || self.bell.is_some()
    }

    /// Starts the doorbell threads: each ring of the bell, and each batch of inotify events,
    /// calls `ring` once, until it returns `false`. Without either the main loop's periodic
    /// scan still finds every command.
    pub fn start_doorbell(&self, ring: impl Fn() -> bool + Send + Clone + 'static) {
        if let Some(bell) = &self.bell {
            let (bell, ring) = (std::sync::Arc::clone(bell), ring.clone());
            std::thread::spawn(move || crate::bell::serve(&bell, ring));
        }
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
                if n <= 0 || !ring() {
                    return;
                }
            }
        });
    }

    /// Reads, checks and removes every new command file in `in/`, in name (= sequence) order.
    /// Refused ones are answered and logged here; the rest are returned to be carried out.
    /// Nothing is taken once `in/` is not the folder the driver opened ([`Inbox::broken`]).
    pub fn take(&mut self, log: &dyn Journal) -> Vec<Incoming> {
        // Both folders are looked at on every scan, so a swap is noticed within one even when
        // no command comes.
        if !self.open || !self.still_there(IN, log) || !self.still_there(ACKS, log) {
            return Vec::new();
        }
        self.take_here(log, &|_| false)
    }

    /// Every new command in the folder held as `in/` (open or renamed away), but those `skip`
    /// names (left where they are).
    fn take_here(&mut self, log: &dyn Journal, skip: &dyn Fn(&str) -> bool) -> Vec<Incoming> {
        let mut names: Vec<OsString> = match self.inbox.names() {
            Ok(all) => all
                .into_iter()
                .filter(|n| !self.seen.contains(n) && !skip(&n.to_string_lossy()))
                .collect(),
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

    /// Renames `in/` away (S18) to `in.ended-<n>` (the `n`th close of this inbox): from now on a
    /// client's rename into `in/` fails at once. Returns the commands that landed before the
    /// rename, checked, for the caller to carry out or answer `ended`.
    pub fn close(&mut self, log: &dyn Journal) -> Vec<Incoming> {
        let away = format!("in.ended-{}", self.closings + 1);
        match self.close_as(log, &away, &|_| false) {
            Ok(late) => late,
            Err(e) => {
                log.line(&HangarLine::Warning {
                    message: format!("could not rename in/ away: {e}"),
                });
                Vec::new()
            }
        }
    }

    /// [`Inbox::close`] renaming `in/` to `away` (a name in the control folder), and leaving the
    /// commands `skip` names where they are (unread, unanswered). An error when the rename
    /// failed.
    pub fn close_as(
        &mut self,
        log: &dyn Journal,
        away: &str,
        skip: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Incoming>, String> {
        if !self.open {
            return Ok(Vec::new());
        }
        self.open = false;
        if !self.still_there(IN, log) {
            return Ok(Vec::new());
        }
        self.closings += 1;
        self.root.rename(IN, away).map_err(|e| e.to_string())?;
        // What was renamed must be the folder held (it could have been swapped in between).
        if !self.still_there_as(away, log) {
            return Ok(Vec::new());
        }
        Ok(self.take_here(log, skip))
    }

    /// Ends the turn's mailbox: [`Inbox::close`], answering every command that waited `ended`;
    /// the sequence numbers of the messages among them (handed back), in order.
    pub fn end(&mut self, log: &dyn Journal) -> Vec<u64> {
        let late = self.close(log);
        self.answer_all_ended(log, &late)
    }

    /// [`Inbox::end`] through [`Inbox::close_as`]: what the control plane does in the driver's
    /// place (a driver that stopped, a remote run's mirror).
    pub fn end_as(
        &mut self,
        log: &dyn Journal,
        away: &str,
        skip: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<u64>, String> {
        let late = self.close_as(log, away, skip)?;
        Ok(self.answer_all_ended(log, &late))
    }

    fn answer_all_ended(&mut self, log: &dyn Journal, late: &[Incoming]) -> Vec<u64> {
        late.iter()
            .filter_map(|c| self.answer_ended(log, c))
            .collect()
    }

    /// [`Inbox::still_there`] for `in/` under the name it was renamed to.
    fn still_there_as(&mut self, away: &str, log: &dyn Journal) -> bool {
        match self.inbox.moved_from(&self.root, away) {
            None => true,
            Some(_) => {
                let message = format!(
                    "the control folder {}: in/ was replaced while the turn's end renamed it; the driver takes commands only in the folder it opened, so the turn is stopped",
                    self.ctl.root().display()
                );
                log.line(&HangarLine::Error {
                    message: message.clone(),
                });
                self.broken = Some(message);
                false
            }
        }
    }

    /// Opens a fresh `in/` after a late message continued the turn (made here, opened without
    /// following a link, as at the start).
    pub fn reopen(&mut self, log: &dyn Journal) {
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
                log.line(&HangarLine::Warning {
                    message: format!("could not open a fresh in/: {what}"),
                });
            }
        }
    }

    /// Writes the signed ack for a command, in the `acks/` opened at the start; none once
    /// `acks/` is not that folder any more ([`Inbox::broken`]).
    pub fn ack(
        &mut self,
        log: &dyn Journal,
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
            log.diag(&format!("cannot write the ack for {name}: {e}"));
        }
    }

    /// Answers a command that was carried out: a `hangar.command` line and the signed `done`.
    pub fn answer_done(&mut self, log: &dyn Journal, name: &str, cmd: &Command, kind: Kind) {
        log.line(&HangarLine::Command {
            name: name.to_owned(),
            seq: cmd.seq,
            kind: kind.to_string(),
            outcome: CommandOutcome::Done,
            person: cmd.sender().map(str::to_owned),
            text: kind
                .is_message()
                .then(|| cmd.text().map(str::to_owned))
                .flatten(),
        });
        self.ack(log, name, Some(cmd), AckStatus::Done, "");
    }

    /// Answers a command `ended` ("the turn has ended", S19): a `hangar.command` line and the
    /// signed ack. A message's sequence number comes back: it is handed back, for the next
    /// turn to start with.
    pub fn answer_ended(&mut self, log: &dyn Journal, c: &Incoming) -> Option<u64> {
        let cmd = &c.verified.command;
        log.line(&HangarLine::Command {
            name: c.name.clone(),
            seq: cmd.seq,
            kind: c.verified.kind.to_string(),
            outcome: CommandOutcome::Ended,
            person: cmd.sender().map(str::to_owned),
            text: c
                .verified
                .kind
                .is_message()
                .then(|| cmd.text().map(str::to_owned))
                .flatten(),
        });
        self.ack(log, &c.name, Some(cmd), AckStatus::Ended, ENDED);
        c.verified.kind.is_message().then_some(cmd.seq)
    }

    /// Refuses a command that failed its checks: signed ack and a `hangar.refused` line;
    /// nothing is executed. The line names no sender: an unchecked command's `by` proves
    /// nothing.
    pub fn refuse(
        &mut self,
        log: &dyn Journal,
        name: &str,
        cmd: Option<&Command>,
        refusal: &Refusal,
    ) {
        self.refusal(log, name, cmd, refusal, None);
    }

    /// Refuses a command that passed its checks but could not be carried out (an answer to a
    /// request already answered, a harness that would not take it); the line names its sender.
    pub fn refuse_checked(
        &mut self,
        log: &dyn Journal,
        name: &str,
        cmd: &Command,
        refusal: &Refusal,
    ) {
        self.refusal(log, name, Some(cmd), refusal, cmd.sender());
    }

    fn refusal(
        &mut self,
        log: &dyn Journal,
        name: &str,
        cmd: Option<&Command>,
        refusal: &Refusal,
        person: Option<&str>,
    ) {
        let reason = refusal.to_string();
        log.line(&HangarLine::Refused {
            name: name.to_owned(),
            seq: cmd.map(|c| c.seq),
            kind: cmd.map(|c| c.kind.clone()),
            code: refusal.code().to_owned(),
            reason: reason.clone(),
            person: person.map(str::to_owned),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::outbox::Mailbox;

    /// A control folder made by the client has a bell: the driver's inbox listens to it and
    /// takes no inotify instance (128 per user: issue 22), and a command landed rings it.
    #[test]
    fn a_landed_command_rings_the_bell_without_inotify() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create_keeping_key(home.path(), "run-1").unwrap();
        let verifier = Verifier::new("run-1", m.key().clone());
        let inbox = Inbox::with_doorbell(m.ctl().clone(), verifier).unwrap();
        assert!(inbox.has_doorbell());
        assert!(inbox.inotify.is_none(), "no inotify instance taken");
        let (tx, rx) = std::sync::mpsc::channel();
        inbox.start_doorbell(move || tx.send(()).is_ok());
        let sent = m
            .send(Kind::Steer, hangar_protocol::command::body::text("hi"))
            .unwrap();
        assert!(matches!(sent, crate::Delivery::Landed(_)));
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("the bell rang");
        // Without a bell (a folder made elsewhere), inotify on `in/` is the doorbell.
        std::fs::remove_file(m.ctl().bell()).unwrap();
        let verifier = Verifier::new("run-1", m.key().clone());
        let inbox = Inbox::with_doorbell(m.ctl().clone(), verifier).unwrap();
        assert!(inbox.bell.is_none());
        assert!(inbox.inotify.is_some());
    }

    /// Closing `in/` in a stopped driver's place (the orphan sweeper, the remote mirror) opens it
    /// as the driver does: an `in/` the agent replaced with a link to a folder of its choosing is
    /// refused, and nothing there is renamed, read or answered.
    #[test]
    fn closing_in_the_drivers_place_refuses_an_in_folder_swapped_for_a_link() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create_keeping_key(home.path(), "run-1").unwrap();
        let elsewhere = home.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("0000000001-aaaaaaaa.cmd"), b"{}").unwrap();
        let inbox = m.ctl().inbox();
        std::fs::remove_dir(&inbox).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &inbox).unwrap();

        let verifier = Verifier::new("run-1", m.key().clone());
        let err = Inbox::open(m.ctl().clone(), verifier)
            .map(|_| ())
            .unwrap_err();
        assert!(err.contains("the agent may have replaced it"), "{err}");
        // The link and what it points at are as they were; no ack was written anywhere.
        assert!(
            std::fs::symlink_metadata(&inbox)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let names: Vec<_> = std::fs::read_dir(&elsewhere)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("0000000001-aaaaaaaa.cmd")]
        );
        assert_eq!(std::fs::read_dir(m.ctl().acks()).unwrap().count(), 0);
    }

    /// The same folders, real: the sweeper renames `in/` away and answers what waited there
    /// `ended` (so the refusal above is the link's doing).
    #[test]
    fn closing_in_the_drivers_place_renames_a_real_in_folder_away() {
        let home = tempfile::tempdir().unwrap();
        let m = Mailbox::create_keeping_key(home.path(), "run-1").unwrap();
        let verifier = Verifier::new("run-1", m.key().clone());
        let mut inbox = Inbox::open(m.ctl().clone(), verifier).unwrap();
        let answered = inbox.end_as(&(), "in.ended-1", &|_| false).unwrap();
        assert!(answered.is_empty());
        assert!(!m.ctl().inbox().exists());
        assert!(m.ctl().root().join("in.ended-1").is_dir());
    }
}
