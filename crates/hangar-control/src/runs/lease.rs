//! Per-run leases, so that `hangar serve` replicas sharing one PostgreSQL watch each live run
//! one at a time, and a run whose replica died is taken over (S21 across replicas). A watcher
//! claims its run before it starts and renews the claim every third of the lease while it
//! runs; it stops when the claim is lost (another replica took over after a pause longer than
//! the lease). Each replica looks for live runs no one holds every half lease and watches
//! them. Exactly-once holds without the lease too (a slice commits only at the cursor it was
//! read from); the lease keeps two replicas from acting on the same run at once (ending its
//! turn, starting the next).
//!
//! On SQLite (one process) there are no leases: every live run is this process's.
//! `HANGAR_RUN_LEASE_MS` sets the lease (default 5000; 0 turns leases off).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hangar_store::{Backend, Store, now_ms};

use crate::runs::Runs;

/// The default lease.
const DEFAULT_LEASE: Duration = Duration::from_secs(5);

/// The lease for runs watched over `store`: none on SQLite.
pub(crate) fn configured(store: &Store) -> Option<Duration> {
    if store.backend() != Backend::Postgres {
        return None;
    }
    match hangar_protocol::env::var(hangar_protocol::env::HANGAR_RUN_LEASE_MS)
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms.max(300))),
        None => Some(DEFAULT_LEASE),
    }
}

/// Claims (or renews) the run for this replica; true if it holds it. Always true without leases.
pub(crate) async fn claim(plane: &Runs, run_id: &str) -> bool {
    let Some(ttl) = plane.lease else { return true };
    let now = now_ms();
    let until = now + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
    match plane
        .store
        .claim_run(run_id, &plane.replica, now, until)
        .await
    {
        Ok(held) => held,
        Err(e) => {
            tracing::warn!(run = %run_id, error = %e, "cannot renew the run's lease");
            false
        }
    }
}

/// The claim a run is made with, by the replica that places it (none without leases).
pub(crate) fn first_claim(plane: &Runs) -> Option<(String, i64)> {
    let ttl = plane.lease?;
    let until = now_ms().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2));
    Some((plane.replica.clone(), until))
}

/// Renews this replica's claim on a run it is still placing (copying the driver in, starting
/// it), until dropped: a placement can outlast the lease, and another replica that took the run
/// over meanwhile would find no driver yet and end the turn as stopped.
pub(crate) struct Placing(Option<tokio::task::JoinHandle<()>>);

impl Placing {
    pub(crate) fn start(plane: &Arc<Runs>, run_id: &str) -> Placing {
        let Some(ttl) = plane.lease else {
            return Placing(None);
        };
        let (plane, run) = (Arc::clone(plane), run_id.to_owned());
        Placing(Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                claim(&plane, &run).await;
            }
        })))
    }
}

impl Drop for Placing {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.abort();
        }
    }
}

/// A watcher's hold on its run: renewed every third of the lease.
#[derive(Debug)]
pub(crate) struct Hold {
    next: Instant,
    /// Leases are on (several replicas share the database).
    leased: bool,
}

impl Hold {
    /// Just claimed.
    pub(crate) fn new(plane: &Runs) -> Hold {
        Hold {
            next: Instant::now() + plane.lease.unwrap_or_default() / 3,
            leased: plane.lease.is_some(),
        }
    }

    /// How long until the claim must be renewed (none without leases): an idle watcher wakes
    /// by then.
    pub(crate) fn due_in(&self) -> Option<Duration> {
        self.leased
            .then(|| self.next.saturating_duration_since(Instant::now()))
    }

    /// False once the run is no longer this replica's (the watcher stops).
    pub(crate) async fn keep(&mut self, plane: &Runs, run_id: &str) -> bool {
        let Some(ttl) = plane.lease else { return true };
        if Instant::now() < self.next {
            return true;
        }
        self.next = Instant::now() + ttl / 3;
        let held = claim(plane, run_id).await;
        if !held {
            tracing::info!(run = %run_id, "another replica holds the run now; this one stops watching it");
        }
        held
    }
}

/// With leases, looks for live runs no one holds every half lease and watches them (once per
/// control plane).
pub(crate) fn take_over_orphans(plane: &Arc<Runs>) {
    let Some(ttl) = plane.lease else { return };
    if plane.taking_over.swap(true, Ordering::SeqCst) {
        return;
    }
    let me = Arc::clone(plane);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(ttl / 2).await;
            // Relayed terminals whose replica stopped and whose client never came back.
            me.sandboxes.sweep_attaches().await;
            let Ok(runs) = me.store.unclaimed_live_runs(now_ms()).await else {
                continue;
            };
            for run in runs {
                if me.is_watching(&run.id) {
                    continue;
                }
                tracing::info!(run = %run.id, "taking over a run no replica holds");
                crate::metrics::lease_takeover();
                me.governance.resume_passport(&run).await;
                me.watch(run);
            }
        }
    });
}
