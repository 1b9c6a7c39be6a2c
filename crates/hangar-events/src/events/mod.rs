//! Run-log lines → progress events, the same way for both harnesses.
//!
//! A run log (`$HANGAR_HOME/runs/<run>.ctl/run.log`) holds three kinds of JSON lines: Claude
//! Code's stream-json stdout (`system`, `assistant`, `user`, `result`, …), Codex's
//! `codex exec --json` lines (`thread.started`, `item.started`, `turn.completed`, …), and
//! hangar's own `hangar.*` lines. [`parse_line`] turns one line into zero or more
//! [`ProgressEvent`]s; [`ParseContext`] carries what one line needs from earlier ones.
//!
//! Tolerance: formats hangar does not own must never break parsing. A line of an unknown `type`,
//! or with unknown fields, yields no event; a line that is not JSON (or not a JSON object with a
//! string `type`) yields a [`EventKind::Warning`]. A `hangar.*` line of a known type whose fields
//! do not fit also yields a warning (hangar owns those and wants to hear about it).
//!
//! What is deliberately not an event: `system` lines (the init, hook events: the check is
//! reported by `hangar.verify`), `control_request` / `control_response` /
//! `control_cancel_request` (`hangar.approval` and `hangar.approval_answered` say the same for
//! both harnesses), `command_lifecycle`, `stream_event` (partial deltas; the whole `assistant`
//! line follows), thinking blocks and Codex `reasoning` items, `thread.started`, `turn.started`.
//!
//! Non-goals: no I/O (see [`crate::watcher`]), no persistence, no judgement of the run.

mod claude;
mod codex;
mod hangar;
#[cfg(test)]
mod harness_tests;
mod line;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One progress event and the byte offset of the run-log line it came from (several events can
/// share a line, e.g. a `result` gives `usage` then `result`).
///
/// Serialized flat: `{"offset":123,"kind":"tool_call","tool_use_id":…,"name":…,"input":…}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressEvent {
    /// Byte offset of the line's first byte in the run log.
    pub offset: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What a run-log line says happened, in one shape for Claude Code and Codex.
///
/// Where a source line's field is itself called `kind` (`hangar.command`, `hangar.refused`), the
/// event calls it `command`, because `kind` is the tag.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// `hangar.started`: the driver started the harness (`claude` | `codex`) under `policy`
    /// (`ask` | `auto`); `uid_split` says whether the harness runs as a uid of its own; `argv`
    /// (program first) and `hooks` are what it ran with, for the turn's manifest (empty in logs
    /// of older drivers).
    Started {
        harness: String,
        policy: String,
        uid_split: bool,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        argv: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        hooks: Vec<crate::manifest::Hook>,
    },
    /// The harness's own conversation id: Claude Code's `session_id` (from `system`/`init`) or
    /// Codex's `thread_id` (`thread.started`). The next turn resumes it.
    Session { harness_session_id: String },
    /// A prompt or steer as the harness echoed it, when it does: Claude Code `user` lines with
    /// plain text content (not tool results, not synthetic lines such as
    /// `[Request interrupted by user]` or the Stop hook's feedback, which is a `verify` event, and
    /// not a subagent's prompt). Codex's exec lines never echo them; the command itself is a
    /// `command_acked` event either way.
    UserMessage { text: String },
    /// Text the assistant wrote: a Claude `text` block, a Codex `agent_message` item.
    /// `unverified` when the run's log could have been written by the agent itself (see
    /// [`LogMode`]): the text is not known to be the model's.
    AssistantText {
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unverified: bool,
    },
    /// A piece of the assistant's text (or, `thinking`, of its reasoning) as the model streams
    /// it, before the whole message: Claude Code's `stream_event` `content_block_delta` lines
    /// (`text_delta`, `thinking_delta`; the driver runs it with `--include-partial-messages`),
    /// Codex's `item/agentMessage/delta` and reasoning deltas (`item.delta` lines). The whole
    /// message still comes as its `assistant_text`; these only let a person watch it being
    /// written. A subagent's pieces are not shown.
    TextDelta {
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        thinking: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unverified: bool,
    },
    /// The agent called a tool. Claude: a `tool_use` block (`name` as Claude Code names it, e.g.
    /// `Bash`; `input` its input). Codex: the `item.started` of a tool item, as `command`
    /// `{"command"}`, `file_change` `{"changes"}`, `mcp__<server>__<tool>` (the arguments) or
    /// `web_search` `{"query"}`; `tool_use_id` is the item id (`item_N`).
    ToolCall {
        tool_use_id: String,
        name: String,
        input: Value,
    },
    /// A tool call's result, paired to its `tool_call` by `tool_use_id`. Claude: a `tool_result`
    /// block in a `user` line (text parts joined). Codex: the `item.completed` of a tool item
    /// (`aggregated_output` of a command; `<kind> <path>` lines for a file change; when that is
    /// empty and the item did not complete, its status). `is_error` when Claude says so, or the
    /// Codex item's status is `failed` / `declined`, or its exit code is not 0.
    ToolResult {
        tool_use_id: String,
        output: String,
        is_error: bool,
    },
    /// `hangar.approval`: the harness asks whether a tool may run; a person answers with
    /// `approve` / `deny` and `request_id`. `tool_use_id` names the `tool_call` it is about, as
    /// the events name it (for Codex the driver's line carries the app-server's own item id,
    /// which the exec lines do not; it is resolved to the open `item_N` of that tool).
    ApprovalRequested {
        request_id: String,
        tool_name: String,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
    },
    /// `hangar.approval_answered`: `decision` `allow` | `deny` | `cancelled`; `by` `command`
    /// (with the command's `seq`) or `policy`.
    ApprovalAnswered {
        request_id: String,
        decision: String,
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
        /// Who sent the answering command (its sealed `by`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        person: Option<String>,
        /// The person's words with a deny.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// The input the tool ran with, when the person changed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        updated_input: Option<Value>,
    },
    /// `hangar.rules_denied`: the deny-risky rules refused a call before anyone was asked
    /// (`rule` names the rule, `reason` is what the agent was told).
    RulesDenied {
        request_id: String,
        tool_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
        rule: String,
        reason: String,
    },
    /// `hangar.command`: command `seq` of kind `command` (`prompt`, `steer`, `interrupt`,
    /// `approve`, `deny`, `end`) was carried out (`outcome` `done`) or answered `ended`.
    CommandAcked {
        seq: u64,
        command: String,
        outcome: String,
        /// Who sent it (the command's sealed `by`), when it names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        person: Option<String>,
        /// A prompt's or steer's words (drivers from issue 21 on write them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// `hangar.refused`: a command was refused and nothing was executed; `code` is
    /// machine-readable (`bad_mac`, `replay`, `unknown_request`, …), `reason` in words.
    CommandRefused {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        code: String,
        reason: String,
        /// Who sent it, when the command passed its checks and names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        person: Option<String>,
    },
    /// `hangar.tree`: the workspace's tree `tree` (a digest) after the tool call `tool_use_id`,
    /// or at the turn's `phase` (`start` | `end`), taken in `ms`; `skipped` as the line gives it.
    /// `trusted` only when the run's `hangar.started` said `uid_split: true` (otherwise the
    /// agent could have written the line's inputs) and the line itself does not say
    /// `trusted: false`.
    Tree {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
        tree: String,
        ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        skipped: Option<Value>,
        trusted: bool,
    },
    /// `hangar.verify`: one run of the job's check. `outcome` `passed` | `feedback` (its output
    /// went back to the agent) | `failed` (no rounds left); `output_tail` the last few KiB.
    Verify {
        round: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        outcome: String,
        output_tail: String,
        ms: u64,
    },
    /// Tokens (and money) of one harness turn, so that the sum over a run's `usage` events is the
    /// run's total. `input_tokens` counts every input token, cached ones included (Codex's
    /// convention; for Claude `input_tokens + cache_read_input_tokens +
    /// cache_creation_input_tokens`); `cached_input_tokens` those read from the cache. Claude:
    /// from a `result`'s per-turn `usage`; `cost_usd` is this turn's share of the cumulative
    /// `total_cost_usd` (the difference to the process's previous `result`). Codex: from
    /// `turn.completed`'s `usage` (already per turn); no cost.
    Usage {
        input_tokens: u64,
        output_tokens: u64,
        cached_input_tokens: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A harness turn ended. Claude: a `result` (`text` its `result`, else its `errors` joined;
    /// `status` its `subtype`: `success`, `error_during_execution`, …; `interrupted` with no
    /// text for an answer an interrupt stopped, `terminal_reason` `aborted_*`). Codex: `turn.completed`
    /// (`status` `completed`, `text` the turn's last agent message) or `turn.failed` (`status`
    /// `failed`, or `interrupted` for the driver's "the turn was interrupted"; `text` the error).
    /// `unverified` as for [`EventKind::AssistantText`].
    Result {
        is_error: bool,
        text: String,
        status: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unverified: bool,
    },
    /// An error: `hangar.error` (it stops the turn), a Codex `error` line (Codex reports its
    /// retries this way too, e.g. `Reconnecting... 1/5`; the turn's end is its `result`).
    Error { message: String },
    /// Something to know that does not stop the turn: `hangar.warning`, a line that is not JSON,
    /// a malformed `hangar.*` line, a line too long to read.
    Warning { message: String },
    /// `hangar.interrupted`: interrupt `seq` (0: Ctrl-C in the turn's terminal) from `person`
    /// stopped the answer to the messages `answering` and the waiting `approvals`; the messages
    /// `queued` (not yet begun) still run after it.
    Interrupted {
        seq: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        person: Option<String>,
        #[serde(default)]
        answering: Vec<u64>,
        #[serde(default)]
        queued: Vec<u64>,
        #[serde(default)]
        approvals: Vec<String>,
    },
    /// `hangar.turn_end`: the driver's exit `status` (0, 1, 130), its `reason` (`result` |
    /// `harness_exited`), the job's check's final state, and the messages `handed_back`.
    TurnEnd {
        status: i32,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verify: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verify_rounds: Option<u32>,
        handed_back: Vec<u64>,
    },
}

impl EventKind {
    /// The event's kind as it is serialized (its `kind` tag), without serializing it.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Started { .. } => "started",
            EventKind::Session { .. } => "session",
            EventKind::UserMessage { .. } => "user_message",
            EventKind::AssistantText { .. } => "assistant_text",
            EventKind::TextDelta { .. } => "text_delta",
            EventKind::Interrupted { .. } => "interrupted",
            EventKind::ToolCall { .. } => "tool_call",
            EventKind::ToolResult { .. } => "tool_result",
            EventKind::ApprovalRequested { .. } => "approval_requested",
            EventKind::ApprovalAnswered { .. } => "approval_answered",
            EventKind::RulesDenied { .. } => "rules_denied",
            EventKind::CommandAcked { .. } => "command_acked",
            EventKind::CommandRefused { .. } => "command_refused",
            EventKind::Tree { .. } => "tree",
            EventKind::Verify { .. } => "verify",
            EventKind::Usage { .. } => "usage",
            EventKind::Result { .. } => "result",
            EventKind::Error { .. } => "error",
            EventKind::Warning { .. } => "warning",
            EventKind::TurnEnd { .. } => "turn_end",
        }
    }
}

/// A Codex tool item that has started and not completed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct OpenItem {
    pub(crate) id: String,
    pub(crate) name: String,
    /// An approval request has been paired with it.
    pub(crate) asked: bool,
}

/// How a run's log is read, decided by the control plane from where the run ran (not from the
/// log, which the agent may have written), kept with the parser's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMode {
    /// The driver sealed its writes (`hangar_protocol::logseal`): only what a valid seal covers
    /// is read (with the run's seal key). `false` for a log with no driver (a one-shot turn).
    pub sealed: bool,
    /// The agent could not have written what is read as the harness's and hangar's: it runs
    /// under a uid of its own, or it cannot learn the run key (a local sandbox hands the key to
    /// the driver alone) and the log is sealed. When `false`, the assistant's text and results
    /// are marked `unverified` and no tree is trusted.
    pub trusted: bool,
    /// Why the log is not trusted, in words, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// What parsing one line needs from the lines before it. It is plain data (serde), so a caller
/// that persists a watcher's cursor can persist the context with it and resume exactly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ParseContext {
    /// Byte offset of the next line; [`parse_line`] stamps events with it and then advances it
    /// by the line's length plus its newline. The watcher sets it for every line it reads.
    pub offset: u64,
    /// `hangar.started`'s `harness`, once seen.
    #[serde(default)]
    pub(crate) harness: Option<String>,
    /// `hangar.started`'s `uid_split`, once seen; `hangar.tree` lines are trusted only if `true`.
    #[serde(default)]
    pub(crate) uid_split: Option<bool>,
    /// Codex tool items started and not yet completed, in order.
    #[serde(default)]
    pub(crate) codex_open: Vec<OpenItem>,
    /// The text of the current Codex turn's last agent message.
    #[serde(default)]
    pub(crate) codex_last_text: String,
    /// Claude Code's cumulative `total_cost_usd` at the process's last `result`.
    #[serde(default)]
    pub(crate) claude_cost: Option<f64>,
    /// How the log is read; `None`: as logs were before seals (read whole, trusted as the
    /// `hangar.started` line says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogMode>,
    /// The number of the last seal taken (a sealed log).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seal_n: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ParseContext {
    /// A context for a log read from its start.
    pub fn new() -> ParseContext {
        ParseContext::default()
    }

    /// A context for a log read from its start as `mode` says.
    pub fn with_log(mode: Option<LogMode>) -> ParseContext {
        ParseContext {
            log: mode,
            ..ParseContext::default()
        }
    }

    /// Whether what the log says the assistant wrote is marked `unverified`.
    pub fn text_unverified(&self) -> bool {
        self.log.as_ref().is_some_and(|m| !m.trusted)
    }

    /// A context whose next line is at `offset` (nothing known about earlier lines).
    pub fn at(offset: u64) -> ParseContext {
        ParseContext {
            offset,
            ..ParseContext::default()
        }
    }

    /// The run's harness (`claude` | `codex`), once its `hangar.started` line was parsed.
    pub fn harness(&self) -> Option<&str> {
        self.harness.as_deref()
    }

    /// Whether `hangar.tree` lines are trusted (the run's `hangar.started` said `uid_split`, and
    /// the log is not one the agent could have written).
    pub fn trees_trusted(&self) -> bool {
        self.uid_split == Some(true) && !self.text_unverified()
    }
}

/// Parses one run-log line (without its newline) into progress events stamped with
/// `ctx.offset`, then advances `ctx.offset` past the line. Never fails: see the module docs.
pub fn parse_line(line: &str, ctx: &mut ParseContext) -> Vec<ProgressEvent> {
    parse_line_with(line, ctx, true)
}

/// [`parse_line`] reading every line through a `serde_json::Value`, as it does the lines its
/// direct read refuses: what the direct read must agree with (for tests and the fuzz target).
#[doc(hidden)]
pub fn parse_line_via_value(line: &str, ctx: &mut ParseContext) -> Vec<ProgressEvent> {
    parse_line_with(line, ctx, false)
}

fn parse_line_with(line: &str, ctx: &mut ParseContext, direct: bool) -> Vec<ProgressEvent> {
    let offset = ctx.offset;
    ctx.offset = offset.saturating_add(line.len() as u64 + 1);
    let unverified = ctx.text_unverified();
    parse_kinds(line, ctx, direct)
        .into_iter()
        .map(|mut kind| {
            if unverified {
                mark_unverified(&mut kind);
            }
            ProgressEvent { offset, kind }
        })
        .collect()
}

/// Marks the assistant's words as not known to be the model's.
fn mark_unverified(kind: &mut EventKind) {
    match kind {
        EventKind::AssistantText { unverified, .. }
        | EventKind::Result { unverified, .. }
        | EventKind::TextDelta { unverified, .. } => {
            *unverified = true;
        }
        _ => {}
    }
}

fn parse_kinds(line: &str, ctx: &mut ParseContext, direct: bool) -> Vec<EventKind> {
    if line.trim().is_empty() {
        return Vec::new();
    }
    // The fields the events need, read straight from the text (see `line`); a line this read
    // refuses, and every line it does not settle, is read through a `Value` below.
    if direct
        && line.trim_start_matches(JSON_BLANKS).starts_with('{')
        && let Ok(mut l) = serde_json::from_str::<line::Line<'_>>(line)
    {
        let ty = std::mem::take(&mut l.ty);
        match ty.as_str() {
            // Text streamed in pieces: read from the `Value` below (the fast read does not
            // carry their nested fields).
            Some("stream_event" | "item.delta") => {}
            Some(ty) if !ty.starts_with("hangar.") => return harness(ty, l, ctx),
            Some(ty) => {
                if let Some(events) = hangar::parse_text(ty, line, ctx) {
                    return events;
                }
            }
            None => {}
        }
    }
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return vec![warning(format!(
                "run-log line is not JSON ({e}): {}",
                snippet(line)
            ))];
        }
    };
    let Some(ty) = value.get("type").and_then(Value::as_str) else {
        return vec![warning(format!(
            "run-log line is not a JSON object with a \"type\": {}",
            snippet(line)
        ))];
    };
    if ty.starts_with("hangar.") {
        return hangar::parse(ty, &value, ctx);
    }
    match ty {
        "stream_event" => return claude::stream_event(&value),
        "item.delta" => return codex::delta(&value),
        _ => {}
    }
    // The same fields from the `Value` (which kept the last of duplicated keys).
    match line::Line::deserialize(&value) {
        Ok(l) => harness(ty, l, ctx),
        Err(e) => vec![warning(format!(
            "run-log line could not be read ({e}): {}",
            snippet(line)
        ))],
    }
}

/// What JSON allows around a value.
const JSON_BLANKS: [char; 4] = [' ', '\t', '\n', '\r'];

/// The events of a Claude Code or Codex line of type `ty`.
fn harness(ty: &str, l: line::Line<'_>, ctx: &mut ParseContext) -> Vec<EventKind> {
    match ty {
        "system" if l.subtype.as_str() == Some("init") => session_event(l.session_id),
        "thread.started" => session_event(l.thread_id),
        "assistant" | "user" | "result" => claude::parse(ty, l, ctx),
        "turn.started" | "item.started" | "item.completed" | "turn.completed" | "turn.failed"
        | "error" => codex::parse(ty, l, ctx),
        _ => Vec::new(),
    }
}

/// A `session` event when the id is a non-empty string. (Claude Code repeats `system`/`init` at
/// every turn of a process; the same id each time.)
fn session_event(id: line::J<'_>) -> Vec<EventKind> {
    match id.into_str() {
        Some(id) if !id.is_empty() => vec![EventKind::Session {
            harness_session_id: id,
        }],
        _ => Vec::new(),
    }
}

pub(crate) fn warning(message: String) -> EventKind {
    EventKind::Warning { message }
}

/// The first 200 characters of a line, for messages.
pub(crate) fn snippet(line: &str) -> String {
    const MAX: usize = 200;
    match line.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}… ({} bytes)", &line[..i], line.len()),
        None => line.to_owned(),
    }
}

/// A string field of a JSON object, or "".
pub(crate) fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
