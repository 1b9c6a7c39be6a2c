//! Forks over HTTP: `POST /v1/runs/{id}/fork` (a new sandbox and session from a step) and
//! `GET /v1/runs/{id}/forks`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hangar_api as api;
use hangar_control::{ControlPlane, ForkRequest};

use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path};
use crate::views;

pub(crate) async fn fork(
    State(plane): State<Arc<ControlPlane>>,
    who: Authed,
    Path(id): Path<String>,
    Json(b): Json<api::ForkRequest>,
) -> Result<axum::response::Response, ApiError> {
    crate::routes::run_owned(&plane, &who, &id, "fork").await?;
    let f = plane
        .forks()
        .fork(ForkRequest {
            run: id,
            step: usize::try_from(b.step).map_err(|_| {
                ApiError::BadRequest(format!("step {} is past any run's steps", b.step))
            })?,
            dir: b.dir,
            prompt: b.prompt,
            person: who.email,
        })
        .await?;
    let body = api::Forked {
        fork: f.record,
        session: views::session(&f.session),
        sandbox: views::sandbox_brief(&f.sandbox),
        turn: f
            .started
            .as_ref()
            .map(|s| views::turn(&s.turn, &views::Waiting::new())),
        run: f.started.as_ref().map(|s| views::run(&s.run)),
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

pub(crate) async fn forks(
    State(plane): State<Arc<ControlPlane>>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<axum::response::Response, ApiError> {
    crate::routes::run_seen(&plane, &who, &id, "read the forks of").await?;
    let forks = plane.steps().forks_of_run(&id).await?;
    Ok(Json(api::Forks { run: id, forks }).into_response())
}
