//! An inotify watch of the work tree's directories: which names changed since the last step.
//! Anything it cannot vouch for (a full queue, a watch it could not add) makes the next step a
//! full stat walk.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const MASK: u32 = libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_DONT_FOLLOW
    | libc::IN_EXCL_UNLINK
    | libc::IN_ONLYDIR;

/// One change: in directory `dir` (relative, `""` for the top), the entry `name` (empty for
/// the directory itself).
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub dir: Vec<u8>,
    pub name: Vec<u8>,
    /// Something was created, deleted or moved: the directory's listing changed.
    pub listing: bool,
}

#[derive(Debug)]
pub(crate) struct Watch {
    fd: OwnedFd,
    dirs: HashMap<i32, Vec<u8>>,
}

#[derive(Debug, Default)]
pub(crate) struct Drained {
    pub events: Vec<Event>,
    /// Events were lost: only a full walk is safe.
    pub overflow: bool,
    /// Watches the kernel dropped (the directory was deleted): `(wd, dir)`.
    pub dropped: Vec<(i32, Vec<u8>)>,
}

impl Watch {
    pub(crate) fn new() -> Option<Watch> {
        // SAFETY: plain system call; the descriptor is owned below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(Watch {
            fd,
            dirs: HashMap::new(),
        })
    }

    /// Watches directory `abs` (known as `rel`); `None` if the kernel refused (out of watches).
    pub(crate) fn add(&mut self, abs: &Path, rel: &[u8]) -> Option<i32> {
        let c = CString::new(abs.as_os_str().as_bytes()).ok()?;
        // SAFETY: valid descriptor and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), MASK) };
        if wd < 0 {
            return None;
        }
        self.dirs.insert(wd, rel.to_vec());
        Some(wd)
    }

    /// Stops watching `wd` if it still stands for `rel` (the kernel reuses a watch when the same
    /// directory is added again under a new name).
    pub(crate) fn remove(&mut self, wd: i32, rel: &[u8]) {
        if self.dirs.get(&wd).is_some_and(|r| r == rel) {
            self.dirs.remove(&wd);
            // SAFETY: valid descriptor; a stale `wd` only makes the call fail.
            unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
        }
    }

    pub(crate) fn watches(&self) -> usize {
        self.dirs.len()
    }

    /// Everything queued since the last call.
    pub(crate) fn drain(&mut self) -> Drained {
        let mut out = Drained::default();
        let mut buf = vec![0u8; 64 * 1024];
        let header = std::mem::size_of::<libc::inotify_event>();
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock
                {
                    out.overflow = true;
                }
                break;
            }
            let n = n as usize;
            let mut at = 0;
            while at + header <= n {
                // SAFETY: the kernel wrote a whole event header at `at`; read it unaligned.
                let ev: libc::inotify_event = unsafe {
                    std::ptr::read_unaligned(buf.as_ptr().add(at).cast::<libc::inotify_event>())
                };
                let len = ev.len as usize;
                let name_bytes = buf.get(at + header..at + header + len).unwrap_or(&[]);
                let name_end = name_bytes
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(name_bytes.len());
                let name = name_bytes[..name_end].to_vec();
                at += header + len;
                if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                    out.overflow = true;
                    continue;
                }
                let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
                    continue;
                };
                if ev.mask & libc::IN_IGNORED != 0 {
                    // The directory is gone (its parent reports that), or the watch was dropped.
                    self.dirs.remove(&ev.wd);
                    out.dropped.push((ev.wd, dir));
                    continue;
                }
                let listing = ev.mask
                    & (libc::IN_CREATE
                        | libc::IN_DELETE
                        | libc::IN_MOVED_FROM
                        | libc::IN_MOVED_TO
                        | libc::IN_DELETE_SELF
                        | libc::IN_MOVE_SELF)
                    != 0;
                out.events.push(Event { dir, name, listing });
            }
        }
        out
    }
}
