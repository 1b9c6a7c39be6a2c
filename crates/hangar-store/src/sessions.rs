//! Environments, sandboxes, sessions and turns: create, get, list, and the few updates the
//! control plane makes (a turn's state, a session's harness session id).
//!
//! Non-goals: no deletion (a session's history is kept), no scheduling of turns.

use serde_json::Value;
use sqlx::types::Json;

use crate::db::{Cols, in_tx, read_db, write_db};
use crate::error::StoreError;
use crate::model::*;
use crate::{Store, now_ms};

/// The vault purpose of a sandbox handle's token, and where it is in the handle, in the clear
/// (in memory) and sealed (in the database).
const SANDBOX_TOKEN: &str = "sandbox-token";
const HANDLE_TOKEN_FIELD: &str = "token";
const HANDLE_SEALED_FIELD: &str = "token_sealed";

const TURN_COLS: &str = "id, session_id, idx, run_id, state, status, reason, prompt, manifest, \
     verify_state, input_tokens, output_tokens, cached_tokens, cost_usd, created_at, started_at, \
     ended_at, git_trees, blocked, interrupted";

fn environment_from(r: &impl Cols) -> Result<Environment, StoreError> {
    Ok(Environment {
        name: r.text("name")?,
        spec: r.json("spec")?,
        created_at: r.int("created_at")?,
        updated_at: r.opt_int("updated_at")?,
    })
}

fn sandbox_from(r: &impl Cols) -> Result<Sandbox, StoreError> {
    Ok(Sandbox {
        id: r.text("id")?,
        environment: r.text("environment")?,
        kind: r.text("kind")?,
        workdir: r.text("workdir")?,
        person: r.text("person")?,
        created_at: r.int("created_at")?,
        handle: r.opt_json("handle")?,
        state: r.text("state")?,
        removed_at: r.opt_int("removed_at")?,
    })
}

fn session_from(r: &impl Cols) -> Result<Session, StoreError> {
    Ok(Session {
        id: r.text("id")?,
        sandbox_id: r.text("sandbox_id")?,
        harness: r.text("harness")?.parse()?,
        policy: r.text("policy")?.parse()?,
        harness_session_id: r.opt_text("harness_session_id")?,
        options: r.json("options")?,
        turn_count: r.int("turn_count")?,
        created_at: r.int("created_at")?,
    })
}

pub(crate) fn turn_from(r: &impl Cols) -> Result<Turn, StoreError> {
    Ok(Turn {
        id: r.text("id")?,
        session_id: r.text("session_id")?,
        index: r.int("idx")?,
        run_id: r.opt_text("run_id")?,
        state: r.text("state")?.parse()?,
        status: r.opt_int("status")?,
        reason: r.opt_text("reason")?,
        prompt: r.text("prompt")?,
        manifest: r.opt_json("manifest")?,
        verify_state: r.opt_text("verify_state")?,
        usage: Usage {
            input: r.int("input_tokens")?,
            output: r.int("output_tokens")?,
            cached: r.int("cached_tokens")?,
        },
        cost_usd: r.opt_float("cost_usd")?,
        created_at: r.int("created_at")?,
        started_at: r.opt_int("started_at")?,
        ended_at: r.opt_int("ended_at")?,
        git_trees: r.opt_json("git_trees")?,
        blocked: r.opt_text("blocked")?,
        interrupted: r.opt_text("interrupted")?,
    })
}

fn not_found(what: &'static str, key: &str) -> StoreError {
    StoreError::NotFound {
        what,
        key: key.to_owned(),
    }
}

/// The states a turn may be in for a change to `to`.
fn allowed_from(to: TurnState) -> &'static [&'static str] {
    match to {
        TurnState::Queued => &[],
        TurnState::Running => &["queued", "running"],
        TurnState::Ended => &["queued", "running"],
        TurnState::Refused => &["queued"],
    }
}

impl Store {
    /// Creates an environment; fails with [`StoreError::Conflict`] if the name is taken.
    pub async fn create_environment(&self, name: &str, spec: &Value) -> Result<(), StoreError> {
        write_db!(self, pool => {
            sqlx::query("INSERT INTO environments (name, spec, created_at) VALUES ($1, $2, $3)")
                .bind(name)
                .bind(Json(spec))
                .bind(now_ms())
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Creates the environment or replaces its spec (`hangar env apply`); whether it was new.
    /// Sandboxes made earlier keep the spec they were made with (in their handle).
    pub async fn put_environment(&self, name: &str, spec: &Value) -> Result<bool, StoreError> {
        let now = now_ms();
        let updated = write_db!(self, pool => {
            sqlx::query("UPDATE environments SET spec = $2, updated_at = $3 WHERE name = $1")
                .bind(name)
                .bind(Json(spec))
                .bind(now)
                .execute(pool)
                .await?
                .rows_affected()
        });
        if updated > 0 {
            return Ok(false);
        }
        match self.create_environment(name, spec).await {
            Ok(()) => Ok(true),
            // Made by someone else between the two statements: theirs stands, ours replaces it.
            Err(StoreError::Conflict(_)) => Box::pin(self.put_environment(name, spec)).await,
            Err(e) => Err(e),
        }
    }

    /// The environment named `name`.
    pub async fn environment(&self, name: &str) -> Result<Environment, StoreError> {
        let sql = "SELECT name, spec, created_at, updated_at FROM environments WHERE name = $1";
        read_db!(self, pool => {
            let row = sqlx::query(sql).bind(name).fetch_optional(pool).await?;
            row.as_ref().map(environment_from).transpose()?
        })
        .ok_or_else(|| not_found("environment", name))
    }

    /// Every environment, by name.
    pub async fn environments(&self) -> Result<Vec<Environment>, StoreError> {
        let sql = "SELECT name, spec, created_at, updated_at FROM environments ORDER BY name";
        read_db!(self, pool => {
            sqlx::query(sql).fetch_all(pool).await?.iter().map(environment_from).collect()
        })
    }

    /// Creates a sandbox in an existing environment.
    pub async fn create_sandbox(&self, s: &NewSandbox) -> Result<Sandbox, StoreError> {
        let handle = s
            .handle
            .as_ref()
            .map(|h| self.seal_handle(&s.id, h))
            .transpose()?;
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO sandboxes (id, environment, kind, workdir, person, created_at, handle) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&s.id)
            .bind(&s.environment)
            .bind(&s.kind)
            .bind(&s.workdir)
            .bind(crate::people::normal_email(&s.person))
            .bind(now_ms())
            .bind(handle.as_ref().map(Json))
            .execute(pool)
            .await?;
        });
        self.sandbox(&s.id).await
    }

    /// The sandbox `id`.
    pub async fn sandbox(&self, id: &str) -> Result<Sandbox, StoreError> {
        let sql = "SELECT * FROM sandboxes WHERE id = $1";
        read_db!(self, pool => {
            let row = sqlx::query(sql).bind(id).fetch_optional(pool).await?;
            row.as_ref().map(sandbox_from).transpose()?
        })
        .ok_or_else(|| not_found("sandbox", id))
        .and_then(|sb| self.open_handle(sb))
    }

    /// The sandbox run `run_id` runs in (its turn's session's), in one read: a watcher asks
    /// it as it starts, and 1,000 re-attached watchers asking it in four reads each (run,
    /// turn, session, sandbox) queued on the readers' connections.
    pub async fn sandbox_of_run(&self, run_id: &str) -> Result<Sandbox, StoreError> {
        let sql = "SELECT sb.* FROM runs r JOIN turns t ON t.id = r.turn_id \
                   JOIN sessions s ON s.id = t.session_id \
                   JOIN sandboxes sb ON sb.id = s.sandbox_id WHERE r.id = $1";
        read_db!(self, pool => {
            let row = sqlx::query(sql).bind(run_id).fetch_optional(pool).await?;
            row.as_ref().map(sandbox_from).transpose()?
        })
        .ok_or_else(|| not_found("run", run_id))
        .and_then(|sb| self.open_handle(sb))
    }

    /// A provider handle as stored: a `token` in it (envd's access token of an e2b sandbox,
    /// root in the sandbox) is sealed by the vault into `token_sealed`, bound to the sandbox, so
    /// the database alone reveals no such credential.
    fn seal_handle(&self, sandbox_id: &str, handle: &Value) -> Result<Value, StoreError> {
        let mut h = handle.clone();
        if let Some(obj) = h.as_object_mut()
            && let Some(Value::String(token)) = obj.remove(HANDLE_TOKEN_FIELD)
        {
            let sealed = self
                .vault()?
                .seal(SANDBOX_TOKEN, sandbox_id, token.as_bytes())?;
            obj.insert(
                HANDLE_SEALED_FIELD.to_owned(),
                Value::String(hex::encode(sealed)),
            );
        }
        Ok(h)
    }

    /// A stored sandbox with its handle's token opened ([`Store::seal_handle`]); a handle
    /// stored before tokens were sealed is taken as it is.
    fn open_handle(&self, mut sb: Sandbox) -> Result<Sandbox, StoreError> {
        if let Some(obj) = sb.handle.as_mut().and_then(Value::as_object_mut)
            && let Some(Value::String(sealed)) = obj.remove(HANDLE_SEALED_FIELD)
        {
            let corrupt = |why: String| StoreError::Corrupt {
                what: "sandbox handle",
                why: format!("sandbox {}: its sealed token: {why}", sb.id),
            };
            let bytes = hex::decode(&sealed).map_err(|e| corrupt(e.to_string()))?;
            let token = self.vault()?.unseal(SANDBOX_TOKEN, &sb.id, &bytes)?;
            let token =
                String::from_utf8(token.expose().to_vec()).map_err(|e| corrupt(e.to_string()))?;
            obj.insert(HANDLE_TOKEN_FIELD.to_owned(), Value::String(token));
        }
        Ok(sb)
    }

    /// Marks a sandbox removed (its provider destroyed it); false if it already was.
    pub async fn mark_sandbox_removed(&self, id: &str) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query(
                "UPDATE sandboxes SET state = 'removed', removed_at = $2 \
                 WHERE id = $1 AND state = 'live'",
            )
            .bind(id)
            .bind(now_ms())
            .execute(pool)
            .await?
            .rows_affected()
        });
        if n == 0 {
            self.sandbox(id).await?;
        }
        Ok(n > 0)
    }

    /// Sandboxes, oldest first; only `person`'s when given.
    pub async fn sandboxes(&self, person: Option<&str>) -> Result<Vec<Sandbox>, StoreError> {
        let person = person.map(crate::people::normal_email);
        let sql = "SELECT * FROM sandboxes WHERE $1 IS NULL OR person = $1 \
                   ORDER BY created_at, id";
        read_db!(self, pool => {
            let rows = sqlx::query(sql).bind(person).fetch_all(pool).await?;
            rows.iter().map(sandbox_from).collect::<Result<Vec<_>, _>>()?
        })
        .into_iter()
        .map(|sb| self.open_handle(sb))
        .collect()
    }

    /// Creates a session in a sandbox.
    pub async fn create_session(
        &self,
        id: &str,
        sandbox_id: &str,
        harness: Harness,
        policy: Policy,
    ) -> Result<Session, StoreError> {
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO sessions (id, sandbox_id, harness, policy, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(id)
            .bind(sandbox_id)
            .bind(harness.as_str())
            .bind(policy.as_str())
            .bind(now_ms())
            .execute(pool)
            .await?;
        });
        self.session(id).await
    }

    /// The session `id`.
    pub async fn session(&self, id: &str) -> Result<Session, StoreError> {
        let sql = "SELECT * FROM sessions WHERE id = $1";
        read_db!(self, pool => {
            let row = sqlx::query(sql).bind(id).fetch_optional(pool).await?;
            row.as_ref().map(session_from).transpose()?
        })
        .ok_or_else(|| not_found("session", id))
    }

    /// Sessions, oldest first; only those in `sandbox_id` when given.
    pub async fn sessions(&self, sandbox_id: Option<&str>) -> Result<Vec<Session>, StoreError> {
        let sql = "SELECT * FROM sessions WHERE $1 IS NULL OR sandbox_id = $1 \
                   ORDER BY created_at, id";
        read_db!(self, pool => {
            let rows = sqlx::query(sql).bind(sandbox_id).fetch_all(pool).await?;
            rows.iter().map(session_from).collect()
        })
    }

    /// Sets how the session's turns run (a JSON object the control plane owns).
    pub async fn set_session_options(
        &self,
        session_id: &str,
        options: &Value,
    ) -> Result<(), StoreError> {
        let done = write_db!(self, pool => {
            sqlx::query("UPDATE sessions SET options = $2 WHERE id = $1")
                .bind(session_id)
                .bind(Json(options.clone()))
                .execute(pool)
                .await?
                .rows_affected()
        });
        if done == 0 {
            return Err(not_found("session", session_id));
        }
        Ok(())
    }

    /// Records the harness's own session (or thread) id, to resume it in the next turn.
    pub async fn set_harness_session_id(
        &self,
        session_id: &str,
        harness_session_id: &str,
    ) -> Result<(), StoreError> {
        let done = write_db!(self, pool => {
            sqlx::query("UPDATE sessions SET harness_session_id = $2 WHERE id = $1")
                .bind(session_id)
                .bind(harness_session_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        if done == 0 {
            return Err(not_found("session", session_id));
        }
        Ok(())
    }

    /// Replaces a turn's manifest (the driver reports the harness's argv and hooks once it has
    /// started it).
    pub async fn set_turn_manifest(
        &self,
        turn_id: &str,
        manifest: &Value,
    ) -> Result<(), StoreError> {
        let done = write_db!(self, pool => {
            sqlx::query("UPDATE turns SET manifest = $2 WHERE id = $1")
                .bind(turn_id)
                .bind(Json(manifest))
                .execute(pool)
                .await?
                .rows_affected()
        });
        if done == 0 {
            return Err(not_found("turn", turn_id));
        }
        Ok(())
    }

    /// Records a one-shot turn's start and end trees (S29; JSON owned by the control plane).
    pub async fn set_turn_git_trees(&self, turn_id: &str, trees: &Value) -> Result<(), StoreError> {
        let done = write_db!(self, pool => {
            sqlx::query("UPDATE turns SET git_trees = $2 WHERE id = $1")
                .bind(turn_id)
                .bind(Json(trees))
                .execute(pool)
                .await?
                .rows_affected()
        });
        if done == 0 {
            return Err(not_found("turn", turn_id));
        }
        Ok(())
    }

    /// Queues a turn: the next index in its session, state `queued`.
    pub async fn create_turn(
        &self,
        id: &str,
        session_id: &str,
        prompt: &str,
    ) -> Result<Turn, StoreError> {
        in_tx!(self, tx => {
            // Taking the session's row (write lock) numbers concurrent turns one by one.
            let count: Option<i64> = sqlx::query_scalar(
                "UPDATE sessions SET turn_count = turn_count + 1 WHERE id = $1 \
                 RETURNING turn_count",
            )
            .bind(session_id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(count) = count else {
                return Err(not_found("session", session_id));
            };
            sqlx::query(
                "INSERT INTO turns (id, session_id, idx, state, prompt, created_at) \
                 VALUES ($1, $2, $3, 'queued', $4, $5)",
            )
            .bind(id)
            .bind(session_id)
            .bind(count - 1)
            .bind(prompt)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        });
        self.turn(id).await
    }

    /// The turn `id`.
    pub async fn turn(&self, id: &str) -> Result<Turn, StoreError> {
        let sql = format!("SELECT {TURN_COLS} FROM turns WHERE id = $1");
        read_db!(self, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?;
            row.as_ref().map(turn_from).transpose()?
        })
        .ok_or_else(|| not_found("turn", id))
    }

    /// A session's turns in order.
    pub async fn turns(&self, session_id: &str) -> Result<Vec<Turn>, StoreError> {
        let sql = format!("SELECT {TURN_COLS} FROM turns WHERE session_id = $1 ORDER BY idx");
        read_db!(self, pool => {
            let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(session_id);
            q.fetch_all(pool).await?.iter().map(turn_from).collect()
        })
    }

    /// Moves a turn to `u.state` and writes `u`'s other fields that are `Some`. Allowed:
    /// queued → running | ended | refused, running → running (progress) | ended; anything
    /// else is [`StoreError::BadTransition`]. `started_at` is set on the first move to
    /// running, `ended_at` on ended or refused.
    pub async fn update_turn_state(
        &self,
        turn_id: &str,
        u: &TurnUpdate,
    ) -> Result<Turn, StoreError> {
        let from = allowed_from(u.state);
        let now = now_ms();
        let starts = (u.state == TurnState::Running).then_some(now);
        let ends = matches!(u.state, TurnState::Ended | TurnState::Refused).then_some(now);
        let usage = u.usage;
        // `from` has at most two states; $13 and $14 carry them ('' matches no state).
        let done = write_db!(self, pool => {
            sqlx::query(
                "UPDATE turns SET state = $2, status = COALESCE($3, status), \
                 reason = COALESCE($4, reason), manifest = COALESCE($5, manifest), \
                 verify_state = COALESCE($6, verify_state), \
                 input_tokens = COALESCE($7, input_tokens), \
                 output_tokens = COALESCE($8, output_tokens), \
                 cached_tokens = COALESCE($9, cached_tokens), \
                 cost_usd = COALESCE($10, cost_usd), \
                 started_at = COALESCE(started_at, $11), ended_at = COALESCE(ended_at, $12), \
                 blocked = COALESCE($15, blocked), \
                 interrupted = COALESCE($16, interrupted) \
                 WHERE id = $1 AND state IN ($13, $14)",
            )
            .bind(turn_id)
            .bind(u.state.as_str())
            .bind(u.status)
            .bind(u.reason.as_deref())
            .bind(u.manifest.as_ref().map(Json))
            .bind(u.verify_state.as_deref())
            .bind(usage.map(|x| x.input))
            .bind(usage.map(|x| x.output))
            .bind(usage.map(|x| x.cached))
            .bind(u.cost_usd)
            .bind(starts)
            .bind(ends)
            .bind(from.first().copied().unwrap_or(""))
            .bind(from.get(1).copied().unwrap_or(""))
            .bind(u.blocked.as_deref())
            .bind(u.interrupted.as_deref())
            .execute(pool)
            .await?
            .rows_affected()
        });
        let turn = self.turn(turn_id).await?;
        if done == 0 {
            return Err(StoreError::BadTransition {
                turn: turn_id.to_owned(),
                from: turn.state.to_string(),
                to: u.state.to_string(),
            });
        }
        Ok(turn)
    }
}
