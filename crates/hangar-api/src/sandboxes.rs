//! Environments, sandboxes, commands run in them, and attached terminals.

use std::borrow::Cow;
use std::path::PathBuf;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::vocab::{ExecAs, NetworkMode, Provider, SandboxState};

/// An environment as a person writes it (the YAML file's keys), passed to the control plane as
/// it is: the control plane validates it and says which key is wrong.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EnvironmentSpec(pub Value);

impl JsonSchema for EnvironmentSpec {
    fn schema_name() -> Cow<'static, str> {
        "EnvironmentSpec".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let string = serde_json::json!({"type": "string"});
        json_schema!({
            "type": "object",
            "description": "An environment as a person writes it (the YAML file's keys); unknown keys and impossible combinations are refused with a message naming the key",
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,62}$"},
                "provider": {"enum": ["local", "docker", "kubernetes", "e2b"]},
                "image": string,
                "egress": {"oneOf": [{"enum": ["none", "open"]}, {"type": "object", "properties": {"allowlist": {"type": "array", "items": string}}, "required": ["allowlist"]}]},
                "network": {"enum": ["host"]},
                "uid_split": {"type": "boolean"},
                "sudo": {"type": "boolean"},
                "governance": {"type": "object", "properties": {"policy": {"enum": ["ask", "auto", "governed"]}, "hook": {"enum": ["required", "optional", "off"]}, "rules": {"type": "object"}, "claude_settings": {"type": "object", "description": "reviewed Claude Code settings: mcpServers, model, permissions.deny/ask, includeCoAuthoredBy, alwaysThinkingEnabled, outputStyle, cleanupPeriodDays; any other key is refused"}}},
                "resources": {"type": "object", "properties": {"cpu": {"type": "number"}, "memory": {"type": ["string", "integer"]}, "pids": {"type": "integer"}}}
            },
            "required": ["name", "provider"]
        })
    }
}

/// An environment as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Environment {
    pub name: String,
    /// The validated spec, as a person would write it.
    pub spec: EnvironmentSpec,
    /// Why the stored spec does not validate any more, if it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<i64>,
}

/// `GET /v1/environments`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Environments {
    pub environments: Vec<Environment>,
}

/// One environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EnvironmentOne {
    pub environment: Environment,
}

/// An environment applied: `created` (201) or replaced (200).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EnvironmentApplied {
    pub environment: Environment,
    pub created: bool,
}

/// What a provider can do for an environment, as governance needs to know it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Capabilities {
    pub provider: Provider,
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

/// A sandbox as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Sandbox {
    pub id: String,
    pub environment: String,
    pub provider: Provider,
    pub person: String,
    pub state: SandboxState,
    /// The work tree inside the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The work tree on this machine.
    pub host_workspace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    /// What its egress allowlist does not keep, when that is weaker than hangar's proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_warning: Option<String>,
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_at: Option<i64>,
}

/// One sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxOne {
    pub sandbox: Sandbox,
}

/// `GET /v1/sandboxes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Sandboxes {
    pub sandboxes: Vec<Sandbox>,
}

/// `POST /v1/sandboxes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreateSandbox {
    pub env: String,
    pub repo: PathBuf,
    /// The person it is for (default: the token's).
    #[serde(default)]
    pub person: Option<String>,
}

/// `POST /v1/sandboxes/{id}/exec`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecRequest {
    #[schemars(length(min = 1), inner(regex(pattern = "^[^\\u0000]*$")))]
    pub argv: Vec<String>,
    #[serde(default, rename = "as")]
    pub who: ExecAs,
    /// Text for the command's stdin.
    #[serde(default)]
    pub stdin: Option<String>,
}

/// A command's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecOutput {
    /// Its exit status (128 + signal when killed).
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `POST /v1/sandboxes/{id}/attach`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AttachRequest {
    /// the run to attach to (default: the sandbox's running turn)
    #[serde(default)]
    #[schemars(regex(pattern = "^[A-Za-z0-9_-]+$"))]
    pub run: Option<String>,
    /// the terminal's columns, default 80 (1 to 1000)
    #[serde(default, deserialize_with = "crate::schema::whole_opt")]
    #[schemars(range(min = 1, max = 1000))]
    pub cols: Option<u16>,
    /// the terminal's rows, default 24 (1 to 1000)
    #[serde(default, deserialize_with = "crate::schema::whole_opt")]
    #[schemars(range(min = 1, max = 1000))]
    pub rows: Option<u16>,
    /// the terminal type (TERM), default xterm-256color: letters, digits and .+-_, at most 64
    #[serde(default)]
    #[schemars(length(min = 1, max = 64), regex(pattern = "^[A-Za-z0-9.+_-]+$"))]
    pub term: Option<String>,
}

/// How to attach: a command for this machine (`argv`), or (e2b) a terminal this server relays
/// (`attach`, kept alive every `keepalive_secs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AttachAnswer {
    pub run: String,
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_secs: Option<u64>,
}

/// Typing into a relayed terminal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AttachInput {
    /// base64 of the bytes typed; empty: a keepalive
    #[serde(default)]
    #[schemars(regex(
        pattern = "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    ))]
    pub data: String,
}

/// A relayed terminal's new size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AttachResize {
    /// the terminal's columns (1 to 1000)
    #[serde(deserialize_with = "crate::schema::whole")]
    #[schemars(range(min = 1, max = 1000))]
    pub cols: u16,
    /// the terminal's rows (1 to 1000)
    #[serde(deserialize_with = "crate::schema::whole")]
    #[schemars(range(min = 1, max = 1000))]
    pub rows: u16,
}

/// The attach an action was about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AttachOne {
    pub attach: String,
}

/// Server-Sent Events: `data` (base64 of the terminal's bytes), `end` ({status}: the process ended; tmux's 0 when the person detached), `ended` ({reason}: the attach ended otherwise, its process killed)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AttachEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<AttachEventKind>")]
    pub event: Option<String>,
    pub data: String,
}

/// The data of a relayed terminal's `end` event: the process ended with this status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AttachEnd {
    pub status: i32,
}

/// The data of a relayed terminal's `ended` event: the attach ended otherwise, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AttachEnded {
    pub reason: String,
}

/// The kinds of a relayed terminal's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttachEventKind {
    Data,
    End,
    Ended,
}

/// Server-Sent Events of `POST /v1/environments/{name}/pull`: `progress` ({line}: one line of the pull, a layer's change of state or how far it got), then one `done` ({environment, image, pulled}: the image is on the machine; `pulled` false when it already was) or `failed` ({message}: why, naming the image and what the registry said)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PullEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<PullEventKind>")]
    pub event: Option<String>,
    pub data: String,
}

/// The data of a pull's `progress` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PullProgress {
    pub line: String,
}

/// The data of a pull's `done` event: the environment's image is on the server's machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PullDone {
    pub environment: String,
    pub image: String,
    /// False when the image was there already.
    pub pulled: bool,
}

/// The data of a pull's `failed` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PullFailed {
    pub message: String,
}

/// The kinds of a pull's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PullEventKind {
    Progress,
    Done,
    Failed,
}
