//! Claude Code's stream-json lines: `assistant` (text and `tool_use` blocks), `user` (tool
//! results, and plain text when the CLI echoes a message) and `result` (usage, then the result).
//! Every other Claude line type is handled elsewhere or ignored (see the parent module).

use serde_json::Value;

use super::{EventKind, ParseContext, str_field, u64_field};

pub(super) fn parse(ty: &str, v: &Value, ctx: &mut ParseContext) -> Vec<EventKind> {
    match ty {
        "assistant" => assistant(v),
        "user" => user(v),
        "result" => result(v, ctx),
        _ => Vec::new(),
    }
}

fn content(v: &Value) -> Option<&Value> {
    v.pointer("/message/content")
}

fn assistant(v: &Value) -> Vec<EventKind> {
    let Some(blocks) = content(v).and_then(Value::as_array) else {
        // Content as a bare string (not what the CLI prints, but tolerated).
        return match content(v).and_then(Value::as_str) {
            Some(t) if !t.is_empty() => vec![EventKind::AssistantText { text: t.to_owned() }],
            _ => Vec::new(),
        };
    };
    blocks
        .iter()
        .filter_map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = str_field(b, "text");
                (!text.is_empty()).then_some(EventKind::AssistantText { text })
            }
            Some("tool_use") | Some("server_tool_use") => Some(EventKind::ToolCall {
                tool_use_id: str_field(b, "id"),
                name: str_field(b, "name"),
                input: b.get("input").cloned().unwrap_or(Value::Null),
            }),
            _ => None,
        })
        .collect()
}

/// The interrupt markers Claude Code writes as `user` text.
fn is_interrupt_marker(text: &str) -> bool {
    text.starts_with("[Request interrupted by user")
}

fn user(v: &Value) -> Vec<EventKind> {
    let synthetic = v.get("isSynthetic").and_then(Value::as_bool) == Some(true)
        || v.get("isMeta").and_then(Value::as_bool) == Some(true);
    let subagent = v.get("parent_tool_use_id").is_some_and(|p| !p.is_null());
    let echo = |text: String| -> Vec<EventKind> {
        if synthetic || subagent || text.trim().is_empty() || is_interrupt_marker(&text) {
            Vec::new()
        } else {
            vec![EventKind::UserMessage { text }]
        }
    };
    match content(v) {
        Some(Value::String(s)) => echo(s.clone()),
        Some(Value::Array(blocks)) => {
            let results: Vec<EventKind> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                .map(|b| EventKind::ToolResult {
                    tool_use_id: str_field(b, "tool_use_id"),
                    output: text_of(b.get("content")),
                    is_error: b.get("is_error").and_then(Value::as_bool) == Some(true),
                })
                .collect();
            if results.is_empty() {
                echo(text_of(Some(&Value::Array(blocks.clone()))))
            } else {
                // Text beside tool results is the CLI's own (e.g. an interrupt marker).
                results
            }
        }
        _ => Vec::new(),
    }
}

/// The text of a content value: a string, or the `text` parts of a block list joined by
/// newlines (an image part shows as `[image]`).
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => p.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("image") => Some("[image]".to_owned()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn result(v: &Value, ctx: &mut ParseContext) -> Vec<EventKind> {
    let is_error = v.get("is_error").and_then(Value::as_bool) == Some(true);
    let mut out = Vec::with_capacity(2);
    if let Some(u) = v.get("usage") {
        let cached = u64_field(u, "cache_read_input_tokens");
        let created = u64_field(u, "cache_creation_input_tokens");
        let total = v.get("total_cost_usd").and_then(Value::as_f64);
        let cost_usd = total.map(|t| match ctx.claude_cost {
            Some(prev) if prev <= t => t - prev,
            _ => t,
        });
        if total.is_some() {
            ctx.claude_cost = total;
        }
        out.push(EventKind::Usage {
            input_tokens: u64_field(u, "input_tokens")
                .saturating_add(cached)
                .saturating_add(created),
            output_tokens: u64_field(u, "output_tokens"),
            cached_input_tokens: cached,
            cost_usd,
        });
    }
    let text = match v.get("result").and_then(Value::as_str) {
        Some(t) => t.to_owned(),
        None => v
            .get("errors")
            .and_then(Value::as_array)
            .map(|es| {
                es.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default(),
    };
    let status = match v.get("subtype").and_then(Value::as_str) {
        Some(s) => s.to_owned(),
        None if is_error => "error".to_owned(),
        None => "success".to_owned(),
    };
    out.push(EventKind::Result {
        is_error,
        text,
        status,
    });
    out
}
