//! API tokens: every request to the control plane carries one as a bearer token.
//!
//! A token is `hgr_` and 64 lowercase hex digits (32 bytes from the OS CSPRNG). It is shown
//! once, when made; the store keeps only its SHA-256 (hex), so a database dump yields no token.
//! Authentication hashes the presented token and looks the hash up: the lookup key is a hash
//! of a 256-bit secret, so its timing tells an attacker nothing useful.
//!
//! Non-goals: scopes and expiry (later), sessions or cookies.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::db::{Cols, read_db, write_db};
use crate::error::StoreError;
use crate::model::ApiToken;
use crate::{Store, new_id, now_ms};

const PREFIX: &str = "hgr_";

/// A token just made: its id and the token itself, to show the person once. `Debug` hides the
/// token.
#[derive(Clone, PartialEq, Eq)]
pub struct CreatedToken {
    /// The token's id (for lists and `revoke_token`).
    pub id: String,
    /// The bearer token.
    pub token: String,
}

impl fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreatedToken")
            .field("id", &self.id)
            .field("token", &"[redacted]")
            .finish()
    }
}

/// Who a valid token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// Their email.
    pub email: String,
    /// The token they used.
    pub token_id: String,
}

/// The stored form of a token: SHA-256 of its bytes, lowercase hex.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn well_formed(token: &str) -> bool {
    token.strip_prefix(PREFIX).is_some_and(|rest| {
        rest.len() == 64 && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

fn token_from(r: &impl Cols) -> Result<ApiToken, StoreError> {
    Ok(ApiToken {
        id: r.text("id")?,
        person: r.text("person")?,
        token_hash: r.text("token_hash")?,
        created_at: r.int("created_at")?,
        revoked_at: r.opt_int("revoked_at")?,
    })
}

impl Store {
    /// Makes a token for `person` (an email); the returned token is the only copy.
    pub async fn create_token(&self, person: &str) -> Result<CreatedToken, StoreError> {
        if person.trim().is_empty() || !person.contains('@') {
            return Err(StoreError::Invalid(format!(
                "{person:?} is not an email address: tokens are made for a person, --person EMAIL"
            )));
        }
        let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(bytes.as_mut()).map_err(|e| StoreError::Random(e.to_string()))?;
        let token = format!("{PREFIX}{}", hex::encode(*bytes));
        let id = new_id("tok")?;
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO api_tokens (id, person, token_hash, created_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&id)
            .bind(person)
            .bind(hash_token(&token))
            .bind(now_ms())
            .execute(pool)
            .await?;
        });
        Ok(CreatedToken { id, token })
    }

    /// The token record with this hash, revoked or not.
    pub async fn token_by_hash(&self, token_hash: &str) -> Result<Option<ApiToken>, StoreError> {
        let sql = "SELECT id, person, token_hash, created_at, revoked_at FROM api_tokens \
                   WHERE token_hash = $1";
        read_db!(self, pool => {
            let row = sqlx::query(sql).bind(token_hash).fetch_optional(pool).await?;
            row.as_ref().map(token_from).transpose()
        })
    }

    /// The person a bearer token speaks for, or `None` if it is malformed, unknown or revoked.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Person>, StoreError> {
        if !well_formed(token) {
            return Ok(None);
        }
        Ok(self
            .token_by_hash(&hash_token(token))
            .await?
            .filter(|t| t.revoked_at.is_none())
            .map(|t| Person {
                email: t.person,
                token_id: t.id,
            }))
    }

    /// Revokes a token; true if it was active.
    pub async fn revoke_token(&self, id: &str) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query("UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
                .bind(id)
                .bind(now_ms())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Token records, oldest first; only `person`'s when given.
    pub async fn tokens(&self, person: Option<&str>) -> Result<Vec<ApiToken>, StoreError> {
        let sql = "SELECT id, person, token_hash, created_at, revoked_at FROM api_tokens \
                   WHERE $1 IS NULL OR person = $1 ORDER BY created_at, id";
        read_db!(self, pool => {
            let rows = sqlx::query(sql).bind(person).fetch_all(pool).await?;
            rows.iter().map(token_from).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_shape() {
        assert!(well_formed(&format!("hgr_{}", "ab".repeat(32))));
        assert!(!well_formed(&format!("hgr_{}", "AB".repeat(32))));
        assert!(!well_formed("hgr_abc"));
        assert!(!well_formed(&"ab".repeat(34)));
        assert_eq!(hash_token("x").len(), 64);
        let t = CreatedToken {
            id: "tok-1".into(),
            token: "hgr_secret".into(),
        };
        assert!(!format!("{t:?}").contains("secret"));
    }
}
