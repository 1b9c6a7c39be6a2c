//! `hangar serve`'s HTTP side: routing, JSON errors, bearer-token authentication and live event
//! streams (Server-Sent Events that resume from `Last-Event-ID`).
//!
//! Non-goals: no business rules here (they live in the control plane's library); this crate
//! turns HTTP into calls on a [`Backend`] and results into JSON.

pub mod auth;
pub mod error;
pub mod sse;

pub use auth::{Backend, Person};
pub use error::ApiError;
