//! The request extractors every route uses (and `Json` as a response too): axum's `Json`, `Query` and `Path`, with their
//! rejections answered as the API's JSON error (`{"error":{"code","message"}}`, status 400, or
//! 415 for a body that is not `application/json`) instead of axum's plain text. The router's
//! fallbacks do the same for an unknown path (404) and a method a path does not serve (405).
//!
//! Hand-written rather than `axum-macros`' `FromRequest` derive: three small impls, one
//! dependency fewer.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequest, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;

use serde_json::Value;

use crate::error::ApiError;

/// A JSON request body.
pub struct Json<T>(pub T);

/// An optional body: none when the request has no JSON `Content-Type`.
impl<T, S> OptionalFromRequest<S> for Json<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, ApiError> {
        let body = <axum::Json<Value> as OptionalFromRequest<S>>::from_request(req, state)
            .await
            .map_err(|r| ApiError::BadRequest(format!("the request body: {}", r.body_text())))?;
        body.map(|axum::Json(v)| typed(v)).transpose()
    }
}

/// A body as the request type `T`, refused unless it is a JSON object: serde would also take a
/// struct's fields as an array (`[null, null]`), which no request of the API's document is.
fn typed<T: serde::de::DeserializeOwned>(body: Value) -> Result<Json<T>, ApiError> {
    if !body.is_object() {
        return Err(ApiError::BadRequest(
            "the request body must be a JSON object (see /v1/openapi.json)".into(),
        ));
    }
    serde_json::from_value(body)
        .map(Json)
        .map_err(|e| ApiError::BadRequest(format!("the request body: {e}")))
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
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match <axum::Json<Value> as FromRequest<S>>::from_request(req, state).await {
            Ok(axum::Json(v)) => typed(v),
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
