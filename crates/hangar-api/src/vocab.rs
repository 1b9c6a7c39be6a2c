//! The closed sets of words the API speaks, spelled as on the wire. (No doc comments on the
//! variants: each would turn the schema's plain `enum` into a `oneOf` of constants.)

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// hangar's shared words, defined once in the protocol crate (with their JSON Schemas): the
/// agent a session runs, how its tool calls are governed, where a turn and a run are, a
/// person's answer to a permission request, where sandboxes run and how they reach the network.
pub use hangar_protocol::{
    Decision, Harness, NetworkMode, Policy, Provider, RunState, TurnPhase, TurnState,
};

/// The harness a session runs when the request names none.
pub fn default_harness() -> Harness {
    Harness::Claude
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
