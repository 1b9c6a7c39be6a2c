//! Group commit for SQLite (issue 22): the writes of many callers share one transaction.
//!
//! SQLite has one writer. With 200 live runs, each watcher's slice, each command's record and
//! each audit record was its own transaction, and a commit writes every page it touched to the
//! WAL again (16 KiB each: the events table, its two indexes, the run's row), so 200 runs spent
//! the writer on rewriting the same pages: measured under `scripts/load`, writes waited 250 ms
//! (p50) for their turn, and a person's Live view lagged the harness by as much.
//!
//! Here the callers still take turns (the same queue as before, [`tokio::sync::Mutex`] is
//! first-come first-served), but a turn opens a transaction only if none is open: each caller's
//! writes go in a savepoint of the open one, and the commit is made by a task of its own that
//! queues behind the callers waiting when the transaction began. So the commit covers everyone
//! who queued meanwhile, and a caller returns once the commit that holds its writes is done: a
//! write is never reported stored before it is.
//!
//! A caller that stops half-way (an early `?` in its writes, or its future dropped) leaves its
//! savepoint open; the next turn rolls back to it first, so its half is never committed. A
//! commit that fails fails every caller in it.
//!
//! Hand-written because this is about hangar's own write pattern; sqlx pools have no group
//! commit, and a dedicated writer thread would need every write's data owned and sent to it.

use std::sync::Arc;

use sqlx::{Sqlite, SqliteConnection, SqlitePool, Transaction};
use tokio::sync::{Mutex, MutexGuard, watch};

use crate::checkpoint::Checkpointer;
use crate::error::StoreError;

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What every caller of one transaction waits for: its commit's outcome.
type Outcome = Option<Result<(), String>>;

/// The writer's queue and the transaction open in it (SQLite only).
#[derive(Debug, Default)]
pub(crate) struct Writer {
    open: Mutex<Open>,
    /// Transactions committed (each holding one or more callers' writes).
    commits: std::sync::atomic::AtomicU64,
    /// The WAL's checkpoint task, told of every commit (`checkpoint.rs`).
    checkpoints: std::sync::Mutex<Option<Checkpointer>>,
}

#[derive(Debug)]
pub(crate) struct Open {
    tx: Option<Transaction<'static, Sqlite>>,
    /// A caller's savepoint was left open (it returned early or was dropped).
    dirty: bool,
    /// The open transaction's outcome, once committed.
    done: watch::Sender<Outcome>,
}

impl Default for Open {
    fn default() -> Open {
        Open {
            tx: None,
            dirty: false,
            done: watch::channel(None).0,
        }
    }
}

/// One caller's turn: its writes go in a savepoint of the open transaction.
pub(crate) struct Turn<'a> {
    open: MutexGuard<'a, Open>,
}

const SAVEPOINT: &str = "SAVEPOINT hangar_write";
const RELEASE: &str = "RELEASE hangar_write";
const UNDO: &str = "ROLLBACK TO hangar_write";

impl Writer {
    /// Waits for this caller's turn, opens a transaction if none is open (and a task to commit
    /// it), and starts the caller's savepoint.
    pub(crate) async fn enter(self: &Arc<Self>, pool: &SqlitePool) -> Result<Turn<'_>, StoreError> {
        let mut open = self.open.lock().await;
        open.undo_dirty().await;
        if open.tx.is_none() {
            open.tx = Some(pool.begin_with("BEGIN IMMEDIATE").await?);
            open.done = watch::channel(None).0;
            let w = Arc::clone(self);
            tokio::spawn(async move { w.commit().await });
        }
        let tx = open.conn();
        sqlx::query(SAVEPOINT).execute(&mut *tx).await?;
        open.dirty = true;
        Ok(Turn { open })
    }

    /// Commits the open transaction, in its turn (after the callers queued before it).
    async fn commit(&self) {
        let mut open = self.open.lock().await;
        open.undo_dirty().await;
        let Some(tx) = open.tx.take() else {
            return;
        };
        let outcome = tx.commit().await.map_err(|e| e.to_string());
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(c) = lock(&self.checkpoints).as_ref() {
            c.nudge();
        }
        open.done.send_replace(Some(outcome));
    }
}

impl Writer {
    /// Hands the WAL's checkpoints to `task`.
    pub(crate) fn checkpoint_with(&self, task: Checkpointer) {
        *lock(&self.checkpoints) = Some(task);
    }

    /// Stops the checkpoint task (the store is closing; the last connection's close
    /// checkpoints what is left).
    pub(crate) fn stop_checkpoints(&self) {
        lock(&self.checkpoints).take();
    }

    /// How many checkpoints the checkpoint task ran.
    #[cfg(test)]
    pub(crate) fn checkpoints(&self) -> u64 {
        lock(&self.checkpoints)
            .as_ref()
            .map_or(0, Checkpointer::runs)
    }

    /// How many transactions it committed.
    #[cfg(test)]
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Open {
    fn conn(&mut self) -> &mut SqliteConnection {
        // Only called with a transaction open (`enter` opened it).
        match self.tx.as_mut() {
            Some(tx) => tx,
            None => unreachable!("a turn without a transaction"),
        }
    }

    /// Rolls back what a caller that stopped half-way wrote; if that fails, the whole open
    /// transaction (its callers are told it failed).
    async fn undo_dirty(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        let Some(tx) = self.tx.as_mut() else {
            return;
        };
        let undone = async {
            sqlx::query(UNDO).execute(&mut **tx).await?;
            sqlx::query(RELEASE).execute(&mut **tx).await
        }
        .await;
        if let Err(e) = undone {
            if let Some(tx) = self.tx.take() {
                let _ = tx.rollback().await;
            }
            self.done.send_replace(Some(Err(format!(
                "a write that stopped half-way could not be undone alone: {e}"
            ))));
        }
    }
}

impl Turn<'_> {
    /// The connection to write through (inside the caller's savepoint).
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        self.open.conn()
    }

    /// Ends the caller's savepoint, gives the next caller its turn, and waits for the commit
    /// that holds these writes.
    pub(crate) async fn finish(mut self) -> Result<(), StoreError> {
        sqlx::query(RELEASE).execute(self.open.conn()).await?;
        self.open.dirty = false;
        let mut done = self.open.done.subscribe();
        drop(self.open);
        let outcome = done
            .wait_for(Option::is_some)
            .await
            .map(|o| o.clone())
            .map_err(|_| sqlx::Error::Protocol("the group commit was dropped".into()))?;
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(sqlx::Error::Protocol(format!(
                "the transaction holding this write failed to commit: {e}"
            ))
            .into()),
            None => Err(
                sqlx::Error::Protocol("the group commit ended without an outcome".into()).into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use crate::Store;
    use crate::db::{Db, in_tx, read_db, write_db};

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/h.db", dir.path().display());
        let store = Store::open(&url).await.unwrap();
        (dir, store)
    }

    async fn names(store: &Store) -> Vec<String> {
        read_db!(store, pool => sqlx::query_scalar("SELECT name FROM environments ORDER BY name")
            .fetch_all(pool)
            .await
            .unwrap())
    }

    async fn add(store: &Store, name: &str) -> Result<(), crate::StoreError> {
        add_with(store, name, "{}").await
    }

    async fn add_with(store: &Store, name: &str, spec: &str) -> Result<(), crate::StoreError> {
        write_db!(store, pool => {
            sqlx::query("INSERT INTO environments (name, spec, created_at) VALUES ($1, $2, 0)")
                .bind(name)
                .bind(spec)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Writers queued together share a commit, and each returns only once its write is
    /// committed (a reader on another connection sees it at once).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_writers_share_commits_and_return_committed() {
        let (_dir, store) = store().await;
        let before = store.writer.commits();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..64 {
            let store = store.clone();
            set.spawn(async move {
                let name = format!("env-{i:02}");
                add(&store, &name).await.unwrap();
                let seen: i64 = read_db!(store, pool => sqlx::query_scalar(
                    "SELECT COUNT(*) FROM environments WHERE name = $1")
                    .bind(&name)
                    .fetch_one(pool)
                    .await
                    .unwrap());
                assert_eq!(seen, 1, "{name} returned before it was committed");
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        assert_eq!(names(&store).await.len(), 64);
        let commits = store.writer.commits() - before;
        assert!(commits < 64, "64 queued writers made {commits} commits");
    }

    /// The WAL is checkpointed by the checkpoint task after commits, not left to the writer
    /// (whose own checkpoint waits for 256 MiB of WAL): given a pause after each two megabytes
    /// committed, the task catches up, and the WAL starts again instead of growing with every
    /// write.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_is_checkpointed_after_commits_by_a_task_of_its_own() {
        let (dir, store) = store().await;
        let wal = dir.path().join("h.db-wal");
        let big = "x".repeat(200 << 10);
        for batch in 0..10 {
            for i in 0..10 {
                add_with(&store, &format!("env-{batch}-{i}"), &big)
                    .await
                    .unwrap();
            }
            // A pause (as between a watcher's slices): the task catches up.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let mut seen = store.writer.checkpoints();
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                let now = store.writer.checkpoints();
                if now > 0 && now == seen {
                    break;
                }
                seen = now;
                assert!(
                    std::time::Instant::now() < deadline,
                    "checkpoints never settled"
                );
            }
        }
        let wal_bytes = std::fs::metadata(&wal).unwrap().len();
        assert!(
            wal_bytes < 8 << 20,
            "20 MB written in 10 checkpointed batches left a WAL of {wal_bytes} bytes"
        );
        assert_eq!(names(&store).await.len(), 100);
    }

    /// A writer that stops half-way (its future dropped, or an early return) is rolled back
    /// alone: what it wrote is never committed, what the next writer writes is.
    #[tokio::test]
    async fn a_writer_that_stops_half_way_is_undone_alone() {
        let (_dir, store) = store().await;
        let Db::Sqlite(pool) = &store.db else {
            unreachable!()
        };
        add(&store, "before").await.unwrap();
        {
            let mut turn = store.writer.enter(pool).await.unwrap();
            sqlx::query(
                "INSERT INTO environments (name, spec, created_at) VALUES ('half', '{}', 0)",
            )
            .execute(turn.conn())
            .await
            .unwrap();
            // Dropped here without `finish`: as a cancelled future or an early `?` leaves it.
        }
        add(&store, "after").await.unwrap();
        assert_eq!(names(&store).await, ["after", "before"]);
        // And an error part-way through a write: the part before the error is undone.
        let failed: Result<(), crate::StoreError> = async {
            in_tx!(store, tx => {
                sqlx::query("INSERT INTO environments (name, spec, created_at) VALUES ('first-half', '{}', 0)")
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("INSERT INTO no_such_table VALUES (1)").execute(&mut *tx).await?;
            });
            Ok(())
        }
        .await;
        assert!(failed.is_err());
        add(&store, "last").await.unwrap();
        assert_eq!(names(&store).await, ["after", "before", "last"]);
    }
}
