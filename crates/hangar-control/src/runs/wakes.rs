//! What wakes a live event stream: stored events of its run, or of its session (issue 22).
//!
//! A stream reads the store after its own cursor whenever it is woken, so a wake-up carries no
//! events, only "look again". One channel for every stream woke each of 200 clients for every
//! commit of any run, and each went to the store for nothing: with 200 runs live, every
//! commit cost 200 queries. Here a stream is woken by its own run's (or session's) commits; a
//! channel is made when a stream first asks for it and dropped once no stream holds it.
//!
//! Replicas sharing PostgreSQL hear each other's commits through the store's notices
//! (`hangar_store::Notices`, LISTEN/NOTIFY: issue 24): [`listen`] turns them into the same
//! wake-ups, so a stream on one replica follows a run another replica watches as it happens.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// Which events a stream follows.
#[derive(Clone, Copy, Debug)]
pub enum WakeScope<'a> {
    /// One run's.
    Run(&'a str),
    /// One session's (all of its runs').
    Session(&'a str),
    /// Every run's.
    All,
}

/// The channels, by run and by session; each holds the newest event id stored.
#[derive(Debug)]
pub(crate) struct Wakes {
    by_run: Mutex<HashMap<String, watch::Sender<i64>>>,
    by_session: Mutex<HashMap<String, watch::Sender<i64>>>,
    all: watch::Sender<i64>,
}

impl Default for Wakes {
    fn default() -> Wakes {
        Wakes {
            by_run: Mutex::default(),
            by_session: Mutex::default(),
            all: watch::channel(0).0,
        }
    }
}

/// Past this many channels, a new subscription first drops those nobody holds any more (a
/// channel is otherwise dropped at its key's next wake-up).
const SWEEP_AT: usize = 256;

impl Wakes {
    /// A receiver that changes when events of `scope` are stored (its value: the newest id).
    pub(crate) fn subscribe(&self, scope: WakeScope<'_>) -> watch::Receiver<i64> {
        let (map, key) = match scope {
            WakeScope::Run(r) => (&self.by_run, r),
            WakeScope::Session(s) => (&self.by_session, s),
            WakeScope::All => return self.all.subscribe(),
        };
        let mut map = map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= SWEEP_AT {
            map.retain(|_, tx| tx.receiver_count() > 0);
        }
        match map.get(key) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(0);
                map.insert(key.to_owned(), tx);
                rx
            }
        }
    }

    /// Events of `run` (of `session`) up to id `newest` were stored: wakes the streams of the
    /// run, of the session, and of everything.
    pub(crate) fn stored(&self, run: &str, session: Option<&str>, newest: i64) {
        self.all.send_modify(|v| *v = (*v).max(newest));
        Self::wake(&self.by_run, run, newest);
        if let Some(s) = session {
            Self::wake(&self.by_session, s, newest);
        }
    }

    /// Events of `session` (of `run`) up to id `newest` were stored by another replica.
    fn heard(&self, run: Option<&str>, session: &str, newest: i64) {
        self.all.send_modify(|v| *v = (*v).max(newest));
        if let Some(r) = run {
            Self::wake(&self.by_run, r, newest);
        }
        Self::wake(&self.by_session, session, newest);
    }

    /// Wakes every stream (what was stored meanwhile is not known).
    fn everything(&self) {
        self.all.send_modify(|_| {});
        for map in [&self.by_run, &self.by_session] {
            let map = map
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for tx in map.values() {
                tx.send_modify(|_| {});
            }
        }
    }

    /// Whether any stream follows a session (a run's watcher then looks its session up).
    pub(crate) fn has_session_streams(&self) -> bool {
        self.by_session.lock().is_ok_and(|m| !m.is_empty())
    }

    fn wake(map: &Mutex<HashMap<String, watch::Sender<i64>>>, key: &str, newest: i64) {
        let mut map = map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(tx) = map.get(key) else {
            return;
        };
        if tx.receiver_count() == 0 {
            map.remove(key);
            return;
        }
        tx.send_modify(|v| *v = (*v).max(newest));
    }

    #[cfg(test)]
    fn channels(&self) -> usize {
        let n = |m: &Mutex<HashMap<String, watch::Sender<i64>>>| m.lock().map_or(0, |m| m.len());
        n(&self.by_run) + n(&self.by_session)
    }
}

/// How long a replica waits before listening again after its listening connection failed.
const LISTEN_AGAIN: Duration = Duration::from_secs(1);

/// On PostgreSQL, wakes this replica's streams with the events other replicas store, for as
/// long as the control plane lives (started once). While it listens, [`Runs::hears_replicas`]
/// says so; whenever it starts listening, or lost notices, every stream looks again.
pub(crate) fn listen(plane: &Arc<super::Runs>) {
    if plane.listening.swap(true, Ordering::SeqCst) {
        return;
    }
    let weak = Arc::downgrade(plane);
    let stop = Arc::clone(&plane.stop_listening);
    tokio::spawn(async move {
        tokio::select! {
            () = hear(weak) => {}
            () = stop.notified() => {}
        }
    });
}

/// [`listen`]'s loop, for as long as the control plane lives.
async fn hear(weak: std::sync::Weak<super::Runs>) {
    loop {
        let Some(store) = weak.upgrade().map(|p| p.store.clone()) else {
            return;
        };
        let mut notices = match store.event_notices().await {
            Ok(Some(n)) => n,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for other replicas' events; streams read again each second");
                tokio::time::sleep(LISTEN_AGAIN).await;
                continue;
            }
        };
        drop(store);
        if let Some(p) = weak.upgrade() {
            p.hears_replicas.store(true, Ordering::SeqCst);
            crate::metrics::hears_replicas(true);
            p.wakes.everything();
        }
        loop {
            let heard = notices.next().await;
            let Some(p) = weak.upgrade() else { return };
            match heard {
                Ok(hangar_store::Notice::Stored {
                    run,
                    session,
                    newest,
                }) => p.wakes.heard(run.as_deref(), &session, newest),
                Ok(hangar_store::Notice::Missed) => p.wakes.everything(),
                Err(e) => {
                    p.hears_replicas.store(false, Ordering::SeqCst);
                    crate::metrics::hears_replicas(false);
                    tracing::warn!(error = %e, "lost the connection that hears other replicas' events; listening again");
                    break;
                }
            }
        }
        tokio::time::sleep(LISTEN_AGAIN).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_woken_by_its_own_run_and_session_only() {
        let w = Wakes::default();
        let mut a = w.subscribe(WakeScope::Run("run-a"));
        let b = w.subscribe(WakeScope::Run("run-b"));
        let mut s = w.subscribe(WakeScope::Session("sess-1"));
        let mut all = w.subscribe(WakeScope::All);
        w.stored("run-a", Some("sess-2"), 7);
        assert!(a.has_changed().unwrap());
        assert_eq!(*a.borrow_and_update(), 7);
        assert!(
            !b.has_changed().unwrap(),
            "another run's commit woke this stream"
        );
        assert!(
            !s.has_changed().unwrap(),
            "another session's commit woke this stream"
        );
        assert!(all.has_changed().unwrap());
        w.stored("run-b", Some("sess-1"), 9);
        assert!(b.has_changed().unwrap());
        assert_eq!(*s.borrow_and_update(), 9);
        assert!(!a.has_changed().unwrap());
        assert_eq!(*all.borrow_and_update(), 9);
    }

    /// Another replica's notice wakes the run's and the session's streams (a notice with no
    /// run, the session's alone); a lost connection wakes every stream.
    #[test]
    fn another_replicas_events_wake_their_streams_and_a_lost_listener_wakes_all() {
        let w = Wakes::default();
        let mut a = w.subscribe(WakeScope::Run("run-a"));
        let b = w.subscribe(WakeScope::Run("run-b"));
        let mut s = w.subscribe(WakeScope::Session("sess-1"));
        w.heard(Some("run-a"), "sess-1", 5);
        assert_eq!(*a.borrow_and_update(), 5);
        assert_eq!(*s.borrow_and_update(), 5);
        assert!(
            !b.has_changed().unwrap(),
            "another run's notice woke this stream"
        );
        w.heard(None, "sess-1", 6);
        assert!(s.has_changed().unwrap());
        assert!(!a.has_changed().unwrap());
        w.everything();
        assert!(a.has_changed().unwrap() && b.has_changed().unwrap());
    }

    #[test]
    fn channels_nobody_holds_are_dropped() {
        let w = Wakes::default();
        let a = w.subscribe(WakeScope::Run("run-a"));
        drop(a);
        assert_eq!(w.channels(), 1);
        w.stored("run-a", None, 1);
        assert_eq!(w.channels(), 0, "a wake-up drops the channel nobody holds");
        for i in 0..SWEEP_AT {
            drop(w.subscribe(WakeScope::Session(&format!("s{i}"))));
        }
        let _held = w.subscribe(WakeScope::Session("held"));
        assert_eq!(w.channels(), 1, "a subscription past the limit sweeps");
    }
}
