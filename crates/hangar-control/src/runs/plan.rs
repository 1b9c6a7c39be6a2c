//! A turn made and checked before anything runs: its records, its mailbox holding the prompts,
//! and where it will run ([`Placement`]).

use std::path::PathBuf;
use std::sync::Arc;

use hangar_mailbox::outbox::Mailbox;
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_store::{NewRun, Run, Sandbox as SandboxRow, Secret, Session, Turn, new_id};
use serde_json::json;

use super::place::Placement;
use crate::blocking::blocking;
use crate::error::ControlError;
use crate::launch::TurnOptions;
use crate::runs::Runs;
use crate::runs::commands::Then;

/// A turn whose records exist and whose prompts wait in its mailbox; not yet placed.
#[derive(Debug)]
pub(crate) struct TurnPlan {
    pub session: Session,
    /// The sandbox row the session runs in (a plain folder's too).
    pub sandbox: SandboxRow,
    pub options: TurnOptions,
    pub turn: Turn,
    pub run: Run,
    /// The run's control folder on this machine.
    pub ctl: PathBuf,
    pub person: String,
}

impl TurnPlan {
    pub fn run_id(&self) -> &str {
        &self.run.id
    }
}

impl Runs {
    /// Makes the turn and its run (key in the vault, audited) and puts `messages` in its
    /// mailbox, for no driver yet to read.
    pub(crate) async fn plan_turn(
        &self,
        session_id: &str,
        messages: &[String],
        person: &str,
    ) -> Result<TurnPlan, ControlError> {
        let session = self.store.session(session_id).await?;
        let sandbox = self.store.sandbox(&session.sandbox_id).await?;
        let options: TurnOptions =
            serde_json::from_value(session.options.clone()).unwrap_or_default();
        let prompt = messages.join("\n\n");
        let turn = self
            .store
            .create_turn(&new_id("turn")?, &session.id, &prompt)
            .await?;
        let run_id = new_id("run")?;
        let home = self.tools.home.clone();
        let rid = run_id.clone();
        let mailbox = blocking(move || Mailbox::create_keeping_key(&home, &rid)).await??;
        let ctl = mailbox.ctl().root().to_owned();
        let key = Secret::new(mailbox.key().expose().to_vec());
        let run = self
            .store
            .create_run(
                &NewRun {
                    id: run_id.clone(),
                    turn_id: turn.id.clone(),
                    ctl_path: ctl.display().to_string(),
                    driver_pid: None,
                    lease: crate::runs::lease::first_claim(self),
                },
                &key,
            )
            .await?;
        self.store
            .audit()
            .append(
                person,
                "run.key_made",
                &json!({"run": run_id, "turn": turn.id}),
            )
            .await?;
        for text in messages {
            self.deliver(
                &mailbox,
                &run_id,
                Kind::Prompt,
                body::text(text),
                person,
                Then::Return,
            )
            .await?;
        }
        Ok(TurnPlan {
            session,
            sandbox,
            options,
            turn,
            run,
            ctl,
            person: person.to_owned(),
        })
    }

    /// Where the planned turn runs, or why it may not.
    pub(crate) async fn placement(
        self: &Arc<Self>,
        plan: &TurnPlan,
    ) -> Result<Placement, ControlError> {
        let sandbox = &plan.sandbox;
        // A sandbox a provider made: the driver runs inside it, in a tmux session (S1, S2).
        let in_sandbox = match crate::sandboxes::handle_of(sandbox)? {
            Some(_) if sandbox.state != "live" => {
                return Err(ControlError::WrongState(format!(
                    "sandbox {} was removed; start a session in another one",
                    sandbox.id
                )));
            }
            // A sandbox made before its environment's combination was refused (its stored
            // spec was never checked against the rule).
            Some(sb) if sb.env.refused_now().is_some() => {
                return Err(ControlError::Invalid(format!(
                    "sandbox {}'s environment {} is refused now ({}); the turn is refused: make a sandbox of a corrected environment",
                    sandbox.id,
                    sb.env.name,
                    sb.env.refused_now().unwrap_or_default()
                )));
            }
            // The environment's policy is the floor of every turn in its sandboxes.
            Some(sb) => {
                crate::sandboxes::envs::session_policy(Some(plan.session.policy), Some(&sb.env))?;
                Some(sb)
            }
            // A plain folder runs the agent as this server's user: only where the server says
            // so (also for the later turns of a session started while it did).
            None => {
                crate::sandboxes::folders::unsandboxed_allowed(&self.tools)?;
                None
            }
        };
        // One-shot (S29, S30): no driver, the harness once in its plain mode.
        if let Some(why) = crate::runs::oneshot::reason(&self.tools) {
            return Ok(Placement::OneShot {
                why,
                sandbox: in_sandbox,
            });
        }
        Ok(match in_sandbox {
            None => Placement::Folder,
            Some(sb) if crate::sandboxes::is_remote(&sb) => Placement::Remote(sb),
            Some(sb) => Placement::Sandbox(sb),
        })
    }
}
