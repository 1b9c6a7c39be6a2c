//! The request extractors every route uses (and `Json` as a response too): axum's `Json`, `Query` and `Path`, with their
//! rejections answered as the API's JSON error (`{"error":{"code","message"}}`, status 400, or
//! 415 for a body that is not `application/json`) instead of axum's plain text. The router's
//! fallbacks do the same for an unknown path (404) and a method a path does not serve (405).
//!
//! Hand-written rather than `axum-macros`' `FromRequest` derive: three small impls, one
//! dependency fewer.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequest, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;

use crate::error::ApiError;

/// A JSON request body.
pub struct Json<T>(pub T);

/// An optional body: none when the request has no JSON `Content-Type`.
impl<T, S> OptionalFromRequest<S> for Json<T>
where
    axum::Json<T>: OptionalFromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, ApiError> {
        <axum::Json<T> as OptionalFromRequest<S>>::from_request(req, state)
            .await
            .map(|v| v.map(|axum::Json(v)| Json(v)))
            .map_err(|r| ApiError::BadRequest(format!("the request body: {}", r.body_text())))
    }
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// The query string.
pub struct Query<T>(pub T);

/// The path's parameters.
pub struct Path<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(r) if r.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE => Err(
                ApiError::UnsupportedMediaType(format!("{}; send the body as JSON", r.body_text())),
            ),
            Err(r) => Err(ApiError::BadRequest(format!(
                "the request body: {}",
                r.body_text()
            ))),
        }
    }
}

impl<T, S> FromRequestParts<S> for Query<T>
where
    axum::extract::Query<T>: FromRequestParts<S, Rejection = QueryRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Query(v))
            .map_err(|r| ApiError::BadRequest(format!("the query string: {}", r.body_text())))
    }
}

impl<T, S> FromRequestParts<S> for Path<T>
where
    axum::extract::Path<T>: FromRequestParts<S, Rejection = PathRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| Path(v))
            .map_err(|r| ApiError::BadRequest(format!("the path: {}", r.body_text())))
    }
}

/// The router's answer to a path it does not serve.
pub(crate) async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!(
        "no such route: {}; the API's routes are in /v1/openapi.json",
        uri.path()
    ))
}

/// The router's answer to a method a path does not serve.
pub(crate) async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!(
        "{method} is not served at {}; the API's routes are in /v1/openapi.json",
        uri.path()
    ))
}

/// A whole number as JSON Schema's `integer` allows it (`80` or `80.0`), for `deserialize_with`.
pub(crate) fn whole<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<u64>,
{
    use serde::Deserialize;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Whole(u64),
        Float(f64),
    }
    let n = match Number::deserialize(d)? {
        Number::Whole(n) => Some(n),
        // Below 2^53 every whole float is exact.
        Number::Float(f) if f.fract() == 0.0 && (0.0..9_007_199_254_740_992.0).contains(&f) => {
            Some(f as u64)
        }
        Number::Float(_) => None,
    };
    n.and_then(|n| T::try_from(n).ok()).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "expected a whole number that fits in {}",
            std::any::type_name::<T>()
        ))
    })
}
