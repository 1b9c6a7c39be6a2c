//! The entities the store keeps, as plain Rust values: what the methods of [`crate::Store`]
//! take and return. Timestamps are milliseconds since the Unix epoch; JSON is
//! [`serde_json::Value`] (TEXT in SQLite, jsonb in PostgreSQL).
//!
//! Non-goals: no behaviour (the closed sets of words it stores are hangar-protocol's).

use serde_json::Value;

// The agent a session runs, how its tool calls are governed, the driver's signed answer to a
// command, where a turn and a run are, and a person's decision: hangar's shared words, defined
// once in the protocol crate (each stored as its word; an unknown one reads as
// `StoreError::Corrupt`).
pub use hangar_protocol::{AckStatus, Decision, Harness, Policy, RunState, TurnState};

/// A named environment: what a sandbox is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Environment {
    /// Unique name.
    pub name: String,
    /// Its specification (free-form JSON owned by the control plane).
    pub spec: Value,
    /// When it was created.
    pub created_at: i64,
    /// When `hangar env apply` last replaced its spec.
    pub updated_at: Option<i64>,
}

/// A place where agents work (a local folder for now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// Its id.
    pub id: String,
    /// The environment's name.
    pub environment: String,
    /// What kind of place (`local` for now).
    pub kind: String,
    /// The folder the agent works in.
    pub workdir: String,
    /// The email of the person it belongs to.
    pub person: String,
    /// When it was created.
    pub created_at: i64,
    /// The provider's handle (hangar-sandbox's `Sandbox`, JSON); none for a plain folder.
    pub handle: Option<Value>,
    /// `live`, or `removed` once `sb rm` destroyed it.
    pub state: String,
    /// When it was removed.
    pub removed_at: Option<i64>,
}

/// What [`crate::Store::create_sandbox`] takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSandbox {
    /// Its id (see [`crate::new_id`]).
    pub id: String,
    /// An existing environment's name.
    pub environment: String,
    /// What kind of place.
    pub kind: String,
    /// The folder.
    pub workdir: String,
    /// The owner's email.
    pub person: String,
    /// The provider's handle, if a provider made it.
    pub handle: Option<Value>,
}

/// A conversation with one harness in one sandbox: a sequence of turns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Its id.
    pub id: String,
    /// The sandbox it runs in.
    pub sandbox_id: String,
    /// The agent.
    pub harness: Harness,
    /// The policy for tool calls.
    pub policy: Policy,
    /// The harness's own session (Claude Code) or thread (Codex) id, once known.
    pub harness_session_id: Option<String>,
    /// How its turns run (model, codex config, verify, ...): the control plane's JSON object.
    pub options: Value,
    /// How many turns it has had.
    pub turn_count: i64,
    /// When it was created.
    pub created_at: i64,
}

/// Token totals of a turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens.
    pub input: i64,
    /// Output tokens.
    pub output: i64,
    /// Cached input tokens.
    pub cached: i64,
}

impl Usage {
    /// From a harness's token counts (`u64`, as the run log has them); a count past `i64::MAX`
    /// is `i64::MAX`.
    pub fn from_tokens(input: u64, output: u64, cached: u64) -> Usage {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Usage {
            input: n(input),
            output: n(output),
            cached: n(cached),
        }
    }

    /// The sum, each count stopping at `i64::MAX` rather than overflowing (a harness's counts
    /// are not ours to trust: a wrap would panic in a debug build and show a negative total in
    /// a release one).
    #[must_use]
    pub fn saturating_add(self, other: Usage) -> Usage {
        Usage {
            input: self.input.saturating_add(other.input),
            output: self.output.saturating_add(other.output),
            cached: self.cached.saturating_add(other.cached),
        }
    }
}

/// One prompt and everything the agent did with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Its id.
    pub id: String,
    /// Its session.
    pub session_id: String,
    /// 0 for the session's first turn, then 1, 2, ...
    pub index: i64,
    /// The run that executes it, once started.
    pub run_id: Option<String>,
    /// Where it is.
    pub state: TurnState,
    /// Its exit status once ended (0 success, 1 failed, 130 interrupted, ...).
    pub status: Option<i64>,
    /// Why it was refused or how it ended, in words.
    pub reason: Option<String>,
    /// The prompt.
    pub prompt: String,
    /// What the turn changed (JSON owned by the control plane).
    pub manifest: Option<Value>,
    /// The job's check: its state in words.
    pub verify_state: Option<String>,
    /// Token totals.
    pub usage: Usage,
    /// Its cost in US dollars, when known.
    pub cost_usd: Option<f64>,
    /// When it was queued.
    pub created_at: i64,
    /// When it started running.
    pub started_at: Option<i64>,
    /// When it ended or was refused.
    pub ended_at: Option<i64>,
    /// A one-shot turn's start and end trees (S29), JSON owned by the control plane; none for
    /// turns the driver ran (their trees are events).
    pub git_trees: Option<Value>,
    /// When the turn ended right after a denied call the agent did nothing more after: which
    /// call and who denied it, in words.
    pub blocked: Option<String>,
    /// The turn's last interrupt in words: who sent it, what it stopped, what still ran.
    pub interrupted: Option<String>,
}

/// A change of a turn's state (see [`crate::Store::update_turn_state`]); each `Some` field is
/// written, each `None` field is left as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnUpdate {
    /// The new state.
    pub state: TurnState,
    /// Exit status.
    pub status: Option<i64>,
    /// Reason in words.
    pub reason: Option<String>,
    /// Manifest.
    pub manifest: Option<Value>,
    /// The check's state.
    pub verify_state: Option<String>,
    /// Token totals (replace the stored ones).
    pub usage: Option<Usage>,
    /// Cost.
    pub cost_usd: Option<f64>,
    /// The denied call it ended after (see [`Turn::blocked`]).
    pub blocked: Option<String>,
    /// The last interrupt's report (see [`Turn::interrupted`]).
    pub interrupted: Option<String>,
}

impl TurnUpdate {
    /// A change of state only.
    pub fn to(state: TurnState) -> TurnUpdate {
        TurnUpdate {
            state,
            status: None,
            reason: None,
            manifest: None,
            verify_state: None,
            usage: None,
            cost_usd: None,
            blocked: None,
            interrupted: None,
        }
    }
}

/// One driver process executing one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Its id (also its control folder's name).
    pub id: String,
    /// The turn it executes.
    pub turn_id: String,
    /// Its control folder.
    pub ctl_path: String,
    /// How far the watcher has read its log: a byte offset.
    pub log_cursor: i64,
    /// The watcher's parser state at `log_cursor` (committed with it), if any.
    pub watch_state: Option<Value>,
    /// Live or ended.
    pub state: RunState,
    /// The driver's process id, when known.
    pub driver_pid: Option<i64>,
    /// Whether the vault still holds its key (false once destroyed).
    pub has_key: bool,
    /// When it was created.
    pub created_at: i64,
    /// When it ended.
    pub ended_at: Option<i64>,
}

/// What [`crate::Store::create_run`] takes (the run key is passed beside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    /// Its id.
    pub id: String,
    /// A queued turn.
    pub turn_id: String,
    /// Its control folder.
    pub ctl_path: String,
    /// The driver's process id, when known.
    pub driver_pid: Option<i64>,
    /// Claimed as it is made (holder, until in ms), so no other replica takes a run over while
    /// its replica is still placing it.
    pub lease: Option<(String, i64)>,
}

/// A signed command sent to a run, and the driver's answer once it came.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// The run.
    pub run_id: String,
    /// The command's sequence number in the run.
    pub seq: i64,
    /// `prompt`, `steer`, `interrupt`, `approve`, `deny`, `end`.
    pub kind: String,
    /// The command's body.
    pub body: Value,
    /// Who sent it (email, or `hangar` for the control plane itself).
    pub sent_by: String,
    /// When it was sent.
    pub sent_at: i64,
    /// The driver's answer.
    pub ack: Option<AckStatus>,
    /// The answer's reason, if any.
    pub ack_reason: Option<String>,
    /// When the answer came.
    pub acked_at: Option<i64>,
}

/// A permission request of a run, and its answer once given.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// The run.
    pub run_id: String,
    /// The harness's request id.
    pub request_id: String,
    /// The tool asking.
    pub tool_name: String,
    /// The tool's input.
    pub input: Value,
    /// When it was asked.
    pub requested_at: i64,
    /// The answer.
    pub decision: Option<Decision>,
    /// Who answered.
    pub answered_by: Option<String>,
    /// The reason given with a deny, or a note.
    pub note: Option<String>,
    /// When it was answered.
    pub answered_at: Option<i64>,
}

/// An event to store (see [`crate::Store::commit_events`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// What happened (`assistant`, `tool_use`, `result`, ...).
    pub kind: String,
    /// Its data.
    pub payload: Value,
}

/// An event already encoded as JSON text: the run watchers' path, so an event is serialized
/// once on its way to the database. [`EncodedEvent::new`] makes NUL characters U+FFFD, as
/// [`NewEvent`]'s path does.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedEvent {
    kind: String,
    /// Shared, so binding it to an INSERT copies nothing (sqlx copies a borrowed string).
    json: std::sync::Arc<str>,
}

impl EncodedEvent {
    /// `json` must be one JSON object (as `serde_json::to_string` writes it).
    pub fn new(kind: impl Into<String>, json: String) -> EncodedEvent {
        EncodedEvent {
            kind: kind.into(),
            json: crate::events::nul_free_text(json).into(),
        }
    }

    /// The event's kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The JSON text as it will be stored.
    pub fn json(&self) -> &str {
        &self.json
    }
}

/// What a slice of a run log changes besides adding its events: applied in order by
/// [`crate::Store::commit_slice`] in the transaction that stores the events, so a restarted
/// watcher (which resumes after the committed cursor) can never miss one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SliceEffect<'a> {
    /// The harness asked permission for a tool call: recorded the first time it is seen.
    ApprovalRequested {
        /// The request's id.
        request_id: &'a str,
        /// The tool.
        tool_name: &'a str,
        /// The tool's input.
        input: &'a Value,
    },
    /// A permission request answered without a person (the policy, or the harness withdrew
    /// it): recorded unless it was answered already (the first answer stands) or never seen.
    ApprovalSettled {
        /// The request's id.
        request_id: &'a str,
        /// The answer.
        decision: Decision,
        /// Who answered (`policy`, `harness`, ...).
        by: &'a str,
        /// A note kept with the answer.
        note: Option<&'a str>,
    },
    /// The harness's own session (or thread) id, for the run's session to resume next turn.
    HarnessSession(&'a str),
    /// The driver answered command `seq` (the run log's `hangar.command` / `hangar.refused`):
    /// recorded unless an answer is already (the first answer stands). The log is the one
    /// source of a command's answer: the sender returns at the driver's signed ack and records
    /// nothing of it.
    CommandAnswered {
        /// The command's sequence number.
        seq: i64,
        /// Its answer.
        status: AckStatus,
        /// Why, for a refusal or an end.
        reason: Option<&'a str>,
        /// Who sent it and its kind, when the command named its sender (its sealed `by`): the
        /// command's row is made if the sender has not written it yet, and the ack is audited
        /// (`command.acked`, by that person) when it is recorded.
        sent: Option<SentBy<'a>>,
    },
    /// A person's answer, carried out by the driver (`approval_answered` by `command` `seq`):
    /// recorded unless the request is answered already, as answered by `person` (the command's
    /// sealed sender; without one, the command's recorded sender), with their `note`, and
    /// audited (`approval.answered`) when it is recorded.
    ApprovalAnsweredByCommand {
        /// The request's id.
        request_id: &'a str,
        /// The answer.
        decision: Decision,
        /// The command that carried it.
        seq: i64,
        /// Who sent the command, as the log says.
        person: Option<&'a str>,
        /// The person's words with a deny.
        note: Option<&'a str>,
        /// The input the tool ran with, when the person changed it (in the audit record).
        updated_input: Option<&'a Value>,
    },
}

/// Who sent a command and its kind, as the run log says ([`SliceEffect::CommandAnswered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentBy<'a> {
    /// The command's kind (`approve`, `steer`, ...).
    pub kind: &'a str,
    /// The person.
    pub person: &'a str,
}

/// What [`crate::Store::commit_events`] can store: an event's kind and its JSON text.
pub trait EventRow: Sync {
    /// What happened.
    fn row_kind(&self) -> &str;
    /// Its data as JSON text, NUL characters made U+FFFD.
    fn row_json(&self) -> std::borrow::Cow<'_, str>;
    /// [`EventRow::row_json`] as a shared string (what SQLite's INSERT binds without a copy).
    fn row_json_shared(&self) -> std::sync::Arc<str> {
        self.row_json().into()
    }
}

impl EventRow for NewEvent {
    fn row_kind(&self) -> &str {
        &self.kind
    }

    fn row_json(&self) -> std::borrow::Cow<'_, str> {
        // Serializing a `Value` cannot fail: its keys are strings.
        serde_json::to_string(&crate::events::storable(&self.payload))
            .unwrap_or_else(|_| "null".to_owned())
            .into()
    }
}

impl EventRow for EncodedEvent {
    fn row_kind(&self) -> &str {
        &self.kind
    }

    fn row_json(&self) -> std::borrow::Cow<'_, str> {
        (*self.json).into()
    }

    fn row_json_shared(&self) -> std::sync::Arc<str> {
        std::sync::Arc::clone(&self.json)
    }
}

/// A stored event. Ids grow in commit order, so `id` is a cursor for paging and SSE.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Global, increasing id.
    pub id: i64,
    /// The session it belongs to.
    pub session_id: String,
    /// The run that produced it, if any.
    pub run_id: Option<String>,
    /// What happened.
    pub kind: String,
    /// Its data.
    pub payload: Value,
    /// When it was stored.
    pub created_at: i64,
}

/// Whose events [`crate::Store::events_after`] pages through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventScope<'a> {
    /// All events of a session, across its runs.
    Session(&'a str),
    /// The events of one run.
    Run(&'a str),
}

/// An API token's record (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// Its id (shown in lists, used to revoke).
    pub id: String,
    /// The person it authenticates.
    pub person: String,
    /// SHA-256 of the token, hex.
    pub token_hash: String,
    /// When it was made.
    pub created_at: i64,
    /// When it was revoked.
    pub revoked_at: Option<i64>,
    /// What its person called it (empty when unnamed).
    pub name: String,
    /// When it stops working (`None` only for tokens of a database written before expiry).
    pub expires_at: Option<i64>,
    /// When it last authenticated a request, to the minute.
    pub last_used_at: Option<i64>,
}

/// What a person may do: an admin manages people and acts for others; a member acts as
/// themselves only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Adds and removes people, sees and revokes anyone's tokens, acts for another person.
    Admin,
    /// Acts as themselves.
    Member,
    /// Reads what any member of the team could be shown (every session, run, transcript and
    /// pending approval: a lead's or an auditor's view) and acts on nothing of it.
    Viewer,
}

impl Role {
    /// The stored (and shown) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    /// The role named `s`.
    pub fn parse(s: &str) -> Result<Role, crate::StoreError> {
        match s {
            "admin" => Ok(Role::Admin),
            "member" => Ok(Role::Member),
            "viewer" => Ok(Role::Viewer),
            other => Err(crate::StoreError::Invalid(format!(
                "role {other:?} is not admin, member or viewer"
            ))),
        }
    }
}

/// A person of the team: who tokens speak for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonRecord {
    /// Their id.
    pub id: String,
    /// Their email, unique among people.
    pub email: String,
    /// What they may do.
    pub role: Role,
    /// When they were added (or added again).
    pub created_at: i64,
    /// When they were removed; their tokens were revoked then.
    pub removed_at: Option<i64>,
}
