//! Runs: how a turn becomes a running driver, and what watches it until it ends.
//!
//! The [`Runs`] service owns the live runs of this process: the mailboxes kept open, the
//! watchers (one per live run, among replicas the holder of its lease), the one-shot turns and
//! the notice of newly stored events. A session's turn is first made and validated into a
//! [`plan::TurnPlan`] (its records, its mailbox with the prompts in it, and where it will run),
//! then placed through one [`place::Placement`], with a module per placement: a plain folder, a
//! sandbox this machine sees, a remote sandbox whose control folder is mirrored ([`remote`]), or
//! a one-shot turn with no driver ([`oneshot`]). Whatever refuses the turn after its records
//! exist refuses it once, in [`Runs::start_turn`], audited. The watcher ([`watch`]) turns the run
//! log into events, hands back what the harness left ([`handback`]) and closes an orphaned
//! run's mailbox ([`orphan`]).
//!
//! It uses the sandboxes (to make and work sandboxes), governance (Tower keys and passports)
//! and steps (trees and traces); nothing below it uses it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_store::{Run, Store};

use crate::error::ControlError;
use crate::governance::Governance;
use crate::launch::Tools;
use crate::sandboxes::Sandboxes;
use crate::steps::Steps;

pub(crate) mod commands;
mod handback;
pub(crate) mod lease;
pub(crate) mod live;
mod log_mode;
pub(crate) mod logbell;
pub(crate) mod oneshot;
mod oneshot_secrets;
mod orphan;
pub(crate) mod place;
pub(crate) mod plan;
pub(crate) mod remote;
pub(crate) mod sandbox_turn;
mod session;
pub(crate) mod turn_secrets;
pub(crate) mod wakes;
pub(crate) mod watch;

pub use commands::Reply;
pub use session::{SessionRequest, Started};

/// The runs service (see the module's page).
#[derive(Debug)]
pub struct Runs {
    pub(crate) store: Store,
    pub(crate) tools: Arc<Tools>,
    pub(crate) sandboxes: Arc<Sandboxes>,
    pub(crate) governance: Arc<Governance>,
    pub(crate) steps: Arc<Steps>,
    pub(crate) poll: Duration,
    /// What wakes live event streams.
    pub(crate) wakes: wakes::Wakes,
    watching: Mutex<HashSet<String>>,
    pub(crate) mailboxes: live::Mailboxes,
    /// The one-shot turns running in this process (nothing reads their mailbox).
    pub(crate) one_shots: Mutex<HashSet<String>>,
    /// This process among replicas sharing the database (the holder of its runs' leases).
    pub(crate) replica: String,
    /// How long a claim on a run holds (`lease`); none on SQLite.
    pub(crate) lease: Option<Duration>,
    /// The takeover of runs no replica holds has started.
    pub(crate) taking_over: std::sync::atomic::AtomicBool,
    /// Listening for other replicas' events was started (`wakes::listen`).
    pub(crate) listening: std::sync::atomic::AtomicBool,
    /// Other replicas' events are heard now: streams need not read again on a timer.
    pub(crate) hears_replicas: std::sync::atomic::AtomicBool,
    /// Told when this control plane is dropped: the listener closes its connection.
    pub(crate) stop_listening: Arc<tokio::sync::Notify>,
    /// What wakes an idle watcher: its log changing.
    pub(crate) log_bells: logbell::LogBells,
}

impl Drop for Runs {
    fn drop(&mut self) {
        // A permit if the listener is not waiting at this moment: it stops at its next wait.
        self.stop_listening.notify_one();
    }
}

impl Runs {
    pub(crate) fn new(
        store: Store,
        tools: Arc<Tools>,
        sandboxes: Arc<Sandboxes>,
        governance: Arc<Governance>,
        steps: Arc<Steps>,
    ) -> Runs {
        let lease = lease::configured(&store);
        let replica = sandboxes.attaches.replica.clone();
        Runs {
            store,
            tools,
            sandboxes,
            governance,
            steps,
            poll: Duration::from_millis(100),
            wakes: wakes::Wakes::default(),
            watching: Mutex::new(HashSet::new()),
            mailboxes: Default::default(),
            one_shots: Mutex::new(HashSet::new()),
            replica,
            lease,
            taking_over: Default::default(),
            listening: Default::default(),
            hears_replicas: Default::default(),
            stop_listening: Arc::default(),
            log_bells: Default::default(),
        }
    }

    /// A receiver that changes when events of `scope` are stored (its value: the newest id).
    pub(crate) fn subscribe(
        &self,
        scope: wakes::WakeScope<'_>,
    ) -> tokio::sync::watch::Receiver<i64> {
        self.wakes.subscribe(scope)
    }

    /// Events of `run` (of `session`, when known) up to id `newest` were stored.
    pub(crate) fn events_stored(&self, run: &str, session: Option<&str>, newest: i64) {
        self.wakes.stored(run, session, newest);
    }

    /// Starts a watcher for every live run (after a restart). Returns how many.
    pub(crate) async fn reattach(self: &Arc<Self>) -> Result<usize, ControlError> {
        let runs = self.store.live_runs().await?;
        let n = runs.len();
        for run in runs {
            self.governance.resume_passport(&run).await;
            self.watch(run);
        }
        // Replicas: runs whose replica died are taken over once their lease runs out, and
        // what the others store wakes the streams here.
        crate::runs::lease::take_over_orphans(self);
        wakes::listen(self);
        Ok(n)
    }

    /// Whether this process watches the run.
    pub(crate) fn is_watching(&self, run_id: &str) -> bool {
        self.watching
            .lock()
            .map(|w| w.contains(run_id))
            .unwrap_or(false)
    }

    /// Starts watching a run unless a watcher already does.
    pub(crate) fn watch(self: &Arc<Self>, run: Run) {
        let fresh = self
            .watching
            .lock()
            .map(|mut w| w.insert(run.id.clone()))
            .unwrap_or(false);
        if fresh {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                let id = run.id.clone();
                // Among replicas, the one that holds the run's lease watches it.
                if crate::runs::lease::claim(&me, &id).await {
                    crate::metrics::live_runs(1.0);
                    crate::runs::watch::run_watcher(Arc::clone(&me), run).await;
                    crate::metrics::live_runs(-1.0);
                }
                if let Ok(mut w) = me.watching.lock() {
                    w.remove(&id);
                }
            });
        }
    }
}
