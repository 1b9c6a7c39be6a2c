//! Codex's `codex exec --json` lines (as the driver writes them from `codex app-server`):
//! `item.started` / `item.completed` of tool items become `tool_call` / `tool_result`, agent
//! messages `assistant_text`, `turn.completed` `usage` then `result`, `turn.failed` a failed
//! `result`, `error` an `error`.
//!
//! | item type | tool name | input |
//! |---|---|---|
//! | `command_execution` | `command` | `{"command"}` |
//! | `file_change` | `file_change` | `{"changes"}` |
//! | `mcp_tool_call` | `mcp__<server>__<tool>` (Claude Code's spelling of MCP tools) | the `arguments` |
//! | `web_search` | `web_search` | `{"query"}` |
//!
//! A tool item that completes without having started (e.g. a `web_search`) gets its
//! `tool_call` just before its `tool_result`, so calls and results always pair.

use serde_json::{Value, json};

use super::line::{Item, J, Line, Obj};
use super::{EventKind, OpenItem, ParseContext, str_field};

/// The message the driver writes for an interrupted turn (`turn.failed`).
const INTERRUPTED: &str = "the turn was interrupted";

/// An `item.delta` line (the driver's, from Codex's app-server `item/agentMessage/delta` and
/// reasoning deltas: `{"type":"item.delta","item_id","kind":"agent_message"|"reasoning","delta"}`)
/// as a `text_delta` event.
pub(super) fn delta(v: &Value) -> Vec<EventKind> {
    let s = |k: &str| v.get(k).and_then(Value::as_str);
    match (s("delta"), s("kind")) {
        (Some(d), Some(kind)) if !d.is_empty() => vec![EventKind::TextDelta {
            text: d.to_owned(),
            thinking: kind == "reasoning",
            unverified: false,
        }],
        _ => Vec::new(),
    }
}

pub(super) fn parse(ty: &str, l: Line<'_>, ctx: &mut ParseContext) -> Vec<EventKind> {
    match ty {
        "turn.started" => {
            ctx.codex_last_text.clear();
            Vec::new()
        }
        "item.started" => match l.item {
            Obj::Object(item) => started(item, ctx),
            Obj::Other(_) => Vec::new(),
        },
        "item.completed" => match l.item {
            Obj::Object(item) => completed(item, ctx),
            Obj::Other(_) => Vec::new(),
        },
        "turn.completed" => turn_completed(l, ctx),
        "turn.failed" => {
            ctx.codex_open.clear();
            let message = error_message(l.error).unwrap_or_else(|| "the turn failed".to_owned());
            let status = if message == INTERRUPTED {
                "interrupted"
            } else {
                "failed"
            };
            vec![EventKind::Result {
                is_error: true,
                text: message,
                status: status.to_owned(),
                unverified: false,
            }]
        }
        "error" => vec![EventKind::Error {
            message: match l.message.as_str() {
                Some(m) => m.to_owned(),
                None => error_message(l.error).unwrap_or_else(|| "error".to_owned()),
            },
        }],
        _ => Vec::new(),
    }
}

/// `error.message`, when `error` is an object and its message a string.
fn error_message(e: Obj<'_, super::line::ErrorField<'_>>) -> Option<String> {
    e.object().and_then(|e| e.message.into_str())
}

/// The tool name and input of a tool item; `None` for items that are not tool calls.
fn tool(item: &Item<'_>) -> Option<(String, Value)> {
    let s = |v: &Option<Value>| v.clone().unwrap_or(Value::Null);
    let str_of = |j: &J<'_>| j.as_str().unwrap_or_default().to_owned();
    match item.ty.as_str()? {
        "command_execution" => Some(("command".into(), json!({"command": s(&item.command)}))),
        "file_change" => Some(("file_change".into(), json!({"changes": s(&item.changes)}))),
        "mcp_tool_call" => Some((
            format!("mcp__{}__{}", str_of(&item.server), str_of(&item.tool)),
            s(&item.arguments),
        )),
        "web_search" => Some(("web_search".into(), json!({"query": s(&item.query)}))),
        _ => None,
    }
}

/// The tool name a `hangar.approval` line's Codex `tool_name` is about.
pub(crate) fn approval_tool(tool_name: &str) -> &str {
    match tool_name {
        "commandExecution" => "command",
        "fileChange" => "file_change",
        other => other,
    }
}

fn started(item: Item<'_>, ctx: &mut ParseContext) -> Vec<EventKind> {
    let Some((name, input)) = tool(&item) else {
        return Vec::new();
    };
    let id = item.id.into_str().unwrap_or_default();
    if ctx.codex_open.iter().any(|o| o.id == id) {
        return Vec::new();
    }
    ctx.codex_open.push(OpenItem {
        id: id.clone(),
        name: name.clone(),
        asked: false,
    });
    vec![EventKind::ToolCall {
        tool_use_id: id,
        name,
        input,
    }]
}

fn completed(item: Item<'_>, ctx: &mut ParseContext) -> Vec<EventKind> {
    match item.ty.as_str() {
        Some("agent_message") => {
            let text = item.text.into_str().unwrap_or_default();
            ctx.codex_last_text.clone_from(&text);
            return if text.is_empty() {
                Vec::new()
            } else {
                vec![EventKind::AssistantText {
                    text,
                    unverified: false,
                }]
            };
        }
        Some(_) => {}
        None => return Vec::new(),
    }
    let Some((name, input)) = tool(&item) else {
        return Vec::new();
    };
    let id = item.id.as_str().unwrap_or_default().to_owned();
    let mut out = Vec::with_capacity(2);
    match ctx.codex_open.iter().position(|o| o.id == id) {
        Some(i) => {
            ctx.codex_open.remove(i);
        }
        None => out.push(EventKind::ToolCall {
            tool_use_id: id.clone(),
            name,
            input,
        }),
    }
    let exit_code = item.exit_code.as_i64();
    let mut output = match item.ty.as_str() {
        Some("command_execution") => item.aggregated_output.into_str().unwrap_or_default(),
        Some("file_change") => item
            .changes
            .as_ref()
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| format!("{} {}", str_field(c, "kind"), str_field(c, "path")))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default(),
        _ => String::new(),
    };
    let status = item.status.into_str().unwrap_or_default();
    let is_error =
        matches!(status.as_str(), "failed" | "declined") || exit_code.is_some_and(|c| c != 0);
    if output.is_empty() && !status.is_empty() && status != "completed" {
        output = status;
    }
    out.push(EventKind::ToolResult {
        tool_use_id: id,
        output,
        is_error,
    });
    out
}

fn turn_completed(l: Line<'_>, ctx: &mut ParseContext) -> Vec<EventKind> {
    ctx.codex_open.clear();
    let mut out = Vec::with_capacity(2);
    if l.usage.present() {
        let u = l.usage.object().unwrap_or_default();
        let n = |j: &J<'_>| j.as_u64().unwrap_or(0);
        out.push(EventKind::Usage {
            input_tokens: n(&u.input_tokens),
            output_tokens: n(&u.output_tokens),
            cached_input_tokens: n(&u.cached_input_tokens),
            cost_usd: None,
        });
    }
    out.push(EventKind::Result {
        is_error: false,
        text: std::mem::take(&mut ctx.codex_last_text),
        status: "completed".to_owned(),
        unverified: false,
    });
    out
}
