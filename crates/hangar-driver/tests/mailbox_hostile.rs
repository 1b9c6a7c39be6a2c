//! Hostile commands against a live turn with a permission request pending: forged, replayed,
//! truncated, oversized, wrong-run, unknown-kind and answer-for-the-agent commands are refused,
//! logged, and nothing is executed; a forged ack is ignored by the client.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use common::{LONG, Rig};
use hangar_mailbox::outbox::{Outcome, Sent};
use hangar_protocol::command::body;
use hangar_protocol::{Ack, AckStatus, Command, Kind, RunKey};
use hangar_testkit::{Script, Step};
use serde_json::json;

fn rig_with_pending_approval() -> (Rig, String) {
    let script = Script::new([
        Step::tool(
            "Bash",
            json!({"command": "echo hi > made.txt", "description": "write"}),
        ),
        Step::text("done"),
    ]);
    let mut rig = Rig::new(script, "make a file");
    rig.start("ask");
    let id = rig.wait_approval();
    (rig, id)
}

/// Delivers `cmd`'s bytes (optionally altered) and expects a signed refusal with `code`.
fn expect_refused(rig: &Rig, name: &str, bytes: &[u8], seq: u64, nonce: &str, code: &str) {
    let ack = rig.deliver_raw(name, bytes, seq, nonce);
    assert_eq!(ack.status, AckStatus::Refused, "{name}: {ack:?}");
    let line = rig.wait_line(code, |v| v["type"] == "hangar.refused" && v["name"] == name);
    assert_eq!(line["code"], code, "{name}: {line}");
}

fn assert_nothing_executed(rig: &Rig) {
    assert!(
        !rig.work.path().join("made.txt").exists(),
        "the tool did not run"
    );
    assert!(
        rig.lines_of("hangar.approval_answered").is_empty(),
        "the request is still pending"
    );
    assert_eq!(rig.fake.requests().len(), 1, "no message reached the model");
}

#[test]
fn hostile_commands_are_refused_logged_and_not_executed() {
    let (rig, id) = rig_with_pending_approval();
    let key = rig.mailbox.key().clone();
    let run = rig.run.clone();
    let approve = body::approve(&id, None);

    // Forged: sealed with another key.
    let forged = Command::seal(
        &RunKey::from_bytes([9; 32]),
        &run,
        100,
        [1; 16],
        Kind::Approve,
        approve.clone(),
    );
    expect_refused(
        &rig,
        "forged.cmd",
        &forged.to_bytes(),
        100,
        &forged.nonce,
        "bad_mac",
    );

    // Unsigned.
    let mut unsigned = Command::seal(&key, &run, 101, [2; 16], Kind::Approve, approve.clone());
    unsigned.mac.clear();
    expect_refused(&rig, "unsigned.cmd", &unsigned.to_bytes(), 0, "", "no_mac");

    // Truncated: a valid approve cut short.
    let valid = Command::seal(&key, &run, 102, [3; 16], Kind::Approve, approve.clone());
    let bytes = valid.to_bytes();
    expect_refused(
        &rig,
        "truncated.cmd",
        &bytes[..bytes.len() - 20],
        0,
        "",
        "not_json",
    );

    // Oversized: over 1 MiB (valid JSON, signed, but too large to read).
    let big = Command::seal(
        &key,
        &run,
        103,
        [4; 16],
        Kind::Steer,
        body::text(&"x".repeat(1024 * 1024)),
    );
    expect_refused(&rig, "oversized.cmd", &big.to_bytes(), 0, "", "too_large");

    // Wrong run: right key, another run id.
    let other = Command::seal(
        &key,
        "run-other",
        104,
        [5; 16],
        Kind::Approve,
        approve.clone(),
    );
    expect_refused(
        &rig,
        "wrong-run.cmd",
        &other.to_bytes(),
        104,
        &other.nonce,
        "wrong_run",
    );

    // Unknown kind, properly signed.
    let shell = Command::seal_any_kind(
        &key,
        &run,
        105,
        [6; 16],
        "shell",
        json!({"command": "echo pwned > made.txt"}),
    );
    expect_refused(
        &rig,
        "unknown-kind.cmd",
        &shell.to_bytes(),
        105,
        &shell.nonce,
        "unknown_kind",
    );

    // Replay: the run's first command (the prompt, seq 1) delivered again under a new name.
    let first = std::fs::read_dir(rig.mailbox.ctl().acks()).unwrap().count();
    assert!(first > 0);
    let replayed = Command::seal(&key, &run, 1, [0xaa; 16], Kind::Prompt, body::text("again"));
    expect_refused(
        &rig,
        "replay-seq.cmd",
        &replayed.to_bytes(),
        1,
        &replayed.nonce,
        "replay",
    );

    // An approve for a request id the driver never issued (the agent answering for the person).
    let made_up = Command::seal(
        &key,
        &run,
        106,
        [7; 16],
        Kind::Approve,
        body::approve("req-the-agent-made-up", None),
    );
    expect_refused(
        &rig,
        "made-up.cmd",
        &made_up.to_bytes(),
        106,
        &made_up.nonce,
        "unknown_request",
    );

    // Not JSON at all.
    expect_refused(&rig, "garbage.cmd", b"\x00\x01 rm -rf /", 0, "", "not_json");

    assert_nothing_executed(&rig);
    assert_eq!(rig.lines_of("hangar.refused").len(), 9);

    // The real answer still works, exactly once.
    let real = Command::seal(&key, &run, 200, [8; 16], Kind::Approve, approve.clone());
    let ack = rig.deliver_raw("real.cmd", &real.to_bytes(), 200, &real.nonce);
    assert_eq!(ack.status, AckStatus::Done);
    // The same bytes again: a replay.
    expect_refused(
        &rig,
        "real-again.cmd",
        &real.to_bytes(),
        200,
        &real.nonce,
        "replay",
    );
    // A fresh, valid approve for the answered request.
    let again = Command::seal(&key, &run, 201, [10; 16], Kind::Approve, approve);
    expect_refused(
        &rig,
        "answered.cmd",
        &again.to_bytes(),
        201,
        &again.nonce,
        "already_answered",
    );
    let mut rig = rig;
    assert_eq!(rig.wait_exit(LONG), 0);
    assert!(rig.work.path().join("made.txt").exists());
    assert_eq!(rig.lines_of("hangar.approval_answered").len(), 1);
}

#[test]
fn the_client_ignores_a_forged_ack_and_takes_the_drivers() {
    let (rig, _id) = rig_with_pending_approval();
    let key = rig.mailbox.key().clone();
    // A deny for a request that does not exist: the driver's real answer is a refusal.
    let cmd = Command::seal(
        &key,
        &rig.run,
        50,
        [0x50; 16],
        Kind::Deny,
        body::deny("not-a-request", None),
    );
    let name = "0000000050-forged-ack.cmd".to_owned();
    // Before it lands, someone without the key plants a "done" answer for it.
    let forged = Ack::seal(
        &RunKey::from_bytes([1; 32]),
        &rig.run,
        &name,
        50,
        &cmd.nonce,
        AckStatus::Done,
        "",
    );
    std::fs::write(rig.mailbox.ctl().ack_for(&name), forged.to_bytes()).unwrap();
    assert!(rig.mailbox.deliver_bytes(&name, &cmd.to_bytes()).unwrap());
    let sent = Sent { name, command: cmd };
    match rig.mailbox.wait(&sent, LONG).unwrap() {
        Outcome::Refused(reason) => assert!(reason.contains("not-a-request"), "{reason}"),
        other => panic!("the forged ack was believed: {other:?}"),
    }
}

/// Replaces the control folder's `name/` with a symbolic link to `elsewhere`, the real folder
/// kept beside it (as an agent of the driver's own uid can).
fn swap_for_link(rig: &Rig, name: &str, elsewhere: &std::path::Path) {
    let ctl = rig.ctl();
    std::fs::rename(ctl.join(name), ctl.join(format!("{name}.real"))).unwrap();
    std::os::unix::fs::symlink(elsewhere, ctl.join(name)).unwrap();
}

fn files_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// An `acks/` or `in/` that is a link when the driver starts: refused with exit status 2 and a
/// `hangar.error` saying which folder and what it is; no harness starts, nothing is written or
/// read through the link.
#[test]
fn a_mailbox_folder_that_is_a_link_at_the_start_is_refused() {
    for name in ["acks", "in"] {
        let mut rig = Rig::new(Script::new([Step::text("hi")]), "hello");
        let elsewhere = tempfile::tempdir().unwrap();
        if name == "in" {
            // The prompt waits in the link's target, as if the agent fed it.
            std::fs::rename(rig.ctl().join("in"), elsewhere.path().join("in-prompts")).unwrap();
            std::os::unix::fs::symlink(elsewhere.path().join("in-prompts"), rig.ctl().join("in"))
                .unwrap();
        } else {
            swap_for_link(&rig, name, elsewhere.path());
        }
        rig.start("ask");
        assert_eq!(rig.wait_exit(LONG), 2, "{name}: {}", rig.log_text());
        let error = rig.wait_type("hangar.error");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("{name}/ is a symbolic link, not a folder")),
            "{name}: {message}"
        );
        assert!(
            rig.lines_of("hangar.started").is_empty(),
            "{name}: no harness"
        );
        assert!(rig.fake.requests().is_empty(), "{name}: no model request");
        if name == "acks" {
            assert!(
                files_in(elsewhere.path()).is_empty(),
                "no ack through the link"
            );
        } else {
            assert_eq!(
                files_in(&elsewhere.path().join("in-prompts")).len(),
                1,
                "the prompt behind the link was not taken"
            );
        }
    }
}

/// `acks/` swapped for a link while a permission request waits: the driver notices on its next
/// look at the mailbox, writes no ack through the link, carries out nothing more, says why in a
/// `hangar.error` and ends the turn with status 1.
#[test]
fn acks_swapped_for_a_link_mid_turn_stops_the_turn() {
    let (mut rig, id) = rig_with_pending_approval();
    let elsewhere = tempfile::tempdir().unwrap();
    swap_for_link(&rig, "acks", elsewhere.path());
    rig.send(Kind::Approve, body::approve(&id, None));
    assert_eq!(rig.wait_exit(LONG), 1, "{}", rig.log_text());
    let error = rig.wait_type("hangar.error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("acks/ was replaced by a symbolic link"),
        "{error}"
    );
    assert!(
        files_in(elsewhere.path()).is_empty(),
        "no ack through the link"
    );
    assert!(
        !rig.work.path().join("made.txt").exists(),
        "the tool did not run"
    );
    assert!(rig.lines_of("hangar.approval_answered").is_empty());
    assert_eq!(rig.lines_of("hangar.turn_end")[0]["status"], 1);
}

/// `in/` swapped for a link to a folder of the agent's while a permission request waits: a
/// command landing there (through the link) is never taken, and the turn stops saying why.
#[test]
fn in_swapped_for_a_link_mid_turn_stops_the_turn() {
    let (mut rig, id) = rig_with_pending_approval();
    let elsewhere = tempfile::tempdir().unwrap();
    swap_for_link(&rig, "in", elsewhere.path());
    rig.send(Kind::Approve, body::approve(&id, None));
    assert_eq!(rig.wait_exit(LONG), 1, "{}", rig.log_text());
    let error = rig.wait_type("hangar.error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("in/ was replaced by a symbolic link"),
        "{error}"
    );
    assert_eq!(
        files_in(elsewhere.path()).len(),
        1,
        "the approve was not taken"
    );
    assert!(
        !rig.work.path().join("made.txt").exists(),
        "the tool did not run"
    );
    assert!(rig.lines_of("hangar.approval_answered").is_empty());
}
