//! Sessions and turns: a session's first turn (making its sandbox), every next turn planned and
//! placed, and a refused turn recorded once.

use std::path::PathBuf;
use std::sync::Arc;

use hangar_store::{
    Harness, NewSandbox, Policy, Run, Session, StoreError, Turn, TurnState, TurnUpdate, new_id,
};
use serde_json::json;

use super::Runs;
use crate::error::ControlError;
use crate::launch::TurnOptions;

/// A request to start a session.
#[derive(Clone, Debug)]
pub struct SessionRequest {
    /// The folder: the repository a sandbox of `env` copies, or, without `env` and `sandbox`,
    /// the folder the in-place local sandbox works on (or, with `no_sandbox`, a plain folder).
    pub dir: PathBuf,
    /// Run in this existing sandbox (then `dir` is not used).
    pub sandbox: Option<String>,
    /// Make a sandbox of this environment holding a copy of `dir`, and run there.
    pub env: Option<String>,
    /// Run in `dir` itself with no sandbox, as the server's own user: refused unless the server
    /// allows it (`HANGAR_UNSANDBOXED_FOLDERS=allow`).
    pub no_sandbox: bool,
    pub harness: Harness,
    /// The policy asked for; `None`: the environment's `governance.policy`, else `ask`. An
    /// environment's policy is a floor: a weaker one is refused.
    pub policy: Option<Policy>,
    pub prompt: String,
    pub person: String,
    pub options: TurnOptions,
}

/// What starting a session or a turn made.
#[derive(Clone, Debug)]
pub struct Started {
    pub session: Session,
    pub turn: Turn,
    pub run: Run,
}

impl Runs {
    /// A new session in a local folder, and its first turn.
    pub async fn start_session(
        self: &Arc<Self>,
        req: SessionRequest,
    ) -> Result<Started, ControlError> {
        if req.prompt.trim().is_empty() {
            return Err(ControlError::Invalid("the prompt is empty".into()));
        }
        let (sandbox, policy) = match (&req.sandbox, &req.env, req.no_sandbox) {
            (Some(_), Some(_), _) => {
                return Err(ControlError::Invalid(
                    "give a sandbox or an environment to make one from, not both".into(),
                ));
            }
            (Some(_), None, true) | (None, Some(_), true) => {
                return Err(ControlError::Invalid(
                    "no_sandbox runs the session in a plain folder: give it with dir alone, not with a sandbox or an environment".into(),
                ));
            }
            (Some(id), None, false) => {
                let sb = self.sandboxes.provider_sandbox(id).await?;
                let policy = crate::sandboxes::envs::session_policy(req.policy, Some(&sb.env))?;
                (self.store.sandbox(id).await?, policy)
            }
            (None, None, true) => {
                crate::sandboxes::folders::unsandboxed_allowed(&self.tools)?;
                let sandbox = self.folder_sandbox(&req.dir, &req.person).await?;
                (sandbox, req.policy.unwrap_or(Policy::Ask))
            }
            // A folder alone runs in the in-place local sandbox (issue 18: never as the
            // server's user by default).
            (None, env, false) => {
                let env = env.as_deref().unwrap_or(crate::sandboxes::IN_PLACE_ENV);
                let spec = self.sandboxes.env_spec(env, &req.person).await?;
                let policy = crate::sandboxes::envs::session_policy(req.policy, Some(&spec))?;
                let made = self
                    .sandboxes
                    .create_sandbox(env, &req.dir, &req.person)
                    .await?;
                (self.store.sandbox(&made.id).await?, policy)
            }
        };
        let session = self
            .store
            .create_session(&new_id("ses")?, &sandbox.id, req.harness, policy)
            .await?;
        let options = serde_json::to_value(&req.options)
            .map_err(|e| ControlError::Internal(e.to_string()))?;
        self.store
            .set_session_options(&session.id, &options)
            .await?;
        self.store.audit().append(&req.person, "session.started", &json!({"session": session.id, "dir": sandbox.workdir, "harness": req.harness.as_str(), "policy": policy.as_str()})).await?;
        self.start_turn(&session.id, &[req.prompt], &req.person)
            .await
    }

    /// A plain local folder as a sandbox row (no provider); never hangar's home, a folder above
    /// it or one inside it.
    async fn folder_sandbox(
        &self,
        dir: &std::path::Path,
        person: &str,
    ) -> Result<hangar_store::Sandbox, ControlError> {
        let dir = crate::sandboxes::folders::outside_home(&self.tools.home, dir)?;
        // The embedded default: local folders, no sandbox provider yet.
        match self
            .store
            .create_environment("local", &json!({"provider": "local"}))
            .await
        {
            Ok(()) | Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(self
            .store
            .create_sandbox(&NewSandbox {
                id: new_id("sb")?,
                environment: "local".into(),
                kind: "local".into(),
                workdir: dir.display().to_string(),
                person: person.to_owned(),
                handle: None,
            })
            .await?)
    }

    /// Starts the next turn of a session with these messages: planned (records, mailbox, where
    /// it runs), then placed; whatever refuses it after its records exist refuses it here,
    /// once, audited.
    pub async fn start_turn(
        self: &Arc<Self>,
        session_id: &str,
        messages: &[String],
        person: &str,
    ) -> Result<Started, ControlError> {
        let plan = self.plan_turn(session_id, messages, person).await?;
        let placing = crate::runs::lease::Placing::start(self, plan.run_id());
        let placed = match self.placement(&plan).await {
            Ok(placement) => self.place(&plan, &placement).await,
            Err(e) => Err(e),
        };
        let launched = match placed {
            Ok(l) => l,
            Err(e) => {
                self.refuse_turn(&plan.turn, plan.run_id(), person, &e.to_string())
                    .await?;
                return Err(ControlError::TurnRefused {
                    turn: plan.turn.id.clone(),
                    why: Box::new(e),
                });
            }
        };
        if let Some(pid) = launched.pid {
            self.store
                .set_driver_pid(plan.run_id(), i64::from(pid))
                .await?;
        }
        let mut update = TurnUpdate::to(TurnState::Running);
        update.manifest = serde_json::to_value(&launched.manifest).ok();
        let turn = self.store.update_turn_state(&plan.turn.id, &update).await?;
        let run = self.store.run(plan.run_id()).await?;
        self.watch(run.clone());
        drop(placing);
        Ok(Started {
            session: self.store.session(&plan.session.id).await?,
            turn,
            run,
        })
    }

    async fn refuse_turn(
        &self,
        turn: &Turn,
        run_id: &str,
        person: &str,
        why: &str,
    ) -> Result<(), ControlError> {
        let mut u = TurnUpdate::to(TurnState::Refused);
        u.reason = Some(why.to_owned());
        self.store.update_turn_state(&turn.id, &u).await?;
        self.store.end_run(run_id).await?;
        self.store.destroy_run_key(run_id).await?;
        if let Ok(r) = self.store.run(run_id).await {
            self.governance.key_files_gone(&r).await;
        }
        self.store
            .audit()
            .append(
                person,
                "turn.refused",
                &json!({"turn": turn.id, "why": why}),
            )
            .await?;
        Ok(())
    }
}
