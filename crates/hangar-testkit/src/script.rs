//! What the fake model answers: a [`Script`] is a queue of [`Step`]s, one consumed per main model
//! request (`POST /v1/messages` with `"stream": true` on [`crate::FakeAnthropic`],
//! `POST /v1/responses` on [`crate::FakeOpenAi`]). One script type serves both fakes; each maps the
//! blocks onto its own wire shapes (see [`Block`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::recorded::RecordedRequest;

/// One content block (Anthropic) or output item (OpenAI Responses) of a scripted assistant reply.
///
/// | block | [`crate::FakeAnthropic`] | [`crate::FakeOpenAi`] |
/// |---|---|---|
/// | `Text` | `text` block | `message` item with one `output_text` part |
/// | `ToolUse` | `tool_use` block (`toolu_hk_<n>`) | `function_call` with `arguments` = `input` as JSON text (`call_hk_<n>`) |
/// | `Exec` | `tool_use` `Bash` with input `{"command": cmd, …extra}` | `function_call` `exec_command` with arguments `{"cmd": cmd, …extra}` |
/// | `Patch` | not served: recorded in `unexpected()`, answered 400 | `custom_tool_call` `apply_patch` with the raw patch as `input` |
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// Assistant text, streamed as `text_delta`s / `response.output_text.delta`s.
    Text(String),
    /// A tool call, streamed as `input_json_delta`s / `response.function_call_arguments.delta`s;
    /// the fake gives it a unique id `toolu_hk_<n>` / `call_hk_<n>`.
    ToolUse {
        /// Tool name as the CLI knows it: `Bash`, `Write`, `Edit`, `Read`, … (Claude Code);
        /// `exec_command`, `write_stdin`, … (Codex).
        name: String,
        /// Tool input, e.g. `{"command":"echo hi","description":"say hi"}` for `Bash`.
        input: Value,
    },
    /// Run a shell command: Codex's `exec_command` function call (Claude Code's `Bash`).
    Exec {
        /// The command line (`cmd` for Codex, `command` for Claude Code).
        cmd: String,
        /// Further arguments merged into the call's JSON, e.g. `{"yield_time_ms": 1000}` or
        /// `{"workdir": "sub"}` (`{"description": …}` for Claude Code). A `cmd` key here is
        /// ignored.
        extra: Map<String, Value>,
    },
    /// Edit files: Codex's freeform `apply_patch` custom tool call, `input` = this patch text
    /// (`*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch`). Only the OpenAI fake
    /// serves it.
    Patch(String),
}

impl Block {
    /// True for every kind of tool call (`ToolUse`, `Exec`, `Patch`).
    pub fn is_tool_call(&self) -> bool {
        !matches!(self, Self::Text(_))
    }

    /// An `Exec` block with no extra arguments.
    pub fn exec(cmd: impl Into<String>) -> Self {
        Self::Exec {
            cmd: cmd.into(),
            extra: Map::new(),
        }
    }
}

/// A check on the request that consumes a step. When it fails the fake records a line in
/// `unexpected()` and still sends the step's reply.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The newest input contains this string: the text of every message after the last
    /// assistant message (Anthropic) or after the last item the model produced (Responses), any
    /// role, not counting tool results. See [`RecordedRequest::newest_input_text`].
    UserTextContains(String),
    /// The request continues after a tool call: the last `user` message carries at least one
    /// `tool_result` block (Anthropic), or a `function_call_output` / `custom_tool_call_output`
    /// item follows the last item the model produced (OpenAI Responses).
    AfterToolResult,
}

impl Expect {
    /// `Ok(())` when `request` meets the expectation, else a sentence saying what was seen.
    pub fn check(&self, request: &RecordedRequest) -> Result<(), String> {
        match self {
            Self::UserTextContains(needle) => {
                let seen = request.newest_input_text();
                if seen.contains(needle.as_str()) {
                    Ok(())
                } else {
                    Err(format!(
                        "expected user text containing {needle:?}, newest input was {seen:?}"
                    ))
                }
            }
            Self::AfterToolResult => {
                if request.last_user_has_tool_result() {
                    Ok(())
                } else {
                    Err(
                        "expected a tool_result / *_call_output after the last model output, found none"
                            .to_owned(),
                    )
                }
            }
        }
    }
}

/// The answer to one main model request.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Content blocks, streamed in order. `stop_reason` is `tool_use` when any block is a tool call.
    pub reply: Vec<Block>,
    /// End the stream with a failure after the blocks: `response.failed` with this
    /// `error.message` (OpenAI), an SSE `error` event of type `api_error` (Anthropic).
    pub fail: Option<String>,
    /// How many deltas each text block is split into (at least 1; tool inputs always get at
    /// least 2).
    pub chunks: usize,
    /// Pause before every delta event, to make a stream last (interrupt or steer into it).
    pub chunk_delay: Option<Duration>,
    /// Pause before the response headers (a slow model).
    pub delay: Option<Duration>,
    /// Answer with this HTTP status and JSON body instead of a stream.
    pub http_error: Option<(u16, Value)>,
    /// Check the request; a miss is recorded in `unexpected()`.
    pub expect: Option<Expect>,
}

impl Step {
    /// A step replying with these blocks.
    pub fn blocks(reply: Vec<Block>) -> Self {
        Self {
            reply,
            fail: None,
            chunks: 1,
            chunk_delay: None,
            delay: None,
            http_error: None,
            expect: None,
        }
    }

    /// A plain text reply (`stop_reason: end_turn`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::blocks(vec![Block::Text(text.into())])
    }

    /// A single tool call (`stop_reason: tool_use`), e.g.
    /// `Step::tool("Bash", json!({"command":"echo hi","description":"say hi"}))`.
    pub fn tool(name: impl Into<String>, input: Value) -> Self {
        Self::blocks(vec![Block::ToolUse {
            name: name.into(),
            input,
        }])
    }

    /// A shell command: Codex `exec_command` `{"cmd": cmd}` (Claude Code `Bash`
    /// `{"command": cmd}`).
    pub fn exec(cmd: impl Into<String>) -> Self {
        Self::blocks(vec![Block::exec(cmd)])
    }

    /// A shell command with extra arguments merged into the call, e.g.
    /// `Step::exec_with("sleep 5", json!({"yield_time_ms": 30000}))`. Non-object `extra` is
    /// ignored.
    pub fn exec_with(cmd: impl Into<String>, extra: Value) -> Self {
        Self::blocks(vec![Block::Exec {
            cmd: cmd.into(),
            extra: match extra {
                Value::Object(map) => map,
                _ => Map::new(),
            },
        }])
    }

    /// A Codex `apply_patch` custom tool call carrying this raw patch text (OpenAI fake only).
    pub fn patch(patch: impl Into<String>) -> Self {
        Self::blocks(vec![Block::Patch(patch.into())])
    }

    /// A stream that fails at once: `response.failed` with `error.message` = `message` (OpenAI),
    /// an SSE `error` event (Anthropic). HTTP status stays 200.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::blocks(Vec::new()).fail(message)
    }

    /// A text reply streamed as `chunks` deltas with `delay` before each, so it lasts about
    /// `chunks * delay`. The text is `"chunk0 chunk1 …"`.
    pub fn slow_text(chunks: usize, delay: Duration) -> Self {
        let chunks = chunks.max(1);
        let text: Vec<String> = (0..chunks).map(|i| format!("chunk{i}")).collect();
        Self::text(text.join(" ")).chunks(chunks).chunk_delay(delay)
    }

    /// An HTTP error in the Anthropic shape `{"type":"error","error":{"type":…,"message":…}}`;
    /// the error type follows the status (400 `invalid_request_error`, 500 `api_error`, …).
    /// [`crate::FakeOpenAi`] sends the same message in the OpenAI shape
    /// `{"error":{"message":…,"type":…,"param":null,"code":null}}` instead.
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self::http_error(status, error_body(status, &message.into()))
    }

    /// An HTTP error with this exact JSON body.
    pub fn http_error(status: u16, body: Value) -> Self {
        let mut step = Self::blocks(Vec::new());
        step.http_error = Some((status, body));
        step
    }

    /// Appends a text block.
    #[must_use]
    pub fn and_text(mut self, text: impl Into<String>) -> Self {
        self.reply.push(Block::Text(text.into()));
        self
    }

    /// Appends a tool call.
    #[must_use]
    pub fn and_tool(mut self, name: impl Into<String>, input: Value) -> Self {
        self.reply.push(Block::ToolUse {
            name: name.into(),
            input,
        });
        self
    }

    /// Appends a shell command (see [`Step::exec`]).
    #[must_use]
    pub fn and_exec(mut self, cmd: impl Into<String>) -> Self {
        self.reply.push(Block::exec(cmd));
        self
    }

    /// Appends an `apply_patch` call (see [`Step::patch`]).
    #[must_use]
    pub fn and_patch(mut self, patch: impl Into<String>) -> Self {
        self.reply.push(Block::Patch(patch.into()));
        self
    }

    /// Ends the stream with a failure carrying `message` after the blocks: `response.failed`
    /// (OpenAI), an SSE `error` event (Anthropic).
    #[must_use]
    pub fn fail(mut self, message: impl Into<String>) -> Self {
        self.fail = Some(message.into());
        self
    }

    /// Sets how many deltas each text block is split into.
    #[must_use]
    pub fn chunks(mut self, chunks: usize) -> Self {
        self.chunks = chunks.max(1);
        self
    }

    /// Sets the pause before every delta event.
    #[must_use]
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = Some(delay);
        self
    }

    /// Sets the pause before the response headers.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Sets the expectation checked against the request that consumes this step.
    #[must_use]
    pub fn expect(mut self, expect: Expect) -> Self {
        self.expect = Some(expect);
        self
    }

    /// Shorthand for `expect(Expect::UserTextContains(..))`.
    #[must_use]
    pub fn expect_user_text(self, needle: impl Into<String>) -> Self {
        self.expect(Expect::UserTextContains(needle.into()))
    }

    /// Shorthand for `expect(Expect::AfterToolResult)`.
    #[must_use]
    pub fn expect_tool_result(self) -> Self {
        self.expect(Expect::AfterToolResult)
    }

    /// True when any block is a tool call (`ToolUse`, `Exec` or `Patch`).
    pub fn has_tool_use(&self) -> bool {
        self.reply.iter().any(Block::is_tool_call)
    }
}

/// The Anthropic error `type` used for an HTTP status.
pub fn error_type_for_status(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// `{"type":"error","error":{"type":<for status>,"message":message}}`.
pub fn error_body(status: u16, message: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type_for_status(status), "message": message},
    })
}

/// The OpenAI error `type` used for an HTTP status.
pub fn openai_error_type_for_status(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

/// `{"error":{"message":message,"type":<for status>,"param":null,"code":null}}`, the OpenAI API
/// error shape.
pub fn openai_error_body(status: u16, message: &str) -> Value {
    json!({
        "error": {
            "message": message,
            "type": openai_error_type_for_status(status),
            "param": null,
            "code": null,
        },
    })
}

/// The body the OpenAI fake sends for a scripted HTTP error: a body in exactly the shape
/// [`error_body`] builds (what [`Step::error`] and the scenario form `{"error":{"status",
/// "message"}}` produce) is re-shaped with [`openai_error_body`]; any other body is sent as is.
pub(crate) fn as_openai_error(status: u16, body: &Value) -> Value {
    if let Some(message) = body.pointer("/error/message").and_then(Value::as_str)
        && *body == error_body(status, message)
    {
        return openai_error_body(status, message);
    }
    body.clone()
}

/// The whole conversation plan: a global queue of steps, plus optional per-session queues keyed
/// by the session header — `X-Claude-Code-Session-Id` (Claude Code) or `session-id` (Codex, the
/// thread id) — used instead of the global queue for requests of that session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Script {
    /// Steps for any request whose session has no queue of its own.
    pub steps: VecDeque<Step>,
    /// Steps for one session each.
    pub sessions: BTreeMap<String, VecDeque<Step>>,
    /// Answers a request when its queue is exhausted (see [`Script::responder`]).
    pub responder: Option<Responder>,
}

/// A function that picks the step for a request from what the request holds (its last user
/// text, whether it carries a tool result, ...): for long runs whose requests cannot be listed
/// in advance (a chaos run kills harnesses and servers at random points).
#[derive(Clone)]
pub struct Responder(pub std::sync::Arc<dyn Fn(&RecordedRequest) -> Step + Send + Sync>);

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder(..)")
    }
}

impl PartialEq for Responder {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Script {
    /// A script with one global queue.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Self {
            steps: steps.into_iter().collect(),
            sessions: BTreeMap::new(),
            responder: None,
        }
    }

    /// Answers every request its queues do not (they are exhausted, or empty) with `f`'s step
    /// for it, instead of refusing it as exhausted.
    #[must_use]
    pub fn responder(
        mut self,
        f: impl Fn(&RecordedRequest) -> Step + Send + Sync + 'static,
    ) -> Self {
        self.responder = Some(Responder(std::sync::Arc::new(f)));
        self
    }

    /// Adds (or replaces) the queue for one session id.
    #[must_use]
    pub fn session(mut self, session_id: impl Into<String>, steps: Vec<Step>) -> Self {
        self.sessions
            .insert(session_id.into(), steps.into_iter().collect());
        self
    }

    /// Takes the next step for a request of this session (its own queue if it has one, else the
    /// global queue). `None` when that queue is exhausted.
    pub fn next_step(&mut self, session_id: Option<&str>) -> Option<Step> {
        if let Some(id) = session_id
            && let Some(queue) = self.sessions.get_mut(id)
        {
            return queue.pop_front();
        }
        self.steps.pop_front()
    }

    /// Steps not consumed yet, over all queues.
    pub fn remaining(&self) -> usize {
        self.steps.len() + self.sessions.values().map(VecDeque::len).sum::<usize>()
    }
}

impl From<Vec<Step>> for Script {
    fn from(steps: Vec<Step>) -> Self {
        Self::new(steps)
    }
}
