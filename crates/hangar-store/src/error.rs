//! The store's error type: every variant says what went wrong and, where a person can act,
//! what to do.

use crate::audit::AuditError;
use crate::vault::VaultError;

/// Anything [`crate::Store`] can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database URL is not one the store understands.
    #[error(
        "database URL {url:?} is not understood: {why} (use sqlite:///ABSOLUTE/PATH.db or postgres://USER:PASSWORD@HOST:PORT/DB)"
    )]
    BadUrl {
        /// The URL with any password removed.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The database could not be reached or opened.
    #[error(
        "cannot open the database {url}: {source} (check that the server is running and the path, user and password are right)"
    )]
    Open {
        /// The URL with any password removed.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The database was migrated by a newer hangar.
    #[error(
        "the database {url} was written by a newer hangar (schema {found}; this build knows schemas up to {known}) and was left as it is: upgrade hangar to the version that wrote it, or point HANGAR_HOME or HANGAR_DATABASE_URL at another database"
    )]
    TooNew {
        /// The database's URL, password removed.
        url: String,
        /// The schema version found in the database.
        found: i64,
        /// The newest schema version this build knows.
        known: i64,
    },
    /// A migration this build ships differs from the one recorded as applied.
    #[error(
        "migration {version} ({name}) in this build differs from the one applied to the database; a released migration must never change: restore it and add a new migration instead"
    )]
    MigrationChanged {
        /// The migration's version.
        version: i64,
        /// The migration's name.
        name: String,
    },
    /// Applying a migration failed; the database is left at the version before it.
    #[error("migration {version} ({name}) failed, nothing of it was applied: {source}")]
    Migration {
        /// The migration's version.
        version: i64,
        /// The migration's name.
        name: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// A migration cannot run on what the database holds; nothing of it was applied.
    #[error(
        "migration {version} ({name}) was not applied, the database is as it was: found {found}; {why}"
    )]
    MigrationRefused {
        /// The migration's version.
        version: i64,
        /// The migration's name.
        name: String,
        /// What stands in its way.
        found: String,
        /// Why, and what to do.
        why: &'static str,
    },
    /// No row with that key.
    #[error("no {what} {key:?}")]
    NotFound {
        /// The kind of thing (`run`, `session`, ...).
        what: &'static str,
        /// Its key.
        key: String,
    },
    /// The row exists already, or refers to a row that does not exist.
    #[error("{0}")]
    Conflict(String),
    /// A run's log cursor is no longer where the watcher read it: another watcher or replica
    /// committed this slice first. Nothing was written; re-read the cursor and go on from there.
    #[error(
        "run {run}: log cursor moved (expected {expected}, found {found}); another watcher committed these lines, nothing was written"
    )]
    CursorMoved {
        /// The run.
        run: String,
        /// The cursor the caller read.
        expected: i64,
        /// The cursor in the database now.
        found: i64,
    },
    /// A turn cannot go from one state to another.
    #[error("turn {turn} cannot go from {from} to {to}")]
    BadTransition {
        /// The turn.
        turn: String,
        /// Its state now.
        from: String,
        /// The state asked for.
        to: String,
    },
    /// An approval was answered already.
    #[error("approval {request_id} of run {run} was already answered ({decision} by {by})")]
    AlreadyAnswered {
        /// The run.
        run: String,
        /// The approval request.
        request_id: String,
        /// The earlier decision.
        decision: String,
        /// Who gave it.
        by: String,
    },
    /// A caller passed something the store cannot take.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A method that seals or opens secrets was called on a store without a vault.
    #[error(
        "this store has no vault: open the master key with Vault::open_or_create and attach it with Store::with_vault"
    )]
    NoVault,
    /// The vault refused (wrong master key, a ciphertext that does not open, ...).
    #[error(transparent)]
    Vault(#[from] VaultError),
    /// The audit log is broken or could not be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// A stored value the store cannot read back (edited by hand, or a bug).
    #[error("the database holds an unreadable {what}: {why}")]
    Corrupt {
        /// What was being read.
        what: &'static str,
        /// Why it cannot be read.
        why: String,
    },
    /// The OS random source failed.
    #[error("the operating system's random source failed: {0}")]
    Random(String),
    /// Any other database error.
    #[error("database error: {0}")]
    Db(#[source] sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            if db.is_unique_violation() {
                return StoreError::Conflict(format!("already exists: {}", db.message()));
            }
            if db.is_foreign_key_violation() {
                return StoreError::Conflict(format!(
                    "refers to a row that does not exist: {}",
                    db.message()
                ));
            }
        }
        StoreError::Db(e)
    }
}

/// A stored word (harness, policy, ack status, turn or run state, decision) that is not one of
/// its set's.
impl From<hangar_protocol::UnknownWord> for StoreError {
    fn from(e: hangar_protocol::UnknownWord) -> StoreError {
        StoreError::Corrupt {
            what: e.what,
            why: format!("unknown value {:?}", e.value),
        }
    }
}
