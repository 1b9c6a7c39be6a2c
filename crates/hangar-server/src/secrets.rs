//! `/v1/credentials`: secrets with an owner (issue 20). `?person=EMAIL` names a person's,
//! `?environment=NAME` an environment's, neither the server's own.
//!
//! Who may: the server's and an environment's secrets are written, removed and listed by
//! admins only; a person's by that person and admins. A refusal is a 403, audited as
//! `access.refused` (by [`Authed`]). Values are never read back through the API: a person's
//! reach only that person's turns, an environment's the turns in its sandboxes. `hangar.*`
//! names are hangar's own (see `hangar_control::credentials`).

use std::sync::Arc;

use axum::extract::State;
use hangar_api as api;
use hangar_control::{ControlPlane, credentials};
use hangar_store::SecretOwner;
use serde::Deserialize;

use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path, Query};

type S = State<Arc<ControlPlane>>;
type ApiResult = Result<axum::response::Response, ApiError>;

/// Whose secret a request is about.
#[derive(Deserialize)]
pub(crate) struct OwnerQuery {
    #[serde(default)]
    person: Option<String>,
    #[serde(default)]
    environment: Option<String>,
}

/// The owner the query names, after checking the caller may `action` its secrets.
async fn owner(
    plane: &ControlPlane,
    who: &Authed,
    q: OwnerQuery,
    action: &str,
) -> Result<SecretOwner, ApiError> {
    match (q.person, q.environment) {
        (Some(_), Some(_)) => Err(ApiError::BadRequest(
            "name one owner: ?person=EMAIL or ?environment=NAME, not both".into(),
        )),
        (Some(p), None) => {
            let p = who
                .act_for(plane, Some(p), &format!("{action} a person's credentials"))
                .await?;
            Ok(SecretOwner::Person(p))
        }
        (None, Some(e)) => {
            who.require_admin(plane, &format!("{action} an environment's credentials"))
                .await?;
            Ok(SecretOwner::Environment(e))
        }
        (None, None) => {
            who.require_admin(
                plane,
                &format!(
                    "{action} the server's credentials (your own: ?person={})",
                    who.email
                ),
            )
            .await?;
            Ok(SecretOwner::Server)
        }
    }
}

/// [`owner`], except for `hangar.*` names: every change of those through the API is refused
/// and audited as `credential.refused` by `hangar_control::credentials`, whoever asks.
async fn owner_of(
    plane: &ControlPlane,
    who: &Authed,
    name: &str,
    q: OwnerQuery,
    action: &str,
) -> Result<SecretOwner, ApiError> {
    if !name.starts_with(credentials::RESERVED_PREFIX) {
        return owner(plane, who, q, action).await;
    }
    Ok(match (q.person, q.environment) {
        (Some(p), _) => SecretOwner::Person(p),
        (None, Some(e)) => SecretOwner::Environment(e),
        (None, None) => SecretOwner::Server,
    })
}

fn ok<T: serde::Serialize>(v: T) -> ApiResult {
    Ok(axum::response::IntoResponse::into_response(axum::Json(v)))
}

pub(crate) async fn list(State(plane): S, who: Authed, Query(q): Query<OwnerQuery>) -> ApiResult {
    let owner = owner(&plane, &who, q, "list").await?;
    ok(api::CredentialNames {
        credentials: plane.store().secret_names(&owner).await?,
    })
}

pub(crate) async fn set(
    State(plane): S,
    who: Authed,
    Path(name): Path<String>,
    Query(q): Query<OwnerQuery>,
    Json(b): Json<api::CredentialValue>,
) -> ApiResult {
    let owner = owner_of(&plane, &who, &name, q, "set").await?;
    credentials::set_owned(
        plane.store(),
        &owner,
        &name,
        b.value.as_bytes(),
        &who.email,
        credentials::Origin::Api,
    )
    .await?;
    ok(api::CredentialSet { name })
}

pub(crate) async fn remove(
    State(plane): S,
    who: Authed,
    Path(name): Path<String>,
    Query(q): Query<OwnerQuery>,
) -> ApiResult {
    let owner = owner_of(&plane, &who, &name, q, "remove").await?;
    if !credentials::remove_owned(
        plane.store(),
        &owner,
        &name,
        &who.email,
        credentials::Origin::Api,
    )
    .await?
    {
        return Err(ApiError::NotFound(format!("no credential {name:?}")));
    }
    ok(api::CredentialRemoved { removed: name })
}
