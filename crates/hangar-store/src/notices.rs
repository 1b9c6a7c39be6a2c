//! Events stored by other replicas, heard through PostgreSQL's `LISTEN`/`NOTIFY` (issue 24).
//!
//! Replicas share only the database. A replica's live streams were woken by its own commits
//! alone, and read the store again once a second in case another replica had stored something
//! (a second late at best, and 200 streams asking 200 times a second for nothing). Here every
//! transaction that stores events also sends a notice on [`CHANNEL`] naming the run, the
//! session and the newest id (delivered when it commits, never if it rolls back), and each
//! replica listens on a connection of its own.
//!
//! A notice only says "look again": a stream reads the events from the store after its own
//! cursor, so a notice lost (the listening connection broken, see [`Notice::Missed`]) or forged
//! by someone who can reach the database costs a read, never an event. A replica skips its own
//! notices (each open [`Store`] has an origin of its own): its watchers wake its streams
//! directly, and a second wake-up per commit would double every stream's reads.
//!
//! The channel is the database's, shared by every schema in it: a notice names its schema, and
//! a listener skips other schemas' (another hangar sharing the database, or tests side by side).
//!
//! SQLite has one process on its file: nothing to listen to.

use serde::Deserialize;
use sqlx::postgres::PgListener;

use crate::Store;
use crate::db::Db;
use crate::error::StoreError;

/// The channel notices go out on.
pub const CHANNEL: &str = "hangar_events";

/// What a listener hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Another replica stored events of `session` (of `run`, if they came from one) up to id
    /// `newest`.
    Stored {
        run: Option<String>,
        session: String,
        newest: i64,
    },
    /// The listening connection was lost and made again: notices sent meanwhile are gone, so
    /// every stream should look again.
    Missed,
}

/// A notice as sent: the replica it came from, and what it stored.
#[derive(Deserialize)]
struct Wire {
    /// The schema the events are in (another hangar may share the database).
    schema: Option<String>,
    origin: String,
    run: Option<String>,
    session: String,
    id: i64,
}

/// The text of the notice for events of `session` (of `run`) up to `newest`, sent by the store
/// of `origin`.
pub(crate) fn payload(origin: &str, run: Option<&str>, session: &str, newest: i64) -> String {
    serde_json::json!({ "origin": origin, "run": run, "session": session, "id": newest })
        .to_string()
}

/// A replica's listener (see the module's docs).
pub struct Notices {
    listener: PgListener,
    origin: std::sync::Arc<str>,
    /// This store's schema: notices of others are skipped.
    schema: Option<String>,
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notices").finish_non_exhaustive()
    }
}

impl Store {
    /// On PostgreSQL, a listener for the events other replicas store; `None` on SQLite.
    pub async fn event_notices(&self) -> Result<Option<Notices>, StoreError> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(None);
        };
        let mut listener = PgListener::connect_with(pool).await?;
        let schema: Option<String> = sqlx::query_scalar("SELECT current_schema()")
            .fetch_one(&mut listener)
            .await?;
        listener.listen(CHANNEL).await?;
        Ok(Some(Notices {
            listener,
            origin: std::sync::Arc::clone(&self.origin),
            schema,
        }))
    }
}

impl Notices {
    /// The next notice from another replica. An error means the connection could not be made
    /// again; the caller waits and asks again (each call tries).
    pub async fn next(&mut self) -> Result<Notice, StoreError> {
        loop {
            let Some(n) = self.listener.try_recv().await? else {
                return Ok(Notice::Missed);
            };
            let Ok(wire) = serde_json::from_str::<Wire>(n.payload()) else {
                // Not one of ours: someone else can NOTIFY on the channel. Look again.
                return Ok(Notice::Missed);
            };
            if *wire.origin == *self.origin || wire.schema != self.schema {
                continue;
            }
            return Ok(Notice::Stored {
                run: wire.run,
                session: wire.session,
                newest: wire.id,
            });
        }
    }
}
