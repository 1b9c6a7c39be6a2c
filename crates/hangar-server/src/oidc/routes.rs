//! The sign-in routes (no token: they are how one gets a token), with their part of the
//! OpenAPI document.

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get, post};
use hangar_api as api;
use hangar_control::ControlPlane;

use super::Oidc;
use crate::api_doc::{Endpoint, of};
use crate::error::ApiError;
use crate::extract::Json;

/// The issuer this server signs people in with, if any (a router layer).
#[derive(Clone, Debug, Default)]
pub struct SignIn(pub Option<Arc<Oidc>>);

type S = State<Arc<ControlPlane>>;
type ApiResult = Result<axum::response::Response, ApiError>;

pub(crate) fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Arc<ControlPlane>>)> {
    vec![
        ("GET", "/v1/auth", get(config)),
        ("POST", "/v1/auth/oidc/start", post(web_start)),
        ("POST", "/v1/auth/oidc/finish", post(web_finish)),
        ("POST", "/v1/auth/device", post(device_start)),
        ("POST", "/v1/auth/device/poll", post(device_poll)),
    ]
}

fn issuer(s: &SignIn) -> Result<&Oidc, ApiError> {
    s.0.as_deref().ok_or_else(|| {
        ApiError::NotFound(
            "this server signs no one in with an OpenID issuer (hangar serve --oidc-issuer); use a token made with `hangar token create`".into(),
        )
    })
}

/// An answer that carries a token: no cache may keep it.
fn token_answer(body: impl serde::Serialize) -> axum::response::Response {
    ([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response()
}

async fn config(Extension(s): Extension<SignIn>) -> ApiResult {
    Ok(Json(api::AuthConfig {
        oidc: s.0.as_deref().map(Oidc::info),
    })
    .into_response())
}

async fn web_start(
    State(plane): S,
    Extension(s): Extension<SignIn>,
    Json(b): Json<api::OidcStart>,
) -> ApiResult {
    let started = issuer(&s)?.web_start(&plane, &b.redirect_uri).await?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(started)).into_response())
}

async fn web_finish(
    State(plane): S,
    Extension(s): Extension<SignIn>,
    Json(b): Json<api::OidcFinish>,
) -> ApiResult {
    Ok(token_answer(issuer(&s)?.web_finish(&plane, b).await?))
}

async fn device_start(State(plane): S, Extension(s): Extension<SignIn>) -> ApiResult {
    let started = issuer(&s)?.device_start(&plane).await?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(started)).into_response())
}

async fn device_poll(
    State(plane): S,
    Extension(s): Extension<SignIn>,
    Json(b): Json<api::DevicePoll>,
) -> ApiResult {
    let signed_in = issuer(&s)?.device_poll(&plane, &b.flow).await?;
    Ok(token_answer(api::DevicePolled { signed_in }))
}

pub(crate) fn endpoints() -> Vec<Endpoint> {
    use crate::api_doc::e;
    vec![
        e(
            "GET",
            "/v1/auth",
            "How to sign in here (no token): the OpenID issuer, when the server has one",
            None,
            of::<api::AuthConfig>,
            200,
        ),
        e(
            "POST",
            "/v1/auth/oidc/start",
            "Begin a web sign-in at the issuer (authorization code + PKCE; the callback is the server's --public-url one when it has one); 404 without an issuer",
            Some(of::<api::OidcStart>),
            of::<api::OidcStarted>,
            200,
        ),
        e(
            "POST",
            "/v1/auth/oidc/finish",
            "End a web sign-in with the callback's code and state: a token for the person whose verified email the ID token names (403 for an unknown or unverified person, 401 for a refused proof)",
            Some(of::<api::OidcFinish>),
            of::<api::SignedIn>,
            200,
        ),
        e(
            "POST",
            "/v1/auth/device",
            "Begin a device sign-in (RFC 8628) for `hangar login`: the verification URL and user code to show",
            None,
            of::<api::DeviceStarted>,
            200,
        ),
        e(
            "POST",
            "/v1/auth/device/poll",
            "Wait up to 20 s for the person to approve a device sign-in: a token once they have, none yet otherwise",
            Some(of::<api::DevicePoll>),
            of::<api::DevicePolled>,
            200,
        ),
    ]
}
