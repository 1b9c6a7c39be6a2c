//! Anthropic Messages wire shapes: the SSE event sequence for a scripted [`Step`] and the plain
//! JSON message used for non-streaming requests. [`Frame`] and [`split_text`] are shared with the
//! OpenAI Responses shapes in `responses.rs`.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::script::{Block, Step};

/// One SSE event, written as its own HTTP chunk after `delay`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    pub delay: Option<Duration>,
    pub bytes: String,
}

/// Usage numbers reported for every reply (non-zero so cost accounting has something to add up).
pub(crate) const INPUT_TOKENS: u64 = 11;
pub(crate) const OUTPUT_TOKENS: u64 = 7;

fn event(delay: Option<Duration>, data: &Value) -> Frame {
    let kind = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    Frame {
        delay,
        bytes: format!("event: {kind}\ndata: {data}\n\n"),
    }
}

/// Splits `text` into at most `pieces` non-empty parts of near-equal length (on char boundaries).
pub(crate) fn split_text(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = pieces.max(1).min(chars.len());
    if n == 0 {
        return Vec::new();
    }
    let (base, extra) = (chars.len() / n, chars.len() % n);
    let mut out = Vec::with_capacity(n);
    let mut at = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        out.push(chars.get(at..at + len).unwrap_or_default().iter().collect());
        at += len;
    }
    out
}

/// The full event sequence for a streamed reply. `tool_id` hands out a fresh id per tool block.
pub(crate) fn stream_frames(
    step: &Step,
    model: &str,
    message_id: &str,
    tool_id: &mut impl FnMut() -> String,
) -> Vec<Frame> {
    let mut frames = vec![event(
        None,
        &json!({
            "type": "message_start",
            "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {
                    "input_tokens": INPUT_TOKENS, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0, "output_tokens": 1,
                },
            },
        }),
    )];
    for (index, block) in step.reply.iter().enumerate() {
        match block {
            Block::Text(text) => {
                frames.push(event(
                    None,
                    &json!({"type": "content_block_start", "index": index,
                            "content_block": {"type": "text", "text": ""}}),
                ));
                for piece in split_text(text, step.chunks) {
                    frames.push(event(
                        step.chunk_delay,
                        &json!({"type": "content_block_delta", "index": index,
                                "delta": {"type": "text_delta", "text": piece}}),
                    ));
                }
            }
            Block::ToolUse { name, input } => {
                tool_frames(&mut frames, step, index, name, input, tool_id());
            }
            Block::Exec { cmd, extra } => {
                let input = call_arguments("command", cmd, extra);
                tool_frames(&mut frames, step, index, "Bash", &input, tool_id());
            }
            // Refused by `anthropic::main_plan` before anything is streamed.
            Block::Patch(_) => continue,
        }
        frames.push(event(
            None,
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if let Some(message) = &step.fail {
        frames.push(event(
            None,
            &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
        ));
        return frames;
    }
    let stop_reason = if step.has_tool_use() {
        "tool_use"
    } else {
        "end_turn"
    };
    frames.push(event(
        None,
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"output_tokens": OUTPUT_TOKENS}}),
    ));
    frames.push(event(None, &json!({"type": "message_stop"})));
    frames
}

fn tool_frames(
    frames: &mut Vec<Frame>,
    step: &Step,
    index: usize,
    name: &str,
    input: &Value,
    id: String,
) {
    frames.push(event(
        None,
        &json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
    ));
    for piece in split_text(&input.to_string(), step.chunks.max(2)) {
        frames.push(event(
            step.chunk_delay,
            &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}),
        ));
    }
}

/// The JSON arguments of a shell-command call: `{key: cmd}` followed by `extra` (whose own `key`
/// entry, if any, is ignored).
pub(crate) fn call_arguments(key: &str, cmd: &str, extra: &Map<String, Value>) -> Value {
    let mut args = Map::new();
    args.insert(key.to_owned(), Value::String(cmd.to_owned()));
    for (name, value) in extra {
        if name != key {
            args.insert(name.clone(), value.clone());
        }
    }
    Value::Object(args)
}

/// A complete non-streamed assistant message holding `text`.
pub(crate) fn plain_message(model: &str, message_id: &str, text: &str) -> Value {
    json!({
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {
            "input_tokens": INPUT_TOKENS, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": OUTPUT_TOKENS,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_text_covers_all_chars() {
        assert_eq!(split_text("abcdefg", 3), vec!["abc", "de", "fg"]);
        assert_eq!(split_text("ab", 5), vec!["a", "b"]);
        assert_eq!(split_text("", 3), Vec::<String>::new());
        assert_eq!(split_text("héllo", 2).concat(), "héllo");
    }

    #[test]
    fn tool_frames_split_json_in_two() {
        let step = Step::tool("Bash", json!({"command": "echo hi"}));
        let mut n = 0;
        let frames = stream_frames(&step, "m", "msg_1", &mut || {
            n += 1;
            format!("toolu_hk_{n}")
        });
        let deltas = frames
            .iter()
            .filter(|f| f.bytes.contains("input_json_delta"))
            .count();
        assert_eq!(deltas, 2);
        assert!(frames.iter().any(|f| f.bytes.contains("\"tool_use\"")));
    }
}
