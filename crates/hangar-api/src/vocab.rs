//! The closed sets of words the API speaks, spelled as on the wire. (No doc comments on the
//! variants: each would turn the schema's plain `enum` into a `oneOf` of constants.)

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The agent a session runs, and how its tool calls are governed: hangar's shared words.
pub use hangar_protocol::{Harness, Policy};

/// The harness a session runs when the request names none.
pub fn default_harness() -> Harness {
    Harness::Claude
}

/// Where a turn is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TurnState {
    Queued,
    Running,
    Ended,
    Refused,
}

/// Whether a run's driver may still write to its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Live,
    Ended,
}

/// A person's answer to a permission request (`approve` is taken for `allow`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    #[serde(alias = "approve")]
    Allow,
    Deny,
}

/// What a command (a message, steer, interrupt or answer) did, when the driver signed `done`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    // The driver took it into the running turn.
    Done,
    // The turn had ended: the message started the session's next turn.
    NextTurn,
}

/// Where in a turn a step's tree was taken, when not after a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Start,
    End,
}

/// How finely a harness's conversation can be cut for a fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Cut {
    // At any entry (every step).
    Message,
    // Only between turns.
    Turn,
}

/// Where sandboxes of an environment run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Local,
    Docker,
    Kubernetes,
    E2b,
}

/// How a sandbox may reach the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    None,
    Host,
    Open,
    Allowlist,
}

/// Whether a sandbox is still there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Live,
    Removed,
}

/// Whom a command in a sandbox runs as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExecAs {
    #[default]
    Agent,
    Hangar,
}

/// An error's kind; each maps to one HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Unauthenticated,
    Forbidden,
    NotFound,
    BadRequest,
    UnsupportedMediaType,
    MethodNotAllowed,
    Conflict,
    Refused,
    Unavailable,
    Internal,
}
