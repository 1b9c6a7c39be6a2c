//! Environments and sandboxes under `/v1/environments` and `/v1/sandboxes`, with their part of
//! the OpenAPI document.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, delete, get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hangar_api as api;
use hangar_control::attaches::{RelayEvent, TermSpec};
use hangar_control::sandbox::Who;
use hangar_control::{Attach, ControlPlane};

use crate::api_doc::{Endpoint, of};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path, Query};
use crate::owner;
use crate::views;

type S = State<Arc<ControlPlane>>;
type ApiResult = Result<axum::response::Response, ApiError>;

pub(crate) fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Arc<ControlPlane>>)> {
    vec![
        ("GET", "/v1/environments", get(list_environments)),
        ("POST", "/v1/environments", post(apply_environment)),
        ("GET", "/v1/environments/{name}", get(get_environment)),
        ("POST", "/v1/environments/{name}/pull", post(pull_image)),
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

async fn create_sandbox(
    State(plane): S,
    who: Authed,
    Json(b): Json<api::CreateSandbox>,
) -> ApiResult {
    let person = who.act_for(&plane, b.person, "sandbox.create").await?;
    if !person.contains('@') {
        return Err(ApiError::BadRequest(format!(
            "person {person:?} is not an email address"
        )));
    }
    let sb = plane
        .sandboxes()
        .create_sandbox(&b.env, &b.repo, &person)
        .await?;
    let sandbox = views::sandbox(sb)?;
    Ok((StatusCode::CREATED, Json(api::SandboxOne { sandbox })).into_response())
}

/// Refuses unless `who` owns sandbox `id` or is an admin.
async fn sandbox_owned(
    plane: &ControlPlane,
    who: &Authed,
    id: &str,
    what: &str,
) -> Result<(), ApiError> {
    let owned = owner::of_sandbox(plane, id).await?;
    who.require_owner(plane, &owned, &format!("{what} sandbox {id}"))
        .await
}

async fn list_sandboxes(State(plane): S, who: Authed) -> ApiResult {
    let sandboxes = plane
        .sandboxes()
        .list_sandboxes()
        .await?
        .into_iter()
        // Only what this person may see (an admin sees every sandbox).
        .filter(|sb| who.is_admin() || who.is_viewer() || sb.person == who.email)
        .map(views::sandbox)
        .collect::<Result<_, _>>()?;
    Ok(Json(api::Sandboxes { sandboxes }).into_response())
}

async fn get_sandbox(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    let owned = owner::of_sandbox(&plane, &id).await?;
    who.require_reader(&plane, &owned, &format!("read sandbox {id}"))
        .await?;
    let sandbox = views::sandbox(plane.sandboxes().sandbox_view(&id).await?)?;
    Ok(Json(api::SandboxOne { sandbox }).into_response())
}

#[derive(serde::Deserialize)]
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
    sandbox_owned(&plane, &who, &id, "remove").await?;
    let sb = plane
        .sandboxes()
        .remove_sandbox(&id, q.keep_logs, q.force, &who.email)
        .await?;
    let sandbox = views::sandbox(sb)?;
    Ok(Json(api::SandboxOne { sandbox }).into_response())
}

async fn exec(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<api::ExecRequest>,
) -> ApiResult {
    sandbox_owned(&plane, &who, &id, "run commands in").await?;
    // A program's arguments are C strings: a NUL byte cannot be passed on.
    if let Some(arg) = b.argv.iter().find(|a| a.contains('\0')) {
        return Err(ApiError::BadRequest(format!(
            "argv: {arg:?} holds a NUL byte, which no program can be given"
        )));
    }
    let out = plane
        .sandboxes()
        .sandbox_exec(
            &id,
            match b.who {
                api::ExecAs::Agent => Who::Agent,
                api::ExecAs::Hangar => Who::Hangar,
            },
            b.argv,
            b.stdin.map(String::into_bytes),
            &who.email,
        )
        .await?;
    Ok(Json(api::ExecOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
    .into_response())
}

/// A POST (each attach is audited, and for e2b it starts a terminal), answered
/// `Cache-Control: no-store`.
async fn attach(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    body: Option<Json<api::AttachRequest>>,
) -> ApiResult {
    sandbox_owned(&plane, &who, &id, "attach to").await?;
    let b = body.map(|Json(b)| b).unwrap_or_default();
    let d = TermSpec::default();
    let term = TermSpec {
        cols: b.cols.unwrap_or(d.cols),
        rows: b.rows.unwrap_or(d.rows),
        term: b.term.unwrap_or(d.term),
    };
    // The document's rules for the body hold for every sandbox, though only a relayed
    // terminal (e2b) uses the size and type.
    term.check()?;
    let (run, how) = plane
        .sandboxes()
        .sandbox_attach(&id, b.run.as_deref(), &who.email, &who.token_id, &term)
        .await?;
    Ok((
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Json(match how {
            Attach::Argv(argv) => api::AttachAnswer {
                run,
                argv,
                attach: None,
                keepalive_secs: None,
            },
            // No host command attaches to an e2b sandbox: this server relays the terminal
            // (envd's token stays here).
            Attach::Relay(attach) => api::AttachAnswer {
                run,
                argv: Vec::new(),
                attach: Some(attach),
                keepalive_secs: Some(plane.sandboxes().attach_keepalive().as_secs()),
            },
        }),
    )
        .into_response())
}

/// A relayed terminal's output as Server-Sent Events: `data` (base64 of the bytes), `end`
/// (`{"status"}`: the process ended), `ended` (`{"reason"}`: the attach ended otherwise).
/// Dropping the stream ends the attach.
async fn attach_output(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let out = plane.sandboxes().attach_output(&id, &who.token_id).await?;
    let events = futures_util::stream::unfold(out, |mut out| async move {
        // `json_data` fails only for what does not serialize; these types always do.
        let ev = match out.next().await? {
            RelayEvent::Data(b) => Event::default().event("data").data(B64.encode(b)),
            RelayEvent::End(status) => Event::default()
                .event("end")
                .json_data(api::AttachEnd { status })
                .ok()?,
            RelayEvent::Ended(reason) => Event::default()
                .event("ended")
                .json_data(api::AttachEnded { reason })
                .ok()?,
        };
        Some((Ok::<_, std::convert::Infallible>(ev), out))
    });
    Ok((
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Sse::new(events).keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(10))),
    )
        .into_response())
}

async fn attach_input(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<api::AttachInput>,
) -> ApiResult {
    let bytes = B64.decode(b.data.as_bytes()).map_err(|e| {
        ApiError::BadRequest(format!("data must be base64 of the bytes typed: {e}"))
    })?;
    plane
        .sandboxes()
        .attach_input(&id, &who.token_id, &bytes)
        .await?;
    Ok(Json(api::AttachOne { attach: id }).into_response())
}

async fn attach_resize(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<api::AttachResize>,
) -> ApiResult {
    plane
        .sandboxes()
        .attach_resize(&id, &who.token_id, b.cols, b.rows)
        .await?;
    Ok(Json(api::AttachOne { attach: id }).into_response())
}

async fn end_attach(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    plane.sandboxes().end_attach(&id, &who.token_id).await?;
    Ok(Json(api::AttachOne { attach: id }).into_response())
}

async fn list_environments(State(plane): S, _who: Authed) -> ApiResult {
    let environments = plane
        .sandboxes()
        .environments()
        .await?
        .into_iter()
        .map(views::environment)
        .collect();
    Ok(Json(api::Environments { environments }).into_response())
}

async fn apply_environment(
    State(plane): S,
    who: Authed,
    Json(spec): Json<api::EnvironmentSpec>,
) -> ApiResult {
    // An environment's spec is every sandbox's floor and names who may answer its approvals
    // (`governance.approvers`): a member changing it could make themselves an approver.
    who.require_admin(&plane, "define environments").await?;
    let (env, created) = plane
        .sandboxes()
        .apply_environment(&spec.0, &who.email)
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(api::EnvironmentApplied {
            environment: views::environment(env),
            created,
        }),
    )
        .into_response())
}

async fn get_environment(State(plane): S, _who: Authed, Path(name): Path<String>) -> ApiResult {
    let environment = views::environment(plane.sandboxes().environment(&name).await?);
    Ok(Json(api::EnvironmentOne { environment }).into_response())
}

/// Pulls a docker environment's image now (`hangar env apply --pull`), as Server-Sent Events:
/// `progress` (`{line}`) as it goes, then `done` (`{environment, image, pulled}`) or `failed`
/// (`{message}`). Refusals (not an admin, no such environment, not docker, no dockerd) come
/// before the stream, with their status. A pull goes on to its end when the stream is dropped.
async fn pull_image(State(plane): S, who: Authed, Path(name): Path<String>) -> ApiResult {
    use axum::response::sse::{Event, KeepAlive, Sse};
    // Environments are the admins' (see `apply_environment`); so is filling the machine with
    // their images.
    who.require_admin(&plane, "pull an environment's image")
        .await?;
    let spec = plane.sandboxes().image_to_pull(&name).await?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    tokio::spawn(async move {
        let lines = tx.clone();
        let mut progress = move |line: &str| {
            let progress = api::PullProgress {
                line: line.to_owned(),
            };
            // `json_data` fails only for what does not serialize; these types always do.
            if let Ok(ev) = Event::default().event("progress").json_data(progress) {
                let _ = lines.send(ev);
            }
        };
        let end = match plane
            .sandboxes()
            .pull_image(&spec, &who.email, &mut progress)
            .await
        {
            Ok(pulled) => Event::default().event("done").json_data(api::PullDone {
                environment: spec.name.clone(),
                image: spec.image.clone().unwrap_or_default(),
                pulled,
            }),
            Err(e) => Event::default().event("failed").json_data(api::PullFailed {
                message: e.to_string(),
            }),
        };
        if let Ok(ev) = end {
            let _ = tx.send(ev);
        }
    });
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let ev = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(ev), rx))
    });
    Ok((
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Sse::new(events).keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(10))),
    )
        .into_response())
}

/// This module's endpoints, for the OpenAPI document.
pub(crate) fn endpoints() -> Vec<Endpoint> {
    use crate::api_doc::e;
    vec![
        e(
            "GET",
            "/v1/environments",
            "Every environment",
            None,
            of::<api::Environments>,
            200,
        ),
        e(
            "POST",
            "/v1/environments",
            "Create or replace an environment (201 when new, 200 when replaced)",
            Some(of::<api::EnvironmentSpec>),
            of::<api::EnvironmentApplied>,
            201,
        ),
        e(
            "GET",
            "/v1/environments/{name}",
            "One environment",
            None,
            of::<api::EnvironmentOne>,
            200,
        ),
        Endpoint {
            method: "POST",
            path: "/v1/environments/{name}/pull",
            summary: "Pull a docker environment's image onto the server's machine now, unless it is there (admins; with the environment's credential DOCKER_REGISTRY_AUTH as the registry login; audited as `environment.pulled`): its progress as Server-Sent Events, then `done` or `failed`; the pull goes on when the stream is dropped",
            request: None,
            response: of::<api::PullEvent>,
            stream: true,
            status: 200,
        },
        e(
            "GET",
            "/v1/sandboxes",
            "Every sandbox (removed ones marked so)",
            None,
            of::<api::Sandboxes>,
            200,
        ),
        e(
            "POST",
            "/v1/sandboxes",
            "Make a sandbox of an environment holding a copy of a repository",
            Some(of::<api::CreateSandbox>),
            of::<api::SandboxOne>,
            201,
        ),
        e(
            "GET",
            "/v1/sandboxes/{id}",
            "One sandbox",
            None,
            of::<api::SandboxOne>,
            200,
        ),
        e(
            "DELETE",
            "/v1/sandboxes/{id}",
            "Destroy a sandbox, leaving nothing behind (?keep_logs=true keeps its runs' control folders; ?force=true even while a turn runs)",
            None,
            of::<api::SandboxOne>,
            200,
        ),
        e(
            "POST",
            "/v1/sandboxes/{id}/exec",
            "Run a command to its end inside, as the agent (default) or as hangar's user",
            Some(of::<api::ExecRequest>),
            of::<api::ExecOutput>,
            200,
        ),
        e(
            "POST",
            "/v1/sandboxes/{id}/attach",
            "The command that attaches a terminal on this machine to a run's tmux session (body `{run}`, default the newest live run); audited as `sandbox.attach`; for an e2b sandbox, `argv` is empty and the server relays the terminal itself (envd's token never leaves it): it starts envd's PTY process (`cols`, `rows`, `term` of the body) and answers its `attach` id, used with /v1/attaches/{id}/… by the same API token only (and the same `hangar serve` replica), which must send input or a keepalive every `keepalive_secs`; one API token may have 8 live (409 beyond); answered `Cache-Control: no-store`",
            Some(of::<api::AttachRequest>),
            of::<api::AttachAnswer>,
            200,
        ),
        Endpoint {
            method: "GET",
            path: "/v1/attaches/{id}/output",
            summary: "A relayed terminal's output (SSE, one reader); dropping the stream ends the attach and kills its process",
            request: None,
            response: of::<api::AttachEvent>,
            stream: true,
            status: 200,
        },
        e(
            "POST",
            "/v1/attaches/{id}/input",
            "Type into a relayed terminal (`data`: base64; empty: a keepalive); without either for 60 s (HANGAR_ATTACH_IDLE_SECS) the attach ends",
            Some(of::<api::AttachInput>),
            of::<api::AttachOne>,
            200,
        ),
        e(
            "POST",
            "/v1/attaches/{id}/resize",
            "Resize a relayed terminal",
            Some(of::<api::AttachResize>),
            of::<api::AttachOne>,
            200,
        ),
        e(
            "DELETE",
            "/v1/attaches/{id}",
            "End a relayed terminal (its process killed; audited as `sandbox.attach.ended`)",
            None,
            of::<api::AttachOne>,
            200,
        ),
    ]
}
