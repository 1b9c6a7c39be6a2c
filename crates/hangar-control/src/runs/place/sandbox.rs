//! A turn in a sandbox: the driver in a tmux session inside it. A sandbox that binds this
//! machine's folders (local, docker) shares the run's control folder; one that sees none
//! (kubernetes, e2b, docker with `HANGAR_DOCKER_MIRROR=stream`) gets a mirror of it
//! (`remote.rs`). The Tower hook, Tower's CA certificates, the environment's rules and
//! reviewed Claude Code settings, and the agent's uid go onto the driver's command line here.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hangar_store::{Harness, Policy};
use serde_json::json;

use super::{Checked, Launched};
use crate::error::ControlError;
use crate::launch::{self, Launch};
use crate::runs::Runs;
use crate::runs::plan::TurnPlan;

/// The environment's reviewed Claude Code settings in a run's control folder.
const CLAUDE_SETTINGS_FILE: &str = "claude-settings.json";

/// The run's control folder as this machine sees it and as the driver inside does.
struct Ctl {
    here: PathBuf,
    inside: PathBuf,
}

impl Runs {
    pub(super) async fn place_in_sandbox(
        self: &Arc<Self>,
        plan: &TurnPlan,
        sb: &hangar_sandbox::Sandbox,
        remote: bool,
        tower: Option<(String, PathBuf)>,
        checked: &Checked,
    ) -> Result<Launched, ControlError> {
        let (session, run_id) = (&plan.session, plan.run_id());
        let fork = self.steps.fork_point(session).await?;
        // A remote sandbox cannot see this machine's folders: the control folder stays here as
        // the mirror of the one in the pod.
        let ctl = if remote {
            Ctl {
                here: plan.ctl.clone(),
                inside: crate::runs::remote::ctl_inside(sb, run_id),
            }
        } else {
            Ctl {
                here: sb.ctl_host().join(plan.ctl.file_name().unwrap_or_default()),
                inside: self.ctl_into_sandbox(sb, &plan.ctl).await?,
            }
        };
        // Without the uid split the agent is the driver's own user and can read the run's
        // control folder, Tower's key (or passport) there included: said on the turn.
        let tower_readable = tower.is_some() && !remote && !sb.capabilities.uid_split;
        let mut tower = tower.map(|(url, file)| {
            let name = file.file_name().unwrap_or_default().to_owned();
            (url, ctl.inside.join(name))
        });
        let hooked = crate::tower::required(&self.tools, sb);
        let mut hook_flags = Vec::new();
        if let Some((url, key, flags)) = self.hook_for_turn(plan, sb, hooked, &ctl).await? {
            tower = Some((url, key));
            hook_flags = flags;
        }
        if let Some(why) = crate::sandboxes::turn_unsupported(sb, session.policy) {
            return Err(ControlError::Invalid(why));
        }
        let tower_url = tower.as_ref().map(|(url, _)| url.clone());
        let l = Launch {
            fork: fork.as_ref().map(|(p, at)| (p.as_str(), at.as_deref())),
            tower,
            run_id,
            ctl: &ctl.inside,
            workdir: &sb.workspace,
            harness: session.harness,
            policy: session.policy,
            resume: session.harness_session_id.as_deref(),
            options: &plan.options,
        };
        let mut args = launch::driver_args(&self.tools, &l)?;
        args.extend(hook_flags);
        if let Some(url) = &tower_url {
            self.install_tower_ca(sb, run_id, url, &mut args).await?;
        }
        let rules = self.rules_args(sb, run_id, hooked, &ctl, &mut args).await?;
        claude_settings_args(session.harness, sb, &ctl, &mut args).await?;
        if sb.env.provider != hangar_sandbox::ProviderKind::Local {
            harness_bins_inside(&mut args, session.harness, checked.image_cli());
        }
        agent_args(sb, &mut args);
        self.secrets_args(plan, sb, remote, &ctl, &mut args).await?;
        let mut manifest = launch::manifest(&self.tools, &l, &args, rules);
        if hooked {
            // T7: the asked policy is kept; what answers is the rules, with Tower through the hook.
            manifest.policy_effective = "tower_hook".into();
        }
        let manifest = checked.seal(manifest);
        if let Some(w) = checked.warning(session.harness) {
            self.warn_run(&ctl.here, &w).await?;
        }
        if tower_readable {
            self.warn_run(&ctl.here, &format!(
                "sandbox {} has no uid split, so the agent (the driver's own user) can read Tower's credential in the run's control folder under policy governed; use a sandbox with the uid split to keep it from the agent",
                sb.id
            ))
            .await?;
        }
        if remote {
            self.start_remote(sb, run_id, &ctl.here, &ctl.inside, &args)
                .await?;
        } else {
            self.start_in_sandbox(sb, run_id, &ctl.here, &ctl.inside, &args)
                .await?;
        }
        Ok(Launched {
            manifest,
            pid: None,
        })
    }

    /// The Tower hook, where it must hold (T4-T9, T15-T17): installed in the sandbox, its
    /// Tower address, key file and the driver's flags for it. Refused where the sandbox's
    /// egress cannot reach Tower (also under policy governed without the hook).
    async fn hook_for_turn(
        self: &Arc<Self>,
        plan: &TurnPlan,
        sb: &hangar_sandbox::Sandbox,
        hooked: bool,
        ctl: &Ctl,
    ) -> Result<Option<(String, PathBuf, Vec<OsString>)>, ControlError> {
        let run_id = plan.run_id();
        if (hooked || plan.session.policy == Policy::Governed)
            && let Some(why) = crate::tower::egress_refusal(&self.tools, &sb.env)
        {
            return Err(ControlError::Invalid(why));
        }
        if !hooked {
            return Ok(None);
        }
        if let Some(why) = crate::tower::refusal(sb, plan.session.harness) {
            return Err(ControlError::Invalid(why));
        }
        let h = self
            .install_hook(sb, &plan.sandbox, run_id, &plan.person)
            .await?;
        if let Some(what) = &h.tampered {
            self.store
                .audit()
                .append(
                    "hangar",
                    "governance.hook_tampered",
                    &json!({"sandbox": sb.id, "run": run_id, "found": what}),
                )
                .await?;
            self.warn_run(&ctl.here, what).await?;
        }
        let flags = vec![
            "--tower-hook".into(),
            crate::tower::path_inside().into_os_string(),
            "--tower-hook-digest".into(),
            h.digest.clone().into(),
        ];
        Ok(Some((h.url.clone(), h.key_inside.clone(), flags)))
    }

    /// The environment's changes to the deny-risky rules, as the run's rules file (`--rules`);
    /// what the manifest records of them.
    async fn rules_args(
        &self,
        sb: &hangar_sandbox::Sandbox,
        run_id: &str,
        hooked: bool,
        ctl: &Ctl,
        args: &mut Vec<OsString>,
    ) -> Result<hangar_events::RulesRecord, ControlError> {
        let rules_file = crate::sandboxes::envs::rules_file(&sb.env)?;
        let rules = crate::sandboxes::envs::rules_record(rules_file.as_deref())?;
        if let Some(text) = rules_file {
            let here = ctl.here.join("rules.toml");
            tokio::fs::write(&here, text).await.map_err(|e| {
                ControlError::Launch(format!("cannot write the run's rules file: {e}"))
            })?;
            // The Tower hook runs as the agent, which cannot enter the control folder under the
            // uid split: its rules (the driver's too) go beside it, hangar's and read-only.
            let inside = if hooked {
                self.install_rules(sb, run_id, &here).await?
            } else {
                ctl.inside.join("rules.toml")
            };
            args.extend(["--rules".into(), inside.into_os_string()]);
        }
        Ok(rules)
    }
}

/// The environment's reviewed Claude Code settings (`--claude-settings`): the driver checks
/// them again (and refuses the turn on a key it does not allow) and records their digest.
async fn claude_settings_args(
    harness: Harness,
    sb: &hangar_sandbox::Sandbox,
    ctl: &Ctl,
    args: &mut Vec<OsString>,
) -> Result<(), ControlError> {
    let Some(settings) = sb
        .env
        .governance
        .claude_settings
        .as_ref()
        .filter(|_| harness == Harness::Claude)
    else {
        return Ok(());
    };
    let text = serde_json::to_vec_pretty(settings)
        .map_err(|e| ControlError::Internal(format!("claude_settings: {e}")))?;
    tokio::fs::write(ctl.here.join(CLAUDE_SETTINGS_FILE), text)
        .await
        .map_err(|e| {
            ControlError::Launch(format!(
                "cannot write the environment's Claude Code settings: {e}"
            ))
        })?;
    args.extend([
        "--claude-settings".into(),
        ctl.inside.join(CLAUDE_SETTINGS_FILE).into_os_string(),
    ]);
    Ok(())
}

/// In a container: the image's own CLI when it has one; else the container sees the pinned
/// CLI's real files (bound at the same path), not the links to them.
fn harness_bins_inside(args: &mut [OsString], harness: Harness, image_cli: Option<&Path>) {
    let own_flag = match harness {
        Harness::Claude => "--claude-bin",
        Harness::Codex => "--codex-bin",
    };
    for i in 1..args.len() {
        if args[i - 1] == "--claude-bin" || args[i - 1] == "--codex-bin" {
            if let Some(own) = image_cli.filter(|_| args[i - 1] == own_flag) {
                args[i] = own.as_os_str().to_owned();
            } else if let Ok(real) = Path::new(&args[i]).canonicalize() {
                args[i] = real.into_os_string();
            }
        }
    }
}

/// The agent's uid, gid and home under the uid split.
impl Runs {
    /// The turn's credentials (`turn_secrets.rs`): written in the control folder for the
    /// driver (`--secrets-file`), copied into a remote sandbox's.
    async fn secrets_args(
        &self,
        plan: &TurnPlan,
        sb: &hangar_sandbox::Sandbox,
        remote: bool,
        ctl: &Ctl,
        args: &mut Vec<OsString>,
    ) -> Result<(), ControlError> {
        use crate::runs::turn_secrets;
        use hangar_sandbox::Provider;
        let Some(secrets) = turn_secrets::for_turn(
            &self.store,
            &plan.person,
            &plan.sandbox.person,
            &plan.sandbox.environment,
            &plan.options.codex_config,
            &self.tools,
        )
        .await?
        else {
            return Ok(());
        };
        let here = turn_secrets::write(&ctl.here, &secrets).await?;
        let inside = ctl.inside.join(turn_secrets::FILE);
        if remote {
            let copied = crate::sandboxes::with_provider!(self.sandboxes, sb.env.provider, |p| {
                p.copy_in(sb, &here, &inside, hangar_sandbox::Who::Hangar, 0o600)
                    .await
                    .map_err(|e| {
                        ControlError::Launch(format!("cannot copy the turn's credentials in: {e}"))
                    })
            });
            let _ = tokio::fs::remove_file(&here).await;
            copied?;
        }
        args.extend(["--secrets-file".into(), inside.into_os_string()]);
        Ok(())
    }
}

fn agent_args(sb: &hangar_sandbox::Sandbox, args: &mut Vec<OsString>) {
    if let Some(a) = &sb.agent {
        args.extend([
            "--agent-uid".into(),
            a.uid.to_string().into(),
            "--agent-gid".into(),
            a.gid.to_string().into(),
            "--agent-home".into(),
            a.home.clone().into_os_string(),
        ]);
    }
}
