//! The forks made from a run's steps, as recorded: what the API shows of them, and where a
//! forked session's first turn forks the harness's conversation from. Making a fork is the
//! forks service's ([`crate::forks`]); its records are read here, where the runs can read them
//! too.

use hangar_store::{Fork, Harness, Session};
use serde::{Deserialize, Serialize};

use super::Steps;
use crate::error::ControlError;

/// The fork's record (kept with the fork, returned by the API).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkRecord {
    pub session: String,
    pub sandbox: String,
    pub dir: String,
    /// Where it came from.
    pub run: String,
    pub turn: String,
    pub source_session: String,
    pub step: usize,
    /// The step's tree: recorded by the driver, and what the fork's work tree hashes to.
    pub tree: String,
    pub trusted: bool,
    /// The commit the fork's checkout is on (none for a plain folder or an unborn branch).
    pub head: Option<String>,
    /// Whether the fork's folder is a clone of the source's repository.
    pub repository: bool,
    pub conversation: Conversation,
    pub capability: ForkCapability,
    pub warnings: Vec<String>,
}

/// How far into the source's conversation a fork goes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    /// The harness's session (Claude Code) or thread (Codex) the fork's first turn forks from;
    /// none when the fork starts a new conversation (the step came before anything was said).
    pub parent: Option<String>,
    /// The last entry kept: Claude Code's message uuid, or Codex's turn id. None with a parent:
    /// everything of it.
    pub at: Option<String>,
    /// Whether the conversation ends exactly at the step.
    pub exact: bool,
    /// Why it does not, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// How exactly a harness's conversation can be cut at a step (the capability flag).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkCapability {
    pub harness: String,
    /// `message`: at any entry (every step); `turn`: only between turns.
    pub cut: String,
    /// Whether a fork from any step gets exactly the conversation up to it.
    pub exact_at_every_step: bool,
    /// How the harness is told.
    pub how: String,
}

/// What each harness allows (the pinned versions: Claude Code 2.1.328, Codex 0.169.0).
pub fn fork_capability(harness: Harness) -> ForkCapability {
    match harness {
        Harness::Claude => ForkCapability {
            harness: "claude".into(),
            cut: "message".into(),
            exact_at_every_step: true,
            how: "--resume SESSION --fork-session --resume-session-at MESSAGE".into(),
        },
        Harness::Codex => ForkCapability {
            harness: "codex".into(),
            cut: "turn".into(),
            exact_at_every_step: false,
            how: "thread/fork with lastTurnId (whole turns only; no rollback inside a turn)".into(),
        },
    }
}

impl Steps {
    /// The forks made from a run's steps.
    pub async fn forks_of_run(&self, run_id: &str) -> Result<Vec<ForkRecord>, ControlError> {
        self.store.run(run_id).await?;
        Ok(self
            .store
            .forks_of_run(run_id)
            .await?
            .iter()
            .filter_map(record_of)
            .collect())
    }

    /// The fork a session was made as, if it was.
    pub async fn fork_of(&self, session_id: &str) -> Result<Option<ForkRecord>, ControlError> {
        Ok(self
            .store
            .fork(session_id)
            .await?
            .as_ref()
            .and_then(record_of))
    }

    /// Where a forked session's first turn forks the harness's conversation from: (parent, last
    /// entry kept). None once the session has its own harness session (later turns resume it),
    /// and for a session that is no fork or whose fork starts a new conversation.
    pub(crate) async fn fork_point(
        &self,
        session: &Session,
    ) -> Result<Option<(String, Option<String>)>, ControlError> {
        if session.harness_session_id.is_some() {
            return Ok(None);
        }
        Ok(self.fork_of(&session.id).await?.and_then(|r| {
            r.conversation
                .parent
                .map(|parent| (parent, r.conversation.at))
        }))
    }
}

fn record_of(f: &Fork) -> Option<ForkRecord> {
    serde_json::from_value(f.record.clone()).ok()
}
