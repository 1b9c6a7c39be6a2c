//! Opening a [`Store`]: the URL, the connection pools of either backend, and the macros the
//! rest of the crate uses to run one SQL text on whichever backend is open: [`read_db!`] for
//! reads, [`write_db!`] and [`in_tx!`] for writes.
//!
//! Reads and writes have separate handles, so no write can skip the writer queue: on SQLite the
//! reading pool's connections are opened read-only (a write through them fails with
//! `SQLITE_READONLY`, which the tests would meet), and the writing pool is reached only through
//! the writer mutex. PostgreSQL needs no queue (its writers do not share one lock); its two
//! handles are two pools, so reads never wait for a connection that a writer holds.
//!
//! Every query is a plain SQL string with `$1`-style parameters, which both SQLite and
//! PostgreSQL accept; the few places where the dialects differ branch on [`crate::Backend`].
//! Write transactions on SQLite start with `BEGIN IMMEDIATE`, so a transaction that reads and
//! then writes waits for the write lock (busy timeout) instead of failing midway; within one
//! process they queue on [`Store`]'s writer mutex first.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::types::Json;

use crate::error::StoreError;
use crate::migrate::{self, Backend};
use crate::vault::Vault;

/// How long a SQLite writer waits for another one before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// The page size of a new SQLite database (an existing one keeps its own): events are JSON
/// objects of about a kilobyte, and 16 KiB pages hold more of them per page and per index
/// update, for about a fifth less CPU per stored event than SQLite's default 4 KiB.
const SQLITE_PAGE_SIZE: u32 = 16384;
/// How long a caller waits for a pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// The open pool of one backend.
#[derive(Clone)]
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The control plane's store. Cheap to clone (the pool is shared); see the crate docs.
#[derive(Clone)]
pub struct Store {
    /// For reads only ([`read_db!`]): on SQLite its connections are read-only.
    pub(crate) reader: Db,
    /// For pages of events only ([`read_pages!`]): live streams catching up after a shared
    /// commit woke many of them at once queued on the readers' connections, and a person's
    /// click (its token's and its run's lookups) waited behind them (`scripts/load`: an
    /// answer's one run lookup took 1-13 ms of 200 runs' round trips). Connections of their own
    /// keep the streams' bursts off everyone else's reads.
    pub(crate) pages: Db,
    /// For writes only, through [`write_db!`] and [`in_tx!`] (which queue on `writer` first).
    pub(crate) db: Db,
    pub(crate) vault: Option<Arc<Vault>>,
    /// SQLite: this process's writers take turns here before asking for the database's write
    /// lock. SQLite's own wait for a busy lock sleeps 1, 2, 5, 10... ms between tries, so
    /// writers of one process queued on it (200 runs' commands, audits and watcher commits at
    /// once) spent most of their time asleep; queued here, each starts as the last one is
    /// done, and the writers queued together share one commit (`group.rs`). Other processes
    /// on the file still meet the busy timeout.
    pub(crate) writer: Arc<crate::group::Writer>,
    /// Each run's owner (person, environment), which never changes once the run exists: an
    /// answer, a steer and a stream each ask for it first, and under load the read waited
    /// for a connection behind the live streams' and watchers' reads.
    pub(crate) owners: Arc<std::sync::Mutex<std::collections::HashMap<String, (String, String)>>>,
    /// Tokens authenticated lately ([`crate::tokens::Kept`]): every request asks.
    pub(crate) tokens: Arc<std::sync::Mutex<crate::tokens::Kept>>,
    /// Permission requests this process recorded, by run and request id
    /// ([`crate::ids::KnownRequests`]).
    pub(crate) requests: Arc<std::sync::Mutex<crate::ids::KnownRequests>>,
    /// This open store's own name in the notices it sends (`notices.rs`), so it can skip them.
    pub(crate) origin: Arc<str>,
    url: String,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.url)
            .field("vault", &self.vault.is_some())
            .finish()
    }
}

/// Runs the read `$body` with `$pool` bound to the open backend's reading pool (a different
/// type in each arm, so the body is compiled once per backend). A write here fails on SQLite.
macro_rules! read_db {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.reader {
            $crate::db::Db::Sqlite($pool) => $body,
            $crate::db::Db::Postgres($pool) => $body,
        }
    };
}

/// [`read_db!`] on the pool kept for pages of events ([`Store::pages`]).
macro_rules! read_pages {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.pages {
            $crate::db::Db::Sqlite($pool) => $body,
            $crate::db::Db::Postgres($pool) => $body,
        }
    };
}

/// SQLite: runs `$body` with `$conn` bound to the connection of the transaction open in the
/// writer's queue, inside this caller's savepoint (`group.rs`), and returns once it committed.
macro_rules! in_turn {
    ($store:expr, $pool:expr, $conn:ident => $body:expr) => {{
        let mut turn = $store.writer.enter($pool).await?;
        let out = {
            let $conn = turn.conn();
            $body
        };
        turn.finish().await?;
        out
    }};
}

/// Runs `$body` in a write transaction bound to `$tx` and commits it; an early return (`?`)
/// drops the transaction, which rolls it back.
macro_rules! in_tx {
    ($store:expr, $tx:ident => $body:block) => {
        match &$store.db {
            $crate::db::Db::Sqlite(pool) => $crate::db::in_turn!($store, pool, $tx => $body),
            $crate::db::Db::Postgres(pool) => {
                let mut $tx = pool.begin().await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
        }
    };
}

/// [`read_db!`] for a write outside a transaction: on SQLite, in the writer's queue as [`in_tx!`]
/// is (`$pool` is then the connection of the open transaction, inside the caller's savepoint).
macro_rules! write_db {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.db {
            $crate::db::Db::Sqlite(pool) => $crate::db::in_turn!($store, pool, $pool => $body),
            $crate::db::Db::Postgres($pool) => $body,
        }
    };
}

pub(crate) use {in_turn, in_tx, read_db, read_pages, write_db};

impl Store {
    /// Opens (and migrates) the database at `url`:
    /// - `sqlite:///ABSOLUTE/PATH.db`: created (mode 0600) if missing; WAL, foreign keys on,
    ///   a busy timeout of 30 s;
    /// - `postgres://USER:PASSWORD@HOST:PORT/DB` (or `postgresql://`), with sqlx's URL
    ///   parameters (e.g. `?options=-c%20search_path%3DSCHEMA` to use a schema).
    ///
    /// Fails with [`StoreError::TooNew`] if a newer hangar migrated the database.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let shown = redact_url(url);
        let mut sqlite_opts = None;
        let db = if let Some(path) = url.strip_prefix("sqlite://") {
            let (db, opts) = open_sqlite(path, &shown).await?;
            sqlite_opts = Some(opts);
            db
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let opts = PgConnectOptions::from_str(url).map_err(|e| StoreError::BadUrl {
                url: shown.clone(),
                why: e.to_string(),
            })?;
            Db::Postgres(pg_pool(opts, &shown).await?)
        } else {
            return Err(StoreError::BadUrl {
                url: shown,
                why: "it must start with sqlite:// or postgres://".into(),
            });
        };
        migrate::run(&db).await.map_err(|e| match e {
            StoreError::TooNew { found, known, .. } => StoreError::TooNew {
                url: shown.clone(),
                found,
                known,
            },
            e => e,
        })?;
        // Connections of their own: a read (a token's lookup, a live stream's page) never
        // waits for a connection held by a writer waiting for the events' order lock (under
        // 200 runs' commits, answers waited 300 ms for one).
        let reading = || async {
            match &db {
                Db::Sqlite(_) => reader_of_sqlite(url, &shown).await,
                Db::Postgres(pool) => Ok(Db::Postgres(
                    pg_pool((*pool.connect_options()).clone(), &shown).await?,
                )),
            }
        };
        let reader = reading().await?;
        let pages = reading().await?;
        let writer = Arc::new(crate::group::Writer::default());
        if let Some(opts) = sqlite_opts {
            let task = crate::checkpoint::Checkpointer::start(&opts)
                .await
                .map_err(|source| StoreError::Open {
                    url: shown.clone(),
                    source,
                })?;
            writer.checkpoint_with(task);
        }
        Ok(Store {
            reader,
            pages,
            db,
            vault: None,
            writer,
            owners: Arc::default(),
            tokens: Arc::default(),
            requests: Arc::default(),
            origin: crate::new_id("origin")?.into(),
            url: shown,
        })
    }

    /// Which backend this store runs on.
    pub fn backend(&self) -> Backend {
        match self.db {
            Db::Sqlite(_) => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    /// The URL it was opened with, password removed.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema version the database is at.
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let v: Option<i64> = read_db!(self, pool => {
            sqlx::query_scalar("SELECT MAX(version) FROM schema_version")
                .fetch_one(pool)
                .await?
        });
        Ok(v.unwrap_or(0))
    }

    /// A consistent copy of a SQLite store in `dest` (a file that must not exist), taken while
    /// the store is in use: `VACUUM INTO` reads the whole database in one read transaction, so
    /// the copy is the database as of one moment, and writers go on meanwhile (SQLite's online
    /// backup, the form sqlx can run). The vault's master key is not in the database, so not in
    /// the copy. PostgreSQL has its own tool for this (`pg_dump`): refused here, naming it.
    pub async fn backup_to(&self, dest: &std::path::Path) -> Result<(), StoreError> {
        let Some(dest_text) = dest.to_str() else {
            return Err(StoreError::Invalid(format!(
                "{}: the backup's path must be UTF-8",
                dest.display()
            )));
        };
        match &self.db {
            Db::Sqlite(pool) => {
                // The copy holds sealed secrets, token hashes and every prompt: made here first,
                // new (create_new: never an existing file, and no link is followed), mode 0600, so no one
                // else can open it before or after SQLite fills it (it writes into an empty file).
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(dest)
                        .map_err(|e| {
                            StoreError::Invalid(format!("{}: {e}", dest.display()))
                        })?;
                }
                sqlx::query("VACUUM INTO ?")
                    .bind(dest_text)
                    .execute(pool)
                    .await?;
                Ok(())
            }
            Db::Postgres(_) => Err(StoreError::Invalid(
                "this store is on PostgreSQL: back it up with pg_dump (e.g. `pg_dump --format=custom --file=hangar.dump \"$HANGAR_DATABASE_URL\"`) and bring it back with pg_restore".into(),
            )),
        }
    }

    /// Closes the pools, waiting for connections in use to come back.
    pub async fn close(&self) {
        self.writer.stop_checkpoints();
        read_db!(self, pool => pool.close().await);
        read_pages!(self, pool => pool.close().await);
        match &self.db {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
    }
}

/// How long a pooled PostgreSQL connection may sit idle before it is pinged when next taken.
const PG_PING_AFTER_IDLE: Duration = Duration::from_secs(30);

/// A pool of PostgreSQL connections made with `opts`. A connection taken from the pool is
/// pinged only if it sat idle for [`PG_PING_AFTER_IDLE`] (a server restarted or a connection
/// cut meanwhile): sqlx's default pings before every statement, one more round trip to the
/// server each time, which under `scripts/load` doubled the statements a busy pool sent.
async fn pg_pool(opts: PgConnectOptions, shown: &str) -> Result<PgPool, StoreError> {
    PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PG_PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .connect_with(opts)
        .await
        .map_err(|source| StoreError::Open {
            url: shown.to_owned(),
            source,
        })
}

/// The reading pool of an open (and migrated) SQLite database: the same file, connections opened
/// read-only. WAL lets them read while the writer writes.
async fn reader_of_sqlite(url: &str, shown: &str) -> Result<Db, StoreError> {
    let path = url.strip_prefix("sqlite://").unwrap_or(url);
    let opts = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .foreign_keys(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT);
    sqlite_pool(opts, shown).await
}

/// A pool of SQLite connections made with `opts`. Nothing is pinged when a connection is taken:
/// it is a file this process holds open, through a worker thread of sqlx's, and a ping was one
/// more hand-off to that thread and back before every statement (profiled under
/// `scripts/load`: about a third of the statements the server's threads passed around).
async fn sqlite_pool(opts: SqliteConnectOptions, shown: &str) -> Result<Db, StoreError> {
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .connect_with(opts)
        .await
        .map_err(|source| StoreError::Open {
            url: shown.to_owned(),
            source,
        })?;
    Ok(Db::Sqlite(pool))
}

async fn open_sqlite(path: &str, shown: &str) -> Result<(Db, SqliteConnectOptions), StoreError> {
    let bad = |why: &str| StoreError::BadUrl {
        url: shown.to_owned(),
        why: why.to_owned(),
    };
    if !path.starts_with('/') {
        return Err(bad(
            "the path must be absolute (three slashes: sqlite:///...)",
        ));
    }
    if path.contains('?') {
        return Err(bad("query parameters are not supported"));
    }
    let path = Path::new(path);
    match path.parent() {
        Some(dir) if dir.is_dir() => {}
        _ => return Err(bad("its folder does not exist; create it first")),
    }
    create_private(path).map_err(|e| StoreError::Open {
        url: shown.to_owned(),
        source: sqlx::Error::Io(e),
    })?;
    let opts = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .page_size(SQLITE_PAGE_SIZE)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT)
        // Checkpoints are the checkpoint task's (`checkpoint.rs`); this is the backstop.
        .pragma(
            "wal_autocheckpoint",
            crate::checkpoint::BACKSTOP_PAGES.to_string(),
        )
        .pragma(
            "journal_size_limit",
            crate::checkpoint::WAL_KEEP_BYTES.to_string(),
        );
    let db = sqlite_pool(opts.clone(), shown).await?;
    Ok((db, opts))
}

/// Creates an empty database file readable by its owner only (SQLite gives its `-wal` and
/// `-shm` files the same mode); an existing file is left as it is.
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// `url` with the password (between `:` and `@` after the scheme) replaced by `***`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Typed column access, implemented for both backends' rows so row-to-struct functions are
/// written once.
pub(crate) trait Cols {
    fn text(&self, c: &str) -> Result<String, StoreError>;
    fn opt_text(&self, c: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, c: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, c: &str) -> Result<Option<i64>, StoreError>;
    fn opt_float(&self, c: &str) -> Result<Option<f64>, StoreError>;
    fn flag(&self, c: &str) -> Result<bool, StoreError>;
    fn json(&self, c: &str) -> Result<Value, StoreError>;
    fn opt_json(&self, c: &str) -> Result<Option<Value>, StoreError>;
}

macro_rules! impl_cols {
    ($row:ty) => {
        impl Cols for $row {
            fn text(&self, c: &str) -> Result<String, StoreError> {
                Ok(self.try_get(c)?)
            }
            fn opt_text(&self, c: &str) -> Result<Option<String>, StoreError> {
                Ok(self.try_get(c)?)
            }
            fn int(&self, c: &str) -> Result<i64, StoreError> {
                Ok(self.try_get(c)?)
            }
            fn opt_int(&self, c: &str) -> Result<Option<i64>, StoreError> {
                Ok(self.try_get(c)?)
            }
            fn opt_float(&self, c: &str) -> Result<Option<f64>, StoreError> {
                Ok(self.try_get(c)?)
            }
            fn flag(&self, c: &str) -> Result<bool, StoreError> {
                Ok(self.try_get(c)?)
            }
            fn json(&self, c: &str) -> Result<Value, StoreError> {
                let Json(v): Json<Value> = self.try_get(c)?;
                Ok(v)
            }
            fn opt_json(&self, c: &str) -> Result<Option<Value>, StoreError> {
                let v: Option<Json<Value>> = self.try_get(c)?;
                Ok(v.map(|Json(v)| v))
            }
        }
    };
}

impl_cols!(SqliteRow);
impl_cols!(PgRow);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::{Db, Store, redact_url};

    /// The reading handle cannot write on SQLite, so a write that skipped the writer queue (and
    /// its mutex) fails in the tests instead of racing in production; the writing handle can.
    #[tokio::test]
    async fn on_sqlite_only_the_writing_handle_writes() -> Result<(), crate::StoreError> {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/h.db", dir.path().display());
        let store = Store::open(&url).await.unwrap();
        let insert = "INSERT INTO environments (name, spec, created_at) VALUES ('x', '{}', 0)";
        let through_reader = read_db!(store, pool => sqlx::query(insert).execute(pool).await.map(|r| r.rows_affected()));
        let err = through_reader.unwrap_err().to_string();
        assert!(err.contains("readonly"), "{err}");
        let through_writer = write_db!(store, pool => sqlx::query(insert).execute(pool).await.map(|r| r.rows_affected()));
        assert_eq!(through_writer.unwrap(), 1);
        // And what the writer wrote, the reader reads.
        let n: i64 = read_db!(store, pool => sqlx::query_scalar("SELECT COUNT(*) FROM environments WHERE name = 'x'").fetch_one(pool).await.unwrap());
        assert_eq!(n, 1);
        assert!(matches!(store.reader, Db::Sqlite(_)));
        Ok(())
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact_url("postgres://hangar:s3cret@127.0.0.1:5433/db?x=1"),
            "postgres://hangar:***@127.0.0.1:5433/db?x=1"
        );
        assert_eq!(redact_url("postgres://h@host/db"), "postgres://h@host/db");
        assert_eq!(redact_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
    }
}
