//! Finding the executables a turn needs.

use std::path::{Path, PathBuf};

use hangar_protocol::env::{HANGAR_CLAUDE_BIN, HANGAR_CODEX_BIN, HANGAR_DRIVER_BIN};

use crate::exit::CliError;

/// The driver: `$HANGAR_DRIVER_BIN`, else `hangar-driver` beside this executable.
pub fn driver() -> Result<PathBuf, CliError> {
    if let Some(p) = hangar_protocol::env::var_os(HANGAR_DRIVER_BIN).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("hangar-driver")));
    match beside {
        Some(p) if p.is_file() => Ok(p),
        _ => Err(CliError::Failed(format!(
            "cannot find hangar-driver beside the hangar executable; build it (scripts/build-driver) or set {HANGAR_DRIVER_BIN}"
        ))),
    }
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
            "cannot find {what}: put `{name}` on PATH or set {var} (scripts/install-tools installs the pinned version)"
        ))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
