//! `hangar doctor` (issue 23, item 7): each check says what it found, and a failure says what
//! to do; the exit status is 1 when a turn cannot run here. Each failure is made for real: a
//! home other users can read, a PATH without bubblewrap, a harness needing a Node.js newer than
//! the one installed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn doctor(home: &Path, path: &std::ffi::OsStr, extra: &[(&str, &Path)]) -> (Output, Vec<Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_hangar"))
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("HANGAR_HOME", home.join("hangar"))
        .env("HANGAR_DRIVER_BIN", common::driver_bin())
        .env("HANGAR_TOWER_HOOK_BIN", common::hook_bin())
        .env("HANGAR_CLAUDE_BIN", hangar_testkit::claude_bin().unwrap())
        .envs(extra.iter().copied())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let checks = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (out, checks)
}

fn check<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    checks
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {checks:?}"))
}

fn path() -> std::ffi::OsString {
    std::env::var_os("PATH").unwrap()
}

#[test]
fn a_machine_that_can_run_turns_passes_and_says_what_it_found() {
    let home = tempfile::tempdir().unwrap();
    let (out, checks) = doctor(home.path(), &path(), &[]);
    assert!(
        out.status.success(),
        "{checks:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["driver", "bubblewrap", "tmux", "claude", "home", "disk"] {
        assert_eq!(check(&checks, name)["status"], "ok", "{name}: {checks:?}");
    }
    assert!(
        check(&checks, "claude")["found"]
            .as_str()
            .unwrap()
            .contains("passed hangar's suite"),
        "{checks:?}"
    );
    // No store yet: said, not made.
    assert_eq!(check(&checks, "database")["status"], "warn");
    assert!(!home.path().join("hangar").exists(), "doctor made the home");
}

#[test]
fn a_home_others_can_read_fails_with_the_chmod_to_run() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path().join("hangar");
    std::fs::create_dir(&h).unwrap();
    std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, checks) = doctor(home.path(), &path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{checks:?}");
    let c = check(&checks, "home");
    assert_eq!(c["status"], "fail");
    assert_eq!(c["fix"], format!("chmod 700 {}", h.display()));
}

#[test]
fn no_bubblewrap_on_path_fails_saying_how_to_install_it() {
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for tool in ["tmux", "node"] {
        let real = which(tool);
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    let (out, checks) = doctor(home.path(), bin.as_os_str(), &[]);
    assert_eq!(out.status.code(), Some(1), "{checks:?}");
    let c = check(&checks, "bubblewrap");
    assert_eq!(c["status"], "fail");
    assert!(
        c["fix"]
            .as_str()
            .unwrap()
            .contains("apt-get install bubblewrap"),
        "{c}"
    );
    assert_eq!(check(&checks, "tmux")["status"], "ok");
}

/// A Codex from an npm package asking for a Node.js newer than the one on PATH.
#[test]
fn a_harness_needing_a_newer_node_fails_naming_the_version() {
    let home = tempfile::tempdir().unwrap();
    let pkg = home.path().join("codex-pkg");
    std::fs::create_dir_all(pkg.join("bin")).unwrap();
    std::fs::write(
        pkg.join("package.json"),
        r#"{"version": "0.169.0", "engines": {"node": ">=999.1.0"}}"#,
    )
    .unwrap();
    let codex = pkg.join("bin/codex.js");
    std::fs::write(&codex, "#!/usr/bin/env node\n").unwrap();
    std::fs::set_permissions(&codex, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, checks) = doctor(home.path(), &path(), &[("HANGAR_CODEX_BIN", &codex)]);
    assert_eq!(out.status.code(), Some(1), "{checks:?}");
    let c = check(&checks, "codex");
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["found"]
            .as_str()
            .unwrap()
            .contains("needs Node.js 999.1.0 or newer"),
        "{c}"
    );
}

fn which(tool: &str) -> std::path::PathBuf {
    std::env::split_paths(&path())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{tool} is not on PATH"))
}
