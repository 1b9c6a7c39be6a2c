//! Runs: one driver process executing one turn. Created with its key sealed by the vault; the
//! run watchers find the live ones, with their log cursors, after a restart.
//!
//! Non-goals: starting or watching drivers (the control plane does), moving the cursor outside
//! [`Store::commit_events`].

use crate::db::{Cols, in_tx, read_db, write_db};
use crate::error::StoreError;
use crate::model::*;
use crate::secrets::RUN_KEY;
use crate::vault::Secret;
use crate::{Store, now_ms};

const RUN_COLS: &str = "id, turn_id, ctl_path, log_cursor, watch_state, state, driver_pid, \
     run_key IS NOT NULL AS has_key, created_at, ended_at";

fn run_from(r: &impl Cols) -> Result<Run, StoreError> {
    Ok(Run {
        id: r.text("id")?,
        turn_id: r.text("turn_id")?,
        ctl_path: r.text("ctl_path")?,
        log_cursor: r.int("log_cursor")?,
        watch_state: r.opt_json("watch_state")?,
        state: r.text("state")?.parse()?,
        driver_pid: r.opt_int("driver_pid")?,
        has_key: r.flag("has_key")?,
        created_at: r.int("created_at")?,
        ended_at: r.opt_int("ended_at")?,
    })
}

fn no_run(id: &str) -> StoreError {
    StoreError::NotFound {
        what: "run",
        key: id.to_owned(),
    }
}

impl Store {
    /// Creates a live run for a turn that has none yet, with its key sealed by the vault, and
    /// links the turn to it, in one transaction.
    pub async fn create_run(&self, run: &NewRun, run_key: &Secret) -> Result<Run, StoreError> {
        let sealed = self.vault()?.seal(RUN_KEY, &run.id, run_key.expose())?;
        in_tx!(self, tx => {
            sqlx::query(
                "INSERT INTO runs (id, turn_id, ctl_path, run_key, state, driver_pid, created_at, \
                 lease_holder, lease_until) VALUES ($1, $2, $3, $4, 'live', $5, $6, $7, $8)",
            )
            .bind(&run.id)
            .bind(&run.turn_id)
            .bind(&run.ctl_path)
            .bind(&sealed)
            .bind(run.driver_pid)
            .bind(now_ms())
            .bind(run.lease.as_ref().map(|(holder, _)| holder.as_str()))
            .bind(run.lease.as_ref().map(|(_, until)| *until))
            .execute(&mut *tx)
            .await?;
            let linked = sqlx::query("UPDATE turns SET run_id = $1 WHERE id = $2 AND run_id IS NULL")
                .bind(&run.id)
                .bind(&run.turn_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if linked == 0 {
                return Err(StoreError::Conflict(format!(
                    "turn {} already has a run",
                    run.turn_id
                )));
            }
        });
        self.run(&run.id).await
    }

    /// The run `id`.
    pub async fn run(&self, id: &str) -> Result<Run, StoreError> {
        let sql = format!("SELECT {RUN_COLS} FROM runs WHERE id = $1");
        read_db!(self, pool => {
            let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id);
            q.fetch_optional(pool).await?.as_ref().map(run_from).transpose()?
        })
        .ok_or_else(|| no_run(id))
    }

    /// Whose a run is: its sandbox's person and environment (through its turn and session),
    /// in one read. The API asks this before every command a person sends a run (issue 22:
    /// under load each of four reads queued for the pool on its own).
    pub async fn run_owner(&self, id: &str) -> Result<(String, String), StoreError> {
        /// Owners kept at most (then forgotten all at once: a read each brings them back).
        const KEPT: usize = 100_000;
        if let Some(owner) = self.owners.lock().ok().and_then(|o| o.get(id).cloned()) {
            return Ok(owner);
        }
        let owner = read_db!(self, pool => {
            let q = sqlx::query(
                "SELECT sb.person AS person, sb.environment AS environment FROM runs r \
                 JOIN turns t ON t.id = r.turn_id JOIN sessions s ON s.id = t.session_id \
                 JOIN sandboxes sb ON sb.id = s.sandbox_id WHERE r.id = $1",
            )
            .bind(id);
            match q.fetch_optional(pool).await? {
                Some(row) => Some((row.text("person")?, row.text("environment")?)),
                None => None,
            }
        })
        .ok_or_else(|| no_run(id))?;
        if let Ok(mut kept) = self.owners.lock() {
            if kept.len() >= KEPT {
                kept.clear();
            }
            kept.insert(id.to_owned(), owner.clone());
        }
        Ok(owner)
    }

    /// The live runs, oldest first, with their cursors: what the watchers re-attach to.
    pub async fn live_runs(&self) -> Result<Vec<Run>, StoreError> {
        let sql =
            format!("SELECT {RUN_COLS} FROM runs WHERE state = 'live' ORDER BY created_at, id");
        read_db!(self, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?;
            rows.iter().map(run_from).collect()
        })
    }

    /// The session's current run: its last turn's, while that turn runs (or is queued) and the
    /// run is live.
    pub async fn live_run_of(&self, session_id: &str) -> Result<Option<Run>, StoreError> {
        let turns = self.turns(session_id).await?;
        let Some(last) = turns.last() else {
            return Ok(None);
        };
        match (&last.run_id, last.state) {
            (Some(run), crate::TurnState::Running | crate::TurnState::Queued) => {
                let run = self.run(run).await?;
                Ok(Some(run).filter(|r| r.state == crate::RunState::Live))
            }
            _ => Ok(None),
        }
    }

    /// Records the driver's process id.
    pub async fn set_driver_pid(&self, run_id: &str, pid: i64) -> Result<(), StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query("UPDATE runs SET driver_pid = $2 WHERE id = $1")
                .bind(run_id)
                .bind(pid)
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 0 {
            return Err(no_run(run_id));
        }
        Ok(())
    }

    /// Marks a run ended; true if it was live.
    pub async fn end_run(&self, run_id: &str) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query("UPDATE runs SET state = 'ended', ended_at = $2 WHERE id = $1 AND state = 'live'")
                .bind(run_id)
                .bind(now_ms())
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 0 {
            self.run(run_id).await?;
        }
        Ok(n > 0)
    }

    /// Claims live run `run_id` for `holder` until `until_ms`, or renews `holder`'s claim: true
    /// if `holder` holds it now (it was free, its lease had run out at `now_ms`, or it was
    /// `holder`'s already). Replicas sharing a database watch each live run one at a time: the
    /// holder renews its claim while it watches, another takes the run over once the lease
    /// has run out.
    pub async fn claim_run(
        &self,
        run_id: &str,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query(
                "UPDATE runs SET lease_holder = $2, lease_until = $4 \
                 WHERE id = $1 AND state = 'live' \
                 AND (lease_holder IS NULL OR lease_holder = $2 OR lease_until < $3)",
            )
            .bind(run_id)
            .bind(holder)
            .bind(now_ms)
            .bind(until_ms)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// Records replica `id` (this process, at its start) and the address the others reach it at.
    pub async fn register_replica(
        &self,
        id: &str,
        url: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO replicas (id, url, started_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET url = excluded.url, started_at = excluded.started_at",
            )
            .bind(id)
            .bind(url)
            .bind(now_ms)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The replica that holds live run `run_id`'s lease at `now_ms`, and the address it gave
    /// (`None` when no one holds it; the address `None` when the holder gave none).
    pub async fn run_holder(
        &self,
        run_id: &str,
        now_ms: i64,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        let row = read_db!(self, pool => {
            sqlx::query_as::<_, (String, Option<String>)>(
                "SELECT r.lease_holder, p.url FROM runs r LEFT JOIN replicas p ON p.id = r.lease_holder \
                 WHERE r.id = $1 AND r.state = 'live' AND r.lease_holder IS NOT NULL AND r.lease_until >= $2",
            )
            .bind(run_id)
            .bind(now_ms)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// The live runs no one holds at `now_ms` (never claimed, or the lease ran out), oldest
    /// first: what a replica takes over.
    pub async fn unclaimed_live_runs(&self, now_ms: i64) -> Result<Vec<Run>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM runs WHERE state = 'live' \
             AND (lease_holder IS NULL OR lease_until < $1) ORDER BY created_at, id"
        );
        read_db!(self, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now_ms).fetch_all(pool).await?;
            rows.iter().map(run_from).collect()
        })
    }
}
