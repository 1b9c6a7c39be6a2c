//! Sign-in with the team's OpenID Connect issuer (`hangar serve --oidc-issuer URL`): discovery
//! (`.well-known/openid-configuration` and its JWKS, once at start), the web page's authorization
//! code flow with PKCE (S256), and `hangar login`'s device flow (RFC 8628). Both end the same way
//! (`identity`): the ID token's signature, `iss`, `aud`, `exp` (and, for the code flow, `nonce`)
//! are checked by the `openidconnect` crate, only a *verified* email maps to a person, an unknown
//! person is refused (403) or added as a member when the config says so, and the person gets a
//! hangar token with the normal life (the tokens of `hangar token create`).
//!
//! The state of a flow in progress (PKCE verifier, nonce, device code) is kept in the store,
//! sealed with the vault key under the hash of a random flow id the client holds
//! (`hangar_store::Store::put_sign_in_flow`): the issuer's callback or a device poll may come to
//! any replica sharing the database, or after a restart, and a flow is finished at most once
//! (taken, across replicas). The browser and the CLI never see the verifier, the device code or
//! the client secret.
//!
//! The issuer's keys (JWKS) are read at start, and again when an ID token names a key id they
//! do not have (the issuer rotated its key), at most once a minute (an unknown key id is no
//! reason to hammer the issuer).
//!
//! Non-goals: no refresh tokens, no logout at the issuer (signing out revokes the hangar token).

mod flows;
pub(crate) mod routes;

use std::sync::{Mutex, RwLock};
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
    /// Where people reach this server (`hangar serve --public-url`, behind a proxy): the
    /// issuer sends the browser back to its `/ui/signin/callback`. None: to the callback on
    /// the address the web page was loaded from.
    pub public_url: Option<String>,
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
    #[error(
        "--public-url {0:?} is not this server's public address: {1} (give the scheme and host people use, like https://hangar.example.com, with no path, query or fragment)"
    )]
    BadPublicUrl(String, String),
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

/// How long a begun web flow waits for its person (a device flow: as long as the issuer says).
const FLOW_LIFE: Duration = Duration::from_secs(15 * 60);

/// The shortest time between two reads of the issuer's keys after the one at start.
const JWKS_REREAD_GAP: Duration = Duration::from_secs(60);

/// A trusted issuer, discovered.
pub struct Oidc {
    config: OidcConfig,
    /// The issuer's configuration and keys; the keys are replaced when they are read again.
    metadata: RwLock<Metadata>,
    http: reqwest::Client,
    /// When the keys were last read again (not at start), for [`JWKS_REREAD_GAP`].
    jwks_reread: Mutex<Option<Instant>>,
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
    pub async fn discover(mut config: OidcConfig) -> Result<Oidc, OidcError> {
        if let Some(u) = &config.public_url {
            config.public_url = Some(public_url(u)?);
        }
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
            metadata: RwLock::new(metadata),
            http,
            jwks_reread: Mutex::new(None),
        })
    }

    /// The issuer's configuration and keys as last read.
    fn metadata(&self) -> Metadata {
        match self.metadata.read() {
            Ok(m) => m.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the issuer's keys again, unless they were read again less than
    /// [`JWKS_REREAD_GAP`] ago; true when new keys are in place.
    async fn reread_jwks(&self) -> bool {
        {
            let Ok(mut last) = self.jwks_reread.lock() else {
                return false;
            };
            if last.is_some_and(|at| at.elapsed() < JWKS_REREAD_GAP) {
                return false;
            }
            *last = Some(Instant::now());
        }
        let url = self.metadata().jwks_uri().clone();
        match openidconnect::JsonWebKeySet::fetch_async(&url, &self.http).await {
            Ok(jwks) => {
                let n = jwks.keys().len();
                if let Ok(mut m) = self.metadata.write() {
                    *m = m.clone().set_jwks(jwks);
                }
                tracing::info!(issuer = %self.config.issuer, keys = n, "read the OpenID issuer's keys again: an ID token named a key they did not have");
                true
            }
            Err(e) => {
                tracing::warn!(issuer = %self.config.issuer, error = %error_chain(&e), "cannot read the OpenID issuer's keys again");
                false
            }
        }
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    fn device_flow(&self) -> bool {
        self.metadata()
            .additional_metadata()
            .device_authorization_endpoint
            .is_some()
    }
}

/// A public URL as the redirect is built from it: http(s), a host, no path beyond `/`, no
/// query or fragment; without its trailing `/`.
fn public_url(u: &str) -> Result<String, OidcError> {
    let bad = |why: &str| OidcError::BadPublicUrl(u.to_owned(), why.to_owned());
    let parsed = openidconnect::url::Url::parse(u).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("it is not http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("it names no host"));
    }
    if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("the web page is served at the root: no path"));
    }
    Ok(u.trim_end_matches('/').to_owned())
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
