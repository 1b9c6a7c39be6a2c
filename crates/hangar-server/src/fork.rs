//! Forks over HTTP: `POST /v1/runs/{id}/fork` (a new sandbox and session from a step) and
//! `GET /v1/runs/{id}/forks`, with their OpenAPI schemas.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hangar_control::{ControlPlane, ForkRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path};
use crate::views;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkBody {
    #[serde(deserialize_with = "crate::extract::whole")]
    step: usize,
    /// The fork's folder (absolute; must not exist, or be empty): a plain folder's fork, or an
    /// in-place sandbox's; refused for an environment that copies the repository.
    #[serde(default)]
    dir: Option<PathBuf>,
    /// Starts the fork's first turn with this message.
    #[serde(default)]
    prompt: Option<String>,
}

pub(crate) async fn fork(
    State(plane): State<Arc<ControlPlane>>,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<ForkBody>,
) -> Result<axum::response::Response, ApiError> {
    let f = plane
        .fork(ForkRequest {
            run: id,
            step: b.step,
            dir: b.dir,
            prompt: b.prompt,
            person: who.email,
        })
        .await?;
    let mut body = json!({
        "fork": f.record,
        "session": views::session(&f.session),
        "sandbox": {"id": f.sandbox.id, "environment": f.sandbox.environment, "kind": f.sandbox.kind,
                    "workdir": f.sandbox.workdir, "person": f.sandbox.person},
    });
    if let (Some(s), Some(o)) = (&f.started, body.as_object_mut()) {
        o.insert("turn".into(), views::turn(&s.turn));
        o.insert("run".into(), views::run(&s.run));
    }
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

pub(crate) async fn forks(
    State(plane): State<Arc<ControlPlane>>,
    _who: Authed,
    Path(id): Path<String>,
) -> Result<axum::response::Response, ApiError> {
    let forks = plane.forks_of_run(&id).await?;
    Ok(Json(json!({"run": id, "forks": forks})).into_response())
}

fn string() -> Value {
    json!({"type": "string"})
}

/// The fork's record (`ForkRecord`).
fn record() -> Value {
    let nullable = json!({"type": ["string", "null"]});
    json!({"type": "object", "properties": {
        "session": string(), "sandbox": string(), "dir": string(), "run": string(), "turn": string(),
        "source_session": string(), "step": {"type": "integer"}, "tree": string(),
        "trusted": {"type": "boolean"}, "head": nullable, "repository": {"type": "boolean"},
        "conversation": {"type": "object", "description": "where the conversation was cut: `parent` (the harness's session or thread, none for a new conversation), `at` (the last message or turn kept), `exact`, and `why` when not exact",
            "properties": {"parent": nullable, "at": nullable, "exact": {"type": "boolean"}, "why": string()},
            "required": ["parent", "at", "exact"]},
        "capability": {"type": "object", "description": "how exactly this harness can cut a conversation: `cut` is `message` (any step) or `turn` (between turns only)",
            "properties": {"harness": string(), "cut": {"enum": ["message", "turn"]}, "exact_at_every_step": {"type": "boolean"}, "how": string()},
            "required": ["harness", "cut", "exact_at_every_step"]},
        "warnings": {"type": "array", "items": string()},
    }, "required": ["session", "sandbox", "dir", "run", "step", "tree", "trusted", "conversation", "capability", "warnings"]})
}

pub(crate) fn doc_fork_req() -> Value {
    json!({"type": "object", "properties": {
        "step": {"type": "integer", "minimum": 0, "maximum": u64::MAX},
        "dir": {"type": ["string", "null"], "description": "the fork's work tree on this machine, for a plain folder's or an in-place sandbox's fork (absolute; must not exist or be empty); default $HANGAR_HOME/forks/<sandbox id>. A run in a sandbox whose environment copies the repository forks into a new sandbox of that environment, whose workspace is the work tree: dir is refused there"},
        "prompt": {"type": ["string", "null"], "description": "start the fork's first turn with this message"},
    }, "required": ["step"], "additionalProperties": false})
}

pub(crate) fn doc_forked() -> Value {
    json!({"type": "object", "properties": {
        "fork": record(),
        "session": {"$ref": "#/components/schemas/Session"},
        "sandbox": {"type": "object", "properties": {"id": string(), "environment": string(), "kind": string(), "workdir": string(), "person": string()}, "required": ["id", "workdir"]},
        "turn": {"$ref": "#/components/schemas/Turn"},
        "run": {"$ref": "#/components/schemas/Run"},
    }, "required": ["fork", "session", "sandbox"]})
}

pub(crate) fn doc_forks() -> Value {
    json!({"type": "object", "properties": {"run": string(), "forks": {"type": "array", "items": record()}}, "required": ["run", "forks"]})
}
