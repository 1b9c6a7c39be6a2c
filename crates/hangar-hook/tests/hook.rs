//! The hook binary against the Tower double: each answer and each fault. (With the real Claude
//! Code in front of it: `crates/hangar-driver/tests/tower_claude.rs`.) The commands in the hook
//! inputs are never run: the hook only reads them.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hangar_testkit::{TOWER_KEY, TowerAnswer, TowerDouble, TowerFault};
use serde_json::json;

struct Setup {
    dir: tempfile::TempDir,
    key: std::path::PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("tower.key");
    std::fs::write(&key, format!("{TOWER_KEY}\n")).unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    Setup { dir, key }
}

/// Runs the hook for a Bash call of `command`; (exit code, stderr, seconds taken).
fn hook(s: &Setup, url: &str, command: &str, extra: &[&str]) -> (i32, String, f64) {
    let input = json!({"session_id": "s", "cwd": s.dir.path().join("ws"), "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "toolu_1", "permission_mode": "default"});
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hangar-tower-hook"))
        .args(["--url", url, "--key-file"])
        .arg(&s.key)
        .args(["--run", "run-1"])
        .args(extra)
        .env("HOME", s.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.stdout.is_empty(), "the hook never prints a decision");
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        started.elapsed().as_secs_f64(),
    )
}

#[test]
fn allow_exits_0_silently_and_sends_the_call_with_the_key() {
    let s = setup();
    let t = TowerDouble::start().unwrap();
    let (code, err, _) = hook(&s, &t.url(), "cargo test", &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    let calls = t.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].target, "/hooks/claude-code");
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some(&*format!("Bearer {TOWER_KEY}"))
    );
    assert_eq!(calls[0].body["tool_input"]["command"], "cargo test");
    assert_eq!(calls[0].body["client"]["name"], "hangar");
    assert_eq!(calls[0].body["client"]["run"], "run-1");
}

#[test]
fn deny_blocks_with_towers_reason() {
    let s = setup();
    let t = TowerDouble::start().unwrap();
    t.set_answer(TowerAnswer::Deny("not on Fridays".into()));
    let (code, err, _) = hook(&s, &t.url(), "cargo test", &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("Tower denied this call: not on Fridays"),
        "{err}"
    );
}

#[test]
fn a_tower_allow_never_skips_the_rules() {
    let s = setup();
    let t = TowerDouble::start().unwrap();
    let (code, err, _) = hook(&s, &t.url(), "rm -rf ../elsewhere", &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("deny-risky/destroy-outside-workspace"),
        "{err}"
    );
    assert_eq!(t.calls().len(), 1, "Tower was asked first");
}

#[test]
fn wait_then_signed_allow_or_deny_or_nobody() {
    let s = setup();
    let t = TowerDouble::start().unwrap();
    t.set_answer(TowerAnswer::Wait {
        reason: "needs a person".into(),
        sign: Some((Duration::from_millis(700), true)),
    });
    let (code, err, secs) = hook(&s, &t.url(), "cargo test", &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(secs >= 0.6, "it waited for the signature ({secs} s)");
    assert!(
        t.requests()
            .iter()
            .any(|r| r.target.starts_with("/approvals/ap_"))
    );

    t.set_answer(TowerAnswer::Wait {
        reason: "needs a person".into(),
        sign: Some((Duration::from_millis(300), false)),
    });
    let (code, err, _) = hook(&s, &t.url(), "cargo test", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("signer refused"), "{err}");

    t.set_answer(TowerAnswer::Wait {
        reason: "needs a person".into(),
        sign: None,
    });
    let (code, err, secs) = hook(&s, &t.url(), "cargo test", &["--wait-seconds", "2"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no one signed") && err.contains("within 2 s"),
        "{err}"
    );
    assert!((1.5..6.0).contains(&secs), "{secs}");
}

#[test]
fn every_fault_blocks_with_a_reason() {
    let s = setup();
    let t = TowerDouble::start().unwrap();
    let cases: Vec<(TowerFault, &str)> = vec![
        (TowerFault::Status(500), "Tower failed (500)"),
        (TowerFault::Status(503), "Tower failed (503)"),
        (TowerFault::Status(401), "401"),
        (TowerFault::Status(403), "403"),
        (TowerFault::Garbage, "not JSON"),
        (TowerFault::WrongShape, "no decision"),
        (TowerFault::Truncated, "cut short"),
        (TowerFault::Huge(2 * 1024 * 1024), "larger than"),
        (TowerFault::Hangup, "without an answer"),
    ];
    for (fault, want) in cases {
        t.set_fault(fault.clone());
        let (code, err, _) = hook(&s, &t.url(), "cargo test", &[]);
        assert_eq!(code, 2, "{fault:?}: {err}");
        assert!(err.contains(want), "{fault:?}: {err}");
    }
    t.set_fault(TowerFault::None);
    t.set_keys(&["another-key"]);
    let (code, err, _) = hook(&s, &t.url(), "cargo test", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("refused the key"), "{err}");
    t.set_keys(&[TOWER_KEY]);
    t.set_forbidden(&[TOWER_KEY]);
    let (code, err, _) = hook(&s, &t.url(), "cargo test", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("403"), "{err}");
}

#[test]
fn down_slow_and_a_missing_key_file_block() {
    let s = setup();
    let (code, err, _) = hook(&s, &TowerDouble::down_url().unwrap(), "cargo test", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("unreachable"), "{err}");

    let t = TowerDouble::start().unwrap();
    t.set_delay(Duration::from_secs(4));
    let (code, err, secs) = hook(&s, &t.url(), "cargo test", &["--call-seconds", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("did not answer in time"), "{err}");
    assert!(secs < 3.0, "the hook kept its own deadline ({secs} s)");

    t.set_delay(Duration::ZERO);
    std::fs::remove_file(&s.key).unwrap();
    let (code, err, _) = hook(&s, &t.url(), "cargo test", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("key file") && err.contains("missing"), "{err}");
    assert!(t.calls().is_empty() || t.calls().len() == 1);
}
