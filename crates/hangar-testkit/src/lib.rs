//! Test kit: scripted fake model servers and helpers that find the pinned harness CLIs, and a
//! headless Chromium for the web page's tests ([`browser`]).
//!
//! hangar's tests run the **real** Claude Code and Codex CLIs with no network. [`FakeAnthropic`]
//! (Anthropic Messages, for Claude Code) and [`FakeOpenAi`] (OpenAI Responses, for Codex) are
//! std-only HTTP/1.1 servers on 127.0.0.1 that speak just enough of their API (streaming SSE, tool
//! calls, errors) and answer each model request with the next [`Step`] of a [`Script`]. They
//! record every request so tests can assert on what the CLI sent.
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
//! The same with Codex (`codex exec`; `codex app-server` takes the same arguments):
//!
//! ```no_run
//! use hangar_testkit::{FakeOpenAi, Script, Step, codex_bin, codex_env, codex_offline_args};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fake = FakeOpenAi::start(Script::new([
//!     Step::exec("echo hi > made.txt"),
//!     Step::text("done").expect_tool_result(),
//! ]))?;
//! let (home, cwd) = (tempfile::tempdir()?, tempfile::tempdir()?);
//! let output = std::process::Command::new(codex_bin()?)
//!     .args(["exec", "--json", "--skip-git-repo-check", "--sandbox", "danger-full-access"])
//!     .args(codex_offline_args(&fake.base_url()))
//!     .arg("do it")
//!     .env_clear()
//!     .env("PATH", std::env::var_os("PATH").unwrap_or_default())
//!     .env("HOME", home.path())
//!     .envs(codex_env(home.path()))
//!     .current_dir(cwd.path())
//!     .stdin(std::process::Stdio::null())
//!     .output()?;
//! assert!(fake.unexpected().is_empty());
//! # Ok(()) }
//! ```
//!
//! # Endpoints
//!
//! [`FakeAnthropic`] (`ANTHROPIC_BASE_URL` = [`FakeAnthropic::base_url`], `http://127.0.0.1:PORT`):
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
//! [`FakeOpenAi`] (a Codex provider's `base_url` = [`FakeOpenAi::base_url`],
//! `http://127.0.0.1:PORT/v1`):
//!
//! | request | reply |
//! |---|---|
//! | `POST /v1/responses` with `"stream": true` | next script step (SSE stream or scripted HTTP error) |
//! | anything else (Codex 0.169 sends nothing else) | 404 JSON error, recorded in [`FakeOpenAi::unexpected`] |
//!
//! Errors use the OpenAI shape `{"error":{"message","type","param":null,"code":null}}`; an
//! exhausted script is answered 400 `invalid_request_error` "hangar fake model: script exhausted"
//! and recorded in `unexpected()`. Run Codex with [`codex_offline_args`] (no retries, so each
//! scripted error is seen once) and [`codex_env`].
//!
//! # Scenario files
//!
//! [`Script::from_json_str`] / [`Script::load`] (and `hangar-fake-model --script FILE
//! [--api openai]`) read one format for both fakes:
//!
//! ```json
//! {
//!   "steps": [
//!     {"text": "hello"},
//!     {"tool": "Bash", "input": {"command": "echo hi > made.txt", "description": "run cmd"}},
//!     {"exec": "echo hi > made.txt"},
//!     {"exec": {"cmd": "sleep 5; echo late", "yield_time_ms": 30000}},
//!     {"patch": "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch"},
//!     {"failed": "the model broke"},
//!     {"text": "partial answer", "failed": "broke mid-way"},
//!     {"slow_text": {"chunks": 6, "delay_ms": 1000}},
//!     {"slow_text": {"chunks": 4, "delay_ms": 500, "text": "custom slow text"}},
//!     {"error": {"status": 500, "message": "boom"}},
//!     {"error": {"status": 400, "body": {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}}},
//!     {"blocks": [{"text": "writing"}, {"tool": "Write", "input": {"file_path": "a.txt", "content": "x"}}],
//!      "expect": "after_tool_result"},
//!     {"blocks": [{"text": "two calls"}, {"exec": "ls"}, {"patch": "*** Begin Patch\n…"}]},
//!     {"text": "ok", "expect": {"user_text_contains": "steer me"}, "delay_ms": 200,
//!      "chunks": 3, "chunk_delay_ms": 100}
//!   ],
//!   "sessions": {"<session id>": [{"text": "only for that session"}]}
//! }
//! ```
//!
//! Each step has exactly one of `text`, `tool` (+ optional `input`, default `{}`), `exec` (a
//! command string, or an object with `cmd` and further call arguments), `patch` (raw
//! `apply_patch` text), `slow_text`, `error` (`status` + `message` or raw `body`), `blocks` (a
//! list of `{"text"}` / `{"tool","input"}` / `{"exec"}` / `{"patch"}`), or `failed` alone; and
//! optionally `failed` (end the stream with a failure after the blocks; not with `error`),
//! `expect` (`{"user_text_contains": "…"}` or `"after_tool_result"`), `delay_ms` (before the
//! response headers), `chunks` (text deltas per text block) and `chunk_delay_ms` (before every
//! delta). Unknown keys are rejected. `sessions` (optional) holds per-session queues used instead
//! of `steps` for requests carrying that session id (`X-Claude-Code-Session-Id` for Claude Code,
//! `session-id` — the thread id — for Codex).
//!
//! How each block maps per API is in [`Block`]'s docs: `tool` is a Claude `tool_use` or a Codex
//! `function_call`; `exec` is Codex `exec_command {"cmd"}` or Claude `Bash {"command"}`; `patch`
//! is Codex-only (the Anthropic fake refuses it with a 400 and an `unexpected()` line). An
//! `error` with a `message` is sent in each API's own error shape; a raw `body` is sent as is.
//!
//! # Streams
//!
//! Anthropic replies follow the framing Claude Code 2.1.328 accepts: `message_start`, per block
//! `content_block_start` / `content_block_delta`… / `content_block_stop` (tool inputs as at least
//! two `input_json_delta` pieces; tool ids `toolu_hk_<n>`), `message_delta` (`stop_reason`
//! `tool_use` if any tool block else `end_turn`; usage 11 in / 7 out) and `message_stop`; a
//! `failed` step ends with an `error` event (`api_error`) instead of the last two.
//!
//! OpenAI replies follow the full Responses form Codex 0.169.0 accepts: `response.created`,
//! `response.in_progress`, then per item `response.output_item.added`, for text
//! `response.content_part.added` / `response.output_text.delta`… / `response.output_text.done` /
//! `response.content_part.done`, for a function call `response.function_call_arguments.delta`…
//! (at least two) / `.done`, for a custom tool call `response.custom_tool_call_input.delta`… /
//! `.done`, then `response.output_item.done`; finally `response.completed` (usage: 100 input of
//! which 20 cached, 10 output of which 3 reasoning, 110 total) or, for a `failed` step,
//! `response.failed` with `error.message`. Every event carries `sequence_number`; ids are unique
//! over the server's life: responses `resp_hk_<n>`, messages `msg_hk_<n>_<index>`, calls
//! `call_hk_<n>` with items `fc_hk_<n>` / `ctc_hk_<n>`.
//!
//! Each event is its own HTTP chunk. A client hanging up mid-stream (interrupt, steer) is counted
//! in `aborted_streams()`, not treated as an error.

mod anthropic;
pub mod browser;
mod claude;
mod codex;
mod conn;
mod error;
pub mod hostile;
mod http;
mod images;
mod jose;
mod openai;
mod recorded;
mod responses;
mod scenario;
mod script;
mod server;
mod sse;
mod terminal;
mod tls;
mod tower;

pub use claude::{CLAUDE_BIN_ENV, CLAUDE_CODE_VERSION, claude_bin, claude_env, workspace_root};
pub use codex::{
    CODEX_API_KEY, CODEX_API_KEY_ENV, CODEX_BIN_ENV, CODEX_MODEL, CODEX_PROVIDER, CODEX_VERSION,
    codex_bin, codex_env, codex_offline_args, codex_offline_config,
};
pub use error::TestkitError;
pub use images::{claude_image, codex_image};
pub use jose::PassportAlg;
pub use recorded::{RecordedRequest, RequestKind};
pub use script::{
    Block, Expect, Responder, Script, Step, error_body, error_type_for_status, openai_error_body,
    openai_error_type_for_status,
};
pub use server::{FakeAnthropic, FakeOpenAi, ServerOptions};
pub use terminal::Terminal;
pub use tls::TestCa;
pub use tower::{
    PassportFault, TOWER_KEY, TowerAnswer, TowerDouble, TowerExchange, TowerFault, TowerRequest,
};
