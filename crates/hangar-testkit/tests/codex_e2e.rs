//! End to end with the real, pinned Codex CLI against `FakeOpenAi` (no network: every run uses
//! `codex_offline_args` and `codex_env`). Fails (does not skip) when the CLI is not installed.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed step fails the test"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hangar_testkit::{
    CODEX_VERSION, FakeOpenAi, Script, Step, codex_bin, codex_env, codex_offline_args,
};
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

/// `codex <subcommand> <offline args>` with a clean environment: PATH, HOME and `codex_env` only,
/// in `cwd`.
fn codex(subcommand: &str, fake: &FakeOpenAi, home: &Path, cwd: &Path) -> Command {
    let codex = match codex_bin() {
        Ok(path) => path,
        Err(error) => panic!("{error}"),
    };
    let mut command = Command::new(codex);
    command
        .arg(subcommand)
        .args(codex_offline_args(&fake.base_url()))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(codex_env(&home.join("codex-home")))
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Spawns the command and returns the child, a channel of its stdout lines and a thread that
/// collects its stderr.
fn spawn(mut command: Command) -> (KillOnDrop, mpsc::Receiver<String>, JoinHandle<String>) {
    let mut child = KillOnDrop(command.spawn().unwrap());
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
    (child, lines_rx, stderr_reader)
}

fn waited_exit(child: &mut KillOnDrop, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn codex_exec_runs_a_scripted_command() {
    let fake = FakeOpenAi::start(Script::new([
        Step::exec("echo hi > made.txt").expect_user_text("do it"),
        Step::text("done").expect_tool_result(),
    ]))
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut command = codex("exec", &fake, home.path(), cwd.path());
    command
        .args([
            "--json",
            "--skip-git-repo-check",
            "--sandbox",
            "danger-full-access",
            "do it",
        ])
        .stdin(Stdio::null());
    let (mut child, lines_rx, stderr_reader) = spawn(command);

    // Read stdout to its end (the process exits after the turn), then reap it.
    let deadline = Instant::now() + TIMEOUT;
    let mut lines = Vec::new();
    let finished = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break true,
            Err(mpsc::RecvTimeoutError::Timeout) => break false,
        }
    };
    let status = if finished {
        waited_exit(&mut child, Instant::now() + Duration::from_secs(20))
    } else {
        None
    };
    drop(child);
    let stderr = stderr_reader.join().unwrap_or_default();
    let context = format!(
        "stdout:\n{}\nstderr:\n{stderr}\nunexpected: {:?}",
        lines.join("\n"),
        fake.unexpected()
    );
    let Some(status) = status else {
        panic!("codex exec did not finish within {TIMEOUT:?}\n{context}");
    };
    assert!(status.success(), "exit {status}\n{context}");

    let made = cwd.path().join("made.txt");
    assert_eq!(
        std::fs::read_to_string(&made).unwrap_or_default(),
        "hi\n",
        "{context}"
    );
    let events: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let thread_id = events
        .iter()
        .find(|e| e["type"] == "thread.started")
        .and_then(|e| e["thread_id"].as_str())
        .unwrap_or_else(|| panic!("no thread.started\n{context}"))
        .to_owned();
    let command_item = events
        .iter()
        .find(|e| e["type"] == "item.completed" && e["item"]["type"] == "command_execution")
        .unwrap_or_else(|| panic!("no completed command_execution item\n{context}"));
    assert!(
        command_item["item"]["command"]
            .as_str()
            .unwrap()
            .contains("echo hi > made.txt"),
        "{command_item}"
    );
    assert_eq!(command_item["item"]["exit_code"], 0, "{command_item}");
    assert_eq!(command_item["item"]["status"], "completed");
    assert!(
        events.iter().any(|e| e["type"] == "item.completed"
            && e["item"]["type"] == "agent_message"
            && e["item"]["text"] == "done"),
        "{context}"
    );
    let turn = events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap_or_else(|| panic!("no turn.completed\n{context}"));
    // Two model calls of 100 in (20 cached) / 10 out (3 reasoning) each.
    assert_eq!(turn["usage"]["input_tokens"], 200, "{turn}");
    assert_eq!(turn["usage"]["cached_input_tokens"], 40, "{turn}");
    assert_eq!(turn["usage"]["output_tokens"], 20, "{turn}");
    assert_eq!(turn["usage"]["reasoning_output_tokens"], 6, "{turn}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{context}");
    let first = &requests[0];
    assert_eq!(first.last_user_text().as_deref(), Some("do it"));
    assert_eq!(first.model(), Some("gpt-5.5"));
    assert_eq!(first.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(first.session_id(), Some(thread_id.as_str()));
    assert_eq!(first.thread_id(), Some(thread_id.as_str()));
    assert!(first.tool_outputs().is_empty());
    let tools: Vec<&str> = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(tools.contains(&"exec_command"), "{tools:?}");
    assert!(tools.contains(&"apply_patch"), "{tools:?}");
    let metadata: Value =
        serde_json::from_str(first.header("x-codex-turn-metadata").unwrap()).unwrap();
    assert_eq!(metadata["analytics_enabled"], false, "{metadata}");

    let second = &requests[1];
    assert!(second.last_user_has_tool_result());
    let outputs = second.tool_outputs();
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert_eq!(outputs[0].0, "call_hk_1");
    assert!(
        outputs[0].1.contains("Process exited with code 0"),
        "{outputs:?}"
    );
    assert!(
        second.body["input"].as_array().unwrap().iter().any(|item| {
            item["type"] == "function_call_output" && item["call_id"] == "call_hk_1"
        })
    );
    assert!(fake.unexpected().is_empty(), "{:?}", fake.unexpected());
    assert!(
        !stderr.contains("Refusing to create helper binaries"),
        "TMPDIR keeps CODEX_HOME out of the temp dir\n{stderr}"
    );
}

/// A JSON-RPC peer over the app-server's stdio (newline-delimited JSON, no `"jsonrpc"` member).
struct AppServer {
    child: KillOnDrop,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: Option<JoinHandle<String>>,
    deadline: Instant,
    /// Every message received, in order.
    seen: Vec<Value>,
}

impl AppServer {
    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    fn transcript(&mut self) -> String {
        let lines: Vec<String> = self.seen.iter().map(Value::to_string).collect();
        lines.join("\n")
    }

    /// Reads messages until `done` accepts one; returns it. Server→client requests are refused
    /// with a JSON-RPC error (none are expected with `approvalPolicy: "never"`).
    fn until(&mut self, what: &str, mut done: impl FnMut(&Value) -> bool) -> Value {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(error) => {
                    let _ = self.child.0.kill();
                    let stderr = self
                        .stderr
                        .take()
                        .map(|h| h.join().unwrap_or_default())
                        .unwrap_or_default();
                    panic!(
                        "waiting for {what}: {error:?}\nreceived:\n{}\nstderr:\n{stderr}",
                        self.transcript()
                    );
                }
            };
            let message: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            self.seen.push(message.clone());
            if message.get("id").is_some() && message.get("method").is_some() {
                self.send(&json!({"id": message["id"],
                                  "error": {"code": -32601, "message": "not expected by the test"}}));
            }
            if done(&message) {
                return message;
            }
        }
    }

    /// Sends a request and waits for its response; returns `result`.
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({"id": id, "method": method, "params": params}));
        let reply = self.until(method, |m| m["id"] == id && m.get("method").is_none());
        assert!(
            reply.get("error").is_none(),
            "{method} failed: {reply}\n{}",
            self.transcript()
        );
        reply["result"].clone()
    }
}

#[test]
fn codex_app_server_runs_a_turn_over_stdio() {
    let patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello from the fake\n*** End Patch";
    let fake = FakeOpenAi::start(Script::new([
        Step::patch(patch).expect_user_text("do it"),
        Step::exec("cp hello.txt copy.txt").expect_tool_result(),
        Step::text("done").expect_tool_result(),
    ]))
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut command = codex("app-server", &fake, home.path(), cwd.path());
    command.stdin(Stdio::piped());
    let (mut child, lines, stderr) = spawn(command);
    let stdin = child.0.stdin.take();
    let mut server = AppServer {
        child,
        stdin,
        lines,
        stderr: Some(stderr),
        deadline: Instant::now() + TIMEOUT,
        seen: Vec::new(),
    };

    let init = server.request(
        1,
        "initialize",
        json!({"clientInfo": {"name": "hangar-testkit", "title": null, "version": "0.1.0"}}),
    );
    let agent = init["userAgent"].as_str().unwrap_or_default();
    assert!(
        agent.starts_with(&format!("hangar-testkit/{CODEX_VERSION} ")),
        "{init}"
    );
    server.send(&json!({"method": "initialized"}));
    let started = server.request(
        2,
        "thread/start",
        json!({"cwd": cwd.path(), "approvalPolicy": "never", "sandbox": "danger-full-access"}),
    );
    let thread_id = started["thread"]["id"].as_str().unwrap().to_owned();
    assert_eq!(started["model"], "gpt-5.5", "{started}");
    assert_eq!(started["modelProvider"], "hangar-fake", "{started}");
    assert_eq!(started["approvalPolicy"], "never", "{started}");
    let turn = server.request(
        3,
        "turn/start",
        json!({"threadId": thread_id,
               "input": [{"type": "text", "text": "do it", "text_elements": []}]}),
    );
    let turn_id = turn["turn"]["id"].as_str().unwrap().to_owned();
    let completed = server.until("turn/completed", |m| {
        m["method"] == "turn/completed" && m["params"]["turn"]["id"] == turn_id.as_str()
    });
    let transcript = server.transcript();
    assert_eq!(
        completed["params"]["turn"]["status"], "completed",
        "{transcript}"
    );
    assert_eq!(completed["params"]["threadId"], thread_id.as_str());

    let completed_items: Vec<&Value> = server
        .seen
        .iter()
        .filter(|m| m["method"] == "item/completed")
        .map(|m| &m["params"]["item"])
        .collect();
    let file_change = completed_items
        .iter()
        .find(|item| item["type"] == "fileChange")
        .unwrap_or_else(|| panic!("no fileChange item\n{transcript}"));
    assert_eq!(file_change["status"], "completed", "{file_change}");
    assert_eq!(file_change["id"], "call_hk_1", "the call id is the item id");
    let exec = completed_items
        .iter()
        .find(|item| item["type"] == "commandExecution")
        .unwrap_or_else(|| panic!("no commandExecution item\n{transcript}"));
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_eq!(exec["exitCode"], 0, "{exec}");
    assert_eq!(exec["id"], "call_hk_2");
    assert!(
        completed_items
            .iter()
            .any(|item| item["type"] == "agentMessage" && item["text"] == "done"),
        "{transcript}"
    );
    assert!(
        server
            .seen
            .iter()
            .any(|m| m["method"] == "thread/tokenUsage/updated"
                && m["params"]["tokenUsage"]["last"]["totalTokens"] == 110),
        "{transcript}"
    );
    assert!(
        !server
            .seen
            .iter()
            .any(|m| m.get("id").is_some() && m.get("method").is_some()),
        "no server requests (approvals) under approvalPolicy never\n{transcript}"
    );
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("copy.txt")).unwrap_or_default(),
        "hello from the fake\n"
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{transcript}");
    for request in &requests {
        assert_eq!(request.header("originator"), Some("hangar-testkit"));
        assert_eq!(request.session_id(), Some(thread_id.as_str()));
    }
    let outputs = requests[1].tool_outputs();
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert_eq!(outputs[0].0, "call_hk_1");
    assert!(outputs[0].1.contains("A hello.txt"), "{outputs:?}");
    assert_eq!(
        requests[1].tool_calls()[0],
        (
            "call_hk_1".to_owned(),
            "apply_patch".to_owned(),
            patch.to_owned()
        )
    );
    let outputs = requests[2].tool_outputs();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert_eq!(outputs[1].0, "call_hk_2");
    assert!(fake.unexpected().is_empty(), "{:?}", fake.unexpected());

    // stdin EOF ends the app-server.
    drop(server.stdin.take());
    let status = waited_exit(&mut server.child, Instant::now() + Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "app-server exit after stdin closed: {status:?}"
    );
}
