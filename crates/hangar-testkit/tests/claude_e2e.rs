//! End to end with the real, pinned Claude Code CLI against `FakeAnthropic` (no network).
//! Fails (does not skip) when the CLI is not installed.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed step fails the test"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Kills the child when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs one `claude -p` stream-json turn with `prompt` against `fake`, closes stdin, and returns
/// the `result` line after checking the CLI exits 0.
fn run_turn(fake: &FakeAnthropic, prompt: &str) -> Value {
    let claude = match claude_bin() {
        Ok(path) => path,
        Err(error) => panic!("{error}"),
    };
    let home = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();

    let mut command = Command::new(&claude);
    command
        .args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .envs(claude_env(&fake.base_url(), config.path()))
        .current_dir(cwd.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(command.spawn().unwrap());

    let mut stdin = child.0.stdin.take().unwrap();
    let line = serde_json::json!({"type": "user", "message": {"role": "user", "content": prompt}});
    stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
    drop(stdin);

    let stdout = child.0.stdout.take().unwrap();
    let (lines_tx, lines_rx) = mpsc::channel::<String>();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stderr = child.0.stderr.take().unwrap();
    let stderr_reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });

    let deadline = Instant::now() + TIMEOUT;
    let mut lines = Vec::new();
    let result = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            Ok(line) => {
                let value = serde_json::from_str::<Value>(&line).ok();
                lines.push(line);
                if let Some(value) = value
                    && value["type"] == "result"
                {
                    break value;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                drop(child);
                panic!(
                    "no result line within {TIMEOUT:?}; stdout so far:\n{}\nunexpected: {:?}",
                    lines.join("\n"),
                    fake.unexpected()
                );
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.0.wait().unwrap();
                let stderr = stderr_reader.join().unwrap_or_default();
                panic!(
                    "claude exited ({status}) without a result line; stdout:\n{}\nstderr:\n{stderr}\nunexpected: {:?}",
                    lines.join("\n"),
                    fake.unexpected()
                );
            }
        }
    };

    // stdin is closed: the CLI exits after the turn.
    let exit_deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}; result {result}");
            break;
        }
        assert!(
            Instant::now() < exit_deadline,
            "claude did not exit after stdin closed"
        );
        thread::sleep(Duration::from_millis(50));
    }
    result
}

#[test]
fn claude_streams_a_scripted_reply() {
    let fake = FakeAnthropic::start(Script::new([Step::text("hello from the fake")])).unwrap();
    let result = run_turn(&fake, "say hi");
    assert_eq!(result["result"], "hello from the fake", "{result}");
    assert_eq!(result["is_error"], false, "{result}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "one model request: {requests:?}");
    let prompt = requests[0].last_user_text().unwrap_or_default();
    assert!(prompt.contains("say hi"), "last user text: {prompt:?}");
    assert_eq!(requests[0].header("x-api-key"), Some("sk-hangar-test"));
    assert!(requests[0].session_id().is_some(), "session header present");
    assert!(fake.unexpected().is_empty(), "{:?}", fake.unexpected());
}

#[test]
fn claude_runs_a_scripted_tool_call() {
    let fake = FakeAnthropic::start(Script::new([
        Step::tool(
            "Bash",
            json!({"command": "echo hangar-tool-ok", "description": "print a marker"}),
        )
        .expect_user_text("run the marker"),
        Step::text("tool seen").expect_tool_result(),
    ]))
    .unwrap();
    let result = run_turn(&fake, "run the marker");
    assert_eq!(result["result"], "tool seen", "{result}");
    assert_eq!(result["num_turns"], 2, "{result}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    let (id, content, is_error) = &results[0];
    assert_eq!(id, "toolu_hk_1");
    assert!(!is_error, "{content}");
    assert!(content.contains("hangar-tool-ok"), "{content}");
    assert!(fake.unexpected().is_empty(), "{:?}", fake.unexpected());
}
