//! Claude Code's stream-json lines: `assistant` (text and `tool_use` blocks), `user` (tool
//! results, and plain text when the CLI echoes a message) and `result` (usage, then the result).
//! Every other Claude line type is handled elsewhere or ignored (see the parent module).

use serde_json::Value;

use super::line::{Block, Content, Line, Obj};
use super::{EventKind, ParseContext};

/// A `stream_event` line (`--include-partial-messages`): a `text_delta` or `thinking_delta` of
/// the main conversation's message as a `text_delta` event; every other stream event (a block's
/// start or stop, a tool input's pieces, a subagent's) nothing.
pub(super) fn stream_event(v: &Value) -> Vec<EventKind> {
    if v.get("parent_tool_use_id").is_some_and(|p| !p.is_null()) {
        return Vec::new();
    }
    let Some(event) = v.get("event") else {
        return Vec::new();
    };
    if event.get("type").and_then(Value::as_str) != Some("content_block_delta") {
        return Vec::new();
    }
    let delta = event.get("delta");
    let field = |k: &str| delta.and_then(|d| d.get(k)).and_then(Value::as_str);
    let (text, thinking) = match field("type") {
        Some("text_delta") => (field("text"), false),
        Some("thinking_delta") => (field("thinking"), true),
        _ => (None, false),
    };
    match text {
        Some(t) if !t.is_empty() => vec![EventKind::TextDelta {
            text: t.to_owned(),
            thinking,
            unverified: false,
        }],
        _ => Vec::new(),
    }
}

pub(super) fn parse(ty: &str, l: Line<'_>, ctx: &mut ParseContext) -> Vec<EventKind> {
    match ty {
        "assistant" => assistant(l),
        "user" => user(l),
        "result" => result(l, ctx),
        _ => Vec::new(),
    }
}

/// `message.content`, when `message` is an object.
fn content(l: Line<'_>) -> Content<'_> {
    l.message.object().map(|m| m.content).unwrap_or_default()
}

fn assistant(l: Line<'_>) -> Vec<EventKind> {
    let blocks = match content(l) {
        Content::Blocks(b) => b,
        // Content as a bare string (not what the CLI prints, but tolerated).
        Content::Str(t) if !t.is_empty() => {
            return vec![EventKind::AssistantText {
                text: t.into_owned(),
                unverified: false,
            }];
        }
        _ => return Vec::new(),
    };
    blocks
        .into_iter()
        .filter_map(Obj::object)
        .filter_map(|b| match b.ty.as_str() {
            Some("text") => {
                let text = b.text.into_str().unwrap_or_default();
                (!text.is_empty()).then_some(EventKind::AssistantText {
                    text,
                    unverified: false,
                })
            }
            Some("tool_use") | Some("server_tool_use") => Some(EventKind::ToolCall {
                tool_use_id: b.id.into_str().unwrap_or_default(),
                name: b.name.into_str().unwrap_or_default(),
                input: b.input.unwrap_or_default(),
            }),
            _ => None,
        })
        .collect()
}

/// The interrupt markers Claude Code writes as `user` text.
fn is_interrupt_marker(text: &str) -> bool {
    text.starts_with("[Request interrupted by user")
}

fn user(l: Line<'_>) -> Vec<EventKind> {
    let synthetic = l.is_synthetic.as_bool() == Some(true) || l.is_meta.as_bool() == Some(true);
    let subagent = l.parent_tool_use_id.is_set();
    let echo = |text: String| -> Vec<EventKind> {
        if synthetic || subagent || text.trim().is_empty() || is_interrupt_marker(&text) {
            Vec::new()
        } else {
            vec![EventKind::UserMessage { text }]
        }
    };
    match content(l) {
        Content::Str(s) => echo(s.into_owned()),
        Content::Blocks(blocks) => {
            let is_result = |b: &Obj<'_, Block<'_>>| matches!(b, Obj::Object(b) if b.ty.as_str() == Some("tool_result"));
            if !blocks.iter().any(is_result) {
                return echo(text_of(Content::Blocks(blocks)));
            }
            // Text beside tool results is the CLI's own (e.g. an interrupt marker).
            blocks
                .into_iter()
                .filter(is_result)
                .filter_map(Obj::object)
                .map(|b| EventKind::ToolResult {
                    tool_use_id: b.tool_use_id.into_str().unwrap_or_default(),
                    is_error: b.is_error.as_bool() == Some(true),
                    output: text_of(b.content),
                })
                .collect()
        }
        Content::Other => Vec::new(),
    }
}

/// The text of a content value: a string, or the `text` parts of a block list joined by
/// newlines (an image part shows as `[image]`).
fn text_of(content: Content<'_>) -> String {
    match content {
        Content::Str(s) => s.into_owned(),
        Content::Blocks(parts) => parts
            .into_iter()
            .filter_map(Obj::object)
            .filter_map(|p| match p.ty.as_str() {
                Some("text") => p.text.into_str(),
                Some("image") => Some("[image]".to_owned()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Content::Other => String::new(),
    }
}

fn result(l: Line<'_>, ctx: &mut ParseContext) -> Vec<EventKind> {
    let is_error = l.is_error.as_bool() == Some(true);
    let mut out = Vec::with_capacity(2);
    if l.usage.present() {
        let u = l.usage.object().unwrap_or_default();
        let n = |j: &super::line::J<'_>| j.as_u64().unwrap_or(0);
        let cached = n(&u.cache_read_input_tokens);
        let created = n(&u.cache_creation_input_tokens);
        let total = l.total_cost_usd.as_f64();
        let cost_usd = total.map(|t| match ctx.claude_cost {
            Some(prev) if prev <= t => t - prev,
            _ => t,
        });
        if total.is_some() {
            ctx.claude_cost = total;
        }
        out.push(EventKind::Usage {
            input_tokens: n(&u.input_tokens)
                .saturating_add(cached)
                .saturating_add(created),
            output_tokens: n(&u.output_tokens),
            cached_input_tokens: cached,
            cost_usd,
        });
    }
    // An answer an interrupt stopped: said so, without the CLI's diagnostic in its place.
    let aborted = l
        .terminal_reason
        .into_str()
        .is_some_and(|r| r.starts_with("aborted"));
    if aborted {
        out.push(EventKind::Result {
            is_error,
            text: String::new(),
            status: "interrupted".to_owned(),
            unverified: false,
        });
        return out;
    }
    let text = match l.result.into_str() {
        Some(t) => t,
        None => match l.errors {
            super::line::Arr::Array(es) => es
                .iter()
                .filter_map(|e| e.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            super::line::Arr::Other => String::new(),
        },
    };
    let status = match l.subtype.into_str() {
        Some(s) => s,
        None if is_error => "error".to_owned(),
        None => "success".to_owned(),
    };
    out.push(EventKind::Result {
        is_error,
        text,
        status,
        unverified: false,
    });
    out
}
