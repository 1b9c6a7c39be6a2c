//! What the turn loop needs from a harness adapter. The loop owns the mailbox, the policy and the
//! record of permission requests; an adapter turns commands into the harness's own protocol and
//! the harness's output into [`Signal`]s.

use serde_json::Value;

use crate::harness::Harness;
use crate::relay::HarnessEvent;
use crate::runlog::RunLog;

/// What an adapter reports to the turn loop.
#[derive(Clone, Debug, PartialEq)]
pub enum Signal {
    /// The harness asks whether a tool may run.
    Ask {
        request_id: String,
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
    },
    /// The harness is about to run a tool and asks the driver's PreToolUse hook (Claude Code's
    /// `hook_callback`): the deny-risky rules answer it, under every policy.
    PreToolUse {
        request_id: String,
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
    },
    /// The harness withdrew a request (e.g. after an interrupt).
    Withdrawn { request_id: String },
    /// Everything passed on so far is done: the turn can end. `is_error` when the harness said
    /// its work failed.
    Settled { is_error: bool },
    /// The job's check ran as Claude Code's Stop hook: `outcome` is `passed`, `feedback` or
    /// `failed` (see `verify.rs`).
    Verified {
        outcome: hangar_protocol::runlog::VerifyOutcome,
        exit_code: Option<i32>,
        tail: String,
    },
    /// Tool calls that may have changed files finished (ids as the run log names them): the
    /// turn's tree is hashed.
    ToolsDone { ids: Vec<String> },
    /// The harness cannot go on (e.g. its thread could not be started); the turn ends with 1.
    Failed { message: String },
}

/// A person's (or the policy's) answer to a permission request.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub allow: bool,
    /// The input to run instead of the one asked (Claude Code only).
    pub updated_input: Option<Value>,
    /// Why it was denied; the agent sees it.
    pub message: String,
}

/// Why an adapter could not carry out a command.
#[derive(Clone, Debug, PartialEq)]
pub enum SendError {
    /// The harness's input is closed or broken: the turn has ended for this command.
    Gone,
    /// The harness cannot do this (e.g. a changed input for Codex); the command is refused.
    Unsupported(String),
}

/// One harness's protocol.
pub trait Adapter {
    /// Called once, right after the harness started (e.g. Codex's handshake and thread start).
    fn start(&mut self, h: &mut Harness, log: &RunLog) -> Result<(), SendError>;
    /// A user message (`prompt`/`steer`); `id` is unique in the run.
    fn message(&mut self, h: &mut Harness, text: &str, id: &str) -> Result<(), SendError>;
    /// Stop the running turn.
    fn interrupt(&mut self, h: &mut Harness, seq: u64) -> Result<(), SendError>;
    /// Answer a permission request the harness asked (the loop has checked the id).
    fn answer(
        &mut self,
        h: &mut Harness,
        request_id: &str,
        original_input: &Value,
        a: &Answer,
    ) -> Result<(), SendError>;
    /// Answer a [`Signal::PreToolUse`]: `deny` holds the reason the agent is shown; `None` lets
    /// the harness go on with its own permission flow (never an explicit allow).
    fn answer_hook(
        &mut self,
        _h: &mut Harness,
        _request_id: &str,
        _deny: Option<&str>,
    ) -> Result<(), SendError> {
        Err(SendError::Unsupported(
            "this harness has no hook callbacks".into(),
        ))
    }
    /// Something from the harness's output.
    fn on_event(&mut self, h: &mut Harness, log: &RunLog, ev: HarnessEvent) -> Vec<Signal>;
    /// Called a few times a second: timeouts.
    fn tick(&mut self, _h: &mut Harness, _log: &RunLog) -> Vec<Signal> {
        Vec::new()
    }
    /// Whether messages passed on are still being worked on.
    fn busy(&self) -> bool;
    /// The ids (as given to [`Adapter::message`]) of messages passed on that the harness never
    /// began (no result covers them and the model never had them): when the harness is gone,
    /// they are handed back for the next turn instead of being lost (S19).
    fn never_started(&self) -> Vec<String> {
        Vec::new()
    }
    /// The ids of messages the model has begun and not finished answering: what an interrupt
    /// now stops (its `hangar.interrupted` line names them).
    fn answering(&self) -> Vec<String> {
        Vec::new()
    }
}
