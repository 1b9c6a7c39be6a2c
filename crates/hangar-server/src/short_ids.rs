//! Short ids in paths (issue 21): `/v1/runs/3fa9/steer` is `/v1/runs/run-3fa9…/steer` when one
//! run's id starts with `run-3fa9`, for every route under `/v1/runs`, `/v1/sessions`,
//! `/v1/turns` and `/v1/sandboxes`, and a request id under `/v1/runs/{id}/approvals/` the same
//! within its run. The path is rewritten before routing, so each handler, its ownership check
//! and its audit record see the whole id, and the CLI and the web page get prefixes for free.
//!
//! Only a caller whose token is good has a prefix looked up (no one without a token learns
//! whether ids exist); a prefix that names more than one id is a 400 that says to give more of
//! it, without naming the others (they may be other people's). A prefix that names none is left
//! as it is: the route answers 404 as for any unknown id.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hangar_control::ControlPlane;
use hangar_store::{IdKind, Resolved};

use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path};
use crate::owner;
use hangar_api as api;

/// The rewriting middleware (see the module's page); put around the whole router.
pub(crate) async fn resolve(
    State(plane): State<Arc<ControlPlane>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some((kind, at)) = candidate(req.uri().path()) else {
        return next.run(req).await;
    };
    // (The token is read out first: a `&Request` is not `Send`, so it is not held across an
    // await.)
    let token = bearer(&req);
    if !authenticated(&plane, token).await {
        return next.run(req).await;
    }
    let path = req.uri().path().to_owned();
    match rewrite(&plane, &path, kind, at).await {
        Ok(Some(path)) => {
            let mut parts = req.uri().clone().into_parts();
            let pq = match req.uri().query() {
                Some(q) => format!("{path}?{q}"),
                None => path,
            };
            match pq.parse() {
                Ok(pq) => {
                    parts.path_and_query = Some(pq);
                    if let Ok(uri) = axum::http::Uri::from_parts(parts) {
                        *req.uri_mut() = uri;
                    }
                }
                Err(_) => return next.run(req).await,
            }
            next.run(req).await
        }
        Ok(None) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// The kind and segment index of a path's id that may be a prefix.
fn candidate(path: &str) -> Option<(IdKind, usize)> {
    let mut segs = path.split('/');
    let (Some(""), Some("v1"), Some(coll), Some(id)) =
        (segs.next(), segs.next(), segs.next(), segs.next())
    else {
        return None;
    };
    let kind = match coll {
        "runs" => IdKind::Run,
        "sessions" => IdKind::Session,
        "turns" => IdKind::Turn,
        "sandboxes" => IdKind::Sandbox,
        _ => return None,
    };
    let whole = kind.is_whole(id) && !is_request_path(path);
    (!id.is_empty() && !whole).then_some((kind, 3))
}

fn is_request_path(path: &str) -> bool {
    let segs: Vec<&str> = path.split('/').collect();
    segs.len() == 6 && segs[2] == "runs" && segs[4] == "approvals"
}

fn bearer(req: &Request) -> Option<String> {
    req.headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

async fn authenticated(plane: &ControlPlane, token: Option<String>) -> bool {
    let Some(token) = token else {
        return false;
    };
    matches!(plane.store().authenticate(&token).await, Ok(Some(_)))
}

/// The path with its id (and a request id under it) made whole; `None` when nothing changes.
async fn rewrite(
    plane: &ControlPlane,
    path: &str,
    kind: IdKind,
    at: usize,
) -> Result<Option<String>, ApiError> {
    let mut segs: Vec<String> = path.split('/').map(str::to_owned).collect();
    let mut changed = false;
    if !kind.is_whole(&segs[at]) {
        match plane.store().resolve_prefix(kind, &segs[at]).await? {
            Resolved::One(id) => {
                changed |= id != segs[at];
                segs[at] = id;
            }
            Resolved::Many => return Err(ambiguous(kind.word(), &segs[at])),
            Resolved::None => return Ok(None),
        }
    }
    // A request id that needs escaping in a path is taken only whole (by the route itself).
    let plain = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if is_request_path(path) && plain(&segs[5]) {
        let req = segs[5].clone();
        match plane.store().approval_by_prefix(&segs[at], &req).await? {
            Resolved::One(id) if id != req && plain(&id) => {
                segs[5] = id;
                changed = true;
            }
            Resolved::Many => return Err(ambiguous("permission request", &req)),
            _ => {}
        }
    }
    Ok(changed.then(|| segs.join("/")))
}

/// `GET /v1/ids/{prefix}`: the run, session, turn or sandbox a prefix (with or without its
/// `KIND-`) names among those the caller may read, and its shortest unique prefix. An id the
/// caller may not read is answered as no id at all.
pub(crate) async fn lookup(
    State(plane): State<Arc<ControlPlane>>,
    who: Authed,
    Path(prefix): Path<String>,
) -> Result<Response, ApiError> {
    let named = IdKind::ALL
        .into_iter()
        .find(|k| prefix.to_ascii_lowercase().starts_with(k.prefix()));
    let mut found: Option<(IdKind, String)> = None;
    for kind in named.map_or(IdKind::ALL.to_vec(), |k| vec![k]) {
        match plane.store().resolve_prefix(kind, &prefix).await? {
            Resolved::None => {}
            Resolved::Many => return Err(ambiguous(kind.word(), &prefix)),
            Resolved::One(id) => {
                let owned = match kind {
                    IdKind::Run => owner::of_run(&plane, &id).await,
                    IdKind::Session => owner::of_session(&plane, &id).await,
                    IdKind::Turn => owner::of_turn(&plane, &id).await,
                    IdKind::Sandbox => owner::of_sandbox(&plane, &id).await,
                };
                if !owned.is_ok_and(|o| who.sees(&o)) {
                    continue;
                }
                if found.is_some() {
                    return Err(ambiguous("run, session, turn or sandbox", &prefix));
                }
                found = Some((kind, id));
            }
        }
    }
    let Some((kind, id)) = found else {
        return Err(ApiError::NotFound(format!(
            "no run, session, turn or sandbox of yours starts with {prefix:?}"
        )));
    };
    let short = plane.store().short_id(kind, &id).await?;
    Ok(Json(api::IdInfo {
        kind: kind.word().into(),
        id,
        short,
    })
    .into_response())
}

fn ambiguous(what: &str, prefix: &str) -> ApiError {
    ApiError::BadRequest(format!(
        "{prefix:?} is the start of more than one {what}'s id: give more of its characters"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_under_the_four_collections_are_candidates() {
        let whole = format!("run-{}", "0".repeat(24));
        assert_eq!(candidate("/v1/runs/3fa/steer"), Some((IdKind::Run, 3)));
        assert_eq!(candidate("/v1/sessions/ses-3"), Some((IdKind::Session, 3)));
        assert_eq!(
            candidate("/v1/sandboxes/ab/exec"),
            Some((IdKind::Sandbox, 3))
        );
        assert_eq!(candidate(&format!("/v1/runs/{whole}/steer")), None);
        // A whole run id still has its request id looked up.
        assert_eq!(
            candidate(&format!("/v1/runs/{whole}/approvals/7d")),
            Some((IdKind::Run, 3))
        );
        assert_eq!(candidate("/v1/people/ab"), None);
        assert_eq!(candidate("/v1/runs"), None);
        assert_eq!(candidate("/v1/runs/"), None);
        assert_eq!(candidate("/ui/runs/3fa"), None);
    }
}
