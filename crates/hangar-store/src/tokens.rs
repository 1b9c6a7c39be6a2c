//! API tokens: every request to the control plane carries one as a bearer token.
//!
//! A token is `hgr_` and 64 lowercase hex digits (32 bytes from the OS CSPRNG). It is shown
//! once, when made; the store keeps only its SHA-256 (hex), so a database dump yields no token.
//! Authentication hashes the presented token and looks the hash up: the lookup key is a hash
//! of a 256-bit secret, so its timing tells an attacker nothing useful.
//!
//! A token lives at most 365 days (90 by default) and speaks for its person only while they are
//! in the people table; making and revoking one is audited with the acting person.
//!
//! Every request authenticates, so a token that checked out is kept in memory for
//! [`KEPT_FOR`] ([`Kept`]): under `scripts/load` the lookup was a read on a pool shared with
//! the server's other reads, 1-12 ms at p99 of an answer's round trip. A revocation, a person's
//! removal or re-adding through this store forgets every kept token at once (so a revoked
//! token is refused by the next request here), and a lookup that raced one is not kept; one
//! revoked through another replica is refused here within [`KEPT_FOR`]. Expiry is checked on
//! every request.
//!
//! Non-goals: scopes, sessions or cookies.

use std::fmt;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::audit::{AppendAudit, canonical_json};
use crate::db::{Cols, in_tx, read_db, write_db};
use crate::error::StoreError;
use crate::model::{ApiToken, Role};
use crate::{Store, new_id, now_ms};

const PREFIX: &str = "hgr_";

/// How long a token that checked out is believed without asking the database again: the most
/// a revocation made through another replica takes to be seen here.
pub const KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// Tokens kept at most (then forgotten all at once).
const KEPT_MAX: usize = 10_000;

/// The tokens authenticated lately, by the token's hash, and a generation that every
/// forgetting moves on: a lookup started before a revocation committed must not keep what it
/// read.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    generation: u64,
    by_hash: std::collections::HashMap<String, KeptToken>,
}

#[derive(Debug, Clone)]
struct KeptToken {
    person: Person,
    expires_at: Option<i64>,
    last_used: Option<i64>,
    read_at: std::time::Instant,
}

impl Kept {
    /// The person a kept token speaks for, if it was read under [`KEPT_FOR`] ago and has not
    /// expired by `now`; and whether its use is to be written (once a minute). Else the
    /// generation a lookup starts from.
    fn get(&mut self, hash: &str, now: i64) -> Result<(Person, bool), u64> {
        match self.by_hash.get_mut(hash) {
            Some(k) if k.read_at.elapsed() < KEPT_FOR && k.expires_at.is_none_or(|e| e > now) => {
                let stale = k
                    .last_used
                    .is_none_or(|t| now - t >= LAST_USED_GRANULARITY_MS);
                if stale {
                    k.last_used = Some(now);
                }
                Ok((k.person.clone(), stale))
            }
            _ => Err(self.generation),
        }
    }

    /// Keeps what a lookup that started at `generation` read, unless tokens were forgotten
    /// meanwhile (what it read may predate a revocation).
    fn keep(&mut self, generation: u64, hash: String, token: KeptToken) -> bool {
        if self.generation != generation {
            return false;
        }
        if self.by_hash.len() >= KEPT_MAX {
            self.by_hash.clear();
        }
        self.by_hash.insert(hash, token);
        true
    }

    fn forget(&mut self) {
        self.generation += 1;
        self.by_hash.clear();
    }
}

/// A token just made: its id and the token itself, to show the person once. `Debug` hides the
/// token.
#[derive(Clone, PartialEq, Eq)]
pub struct CreatedToken {
    /// The token's id (for lists and `revoke_token`).
    pub id: String,
    /// The bearer token.
    pub token: String,
    /// When it stops working (ms since the epoch).
    pub expires_at: i64,
}

impl fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreatedToken")
            .field("id", &self.id)
            .field("token", &"[redacted]")
            .field("expires_at", &self.expires_at)
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
    /// What they may do.
    pub role: Role,
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
        name: r.text("name")?,
        expires_at: r.opt_int("expires_at")?,
        last_used_at: r.opt_int("last_used_at")?,
    })
}

const TOKEN_COLS: &str =
    "id, person, token_hash, created_at, revoked_at, name, expires_at, last_used_at";

/// How long a token lives when its maker does not say: 90 days.
pub const DEFAULT_LIFETIME_MS: i64 = 90 * 24 * 3600 * 1000;
/// The longest a token may live: 365 days (a token that never expires is refused).
pub const MAX_LIFETIME_MS: i64 = 365 * 24 * 3600 * 1000;
/// `last_used_at` is written at most this often per token, so a busy token does not turn every
/// request into a write.
pub const LAST_USED_GRANULARITY_MS: i64 = 60 * 1000;

/// A token to make: for whom, its name, how long it lives, and who makes it (the audit's actor).
#[derive(Debug, Clone, Copy)]
pub struct NewToken<'a> {
    /// The person (an email of the people table, not removed) it speaks for.
    pub person: &'a str,
    /// What to call it (may be empty).
    pub name: &'a str,
    /// How long it lives, in milliseconds (more than 0, at most [`MAX_LIFETIME_MS`]).
    pub lifetime_ms: i64,
    /// Who makes it.
    pub actor: &'a str,
}

impl Store {
    /// Makes a token (audited `token.created` by the actor, in the same transaction); the
    /// returned token is the only copy. Refused for someone who is not a person here.
    pub async fn create_token(&self, new: NewToken<'_>) -> Result<CreatedToken, StoreError> {
        let person = &crate::people::normal_email(new.person);
        if person.trim().is_empty() || !person.contains('@') {
            return Err(StoreError::Invalid(format!(
                "{person:?} is not an email address: tokens are made for a person, --person EMAIL"
            )));
        }
        if new.lifetime_ms <= 0 || new.lifetime_ms > MAX_LIFETIME_MS {
            return Err(StoreError::Invalid(format!(
                "a token lives more than nothing and at most 365 days, not {} ms",
                new.lifetime_ms
            )));
        }
        if new.name.chars().count() > 100 || new.name.chars().any(char::is_control) {
            return Err(StoreError::Invalid(
                "a token's name is at most 100 characters, with no control characters".into(),
            ));
        }
        let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(bytes.as_mut()).map_err(|e| StoreError::Random(e.to_string()))?;
        let token = format!("{PREFIX}{}", hex::encode(*bytes));
        let id = new_id("tok")?;
        let now = now_ms();
        let expires_at = now.saturating_add(new.lifetime_ms);
        let detail = canonical_json(&json!({
            "id": id, "person": person, "name": new.name, "expires_at": expires_at,
        }));
        in_tx!(self, tx => {
            let active: Option<String> = sqlx::query_scalar(
                "SELECT id FROM people WHERE email = $1 AND removed_at IS NULL",
            )
            .bind(person)
            .fetch_optional(&mut *tx)
            .await?;
            if active.is_none() {
                return Err(StoreError::Invalid(format!(
                    "{person} is not a person here: an admin adds them first (`hangar person add {person}` on the server's machine, or POST /v1/people)"
                )));
            }
            sqlx::query(
                "INSERT INTO api_tokens (id, person, token_hash, created_at, name, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&id)
            .bind(person)
            .bind(hash_token(&token))
            .bind(now)
            .bind(new.name)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
            AppendAudit::append_audit(&mut *tx, new.actor, "token.created", detail, now).await?;
        });
        Ok(CreatedToken {
            id,
            token,
            expires_at,
        })
    }

    /// The token record with this hash, revoked or not.
    pub async fn token_by_hash(&self, token_hash: &str) -> Result<Option<ApiToken>, StoreError> {
        let sql = format!("SELECT {TOKEN_COLS} FROM api_tokens WHERE token_hash = $1");
        read_db!(self, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(token_hash).fetch_optional(pool).await?;
            row.as_ref().map(token_from).transpose()
        })
    }

    /// The token record with this id, revoked or not.
    pub async fn token(&self, id: &str) -> Result<Option<ApiToken>, StoreError> {
        let sql = format!("SELECT {TOKEN_COLS} FROM api_tokens WHERE id = $1");
        read_db!(self, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?;
            row.as_ref().map(token_from).transpose()
        })
    }

    /// The person a bearer token speaks for, with their role; `None` if it is malformed,
    /// unknown, revoked, expired, or its person was removed. Every call reads the database, so
    /// a revocation on one replica is seen by all at their next request. Marks the token used
    /// (at most once a minute).
    pub async fn authenticate(&self, token: &str) -> Result<Option<Person>, StoreError> {
        if !well_formed(token) {
            return Ok(None);
        }
        let now = now_ms();
        let hash = hash_token(token);
        let kept = self.kept_tokens().get(&hash, now);
        let generation = match kept {
            Ok((person, stale)) => {
                if stale {
                    self.note_used(&person.token_id, now).await?;
                }
                return Ok(Some(person));
            }
            Err(generation) => generation,
        };
        let sql = "SELECT t.id, t.person, t.last_used_at, t.expires_at, p.role FROM api_tokens t \
                   JOIN people p ON p.email = t.person \
                   WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND p.removed_at IS NULL \
                   AND (t.expires_at IS NULL OR t.expires_at > $2)";
        let found = read_db!(self, pool => {
            let row = sqlx::query(sql)
                .bind(&hash)
                .bind(now)
                .fetch_optional(pool)
                .await?;
            row.as_ref()
                .map(|r| -> Result<_, StoreError> {
                    Ok((
                        r.text("id")?,
                        r.text("person")?,
                        r.opt_int("last_used_at")?,
                        r.opt_int("expires_at")?,
                        Role::parse(&r.text("role")?)?,
                    ))
                })
                .transpose()?
        });
        let Some((id, email, last_used, expires_at, role)) = found else {
            return Ok(None);
        };
        let person = Person {
            email,
            token_id: id,
            role,
        };
        let stale = last_used.is_none_or(|t| now - t >= LAST_USED_GRANULARITY_MS);
        self.kept_tokens().keep(
            generation,
            hash,
            KeptToken {
                person: person.clone(),
                expires_at,
                last_used: if stale { Some(now) } else { last_used },
                read_at: std::time::Instant::now(),
            },
        );
        if stale {
            self.note_used(&person.token_id, now).await?;
        }
        Ok(Some(person))
    }

    /// Records that token `id` was used at `now` (at most once a minute per token).
    async fn note_used(&self, id: &str, now: i64) -> Result<(), StoreError> {
        // Conditional, so replicas racing on one token write it once per minute.
        write_db!(self, pool => {
            sqlx::query(
                "UPDATE api_tokens SET last_used_at = $2 WHERE id = $1 \
                 AND (last_used_at IS NULL OR last_used_at <= $3)",
            )
            .bind(id)
            .bind(now)
            .bind(now - LAST_USED_GRANULARITY_MS)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Forgets every kept token (after a revocation, a removal or a change of role made
    /// through this store), and makes lookups that started before it keep nothing.
    pub(crate) fn forget_tokens(&self) {
        self.kept_tokens().forget();
    }

    fn kept_tokens(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A thread that panicked holding it left a map of whole entries.
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Revokes a token, by `actor` (audited `token.revoked`); true if it was active.
    pub async fn revoke_token(&self, id: &str, actor: &str) -> Result<bool, StoreError> {
        let now = now_ms();
        let revoked = in_tx!(self, tx => {
            let person: Option<String> = sqlx::query_scalar(
                "UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL \
                 RETURNING person",
            )
            .bind(id)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(person) = &person {
                let detail = canonical_json(&json!({"id": id, "person": person}));
                AppendAudit::append_audit(&mut *tx, actor, "token.revoked", detail, now).await?;
            }
            person.is_some()
        });
        self.forget_tokens();
        Ok(revoked)
    }

    /// Token records, oldest first; only `person`'s when given.
    pub async fn tokens(&self, person: Option<&str>) -> Result<Vec<ApiToken>, StoreError> {
        let person = person.map(crate::people::normal_email);
        let sql = format!(
            "SELECT {TOKEN_COLS} FROM api_tokens WHERE $1 IS NULL OR person = $1 \
             ORDER BY created_at, id"
        );
        read_db!(self, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(person).fetch_all(pool).await?;
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
            expires_at: 0,
        };
        assert!(!format!("{t:?}").contains("secret"));
    }
}

#[cfg(test)]
mod kept_tests {
    use super::*;

    fn kept_token(email: &str) -> KeptToken {
        KeptToken {
            person: Person {
                email: email.into(),
                token_id: "token-1".into(),
                role: Role::Member,
            },
            expires_at: None,
            last_used: Some(now_ms()),
            read_at: std::time::Instant::now(),
        }
    }

    #[test]
    fn a_lookup_that_raced_a_revocation_keeps_nothing() {
        let mut kept = Kept::default();
        let Err(started) = kept.get("h", now_ms()) else {
            panic!("nothing is kept yet");
        };
        // A revocation commits and forgets while the lookup reads the database.
        kept.forget();
        assert!(!kept.keep(started, "h".into(), kept_token("ada@example.com")));
        assert!(kept.get("h", now_ms()).is_err(), "the stale read was kept");
        // A lookup that started after it keeps what it read.
        let Err(now) = kept.get("h", now_ms()) else {
            panic!("nothing is kept");
        };
        assert!(kept.keep(now, "h".into(), kept_token("ada@example.com")));
        let (who, write) = kept.get("h", now_ms()).unwrap();
        assert_eq!(who.email, "ada@example.com");
        assert!(!write, "its use was written when it was read");
    }

    #[test]
    fn a_kept_token_is_not_believed_once_expired_or_old() {
        let mut kept = Kept::default();
        let now = now_ms();
        let g = kept.generation;
        kept.keep(
            g,
            "short".into(),
            KeptToken {
                expires_at: Some(now + 50),
                ..kept_token("ada@example.com")
            },
        );
        assert!(kept.get("short", now).is_ok());
        assert!(
            kept.get("short", now + 50).is_err(),
            "believed once expired"
        );
        kept.keep(
            g,
            "old".into(),
            KeptToken {
                read_at: std::time::Instant::now() - KEPT_FOR,
                ..kept_token("ada@example.com")
            },
        );
        assert!(kept.get("old", now).is_err(), "believed past KEPT_FOR");
    }
}
