//! The one table from error kinds to HTTP statuses. Every error body is
//! `{"error":{"code":"…","message":"…"}}` with a message a person can act on.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hangar_api::{ErrorBody, ErrorCode, ErrorDetail};

/// What went wrong, in kinds that map to statuses.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No or a bad bearer token.
    #[error("{0}")]
    Unauthenticated(String),
    /// The token is good but may not do this.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed or names impossible things.
    #[error("{0}")]
    BadRequest(String),
    /// The request body is not JSON (its `Content-Type`).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The path is served, but not with this method.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The state does not allow it now (e.g. the turn has ended).
    #[error("{0}")]
    Conflict(String),
    /// The driver refused a command (its reason).
    #[error("{0}")]
    Refused(String),
    /// This machine lacks something the request needs (a program, a daemon, an image).
    #[error("{0}")]
    Unavailable(String),
    /// Another replica holds what the request is about: it is passed on to `url`
    /// (`forward.rs`), and answered 503 with the message if it cannot be.
    #[error("{message}")]
    Elsewhere { url: String, message: String },
    /// Something on our side failed; the message says what.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// (status, code) for each kind: the one table.
    pub fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        match self {
            ApiError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
            ApiError::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UnsupportedMediaType,
            ),
            ApiError::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, ErrorCode::MethodNotAllowed)
            }
            ApiError::Conflict(_) => (StatusCode::CONFLICT, ErrorCode::Conflict),
            ApiError::Refused(_) => (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::Refused),
            ApiError::Unavailable(_) | ApiError::Elsewhere { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable)
            }
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let forward = match &self {
            ApiError::Elsewhere { url, .. } => Some(crate::forward::To(url.clone())),
            _ => None,
        };
        if status.is_server_error() && forward.is_none() {
            tracing::error!(?code, message = %self, "request failed");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message: self.to_string(),
            },
        };
        let mut resp = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        if let Some(to) = forward {
            resp.extensions_mut().insert(to);
        }
        resp
    }
}

impl From<hangar_store::StoreError> for ApiError {
    fn from(e: hangar_store::StoreError) -> ApiError {
        use hangar_store::StoreError as S;
        match e {
            S::NotFound { .. } => ApiError::NotFound(e.to_string()),
            S::Conflict(_)
            | S::AlreadyAnswered { .. }
            | S::BadTransition { .. }
            | S::CursorMoved { .. } => ApiError::Conflict(e.to_string()),
            S::Invalid(_) => ApiError::BadRequest(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<hangar_control::ControlError> for ApiError {
    fn from(e: hangar_control::ControlError) -> ApiError {
        use hangar_control::ControlError as C;
        match e {
            C::Store(s) => s.into(),
            C::TurnRefused { why, .. } => (*why).into(),
            C::Invalid(m) => ApiError::BadRequest(m),
            C::NotFound(m) => ApiError::NotFound(m),
            C::WrongState(m) => ApiError::Conflict(m),
            C::NotAllowed(m) => ApiError::Forbidden(m),
            C::Refused(m) => ApiError::Refused(m),
            C::Unavailable(m) => ApiError::Unavailable(m),
            C::Elsewhere { url, message } => ApiError::Elsewhere { url, message },
            other => ApiError::Internal(other.to_string()),
        }
    }
}
