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

use super::{EventKind, OpenItem, ParseContext, str_field, u64_field};

/// The message the driver writes for an interrupted turn (`turn.failed`).
const INTERRUPTED: &str = "the turn was interrupted";

pub(super) fn parse(ty: &str, v: &Value, ctx: &mut ParseContext) -> Vec<EventKind> {
    match ty {
        "turn.started" => {
            ctx.codex_last_text.clear();
            Vec::new()
        }
        "item.started" => match v.get("item") {
            Some(item) => started(item, ctx),
            None => Vec::new(),
        },
        "item.completed" => match v.get("item") {
            Some(item) => completed(item, ctx),
            None => Vec::new(),
        },
        "turn.completed" => turn_completed(v, ctx),
        "turn.failed" => {
            ctx.codex_open.clear();
            let message = v
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("the turn failed")
                .to_owned();
            let status = if message == INTERRUPTED {
                "interrupted"
            } else {
                "failed"
            };
            vec![EventKind::Result {
                is_error: true,
                text: message,
                status: status.to_owned(),
            }]
        }
        "error" => vec![EventKind::Error {
            message: v
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| v.pointer("/error/message").and_then(Value::as_str))
                .unwrap_or("error")
                .to_owned(),
        }],
        _ => Vec::new(),
    }
}

/// The tool name and input of a tool item; `None` for items that are not tool calls.
pub(crate) fn tool(item: &Value) -> Option<(String, Value)> {
    let s = |k: &str| item.get(k).cloned().unwrap_or(Value::Null);
    match item.get("type").and_then(Value::as_str)? {
        "command_execution" => Some(("command".into(), json!({"command": s("command")}))),
        "file_change" => Some(("file_change".into(), json!({"changes": s("changes")}))),
        "mcp_tool_call" => Some((
            format!(
                "mcp__{}__{}",
                str_field(item, "server"),
                str_field(item, "tool")
            ),
            s("arguments"),
        )),
        "web_search" => Some(("web_search".into(), json!({"query": s("query")}))),
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

fn started(item: &Value, ctx: &mut ParseContext) -> Vec<EventKind> {
    let Some((name, input)) = tool(item) else {
        return Vec::new();
    };
    let id = str_field(item, "id");
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

fn completed(item: &Value, ctx: &mut ParseContext) -> Vec<EventKind> {
    match item.get("type").and_then(Value::as_str) {
        Some("agent_message") => {
            let text = str_field(item, "text");
            ctx.codex_last_text.clone_from(&text);
            return if text.is_empty() {
                Vec::new()
            } else {
                vec![EventKind::AssistantText { text }]
            };
        }
        Some(_) => {}
        None => return Vec::new(),
    }
    let Some((name, input)) = tool(item) else {
        return Vec::new();
    };
    let id = str_field(item, "id");
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
    let status = str_field(item, "status");
    let exit_code = item.get("exit_code").and_then(Value::as_i64);
    let is_error =
        matches!(status.as_str(), "failed" | "declined") || exit_code.is_some_and(|c| c != 0);
    let mut output = match item.get("type").and_then(Value::as_str) {
        Some("command_execution") => str_field(item, "aggregated_output"),
        Some("file_change") => item
            .get("changes")
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

fn turn_completed(v: &Value, ctx: &mut ParseContext) -> Vec<EventKind> {
    ctx.codex_open.clear();
    let mut out = Vec::with_capacity(2);
    if let Some(u) = v.get("usage") {
        out.push(EventKind::Usage {
            input_tokens: u64_field(u, "input_tokens"),
            output_tokens: u64_field(u, "output_tokens"),
            cached_input_tokens: u64_field(u, "cached_input_tokens"),
            cost_usd: None,
        });
    }
    out.push(EventKind::Result {
        is_error: false,
        text: std::mem::take(&mut ctx.codex_last_text),
        status: "completed".to_owned(),
    });
    out
}
