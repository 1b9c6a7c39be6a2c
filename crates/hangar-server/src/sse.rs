//! Live event streams: Server-Sent Events whose ids are the store's event ids, so a client that
//! reconnects with `Last-Event-ID` gets exactly the events after it — no gap, no repeat.
//!
//! The stream first replays what is stored after the cursor, then waits for a wake-up (a
//! [`tokio::sync::watch`] of the newest event id of its run or session: another run's commits
//! do not wake it) and reads again from its own cursor. Reading always goes through the store,
//! so the order and ids are the store's, whatever the wake-ups.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::Stream;
use serde_json::Value;
use tokio::sync::watch;

/// One stored event as a stream sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamEvent {
    pub id: i64,
    pub kind: String,
    pub data: Value,
}

/// Reads stored events after a cursor.
pub trait EventSource: Send + Sync + 'static {
    fn after(
        &self,
        cursor: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StreamEvent>, String>> + Send;
}

/// The store's events of one run or one session.
#[derive(Debug)]
pub struct StoreEvents {
    pub plane: std::sync::Arc<hangar_control::ControlPlane>,
    pub run: Option<String>,
    pub session: Option<String>,
}

impl EventSource for StoreEvents {
    async fn after(&self, cursor: i64, limit: usize) -> Result<Vec<StreamEvent>, String> {
        let scope = match (&self.run, &self.session) {
            (Some(r), _) => hangar_store::EventScope::Run(r),
            (None, Some(s)) => hangar_store::EventScope::Session(s),
            (None, None) => return Ok(Vec::new()),
        };
        let limit = i64::try_from(limit).unwrap_or(500);
        let events = self
            .plane
            .store()
            .events_after(scope, cursor, limit)
            .await
            .map_err(|e| e.to_string())?;
        Ok(events
            .into_iter()
            .map(|e| {
                // When it was stored (ms), so the page can say when a person acted.
                let mut data = e.payload;
                if let Some(o) = data.as_object_mut() {
                    o.insert("at".into(), e.created_at.into());
                }
                StreamEvent {
                    id: e.id,
                    kind: e.kind,
                    data,
                }
            })
            .collect())
    }
}

/// The cursor a client asks to resume from: `Last-Event-ID`, else `?after=`, else 0.
pub fn resume_cursor(headers: &HeaderMap, after: Option<i64>) -> i64 {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse().ok())
        .or(after)
        .unwrap_or(0)
}

/// The SSE response: stored events after `cursor`, then live ones as `newest` moves.
///
/// `recheck` bounds the wait for a wake-up: a commit made by another replica (PostgreSQL) wakes
/// nothing here, so there the stream reads again at least that often.
pub fn stream<S: EventSource>(
    source: S,
    mut cursor: i64,
    mut newest: watch::Receiver<i64>,
    recheck: Duration,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let s = async_stream(move |tx| async move {
        let limit = 500;
        loop {
            match source.after(cursor, limit).await {
                Ok(batch) if !batch.is_empty() => {
                    // A short page is all there was: wait for the next wake-up (a commit made
                    // while this page was read has woken `newest` already).
                    let more = batch.len() >= limit;
                    for e in batch {
                        cursor = e.id;
                        let ev = Event::default()
                            .id(e.id.to_string())
                            .event(e.kind)
                            .data(e.data.to_string());
                        if tx.send(Ok(ev)).await.is_err() {
                            return;
                        }
                    }
                    if more {
                        continue;
                    }
                }
                Ok(_) => {}
                Err(message) => {
                    let ev = Event::default()
                        .event("error")
                        .data(serde_json::json!({"message": message}).to_string());
                    let _ = tx.send(Ok(ev)).await;
                    return;
                }
            }
            // Nothing new: wait for the store to move (or re-check anyway).
            let _ = tokio::time::timeout(recheck, newest.changed()).await;
        }
    });
    Sse::new(s).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// A tiny channel-backed stream, so the loop above can be written as plain async code.
fn async_stream<F, Fut>(f: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Event, Infallible>>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}
