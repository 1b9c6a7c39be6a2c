//! The `hangar-fake-model` binary: prints its address, serves the script, logs requests, exits
//! when stdin closes.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed step fails the test"
)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Client, main_request, sse_events};
use serde_json::Value;

#[test]
fn serves_a_scenario_until_stdin_closes() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"{"steps":[{"text":"from the binary"}]}"#).unwrap();
    let log = dir.path().join("requests.jsonl");

    let mut child = Command::new(env!("CARGO_BIN_EXE_hangar-fake-model"))
        .arg("--script")
        .arg(&script)
        .arg("--log")
        .arg(&log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let base = line
        .strip_prefix("listening: ")
        .unwrap()
        .trim_end()
        .to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{line:?}");

    let mut client = Client::connect(&base);
    let response = client.post_json("/v1/messages?beta=true", &main_request("hi bin"));
    let events = sse_events(&response.text());
    assert!(response.text().contains("from the binary"), "{events:?}");
    let exhausted = client.post_json("/v1/messages", &main_request("again"));
    assert_eq!(exhausted.status, 400);

    drop(child.stdin.take());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("hangar-fake-model did not exit after stdin closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "exactly one line on stdout");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("1 unexpected"), "{stderr}");

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["kind"], "main");
    assert_eq!(lines[0]["path"], "/v1/messages?beta=true");
    assert_eq!(
        lines[0]["body"]["messages"][0]["content"][1]["text"],
        "hi bin"
    );
}

#[test]
fn rejects_a_bad_script() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bad.json");
    std::fs::write(&script, r#"{"steps":[{"bogus":1}]}"#).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_hangar-fake-model"))
        .arg("--script")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).contains("bogus"));
}
