//! Sign-in with the team's OpenID Connect issuer (`hangar serve --oidc-issuer URL`): discovery
//! (`.well-known/openid-configuration` and its JWKS, once at start), the web page's authorization
//! code flow with PKCE (S256), and `hangar login`'s device flow (RFC 8628). Both end the same way
//! (`identity`): the ID token's signature, `iss`, `aud`, `exp` (and, for the code flow, `nonce`)
//! are checked by the `openidconnect` crate, only a *verified* email maps to a person, an unknown
//! person is refused (403) or added as a member when the config says so, and the person gets a
//! hangar token with the normal life (the tokens of `hangar token create`).
//!
//! The state of a flow in progress (PKCE verifier, nonce, device code) stays on this server, in
//! memory, keyed by a random flow id the client holds: the browser and the CLI never see the
//! verifier, the device code or the client secret.
//!
//! Non-goals: no refresh tokens, no logout at the issuer (signing out revokes the hangar token),
//! no JWKS refresh before a restart, flows do not survive a restart nor cross replicas (a person
//! starts again).

mod flows;
pub(crate) mod routes;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openidconnect::core::{
    CoreAuthDisplay, CoreClaimName, CoreClaimType, CoreClientAuthMethod, CoreGrantType,
    CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJweKeyManagementAlgorithm,
    CoreResponseMode, CoreResponseType, CoreSubjectIdentifierType,
};
use openidconnect::{
    AdditionalProviderMetadata, DeviceAuthorizationUrl, IssuerUrl, ProviderMetadata,
};
use serde::{Deserialize, Serialize};

/// How `hangar serve` trusts an issuer.
#[derive(Clone, Debug)]
pub struct OidcConfig {
    /// The issuer URL (what its ID tokens say in `iss`).
    pub issuer: String,
    /// hangar's client id at the issuer.
    pub client_id: String,
    /// The client secret, for a confidential client (sent to the token endpoint only).
    pub client_secret: Option<String>,
    /// Add a person the issuer vouches for but hangar does not know, as a member. Off by
    /// default: such a person is refused until an admin adds them.
    pub create_members: bool,
}

/// What went wrong setting up sign-in.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("the OpenID issuer URL {0:?} is not a URL: {1}")]
    BadIssuer(String, String),
    #[error(
        "cannot read the OpenID issuer's configuration at {0}/.well-known/openid-configuration: {1} (is --oidc-issuer right, and is the issuer up?)"
    )]
    Discovery(String, String),
    #[error("cannot make an HTTP client for the OpenID issuer: {0}")]
    Http(String),
}

/// The device authorization endpoint, which discovery's core metadata does not carry.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct DeviceEndpoint {
    #[serde(default)]
    device_authorization_endpoint: Option<DeviceAuthorizationUrl>,
}

impl AdditionalProviderMetadata for DeviceEndpoint {}

type Metadata = ProviderMetadata<
    DeviceEndpoint,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;

/// A flow in progress.
enum Pending {
    Web(flows::WebFlow),
    Device(flows::DeviceFlow),
}

/// How long a begun flow waits for its person.
const FLOW_LIFE: Duration = Duration::from_secs(15 * 60);

/// A trusted issuer, discovered.
pub struct Oidc {
    config: OidcConfig,
    metadata: Metadata,
    http: reqwest::Client,
    pending: Mutex<HashMap<String, (Instant, Pending)>>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.config.issuer)
            .field("client_id", &self.config.client_id)
            .finish_non_exhaustive()
    }
}

impl Oidc {
    /// Reads the issuer's configuration and keys.
    pub async fn discover(config: OidcConfig) -> Result<Oidc, OidcError> {
        let issuer = IssuerUrl::new(config.issuer.clone())
            .map_err(|e| OidcError::BadIssuer(config.issuer.clone(), e.to_string()))?;
        // No redirects: an issuer's endpoints answer themselves (the crate's advice, against
        // SSRF through a redirect).
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| OidcError::Http(e.to_string()))?;
        let metadata = Metadata::discover_async(issuer, &http)
            .await
            .map_err(|e| OidcError::Discovery(config.issuer.clone(), error_chain(&e)))?;
        Ok(Oidc {
            config,
            metadata,
            http,
            pending: Mutex::new(HashMap::new()),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    fn device_flow(&self) -> bool {
        self.metadata
            .additional_metadata()
            .device_authorization_endpoint
            .is_some()
    }

    fn put(&self, flow: &str, p: Pending) {
        if let Ok(mut m) = self.pending.lock() {
            m.retain(|_, (at, _)| at.elapsed() < FLOW_LIFE);
            m.insert(flow.to_owned(), (Instant::now(), p));
        }
    }

    /// Takes a flow out (a flow is finished at most once).
    fn take(&self, flow: &str) -> Option<Pending> {
        let mut m = self.pending.lock().ok()?;
        let (at, p) = m.remove(flow)?;
        (at.elapsed() < FLOW_LIFE).then_some(p)
    }
}

/// An error and its causes, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
