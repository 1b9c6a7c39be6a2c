//! Signing in with the team's OpenID Connect issuer: `/v1/auth` (how to sign in here), the web
//! page's authorization code flow with PKCE (`/v1/auth/oidc/start`, `/v1/auth/oidc/finish`) and
//! `hangar login`'s device flow (`/v1/auth/device`, `/v1/auth/device/poll`). Each ends in a hangar
//! token with a life, made for the person whose verified email the issuer vouched for.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `GET /v1/auth` (no token): how a person signs in to this server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuthConfig {
    /// The OpenID Connect issuer, when this server signs people in with one; absent, only tokens
    /// made with `hangar token create` work.
    pub oidc: Option<OidcIssuer>,
}

/// The issuer this server trusts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OidcIssuer {
    /// Its URL (`iss`).
    pub issuer: String,
    /// What to call it on a button: its host name.
    pub name: String,
    /// Whether `hangar login` can use the device flow with it.
    pub device_flow: bool,
}

/// `POST /v1/auth/oidc/start`: begin a web sign-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OidcStart {
    /// Where the issuer sends the browser back: this server's `/ui/signin/callback` as the page
    /// sees it (the issuer checks it against the client's registered URIs). A server started with
    /// `--public-url` sends its own public callback instead.
    pub redirect_uri: String,
}

/// A web sign-in begun: send the browser to `authorize_url`, keep `flow` and `state` (the page's
/// own session storage) for the callback.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OidcStarted {
    pub flow: String,
    pub state: String,
    pub authorize_url: String,
}

/// `POST /v1/auth/oidc/finish`: the callback's `code` and `state`, with the flow they belong to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OidcFinish {
    pub flow: String,
    pub state: String,
    pub code: String,
}

/// A sign-in that ended in a token (its only copy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SignedIn {
    pub person: String,
    pub role: crate::Role,
    /// The token's id (what `DELETE /v1/tokens/{id}` revokes at sign-out).
    pub token_id: String,
    /// When the token stops working (ms since the epoch).
    pub expires_at: i64,
    pub token: String,
    /// Whether the person was added by this sign-in (as a member).
    pub added: bool,
}

/// `POST /v1/auth/device` (no body): begin a device sign-in. Show `verification_uri` and
/// `user_code`, then poll with `flow`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceStarted {
    pub flow: String,
    pub verification_uri: String,
    /// The same with the code filled in, when the issuer gives one.
    pub verification_uri_complete: Option<String>,
    pub user_code: String,
    /// Seconds the code lives.
    pub expires_in: u64,
}

/// `POST /v1/auth/device/poll`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DevicePoll {
    pub flow: String,
}

/// The answer to a poll: `signed_in` once the person has approved at the issuer, absent while
/// they have not (poll again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DevicePolled {
    pub signed_in: Option<SignedIn>,
}
