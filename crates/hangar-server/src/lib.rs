//! `hangar serve`'s HTTP side: routing, JSON errors, bearer-token authentication and live event
//! streams (Server-Sent Events that resume from `Last-Event-ID`), and the web page (`web`).
//!
//! Non-goals: no business rules here (they live in `hangar-control`); this crate turns HTTP into
//! calls on the control plane and results into JSON.

mod access;
pub mod api_doc;
pub mod auth;
pub mod error;
mod extract;
mod fork;
mod forward;
mod jwks;
pub mod metrics;
pub mod oidc;
mod owner;
mod people;
mod routes;
mod runlog;
mod sandboxes;
mod secrets;
mod short_ids;
pub mod sse;
pub mod tls;
pub mod typedefs;
mod views;
mod web;

pub use auth::Authed;
pub use error::ApiError;
pub use oidc::routes::SignIn;
pub use routes::{router, router_with};

/// Every route of the API as (method, path): the table the router is built from (a test
/// checks the OpenAPI document describes exactly these; the permission matrix test needs a
/// rule for each).
pub fn route_table() -> Vec<(&'static str, &'static str)> {
    routes::routes()
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect()
}

use std::net::SocketAddr;
use std::sync::Arc;

use hangar_control::ControlPlane;

/// Serves the API on `listener` until `shutdown` resolves, then finishes the requests in flight.
pub async fn serve<L>(
    listener: L,
    plane: Arc<ControlPlane>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    serve_with(listener, plane, SignIn::default(), shutdown).await
}

/// [`serve`], signing people in with an OpenID issuer when `sign_in` has one.
pub async fn serve_with<L>(
    listener: L,
    plane: Arc<ControlPlane>,
    sign_in: SignIn,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, router_with(plane, sign_in))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds `addr`, with a message that says what to do when it is taken.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        format!("cannot listen on {addr}: {e} (is another hangar serve running? pick another address with --listen)")
    })
}
