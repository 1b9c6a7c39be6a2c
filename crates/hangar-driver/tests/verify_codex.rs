//! The job's check with Codex (S22): the driver runs it when a turn completes and sends a
//! failure back into the same thread as the next message, at most `max_verify_rounds` times.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::time::Duration;

use common::{LONG, Rig, assert_root, give_to_agent};
use hangar_mailbox::outbox::Outcome;
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_testkit::{Script, Step};

const CHECK: &str = "if [ -f fixed.txt ]; then echo all good; else echo CHECK-FAILED: fixed.txt is missing; exit 1; fi";

fn outcomes(rig: &Rig) -> Vec<String> {
    rig.lines_of("hangar.verify")
        .iter()
        .map(|v| v["outcome"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_check_that_fails_twice_then_passes_after_feedback() {
    let script = Script::new([
        Step::text("I am done"),
        Step::text("still done, I think"),
        Step::exec("touch fixed.txt"),
        Step::text("fixed now"),
    ]);
    let mut rig = Rig::codex(script, "do the job");
    let cmd = rig.codex_command("auto", &["--verify", CHECK, "--max-verify-rounds", "3"]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let reqs = rig.fake.requests();
    assert_eq!(reqs.len(), 4);
    assert!(
        reqs[1]
            .last_user_text()
            .unwrap()
            .contains("CHECK-FAILED: fixed.txt is missing"),
        "the model got the output"
    );
    assert_eq!(reqs[1].thread_id(), reqs[0].thread_id(), "the same thread");
    assert_eq!(outcomes(&rig), ["feedback", "feedback", "passed"]);
    let end = rig.wait_type("hangar.turn_end");
    assert_eq!(
        (end["verify"].as_str(), end["verify_rounds"].as_u64()),
        (Some("passed"), Some(2))
    );
}

#[test]
fn a_check_that_always_fails_stops_after_max_rounds() {
    let script = Script::new([
        Step::text("done"),
        Step::text("done again"),
        Step::text("really done"),
    ]);
    let mut rig = Rig::codex(script, "do the job");
    let cmd = rig.codex_command(
        "auto",
        &["--verify", "echo nope; exit 7", "--max-verify-rounds", "2"],
    );
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 1, "log:\n{}", rig.log_text());
    assert_eq!(rig.fake.requests().len(), 3);
    assert_eq!(outcomes(&rig), ["feedback", "feedback", "failed"]);
    let end = rig.wait_type("hangar.turn_end");
    assert_eq!(
        (end["verify"].as_str(), end["verify_rounds"].as_u64()),
        (Some("failed"), Some(2))
    );
}

#[test]
fn no_check_after_an_interrupt_that_brought_no_message() {
    let mut rig = Rig::codex(
        Script::new([Step::slow_text(20, Duration::from_millis(400))]),
        "talk",
    );
    let cmd = rig.codex_command("auto", &["--verify", "echo ran > check-ran.txt; exit 1"]);
    rig.start_with(cmd);
    rig.fake.wait_for_requests(1, LONG).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        rig.mailbox
            .request(Kind::Interrupt, body::empty(), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 130, "log:\n{}", rig.log_text());
    assert!(outcomes(&rig).is_empty());
    assert!(!rig.work.path().join("check-ran.txt").exists());
    assert_eq!(rig.wait_type("hangar.turn_end")["verify"], "not_run");
}

#[test]
fn under_the_uid_split_the_check_runs_as_the_agent() {
    assert_root();
    let mut rig = Rig::codex(
        Script::new([Step::text("done"), Step::text("ok")]),
        "do the job",
    );
    let home = rig.user_home.path().to_str().unwrap().to_owned();
    let mut cmd = rig.codex_command(
        "auto",
        &[
            "--verify",
            "echo CHECK-UID=$(id -u); exit 1",
            "--max-verify-rounds",
            "1",
            "--agent-uid",
            "65534",
            "--agent-gid",
            "65534",
            "--agent-home",
            &home,
        ],
    );
    // codex_command made CODEX_HOME; the agent must own its folders.
    give_to_agent(&[rig.user_home.path(), rig.work.path()]);
    cmd.env("HOME", rig.user_home.path());
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 1, "log:\n{}", rig.log_text());
    assert!(
        rig.fake.requests()[1]
            .last_user_text()
            .unwrap()
            .contains("CHECK-UID=65534"),
        "the check ran as the agent"
    );
    assert!(
        rig.lines_of("hangar.verify")[0]["output_tail"]
            .as_str()
            .unwrap()
            .contains("CHECK-UID=65534")
    );
}
