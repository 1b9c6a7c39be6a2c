//! What a run shows and takes: approvals, events, its log, steps, diffs and forks.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sessions::{Run, SandboxBrief, Session, Turn};
use crate::vocab::{Cut, Decision, Phase};

/// A permission request of the agent's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct Approval {
    pub run_id: String,
    pub request_id: String,
    pub tool_name: String,
    #[schemars(schema_with = "crate::schema::object")]
    pub input: Value,
    pub requested_at: i64,
    pub decision: Option<Decision>,
    pub answered_by: Option<String>,
    pub answered_at: Option<i64>,
}

/// `GET /v1/runs/{id}/approvals`: the requests waiting for an answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Approvals {
    pub approvals: Vec<Approval>,
}

/// `GET /v1/approvals`: every permission request waiting for a person, across the live runs,
/// oldest first (what a person or a notifier watches, without knowing the runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PendingApprovals {
    pub approvals: Vec<Approval>,
    /// How many runs are live (each may come to wait for a person).
    pub live_runs: u64,
    /// Where each run of `approvals` belongs (its turn, session and owner), so an inbox can say
    /// whose work waits without reading the turn (which an environment's approver may not).
    #[serde(default)]
    pub runs: Vec<ApprovalRun>,
}

/// A run with a request waiting, in `GET /v1/approvals`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRun {
    pub run_id: String,
    pub turn_id: String,
    pub session_id: String,
    /// The run's owner (the person of its sandbox).
    pub person: String,
    /// The sandbox's environment (whose `governance.approvers` may answer too).
    pub environment: String,
}

/// An answer to a permission request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Answer {
    pub decision: Decision,
    /// Why (a denial's reason, told to the agent).
    #[serde(default)]
    pub reason: Option<String>,
    /// Run the tool with this input instead of the one the agent asked for.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::object_or_null")]
    pub input: Option<Value>,
}

/// A stored progress event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct Event {
    pub id: i64,
    pub session_id: String,
    pub run_id: Option<String>,
    pub kind: String,
    #[schemars(schema_with = "crate::schema::object")]
    pub payload: Value,
    pub created_at: i64,
}

/// A page of events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct Events {
    pub events: Vec<Event>,
    /// The cursor for the next page (`after`); null when this one is empty.
    pub next_after: Option<i64>,
}

/// One Server-Sent Event of a live stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StreamEvent {
    /// the event id (resume with Last-Event-ID)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// its kind
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// its JSON payload
    pub data: String,
}

/// `GET /v1/runs/{id}/log`: complete run-log lines from a byte offset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LogPage {
    pub lines: Vec<String>,
    pub next_offset: u64,
    /// The run has ended and every line is read.
    pub ended: bool,
    /// the run's log is one the agent could not have written (sealed, and the agent could not learn the run key); when false the assistant's text is not known to be the model's
    pub verified: bool,
    /// why the log is not verified
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// One step of a run: a tree the driver recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Step {
    /// 0 for the first tree of the run (its start), then one more per tree.
    pub step: u64,
    pub tree: String,
    /// The tool call the tree followed, or none for a phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    pub trusted: bool,
    /// What the driver did not hash, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Value>,
    /// The stored event's id.
    pub event_id: i64,
}

/// `GET /v1/runs/{id}/steps`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Steps {
    pub run: String,
    pub steps: Vec<Step>,
}

/// One file changed between two steps; `added`/`deleted` lines are null for binary files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct FileChange {
    pub path: String,
    pub added: Option<u64>,
    pub deleted: Option<u64>,
}

/// `GET /v1/runs/{id}/diff`: what changed from one step to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Diff {
    pub from: Step,
    pub to: Step,
    pub files: Vec<FileChange>,
    /// `git diff`'s patch.
    pub patch: String,
}

/// `POST /v1/runs/{id}/fork`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    #[serde(deserialize_with = "crate::schema::whole")]
    #[schemars(range(min = 0, max = u64::MAX))]
    pub step: u64,
    /// the fork's work tree on this machine, for a plain folder's or an in-place sandbox's fork (absolute; must not exist or be empty); default $HANGAR_HOME/forks/<sandbox id>. A run in a sandbox whose environment copies the repository forks into a new sandbox of that environment, whose workspace is the work tree: dir is refused there
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// start the fork's first turn with this message
    #[serde(default)]
    pub prompt: Option<String>,
}

/// where the conversation was cut: `parent` (the harness's session or thread, none for a new conversation), `at` (the last message or turn kept), `exact`, and `why` when not exact
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct Conversation {
    pub parent: Option<String>,
    pub at: Option<String>,
    pub exact: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub why: Option<String>,
}

/// how exactly this harness can cut a conversation: `cut` is `message` (any step) or `turn` (between turns only)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForkCapability {
    pub harness: String,
    pub cut: Cut,
    pub exact_at_every_step: bool,
    pub how: String,
}

/// A fork's record: what it was made from and how exactly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema::nulls_required)]
pub struct ForkRecord {
    pub session: String,
    pub sandbox: String,
    pub dir: String,
    pub run: String,
    pub turn: String,
    pub source_session: String,
    pub step: u64,
    pub tree: String,
    pub trusted: bool,
    pub head: Option<String>,
    pub repository: bool,
    pub conversation: Conversation,
    pub capability: ForkCapability,
    pub warnings: Vec<String>,
}

/// What a fork made (`turn` and `run` when it was given a prompt).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Forked {
    pub fork: ForkRecord,
    pub session: Session,
    pub sandbox: SandboxBrief,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<Turn>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Run>,
}

/// `GET /v1/runs/{id}/forks`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Forks {
    pub run: String,
    pub forks: Vec<ForkRecord>,
}
