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
    let tmp = temp_beside(dest)?;
    let copied = (|| {
        let mut from = fs::File::open(src)?;
        let mut to = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        io::copy(&mut from, &mut to)?;
        to.sync_all()?;
        fs::rename(&tmp, dest)
    })();
    copied.inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
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
