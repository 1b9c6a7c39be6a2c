//! The real turns the tests parse: each runs the real driver and CLI against the scripted model
//! and returns the finished rig (its run log on disk) and the driver's exit status.
#![allow(dead_code, clippy::unwrap_used, clippy::panic, reason = "test helpers")]

use std::time::Duration;

use hangar_testkit::{Script, Step};
use serde_json::json;

use super::Rig;

pub const PATCH: &str =
    "*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch";
pub const VERIFY_CMD: &str = "echo CHECK-FAILED: nope; exit 7";

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// Claude Code, policy ask: one Bash call, approved; then text.
pub fn claude_approved() -> (Rig, i32) {
    let mut rig = Rig::claude(
        Script::new([bash("echo hi > made.txt"), Step::text("made it")]),
        "make a file",
    );
    rig.start_claude("ask", &[]);
    let id = rig.wait_approval();
    rig.approve(&id);
    let status = rig.wait_exit();
    rig.keep_log("claude_approved");
    (rig, status)
}

/// Claude Code, policy ask: one Bash call, denied with a reason; then text.
pub fn claude_denied() -> (Rig, i32) {
    let mut rig = Rig::claude(
        Script::new([bash("echo hi > made.txt"), Step::text("understood")]),
        "make a file",
    );
    rig.start_claude("ask", &[]);
    let id = rig.wait_approval();
    rig.deny(&id, "not in this repo, please");
    let status = rig.wait_exit();
    rig.keep_log("claude_denied");
    (rig, status)
}

/// Codex, policy auto: a command, a failing command, a patch, then text.
pub fn codex_auto() -> (Rig, i32) {
    let mut rig = Rig::codex(
        Script::new([
            Step::exec("echo hi > made.txt"),
            Step::exec("echo oops; exit 3"),
            Step::patch(PATCH),
            Step::text("made it"),
        ]),
        "make a file",
    );
    rig.start_codex("auto", &[]);
    let status = rig.wait_exit();
    rig.keep_log("codex_auto");
    (rig, status)
}

/// Claude Code streaming slowly, interrupted.
pub fn claude_interrupted() -> (Rig, i32) {
    let mut rig = Rig::claude(
        Script::new([Step::slow_text(20, Duration::from_millis(400))]),
        "talk for a while",
    );
    rig.start_claude("ask", &[]);
    rig.fake.wait_for_requests(1);
    std::thread::sleep(Duration::from_millis(600));
    rig.interrupt();
    let status = rig.wait_exit();
    rig.keep_log("claude_interrupted");
    (rig, status)
}

/// Codex running a slow command, interrupted (the command is left without an item.completed).
pub fn codex_interrupted() -> (Rig, i32) {
    let mut rig = Rig::codex(
        Script::new([
            Step::exec_with("sleep 4; echo late", json!({"yield_time_ms": 30000})),
            Step::text("never"),
        ]),
        "sleep",
    );
    rig.start_codex("auto", &[]);
    rig.wait_line("the command started", |v| {
        v["type"] == "item.started" && v["item"]["type"] == "command_execution"
    });
    rig.interrupt();
    let status = rig.wait_exit();
    rig.keep_log("codex_interrupted");
    (rig, status)
}

/// Claude Code with a failing check, one round of feedback.
pub fn claude_verify() -> (Rig, i32) {
    let mut rig = Rig::claude(
        Script::new([Step::text("done"), Step::text("done again")]),
        "do the job",
    );
    rig.start_claude(
        "auto",
        &["--verify", VERIFY_CMD, "--max-verify-rounds", "1"],
    );
    let status = rig.wait_exit();
    rig.keep_log("claude_verify");
    (rig, status)
}

/// Codex with a failing check, one round of feedback.
pub fn codex_verify() -> (Rig, i32) {
    let mut rig = Rig::codex(
        Script::new([Step::text("done"), Step::text("done again")]),
        "do the job",
    );
    rig.start_codex(
        "auto",
        &["--verify", VERIFY_CMD, "--max-verify-rounds", "1"],
    );
    let status = rig.wait_exit();
    rig.keep_log("codex_verify");
    (rig, status)
}

/// Codex, policy ask: a command approved, a patch denied.
pub fn codex_ask() -> (Rig, i32) {
    let mut rig = Rig::codex(
        Script::new([
            Step::exec("echo hi > made.txt"),
            Step::patch(PATCH),
            Step::text("ok"),
            Step::text("understood"),
        ]),
        "make a file",
    );
    rig.start_codex("ask", &[]);
    let id = rig.wait_approval();
    rig.approve(&id);
    let second = rig.wait_line("the second approval", |v| {
        v["type"] == "hangar.approval" && v["request_id"] != id.as_str()
    });
    rig.deny(second["request_id"].as_str().unwrap(), "no patches today");
    let status = rig.wait_exit();
    rig.keep_log("codex_ask");
    (rig, status)
}
