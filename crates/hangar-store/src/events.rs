//! Events: what the run watchers turn run-log lines into, and what the API pages through (SSE).
//!
//! [`Store::commit_events`] is the exactly-once step: in one transaction it moves a run's log
//! cursor from where the watcher read it to where it stopped, and inserts the events of those
//! bytes. If the cursor is no longer where the watcher read it, another watcher (or replica)
//! committed them first: nothing is written and [`StoreError::CursorMoved`] says so.
//!
//! Event ids grow in commit order, so a reader that has seen id N never later finds a new
//! event below N: SQLite has one writer at a time; on PostgreSQL every event insert holds a
//! transaction-level advisory lock (per schema) until its commit, so ids are handed out in
//! the order transactions commit.
//!
//! PostgreSQL's jsonb cannot hold U+0000, so the NUL character in any JSON string is stored as
//! U+FFFD on both backends (one behaviour whatever the backend).
//!
//! Non-goals: parsing run logs, notifying listeners (poll `events_after`, or LISTEN later).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::OnceLock;

use serde_json::{Value, json};
use sqlx::types::Json;

use crate::audit::{AppendAudit, canonical_json};
use crate::db::{Cols, in_tx, read_db, read_pages};
use crate::error::StoreError;
use crate::migrate::Backend;
use crate::model::*;
use crate::{Store, now_ms};

/// The most events one `events_after` call returns.
pub const MAX_PAGE: i64 = 1000;

const ORDER_LOCK: &str = "SELECT pg_advisory_xact_lock(4243, hashtext(current_schema()))";
/// Tells the other replicas listening (`notices.rs`); sent when the transaction commits.
/// The schema is added by the server: replicas of another hangar in another schema of the same
/// database hear the channel too, and skip what is not their own schema's.
const NOTIFY: &str =
    "SELECT pg_notify($1, ($2::jsonb || jsonb_build_object('schema', current_schema()))::text)";

/// One event, stored only if its session (and its run, if named) exist.
const APPEND: &str = "INSERT INTO events (session_id, run_id, kind, payload, created_at) \
                      SELECT $1, $2, $3, $4, $5 \
                      WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1) \
                      AND ($2 IS NULL OR EXISTS (SELECT 1 FROM runs WHERE id = $2)) \
                      RETURNING id";

/// Row counts of SQLite's multi-row INSERTs, largest first: a slice of events is written as a
/// few statements of these sizes, so only these few statements are ever prepared (and stay in
/// the connection's statement cache). Five parameters a row; SQLite allows 32,766. (Numbered
/// parameters would bind the shared three once, but sqlx looks each one's name up, a linear
/// scan in SQLite: quadratic in the statement's size.)
/// Below the smallest, a remainder is one statement of its own size (31 more texts): a
/// watcher's slice is often a few events, and each statement is a hand-off to sqlx's worker
/// thread and back (1,000 runs re-attached at once wrote 18 events each in three or four).
const SQLITE_ROWS: [usize; 3] = [1024, 128, 32];

/// Many events in one statement (a per-row INSERT costs a round trip each and held ingest to
/// about 19k events/s).
trait InsertEvents {
    /// Stores `events` in order and appends their ids, ascending, to `ids`.
    async fn insert_events<E: EventRow>(
        &mut self,
        session: &str,
        run_id: &str,
        now: i64,
        events: &[E],
        ids: &mut Vec<i64>,
    ) -> Result<(), sqlx::Error>;
}

impl InsertEvents for sqlx::SqliteConnection {
    async fn insert_events<E: EventRow>(
        &mut self,
        session: &str,
        run_id: &str,
        now: i64,
        events: &[E],
        ids: &mut Vec<i64>,
    ) -> Result<(), sqlx::Error> {
        // Bound once per row: shared, not copied.
        let (session, run_id): (Arc<str>, Arc<str>) = (session.into(), run_id.into());
        let mut rest = events;
        for rows in SQLITE_ROWS {
            while rest.len() >= rows {
                let (chunk, tail) = rest.split_at(rows);
                insert_sqlite(self, &session, &run_id, now, chunk, ids).await?;
                rest = tail;
            }
        }
        insert_sqlite(self, &session, &run_id, now, rest, ids).await
    }
}

impl InsertEvents for sqlx::PgConnection {
    async fn insert_events<E: EventRow>(
        &mut self,
        session: &str,
        run_id: &str,
        now: i64,
        events: &[E],
        ids: &mut Vec<i64>,
    ) -> Result<(), sqlx::Error> {
        insert_pg(self, session, run_id, now, events, ids).await
    }
}

/// The multi-row INSERT of `rows` events if `rows` is one of [`SQLITE_ROWS`] or fewer than the
/// smallest (built once).
fn sqlite_insert(rows: usize) -> Option<&'static str> {
    static SQL: OnceLock<Vec<(usize, String)>> = OnceLock::new();
    let all = SQL.get_or_init(|| {
        let small = SQLITE_ROWS[SQLITE_ROWS.len() - 1];
        SQLITE_ROWS
            .iter()
            .copied()
            .chain(1..small)
            .map(|n| (n, sqlite_insert_sql(n)))
            .collect()
    });
    all.iter()
        .find(|(n, _)| *n == rows)
        .map(|(_, sql)| sql.as_str())
}

/// The multi-row INSERT of `rows` events.
fn sqlite_insert_sql(rows: usize) -> String {
    let mut sql = String::with_capacity(80 + rows * 17);
    sql.push_str("INSERT INTO events (session_id, run_id, created_at, kind, payload) VALUES ");
    for i in 0..rows {
        sql.push_str(if i == 0 {
            "(?, ?, ?, ?, ?)"
        } else {
            ", (?, ?, ?, ?, ?)"
        });
    }
    sql
}

/// Stores `events` in order with one multi-row INSERT and appends their ids. No `RETURNING`
/// (sqlx hands each returned row over from its worker thread): the ids are the `changes()`
/// rowids ending at `last_insert_rowid()`, because under the write lock one INSERT gives its
/// rows consecutive ids (AUTOINCREMENT: each new row gets one more than the largest id the table
/// ever held, and SQLite fails the INSERT rather than wrap or pick a random id).
async fn insert_sqlite<E: EventRow>(
    tx: &mut sqlx::SqliteConnection,
    session: &Arc<str>,
    run_id: &Arc<str>,
    now: i64,
    events: &[E],
    ids: &mut Vec<i64>,
) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let mut q = match sqlite_insert(events.len()) {
        Some(sql) => sqlx::query(sql),
        None => sqlx::query(sqlx::AssertSqlSafe(sqlite_insert_sql(events.len()))),
    };
    // Every value bound as an `Arc<str>`: sqlx copies a borrowed string into the arguments it
    // hands its worker thread, and SQLite copies it again. The few kinds are shared too.
    let mut kinds: Vec<Arc<str>> = Vec::new();
    for e in events {
        let kind = match kinds.iter().find(|k| ***k == *e.row_kind()) {
            Some(k) => Arc::clone(k),
            None => {
                let k: Arc<str> = e.row_kind().into();
                kinds.push(Arc::clone(&k));
                k
            }
        };
        q = q
            .bind(Arc::clone(session))
            .bind(Arc::clone(run_id))
            .bind(now)
            .bind(kind)
            .bind(e.row_json_shared());
    }
    let done = q.execute(&mut *tx).await?;
    let n = i64::try_from(events.len()).unwrap_or(i64::MAX);
    if i64::try_from(done.rows_affected()).ok() != Some(n) {
        return Err(sqlx::Error::Protocol(format!(
            "an INSERT of {n} events stored {}",
            done.rows_affected()
        )));
    }
    let last = done.last_insert_rowid();
    ids.extend(last - n + 1..=last);
    Ok(())
}

/// Stores `events` in order with one INSERT .. SELECT over arrays (identity values follow the
/// `ORDER BY`); appends their ids, ascending.
async fn insert_pg<E: EventRow>(
    tx: &mut sqlx::PgConnection,
    session: &str,
    run_id: &str,
    now: i64,
    events: &[E],
    ids: &mut Vec<i64>,
) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let kinds: Vec<&str> = events.iter().map(|e| e.row_kind()).collect();
    let payloads: Vec<Cow<'_, str>> = events.iter().map(|e| e.row_json()).collect();
    let mut got: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO events (session_id, run_id, kind, payload, created_at) \
         SELECT $1, $2, k, p::json, $5 \
         FROM UNNEST($3::text[], $4::text[]) WITH ORDINALITY AS t(k, p, n) \
         ORDER BY n RETURNING id",
    )
    .bind(session)
    .bind(run_id)
    .bind(kinds)
    .bind(payloads)
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    got.sort_unstable();
    ids.extend(got);
    Ok(())
}

/// `json` (JSON text as serde_json writes it) with every `\u0000` escape, the only way such
/// text holds a NUL character, made `\ufffd`.
pub(crate) fn nul_free_text(json: String) -> String {
    if !json.contains("\\u0000") {
        return json;
    }
    let b = json.as_bytes();
    let mut out = String::with_capacity(json.len());
    let mut i = 0;
    let mut plain = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if b[i + 1..].starts_with(b"u0000") {
                out.push_str(&json[plain..i]);
                out.push_str("\\ufffd");
                i += 6;
                plain = i;
            } else {
                // An escape is two bytes at least: `\\` must not start another one.
                i += 2;
            }
        } else {
            i += 1;
        }
    }
    out.push_str(&json[plain.min(json.len())..]);
    out
}

/// `v` with every NUL character (in strings and keys) replaced by U+FFFD.
pub(crate) fn storable(v: &Value) -> Cow<'_, Value> {
    fn has_nul(v: &Value) -> bool {
        match v {
            Value::String(s) => s.contains('\0'),
            Value::Array(a) => a.iter().any(has_nul),
            Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
            _ => false,
        }
    }
    fn clean(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(s.replace('\0', "\u{FFFD}")),
            Value::Array(a) => Value::Array(a.iter().map(clean).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| (k.replace('\0', "\u{FFFD}"), clean(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    if has_nul(v) {
        Cow::Owned(clean(v))
    } else {
        Cow::Borrowed(v)
    }
}

/// An audit record a slice's effect owes: appended once every effect of the slice is applied,
/// so a slice takes the audit chain's head after every row it changes, as a sender recording
/// a command does (rows, then the head): on PostgreSQL two orders would deadlock.
struct OwedAudit {
    actor: String,
    action: &'static str,
    detail: String,
}

/// Applies a [`SliceEffect`] in a commit's transaction: the same SQL on both backends. Returns
/// the audit record it owes, if any.
trait ApplyEffect {
    async fn apply(
        &mut self,
        run_id: &str,
        session: &str,
        now: i64,
        effect: &SliceEffect<'_>,
    ) -> Result<Option<OwedAudit>, StoreError>;
}

macro_rules! impl_apply_effect {
    ($conn:ty) => {
        impl ApplyEffect for $conn {
            async fn apply(
                &mut self,
                run_id: &str,
                session: &str,
                now: i64,
                effect: &SliceEffect<'_>,
            ) -> Result<Option<OwedAudit>, StoreError> {
                // A person's answer: recorded from the log (the sender records none), and
                // audited in the same transaction when it changed something, so a slice read
                // twice (a watcher restarted) audits it once.
                match *effect {
                    SliceEffect::CommandAnswered {
                        seq,
                        status,
                        reason,
                        sent: Some(sent),
                    } => {
                        let recorded: Option<i64> = sqlx::query_scalar(
                            "INSERT INTO commands (run_id, seq, kind, body, sent_by, sent_at, \
                             ack_status, ack_reason, acked_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $6) \
                             ON CONFLICT (run_id, seq) DO UPDATE SET \
                             ack_status = excluded.ack_status, ack_reason = excluded.ack_reason, \
                             acked_at = excluded.acked_at WHERE commands.ack_status IS NULL \
                             RETURNING seq",
                        )
                        .bind(run_id)
                        .bind(seq)
                        .bind(sent.kind)
                        .bind(Json(json!({})))
                        .bind(sent.person)
                        .bind(now)
                        .bind(status.as_str())
                        .bind(reason)
                        .fetch_optional(&mut *self)
                        .await?;
                        return Ok(recorded.map(|_| OwedAudit {
                            actor: sent.person.to_owned(),
                            action: "command.acked",
                            detail: canonical_json(&json!({
                                "run": run_id, "seq": seq, "status": status.as_str(), "reason": reason,
                            })),
                        }));
                    }
                    SliceEffect::ApprovalAnsweredByCommand {
                        request_id,
                        decision,
                        person: Some(person),
                        note,
                        updated_input,
                        ..
                    } => {
                        let recorded: Option<String> = sqlx::query_scalar(
                            "UPDATE approvals SET decision = $3, answered_by = $4, \
                             answer_note = $5, answered_at = $6 \
                             WHERE run_id = $1 AND request_id = $2 AND decision IS NULL \
                             RETURNING request_id",
                        )
                        .bind(run_id)
                        .bind(request_id)
                        .bind(decision.as_str())
                        .bind(person)
                        .bind(note)
                        .bind(now)
                        .fetch_optional(&mut *self)
                        .await?;
                        return Ok(recorded.map(|_| OwedAudit {
                            actor: person.to_owned(),
                            action: "approval.answered",
                            detail: answer_detail(run_id, request_id, decision, note, updated_input),
                        }));
                    }
                    _ => {}
                }
                let q = match *effect {
                    SliceEffect::ApprovalRequested {
                        request_id,
                        tool_name,
                        input,
                    } => sqlx::query(
                        "INSERT INTO approvals (run_id, request_id, tool_name, input, requested_at) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, request_id) DO NOTHING",
                    )
                    .bind(run_id)
                    .bind(request_id)
                    .bind(tool_name)
                    .bind(Json(storable(input)))
                    .bind(now),
                    SliceEffect::ApprovalSettled {
                        request_id,
                        decision,
                        by,
                        note,
                    } => sqlx::query(
                        "UPDATE approvals SET decision = $3, answered_by = $4, answer_note = $5, \
                         answered_at = $6 \
                         WHERE run_id = $1 AND request_id = $2 AND decision IS NULL",
                    )
                    .bind(run_id)
                    .bind(request_id)
                    .bind(decision.as_str())
                    .bind(by)
                    .bind(note)
                    .bind(now),
                    SliceEffect::HarnessSession(id) => {
                        sqlx::query("UPDATE sessions SET harness_session_id = $2 WHERE id = $1")
                            .bind(session)
                            .bind(id)
                    }
                    SliceEffect::CommandAnswered {
                        seq,
                        status,
                        reason,
                        ..
                    } => sqlx::query(
                        "UPDATE commands SET ack_status = $3, ack_reason = $4, acked_at = $5 \
                         WHERE run_id = $1 AND seq = $2 AND ack_status IS NULL",
                    )
                    .bind(run_id)
                    .bind(seq)
                    .bind(status.as_str())
                    .bind(reason)
                    .bind(now),
                    SliceEffect::ApprovalAnsweredByCommand {
                        request_id,
                        decision,
                        seq,
                        ..
                    } => sqlx::query(
                        "UPDATE approvals SET decision = $3, answered_by = COALESCE(\
                         (SELECT sent_by FROM commands WHERE run_id = $1 AND seq = $4), 'command'), \
                         answered_at = $5 \
                         WHERE run_id = $1 AND request_id = $2 AND decision IS NULL",
                    )
                    .bind(run_id)
                    .bind(request_id)
                    .bind(decision.as_str())
                    .bind(seq)
                    .bind(now),
                };
                q.execute(&mut *self).await?;
                Ok(None)
            }
        }
    };
}

impl_apply_effect!(sqlx::SqliteConnection);
impl_apply_effect!(sqlx::PgConnection);

/// Row counts of the multi-row statements that apply a slice's effects, largest first (as
/// [`SQLITE_ROWS`]: only these few statement texts are ever prepared, and stay cached).
const EFFECT_ROWS: [usize; 4] = [64, 16, 4, 1];

/// A slice's effects as a few multi-row statements that leave the database as applying them
/// one by one, in order, would. One statement per effect cost a hand-off to sqlx's SQLite
/// worker thread and back each: on a log where a fifth of the lines are commands and approvals
/// the watcher spent more of its CPU switching threads than storing events.
///
/// Why the order can go: the effects on one table never read another's (an answer by a command
/// reads the command's sender, which no effect changes); per command and per request the first
/// answer stands (`... IS NULL`), so only the first one can change anything; a request already
/// recorded ignores the same request again; the harness's session id ends as the last one. The
/// one order that matters, an answer to a request seen before that request in the same slice
/// (the answer finds nothing to change), is not grouped: [`Grouped::of`] says `None`.
#[derive(Debug, Default)]
struct Grouped<'e> {
    /// Permission requests, the first of each id.
    requested: Vec<(&'e str, &'e str, &'e Value)>,
    /// First answers that are [`SliceEffect::ApprovalSettled`].
    settled: Vec<(&'e str, Decision, &'e str, Option<&'e str>)>,
    /// First answers that are [`SliceEffect::ApprovalAnsweredByCommand`].
    by_command: Vec<(&'e str, Decision, i64)>,
    /// The first answer to each command.
    commands: Vec<(i64, AckStatus, Option<&'e str>)>,
    /// The last harness session id.
    harness_session: Option<&'e str>,
    /// The first answer to each command that names its sender (`sent`): made if missing.
    sent_commands: Vec<(i64, AckStatus, Option<&'e str>, SentBy<'e>)>,
    /// First answers that are a person's, carried out by a command: (request, decision,
    /// person, note, the input the person changed).
    person_answers: PersonAnswers<'e>,
    /// The audit records these two may owe, in the slice's order.
    owed: Vec<Owed>,
}

type PersonAnswers<'e> = Vec<(
    &'e str,
    Decision,
    &'e str,
    Option<&'e str>,
    Option<&'e Value>,
)>;

/// An audit record a grouped effect owes if it changes something: the index of its entry in
/// [`Grouped::sent_commands`] or [`Grouped::person_answers`].
#[derive(Debug, Clone, Copy)]
enum Owed {
    Command(usize),
    Answer(usize),
}

impl<'e> Grouped<'e> {
    /// `effects` grouped, or `None` where the order matters (apply them in order): a request
    /// after an answer to it, a command's answer naming its sender after another answer to it
    /// or after an approval carried out by it that reads its sender.
    fn of(effects: &[SliceEffect<'e>]) -> Option<Grouped<'e>> {
        let mut g = Grouped::default();
        let mut asked = HashSet::new();
        let mut answered = HashSet::new();
        let mut acked = HashSet::new();
        let mut sender_read = HashSet::new();
        for e in effects {
            match *e {
                SliceEffect::ApprovalRequested {
                    request_id,
                    tool_name,
                    input,
                } => {
                    if answered.contains(request_id) {
                        return None;
                    }
                    if asked.insert(request_id) {
                        g.requested.push((request_id, tool_name, input));
                    }
                }
                SliceEffect::ApprovalSettled {
                    request_id,
                    decision,
                    by,
                    note,
                } => {
                    if answered.insert(request_id) {
                        g.settled.push((request_id, decision, by, note));
                    }
                }
                SliceEffect::ApprovalAnsweredByCommand {
                    request_id,
                    decision,
                    person: Some(person),
                    note,
                    updated_input,
                    ..
                } => {
                    if answered.insert(request_id) {
                        g.owed.push(Owed::Answer(g.person_answers.len()));
                        g.person_answers
                            .push((request_id, decision, person, note, updated_input));
                    }
                }
                SliceEffect::CommandAnswered {
                    seq,
                    status,
                    reason,
                    sent: Some(sent),
                } => {
                    // In order, this answer could make the command's row another one found
                    // missing, or give a sender to an answer that read none.
                    if !acked.insert(seq) || sender_read.contains(&seq) {
                        return None;
                    }
                    g.owed.push(Owed::Command(g.sent_commands.len()));
                    g.sent_commands.push((seq, status, reason, sent));
                }
                SliceEffect::ApprovalAnsweredByCommand {
                    request_id,
                    decision,
                    seq,
                    person: None,
                    ..
                } => {
                    if answered.insert(request_id) {
                        sender_read.insert(seq);
                        g.by_command.push((request_id, decision, seq));
                    }
                }
                SliceEffect::CommandAnswered {
                    seq,
                    status,
                    reason,
                    sent: None,
                } => {
                    if acked.insert(seq) {
                        g.commands.push((seq, status, reason));
                    }
                }
                SliceEffect::HarnessSession(id) => g.harness_session = Some(id),
            }
        }
        Some(g)
    }
}

/// `items` cut into chunks of the [`EFFECT_ROWS`] sizes, in order.
fn effect_chunks<T>(items: &[T]) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut rest = items;
    for rows in EFFECT_ROWS {
        while rest.len() >= rows {
            let (chunk, tail) = rest.split_at(rows);
            out.push(chunk);
            rest = tail;
        }
    }
    out
}

/// Writes a statement's parameters in the order they are bound: `?` on SQLite (taken by
/// position; sqlx looks a numbered one's name up, a linear scan), `$1`, `$2`... on PostgreSQL.
struct Params {
    postgres: bool,
    n: usize,
}

impl Params {
    fn new(postgres: bool) -> Params {
        Params { postgres, n: 0 }
    }

    fn one(&mut self, sql: &mut String) {
        self.n += 1;
        if self.postgres {
            sql.push('$');
            sql.push_str(&self.n.to_string());
        } else {
            sql.push('?');
        }
    }

    /// `(p, p, ...), (p, p, ...)`: `rows` rows of `cols` parameters.
    fn rows(&mut self, sql: &mut String, rows: usize, cols: usize) {
        for r in 0..rows {
            sql.push_str(if r == 0 { "(" } else { ", (" });
            for c in 0..cols {
                if c > 0 {
                    sql.push_str(", ");
                }
                self.one(sql);
            }
            sql.push(')');
        }
    }
}

/// The text of each grouped statement for `rows` rows. `UPDATE ... FROM (VALUES ...) AS v`
/// names the values' columns `column1`, `column2`... on both backends.
mod grouped_sql {
    use super::Params;

    pub(super) fn requested(postgres: bool, rows: usize) -> String {
        let mut sql = String::from(
            "INSERT INTO approvals (run_id, request_id, tool_name, input, requested_at) VALUES ",
        );
        Params::new(postgres).rows(&mut sql, rows, 5);
        sql.push_str(" ON CONFLICT (run_id, request_id) DO NOTHING");
        sql
    }

    /// `set` holds the one `{now}` parameter; the values are (request_id, decision, ...).
    fn update_approvals(postgres: bool, rows: usize, set: &str, cols: usize) -> String {
        let mut p = Params::new(postgres);
        let mut sql = String::from("UPDATE approvals SET ");
        let (head, tail) = set.split_once("{now}").unwrap_or((set, ""));
        sql.push_str(head);
        p.one(&mut sql);
        sql.push_str(tail);
        sql.push_str(" FROM (VALUES ");
        p.rows(&mut sql, rows, cols);
        sql.push_str(") AS v WHERE approvals.run_id = ");
        p.one(&mut sql);
        sql.push_str(" AND approvals.request_id = v.column1 AND approvals.decision IS NULL");
        sql
    }

    /// Values: (request_id, decision, by, note).
    pub(super) fn settled(postgres: bool, rows: usize) -> String {
        update_approvals(
            postgres,
            rows,
            "decision = v.column2, answered_by = v.column3, answer_note = v.column4, \
             answered_at = {now}",
            4,
        )
    }

    /// Values: (request_id, decision, seq).
    pub(super) fn by_command(postgres: bool, rows: usize) -> String {
        update_approvals(
            postgres,
            rows,
            "decision = v.column2, answered_by = COALESCE((SELECT sent_by FROM commands \
             WHERE commands.run_id = approvals.run_id AND commands.seq = v.column3), 'command'), \
             answered_at = {now}",
            3,
        )
    }

    /// Values: (request_id, decision, person, note); returns the requests it answered.
    pub(super) fn person_answers(postgres: bool, rows: usize) -> String {
        let mut sql = settled(postgres, rows);
        sql.push_str(" RETURNING approvals.request_id");
        sql
    }

    /// Values: (run_id, seq, kind, body, sent_by, sent_at, ack_status, ack_reason, acked_at);
    /// returns the commands whose answer it recorded.
    pub(super) fn sent_commands(postgres: bool, rows: usize) -> String {
        let mut sql = String::from(
            "INSERT INTO commands (run_id, seq, kind, body, sent_by, sent_at, ack_status, \
             ack_reason, acked_at) VALUES ",
        );
        Params::new(postgres).rows(&mut sql, rows, 9);
        sql.push_str(
            " ON CONFLICT (run_id, seq) DO UPDATE SET ack_status = excluded.ack_status, \
             ack_reason = excluded.ack_reason, acked_at = excluded.acked_at \
             WHERE commands.ack_status IS NULL RETURNING seq",
        );
        sql
    }

    /// Values: (seq, at, actor, action, detail, prev_hash, hash).
    pub(super) fn audit(postgres: bool, rows: usize) -> String {
        let mut sql = String::from(
            "INSERT INTO audit_log (seq, at, actor, action, detail, prev_hash, hash) VALUES ",
        );
        Params::new(postgres).rows(&mut sql, rows, 7);
        sql
    }

    /// Values: (seq, status, reason).
    pub(super) fn commands(postgres: bool, rows: usize) -> String {
        let mut p = Params::new(postgres);
        let mut sql = String::from(
            "UPDATE commands SET ack_status = v.column2, ack_reason = v.column3, acked_at = ",
        );
        p.one(&mut sql);
        sql.push_str(" FROM (VALUES ");
        p.rows(&mut sql, rows, 3);
        sql.push_str(") AS v WHERE commands.run_id = ");
        p.one(&mut sql);
        sql.push_str(" AND commands.seq = v.column1 AND commands.ack_status IS NULL");
        sql
    }
}

/// Applies [`Grouped`] effects in a commit's transaction.
trait ApplyGrouped {
    async fn apply_grouped(
        &mut self,
        g: &Grouped<'_>,
        run_id: &str,
        session: &str,
        now: i64,
    ) -> Result<(), StoreError>;
}

macro_rules! impl_apply_grouped {
    ($conn:ty, $postgres:expr) => {
        impl ApplyGrouped for $conn {
            async fn apply_grouped(
                &mut self,
                g: &Grouped<'_>,
                run_id: &str,
                session: &str,
                now: i64,
            ) -> Result<(), StoreError> {
                let pg = $postgres;
                for chunk in effect_chunks(&g.requested) {
                    let mut q =
                        sqlx::query(sqlx::AssertSqlSafe(grouped_sql::requested(pg, chunk.len())));
                    for (request_id, tool_name, input) in chunk {
                        q = q
                            .bind(run_id)
                            .bind(*request_id)
                            .bind(*tool_name)
                            .bind(Json(storable(input)))
                            .bind(now);
                    }
                    q.execute(&mut *self).await?;
                }
                for chunk in effect_chunks(&g.settled) {
                    let mut q =
                        sqlx::query(sqlx::AssertSqlSafe(grouped_sql::settled(pg, chunk.len())))
                            .bind(now);
                    for (request_id, decision, by, note) in chunk {
                        q = q
                            .bind(*request_id)
                            .bind(decision.as_str())
                            .bind(*by)
                            .bind(*note);
                    }
                    q.bind(run_id).execute(&mut *self).await?;
                }
                let acked = ApplyPersonal::sent_commands(self, g, run_id, now).await?;
                for chunk in effect_chunks(&g.by_command) {
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(grouped_sql::by_command(
                        pg,
                        chunk.len(),
                    )))
                    .bind(now);
                    for (request_id, decision, seq) in chunk {
                        q = q.bind(*request_id).bind(decision.as_str()).bind(*seq);
                    }
                    q.bind(run_id).execute(&mut *self).await?;
                }
                for chunk in effect_chunks(&g.commands) {
                    let mut q =
                        sqlx::query(sqlx::AssertSqlSafe(grouped_sql::commands(pg, chunk.len())))
                            .bind(now);
                    for (seq, status, reason) in chunk {
                        q = q.bind(*seq).bind(status.as_str()).bind(*reason);
                    }
                    q.bind(run_id).execute(&mut *self).await?;
                }
                let answered = ApplyPersonal::person_answers(self, g, run_id, now).await?;
                if let Some(id) = g.harness_session {
                    ApplyEffect::apply(
                        self,
                        run_id,
                        session,
                        now,
                        &SliceEffect::HarnessSession(id),
                    )
                    .await?;
                }
                let owed = owed_audits(g, run_id, &acked, &answered);
                ApplyPersonal::append_audits(self, &owed, now).await
            }
        }
    };
}

/// The audit records `g`'s personal effects owe, in the slice's order: those that changed
/// something (`acked` commands, `answered` requests), as applying them one by one would write.
fn owed_audits(
    g: &Grouped<'_>,
    run_id: &str,
    acked: &HashSet<i64>,
    answered: &HashSet<String>,
) -> Vec<OwedAudit> {
    g.owed
        .iter()
        .filter_map(|o| match *o {
            Owed::Command(i) => {
                let (seq, status, reason, sent) = g.sent_commands[i];
                acked.contains(&seq).then(|| OwedAudit {
                    actor: sent.person.to_owned(),
                    action: "command.acked",
                    detail: canonical_json(&json!({
                        "run": run_id, "seq": seq, "status": status.as_str(), "reason": reason,
                    })),
                })
            }
            Owed::Answer(i) => {
                let (request_id, decision, person, note, updated_input) = g.person_answers[i];
                answered.contains(request_id).then(|| OwedAudit {
                    actor: person.to_owned(),
                    action: "approval.answered",
                    detail: answer_detail(run_id, request_id, decision, note, updated_input),
                })
            }
        })
        .collect()
}

/// The detail of a person's answer's audit record (`approval.answered`).
fn answer_detail(
    run_id: &str,
    request_id: &str,
    decision: Decision,
    note: Option<&str>,
    updated_input: Option<&Value>,
) -> String {
    let mut detail = json!({
        "run": run_id, "request_id": request_id, "decision": decision.as_str(),
    });
    if let Some(note) = note {
        detail["note"] = json!(note);
    }
    if let Some(input) = updated_input {
        detail["updated_input"] = input.clone();
    }
    canonical_json(&detail)
}

/// A slice's effects that are a person's (their answers are audited when recorded), grouped as
/// [`ApplyGrouped`] does the rest: a few statements whatever their number, and their audit
/// records appended in one.
trait ApplyPersonal {
    /// Records the answers to commands that name their sender; the commands answered.
    async fn sent_commands(
        &mut self,
        g: &Grouped<'_>,
        run_id: &str,
        now: i64,
    ) -> Result<HashSet<i64>, StoreError>;

    /// Records a person's answers; the requests answered.
    async fn person_answers(
        &mut self,
        g: &Grouped<'_>,
        run_id: &str,
        now: i64,
    ) -> Result<HashSet<String>, StoreError>;

    /// Appends `owed` to the audit chain, in order (what [`AppendAudit::append_audit`] once
    /// for each would write).
    async fn append_audits(&mut self, owed: &[OwedAudit], at: i64) -> Result<(), StoreError>;
}

macro_rules! impl_apply_personal {
    ($conn:ty, $postgres:expr) => {
        impl ApplyPersonal for $conn {
            async fn sent_commands(
                &mut self,
                g: &Grouped<'_>,
                run_id: &str,
                now: i64,
            ) -> Result<HashSet<i64>, StoreError> {
                let mut acked = HashSet::new();
                for chunk in effect_chunks(&g.sent_commands) {
                    let sql = grouped_sql::sent_commands($postgres, chunk.len());
                    let mut q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql));
                    for (seq, status, reason, sent) in chunk {
                        q = q
                            .bind(run_id)
                            .bind(*seq)
                            .bind(sent.kind)
                            .bind(Json(json!({})))
                            .bind(sent.person)
                            .bind(now)
                            .bind(status.as_str())
                            .bind(*reason)
                            .bind(now);
                    }
                    acked.extend(q.fetch_all(&mut *self).await?);
                }
                Ok(acked)
            }

            async fn person_answers(
                &mut self,
                g: &Grouped<'_>,
                run_id: &str,
                now: i64,
            ) -> Result<HashSet<String>, StoreError> {
                let mut answered = HashSet::new();
                for chunk in effect_chunks(&g.person_answers) {
                    let sql = grouped_sql::person_answers($postgres, chunk.len());
                    let mut q = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql)).bind(now);
                    for (request_id, decision, person, note, _) in chunk {
                        q = q
                            .bind(*request_id)
                            .bind(decision.as_str())
                            .bind(*person)
                            .bind(*note);
                    }
                    answered.extend(q.bind(run_id).fetch_all(&mut *self).await?);
                }
                Ok(answered)
            }

            async fn append_audits(
                &mut self,
                owed: &[OwedAudit],
                at: i64,
            ) -> Result<(), StoreError> {
                let Ok(n) = i64::try_from(owed.len()) else {
                    return Err(StoreError::Invalid("too many audit records".into()));
                };
                if n == 0 {
                    return Ok(());
                }
                let head: Option<(i64, String)> = sqlx::query_as(
                    "UPDATE audit_head SET seq = seq + $1 WHERE id = 1 RETURNING seq, hash",
                )
                .bind(n)
                .fetch_optional(&mut *self)
                .await?;
                let Some((last, prev_hash)) = head else {
                    return Err(crate::audit::AuditError::Broken {
                        seq: 0,
                        why: "the chain head row is missing".into(),
                    }
                    .into());
                };
                let records: Vec<(&str, &str, &str)> = owed
                    .iter()
                    .map(|a| (a.actor.as_str(), a.action, a.detail.as_str()))
                    .collect();
                let rows = crate::audit::chain(&prev_hash, last - n + 1, at, &records)?;
                let full: Vec<_> = rows.iter().zip(&records).collect();
                for chunk in effect_chunks(&full) {
                    let sql = grouped_sql::audit($postgres, chunk.len());
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for &((seq, prev, hash), (actor, action, detail)) in chunk {
                        q = q
                            .bind(*seq)
                            .bind(at)
                            .bind(*actor)
                            .bind(*action)
                            .bind(*detail)
                            .bind(prev.as_str())
                            .bind(hash.as_str());
                    }
                    q.execute(&mut *self).await?;
                }
                let newest = rows.last().map(|r| r.2.as_str()).unwrap_or_default();
                sqlx::query("UPDATE audit_head SET hash = $1 WHERE id = 1")
                    .bind(newest)
                    .execute(&mut *self)
                    .await?;
                Ok(())
            }
        }
    };
}

impl_apply_personal!(sqlx::SqliteConnection, false);
impl_apply_personal!(sqlx::PgConnection, true);

impl_apply_grouped!(sqlx::SqliteConnection, false);
impl_apply_grouped!(sqlx::PgConnection, true);

fn event_from(r: &impl Cols) -> Result<Event, StoreError> {
    Ok(Event {
        id: r.int("id")?,
        session_id: r.text("session_id")?,
        run_id: r.opt_text("run_id")?,
        kind: r.text("kind")?,
        payload: r.json("payload")?,
        created_at: r.int("created_at")?,
    })
}

impl Store {
    /// In one transaction: checks that run `run_id`'s log cursor is `expected_cursor`, sets it
    /// to `new_cursor`, and stores `events` (in order) under the run's session. Returns the
    /// events' ids. If the cursor moved, nothing is written ([`StoreError::CursorMoved`]).
    pub async fn commit_events<E: EventRow>(
        &self,
        run_id: &str,
        expected_cursor: i64,
        new_cursor: i64,
        events: &[E],
    ) -> Result<Vec<i64>, StoreError> {
        self.commit_events_with_state(run_id, expected_cursor, new_cursor, events, None)
            .await
    }

    /// [`Store::commit_events`], also storing the watcher's parser `state` at `new_cursor` in the
    /// same transaction (so a restarted watcher resumes the parse exactly where the cursor is).
    pub async fn commit_events_with_state<E: EventRow>(
        &self,
        run_id: &str,
        expected_cursor: i64,
        new_cursor: i64,
        events: &[E],
        state: Option<&Value>,
    ) -> Result<Vec<i64>, StoreError> {
        self.commit_slice(run_id, expected_cursor, new_cursor, events, state, &[])
            .await
    }

    /// [`Store::commit_events_with_state`], also applying what the slice changes besides its
    /// events (`effects`, with the result of applying them in order; written as a few
    /// multi-row statements) in the same transaction: a watcher that stops between committing
    /// a slice and acting on it cannot lose a permission request.
    pub async fn commit_slice<E: EventRow>(
        &self,
        run_id: &str,
        expected_cursor: i64,
        new_cursor: i64,
        events: &[E],
        state: Option<&Value>,
        effects: &[SliceEffect<'_>],
    ) -> Result<Vec<i64>, StoreError> {
        if new_cursor < expected_cursor {
            return Err(StoreError::Invalid(format!(
                "run {run_id}: the log cursor only moves forward ({expected_cursor} -> {new_cursor})"
            )));
        }
        let postgres = self.backend() == Backend::Postgres;
        let now = now_ms();
        let ids = in_tx!(self, tx => {
            // The row's write lock makes a concurrent committer wait, then find the cursor moved.
            // The run's session comes back with it (one statement where there were two).
            let session: Option<String> = sqlx::query_scalar(
                "UPDATE runs SET log_cursor = $3, watch_state = COALESCE($4, watch_state) \
                 WHERE id = $1 AND log_cursor = $2 \
                 RETURNING (SELECT session_id FROM turns WHERE turns.id = runs.turn_id)",
            )
            .bind(run_id)
            .bind(expected_cursor)
            .bind(new_cursor)
            .bind(state.map(|s| Json(s.clone())))
            .fetch_optional(&mut *tx)
            .await?;
            let Some(session) = session else {
                let found: Option<i64> =
                    sqlx::query_scalar("SELECT log_cursor FROM runs WHERE id = $1")
                        .bind(run_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                return Err(match found {
                    None => StoreError::NotFound { what: "run", key: run_id.to_owned() },
                    Some(found) => StoreError::CursorMoved {
                        run: run_id.to_owned(),
                        expected: expected_cursor,
                        found,
                    },
                });
            };
            // The effects first, the events last: on PostgreSQL the events' order lock is held
            // from here to the commit and every slice of every run waits for it, so it covers
            // the INSERT and the commit only. Taken last, it is never held while waiting for
            // another lock (the only other taker, `append_event`, takes none): no deadlock.
            match Grouped::of(effects) {
                Some(g) => ApplyGrouped::apply_grouped(&mut *tx, &g, run_id, &session, now).await?,
                None => {
                    let mut owed = Vec::new();
                    for effect in effects {
                        owed.extend(ApplyEffect::apply(&mut *tx, run_id, &session, now, effect).await?);
                    }
                    for a in owed {
                        AppendAudit::append_audit(&mut *tx, &a.actor, a.action, a.detail, now).await?;
                    }
                }
            }
            if postgres && !events.is_empty() {
                sqlx::query(ORDER_LOCK).execute(&mut *tx).await?;
            }
            let mut ids = Vec::with_capacity(events.len());
            InsertEvents::insert_events(&mut *tx, &session, run_id, now, events, &mut ids).await?;
            if postgres && let Some(newest) = ids.last() {
                let notice = crate::notices::payload(&self.origin, Some(run_id), &session, *newest);
                sqlx::query(NOTIFY).bind(crate::notices::CHANNEL).bind(notice).execute(&mut *tx).await?;
            }
            ids
        });
        self.note_requests(
            run_id,
            effects.iter().filter_map(|e| match e {
                SliceEffect::ApprovalRequested { request_id, .. } => Some(*request_id),
                _ => None,
            }),
        );
        Ok(ids)
    }

    /// Stores one event that no run log produced (e.g. `turn.queued`), optionally tied to a run.
    /// The session (and the run) must exist: the table keeps no foreign keys (migration 13),
    /// so this is where an event is kept from naming nothing.
    pub async fn append_event(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        event: &NewEvent,
    ) -> Result<i64, StoreError> {
        let postgres = self.backend() == Backend::Postgres;
        let id = in_tx!(self, tx => {
            if postgres {
                sqlx::query(ORDER_LOCK).execute(&mut *tx).await?;
            }
            let id: Option<i64> = sqlx::query_scalar(APPEND)
                .bind(session_id)
                .bind(run_id)
                .bind(&event.kind)
                .bind(Json(storable(&event.payload)))
                .bind(now_ms())
                .fetch_optional(&mut *tx)
                .await?;
            match id {
                Some(id) => {
                    if postgres {
                        let notice = crate::notices::payload(&self.origin, run_id, session_id, id);
                        sqlx::query(NOTIFY).bind(crate::notices::CHANNEL).bind(notice).execute(&mut *tx).await?;
                    }
                    id
                }
                None => {
                    let run_found = match run_id {
                        Some(run) => sqlx::query_scalar::<_, i64>(
                            "SELECT COUNT(*) FROM runs WHERE id = $1",
                        )
                        .bind(run)
                        .fetch_one(&mut *tx)
                        .await? > 0,
                        None => true,
                    };
                    let (what, key) = match run_id {
                        Some(run) if !run_found => ("run", run),
                        _ => ("session", session_id),
                    };
                    return Err(StoreError::NotFound { what, key: key.to_owned() });
                }
            }
        });
        Ok(id)
    }

    /// Up to `limit` (1 to [`MAX_PAGE`]) events of `scope` with ids above `after_id`, oldest
    /// first. Start with `after_id = 0`; go on from the last id returned.
    /// The newest stored event of `kind` of run `run_id`, if any (e.g. its `turn_end`, for a
    /// watcher that restarted after committing it and before acting on it).
    pub async fn last_run_event(
        &self,
        run_id: &str,
        kind: &str,
    ) -> Result<Option<Event>, StoreError> {
        read_db!(self, pool => {
            let row = sqlx::query(
                "SELECT id, session_id, run_id, kind, payload, created_at FROM events \
                 WHERE run_id = $1 AND kind = $2 ORDER BY id DESC LIMIT 1",
            )
            .bind(run_id)
            .bind(kind)
            .fetch_optional(pool)
            .await?;
            row.as_ref().map(event_from).transpose()
        })
    }

    pub async fn events_after(
        &self,
        scope: EventScope<'_>,
        after_id: i64,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let (sql, key) = match scope {
            EventScope::Session(s) => (
                "SELECT id, session_id, run_id, kind, payload, created_at FROM events \
                 WHERE session_id = $1 AND id > $2 ORDER BY id LIMIT $3",
                s,
            ),
            EventScope::Run(r) => (
                "SELECT id, session_id, run_id, kind, payload, created_at FROM events \
                 WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3",
                r,
            ),
        };
        read_pages!(self, pool => {
            let q = sqlx::query(sql).bind(key).bind(after_id).bind(limit);
            q.fetch_all(pool).await?.iter().map(event_from).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A person's answers group (a few statements, not four a person), unless the order
    /// matters.
    #[test]
    fn a_persons_answers_are_grouped_unless_the_order_matters() {
        let sent = Some(SentBy {
            kind: "approve",
            person: "ada@example.com",
        });
        let acked = |seq| SliceEffect::CommandAnswered {
            seq,
            status: AckStatus::Done,
            reason: None,
            sent,
        };
        let answered = |seq, person| SliceEffect::ApprovalAnsweredByCommand {
            request_id: "r",
            decision: Decision::Allow,
            seq,
            person,
            note: None,
            updated_input: None,
        };
        let g = Grouped::of(&[answered(1, Some("ada@example.com")), acked(1), acked(2)]);
        let g = g.expect("grouped");
        assert_eq!((g.sent_commands.len(), g.person_answers.len()), (2, 1));
        assert!(Grouped::of(&[acked(1), acked(1)]).is_none());
        assert!(Grouped::of(&[answered(1, None), acked(1)]).is_none());
        assert!(Grouped::of(&[acked(1), answered(1, None)]).is_some());
    }

    #[test]
    fn nul_characters_become_replacement_characters() {
        let v = json!({"a\u{0}": ["x\u{0}y", 1, {"b": "ok"}]});
        assert_eq!(
            storable(&v).into_owned(),
            json!({"a\u{FFFD}": ["x\u{FFFD}y", 1, {"b": "ok"}]})
        );
        let clean = json!({"a": "b"});
        assert!(matches!(storable(&clean), Cow::Borrowed(_)));
    }

    #[test]
    fn nul_escapes_become_replacement_characters_and_nothing_else_changes() {
        let v = json!({"a\u{0}": "x\u{0}y", "b": "\\u0000 is text", "c": "\\\u{0}"});
        let text = serde_json::to_string(&v).unwrap();
        let back: Value = serde_json::from_str(&nul_free_text(text)).unwrap();
        assert_eq!(
            back,
            json!({"a\u{FFFD}": "x\u{FFFD}y", "b": "\\u0000 is text", "c": "\\\u{FFFD}"})
        );
        let plain = r#"{"k":"no nul here \\ \" \n"}"#.to_owned();
        assert_eq!(nul_free_text(plain.clone()), plain);
    }
}
