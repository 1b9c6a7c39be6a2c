//! Environments and sandboxes under `/v1/environments` and `/v1/sandboxes`, with their part of
//! the OpenAPI document.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, delete, get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hangar_control::attaches::{RelayEvent, TermSpec};
use hangar_control::sandbox::Who;
use hangar_control::{Attach, ControlPlane};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api_doc::Endpoint;
use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path, Query};

type S = State<Arc<ControlPlane>>;
type ApiResult = Result<axum::response::Response, ApiError>;

pub(crate) fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Arc<ControlPlane>>)> {
    vec![
        ("GET", "/v1/environments", get(list_environments)),
        ("POST", "/v1/environments", post(apply_environment)),
        ("GET", "/v1/environments/{name}", get(get_environment)),
        ("GET", "/v1/sandboxes", get(list_sandboxes)),
        ("POST", "/v1/sandboxes", post(create_sandbox)),
        ("GET", "/v1/sandboxes/{id}", get(get_sandbox)),
        ("DELETE", "/v1/sandboxes/{id}", delete(remove_sandbox)),
        ("POST", "/v1/sandboxes/{id}/exec", post(exec)),
        ("POST", "/v1/sandboxes/{id}/attach", post(attach)),
        ("GET", "/v1/attaches/{id}/output", get(attach_output)),
        ("POST", "/v1/attaches/{id}/input", post(attach_input)),
        ("POST", "/v1/attaches/{id}/resize", post(attach_resize)),
        ("DELETE", "/v1/attaches/{id}", delete(end_attach)),
    ]
}

#[derive(Deserialize)]
struct CreateSandbox {
    env: String,
    repo: std::path::PathBuf,
    /// The person it is for (default: the token's).
    person: Option<String>,
}

async fn create_sandbox(State(plane): S, who: Authed, Json(b): Json<CreateSandbox>) -> ApiResult {
    let person = b.person.unwrap_or_else(|| who.email.clone());
    if !person.contains('@') {
        return Err(ApiError::BadRequest(format!(
            "person {person:?} is not an email address"
        )));
    }
    let sb = plane.create_sandbox(&b.env, &b.repo, &person).await?;
    Ok((StatusCode::CREATED, Json(json!({"sandbox": sb}))).into_response())
}

async fn list_sandboxes(State(plane): S, _who: Authed) -> ApiResult {
    Ok(Json(json!({"sandboxes": plane.list_sandboxes().await?})).into_response())
}

async fn get_sandbox(State(plane): S, _who: Authed, Path(id): Path<String>) -> ApiResult {
    Ok(Json(json!({"sandbox": plane.sandbox_view(&id).await?})).into_response())
}

#[derive(Deserialize)]
struct RemoveQuery {
    #[serde(default)]
    keep_logs: bool,
    #[serde(default)]
    force: bool,
}

async fn remove_sandbox(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Query(q): Query<RemoveQuery>,
) -> ApiResult {
    let sb = plane
        .remove_sandbox(&id, q.keep_logs, q.force, &who.email)
        .await?;
    Ok(Json(json!({"sandbox": sb})).into_response())
}

#[derive(Deserialize)]
struct Exec {
    argv: Vec<String>,
    #[serde(default = "agent", rename = "as")]
    who: Who,
    /// Text for the command's stdin.
    stdin: Option<String>,
}

fn agent() -> Who {
    Who::Agent
}

async fn exec(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<Exec>,
) -> ApiResult {
    // A program's arguments are C strings: a NUL byte cannot be passed on.
    if let Some(arg) = b.argv.iter().find(|a| a.contains('\0')) {
        return Err(ApiError::BadRequest(format!(
            "argv: {arg:?} holds a NUL byte, which no program can be given"
        )));
    }
    let out = plane
        .sandbox_exec(
            &id,
            b.who,
            b.argv,
            b.stdin.map(String::into_bytes),
            &who.email,
        )
        .await?;
    Ok(Json(json!({
        "status": out.status,
        "stdout": String::from_utf8_lossy(&out.stdout),
        "stderr": String::from_utf8_lossy(&out.stderr),
    }))
    .into_response())
}

#[derive(Deserialize, Default)]
struct AttachBody {
    run: Option<String>,
    /// The terminal's size and type, for a relayed terminal (e2b).
    #[serde(default, deserialize_with = "whole_size_opt")]
    cols: Option<u16>,
    #[serde(default, deserialize_with = "whole_size_opt")]
    rows: Option<u16>,
    term: Option<String>,
}

/// A terminal size as JSON Schema's `integer` allows it: `80` or `80.0`.
fn whole_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    crate::extract::whole(d)
}

/// The same, or `null`.
fn whole_size_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None => Ok(None),
        Some(v) => whole_size(v).map(Some).map_err(serde::de::Error::custom),
    }
}

/// A POST (each attach is audited, and for e2b it starts a terminal), answered
/// `Cache-Control: no-store`.
async fn attach(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    body: Option<Json<AttachBody>>,
) -> ApiResult {
    let b = body.map(|Json(b)| b).unwrap_or_default();
    let d = TermSpec::default();
    let term = TermSpec {
        cols: b.cols.unwrap_or(d.cols),
        rows: b.rows.unwrap_or(d.rows),
        term: b.term.unwrap_or(d.term),
    };
    let (run, how) = plane
        .sandbox_attach(&id, b.run.as_deref(), &who.email, &who.token_id, &term)
        .await?;
    Ok((
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Json(match how {
            Attach::Argv(argv) => json!({"run": run, "argv": argv}),
            // No host command attaches to an e2b sandbox: this server relays the terminal
            // (envd's token stays here).
            Attach::Relay(attach) => json!({
                "run": run,
                "argv": [],
                "attach": attach,
                "keepalive_secs": plane.attach_keepalive().as_secs(),
            }),
        }),
    )
        .into_response())
}

/// A relayed terminal's output as Server-Sent Events: `data` (base64 of the bytes), `end`
/// (`{"status"}`: the process ended), `ended` (`{"reason"}`: the attach ended otherwise).
/// Dropping the stream ends the attach.
async fn attach_output(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let out = plane.attach_output(&id, &who.token_id)?;
    let events = futures_util::stream::unfold(out, |mut out| async move {
        let ev = match out.next().await? {
            RelayEvent::Data(b) => Event::default().event("data").data(B64.encode(b)),
            RelayEvent::End(status) => Event::default()
                .event("end")
                .data(json!({"status": status}).to_string()),
            RelayEvent::Ended(reason) => Event::default()
                .event("ended")
                .data(json!({"reason": reason}).to_string()),
        };
        Some((Ok::<_, std::convert::Infallible>(ev), out))
    });
    Ok((
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Sse::new(events).keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(10))),
    )
        .into_response())
}

#[derive(Deserialize)]
struct AttachInput {
    /// Base64 of the bytes typed; empty or absent: a keepalive.
    #[serde(default)]
    data: String,
}

async fn attach_input(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<AttachInput>,
) -> ApiResult {
    let bytes = B64.decode(b.data.as_bytes()).map_err(|e| {
        ApiError::BadRequest(format!("data must be base64 of the bytes typed: {e}"))
    })?;
    plane.attach_input(&id, &who.token_id, &bytes).await?;
    Ok(Json(json!({"attach": id})).into_response())
}

#[derive(Deserialize)]
struct AttachResize {
    #[serde(deserialize_with = "whole_size")]
    cols: u16,
    #[serde(deserialize_with = "whole_size")]
    rows: u16,
}

async fn attach_resize(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<AttachResize>,
) -> ApiResult {
    plane
        .attach_resize(&id, &who.token_id, b.cols, b.rows)
        .await?;
    Ok(Json(json!({"attach": id})).into_response())
}

async fn end_attach(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    plane.end_attach(&id, &who.token_id)?;
    Ok(Json(json!({"attach": id})).into_response())
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
            "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,62}$"},
            "provider": {"enum": ["local", "docker", "kubernetes", "e2b"]},
            "image": string(),
            "egress": {"oneOf": [{"enum": ["none", "open"]}, {"type": "object", "properties": {"allowlist": {"type": "array", "items": string()}}, "required": ["allowlist"]}]},
            "network": {"enum": ["host"]},
            "uid_split": {"type": "boolean"},
            "sudo": {"type": "boolean"},
            "governance": {"type": "object", "properties": {"policy": {"enum": ["ask", "auto", "governed"]}, "hook": {"enum": ["required", "optional", "off"]}, "rules": {"type": "object"}, "claude_settings": {"type": "object", "description": "reviewed Claude Code settings: mcpServers, model, permissions.deny/ask, includeCoAuthoredBy, alwaysThinkingEnabled, outputStyle, cleanupPeriodDays; any other key is refused"}}},
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

fn sandbox_view() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": string(),
            "environment": string(),
            "provider": {"enum": ["local", "docker", "kubernetes", "e2b"]},
            "person": string(),
            "state": {"enum": ["live", "removed"]},
            "workspace": string(),
            "host_workspace": string(),
            "capabilities": {"type": "object", "properties": {
                "provider": string(), "uid_split": {"type": "boolean"}, "uid_split_off": string(),
                "sudo": {"type": "boolean"}, "network_modes": {"type": "array", "items": {"enum": ["none", "host", "open", "allowlist"]}},
                "resource_limits": {"type": "boolean"}}},
            "egress_warning": string(),
            "created_at": {"type": "integer"},
            "removed_at": {"type": "integer"}
        },
        "required": ["id", "environment", "provider", "person", "state", "host_workspace", "created_at"]
    })
}

fn sandbox_one() -> Value {
    json!({"type": "object", "properties": {"sandbox": sandbox_view()}, "required": ["sandbox"]})
}

fn sandbox_list() -> Value {
    json!({"type": "object", "properties": {"sandboxes": {"type": "array", "items": sandbox_view()}}, "required": ["sandboxes"]})
}

fn sandbox_req() -> Value {
    json!({"type": "object", "properties": {"env": string(), "repo": string(), "person": crate::api_doc::opt_string()}, "required": ["env", "repo"]})
}

fn exec_req() -> Value {
    json!({"type": "object", "properties": {"argv": {"type": "array", "items": {"type": "string", "pattern": "^[^\\u0000]*$"}, "minItems": 1}, "as": {"enum": ["agent", "hangar"]}, "stdin": {"type": ["string", "null"]}}, "required": ["argv"]})
}

fn exec_out() -> Value {
    json!({"type": "object", "properties": {"status": {"type": "integer"}, "stdout": string(), "stderr": string()}, "required": ["status", "stdout", "stderr"]})
}

/// A terminal's columns or rows: 1 to 1000.
fn size(what: &str) -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 1000, "description": format!("the terminal's {what} (1 to 1000)")})
}

/// `schema` or `null` (the same as leaving the field out).
fn nullable(mut schema: Value) -> Value {
    schema["type"] = json!([schema["type"].clone(), "null"]);
    schema
}

fn attach_req() -> Value {
    json!({"type": "object", "properties": {"run": {"type": ["string", "null"], "pattern": "^[A-Za-z0-9_-]+$", "description": "the run to attach to (default: the sandbox's running turn)"}, "cols": nullable(size("columns, default 80")), "rows": nullable(size("rows, default 24")), "term": {"type": ["string", "null"], "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9.+_-]+$", "description": "the terminal type (TERM), default xterm-256color: letters, digits and .+-_, at most 64"}}})
}

fn attach_out() -> Value {
    json!({"type": "object", "properties": {"run": string(), "argv": {"type": "array", "items": string()}, "attach": string(), "keepalive_secs": {"type": "integer"}}, "required": ["run", "argv"]})
}

fn attach_input_req() -> Value {
    json!({"type": "object", "properties": {"data": {"type": "string", "pattern": "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$", "description": "base64 of the bytes typed; empty: a keepalive"}}})
}

fn attach_resize_req() -> Value {
    json!({"type": "object", "properties": {"cols": size("columns"), "rows": size("rows")}, "required": ["cols", "rows"]})
}

fn attach_one() -> Value {
    json!({"type": "object", "properties": {"attach": string()}, "required": ["attach"]})
}

fn attach_stream() -> Value {
    json!({"type": "object", "description": "Server-Sent Events: `data` (base64 of the terminal's bytes), `end` ({status}: the process ended; tmux's 0 when the person detached), `ended` ({reason}: the attach ended otherwise, its process killed)",
           "properties": {"id": string(), "event": {"enum": ["data", "end", "ended"]}, "data": string()}, "required": ["data"]})
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
        e(
            "GET",
            "/v1/sandboxes",
            "Every sandbox (removed ones marked so)",
            None,
            sandbox_list,
            200,
        ),
        e(
            "POST",
            "/v1/sandboxes",
            "Make a sandbox of an environment holding a copy of a repository",
            Some(sandbox_req as fn() -> Value),
            sandbox_one,
            201,
        ),
        e(
            "GET",
            "/v1/sandboxes/{id}",
            "One sandbox",
            None,
            sandbox_one,
            200,
        ),
        e(
            "DELETE",
            "/v1/sandboxes/{id}",
            "Destroy a sandbox, leaving nothing behind (?keep_logs=true keeps its runs' control folders; ?force=true even while a turn runs)",
            None,
            sandbox_one,
            200,
        ),
        e(
            "POST",
            "/v1/sandboxes/{id}/exec",
            "Run a command to its end inside, as the agent (default) or as hangar's user",
            Some(exec_req as fn() -> Value),
            exec_out,
            200,
        ),
        e(
            "POST",
            "/v1/sandboxes/{id}/attach",
            "The command that attaches a terminal on this machine to a run's tmux session (body `{run}`, default the newest live run); audited as `sandbox.attach`; for an e2b sandbox, `argv` is empty and the server relays the terminal itself (envd's token never leaves it): it starts envd's PTY process (`cols`, `rows`, `term` of the body) and answers its `attach` id, used with /v1/attaches/{id}/… by the same API token only (and the same `hangar serve` replica), which must send input or a keepalive every `keepalive_secs`; one API token may have 8 live (409 beyond); answered `Cache-Control: no-store`",
            Some(attach_req as fn() -> Value),
            attach_out,
            200,
        ),
        Endpoint {
            method: "GET",
            path: "/v1/attaches/{id}/output",
            summary: "A relayed terminal's output (SSE, one reader); dropping the stream ends the attach and kills its process",
            request: None,
            response: attach_stream,
            stream: true,
            status: 200,
        },
        e(
            "POST",
            "/v1/attaches/{id}/input",
            "Type into a relayed terminal (`data`: base64; empty: a keepalive); without either for 60 s (HANGAR_ATTACH_IDLE_SECS) the attach ends",
            Some(attach_input_req as fn() -> Value),
            attach_one,
            200,
        ),
        e(
            "POST",
            "/v1/attaches/{id}/resize",
            "Resize a relayed terminal",
            Some(attach_resize_req as fn() -> Value),
            attach_one,
            200,
        ),
        e(
            "DELETE",
            "/v1/attaches/{id}",
            "End a relayed terminal (its process killed; audited as `sandbox.attach.ended`)",
            None,
            attach_one,
            200,
        ),
    ]
}
