//! hangar's control-plane store: the database, the vault and the audit log.
//!
//! One async API ([`Store`]) over two backends: SQLite (a file in `$HANGAR_HOME`, WAL) for one
//! person's control plane and PostgreSQL for a control plane shared by many users or run as
//! several replicas. The schema lives in `migrations/{sqlite,postgres}/NNNN_name.sql`, embedded
//! at compile time and applied by [`Store::open`]; a database written by a newer hangar is
//! refused ([`StoreError::TooNew`]).
//!
//! - [`vault`]: the master key file and the AEAD that seals run keys and credentials, so the
//!   database alone reveals no key. [`Store::with_vault`] checks the master key against the
//!   database before anything is sealed or opened.
//! - [`audit`]: the append-only, hash-chained audit log and its verifier.
//! - Run watchers: [`Store::commit_events`] stores a log slice's events and the run's new log
//!   cursor in one transaction, only if the cursor is where the watcher read it, so each run-log
//!   line becomes events exactly once, across restarts and replicas.
//!
//! Non-goals: no HTTP, no run watching, no key files of runs (the driver's business), no
//! compile-time checked queries (plain SQL strings keep the build small and both backends on
//! one code path), no TLS to PostgreSQL yet (loopback or a trusted network only).

mod attaches;
mod checkpoint;
mod db;
mod error;
mod events;
mod forks;
mod group;
mod harness_checks;
mod ids;
mod kept;
mod migrate;
mod model;
mod notices;
mod people;
mod retention;
mod runs;
mod secrets;
mod sessions;
mod sign_in_flows;
mod steering;
mod tokens;

pub mod audit;
pub mod vault;

pub use attaches::AttachRecord;
pub use audit::{AuditError, AuditLog, AuditRecord};
pub use db::Store;
pub use error::StoreError;
pub use events::MAX_PAGE;
pub use forks::{Fork, NewFork};
pub use harness_checks::HarnessCheck;
pub use ids::{IdKind, MIN_SHORT_HEX, Resolved};
pub use kept::CHUNK as KEPT_CHUNK;
pub use migrate::{Backend, KNOWN_SCHEMA_VERSION};
pub use model::*;
pub use notices::{Notice, Notices};
pub use people::normal_email;
pub use retention::Prunable;
pub use secrets::SecretOwner;
pub use sign_in_flows::FlowKind;
pub use tokens::{
    CreatedToken, DEFAULT_LIFETIME_MS, KEPT_FOR, LAST_USED_GRANULARITY_MS, MAX_LIFETIME_MS,
    NewToken, Person, hash_token,
};
pub use vault::{Secret, Vault, VaultError};

/// Milliseconds since the Unix epoch, the unit of every timestamp in the store.
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// A fresh random id, `PREFIX-` and 24 lowercase hex digits (96 bits from the OS CSPRNG); it
/// is also a valid run id for the control folder (`[A-Za-z0-9_-]`, at most 64 characters when
/// the prefix is at most 39).
pub fn new_id(prefix: &str) -> Result<String, StoreError> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).map_err(|e| StoreError::Random(e.to_string()))?;
    Ok(format!("{prefix}-{}", hex::encode(bytes)))
}
