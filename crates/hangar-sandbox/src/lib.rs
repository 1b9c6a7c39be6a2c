//! Sandboxes: where a turn runs (S1, S2, S17, H1).
//!
//! An environment ([`EnvSpec`]) says what a sandbox is made from; a [`Provider`] makes and
//! works sandboxes of one kind. Every provider offers the same operations — create, exec as the
//! agent or as hangar's user, copy a file in, read a file out, start a detached process in a
//! tmux session, the command that attaches a person's terminal to it, destroy — and reports its
//! [`Capabilities`] so governance can decide what a turn may do there. `tests/conformance.rs` runs
//! one suite against every provider this machine has.
//!
//! Layout on the host: each sandbox has a folder of hangar's own, `<home>/sandboxes/<id>/`
//! (mode 0700, owned by hangar's user), holding the provider's state and `ctl/`, the parent of
//! the sandbox's runs' control folders. Inside the sandbox, `ctl/` is seen at
//! [`Sandbox::ctl_inside`] and the work tree at [`Sandbox::workspace`].

use std::future::Future;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod copy;
pub mod docker;
pub mod egress;
pub mod env;
pub mod inside;
pub mod layout;
pub mod local;
mod procs;
pub mod pull;
pub mod uids;

pub use docker::{DockerMirror, DockerProvider};
pub use env::{
    E2B_FIREWALL_CAVEAT, Egress, EgressEnforcement, EnvSpec, Governance, HookMode, ProviderKind,
    Resources,
};
pub use local::LocalProvider;
pub use pull::{REGISTRY_AUTH, RegistryAuth};

/// What went wrong, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// An environment is not valid: the message names the key and says what is allowed.
    #[error("{0}")]
    Invalid(String),
    /// The provider cannot be used here (missing program, no daemon, image lacking something);
    /// the message says what to install or change.
    #[error("{0}")]
    Unavailable(String),
    /// The provider cannot do what the environment asks.
    #[error("{0}")]
    Unsupported(String),
    /// No such sandbox (or it is gone).
    #[error("sandbox {0} is gone")]
    Gone(String),
    /// An operation failed.
    #[error("{0}")]
    Failed(String),
}

/// An operation on `what` failed with `e`: `Failed("WHAT: E")`, for every provider.
pub fn failed(what: impl std::fmt::Display, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Failed(format!("{what}: {e}"))
}

/// Who a command runs as inside the sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Who {
    /// The agent's uid (under the uid split, not hangar's).
    Agent,
    /// Hangar's user (root in the sandbox when it has the uid split): the driver, the hook.
    Hangar,
}

/// How a sandbox may reach the network (with `allowlist`, through hangar's egress proxy, see
/// [`egress`]): hangar's shared word, defined once in the protocol crate.
pub use hangar_protocol::NetworkMode;

/// What a provider can do for an environment, as governance needs to know it (T9).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub provider: ProviderKind,
    /// The agent runs as a uid of its own, the driver as hangar's user.
    pub uid_split: bool,
    /// Why there is no split, when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid_split_off: Option<String>,
    /// The agent can become root.
    pub sudo: bool,
    pub network_modes: Vec<NetworkMode>,
    /// Whether resource limits are enforced.
    pub resource_limits: bool,
}

/// A sandbox as its provider left it: what the store keeps (as JSON) to work it later.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sandbox {
    pub id: String,
    pub env: EnvSpec,
    /// hangar's folder for it on the host: `<home>/sandboxes/<id>`.
    pub host_dir: PathBuf,
    /// The work tree, as seen inside the sandbox.
    pub workspace: PathBuf,
    /// The work tree on the host, when the host can see it (local provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_workspace: Option<PathBuf>,
    /// Where `<host_dir>/ctl` is seen inside the sandbox.
    pub ctl_inside: PathBuf,
    /// The agent's uid, gid and home inside, under the uid split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentUser>,
    /// What the provider needs to find it again (container id, tmux socket, ...).
    #[serde(default)]
    pub handle: serde_json::Value,
    pub capabilities: Capabilities,
}

impl Sandbox {
    /// The parent of the sandbox's runs' control folders, on the host.
    pub fn ctl_host(&self) -> PathBuf {
        self.host_dir.join("ctl")
    }

    /// Whether the sandbox sees no folder of this machine: its runs' control folders are
    /// mirrored (kubernetes, e2b; docker made with [`docker::DockerMirror::Stream`]).
    pub fn mirrored(&self) -> bool {
        matches!(
            self.env.provider,
            ProviderKind::Kubernetes | ProviderKind::E2b
        ) || self
            .handle
            .get("mirrored")
            .and_then(serde_json::Value::as_bool)
            == Some(true)
    }

    /// A host path under [`Sandbox::ctl_host`] as the sandbox sees it.
    pub fn inside_ctl(&self, host: &Path) -> Option<PathBuf> {
        host.strip_prefix(self.ctl_host())
            .ok()
            .map(|rel| self.ctl_inside.join(rel))
    }
}

/// The agent's user inside a sandbox with the uid split.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentUser {
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// What to make.
#[derive(Clone, Debug)]
pub struct CreateRequest {
    pub id: String,
    pub env: EnvSpec,
    /// The repository (a folder on the host) the workspace is a copy or clone of.
    pub repo: PathBuf,
    pub person: String,
    /// hangar's home; the sandbox's folder is `<home>/sandboxes/<id>`.
    pub home: PathBuf,
    /// The agent's uid, claimed for this sandbox already where replicas share no home (in
    /// their database); `None`: one is claimed from the home's own pool. Used only with the uid
    /// split.
    pub agent_uid: Option<u32>,
}

/// A command to run inside.
#[derive(Clone, Debug, Default)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    /// Variables on top of the sandbox's minimal environment (PATH, HOME, LANG).
    pub env: Vec<(String, String)>,
    /// Working folder inside (default: the workspace).
    pub cwd: Option<PathBuf>,
    pub stdin: Option<Vec<u8>>,
}

impl ExecRequest {
    pub fn new<I, S>(argv: I) -> ExecRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            ..ExecRequest::default()
        }
    }
}

/// A finished command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// Its exit status (128 + signal when killed).
    pub status: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == 0
    }
}

/// A command left running with its stdin and stdout open ([`Provider::exec_stream`]): a remote
/// run's mirror stream. Dropping it closes stdin (the command's cue to end) and lets the exec go.
pub struct ExecStream {
    pub stdin: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    pub stdout: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    /// What keeps the exec open on the provider's side (its connection, its task).
    pub keep: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for ExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExecStream")
    }
}

/// One kind of sandbox. Every provider passes `tests/conformance.rs`.
pub trait Provider: Send + Sync {
    fn kind(&self) -> ProviderKind;

    /// What this provider, on this machine, can do for `env`.
    fn capabilities(&self, env: &EnvSpec) -> Capabilities;

    /// Whether sandboxes of `env` can be made here (programs installed, daemon up, the image has
    /// what hangar needs); the error says what is missing.
    fn check(&self, env: &EnvSpec) -> impl Future<Output = Result<(), SandboxError>> + Send;

    /// Makes the sandbox: its folder, the workspace (a copy of the repo), the agent's user.
    fn create(
        &self,
        req: &CreateRequest,
    ) -> impl Future<Output = Result<Sandbox, SandboxError>> + Send;

    /// Runs a command to its end inside the sandbox.
    fn exec(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> impl Future<Output = Result<Output, SandboxError>> + Send;

    /// Copies a host file to `dest` inside, owned by `who`, with `mode`: written inside, by the
    /// sandbox's own commands ([`inside::copy_in`]), so a link the agent planted resolves there.
    fn copy_in(
        &self,
        sb: &Sandbox,
        src: &Path,
        dest: &Path,
        who: Who,
        mode: u32,
    ) -> impl Future<Output = Result<(), SandboxError>> + Send
    where
        Self: Sized,
    {
        inside::copy_in(self, sb, src, dest, who, mode)
    }

    /// A file's bytes, read inside as hangar's user ([`inside::read`]).
    fn read_file(
        &self,
        sb: &Sandbox,
        path: &Path,
    ) -> impl Future<Output = Result<Vec<u8>, SandboxError>> + Send
    where
        Self: Sized,
    {
        inside::read(self, sb, path)
    }

    /// Starts `req` and leaves it running with its stdin and stdout open, for providers that can
    /// keep such an exec (a remote sandbox's mirror stream); the others say `Unsupported`. The
    /// command's stderr is not kept.
    fn exec_stream(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> impl Future<Output = Result<ExecStream, SandboxError>> + Send {
        let _ = (sb, who, req);
        let kind = self.kind();
        async move {
            Err(SandboxError::Unsupported(format!(
                "{kind} sandboxes keep no exec stream"
            )))
        }
    }

    /// Starts `req` detached in a new tmux session named `session` (as `who`); returns at once.
    fn start_tmux(
        &self,
        sb: &Sandbox,
        session: &str,
        who: Who,
        req: &ExecRequest,
    ) -> impl Future<Output = Result<(), SandboxError>> + Send;

    /// Whether the tmux session is still there.
    fn tmux_alive(
        &self,
        sb: &Sandbox,
        session: &str,
    ) -> impl Future<Output = Result<bool, SandboxError>> + Send;

    /// The host command that puts a person's terminal into the tmux session.
    fn attach_argv(&self, sb: &Sandbox, session: &str) -> Vec<String>;

    /// Removes everything: processes, container, mounts, the sandbox's folder (keeping
    /// `<host_dir>/ctl` when `keep_logs`).
    fn destroy(
        &self,
        sb: &Sandbox,
        keep_logs: bool,
    ) -> impl Future<Output = Result<(), SandboxError>> + Send;
}
