//! Bearer-token authentication. Tokens are made by `hangar token create --person EMAIL`; the
//! server only ever sees their hashes through the [`Backend`].

use std::future::Future;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ApiError;

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Person {
    pub email: String,
}

/// What the HTTP layer needs from the control plane to authenticate.
pub trait Backend: Send + Sync + 'static {
    /// The person a token belongs to, or `None` for an unknown or revoked token.
    fn authenticate(
        &self,
        token: &str,
    ) -> impl Future<Output = Result<Option<Person>, ApiError>> + Send;
}

/// The authenticated person of a request. Extracting it refuses requests without a valid
/// `Authorization: Bearer <token>` header.
#[derive(Clone, Debug)]
pub struct Authed(pub Person);

impl<B: Backend> FromRequestParts<Arc<B>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        backend: &Arc<B>,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| ApiError::Unauthenticated("this API needs a token: send `Authorization: Bearer <token>` (make one with `hangar token create --person EMAIL`, then set HANGAR_TOKEN)".into()))?;
        let token = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ApiError::Unauthenticated(
                    "the Authorization header must be `Bearer <token>`".into(),
                )
            })?;
        match backend.authenticate(token).await? {
            Some(p) => Ok(Authed(p)),
            None => Err(ApiError::Unauthenticated("the token is unknown or revoked; make a new one with `hangar token create --person EMAIL`".into())),
        }
    }
}
