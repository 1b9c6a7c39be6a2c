//! The mailbox's folders held open by descriptor, never followed through a symbolic link.
//!
//! Without the uid split the agent is the driver's own user and can replace `acks/` or `in/` in
//! the control folder with a link to a folder of its own (to read or redirect the signed acks,
//! or feed and withhold commands), or with another folder. So the driver opens each one once,
//! relative to the control folder's descriptor, with `O_NOFOLLOW | O_DIRECTORY` (a link or
//! anything but a folder is refused), does everything inside it relative to that descriptor,
//! and before each use checks that the name in the control folder still is that very folder
//! (`fstatat` without following, same device and inode). A folder that is not what it was is
//! refused: the caller stops the turn saying so.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A folder held open by descriptor (its device and inode, to tell it from a replacement).
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
    dev: u64,
    ino: u64,
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))
}

/// `fstat` of a descriptor.
fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value of this plain C struct; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open for the call; st is a valid, writable stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// What `name` is in the folder, without following a link: `None` when it is not there.
fn lstat_at(dir: &OwnedFd, name: &CStr) -> io::Result<Option<libc::stat>> {
    // SAFETY: as in `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: dir is open; name is NUL-terminated; st is writable.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::NotFound {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(Some(st))
}

/// The kind of file a mode names, in words.
fn kind(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a folder",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFREG => "a file",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        _ => "a device",
    }
}

impl Folder {
    /// The control folder itself, at the path hangar gave the driver (followed as given: its
    /// place is hangar's to choose).
    pub fn open_root(path: &Path) -> io::Result<Folder> {
        let p = cstr(path.as_os_str())?;
        // SAFETY: p is NUL-terminated; the flags ask for a directory descriptor.
        let fd = unsafe {
            libc::open(
                p.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        Folder::from_fd(fd)
    }

    fn from_fd(fd: libc::c_int) -> io::Result<Folder> {
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a descriptor just opened and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let st = fstat(&fd)?;
        Ok(Folder {
            fd,
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// The folder `name` inside this one, refusing a link or anything that is not a folder,
    /// with a message that says what was found.
    pub fn child(&self, name: &str) -> Result<Folder, String> {
        let c = cstr(OsStr::new(name)).map_err(|e| e.to_string())?;
        // SAFETY: the parent is open; c is NUL-terminated; O_NOFOLLOW refuses a link as the
        // last component, O_DIRECTORY anything but a folder.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        Folder::from_fd(fd).map_err(|e| match lstat_at(&self.fd, &c) {
            Ok(Some(st)) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {
                format!("{name}/ is {}, not a folder", kind(st.st_mode))
            }
            Ok(None) => format!("{name}/ is not there"),
            _ => format!("{name}/ cannot be opened: {e}"),
        })
    }

    /// Makes the folder `name` (mode 0700) inside this one and opens it as [`Folder::child`].
    pub fn make_child(&self, name: &str) -> Result<Folder, String> {
        let c = cstr(OsStr::new(name)).map_err(|e| e.to_string())?;
        // SAFETY: the parent is open; c is NUL-terminated.
        if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
            return Err(format!(
                "cannot make {name}/: {}",
                io::Error::last_os_error()
            ));
        }
        self.child(name)
    }

    /// `None` when `name` in `parent` still is this very folder; else what is there instead.
    pub fn moved_from(&self, parent: &Folder, name: &str) -> Option<String> {
        let c = match cstr(OsStr::new(name)) {
            Ok(c) => c,
            Err(e) => return Some(e.to_string()),
        };
        match lstat_at(&parent.fd, &c) {
            Ok(Some(st)) if st.st_dev == self.dev && st.st_ino == self.ino => None,
            Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                Some(format!("{name}/ was replaced by another folder"))
            }
            Ok(Some(st)) => Some(format!("{name}/ was replaced by {}", kind(st.st_mode))),
            Ok(None) => Some(format!("{name}/ was removed or renamed")),
            Err(e) => Some(format!("{name}/ cannot be looked at: {e}")),
        }
    }

    /// Renames `from` in this folder to `to` in this folder (neither is followed).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (f, t) = (cstr(OsStr::new(from))?, cstr(OsStr::new(to))?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: fd is open; both names are NUL-terminated.
        if unsafe { libc::renameat(fd, f.as_ptr(), fd, t.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The names in this folder (not `.` and `..`), read through a descriptor of its own.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        // A fresh open file description of the same folder: fdopendir takes it over and its
        // offset is its own.
        // SAFETY: self.fd is open; "." is NUL-terminated.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a directory descriptor we own; on success the DIR owns it.
        let dir = unsafe { libc::fdopendir(fd) };
        if dir.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so fd is still ours to close.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: dir is a valid DIR until closedir below.
            let ent = unsafe { libc::readdir(dir) };
            if ent.is_null() {
                break;
            }
            // SAFETY: readdir returned a valid dirent whose d_name is NUL-terminated.
            let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
            let b = name.to_bytes();
            if b != b"." && b != b".." {
                out.push(OsStr::from_bytes(b).to_owned());
            }
        }
        // SAFETY: dir came from fdopendir and is closed once.
        unsafe { libc::closedir(dir) };
        Ok(out)
    }

    /// Opens the file `name` here for reading without following a link or blocking on a FIFO.
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let c = cstr(name)?;
        // SAFETY: the folder is open; c is NUL-terminated.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Removes the entry `name` here (a file or a link; never what a link points to).
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        let c = cstr(name)?;
        // SAFETY: the folder is open; c is NUL-terminated.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Writes `bytes` as `name` here through the temporary `tmp` (made anew, never followed),
    /// renamed over `name`: a reader sees all of it or none.
    pub fn write_via(&self, tmp: &str, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        let t = cstr(OsStr::new(tmp))?;
        let _ = self.remove(OsStr::new(tmp));
        // SAFETY: the folder is open; t is NUL-terminated; O_EXCL|O_NOFOLLOW make a new file
        // and never write through something planted under the name.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                t.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        let mut f = unsafe { File::from_raw_fd(fd) };
        let written = f.write_all(bytes).and_then(|()| self.rename(tmp, name));
        if written.is_err() {
            let _ = self.remove(OsStr::new(tmp));
        }
        written
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_link_or_a_file_is_not_taken_for_a_folder() {
        let d = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("acks")).unwrap();
        std::os::unix::fs::symlink(other.path(), d.path().join("in")).unwrap();
        std::fs::write(d.path().join("staging"), b"x").unwrap();
        let root = Folder::open_root(d.path()).unwrap();
        let acks = root.child("acks").unwrap();
        assert_eq!(
            root.child("in").unwrap_err(),
            "in/ is a symbolic link, not a folder"
        );
        assert_eq!(
            root.child("staging").unwrap_err(),
            "staging/ is a file, not a folder"
        );
        assert_eq!(root.child("gone").unwrap_err(), "gone/ is not there");
        assert_eq!(acks.moved_from(&root, "acks"), None);
        std::fs::rename(d.path().join("acks"), d.path().join("acks.old")).unwrap();
        std::os::unix::fs::symlink(other.path(), d.path().join("acks")).unwrap();
        assert_eq!(
            acks.moved_from(&root, "acks").as_deref(),
            Some("acks/ was replaced by a symbolic link")
        );
        std::fs::remove_file(d.path().join("acks")).unwrap();
        std::fs::create_dir(d.path().join("acks")).unwrap();
        assert_eq!(
            acks.moved_from(&root, "acks").as_deref(),
            Some("acks/ was replaced by another folder")
        );
        // Writes go where the descriptor is, whatever the name now holds.
        acks.write_via(".a.tmp", "a.ack", b"ack", 0o600).unwrap();
        assert_eq!(
            std::fs::read(d.path().join("acks.old/a.ack")).unwrap(),
            b"ack"
        );
        assert!(std::fs::read_dir(other.path()).unwrap().next().is_none());
        assert_eq!(acks.names().unwrap(), vec![OsString::from("a.ack")]);
    }
}
