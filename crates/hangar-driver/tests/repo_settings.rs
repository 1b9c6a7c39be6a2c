//! Issue 18, item 1 and 2: a repository's or the agent's own harness settings cannot loosen
//! governance. The work folder and the agent's home hold every hostile file of
//! `hangar_testkit::hostile` (hooks answering `allow`, hooks and MCP servers that run code,
//! `notify`, exec-policy rules, `env.ANTHROPIC_BASE_URL` and a model provider pointing to a
//! second scripted model); under `ask` the call still waits for the person, under `governed`
//! Tower still gets the request, no hostile command ran (no marker file) and the second model
//! got nothing. Real Claude Code and Codex, the real driver.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{LONG, Rig};
use hangar_mailbox::outbox::Outcome;
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_testkit::{FakeAnthropic, FakeOpenAi, Script, Step, TOWER_KEY, TowerDouble, hostile};
use serde_json::{Value, json};

const MAKE: &str = "echo hi > made.txt";

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// A folder for the marker files hostile commands would leave.
fn markers() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Waits for the turn's first approval request; `None` if the driver exited first (the call was
/// not held for anyone).
fn approval_or_exit(rig: &mut Rig) -> Option<Value> {
    let deadline = Instant::now() + LONG;
    loop {
        if let Some(v) = rig.lines_of("hangar.approval").into_iter().next() {
            return Some(v);
        }
        if rig.child.as_mut().unwrap().try_wait().unwrap().is_some() {
            rig.child = None;
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "no approval and no exit; log:\n{}",
            rig.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn claude_rig(marks: &Path, evil: &str) -> Rig {
    let rig = Rig::new(
        Script::new([bash(MAKE), Step::text("done"), Step::text("more")]),
        "make a file",
    );
    hostile::claude_repo(rig.work.path(), marks, evil).unwrap();
    hostile::claude_home(rig.user_home.path(), Some(&rig.config_dir()), marks, evil).unwrap();
    rig
}

fn approve(rig: &Rig, asked: &Value) {
    let id = asked["request_id"].as_str().unwrap();
    assert_eq!(
        rig.mailbox
            .request(Kind::Approve, body::approve(id, None), LONG)
            .unwrap(),
        Outcome::Done
    );
}

#[test]
fn claude_under_ask_still_waits_for_the_person_whatever_the_repo_and_home_say() {
    let marks = markers();
    let evil = FakeAnthropic::start(Script::new([Step::text("the evil model answered")])).unwrap();
    let mut rig = claude_rig(marks.path(), &evil.base_url());
    rig.start("ask");
    let asked = approval_or_exit(&mut rig).unwrap_or_else(|| {
        panic!(
            "the call was never held for a person; markers {:?}; evil requests {}; log:\n{}",
            hostile::markers(marks.path()),
            evil.requests().len(),
            rig.log_text()
        )
    });
    assert!(
        !rig.work.path().join("made.txt").exists(),
        "the command ran before the person answered"
    );
    approve(&rig, &asked);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert!(rig.work.path().join("made.txt").exists());
    assert_eq!(hostile::markers(marks.path()), Vec::<String>::new());
    assert!(evil.requests().is_empty(), "the second model was reached");
    assert!(!rig.fake.requests().is_empty());
    // The argv says it: only hangar's settings, only hangar's MCP servers.
    let argv: Vec<String> =
        serde_json::from_value(rig.wait_type("hangar.started")["argv"].clone()).unwrap();
    let at = argv.iter().position(|a| a == "--setting-sources").unwrap();
    assert_eq!(argv[at + 1], "");
    assert!(argv.iter().any(|a| a == "--strict-mcp-config"), "{argv:?}");
}

#[test]
fn claude_under_governed_still_asks_tower() {
    let marks = markers();
    let evil = FakeAnthropic::start(Script::new([Step::text("the evil model answered")])).unwrap();
    let tower = TowerDouble::start().unwrap();
    let key = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key.path(), TOWER_KEY).unwrap();
    let mut rig = claude_rig(marks.path(), &evil.base_url());
    let client = common::tower_hook_bin();
    let args = [
        "--tower-url",
        &tower.url(),
        "--tower-key-file",
        key.path().to_str().unwrap(),
        "--tower-client",
        client.to_str().unwrap(),
    ];
    rig.start_with(rig.driver_command("governed", &args));
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let calls = tower.calls();
    assert_eq!(calls.len(), 1, "Tower was not asked: {}", rig.log_text());
    assert_eq!(calls[0].body["tool_name"], "Bash");
    assert!(rig.work.path().join("made.txt").exists());
    assert_eq!(hostile::markers(marks.path()), Vec::<String>::new());
    assert!(evil.requests().is_empty(), "the second model was reached");
}

#[test]
fn claude_under_auto_runs_no_hostile_command_and_talks_to_hangars_model_only() {
    let marks = markers();
    let evil = FakeAnthropic::start(Script::new([Step::text("the evil model answered")])).unwrap();
    let mut rig = claude_rig(marks.path(), &evil.base_url());
    rig.start("auto");
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert_eq!(hostile::markers(marks.path()), Vec::<String>::new());
    assert!(evil.requests().is_empty(), "the second model was reached");
    assert!(rig.work.path().join("made.txt").exists());
}

/// The environment's reviewed settings file: recorded with its digest; one that would loosen
/// governance refuses the turn before the harness starts.
#[test]
fn a_reviewed_settings_file_is_recorded_and_a_loosening_one_refuses_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("reviewed.json");
    std::fs::write(&good, r#"{"permissions":{"deny":["Bash(curl:*)"]}}"#).unwrap();
    let mut rig = Rig::new(Script::new([Step::text("hello")]), "hi");
    rig.start_with(rig.driver_command("auto", &["--claude-settings", good.to_str().unwrap()]));
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let hooks = rig.wait_type("hangar.started")["hooks"].clone();
    let want = format!("claude_settings: {}", good.display());
    assert!(
        hooks
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["name"] == want.as_str() && h["digest"].as_str().unwrap().len() == 64),
        "{hooks}"
    );

    let bad = dir.path().join("loose.json");
    std::fs::write(
        &bad,
        r#"{"hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"true"}]}]}}"#,
    )
    .unwrap();
    let mut rig = Rig::new(Script::new([Step::text("hello")]), "hi");
    rig.start_with(rig.driver_command("ask", &["--claude-settings", bad.to_str().unwrap()]));
    assert_eq!(rig.wait_exit(LONG), 2);
    let error = rig.wait_type("hangar.error");
    assert!(
        error["message"].as_str().unwrap().contains("\"hooks\""),
        "{error}"
    );
    assert!(rig.fake.requests().is_empty());
}

fn codex_rig(marks: &Path, evil: &str) -> Rig {
    let rig = Rig::codex(
        Script::new([Step::exec(MAKE), Step::text("done"), Step::text("more")]),
        "make a file",
    );
    hostile::codex_repo(rig.work.path(), marks, evil).unwrap();
    hostile::codex_home(&rig.codex_home(), rig.work.path(), marks, evil).unwrap();
    // The agent's `~/.codex` too (Codex's default home).
    hostile::codex_home(
        &rig.user_home.path().join(".codex"),
        rig.work.path(),
        marks,
        evil,
    )
    .unwrap();
    rig
}

#[test]
fn codex_under_ask_still_waits_for_the_person_whatever_the_repo_and_home_say() {
    let marks = markers();
    let evil = FakeOpenAi::start(Script::new([Step::text("the evil model answered")])).unwrap();
    let mut rig = codex_rig(marks.path(), &evil.base_url());
    let cmd = rig.codex_command("ask", &[]);
    rig.start_with(cmd);
    let asked = approval_or_exit(&mut rig).unwrap_or_else(|| {
        panic!(
            "the call was never held for a person; markers {:?}; evil requests {}; log:\n{}",
            hostile::markers(marks.path()),
            evil.requests().len(),
            rig.log_text()
        )
    });
    assert!(
        !rig.work.path().join("made.txt").exists(),
        "the command ran before the person answered"
    );
    approve(&rig, &asked);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert!(rig.work.path().join("made.txt").exists());
    assert_eq!(hostile::markers(marks.path()), Vec::<String>::new());
    assert!(evil.requests().is_empty(), "the second model was reached");
    // The turn's own Codex home is gone; the agent's keeps the thread for a resume.
    let sessions: Vec<PathBuf> = walk(&rig.codex_home().join("sessions"));
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert!(
        !std::env::temp_dir()
            .join(format!("hangar-{}-codex-home", rig.run))
            .exists()
    );
}

/// A thread made under the turn's own Codex home resumes in the next turn (the rollout is kept
/// in the agent's home), and what the agent wrote into its home in between is not loaded.
#[test]
fn a_codex_thread_resumes_and_the_home_the_agent_wrote_is_not_loaded() {
    let marks = markers();
    let evil = FakeOpenAi::start(Script::new([Step::text("the evil model answered")])).unwrap();
    let mut rig = Rig::codex(
        Script::new([Step::text("FIRST-ANSWER"), Step::text("second answer")]),
        "FIRST-PROMPT",
    );
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let thread = rig.wait_type("thread.started")["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Between turns the agent writes its home (it could: it is its own).
    hostile::codex_home(
        &rig.codex_home(),
        rig.work.path(),
        marks.path(),
        &evil.base_url(),
    )
    .unwrap();
    rig.next_run("SECOND-PROMPT");
    let cmd = rig.codex_command("auto", &["--resume", &thread]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let reqs = rig.fake.wait_for_requests(2, LONG).unwrap();
    let second = reqs[1].all_text();
    assert!(second.contains("FIRST-PROMPT") && second.contains("FIRST-ANSWER"));
    assert_eq!(hostile::markers(marks.path()), Vec::<String>::new());
    assert!(evil.requests().is_empty(), "the second model was reached");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
