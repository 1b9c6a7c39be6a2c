//! The docker provider: a container per sandbox, through the Docker Engine API (`bollard`; no
//! docker CLI), against the local dockerd (`DOCKER_HOST` or `/var/run/docker.sock`).
//!
//! A sandbox's container (`hangar-<id>`, labelled `dev.hangar.sandbox=<id>`) runs a long-lived
//! pid 1 (`sleep infinity` under docker's init, which reaps orphans), as root, with:
//! - the workspace: `<host_dir>/workspace`, a copy of the repository made on the host (owned by
//!   the agent's uid under the split: without a user namespace a container's uids are the
//!   host's), bound at `/workspace`;
//! - the control folder: `<host_dir>/ctl`, root's 0700, bound at `/run/hangar`, so the agent can
//!   neither read nor write it;
//! - `/var/lib/hangar` (root's, 0755: the driver and the hook are copied in per turn), the agent
//!   in `/etc/passwd` and `/home/agent`, all made by a setup command at create;
//! - hangar's pinned harness CLI bound read-only at the same path when the provider is given it
//!   ([`DockerProvider::with_ro_binds`]) for images that have none;
//! - `--network none` for `egress: none`, the host's network for `network: host`, docker's
//!   default network for `egress: open`; for an egress allowlist `--network none` too, with
//!   hangar's egress proxy listening in the container's namespace (see [`crate::egress`]) and
//!   `net.ipv4.ip_unprivileged_port_start` back at 1024 (docker makes it 0) so the agent cannot
//!   bind the proxy's port; cpu, memory (no swap beyond it) and pids limits;
//!   `no-new-privileges` unless the environment gives the agent `sudo` (then the image's sudo
//!   lets `agent` become root without a password).
//!
//! An image this machine lacks is pulled ([`crate::pull`]: at `check`, or when `create` finds
//! it missing; with the environment's registry login when the caller gives it,
//! [`DockerProvider::ensure_image`]), with progress lines.
//!
//! With [`DockerMirror::Stream`] (a dockerd on another machine, or replicas that share no disk)
//! nothing of this machine is bound in: the workspace is the repository sent as a tar to
//! `tar -x` run as the agent, `/run/hangar` is made inside (root's, 0700), the harness CLI must be
//! the image's own, and the control plane mirrors each run's control folder over one long-lived
//! exec ([`Provider::exec_stream`]: an attached exec, stdin and stdout), as for a pod.
//!
//! Commands are Engine API execs (as `uid:gid`). tmux: one server per container, root's, its
//! socket in a root-only folder (`/run/hangar-tmux`); an agent's window drops to the agent with
//! `setpriv`. Attaching is `docker exec -it ... tmux attach` (the person's terminal needs the
//! CLI's terminal handling). `destroy` removes the container with its anonymous volumes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::egress::{self, Netns, Proxies};
use crate::failed;
use crate::layout::{self, CTL_INSIDE, TMUX_SOCKET, WORKSPACE};
use crate::{
    AgentUser, Capabilities, CreateRequest, Egress, EnvSpec, ExecRequest, ExecStream, NetworkMode,
    Output, Provider, ProviderKind, Sandbox, SandboxError, Who, copy, uids,
};

const LABEL: &str = "dev.hangar.sandbox";

/// How a docker sandbox's folders reach its container (`HANGAR_DOCKER_MIRROR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DockerMirror {
    /// The workspace and the control folder are folders of this machine bound into the
    /// container: dockerd runs here.
    Bind,
    /// Nothing of this machine is seen inside: the workspace is sent in, each run's control
    /// folder mirrored over an exec stream.
    Stream,
}

impl DockerMirror {
    /// `setting` (`bind` | `stream` | `auto`, unset is `auto`); `auto` streams when `docker_host`
    /// (`DOCKER_HOST`) names a daemon reached over the network, else binds.
    pub fn from_setting(
        setting: Option<&str>,
        docker_host: Option<&str>,
    ) -> Result<DockerMirror, SandboxError> {
        match setting.map(str::trim).unwrap_or("auto") {
            "bind" => Ok(DockerMirror::Bind),
            "stream" => Ok(DockerMirror::Stream),
            "auto" | "" => Ok(
                if docker_host.is_some_and(|h| {
                    ["tcp://", "http://", "https://", "ssh://"]
                        .iter()
                        .any(|p| h.starts_with(p))
                }) {
                    DockerMirror::Stream
                } else {
                    DockerMirror::Bind
                },
            ),
            other => Err(SandboxError::Invalid(format!(
                "HANGAR_DOCKER_MIRROR (docker.mirror) is {other:?}: say bind (dockerd on this machine sees hangar's folders), stream (nothing shared: the workspace is sent in and each run mirrored over an exec), or auto"
            ))),
        }
    }
}

/// The docker provider.
#[derive(Debug)]
pub struct DockerProvider {
    docker: Docker,
    ro_binds: Vec<PathBuf>,
    mirror: DockerMirror,
    /// What `check` found per image id: `Ok` or what is missing.
    checked: Mutex<HashMap<String, Result<(), String>>>,
    /// The egress proxies of this process's sandboxes with an allowlist.
    egress: Proxies,
}

pub(crate) fn not_found(e: &DockerError) -> bool {
    matches!(
        e,
        DockerError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Container ids in the handle.
fn container(sb: &Sandbox) -> Result<&str, SandboxError> {
    sb.handle
        .get("container")
        .and_then(|v| v.as_str())
        .ok_or_else(|| SandboxError::Failed(format!("sandbox {} has no container", sb.id)))
}

impl DockerProvider {
    /// Connects to the local dockerd and agrees on an API version with it.
    pub async fn connect() -> Result<DockerProvider, SandboxError> {
        let unavailable = |e: DockerError| {
            SandboxError::Unavailable(format!(
                "dockerd does not answer ({e}); start it (scripts/start-docker, or systemctl start docker) or set DOCKER_HOST"
            ))
        };
        let docker = Docker::connect_with_local_defaults().map_err(unavailable)?;
        let docker = docker.negotiate_version().await.map_err(unavailable)?;
        Ok(DockerProvider {
            docker,
            ro_binds: Vec::new(),
            mirror: DockerMirror::Bind,
            checked: Mutex::new(HashMap::new()),
            egress: Proxies::from_env(),
        })
    }

    /// Test only: the egress proxy resolves these names to these addresses (see
    /// [`crate::egress`]; what `HANGAR_EGRESS_TEST_RESOLVE` sets otherwise).
    pub fn with_egress_test_resolve(
        mut self,
        map: HashMap<String, std::net::SocketAddr>,
    ) -> DockerProvider {
        let limits = self.egress.limits();
        self.egress = Proxies::with_test_resolve(map).with_limits(limits);
        self
    }

    /// Other limits for the egress proxies than [`egress::Limits::default`] (tests shorten them).
    pub fn with_egress_limits(mut self, limits: egress::Limits) -> Self {
        self.egress = self.egress.with_limits(limits);
        self
    }

    /// Whether this process serves an egress proxy for sandbox `id`.
    pub fn egress_running(&self, id: &str) -> bool {
        self.egress.is_running(id)
    }

    /// Makes sure the egress proxy of `sb` runs, its socket in the container's namespace.
    async fn egress_up(&self, sb: &Sandbox) -> Result<(), SandboxError> {
        if !matches!(sb.env.egress, Egress::Allowlist(_)) || self.egress.is_running(&sb.id) {
            return Ok(());
        }
        let id = container(sb)?;
        let info = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(|e| self.gone_or(sb, e))?;
        let pid = info
            .state
            .and_then(|s| s.pid)
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                SandboxError::Failed(format!(
                    "sandbox {}: its container is not running, so its egress proxy cannot start",
                    sb.id
                ))
            })?;
        let ns = PathBuf::from(format!("/proc/{pid}/ns/net"));
        self.egress.ensure(sb, Netns::Enter(ns)).await.map_err(|e| {
            SandboxError::Failed(format!(
                "{e} (the docker provider enters the container's network namespace through its pid, so dockerd must run on this machine)"
            ))
        })
    }

    /// Host folders every container sees read-only at the same path: hangar's pinned harness
    /// CLI (e.g. `.tools/npm`), for images without one of their own.
    pub fn with_ro_binds(mut self, paths: Vec<PathBuf>) -> DockerProvider {
        self.ro_binds = paths;
        self
    }

    /// How new sandboxes' folders reach their containers (existing ones keep theirs).
    pub fn with_mirror(mut self, mirror: DockerMirror) -> DockerProvider {
        self.mirror = mirror;
        self
    }

    /// The Engine API client (tests and benchmarks compare against plain containers with it).
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    fn gone_or(&self, sb: &Sandbox, e: DockerError) -> SandboxError {
        if not_found(&e) {
            SandboxError::Gone(sb.id.clone())
        } else {
            failed(format!("docker, sandbox {}", sb.id), e)
        }
    }

    /// Runs `argv` in the container as `user` (`uid:gid`) and collects its output.
    async fn run(
        &self,
        sb: &Sandbox,
        user: String,
        env: Vec<String>,
        cwd: String,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, SandboxError> {
        let id = container(sb)?;
        let exec = self
            .docker
            .create_exec(
                id,
                CreateExecOptions {
                    attach_stdin: Some(stdin.is_some()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    env: Some(env),
                    cmd: Some(argv),
                    user: Some(user),
                    working_dir: Some(cwd),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| self.gone_or(sb, e))?;
        let started = self
            .docker
            .start_exec(&exec.id, Some(StartExecOptions::default()))
            .await
            .map_err(|e| self.gone_or(sb, e))?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = started
        else {
            return Err(SandboxError::Failed(
                "docker started the exec detached".into(),
            ));
        };
        let writer = tokio::spawn(async move {
            if let Some(bytes) = stdin {
                // The command may exit without reading it all: not an error of ours.
                let _ = input.write_all(&bytes).await;
            }
            // End of input (a half-close: the output still comes back).
            let _ = input.shutdown().await;
        });
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(item) = output.next().await {
            match item {
                Ok(bollard::container::LogOutput::StdOut { message })
                | Ok(bollard::container::LogOutput::Console { message }) => {
                    stdout.extend_from_slice(&message)
                }
                Ok(bollard::container::LogOutput::StdErr { message }) => {
                    stderr.extend_from_slice(&message)
                }
                Ok(bollard::container::LogOutput::StdIn { .. }) => {}
                Err(e) => return Err(self.gone_or(sb, e)),
            }
        }
        let _ = writer.await;
        // The stream ends as the process does; its exit code follows within moments.
        let mut status = None;
        for _ in 0..100 {
            let info = self
                .docker
                .inspect_exec(&exec.id)
                .await
                .map_err(|e| self.gone_or(sb, e))?;
            if info.running != Some(true) {
                status = info.exit_code;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let status = status.ok_or_else(|| {
            SandboxError::Failed(format!(
                "sandbox {}: the command's exit status never came (is the container still there?)",
                sb.id
            ))
        })?;
        Ok(Output {
            status: i32::try_from(status).unwrap_or(-1),
            stdout,
            stderr,
        })
    }

    fn user(sb: &Sandbox, who: Who) -> String {
        match (who, &sb.agent) {
            (Who::Agent, Some(a)) => format!("{}:{}", a.uid, a.gid),
            _ => "0:0".into(),
        }
    }

    fn env_strings(sb: &Sandbox, who: Who, req: &ExecRequest) -> Vec<String> {
        layout::sandbox_env(sb, who, req)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    }

    /// What the image lacks of what hangar needs, found by running a shell in it once.
    async fn probe_image(&self, env: &EnvSpec, image: &str) -> Result<(), String> {
        let mut need = vec!["git", "tmux", "cat", "mktemp", "setpriv", "env"];
        if env.sudo {
            need.push("sudo");
        }
        let script = format!(
            "for p in {}; do command -v \"$p\" >/dev/null 2>&1 || echo \"$p\"; done",
            need.join(" ")
        );
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint: Some(vec!["/bin/sh".into(), "-c".into(), script]),
            cmd: Some(vec![]),
            user: Some("0:0".into()),
            labels: Some(HashMap::from([(LABEL.to_owned(), "check".to_owned())])),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let made = self
            .docker
            .create_container(None, body)
            .await
            .map_err(|e| format!("cannot make a container of {image}: {e}"))?;
        let result = async {
            self.docker
                .start_container(&made.id, None)
                .await
                .map_err(|e| format!("{image} has no usable /bin/sh ({e})"))?;
            let mut wait = self.docker.wait_container(&made.id, None);
            let mut code = 0;
            while let Some(w) = wait.next().await {
                match w {
                    Ok(r) => code = r.status_code,
                    Err(DockerError::DockerContainerWaitError { code: c, .. }) => code = c,
                    Err(e) => return Err(format!("waiting for the check of {image}: {e}")),
                }
            }
            let mut logs = self.docker.logs(
                &made.id,
                Some(LogsOptionsBuilder::default().stdout(true).stderr(true).build()),
            );
            let (mut missing, mut errors) = (String::new(), String::new());
            while let Some(l) = logs.next().await {
                match l {
                    Ok(bollard::container::LogOutput::StdOut { message }) => {
                        missing.push_str(&String::from_utf8_lossy(&message))
                    }
                    Ok(other) => errors.push_str(&other.to_string()),
                    Err(e) => return Err(format!("reading the check of {image}: {e}")),
                }
            }
            let missing: Vec<&str> = missing.split_whitespace().collect();
            if code != 0 {
                Err(format!(
                    "{image} cannot run /bin/sh (status {code}: {})",
                    errors.trim()
                ))
            } else if !missing.is_empty() {
                Err(format!(
                    "image {image} lacks what hangar needs: {} (hangar needs a shell, git, tmux, coreutils and setpriv from util-linux{}); add them to the image",
                    missing.join(", "),
                    if env.sudo { ", and sudo for sudo: true" } else { "" }
                ))
            } else {
                Ok(())
            }
        }
        .await;
        let _ = self
            .docker
            .remove_container(
                &made.id,
                Some(
                    RemoveContainerOptionsBuilder::default()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await;
        result
    }

    /// Makes, starts and sets up the container; on error the caller removes what was made.
    async fn build(
        &self,
        req: &CreateRequest,
        host_dir: &Path,
        agent: Option<&AgentUser>,
        name: &str,
    ) -> Result<String, SandboxError> {
        let env = &req.env;
        let image = env
            .image
            .clone()
            .ok_or_else(|| SandboxError::Invalid("image: required for provider docker".into()))?;
        let owner = agent.map(|a| (a.uid, a.gid));
        let ctl = host_dir.join("ctl");
        std::fs::create_dir(&ctl).map_err(|e| failed(ctl.display(), e))?;
        set_mode(&ctl, 0o700)?;
        // Streamed: nothing of this machine is bound; the workspace is sent in after set-up.
        let binds = if self.mirror == DockerMirror::Stream {
            None
        } else {
            let (repo, skip) = repo_and_skip(req)?;
            let workspace = host_dir.join("workspace");
            {
                let workspace = workspace.clone();
                tokio::task::spawn_blocking(move || {
                    copy::copy_tree(&repo, &workspace, owner, skip.as_deref())
                })
                .await
                .map_err(|e| failed("copying the repo", e))?
                .map_err(|e| failed("cannot copy the repo into the sandbox", e))?;
            }
            let mut binds = vec![
                format!("{}:{WORKSPACE}", workspace.display()),
                format!("{}:{CTL_INSIDE}", ctl.display()),
            ];
            for p in &self.ro_binds {
                binds.push(format!("{0}:{0}:ro", p.display()));
            }
            Some(binds)
        };
        let network_mode = if env.host_network {
            "host"
        } else if env.egress == Egress::Open {
            "default"
        } else {
            "none"
        };
        let sysctls = matches!(env.egress, Egress::Allowlist(_)).then(|| {
            HashMap::from([(
                "net.ipv4.ip_unprivileged_port_start".to_owned(),
                "1024".to_owned(),
            )])
        });
        let r = &env.resources;
        let host_config = HostConfig {
            binds,
            network_mode: Some(network_mode.into()),
            init: Some(true),
            nano_cpus: r.cpu.map(|c| (c * 1e9) as i64),
            memory: r.memory.map(|m| m as i64),
            memory_swap: r.memory.map(|m| m as i64),
            pids_limit: r.pids.map(i64::from),
            security_opt: (!env.sudo).then(|| vec!["no-new-privileges".to_owned()]),
            sysctls,
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            entrypoint: Some(vec!["sleep".into(), "infinity".into()]),
            cmd: Some(vec![]),
            user: Some("0:0".into()),
            working_dir: Some(WORKSPACE.into()),
            env: Some(vec![
                format!("PATH={}", layout::PATH),
                "LANG=C.UTF-8".into(),
            ]),
            labels: Some(HashMap::from([(LABEL.to_owned(), req.id.clone())])),
            host_config: Some(host_config),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        let made = match self
            .docker
            .create_container(Some(options.clone()), body.clone())
            .await
        {
            // The image is not here (nobody checked first, or it was removed since): pulled,
            // then the container made again.
            Err(e) if not_found(&e) => {
                self.ensure_image(env, None, &mut |_| {}).await?;
                self.docker.create_container(Some(options), body).await
            }
            other => other,
        }
        .map_err(|e| {
            failed(
                format!("cannot make the container of sandbox {}", req.id),
                e,
            )
        })?;
        self.docker
            .start_container(&made.id, None)
            .await
            .map_err(|e| {
                failed(
                    format!("cannot start the container of sandbox {}", req.id),
                    e,
                )
            })?;
        Ok(made.id)
    }

    /// The agent's user, its home, hangar's folders: made inside as root.
    async fn set_up(&self, sb: &Sandbox) -> Result<(), SandboxError> {
        const SCRIPT: &str = r#"set -e
uid=$1 sudo=$2 streamed=$3
if [ -n "$uid" ]; then
  grep -q "^agent:" /etc/passwd || echo "agent:x:$uid:$uid:hangar agent:/home/agent:/bin/sh" >> /etc/passwd
  grep -q "^agent:" /etc/group || echo "agent:x:$uid:" >> /etc/group
fi
mkdir -p /home/agent /var/lib/hangar /run/hangar-tmux
if [ -n "$uid" ]; then chown "$uid:$uid" /home/agent; fi
chmod 700 /home/agent /run/hangar-tmux
chown 0:0 /var/lib/hangar
chmod 755 /var/lib/hangar
if [ "$streamed" = yes ]; then
  mkdir -p /workspace /run/hangar
  chmod 700 /run/hangar
  chown 0:0 /run/hangar
  if [ -n "$uid" ]; then chown "$uid:$uid" /workspace; fi
fi
if [ "$sudo" = yes ]; then
  mkdir -p /etc/sudoers.d
  echo "agent ALL=(ALL) NOPASSWD:ALL" > /etc/sudoers.d/hangar-agent
  chmod 440 /etc/sudoers.d/hangar-agent
fi
"#;
        let uid = sb
            .agent
            .as_ref()
            .map(|a| a.uid.to_string())
            .unwrap_or_default();
        let sudo = if sb.env.sudo && sb.agent.is_some() {
            "yes"
        } else {
            ""
        };
        let streamed = if sb.mirrored() { "yes" } else { "" };
        let argv = ["sh", "-c", SCRIPT, "sh", &uid, sudo, streamed]
            .map(str::to_owned)
            .to_vec();
        let env = vec![format!("PATH={}", layout::PATH)];
        let out = self
            .run(sb, "0:0".into(), env, "/".into(), argv, None)
            .await?;
        if !out.success() {
            return Err(SandboxError::Failed(format!(
                "setting up sandbox {}: {}",
                sb.id,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// The repository sent in as a tar and unpacked into `/workspace` by the agent (so its files
    /// are the agent's), for a sandbox that sees no folder of this machine.
    async fn send_workspace(&self, sb: &Sandbox, req: &CreateRequest) -> Result<(), SandboxError> {
        let (repo, skip) = repo_and_skip(req)?;
        let tar = tokio::task::spawn_blocking(move || copy::tar_tree(&repo, skip.as_deref()))
            .await
            .map_err(|e| failed("packing the repo", e))?
            .map_err(|e| failed("cannot pack the repo for the sandbox", e))?;
        let argv = ["tar", "-x", "--no-same-owner", "-C", WORKSPACE, "-f", "-"]
            .map(str::to_owned)
            .to_vec();
        let req = ExecRequest {
            argv,
            cwd: Some(PathBuf::from("/")),
            stdin: Some(tar),
            ..ExecRequest::default()
        };
        let out = self.exec(sb, Who::Agent, &req).await?;
        if !out.success() {
            return Err(SandboxError::Failed(format!(
                "sending the repo into sandbox {}: {}",
                sb.id,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Takes back a create that failed half-way: the container (by id or name), the folder, the
    /// agent's uid.
    async fn undo(&self, container: &str, req: &CreateRequest, agent: Option<&AgentUser>) {
        let _ = self.remove_container(container).await;
        let _ = copy::remove_tree(&layout::host_dir(&req.home, &req.id));
        if let Some(a) = agent {
            uids::release(&req.home, &req.id, a.uid);
        }
    }

    async fn remove_container(&self, id: &str) -> Result<(), SandboxError> {
        match self
            .docker
            .remove_container(
                id,
                Some(
                    RemoveContainerOptionsBuilder::default()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(failed(format!("cannot remove container {id}"), e)),
        }
    }
}

/// The repository of `req`, and hangar's home when it lies inside it (never copied in).
fn repo_and_skip(req: &CreateRequest) -> Result<(PathBuf, Option<PathBuf>), SandboxError> {
    let repo = std::fs::canonicalize(&req.repo)
        .map_err(|e| SandboxError::Invalid(format!("repo {}: {e}", req.repo.display())))?;
    let skip = std::fs::canonicalize(&req.home)
        .ok()
        .filter(|h| h.starts_with(&repo));
    Ok((repo, skip))
}

/// Aborts the task that carries an exec stream's output when the stream is dropped.
struct Pump(tokio::task::JoinHandle<()>);

impl Drop for Pump {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn set_mode(p: &Path, mode: u32) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| failed(p.display(), e))
}

impl Provider for DockerProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Docker
    }

    fn capabilities(&self, env: &EnvSpec) -> Capabilities {
        Capabilities {
            provider: ProviderKind::Docker,
            uid_split: env.uid_split,
            uid_split_off: (!env.uid_split)
                .then(|| "the environment sets uid_split: false".to_owned()),
            sudo: env.sudo,
            network_modes: if egress::can_make_netns() {
                vec![
                    NetworkMode::None,
                    NetworkMode::Host,
                    NetworkMode::Open,
                    NetworkMode::Allowlist,
                ]
            } else {
                vec![NetworkMode::None, NetworkMode::Host, NetworkMode::Open]
            },
            resource_limits: true,
        }
    }

    async fn check(&self, env: &EnvSpec) -> Result<(), SandboxError> {
        if env.provider != ProviderKind::Docker {
            return Err(SandboxError::Unsupported(format!(
                "environment {} is for provider {}, not docker",
                env.name, env.provider
            )));
        }
        let image = env
            .image
            .as_deref()
            .ok_or_else(|| SandboxError::Invalid("image: required for provider docker".into()))?;
        if matches!(env.egress, Egress::Allowlist(_))
            && let Some(why) = egress::refusal(ProviderKind::Docker)
        {
            return Err(SandboxError::Unsupported(why));
        }
        self.docker.ping().await.map_err(|e| {
            SandboxError::Unavailable(format!(
                "dockerd does not answer ({e}); start it (scripts/start-docker)"
            ))
        })?;
        // Pulled when missing (without a registry login: a caller that has the environment's
        // calls `ensure_image` with it first).
        self.ensure_image(env, None, &mut |_| {}).await?;
        let info = self
            .docker
            .inspect_image(image)
            .await
            .map_err(|e| failed(format!("docker, image {image}"), e))?;
        let key = format!("{}/{}", info.id.unwrap_or_default(), env.sudo);
        let known = self.checked.lock().ok().and_then(|m| m.get(&key).cloned());
        let result = match known {
            Some(r) => r,
            None => {
                let r = self.probe_image(env, image).await;
                if let Ok(mut m) = self.checked.lock() {
                    m.insert(key, r.clone());
                }
                r
            }
        };
        result.map_err(SandboxError::Unavailable)
    }

    async fn create(&self, req: &CreateRequest) -> Result<Sandbox, SandboxError> {
        if req.env.provider != ProviderKind::Docker {
            return Err(SandboxError::Unsupported(format!(
                "environment {} is for provider {}, not docker",
                req.env.name, req.env.provider
            )));
        }
        layout::check_id(&req.id)?;
        if matches!(req.env.egress, Egress::Allowlist(_))
            && let Some(why) = egress::refusal(ProviderKind::Docker)
        {
            return Err(SandboxError::Unsupported(why));
        }
        let capabilities = self.capabilities(&req.env);
        let (host_dir, agent) = uids::new_host_dir(req, capabilities.uid_split)?;
        let name = format!("hangar-{}", req.id);
        let built = match set_mode(&host_dir, 0o700) {
            Ok(()) => self.build(req, &host_dir, agent.as_ref(), &name).await,
            Err(e) => Err(e),
        };
        let cid = match built {
            Ok(cid) => cid,
            Err(e) => {
                // A container made before the failure is found by its name.
                self.undo(&name, req, agent.as_ref()).await;
                return Err(e);
            }
        };
        let streamed = self.mirror == DockerMirror::Stream;
        let mut handle = serde_json::json!({ "container": cid, "name": name });
        if streamed {
            handle["mirrored"] = true.into();
        }
        let sb = Sandbox {
            id: req.id.clone(),
            env: req.env.clone(),
            host_dir: host_dir.clone(),
            workspace: PathBuf::from(WORKSPACE),
            host_workspace: (!streamed).then(|| host_dir.join("workspace")),
            ctl_inside: PathBuf::from(CTL_INSIDE),
            agent: agent.clone(),
            handle,
            capabilities,
        };
        let set_up = async {
            self.set_up(&sb).await?;
            if streamed {
                self.send_workspace(&sb, req).await?;
            }
            Ok::<(), SandboxError>(())
        };
        if let Err(e) = set_up.await {
            self.undo(&cid, req, agent.as_ref()).await;
            return Err(e);
        }
        if let Err(e) = self.egress_up(&sb).await {
            self.egress.stop(&sb.id);
            self.undo(&cid, req, agent.as_ref()).await;
            return Err(e);
        }
        Ok(sb)
    }

    async fn exec(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> Result<Output, SandboxError> {
        let cwd = layout::checked_cwd(req)?;
        self.egress_up(sb).await?;
        self.run(
            sb,
            Self::user(sb, who),
            Self::env_strings(sb, who, req),
            cwd,
            req.argv.clone(),
            req.stdin.clone(),
        )
        .await
    }

    /// An attached exec left open: its stdin, and its stdout carried by a task of its own (the
    /// Engine API multiplexes the two; stderr is not asked for).
    async fn exec_stream(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> Result<ExecStream, SandboxError> {
        let cwd = layout::checked_cwd(req)?;
        let id = container(sb)?;
        self.egress_up(sb).await?;
        let exec = self
            .docker
            .create_exec(
                id,
                CreateExecOptions {
                    attach_stdin: Some(true),
                    attach_stdout: Some(true),
                    attach_stderr: Some(false),
                    env: Some(Self::env_strings(sb, who, req)),
                    cmd: Some(req.argv.clone()),
                    user: Some(Self::user(sb, who)),
                    working_dir: Some(cwd),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| self.gone_or(sb, e))?;
        let started = self
            .docker
            .start_exec(&exec.id, Some(StartExecOptions::default()))
            .await
            .map_err(|e| self.gone_or(sb, e))?;
        let StartExecResults::Attached { mut output, input } = started else {
            return Err(SandboxError::Failed(
                "docker started the exec detached".into(),
            ));
        };
        let (mut tx, rx) = tokio::io::duplex(256 << 10);
        let pump = tokio::spawn(async move {
            while let Some(Ok(item)) = output.next().await {
                if let bollard::container::LogOutput::StdOut { message }
                | bollard::container::LogOutput::Console { message } = item
                    && tx.write_all(&message).await.is_err()
                {
                    break;
                }
            }
        });
        Ok(ExecStream {
            stdin: input,
            stdout: Box::pin(rx),
            keep: Box::new(Pump(pump)),
        })
    }

    async fn start_tmux(
        &self,
        sb: &Sandbox,
        session: &str,
        who: Who,
        req: &ExecRequest,
    ) -> Result<(), SandboxError> {
        layout::check_session(session)?;
        let cwd = layout::checked_cwd(req)?;
        self.egress_up(sb).await?;
        let mut drop_to_agent = Vec::new();
        if let (Who::Agent, Some(a)) = (who, &sb.agent) {
            drop_to_agent.extend([
                "setpriv".to_owned(),
                format!("--reuid={}", a.uid),
                format!("--regid={}", a.gid),
                "--clear-groups".to_owned(),
                "--".to_owned(),
            ]);
        }
        let argv = layout::tmux_new_session_argv(
            TMUX_SOCKET,
            session,
            &cwd,
            Self::env_strings(sb, who, req),
            drop_to_agent,
            &req.argv,
        );
        let env = vec![format!("PATH={}", layout::PATH), "LANG=C.UTF-8".into()];
        let out = self
            .run(sb, "0:0".into(), env, "/".into(), argv, None)
            .await?;
        layout::tmux_started(sb, session, &out)
    }

    async fn tmux_alive(&self, sb: &Sandbox, session: &str) -> Result<bool, SandboxError> {
        let argv = layout::tmux_has_session_argv(TMUX_SOCKET, session)?;
        let env = vec![format!("PATH={}", layout::PATH)];
        let out = self
            .run(sb, "0:0".into(), env, "/".into(), argv, None)
            .await?;
        // What a control plane that restarted asks first about a live turn: its proxy too. Only
        // for a live session, and never in place of the answer (the next exec says why the proxy
        // is not up).
        if out.success() {
            let _ = self.egress_up(sb).await;
        }
        Ok(out.success())
    }

    fn attach_argv(&self, sb: &Sandbox, session: &str) -> Vec<String> {
        let id = container(sb).unwrap_or(&sb.id).to_owned();
        [
            "docker",
            "exec",
            "-it",
            "-u",
            "0:0",
            &id,
            "tmux",
            "-S",
            TMUX_SOCKET,
            "attach-session",
            "-t",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain([format!("={session}")])
        .collect()
    }

    async fn destroy(&self, sb: &Sandbox, keep_logs: bool) -> Result<(), SandboxError> {
        self.egress.stop(&sb.id);
        if let Ok(id) = container(sb) {
            self.remove_container(id).await?;
        }
        copy::remove_host_dir(&sb.host_dir, keep_logs).await?;
        if let (Some(a), Some(home)) = (&sb.agent, sb.host_dir.parent().and_then(Path::parent)) {
            uids::release(home, &sb.id, a.uid);
        }
        Ok(())
    }
}
