//! The four ways a planned turn is placed, one module each, and what they share: the check of
//! the harness's version against the conformance suite, and the policy's Tower credential.

mod folder;
mod oneshot;
mod sandbox;

use std::path::Path;
use std::sync::Arc;

use hangar_store::Harness;
use serde_json::json;

use super::plan::TurnPlan;
use crate::blocking::blocking;
use crate::conformance::Verdict;
use crate::error::ControlError;
use crate::launch;
use crate::runs::Runs;

/// Where a turn runs.
#[derive(Debug)]
pub(crate) enum Placement {
    /// A plain folder on this machine; the driver detached here, as the server's user.
    Folder,
    /// A sandbox whose control folder this machine sees (local, docker): the driver in a tmux
    /// session inside it.
    Sandbox(hangar_sandbox::Sandbox),
    /// A remote sandbox (kubernetes, e2b): the same, with the control folder mirrored
    /// (`remote.rs`).
    Remote(hangar_sandbox::Sandbox),
    /// No driver: the harness once in its plain mode (S29, S30), in `sandbox` or a plain folder.
    OneShot {
        why: String,
        sandbox: Option<hangar_sandbox::Sandbox>,
    },
}

/// A placed turn: its manifest, and its driver's pid when it is this machine's to see.
#[derive(Debug)]
pub(crate) struct Launched {
    pub manifest: hangar_events::Manifest,
    pub pid: Option<u32>,
}

/// The harness version a turn runs, and what the conformance suite says of it.
#[derive(Debug)]
struct Checked {
    verdict: Verdict,
    version: String,
    /// The sandbox image's own CLI, when it has one (then it runs, not hangar's pinned copy).
    image_cli: Option<std::path::PathBuf>,
}

impl Checked {
    /// The manifest with the checked version sealed in.
    fn seal(&self, mut m: hangar_events::Manifest) -> hangar_events::Manifest {
        m.harness_version = self.version.clone();
        m.harness_check = self.verdict.manifest_value();
        m.sealed()
    }

    /// What the turn says when the version has not passed the suite.
    fn warning(&self, harness: Harness) -> Option<String> {
        self.verdict.warning(harness, &self.version)
    }

    fn image_cli(&self) -> Option<&Path> {
        self.image_cli.as_deref()
    }
}

impl Runs {
    /// Places the planned turn; an error refuses it (the caller records that).
    pub(crate) async fn place(
        self: &Arc<Self>,
        plan: &TurnPlan,
        placement: &Placement,
    ) -> Result<Launched, ControlError> {
        if let Placement::OneShot { why, sandbox } = placement {
            return self.place_one_shot(plan, why, sandbox.as_ref()).await;
        }
        let sb = match placement {
            Placement::Sandbox(sb) | Placement::Remote(sb) => Some(sb),
            _ => None,
        };
        if sb.is_none() && launch::hook_required(&self.tools) {
            // A plain folder has no uid split: every such turn is refused, audited.
            return Err(ControlError::Invalid(
                launch::hook_refusal(plan.session.harness).into(),
            ));
        }
        let checked = self.check_harness(plan, sb).await?;
        let hooked = sb.is_some_and(|s| crate::tower::required(&self.tools, s));
        if let Some(sb) = sb
            && !hooked
            && let Some(why) = crate::sandboxes::turn_unsupported(sb, plan.session.policy)
        {
            return Err(ControlError::Invalid(why));
        }
        // Policy governed: the run's copy of Tower's key or its passport, in the control folder
        // (hangar's user's, read by the driver only), removed when the run ends. With the Tower
        // hook the hook asks Tower instead, with a key file of its own.
        let tower = if plan.session.policy == hangar_store::Policy::Governed && !hooked {
            Some(
                self.governance
                    .tower_credential(&plan.ctl, &plan.sandbox, plan.run_id(), &plan.person)
                    .await?,
            )
        } else {
            None
        };
        match placement {
            Placement::Sandbox(sb) => {
                self.place_in_sandbox(plan, sb, false, tower, &checked)
                    .await
            }
            Placement::Remote(sb) => self.place_in_sandbox(plan, sb, true, tower, &checked).await,
            _ => self.place_in_folder(plan, tower, &checked).await,
        }
    }

    /// The harness's version (the image's own CLI in a non-local sandbox when it has one, else
    /// hangar's pinned copy) must have passed the conformance suite, or the session says to run
    /// it unverified (audited).
    async fn check_harness(
        &self,
        plan: &TurnPlan,
        sb: Option<&hangar_sandbox::Sandbox>,
    ) -> Result<Checked, ControlError> {
        let harness = plan.session.harness;
        let image_cli = match sb {
            Some(sb) if sb.env.provider != hangar_sandbox::ProviderKind::Local => {
                match crate::sandboxes::image_cli::find(&self.sandboxes, sb, harness).await? {
                    // (Where the Tower hook is required, its refusal says more: it comes first.)
                    None if crate::sandboxes::is_remote(sb)
                        && !crate::tower::required(&self.tools, sb) =>
                    {
                        // A pod cannot see this machine's files: the image must have the CLI.
                        return Err(ControlError::Invalid(format!(
                            "the image of sandbox {} ({}) has no {} on its system PATH, and a {} sandbox cannot see hangar's pinned copy on this machine; use an image with the harness CLI installed",
                            sb.id,
                            sb.env.image.as_deref().unwrap_or("the provider's default"),
                            harness.as_str(),
                            sb.env.provider
                        )));
                    }
                    found => found,
                }
            }
            _ => None,
        };
        let version = match &image_cli {
            Some((_, v)) => v.clone(),
            None => {
                let bin = match harness {
                    Harness::Claude => self.tools.claude.clone(),
                    Harness::Codex => self.tools.codex.clone(),
                };
                blocking(move || launch::harness_version(&bin)).await?
            }
        };
        let verdict = crate::conformance::check(
            &self.store,
            harness,
            &version,
            plan.options.unverified_harness,
        )
        .await?;
        if !matches!(verdict, Verdict::Passed { .. }) {
            self.store.audit().append(&plan.person, "harness.unverified", &json!({"run": plan.run_id(), "harness": harness.as_str(), "version": version, "check": verdict.manifest_value()})).await?;
        }
        Ok(Checked {
            verdict,
            version,
            image_cli: image_cli.map(|(p, _)| p),
        })
    }
}
