//! People and tokens under `/v1/people` and `/v1/tokens`, with their part of the OpenAPI
//! document. Anyone signed in lists the people; only admins add and remove them. A member sees,
//! makes and revokes their own tokens; an admin anyone's. Every change and every refusal is
//! audited with the acting person.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, delete, get, post};
use hangar_api as api;
use hangar_control::ControlPlane;
use hangar_store::{ApiToken, NewToken, PersonRecord, Role};

use crate::api_doc::{Endpoint, of};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path};

type S = State<Arc<ControlPlane>>;
type ApiResult = Result<axum::response::Response, ApiError>;

pub(crate) fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Arc<ControlPlane>>)> {
    vec![
        ("GET", "/v1/people", get(list_people)),
        ("POST", "/v1/people", post(add_person)),
        ("DELETE", "/v1/people/{email}", delete(remove_person)),
        ("GET", "/v1/tokens", get(list_tokens)),
        ("POST", "/v1/tokens", post(create_token)),
        ("DELETE", "/v1/tokens/{id}", delete(revoke_token)),
    ]
}

/// The API's word for a store role.
pub(crate) fn role(r: Role) -> api::Role {
    match r {
        Role::Admin => api::Role::Admin,
        Role::Member => api::Role::Member,
        Role::Viewer => api::Role::Viewer,
    }
}

fn person(p: PersonRecord) -> api::Person {
    api::Person {
        id: p.id,
        email: p.email,
        role: role(p.role),
        created_at: p.created_at,
    }
}

/// A token as a list shows it: no token, no hash.
pub(crate) fn token_info(t: ApiToken) -> api::TokenInfo {
    api::TokenInfo {
        id: t.id,
        person: t.person,
        name: t.name,
        created_at: t.created_at,
        expires_at: t.expires_at,
        last_used_at: t.last_used_at,
        revoked_at: t.revoked_at,
    }
}

async fn list_people(State(plane): S, _who: Authed) -> ApiResult {
    let people = plane.store().people().await?;
    Ok(Json(api::People {
        people: people.into_iter().map(person).collect(),
    })
    .into_response())
}

async fn add_person(State(plane): S, who: Authed, Json(b): Json<api::AddPerson>) -> ApiResult {
    who.require_admin(&plane, "add people").await?;
    let r = match b.role.unwrap_or(api::Role::Member) {
        api::Role::Admin => Role::Admin,
        api::Role::Member => Role::Member,
        api::Role::Viewer => Role::Viewer,
    };
    let added = plane.store().add_person(&b.email, r, &who.email).await?;
    Ok((
        StatusCode::CREATED,
        Json(api::PersonOne {
            person: person(added),
        }),
    )
        .into_response())
}

async fn remove_person(State(plane): S, who: Authed, Path(email): Path<String>) -> ApiResult {
    who.require_admin(&plane, "remove people").await?;
    // An admin removing themselves could leave the server with no admin reachable over the
    // API; another admin (or the server's machine, `hangar person rm`) may.
    if hangar_store::normal_email(&email) == who.email {
        return Err(ApiError::Conflict(format!(
            "{email} cannot remove themselves: another admin may, or `hangar person rm {email}` on the server's machine"
        )));
    }
    if !plane.store().remove_person(&email, &who.email).await? {
        return Err(ApiError::NotFound(format!("{email} is not a person here")));
    }
    Ok(Json(api::PersonRemoved { removed: email }).into_response())
}

async fn list_tokens(State(plane): S, who: Authed) -> ApiResult {
    let only = (!who.is_admin()).then_some(who.email.as_str());
    let tokens = plane.store().tokens(only).await?;
    Ok(Json(api::Tokens {
        tokens: tokens.into_iter().map(token_info).collect(),
    })
    .into_response())
}

async fn create_token(State(plane): S, who: Authed, Json(b): Json<api::CreateToken>) -> ApiResult {
    let for_person = who.act_for(&plane, b.person, "token.create").await?;
    let lifetime_ms = match b.expires.as_deref() {
        Some(e) => api::lifetime_ms(e).map_err(ApiError::BadRequest)?,
        None => hangar_store::DEFAULT_LIFETIME_MS,
    };
    let name = b.name.unwrap_or_default();
    let made = plane
        .store()
        .create_token(NewToken {
            person: &for_person,
            name: &name,
            lifetime_ms,
            actor: &who.email,
        })
        .await?;
    let body = api::TokenCreated {
        id: made.id.clone(),
        person: for_person,
        name,
        expires_at: made.expires_at,
        token: made.token.clone(),
    };
    // The one answer that carries a token: no cache may keep it.
    Ok((
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        Json(body),
    )
        .into_response())
}

async fn revoke_token(State(plane): S, who: Authed, Path(id): Path<String>) -> ApiResult {
    let Some(t) = plane.store().token(&id).await? else {
        return Err(ApiError::NotFound(format!("no token {id:?}")));
    };
    if t.person != who.email {
        who.require_admin(&plane, &format!("revoke another person's token ({id})"))
            .await?;
    }
    if !plane.store().revoke_token(&id, &who.email).await? {
        return Err(ApiError::Conflict(format!(
            "token {id} was revoked already"
        )));
    }
    Ok(Json(api::TokenRevoked { revoked: id }).into_response())
}

pub(crate) fn endpoints() -> Vec<Endpoint> {
    use crate::api_doc::e;
    vec![
        e(
            "GET",
            "/v1/people",
            "The people who are in, by email, with their roles",
            None,
            of::<api::People>,
            200,
        ),
        e(
            "POST",
            "/v1/people",
            "Add a person as an admin, a member (the default) or a viewer (admins only; 403 otherwise); emails compare without case; a person removed before is added again, without their old tokens",
            Some(of::<api::AddPerson>),
            of::<api::PersonOne>,
            201,
        ),
        e(
            "DELETE",
            "/v1/people/{email}",
            "Remove a person (admins only; 403 otherwise; not yourself, 409): every token of theirs stops working at once",
            None,
            of::<api::PersonRemoved>,
            200,
        ),
        e(
            "GET",
            "/v1/tokens",
            "Your tokens (everyone's for an admin), oldest first; never a token or its hash",
            None,
            of::<api::Tokens>,
            200,
        ),
        e(
            "POST",
            "/v1/tokens",
            "Make a token for yourself, or (admins only) for another person who is in (400 otherwise: add them first); the answer is its only copy",
            Some(of::<api::CreateToken>),
            of::<api::TokenCreated>,
            201,
        ),
        e(
            "DELETE",
            "/v1/tokens/{id}",
            "Revoke a token: your own, or anyone's as an admin (403 for a member's try at another's); it is refused at once",
            None,
            of::<api::TokenRevoked>,
            200,
        ),
    ]
}
