//! A one-shot turn (S29, S30): no driver, the harness once in its plain mode, here or in a
//! sandbox. Nothing can ask Tower, so policy governed and the Tower hook refuse it.

use std::path::PathBuf;
use std::sync::Arc;

use super::Launched;
use crate::error::ControlError;
use crate::launch::{self, Launch};
use crate::runs::Runs;
use crate::runs::plan::TurnPlan;

impl Runs {
    pub(super) async fn place_one_shot(
        self: &Arc<Self>,
        plan: &TurnPlan,
        why: &str,
        sb: Option<&hangar_sandbox::Sandbox>,
    ) -> Result<Launched, ControlError> {
        let session = &plan.session;
        let hooked = launch::hook_required(&self.tools)
            || sb.is_some_and(|s| crate::tower::required(&self.tools, s));
        if let Some(no) = crate::runs::oneshot::refusal(session.policy, hooked) {
            return Err(ControlError::Invalid(no));
        }
        let argv = crate::runs::oneshot::argv(
            &self.tools,
            session.harness,
            session.policy,
            &plan.options,
            session.harness_session_id.as_deref(),
            &plan.turn.prompt,
        );
        let mut manifest = launch::manifest(
            &self.tools,
            &Launch {
                fork: None,
                tower: None,
                run_id: plan.run_id(),
                ctl: &plan.ctl,
                workdir: std::path::Path::new(&plan.sandbox.workdir),
                harness: session.harness,
                policy: session.policy,
                resume: session.harness_session_id.as_deref(),
                options: &plan.options,
            },
            &[],
            // No driver, so no deny-risky rules: the manifest says so.
            hangar_events::RulesRecord {
                disabled: Vec::new(),
                added: Vec::new(),
                digest: "none: one-shot turn, the deny-risky rules do not run".into(),
            },
        );
        manifest.argv = argv.clone();
        manifest.policy_effective = format!("{} (one-shot)", session.policy.as_str());
        manifest.driver_digest = "none: one-shot turn, no driver".into();
        let one = crate::runs::oneshot::OneShot {
            run_id: plan.run_id().to_owned(),
            turn_id: plan.turn.id.clone(),
            ctl: plan.ctl.clone(),
            workdir: PathBuf::from(&plan.sandbox.workdir),
            argv,
            policy: session.policy,
            why: why.to_owned(),
            session_id: session.id.clone(),
            secrets: crate::runs::turn_secrets::for_turn(
                &self.store,
                &plan.person,
                &plan.sandbox.person,
                &plan.sandbox.environment,
                &plan.options.codex_config,
                &self.tools,
            )
            .await?,
            hide: if sb.is_none() {
                launch::hidden_from_agent(&self.tools)
            } else {
                Vec::new()
            },
        };
        self.start_one_shot(one, session, sb.cloned()).await?;
        // This process runs it: its pid is the run's.
        Ok(Launched {
            manifest: manifest.sealed(),
            pid: Some(std::process::id()),
        })
    }
}
