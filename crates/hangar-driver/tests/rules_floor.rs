//! The deny-risky rules as the floor under every policy, with the real Claude Code (and Codex) against the
//! scripted model: a risky call is denied by the driver before it runs (under `auto` through the
//! PreToolUse hook callback the driver registers in `initialize`; under `ask` before any person
//! is asked), the agent sees the rule's reason and the run log records it.
//!
//! Safety: the risky command is `rm -rf ../sentinel`, where `..` is a temp folder this test owns
//! and `sentinel` a file in it; HOME is a temp folder too. Even if the rules failed, only the
//! sentinel would go.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::path::PathBuf;

use common::{LONG, Rig};
use hangar_testkit::{Script, Step};
use serde_json::json;

const RISKY: &str = "rm -rf ../sentinel";

/// A folder of the test's own holding the workspace `ws` and `sentinel` beside it.
struct Place {
    dir: tempfile::TempDir,
    ws: PathBuf,
    sentinel: PathBuf,
}

fn place() -> Place {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let sentinel = dir.path().join("sentinel");
    std::fs::write(&sentinel, "still here").unwrap();
    Place { dir, ws, sentinel }
}

/// The rig's driver with `--cwd <place>/ws` (the later `--cwd` wins) and `extra`.
fn start(rig: &mut Rig, policy: &str, p: &Place, extra: &[&str]) {
    let mut args = vec!["--cwd", p.ws.to_str().unwrap()];
    args.extend(extra);
    rig.start_with(rig.driver_command(policy, &args));
}

fn assert_denied(rig: &Rig, sentinel: &std::path::Path, rule: &str) {
    let denied = rig.wait_type("hangar.rules_denied");
    assert_eq!(denied["rule"], rule, "{denied}");
    assert_eq!(denied["tool_name"], "Bash");
    let reason = denied["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("outside the workspace"), "{reason}");
    assert!(sentinel.exists(), "the risky command ran");
    // The model got the refusal, with the rule and its reason, as the tool's result.
    let reqs = rig.fake.wait_for_requests(2, LONG).unwrap();
    let results = reqs[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].2, "the tool result is an error: {results:?}");
    assert!(
        results[0].1.contains(rule) && results[0].1.contains(&reason),
        "{results:?}"
    );
}

#[test]
fn auto_denies_a_risky_call_through_the_hook_callback() {
    let p = place();
    let mut rig = Rig::new(
        Script::new([
            Step::tool("Bash", json!({"command": RISKY, "description": "clean"})),
            Step::text("done"),
        ]),
        "clean up",
    );
    start(&mut rig, "auto", &p, &[]);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert_denied(&rig, &p.sentinel, "deny-risky/destroy-outside-workspace");
    assert!(rig.lines_of("hangar.approval").is_empty());
}

#[test]
fn ask_denies_a_risky_call_before_anyone_is_asked() {
    let p = place();
    let mut rig = Rig::new(
        Script::new([
            Step::tool("Bash", json!({"command": RISKY, "description": "clean"})),
            Step::text("done"),
        ]),
        "clean up",
    );
    start(&mut rig, "ask", &p, &[]);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert_denied(&rig, &p.sentinel, "deny-risky/destroy-outside-workspace");
    assert!(
        rig.lines_of("hangar.approval").is_empty(),
        "no person is asked about a call the rules deny"
    );
}

#[test]
fn auto_still_runs_what_the_rules_allow_and_denies_edits_outside() {
    let p = place();
    let mut rig = Rig::new(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "echo hi > made.txt", "description": "make"}),
            ),
            Step::tool(
                "Write",
                json!({"file_path": p.sentinel.to_str().unwrap(), "content": "overwritten"}),
            ),
            Step::text("done"),
        ]),
        "write",
    );
    start(&mut rig, "auto", &p, &[]);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert_eq!(
        std::fs::read_to_string(p.ws.join("made.txt")).unwrap(),
        "hi\n"
    );
    let denied = rig.wait_type("hangar.rules_denied");
    assert_eq!(denied["rule"], "deny-risky/edit-outside-workspace");
    assert_eq!(denied["tool_name"], "Write");
    assert_eq!(std::fs::read_to_string(&p.sentinel).unwrap(), "still here");
}

#[test]
fn an_environment_may_add_a_rule() {
    let p = place();
    let mut rig = Rig::new(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "echo hi > other.txt", "description": "x"}),
            ),
            Step::text("done"),
        ]),
        "echo",
    );
    let rules = p.dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nid = \"no-echo\"\nreason = \"echo is not allowed here.\"\ncommands = [\"echo\"]\n",
    )
    .unwrap();
    start(&mut rig, "auto", &p, &["--rules", rules.to_str().unwrap()]);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    assert_eq!(
        rig.wait_type("hangar.rules_denied")["rule"],
        "deny-risky/no-echo"
    );
    assert!(!p.ws.join("other.txt").exists());
}

/// Codex under `ask`: its approval requests come to the driver, which checks the rules first.
/// (Under Codex `auto` nothing asks: approvalPolicy `never`, hooks off; the sandbox is the floor.)
#[test]
fn codex_ask_denies_a_risky_command_before_anyone_is_asked() {
    let p = place();
    // The denial's reason follows as a steer: it folds into the request after the declined
    // command or, when it lands after that request went out, makes one more.
    let mut rig = Rig::codex(
        Script::new([
            Step::exec(RISKY),
            Step::text("done"),
            Step::text("understood"),
        ]),
        "clean up",
    );
    let cmd = rig.codex_command("ask", &["--cwd", p.ws.to_str().unwrap()]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "{}", rig.log_text());
    let denied = rig.wait_type("hangar.rules_denied");
    assert_eq!(
        denied["rule"], "deny-risky/destroy-outside-workspace",
        "{denied}"
    );
    assert_eq!(denied["tool_name"], "commandExecution");
    assert!(rig.lines_of("hangar.approval").is_empty());
    assert!(p.sentinel.exists(), "the risky command ran");
}
