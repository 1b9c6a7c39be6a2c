//! Test kit: scripted fake model servers and helpers that find the pinned harness CLIs.
//!
//! hangar's tests run the **real** Claude Code CLI with no network: [`FakeAnthropic`] is a
//! std-only HTTP/1.1 server on 127.0.0.1 that speaks just enough of the Anthropic Messages API
//! (streaming SSE, tool calls, errors) and answers each model request with the next [`Step`] of a
//! [`Script`]. It records every request so tests can assert on what the CLI sent.
//!
//! ```no_run
//! use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env};
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fake = FakeAnthropic::start(Script::new([
//!     Step::tool("Bash", json!({"command": "echo hi", "description": "say hi"})),
//!     Step::text("done").expect_tool_result(),
//! ]))?;
//! let env = claude_env(&fake.base_url(), std::path::Path::new("/tmp/cfg"));
//! let claude = claude_bin()?;
//! // … run `claude -p --input-format stream-json …` with `env` …
//! assert!(fake.unexpected().is_empty());
//! # Ok(()) }
//! ```
//!
//! # Endpoints
//!
//! | request | reply |
//! |---|---|
//! | `POST /v1/messages[?beta=true]` with `"stream": true` | next script step (SSE stream or scripted HTTP error) |
//! | `POST /v1/messages` without streaming (the `max_tokens:1` probe after `set_model`) | plain JSON message `"ok"` |
//! | `POST /v1/messages/count_tokens` | `{"input_tokens":10}` |
//! | anything else | 404 JSON error, recorded in [`FakeAnthropic::unexpected`] |
//!
//! When the script is exhausted the fake records the request in `unexpected()` and answers 400
//! `invalid_request_error` "hangar fake model: script exhausted" (the CLI does not retry a 400).
//! Note that with `CLAUDE_CODE_MAX_RETRIES=1` a scripted 5xx is sent **twice** (one retry), and
//! each attempt consumes a step: script the error twice to see it in the final result.
//!
//! # Scenario files
//!
//! [`Script::from_json_str`] / [`Script::load`] (and `hangar-fake-model --script FILE`) read:
//!
//! ```json
//! {
//!   "steps": [
//!     {"text": "hello"},
//!     {"tool": "Bash", "input": {"command": "echo hi > made.txt", "description": "run cmd"}},
//!     {"slow_text": {"chunks": 6, "delay_ms": 1000}},
//!     {"slow_text": {"chunks": 4, "delay_ms": 500, "text": "custom slow text"}},
//!     {"error": {"status": 500, "message": "boom"}},
//!     {"error": {"status": 400, "body": {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}}},
//!     {"blocks": [{"text": "writing"}, {"tool": "Write", "input": {"file_path": "a.txt", "content": "x"}}],
//!      "expect": "after_tool_result"},
//!     {"text": "ok", "expect": {"user_text_contains": "steer me"}, "delay_ms": 200,
//!      "chunks": 3, "chunk_delay_ms": 100}
//!   ],
//!   "sessions": {"<X-Claude-Code-Session-Id>": [{"text": "only for that session"}]}
//! }
//! ```
//!
//! Each step has exactly one of `text`, `tool` (+ optional `input`, default `{}`), `slow_text`,
//! `error` (`status` + `message` or raw `body`), `blocks` (a list of `{"text"}` /
//! `{"tool","input"}`), and optionally `expect` (`{"user_text_contains": "…"}` or
//! `"after_tool_result"`), `delay_ms` (before the response headers), `chunks` (text deltas per
//! text block) and `chunk_delay_ms` (before every delta). Unknown keys are rejected. `sessions`
//! (optional) holds per-session queues used instead of `steps` for requests carrying that
//! `X-Claude-Code-Session-Id`.
//!
//! # Streams
//!
//! Replies follow the framing Claude Code 2.1.328 accepts: `message_start`, per block
//! `content_block_start` / `content_block_delta`… / `content_block_stop` (tool inputs as at least
//! two `input_json_delta` pieces; tool ids `toolu_hk_<n>`), `message_delta` (`stop_reason`
//! `tool_use` if any tool block else `end_turn`; usage 11 in / 7 out) and `message_stop`, each
//! event its own HTTP chunk. A client hanging up mid-stream is counted in
//! [`FakeAnthropic::aborted_streams`], not treated as an error.

mod anthropic;
mod claude;
mod error;
mod http;
mod recorded;
mod scenario;
mod script;
mod server;
mod sse;

pub use claude::{CLAUDE_BIN_ENV, CLAUDE_CODE_VERSION, claude_bin, claude_env, workspace_root};
pub use error::TestkitError;
pub use recorded::{RecordedRequest, RequestKind};
pub use script::{Block, Expect, Script, Step, error_body, error_type_for_status};
pub use server::{FakeAnthropic, ServerOptions};
