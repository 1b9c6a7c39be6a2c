//! Which types are request bodies: a client sends only these, so a body is built from the API's
//! own fields (a renamed one breaks the client's build), never from hand-written JSON.

use serde::Serialize;

/// A request body of the API. Implemented by the request types only: a client that takes a
/// `RequestBody` cannot be handed an ad-hoc `serde_json::Value`.
pub trait RequestBody: Serialize {}

/// The body of a POST that takes nothing (`{}`), e.g. `POST /v1/runs/{id}/interrupt`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Empty {}

macro_rules! request_bodies {
    ($($t:ty),+ $(,)?) => { $(impl RequestBody for $t {})+ };
}

request_bodies!(
    Empty,
    crate::StartSession,
    crate::Text,
    crate::Answer,
    crate::ForkRequest,
    crate::CreateSandbox,
    crate::ExecRequest,
    crate::AttachRequest,
    crate::AttachInput,
    crate::AttachResize,
    crate::CredentialValue,
    crate::EnvironmentSpec,
    crate::AddPerson,
    crate::CreateToken,
    crate::OidcStart,
    crate::OidcFinish,
    crate::DevicePoll,
);
