//! Environments and sandboxes under `/v1/environments` and `/v1/sandboxes`, with their part of
//! the OpenAPI document.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get, post};
use hangar_control::ControlPlane;
use serde_json::{Value, json};

use crate::api_doc::Endpoint;
use crate::auth::Authed;
use crate::error::ApiError;

type S = State<Arc<ControlPlane>>;
type ApiResult = Result<axum::response::Response, ApiError>;

pub(crate) fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Arc<ControlPlane>>)> {
    vec![
        ("GET", "/v1/environments", get(list_environments)),
        ("POST", "/v1/environments", post(apply_environment)),
        ("GET", "/v1/environments/{name}", get(get_environment)),
    ]
}

async fn list_environments(State(plane): S, _who: Authed) -> ApiResult {
    Ok(Json(json!({"environments": plane.environments().await?})).into_response())
}

async fn apply_environment(State(plane): S, who: Authed, Json(spec): Json<Value>) -> ApiResult {
    let (env, created) = plane.apply_environment(&spec, &who.email).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(json!({"environment": env, "created": created})),
    )
        .into_response())
}

async fn get_environment(State(plane): S, _who: Authed, Path(name): Path<String>) -> ApiResult {
    Ok(Json(json!({"environment": plane.environment(&name).await?})).into_response())
}

fn string() -> Value {
    json!({"type": "string"})
}

fn env_spec() -> Value {
    json!({
        "type": "object",
        "description": "An environment as a person writes it (the YAML file's keys); unknown keys and impossible combinations are refused with a message naming the key",
        "properties": {
            "name": string(),
            "provider": {"enum": ["local", "docker", "kubernetes", "e2b"]},
            "image": string(),
            "egress": {"oneOf": [{"enum": ["none", "open"]}, {"type": "object", "properties": {"allowlist": {"type": "array", "items": string()}}, "required": ["allowlist"]}]},
            "network": {"enum": ["host"]},
            "uid_split": {"type": "boolean"},
            "sudo": {"type": "boolean"},
            "governance": {"type": "object", "properties": {"policy": {"enum": ["ask", "auto", "governed"]}, "hook": {"enum": ["required", "optional", "off"]}, "rules": {"type": "object"}}},
            "resources": {"type": "object", "properties": {"cpu": {"type": "number"}, "memory": {"type": ["string", "integer"]}, "pids": {"type": "integer"}}}
        },
        "required": ["name", "provider"]
    })
}

fn env_view() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": string(),
            "spec": env_spec(),
            "invalid": string(),
            "created_at": {"type": "integer"},
            "updated_at": {"type": "integer"}
        },
        "required": ["name", "spec", "created_at"]
    })
}

fn env_one() -> Value {
    json!({"type": "object", "properties": {"environment": env_view()}, "required": ["environment"]})
}

fn env_applied() -> Value {
    json!({"type": "object", "properties": {"environment": env_view(), "created": {"type": "boolean"}}, "required": ["environment", "created"]})
}

fn env_list() -> Value {
    json!({"type": "object", "properties": {"environments": {"type": "array", "items": env_view()}}, "required": ["environments"]})
}

/// This module's endpoints, for the OpenAPI document.
pub(crate) fn endpoints() -> Vec<Endpoint> {
    let e = |method, path, summary, request, response, status| Endpoint {
        method,
        path,
        summary,
        request,
        response,
        stream: false,
        status,
    };
    vec![
        e(
            "GET",
            "/v1/environments",
            "Every environment",
            None,
            env_list as fn() -> Value,
            200,
        ),
        e(
            "POST",
            "/v1/environments",
            "Create or replace an environment (201 when new, 200 when replaced)",
            Some(env_spec as fn() -> Value),
            env_applied,
            201,
        ),
        e(
            "GET",
            "/v1/environments/{name}",
            "One environment",
            None,
            env_one,
            200,
        ),
    ]
}
