//! The one place files are written atomically: temp file in the same folder, fsync, rename.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Whether a write is fsynced before it becomes visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// fsync before the rename: for state that must survive a machine crash (keys, sequence).
    Synced,
    /// Visible-or-absent only: for commands and acks, which are useless after a machine crash
    /// (the driver dies with it) and sit on the steering hot path.
    Visible,
}

/// Writes `bytes` to `dest` through `tmp` (which must be on the same filesystem): the reader of
/// `dest` sees either nothing or the whole file. `mode` is the new file's permission bits.
pub fn write_via(tmp: &Path, dest: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_via_with(tmp, dest, bytes, mode, Durability::Synced)
}

/// [`write_via`] with an explicit [`Durability`].
pub fn write_via_with(
    tmp: &Path,
    dest: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> io::Result<()> {
    write_new_with(tmp, bytes, mode, durability)?;
    fs::rename(tmp, dest).inspect_err(|_| {
        let _ = fs::remove_file(tmp);
    })
}

/// Creates `path` (it must not exist) with `mode`, writes `bytes` and fsyncs it.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_new_with(path, bytes, mode, Durability::Synced)
}

/// [`write_new`] with an explicit [`Durability`].
pub fn write_new_with(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    match durability {
        Durability::Synced => f.sync_all(),
        Durability::Visible => Ok(()),
    }
}

/// Writes `bytes` to `dest` atomically through a temp file beside it.
pub fn write_atomic(dest: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_via(&temp_beside(dest)?, dest, bytes, mode)
}

/// A new file beside `dest` holding `bytes` (fsynced, `mode`), for the caller to rename or swap
/// into place; its path.
pub fn write_temp(dest: &Path, bytes: &[u8], mode: u32) -> io::Result<std::path::PathBuf> {
    let tmp = temp_beside(dest)?;
    write_new(&tmp, bytes, mode).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })?;
    Ok(tmp)
}

/// Copies `src` to `dest` atomically (a reader of `dest` sees the old file or the whole copy),
/// as `mode`, fsynced.
pub fn copy_atomic(src: &Path, dest: &Path, mode: u32) -> io::Result<()> {
    let mut from = fs::File::open(src)?;
    let mut to = Staged::create(dest, mode)?;
    io::copy(&mut from, &mut to.file)?;
    to.commit()
}

/// A file written piece by piece (a download, a stream) and made visible whole: created beside
/// `dest` under a name no other writer picks, then [`Staged::commit`] fsyncs it and renames it
/// over `dest`. Dropped without a commit, it is removed: a reader of `dest` never sees part of it.
#[derive(Debug)]
pub struct Staged {
    tmp: std::path::PathBuf,
    dest: std::path::PathBuf,
    file: fs::File,
    committed: bool,
}

impl Staged {
    /// A new, empty staged file for `dest`, as `mode`.
    pub fn create(dest: &Path, mode: u32) -> io::Result<Staged> {
        let tmp = temp_beside(dest)?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        Ok(Staged {
            tmp,
            dest: dest.to_owned(),
            file,
            committed: false,
        })
    }

    /// Appends `bytes`.
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)
    }

    /// Makes it `dest`, fsynced.
    pub fn commit(mut self) -> io::Result<()> {
        self.file.sync_all()?;
        fs::rename(&self.tmp, &self.dest)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// A name for a temp file beside `dest` that no other writer picks: `.NAME.<random>.tmp`.
fn temp_beside(dest: &Path) -> io::Result<std::path::PathBuf> {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut rnd = [0u8; 8];
    getrandom::fill(&mut rnd).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(dest.with_file_name(format!(".{name}.{}.tmp", hex::encode(rnd))))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn a_staged_file_is_seen_whole_or_not_at_all_and_leaves_nothing_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("repo.bundle");
        fs::write(&dest, b"old").unwrap();
        let mut s = Staged::create(&dest, 0o600).unwrap();
        s.write_all(b"first piece, ").unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"old", "a part is never at dest");
        drop(s);
        assert_eq!(
            names(dir.path()),
            vec!["repo.bundle"],
            "the dropped temp is gone"
        );
        assert_eq!(fs::read(&dest).unwrap(), b"old");
        let mut s = Staged::create(&dest, 0o600).unwrap();
        s.write_all(b"first piece, ").unwrap();
        s.write_all(b"second piece").unwrap();
        s.commit().unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"first piece, second piece");
        assert_eq!(names(dir.path()), vec!["repo.bundle"]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn two_writers_staging_the_same_file_never_share_a_temp() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x");
        let mut a = Staged::create(&dest, 0o600).unwrap();
        let mut b = Staged::create(&dest, 0o600).unwrap();
        a.write_all(b"aaaa").unwrap();
        b.write_all(b"bb").unwrap();
        a.commit().unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"aaaa");
        b.commit().unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"bb");
    }
}
