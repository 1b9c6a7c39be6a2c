//! The doorbell: a FIFO in the control folder (`bell`) that the client writes a byte to after
//! each command it lands in `in/`, and the driver blocks reading.
//!
//! inotify on `in/` also wakes the driver, but inotify instances are counted per user (128 by
//! default), so past 128 runs a driver had none and found commands only by rescanning `in/`
//! (issue 22: answers then waited up to 20 ms more, and every such driver woke 50 times a
//! second). A FIFO costs no such instance: every driver whose control folder has one has an
//! instant doorbell, however many runs the machine holds.
//!
//! The bell carries no data and is trusted for nothing: a ring only makes the driver look at
//! `in/`, where every command is verified as before. So an agent that can write the FIFO (no
//! uid split) can only wake its own driver. Both sides refuse anything at `bell` that is not a
//! FIFO (a symbolic link is never followed), so the client never writes into a file the agent
//! put there.
//!
//! The control plane makes the bell with the control folder ([`make`]); a control folder made
//! elsewhere (a remote sandbox's mirror) has none, and its driver keeps inotify and rescans.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Makes the bell (mode 0600): a FIFO at `path`.
pub fn make(path: &Path) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Rings the bell at `path`, if there is one and it is a FIFO: one byte, never blocking. A bell
/// nobody listens to (the driver has not started, or has ended), or one full of rings not yet
/// heard, is not an error: the driver looks at `in/` when it starts and after each ring.
pub fn ring(path: &Path) {
    let Ok(fd) = open(path, libc::O_WRONLY) else {
        return;
    };
    // SAFETY: fd is open for writing; the buffer is one valid byte.
    let _ = unsafe { libc::write(fd.as_raw_fd(), b"!".as_ptr().cast(), 1) };
}

/// Opens the bell at `path` to listen to it (the driver): read and write, so the open never
/// waits for a writer and reads never see an end of file; blocking reads. `None` when there is
/// no FIFO at `path`.
pub fn listen(path: &Path) -> Option<OwnedFd> {
    let fd = open(path, libc::O_RDWR).ok()?;
    // SAFETY: fd is open; clearing O_NONBLOCK leaves the other status flags as they are.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            return None;
        }
    }
    Some(fd)
}

/// Waits for rings on a bell opened by [`listen`] and calls `ring` once per batch of them, until
/// it returns `false` or the read fails.
pub fn serve(fd: &OwnedFd, mut ring: impl FnMut() -> bool) {
    let mut buf = [0u8; 256];
    loop {
        // SAFETY: fd is open; buf is a valid writable buffer of the given length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 || !ring() {
            return;
        }
    }
}

/// Opens `path` with `mode` and O_NONBLOCK, never following a link, and only if it is a FIFO.
fn open(path: &Path, mode: libc::c_int) -> io::Result<OwnedFd> {
    let c = cstr(path)?;
    let flags = mode | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: c is a valid NUL-terminated path.
    let raw = unsafe { libc::open(c.as_ptr(), flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero stat is a valid buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is a valid stat buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Err(io::Error::other("not a FIFO"));
    }
    Ok(fd)
}

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::other("a NUL in the path"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_ring_wakes_the_listener_at_once() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("bell");
        // No bell yet: nothing to ring, nothing to listen to.
        ring(&p);
        assert!(listen(&p).is_none());
        make(&p).unwrap();
        // Nobody listens: ringing neither fails nor blocks.
        ring(&p);
        let fd = listen(&p).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || serve(&fd, || tx.send(Instant::now()).is_ok()));
        let t = Instant::now();
        ring(&p);
        let heard = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(heard.duration_since(t) < Duration::from_millis(500));
    }

    /// What an agent may put at `bell` (a file, a link to a file of hangar's) is never written
    /// to, and is no doorbell.
    #[test]
    fn anything_but_a_fifo_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("bell");
        std::fs::write(&file, "x").unwrap();
        ring(&file);
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
        assert!(listen(&file).is_none());
        let target = d.path().join("hangar-file");
        std::fs::write(&target, "y").unwrap();
        let link = d.path().join("bell2");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        ring(&link);
        assert_eq!(std::fs::read(&target).unwrap(), b"y");
        let fifo = d.path().join("real");
        make(&fifo).unwrap();
        let link2 = d.path().join("bell3");
        std::os::unix::fs::symlink(&fifo, &link2).unwrap();
        assert!(listen(&link2).is_none(), "a link to a FIFO is not followed");
    }
}
