//! Sessions, their turns and runs, starting them and sending to them.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::vocab::{Harness, Outcome, Policy, RunState, TurnPhase, TurnState};

/// How a session's turns run; kept on the session, so every turn runs the same way.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnOptions {
    /// The model the harness asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Codex `-c KEY=VALUE` overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codex_config: Vec<String>,
    /// The job's check: a command run when the agent says it is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<String>,
    /// How many times a failed check sends the agent back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_verify_rounds: Option<u32>,
    /// Seconds the harness waits for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_timeout: Option<u32>,
    /// run a harness version whose conformance suite has not passed (the manifest records it)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unverified_harness: bool,
}

/// A conversation with one harness in one sandbox, made of turns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct Session {
    pub id: String,
    pub sandbox_id: String,
    pub harness: Harness,
    pub policy: Policy,
    /// The harness's own session (Claude Code) or thread (Codex), once it has one.
    pub harness_session_id: Option<String>,
    pub options: TurnOptions,
    pub turn_count: i64,
    /// Milliseconds since the Unix epoch, as every time in the API.
    pub created_at: i64,
}

/// Token totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_input_tokens: i64,
}

/// A turn without its manifest (as the board lists them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct TurnSummary {
    pub id: String,
    pub session_id: String,
    pub index: i64,
    pub run_id: Option<String>,
    pub state: TurnState,
    /// How it is doing or how it ended, in the words the CLI and the board show: `waiting` while
    /// a permission request waits, then `succeeded`, `failed`, `interrupted`, `blocked` or
    /// `verify_failed`.
    pub phase: TurnPhase,
    /// The phase in a line: why it failed or was refused, which call blocked it, how many
    /// requests wait.
    pub phase_detail: Option<String>,
    /// Permission requests of its run that wait for an answer.
    pub waiting: i64,
    /// The harness's exit status, once ended.
    pub status: Option<i64>,
    /// Why it ended or was refused, in words.
    pub reason: Option<String>,
    pub prompt: String,
    /// The job's check's state.
    pub verify_state: Option<String>,
    pub usage: Usage,
    /// Its cost in US dollars, when known.
    pub cost_usd: Option<f64>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// a one-shot turn's start and end trees (S29): {start, end, trusted: false}; null for turns the driver ran (their trees are `tree` events)
    #[schemars(schema_with = "crate::schema::object_or_null")]
    pub git_trees: Option<Value>,
}

/// A turn, with its manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct Turn {
    #[serde(flatten)]
    pub summary: TurnSummary,
    /// What the turn ran with (harness, version, policy, sandbox, ...), once it started.
    #[schemars(schema_with = "crate::schema::object_or_null")]
    pub manifest: Option<Value>,
}

/// One driver process executing one turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct Run {
    pub id: String,
    pub turn_id: String,
    pub state: RunState,
    /// How far into the run log the events are stored (bytes).
    pub log_cursor: i64,
    pub driver_pid: Option<i64>,
    /// Whether the control plane still holds the run's key (commands can be sent).
    pub has_key: bool,
    pub created_at: i64,
    pub ended_at: Option<i64>,
    /// how the run's log is read: `sealed` (only what the driver's seals cover is taken), `trusted` (the agent could not have written it; when false the assistant's text is marked unverified), `why` (when not trusted); null until the watcher has started on it
    #[schemars(schema_with = "crate::schema::object_or_null")]
    pub log: Option<Value>,
}

/// `POST /v1/sessions`: a session and its first turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StartSession {
    /// The folder (required unless `sandbox` is given).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// An existing sandbox to run in.
    #[serde(default)]
    pub sandbox: Option<String>,
    /// An environment to make a sandbox of (a copy of `dir`); without it and `sandbox`, the
    /// in-place local sandbox on `dir`.
    #[serde(default)]
    pub env: Option<String>,
    /// Run in `dir` itself, unsandboxed, as the server's user (only where the server allows it).
    #[serde(default)]
    pub no_sandbox: bool,
    #[serde(default = "crate::vocab::default_harness")]
    pub harness: Harness,
    /// Default: the environment's `governance.policy`, else `ask`.
    #[serde(default)]
    pub policy: Option<Policy>,
    #[schemars(length(min = 1))]
    pub prompt: String,
    #[serde(default)]
    pub options: TurnOptions,
}

/// What starting a session made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Started {
    pub session: Session,
    pub turn: Turn,
    pub run: Run,
}

/// `GET /v1/sessions`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sessions {
    pub sessions: Vec<Session>,
}

/// `GET /v1/sessions/{id}`: a session and its turns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionTurns {
    pub session: Session,
    pub turns: Vec<Turn>,
}

/// A message, a steer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Text {
    #[schemars(length(min = 1))]
    pub text: String,
}

/// A command's answer once the driver signed `done`: `done` (taken into the running turn) or
/// `next_turn` (the turn had ended; the message started the next one, `turn`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CommandReply {
    pub outcome: Outcome,
    pub run: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
}

/// `GET /v1/sessions/{id}/transcript`: the session's conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Transcript {
    pub session: String,
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    pub entries: Vec<Value>,
}

/// A sandbox as a fork's answer and the board name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxBrief {
    pub id: String,
    pub environment: String,
    /// Its provider.
    pub kind: String,
    /// Its work tree on this machine.
    pub workdir: String,
    pub person: String,
}

/// One row of the board: a session with its sandbox, person, turns, state, tokens, cost, fork.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct BoardRow {
    #[serde(flatten)]
    pub session: Session,
    pub person: Option<String>,
    pub sandbox: Option<SandboxBrief>,
    /// The latest turn's state.
    pub state: Option<TurnState>,
    /// The latest turn's phase (`waiting` first on the board).
    pub phase: Option<TurnPhase>,
    /// Permission requests that wait for an answer in the session's running turn.
    pub waiting: i64,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub turns: Vec<TurnSummary>,
    /// the fork's record (as in POST /v1/runs/{id}/fork) when the session was made as one
    pub fork: Option<crate::runs::ForkRecord>,
}

/// `GET /v1/board`: sessions with a request waiting first, then the newest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Board {
    pub sessions: Vec<BoardRow>,
}
