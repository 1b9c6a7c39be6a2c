//! Bearer-token authentication, and the one rule of who may act for whom. Tokens are made by
//! `hangar token create --person EMAIL` or `POST /v1/tokens`; the store keeps only their hashes.
//! Every request reads the store (a revoked or expired token, or a removed person's, is refused
//! at once on every replica).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::Method;
use axum::http::request::Parts;
use hangar_control::ControlPlane;
use hangar_store::{Role, normal_email};
use serde_json::json;

use crate::error::ApiError;

/// The authenticated person of a request. Extracting it refuses requests without a valid
/// `Authorization: Bearer <token>` header.
#[derive(Clone, Debug)]
pub struct Authed {
    pub email: String,
    /// The token's id (what a relayed attach is bound to).
    pub token_id: String,
    /// What the person may do.
    pub role: Role,
}

impl Authed {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// A viewer reads the team's work and acts on nothing.
    pub fn is_viewer(&self) -> bool {
        self.role == Role::Viewer
    }

    /// Refuses (403, audited `access.refused` with this person as the actor) unless they are an
    /// admin; `what` says what was asked, as in "only an admin may WHAT".
    pub async fn require_admin(&self, plane: &ControlPlane, what: &str) -> Result<(), ApiError> {
        if self.is_admin() {
            return Ok(());
        }
        Err(self.refusal(plane, what, None).await)
    }

    /// The person a request acts for: `named` (a body's `person`, compared without case) when
    /// it is the caller themselves or the caller is an admin, else the caller. A member naming
    /// someone else is refused (403, audited with the member as the actor): no token speaks for
    /// another person unless an admin's does. An admin naming someone who is not a person here
    /// is refused too (400, audited): what they make would belong to no one who can sign in.
    pub async fn act_for(
        &self,
        plane: &ControlPlane,
        named: Option<String>,
        action: &str,
    ) -> Result<String, ApiError> {
        let Some(p) = named.as_deref().map(normal_email) else {
            return Ok(self.email.clone());
        };
        if p == self.email {
            return Ok(p);
        }
        if !self.is_admin() {
            let what = format!("act for another person ({action} for {p})");
            return Err(self.refusal(plane, &what, Some(&p)).await);
        }
        match plane.store().person(&p).await? {
            Some(person) if person.removed_at.is_none() => Ok(p),
            found => {
                let was = if found.is_some() {
                    "was removed"
                } else {
                    "is not a person here"
                };
                let detail = json!({"asked": format!("{action} for {p}"), "for": p, "why": was});
                plane
                    .store()
                    .audit()
                    .append(&self.email, "access.refused", &detail)
                    .await?;
                Err(ApiError::BadRequest(format!(
                    "{p} {was}: add them first (`hangar person add {p}`, or POST /v1/people), then {action} for them"
                )))
            }
        }
    }

    /// The 403 for `what`, after auditing it (or the audit's own failure: a refusal that
    /// cannot be recorded is still a refusal).
    async fn refusal(
        &self,
        plane: &ControlPlane,
        what: &str,
        for_person: Option<&str>,
    ) -> ApiError {
        self.refused(plane, "an admin", what, for_person).await
    }

    /// The 403 "only WHO_MAY may WHAT; EMAIL is a ROLE", after auditing it as
    /// `access.refused` with this person as the actor (or the audit's own failure: a refusal
    /// that cannot be recorded is still a refusal).
    pub(crate) async fn refused(
        &self,
        plane: &ControlPlane,
        who_may: &str,
        what: &str,
        for_person: Option<&str>,
    ) -> ApiError {
        let detail =
            json!({"asked": what, "for": for_person, "may": who_may, "role": self.role.as_str()});
        if let Err(e) = plane
            .store()
            .audit()
            .append(&self.email, "access.refused", &detail)
            .await
        {
            return e.into();
        }
        ApiError::Forbidden(format!(
            "only {who_may} may {what}; {} is a {}",
            self.email,
            self.role.as_str()
        ))
    }
}

/// What a viewer may send besides reads: their own tokens (make one, revoke one: signing out
/// of the web page revokes its token).
fn viewer_may(method: &Method, path: &str) -> bool {
    match *method {
        Method::GET | Method::HEAD => true,
        Method::POST => path == "/v1/tokens",
        Method::DELETE => path
            .strip_prefix("/v1/tokens/")
            .is_some_and(|id| !id.is_empty() && !id.contains('/')),
        _ => false,
    }
}

impl Authed {
    /// Refuses (403, audited) a viewer's request that is not a read ([`viewer_may`]), before
    /// any route's own rule: a route added later is closed to viewers until it is a read.
    async fn viewer_gate(
        &self,
        plane: &ControlPlane,
        method: &Method,
        path: &str,
    ) -> Result<(), ApiError> {
        if self.role != Role::Viewer || viewer_may(method, path) {
            return Ok(());
        }
        let what = format!("{method} {path} (a viewer reads, and acts on nothing)");
        Err(self
            .refused(plane, "a member or an admin", &what, None)
            .await)
    }
}

impl FromRequestParts<Arc<ControlPlane>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        plane: &Arc<ControlPlane>,
    ) -> Result<Self, Self::Rejection> {
        let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).ok_or_else(|| {
            ApiError::Unauthenticated(
                "this API needs a token: send `Authorization: Bearer <token>` (make one with `hangar token create --person EMAIL`, then set HANGAR_TOKEN)".into(),
            )
        })?;
        let token = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ApiError::Unauthenticated(
                    "the Authorization header must be `Bearer <token>`".into(),
                )
            })?;
        match plane.store().authenticate(token).await? {
            Some(p) => {
                let who = Authed {
                    email: p.email,
                    token_id: p.token_id,
                    role: p.role,
                };
                who.viewer_gate(plane, &parts.method, parts.uri.path())
                    .await?;
                Ok(who)
            }
            None => Err(ApiError::Unauthenticated(
                "the token is unknown, revoked or expired, or its person was removed; make a new one with `hangar token create --person EMAIL`".into(),
            )),
        }
    }
}
