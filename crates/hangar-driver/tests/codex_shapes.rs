//! The Codex run log against the real thing: the driver's translated lines have the shapes the
//! installed `codex exec --json` prints for the same scripted conversation (S10); and Codex under
//! the driver opens no socket except to loopback.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use common::{LONG, Rig};
use hangar_testkit::{FakeOpenAi, Script, Step, codex_bin, codex_env, codex_offline_args};
use serde_json::Value;

fn script() -> Script {
    Script::new([
        Step::exec("echo hi > made.txt"),
        Step::patch("*** Begin Patch\n*** Add File: notes.txt\n+some notes\n*** End Patch"),
        Step::text("all done"),
    ])
}

/// (line type, item type, item keys) for each line `codex exec --json` would print.
fn shapes(lines: &[Value]) -> Vec<(String, String, BTreeSet<String>)> {
    lines
        .iter()
        .filter(|v| {
            let t = v["type"].as_str().unwrap_or_default();
            // (`item.delta` is hangar's own: the text as the model streams it, which `codex
            // exec` does not print; checked below.)
            t.starts_with("thread.")
                || t.starts_with("turn.")
                || (t.starts_with("item.") && t != "item.delta")
                || t == "error"
        })
        .map(|v| {
            let item = &v["item"];
            let keys = item
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            (
                v["type"].as_str().unwrap().to_owned(),
                item["type"].as_str().unwrap_or_default().to_owned(),
                keys,
            )
        })
        .collect()
}

#[test]
fn the_translated_run_log_has_codex_exec_json_shapes() {
    // The real `codex exec --json`.
    let fake = FakeOpenAi::start(script()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(codex_bin().unwrap())
        .arg("exec")
        .args(codex_offline_args(&fake.base_url()))
        .args([
            "--json",
            "--skip-git-repo-check",
            "--sandbox",
            "danger-full-access",
            "write the files",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .envs(codex_env(&home.path().join("codex-home")))
        .current_dir(cwd.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exec_lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(cwd.path().join("made.txt").exists() && cwd.path().join("notes.txt").exists());

    // The driver, same conversation.
    let mut rig = Rig::codex(script(), "write the files");
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let ours = shapes(&rig.log_lines());
    // The agent's message streamed in pieces before its item completed, and they make its text.
    let pieces: String = rig
        .log_lines()
        .iter()
        .filter(|v| v["type"] == "item.delta" && v["kind"] == "agent_message")
        .map(|v| v["delta"].as_str().unwrap().to_owned())
        .collect();
    let whole = rig
        .log_lines()
        .iter()
        .filter(|v| v["type"] == "item.completed" && v["item"]["type"] == "agent_message")
        .map(|v| v["item"]["text"].as_str().unwrap().to_owned())
        .collect::<String>();
    assert!(
        !pieces.is_empty() && pieces == whole,
        "{pieces:?} / {whole:?}"
    );
    let theirs = shapes(&exec_lines);
    assert_eq!(
        ours, theirs,
        "\nours:   {ours:#?}\ncodex exec --json: {theirs:#?}"
    );

    // And the usage: same keys, and the same numbers for this one-turn conversation.
    let usage = |lines: &[Value]| {
        lines
            .iter()
            .find(|v| v["type"] == "turn.completed")
            .unwrap()["usage"]
            .clone()
    };
    let (u_ours, u_theirs) = (usage(&rig.log_lines()), usage(&exec_lines));
    assert_eq!(
        u_ours.as_object().unwrap().keys().collect::<Vec<_>>(),
        u_theirs.as_object().unwrap().keys().collect::<Vec<_>>()
    );
    assert_eq!(u_ours, u_theirs);
}

#[test]
fn codex_under_the_driver_opens_no_socket_outside_loopback() {
    let mut rig = Rig::codex(script(), "write the files");
    let trace = rig.user_home.path().join("connect.trace");
    let driver = rig.codex_command("auto", &[]);
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o"])
        .arg(&trace)
        .arg(driver.get_program());
    cmd.args(driver.get_args());
    cmd.env_clear();
    for (k, v) in driver.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let text = std::fs::read_to_string(&trace).unwrap();
    let inet: Vec<&str> = text.lines().filter(|l| l.contains("AF_INET")).collect();
    assert!(
        !inet.is_empty(),
        "strace saw Codex reach the model server:\n{text}"
    );
    for l in &inet {
        let loopback = l.contains("inet_addr(\"127.")
            || l.contains("inet_pton(AF_INET6, \"::1\"")
            || l.contains("\"::1\"");
        assert!(loopback, "a socket outside loopback: {l}");
    }
}
