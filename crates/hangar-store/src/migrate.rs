//! Schema migrations: versioned SQL files in `migrations/{sqlite,postgres}/NNNN_name.sql`,
//! embedded at compile time, applied in order by [`crate::Store::open`] inside one
//! transaction and recorded (version, name, SHA-256 of the SQL, time) in `schema_version`.
//!
//! Concurrent openers (several replicas starting at once) serialize: SQLite on its write lock
//! (`BEGIN IMMEDIATE`), PostgreSQL on a transaction-level advisory lock keyed by the current
//! schema. A database at a version newer than this build knows is refused
//! ([`StoreError::TooNew`]); one whose applied migration differs from this build's copy is
//! refused too ([`StoreError::MigrationChanged`]), since a released migration must never change.
//!
//! Non-goals: no down-migrations (restore a backup instead), no migrations written in Rust.

use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::db::Db;
use crate::error::StoreError;

/// The two database backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file.
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

/// One schema version: the same change written once per backend.
#[derive(Debug)]
pub(crate) struct Migration {
    pub(crate) version: i64,
    pub(crate) name: &'static str,
    pub(crate) sqlite: &'static str,
    pub(crate) postgres: &'static str,
    /// What refuses the migration before it runs: a query per backend listing what stands in
    /// its way (one text per row; none when it may run), and why that is in the way.
    pub(crate) refuse_if: &'static [Refusal],
}

/// A condition that refuses a migration, saying what to do about it.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) sqlite: &'static str,
    pub(crate) postgres: &'static str,
    /// What the rows found are, and what the person upgrading does about them.
    pub(crate) why: &'static str,
}

/// Emails that differ only by case: stored lower-cased from version 9 on, they would be one.
const CASE_TWINS: &[Refusal] = &[
    Refusal {
        sqlite: "SELECT group_concat(email, ' and ') FROM people GROUP BY lower(email) \
                 HAVING COUNT(*) > 1",
        postgres: "SELECT string_agg(email, ' and ') FROM people \
                   GROUP BY translate(email, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') \
                   HAVING COUNT(*) > 1",
        why: "emails now compare without case, and these people would be one person: decide which one stays, delete the other's row from the people table (DELETE FROM people WHERE email = '...'; revoke its tokens first with `hangar token revoke`), then start hangar again",
    },
    Refusal {
        sqlite: "SELECT group_concat(owner || ' ' || name, ' and ') FROM owned_secrets \
                 WHERE owner_kind = 'person' GROUP BY lower(owner), name HAVING COUNT(*) > 1",
        postgres: "SELECT string_agg(owner || ' ' || name, ' and ') FROM owned_secrets \
                   WHERE owner_kind = 'person' \
                   GROUP BY translate(owner, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), name \
                   HAVING COUNT(*) > 1",
        why: "emails now compare without case, and these people's credentials of the same name would be one: remove one of each (`hangar credential rm NAME --person EMAIL`), then start hangar again",
    },
];

/// Every migration, oldest first. Adding one: write both files with the next number and add
/// the line here (a test checks the folders and this list agree).
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sqlite: include_str!("../migrations/sqlite/0001_init.sql"),
        postgres: include_str!("../migrations/postgres/0001_init.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 2,
        name: "forks",
        sqlite: include_str!("../migrations/sqlite/0002_forks.sql"),
        postgres: include_str!("../migrations/postgres/0002_forks.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 3,
        name: "sandboxes",
        sqlite: include_str!("../migrations/sqlite/0003_sandboxes.sql"),
        postgres: include_str!("../migrations/postgres/0003_sandboxes.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 4,
        name: "harness_checks",
        sqlite: include_str!("../migrations/sqlite/0004_harness_checks.sql"),
        postgres: include_str!("../migrations/postgres/0004_harness_checks.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 5,
        name: "git_trees",
        sqlite: include_str!("../migrations/sqlite/0005_git_trees.sql"),
        postgres: include_str!("../migrations/postgres/0005_git_trees.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 6,
        name: "run_leases",
        sqlite: include_str!("../migrations/sqlite/0006_run_leases.sql"),
        postgres: include_str!("../migrations/postgres/0006_run_leases.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 7,
        name: "people_tokens",
        sqlite: include_str!("../migrations/sqlite/0007_people_tokens.sql"),
        postgres: include_str!("../migrations/postgres/0007_people_tokens.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 8,
        name: "secret_owners",
        sqlite: include_str!("../migrations/sqlite/0008_secret_owners.sql"),
        postgres: include_str!("../migrations/postgres/0008_secret_owners.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 9,
        name: "team_sign_in",
        sqlite: include_str!("../migrations/sqlite/0009_team_sign_in.sql"),
        postgres: include_str!("../migrations/postgres/0009_team_sign_in.sql"),
        refuse_if: CASE_TWINS,
    },
    Migration {
        version: 10,
        name: "turn_blocked",
        sqlite: include_str!("../migrations/sqlite/0010_turn_blocked.sql"),
        postgres: include_str!("../migrations/postgres/0010_turn_blocked.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 11,
        name: "turn_interrupted",
        sqlite: include_str!("../migrations/sqlite/0011_turn_interrupted.sql"),
        postgres: include_str!("../migrations/postgres/0011_turn_interrupted.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 12,
        name: "run_pruned",
        sqlite: include_str!("../migrations/sqlite/0012_run_pruned.sql"),
        postgres: include_str!("../migrations/postgres/0012_run_pruned.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 13,
        name: "events_lean",
        sqlite: include_str!("../migrations/sqlite/0013_events_lean.sql"),
        postgres: include_str!("../migrations/postgres/0013_events_lean.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 14,
        name: "replicas",
        sqlite: include_str!("../migrations/sqlite/0014_replicas.sql"),
        postgres: include_str!("../migrations/postgres/0014_replicas.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 15,
        name: "kept_files",
        sqlite: include_str!("../migrations/sqlite/0015_kept_files.sql"),
        postgres: include_str!("../migrations/postgres/0015_kept_files.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 16,
        name: "run_pruned_bigint",
        sqlite: include_str!("../migrations/sqlite/0016_run_pruned_bigint.sql"),
        postgres: include_str!("../migrations/postgres/0016_run_pruned_bigint.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 17,
        name: "attaches",
        sqlite: include_str!("../migrations/sqlite/0017_attaches.sql"),
        postgres: include_str!("../migrations/postgres/0017_attaches.sql"),
        refuse_if: &[],
    },
    Migration {
        version: 18,
        name: "agent_uids",
        sqlite: include_str!("../migrations/sqlite/0018_agent_uids.sql"),
        postgres: include_str!("../migrations/postgres/0018_agent_uids.sql"),
        refuse_if: &[],
    },
];

/// The newest schema version this build knows.
pub const KNOWN_SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

const CREATE_VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_version (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    checksum TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)";

impl Refusal {
    fn sql(&self, backend: Backend) -> &'static str {
        match backend {
            Backend::Sqlite => self.sqlite,
            Backend::Postgres => self.postgres,
        }
    }
}

impl Migration {
    fn sql(&self, backend: Backend) -> &'static str {
        match backend {
            Backend::Sqlite => self.sqlite,
            Backend::Postgres => self.postgres,
        }
    }

    fn checksum(&self, backend: Backend) -> String {
        hex::encode(Sha256::digest(self.sql(backend).as_bytes()))
    }
}

/// What the database says was applied: (version, name, checksum).
type Applied = Vec<(i64, String, String)>;

/// Decides what to apply, given what was applied. Errors leave the database untouched.
fn plan(applied: &Applied, backend: Backend) -> Result<Vec<&'static Migration>, StoreError> {
    let found = applied.iter().map(|a| a.0).max().unwrap_or(0);
    if found > KNOWN_SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            url: String::new(),
            found,
            known: KNOWN_SCHEMA_VERSION,
        });
    }
    for (version, _, checksum) in applied {
        if let Some(m) = MIGRATIONS.iter().find(|m| m.version == *version)
            && m.checksum(backend) != *checksum
        {
            return Err(StoreError::MigrationChanged {
                version: m.version,
                name: m.name.to_owned(),
            });
        }
    }
    Ok(MIGRATIONS.iter().filter(|m| m.version > found).collect())
}

/// The body of the migration transaction, the same text for both backends' `$tx`.
macro_rules! migrate_in {
    ($tx:ident, $backend:expr) => {{
        sqlx::raw_sql(CREATE_VERSION_TABLE)
            .execute(&mut *$tx)
            .await?;
        let rows = sqlx::query("SELECT version, name, checksum FROM schema_version")
            .fetch_all(&mut *$tx)
            .await?;
        let mut applied: Applied = Vec::with_capacity(rows.len());
        for r in &rows {
            applied.push((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?));
        }
        for m in plan(&applied, $backend)? {
            for r in m.refuse_if {
                let found: Vec<String> = sqlx::query_scalar(r.sql($backend))
                    .fetch_all(&mut *$tx)
                    .await?;
                if !found.is_empty() {
                    return Err(StoreError::MigrationRefused {
                        version: m.version,
                        name: m.name.to_owned(),
                        found: found.join("; "),
                        why: r.why,
                    });
                }
            }
            sqlx::raw_sql(m.sql($backend))
                .execute(&mut *$tx)
                .await
                .map_err(|source| StoreError::Migration {
                    version: m.version,
                    name: m.name.to_owned(),
                    source,
                })?;
            sqlx::query(
                "INSERT INTO schema_version (version, name, checksum, applied_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(m.version)
            .bind(m.name)
            .bind(m.checksum($backend))
            .bind(crate::now_ms())
            .execute(&mut *$tx)
            .await?;
        }
    }};
}

/// Brings the database up to [`KNOWN_SCHEMA_VERSION`] in one transaction.
pub(crate) async fn run(db: &Db) -> Result<(), StoreError> {
    match db {
        Db::Sqlite(pool) => {
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
            migrate_in!(tx, Backend::Sqlite);
            tx.commit().await?;
        }
        Db::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock(4242, hashtext(current_schema()))")
                .execute(&mut *tx)
                .await?;
            migrate_in!(tx, Backend::Postgres);
            tx.commit().await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folders_and_the_list_agree() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for backend in ["sqlite", "postgres"] {
            let mut files: Vec<String> = std::fs::read_dir(root.join(backend))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            files.sort();
            let listed: Vec<String> = MIGRATIONS
                .iter()
                .map(|m| format!("{:04}_{}.sql", m.version, m.name))
                .collect();
            assert_eq!(files, listed, "{backend}");
        }
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "versions are 1, 2, 3, ...");
        }
    }

    #[test]
    fn newer_and_changed_databases_are_refused() {
        let all: Applied = MIGRATIONS
            .iter()
            .map(|m| (m.version, m.name.to_owned(), m.checksum(Backend::Sqlite)))
            .collect();
        assert!(plan(&all, Backend::Sqlite).unwrap().is_empty());
        let first = all[..1].to_vec();
        let rest: Vec<i64> = plan(&first, Backend::Sqlite)
            .unwrap()
            .iter()
            .map(|m| m.version)
            .collect();
        assert_eq!(rest, (2..=KNOWN_SCHEMA_VERSION).collect::<Vec<_>>());
        assert_eq!(
            plan(&Vec::new(), Backend::Postgres).unwrap().len(),
            MIGRATIONS.len()
        );
        let newer = vec![(KNOWN_SCHEMA_VERSION + 1, "x".to_owned(), String::new())];
        let err = plan(&newer, Backend::Sqlite).unwrap_err();
        assert!(err.to_string().contains("upgrade hangar"), "{err}");
        let changed = vec![(1, "init".to_owned(), "00".to_owned())];
        assert!(matches!(
            plan(&changed, Backend::Sqlite),
            Err(StoreError::MigrationChanged { version: 1, .. })
        ));
    }
}
