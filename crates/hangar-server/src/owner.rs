//! Ownership (issue 20): a session, its turns and runs, and its sandbox belong to the person
//! whose sandbox it runs in (the person who made it: `sb create`, a session's start or a fork).
//! Only that person and the admins may read or act on them; an environment's
//! `governance.approvers` may also answer (and list) the approvals of its runs. A refusal is a
//! 403 saying who may, audited as `access.refused` (the same path as `Authed::require_admin`).
//!
//! The rule lives at the edge, beside `Authed`, because it is about who a request speaks for;
//! the control plane below acts for whoever the edge let through.

use hangar_control::ControlPlane;
use hangar_store::{Role, Run, Sandbox, Session, StoreError};
use serde_json::Value;

use crate::auth::Authed;
use crate::error::ApiError;

/// What a resource's owner is: the sandbox its work runs in.
#[derive(Clone, Debug)]
pub(crate) struct Owned {
    /// The owner's email.
    pub person: String,
    /// The sandbox's environment (where extra approvers come from).
    pub environment: String,
}

impl From<&Sandbox> for Owned {
    fn from(sb: &Sandbox) -> Owned {
        Owned {
            person: sb.person.clone(),
            environment: sb.environment.clone(),
        }
    }
}

/// The owner of a sandbox.
pub(crate) async fn of_sandbox(plane: &ControlPlane, id: &str) -> Result<Owned, ApiError> {
    match plane.store().sandbox(id).await {
        Ok(sb) => Ok(Owned::from(&sb)),
        Err(StoreError::NotFound { .. }) => Err(ApiError::NotFound(format!(
            "no sandbox {id} (`hangar sb list` shows them)"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The owner of a session (its sandbox's person).
pub(crate) async fn of_session(plane: &ControlPlane, id: &str) -> Result<Owned, ApiError> {
    let s = plane.store().session(id).await?;
    of_session_row(plane, &s).await
}

pub(crate) async fn of_session_row(plane: &ControlPlane, s: &Session) -> Result<Owned, ApiError> {
    of_sandbox(plane, &s.sandbox_id).await
}

/// The owner of a turn (its session's).
pub(crate) async fn of_turn(plane: &ControlPlane, id: &str) -> Result<Owned, ApiError> {
    let t = plane.store().turn(id).await?;
    of_session(plane, &t.session_id).await
}

/// The owner of a run (its turn's), in one read of the store.
pub(crate) async fn of_run(plane: &ControlPlane, id: &str) -> Result<Owned, ApiError> {
    let (person, environment) = plane.store().run_owner(id).await?;
    Ok(Owned {
        person,
        environment,
    })
}

pub(crate) async fn of_run_row(plane: &ControlPlane, r: &Run) -> Result<Owned, ApiError> {
    of_turn(plane, &r.turn_id).await
}

/// The extra approvers an environment names (`governance.approvers`); none when the
/// environment is gone or names none.
pub(crate) async fn approvers(plane: &ControlPlane, environment: &str) -> Vec<String> {
    let Ok(env) = plane.sandboxes().environment(environment).await else {
        return Vec::new();
    };
    env.spec
        .get("governance")
        .and_then(|g| g.get("approvers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(hangar_store::normal_email)
                .collect()
        })
        .unwrap_or_default()
}

impl Authed {
    /// Whether this person may act on what `owned` describes: its owner (a member; a viewer
    /// acts on nothing, not even what they made as a member before) or an admin.
    pub(crate) fn owns(&self, owned: &Owned) -> bool {
        self.is_admin() || (self.role == Role::Member && owned.person == self.email)
    }

    /// Whether this person may read what `owned` describes: its owner, an admin, or a viewer
    /// (who reads the whole team's work).
    pub(crate) fn sees(&self, owned: &Owned) -> bool {
        self.is_viewer() || self.owns(owned) || owned.person == self.email
    }

    /// Refuses (403, audited) unless [`Authed::sees`]; `what` as for
    /// [`Authed::require_owner`].
    pub(crate) async fn require_reader(
        &self,
        plane: &ControlPlane,
        owned: &Owned,
        what: &str,
    ) -> Result<(), ApiError> {
        if self.sees(owned) {
            return Ok(());
        }
        // Said as the owner rule says it (the web page and scripts match on it), then who else.
        let who = format!("{} (the owner) or an admin", owned.person);
        let what = format!("{what} (and a viewer)");
        Err(self.refused(plane, &who, &what, Some(&owned.person)).await)
    }

    /// Refuses (403, audited) unless this person owns `owned` or is an admin; `what` says what
    /// was asked, as in "only alice@example.com (the owner) or an admin may WHAT".
    pub(crate) async fn require_owner(
        &self,
        plane: &ControlPlane,
        owned: &Owned,
        what: &str,
    ) -> Result<(), ApiError> {
        if self.owns(owned) {
            return Ok(());
        }
        let who = format!("{} (the owner) or an admin", owned.person);
        Err(self.refused(plane, &who, what, Some(&owned.person)).await)
    }

    /// Whether this person may answer approvals of a run `owned` describes: its owner, an
    /// admin, or one of its environment's approvers.
    pub(crate) async fn may_answer(&self, plane: &ControlPlane, owned: &Owned) -> bool {
        self.owns(owned)
            || (self.role != Role::Viewer
                && approvers(plane, &owned.environment)
                    .await
                    .contains(&self.email))
    }

    /// Refuses (403, audited) unless [`Authed::may_answer`]; `reading` (the run's record or
    /// its pending approvals, not an answer) lets a viewer through too.
    pub(crate) async fn require_approver(
        &self,
        plane: &ControlPlane,
        owned: &Owned,
        what: &str,
        reading: bool,
    ) -> Result<(), ApiError> {
        if (reading && self.sees(owned)) || self.owns(owned) {
            return Ok(());
        }
        // Only for someone else: the environment's approvers (a read of the store).
        let extra = approvers(plane, &owned.environment).await;
        // An approver named by the environment who is a viewer still answers nothing.
        if self.owns(owned) || (self.role != Role::Viewer && extra.contains(&self.email)) {
            return Ok(());
        }
        let who = if extra.is_empty() {
            format!("{} (the owner) or an admin", owned.person)
        } else {
            format!(
                "{} (the owner), an approver of environment {} ({}) or an admin",
                owned.person,
                owned.environment,
                extra.join(", ")
            )
        };
        Err(self.refused(plane, &who, what, Some(&owned.person)).await)
    }

    /// Refuses (403, audited) a member's session on a plain folder: it would run the agent
    /// as the server's own user.
    pub(crate) async fn require_admin_for_folder(
        &self,
        plane: &ControlPlane,
    ) -> Result<(), ApiError> {
        if self.is_admin() {
            return Ok(());
        }
        let e = self
            .refused(
                plane,
                "an admin",
                "start a session on a plain folder (no_sandbox: it runs as the server's own user); leave no_sandbox out to run in a sandbox, or name an environment",
                None,
            )
            .await;
        Err(e)
    }
}
