//! Bearer-token authentication, and the one rule of who may act for whom. Tokens are made by
//! `hangar token create --person EMAIL` or `POST /v1/tokens`; the store keeps only their hashes.
//! Every request reads the store (a revoked or expired token, or a removed person's, is refused
//! at once on every replica).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use hangar_control::ControlPlane;
use hangar_store::Role;
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

    /// Refuses (403, audited `access.refused` with this person as the actor) unless they are an
    /// admin; `what` says what was asked, as in "only an admin may WHAT".
    pub async fn require_admin(&self, plane: &ControlPlane, what: &str) -> Result<(), ApiError> {
        if self.is_admin() {
            return Ok(());
        }
        Err(self.refusal(plane, what, None).await)
    }

    /// The person a request acts for: `named` (a body's `person`) when it is the caller
    /// themselves or the caller is an admin, else the caller. A member naming someone else is
    /// refused (403, audited with the member as the actor): no token speaks for another person
    /// unless an admin's does.
    pub async fn act_for(
        &self,
        plane: &ControlPlane,
        named: Option<String>,
        action: &str,
    ) -> Result<String, ApiError> {
        match named {
            Some(p) if p != self.email && !self.is_admin() => {
                let what = format!("act for another person ({action} for {p})");
                Err(self.refusal(plane, &what, Some(&p)).await)
            }
            Some(p) => Ok(p),
            None => Ok(self.email.clone()),
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
            Some(p) => Ok(Authed {
                email: p.email,
                token_id: p.token_id,
                role: p.role,
            }),
            None => Err(ApiError::Unauthenticated(
                "the token is unknown, revoked or expired, or its person was removed; make a new one with `hangar token create --person EMAIL`".into(),
            )),
        }
    }
}
