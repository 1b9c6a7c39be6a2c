//! Steps: what a run did, kept so any step can be looked at, compared or forked (S21-S31).
//!
//! The [`Steps`] service owns the exporter of run traces ([`traces`], OpenTelemetry when
//! configured) and reads what the runs left: the run log and its seal ([`logtrust`]), the tree
//! recorded after every step and the diff between two ([`trees`]), and a run's transcript
//! ([`transcript`]). It uses nothing of the other services.

use std::sync::Arc;

use hangar_store::Store;

use crate::launch::Tools;

pub(crate) mod forks;
pub mod logtrust;
pub(crate) mod traces;
pub mod transcript;
pub(crate) mod trees;

/// The steps service (see the module's page).
#[derive(Debug)]
pub struct Steps {
    pub(crate) store: Store,
    pub(crate) tools: Arc<Tools>,
    pub(crate) traces: traces::Traces,
}

impl Steps {
    pub(crate) fn new(store: Store, tools: Arc<Tools>) -> Steps {
        let traces = traces::Traces::from_tools(&tools);
        Steps {
            store,
            tools,
            traces,
        }
    }
}
