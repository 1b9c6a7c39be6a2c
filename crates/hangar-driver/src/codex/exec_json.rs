//! Codex's app-server notifications translated into the lines `codex exec --json` prints
//! (S10), so one event parser, one usage count and one conversation capture serve both
//! harnesses.
//!
//! | app-server notification | run-log line |
//! |---|---|
//! | thread started / resumed / forked | `{"type":"thread.started","thread_id":…}` |
//! | `turn/started` | `{"type":"turn.started","turn_id":…}` |
//! | `item/started` (command) | `{"type":"item.started","item":{"id":"item_N","type":"command_execution",…,"status":"in_progress"}}` |
//! | `item/completed` (agentMessage, reasoning, commandExecution, fileChange, …) | `{"type":"item.completed","item":{…}}` |
//! | `turn/completed` `completed` | `{"type":"turn.completed","usage":{"input_tokens","cached_input_tokens","cache_write_input_tokens","output_tokens","reasoning_output_tokens"}}` plus `hangar_process_usage` |
//! | `turn/completed` `failed` | `{"type":"turn.failed","error":{"message":…}}` |
//! | `turn/completed` `interrupted` | `{"type":"turn.failed","error":{"message":"the turn was interrupted"}}` |
//! | `error` | `{"type":"error","message":…}` |
//! | `item/agentMessage/delta`, `item/reasoning/textDelta`, `item/reasoning/summaryTextDelta` | `{"type":"item.delta","item_id":<app-server's id>,"kind":"agent_message"\|"reasoning","delta":…}` (hangar's own: `codex exec` streams no text) |
//!
//! `turn_id` (app-server's turn id, not in `codex exec`'s lines) is on `turn.started`,
//! `turn.completed` and `turn.failed`: a fork cuts a thread at a turn (`thread/fork`
//! `lastTurnId`), so the control plane must know which turn each step came after.
//!
//! Item ids are `item_0`, `item_1`, … in order of first appearance, as `codex exec` numbers them.
//! `usage` is the turn's own (the thread's running total from `thread/tokenUsage/updated`, less
//! the total when the turn started); `hangar_process_usage` carries the totals of this process in
//! the field names Claude Code's lines use (`cache_read_input_tokens` = cached input).

use std::collections::HashMap;

use hangar_protocol::runlog::{PROCESS_USAGE_FIELD, ProcessUsage};
use serde_json::{Value, json};

/// Token counts as `thread/tokenUsage/updated` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub cached: u64,
    pub cache_write: u64,
    pub output: u64,
    pub reasoning: u64,
}

impl Tokens {
    fn from_breakdown(b: &Value) -> Tokens {
        let get = |k: &str| b.get(k).and_then(Value::as_u64).unwrap_or(0);
        Tokens {
            input: get("inputTokens"),
            cached: get("cachedInputTokens"),
            cache_write: get("cacheWriteInputTokens"),
            output: get("outputTokens"),
            reasoning: get("reasoningOutputTokens"),
        }
    }

    fn minus(self, o: Tokens) -> Tokens {
        Tokens {
            input: self.input.saturating_sub(o.input),
            cached: self.cached.saturating_sub(o.cached),
            cache_write: self.cache_write.saturating_sub(o.cache_write),
            output: self.output.saturating_sub(o.output),
            reasoning: self.reasoning.saturating_sub(o.reasoning),
        }
    }
}

/// The translator's state.
#[derive(Debug, Default)]
pub struct Translator {
    ids: HashMap<String, String>,
    /// The thread's running total, as last reported.
    total: Tokens,
    /// The total when the current turn started.
    at_turn_start: Tokens,
    /// This process's totals (sum of per-turn usage).
    process: ProcessUsage,
    /// Items started and not completed (app-server does not close them on interrupt).
    open_items: Vec<String>,
}

/// `line` with `"turn_id"`: the notification's `turn.id`, when it has one.
fn with_turn_id(mut line: Value, params: &Value) -> Value {
    if let (Some(id), Some(obj)) = (
        params.pointer("/turn/id").and_then(Value::as_str),
        line.as_object_mut(),
    ) {
        obj.insert("turn_id".into(), json!(id));
    }
    line
}

impl Translator {
    fn item_id(&mut self, id: &str) -> String {
        let n = self.ids.len();
        self.ids
            .entry(id.to_owned())
            .or_insert_with(|| format!("item_{n}"))
            .clone()
    }

    /// The id an app-server item has in the run log's lines (`item_<n>`), once a line named it.
    pub fn logged_id(&self, id: &str) -> Option<String> {
        self.ids.get(id).cloned()
    }

    /// The `thread.started` line.
    pub fn thread_started(thread_id: &str) -> Value {
        json!({"type": "thread.started", "thread_id": thread_id})
    }

    /// Lines for one notification (`method`, `params`).
    pub fn notification(&mut self, method: &str, params: &Value) -> Vec<Value> {
        match method {
            "turn/started" => {
                self.at_turn_start = self.total;
                vec![with_turn_id(json!({"type": "turn.started"}), params)]
            }
            "thread/tokenUsage/updated" => {
                if let Some(t) = params.pointer("/tokenUsage/total") {
                    self.total = Tokens::from_breakdown(t);
                }
                Vec::new()
            }
            // Text as the model streams it (issue 21: a person watches it being written); the
            // item's whole text still comes with its `item.completed`.
            "item/agentMessage/delta"
            | "item/reasoning/textDelta"
            | "item/reasoning/summaryTextDelta" => {
                let kind = if method == "item/agentMessage/delta" {
                    "agent_message"
                } else {
                    "reasoning"
                };
                match params.get("delta").and_then(Value::as_str) {
                    Some(d) if !d.is_empty() => vec![json!({
                        "type": "item.delta",
                        "item_id": params.get("itemId").cloned().unwrap_or(Value::Null),
                        "kind": kind,
                        "delta": d,
                    })],
                    _ => Vec::new(),
                }
            }
            "item/started" => {
                let Some(item) = params.get("item") else {
                    return Vec::new();
                };
                match self.item(item, true) {
                    Some(i) => vec![json!({"type": "item.started", "item": i})],
                    None => Vec::new(),
                }
            }
            "item/completed" => {
                let Some(item) = params.get("item") else {
                    return Vec::new();
                };
                if let Some(id) = item.get("id").and_then(Value::as_str) {
                    self.open_items.retain(|x| x != id);
                }
                match self.item(item, false) {
                    Some(i) => vec![json!({"type": "item.completed", "item": i})],
                    None => Vec::new(),
                }
            }
            "turn/completed" => self
                .turn_completed(params)
                .into_iter()
                .map(|l| with_turn_id(l, params))
                .collect(),
            "error" => {
                let message = params
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                vec![json!({"type": "error", "message": message})]
            }
            _ => Vec::new(),
        }
    }

    fn turn_completed(&mut self, params: &Value) -> Vec<Value> {
        self.open_items.clear();
        let turn = params.get("turn").cloned().unwrap_or(Value::Null);
        let usage = self.total.minus(self.at_turn_start);
        self.at_turn_start = self.total;
        self.process.input_tokens += usage.input;
        self.process.output_tokens += usage.output;
        self.process.cache_read_input_tokens += usage.cached;
        self.process.cache_creation_input_tokens += usage.cache_write;
        match turn.get("status").and_then(Value::as_str) {
            Some("failed") => {
                let message = turn
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the turn failed");
                vec![json!({"type": "turn.failed", "error": {"message": message}})]
            }
            Some("interrupted") => vec![
                json!({"type": "turn.failed", "error": {"message": "the turn was interrupted"}}),
            ],
            _ => {
                let mut line = json!({"type": "turn.completed", "usage": {
                    "input_tokens": usage.input,
                    "cached_input_tokens": usage.cached,
                    "cache_write_input_tokens": usage.cache_write,
                    "output_tokens": usage.output,
                    "reasoning_output_tokens": usage.reasoning,
                }});
                if let (Some(obj), Ok(p)) =
                    (line.as_object_mut(), serde_json::to_value(self.process))
                {
                    obj.insert(PROCESS_USAGE_FIELD.into(), p);
                }
                vec![line]
            }
        }
    }

    /// An app-server item as `codex exec` shows it; `None` for items exec does not print
    /// (the user's own message, or an agent message that has only started).
    fn item(&mut self, item: &Value, started: bool) -> Option<Value> {
        let kind = item.get("type").and_then(Value::as_str)?;
        let raw_id = item.get("id").and_then(Value::as_str).unwrap_or_default();
        let s = |k: &str| {
            item.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let details = match kind {
            "agentMessage" if !started => json!({"type": "agent_message", "text": s("text")}),
            "reasoning" if !started => {
                let text = item.get("summary").and_then(Value::as_array).map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                json!({"type": "reasoning", "text": text.unwrap_or_default()})
            }
            "commandExecution" => json!({
                "type": "command_execution",
                "command": s("command"),
                "aggregated_output": s("aggregatedOutput"),
                "exit_code": item.get("exitCode").cloned().unwrap_or(Value::Null),
                "status": status(item, started),
            }),
            "fileChange" => {
                let changes: Vec<Value> = item
                    .get("changes")
                    .and_then(Value::as_array)
                    .map(|cs| cs.iter().map(|c| json!({"path": c.get("path").cloned().unwrap_or(Value::Null), "kind": change_kind(c)})).collect())
                    .unwrap_or_default();
                json!({"type": "file_change", "changes": changes, "status": status(item, started)})
            }
            "mcpToolCall" => json!({
                "type": "mcp_tool_call", "server": s("server"), "tool": s("tool"),
                "arguments": item.get("arguments").cloned().unwrap_or(Value::Null), "status": status(item, started)}),
            "webSearch" => json!({"type": "web_search", "query": s("query")}),
            _ => return None,
        };
        if started {
            self.open_items.push(raw_id.to_owned());
        }
        let mut out = json!({"id": self.item_id(raw_id)});
        if let (Some(o), Some(d)) = (out.as_object_mut(), details.as_object()) {
            o.extend(d.clone());
        }
        Some(out)
    }
}

fn status(item: &Value, started: bool) -> &'static str {
    if started {
        return "in_progress";
    }
    match item.get("status").and_then(Value::as_str) {
        Some("failed") => "failed",
        Some("declined") => "declined",
        Some("inProgress") => "in_progress",
        _ => "completed",
    }
}

fn change_kind(c: &Value) -> &'static str {
    match c
        .pointer("/kind/type")
        .or_else(|| c.get("kind"))
        .and_then(Value::as_str)
    {
        Some("add") => "add",
        Some("delete") => "delete",
        _ => "update",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_lines_carry_app_servers_turn_id() {
        let mut t = Translator::default();
        let started = t.notification("turn/started", &json!({"turn": {"id": "t-1"}}));
        assert_eq!(started, [json!({"type": "turn.started", "turn_id": "t-1"})]);
        let failed = t.notification(
            "turn/completed",
            &json!({"turn": {"id": "t-1", "status": "interrupted"}}),
        );
        assert_eq!(failed[0]["turn_id"], "t-1");
        assert_eq!(failed[0]["type"], "turn.failed");
        let done = t.notification(
            "turn/completed",
            &json!({"turn": {"id": "t-2", "status": "completed"}}),
        );
        assert_eq!(done[0]["turn_id"], "t-2");
    }

    #[test]
    fn a_turn_with_a_command_translates_like_exec() {
        let mut t = Translator::default();
        let mut lines = vec![];
        lines.extend(t.notification("turn/started", &json!({})));
        lines.extend(t.notification(
            "item/started",
            &json!({"item": {"type": "userMessage", "id": "u1"}}),
        ));
        lines.extend(t.notification("item/started", &json!({"item": {"type": "commandExecution", "id": "call_1", "command": "/bin/bash -lc 'ls'", "status": "inProgress"}})));
        lines.extend(t.notification("item/completed", &json!({"item": {"type": "commandExecution", "id": "call_1", "command": "/bin/bash -lc 'ls'", "aggregatedOutput": "a\n", "exitCode": 0, "status": "completed"}})));
        lines.extend(t.notification("thread/tokenUsage/updated", &json!({"tokenUsage": {"total": {"inputTokens": 100, "cachedInputTokens": 20, "outputTokens": 10}}})));
        lines.extend(t.notification(
            "item/started",
            &json!({"item": {"type": "agentMessage", "id": "m1", "text": ""}}),
        ));
        lines.extend(t.notification(
            "item/completed",
            &json!({"item": {"type": "agentMessage", "id": "m1", "text": "done"}}),
        ));
        lines.extend(t.notification("turn/completed", &json!({"turn": {"status": "completed"}})));
        let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "turn.started",
                "item.started",
                "item.completed",
                "item.completed",
                "turn.completed"
            ]
        );
        assert_eq!(
            lines[1]["item"],
            json!({"id": "item_0", "type": "command_execution", "command": "/bin/bash -lc 'ls'", "aggregated_output": "", "exit_code": null, "status": "in_progress"})
        );
        assert_eq!(lines[2]["item"]["exit_code"], 0);
        assert_eq!(
            lines[3]["item"],
            json!({"id": "item_1", "type": "agent_message", "text": "done"})
        );
        assert_eq!(
            lines[4]["usage"],
            json!({"input_tokens": 100, "cached_input_tokens": 20, "cache_write_input_tokens": 0, "output_tokens": 10, "reasoning_output_tokens": 0})
        );
        // The next turn's usage is its own.
        t.notification("turn/started", &json!({}));
        t.notification("thread/tokenUsage/updated", &json!({"tokenUsage": {"total": {"inputTokens": 150, "cachedInputTokens": 20, "outputTokens": 15}}}));
        let l = t.notification("turn/completed", &json!({"turn": {"status": "completed"}}));
        assert_eq!(
            l[0]["usage"],
            json!({"input_tokens": 50, "cached_input_tokens": 0, "cache_write_input_tokens": 0, "output_tokens": 5, "reasoning_output_tokens": 0})
        );
        assert_eq!(l[0][PROCESS_USAGE_FIELD]["input_tokens"], 150);
    }

    #[test]
    fn failures_and_interrupts_are_turn_failed() {
        let mut t = Translator::default();
        let l = t.notification(
            "turn/completed",
            &json!({"turn": {"status": "failed", "error": {"message": "boom"}}}),
        );
        assert_eq!(
            l[0],
            json!({"type": "turn.failed", "error": {"message": "boom"}})
        );
        let l = t.notification(
            "turn/completed",
            &json!({"turn": {"status": "interrupted"}}),
        );
        assert_eq!(l[0]["type"], "turn.failed");
        let l = t.notification(
            "error",
            &json!({"error": {"message": "Reconnecting..."}, "willRetry": true}),
        );
        assert_eq!(l[0], json!({"type": "error", "message": "Reconnecting..."}));
    }
}
