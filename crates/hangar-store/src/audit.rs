//! The audit log: append-only records of what people and the control plane did (commands sent
//! and their acks, approvals and who answered them, credentials set, keys made and destroyed,
//! turns refused and why), each chained to the one before by its hash, so an edited, deleted
//! or reordered record is found by [`AuditLog::verify`] (`hangar audit verify`).
//!
//! # Canonical encoding
//! Record `seq` (1, 2, 3, ...) is hashed as
//!
//! ```text
//! hash(seq) = SHA-256( prev || "hangar-audit-v1\n"
//!                      || u64be(seq) || i64be(at)
//!                      || u32be(len actor)  || actor
//!                      || u32be(len action) || action
//!                      || u32be(len detail) || detail )
//! ```
//!
//! where `prev` is the 32 raw bytes of `hash(seq - 1)` (32 zero bytes for record 1), `at` is
//! milliseconds since the Unix epoch, lengths are in bytes and strings are UTF-8. `detail` is
//! the record's JSON in canonical form: no whitespace, object keys sorted by their UTF-8 bytes,
//! strings escaped and numbers printed as `serde_json` prints them. The canonical text is what
//! the database stores (TEXT on both backends, never re-encoded), so the verifier hashes the
//! very bytes that were hashed at append time. Hashes are stored as lowercase hex.
//!
//! # Concurrency and the head
//! A one-row table `audit_head` holds the last seq and hash. Every append starts by updating it
//! (a row lock on PostgreSQL, the write lock on SQLite), so appends from many tasks, processes
//! or replicas are serialized, and the head also reveals records cut from the end of the log.
//!
//! Non-goals: the API never updates or deletes audit rows; no external anchoring of the head
//! (someone who rewrites the whole chain after a point, head included, is not detected: copy
//! `head()` elsewhere to catch that).

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::db::{Cols, in_tx, read_db};
use crate::error::StoreError;
use crate::{Store, now_ms};

const DOMAIN: &[u8] = b"hangar-audit-v1\n";
const PAGE: i64 = 1000;

/// What verifying or appending to the audit log can find.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The chain is broken at record `seq`.
    #[error(
        "the audit log is broken at record {seq}: {why}. Records were edited, deleted or reordered there; keep this database as evidence and compare it with a backup"
    )]
    Broken {
        /// The first record (or position) that does not fit the chain.
        seq: i64,
        /// What does not fit.
        why: String,
    },
}

/// One audit record.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// Position in the log, from 1.
    pub seq: i64,
    /// When, in ms since the Unix epoch.
    pub at: i64,
    /// Who: an email, or `hangar` for the control plane itself.
    pub actor: String,
    /// What, e.g. `command.sent`, `approval.answered`, `credential.set`, `turn.refused`.
    pub action: String,
    /// The details, in canonical JSON text.
    pub detail: String,
    /// The previous record's hash (hex).
    pub prev_hash: String,
    /// This record's hash (hex).
    pub hash: String,
}

/// The audit log of a store: `store.audit()`.
#[derive(Debug, Clone, Copy)]
pub struct AuditLog<'a> {
    store: &'a Store,
}

/// `v` as canonical JSON text (see the module docs).
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(x) = o.get(k) {
                    write_canonical(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn len32(s: &str) -> [u8; 4] {
    u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes()
}

/// `hash(seq)` of the module docs, as raw bytes.
pub fn record_hash(
    prev: &[u8; 32],
    seq: i64,
    at: i64,
    actor: &str,
    action: &str,
    detail: &str,
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(DOMAIN);
    h.update(seq.to_be_bytes());
    h.update(at.to_be_bytes());
    for s in [actor, action, detail] {
        h.update(len32(s));
        h.update(s.as_bytes());
    }
    h.finalize().into()
}

fn decode_hash(hex_text: &str, seq: i64) -> Result<[u8; 32], AuditError> {
    hex::decode(hex_text)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| AuditError::Broken {
            seq,
            why: format!("a stored hash is not 64 hex digits: {hex_text:?}"),
        })
}

fn record_from(r: &impl Cols) -> Result<AuditRecord, StoreError> {
    Ok(AuditRecord {
        seq: r.int("seq")?,
        at: r.int("at")?,
        actor: r.text("actor")?,
        action: r.text("action")?,
        detail: r.text("detail")?,
        prev_hash: r.text("prev_hash")?,
        hash: r.text("hash")?,
    })
}

impl Store {
    /// The audit log.
    pub fn audit(&self) -> AuditLog<'_> {
        AuditLog { store: self }
    }
}

/// Appends an audit record inside a caller's transaction (the same SQL on both backends), so a
/// change and its record commit together: one transaction where there were two.
pub(crate) trait AppendAudit {
    /// Appends `detail` (canonical JSON text) as record `head + 1`, chained to the head.
    async fn append_audit(
        &mut self,
        actor: &str,
        action: &str,
        detail: String,
        at: i64,
    ) -> Result<AuditRecord, StoreError>;
}

macro_rules! impl_append_audit {
    ($conn:ty) => {
        impl AppendAudit for $conn {
            async fn append_audit(
                &mut self,
                actor: &str,
                action: &str,
                detail: String,
                at: i64,
            ) -> Result<AuditRecord, StoreError> {
                let head: Option<(i64, String)> = sqlx::query_as(
                    "UPDATE audit_head SET seq = seq + 1 WHERE id = 1 RETURNING seq, hash",
                )
                .fetch_optional(&mut *self)
                .await?;
                let Some((seq, prev_hash)) = head else {
                    return Err(AuditError::Broken {
                        seq: 0,
                        why: "the chain head row is missing".into(),
                    }
                    .into());
                };
                let prev = decode_hash(&prev_hash, seq)?;
                let hash = hex::encode(record_hash(&prev, seq, at, actor, action, &detail));
                sqlx::query(
                    "INSERT INTO audit_log (seq, at, actor, action, detail, prev_hash, hash) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(seq)
                .bind(at)
                .bind(actor)
                .bind(action)
                .bind(&detail)
                .bind(&prev_hash)
                .bind(&hash)
                .execute(&mut *self)
                .await?;
                sqlx::query("UPDATE audit_head SET hash = $1 WHERE id = 1")
                    .bind(&hash)
                    .execute(&mut *self)
                    .await?;
                Ok(AuditRecord {
                    seq,
                    at,
                    actor: actor.to_owned(),
                    action: action.to_owned(),
                    detail,
                    prev_hash,
                    hash,
                })
            }
        }
    };
}

impl_append_audit!(sqlx::SqliteConnection);
impl_append_audit!(sqlx::PgConnection);

/// Records `first_seq`, `first_seq + 1`, ... for `records` (actor, action, detail), chained to
/// `prev_hash` (the head's hash): each one's seq, previous hash and hash, as stored. The chain a
/// run of [`AppendAudit::append_audit`] calls would write, computed in one pass for a caller
/// that writes them in one statement.
pub(crate) fn chain(
    prev_hash: &str,
    first_seq: i64,
    at: i64,
    records: &[(&str, &str, &str)],
) -> Result<Vec<(i64, String, String)>, AuditError> {
    let mut prev = decode_hash(prev_hash, first_seq)?;
    let mut prev_hex = prev_hash.to_owned();
    let mut out = Vec::with_capacity(records.len());
    for (i, (actor, action, detail)) in records.iter().enumerate() {
        let seq = first_seq + i as i64;
        prev = record_hash(&prev, seq, at, actor, action, detail);
        let hash = hex::encode(prev);
        out.push((seq, std::mem::replace(&mut prev_hex, hash.clone()), hash));
    }
    Ok(out)
}

impl AuditLog<'_> {
    /// Appends a record, chained to the last one, in one transaction.
    pub async fn append(
        &self,
        actor: &str,
        action: &str,
        detail: &Value,
    ) -> Result<AuditRecord, StoreError> {
        let detail = canonical_json(detail);
        let at = now_ms();
        let store = self.store;
        let rec = in_tx!(store, tx => {
            AppendAudit::append_audit(&mut *tx, actor, action, detail, at).await?
        });
        Ok(rec)
    }

    /// The head: the last record's seq and hash (0 and 64 zeros when empty).
    pub async fn head(&self) -> Result<(i64, String), StoreError> {
        let sql = "SELECT seq, hash FROM audit_head WHERE id = 1";
        let head: Option<(i64, String)> =
            read_db!(self.store, pool => sqlx::query_as(sql).fetch_optional(pool).await?);
        head.ok_or_else(|| {
            AuditError::Broken {
                seq: 0,
                why: "the chain head row is missing".into(),
            }
            .into()
        })
    }

    /// Up to `limit` records after `after_seq`, in order.
    pub async fn records(
        &self,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let sql = "SELECT seq, at, actor, action, detail, prev_hash, hash FROM audit_log \
                   WHERE seq > $1 ORDER BY seq LIMIT $2";
        read_db!(self.store, pool => {
            let q = sqlx::query(sql).bind(after_seq).bind(limit.clamp(1, PAGE));
            q.fetch_all(pool).await?.iter().map(record_from).collect()
        })
    }

    /// Checks the whole chain up to the head: seqs 1, 2, 3, ... without a gap, each record's
    /// `prev_hash` equal to the hash before it, each hash equal to the hash of its content, and
    /// the head equal to the last record. Returns how many records were checked; a break is
    /// [`StoreError::Audit`] with [`AuditError::Broken`] naming the first bad record.
    pub async fn verify(&self) -> Result<u64, StoreError> {
        let (head_seq, head_hash) = self.head().await?;
        let mut prev = [0u8; 32];
        let mut expected = 1i64;
        let broken = |seq, why: String| StoreError::from(AuditError::Broken { seq, why });
        loop {
            let page = self.records(expected - 1, PAGE).await?;
            for r in &page {
                if r.seq > head_seq {
                    break;
                }
                if r.seq != expected {
                    return Err(broken(
                        expected,
                        format!("record {expected} is missing (the next one is {})", r.seq),
                    ));
                }
                if decode_hash(&r.prev_hash, r.seq)? != prev {
                    return Err(broken(
                        r.seq,
                        "its prev_hash is not the hash of the record before it".into(),
                    ));
                }
                let hash = record_hash(&prev, r.seq, r.at, &r.actor, &r.action, &r.detail);
                if decode_hash(&r.hash, r.seq)? != hash {
                    return Err(broken(r.seq, "its content does not match its hash".into()));
                }
                prev = hash;
                expected += 1;
            }
            if page.len() < PAGE as usize || expected > head_seq {
                break;
            }
        }
        if expected <= head_seq {
            return Err(broken(
                expected,
                format!("record {expected} is missing (the head says the log has {head_seq})"),
            ));
        }
        if head_seq > 0 && hex::encode(prev) != head_hash {
            return Err(broken(
                head_seq,
                "the head's hash is not the last record's".into(),
            ));
        }
        u64::try_from(head_seq).map_err(|_| broken(0, format!("the head's seq is {head_seq}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        let v: Value =
            serde_json::from_str(r#"{ "b": [1, 2.5, "x\n"], "a": {"d": null, "c": true} }"#)
                .unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"c":true,"d":null},"b":[1,2.5,"x\n"]}"#
        );
        assert_eq!(canonical_json(&json!("é\u{1}")), "\"é\\u0001\"");
    }

    #[test]
    fn the_hash_covers_every_field_unambiguously() {
        let z = [0u8; 32];
        let base = record_hash(&z, 1, 5, "ab", "c", "{}");
        assert_ne!(base, record_hash(&z, 1, 5, "a", "bc", "{}"));
        assert_ne!(base, record_hash(&z, 2, 5, "ab", "c", "{}"));
        assert_ne!(base, record_hash(&z, 1, 6, "ab", "c", "{}"));
        assert_ne!(base, record_hash(&[1; 32], 1, 5, "ab", "c", "{}"));
        assert_eq!(base, record_hash(&z, 1, 5, "ab", "c", "{}"));
    }
}
