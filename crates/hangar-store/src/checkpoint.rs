//! SQLite's WAL checkpoints, off the writer's path (issue 22).
//!
//! In WAL mode a commit appends the pages it changed to the `-wal` file, and by default the
//! connection that commits then copies them back into the database file, and syncs both, once
//! the WAL holds 1,000 pages: one commit in every few paid for all the others, on the one
//! writer every run's watcher, answer and audit record waits for. Profiled under the ingest
//! bench (`cargo bench -p hangar-control -- ingest`), checkpoints were a fifth of the writer
//! thread's time and most of its syscalls.
//!
//! Here a task of its own, on a connection of its own, runs a PASSIVE checkpoint after commits:
//! one at a time, the commits made meanwhile folded into the next one. (Waiting for a pause in
//! the commits first, to copy a page many commits rewrite once, measured slower on the ingest
//! bench: 0.37-0.40x of the parse-only rate against 0.44-0.45x, alternating runs.) A PASSIVE
//! checkpoint takes no lock a writer or a reader waits for, so the writer goes on while it
//! copies; the WAL starts again from its beginning at the first write after a checkpoint that
//! caught up (so under writes with no pause between them it grows up to the backstop: a
//! watcher's slices pause while the next one is parsed). The writer's own automatic checkpoint stays as a backstop at [`BACKSTOP_PAGES`] (should this
//! task fall behind, or be gone), and the WAL file is cut back to [`WAL_KEEP_BYTES`] when it
//! starts again, so a burst does not leave a large file behind.
//!
//! Nothing about durability changes: commits are not synced either way (`synchronous =
//! NORMAL`), and a checkpoint syncs what it copied, as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, SqliteConnection};
use tokio::sync::Notify;

/// The writer checkpoints by itself once the WAL holds this many pages (256 MiB of 16 KiB
/// pages): only if the checkpoint task has not kept up.
pub(crate) const BACKSTOP_PAGES: u32 = 16_384;
/// The size a WAL file is cut back to when it starts again.
pub(crate) const WAL_KEEP_BYTES: u64 = 64 << 20;

/// The checkpoint task of one SQLite database. Dropping it stops the task.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    wake: Arc<Notify>,
    /// Checkpoints run (whatever their outcome).
    runs: Arc<AtomicU64>,
    task: tokio::task::AbortHandle,
}

impl Checkpointer {
    /// Opens the task's connection (with `opts`, the writer's options) and starts it.
    pub(crate) async fn start(opts: &SqliteConnectOptions) -> Result<Checkpointer, sqlx::Error> {
        let mut conn = opts.clone().connect().await?;
        let wake = Arc::new(Notify::new());
        let runs = Arc::new(AtomicU64::new(0));
        let (w, r) = (Arc::clone(&wake), Arc::clone(&runs));
        let task = tokio::spawn(async move {
            loop {
                // A wake-up while a checkpoint runs is kept (one permit): the commits it
                // stands for are covered by the next checkpoint.
                w.notified().await;
                checkpoint(&mut conn).await;
                r.fetch_add(1, Ordering::Relaxed);
            }
        })
        .abort_handle();
        Ok(Checkpointer { wake, runs, task })
    }

    /// A commit was made: checkpoint soon.
    pub(crate) fn nudge(&self) {
        self.wake.notify_one();
    }

    /// How many checkpoints the task has run.
    #[cfg_attr(not(test), expect(dead_code, reason = "read by tests"))]
    pub(crate) fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One PASSIVE checkpoint. A failure (the database busy with another checkpoint, a full disk)
/// is left for the next one or the writer's backstop: no write depends on it.
async fn checkpoint(conn: &mut SqliteConnection) {
    let _ = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
        .execute(conn)
        .await;
}
