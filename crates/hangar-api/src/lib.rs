//! The bodies of hangar serve's HTTP API as Rust types: what every endpoint takes and answers,
//! with serde for the wire and a derived JSON Schema. The server builds its answers from these
//! types and takes its request bodies as them, the CLI builds its requests from them (only a
//! [`RequestBody`] can be sent) and reads the answers into them, and the
//! OpenAPI document (`docs/openapi.json`) and the web page's typedefs are generated from their
//! schemas, so a field is written once and a renamed one breaks the build, not a person.
//!
//! Field names and shapes are the API's contract: add fields, never rename or remove one. Closed
//! sets of words are enums spelled as on the wire.
//!
//! Non-goals: no I/O, no async, no HTTP; the route table (methods, paths, statuses, query
//! parameters) stays with the server (`hangar-server`'s `api_doc.rs`).

mod misc;
mod people;
mod request;
mod runs;
mod sandboxes;
mod schema;
mod sessions;
mod signin;
mod vocab;

pub use misc::*;
pub use people::*;
pub use request::{Empty, RequestBody};
pub use runs::*;
pub use sandboxes::*;
pub use schema::{generator, whole, whole_opt};
pub use sessions::*;
pub use signin::*;
pub use vocab::*;

/// The schema derive and generator, for the OpenAPI document.
pub use schemars;
