//! The kubernetes provider: a pod per sandbox, through the API server (`kube`; no kubectl but for
//! a person's `sb attach`).
//!
//! GKE semantics: a pod's containers run as one uid, so there is no uid split: the agent and
//! hangar's programs are the same user (the image's; root in most), and `capabilities` says so.
//! A sandbox's pod (`hangar-<id>`, labelled `dev.hangar.sandbox=<id>`) runs the environment's
//! image with:
//! - a long-lived shell as pid 1 that ends on SIGTERM (so deletion is quick);
//! - `resources` as the container's limits (and requests): cpu and memory. Kubernetes limits pids
//!   per node (the kubelet's `podPidsLimit`), not per pod, so `resources.pids` is refused;
//! - no service account token, no service links, `allowPrivilegeEscalation: false` unless the
//!   environment gives `sudo`;
//! - `egress: none` as a NetworkPolicy (`hangar-<id>`) that selects the pod and allows no egress
//!   and no ingress, made before the pod. It holds only where the cluster enforces NetworkPolicy
//!   (GKE with Dataplane V2 or network policy enforcement on); an allowlist of host names cannot
//!   be said in a NetworkPolicy and is refused.
//!
//! The workspace is the repository as a tar sent to `tar -x` over exec (as `kubectl cp` does);
//! commands are API execs over the websocket subresource (`v5.channel.k8s.io`: stdin's end is
//! signalled), started under `env -i` with hangar's minimal environment; copy in and read out
//! run inside ([`hangar_sandbox::inside`]). tmux is one server in the pod, its socket in a
//! root-only folder; attaching is `kubectl exec -it POD -- tmux attach`. Destroy deletes the pod
//! and its policy and waits until the API server no longer has the pod.
//!
//! The control folder (`<host_dir>/ctl`) is not seen inside: a pod cannot bind a folder of this
//! machine, so the control plane mirrors each run's (`hangar-control`'s `runs/remote/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hangar_sandbox::layout::{self, CTL_INSIDE, WORKSPACE};
use hangar_sandbox::{
    Capabilities, CreateRequest, Egress, EnvSpec, ExecRequest, ExecStream, NetworkMode, Output,
    Provider, ProviderKind, Sandbox, SandboxError, Who, copy,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements, SecurityContext};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{AttachParams, DeleteParams, PostParams};
use kube::{Api, Client, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{failed, shell_wrap};

/// The label every object of a sandbox carries (its value: the sandbox id).
pub const LABEL: &str = "dev.hangar.sandbox";
/// The container's name in the pod.
pub const CONTAINER: &str = "sandbox";
/// The root-owned tmux server's socket inside (its folder is root's, 0700).
use crate::TMUX_SOCKET;

/// The kubernetes provider.
#[derive(Clone)]
pub struct KubernetesProvider {
    client: Client,
    namespace: String,
    /// The kubeconfig file the attach command names (`KUBECONFIG` when it is one file).
    kubeconfig: Option<PathBuf>,
    /// How long a pod may take to run (image pull included).
    start_timeout: Duration,
}

impl std::fmt::Debug for KubernetesProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesProvider")
            .field("namespace", &self.namespace)
            .field("kubeconfig", &self.kubeconfig)
            .finish()
    }
}

fn kube_failed(what: impl std::fmt::Display, e: kube::Error) -> SandboxError {
    SandboxError::Failed(format!("kubernetes, {what}: {e}"))
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// No such pod: an API answer, or a websocket upgrade refused with 404.
fn is_gone(e: &kube::Error) -> bool {
    is_status(e, 404)
        || matches!(
            e,
            kube::Error::UpgradeConnection(kube::client::UpgradeConnectionError::ProtocolSwitch(s))
                if s.as_u16() == 404
        )
}

/// Pod names are DNS labels: lower case letters, digits and `-`.
fn object_name(id: &str) -> String {
    let mut s: String = id
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    s.truncate(56);
    let s = s.trim_end_matches('-');
    format!("hangar-{s}")
}

fn handle_str<'a>(sb: &'a Sandbox, key: &str) -> Result<&'a str, SandboxError> {
    sb.handle.get(key).and_then(|v| v.as_str()).ok_or_else(|| {
        SandboxError::Failed(format!("sandbox {} has no {key} in its handle", sb.id))
    })
}

impl KubernetesProvider {
    /// The provider for the cluster `KUBECONFIG` (or `~/.kube/config`, or the pod this runs in)
    /// names, in `HANGAR_K8S_NAMESPACE` or the kubeconfig's namespace.
    pub async fn from_env() -> Result<KubernetesProvider, SandboxError> {
        let config = Config::infer().await.map_err(|e| {
            SandboxError::Unavailable(format!(
                "no Kubernetes cluster is configured ({e}); set KUBECONFIG to a kubeconfig file for the cluster (and HANGAR_K8S_NAMESPACE for the namespace), or run hangar in a pod"
            ))
        })?;
        let kubeconfig = std::env::var_os("KUBECONFIG")
            .map(PathBuf::from)
            .filter(|p| !p.as_os_str().is_empty() && !p.to_string_lossy().contains(':'));
        let namespace = hangar_protocol::env::var(hangar_protocol::env::HANGAR_K8S_NAMESPACE)
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| config.default_namespace.clone());
        Self::with_config(config, namespace, kubeconfig)
    }

    /// The provider for the cluster a kubeconfig file names (its current context).
    pub async fn from_kubeconfig(
        path: &Path,
        namespace: Option<String>,
    ) -> Result<KubernetesProvider, SandboxError> {
        let unavailable = |e: &dyn std::fmt::Display| {
            SandboxError::Unavailable(format!("kubeconfig {}: {e}", path.display()))
        };
        let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| unavailable(&e))?;
        let config =
            Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| unavailable(&e))?;
        let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
        Self::with_config(config, namespace, Some(path.to_owned()))
    }

    /// The provider for a cluster described by `config`.
    pub fn with_config(
        config: Config,
        namespace: String,
        kubeconfig: Option<PathBuf>,
    ) -> Result<KubernetesProvider, SandboxError> {
        let client = Client::try_from(config).map_err(|e| {
            SandboxError::Unavailable(format!("cannot make a Kubernetes client: {e}"))
        })?;
        let start_timeout =
            hangar_protocol::env::var(hangar_protocol::env::HANGAR_K8S_START_TIMEOUT_SECS)
                .and_then(|s| s.parse().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(180));
        Ok(KubernetesProvider {
            client,
            namespace,
            kubeconfig,
            start_timeout,
        })
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn policies(&self, ns: &str) -> Api<NetworkPolicy> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Runs `argv` in the pod to its end.
    async fn run(
        &self,
        sb: &Sandbox,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, SandboxError> {
        let ns = handle_str(sb, "namespace")?;
        let pod = handle_str(sb, "pod")?;
        self.run_in(ns, pod, &sb.id, argv, stdin).await
    }

    async fn run_in(
        &self,
        ns: &str,
        pod: &str,
        id: &str,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, SandboxError> {
        let ap = AttachParams::default()
            .container(CONTAINER)
            .stdin(stdin.is_some())
            .stdout(true)
            .stderr(true);
        let mut proc = self.pods(ns).exec(pod, argv, &ap).await.map_err(|e| {
            if is_gone(&e) {
                SandboxError::Gone(id.to_owned())
            } else {
                kube_failed(format!("exec in pod {pod}"), e)
            }
        })?;
        let status = proc.take_status();
        let writer = proc.stdin().map(|mut w| {
            tokio::spawn(async move {
                if let Some(bytes) = stdin {
                    // The command may end without reading it all: not an error of ours.
                    let _ = w.write_all(&bytes).await;
                }
                // Dropping the writer ends stdin (v5's close signal).
                let _ = w.shutdown().await;
            })
        });
        let read = |r: Option<tokio::io::ReadHalf<tokio::io::SimplexStream>>| async move {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf).await;
            }
            buf
        };
        let (stdout, stderr) = tokio::join!(read(proc.stdout()), read(proc.stderr()));
        if let Some(w) = writer {
            let _ = w.await;
        }
        let status = match status {
            Some(s) => s.await,
            None => None,
        };
        let _ = proc.join().await;
        let status = status.ok_or_else(|| {
            SandboxError::Failed(format!(
                "sandbox {id}: the command's exit status never came (is pod {pod} still there?)"
            ))
        })?;
        Ok(Output {
            status: exit_code(&status).map_err(|m| {
                SandboxError::Failed(format!("sandbox {id}: exec in pod {pod}: {m}"))
            })?,
            stdout,
            stderr,
        })
    }

    async fn wait_running(&self, ns: &str, pod: &str) -> Result<(), SandboxError> {
        let deadline = Instant::now() + self.start_timeout;
        loop {
            let p = self
                .pods(ns)
                .get(pod)
                .await
                .map_err(|e| kube_failed(format!("pod {pod}"), e))?;
            let status = p.status.unwrap_or_default();
            match status.phase.as_deref() {
                Some("Running") => return Ok(()),
                Some(phase @ ("Failed" | "Succeeded")) => {
                    return Err(SandboxError::Failed(format!(
                        "pod {pod} ended ({phase}) before it could be used: {}",
                        status.message.unwrap_or_default()
                    )));
                }
                _ => {}
            }
            for c in status.container_statuses.unwrap_or_default() {
                if let Some(w) = c.state.and_then(|s| s.waiting)
                    && matches!(
                        w.reason.as_deref(),
                        Some("ErrImagePull" | "ImagePullBackOff" | "InvalidImageName")
                    )
                {
                    return Err(SandboxError::Unavailable(format!(
                        "pod {pod} cannot get its image ({}: {})",
                        w.reason.unwrap_or_default(),
                        w.message.unwrap_or_default()
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(SandboxError::Failed(format!(
                    "pod {pod} was not running after {} s (HANGAR_K8S_START_TIMEOUT_SECS)",
                    self.start_timeout.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Deletes the pod and its policy (absent ones are fine) and waits for the pod to be gone.
    async fn delete(&self, ns: &str, pod: &str, policy: Option<&str>) -> Result<(), SandboxError> {
        let dp = DeleteParams::default().grace_period(0);
        match self.pods(ns).delete(pod, &dp).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(kube_failed(format!("deleting pod {pod}"), e)),
        }
        if let Some(policy) = policy {
            match self
                .policies(ns)
                .delete(policy, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => {
                    return Err(kube_failed(format!("deleting network policy {policy}"), e));
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match self.pods(ns).get_opt(pod).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(Some(_)) => {
                    return Err(SandboxError::Failed(format!(
                        "pod {pod} was still there 120 s after it was deleted"
                    )));
                }
                Err(e) => return Err(kube_failed(format!("pod {pod}"), e)),
            }
        }
    }

    fn pod_spec(req: &CreateRequest, name: &str, labels: &BTreeMap<String, String>) -> Pod {
        let env = &req.env;
        let mut limits = BTreeMap::new();
        if let Some(cpu) = env.resources.cpu {
            limits.insert(
                "cpu".to_owned(),
                Quantity(format!("{}m", (cpu * 1000.0).round() as u64)),
            );
        }
        if let Some(m) = env.resources.memory {
            limits.insert("memory".to_owned(), Quantity(m.to_string()));
        }
        let resources = (!limits.is_empty()).then(|| ResourceRequirements {
            limits: Some(limits.clone()),
            requests: Some(limits),
            ..Default::default()
        });
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels.clone()),
                annotations: Some(BTreeMap::from([(
                    "dev.hangar.person".to_owned(),
                    req.person.clone(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: CONTAINER.to_owned(),
                    image: env.image.clone(),
                    command: Some(vec![
                        "/bin/sh".into(),
                        "-c".into(),
                        "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done".into(),
                    ]),
                    env: Some(vec![
                        k8s_openapi::api::core::v1::EnvVar {
                            name: "PATH".into(),
                            value: Some(layout::PATH.into()),
                            ..Default::default()
                        },
                        k8s_openapi::api::core::v1::EnvVar {
                            name: "LANG".into(),
                            value: Some("C.UTF-8".into()),
                            ..Default::default()
                        },
                    ]),
                    resources,
                    security_context: Some(SecurityContext {
                        allow_privilege_escalation: Some(env.sudo),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                restart_policy: Some("Never".into()),
                automount_service_account_token: Some(false),
                enable_service_links: Some(false),
                termination_grace_period_seconds: Some(5),
                ..Default::default()
            }),
            status: None,
        }
    }

    /// Sets the pod up as root would: hangar's folders, the agent's home. Prints the user's uid.
    async fn set_up(&self, ns: &str, pod: &str, id: &str) -> Result<u32, SandboxError> {
        const SCRIPT: &str = r#"set -e
mkdir -p /workspace /home/agent /var/lib/hangar /run/hangar /run/hangar-tmux
chmod 700 /run/hangar /run/hangar-tmux /home/agent
chmod 755 /var/lib/hangar
id -u
"#;
        let out = self
            .run_in(
                ns,
                pod,
                id,
                shell_wrap(&[], "/", &["sh".into(), "-c".into(), SCRIPT.into()]),
                None,
            )
            .await?;
        if !out.success() {
            return Err(SandboxError::Failed(format!(
                "setting up sandbox {id}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let uid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| {
                SandboxError::Failed(format!(
                    "setting up sandbox {id}: `id -u` said {:?}",
                    String::from_utf8_lossy(&out.stdout)
                ))
            })?;
        Ok(uid)
    }

    async fn build(
        &self,
        req: &CreateRequest,
        ns: &str,
        name: &str,
        policy: Option<&str>,
    ) -> Result<u32, SandboxError> {
        let labels = BTreeMap::from([(LABEL.to_owned(), req.id.clone())]);
        if let Some(policy) = policy {
            let np = NetworkPolicy {
                metadata: ObjectMeta {
                    name: Some(policy.to_owned()),
                    labels: Some(labels.clone()),
                    ..Default::default()
                },
                spec: Some(NetworkPolicySpec {
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(labels.clone()),
                        ..Default::default()
                    }),
                    policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
                    egress: Some(vec![]),
                    ingress: Some(vec![]),
                }),
            };
            self.policies(ns)
                .create(&PostParams::default(), &np)
                .await
                .map_err(|e| kube_failed(format!("creating network policy {policy}"), e))?;
        }
        let pod = Self::pod_spec(req, name, &labels);
        self.pods(ns)
            .create(&PostParams::default(), &pod)
            .await
            .map_err(|e| kube_failed(format!("creating pod {name}"), e))?;
        self.wait_running(ns, name).await?;
        let uid = self.set_up(ns, name, &req.id).await?;

        // The workspace: the repository as a tar, unpacked inside.
        let repo = std::fs::canonicalize(&req.repo)
            .map_err(|e| SandboxError::Invalid(format!("repo {}: {e}", req.repo.display())))?;
        let home = std::fs::canonicalize(&req.home).ok();
        let tar = tokio::task::spawn_blocking(move || {
            let skip = home.as_deref().filter(|h| h.starts_with(&repo));
            copy::tar_tree(&repo, skip)
        })
        .await
        .map_err(|e| failed("packing the repo", e))?
        .map_err(|e| failed("cannot pack the repo for the sandbox", e))?;
        let argv = shell_wrap(
            &[],
            "/",
            &["tar", "-x", "--no-same-owner", "-C", WORKSPACE, "-f", "-"].map(str::to_owned),
        );
        let out = self.run_in(ns, name, &req.id, argv, Some(tar)).await?;
        if !out.success() {
            return Err(SandboxError::Failed(format!(
                "cannot unpack the repo in sandbox {}: {}",
                req.id,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(uid)
    }
}

/// An exec's exit status from the Status the API server sends on channel 3.
fn exit_code(s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> Result<i32, String> {
    if s.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    if s.reason.as_deref() == Some("NonZeroExitCode")
        && let Some(code) = s
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
            .and_then(|c| c.message.as_deref())
            .and_then(|m| m.parse().ok())
    {
        return Ok(code);
    }
    Err(s.message.clone().unwrap_or_else(|| format!("{s:?}")))
}

impl crate::RunsArgv for KubernetesProvider {
    async fn run_argv(
        &self,
        sb: &Sandbox,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, SandboxError> {
        self.run(sb, argv, stdin).await
    }
}

impl Provider for KubernetesProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Kubernetes
    }

    fn capabilities(&self, env: &EnvSpec) -> Capabilities {
        Capabilities {
            provider: ProviderKind::Kubernetes,
            uid_split: false,
            uid_split_off: Some(
                "a kubernetes pod runs the agent and hangar's programs as one uid (GKE semantics)"
                    .to_owned(),
            ),
            sudo: env.sudo,
            network_modes: vec![NetworkMode::None, NetworkMode::Open],
            resource_limits: true,
        }
    }

    async fn check(&self, env: &EnvSpec) -> Result<(), SandboxError> {
        if env.provider != ProviderKind::Kubernetes {
            return Err(SandboxError::Unsupported(format!(
                "environment {} is for provider {}, not kubernetes",
                env.name, env.provider
            )));
        }
        refusals(env)?;
        self.client.apiserver_version().await.map_err(|e| {
            SandboxError::Unavailable(format!(
                "the Kubernetes API server does not answer ({e}); check KUBECONFIG"
            ))
        })?;
        Ok(())
    }

    async fn create(&self, req: &CreateRequest) -> Result<Sandbox, SandboxError> {
        if req.env.provider != ProviderKind::Kubernetes {
            return Err(SandboxError::Unsupported(format!(
                "environment {} is for provider {}, not kubernetes",
                req.env.name, req.env.provider
            )));
        }
        layout::check_id(&req.id)?;
        refusals(&req.env)?;
        let host_dir = crate::make_host_dir(req)?;
        let ns = self.namespace.clone();
        let name = object_name(&req.id);
        let policy = (req.env.egress == Egress::None).then(|| name.clone());
        let uid = match self.build(req, &ns, &name, policy.as_deref()).await {
            Ok(uid) => uid,
            Err(e) => {
                let _ = self.delete(&ns, &name, policy.as_deref()).await;
                let _ = copy::remove_tree(&host_dir);
                return Err(e);
            }
        };
        let mut capabilities = self.capabilities(&req.env);
        // The agent is the pod's user: root in the image means the agent is root.
        capabilities.sudo = capabilities.sudo || uid == 0;
        Ok(Sandbox {
            id: req.id.clone(),
            env: req.env.clone(),
            host_dir,
            workspace: PathBuf::from(WORKSPACE),
            host_workspace: None,
            ctl_inside: PathBuf::from(CTL_INSIDE),
            agent: None,
            handle: serde_json::json!({
                "namespace": ns,
                "pod": name,
                "network_policy": policy,
                "uid": uid,
            }),
            capabilities,
        })
    }

    async fn exec(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> Result<Output, SandboxError> {
        crate::exec_in(self, sb, who, req).await
    }

    /// One exec over the websocket subresource, left open: stdin and stdout are its channels.
    async fn exec_stream(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> Result<ExecStream, SandboxError> {
        let argv = crate::wrapped_argv(who, req)?;
        let ns = handle_str(sb, "namespace")?;
        let pod = handle_str(sb, "pod")?;
        let ap = AttachParams::default()
            .container(CONTAINER)
            .stdin(true)
            .stdout(true)
            .stderr(false);
        let mut proc = self.pods(ns).exec(pod, argv, &ap).await.map_err(|e| {
            if is_gone(&e) {
                SandboxError::Gone(sb.id.clone())
            } else {
                kube_failed(format!("exec in pod {pod}"), e)
            }
        })?;
        let (Some(stdin), Some(stdout)) = (proc.stdin(), proc.stdout()) else {
            return Err(SandboxError::Failed(format!(
                "exec in pod {pod}: the API server gave no stdin or stdout"
            )));
        };
        Ok(ExecStream {
            stdin: Box::pin(stdin),
            stdout: Box::pin(stdout),
            keep: Box::new(std::sync::Mutex::new(proc)),
        })
    }

    async fn start_tmux(
        &self,
        sb: &Sandbox,
        session: &str,
        who: Who,
        req: &ExecRequest,
    ) -> Result<(), SandboxError> {
        crate::start_tmux_in(self, sb, session, who, req).await
    }

    async fn tmux_alive(&self, sb: &Sandbox, session: &str) -> Result<bool, SandboxError> {
        crate::tmux_alive_in(self, sb, session).await
    }

    fn attach_argv(&self, sb: &Sandbox, session: &str) -> Vec<String> {
        let ns = handle_str(sb, "namespace")
            .unwrap_or(&self.namespace)
            .to_owned();
        let pod = handle_str(sb, "pod")
            .map(str::to_owned)
            .unwrap_or_else(|_| object_name(&sb.id));
        let mut argv = vec!["kubectl".to_owned()];
        if let Some(k) = &self.kubeconfig {
            argv.push("--kubeconfig".into());
            argv.push(k.to_string_lossy().into_owned());
        }
        argv.extend(
            [
                "--namespace",
                &ns,
                "exec",
                "-it",
                &pod,
                "--container",
                CONTAINER,
                "--",
                "tmux",
                "-S",
                TMUX_SOCKET,
                "attach-session",
                "-t",
            ]
            .map(str::to_owned),
        );
        argv.push(format!("={session}"));
        argv
    }

    async fn destroy(&self, sb: &Sandbox, keep_logs: bool) -> Result<(), SandboxError> {
        let ns = handle_str(sb, "namespace")
            .unwrap_or(&self.namespace)
            .to_owned();
        let pod = handle_str(sb, "pod")
            .map(str::to_owned)
            .unwrap_or_else(|_| object_name(&sb.id));
        let policy = sb.handle.get("network_policy").and_then(|v| v.as_str());
        self.delete(&ns, &pod, policy).await?;
        copy::remove_host_dir(&sb.host_dir, keep_logs).await
    }
}

/// What the environment asks that a pod cannot give.
fn refusals(env: &EnvSpec) -> Result<(), SandboxError> {
    if env.resources.pids.is_some() {
        return Err(SandboxError::Unsupported(
            "resources.pids: Kubernetes limits pids per node (the kubelet's podPidsLimit), not per pod; remove it for provider kubernetes".into(),
        ));
    }
    if matches!(env.egress, Egress::Allowlist(_)) {
        return Err(SandboxError::Unsupported(
            "egress: a NetworkPolicy cannot allow host names, only addresses; use none or open for provider kubernetes".into(),
        ));
    }
    if env.host_network {
        return Err(SandboxError::Unsupported(
            "network: host is not offered for provider kubernetes".into(),
        ));
    }
    if env.image.is_none() {
        return Err(SandboxError::Invalid(
            "image: required for provider kubernetes".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn object_names_are_dns_labels() {
        assert_eq!(object_name("sb_01-A"), "hangar-sb-01-a");
        let long = object_name(&"x".repeat(64));
        assert!(long.len() <= 63, "{long}");
    }

    #[test]
    fn exit_codes_come_from_the_status() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};
        let ok = Status {
            status: Some("Success".into()),
            ..Default::default()
        };
        assert_eq!(exit_code(&ok), Ok(0));
        let three = Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some("3".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(exit_code(&three), Ok(3));
        let broken = Status {
            status: Some("Failure".into()),
            message: Some("container not found".into()),
            ..Default::default()
        };
        assert!(exit_code(&broken).is_err());
    }
}
