//! One turn of the real Claude Code under the driver, against the scripted model: approvals,
//! `auto`, steering, interrupting, and the exit status.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::time::{Duration, Instant};

use common::{LONG, Rig};
use hangar_mailbox::outbox::Outcome;
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_testkit::{Script, Step};
use serde_json::json;

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

#[test]
fn approve_runs_the_tool_and_the_model_sees_its_result() {
    let mut rig = Rig::new(
        Script::new([bash("echo hi > made.txt"), Step::text("made it")]),
        "make a file",
    );
    rig.start("ask");
    let id = rig.wait_approval();
    let asked = rig.wait_type("hangar.approval");
    assert_eq!(asked["tool_name"], "Bash");
    assert_eq!(asked["input"]["command"], "echo hi > made.txt");
    assert!(
        !rig.work.path().join("made.txt").exists(),
        "nothing runs before the answer"
    );
    let out = rig
        .mailbox
        .request(Kind::Approve, body::approve(&id, None), LONG)
        .unwrap();
    assert_eq!(out, Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0);
    assert_eq!(
        std::fs::read_to_string(rig.work.path().join("made.txt")).unwrap(),
        "hi\n"
    );
    let reqs = rig.fake.requests();
    assert_eq!(reqs.len(), 2);
    let results = reqs[1].tool_results();
    assert_eq!(results.len(), 1);
    assert!(!results[0].2, "tool result is not an error: {results:?}");
    let answered = rig.wait_type("hangar.approval_answered");
    assert_eq!(answered["decision"], "allow");
    let result = rig.wait_type("result");
    assert_eq!(result["result"], "made it");
    assert_eq!(
        result["hangar_process_usage"]["input_tokens"], 22,
        "two model calls of 11 input tokens"
    );
    assert_eq!(rig.wait_type("hangar.turn_end")["status"], 0);
}

#[test]
fn approve_with_changed_input_runs_the_changed_input() {
    let mut rig = Rig::new(
        Script::new([bash("echo hi > asked.txt"), Step::text("ok")]),
        "make a file",
    );
    rig.start("ask");
    let id = rig.wait_approval();
    let changed =
        json!({"command": "echo changed > changed.txt", "description": "edited by a person"});
    assert_eq!(
        rig.mailbox
            .request(Kind::Approve, body::approve(&id, Some(changed)), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 0);
    assert!(!rig.work.path().join("asked.txt").exists());
    assert_eq!(
        std::fs::read_to_string(rig.work.path().join("changed.txt")).unwrap(),
        "changed\n"
    );
}

#[test]
fn deny_keeps_the_tool_from_running_and_the_agent_sees_why() {
    let mut rig = Rig::new(
        Script::new([bash("echo hi > made.txt"), Step::text("understood")]),
        "make a file",
    );
    rig.start("ask");
    let id = rig.wait_approval();
    let out = rig
        .mailbox
        .request(
            Kind::Deny,
            body::deny(&id, Some("not in this repo, please")),
            LONG,
        )
        .unwrap();
    assert_eq!(out, Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0);
    assert!(!rig.work.path().join("made.txt").exists());
    let reqs = rig.fake.requests();
    let results = reqs[1].tool_results();
    assert!(results[0].2, "the denied call is an error result");
    assert!(
        results[0].1.contains("not in this repo, please"),
        "the model sees the reason: {results:?}"
    );
    assert_eq!(
        rig.wait_type("hangar.approval_answered")["decision"],
        "deny"
    );
}

#[test]
fn auto_runs_tools_without_asking() {
    let mut rig = Rig::new(
        Script::new([bash("echo auto > made.txt"), Step::text("done")]),
        "make a file",
    );
    rig.start("auto");
    assert_eq!(rig.wait_exit(LONG), 0);
    assert_eq!(
        std::fs::read_to_string(rig.work.path().join("made.txt")).unwrap(),
        "auto\n"
    );
    assert!(rig.lines_of("hangar.approval").is_empty());
    // Nothing asks for permission; the only requests are the rules' PreToolUse hook callbacks.
    assert!(
        rig.lines_of("control_request")
            .iter()
            .all(|r| r["request"]["subtype"] == "hook_callback"),
        "{}",
        rig.log_text()
    );
    let init = rig.wait_line("system/init", |v| {
        v["type"] == "system" && v["subtype"] == "init"
    });
    assert_eq!(init["permissionMode"], "bypassPermissions");
}

/// A steer while a tool runs is folded into the running turn: the next model request carries it
/// (as a system message), and the turn ends with one `result`.
#[test]
fn steer_during_a_tool_reaches_the_model_in_the_same_turn() {
    let mut rig = Rig::new(
        Script::new([
            bash("sleep 3; echo slept > slept.txt"),
            Step::text("steered"),
        ]),
        "work slowly",
    );
    rig.start("auto");
    rig.wait_line("the tool call", |v| {
        v["type"] == "assistant" && v["message"]["content"][0]["type"] == "tool_use"
    });
    let out = rig
        .mailbox
        .request(Kind::Steer, body::text("STEER: use the blue file"), LONG)
        .unwrap();
    assert_eq!(out, Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0);
    let reqs = rig.fake.requests();
    assert_eq!(reqs.len(), 2, "one follow-up request");
    assert!(
        reqs[1].all_text().contains("STEER: use the blue file"),
        "the model saw the steer"
    );
    assert_eq!(rig.lines_of("result").len(), 1, "folded into one turn");
    assert_eq!(
        rig.lines_of("result")[0]["user_message_uuids"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// A steer while the model streams is queued by the CLI: the first answer finishes, then the
/// steer runs as a further turn of the same process, and the driver waits for it.
#[test]
fn steer_during_streaming_runs_next_and_the_driver_waits_for_it() {
    let mut rig = Rig::new(
        Script::new([
            Step::slow_text(6, Duration::from_millis(400)),
            Step::text("after the steer"),
        ]),
        "talk slowly",
    );
    rig.start("ask");
    rig.fake.wait_for_requests(1, LONG).unwrap();
    let out = rig
        .mailbox
        .request(Kind::Steer, body::text("STEER: say it shorter"), LONG)
        .unwrap();
    assert_eq!(out, Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0);
    let results = rig.lines_of("result");
    assert_eq!(
        results.len(),
        2,
        "two results: the first answer and the steer's"
    );
    assert_eq!(results[1]["result"], "after the steer");
    let reqs = rig.fake.requests();
    assert_eq!(
        reqs[1].last_user_text().as_deref(),
        Some("STEER: say it shorter")
    );
    // Token totals are the process's: the second result counts both calls.
    assert_eq!(results[1]["hangar_process_usage"]["input_tokens"], 22);
}

#[test]
fn interrupt_ends_the_turn_with_130() {
    let mut rig = Rig::new(
        Script::new([Step::slow_text(20, Duration::from_millis(500))]),
        "talk for ten seconds",
    );
    rig.start("ask");
    rig.fake.wait_for_requests(1, LONG).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let t = Instant::now();
    assert_eq!(
        rig.mailbox
            .request(Kind::Interrupt, body::empty(), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 130);
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "the stream was cut, not waited out"
    );
    let result = rig.wait_type("result");
    assert_eq!(result["terminal_reason"], "aborted_streaming");
    assert_eq!(rig.wait_type("hangar.turn_end")["status"], 130);
    // The report: the answer to the prompt (#1) was stopped; nothing was queued.
    let report = rig.wait_type("hangar.interrupted");
    assert_eq!(report["answering"], json!([1]), "{report}");
    assert_eq!(report["queued"], json!([]), "{report}");
}

/// A steer sent while the model streams waits in Claude Code's queue; an interrupt then stops
/// the answer to the prompt, and the queued steer still runs: the report says so, and the turn
/// ends by the steer's answer (0), not as interrupted (issue 21: "result: success" followed by
/// "status 130" told nobody what happened).
#[test]
fn an_interrupt_with_a_steer_queued_reports_both_and_ends_by_the_steer() {
    let mut rig = Rig::new(
        Script::new([
            Step::slow_text(20, Duration::from_millis(300)),
            Step::text("answer to the steer"),
        ]),
        "talk for six seconds",
    );
    rig.start("ask");
    rig.fake.wait_for_requests(1, LONG).unwrap();
    rig.wait_line("the answer streams", |v| v["type"] == "stream_event");
    let steer = rig.send(Kind::Steer, body::text("and then this"));
    assert_eq!(rig.mailbox.wait(&steer, LONG).unwrap(), Outcome::Done);
    let interrupt = rig.send(Kind::Interrupt, body::empty());
    assert_eq!(rig.mailbox.wait(&interrupt, LONG).unwrap(), Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let report = rig.wait_type("hangar.interrupted");
    assert_eq!(report["seq"], interrupt.command.seq, "{report}");
    assert_eq!(report["answering"], json!([1]), "{report}");
    assert_eq!(report["queued"], json!([steer.command.seq]), "{report}");
    let results = rig.lines_of("result");
    assert_eq!(results[0]["terminal_reason"], "aborted_streaming");
    assert_eq!(results.last().unwrap()["result"], "answer to the steer");
    let end = rig.wait_type("hangar.turn_end");
    assert_eq!(end["status"], 0, "{end}");
    assert_eq!(end["handed_back"], json!([]), "{end}");
}

#[test]
fn an_interrupt_followed_by_a_message_is_not_130() {
    let mut rig = Rig::new(
        Script::new([
            Step::slow_text(20, Duration::from_millis(500)),
            Step::text("fresh answer"),
        ]),
        "talk for ten seconds",
    );
    rig.start("ask");
    rig.fake.wait_for_requests(1, LONG).unwrap();
    // Both land before the driver looks (it is held meanwhile), as when a person interrupts and
    // types at once; sent one after the other, the interrupted turn may end before the message
    // comes, and the message then starts the next turn instead (a race, not the case here).
    let driver = rig.driver_pid() as i32;
    unsafe { libc::kill(driver, libc::SIGSTOP) };
    let interrupt = rig.send(Kind::Interrupt, body::empty());
    let steer = rig.send(Kind::Steer, body::text("do this instead"));
    unsafe { libc::kill(driver, libc::SIGCONT) };
    assert_eq!(rig.mailbox.wait(&interrupt, LONG).unwrap(), Outcome::Done);
    assert_eq!(rig.mailbox.wait(&steer, LONG).unwrap(), Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0);
    assert_eq!(
        rig.lines_of("result").last().unwrap()["result"],
        "fresh answer"
    );
}

#[test]
fn a_harness_error_exits_1() {
    let err = || Step::error(400, "the scripted model refuses");
    let mut rig = Rig::new(Script::new([err()]), "anything");
    rig.start("ask");
    assert_eq!(rig.wait_exit(LONG), 1);
    assert_eq!(rig.wait_type("result")["is_error"], true);
}

#[test]
fn a_command_after_the_turn_ended_fails_at_once_and_comes_back() {
    let mut rig = Rig::new(Script::new([Step::text("short turn")]), "hello");
    rig.start("ask");
    assert_eq!(rig.wait_exit(LONG), 0);
    let t = Instant::now();
    let out = rig
        .mailbox
        .request(Kind::Steer, body::text("too late"), LONG)
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "no waiting for an ack: {:?}",
        t.elapsed()
    );
    match out {
        Outcome::Ended { handed_back } => assert_eq!(handed_back.text(), Some("too late")),
        other => panic!("{other:?}"),
    }
    assert!(!rig.mailbox.ctl().inbox().exists(), "in/ was renamed away");
}

/// S18: a steer that lands as the turn ends (the `result` is written, the driver has not yet
/// renamed `in/` away) is still carried out and continues the turn.
#[test]
fn a_steer_that_lands_as_the_turn_ends_continues_it() {
    let mut rig = Rig::new(
        Script::new([
            Step::slow_text(3, Duration::from_millis(150)),
            Step::text("continued"),
        ]),
        "say three words",
    );
    rig.start("ask");
    rig.fake.wait_for_requests(1, LONG).unwrap();
    let driver = rig.driver_pid() as i32;
    // Hold the driver while the CLI finishes its answer and writes the result into the pipe.
    unsafe { libc::kill(driver, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(2000));
    let late = rig.send(Kind::Steer, body::text("STEER: and one more"));
    unsafe { libc::kill(driver, libc::SIGCONT) };
    assert_eq!(rig.mailbox.wait(&late, LONG).unwrap(), Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0);
    let results = rig.lines_of("result");
    assert_eq!(
        results.len(),
        2,
        "the steer continued the turn:\n{}",
        rig.log_text()
    );
    assert_eq!(results[1]["result"], "continued");
    assert_eq!(
        rig.fake.requests()[1].last_user_text().as_deref(),
        Some("STEER: and one more")
    );
}

/// Ctrl-C in the turn's terminal (tmux) reaches only the driver, which interrupts the turn.
#[test]
fn ctrl_c_to_the_driver_interrupts_the_turn() {
    let mut rig = Rig::new(
        Script::new([Step::slow_text(20, Duration::from_millis(400))]),
        "talk",
    );
    rig.start("ask");
    rig.fake.wait_for_requests(1, LONG).unwrap();
    unsafe { libc::kill(rig.driver_pid() as i32, libc::SIGINT) };
    assert_eq!(rig.wait_exit(LONG), 130);
    assert_eq!(
        rig.wait_type("result")["terminal_reason"],
        "aborted_streaming"
    );
}

/// SIGTERM (the sandbox stopping) stops the harness too: no orphan is left.
#[test]
fn sigterm_to_the_driver_stops_the_harness_and_leaves_no_orphan() {
    let mut rig = Rig::new(
        Script::new([Step::slow_text(40, Duration::from_millis(400))]),
        "talk",
    );
    rig.start("ask");
    rig.fake.wait_for_requests(1, LONG).unwrap();
    let harness = rig.wait_type("hangar.started")["harness_pid"]
        .as_i64()
        .unwrap() as i32;
    unsafe { libc::kill(rig.driver_pid() as i32, libc::SIGTERM) };
    assert_eq!(rig.wait_exit(LONG), 1);
    let end = rig.wait_type("hangar.turn_end");
    assert_eq!(end["reason"], "harness_exited");
    assert!(
        rig.lines_of("hangar.warning")
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("SIGTERM"))
    );
    // The harness's process group is empty.
    assert_eq!(
        unsafe { libc::kill(-harness, 0) },
        -1,
        "the harness's group still has processes"
    );
}
