//! `hangar rules check`: one JSON object, exit 0 allow, 3 deny. The commands are passed as
//! arguments and only parsed by the rules, never run.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use serde_json::Value;

fn check(args: &[&str], workspace: &std::path::Path) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_hangar"))
        .args(["rules", "check"])
        .args(args)
        .arg("--workspace")
        .arg(workspace)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one line: {text:?}");
    (
        out.status.code().unwrap(),
        serde_json::from_str(&text).unwrap(),
    )
}

#[test]
fn bash_commands() {
    let ws = tempfile::tempdir().unwrap();
    let (code, v) = check(
        &["--tool", "Bash", "--command", "rm -rf ../elsewhere"],
        ws.path(),
    );
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["decision"], "deny");
    assert_eq!(v["rule"], "deny-risky/destroy-outside-workspace");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("outside the workspace")
    );

    let (code, v) = check(
        &["--tool", "Bash", "--command", "cargo test && rm -rf target"],
        ws.path(),
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["decision"], "allow");
    assert!(v["rule"].is_null());

    let (code, v) = check(&["--tool", "Bash", "--command", "$X -rf target"], ws.path());
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["rule"], "deny-risky/computed");
}

#[test]
fn write_paths() {
    let ws = tempfile::tempdir().unwrap();
    let (code, v) = check(&["--tool", "Write", "--path", "/etc/passwd"], ws.path());
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["rule"], "deny-risky/edit-outside-workspace");
    let (code, v) = check(
        &["--tool", "Write", "--path", ".git/hooks/pre-commit"],
        ws.path(),
    );
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["rule"], "deny-risky/edit-git-internals");
    let (code, v) = check(&["--tool", "Write", "--path", "src/main.rs"], ws.path());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["decision"], "allow");
}

#[test]
fn an_environment_rules_file_and_bad_usage() {
    let ws = tempfile::tempdir().unwrap();
    let file = ws.path().join("rules.toml");
    std::fs::write(&file, "disable = [\"signal-processes\"]\n").unwrap();
    let (code, _) = check(&["--tool", "Bash", "--command", "kill 1"], ws.path());
    assert_eq!(code, 3);
    let (code, v) = check(
        &[
            "--tool",
            "Bash",
            "--command",
            "kill 1",
            "--rules",
            file.to_str().unwrap(),
        ],
        ws.path(),
    );
    assert_eq!(code, 0, "{v}");
    let out = Command::new(env!("CARGO_BIN_EXE_hangar"))
        .args(["rules", "check", "--tool", "Bash", "--path", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
