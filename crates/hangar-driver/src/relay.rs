//! The relay: the harness's stdout goes to the run log line for line, unchanged, except that each
//! `result` line gains the process's token totals (see `hangar_protocol::runlog`). The few lines
//! the driver acts on are passed to the main loop as [`HarnessEvent`]s, always after the line
//! itself is in the run log.
//!
//! It streams: it reads 128 KiB at a time, writes every complete line it holds, and keeps only
//! a partial last line. Lines are classified from their first bytes (`{"type":"…"`, which is how
//! Claude Code writes every line) so the common lines are never parsed.

use std::io::{self, Read};
use std::sync::mpsc::Sender;

use hangar_protocol::runlog::{PROCESS_USAGE_FIELD, ProcessUsage};
use serde_json::Value;

use crate::runlog::RunLog;
use crate::turn::Event;

/// Bytes read at a time; the harness's stdout pipe is widened to match (see `harness::spawn`).
const CHUNK: usize = 1024 * 1024;

/// What the main loop needs to know from the harness's stream.
#[derive(Clone, Debug, PartialEq)]
pub enum HarnessEvent {
    /// A turn's `result`. `uuids` is its `user_message_uuids` (the messages it covered).
    Result {
        is_error: bool,
        uuids: Option<Vec<String>>,
    },
    /// A `can_use_tool` control request.
    CanUseTool {
        request_id: String,
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
    },
    /// A `hook_callback` control request: Claude Code runs a hook the driver registered in
    /// `initialize` (the deny-risky rules' PreToolUse check). `input` is the hook's input.
    HookCallback {
        request_id: String,
        callback_id: String,
        input: Value,
    },
    /// The harness withdrew a permission request (e.g. after an interrupt).
    Cancel { request_id: String },
    /// A Claude Code `system`/`hook_response` line of hangar's Stop hook (the job's check).
    HookResponse(Value),
    /// One JSON-RPC message from Codex's app-server (its adapter writes the run log).
    Rpc(Value),
    /// Results came for these tool calls, of tools that may change files (Claude Code's `user`
    /// lines with `tool_result`s); the turn's tree is hashed after them.
    ToolResults(Vec<String>),
    /// A Claude Code `command_lifecycle` line: the message with this `uuid` is `queued`,
    /// `started` (the model has it), `completed`, `cancelled`, ...
    Lifecycle { uuid: String, state: String },
    /// stdout closed: the harness has exited or is about to.
    Eof,
}

/// Copies `input` to the run log until EOF, sending events to `tx`.
///
/// The buffer is zeroed once and reused: `filled` bytes are pending, the partial line is moved to
/// the front after each read, and the buffer only grows for a line longer than itself.
pub fn relay(mut input: impl Read, log: &RunLog, tx: &Sender<Event>) -> io::Result<()> {
    let mut buf: Vec<u8> = vec![0; 2 * CHUNK];
    let mut filled = 0;
    let mut usage = ProcessUsage::default();
    let mut events = Vec::new();
    let mut tools = ToolNames::default();
    loop {
        if buf.len() - filled < CHUNK {
            buf.resize(buf.len() * 2, 0);
        }
        let n = match input.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                finish(&buf[..filled], log, tx);
                return Err(e);
            }
        };
        if n == 0 {
            finish(&buf[..filled], log, tx);
            return Ok(());
        }
        let start = filled;
        filled += n;
        let consumed = process(
            &buf[..filled],
            start,
            log,
            &mut usage,
            &mut events,
            &mut tools,
        )?;
        buf.copy_within(consumed..filled, 0);
        filled -= consumed;
        for e in events.drain(..) {
            let _ = tx.send(Event::Harness(e));
        }
    }
}

/// Reads Codex's app-server output: one JSON-RPC message per line, each passed on as
/// [`HarnessEvent::Rpc`]; the adapter translates them into run-log lines. A line that is not JSON
/// is kept in the run log as a `hangar.warning`.
pub fn relay_rpc(input: impl Read, log: &RunLog, tx: &Sender<Event>) -> io::Result<()> {
    use std::io::BufRead;
    let mut reader = io::BufReader::with_capacity(256 * 1024, input);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            let _ = tx.send(Event::Harness(HarnessEvent::Eof));
            return Ok(());
        }
        match serde_json::from_slice::<Value>(line.trim_ascii()) {
            Ok(v) => {
                if tx.send(Event::Harness(HarnessEvent::Rpc(v))).is_err() {
                    return Ok(());
                }
            }
            Err(_) if line.trim_ascii().is_empty() => {}
            Err(_) => log.hangar(&hangar_protocol::runlog::HangarLine::Warning {
                message: format!(
                    "harness printed a line that is not JSON: {}",
                    String::from_utf8_lossy(&line).trim_end()
                ),
            }),
        }
    }
}

/// Writes a last line without a newline (with one added, so the log stays line-based) and
/// reports EOF.
fn finish(rest: &[u8], log: &RunLog, tx: &Sender<Event>) {
    if !rest.is_empty() {
        let mut line = rest.to_vec();
        line.push(b'\n');
        let _ = log.write_raw(&line);
    }
    let _ = tx.send(Event::Harness(HarnessEvent::Eof));
}

/// Writes every complete line in `buf` (patching `result` lines) as one sealed write and returns
/// how many bytes that consumed; the partial line after the last newline stays for the next
/// read. `fresh` is where this read's bytes begin: the carried bytes before it hold no newline,
/// so a long line read in many pieces is scanned once, not once per piece.
fn process(
    buf: &[u8],
    fresh: usize,
    log: &RunLog,
    usage: &mut ProcessUsage,
    events: &mut Vec<HarnessEvent>,
    tools: &mut ToolNames,
) -> io::Result<usize> {
    let mut line_start = 0;
    let mut scan_from = fresh;
    let mut out_from = 0;
    // What goes out, in order: stretches of `buf` and patched `result` lines.
    let mut out: Vec<Out> = Vec::new();
    while let Some(nl) = memchr::memchr(b'\n', &buf[scan_from..]) {
        let line_end = scan_from + nl;
        let line = &buf[line_start..line_end];
        match line_type(line) {
            Some(b"result") => {
                if let Some((p, event)) = patch_result(line, usage) {
                    out.push(Out::Buf(out_from, line_start));
                    out.push(Out::Patched(p));
                    out_from = line_end + 1;
                    events.push(event);
                }
            }
            Some(b"system") if memchr::memmem::find(line, b"hangar-verify: ").is_some() => {
                if let Ok(v) = serde_json::from_slice::<Value>(line)
                    && v.get("subtype").and_then(Value::as_str) == Some("hook_response")
                {
                    events.push(HarnessEvent::HookResponse(v));
                }
            }
            Some(b"command_lifecycle") => {
                if let Ok(v) = serde_json::from_slice::<Value>(line)
                    && let (Some(uuid), Some(state)) = (
                        v.get("command_uuid").and_then(Value::as_str),
                        v.get("state").and_then(Value::as_str),
                    )
                {
                    events.push(HarnessEvent::Lifecycle {
                        uuid: uuid.to_owned(),
                        state: state.to_owned(),
                    });
                }
            }
            Some(b"control_request") | Some(b"control_cancel_request") => {
                if let Some(e) = control_event(line) {
                    events.push(e);
                }
            }
            Some(b"assistant") if memchr::memmem::find(line, b"\"tool_use\"").is_some() => {
                tools.learn(line);
            }
            Some(b"user") if memchr::memmem::find(line, b"\"tool_result\"").is_some() => {
                let ids = tools.results(line);
                if !ids.is_empty() {
                    events.push(HarnessEvent::ToolResults(ids));
                }
            }
            _ => {}
        }
        line_start = line_end + 1;
        scan_from = line_start;
    }
    out.push(Out::Buf(out_from, line_start));
    let parts: Vec<&[u8]> = out
        .iter()
        .map(|o| match o {
            Out::Buf(from, to) => &buf[*from..*to],
            Out::Patched(p) => p.as_slice(),
        })
        .collect();
    log.write_parts(&parts)?;
    Ok(line_start)
}

/// A piece of one read's output: a stretch of the read buffer, or a `result` line patched.
enum Out {
    Buf(usize, usize),
    Patched(Vec<u8>),
}

/// The tool calls seen so far (id -> whether the tool may change files), to tell which results
/// start a tree hash.
#[derive(Debug, Default)]
struct ToolNames {
    may_change: std::collections::HashMap<String, bool>,
}

impl ToolNames {
    /// Notes the `tool_use` blocks of an `assistant` line.
    fn learn(&mut self, line: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        for block in content(&v) {
            if block.get("type").and_then(Value::as_str) == Some("tool_use")
                && let (Some(id), Some(name)) = (
                    block.get("id").and_then(Value::as_str),
                    block.get("name").and_then(Value::as_str),
                )
            {
                self.may_change
                    .insert(id.to_owned(), crate::trees::may_change_files(name));
            }
        }
    }

    /// The ids of the `tool_result` blocks of a `user` line whose tools may change files (or are
    /// unknown: better one hash too many).
    fn results(&mut self, line: &[u8]) -> Vec<String> {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            return Vec::new();
        };
        content(&v)
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .filter_map(|b| b.get("tool_use_id").and_then(Value::as_str))
            .filter(|id| self.may_change.remove(*id).unwrap_or(true))
            .map(str::to_owned)
            .collect()
    }
}

/// The blocks of a stream-json line's `message.content`.
fn content(v: &Value) -> impl Iterator<Item = &Value> {
    v.pointer("/message/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The line's `type`, read from its first bytes; a full parse only for lines not written as
/// `{"type":"…` (never seen from Claude Code, handled for safety).
fn line_type(line: &[u8]) -> Option<&[u8]> {
    const PREFIX: &[u8] = b"{\"type\":\"";
    if let Some(rest) = line.strip_prefix(PREFIX) {
        let end = memchr::memchr(b'"', rest)?;
        return Some(&rest[..end]);
    }
    if line.first() != Some(&b'{') {
        return None;
    }
    let v: Value = serde_json::from_slice(line).ok()?;
    match v.get("type").and_then(Value::as_str)? {
        "result" => Some(b"result"),
        "control_request" => Some(b"control_request"),
        "control_cancel_request" => Some(b"control_cancel_request"),
        _ => None,
    }
}

/// Adds the process usage to a `result` line: the field goes in before the final `}`; every other
/// byte stays as the harness wrote it.
fn patch_result(line: &[u8], usage: &mut ProcessUsage) -> Option<(Vec<u8>, HarnessEvent)> {
    let v: Value = serde_json::from_slice(line).ok()?;
    if let Some(u) = v.get("usage") {
        usage.add(u);
    }
    let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    let uuids = v
        .get("user_message_uuids")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        });
    let event = HarnessEvent::Result { is_error, uuids };
    let trimmed = line.trim_ascii_end();
    let body = trimmed.strip_suffix(b"}")?;
    let mut out = Vec::with_capacity(line.len() + 160);
    out.extend_from_slice(body);
    if body.trim_ascii_end() != b"{" {
        out.push(b',');
    }
    out.extend_from_slice(b"\"");
    out.extend_from_slice(PROCESS_USAGE_FIELD.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(&serde_json::to_vec(usage).ok()?);
    out.extend_from_slice(b"}\n");
    Some((out, event))
}

fn control_event(line: &[u8]) -> Option<HarnessEvent> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let request_id = v.get("request_id")?.as_str()?.to_owned();
    match v.get("type")?.as_str()? {
        "control_cancel_request" => Some(HarnessEvent::Cancel { request_id }),
        "control_request" => {
            let req = v.get("request")?;
            match req.get("subtype")?.as_str()? {
                "can_use_tool" => {}
                "hook_callback" => {
                    return Some(HarnessEvent::HookCallback {
                        request_id,
                        callback_id: req.get("callback_id")?.as_str()?.to_owned(),
                        input: req.get("input").cloned().unwrap_or(Value::Null),
                    });
                }
                _ => return None,
            }
            Some(HarnessEvent::CanUseTool {
                request_id,
                tool_name: req
                    .get("tool_name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                input: req.get("input").cloned().unwrap_or(Value::Null),
                tool_use_id: req
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn run(input: &str) -> (String, Vec<HarnessEvent>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let log = RunLog::open(&path).unwrap();
        let (tx, rx) = mpsc::channel();
        relay(input.as_bytes(), &log, &tx).unwrap();
        drop(tx);
        let events = rx.iter().map(|e| match e {
            Event::Harness(h) => h,
            other => panic!("{other:?}"),
        });
        let events = events.collect();
        (std::fs::read_to_string(path).unwrap(), events)
    }

    #[test]
    fn plain_lines_pass_unchanged_and_results_gain_process_usage() {
        let input = concat!(
            "{\"type\":\"assistant\",\"message\":{\"content\":[]}}\n",
            "{\"type\":\"result\",\"is_error\":false,\"usage\":{\"input_tokens\":11,\"output_tokens\":7},\"user_message_uuids\":[\"u1\"]}\n",
            "not json at all\n",
            "{\"type\":\"result\",\"is_error\":true,\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}\n",
        );
        let (log, events) = run(input);
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(
            lines[0],
            "{\"type\":\"assistant\",\"message\":{\"content\":[]}}"
        );
        assert_eq!(lines[2], "not json at all");
        assert!(lines[1].starts_with(
            &input.lines().nth(1).unwrap()[..input.lines().nth(1).unwrap().len() - 1]
        ));
        let r1: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(r1[PROCESS_USAGE_FIELD]["input_tokens"], 11);
        let r2: Value = serde_json::from_str(lines[3]).unwrap();
        assert_eq!(r2[PROCESS_USAGE_FIELD]["input_tokens"], 12);
        assert_eq!(r2[PROCESS_USAGE_FIELD]["output_tokens"], 9);
        assert_eq!(
            events,
            vec![
                HarnessEvent::Result {
                    is_error: false,
                    uuids: Some(vec!["u1".into()])
                },
                HarnessEvent::Result {
                    is_error: true,
                    uuids: None
                },
                HarnessEvent::Eof,
            ]
        );
    }

    #[test]
    fn control_requests_become_events_and_a_last_partial_line_is_kept() {
        let input = concat!(
            "{\"type\":\"control_request\",\"request_id\":\"q1\",\"request\":{\"subtype\":\"can_use_tool\",\"tool_name\":\"Bash\",\"input\":{\"command\":\"ls\"},\"tool_use_id\":\"t1\"}}\n",
            "{\"type\":\"control_request\",\"request_id\":\"q2\",\"request\":{\"subtype\":\"hook_callback\"}}\n",
            "{\"type\":\"control_cancel_request\",\"request_id\":\"q1\"}\n",
            "{\"type\":\"partial\""
        );
        let (log, events) = run(input);
        assert_eq!(log, format!("{input}\n"));
        assert_eq!(events.len(), 3);
        assert!(
            matches!(&events[0], HarnessEvent::CanUseTool { request_id, tool_name, .. } if request_id == "q1" && tool_name == "Bash")
        );
        assert_eq!(
            events[1],
            HarnessEvent::Cancel {
                request_id: "q1".into()
            }
        );
    }

    /// Sealed (as the driver always writes), the log still holds the harness's stream line for
    /// line (S7): what the seals cover, put together, is exactly the unsealed relay's output.
    #[test]
    fn sealed_the_stream_is_unchanged_and_every_byte_of_it_is_covered() {
        use hangar_protocol::RunKey;
        use hangar_protocol::logseal::{Order, Piece, SealKey, scan};
        let input = concat!(
            "{\"type\":\"assistant\",\"message\":{\"content\":[]}}\n",
            "{\"type\":\"result\",\"is_error\":false,\"usage\":{\"input_tokens\":11,\"output_tokens\":7}}\n",
            "{\"type\":\"system\"}\n",
            "{\"type\":\"result\",\"is_error\":false,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}\n",
        );
        let (plain, _) = run(input);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let key = SealKey::derive(&RunKey::from_bytes([3; 32]));
        let log = RunLog::open_sealed(&path, key.clone(), "r").unwrap();
        let (tx, _rx) = mpsc::channel();
        relay(input.as_bytes(), &log, &tx).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let s = scan(&f, 0, u64::MAX, 1 << 20, &key, "r", Order::After(0)).unwrap();
        let mut covered = Vec::new();
        for p in s.pieces {
            match p {
                Piece::Sealed { bytes, .. } => covered.extend(bytes.unwrap()),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(String::from_utf8(covered).unwrap(), plain);
        assert_eq!(s.resolved, std::fs::metadata(&path).unwrap().len());
    }

    #[test]
    fn lines_split_across_reads_are_handled() {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(3).min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let input = b"{\"type\":\"result\",\"usage\":{\"input_tokens\":5}}\n{\"type\":\"x\"}\n";
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::open(&dir.path().join("l")).unwrap();
        let (tx, rx) = mpsc::channel();
        relay(Trickle(input), &log, &tx).unwrap();
        let text = std::fs::read_to_string(dir.path().join("l")).unwrap();
        assert!(
            text.contains("\"hangar_process_usage\":{\"input_tokens\":5"),
            "{text}"
        );
        assert!(text.ends_with("{\"type\":\"x\"}\n"));
        assert_eq!(rx.try_iter().count(), 2);
    }
}
