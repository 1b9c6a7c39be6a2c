//! Forks (S31): which step of which run a session was made from, and the control plane's record
//! of how (where the conversation was cut, whether exactly, what was checked).
//!
//! Non-goals: the record's shape is the control plane's (JSON here); nothing is rebuilt here.

use serde_json::Value;
use sqlx::types::Json;

use crate::db::{Cols, read_db, write_db};
use crate::error::StoreError;
use crate::{Store, now_ms};

/// A session made from a step of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Fork {
    /// The new session.
    pub session_id: String,
    /// The run whose step it was made from.
    pub run_id: String,
    /// The step (0 for the run's first tree).
    pub step: i64,
    /// The step's tree id, as recorded and as re-hashed in the new sandbox.
    pub tree: String,
    /// The control plane's record (JSON object).
    pub record: Value,
    /// Who made it.
    pub person: String,
    pub created_at: i64,
}

/// What [`Store::create_fork`] takes.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFork {
    pub session_id: String,
    pub run_id: String,
    pub step: i64,
    pub tree: String,
    pub record: Value,
    pub person: String,
}

fn fork_from(r: &impl Cols) -> Result<Fork, StoreError> {
    Ok(Fork {
        session_id: r.text("session_id")?,
        run_id: r.text("run_id")?,
        step: r.int("step")?,
        tree: r.text("tree")?,
        record: r.json("record")?,
        person: r.text("person")?,
        created_at: r.int("created_at")?,
    })
}

impl Store {
    /// Records a fork; its session and run must exist ([`StoreError::Conflict`] otherwise, or
    /// when the session already is a fork).
    pub async fn create_fork(&self, f: &NewFork) -> Result<Fork, StoreError> {
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO forks (session_id, run_id, step, tree, record, person, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&f.session_id)
            .bind(&f.run_id)
            .bind(f.step)
            .bind(&f.tree)
            .bind(Json(&f.record))
            .bind(crate::people::normal_email(&f.person))
            .bind(now_ms())
            .execute(pool)
            .await?;
        });
        self.fork(&f.session_id)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: "fork",
                key: f.session_id.clone(),
            })
    }

    /// The fork a session was made as, if it was.
    pub async fn fork(&self, session_id: &str) -> Result<Option<Fork>, StoreError> {
        let sql = "SELECT * FROM forks WHERE session_id = $1";
        read_db!(self, pool => {
            let row = sqlx::query(sql).bind(session_id).fetch_optional(pool).await?;
            row.as_ref().map(fork_from).transpose()
        })
    }

    /// The forks made from a run's steps, oldest first.
    pub async fn forks_of_run(&self, run_id: &str) -> Result<Vec<Fork>, StoreError> {
        let sql = "SELECT * FROM forks WHERE run_id = $1 ORDER BY created_at, session_id";
        read_db!(self, pool => {
            let rows = sqlx::query(sql).bind(run_id).fetch_all(pool).await?;
            rows.iter().map(fork_from).collect()
        })
    }
}
