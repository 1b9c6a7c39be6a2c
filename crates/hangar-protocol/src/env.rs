//! Every environment variable hangar reads, in one place, and the allow-list of variables a
//! harness may inherit.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::OnceLock;

/// hangar's home: `runs/` with each run's control folder lives here. Default `~/.hangar`.
pub const HANGAR_HOME: &str = "HANGAR_HOME";
/// Path of the Claude Code CLI to run (default: `claude` found by the caller).
pub const HANGAR_CLAUDE_BIN: &str = "HANGAR_CLAUDE_BIN";
/// Path of the Codex CLI to run (default: `codex` on PATH).
pub const HANGAR_CODEX_BIN: &str = "HANGAR_CODEX_BIN";
/// Where clients find `hangar serve` (default `http://127.0.0.1:7700`).
pub const HANGAR_URL: &str = "HANGAR_URL";
/// The bearer token clients send to `hangar serve`.
pub const HANGAR_TOKEN: &str = "HANGAR_TOKEN";
/// The harness `hangar run` and `hangar session start` use without `--harness` (`claude` or
/// `codex`; the CLI's config file's `run.harness`).
pub const HANGAR_HARNESS: &str = "HANGAR_HARNESS";
/// The policy they ask for without `--policy` (`ask`, `auto`, `governed`; `run.policy`).
pub const HANGAR_POLICY: &str = "HANGAR_POLICY";
/// The model they ask for without `--model` (`run.model`).
pub const HANGAR_MODEL: &str = "HANGAR_MODEL";
/// A PEM file of CA certificates trusted on top of the system's, for a certificate a private CA
/// signed: the CLI's for an `https://` `HANGAR_URL`; the control plane's, the driver's and the
/// Tower hook's for an `https://` Tower (copied into a sandbox and named with the driver's
/// `--tower-ca-file`).
pub const HANGAR_CA_FILE: &str = "HANGAR_CA_FILE";
/// The control plane's database (default: SQLite in `$HANGAR_HOME/hangar.db`); `postgres://…`
/// for PostgreSQL.
pub const HANGAR_DATABASE_URL: &str = "HANGAR_DATABASE_URL";
/// The vault's master key file (default `$HANGAR_HOME/master.key`).
pub const HANGAR_MASTER_KEY_FILE: &str = "HANGAR_MASTER_KEY_FILE";
/// Path of the driver executable (default: `hangar-driver` beside the `hangar` executable).
pub const HANGAR_DRIVER_BIN: &str = "HANGAR_DRIVER_BIN";
/// The driver's limit for one tree hash in milliseconds (default 2000): a hash that takes
/// longer is recorded with `skipped: "slow"` and is the turn's last.
pub const HANGAR_TREE_SLOW_MS: &str = "HANGAR_TREE_SLOW_MS";
/// How long `hangar serve` keeps a relayed terminal (`sb attach` on e2b) whose client says
/// nothing, no input and no keepalive, in seconds (default 60): then it ends the attach and kills
/// its PTY process.
pub const HANGAR_ATTACH_IDLE_SECS: &str = "HANGAR_ATTACH_IDLE_SECS";

/// The Tower hook's own executable to install in sandboxes (default: `hangar-tower-hook` beside
/// the `hangar` executable).
pub const HANGAR_TOWER_HOOK_BIN: &str = "HANGAR_TOWER_HOOK_BIN";
/// `hangar serve`'s log filter (tracing's `EnvFilter` syntax, e.g. `info,hangar_control=debug`).
pub const HANGAR_LOG: &str = "HANGAR_LOG";
/// How hangar's log lines are written: `text` (the default; coloured on a terminal unless
/// `NO_COLOR` is set) or `json` (one JSON object per line, for a log collector).
pub const HANGAR_LOG_FORMAT: &str = "HANGAR_LOG_FORMAT";
/// `hangar serve` prunes, once a day, what runs that ended more than this many days ago left
/// (their logs, trees, kept files and events; `hangar prune`). Unset: nothing is pruned.
pub const HANGAR_RETENTION_DAYS: &str = "HANGAR_RETENTION_DAYS";
/// The harness versions this server lets run turns, besides passing the conformance suite:
/// `claude 2.1.328, codex 0.169.0` (a harness alone, `claude`, allows any of its versions).
/// Unset: every version that passed. `--unverified-harness` does not get past it.
pub const HANGAR_HARNESS_VERSIONS: &str = "HANGAR_HARNESS_VERSIONS";
/// `false` (or `0`, `no`, `off`): every turn is one-shot, the harness once in its plain mode
/// with no driver (S30). Default: live turns.
pub const HANGAR_LIVE_TURNS: &str = "HANGAR_LIVE_TURNS";
/// Among replicas on PostgreSQL, how long a claim on a run holds, in milliseconds (default 5000,
/// at least 300; `0`: no leases).
pub const HANGAR_RUN_LEASE_MS: &str = "HANGAR_RUN_LEASE_MS";

/// Tower's address, for policy `governed` and the Tower hook.
pub const HANGAR_GOVERNANCE_URL: &str = "HANGAR_GOVERNANCE_URL";
/// `required`: every turn runs with the Tower hook (sandboxes with the uid split only).
pub const HANGAR_GOVERNANCE_HOOK: &str = "HANGAR_GOVERNANCE_HOOK";
/// The vault credential holding the coding agent's key in Tower.
pub const HANGAR_GOVERNANCE_HOOK_CREDENTIAL: &str = "HANGAR_GOVERNANCE_HOOK_CREDENTIAL";
/// How a run authenticates to Tower: `key` (default, the agent's key) or `passport` (a token
/// hangar mints per sandbox).
pub const HANGAR_GOVERNANCE_HOOK_AUTH: &str = "HANGAR_GOVERNANCE_HOOK_AUTH";
/// The agent a passport must name (default `hangar`).
pub const HANGAR_GOVERNANCE_HOOK_AGENT: &str = "HANGAR_GOVERNANCE_HOOK_AGENT";
/// How long a tool call waits for Tower's answer in all, in seconds.
pub const HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS: &str = "HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS";
/// How long one call to Tower may take, in seconds.
pub const HANGAR_GOVERNANCE_HOOK_CALL_SECONDS: &str = "HANGAR_GOVERNANCE_HOOK_CALL_SECONDS";

/// The E2B API key (the e2b provider needs it).
pub const HANGAR_E2B_API_KEY: &str = "HANGAR_E2B_API_KEY";
/// The E2B API (default `https://api.e2b.dev`).
pub const HANGAR_E2B_URL: &str = "HANGAR_E2B_URL";
/// The domain of E2B sandboxes' own addresses (default `e2b.app`).
pub const HANGAR_E2B_DOMAIN: &str = "HANGAR_E2B_DOMAIN";
/// envd's address in a sandbox, `{sandbox}` and `{domain}` filled in (default
/// `https://49983-{sandbox}.{domain}`).
pub const HANGAR_E2B_ENVD_URL: &str = "HANGAR_E2B_ENVD_URL";
/// How long an E2B sandbox lives unless kept alive, in seconds (default 3600).
pub const HANGAR_E2B_TIMEOUT_SECS: &str = "HANGAR_E2B_TIMEOUT_SECS";
/// The Kubernetes namespace of sandbox pods (default: the kubeconfig's).
pub const HANGAR_K8S_NAMESPACE: &str = "HANGAR_K8S_NAMESPACE";
/// How long a sandbox pod may take to start, in seconds.
pub const HANGAR_K8S_START_TIMEOUT_SECS: &str = "HANGAR_K8S_START_TIMEOUT_SECS";
/// How a Kubernetes run's control folder is mirrored: `stream` (the default: one long-lived exec
/// per live run carries its changes both ways) or `poll` (one exec every 150 ms per live run, for
/// an API server or proxy that cuts long-lived execs).
pub const HANGAR_K8S_MIRROR: &str = "HANGAR_K8S_MIRROR";

/// How a Docker sandbox made from now on reaches hangar's folders: `bind` (dockerd runs on this
/// machine and binds the workspace and control folder), `stream` (nothing shared: the workspace
/// is sent in, each run's control folder mirrored over one long-lived exec, as for a pod; for a
/// dockerd elsewhere, or replicas that share no disk), or `auto` (the default: `stream` when
/// `DOCKER_HOST` names a daemon over the network, else `bind`).
pub const HANGAR_DOCKER_MIRROR: &str = "HANGAR_DOCKER_MIRROR";

/// The address other `hangar serve` replicas reach this one at (e.g. `http://10.0.0.7:8080`):
/// a command for a run this replica watches, sent through a replica that shares no disk with
/// it, is passed on there. Unset: the address it listens on, when that is not a wildcard
/// (`0.0.0.0`, `::`); else none, and such commands are answered 503 saying why.
pub const HANGAR_ADVERTISE_URL: &str = "HANGAR_ADVERTISE_URL";

/// Tests only: `name=IP:PORT,...`, names a sandbox's egress proxy resolves to those addresses.
pub const HANGAR_EGRESS_TEST_RESOLVE: &str = "HANGAR_EGRESS_TEST_RESOLVE";

/// `allow`: `hangar serve` may run a session in a plain folder, the driver and the agent as the
/// server's own user with no sandbox, when the request asks for it (`"no_sandbox": true`,
/// `hangar run --no-sandbox`). Unset (the default), such a request is refused and every session
/// started with a folder runs in a sandbox (the environment named, else the in-place one). Even
/// allowed, hangar's home, a folder above it and one inside it are refused.
pub const HANGAR_UNSANDBOXED_FOLDERS: &str = "HANGAR_UNSANDBOXED_FOLDERS";
/// The OpenID Connect issuer `hangar serve` signs people in with (`--oidc-issuer`); its
/// `.well-known/openid-configuration` is read at start.
pub const HANGAR_OIDC_ISSUER: &str = "HANGAR_OIDC_ISSUER";
/// hangar's client id at that issuer (`--oidc-client-id`).
pub const HANGAR_OIDC_CLIENT_ID: &str = "HANGAR_OIDC_CLIENT_ID";
/// The client's secret, for a confidential client (only from the environment: a flag would show
/// it in the process list).
pub const HANGAR_OIDC_CLIENT_SECRET: &str = "HANGAR_OIDC_CLIENT_SECRET";
/// `members`: a person the issuer vouches for (verified email) whom hangar does not know is added
/// as a member at their first sign-in (`--oidc-create-members`). Unset, they are refused.
pub const HANGAR_OIDC_CREATE_MEMBERS: &str = "HANGAR_OIDC_CREATE_MEMBERS";
/// Where people reach `hangar serve` when it sits behind a proxy (`--public-url`, e.g.
/// `https://hangar.example.com`): the OpenID issuer sends the browser back to its
/// `/ui/signin/callback`. Unset, to the callback on the address the web page was loaded from.
pub const HANGAR_PUBLIC_URL: &str = "HANGAR_PUBLIC_URL";

/// `allow`: the server's own model credentials ([`HARNESS_CREDENTIAL_ENV`] in `hangar serve`'s
/// environment, e.g. `ANTHROPIC_API_KEY`) pass to every turn, as before issue 20: a single-user
/// local mode only, since every agent could then read the one key. Unset (the default), a turn
/// gets only the credentials its person and its environment keep in the vault.
pub const HANGAR_SERVER_CREDENTIALS: &str = "HANGAR_SERVER_CREDENTIALS";

/// The value of [`HANGAR_SERVER_CREDENTIALS`] that passes the server's credentials to turns.
pub const SERVER_CREDENTIALS_ALLOW: &str = "allow";

/// The harness variables that carry a credential or choose how the harness signs in (Claude
/// Code's API key, OAuth token, Bedrock and Vertex switches; Codex's and Azure OpenAI's keys;
/// the cloud providers' own). A turn gets them from its person's and its environment's secrets
/// in the vault (the driver's `--secrets-file`), never from the control plane's environment
/// unless [`HANGAR_SERVER_CREDENTIALS`]` = allow`.
pub const HARNESS_CREDENTIAL_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_SKIP_BEDROCK_AUTH",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_REGION",
    "AWS_PROFILE",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_SKIP_VERTEX_AUTH",
    "ANTHROPIC_VERTEX_BASE_URL",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "CLOUD_ML_REGION",
    "GOOGLE_CLOUD_PROJECT",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "AZURE_OPENAI_API_KEY",
];

/// Vault secrets that reach the harness as a file, not a variable: the secret's name, the
/// variable that names the file (`None`: a place the harness looks itself) and the file's name.
/// `CODEX_AUTH_JSON` is Codex's `auth.json` (a ChatGPT sign-in), written in the turn's
/// `CODEX_HOME`; `GOOGLE_APPLICATION_CREDENTIALS` holds a service account key's JSON, written
/// to a file the variable then names (Vertex).
pub const HARNESS_CREDENTIAL_FILES: &[(&str, Option<&str>, &str)] = &[
    ("CODEX_AUTH_JSON", None, "auth.json"),
    (
        "GOOGLE_APPLICATION_CREDENTIALS",
        Some("GOOGLE_APPLICATION_CREDENTIALS"),
        "google-credentials.json",
    ),
];

/// Whether `name` is a credential variable ([`HARNESS_CREDENTIAL_ENV`] or the variable of one
/// of [`HARNESS_CREDENTIAL_FILES`]).
pub fn is_credential_var(name: &str) -> bool {
    HARNESS_CREDENTIAL_ENV.contains(&name)
        || HARNESS_CREDENTIAL_FILES
            .iter()
            .any(|(_, var, _)| *var == Some(name))
}

/// The variables a harness inherits from the driver's environment besides the credential ones
/// ([`harness_env_names`] is all of them); nothing else passes. The driver then sets `HOME`
/// (the agent's home under the uid split) and the quiet-mode variables in
/// [`HARNESS_ENV_FIXED`]. No `HANGAR_*` variable is ever passed on.
pub const HARNESS_ENV_PLAIN: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "TMPDIR",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_MAX_RETRIES",
    "CODEX_HOME",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "NODE_EXTRA_CA_CERTS",
];

/// Every variable a harness may inherit: [`HARNESS_ENV_PLAIN`], then the credential variables
/// ([`HARNESS_CREDENTIAL_ENV`] and those naming a credential file).
pub fn harness_env_names() -> impl Iterator<Item = &'static str> {
    HARNESS_ENV_PLAIN
        .iter()
        .chain(HARNESS_CREDENTIAL_ENV)
        .copied()
        .chain(
            HARNESS_CREDENTIAL_FILES
                .iter()
                .filter_map(|(_, var, _)| *var),
        )
}

/// Set for every harness: keep Claude Code from calling home (telemetry, update checks).
pub const HARNESS_ENV_FIXED: &[(&str, &str)] = &[
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
];

/// Whether a variable may pass to the harness.
pub fn harness_may_inherit(name: &str) -> bool {
    HARNESS_ENV_PLAIN.contains(&name) || is_credential_var(name)
}

/// The process's environment as hangar reads it: taken once, the first time any variable is
/// read through [`var`] or [`var_os`], and kept for the life of the process. Every part of a
/// process sees the same values, and nothing reads a variable half-way through being changed.
fn settings() -> &'static HashMap<OsString, OsString> {
    SETTINGS.get_or_init(|| std::env::vars_os().collect())
}

static SETTINGS: OnceLock<HashMap<OsString, OsString>> = OnceLock::new();

/// `hangar serve`'s configuration file when `--config` is not given (TOML; its settings are laid
/// under the environment, [`layer_under_environment`]).
pub const HANGAR_CONFIG: &str = "HANGAR_CONFIG";

/// [`HANGAR_CONFIG`] as the process's environment has it. Read before the settings are taken,
/// since the file it names becomes part of them; so not through [`var`].
pub fn config_file() -> Option<OsString> {
    std::env::var_os(HANGAR_CONFIG).filter(|v| !v.is_empty())
}

/// Some variable was read before [`layer_under_environment`] was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlreadyRead;

/// Lays `values` (a configuration file's, as variable names and values) under the process's
/// environment: from now on [`var`] and [`var_os`] give the environment's value where it has a
/// non-empty one, else the file's. Must come before any variable is read, so every part of the
/// process sees one set of values; [`AlreadyRead`] otherwise.
pub fn layer_under_environment(
    values: impl IntoIterator<Item = (String, OsString)>,
) -> Result<(), AlreadyRead> {
    let mut all: HashMap<OsString, OsString> = values
        .into_iter()
        .map(|(k, v)| (OsString::from(k), v))
        .collect();
    all.extend(std::env::vars_os().filter(|(_, v)| !v.is_empty()));
    SETTINGS.set(all).map_err(|_| AlreadyRead)
}

/// A variable of the process's environment, as it was when hangar first read one: `None` when
/// unset, empty or not UTF-8 (an empty variable counts as unset everywhere in hangar).
pub fn var(name: &str) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

/// [`var`], for values that need not be UTF-8 (paths).
pub fn var_os(name: &str) -> Option<OsString> {
    settings()
        .get(OsStr::new(name))
        .filter(|v| !v.is_empty())
        .cloned()
}

/// `$HANGAR_HOME`, else `$HOME/.hangar`, else `./.hangar`.
pub fn hangar_home() -> PathBuf {
    if let Some(h) = var_os(HANGAR_HOME) {
        return PathBuf::from(h);
    }
    match var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".hangar"),
        None => PathBuf::from(".hangar"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_hangar_variable_is_allowed_through() {
        assert!(harness_env_names().all(|v| !v.starts_with("HANGAR")));
        assert!(harness_may_inherit("AZURE_OPENAI_API_KEY"));
        assert!(harness_may_inherit("GOOGLE_APPLICATION_CREDENTIALS"));
        assert!(harness_may_inherit("PATH"));
        assert!(!harness_may_inherit("HANGAR_HOME"));
        assert!(!harness_may_inherit("LD_PRELOAD"));
    }
}
