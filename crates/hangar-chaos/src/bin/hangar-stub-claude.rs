//! `hangar-stub-claude`: a stand-in for Claude Code in its structured mode (`claude -p
//! --input-format stream-json --output-format stream-json`), for the load run: one small
//! process per run instead of a node process, speaking the same lines the driver reads.
//!
//! It takes Claude Code's arguments and ignores them. For each user message on stdin it asks
//! `can_use_tool` ROUNDS times (a `tool_use` block, then the `control_request`), waits for each
//! answer, writes the tool's result and ends with a `result` covering the message. It answers
//! `initialize` and `interrupt` as the CLI does and exits when stdin closes.
//!
//! Settings: `.hangar-stub.json` in its working folder, `{"rounds": N, "think_ms": T}` (default
//! 5 rounds; T, default 0: the model "thinks" between T/2 and 3T/2 ms, uniformly at random,
//! before each tool call, so runs started together do not stay in step; with `"hold": true` the
//! first tool call also waits until `.hangar-stub.go` exists there, so a load run can start all
//! its runs before any of them works). Each
//! answer's arrival is appended to `.hangar-stub.receipts` there as `REQUEST_ID MONO_NS ALLOW`
//! (CLOCK_MONOTONIC, the clock the load run reads too), and each `tool_use` input carries
//! `sent_ms` (the wall clock when the line was written: the event ingest lag is the stored
//! event's `created_at` minus it) and `started_ms` (the wall clock when this process began, read
//! before anything else: the load run's session start is measured to it, from wherever the
//! harness runs, a local or a docker sandbox, since the line reaches the run's stored events).
#![expect(
    clippy::print_stderr,
    reason = "a command-line tool reports its failure on stderr"
)]

use std::fs::OpenOptions;
use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

fn main() -> ExitCode {
    // The harness has started: its first instruction, before the settings or stdin are read.
    let started_ms = wall_ms();
    match run(started_ms) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hangar-stub-claude: {e}");
            ExitCode::from(5)
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
fn mono_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// The wall clock in milliseconds, to the microsecond.
fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| (d.as_micros() as f64) / 1e3)
        .unwrap_or(0.0)
}

/// xorshift64: think times need spread, not quality.
struct Rng(u64);

impl Rng {
    /// A number in [0, 1).
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct Out(io::Stdout);

impl Out {
    fn line(&mut self, v: &Value) -> Result<(), String> {
        let mut out = self.0.lock();
        writeln!(out, "{v}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("write stdout: {e}"))
    }
}

fn run(started_ms: f64) -> Result<(), String> {
    let settings = std::fs::read_to_string(".hangar-stub.json")
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .unwrap_or(Value::Null);
    let rounds = settings["rounds"].as_u64().unwrap_or(5);
    let think = std::time::Duration::from_millis(settings["think_ms"].as_u64().unwrap_or(0));
    let hold = settings["hold"].as_bool().unwrap_or(false);
    let mut rng = Rng(mono_ns() ^ u64::from(std::process::id()).rotate_left(32) | 1);
    let mut receipts = OpenOptions::new()
        .create(true)
        .append(true)
        .open(".hangar-stub.receipts")
        .map_err(|e| format!("open .hangar-stub.receipts: {e}"))?;
    let session = format!("5e55a0b1-0000-4000-8000-{:012}", std::process::id());
    let mut out = Out(io::stdout());
    let stdin = io::stdin();
    let mut lines = stdin.lock().lines();
    let mut next = move || -> Result<Option<Value>, String> {
        loop {
            match lines.next() {
                None => return Ok(None),
                Some(Err(e)) => return Err(format!("read stdin: {e}")),
                Some(Ok(l)) => {
                    if let Ok(v) = serde_json::from_str::<Value>(&l) {
                        return Ok(Some(v));
                    }
                }
            }
        }
    };
    let mut initialized = false;
    let mut tool = 0u64;
    // User messages that arrived while a tool call waited for its answer.
    let mut queued: Vec<String> = Vec::new();
    loop {
        let uuid = match queued.pop() {
            Some(u) => u,
            None => {
                let Some(v) = next()? else { return Ok(()) };
                match v["type"].as_str() {
                    Some("control_request") => {
                        control(&mut out, &v)?;
                        continue;
                    }
                    Some("user") => v["uuid"].as_str().unwrap_or_default().to_owned(),
                    _ => continue,
                }
            }
        };
        if !initialized {
            initialized = true;
            out.line(
                &json!({"type": "system", "subtype": "init", "cwd": ".", "session_id": session,
                "tools": ["Bash"], "model": "stub", "permissionMode": "default"}),
            )?;
        }
        while hold && !std::path::Path::new(".hangar-stub.go").exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for _ in 0..rounds {
            std::thread::sleep(think.mul_f64(0.5 + rng.next()));
            tool += 1;
            let id = format!("toolu_stub_{tool:05}");
            let input = json!({"command": format!("echo {tool}"), "description": "say it", "sent_ms": wall_ms(),
                "started_ms": started_ms});
            out.line(&json!({"type": "assistant", "message": {"id": format!("msg_stub_{tool}"), "type": "message",
                "role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": input}]},
                "parent_tool_use_id": null, "session_id": session}))?;
            let rid = format!("stub-{tool}");
            out.line(&json!({"type": "control_request", "request_id": rid, "request": {"subtype": "can_use_tool",
                "tool_name": "Bash", "input": input, "tool_use_id": id}}))?;
            let allowed = loop {
                let Some(v) = next()? else { return Ok(()) };
                match v["type"].as_str() {
                    Some("control_response") if v["response"]["request_id"] == rid.as_str() => {
                        let at = mono_ns();
                        let allow = v["response"]["response"]["behavior"] == "allow";
                        writeln!(receipts, "{rid} {at} {allow}")
                            .map_err(|e| format!("write a receipt: {e}"))?;
                        break allow;
                    }
                    Some("control_request") => control(&mut out, &v)?,
                    Some("user") => queued.push(v["uuid"].as_str().unwrap_or_default().to_owned()),
                    _ => {}
                }
            };
            let output = if allowed {
                format!("{tool}")
            } else {
                "denied".to_owned()
            };
            out.line(
                &json!({"type": "user", "message": {"role": "user", "content": [{"tool_use_id": id,
                "type": "tool_result", "content": output, "is_error": !allowed}]},
                "parent_tool_use_id": null, "session_id": session}),
            )?;
        }
        out.line(&json!({"type": "assistant", "message": {"id": format!("msg_stub_end_{tool}"), "type": "message",
            "role": "assistant", "content": [{"type": "text", "text": "done"}]},
            "parent_tool_use_id": null, "session_id": session}))?;
        out.line(&json!({"type": "result", "subtype": "success", "is_error": false, "result": "done",
            "session_id": session, "total_cost_usd": 0.0, "usage": {"input_tokens": 10, "output_tokens": 5},
            "user_message_uuids": [uuid]}))?;
    }
}

/// Answers the driver's control requests as Claude Code does (`initialize`, `interrupt`).
fn control(out: &mut Out, v: &Value) -> Result<(), String> {
    let rid = v["request_id"].as_str().unwrap_or_default();
    out.line(&json!({"type": "control_response", "response": {"subtype": "success", "request_id": rid, "response": {}}}))
}
