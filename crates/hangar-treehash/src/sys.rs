//! Thin wrappers over the few system calls the stat walk needs.

use crate::index::IndexStat;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What the stat cache compares: a file whose `StatKey` is unchanged (and was not modified
/// within the racy window of when it was read) is not read again.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct StatKey {
    pub mode: u32,
    pub ino: u64,
    pub dev: u64,
    pub size: u64,
    pub mtime: i64,
    pub mtime_ns: i64,
    pub ctime: i64,
    pub ctime_ns: i64,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FileKind {
    File,
    Symlink,
    Dir,
    Other,
}

impl StatKey {
    pub(crate) fn from_meta(m: &std::fs::Metadata) -> StatKey {
        StatKey {
            mode: m.mode(),
            ino: m.ino(),
            dev: m.dev(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_ns: m.mtime_nsec(),
            ctime: m.ctime(),
            ctime_ns: m.ctime_nsec(),
            uid: m.uid(),
            gid: m.gid(),
        }
    }

    #[allow(clippy::unnecessary_cast)]
    fn from_libc(st: &libc::stat) -> StatKey {
        StatKey {
            mode: st.st_mode as u32,
            ino: st.st_ino as u64,
            dev: st.st_dev as u64,
            size: st.st_size as u64,
            mtime: st.st_mtime as i64,
            mtime_ns: st.st_mtime_nsec as i64,
            ctime: st.st_ctime as i64,
            ctime_ns: st.st_ctime_nsec as i64,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
        }
    }

    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn kind(&self) -> FileKind {
        match self.mode & libc::S_IFMT as u32 {
            m if m == libc::S_IFREG as u32 => FileKind::File,
            m if m == libc::S_IFLNK as u32 => FileKind::Symlink,
            m if m == libc::S_IFDIR as u32 => FileKind::Dir,
            _ => FileKind::Other,
        }
    }

    pub(crate) fn owner_exec(&self) -> bool {
        self.mode & 0o100 != 0
    }

    /// The later of mtime and ctime, in nanoseconds since the epoch.
    pub(crate) fn newest_ns(&self) -> i128 {
        let m = i128::from(self.mtime) * 1_000_000_000 + i128::from(self.mtime_ns);
        let c = i128::from(self.ctime) * 1_000_000_000 + i128::from(self.ctime_ns);
        m.max(c)
    }

    /// git's stat comparison (`ce_match_stat_basic`, with nanoseconds, ctime and inode
    /// checks on), on the 32-bit values the index keeps.
    pub(crate) fn matches_index(&self, s: &IndexStat) -> bool {
        s.mtime_s == self.mtime as u32
            && s.mtime_ns == self.mtime_ns as u32
            && s.ctime_s == self.ctime as u32
            && s.ctime_ns == self.ctime_ns as u32
            && s.ino == self.ino as u32
            && s.uid == self.uid
            && s.gid == self.gid
            && s.size == self.size as u32
    }
}

pub(crate) fn lstat(path: &Path) -> std::io::Result<StatKey> {
    std::fs::symlink_metadata(path).map(|m| StatKey::from_meta(&m))
}

/// `lstat` of each of `names` in `dir` (one open of the directory, then `fstatat`s).
/// A name that cannot be stat'ed gets `Some(None)`.
pub(crate) fn lstat_names(dir: &Path, names: &[CString], out: &mut [Option<Option<StatKey>>]) {
    let Ok(cdir) = CString::new(dir.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: `cdir` is a valid NUL-terminated string; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            cdir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        for o in out.iter_mut() {
            *o = Some(None);
        }
        return;
    }
    for (name, o) in names.iter().zip(out.iter_mut()) {
        *o = Some(fstatat(fd, name));
    }
    // SAFETY: `fd` was opened above and is not used after this.
    unsafe { libc::close(fd) };
}

fn fstatat(fd: libc::c_int, name: &CStr) -> Option<StatKey> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` is an open directory, `name` is NUL-terminated and `st` has room for a stat.
    let rc = unsafe {
        libc::fstatat(
            fd,
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some(StatKey::from_libc(&st))
}

/// The names in `dir` (without `.` and `..`), sorted by their bytes.
pub(crate) fn list_dir(dir: &Path) -> std::io::Result<Vec<CString>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if let Ok(c) = CString::new(e.file_name().as_bytes()) {
            names.push(c);
        }
    }
    names.sort_unstable();
    Ok(names)
}

/// Nanoseconds since the epoch, now.
pub(crate) fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}
