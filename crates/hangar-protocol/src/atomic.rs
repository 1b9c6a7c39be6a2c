//! The one place files are written atomically: temp file in the same folder, fsync, rename.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `bytes` to `dest` through `tmp` (which must be on the same filesystem): the reader of
/// `dest` sees either nothing or the whole file. `mode` is the new file's permission bits.
pub fn write_via(tmp: &Path, dest: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_new(tmp, bytes, mode)?;
    fs::rename(tmp, dest).inspect_err(|_| {
        let _ = fs::remove_file(tmp);
    })
}

/// Creates `path` (it must not exist) with `mode`, writes `bytes` and fsyncs it.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes `bytes` to `dest` atomically through a temp file beside it.
pub fn write_atomic(dest: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dest.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    write_via(&tmp, dest, bytes, mode)
}
