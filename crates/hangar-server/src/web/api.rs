//! The API routes the web page needed beyond the CLI's: who the token belongs to, the sessions
//! board (each session with its sandbox, person, turns, tokens and cost, and the fork it was made
//! as, in one answer), and the audit records of one turn. Registered in `routes::routes` and
//! documented in `api_doc`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hangar_api as api;
use hangar_control::ControlPlane;
use hangar_store::{Session, StoreError};
use serde::Deserialize;
use serde_json::Value;

use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path, Query};
use crate::views;

type S = State<Arc<ControlPlane>>;

/// How many sessions the board lists by default, and at most.
const BOARD_DEFAULT: usize = 100;
const BOARD_MAX: usize = 1000;

/// `GET /v1/me`: the person the token belongs to.
pub(crate) async fn me(who: Authed) -> Response {
    Json(api::Me {
        role: crate::people::role(who.role),
        person: who.email,
        token_id: who.token_id,
    })
    .into_response()
}

#[derive(Deserialize)]
pub(crate) struct BoardQuery {
    /// Only this session.
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// `GET /v1/board`: sessions with a permission request waiting first, then the newest, each with its sandbox and person, its turns
/// (without their manifests), its latest turn's state, the sums of its turns' tokens and cost, and
/// the fork's record when it was made as one.
pub(crate) async fn board(
    State(plane): S,
    who: Authed,
    Query(q): Query<BoardQuery>,
) -> Result<Response, ApiError> {
    if q.limit == Some(0) {
        return Err(ApiError::BadRequest("limit must be 1 or more".into()));
    }
    let mut sessions = match &q.session {
        Some(id) => {
            let owned = crate::owner::of_session(&plane, id).await?;
            who.require_reader(&plane, &owned, &format!("read session {id}"))
                .await?;
            vec![plane.store().session(id).await?]
        }
        None => plane.store().sessions(None).await?,
    };
    // Only what this person may see (an admin sees every session).
    if !who.is_admin() {
        let mut mine = Vec::with_capacity(sessions.len());
        for s in sessions {
            if who.sees(&crate::owner::of_session_row(&plane, &s).await?) {
                mine.push(s);
            }
        }
        sessions = mine;
    }
    // What waits for a person first, then the newest.
    let waiting = views::Waiting::read(plane.store()).await?;
    sessions.sort_by(|a, b| {
        (waiting.session(&b.id) > 0)
            .cmp(&(waiting.session(&a.id) > 0))
            .then(b.created_at.cmp(&a.created_at))
            .then(b.id.cmp(&a.id))
    });
    sessions.truncate(q.limit.unwrap_or(BOARD_DEFAULT).clamp(1, BOARD_MAX));
    let mut rows = Vec::with_capacity(sessions.len());
    for s in &sessions {
        rows.push(board_row(&plane, s, &waiting).await?);
    }
    Ok(Json(api::Board { sessions: rows }).into_response())
}

async fn board_row(
    plane: &ControlPlane,
    s: &Session,
    waiting: &views::Waiting,
) -> Result<api::BoardRow, ApiError> {
    let sandbox = match plane.store().sandbox(&s.sandbox_id).await {
        Ok(sb) => Some(views::sandbox_brief(&sb)),
        Err(StoreError::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let turns = plane.store().turns(&s.id).await?;
    let mut usage = hangar_store::Usage::default();
    let mut cost: Option<f64> = None;
    for t in &turns {
        usage = usage.saturating_add(t.usage);
        if let Some(c) = t.cost_usd {
            cost = Some(cost.unwrap_or(0.0) + c);
        }
    }
    let fork = plane.steps().fork_of(&s.id).await?;
    let summaries: Vec<api::TurnSummary> = turns
        .iter()
        .map(|t| views::turn_summary(t, waiting))
        .collect();
    Ok(api::BoardRow {
        session: views::session(s),
        person: sandbox.as_ref().map(|sb| sb.person.clone()),
        sandbox,
        state: turns.last().map(|t| t.state),
        phase: summaries.last().map(|t| t.phase),
        waiting: waiting.session(&s.id),
        usage: views::usage(usage),
        cost_usd: cost,
        turns: summaries,
        fork,
    })
}

/// `GET /v1/turns/{id}/audit`: the audit records about this turn: its run's key, commands and
/// answers, its refusal or handed-back messages, and (for a session's first turn) the session's
/// start. Same record shape as `GET /v1/audit`.
pub(crate) async fn turn_audit(
    State(plane): S,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let owned = crate::owner::of_turn(&plane, &id).await?;
    who.require_reader(&plane, &owned, &format!("read the audit of turn {id}"))
        .await?;
    let turn = plane.store().turn(&id).await?;
    let about = |detail: &Value| -> bool {
        let is = |key: &str, want: &str| detail.get(key).and_then(Value::as_str) == Some(want);
        is("turn", &turn.id)
            || turn.run_id.as_deref().is_some_and(|r| is("run", r))
            || (turn.index == 0 && is("session", &turn.session_id))
    };
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let page = plane.store().audit().records(after, 1000).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for r in &page {
            let detail: Value = serde_json::from_str(&r.detail).unwrap_or(Value::Null);
            if about(&detail) {
                rows.push(views::audit_record(r));
            }
        }
    }
    Ok(Json(api::TurnAudit {
        turn: id,
        records: rows,
    })
    .into_response())
}
