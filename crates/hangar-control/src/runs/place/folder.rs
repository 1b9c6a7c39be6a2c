//! A turn in a plain folder on this machine: the driver started detached, as the server's user.

use std::path::PathBuf;
use std::sync::Arc;

use super::{Checked, Launched};
use crate::error::ControlError;
use crate::launch::{self, Launch};
use crate::runs::Runs;
use crate::runs::plan::TurnPlan;

impl Runs {
    pub(super) async fn place_in_folder(
        self: &Arc<Self>,
        plan: &TurnPlan,
        tower: Option<(String, PathBuf)>,
        checked: &Checked,
    ) -> Result<Launched, ControlError> {
        let session = &plan.session;
        let fork = self.steps.fork_point(session).await?;
        let workdir = PathBuf::from(&plan.sandbox.workdir);
        let l = Launch {
            fork: fork.as_ref().map(|(p, at)| (p.as_str(), at.as_deref())),
            tower,
            run_id: plan.run_id(),
            ctl: &plan.ctl,
            workdir: &workdir,
            harness: session.harness,
            policy: session.policy,
            resume: session.harness_session_id.as_deref(),
            options: &plan.options,
        };
        let mut args = launch::driver_args(&self.tools, &l)?;
        // Issue 20, Deliver 6: the agent runs as hangar's own user here, so the driver starts it
        // where hangar's home (vault key, database, tokens, every run's control folder) and the
        // master key file are out of sight (hangar_protocol's `hide.rs`).
        for p in launch::hidden_from_agent(&self.tools) {
            args.extend(["--hide".into(), p.into_os_string()]);
        }
        if l.tower.is_some() {
            // The driver asks Tower through the hook executable (it holds the one HTTPS client).
            let client = crate::tower::binary(&self.tools).map_err(ControlError::Invalid)?;
            args.extend(["--tower-client".into(), client.into_os_string()]);
        }
        // The person's and the environment's credentials, as in a sandbox (`turn_secrets.rs`).
        if let Some(secrets) = crate::runs::turn_secrets::for_turn(
            &self.store,
            &plan.person,
            &plan.sandbox.person,
            &plan.sandbox.environment,
            &plan.options.codex_config,
            &self.tools,
        )
        .await?
        {
            let file = crate::runs::turn_secrets::write(&plan.ctl, &secrets).await?;
            args.extend(["--secrets-file".into(), file.into_os_string()]);
        }
        let manifest = checked.seal(launch::manifest(
            &self.tools,
            &l,
            &args,
            crate::sandboxes::envs::rules_record(None)?,
        ));
        if let Some(w) = checked.warning(session.harness) {
            self.warn_run(&plan.ctl, &w).await?;
        }
        let pid = launch::spawn_driver(&self.tools, &args, &plan.ctl)?;
        Ok(Launched {
            manifest,
            pid: Some(pid),
        })
    }
}
