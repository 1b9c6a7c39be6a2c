//! The forks made from a run's steps, as recorded: what the API shows of them, and where a
//! forked session's first turn forks the harness's conversation from. Making a fork is the
//! forks service's ([`crate::forks`]); its records are read here, where the runs can read them
//! too.

use hangar_store::{Fork, Harness, Session};

use super::Steps;
use crate::error::ControlError;

/// The fork's record, kept with the fork as the API returns it (one definition, hangar-api's).
pub use hangar_api::{Conversation, ForkCapability, ForkRecord};

/// What each harness allows (the pinned versions: Claude Code 2.1.328, Codex 0.169.0).
pub fn fork_capability(harness: Harness) -> ForkCapability {
    match harness {
        Harness::Claude => ForkCapability {
            harness: "claude".into(),
            cut: hangar_api::Cut::Message,
            exact_at_every_step: true,
            how: "--resume SESSION --fork-session --resume-session-at MESSAGE".into(),
        },
        Harness::Codex => ForkCapability {
            harness: "codex".into(),
            cut: hangar_api::Cut::Turn,
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
