//! What the agent can and cannot reach: the key is gone before the harness runs and never in a
//! child's argv or environment; the harness gets only allow-listed variables; under the uid split
//! a process of the agent's uid cannot read the key, the driver's memory or environment, or the
//! control folder; without the split, non-dumpable still keeps `/proc/<driver>/mem` closed; and a
//! harness that dies mid-turn gets its pending commands answered `ended` and handed back (S19).
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::{AGENT, LONG, Rig, assert_root, give_to_agent};
use hangar_mailbox::outbox::{Delivery, Outcome};
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_testkit::{Script, Step};
use serde_json::json;

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

fn proc_text(pid: u32, what: &str) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default())
        .replace('\0', "\n")
}

/// Runs `sh -c SCRIPT` as the agent's uid; (succeeded, output).
fn as_agent(script: &str) -> (bool, String) {
    let out = Command::new("sh")
        .args(["-c", script])
        .uid(AGENT)
        .gid(AGENT)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.contains("OPENED"), text)
}

#[test]
fn the_key_is_gone_and_never_reaches_a_child() {
    let mut rig = Rig::new(
        Script::new([
            // A script the rules do not read (they deny `/proc/<pid>/cmdline` on the command
            // line): what keeps the key out of reach must be the driver.
            bash("sh look.sh $PPID"),
            Step::text("ok"),
        ]),
        "show me your environment",
    );
    let key_hex = rig.mailbox.key().to_file_text().trim().to_owned();
    assert!(rig.mailbox.ctl().key().exists(), "the client wrote the key");
    std::fs::write(
        rig.work.path().join("look.sh"),
        "env > env.txt; tr '\\0' ' ' < /proc/$1/cmdline > parent_cmdline.txt\n",
    )
    .unwrap();
    rig.start("auto");
    let started = rig.wait_type("hangar.started");
    assert!(
        !rig.mailbox.ctl().key().exists(),
        "the key file is gone once the harness runs"
    );
    let driver = rig.driver_pid();
    let harness = started["harness_pid"].as_u64().unwrap() as u32;
    let harness_env = proc_text(harness, "environ");
    let harness_argv = proc_text(harness, "cmdline");
    assert_eq!(rig.wait_exit(LONG), 0);
    let tool_env = std::fs::read_to_string(rig.work.path().join("env.txt")).unwrap();
    for (what, text) in [
        ("harness env", &harness_env),
        ("harness argv", &harness_argv),
        ("tool env", &tool_env),
    ] {
        assert!(!text.contains(&key_hex), "{what} holds the key");
        assert!(
            !text.contains("HANGAR_"),
            "{what} holds a HANGAR_ variable:\n{text}"
        );
    }
    assert!(
        harness_env.contains("ANTHROPIC_BASE_URL="),
        "allow-listed variables pass: {harness_env}"
    );
    assert!(harness_env.contains("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"));
    assert!(!proc_text(driver, "cmdline").contains(&key_hex));
}

#[test]
fn under_the_uid_split_the_agent_reaches_nothing_of_the_driver() {
    assert_root();
    let mut rig = Rig::new(
        Script::new([
            bash("id -u > uid.txt; echo hi > made.txt"),
            Step::text("done"),
        ]),
        "make a file",
    );
    std::fs::create_dir_all(rig.config_dir()).unwrap();
    give_to_agent(&[rig.work.path(), rig.user_home.path()]);
    let ctl = rig.ctl().to_owned();
    let key = rig.mailbox.ctl().key();

    // Before the driver starts, the key file is there, and the agent cannot read it.
    let (opened, out) = as_agent(&format!("exec 3< {} && echo OPENED", key.display()));
    assert!(!opened, "the agent opened the key file: {out}");
    let (opened, _) = as_agent("exec 3< /proc/self/environ && echo OPENED");
    assert!(opened, "control: the probe itself works");

    let home = rig.user_home.path().to_str().unwrap().to_owned();
    let cmd = rig.driver_command(
        "ask",
        &[
            "--agent-uid",
            "65534",
            "--agent-gid",
            "65534",
            "--agent-home",
            &home,
        ],
    );
    rig.start_with(cmd);
    let started = rig.wait_type("hangar.started");
    assert_eq!(started["uid_split"], true);
    let id = rig.wait_approval();
    let driver = rig.driver_pid();
    let harness = started["harness_pid"].as_u64().unwrap() as u32;
    assert!(
        proc_text(harness, "status")
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains("65534"))
    );
    assert!(
        proc_text(driver, "status")
            .lines()
            .any(|l| l.starts_with("Uid:\t0")),
        "the driver stays hangar's user"
    );

    for target in [
        format!("/proc/{driver}/mem"),
        format!("/proc/{driver}/environ"),
        format!("{}/run.log", ctl.display()),
        format!("{}/acks", ctl.display()),
    ] {
        let (opened, out) = as_agent(&format!("exec 3< {target} && echo OPENED"));
        assert!(!opened, "the agent opened {target}: {out}");
    }
    let (listed, out) = as_agent(&format!("ls {} && echo OPENED", ctl.display()));
    assert!(!listed, "the agent listed the control folder: {out}");
    let (wrote, out) = as_agent(&format!(
        "echo x > {}/in/planted.cmd && echo OPENED",
        ctl.display()
    ));
    assert!(!wrote, "the agent wrote into in/: {out}");

    assert_eq!(
        rig.mailbox
            .request(Kind::Approve, body::approve(&id, None), LONG)
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(rig.wait_exit(LONG), 0);
    assert_eq!(
        std::fs::read_to_string(rig.work.path().join("uid.txt"))
            .unwrap()
            .trim(),
        "65534"
    );
    assert_eq!(
        std::fs::metadata(rig.work.path().join("made.txt"))
            .unwrap()
            .uid(),
        AGENT
    );
    assert_eq!(
        std::fs::metadata(&ctl).unwrap().permissions().mode() & 0o077,
        0,
        "control folder is private"
    );
    // Under the split the agent cannot touch what the driver hashes while it hashes: the tree
    // lines are trusted (no `trusted: false`), and one follows the call that made a file.
    let trees = rig.lines_of("hangar.tree");
    assert!(trees.len() >= 3, "start, the call, end: {trees:#?}");
    assert!(
        trees.iter().all(|t| t.get("trusted").is_none()),
        "{trees:#?}"
    );
}

/// Without the split the agent shares the driver's uid; non-dumpable keeps its memory and
/// environment closed all the same (S15).
#[test]
fn without_the_split_the_driver_is_still_non_dumpable() {
    assert_root();
    let mut rig = Rig::new(
        Script::new([Step::slow_text(10, Duration::from_millis(300))]),
        "talk",
    );
    std::fs::create_dir_all(rig.config_dir()).unwrap();
    give_to_agent(&[rig.home.path(), rig.work.path(), rig.user_home.path()]);
    let mut cmd = rig.driver_command("auto", &[]);
    cmd.uid(AGENT).gid(AGENT);
    rig.start_with(cmd);
    rig.wait_type("hangar.started");
    let driver = rig.driver_pid();
    assert!(
        proc_text(driver, "status")
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains("65534"))
    );
    let mut control = Command::new("sleep")
        .arg("30")
        .uid(AGENT)
        .gid(AGENT)
        .spawn()
        .unwrap();
    let (opened, out) = as_agent(&format!(
        "exec 3< /proc/{}/environ && echo OPENED",
        control.id()
    ));
    assert!(
        opened,
        "control: a same-uid process's environ is readable: {out}"
    );
    for target in [
        format!("/proc/{driver}/mem"),
        format!("/proc/{driver}/environ"),
    ] {
        let (opened, out) = as_agent(&format!("exec 3< {target} && echo OPENED"));
        assert!(!opened, "a same-uid process opened {target}: {out}");
    }
    let _ = control.kill();
    let _ = control.wait();
    assert_eq!(rig.wait_exit(LONG), 0);
}

#[test]
fn a_harness_killed_mid_turn_hands_pending_commands_back() {
    let mut rig = Rig::new(
        Script::new([bash("echo hi > made.txt"), Step::text("done")]),
        "make a file",
    );
    rig.start("ask");
    rig.wait_approval();
    let driver = rig.driver_pid() as i32;
    let harness = rig.wait_type("hangar.started")["harness_pid"]
        .as_i64()
        .unwrap() as i32;
    // Hold the driver still so the steer lands but is not yet passed on, then kill the harness.
    unsafe { libc::kill(driver, libc::SIGSTOP) };
    let Delivery::Landed(sent) = rig
        .mailbox
        .send(Kind::Steer, body::text("please also add tests"))
        .unwrap()
    else {
        panic!("in/ is open while the driver is stopped");
    };
    unsafe { libc::kill(-harness, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(driver, libc::SIGCONT) };
    match rig.mailbox.wait(&sent, LONG).unwrap() {
        Outcome::Ended { handed_back } => {
            assert_eq!(handed_back.text(), Some("please also add tests"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.wait_exit(LONG), 1);
    let end = rig.wait_type("hangar.turn_end");
    assert_eq!(end["reason"], "harness_exited");
    assert_eq!(end["handed_back"], json!([sent.command.seq]));
    assert!(!rig.work.path().join("made.txt").exists());
    // And nothing is taken any more: a new command fails at once.
    assert!(matches!(
        rig.mailbox
            .request(Kind::Steer, body::text("more"), LONG)
            .unwrap(),
        Outcome::Ended { .. }
    ));
}
