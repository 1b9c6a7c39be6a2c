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

use common::{Client, deltas_of, main_request, responses_request, sse_events};
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

#[test]
fn serves_a_scenario_as_openai_responses() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("codex.json");
    std::fs::write(
        &script,
        r#"{"steps":[{"exec":"echo hi > made.txt"},{"text":"done","expect":"after_tool_result"}]}"#,
    )
    .unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hangar-fake-model"))
        .args(["--api", "openai", "--script"])
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
    let origin = base.strip_suffix("/v1").unwrap().to_owned();
    assert!(origin.starts_with("http://127.0.0.1:"), "{line:?}");

    let mut client = Client::connect(&origin);
    let events = sse_events(
        &client
            .post_json("/v1/responses", &responses_request("go"))
            .text(),
    );
    let done = events
        .iter()
        .find(|(n, d)| n == "response.output_item.done" && d["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(done.1["item"]["name"], "exec_command");
    assert_eq!(done.1["item"]["call_id"], "call_hk_1");
    // No tool output in this request: the expectation misses (recorded), the step is still sent.
    let events = sse_events(
        &client
            .post_json("/v1/responses", &responses_request("again"))
            .text(),
    );
    assert_eq!(deltas_of(&events, "response.output_text.delta"), "done");
    client.send("GET", "/v1/models", &[], "");
    assert_eq!(client.read_response().status, 404);

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
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("3 requests (2 model)"), "{stderr}");
    assert!(stderr.contains("2 unexpected"), "{stderr}");
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["path"], "/v1/responses");
    assert_eq!(lines[0]["kind"], "main");
    assert_eq!(lines[2]["kind"], "other");
}

#[test]
fn rejects_an_unknown_api() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.json");
    std::fs::write(&script, r#"{"steps":[]}"#).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_hangar-fake-model"))
        .args(["--api", "gemini", "--script"])
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("anthropic or openai"), "{stderr}");
}
