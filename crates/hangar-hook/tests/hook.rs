//! The hook binary against the Tower double: each answer and each fault. (With the real Claude
//! Code in front of it: `crates/hangar-driver/tests/tower_claude.rs`.) The commands in the hook
//! inputs are never run: the hook only reads them.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hangar_testkit::{TOWER_KEY, TestCa, TowerAnswer, TowerDouble, TowerFault};
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
    hook_env(s, url, command, extra, &[])
}

/// [`hook`] with these variables set (and no proxy, no `HANGAR_CA_FILE` of the test's own).
fn hook_env(
    s: &Setup,
    url: &str,
    command: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, String, f64) {
    let input = json!({"session_id": "s", "cwd": s.dir.path().join("ws"), "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "toolu_1", "permission_mode": "default"});
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hangar-tower-hook"))
        .args(["--url", url, "--key-file"])
        .arg(&s.key)
        .args(["--run", "run-1"])
        .args(extra)
        .env("HOME", s.dir.path())
        .env_remove("HANGAR_CA_FILE")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .envs(env.iter().copied())
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

/// A Tower double speaking HTTPS with a certificate for 127.0.0.1 signed by a CA made here with
/// openssl; (the double, the CA's certificate, a second CA that signed nothing of it).
fn https_tower(s: &Setup) -> (TowerDouble, String, String) {
    let mine = s.dir.path().join("ca");
    let other = s.dir.path().join("other-ca");
    std::fs::create_dir(&mine).unwrap();
    std::fs::create_dir(&other).unwrap();
    let ca = TestCa::make(&mine, "IP:127.0.0.1").unwrap();
    let wrong = TestCa::make(&other, "IP:127.0.0.1").unwrap();
    let t = TowerDouble::start_tls(&ca.cert, &ca.key).unwrap();
    assert!(t.url().starts_with("https://127.0.0.1:"), "{}", t.url());
    (
        t,
        ca.ca.display().to_string(),
        wrong.ca.display().to_string(),
    )
}

#[test]
fn an_https_tower_is_reached_through_the_ca_file_or_hangar_ca_file() {
    let s = setup();
    let (t, ca, _) = https_tower(&s);
    let (code, err, _) = hook(&s, &t.url(), "cargo test", &["--ca-file", &ca]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        t.calls()[0].authorization.as_deref(),
        Some(&*format!("Bearer {TOWER_KEY}"))
    );
    t.set_answer(TowerAnswer::Deny("not on Fridays".into()));
    let (code, err, _) = hook_env(&s, &t.url(), "cargo test", &[], &[("HANGAR_CA_FILE", &ca)]);
    assert_eq!(code, 2);
    assert!(
        err.contains("Tower denied this call: not on Fridays"),
        "{err}"
    );
}

/// The attacks on the way to Tower: a certificate from a CA the hook was not told to trust (a
/// machine in the middle), the right CA's certificate for another name, and no CA at all. Each
/// blocks the call before any request (and so the key) is sent.
#[test]
fn a_wrong_ca_a_wrong_host_name_or_no_ca_blocks_and_sends_no_key() {
    let s = setup();
    let (t, ca, wrong) = https_tower(&s);
    let localhost = t.url().replace("127.0.0.1", "localhost");
    for (what, url, extra) in [
        ("another CA", t.url(), vec!["--ca-file", wrong.as_str()]),
        (
            "a wrong host name",
            localhost,
            vec!["--ca-file", ca.as_str()],
        ),
        ("the system's roots only", t.url(), vec![]),
    ] {
        let (code, err, _) = hook(&s, &url, "cargo test", &extra);
        eprintln!("{what}: exit {code}: {err}");
        assert_eq!(code, 2, "{what}: {err}");
        assert!(
            err.contains("failed the TLS check") && err.contains("HANGAR_CA_FILE"),
            "{what}: {err}"
        );
        assert!(t.requests().is_empty(), "{what}: a request reached Tower");
    }
    // The driver's governed client (`--approvals`) fails closed the same way.
    let (code, err) = approvals(&s, &t.url(), &["--ca-file", &wrong], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("failed the TLS check"), "{err}");
    assert!(t.requests().is_empty());
}

/// Plain http to a host that is not loopback is refused before a byte is sent: here a proxy
/// (the plain double) would carry the request, key and all, if the hook let it go.
#[test]
fn plain_http_off_loopback_is_refused_before_the_key_is_sent() {
    let s = setup();
    let t = TowerDouble::start().unwrap();
    let proxy = [("HTTP_PROXY", t.url())];
    let env: Vec<(&str, &str)> = proxy.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, err, _) = hook_env(&s, "http://tower.example.com", "cargo test", &[], &env);
    eprintln!("hook: exit {code}: {err}");
    assert_eq!(code, 2);
    assert!(
        err.contains("plain http") && err.contains("https://"),
        "{err}"
    );
    let (code, err) = approvals(&s, "http://tower.example.com", &[], &env);
    eprintln!("approvals: exit {code}: {err}");
    assert_eq!(code, 2);
    assert!(err.contains("plain http"), "{err}");
    assert!(t.requests().is_empty(), "the key went out in clear");
    // Loopback in clear stays allowed (the tests' double, a Tower beside hangar).
    let (code, err, _) = hook(&s, &t.url(), "cargo test", &[]);
    assert_eq!((code, err.as_str()), (0, ""));
}

/// `--approvals`: the driver's Tower client for the governed policy; (exit code, stderr).
fn approvals(s: &Setup, url: &str, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let body =
        json!({"tool_name": "Bash", "tool_input": {"command": "cargo test"}, "harness": "codex"});
    let mut child = Command::new(env!("CARGO_BIN_EXE_hangar-tower-hook"))
        .args(["--approvals", "--url", url, "--key-file"])
        .arg(&s.key)
        .args(extra)
        .env_remove("HANGAR_CA_FILE")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child
        .stdin
        .take()
        .unwrap()
        .write_all(body.to_string().as_bytes());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn approvals_mode_asks_towers_approvals_over_https() {
    let s = setup();
    let (t, ca, _) = https_tower(&s);
    let (code, err) = approvals(&s, &t.url(), &["--ca-file", &ca], &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    let calls = t.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].target, "/approvals");
    assert_eq!(calls[0].body["harness"], "codex");
    t.set_answer(TowerAnswer::Deny("no".into()));
    let (code, err) = approvals(&s, &t.url(), &[], &[("HANGAR_CA_FILE", &ca)]);
    assert_eq!(code, 2);
    assert_eq!(err.trim(), "Tower denied this call: no");
}
