//! The docker images the kubernetes and e2b tests' pods run (their pods cannot see this
//! machine's files, so the harness CLI comes from the image): `$HANGAR_TEST_CLAUDE_IMAGE` /
//! `$HANGAR_TEST_CODEX_IMAGE` when `scripts/test` built them, else built here by
//! `scripts/build-image-claude` / `scripts/build-image-codex` (cached by dockerd).

use std::path::PathBuf;
use std::process::Command;

use crate::error::TestkitError;

/// The image with the pinned Claude Code in it.
pub fn claude_image() -> Result<String, TestkitError> {
    image(
        "HANGAR_TEST_CLAUDE_IMAGE",
        "build-image-claude",
        "HANGAR_CLAUDE_BIN",
        crate::claude_bin()?,
    )
}

/// The image with the pinned Codex (its native package) in it.
pub fn codex_image() -> Result<String, TestkitError> {
    image(
        "HANGAR_TEST_CODEX_IMAGE",
        "build-image-codex",
        "HANGAR_CODEX_BIN",
        crate::codex_bin()?,
    )
}

fn image(var: &str, script: &str, bin_var: &str, bin: PathBuf) -> Result<String, TestkitError> {
    if let Ok(i) = std::env::var(var) {
        return Ok(i);
    }
    let path = crate::workspace_root().join("scripts").join(script);
    let out = Command::new(&path)
        .env(bin_var, bin)
        .output()
        .map_err(|source| TestkitError::Io {
            context: format!("run scripts/{script}"),
            source,
        })?;
    if !out.status.success() {
        return Err(TestkitError::Io {
            context: format!("scripts/{script}"),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
