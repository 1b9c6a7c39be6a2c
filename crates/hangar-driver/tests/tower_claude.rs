//! Governance with the real Claude Code against the scripted model and the Tower double: the
//! Tower hook (each answer, the fault matrix, a Tower allow of a risky call, settings the agent
//! or the repo could use to switch hooks off, one request per call under `ask`) and the
//! `governed` policy.
//!
//! Safety: the commands the model asks for write `made.txt` inside the test's workspace, or are
//! `rm -rf ../sentinel` where `..` is a temp folder the test owns; HOME is a temp folder.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{LONG, Rig, tower_hook_bin};
use hangar_testkit::{PassportFault, TOWER_KEY, TestCa, TowerAnswer, TowerDouble, TowerFault};
use serde_json::{Value, json};

const MAKE: &str = "echo hi > made.txt";

/// A test's own folder: the workspace `ws`, `sentinel` beside it, and the key file.
struct Place {
    dir: tempfile::TempDir,
    ws: PathBuf,
    sentinel: PathBuf,
    key: PathBuf,
}

fn place() -> Place {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let sentinel = dir.path().join("sentinel");
    std::fs::write(&sentinel, "still here").unwrap();
    let key = dir.path().join("tower.key");
    std::fs::write(&key, TOWER_KEY).unwrap();
    Place {
        dir,
        ws,
        sentinel,
        key,
    }
}

fn bash(cmd: &str) -> hangar_testkit::Step {
    hangar_testkit::Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

fn script(cmd: &str) -> hangar_testkit::Script {
    hangar_testkit::Script::new([bash(cmd), hangar_testkit::Step::text("done")])
}

/// Starts the driver with the Tower hook at `hook`, reaching `url`.
fn start_hooked(rig: &mut Rig, policy: &str, p: &Place, hook: &Path, url: &str, extra: &[&str]) {
    let mut args: Vec<String> = vec![
        "--cwd".into(),
        p.ws.display().to_string(),
        "--tower-hook".into(),
        hook.display().to_string(),
        "--tower-url".into(),
        url.into(),
        "--tower-key-file".into(),
        p.key.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    rig.start_with(rig.driver_command(policy, &refs));
}

/// The one tool result the model got back: (text, is_error).
fn tool_result(rig: &Rig) -> (String, bool) {
    let reqs = rig.fake.wait_for_requests(2, LONG).unwrap();
    let results = reqs[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    (results[0].1.clone(), results[0].2)
}

/// Runs one hooked turn of `cmd` under auto and returns the tool result.
fn hooked_turn(tower_url: &str, p: &Place, cmd: &str, extra: &[&str]) -> (Rig, String, bool) {
    let mut rig = Rig::new(script(cmd), "do it");
    start_hooked(&mut rig, "auto", p, &tower_hook_bin(), tower_url, extra);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let (text, err) = tool_result(&rig);
    (rig, text, err)
}

#[test]
fn allow_runs_the_call_and_the_manifest_names_the_hook() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    let (rig, _text, err) = hooked_turn(&t.url(), &p, MAKE, &[]);
    assert!(!err);
    assert_eq!(
        std::fs::read_to_string(p.ws.join("made.txt")).unwrap(),
        "hi\n"
    );
    let calls = t.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].target, "/hooks/claude-code");
    assert_eq!(calls[0].body["tool_input"]["command"], MAKE);
    let started = rig.wait_type("hangar.started");
    let hooks = started["hooks"].as_array().unwrap();
    let h = hooks
        .iter()
        .find(|h| h["name"] == "hangar:tower_hook")
        .unwrap();
    let want = sha256_hex(&std::fs::read(tower_hook_bin()).unwrap());
    assert_eq!(h["digest"], want);
    let argv: Vec<&str> = started["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let i = argv.iter().position(|a| *a == "--setting-sources").unwrap();
    assert_eq!(argv[i + 1], "");
}

fn sha256_hex(b: &[u8]) -> String {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b).unwrap();
    let out = Command::new("sha256sum")
        .arg(&f)
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn deny_blocks_the_call_with_towers_reason() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    t.set_answer(TowerAnswer::Deny("deploy freeze until Monday".into()));
    let (_rig, text, err) = hooked_turn(&t.url(), &p, MAKE, &[]);
    assert!(err);
    assert!(
        text.contains("Tower denied this call: deploy freeze until Monday"),
        "{text}"
    );
    assert!(!p.ws.join("made.txt").exists());
}

#[test]
fn wait_then_signed_allow_deny_or_nobody() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    t.set_answer(TowerAnswer::Wait {
        reason: "a person signs".into(),
        sign: Some((Duration::from_millis(800), true)),
    });
    let (_rig, _text, err) = hooked_turn(&t.url(), &p, MAKE, &[]);
    assert!(!err);
    assert!(p.ws.join("made.txt").exists());
    std::fs::remove_file(p.ws.join("made.txt")).unwrap();

    t.set_answer(TowerAnswer::Wait {
        reason: "a person signs".into(),
        sign: Some((Duration::from_millis(300), false)),
    });
    let (_rig, text, err) = hooked_turn(&t.url(), &p, MAKE, &[]);
    assert!(err && text.contains("refused Tower's approval"), "{text}");
    assert!(!p.ws.join("made.txt").exists());

    t.set_answer(TowerAnswer::Wait {
        reason: "a person signs".into(),
        sign: None,
    });
    let (_rig, text, err) = hooked_turn(&t.url(), &p, MAKE, &["--tower-wait-seconds", "2"]);
    assert!(err && text.contains("no one signed"), "{text}");
    assert!(!p.ws.join("made.txt").exists());
}

#[test]
fn every_fault_blocks_the_call_and_the_turn_shows_why() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    let faults: Vec<(TowerFault, Duration, &str)> = vec![
        (
            TowerFault::Status(500),
            Duration::ZERO,
            "Tower failed (500)",
        ),
        (TowerFault::Status(401), Duration::ZERO, "refused the key"),
        (TowerFault::Garbage, Duration::ZERO, "not JSON"),
        (TowerFault::WrongShape, Duration::ZERO, "no decision"),
        (
            TowerFault::None,
            Duration::from_secs(4),
            "did not answer in time",
        ),
    ];
    for (fault, delay, want) in faults {
        t.set_fault(fault.clone());
        t.set_delay(delay);
        let (_rig, text, err) = hooked_turn(&t.url(), &p, MAKE, &["--tower-call-seconds", "1"]);
        assert!(err && text.contains(want), "{fault:?}/{delay:?}: {text}");
        assert!(
            !p.ws.join("made.txt").exists(),
            "{fault:?} let the call run"
        );
    }
    t.set_fault(TowerFault::None);
    t.set_delay(Duration::ZERO);

    let (_rig, text, err) = hooked_turn(&TowerDouble::down_url().unwrap(), &p, MAKE, &[]);
    assert!(err && text.contains("unreachable"), "{text}");

    // The key file missing.
    let gone = place();
    std::fs::remove_file(&gone.key).unwrap();
    let (_rig, text, err) = hooked_turn(&t.url(), &gone, MAKE, &[]);
    assert!(err && text.contains("key file"), "{text}");
    assert!(!gone.ws.join("made.txt").exists());

    // The hook binary missing, or there but not executable: `|| exit 2` blocks.
    for hook in [p.dir.path().join("no-such-hook"), {
        let f = p.dir.path().join("not-executable");
        std::fs::write(&f, "#!/bin/sh\nexit 0\n").unwrap();
        f
    }] {
        let mut rig = Rig::new(script(MAKE), "do it");
        start_hooked(&mut rig, "auto", &p, &hook, &t.url(), &[]);
        assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
        let (text, err) = tool_result(&rig);
        assert!(err, "{}: {text}", hook.display());
        assert!(!p.ws.join("made.txt").exists(), "{}", hook.display());
    }
}

/// A passport in the key file (`HANGAR_GOVERNANCE_HOOK_AUTH=passport`): the hook sends the file's
/// content as it is, no JWT code of its own; Tower accepts its own unexpired passports and
/// refuses an expired one (401), which blocks the call.
#[test]
fn the_hook_sends_the_passport_in_the_key_file() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    let passport = t.mint_passport("ada@example.com", Some("ada@example.com"), "hangar");
    std::fs::write(&p.key, format!("{passport}\n")).unwrap();
    let (_rig, text, err) = hooked_turn(&t.url(), &p, MAKE, &[]);
    assert!(!err, "{text}");
    assert!(p.ws.join("made.txt").exists());
    let calls = t.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some(format!("Bearer {passport}").as_str())
    );
    std::fs::remove_file(p.ws.join("made.txt")).unwrap();

    t.set_passport_fault(PassportFault::Expired);
    let expired = t.mint_passport("ada@example.com", Some("ada@example.com"), "hangar");
    std::fs::write(&p.key, &expired).unwrap();
    let (_rig, text, err) = hooked_turn(&t.url(), &p, MAKE, &[]);
    assert!(
        err && text.contains("refused the key or passport (401)"),
        "{text}"
    );
    assert!(!p.ws.join("made.txt").exists());
}

#[test]
fn a_tower_allow_of_a_risky_call_is_still_denied() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    let (_rig, text, err) = hooked_turn(&t.url(), &p, "rm -rf ../sentinel", &[]);
    assert!(
        err && text.contains("deny-risky/destroy-outside-workspace"),
        "{text}"
    );
    assert!(p.sentinel.exists(), "the risky command ran");
}

#[test]
fn settings_of_the_agent_and_the_repo_change_nothing() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    t.set_answer(TowerAnswer::Deny("Tower says no".into()));
    let off = json!({"disableAllHooks": true, "permissions": {"allow": ["Bash"]}}).to_string();
    std::fs::create_dir_all(p.ws.join(".claude")).unwrap();
    std::fs::write(p.ws.join(".claude/settings.json"), &off).unwrap();
    std::fs::write(p.ws.join(".claude/settings.local.json"), &off).unwrap();
    let mut rig = Rig::new(script(MAKE), "do it");
    for home in [rig.user_home.path().join(".claude"), rig.config_dir()] {
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("settings.json"), &off).unwrap();
    }
    start_hooked(&mut rig, "auto", &p, &tower_hook_bin(), &t.url(), &[]);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let (text, err) = tool_result(&rig);
    assert!(err && text.contains("Tower says no"), "{text}");
    assert!(!p.ws.join("made.txt").exists());
}

#[test]
fn with_the_hook_on_ask_asks_no_person_and_tower_once_per_call() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    let mut rig = Rig::new(script(MAKE), "do it");
    start_hooked(&mut rig, "ask", &p, &tower_hook_bin(), &t.url(), &[]);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert!(p.ws.join("made.txt").exists());
    assert!(
        rig.lines_of("hangar.approval").is_empty(),
        "no person was asked"
    );
    assert_eq!(t.calls().len(), 1, "one call, one request to Tower");
    let warned = rig
        .lines_of("hangar.warning")
        .iter()
        .any(|w| w["message"].as_str().unwrap().contains("Tower hook"));
    assert!(warned, "{}", rig.log_text());
    assert_eq!(rig.wait_type("hangar.started")["policy"], "ask");
}

fn governed_turn(t: &TowerDouble, p: &Place, cmd: &str) -> (Rig, String, bool) {
    governed_turn_at(&t.url(), p, cmd, None)
}

/// A governed turn asking Tower at `url` through the Tower client (the hook executable), the
/// driver trusting `ca` (`HANGAR_CA_FILE`) when given.
fn governed_turn_at(url: &str, p: &Place, cmd: &str, ca: Option<&Path>) -> (Rig, String, bool) {
    let mut rig = Rig::new(script(cmd), "do it");
    let client = tower_hook_bin();
    let args = [
        "--cwd",
        p.ws.to_str().unwrap(),
        "--tower-url",
        url,
        "--tower-key-file",
        p.key.to_str().unwrap(),
        "--tower-client",
        client.to_str().unwrap(),
    ];
    let mut c = rig.driver_command("governed", &args);
    if let Some(ca) = ca {
        c.env("HANGAR_CA_FILE", ca);
    }
    rig.start_with(c);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let (text, err) = tool_result(&rig);
    (rig, text, err)
}

#[test]
fn governed_sends_the_request_to_tower_whose_answer_is_final() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    let (rig, _text, err) = governed_turn(&t, &p, MAKE);
    assert!(!err);
    assert!(p.ws.join("made.txt").exists());
    let calls = t.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].target, "/approvals");
    assert_eq!(calls[0].body["harness"], "claude-code");
    assert_eq!(calls[0].body["tool_name"], "Bash");
    let answered = rig.wait_type("hangar.approval_answered");
    assert_eq!(
        (answered["decision"].clone(), answered["by"].clone()),
        (json!("allow"), json!("tower"))
    );
    std::fs::remove_file(p.ws.join("made.txt")).unwrap();

    t.set_answer(TowerAnswer::Deny("not today".into()));
    let (_rig, text, err) = governed_turn(&t, &p, MAKE);
    assert!(err && text.contains("not today"), "{text}");
    assert!(!p.ws.join("made.txt").exists());

    // The rules come first: Tower never hears of a call they deny.
    let before = t.calls().len();
    let (rig, text, err) = governed_turn(&t, &p, "rm -rf ../sentinel");
    assert!(err && text.contains("deny-risky/"), "{text}");
    assert!(p.sentinel.exists());
    assert_eq!(t.calls().len(), before);
    assert!(!rig.lines_of("hangar.rules_denied").is_empty());
    let _: Option<Value> = None;
}

#[test]
fn a_hook_with_another_digest_refuses_the_turn() {
    let p = place();
    let t = TowerDouble::start().unwrap();
    let hook = p.dir.path().join("tower_hook");
    std::fs::copy(tower_hook_bin(), &hook).unwrap();
    let want = sha256_hex(&std::fs::read(&hook).unwrap());
    // The installed hook, as hangar wrote it: the turn runs.
    let mut rig = Rig::new(script(MAKE), "do it");
    start_hooked(
        &mut rig,
        "auto",
        &p,
        &hook,
        &t.url(),
        &["--tower-hook-digest", &want],
    );
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert!(p.ws.join("made.txt").exists());
    std::fs::remove_file(p.ws.join("made.txt")).unwrap();
    // Changed since (the agent appended to it): no turn, and nothing ran.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&hook)
        .unwrap();
    std::io::Write::write_all(&mut f, b"tampered").unwrap();
    drop(f);
    let mut rig = Rig::new(script(MAKE), "do it");
    start_hooked(
        &mut rig,
        "auto",
        &p,
        &hook,
        &t.url(),
        &["--tower-hook-digest", &want],
    );
    assert_ne!(rig.wait_exit(LONG), 0);
    let err = rig.wait_type("hangar.error");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("not the one hangar installed"),
        "{err}"
    );
    assert!(
        rig.lines_of("hangar.started").is_empty(),
        "no harness started"
    );
    assert!(!p.ws.join("made.txt").exists());
    assert_eq!(t.calls().len(), 1, "only the first turn's call");
}

/// A Tower double over HTTPS (a certificate for 127.0.0.1 from a CA made with openssl) and a
/// second CA that signed nothing of it: (double, its CA, the other CA).
fn https_tower(p: &Place) -> (TowerDouble, PathBuf, PathBuf) {
    let (mine, other) = (p.dir.path().join("ca"), p.dir.path().join("other-ca"));
    std::fs::create_dir(&mine).unwrap();
    std::fs::create_dir(&other).unwrap();
    let ca = TestCa::make(&mine, "IP:127.0.0.1").unwrap();
    let wrong = TestCa::make(&other, "IP:127.0.0.1").unwrap();
    let t = TowerDouble::start_tls(&ca.cert, &ca.key).unwrap();
    (t, ca.ca, wrong.ca)
}

/// One hooked turn (auto) of `cmd` with the driver trusting `ca` (`HANGAR_CA_FILE`).
fn hooked_turn_ca(url: &str, p: &Place, cmd: &str, ca: &Path) -> (Rig, String, bool) {
    let mut rig = Rig::new(script(cmd), "do it");
    let hook = tower_hook_bin();
    let args = [
        "--cwd",
        p.ws.to_str().unwrap(),
        "--tower-hook",
        hook.to_str().unwrap(),
        "--tower-url",
        url,
        "--tower-key-file",
        p.key.to_str().unwrap(),
    ];
    let mut c = rig.driver_command("auto", &args);
    c.env("HANGAR_CA_FILE", ca);
    rig.start_with(c);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let (text, err) = tool_result(&rig);
    (rig, text, err)
}

/// Issue 20, Deliver 7: Tower over HTTPS, trusted through `HANGAR_CA_FILE`, in both ways a turn
/// asks it: Claude Code's hook and the driver's governed policy. Allow runs the tool; deny
/// blocks it with Tower's reason.
#[test]
fn over_https_the_hook_and_governed_allow_and_deny_through_the_ca() {
    let p = place();
    let (t, ca, _) = https_tower(&p);
    assert!(t.url().starts_with("https://"));
    let (_rig, _text, err) = hooked_turn_ca(&t.url(), &p, MAKE, &ca);
    assert!(!err);
    assert_eq!(
        std::fs::read_to_string(p.ws.join("made.txt")).unwrap(),
        "hi\n"
    );
    assert_eq!(t.calls()[0].target, "/hooks/claude-code");
    std::fs::remove_file(p.ws.join("made.txt")).unwrap();
    t.set_answer(TowerAnswer::Deny("not over TLS either".into()));
    let (_rig, text, err) = hooked_turn_ca(&t.url(), &p, MAKE, &ca);
    assert!(err && text.contains("not over TLS either"), "{text}");
    assert!(!p.ws.join("made.txt").exists());

    t.set_answer(TowerAnswer::Allow("fine".into()));
    let (_rig, _text, err) = governed_turn_at(&t.url(), &p, MAKE, Some(&ca));
    assert!(!err);
    assert!(p.ws.join("made.txt").exists());
    assert_eq!(t.calls().last().unwrap().target, "/approvals");
    std::fs::remove_file(p.ws.join("made.txt")).unwrap();
    t.set_answer(TowerAnswer::Deny("governed says no".into()));
    let (_rig, text, err) = governed_turn_at(&t.url(), &p, MAKE, Some(&ca));
    assert!(err && text.contains("governed says no"), "{text}");
    assert!(!p.ws.join("made.txt").exists());
}

/// A certificate from a CA the driver was not told to trust (someone in the middle) or for
/// another host name: the tool does not run, the agent is told why, and Tower never got the key.
#[test]
fn a_wrong_ca_or_host_name_fails_closed_and_the_tool_does_not_run() {
    let p = place();
    let (t, ca, wrong) = https_tower(&p);
    let localhost = t.url().replace("127.0.0.1", "localhost");
    for (what, url, trust) in [
        ("another CA", t.url(), &wrong),
        ("a wrong host name", localhost, &ca),
    ] {
        let (_rig, text, err) = hooked_turn_ca(&url, &p, MAKE, trust);
        eprintln!("hook, {what}: {text}");
        assert!(
            err && text.contains("failed the TLS check"),
            "{what}: {text}"
        );
        assert!(!p.ws.join("made.txt").exists(), "{what}: the tool ran");
        let (_rig, text, err) = governed_turn_at(&url, &p, MAKE, Some(trust));
        eprintln!("governed, {what}: {text}");
        assert!(
            err && text.contains("failed the TLS check"),
            "{what}: {text}"
        );
        assert!(!p.ws.join("made.txt").exists(), "{what}: the tool ran");
    }
    assert!(t.requests().is_empty(), "a request reached Tower");
}
