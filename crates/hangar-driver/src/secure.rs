//! The driver's own protection, done before it learns the run key (S13, S15).

use std::io;
use std::path::Path;

use hangar_protocol::RunKey;

/// Makes this process non-dumpable: no core dumps, and `/proc/<pid>/mem`, `environ`, `maps` and
/// ptrace become root-only, so an agent running as the same uid cannot read the key out of memory.
pub fn make_non_dumpable() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_DUMPABLE takes plain integer arguments and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads the key file and deletes it. The file must be gone before the harness starts: an error
/// removing it stops the turn.
pub fn take_key(path: &Path) -> Result<RunKey, String> {
    let key = RunKey::read_file(path).map_err(|e| {
        format!(
            "cannot read the run key at {}: {e} (the client writes it before it starts the driver)",
            path.display()
        )
    })?;
    std::fs::remove_file(path)
        .map_err(|e| format!("cannot delete the run key at {}: {e}", path.display()))?;
    if path.exists() {
        return Err(format!(
            "the run key at {} is still there after deleting it",
            path.display()
        ));
    }
    Ok(key)
}
