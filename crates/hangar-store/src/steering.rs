//! Steering a run: the signed commands sent to it with the driver's acks, and its permission
//! requests with who answered them.
//!
//! Both are idempotent where a watcher may see the same thing twice after a restart: a second
//! ack of a command, or a second sighting of a permission request, changes nothing.
//!
//! Non-goals: signing or sending commands (hangar-protocol does), policy decisions.

use serde_json::{Value, json};
use sqlx::types::Json;

use crate::audit::{AppendAudit, canonical_json};
use crate::db::{Cols, in_tx, read_db, write_db};
use crate::error::StoreError;
use crate::events::storable;
use crate::model::*;
use crate::{Store, now_ms};

const COMMAND_COLS: &str =
    "run_id, seq, kind, body, sent_by, sent_at, ack_status, ack_reason, acked_at";
const APPROVAL_COLS: &str = "run_id, request_id, tool_name, input, requested_at, decision, \
     answered_by, answer_note, answered_at";

fn command_from(r: &impl Cols) -> Result<Command, StoreError> {
    Ok(Command {
        run_id: r.text("run_id")?,
        seq: r.int("seq")?,
        kind: r.text("kind")?,
        body: r.json("body")?,
        sent_by: r.text("sent_by")?,
        sent_at: r.int("sent_at")?,
        ack: r.opt_text("ack_status")?.map(|s| s.parse()).transpose()?,
        ack_reason: r.opt_text("ack_reason")?,
        acked_at: r.opt_int("acked_at")?,
    })
}

fn approval_from(r: &impl Cols) -> Result<Approval, StoreError> {
    Ok(Approval {
        run_id: r.text("run_id")?,
        request_id: r.text("request_id")?,
        tool_name: r.text("tool_name")?,
        input: r.json("input")?,
        requested_at: r.int("requested_at")?,
        decision: r.opt_text("decision")?.map(|s| s.parse()).transpose()?,
        answered_by: r.opt_text("answered_by")?,
        note: r.opt_text("answer_note")?,
        answered_at: r.opt_int("answered_at")?,
    })
}

impl Store {
    /// Records a command sent to a run (sequence numbers are the mailbox's, unique per run).
    pub async fn record_command(
        &self,
        run_id: &str,
        seq: i64,
        kind: &str,
        body: &Value,
        sent_by: &str,
    ) -> Result<Command, StoreError> {
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO commands (run_id, seq, kind, body, sent_by, sent_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(run_id)
            .bind(seq)
            .bind(kind)
            .bind(Json(storable(body)))
            .bind(sent_by)
            .bind(now_ms())
            .execute(pool)
            .await?;
        });
        self.command(run_id, seq).await
    }

    /// Records the driver's ack of command `seq`. True if recorded now, false if the command
    /// was acked already (the first ack stands).
    pub async fn record_ack(
        &self,
        run_id: &str,
        seq: i64,
        status: AckStatus,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query(
                "UPDATE commands SET ack_status = $3, ack_reason = $4, acked_at = $5 \
                 WHERE run_id = $1 AND seq = $2 AND ack_status IS NULL",
            )
            .bind(run_id)
            .bind(seq)
            .bind(status.as_str())
            .bind(reason)
            .bind(now_ms())
            .execute(pool)
            .await?
            .rows_affected()
        });
        if n == 0 {
            self.command(run_id, seq).await?;
        }
        Ok(n > 0)
    }

    /// Records a command sent to a run by `sent_by` and its audit record (`command.sent`:
    /// run, seq, kind) in one transaction. The sender writes this after the command landed,
    /// off its reply's path, so the run's watcher may have made the command's row from the
    /// driver's answer already: then this fills in what only the sender knows (the body, when
    /// it was sent) and leaves the answer as it is.
    pub async fn record_command_sent(
        &self,
        run_id: &str,
        seq: i64,
        kind: &str,
        body: &Value,
        sent_by: &str,
    ) -> Result<(), StoreError> {
        let detail = canonical_json(&json!({"run": run_id, "seq": seq, "kind": kind}));
        let now = now_ms();
        in_tx!(self, tx => {
            sqlx::query(
                "INSERT INTO commands (run_id, seq, kind, body, sent_by, sent_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (run_id, seq) DO UPDATE SET body = excluded.body, \
                 sent_at = excluded.sent_at",
            )
            .bind(run_id)
            .bind(seq)
            .bind(kind)
            .bind(Json(storable(body)))
            .bind(sent_by)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            AppendAudit::append_audit(&mut *tx, sent_by, "command.sent", detail, now).await?;
        });
        Ok(())
    }

    /// Command `seq` of a run.
    pub async fn command(&self, run_id: &str, seq: i64) -> Result<Command, StoreError> {
        let sql = format!("SELECT {COMMAND_COLS} FROM commands WHERE run_id = $1 AND seq = $2");
        read_db!(self, pool => {
            let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(run_id).bind(seq);
            q.fetch_optional(pool).await?.as_ref().map(command_from).transpose()?
        })
        .ok_or_else(|| StoreError::NotFound {
            what: "command",
            key: format!("{run_id}/{seq}"),
        })
    }

    /// A run's commands by sequence number.
    pub async fn commands(&self, run_id: &str) -> Result<Vec<Command>, StoreError> {
        let sql = format!("SELECT {COMMAND_COLS} FROM commands WHERE run_id = $1 ORDER BY seq");
        read_db!(self, pool => {
            let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(run_id);
            q.fetch_all(pool).await?.iter().map(command_from).collect()
        })
    }

    /// Records a permission request the first time it is seen; true if it is new.
    pub async fn upsert_approval_requested(
        &self,
        run_id: &str,
        request_id: &str,
        tool_name: &str,
        input: &Value,
    ) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO approvals (run_id, request_id, tool_name, input, requested_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, request_id) DO NOTHING",
            )
            .bind(run_id)
            .bind(request_id)
            .bind(tool_name)
            .bind(Json(storable(input)))
            .bind(now_ms())
            .execute(pool)
            .await?
            .rows_affected()
        });
        self.note_requests(run_id, [request_id]);
        Ok(n > 0)
    }

    /// Records a person's answer. The first answer wins: a second one fails with
    /// [`StoreError::AlreadyAnswered`], naming the first.
    pub async fn answer_approval(
        &self,
        run_id: &str,
        request_id: &str,
        decision: Decision,
        answered_by: &str,
        note: Option<&str>,
    ) -> Result<Approval, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query(
                "UPDATE approvals SET decision = $3, answered_by = $4, answer_note = $5, \
                 answered_at = $6 WHERE run_id = $1 AND request_id = $2 AND decision IS NULL",
            )
            .bind(run_id)
            .bind(request_id)
            .bind(decision.as_str())
            .bind(answered_by)
            .bind(note)
            .bind(now_ms())
            .execute(pool)
            .await?
            .rows_affected()
        });
        let a = self.approval(run_id, request_id).await?;
        if n == 0 {
            return Err(StoreError::AlreadyAnswered {
                run: run_id.to_owned(),
                request_id: request_id.to_owned(),
                decision: a.decision.map(|d| d.to_string()).unwrap_or_default(),
                by: a.answered_by.unwrap_or_default(),
            });
        }
        Ok(a)
    }

    /// One permission request.
    pub async fn approval(&self, run_id: &str, request_id: &str) -> Result<Approval, StoreError> {
        let sql =
            format!("SELECT {APPROVAL_COLS} FROM approvals WHERE run_id = $1 AND request_id = $2");
        read_db!(self, pool => {
            let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(run_id).bind(request_id);
            q.fetch_optional(pool).await?.as_ref().map(approval_from).transpose()?
        })
        .ok_or_else(|| StoreError::NotFound {
            what: "approval",
            key: format!("{run_id}/{request_id}"),
        })
    }

    /// A run's permission requests, oldest first; only the unanswered ones if `pending_only`.
    pub async fn approvals(
        &self,
        run_id: &str,
        pending_only: bool,
    ) -> Result<Vec<Approval>, StoreError> {
        let pending = if pending_only {
            "AND decision IS NULL"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {APPROVAL_COLS} FROM approvals WHERE run_id = $1 {pending} \
             ORDER BY requested_at, request_id"
        );
        read_db!(self, pool => {
            let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(run_id);
            q.fetch_all(pool).await?.iter().map(approval_from).collect()
        })
    }

    /// A run's unanswered permission requests, oldest first.
    pub async fn pending_approvals(&self, run_id: &str) -> Result<Vec<Approval>, StoreError> {
        self.approvals(run_id, true).await
    }

    /// How many permission requests wait for an answer in each live run that has any (what
    /// makes a turn `waiting`), as (session, run, count), in one query for the whole board.
    pub async fn waiting_counts(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let sql = "SELECT t.session_id, a.run_id, COUNT(*) AS n FROM approvals a \
                   JOIN runs r ON r.id = a.run_id JOIN turns t ON t.id = r.turn_id \
                   WHERE a.decision IS NULL AND r.state = 'live' GROUP BY t.session_id, a.run_id";
        let rows = read_db!(self, pool => {
            sqlx::query_as::<_, (String, String, i64)>(sql).fetch_all(pool).await?
        });
        Ok(rows)
    }
}
