//! The job's check with Claude Code (S22): a Stop hook in the turn's own settings file; its
//! failure goes back to the model in the same turn, at most `max_verify_rounds` times.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::time::Duration;

use common::{LONG, Rig, assert_root, give_to_agent};
use hangar_mailbox::outbox::Outcome;
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_testkit::{Script, Step};
use serde_json::json;

const CHECK: &str = "if [ -f fixed.txt ]; then echo all good; else echo CHECK-FAILED: fixed.txt is missing; exit 1; fi";

fn verify_args<'a>(cmd: &'a str, rounds: &'a str) -> [&'a str; 4] {
    ["--verify", cmd, "--max-verify-rounds", rounds]
}

#[test]
fn a_check_that_fails_twice_then_passes_after_feedback() {
    let script = Script::new([
        Step::text("I am done"),
        Step::text("still done, I think"),
        Step::tool(
            "Bash",
            json!({"command": "touch fixed.txt", "description": "fix it"}),
        ),
        Step::text("fixed now"),
    ]);
    let mut rig = Rig::new(script, "do the job");
    let cmd = rig.driver_command("auto", &verify_args(CHECK, "3"));
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0);
    let reqs = rig.fake.requests();
    assert_eq!(reqs.len(), 4);
    assert!(
        reqs[1]
            .all_text()
            .contains("CHECK-FAILED: fixed.txt is missing"),
        "the model got the check's output"
    );
    assert!(reqs[2].all_text().contains("CHECK-FAILED"));
    let outcomes: Vec<String> = rig
        .lines_of("hangar.verify")
        .iter()
        .map(|v| v["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(outcomes, ["feedback", "feedback", "passed"]);
    let end = rig.wait_type("hangar.turn_end");
    assert_eq!(
        (end["verify"].as_str(), end["verify_rounds"].as_u64()),
        (Some("passed"), Some(2))
    );
    assert_eq!(rig.lines_of("result").len(), 1, "all in the same turn");
    // The started line names the Stop hook with its script's digest, for the manifest.
    let started = rig.wait_type("hangar.started");
    let hook = &started["hooks"][0];
    let name = hook["name"].as_str().unwrap();
    assert!(
        name.starts_with("Stop: ") && name.ends_with("stop-hook.sh"),
        "{started}"
    );
    assert_eq!(hook["digest"].as_str().unwrap().len(), 64, "{started}");
    let argv = started["argv"].as_array().unwrap();
    assert!(argv.iter().any(|a| a == "--settings"), "{started}");
}

#[test]
fn a_check_that_always_fails_stops_after_max_rounds() {
    let script = Script::new([
        Step::text("done"),
        Step::text("done again"),
        Step::text("really done"),
    ]);
    let mut rig = Rig::new(script, "do the job");
    let cmd = rig.driver_command("auto", &verify_args("echo nope; exit 7", "2"));
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 1, "a failed check fails the turn");
    assert_eq!(
        rig.fake.requests().len(),
        3,
        "two rounds of feedback, then no more"
    );
    let outcomes: Vec<String> = rig
        .lines_of("hangar.verify")
        .iter()
        .map(|v| v["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(outcomes, ["feedback", "feedback", "failed"]);
    assert_eq!(rig.lines_of("hangar.verify")[2]["exit_code"], 7);
    let end = rig.wait_type("hangar.turn_end");
    assert_eq!(
        (end["verify"].as_str(), end["verify_rounds"].as_u64()),
        (Some("failed"), Some(2))
    );
}

#[test]
fn no_check_after_an_interrupt_that_brought_no_message() {
    let mut rig = Rig::new(
        Script::new([Step::slow_text(20, Duration::from_millis(400))]),
        "talk",
    );
    let cmd = rig.driver_command(
        "auto",
        &verify_args("echo ran > check-ran.txt; exit 1", "3"),
    );
    rig.start_with(cmd);
    rig.fake.wait_for_requests(1, LONG).unwrap();
    assert_eq!(
        rig.mailbox
            .request(Kind::Interrupt, body::empty(), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 130);
    assert!(rig.lines_of("hangar.verify").is_empty());
    assert!(!rig.work.path().join("check-ran.txt").exists());
    assert_eq!(rig.wait_type("hangar.turn_end")["verify"], "not_run");
}

#[test]
fn under_the_uid_split_the_check_runs_as_the_agent() {
    assert_root();
    let mut rig = Rig::new(
        Script::new([Step::text("done"), Step::text("ok")]),
        "do the job",
    );
    std::fs::create_dir_all(rig.config_dir()).unwrap();
    give_to_agent(&[rig.work.path(), rig.user_home.path()]);
    let home = rig.user_home.path().to_str().unwrap().to_owned();
    let mut args = verify_args("echo CHECK-UID=$(id -u); exit 1", "1").to_vec();
    args.extend([
        "--agent-uid",
        "65534",
        "--agent-gid",
        "65534",
        "--agent-home",
        &home,
    ]);
    let cmd = rig.driver_command("auto", &args);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 1);
    assert!(
        rig.fake.requests()[1]
            .all_text()
            .contains("CHECK-UID=65534"),
        "the check ran as the agent"
    );
    let first = &rig.lines_of("hangar.verify")[0];
    assert_eq!(first["outcome"], "feedback");
    assert!(
        first["output_tail"]
            .as_str()
            .unwrap()
            .contains("CHECK-UID=65534"),
        "{first}"
    );
}
