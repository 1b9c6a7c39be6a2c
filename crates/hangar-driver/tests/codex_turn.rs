//! One turn of the real Codex (app-server) under the driver, against the scripted Responses
//! model: approvals, `auto`, steering, interrupting (and the command left running), resume and
//! fork, the translated run log, and no socket outside loopback.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::time::Duration;

use common::{LONG, Rig};
use hangar_mailbox::outbox::Outcome;
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_testkit::{Script, Step};
use serde_json::json;

#[test]
fn auto_runs_the_command_without_asking() {
    let mut rig = Rig::codex(
        Script::new([Step::exec("echo hi > made.txt"), Step::text("made it")]),
        "make a file",
    );
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    assert_eq!(
        std::fs::read_to_string(rig.work.path().join("made.txt")).unwrap(),
        "hi\n"
    );
    assert!(rig.lines_of("hangar.approval").is_empty());
    let types: Vec<String> = rig
        .log_lines()
        .iter()
        .map(|v| v["type"].as_str().unwrap().to_owned())
        .collect();
    assert!(types.contains(&"thread.started".to_owned()), "{types:?}");
    let done = rig.wait_type("turn.completed");
    assert!(done["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let msg = rig.wait_line("agent message", |v| {
        v["type"] == "item.completed" && v["item"]["type"] == "agent_message"
    });
    assert_eq!(msg["item"]["text"], "made it");
    let reqs = rig.fake.requests();
    assert_eq!(reqs[1].tool_outputs().len(), 1);
}

#[test]
fn an_accepted_command_approval_runs_the_command() {
    let mut rig = Rig::codex(
        Script::new([Step::exec("echo hi > made.txt"), Step::text("made it")]),
        "make a file",
    );
    let cmd = rig.codex_command("ask", &[]);
    rig.start_with(cmd);
    let asked = rig.wait_type("hangar.approval");
    assert_eq!(asked["tool_name"], "commandExecution");
    assert!(
        asked["input"]["command"]
            .as_str()
            .unwrap()
            .contains("echo hi > made.txt")
    );
    assert!(!rig.work.path().join("made.txt").exists());
    let id = asked["request_id"].as_str().unwrap();
    assert_eq!(
        rig.mailbox
            .request(Kind::Approve, body::approve(id, None), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    assert!(rig.work.path().join("made.txt").exists());
    // Answered once; a second answer is refused.
    assert!(matches!(
        rig.mailbox
            .request(Kind::Approve, body::approve(id, None), LONG)
            .unwrap(),
        Outcome::Ended { .. } | Outcome::Refused(_)
    ));
}

#[test]
fn a_declined_command_does_not_run_and_the_agent_hears_why() {
    let mut rig = Rig::codex(
        Script::new([
            Step::exec("echo hi > made.txt"),
            Step::text("ok, I won't"),
            Step::text("understood"),
        ]),
        "make a file",
    );
    let cmd = rig.codex_command("ask", &[]);
    rig.start_with(cmd);
    let id = rig.wait_approval();
    let out = rig
        .mailbox
        .request(Kind::Deny, body::deny(&id, Some("not in this repo")), LONG)
        .unwrap();
    assert_eq!(out, Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    assert!(!rig.work.path().join("made.txt").exists());
    let all: String = rig.fake.requests().iter().map(|r| r.all_text()).collect();
    assert!(all.contains("rejected by user"), "Codex told the model");
    assert!(
        all.contains("not in this repo"),
        "the reason reached the model"
    );
    let done = rig.wait_line("declined item", |v| {
        v["type"] == "item.completed" && v["item"]["type"] == "command_execution"
    });
    assert_eq!(done["item"]["status"], "declined");
}

#[test]
fn a_file_change_approval_applies_the_patch() {
    let patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch";
    let mut rig = Rig::codex(
        Script::new([Step::patch(patch), Step::text("patched")]),
        "add a file",
    );
    let cmd = rig.codex_command("ask", &[]);
    rig.start_with(cmd);
    let asked = rig.wait_type("hangar.approval");
    assert_eq!(asked["tool_name"], "fileChange");
    assert!(
        asked["input"]["changes"].to_string().contains("hello.txt"),
        "{asked}"
    );
    let id = asked["request_id"].as_str().unwrap();
    assert_eq!(
        rig.mailbox
            .request(Kind::Approve, body::approve(id, None), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    assert_eq!(
        std::fs::read_to_string(rig.work.path().join("hello.txt")).unwrap(),
        "hello from codex\n"
    );
    let change = rig.wait_line("file change", |v| {
        v["type"] == "item.completed" && v["item"]["type"] == "file_change"
    });
    assert_eq!(change["item"]["changes"][0]["kind"], "add");
}

#[test]
fn a_changed_input_is_refused_for_codex() {
    let mut rig = Rig::codex(
        Script::new([Step::exec("echo hi > made.txt"), Step::text("ok")]),
        "make a file",
    );
    let cmd = rig.codex_command("ask", &[]);
    rig.start_with(cmd);
    let id = rig.wait_approval();
    let out = rig
        .mailbox
        .request(
            Kind::Approve,
            body::approve(&id, Some(json!({"command": "rm -rf /"}))),
            LONG,
        )
        .unwrap();
    assert!(
        matches!(&out, Outcome::Refused(r) if r.contains("cannot run a changed command")),
        "{out:?}"
    );
    assert!(!rig.work.path().join("made.txt").exists());
    assert_eq!(
        rig.mailbox
            .request(Kind::Approve, body::approve(&id, None), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 0);
}

#[test]
fn a_steer_mid_turn_reaches_the_model() {
    let mut rig = Rig::codex(
        Script::new([
            Step::slow_text(10, Duration::from_millis(400)),
            Step::text("steered"),
        ]),
        "talk slowly",
    );
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    rig.fake.wait_for_requests(1, LONG).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        rig.mailbox
            .request(Kind::Steer, body::text("STEER: shorter please"), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let reqs = rig.fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[1].all_text().contains("STEER: shorter please"));
    assert_eq!(
        rig.lines_of("turn.completed").len(),
        1,
        "the steer folded into the same turn"
    );
}

/// Codex killed while it holds a steer it accepted but has not begun (the turn waits on an
/// approval, so the steer waits in Codex): the turn ends `harness_exited` handing back the steer
/// and not the prompt (which Codex began), and the next turn, resuming the thread with it, gives
/// the model the steer exactly once.
#[test]
fn a_steer_codex_never_began_is_handed_to_the_next_turn_once() {
    const STEER: &str = "STEER-NEVER-BEGUN please also add tests";
    let mut rig = Rig::codex(
        Script::new([
            Step::exec("echo hi > made.txt"),
            Step::text("carrying on with the steer"),
        ]),
        "make a file",
    );
    let cmd = rig.codex_command("ask", &[]);
    rig.start_with(cmd);
    rig.wait_approval();
    let steer = rig.send(Kind::Steer, body::text(STEER));
    assert_eq!(rig.mailbox.wait(&steer, LONG).unwrap(), Outcome::Done);
    // Codex answers the `turn/steer` at once and keeps the text until the approval is settled.
    std::thread::sleep(Duration::from_millis(500));
    let thread = rig.wait_type("thread.started")["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let harness = rig.wait_type("hangar.started")["harness_pid"]
        .as_i64()
        .unwrap() as i32;
    // The harness's process group: the npm wrapper and the Codex binary under it.
    unsafe { libc::kill(-harness, libc::SIGKILL) };
    assert_eq!(rig.wait_exit(LONG), 1, "log:\n{}", rig.log_text());
    let end = rig.wait_type("hangar.turn_end");
    assert_eq!(end["reason"], "harness_exited", "{end}");
    assert_eq!(
        end["handed_back"],
        json!([steer.command.seq]),
        "the steer, and not the prompt Codex began: {end}"
    );
    assert!(
        !rig.fake
            .requests()
            .iter()
            .any(|r| r.all_text().contains(STEER)),
        "the model never had the steer in the killed turn"
    );
    let before = rig.fake.requests().len();

    // The next turn starts with the handed-back message, as the control plane does.
    rig.next_run(STEER);
    let cmd = rig.codex_command("ask", &["--resume", &thread]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let after = rig.fake.requests();
    assert_eq!(
        after.len(),
        before + 1,
        "one model request in the next turn"
    );
    let text = after[before].all_text();
    assert_eq!(text.matches(STEER).count(), 1, "exactly once: {text}");
}

#[test]
fn interrupt_exits_130_and_the_running_command_is_gone() {
    let mut rig = Rig::codex(
        Script::new([
            Step::exec_with(
                "sleep 4; echo late > slept.txt",
                json!({"yield_time_ms": 30000}),
            ),
            Step::text("never"),
        ]),
        "sleep",
    );
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    rig.wait_line("the command started", |v| {
        v["type"] == "item.started" && v["item"]["type"] == "command_execution"
    });
    assert_eq!(
        rig.mailbox
            .request(Kind::Interrupt, body::empty(), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 130, "log:\n{}", rig.log_text());
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        !rig.work.path().join("slept.txt").exists(),
        "the command was stopped, not left to finish"
    );
    assert!(
        rig.lines_of("hangar.warning")
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("stopped")),
        "{}",
        rig.log_text()
    );
}

/// Codex drops a steer it took into a turn but had not begun when that turn is interrupted
/// (the steer was acked `done`, and the model never had it). The driver reports it as queued
/// and passes it on again as a new turn, as Claude Code runs its queued messages: the model
/// gets it once and the turn ends by its answer.
#[test]
fn a_steer_codex_had_not_begun_still_runs_after_an_interrupt() {
    const STEER: &str = "STEER-QUEUED then do this";
    let mut rig = Rig::codex(
        Script::new([
            Step::exec_with(
                "sleep 4; echo late > slept.txt",
                json!({"yield_time_ms": 30000}),
            ),
            Step::text("did the steer"),
        ]),
        "sleep",
    );
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    rig.wait_line("the command started", |v| {
        v["type"] == "item.started" && v["item"]["type"] == "command_execution"
    });
    let steer = rig.send(Kind::Steer, body::text(STEER));
    assert_eq!(rig.mailbox.wait(&steer, LONG).unwrap(), Outcome::Done);
    let interrupt = rig.send(Kind::Interrupt, body::empty());
    assert_eq!(rig.mailbox.wait(&interrupt, LONG).unwrap(), Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let report = rig.wait_type("hangar.interrupted");
    assert_eq!(report["answering"], json!([1]), "{report}");
    assert_eq!(report["queued"], json!([steer.command.seq]), "{report}");
    let reqs = rig.fake.requests();
    let with_steer: Vec<_> = reqs
        .iter()
        .filter(|r| r.last_user_text().as_deref() == Some(STEER))
        .collect();
    assert_eq!(with_steer.len(), 1, "the model got the steer once");
    assert_eq!(
        rig.lines_of("item.completed")
            .iter()
            .filter(|i| i["item"]["type"] == "agent_message")
            .map(|i| i["item"]["text"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>(),
        ["did the steer"]
    );
    assert_eq!(rig.wait_type("hangar.turn_end")["handed_back"], json!([]));
    std::thread::sleep(Duration::from_secs(4));
    assert!(!rig.work.path().join("slept.txt").exists());
}

#[test]
fn an_interrupt_then_a_message_goes_on_in_a_new_turn() {
    let mut rig = Rig::codex(
        Script::new([
            Step::exec_with(
                "sleep 4; echo late > slept.txt",
                json!({"yield_time_ms": 30000}),
            ),
            Step::text("starting over"),
        ]),
        "sleep",
    );
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    rig.wait_line("the command started", |v| {
        v["type"] == "item.started" && v["item"]["type"] == "command_execution"
    });
    // The interrupt and the new message land together (the driver held still meanwhile), as
    // when a person interrupts and types at once.
    let driver = rig.driver_pid() as i32;
    unsafe { libc::kill(driver, libc::SIGSTOP) };
    let interrupt = rig.send(Kind::Interrupt, body::empty());
    let steer = rig.send(Kind::Steer, body::text("do something else"));
    unsafe { libc::kill(driver, libc::SIGCONT) };
    assert_eq!(rig.mailbox.wait(&interrupt, LONG).unwrap(), Outcome::Done);
    assert_eq!(rig.mailbox.wait(&steer, LONG).unwrap(), Outcome::Done);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    assert_eq!(
        rig.fake.requests()[1].last_user_text().as_deref(),
        Some("do something else")
    );
    std::thread::sleep(Duration::from_secs(4));
    assert!(!rig.work.path().join("slept.txt").exists());
}

#[test]
fn a_thread_resumes_and_forks() {
    let mut rig = Rig::codex(
        Script::new([
            Step::text("first answer"),
            Step::text("second answer"),
            Step::text("forked answer"),
        ]),
        "FIRST-PROMPT",
    );
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let thread = rig.wait_type("thread.started")["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();

    rig.next_run("SECOND-PROMPT");
    let cmd = rig.codex_command("auto", &["--resume", &thread]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    assert_eq!(
        rig.wait_type("thread.started")["thread_id"],
        thread.as_str(),
        "resumed, same thread"
    );
    let second = &rig.fake.requests()[1];
    assert!(
        second.all_text().contains("FIRST-PROMPT") && second.all_text().contains("first answer"),
        "history sent"
    );

    rig.next_run("FORK-PROMPT");
    let cmd = rig.codex_command("auto", &["--fork", &thread]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let forked = rig.wait_type("thread.started")["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(forked, thread, "a fork is a new thread");
    let third = &rig.fake.requests()[2];
    assert!(third.all_text().contains("SECOND-PROMPT") && third.all_text().contains("FORK-PROMPT"));
}

#[test]
fn a_model_server_that_never_answers_is_given_up_on() {
    // A port nobody listens on (loopback): Codex retries forever; the driver does not.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut rig = Rig::codex(Script::new([]), "hello");
    let base = rig.codex_command("auto", &[]);
    // The same command line, with the provider moved to the dead port and a 3 s timeout.
    let mut cmd = std::process::Command::new(base.get_program());
    for a in base.get_args().map(|a| a.to_string_lossy().into_owned()) {
        cmd.arg(match a.as_str() {
            _ if a.contains("base_url=") => {
                format!("model_providers.hangar-fake.base_url=\"http://127.0.0.1:{port}/v1\"")
            }
            "20" => "3".to_owned(),
            _ => a,
        });
    }
    cmd.env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let t = std::time::Instant::now();
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 1, "log:\n{}", rig.log_text());
    assert!(t.elapsed() < Duration::from_secs(40));
    assert!(
        rig.lines_of("hangar.error")
            .iter()
            .any(|e| e["message"].as_str().unwrap().contains("has not answered")),
        "{}",
        rig.log_text()
    );
}
