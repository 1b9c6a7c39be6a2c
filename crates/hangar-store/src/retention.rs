//! Retention: which ended runs are old enough to prune, and marking one pruned with its events
//! gone. A pruned run's row stays (with `pruned_at`), and so do its turn, commands, approvals
//! and audit records: what was done, and by whom, is kept; the bulk (log, trees, events) goes.
//! A live run is never pruned, whatever its age.

use sqlx::Row;

use crate::db::{Store, read_db, write_db};
use crate::error::StoreError;
use crate::now_ms;

/// An ended run retention may prune.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prunable {
    pub run_id: String,
    pub session_id: String,
    /// Its control folder, as recorded.
    pub ctl_path: String,
    pub ended_at: i64,
}

impl Store {
    /// Ended runs not yet pruned whose turn ended before `ended_before_ms`, oldest first.
    pub async fn prunable_runs(&self, ended_before_ms: i64) -> Result<Vec<Prunable>, StoreError> {
        let sql = "SELECT r.id, r.ctl_path, r.ended_at, t.session_id FROM runs r \
                   JOIN turns t ON t.id = r.turn_id \
                   WHERE r.state = 'ended' AND r.ended_at < $1 AND r.pruned_at IS NULL \
                   ORDER BY r.ended_at";
        read_db!(self, pool => {
            let rows = sqlx::query(sql).bind(ended_before_ms).fetch_all(pool).await?;
            rows.iter()
                .map(|r| {
                    Ok(Prunable {
                        run_id: r.try_get("id")?,
                        ctl_path: r.try_get("ctl_path")?,
                        ended_at: r.try_get::<Option<i64>, _>("ended_at")?.unwrap_or(0),
                        session_id: r.try_get("session_id")?,
                    })
                })
                .collect()
        })
    }

    /// Marks ended run `run_id` pruned and deletes its events; how many went. A live run, or
    /// one pruned already, is left as it is (0).
    pub async fn prune_run(&self, run_id: &str) -> Result<u64, StoreError> {
        let marked = write_db!(self, pool => {
            sqlx::query("UPDATE runs SET pruned_at = $2 WHERE id = $1 AND state = 'ended' AND pruned_at IS NULL")
                .bind(run_id)
                .bind(now_ms())
                .execute(pool)
                .await?
                .rows_affected()
        });
        if marked == 0 {
            return Ok(0);
        }
        write_db!(self, pool => {
            sqlx::query("DELETE FROM kept_files WHERE run_id = $1")
                .bind(run_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        let gone = write_db!(self, pool => {
            sqlx::query("DELETE FROM events WHERE run_id = $1")
                .bind(run_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(gone)
    }

    /// Whether run `run_id` was pruned, and when.
    pub async fn run_pruned_at(&self, run_id: &str) -> Result<Option<i64>, StoreError> {
        read_db!(self, pool => {
            let v: Option<Option<i64>> = sqlx::query_scalar("SELECT pruned_at FROM runs WHERE id = $1")
                .bind(run_id)
                .fetch_optional(pool)
                .await?;
            Ok(v.flatten())
        })
    }

    /// Sessions with no turn queued or running, no live run, and every run ended before
    /// `before_ms` (their kept conversations may go: a turn about to start has none of these).
    pub async fn sessions_quiet_since(&self, before_ms: i64) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT s.id FROM sessions s WHERE EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id) \
                   AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id AND t.state IN ('queued', 'running')) \
                   AND NOT EXISTS (SELECT 1 FROM turns t JOIN runs r ON r.turn_id = t.id \
                   WHERE t.session_id = s.id AND (r.state = 'live' OR r.ended_at IS NULL OR r.ended_at >= $1))";
        read_db!(self, pool => {
            let ids: Vec<String> = sqlx::query_scalar(sql).bind(before_ms).fetch_all(pool).await?;
            Ok(ids)
        })
    }
}
