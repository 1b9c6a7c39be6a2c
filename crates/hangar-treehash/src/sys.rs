//! Thin wrappers over the few system calls the stat walk needs.

use crate::index::IndexStat;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// `lstat` of each of `names` relative to the open directory `fd`, except those whose slot in
/// `out` is already filled.
pub(crate) fn lstat_names_at(fd: RawFd, names: &[CString], out: &mut [Option<Option<StatKey>>]) {
    for (name, o) in names.iter().zip(out.iter_mut()) {
        if o.is_none() {
            *o = Some(fstatat(fd, name));
        }
    }
}

pub(crate) fn fstatat(fd: libc::c_int, name: &CStr) -> Option<StatKey> {
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

/// `fstat` of an open descriptor.
pub(crate) fn fstat(fd: RawFd) -> Option<StatKey> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` is a descriptor the caller keeps open and `st` has room for a stat.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some(StatKey::from_libc(&st))
}

/// How many [`DirFd`]s this process holds, and how many it may (half the soft
/// `RLIMIT_NOFILE`, at most 65,536): they share the process's descriptor table with everything
/// else, so they take only a part of it.
static DIR_FDS: AtomicUsize = AtomicUsize::new(0);

fn dir_fd_budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let mut lim = std::mem::MaybeUninit::<libc::rlimit>::uninit();
        // SAFETY: getrlimit fills `lim` when it returns 0.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, lim.as_mut_ptr()) };
        if rc != 0 {
            return 0;
        }
        // SAFETY: filled above.
        let cur = unsafe { lim.assume_init() }.rlim_cur;
        usize::try_from(cur / 2).map_or(65_536, |n| n.min(65_536))
    })
}

/// A directory held open (`O_PATH`) between steps, so that its entries are stat'ed relative to it
/// without resolving its path again. Counted against a per-process budget.
#[derive(Debug)]
pub(crate) struct DirFd(OwnedFd);

impl DirFd {
    /// Opens directory `name` in the open directory `dir` (or `path` if `dir` is `None`) without
    /// following a symlink; `None` if it is not a directory, cannot be opened, or the budget is
    /// spent.
    pub(crate) fn open(dir: Option<RawFd>, name: &CStr) -> Option<DirFd> {
        if DIR_FDS.fetch_add(1, Ordering::Relaxed) >= dir_fd_budget() {
            DIR_FDS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: `name` is NUL-terminated; `dir` (if any) is an open directory.
        let fd = unsafe { libc::openat(dir.unwrap_or(libc::AT_FDCWD), name.as_ptr(), flags) };
        if fd < 0 {
            DIR_FDS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Some(DirFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Drop for DirFd {
    fn drop(&mut self) {
        DIR_FDS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Tells whether a mount point inside the work tree came, went or changed since the last call:
/// a mount over a directory changes what its path leads to without changing any directory's
/// stat. `poll` on `/proc/self/mountinfo` reports `POLLPRI` after any mount or unmount in the
/// namespace (on a busy host, often: containers starting); only then is the table read and the
/// mounts below the top compared.
#[derive(Debug)]
pub(crate) struct Mounts {
    file: std::fs::File,
    /// `<top>/`, as the mount table spells paths.
    prefix: Vec<u8>,
    /// The mounts below the top: (mount id, mount point), sorted.
    inside: Vec<(u64, Vec<u8>)>,
}

impl Mounts {
    /// `None` if the mount table cannot be read (then nothing may rely on it).
    pub(crate) fn open(top: &Path) -> Option<Mounts> {
        let file = std::fs::File::open("/proc/self/mountinfo").ok()?;
        let mut prefix = top.as_os_str().as_bytes().to_vec();
        if prefix.last() != Some(&b'/') {
            prefix.push(b'/');
        }
        let mut m = Mounts {
            file,
            prefix,
            inside: Vec::new(),
        };
        m.inside = m.read()?;
        Some(m)
    }

    fn read(&mut self) -> Option<Vec<(u64, Vec<u8>)>> {
        use std::io::{Read, Seek};
        let mut text = Vec::new();
        self.file.rewind().ok()?;
        self.file.read_to_end(&mut text).ok()?;
        let mut inside = Vec::new();
        for line in text.split(|&b| b == b'\n') {
            let mut fields = line.split(|&b| b == b' ');
            let (Some(id), Some(_), Some(_), Some(_), Some(point)) = (
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
            ) else {
                continue;
            };
            let point = unescape(point);
            if point.starts_with(&self.prefix) {
                let id = std::str::from_utf8(id).ok()?.parse().ok()?;
                inside.push((id, point));
            }
        }
        inside.sort();
        Some(inside)
    }

    /// True if the mounts inside the top changed since the last call (or since `open`), or if
    /// that cannot be told.
    pub(crate) fn changed(&mut self) -> bool {
        let mut p = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no waiting.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        if rc == 0 {
            return false;
        }
        if rc < 0 || p.revents & libc::POLLNVAL != 0 {
            return true;
        }
        match self.read() {
            Some(now) if now == self.inside => false,
            Some(now) => {
                self.inside = now;
                true
            }
            None => true,
        }
    }
}

/// A mount table path with its octal escapes (`\040` for a space, ...) undone.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let code = s
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (s[i], code) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
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

/// Whether `dir` is on a file system whose timestamps this kernel's clock makes (ext4, xfs,
/// btrfs, tmpfs, overlayfs, f2fs): not a network or FUSE file system, whose timestamps may come
/// from another clock. Unknown (the call fails) is not local.
pub(crate) fn local_fs(dir: &Path) -> bool {
    const LOCAL: [i64; 6] = [
        0xEF53,      // ext2/3/4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0x794C_7630, // overlayfs
        0xF2F5_2010, // f2fs
    ];
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into a zeroed struct of its own type; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast, clippy::cast_lossless)]
    let kind = st.f_type as i64;
    LOCAL.contains(&kind)
}

/// Nanoseconds since the epoch, now.
pub(crate) fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape(br"/w/a\040b\011c\134d"), b"/w/a b\tc\\d");
        assert_eq!(unescape(br"/w/x\04"), br"/w/x\04");
        assert_eq!(unescape(br"/w/\999"), br"/w/\999");
    }

    #[test]
    fn the_mount_table_is_read_and_quiet_when_unchanged() {
        let Some(mut m) = Mounts::open(Path::new("/")) else {
            return; // no /proc here
        };
        // Every mount but `/` itself is below `/`.
        assert!(!m.inside.is_empty());
        assert!(m.inside.iter().all(|(_, p)| p.starts_with(b"/")));
        let before = m.inside.clone();
        if !m.changed() {
            assert_eq!(m.inside, before);
        }
    }
}
