//! OpenAI Responses wire shapes: the SSE event sequence for a scripted [`Step`], as Codex 0.169
//! accepts it (full form: `response.created`, `response.in_progress`, per item
//! `response.output_item.added` … `response.output_item.done`, then `response.completed` or
//! `response.failed`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::script::{Block, Step};
use crate::sse::{Frame, call_arguments, split_text};

/// Usage reported by every `response.completed` (non-zero everywhere so token accounting can be
/// checked field by field; Codex maps them 1:1 into `thread/tokenUsage/updated`).
pub(crate) const INPUT_TOKENS: u64 = 100;
/// `usage.input_tokens_details.cached_tokens`.
pub(crate) const CACHED_TOKENS: u64 = 20;
/// `usage.output_tokens`.
pub(crate) const OUTPUT_TOKENS: u64 = 10;
/// `usage.output_tokens_details.reasoning_tokens`.
pub(crate) const REASONING_TOKENS: u64 = 3;

/// Writes SSE events with increasing `sequence_number`s.
struct Events {
    frames: Vec<Frame>,
    sequence: u64,
}

impl Events {
    fn push(&mut self, delay: Option<Duration>, kind: &str, mut data: Map<String, Value>) {
        data.insert("type".to_owned(), Value::String(kind.to_owned()));
        data.insert("sequence_number".to_owned(), Value::from(self.sequence));
        self.sequence += 1;
        self.frames.push(Frame {
            delay,
            bytes: format!("event: {kind}\ndata: {}\n\n", Value::Object(data)),
        });
    }
}

fn fields(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The usage object of `response.completed`.
pub(crate) fn usage() -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "input_tokens_details": {"cached_tokens": CACHED_TOKENS},
        "output_tokens": OUTPUT_TOKENS,
        "output_tokens_details": {"reasoning_tokens": REASONING_TOKENS},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
    })
}

/// What one tool-call block becomes on the wire.
enum Call {
    /// A `function_call` with JSON `arguments`.
    Function { name: String, arguments: String },
    /// A `custom_tool_call` with raw `input`.
    Custom { name: String, input: String },
}

/// The full event sequence for a streamed reply to a request for `model`: response number
/// `response` (ids `resp_hk_<response>`, `msg_hk_<response>_<index>`); every tool call takes the
/// next number from `last_call` (`call_hk_<n>`).
pub(crate) fn stream_frames(
    step: &Step,
    model: &str,
    response: u64,
    last_call: &mut u64,
) -> Vec<Frame> {
    let response_id = format!("resp_hk_{response}");
    let created_at = now_secs();
    let snapshot = |status: &str, output: &[Value]| {
        json!({
            "id": response_id, "object": "response", "created_at": created_at,
            "status": status, "model": model, "output": output,
        })
    };
    let mut events = Events {
        frames: Vec::new(),
        sequence: 0,
    };
    events.push(
        None,
        "response.created",
        fields(json!({"response": snapshot("in_progress", &[])})),
    );
    events.push(
        None,
        "response.in_progress",
        fields(json!({"response": snapshot("in_progress", &[])})),
    );
    let mut done_items = Vec::new();
    for (index, block) in step.reply.iter().enumerate() {
        let call = match block {
            Block::Text(text) => {
                let id = format!("msg_hk_{response}_{index}");
                done_items.push(text_events(&mut events, step, index, &id, text));
                continue;
            }
            Block::ToolUse { name, input } => Call::Function {
                name: name.clone(),
                arguments: input.to_string(),
            },
            Block::Exec { cmd, extra } => Call::Function {
                name: "exec_command".to_owned(),
                arguments: call_arguments("cmd", cmd, extra).to_string(),
            },
            Block::Patch(patch) => Call::Custom {
                name: "apply_patch".to_owned(),
                input: patch.clone(),
            },
        };
        *last_call += 1;
        done_items.push(call_events(&mut events, step, index, *last_call, call));
    }
    match &step.fail {
        Some(message) => {
            let mut failed = snapshot("failed", &done_items);
            if let Some(map) = failed.as_object_mut() {
                map.insert(
                    "error".to_owned(),
                    json!({"code": "server_error", "message": message}),
                );
                map.insert("usage".to_owned(), Value::Null);
            }
            events.push(None, "response.failed", fields(json!({"response": failed})));
        }
        None => {
            let mut completed = snapshot("completed", &done_items);
            if let Some(map) = completed.as_object_mut() {
                map.insert("usage".to_owned(), usage());
            }
            events.push(
                None,
                "response.completed",
                fields(json!({"response": completed})),
            );
        }
    }
    events.frames
}

/// A `message` item: added, content part added, text deltas, text done, part done, item done.
fn text_events(events: &mut Events, step: &Step, index: usize, id: &str, text: &str) -> Value {
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
    events.push(
        None,
        "response.output_item.added",
        fields(json!({"output_index": index, "item": {
            "id": id, "type": "message", "status": "in_progress", "role": "assistant",
            "content": [],
        }})),
    );
    let at = |extra: Value| {
        let mut map = fields(json!({"item_id": id, "output_index": index, "content_index": 0}));
        map.extend(fields(extra));
        map
    };
    events.push(
        None,
        "response.content_part.added",
        at(json!({"part": part("")})),
    );
    for piece in split_text(text, step.chunks) {
        events.push(
            step.chunk_delay,
            "response.output_text.delta",
            at(json!({"delta": piece})),
        );
    }
    events.push(None, "response.output_text.done", at(json!({"text": text})));
    events.push(
        None,
        "response.content_part.done",
        at(json!({"part": part(text)})),
    );
    let item = json!({
        "id": id, "type": "message", "status": "completed", "role": "assistant",
        "content": [part(text)],
    });
    events.push(
        None,
        "response.output_item.done",
        fields(json!({"output_index": index, "item": item})),
    );
    item
}

/// A `function_call` or `custom_tool_call` item: added, argument / input deltas (at least two),
/// done, item done.
fn call_events(events: &mut Events, step: &Step, index: usize, n: u64, call: Call) -> Value {
    let call_id = format!("call_hk_{n}");
    let (id, kind, name, payload_key, payload, delta_kind, done_kind) = match call {
        Call::Function { name, arguments } => (
            format!("fc_hk_{n}"),
            "function_call",
            name,
            "arguments",
            arguments,
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
        ),
        Call::Custom { name, input } => (
            format!("ctc_hk_{n}"),
            "custom_tool_call",
            name,
            "input",
            input,
            "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.done",
        ),
    };
    let item = |status: &str, payload: &str| {
        let mut map = fields(json!({
            "id": id, "type": kind, "status": status, "call_id": call_id, "name": name,
        }));
        map.insert(payload_key.to_owned(), Value::String(payload.to_owned()));
        Value::Object(map)
    };
    events.push(
        None,
        "response.output_item.added",
        fields(json!({"output_index": index, "item": item("in_progress", "")})),
    );
    for piece in split_text(&payload, step.chunks.max(2)) {
        events.push(
            step.chunk_delay,
            delta_kind,
            fields(json!({"item_id": id, "output_index": index, "delta": piece})),
        );
    }
    let mut done = fields(json!({"item_id": id, "output_index": index}));
    done.insert(payload_key.to_owned(), Value::String(payload.clone()));
    events.push(None, done_kind, done);
    let finished = item("completed", &payload);
    events.push(
        None,
        "response.output_item.done",
        fields(json!({"output_index": index, "item": finished})),
    );
    finished
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .filter_map(|f| f.bytes.strip_prefix("event: "))
            .filter_map(|rest| rest.split('\n').next())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn exec_becomes_an_exec_command_function_call() {
        let mut last_call = 0;
        let frames = stream_frames(&Step::exec("echo hi"), "gpt-5.5", 1, &mut last_call);
        assert_eq!(last_call, 1);
        assert_eq!(
            names(&frames),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let done = frames.get(5).map(|f| f.bytes.clone()).unwrap_or_default();
        assert!(
            done.contains(r#""arguments":"{\"cmd\":\"echo hi\"}""#),
            "{done}"
        );
        assert!(done.contains(r#""item_id":"fc_hk_1""#), "{done}");
    }

    #[test]
    fn failure_replaces_completion() {
        let mut last_call = 0;
        let frames = stream_frames(&Step::failed("boom"), "m", 7, &mut last_call);
        assert_eq!(
            names(&frames),
            [
                "response.created",
                "response.in_progress",
                "response.failed"
            ]
        );
        let last = frames.last().map(|f| f.bytes.clone()).unwrap_or_default();
        assert!(last.contains(r#""message":"boom""#), "{last}");
        assert!(last.contains(r#""id":"resp_hk_7""#), "{last}");
    }
}
