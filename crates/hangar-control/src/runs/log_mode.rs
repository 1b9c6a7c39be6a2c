//! How a run's log is read, from where the run works: sealed or not, trusted or not (see
//! [`crate::steps::logtrust`]).

use hangar_store::Run;

use super::Runs;
use hangar_events::LogMode;

impl Runs {
    /// How the log of `run` is read, from where it runs (see the module docs).
    pub(crate) async fn log_mode(&self, run: &Run) -> LogMode {
        let untrusted = |sealed: bool, why: String| LogMode {
            sealed,
            trusted: false,
            why: Some(why),
        };
        let one_shot = self.one_shots.lock().is_ok_and(|o| o.contains(&run.id))
            || self.store.turn(&run.turn_id).await.is_ok_and(|t| {
                t.manifest
                    .as_ref()
                    .and_then(|m| m.get("policy_effective"))
                    .and_then(|p| p.as_str())
                    .is_some_and(|p| p.ends_with("(one-shot)"))
            });
        if one_shot {
            return untrusted(
                false,
                "a one-shot turn: the harness's own output is the run log, with no driver to seal it".into(),
            );
        }
        let Some(sb) = self.sandboxes.sandbox_of_run(&run.id).await else {
            return untrusted(
                true,
                "the run works in a plain folder as hangar's own user: the agent could read the run's key and write its log".into(),
            );
        };
        if sb.agent.is_some() || sb.env.provider == hangar_sandbox::ProviderKind::Local {
            return LogMode {
                sealed: true,
                trusted: true,
                why: None,
            };
        }
        untrusted(
            true,
            format!(
                "sandbox {} ({}) has no uid split and the run key waits where the agent, the driver's own user, can read it",
                sb.id, sb.env.provider
            ),
        )
    }
}
