//! What the fake saw: [`RecordedRequest`] and the helpers tests assert with.

use serde_json::{Value, json};

/// How the fake classified a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `POST /v1/messages` with `"stream": true`: consumes a script step.
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

impl RecordedRequest {
    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The `X-Claude-Code-Session-Id` header.
    pub fn session_id(&self) -> Option<&str> {
        self.header("x-claude-code-session-id")
    }

    /// The `model` of the body.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }

    /// The `messages` array (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The last text block of the last `role:"user"` message (its content when it is a string).
    pub fn last_user_text(&self) -> Option<String> {
        let message = self
            .messages()
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
        match message.get("content")? {
            Value::String(text) => Some(text.clone()),
            Value::Array(blocks) => blocks
                .iter()
                .rev()
                .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .and_then(|b| b.get("text"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        }
    }

    /// Every text string anywhere in `messages` (text blocks, string contents, tool result
    /// contents, messages of any role), joined with newlines.
    pub fn all_text(&self) -> String {
        let mut out = Vec::new();
        for message in self.messages() {
            if let Some(content) = message.get("content") {
                collect_text(content, &mut out);
            }
        }
        out.join("\n")
    }

    /// The text of every message after the last `assistant` message (any role; text blocks and
    /// string contents, not tool results), joined with newlines. This is what the user (or the
    /// CLI on their behalf: steer, interrupt, hook feedback) added since the model last spoke.
    pub fn newest_input_text(&self) -> String {
        let messages = self.messages();
        let start = messages
            .iter()
            .rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .map_or(0, |i| i + 1);
        let mut out = Vec::new();
        for message in messages.get(start..).unwrap_or_default() {
            match message.get("content") {
                Some(Value::String(text)) => out.push(text.clone()),
                Some(Value::Array(blocks)) => {
                    for block in blocks {
                        if block.get("type").and_then(Value::as_str) == Some("text")
                            && let Some(text) = block.get("text").and_then(Value::as_str)
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

    /// Every `tool_result` block in `messages`, in order: `(tool_use_id, content text, is_error)`.
    pub fn tool_results(&self) -> Vec<(String, String, bool)> {
        let mut out = Vec::new();
        for message in self.messages() {
            let Some(Value::Array(blocks)) = message.get("content") else {
                continue;
            };
            for block in blocks {
                if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                    continue;
                }
                let id = block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
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
        out
    }

    /// True when the last `user` message carries a `tool_result` block.
    pub fn last_user_has_tool_result(&self) -> bool {
        self.messages()
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
            .is_some_and(|blocks| {
                blocks
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
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
