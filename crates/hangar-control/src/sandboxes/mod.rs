//! Sandboxes (H1, S1, S2): `hangar sb create | list | exec | attach | rm` and their API, over
//! the providers of hangar-sandbox. The store keeps each sandbox's provider handle (the
//! `hangar_sandbox::Sandbox` as its provider left it) so any control plane on this machine can
//! work it later.
//!
//! Rows without a handle are the plain folders sessions used before sandboxes had providers;
//! they have no provider to exec in or remove.
//!
//! The [`Sandboxes`] service owns the providers (each connected on first use), the environments
//! ([`envs`]), the terminals relayed for `hangar sb attach` ([`attaches`]), the harness CLIs an
//! image holds ([`image_cli`]), a docker environment's image pulled when missing ([`images`]) and
//! the rule for plain folders ([`folders`]). It uses no other service; governance, runs and
//! forks use it.

use std::path::{Path, PathBuf};

use hangar_cloud::{E2bProvider, KubernetesProvider};
use hangar_sandbox::{
    Capabilities, CreateRequest, DockerProvider, ExecRequest, LocalProvider, Output, Provider,
    ProviderKind, Sandbox, SandboxError, Who,
};
use hangar_store::{NewSandbox, new_id};
use serde::Serialize;
use serde_json::json;

use std::sync::Arc;

use hangar_store::Store;

use crate::error::ControlError;
use crate::launch::Tools;
use envs::spec_of;

pub mod attaches;
pub(crate) mod envs;
pub(crate) mod folders;
pub(crate) mod image_cli;
pub(crate) mod images;
pub(crate) mod keep;
pub(crate) mod take;

/// The sandboxes service (see the module's page).
#[derive(Debug)]
pub struct Sandboxes {
    pub(crate) store: Store,
    pub(crate) tools: Arc<Tools>,
    pub(crate) providers: Providers,
    /// The terminals this control plane relays (`hangar sb attach` on e2b).
    pub(crate) attaches: attaches::Attaches,
}

impl Sandboxes {
    /// `replica`: this process among replicas sharing the database (the holder of its leases);
    /// `lease`: how long a relayed attach's record is held without renewal (none on SQLite).
    pub(crate) fn new(
        store: Store,
        tools: Arc<Tools>,
        replica: String,
        lease: Option<std::time::Duration>,
    ) -> Sandboxes {
        Sandboxes {
            providers: Providers::for_tools(&tools),
            attaches: attaches::Attaches::new(replica, lease),
            store,
            tools,
        }
    }
}

/// The built-in environment of a local sandbox on the folder itself (`hangar run` without
/// `--sb`).
pub const IN_PLACE_ENV: &str = "in-place";

/// The providers this control plane works with. Docker, Kubernetes and E2B are reached on first
/// use (a control plane on a machine without dockerd, a kubeconfig or an E2B key works, and says
/// what to set only when such a sandbox is asked for): Kubernetes through `KUBECONFIG` (or
/// `~/.kube/config`, or the pod hangar runs in) and `HANGAR_K8S_NAMESPACE`, E2B through
/// `HANGAR_E2B_API_KEY`, `HANGAR_E2B_URL` and `HANGAR_E2B_ENVD_URL`.
#[derive(Debug, Default)]
pub struct Providers {
    pub(crate) local: LocalProvider,
    docker: tokio::sync::OnceCell<DockerProvider>,
    kubernetes: tokio::sync::OnceCell<KubernetesProvider>,
    e2b: tokio::sync::OnceCell<E2bProvider>,
}

impl Providers {
    /// The providers for a control plane with `tools`: the local provider shows hangar's pinned
    /// harness CLIs at their own path, also when they live under `/tmp` (a checkout there).
    pub(crate) fn for_tools(tools: &crate::launch::Tools) -> Providers {
        Providers {
            local: LocalProvider::new().with_ro_binds(harness_binds(tools)),
            ..Providers::default()
        }
    }

    /// The docker provider, connected now if it was not yet; `ro_binds` are the host folders of
    /// hangar's pinned harness CLIs, bound read-only into containers whose image has none.
    pub(crate) async fn docker(
        &self,
        ro_binds: Vec<PathBuf>,
    ) -> Result<&DockerProvider, ControlError> {
        self.docker
            .get_or_try_init(|| async {
                let mirror = hangar_sandbox::DockerMirror::from_setting(
                    hangar_protocol::env::var(hangar_protocol::env::HANGAR_DOCKER_MIRROR)
                        .as_deref(),
                    std::env::var("DOCKER_HOST").ok().as_deref(),
                )?;
                Ok::<_, ControlError>(
                    DockerProvider::connect()
                        .await?
                        .with_ro_binds(ro_binds)
                        .with_mirror(mirror),
                )
            })
            .await
    }

    /// The kubernetes provider, configured now if it was not yet.
    pub(crate) async fn kubernetes(&self) -> Result<&KubernetesProvider, ControlError> {
        self.kubernetes
            .get_or_try_init(|| async { Ok(KubernetesProvider::from_env().await?) })
            .await
    }

    /// The e2b provider, configured now if it was not yet.
    pub(crate) async fn e2b(&self) -> Result<&E2bProvider, ControlError> {
        self.e2b
            .get_or_try_init(|| async { Ok(E2bProvider::from_env()?) })
            .await
    }
}

/// How a person's terminal attaches to a run's tmux session.
#[derive(Debug, Clone)]
pub enum Attach {
    /// A command run on the person's machine (`tmux attach`, `docker exec -it`, `kubectl exec -it`).
    Argv(Vec<String>),
    /// A terminal relayed by the control plane (an e2b sandbox: envd's PTY process running
    /// `tmux attach-session`, started here with envd's token, which never leaves): its attach
    /// id ([`crate::attaches`]).
    Relay(String),
}

/// Why a turn cannot run in `sb` with `policy` although the governance allows it, if it
/// cannot: policy `governed` writes the run's Tower key into the control folder, which in a
/// kubernetes or e2b sandbox the agent (the same uid as the driver, T18) could read.
pub(crate) fn turn_unsupported(sb: &Sandbox, policy: hangar_store::Policy) -> Option<String> {
    match (sb.env.provider, policy) {
        (ProviderKind::Kubernetes | ProviderKind::E2b, hangar_store::Policy::Governed) => {
            Some(format!(
                "policy governed is refused in {} sandboxes: the agent runs as the driver's own uid there (no uid split), so it could read the run's Tower key; use policy ask or auto, or a sandbox with the uid split (local or docker)",
                sb.env.provider
            ))
        }
        _ => None,
    }
}

/// The host folders that hold a pinned harness CLI (`…/node_modules` when it is an npm install,
/// else the executable's folder), for containers to see at the same path.
pub(crate) fn harness_binds(tools: &crate::launch::Tools) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for bin in [&tools.claude, &tools.codex] {
        let Ok(real) = bin.canonicalize() else {
            continue;
        };
        let dir = real
            .ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
            .map(Path::to_path_buf)
            .or_else(|| real.parent().map(Path::to_path_buf));
        if let Some(d) = dir
            && !out.contains(&d)
        {
            out.push(d);
        }
    }
    out
}

/// Runs `$body` with `$p` bound to the provider of `$kind`.
macro_rules! with_provider {
    ($plane:expr, $kind:expr, |$p:ident| $body:expr) => {
        match $kind {
            hangar_sandbox::ProviderKind::Local => {
                let $p = &$plane.providers.local;
                $body
            }
            hangar_sandbox::ProviderKind::Docker => {
                match $plane
                    .providers
                    .docker(crate::sandboxes::harness_binds(&$plane.tools))
                    .await
                {
                    Ok($p) => $body,
                    Err(e) => Err(e),
                }
            }
            hangar_sandbox::ProviderKind::Kubernetes => match $plane.providers.kubernetes().await {
                Ok($p) => $body,
                Err(e) => Err(e),
            },
            hangar_sandbox::ProviderKind::E2b => match $plane.providers.e2b().await {
                Ok($p) => $body,
                Err(e) => Err(e),
            },
        }
    };
}
pub(crate) use with_provider;

impl From<SandboxError> for ControlError {
    fn from(e: SandboxError) -> ControlError {
        match e {
            SandboxError::Invalid(m) | SandboxError::Unsupported(m) => ControlError::Invalid(m),
            SandboxError::Unavailable(m) => ControlError::Unavailable(m),
            SandboxError::Gone(id) => ControlError::WrongState(format!(
                "sandbox {id} is gone (its provider no longer has it); remove it with `hangar sb rm {id}`"
            )),
            SandboxError::Failed(m) => ControlError::Internal(m),
        }
    }
}

/// A sandbox as the API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct SandboxView {
    pub id: String,
    pub environment: String,
    pub provider: String,
    pub person: String,
    /// `live` or `removed`.
    pub state: String,
    /// The work tree inside the sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// The work tree on this machine.
    pub host_workspace: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    /// What its egress allowlist does not keep, when that is weaker than hangar's proxy (e2b's
    /// firewall, `egress.enforcement: e2b-firewall`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_warning: Option<String>,
    pub created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_at: Option<i64>,
}

fn view(row: &hangar_store::Sandbox) -> SandboxView {
    let sb = handle_of(row).ok().flatten();
    SandboxView {
        id: row.id.clone(),
        environment: row.environment.clone(),
        provider: row.kind.clone(),
        person: row.person.clone(),
        state: row.state.clone(),
        workspace: sb.as_ref().map(|s| s.workspace.clone()),
        host_workspace: row.workdir.clone(),
        egress_warning: sb.as_ref().and_then(|s| egress_warning(&s.env)),
        capabilities: sb.map(|s| s.capabilities),
        created_at: row.created_at,
        removed_at: row.removed_at,
    }
}

/// What an environment's egress allowlist does not keep, when another than hangar's proxy
/// keeps it (said by `sb create` and kept in `sandbox.created`).
pub(crate) fn egress_warning(env: &hangar_sandbox::EnvSpec) -> Option<String> {
    match env.egress_enforcement {
        Some(hangar_sandbox::EgressEnforcement::E2bFirewall)
            if matches!(env.egress, hangar_sandbox::Egress::Allowlist(_)) =>
        {
            Some(format!(
                "warning: egress.enforcement: e2b-firewall: {}",
                hangar_sandbox::E2B_FIREWALL_CAVEAT
            ))
        }
        _ => None,
    }
}

/// The provider's sandbox behind a row (`None` for a plain folder).
pub(crate) fn handle_of(row: &hangar_store::Sandbox) -> Result<Option<Sandbox>, ControlError> {
    row.handle
        .as_ref()
        .map(|h| {
            serde_json::from_value::<Sandbox>(h.clone()).map_err(|e| {
                ControlError::Internal(format!("sandbox {}: its stored handle: {e}", row.id))
            })
        })
        .transpose()
}

impl Sandboxes {
    /// The provider's sandbox a run is in, if it is in one.
    pub(crate) async fn sandbox_of_run(&self, run_id: &str) -> Option<Sandbox> {
        let row = self.store.sandbox_of_run(run_id).await.ok()?;
        if row.state != "live" {
            return None;
        }
        handle_of(&row).ok()?
    }

    /// A live sandbox with a provider, or an error that says why not.
    pub(crate) async fn provider_sandbox(&self, id: &str) -> Result<Sandbox, ControlError> {
        let row = self.store.sandbox(id).await.map_err(|e| match e {
            hangar_store::StoreError::NotFound { .. } => {
                ControlError::NotFound(format!("no sandbox {id} (`hangar sb list` shows them)"))
            }
            e => e.into(),
        })?;
        if row.state != "live" {
            return Err(ControlError::WrongState(format!(
                "sandbox {id} was removed"
            )));
        }
        handle_of(&row)?.ok_or_else(|| {
            ControlError::Invalid(format!(
                "sandbox {id} is a plain folder ({}), not a sandbox a provider made",
                row.workdir
            ))
        })
    }

    /// Makes a sandbox of environment `env` holding a copy of `repo`, for `person`.
    pub async fn create_sandbox(
        &self,
        env: &str,
        repo: &Path,
        person: &str,
    ) -> Result<SandboxView, ControlError> {
        // hangar's own folders never go into a sandbox (forks make theirs inside hangar's home
        // through `make_sandbox`).
        let repo = crate::sandboxes::folders::outside_home(&self.tools.home, repo)?;
        let (row, _) = self
            .make_sandbox(&new_id("sb")?, env, &repo, person)
            .await?;
        Ok(view(&row))
    }

    /// Environment `env`'s validated spec (the built-in `in-place` made on first use).
    pub(crate) async fn env_spec(
        &self,
        env: &str,
        person: &str,
    ) -> Result<hangar_sandbox::EnvSpec, ControlError> {
        if env == IN_PLACE_ENV {
            self.builtin_in_place_env(person).await?;
        }
        let row = self.store.environment(env).await.map_err(|e| match e {
            hangar_store::StoreError::NotFound { .. } => ControlError::NotFound(format!(
                "no environment {env:?} (`hangar env list` shows them; `hangar env apply FILE` makes one)"
            )),
            e => e.into(),
        })?;
        spec_of(&row)
    }

    /// [`Sandboxes::create_sandbox`] with the id given: the stored row and the provider's
    /// sandbox.
    pub(crate) async fn make_sandbox(
        &self,
        id: &str,
        env: &str,
        repo: &Path,
        person: &str,
    ) -> Result<(hangar_store::Sandbox, Sandbox), ControlError> {
        let spec = self.env_spec(env, person).await?;
        // Where Tower must be asked but could not be reached, that reason comes first (and a
        // session started from the environment is refused with it).
        let hooked = crate::tower::required_for(&self.tools, &spec);
        let governed = hooked || spec.governance.policy.as_deref() == Some("governed");
        let why = governed
            .then(|| crate::tower::egress_refusal(&self.tools, &spec))
            .flatten();
        if let Some(why) = why {
            self.store
                .audit()
                .append(
                    person,
                    "sandbox.refused",
                    &json!({"environment": spec.name, "provider": spec.provider.as_str(), "why": why}),
                )
                .await?;
            return Err(ControlError::Invalid(why));
        }
        let repo = repo
            .canonicalize()
            .map_err(|e| ControlError::Invalid(format!("--repo {}: {e}", repo.display())))?;
        if !repo.is_dir() {
            return Err(ControlError::Invalid(format!(
                "--repo {}: not a folder",
                repo.display()
            )));
        }
        // Among replicas (PostgreSQL) the agent's uid is claimed in the database, where two
        // replicas that share no home never claim the same one; a pool kept as files in the
        // home would be lost with it.
        let agent_uid = if self.store.backend() == hangar_store::Backend::Postgres
            && matches!(spec.provider, ProviderKind::Local | ProviderKind::Docker)
        {
            // Sandboxes made before uids were claimed here hold theirs without a row: in their
            // handles, and in this home's pool.
            let mut held: std::collections::HashSet<u32> = self
                .store
                .sandboxes(None)
                .await?
                .iter()
                .filter(|sb| sb.state == "live")
                .filter_map(|sb| sb.handle.as_ref()?.pointer("/agent/uid")?.as_u64())
                .filter_map(|u| u32::try_from(u).ok())
                .collect();
            let home = self.tools.home.clone();
            held.extend(
                crate::blocking::blocking(move || hangar_sandbox::uids::held(&home)).await?,
            );
            Some(
                self.store
                    .claim_agent_uid(
                        id,
                        (
                            hangar_sandbox::layout::AGENT_UID_FIRST,
                            hangar_sandbox::layout::AGENT_UID_LAST,
                        ),
                        &held,
                    )
                    .await?
                    .ok_or_else(|| {
                        ControlError::Unavailable(format!(
                            "every agent uid ({}-{}) is taken by a sandbox; remove some (hangar sb rm)",
                            hangar_sandbox::layout::AGENT_UID_FIRST,
                            hangar_sandbox::layout::AGENT_UID_LAST
                        ))
                    })?,
            )
        } else {
            None
        };
        let req = CreateRequest {
            id: id.to_owned(),
            env: spec.clone(),
            repo: repo.clone(),
            person: person.to_owned(),
            home: self.tools.home.clone(),
            agent_uid,
        };
        let creating = std::time::Instant::now();
        let sb = async {
            if spec.provider == ProviderKind::Docker {
                // A missing image is pulled first, with the environment's registry login.
                self.ensure_image(&spec, &mut |_| {}).await?;
            }
            with_provider!(self, spec.provider, |p| {
                p.check(&spec).await?;
                p.create(&req).await.map_err(ControlError::from)
            })
        }
        .await;
        crate::metrics::sandbox_create(spec.provider.as_str(), sb.is_ok(), creating.elapsed());
        if sb.is_err() && agent_uid.is_some() {
            let _ = self.store.release_agent_uid(id).await;
        }
        let sb = sb?;
        let host_workspace = sb
            .host_workspace
            .clone()
            .unwrap_or_else(|| sb.workspace.clone());
        let handle =
            serde_json::to_value(&sb).map_err(|e| ControlError::Internal(e.to_string()))?;
        let stored = self
            .store
            .create_sandbox(&NewSandbox {
                id: sb.id.clone(),
                environment: spec.name.clone(),
                kind: spec.provider.as_str().into(),
                workdir: host_workspace.display().to_string(),
                person: person.to_owned(),
                handle: Some(handle),
            })
            .await;
        let stored = match stored {
            Ok(s) => s,
            Err(e) => {
                // Nothing may be left behind that the store does not know about.
                let _ = with_provider!(self, spec.provider, |p| p
                    .destroy(&sb, false)
                    .await
                    .map_err(ControlError::from));
                if agent_uid.is_some() {
                    let _ = self.store.release_agent_uid(id).await;
                }
                return Err(e.into());
            }
        };
        self.store
            .audit()
            .append(
                person,
                "sandbox.created",
                &json!({"sandbox": sb.id, "environment": spec.name, "provider": spec.provider.as_str(), "repo": repo.display().to_string(), "capabilities": sb.capabilities, "egress_warning": egress_warning(&spec)}),
            )
            .await?;
        Ok((stored, sb))
    }

    /// The built-in environment `in-place` (what `hangar run` uses without `--sb`), made on
    /// first use: the local provider on the folder itself, no uid split (the folder stays its
    /// owner's), the host's network (the model's API). An operator may replace it with
    /// `hangar env apply`.
    async fn builtin_in_place_env(&self, person: &str) -> Result<(), ControlError> {
        match self.store.environment(IN_PLACE_ENV).await {
            Ok(_) => Ok(()),
            Err(hangar_store::StoreError::NotFound { .. }) => {
                let spec = json!({"name": IN_PLACE_ENV, "provider": "local", "workspace": "in-place", "uid_split": false, "network": "host"});
                match self.apply_environment(&spec, person).await {
                    Ok(_) | Err(ControlError::Store(hangar_store::StoreError::Conflict(_))) => {
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Sandboxes, oldest first (removed ones too, marked so).
    pub async fn list_sandboxes(&self) -> Result<Vec<SandboxView>, ControlError> {
        Ok(self.store.sandboxes(None).await?.iter().map(view).collect())
    }

    /// One sandbox.
    pub async fn sandbox_view(&self, id: &str) -> Result<SandboxView, ControlError> {
        match self.store.sandbox(id).await {
            Ok(row) => Ok(view(&row)),
            Err(hangar_store::StoreError::NotFound { .. }) => Err(ControlError::NotFound(format!(
                "no sandbox {id} (`hangar sb list` shows them)"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs a command to its end in a sandbox, as the agent or as hangar's user; audited.
    pub async fn sandbox_exec(
        &self,
        id: &str,
        who: Who,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
        person: &str,
    ) -> Result<Output, ControlError> {
        if argv.is_empty() {
            return Err(ControlError::Invalid(
                "no command: `hangar sb exec SB -- CMD [ARGS...]`".into(),
            ));
        }
        let sb = self.provider_sandbox(id).await?;
        self.store
            .audit()
            .append(
                person,
                "sandbox.exec",
                &json!({"sandbox": id, "as": who, "argv": argv}),
            )
            .await?;
        let req = ExecRequest {
            argv,
            stdin,
            ..ExecRequest::default()
        };
        with_provider!(self, sb.env.provider, |p| p
            .exec(&sb, who, &req)
            .await
            .map_err(ControlError::from))
    }

    /// How a terminal attaches to the tmux session of `run` (default: the newest live run) in a
    /// sandbox: a host command, or for e2b a terminal this control plane relays (it starts
    /// envd's PTY process of `term`'s size and type; the attach belongs to API token `owner`).
    /// Audited as `sandbox.attach`.
    pub async fn sandbox_attach(
        &self,
        id: &str,
        run: Option<&str>,
        person: &str,
        owner: &str,
        term: &crate::sandboxes::attaches::TermSpec,
    ) -> Result<(String, Attach), ControlError> {
        let sb = self.provider_sandbox(id).await?;
        let run = match run {
            Some(r) => r.to_owned(),
            None => self.newest_live_run_in(id).await?.ok_or_else(|| {
                ControlError::WrongState(format!(
                    "no turn is running in sandbox {id}; start one with `hangar session start --sb {id} PROMPT`"
                ))
            })?,
        };
        let alive = with_provider!(self, sb.env.provider, |p| p
            .tmux_alive(&sb, &run)
            .await
            .map_err(ControlError::from))?;
        if !alive {
            return Err(ControlError::WrongState(format!(
                "run {run} has no tmux session in sandbox {id} (its turn has ended)"
            )));
        }
        if sb.env.provider == ProviderKind::E2b {
            // Only a relayed terminal takes the client's size and type.
            term.check()?;
            let slot = self.attaches.reserve(owner)?;
            let target = self.providers.e2b().await?.pty_target(&sb, &run)?;
            let attach = new_id("att")?;
            self.store
                .audit()
                .append(
                    person,
                    "sandbox.attach",
                    &json!({"sandbox": id, "run": run, "via": "relay", "attach": attach}),
                )
                .await?;
            let pty = match hangar_cloud::e2b::terminal::PtySession::start(
                &target, &term.term, term.cols, term.rows,
            )
            .await
            {
                Ok(pty) => pty,
                Err(e) => {
                    let detail = json!({"sandbox": id, "run": run, "attach": attach, "reason": format!("the terminal did not start: {e}"), "status": null, "killed": false});
                    self.store
                        .audit()
                        .append(person, "sandbox.attach.ended", &detail)
                        .await?;
                    return Err(e.into());
                }
            };
            self.attaches
                .open(self.store.clone(), slot, pty, &attach, id, &run, person)
                .await?;
            return Ok((run, Attach::Relay(attach)));
        }
        let argv = with_provider!(self, sb.env.provider, |p| Ok::<_, ControlError>(
            p.attach_argv(&sb, &run)
        ))?;
        Ok((run, Attach::Argv(argv)))
    }

    /// The newest live run of any session in the sandbox.
    async fn newest_live_run_in(&self, sandbox: &str) -> Result<Option<String>, ControlError> {
        let mut newest: Option<(i64, String)> = None;
        for session in self.store.sessions(Some(sandbox)).await? {
            if let Some(run) = self.store.live_run_of(&session.id).await?
                && newest.as_ref().is_none_or(|(t, _)| run.created_at > *t)
            {
                newest = Some((run.created_at, run.id));
            }
        }
        Ok(newest.map(|(_, id)| id))
    }

    /// Destroys a sandbox (container, processes, mounts, its folder; `keep_logs` keeps the runs'
    /// control folders) and marks it removed. Refused while a turn runs in it, unless `force`.
    pub async fn remove_sandbox(
        &self,
        id: &str,
        keep_logs: bool,
        force: bool,
        person: &str,
    ) -> Result<SandboxView, ControlError> {
        let sb = self.provider_sandbox(id).await?;
        if let Some(run) = self.newest_live_run_in(id).await?
            && !force
        {
            return Err(ControlError::WrongState(format!(
                "a turn is running in sandbox {id} (run {run}): `hangar interrupt {run}` first, or `hangar sb rm --force {id}`"
            )));
        }
        // Its repository, for forks of its runs' steps once it is gone.
        let kept = self.keep_repository(&sb).await;
        if let Err(why) = &kept {
            tracing::warn!(sandbox = %id, error = %why, "cannot keep the sandbox's repository");
        }
        with_provider!(self, sb.env.provider, |p| p
            .destroy(&sb, keep_logs)
            .await
            .map_err(ControlError::from))?;
        self.store.mark_sandbox_removed(id).await?;
        self.store.release_agent_uid(id).await?;
        let mut detail = json!({"sandbox": id, "keep_logs": keep_logs, "force": force});
        if let Err(why) = kept {
            detail["repository_not_kept"] = json!(why);
        }
        self.store
            .audit()
            .append(person, "sandbox.removed", &detail)
            .await?;
        self.sandbox_view(id).await
    }
}

/// Whether turns in `sb` run with a mirrored control folder (it sees no folder of this
/// machine: kubernetes, e2b, docker made with `HANGAR_DOCKER_MIRROR=stream`).
pub(crate) fn is_remote(sb: &Sandbox) -> bool {
    sb.mirrored()
}

/// Where the driver is copied to inside.
pub(crate) fn driver_inside() -> PathBuf {
    Path::new(hangar_sandbox::layout::HANGAR_LIB).join("hangar-driver")
}

/// The Tower client inside, beside the driver, where the driver looks for it under policy
/// `governed` (the hook executable; the Claude Code hook itself is installed as `tower_hook`).
pub(crate) fn tower_client_inside() -> PathBuf {
    Path::new(hangar_sandbox::layout::HANGAR_LIB).join("hangar-tower-hook")
}
