//! The control plane: sessions, turns and runs on top of the store, the driver and the run log.
//!
//! * [`ControlPlane::start_session`] makes a sandbox (the environment's, else the in-place local
//!   one on the folder; a plain folder only where the server allows it), a session and its
//!   first turn; each turn is one run of the driver, started detached so a restart of the control
//!   plane never touches it. The run key lives only in the vault (and, until the driver takes it,
//!   in the run's control folder).
//! * A watcher per live run reads the run log from the saved cursor, turns complete lines into
//!   events and commits events, cursor and parser state in one transaction (S21); after a restart
//!   [`ControlPlane::reattach`] resumes every live run from where its cursor is.
//! * Commands (`steer`, `interrupt`, `approve`, `deny`) go through the signed mailbox, recorded
//!   and audited with the person who sent them; a live run's mailbox is kept in memory, so a
//!   command reads nothing from the store before it is delivered. A message that finds the turn ended starts the
//!   next turn (S19), as do messages the driver handed back.
//! * A run's steps are its trees; [`ControlPlane::fork`] rebuilds one into a new sandbox,
//!   checks it, and makes a session whose conversation is the source's up to that step (S31).
//! * Policy `governed` gives each run a key file for Tower: the coding agent's key, or a passport
//!   (`passport`: minted, exchanged at Tower, checked and kept fresh while the run lives).
//!
//! Non-goals: no HTTP server (the server crate; the only HTTP here is the passport exchange with
//! Tower), no sandbox providers yet (local folders only).

pub mod attaches;
pub mod conformance;
pub mod credentials;
mod envs;
mod error;
mod folders;
mod fork;
mod handback;
mod image_cli;
pub mod jwt;
mod launch;
mod lease;
mod live;
pub mod logtrust;
mod oneshot;
mod orphan;
pub mod passport;
mod plane;
mod remote;
mod runs;
mod sandbox_turn;
mod sandboxes;
mod traces;
pub mod transcript;
mod trees;
mod watch;

pub use envs::EnvView;
pub use error::ControlError;
pub use folders::ALLOW as UNSANDBOXED_FOLDERS_ALLOW;
pub use fork::{Conversation, ForkCapability, ForkRecord, ForkRequest, Forked, fork_capability};
pub use hangar_sandbox as sandbox;
pub use launch::{Tools, TurnOptions};
pub use oneshot::HANGAR_LIVE_TURNS;
pub use plane::{ControlPlane, Reply, SessionRequest, Started};
pub use sandboxes::{Attach, IN_PLACE_ENV, SandboxView};
pub use trees::{FileChange, Step, TreeDiff, run_log_path};
pub use watch::stored_event;
