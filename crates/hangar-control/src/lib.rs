//! The control plane: sessions, turns and runs on top of the store, the driver and the run log.
//!
//! [`ControlPlane`] is a thin facade over five services, each in its own folder, each owning its
//! own state and seeing only the services below it (a test in hangar-shape fails on an import
//! circle between this crate's modules):
//!
//! * [`runs`]: sessions and turns (a turn planned once, then placed in a folder, a sandbox, a
//!   mirrored remote sandbox or as a one-shot), commands through the signed mailbox, one watcher
//!   per live run (run log to events, S21), leases among replicas, orphans and hand-backs.
//! * [`sandboxes`]: providers, environments, attaches, what a removed sandbox leaves for forks.
//! * [`governance`]: the Tower key file, passports kept fresh, API credentials.
//! * [`steps`]: trees, diffs, traces, run-log trust, transcripts, the forks' records.
//! * [`forks`]: a step rebuilt (and checked) into a new sandbox with its conversation (S31).
//!
//! Below them are plain modules: the launch of the driver (`launch`), the Tower hook's settings
//! (`tower`), the harness conformance check ([`conformance`]) and the errors ([`ControlError`]).
//!
//! Non-goals: no HTTP server (the server crate; the only HTTP here is the passport exchange with
//! Tower).

mod blocking;
pub mod conformance;
mod error;
pub mod forks;
pub mod governance;
mod launch;
pub mod metrics;
mod plane;
pub mod retention;
pub mod runs;
pub mod sandboxes;
pub mod steps;
mod tower;

pub use error::ControlError;
pub use forks::{ForkRequest, Forked, Forks};
pub use governance::{Governance, credentials, jwt, passport};
pub use hangar_sandbox as sandbox;
pub use launch::{Tools, TurnOptions};
pub use plane::ControlPlane;
pub use runs::oneshot::HANGAR_LIVE_TURNS;
pub use runs::wakes::WakeScope;
pub use runs::watch::stored_event;
pub use runs::{Reply, Runs, SessionRequest, Started};
pub use sandboxes::envs::EnvView;
pub use sandboxes::folders::ALLOW as UNSANDBOXED_FOLDERS_ALLOW;
pub use sandboxes::{Attach, IN_PLACE_ENV, SandboxView, Sandboxes, attaches};
pub use steps::forks::{Conversation, ForkCapability, ForkRecord, fork_capability};
pub use steps::trees::{FileChange, Step, TreeDiff, run_log_path};
pub use steps::{Steps, logtrust, transcript};
