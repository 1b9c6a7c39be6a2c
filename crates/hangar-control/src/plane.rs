//! The control plane: a thin facade over its services, made once per process.
//!
//! Each service owns its own state and sees only the services below it:
//!
//! ```text
//!   forks ──► runs ──► governance ──► sandboxes
//!     │        │                          ▲
//!     │        └──────► steps             │
//!     └───────────────────┴───────────────┘
//! ```
//!
//! The server and the CLI reach a service through its accessor ([`ControlPlane::runs`] and so
//! on); what spans services (reattaching after a restart) is here.

use std::sync::Arc;

use hangar_store::Store;
use tokio::sync::watch;

use crate::error::ControlError;
use crate::forks::Forks;
use crate::governance::Governance;
use crate::launch::Tools;
use crate::runs::Runs;
use crate::runs::wakes::WakeScope;
use crate::sandboxes::Sandboxes;
use crate::steps::Steps;

/// The control plane.
#[derive(Debug)]
pub struct ControlPlane {
    store: Store,
    sandboxes: Arc<Sandboxes>,
    governance: Arc<Governance>,
    steps: Arc<Steps>,
    runs: Arc<Runs>,
    forks: Forks,
}

impl ControlPlane {
    /// A control plane over `store` (which must have its vault attached).
    pub fn new(store: Store, tools: Tools) -> Arc<ControlPlane> {
        let tools = Arc::new(tools);
        let replica = hangar_store::new_id("replica")
            .unwrap_or_else(|_| format!("replica-{}", std::process::id()));
        let sandboxes = Arc::new(Sandboxes::new(
            store.clone(),
            Arc::clone(&tools),
            replica,
            crate::runs::lease::configured(&store),
        ));
        let governance = Arc::new(Governance::new(
            store.clone(),
            Arc::clone(&tools),
            Arc::clone(&sandboxes),
        ));
        let steps = Arc::new(Steps::new(store.clone(), Arc::clone(&tools)));
        let runs = Arc::new(Runs::new(
            store.clone(),
            Arc::clone(&tools),
            Arc::clone(&sandboxes),
            Arc::clone(&governance),
            Arc::clone(&steps),
        ));
        let forks = Forks {
            store: store.clone(),
            tools,
            runs: Arc::clone(&runs),
            sandboxes: Arc::clone(&sandboxes),
            steps: Arc::clone(&steps),
        };
        Arc::new(ControlPlane {
            store,
            sandboxes,
            governance,
            steps,
            runs,
            forks,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Sessions, turns, commands and the runs' watchers.
    pub fn runs(&self) -> &Arc<Runs> {
        &self.runs
    }

    /// Sandboxes, environments and attaches.
    pub fn sandboxes(&self) -> &Sandboxes {
        &self.sandboxes
    }

    /// Tower keys and passports.
    pub fn governance(&self) -> &Governance {
        &self.governance
    }

    /// Steps, diffs, traces, run logs and the forks' records.
    pub fn steps(&self) -> &Steps {
        &self.steps
    }

    /// Making forks.
    pub fn forks(&self) -> &Forks {
        &self.forks
    }

    /// A receiver that changes whenever events are stored (its value: the newest event id).
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.runs.subscribe(WakeScope::All)
    }

    /// A receiver that changes when events of `scope` (a run's, a session's) are stored: what
    /// wakes a live stream of one run without waking it for every other run's.
    pub fn subscribe_to(&self, scope: WakeScope<'_>) -> watch::Receiver<i64> {
        self.runs.subscribe(scope)
    }

    /// Whether other replicas' stored events wake the streams here (PostgreSQL, listening since
    /// `reattach`): if not, a stream must read the store again on a timer to see them.
    pub fn hears_replicas(&self) -> bool {
        self.runs
            .hears_replicas
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts a watcher for every live run (after a restart), and on PostgreSQL listening for
    /// the events other replicas store. Returns how many runs.
    pub async fn reattach(&self) -> Result<usize, ControlError> {
        self.runs.reattach().await
    }

    /// Records where the other replicas reach this one (`url`), so that a command for a run
    /// this replica watches, sent through another that shares no disk with it, is passed on
    /// here. Only with leases (PostgreSQL): on SQLite there is one process.
    pub async fn advertise(&self, url: &str) -> Result<(), ControlError> {
        if self.runs.lease.is_none() {
            return Ok(());
        }
        self.runs
            .store
            .register_replica(&self.runs.replica, url, hangar_store::now_ms())
            .await?;
        Ok(())
    }
}
