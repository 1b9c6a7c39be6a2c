//! People and their roles. A token speaks for a person only while they are in this table;
//! removing a person revokes their tokens in the same transaction, so adding them again later
//! brings none of the old tokens back. Every change is audited with the acting person, in the
//! change's own transaction.

use serde_json::json;

use crate::audit::{AppendAudit, canonical_json};
use crate::db::{Cols, in_tx, read_db};
use crate::error::StoreError;
use crate::model::{PersonRecord, Role};
use crate::{Store, new_id, now_ms};

fn person_from(r: &impl Cols) -> Result<PersonRecord, StoreError> {
    Ok(PersonRecord {
        id: r.text("id")?,
        email: r.text("email")?,
        role: Role::parse(&r.text("role")?)?,
        created_at: r.int("created_at")?,
        removed_at: r.opt_int("removed_at")?,
    })
}

/// An email as hangar stores and compares it: trimmed, its ASCII letters lower-cased (issuers
/// and people write `Alice@Example.com`; the domain never depends on case and no team keeps two
/// people whose addresses differ only by it). Not Unicode lower-casing: SQLite's `lower()`,
/// which the migration that lower-cased existing rows used, does ASCII only.
pub fn normal_email(email: &str) -> String {
    email.trim().to_ascii_lowercase()
}

/// Refuses what is not an email address (the one form people are named by).
pub(crate) fn check_email(email: &str) -> Result<(), StoreError> {
    let ok = email
        .split_once('@')
        .is_some_and(|(user, host)| !user.is_empty() && !host.is_empty() && !host.contains('@'))
        && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "{email:?} is not an email address: people are named by their email, like ada@example.com"
        )))
    }
}

impl Store {
    /// Adds `email` with `role`, by `actor` (audited `person.added`). A person removed before
    /// is added again (new role, new creation time, none of their old tokens). Refused when
    /// they are already in.
    pub async fn add_person(
        &self,
        email: &str,
        role: Role,
        actor: &str,
    ) -> Result<PersonRecord, StoreError> {
        let email = &normal_email(email);
        check_email(email)?;
        let now = now_ms();
        let fresh_id = new_id("person")?;
        let detail = canonical_json(&json!({"email": email, "role": role.as_str()}));
        let added = in_tx!(self, tx => {
            let found = sqlx::query(
                "SELECT id, email, role, created_at, removed_at FROM people WHERE email = $1",
            )
                .bind(email)
                .fetch_optional(&mut *tx)
                .await?
                .as_ref()
                .map(person_from)
                .transpose()?;
            let id = match found {
                Some(p) if p.removed_at.is_none() => {
                    return Err(StoreError::Conflict(format!(
                        "{email} is already a person here ({})",
                        p.role.as_str()
                    )));
                }
                Some(p) => {
                    sqlx::query(
                        "UPDATE people SET role = $2, created_at = $3, removed_at = NULL \
                         WHERE id = $1",
                    )
                    .bind(&p.id)
                    .bind(role.as_str())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    p.id
                }
                None => {
                    sqlx::query(
                        "INSERT INTO people (id, email, role, created_at) VALUES ($1, $2, $3, $4)",
                    )
                    .bind(&fresh_id)
                    .bind(email)
                    .bind(role.as_str())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    fresh_id
                }
            };
            AppendAudit::append_audit(&mut *tx, actor, "person.added", detail, now).await?;
            PersonRecord {
                id,
                email: email.to_owned(),
                role,
                created_at: now,
                removed_at: None,
            }
        });
        // A person added back may have another role: no token of theirs is believed on what
        // was read before.
        self.forget_tokens();
        Ok(added)
    }

    /// Removes `email`, revokes every token of theirs at once and deletes the secrets they kept
    /// in the vault (model keys of someone who left the team: nobody may act for them any more,
    /// so nobody could remove them later), by `actor` (audited `person.removed` with the
    /// number of tokens revoked and the names of the secrets deleted); false if they were not
    /// in.
    pub async fn remove_person(&self, email: &str, actor: &str) -> Result<bool, StoreError> {
        let email = &normal_email(email);
        let now = now_ms();
        in_tx!(self, tx => {
            let n = sqlx::query(
                "UPDATE people SET removed_at = $2 WHERE email = $1 AND removed_at IS NULL",
            )
            .bind(email)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                return Ok(false);
            }
            let revoked = sqlx::query(
                "UPDATE api_tokens SET revoked_at = $2 WHERE person = $1 AND revoked_at IS NULL",
            )
            .bind(email)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            let secrets: Vec<String> = sqlx::query_scalar(
                "DELETE FROM owned_secrets WHERE owner_kind = 'person' AND owner = $1 RETURNING name",
            )
            .bind(email)
            .fetch_all(&mut *tx)
            .await?;
            let detail = canonical_json(
                &json!({"email": email, "tokens_revoked": revoked, "secrets_deleted": secrets}),
            );
            AppendAudit::append_audit(&mut *tx, actor, "person.removed", detail, now).await?;
        });
        self.forget_tokens();
        Ok(true)
    }

    /// The person with this email (compared without case), removed or not.
    pub async fn person(&self, email: &str) -> Result<Option<PersonRecord>, StoreError> {
        let sql = "SELECT id, email, role, created_at, removed_at FROM people WHERE email = $1";
        let email = normal_email(email);
        read_db!(self, pool => {
            let row = sqlx::query(sql).bind(&email).fetch_optional(pool).await?;
            row.as_ref().map(person_from).transpose()
        })
    }

    /// The people who are in (not removed), by email.
    pub async fn people(&self) -> Result<Vec<PersonRecord>, StoreError> {
        let sql = "SELECT id, email, role, created_at, removed_at FROM people \
                   WHERE removed_at IS NULL ORDER BY email";
        read_db!(self, pool => {
            let rows = sqlx::query(sql).fetch_all(pool).await?;
            rows.iter().map(person_from).collect()
        })
    }
}
