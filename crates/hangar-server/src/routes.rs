//! The HTTP API under `/v1/`. Every route but `/v1/health`, `/.well-known/jwks.json` and the
//! sign-in routes under `/v1/auth` needs a bearer token. The web page's
//! routes (`/`, `/ui/...`, `/assets/...`) are merged in from `web`.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, delete, get, post};
use hangar_api as api;
use hangar_control::{ControlPlane, Reply, SessionRequest, WakeScope};
use hangar_store::EventScope;
use serde::{Deserialize, Serialize};

use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path, Query};
use crate::owner;
use crate::sse::{self, StoreEvents};
use crate::views;

type S = State<Arc<ControlPlane>>;
type ApiResult = Result<axum::response::Response, ApiError>;

/// Every route: (method, path, handler). The router is built from this list, and a test checks
/// that it is exactly the list the OpenAPI document (`api_doc.rs`) describes.
pub(crate) fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Arc<ControlPlane>>)> {
    let mut all = vec![
        ("GET", "/v1/health", get(health)),
        ("GET", "/v1/ready", get(ready)),
        ("GET", "/.well-known/jwks.json", get(crate::jwks::jwks)),
        ("GET", "/v1/openapi.json", get(openapi)),
        ("GET", "/v1/sessions", get(list_sessions)),
        ("POST", "/v1/sessions", post(start_session)),
        ("GET", "/v1/sessions/{id}", get(get_session)),
        ("POST", "/v1/sessions/{id}/messages", post(send_message)),
        ("GET", "/v1/sessions/{id}/transcript", get(transcript)),
        ("GET", "/v1/sessions/{id}/events", get(session_events)),
        (
            "GET",
            "/v1/sessions/{id}/events/stream",
            get(session_stream),
        ),
        ("GET", "/v1/turns/{id}", get(get_turn)),
        ("GET", "/v1/runs/{id}", get(get_run)),
        ("POST", "/v1/runs/{id}/steer", post(steer)),
        ("POST", "/v1/runs/{id}/interrupt", post(interrupt)),
        ("GET", "/v1/runs/{id}/approvals", get(approvals)),
        ("GET", "/v1/approvals", get(pending_approvals)),
        ("POST", "/v1/runs/{id}/approvals/{request_id}", post(answer)),
        ("GET", "/v1/runs/{id}/events", get(run_events)),
        ("GET", "/v1/runs/{id}/events/stream", get(run_stream)),
        ("GET", "/v1/runs/{id}/log", get(crate::runlog::run_log)),
        ("GET", "/v1/runs/{id}/steps", get(steps)),
        ("GET", "/v1/runs/{id}/diff", get(diff)),
        ("POST", "/v1/runs/{id}/fork", post(crate::fork::fork)),
        ("GET", "/v1/runs/{id}/forks", get(crate::fork::forks)),
        ("GET", "/v1/credentials", get(crate::secrets::list)),
        ("POST", "/v1/credentials/{name}", post(crate::secrets::set)),
        (
            "DELETE",
            "/v1/credentials/{name}",
            delete(crate::secrets::remove),
        ),
        ("GET", "/v1/audit", get(audit)),
        ("GET", "/v1/audit/verify", get(audit_verify)),
        // The web page's own needs (`web/api.rs`).
        ("GET", "/v1/me", get(crate::web::api::me)),
        ("GET", "/v1/ids/{prefix}", get(crate::short_ids::lookup)),
        ("GET", "/v1/board", get(crate::web::api::board)),
        (
            "GET",
            "/v1/turns/{id}/audit",
            get(crate::web::api::turn_audit),
        ),
    ];
    all.extend(crate::sandboxes::routes());
    all.extend(crate::people::routes());
    all.extend(crate::oidc::routes::routes());
    all
}

pub fn router(plane: Arc<ControlPlane>) -> Router {
    router_with(plane, crate::oidc::routes::SignIn::default())
}

/// The router, signing people in with an OpenID issuer when `sign_in` has one.
pub fn router_with(plane: Arc<ControlPlane>, sign_in: crate::oidc::routes::SignIn) -> Router {
    let mut by_path: Vec<(&'static str, MethodRouter<Arc<ControlPlane>>)> = Vec::new();
    for (_, path, handler) in routes() {
        match by_path.iter_mut().find(|(p, _)| *p == path) {
            Some((_, existing)) => *existing = std::mem::take(existing).merge(handler),
            None => by_path.push((path, handler)),
        }
    }
    let routed = by_path
        .into_iter()
        .fold(Router::new(), |r, (path, handler)| r.route(path, handler))
        .merge(crate::web::router())
        .merge(crate::metrics::router())
        .fallback(crate::extract::no_route)
        .method_not_allowed_fallback(crate::extract::no_method)
        .layer(axum::Extension(sign_in))
        .with_state(Arc::clone(&plane));
    // Short ids are made whole before routing (`short_ids.rs`): a layer on the routed router
    // would run after its route was chosen, so the layer wraps a router that only hands every
    // request on to it.
    Router::new()
        .fallback_service(routed)
        // Commands for a run another replica holds are passed on to it (`forward.rs`), with
        // their ids already whole.
        .layer(axum::middleware::from_fn(crate::forward::layer))
        .layer(axum::middleware::from_fn_with_state(
            plane,
            crate::short_ids::resolve,
        ))
        .layer(crate::access::layer())
}

fn ok(v: impl Serialize) -> ApiResult {
    Ok(Json(v).into_response())
}

async fn openapi() -> Json<serde_json::Value> {
    Json(crate::api_doc::openapi())
}

/// How long `/v1/ready` waits for the database.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Ready when the database answers a read of its schema version within [`READY_WAIT`] (a load
/// balancer's or Kubernetes' readiness probe). What failed goes to the log, not to the caller:
/// an error may name the database.
async fn ready(State(plane): S) -> ApiResult {
    let unready = |why: String| {
        tracing::warn!(reason = %why, "not ready: the database did not answer");
        ApiError::Unavailable(
            "not ready: the database does not answer (the server's log says why)".into(),
        )
    };
    match tokio::time::timeout(READY_WAIT, plane.store().schema_version()).await {
        Ok(Ok(schema)) if schema > 0 => ok(api::Ready {
            ready: true,
            schema,
            version: env!("CARGO_PKG_VERSION").into(),
        }),
        Ok(Ok(_)) => Err(unready("no schema version recorded".into())),
        Ok(Err(e)) => Err(unready(e.to_string())),
        Err(_) => Err(unready(format!("no answer within {READY_WAIT:?}"))),
    }
}

async fn health() -> Json<api::Health> {
    Json(api::Health {
        ok: true,
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

async fn start_session(
    State(plane): S,
    who: Authed,
    Json(b): Json<api::StartSession>,
) -> ApiResult {
    let (harness, policy) = (b.harness, b.policy);
    // A plain folder runs the agent as the server's own user: admins only (issue 20).
    if b.no_sandbox {
        who.require_admin_for_folder(&plane).await?;
    }
    if let Some(id) = &b.sandbox {
        let owned = owner::of_sandbox(&plane, id).await?;
        who.require_owner(&plane, &owned, &format!("start a session in sandbox {id}"))
            .await?;
    }
    let dir = match (b.dir, &b.sandbox) {
        (Some(d), _) => d,
        (None, Some(_)) => PathBuf::new(),
        (None, None) => {
            return Err(ApiError::BadRequest(
                "give dir (a folder), or sandbox (an existing sandbox's id)".into(),
            ));
        }
    };
    let req = SessionRequest {
        dir,
        sandbox: b.sandbox,
        env: b.env,
        no_sandbox: b.no_sandbox,
        harness,
        policy,
        prompt: b.prompt,
        person: who.email,
        options: b.options,
    };
    let s = plane.runs().start_session(req).await?;
    let started = api::Started {
        session: views::session(&s.session),
        turn: views::turn(&s.turn, &views::Waiting::new()),
        run: views::run(&s.run),
    };
    Ok((StatusCode::CREATED, Json(started)).into_response())
}

async fn list_sessions(State(plane): S, who: Authed) -> ApiResult {
    let all = plane.store().sessions(None).await?;
    let mut sessions = Vec::with_capacity(all.len());
    for s in &all {
        if who.sees(&owner::of_session_row(&plane, s).await?) {
            sessions.push(views::session(s));
        }
    }
    ok(api::Sessions { sessions })
}

/// Refuses unless `who` owns session `id` (or is an admin): `what` as in "only … may WHAT".
async fn session_owned(
    plane: &ControlPlane,
    who: &Authed,
    id: &str,
    what: &str,
) -> Result<(), ApiError> {
    let owned = owner::of_session(plane, id).await?;
    who.require_owner(plane, &owned, &format!("{what} session {id}"))
        .await
}

/// Refuses unless `who` may read session `id` (its owner, a viewer or an admin).
async fn session_seen(
    plane: &ControlPlane,
    who: &Authed,
    id: &str,
    what: &str,
) -> Result<(), ApiError> {
    let owned = owner::of_session(plane, id).await?;
    who.require_reader(plane, &owned, &format!("{what} session {id}"))
        .await
}

/// Refuses unless `who` may read run `id` (its owner, a viewer or an admin).
pub(crate) async fn run_seen(
    plane: &ControlPlane,
    who: &Authed,
    id: &str,
    what: &str,
) -> Result<(), ApiError> {
    let owned = owner::of_run(plane, id).await?;
    who.require_reader(plane, &owned, &format!("{what} run {id}"))
        .await
}

/// Refuses unless `who` owns run `id` (or is an admin).
pub(crate) async fn run_owned(
    plane: &ControlPlane,
    who: &Authed,
    id: &str,
    what: &str,
) -> Result<(), ApiError> {
    let owned = owner::of_run(plane, id).await?;
    who.require_owner(plane, &owned, &format!("{what} run {id}"))
        .await
}

async fn get_session(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    session_seen(&plane, &who, &id, "read").await?;
    let s = plane.store().session(&id).await?;
    let turns = plane.store().turns(&id).await?;
    let waiting = views::Waiting::read(plane.store()).await?;
    ok(api::SessionTurns {
        session: views::session(&s),
        turns: turns.iter().map(|t| views::turn(t, &waiting)).collect(),
    })
}

/// The text, refused when empty: an empty prompt would start a turn that asks nothing.
fn checked(t: &api::Text) -> Result<&str, ApiError> {
    if t.text.is_empty() {
        return Err(ApiError::BadRequest(
            "text is empty: say what the agent should do".into(),
        ));
    }
    Ok(&t.text)
}

fn reply(r: Reply) -> ApiResult {
    match r {
        Reply::Done { run, .. } => ok(api::CommandReply {
            outcome: api::Outcome::Done,
            run,
            turn: None,
        }),
        Reply::NextTurn { turn, run } => ok(api::CommandReply {
            outcome: api::Outcome::NextTurn,
            run,
            turn: Some(turn),
        }),
        Reply::Refused { reason, .. } => Err(ApiError::Refused(format!("refused: {reason}"))),
        Reply::Ended { run } => Err(ApiError::Conflict(format!(
            "the turn has ended (run {run})"
        ))),
        Reply::HandedBack { run } => Err(ApiError::Conflict(format!(
            "the turn has ended (run {run}): the agent had stopped; the driver handed the message back and the next turn starts with it"
        ))),
    }
}

async fn send_message(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<api::Text>,
) -> ApiResult {
    session_owned(&plane, &who, &id, "send to").await?;
    reply(plane.runs().send(&id, checked(&b)?, &who.email).await?)
}

#[derive(Deserialize)]
struct SteerQuery {
    /// `false`: a steer to an ended turn is answered "the turn has ended" (409) instead of
    /// starting the next turn (what `hangar steer RUN` wants; `hangar send SESSION` starts it).
    #[serde(default = "yes")]
    next_turn: bool,
}

fn yes() -> bool {
    true
}

async fn steer(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Query(q): Query<SteerQuery>,
    Json(b): Json<api::Text>,
) -> ApiResult {
    run_owned(&plane, &who, &id, "steer").await?;
    let text = checked(&b)?;
    if !q.next_turn {
        let run = plane.store().run(&id).await?;
        if run.state != hangar_store::RunState::Live || !run.has_key {
            return reply(Reply::Ended { run: id });
        }
    }
    reply(plane.runs().steer(&id, text, &who.email).await?)
}

async fn interrupt(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    run_owned(&plane, &who, &id, "interrupt").await?;
    reply(plane.runs().interrupt(&id, &who.email).await?)
}

async fn transcript(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    session_seen(&plane, &who, &id, "read the transcript of").await?;
    let entries = hangar_control::transcript::transcript(plane.store(), &id).await?;
    let entries = serde_json::to_value(entries)
        .map_err(|e| ApiError::Internal(format!("the transcript as JSON: {e}")))?;
    ok(api::Transcript {
        session: id,
        entries: match entries {
            serde_json::Value::Array(a) => a,
            _ => Vec::new(),
        },
    })
}

async fn get_turn(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    let owned = owner::of_turn(&plane, &id).await?;
    who.require_reader(&plane, &owned, &format!("read turn {id}"))
        .await?;
    let turn = plane.store().turn(&id).await?;
    ok(views::turn(
        &turn,
        &views::Waiting::read(plane.store()).await?,
    ))
}

async fn steps(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    run_seen(&plane, &who, &id, "read the steps of").await?;
    let steps = plane.steps().steps(&id).await?;
    ok(api::Steps {
        run: id,
        steps: steps
            .into_iter()
            .map(views::step)
            .collect::<Result<_, _>>()?,
    })
}

#[derive(Deserialize)]
struct DiffQuery {
    from: usize,
    to: usize,
}

async fn diff(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Query(q): Query<DiffQuery>,
) -> ApiResult {
    run_seen(&plane, &who, &id, "read the diffs of").await?;
    ok(views::diff(plane.forks().diff(&id, q.from, q.to).await?)?)
}

/// The run's record: also for its environment's approvers, who need its state to answer.
async fn get_run(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    let owned = owner::of_run(&plane, &id).await?;
    who.require_approver(&plane, &owned, &format!("read run {id}"), true)
        .await?;
    ok(views::run(&plane.store().run(&id).await?))
}

async fn approvals(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    let owned = owner::of_run(&plane, &id).await?;
    who.require_approver(
        &plane,
        &owned,
        &format!("list the approvals of run {id}"),
        true,
    )
    .await?;
    let pending = plane.store().pending_approvals(&id).await?;
    ok(api::Approvals {
        approvals: pending.iter().map(views::approval).collect(),
    })
}

async fn answer(
    State(plane): S,
    who: Authed,
    Path((id, request_id)): Path<(String, String)>,
    Json(b): Json<api::Answer>,
) -> ApiResult {
    let allow = b.decision == api::Decision::Allow;
    let owned = owner::of_run(&plane, &id).await?;
    let verb = if allow { "approve" } else { "deny" };
    who.require_approver(&plane, &owned, &format!("{verb} in run {id}"), false)
        .await?;
    reply(
        plane
            .runs()
            .answer(
                &id,
                &request_id,
                allow,
                b.reason.as_deref(),
                b.input,
                &who.email,
            )
            .await?,
    )
}

/// The approvals pending in live runs that this person may answer (their own runs', those of
/// environments naming them as an approver, or every run's for an admin); `live_runs` counts
/// the live runs they may see the same way; `runs` says whose each waiting run is (the web
/// page's inbox).
async fn pending_approvals(State(plane): S, who: Authed) -> ApiResult {
    let all = plane.store().live_runs().await?;
    let mut live = Vec::with_capacity(all.len());
    for run in all {
        // A run whose records are gone half-way is nobody's to answer.
        let Ok(owned) = owner::of_run_row(&plane, &run).await else {
            continue;
        };
        // A viewer reads every pending approval (and answers none).
        if who.is_viewer() || who.may_answer(&plane, &owned).await {
            live.push((run, owned));
        }
    }
    let mut approvals = Vec::new();
    let mut runs = Vec::new();
    for (run, owned) in &live {
        let pending = plane.store().pending_approvals(&run.id).await?;
        if pending.is_empty() {
            continue;
        }
        approvals.extend(pending);
        let turn = plane.store().turn(&run.turn_id).await?;
        runs.push(api::ApprovalRun {
            run_id: run.id.clone(),
            turn_id: turn.id,
            session_id: turn.session_id,
            person: owned.person.clone(),
            environment: owned.environment.clone(),
        });
    }
    approvals.sort_by_key(|a| a.requested_at);
    ok(api::PendingApprovals {
        approvals: approvals.iter().map(views::approval).collect(),
        live_runs: live.len() as u64,
        runs,
    })
}

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    after: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

impl Page {
    /// `after` (default 0) and `limit` (default 500), refused when below 0 or 1.
    fn checked(&self) -> Result<(i64, i64), ApiError> {
        let (after, limit) = (self.after.unwrap_or(0), self.limit.unwrap_or(500));
        if after < 0 {
            return Err(ApiError::BadRequest(format!(
                "after must be 0 or more, not {after}"
            )));
        }
        if limit < 1 {
            return Err(ApiError::BadRequest(format!(
                "limit must be 1 or more, not {limit}"
            )));
        }
        Ok((after, limit))
    }
}

async fn events_page(plane: &ControlPlane, scope: EventScope<'_>, p: &Page) -> ApiResult {
    let (after, limit) = p.checked()?;
    let events = plane.store().events_after(scope, after, limit).await?;
    let next = events.last().map(|e| e.id);
    ok(api::Events {
        events: events.iter().map(views::event).collect(),
        next_after: next,
    })
}

async fn run_events(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Query(p): Query<Page>,
) -> ApiResult {
    run_seen(&plane, &who, &id, "read the events of").await?;
    events_page(&plane, EventScope::Run(&id), &p).await
}

async fn session_events(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    Query(p): Query<Page>,
) -> ApiResult {
    session_seen(&plane, &who, &id, "read the events of").await?;
    events_page(&plane, EventScope::Session(&id), &p).await
}

async fn run_stream(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(p): Query<Page>,
) -> ApiResult {
    run_seen(&plane, &who, &id, "read the events of").await?;
    p.checked()?;
    Ok(live(&plane, Some(id), None, &headers, &p))
}

async fn session_stream(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(p): Query<Page>,
) -> ApiResult {
    session_seen(&plane, &who, &id, "read the events of").await?;
    p.checked()?;
    Ok(live(&plane, None, Some(id), &headers, &p))
}

/// The live stream of a run's or a session's events, from the client's resume cursor.
fn live(
    plane: &Arc<ControlPlane>,
    run: Option<String>,
    session: Option<String>,
    headers: &HeaderMap,
    p: &Page,
) -> axum::response::Response {
    // Woken by this run's (this session's) commits only, not by every run's.
    let wake = match (&run, &session) {
        (Some(r), _) => plane.subscribe_to(WakeScope::Run(r)),
        (None, Some(s)) => plane.subscribe_to(WakeScope::Session(s)),
        (None, None) => plane.subscribe(),
    };
    let source = StoreEvents {
        plane: Arc::clone(plane),
        run,
        session,
    };
    // Replicas share PostgreSQL: another replica's commits wake the stream through the
    // database's notices while this replica hears them; until then (or if it cannot), the
    // stream reads again each second.
    let recheck = match plane.store().backend() {
        hangar_store::Backend::Postgres if !plane.hears_replicas() => {
            std::time::Duration::from_secs(1)
        }
        _ => std::time::Duration::from_secs(60),
    };
    sse::stream(source, sse::resume_cursor(headers, p.after), wake, recheck).into_response()
}

async fn audit(State(plane): S, who: Authed, Query(p): Query<Page>) -> ApiResult {
    // The audit names everyone's sessions, commands and answers: an admin's to read whole (a
    // person reads their own turns' records with /v1/turns/{id}/audit).
    who.require_admin(&plane, "read the whole audit log")
        .await?;
    let (after, limit) = p.checked()?;
    let records = plane.store().audit().records(after, limit).await?;
    ok(api::AuditRecords {
        records: records.iter().map(views::audit_record).collect(),
    })
}

async fn audit_verify(State(plane): S, _who: Authed) -> ApiResult {
    match plane.store().audit().verify().await {
        Ok(n) => ok(api::AuditVerify {
            ok: true,
            records: Some(n),
            error: None,
        }),
        Err(e) => ok(api::AuditVerify {
            ok: false,
            records: None,
            error: Some(e.to_string()),
        }),
    }
}
