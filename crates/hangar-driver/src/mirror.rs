//! `hangar-driver --mirror CTL TMUX_SOCKET SESSION`: the sandbox's end of a remote run's mirror
//! stream (the other end is hangar-control's `runs/remote.rs`).
//!
//! A pod's control folder is not on the control plane's machine, which keeps a mirror of it. It
//! used to read the folder with one exec every 150 ms per live run, idle or not. Now one
//! long-lived exec runs this program for the turn: it reads the folder when it changes (inotify;
//! a rescan every 100 ms where the user has no inotify instance left) and writes what is new to
//! stdout, and lands the commands it reads on stdin. An idle run costs no exec and no byte but a
//! heartbeat.
//!
//! The wire (every line ends in `\n`):
//! - in, first: `S <offset> [<ack name>...]`: the mirror's run log length and the acks it holds.
//! - in: `P <name> <len>` and `len` bytes: land command `name` in `in/` (staged, then renamed; a
//!   marker in `pushed/` makes a command land at most once however often it is sent), answered
//!   `R <name> <code>`: 0 landed, 5 landed before, 3 `in/` is gone (the turn is ending), 1 could
//!   not. Pushes are done before the folder is read again, so a state that shows `in/` closed
//!   comes after the answers to every push done before it closed. `Q` (or stdin's end): stop.
//! - out: a state, whenever something in it changed, in the words of the pull script the
//!   control plane runs where no stream can be kept: `A1`/`A0` (the driver is alive), `L <n>`
//!   and n bytes of the log, `K <n> <name>` and an ack's n bytes (one the mirror lacks or that
//!   changed), `P` (the turn's pack is there), `I` (`in/` is open) or `C <n>` (renamed to
//!   `in.ended-<n>`), `E`. `X` alone: no control folder. `B`: a heartbeat after 10 s of silence.
//!
//! The driver is alive while it holds a write lock on `driver.lock` (an `fcntl` record lock it
//! takes at its start, [`hold_lock`]: the kernel drops it when the process ends, however it
//! ends, so a state read after that is final); until the driver has taken it, its tmux session
//! says. The program ends once the driver has ended and everything it wrote has been sent.
//!
//! The sandbox is the agent's (no uid split where a mirror runs): nothing read here is trusted
//! on the other end, which checks every name, size and ack signature. std and libc only, as the
//! rest of the driver.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hangar_mailbox::CommandName;

/// The driver's first argument that makes it the mirror's end instead.
pub(crate) const MIRROR: &str = "--mirror";
/// The file whose lock the driver holds while it lives.
pub(crate) const LOCK: &str = "driver.lock";
/// At most this much of the run log per state (the other end refuses more).
const LOG_MAX: u64 = 4 << 20;
/// The most of an ack sent (an ack is a few hundred bytes).
const ACK_MAX: u64 = 64 << 10;
/// The largest command taken from stdin.
const COMMAND_MAX: usize = 16 << 20;
/// A heartbeat after this long without a state.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// How often the folder is read again without inotify, and the tmux session looked at before
/// the driver holds its lock.
const RESCAN: Duration = Duration::from_millis(100);
const TMUX_EVERY: Duration = Duration::from_millis(250);

/// Takes the driver's life lock on `<ctl>/driver.lock`, held until the process ends (the file is
/// left open on purpose). A driver that cannot take it still runs: the mirror then goes by the
/// tmux session, as before there was a lock.
pub(crate) fn hold_lock(ctl: &Path) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(ctl.join(LOCK));
    match file {
        Ok(f) => {
            if let Err(e) = set_lock(&f, libc::F_WRLCK as libc::c_short, libc::F_SETLK) {
                crate::diag(&format!("cannot lock {LOCK}: {e}"));
            }
            // Held to the process's end: closing any descriptor of the file would drop it.
            std::mem::forget(f);
        }
        Err(e) => crate::diag(&format!("cannot make {LOCK}: {e}")),
    }
}

/// `fcntl(cmd)` with a lock of `kind` over the whole file; the lock found, for `F_GETLK`.
fn set_lock(f: &File, kind: libc::c_short, cmd: libc::c_int) -> io::Result<libc::c_short> {
    // SAFETY: an all-zero flock is a valid value of the struct.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    loop {
        // SAFETY: the descriptor is open; fl is a valid flock the call may write.
        if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl) } == 0 {
            return Ok(fl.l_type);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One message read from stdin.
enum Incoming {
    Push(String, Vec<u8>),
    Stop,
}

/// `hangar-driver --mirror CTL TMUX_SOCKET SESSION`.
pub(crate) fn run(args: Vec<OsString>) -> i32 {
    let [ctl, socket, session] = args.as_slice() else {
        crate::diag("--mirror takes the control folder, the tmux socket and the session");
        return 2;
    };
    let ctl = PathBuf::from(ctl);
    let mut first = String::new();
    // Stdin's buffer is the process's: what this read took past the line is there for the
    // reading thread's own lock.
    if io::stdin().lock().read_line(&mut first).is_err() {
        return 2;
    }
    let mut words = first.split_whitespace();
    let (Some("S"), Some(Ok(offset))) = (words.next(), words.next().map(str::parse::<u64>)) else {
        crate::diag("the mirror's first line is not `S <offset> [acks]`");
        return 2;
    };
    let known: HashSet<String> = words.map(str::to_owned).collect();
    let out = io::stdout();
    if !ctl.is_dir() {
        let _ = out.lock().write_all(b"X\n");
        return 0;
    }
    let wake = match Wake::new() {
        Ok(w) => Arc::new(w),
        Err(e) => {
            crate::diag(&format!("cannot make a pipe: {e}"));
            return 2;
        }
    };
    let (tx, rx) = mpsc::channel();
    {
        let wake = Arc::clone(&wake);
        std::thread::spawn(move || read_input(&mut io::stdin().lock(), &tx, &wake));
    }
    let dead = Arc::new(AtomicBool::new(false));
    {
        let (wake, dead, ctl) = (Arc::clone(&wake), Arc::clone(&dead), ctl.clone());
        let (socket, session) = (
            PathBuf::from(socket),
            session.to_string_lossy().into_owned(),
        );
        std::thread::spawn(move || {
            watch_driver(&ctl, &socket, &session);
            dead.store(true, Ordering::SeqCst);
            wake.ring();
        });
    }
    let mut state = State {
        offset,
        known,
        sent: HashMap::new(),
        last: None,
    };
    let watch = Watch::new(&ctl);
    let mut last_write = Instant::now();
    loop {
        let mut buf = Vec::new();
        while let Ok(m) = rx.try_recv() {
            match m {
                Incoming::Push(name, bytes) => {
                    let code = push(&ctl, &name, &bytes);
                    buf.extend_from_slice(format!("R {name} {code}\n").as_bytes());
                }
                Incoming::Stop => return 0,
            }
        }
        // Whether the driver had ended is read before the folder: then what is read is final.
        let ended = dead.load(Ordering::SeqCst);
        let (frame, more) = state.read(&ctl, !ended);
        if let Some(f) = frame {
            buf.extend_from_slice(&f);
        } else if buf.is_empty() && last_write.elapsed() >= HEARTBEAT {
            buf.extend_from_slice(b"B\n");
        }
        if !buf.is_empty() {
            let mut o = out.lock();
            if o.write_all(&buf).and_then(|()| o.flush()).is_err() {
                return 0;
            }
            last_write = Instant::now();
        }
        if more {
            continue;
        }
        if ended {
            return 0;
        }
        let until_beat = HEARTBEAT.saturating_sub(last_write.elapsed());
        wait(&watch, &wake, until_beat.max(Duration::from_millis(1)));
    }
}

/// Reads `P` and `Q` messages from stdin until it ends, handing them on.
fn read_input(input: &mut io::StdinLock<'_>, tx: &mpsc::Sender<Incoming>, wake: &Wake) {
    let mut line = String::new();
    loop {
        line.clear();
        let m = match input.read_line(&mut line) {
            Ok(0) | Err(_) => Incoming::Stop,
            Ok(_) => {
                let mut w = line.split_whitespace();
                match (w.next(), w.next(), w.next().map(str::parse::<usize>)) {
                    (Some("P"), Some(name), Some(Ok(len))) if len <= COMMAND_MAX => {
                        let mut bytes = vec![0; len];
                        if input.read_exact(&mut bytes).is_err() {
                            Incoming::Stop
                        } else {
                            Incoming::Push(name.to_owned(), bytes)
                        }
                    }
                    _ => Incoming::Stop,
                }
            }
        };
        let stop = matches!(m, Incoming::Stop);
        if tx.send(m).is_err() {
            return;
        }
        wake.ring();
        if stop {
            return;
        }
    }
}

/// Lands one command in `in/` (as the pull script's push does); its answer's code.
fn push(ctl: &Path, name: &str, bytes: &[u8]) -> u8 {
    if CommandName::parse(name).is_none() {
        return 1;
    }
    let staged = ctl.join("staging").join(name);
    let marker = ctl.join("pushed").join(name);
    let code = if marker.symlink_metadata().is_ok() {
        5
    } else {
        let tmp = ctl.join("staging").join(format!(".{name}"));
        let wrote = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(bytes))
            .and_then(|()| std::fs::rename(&tmp, &staged))
            .and_then(|()| std::fs::hard_link(&staged, &marker));
        if wrote.is_err() {
            return 1;
        }
        0
    };
    if staged.symlink_metadata().is_ok()
        && std::fs::rename(&staged, ctl.join("in").join(name)).is_err()
    {
        return 3;
    }
    code
}

/// What has been sent of the folder.
struct State {
    /// The run log's bytes sent.
    offset: u64,
    /// Acks the mirror had at the start: never sent.
    known: HashSet<String>,
    /// Acks sent, with the file they were read from (inode, size, modification time): an ack
    /// replaced since (the driver's own over one the agent planted) is sent again.
    sent: HashMap<String, (u64, u64, i64, i64)>,
    /// The last state's alive, pack and `in/` parts.
    last: Option<(bool, bool, Option<String>)>,
}

impl State {
    /// The folder's state if anything in it changed since the last, and whether more of the log
    /// waits (it was cut at [`LOG_MAX`]).
    fn read(&mut self, ctl: &Path, alive: bool) -> (Option<Vec<u8>>, bool) {
        let mut out = Vec::new();
        out.extend_from_slice(if alive { b"A1\n" } else { b"A0\n" });
        let log = self.log(ctl);
        out.extend_from_slice(format!("L {}\n", log.len()).as_bytes());
        out.extend_from_slice(&log);
        self.offset += log.len() as u64;
        let more = log.len() as u64 >= LOG_MAX;
        let mut changed = !log.is_empty();
        for (name, bytes) in self.acks(ctl) {
            out.extend_from_slice(format!("K {} {name}\n", bytes.len()).as_bytes());
            out.extend_from_slice(&bytes);
            changed = true;
        }
        let pack = ["trees.pack", "trees.idx"]
            .iter()
            .all(|n| ctl.join(n).symlink_metadata().is_ok_and(|m| m.is_file()));
        if pack {
            out.extend_from_slice(b"P\n");
        }
        let closed = closed(ctl);
        match &closed {
            None => out.extend_from_slice(b"I\n"),
            Some(n) => out.extend_from_slice(format!("C {n}\n").as_bytes()),
        }
        out.extend_from_slice(b"E\n");
        let now = (alive, pack, closed);
        if self.last.as_ref() != Some(&now) {
            changed = true;
        }
        self.last = Some(now);
        (changed.then_some(out), more)
    }

    /// The run log from the offset on, at most [`LOG_MAX`]; nothing but a regular file is read
    /// (a FIFO there would hold the mirror).
    fn log(&self, ctl: &Path) -> Vec<u8> {
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(ctl.join("run.log"))
        else {
            return Vec::new();
        };
        let Ok(meta) = f.metadata() else {
            return Vec::new();
        };
        if !meta.is_file() || meta.len() <= self.offset {
            return Vec::new();
        }
        let n = (meta.len() - self.offset).min(LOG_MAX);
        let mut buf = vec![0; n as usize];
        match f.read_exact_at(&mut buf, self.offset) {
            Ok(()) => buf,
            Err(_) => Vec::new(),
        }
    }

    /// The acks not sent yet (or changed since), sorted by name.
    fn acks(&mut self, ctl: &Path) -> Vec<(String, Vec<u8>)> {
        let dir = ctl.join("acks");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = rd
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| CommandName::parse_ack(n).is_some() && !self.known.contains(n))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            // Each wake looks at every ack: a stat, not an open, for those already sent.
            let Ok(m) = dir.join(&name).symlink_metadata() else {
                continue;
            };
            if self.sent.get(&name) == Some(&(m.ino(), m.len(), m.mtime(), m.mtime_nsec())) {
                continue;
            }
            let Ok(f) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(dir.join(&name))
            else {
                continue;
            };
            let Ok(m) = f.metadata() else { continue };
            let id = (m.ino(), m.len(), m.mtime(), m.mtime_nsec());
            if !m.is_file() || self.sent.get(&name) == Some(&id) {
                continue;
            }
            let mut bytes = Vec::new();
            if f.take(ACK_MAX).read_to_end(&mut bytes).is_err() {
                continue;
            }
            self.sent.insert(name.clone(), id);
            out.push((name, bytes));
        }
        out
    }
}

/// `None` while `in/` is there; else the highest `n` of the `in.ended-<n>` folders (empty when
/// there is none).
fn closed(ctl: &Path) -> Option<String> {
    if ctl.join("in").is_dir() {
        return None;
    }
    let highest = std::fs::read_dir(ctl)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name();
                    let n = name.as_bytes().strip_prefix(b"in.ended-")?;
                    std::str::from_utf8(n).ok()?.parse::<u64>().ok()
                })
                .max()
        })
        .unwrap_or(None);
    Some(highest.map(|n| n.to_string()).unwrap_or_default())
}

/// Returns when the driver has ended: it held its lock and let it go, or (before it holds it)
/// its tmux session is gone.
fn watch_driver(ctl: &Path, socket: &Path, session: &str) {
    let lock = ctl.join(LOCK);
    let mut last_tmux: Option<Instant> = None;
    loop {
        if let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&lock)
            && set_lock(&f, libc::F_RDLCK as libc::c_short, libc::F_GETLK)
                .is_ok_and(|found| found != libc::F_UNLCK as libc::c_short)
        {
            // The driver holds it: a read lock is granted once it no longer does.
            if set_lock(&f, libc::F_RDLCK as libc::c_short, libc::F_SETLKW).is_ok() {
                return;
            }
        }
        if last_tmux.is_none_or(|t| t.elapsed() >= TMUX_EVERY) {
            last_tmux = Some(Instant::now());
            let alive = std::process::Command::new("tmux")
                .arg("-S")
                .arg(socket)
                .args(["has-session", "-t", &format!("={session}")])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !alive {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pipe the other threads write a byte to, to wake the main loop.
struct Wake {
    read: OwnedFd,
    write: OwnedFd,
}

impl Wake {
    fn new() -> io::Result<Wake> {
        let mut fds = [0; 2];
        // SAFETY: fds is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just made and are owned by nobody else.
        Ok(unsafe {
            Wake {
                read: OwnedFd::from_raw_fd(fds[0]),
                write: OwnedFd::from_raw_fd(fds[1]),
            }
        })
    }

    fn ring(&self) {
        // SAFETY: the descriptor is open; the buffer is one valid byte.
        let _ = unsafe { libc::write(self.write.as_raw_fd(), b"!".as_ptr().cast(), 1) };
    }
}

/// inotify on the control folder and its `acks/`, when the user has an instance left.
struct Watch {
    fd: Option<OwnedFd>,
}

impl Watch {
    fn new(ctl: &Path) -> Watch {
        // SAFETY: inotify_init1 takes flags only.
        let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if raw < 0 {
            return Watch { fd: None };
        }
        // SAFETY: raw was just made and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mask = libc::IN_MODIFY
            | libc::IN_CLOSE_WRITE
            | libc::IN_CREATE
            | libc::IN_MOVED_TO
            | libc::IN_MOVED_FROM
            | libc::IN_DELETE
            | libc::IN_ATTRIB;
        for dir in [ctl.to_owned(), ctl.join("acks")] {
            let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
                return Watch { fd: None };
            };
            // SAFETY: the descriptor is open; c is a valid NUL-terminated path.
            if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) } < 0 {
                return Watch { fd: None };
            }
        }
        Watch { fd: Some(fd) }
    }
}

/// Sleeps until the folder changes, a thread rings, or `timeout` passes (at most [`RESCAN`]
/// without inotify); drains what woke it.
fn wait(watch: &Watch, wake: &Wake, timeout: Duration) {
    let mut fds = vec![libc::pollfd {
        fd: wake.read.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let timeout = match &watch.fd {
        Some(fd) => {
            fds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            timeout
        }
        None => timeout.min(RESCAN),
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: fds is a valid array of pollfd of the given length.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n <= 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    for p in &fds {
        if p.revents != 0 {
            // SAFETY: the descriptor is open and non-blocking; buf is a valid writable buffer.
            while unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for s in ["in", "acks", "staging", "pushed"] {
            std::fs::create_dir(d.path().join(s)).unwrap();
        }
        d
    }

    #[test]
    fn a_state_is_sent_only_when_something_in_it_changed() {
        let d = folder();
        let mut s = State {
            offset: 0,
            known: HashSet::new(),
            sent: HashMap::new(),
            last: None,
        };
        let (first, more) = s.read(d.path(), true);
        assert_eq!(first.as_deref(), Some(&b"A1\nL 0\nI\nE\n"[..]));
        assert!(!more);
        assert_eq!(s.read(d.path(), true).0, None, "nothing changed");
        std::fs::write(d.path().join("run.log"), b"one\n").unwrap();
        let name = "0001-abcd.cmd.ack";
        std::fs::write(d.path().join("acks").join(name), b"{}").unwrap();
        let f = s.read(d.path(), true).0.unwrap();
        assert_eq!(
            f,
            format!("A1\nL 4\none\nK 2 {name}\n{{}}I\nE\n").into_bytes()
        );
        assert_eq!(s.read(d.path(), true).0, None, "an ack is sent once");
        // An ack replaced (the driver's own over one planted before it) is sent again.
        std::fs::write(d.path().join("x"), b"{\"a\":1}").unwrap();
        std::fs::rename(d.path().join("x"), d.path().join("acks").join(name)).unwrap();
        let f = s.read(d.path(), true).0.unwrap();
        assert!(f.windows(7).any(|w| w == b"{\"a\":1}"), "{f:?}");
        std::fs::rename(d.path().join("in"), d.path().join("in.ended-7")).unwrap();
        assert_eq!(
            s.read(d.path(), false).0.as_deref(),
            Some(&b"A0\nL 0\nC 7\nE\n"[..])
        );
    }

    #[test]
    fn a_command_lands_once_and_not_after_in_closed() {
        let d = folder();
        let name = "0001-abcd.cmd";
        assert_eq!(push(d.path(), name, b"one"), 0);
        assert_eq!(
            std::fs::read(d.path().join("in").join(name)).unwrap(),
            b"one"
        );
        // The driver took it; sent again, it does not land again.
        std::fs::remove_file(d.path().join("in").join(name)).unwrap();
        assert_eq!(push(d.path(), name, b"one"), 5);
        assert!(!d.path().join("in").join(name).exists());
        assert_eq!(push(d.path(), "../x", b"two"), 1, "not a command's name");
        std::fs::rename(d.path().join("in"), d.path().join("in.ended-1")).unwrap();
        assert_eq!(push(d.path(), "0002-abcd.cmd", b"three"), 3);
    }

    /// The mirror goes by the driver's lock, not its tmux session, once the driver holds it
    /// (here no tmux session is there at all: without the lock the driver would be taken for
    /// ended at once).
    #[test]
    fn the_driver_is_alive_while_it_holds_its_lock() {
        let d = folder();
        let lock = d.path().join(LOCK);
        // Another process holds it (a record lock is the process's own: none of this one's
        // threads would conflict with it). Python's lockf is fcntl's record lock.
        let mut holder = std::process::Command::new("python3")
            .args([
                "-c",
                "import fcntl,sys,time\nf=open(sys.argv[1],'a')\nfcntl.lockf(f,fcntl.LOCK_EX)\nprint('held',flush=True)\ntime.sleep(60)",
            ])
            .arg(&lock)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        io::BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "held\n");
        let (tx, rx) = mpsc::channel();
        let ctl = d.path().to_owned();
        std::thread::spawn(move || {
            watch_driver(&ctl, Path::new("/nonexistent/tmux"), "nobody");
            let _ = tx.send(Instant::now());
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(700)).is_err(),
            "taken for ended while it held its lock"
        );
        holder.kill().unwrap();
        let killed = Instant::now();
        let _ = holder.wait();
        let seen = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(seen.duration_since(killed) < Duration::from_secs(1));
    }
}
