//! `GET /.well-known/jwks.json` (no token): the public keys of the control plane's passport
//! signing key, for Tower to trust the sandbox tokens hangar mints (`hangar_control::passport`).
//! The key is made on first use (audited), so asking for it before any passport also makes it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use hangar_control::ControlPlane;

use crate::error::ApiError;

pub(crate) async fn jwks(
    State(plane): State<Arc<ControlPlane>>,
) -> Result<axum::response::Response, ApiError> {
    let keys: hangar_api::Jwks = serde_json::from_value(plane.governance().jwks().await?)
        .map_err(|e| ApiError::Internal(format!("the control plane's JWKS: {e}")))?;
    Ok(([(header::CACHE_CONTROL, "public, max-age=300")], Json(keys)).into_response())
}
