//! Bearer-token authentication. Tokens are made by `hangar token create --person EMAIL`; the
//! store keeps only their hashes.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use hangar_control::ControlPlane;

use crate::error::ApiError;

/// The authenticated person of a request. Extracting it refuses requests without a valid
/// `Authorization: Bearer <token>` header.
#[derive(Clone, Debug)]
pub struct Authed {
    pub email: String,
    /// The token's id (what a relayed attach is bound to).
    pub token_id: String,
}

impl FromRequestParts<Arc<ControlPlane>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        plane: &Arc<ControlPlane>,
    ) -> Result<Self, Self::Rejection> {
        let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).ok_or_else(|| {
            ApiError::Unauthenticated(
                "this API needs a token: send `Authorization: Bearer <token>` (make one with `hangar token create --person EMAIL`, then set HANGAR_TOKEN)".into(),
            )
        })?;
        let token = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ApiError::Unauthenticated(
                    "the Authorization header must be `Bearer <token>`".into(),
                )
            })?;
        match plane.store().authenticate(token).await? {
            Some(p) => Ok(Authed {
                email: p.email,
                token_id: p.token_id,
            }),
            None => Err(ApiError::Unauthenticated(
                "the token is unknown or revoked; make a new one with `hangar token create --person EMAIL`".into(),
            )),
        }
    }
}
