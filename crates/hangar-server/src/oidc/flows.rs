//! The two flows and the one way they end: an identity the issuer vouched for becomes a person's
//! hangar token.

use std::time::Duration;

use hangar_api as api;
use hangar_control::ControlPlane;
use hangar_store::{FlowKind, NewToken, Role, Secret, normal_email};
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreDeviceAuthorizationResponse, CoreGenderClaim,
    CoreIdToken, CoreIdTokenClaims, CoreJwsSigningAlgorithm,
};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    DeviceCodeErrorResponseType, EmptyAdditionalClaims, IdTokenVerifier, Nonce, NonceVerifier,
    OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError,
    Scope, SignatureVerificationError, TokenResponse, core::CoreJsonWebKey,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{FLOW_LIFE, Oidc, error_chain};
use crate::error::ApiError;

/// The path of the page that takes the issuer's answer (the shell serves every `/ui/...`).
pub(crate) const CALLBACK_PATH: &str = "/ui/signin/callback";
/// The names the tokens get, so a person's token list says where each came from.
const WEB_TOKEN_NAME: &str = "web sign-in";
const DEVICE_TOKEN_NAME: &str = "hangar login";
/// The longest one device poll waits at the issuer before answering "not yet".
const POLL_SLICE: Duration = Duration::from_secs(20);

/// What a web sign-in keeps between its start and its callback (sealed in the store).
#[derive(Serialize, Deserialize)]
struct WebFlow {
    state: String,
    nonce: String,
    verifier: String,
    redirect_uri: String,
}

/// What a device sign-in keeps between polls (sealed in the store): the issuer's answer, with
/// the device code, and when the code expires (ms since the epoch).
#[derive(Serialize, Deserialize)]
struct DeviceFlow {
    details: CoreDeviceAuthorizationResponse,
    deadline_ms: i64,
}

/// Keeps a flow's state in the store until `expires_at` (ms).
async fn keep<T: Serialize>(
    plane: &ControlPlane,
    flow: &str,
    kind: FlowKind,
    state: &T,
    expires_at: i64,
) -> Result<(), ApiError> {
    let bytes = serde_json::to_vec(state)
        .map_err(|e| ApiError::Internal(format!("a sign-in flow's state: {e}")))?;
    plane
        .store()
        .put_sign_in_flow(flow, kind, &Secret::new(bytes), expires_at)
        .await?;
    Ok(())
}

/// A kept flow's state, read back.
fn state_of<T: for<'de> Deserialize<'de>>(kept: &Secret) -> Result<T, ApiError> {
    serde_json::from_slice(kept.expose())
        .map_err(|e| ApiError::Internal(format!("a kept sign-in flow does not read back: {e}")))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What the issuer said about the person.
struct Identity {
    email: Option<String>,
    verified: Option<bool>,
}

impl Identity {
    fn of(email: Option<&openidconnect::EndUserEmail>, verified: Option<bool>) -> Identity {
        Identity {
            email: email.map(|e| e.as_str().to_owned()),
            verified,
        }
    }
}

/// A refusal about the identity proof itself (401: sign in again).
fn proof(what: &str, e: &dyn std::error::Error) -> ApiError {
    ApiError::Unauthenticated(format!("sign-in refused: {what}: {}", error_chain(e)))
}

impl Oidc {
    fn client(
        &self,
    ) -> CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    > {
        CoreClient::from_provider_metadata(
            self.metadata(),
            ClientId::new(self.config.client_id.clone()),
            self.config.client_secret.clone().map(ClientSecret::new),
        )
    }

    /// The ID token checks: the crate checks the signature against the issuer's JWKS, `iss`,
    /// `aud` (and `azp`), `exp` and `iat`; asymmetric algorithms only (a symmetric one would
    /// make the client secret a signing key).
    fn verifier<'a>(
        &self,
        v: IdTokenVerifier<'a, CoreJsonWebKey>,
    ) -> IdTokenVerifier<'a, CoreJsonWebKey> {
        v.set_allowed_algs([
            CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
            CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha384,
            CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha512,
            CoreJwsSigningAlgorithm::RsaSsaPssSha256,
            CoreJwsSigningAlgorithm::EcdsaP256Sha256,
            CoreJwsSigningAlgorithm::EcdsaP384Sha384,
            CoreJwsSigningAlgorithm::EdDsa,
        ])
    }

    /// The ID token's claims, checked ([`Oidc::verifier`], and `nonce`). A token signed with a
    /// key the issuer's keys as read do not have (the issuer rotated its key) reads them again
    /// (at most once a minute) and is checked once more.
    async fn checked_claims<N: NonceVerifier + Copy>(
        &self,
        id_token: &CoreIdToken,
        nonce: N,
    ) -> Result<CoreIdTokenClaims, ApiError> {
        let mut reread = false;
        loop {
            let client = self.client();
            let verifier = self.verifier(client.id_token_verifier());
            match id_token.claims(&verifier, nonce) {
                Ok(c) => return Ok(c.clone()),
                Err(ClaimsVerificationError::SignatureVerification(
                    SignatureVerificationError::NoMatchingKey,
                )) if !reread && self.reread_jwks().await => reread = true,
                Err(e) => return Err(proof("the issuer's ID token did not check out", &e)),
            }
        }
    }

    pub(crate) fn info(&self) -> api::OidcIssuer {
        let name = openidconnect::url::Url::parse(&self.config.issuer)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| self.config.issuer.clone());
        api::OidcIssuer {
            issuer: self.config.issuer.clone(),
            name,
            device_flow: self.device_flow(),
        }
    }

    /// Begins a web sign-in: PKCE (S256), a nonce and a state, kept in the store under a new
    /// flow id. The issuer sends the browser back to the public URL's callback when the server
    /// has one, else to `redirect_uri` (the page's own).
    pub(crate) async fn web_start(
        &self,
        plane: &ControlPlane,
        redirect_uri: &str,
    ) -> Result<api::OidcStarted, ApiError> {
        let public = self
            .config
            .public_url
            .as_ref()
            .map(|u| format!("{u}{CALLBACK_PATH}"));
        let redirect_uri = public.as_deref().unwrap_or(redirect_uri);
        let bad = || {
            ApiError::BadRequest(format!(
                "redirect_uri must be this server's {CALLBACK_PATH} (http or https, no query), not {redirect_uri:?}"
            ))
        };
        let parsed = openidconnect::url::Url::parse(redirect_uri).map_err(|_| bad())?;
        if !matches!(parsed.scheme(), "http" | "https")
            || parsed.path() != CALLBACK_PATH
            || parsed.query().is_some()
            || parsed.fragment().is_some()
        {
            return Err(bad());
        }
        let redirect = RedirectUrl::new(redirect_uri.to_owned()).map_err(|_| bad())?;
        let client = self.client().set_redirect_uri(redirect.clone());
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("email".into()))
            .set_pkce_challenge(challenge)
            .url();
        let flow = CsrfToken::new_random_len(32).into_secret();
        let kept = WebFlow {
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            verifier: verifier.secret().clone(),
            redirect_uri: redirect.to_string(),
        };
        let expires_at = hangar_store::now_ms().saturating_add(ms(FLOW_LIFE));
        keep(plane, &flow, FlowKind::Web, &kept, expires_at).await?;
        Ok(api::OidcStarted {
            flow,
            state: state.into_secret(),
            authorize_url: url.to_string(),
        })
    }

    /// Ends a web sign-in: the callback's state must be the flow's; the code is exchanged with
    /// the flow's PKCE verifier; the ID token must carry the flow's nonce.
    pub(crate) async fn web_finish(
        &self,
        plane: &ControlPlane,
        b: api::OidcFinish,
    ) -> Result<api::SignedIn, ApiError> {
        // Taken before anything else: a flow is finished (or spent by a wrong state) once,
        // whichever replica gets it first.
        let Some(kept) = plane
            .store()
            .take_sign_in_flow(&b.flow, FlowKind::Web)
            .await?
        else {
            return Err(ApiError::BadRequest(format!(
                "no web sign-in {} is in progress (it finished already, or waited over 15 minutes): sign in again",
                b.flow
            )));
        };
        let w: WebFlow = state_of(&kept)?;
        if w.state.as_bytes() != b.state.as_bytes() {
            return Err(ApiError::BadRequest(
                "sign-in refused: the callback's state is not the one this sign-in sent (an answer meant for another sign-in); sign in again".into(),
            ));
        }
        let redirect = RedirectUrl::new(w.redirect_uri)
            .map_err(|e| ApiError::Internal(format!("a kept sign-in's redirect: {e}")))?;
        let client = self.client().set_redirect_uri(redirect);
        let exchange = client
            .exchange_code(AuthorizationCode::new(b.code))
            .map_err(|e| ApiError::Internal(format!("the issuer has no token endpoint: {e}")))?
            .set_pkce_verifier(PkceCodeVerifier::new(w.verifier));
        let token = exchange
            .request_async(&self.http)
            .await
            .map_err(|e| proof("the issuer did not take the sign-in code", &e))?;
        let id_token = token.id_token().ok_or_else(|| {
            ApiError::Unauthenticated(
                "sign-in refused: the issuer answered with no ID token".into(),
            )
        })?;
        let nonce = Nonce::new(w.nonce);
        let claims = self.checked_claims(id_token, &nonce).await?;
        let who = self
            .identity(
                &client,
                claims.subject(),
                Identity::of(claims.email(), claims.email_verified()),
                &token,
            )
            .await?;
        self.sign_in(plane, who, WEB_TOKEN_NAME).await
    }

    /// Begins a device sign-in at the issuer; the device code stays on the server side (the
    /// store, sealed).
    pub(crate) async fn device_start(
        &self,
        plane: &ControlPlane,
    ) -> Result<api::DeviceStarted, ApiError> {
        let Some(url) = self
            .metadata()
            .additional_metadata()
            .device_authorization_endpoint
            .clone()
        else {
            return Err(ApiError::Unavailable(format!(
                "the issuer {} offers no device flow (no device_authorization_endpoint): sign in on the web page, make a token in the person menu, and use `hangar login URL --token-stdin`",
                self.config.issuer
            )));
        };
        let client = self.client().set_device_authorization_url(url);
        let details: CoreDeviceAuthorizationResponse = client
            .exchange_device_code()
            .add_scope(Scope::new("email".into()))
            .request_async(&self.http)
            .await
            .map_err(|e| {
                ApiError::Unavailable(format!(
                    "the issuer refused to begin a device sign-in: {}",
                    error_chain(&e)
                ))
            })?;
        let flow = CsrfToken::new_random_len(32).into_secret();
        let started = api::DeviceStarted {
            flow: flow.clone(),
            verification_uri: details.verification_uri().to_string(),
            verification_uri_complete: details
                .verification_uri_complete()
                .map(|u| u.secret().clone()),
            user_code: details.user_code().secret().clone(),
            expires_in: details.expires_in().as_secs(),
        };
        let deadline_ms = hangar_store::now_ms().saturating_add(ms(details.expires_in()));
        let kept = DeviceFlow {
            details,
            deadline_ms,
        };
        keep(plane, &flow, FlowKind::Device, &kept, deadline_ms).await?;
        Ok(started)
    }

    /// Polls the issuer for a device sign-in for up to [`POLL_SLICE`]: `None` while the person
    /// has not answered yet.
    pub(crate) async fn device_poll(
        &self,
        plane: &ControlPlane,
        flow: &str,
    ) -> Result<Option<api::SignedIn>, ApiError> {
        let gone = || {
            ApiError::BadRequest(format!(
                "no device sign-in {flow} is in progress (it finished already, or its code expired): run `hangar login` again"
            ))
        };
        // Read, not taken: the flow is polled until the person answers, by any replica; it is
        // taken once the issuer grants it.
        let Some(kept) = plane.store().sign_in_flow(flow, FlowKind::Device).await? else {
            return Err(gone());
        };
        let d: DeviceFlow = state_of(&kept)?;
        let left_ms = d.deadline_ms.saturating_sub(hangar_store::now_ms());
        let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
        let client = self.client();
        let polled = client
            .exchange_device_access_token(&d.details)
            .map_err(|e| ApiError::Internal(format!("the issuer has no token endpoint: {e}")))?
            .request_async(&self.http, tokio::time::sleep, Some(left.min(POLL_SLICE)))
            .await;
        let token = match polled {
            Ok(t) => t,
            Err(RequestTokenError::ServerResponse(r))
                if *r.error() == DeviceCodeErrorResponseType::ExpiredToken
                    && hangar_store::now_ms() < d.deadline_ms =>
            {
                // Our slice ran out, not the code: the flow stays for the next poll.
                return Ok(None);
            }
            Err(e) => {
                // Denied, expired or broken at the issuer: the flow ends here.
                plane
                    .store()
                    .take_sign_in_flow(flow, FlowKind::Device)
                    .await?;
                return Err(proof("the issuer did not grant the device sign-in", &e));
            }
        };
        // Granted: the one poll that takes the flow signs the person in (two replicas polling
        // the same flow make one token).
        if plane
            .store()
            .take_sign_in_flow(flow, FlowKind::Device)
            .await?
            .is_none()
        {
            return Err(gone());
        }
        let id_token = token.id_token().ok_or_else(|| {
            ApiError::Unauthenticated(
                "sign-in refused: the issuer answered with no ID token".into(),
            )
        })?;
        // No nonce in the device flow (RFC 8628 has none): the device code never left this
        // server, so the token answers this flow.
        let claims = self
            .checked_claims(id_token, |_: Option<&Nonce>| Ok(()))
            .await?;
        let who = self
            .identity(
                &client,
                claims.subject(),
                Identity::of(claims.email(), claims.email_verified()),
                &token,
            )
            .await?;
        self.sign_in(plane, who, DEVICE_TOKEN_NAME).await.map(Some)
    }

    /// The email and whether it is verified: from the ID token, else (an issuer that keeps
    /// them for the userinfo endpoint) from userinfo for the same subject.
    async fn identity<C: OAuth2TokenResponse>(
        &self,
        client: &CoreClient<
            openidconnect::EndpointSet,
            impl openidconnect::EndpointState,
            impl openidconnect::EndpointState,
            impl openidconnect::EndpointState,
            openidconnect::EndpointMaybeSet,
            openidconnect::EndpointMaybeSet,
        >,
        subject: &openidconnect::SubjectIdentifier,
        from_token: Identity,
        token: &C,
    ) -> Result<Identity, ApiError> {
        if from_token.email.is_some() {
            return Ok(from_token);
        }
        let req = client
            .user_info(token.access_token().clone(), Some(subject.clone()))
            .map_err(|_| {
                ApiError::Forbidden(
                    "sign-in refused: the issuer's ID token has no email and it has no userinfo endpoint; hangar maps people by verified email (ask for the email scope)".into(),
                )
            })?;
        let info: openidconnect::UserInfoClaims<EmptyAdditionalClaims, CoreGenderClaim> = req
            .request_async(&self.http)
            .await
            .map_err(|e| proof("the issuer's userinfo did not check out", &e))?;
        Ok(Identity::of(info.email(), info.email_verified()))
    }

    /// An identity becomes a token: a verified email of a person who is in (or, configured so,
    /// a new member; never a person an admin removed).
    async fn sign_in(
        &self,
        plane: &ControlPlane,
        who: Identity,
        token_name: &str,
    ) -> Result<api::SignedIn, ApiError> {
        let issuer = &self.config.issuer;
        let Some(email) = who.email.as_deref().map(normal_email) else {
            return Err(ApiError::Forbidden(format!(
                "sign-in refused: {issuer} gave no email for this identity; hangar maps people by verified email (the client must be allowed the email scope)"
            )));
        };
        let actor = format!("oidc:{issuer}");
        let refuse = |why: String| {
            let detail = json!({"email": email, "issuer": issuer, "why": why});
            let actor = actor.clone();
            async move {
                // A refusal that cannot be recorded is still a refusal.
                if let Err(e) = plane
                    .store()
                    .audit()
                    .append(&actor, "signin.refused", &detail)
                    .await
                {
                    return ApiError::from(e);
                }
                ApiError::Forbidden(format!("sign-in refused: {why}"))
            }
        };
        if who.verified != Some(true) {
            return Err(refuse(format!(
                "{email} is not a verified email at {issuer}; verify it there, then sign in again"
            ))
            .await);
        }
        let (role, added) = match plane.store().person(&email).await? {
            Some(p) if p.removed_at.is_none() => (p.role, false),
            Some(_) => {
                return Err(refuse(format!(
                    "{email} was removed from this hangar; an admin adds them again (`hangar person add {email}`)"
                ))
                .await);
            }
            None if self.config.create_members => {
                let p = plane
                    .store()
                    .add_person(&email, Role::Member, &actor)
                    .await?;
                (p.role, true)
            }
            None => {
                return Err(refuse(format!(
                    "{email} signed in at {issuer} but is not a person here; an admin adds them (`hangar person add {email}`, or POST /v1/people)"
                ))
                .await);
            }
        };
        let made = plane
            .store()
            .create_token(NewToken {
                person: &email,
                name: token_name,
                lifetime_ms: hangar_store::DEFAULT_LIFETIME_MS,
                actor: &email,
            })
            .await?;
        Ok(api::SignedIn {
            person: email,
            role: crate::people::role(role),
            token_id: made.id.clone(),
            expires_at: made.expires_at,
            token: made.token.clone(),
            added,
        })
    }
}
