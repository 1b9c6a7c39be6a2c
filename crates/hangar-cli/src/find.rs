//! Finding the executables a turn needs.
//!
//! The driver and the Tower hook are static executables hangar copies into sandboxes, so they
//! ship as files beside `hangar`, never inside it. An installed hangar keeps them in one fixed
//! folder relative to its own executable: `bin/hangar` finds `lib/hangar/hangar-driver` (the
//! package's `/usr/bin/hangar` and `/usr/lib/hangar/`, the tarball's `bin/` and `lib/hangar/`),
//! and the control plane finds the hook beside the driver. A source checkout's `target/` keeps
//! them side by side, which is looked at first.

use std::path::{Path, PathBuf};

use hangar_protocol::env::{HANGAR_CLAUDE_BIN, HANGAR_CODEX_BIN, HANGAR_DRIVER_BIN};

use crate::exit::CliError;

/// The folder, relative to the folder holding `hangar`, where an installed hangar keeps its
/// driver and Tower hook.
pub const LIB_DIR: &str = "../lib/hangar";

/// The driver: `$HANGAR_DRIVER_BIN`, else `hangar-driver` beside this executable, else in
/// [`LIB_DIR`] from it.
pub fn driver() -> Result<PathBuf, CliError> {
    if let Some(p) = hangar_protocol::env::var_os(HANGAR_DRIVER_BIN).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| {
        CliError::Failed(format!(
            "cannot tell where this hangar is ({e}); set {HANGAR_DRIVER_BIN}"
        ))
    })?;
    let candidates = driver_candidates(&exe);
    candidates.iter().find(|p| is_executable(p)).cloned().ok_or_else(|| {
        let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        CliError::Failed(format!(
            "cannot find hangar-driver (looked at {}). Install the hangar package or its tarball, which put it there, or \
             build the static driver and hook and put them beside hangar: \
             RUSTFLAGS=\"-C target-feature=+crt-static\" cargo install --locked --target x86_64-unknown-linux-gnu --root DIR --path crates/hangar-driver \
             (and the same for crates/hangar-hook); or set {HANGAR_DRIVER_BIN}",
            looked.join(", ")
        ))
    })
}

/// Where the driver may be, for an executable at `exe`, in the order looked at.
fn driver_candidates(exe: &Path) -> Vec<PathBuf> {
    let Some(dir) = exe.parent() else {
        return Vec::new();
    };
    vec![
        dir.join("hangar-driver"),
        lexical_join(dir, LIB_DIR).join("hangar-driver"),
    ]
}

/// `dir` joined with a relative path whose `..` steps are taken here, so the result names a
/// folder even when `dir` is reached through a symbolic link's target.
fn lexical_join(dir: &Path, rel: &str) -> PathBuf {
    let mut out = dir.to_path_buf();
    for part in Path::new(rel).components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Claude Code: `$HANGAR_CLAUDE_BIN`, else `claude` on PATH.
pub fn claude() -> Result<PathBuf, CliError> {
    tool("Claude Code", "claude", HANGAR_CLAUDE_BIN)
}

/// Codex: `$HANGAR_CODEX_BIN`, else `codex` on PATH.
pub fn codex() -> Result<PathBuf, CliError> {
    tool("Codex", "codex", HANGAR_CODEX_BIN)
}

fn tool(what: &str, name: &str, var: &str) -> Result<PathBuf, CliError> {
    if let Some(p) = hangar_protocol::env::var_os(var) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p)).ok_or_else(|| {
        CliError::Failed(format!(
            "cannot find {what}: put `{name}` on PATH or set {var} (`hangar harness list` shows the versions that run turns here; `hangar harness check` checks another)"
        ))
    })
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_hangar_finds_its_driver_in_the_lib_folder_beside_its_bin_folder() {
        assert_eq!(
            driver_candidates(Path::new("/usr/bin/hangar")),
            vec![
                PathBuf::from("/usr/bin/hangar-driver"),
                PathBuf::from("/usr/lib/hangar/hangar-driver")
            ]
        );
        assert_eq!(
            driver_candidates(Path::new("/opt/hangar-1.0/bin/hangar"))[1],
            PathBuf::from("/opt/hangar-1.0/lib/hangar/hangar-driver")
        );
    }
}
