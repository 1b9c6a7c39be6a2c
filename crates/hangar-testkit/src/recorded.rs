//! What the fake saw: [`RecordedRequest`] and the helpers tests assert with.
//!
//! The helpers understand both request shapes: Anthropic Messages (`messages` with content
//! blocks) and OpenAI Responses (`input` items: `message`s with `input_text` / `output_text`
//! parts, `function_call`, `function_call_output`, `custom_tool_call`,
//! `custom_tool_call_output`, `reasoning`, …). A body with an `input` array and no `messages`
//! array is read as Responses.

use serde_json::{Value, json};

/// How the fake classified a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A model request that consumes a script step: `POST /v1/messages` (Anthropic) or
    /// `POST /v1/responses` (OpenAI) with `"stream": true`.
    Main,
    /// `POST /v1/messages` without streaming (the `max_tokens:1` probe after `set_model`).
    Probe,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
    /// Anything else (answered 404).
    Other,
}

impl RequestKind {
    /// Lower-case name used in logs: `main`, `probe`, `count_tokens`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Main => "main",
            Self::Probe => "probe",
            Self::CountTokens => "count_tokens",
            Self::Other => "other",
        }
    }
}

/// One request as received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// 1-based arrival number over all requests.
    pub seq: usize,
    /// How it was classified.
    pub kind: RequestKind,
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Request target including the query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// Headers in arrival order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` when empty or not JSON).
    pub body: Value,
}

fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// Responses items the model produced (everything else in `input` came from the client).
fn is_model_item(item: &Value) -> bool {
    match str_field(item, "type") {
        Some(
            "function_call" | "custom_tool_call" | "reasoning" | "local_shell_call"
            | "web_search_call" | "tool_search_call",
        ) => true,
        Some("message") | None => str_field(item, "role") == Some("assistant"),
        Some(_) => false,
    }
}

fn is_tool_output(item: &Value) -> bool {
    matches!(
        str_field(item, "type"),
        Some("function_call_output" | "custom_tool_call_output")
    )
}

/// A Responses `message` item (the `type` may be omitted in the easy input form).
fn is_message(item: &Value) -> bool {
    matches!(str_field(item, "type"), Some("message") | None) && item.get("role").is_some()
}

impl RecordedRequest {
    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The session the request belongs to: the `X-Claude-Code-Session-Id` header (Claude Code),
    /// else the `session-id` header (Codex: the thread id). Per-session script queues are keyed
    /// by this.
    pub fn session_id(&self) -> Option<&str> {
        self.header("x-claude-code-session-id")
            .or_else(|| self.header("session-id"))
    }

    /// The `thread-id` header (Codex; equal to `session-id`).
    pub fn thread_id(&self) -> Option<&str> {
        self.header("thread-id")
    }

    /// `request #<seq> <METHOD> <path>`, the prefix of `unexpected()` lines.
    pub(crate) fn describe(&self) -> String {
        format!("request #{} {} {}", self.seq, self.method, self.path)
    }

    /// The `model` of the body.
    pub fn model(&self) -> Option<&str> {
        str_field(&self.body, "model")
    }

    /// True when the body is an OpenAI Responses request (an `input` array, no `messages`).
    pub fn is_responses(&self) -> bool {
        self.body.get("messages").is_none() && self.body.get("input").is_some_and(Value::is_array)
    }

    /// The `messages` array (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The Responses `input` array (empty when absent or a plain string).
    pub fn input(&self) -> &[Value] {
        self.body
            .get("input")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// Anthropic: the last text block of the last `role:"user"` message (its content when it is a
    /// string); `None` when that message holds only tool results.
    ///
    /// Responses: the last text part of the last `role:"user"` message item (tool outputs are
    /// separate items, so during a tool continuation this is still the prompt); a plain string
    /// `input` is returned as is. Codex's first user item is its `<environment_context>`; the
    /// prompt follows it.
    pub fn last_user_text(&self) -> Option<String> {
        if let Some(Value::String(text)) = self.body.get("input") {
            return Some(text.clone());
        }
        let (list, responses) = if self.is_responses() {
            (self.input(), true)
        } else {
            (self.messages(), false)
        };
        let message = list
            .iter()
            .rev()
            .find(|m| str_field(m, "role") == Some("user") && (!responses || is_message(m)))?;
        match message.get("content")? {
            Value::String(text) => Some(text.clone()),
            Value::Array(blocks) => blocks
                .iter()
                .rev()
                .find(|b| is_text_part(b))
                .and_then(|b| str_field(b, "text"))
                .map(str::to_owned),
            _ => None,
        }
    }

    /// Every text string anywhere in the conversation, joined with newlines. Anthropic: text
    /// blocks, string contents and tool result contents of every message. Responses: the text
    /// parts of every message item (any role, including the developer prompt) and the output of
    /// every `function_call_output` / `custom_tool_call_output`.
    pub fn all_text(&self) -> String {
        let mut out = Vec::new();
        if let Some(Value::String(text)) = self.body.get("input") {
            out.push(text.clone());
        }
        for message in self.messages().iter().chain(self.input()) {
            if let Some(content) = message.get("content") {
                collect_text(content, &mut out);
            }
            if is_tool_output(message)
                && let Some(output) = message.get("output")
            {
                collect_text(output, &mut out);
            }
        }
        out.join("\n")
    }

    /// What the user (or the CLI on their behalf: steer, interrupt, hook feedback) added since
    /// the model last spoke, joined with newlines: the text of every message after the last
    /// `assistant` message (Anthropic) or after the last item the model produced — assistant
    /// message, function / custom tool call, reasoning — (Responses); any role, not counting
    /// tool results.
    pub fn newest_input_text(&self) -> String {
        let responses = self.is_responses();
        let list = if responses {
            self.input()
        } else {
            self.messages()
        };
        let start = list
            .iter()
            .rposition(|m| {
                if responses {
                    is_model_item(m)
                } else {
                    str_field(m, "role") == Some("assistant")
                }
            })
            .map_or(0, |i| i + 1);
        let mut out = Vec::new();
        if let Some(Value::String(text)) = self.body.get("input") {
            out.push(text.clone());
        }
        for message in list.get(start..).unwrap_or_default() {
            if responses && !is_message(message) {
                continue;
            }
            match message.get("content") {
                Some(Value::String(text)) => out.push(text.clone()),
                Some(Value::Array(blocks)) => {
                    for block in blocks {
                        if is_text_part(block)
                            && let Some(text) = str_field(block, "text")
                        {
                            out.push(text.to_owned());
                        }
                    }
                }
                _ => {}
            }
        }
        out.join("\n")
    }

    /// Every tool result in the conversation, in order: `(id, content text, is_error)`.
    /// Anthropic: `tool_result` blocks (`tool_use_id`, `is_error`). Responses:
    /// `function_call_output` / `custom_tool_call_output` items (`call_id`, `is_error` always
    /// false: Codex reports failures inside the output text).
    pub fn tool_results(&self) -> Vec<(String, String, bool)> {
        let mut out = Vec::new();
        for message in self.messages() {
            let Some(Value::Array(blocks)) = message.get("content") else {
                continue;
            };
            for block in blocks {
                if str_field(block, "type") != Some("tool_result") {
                    continue;
                }
                let id = str_field(block, "tool_use_id")
                    .unwrap_or_default()
                    .to_owned();
                let mut text = Vec::new();
                if let Some(content) = block.get("content") {
                    collect_text(content, &mut text);
                }
                let is_error = block
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                out.push((id, text.join("\n"), is_error));
            }
        }
        for item in self.input().iter().filter(|item| is_tool_output(item)) {
            let id = str_field(item, "call_id").unwrap_or_default().to_owned();
            let mut text = Vec::new();
            if let Some(output) = item.get("output") {
                collect_text(output, &mut text);
            }
            out.push((id, text.join("\n"), false));
        }
        out
    }

    /// [`tool_results`](Self::tool_results) without the error flag: `(call_id, output)` for
    /// every `function_call_output` / `custom_tool_call_output` (Responses) or `tool_result`
    /// (Anthropic), in order.
    pub fn tool_outputs(&self) -> Vec<(String, String)> {
        self.tool_results()
            .into_iter()
            .map(|(id, output, _)| (id, output))
            .collect()
    }

    /// Responses: every tool call the model made earlier in the conversation, replayed in
    /// `input`, in order: `(call_id, name, arguments or input text)` for `function_call` and
    /// `custom_tool_call` items. Anthropic: `tool_use` blocks as `(id, name, input JSON text)`.
    pub fn tool_calls(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for message in self.messages() {
            let Some(Value::Array(blocks)) = message.get("content") else {
                continue;
            };
            for block in blocks {
                if str_field(block, "type") == Some("tool_use") {
                    out.push((
                        str_field(block, "id").unwrap_or_default().to_owned(),
                        str_field(block, "name").unwrap_or_default().to_owned(),
                        block.get("input").map(Value::to_string).unwrap_or_default(),
                    ));
                }
            }
        }
        for item in self.input() {
            let payload = match str_field(item, "type") {
                Some("function_call") => str_field(item, "arguments"),
                Some("custom_tool_call") => str_field(item, "input"),
                _ => continue,
            };
            out.push((
                str_field(item, "call_id").unwrap_or_default().to_owned(),
                str_field(item, "name").unwrap_or_default().to_owned(),
                payload.unwrap_or_default().to_owned(),
            ));
        }
        out
    }

    /// True when the request continues after a tool call: the last `user` message carries a
    /// `tool_result` block (Anthropic), or a tool output item follows the last item the model
    /// produced (Responses).
    pub fn last_user_has_tool_result(&self) -> bool {
        if self.is_responses() {
            let input = self.input();
            let start = input.iter().rposition(is_model_item).map_or(0, |i| i + 1);
            return input
                .get(start..)
                .unwrap_or_default()
                .iter()
                .any(is_tool_output);
        }
        self.messages()
            .iter()
            .rev()
            .find(|m| str_field(m, "role") == Some("user"))
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
            .is_some_and(|blocks| {
                blocks
                    .iter()
                    .any(|b| str_field(b, "type") == Some("tool_result"))
            })
    }

    /// The request as one JSON object (the `--log` line format of `hangar-fake-model`).
    pub fn to_json(&self) -> Value {
        let headers: serde_json::Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({
            "seq": self.seq,
            "kind": self.kind.as_str(),
            "method": self.method,
            "path": self.path,
            "headers": headers,
            "body": self.body,
        })
    }
}

/// A text content part: Anthropic `text`, Responses `input_text` / `output_text`.
fn is_text_part(block: &Value) -> bool {
    matches!(
        str_field(block, "type"),
        Some("text" | "input_text" | "output_text")
    )
}

/// Pushes every text found in a message `content` (string, or blocks with `text` or nested
/// `content`).
fn collect_text(content: &Value, out: &mut Vec<String>) {
    match content {
        Value::String(text) => out.push(text.clone()),
        Value::Array(blocks) => {
            for block in blocks {
                match block {
                    Value::String(text) => out.push(text.clone()),
                    Value::Object(map) => {
                        if let Some(Value::String(text)) = map.get("text") {
                            out.push(text.clone());
                        }
                        if let Some(nested) = map.get("content") {
                            collect_text(nested, out);
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}
