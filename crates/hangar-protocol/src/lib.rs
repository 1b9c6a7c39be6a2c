//! hangar's wire types.
//!
//! This crate is what the control plane (the client) and the driver (in the sandbox) agree on
//! (the file handling of the control folder is hangar-mailbox's):
//!
//! * [`command`]: the command envelope (`prompt`, `steer`, `interrupt`, `approve`, `deny`, `end`),
//!   its canonical byte encoding and its HMAC-SHA256 seal, and the driver-side [`command::Verifier`]
//!   that refuses forged, replayed, malformed and oversized commands.
//! * [`ack`]: the driver's signed answer to each command (`done`, `refused`, `ended`).
//! * [`runlog`]: hangar's own lines in the run log (`"type":"hangar.<what>"`).
//! * [`logseal`]: the seals that prove which bytes of a run log hangar wrote.
//! * [`claude_settings`]: which Claude Code settings a reviewed settings file may hold.
//! * [`words`]: the closed sets of words shared by every part ([`Harness`], [`Policy`],
//!   [`TurnState`], [`RunState`], [`Decision`], [`Provider`], [`NetworkMode`]; the ack's
//!   [`AckStatus`]).
//! * [`env`]: every environment variable hangar reads, and the allow-list passed to a harness.
//!
//! Non-goals: no async runtime, no network, no harness logic, no mailbox file handling (that is
//! hangar-mailbox). The only I/O left is [`atomic`] writes and reading a run log's seals.

pub mod ack;
pub mod atomic;
pub mod claude_settings;
pub mod codex_keys;
pub mod command;
pub mod env;
pub mod hide;
pub mod key;
pub mod logseal;
pub mod runlog;
mod seal;
pub mod short_id;
pub mod words;

pub use ack::{Ack, AckStatus};
pub use command::{Command, Kind, Refusal, Rejected, Verified, Verifier};
pub use key::RunKey;
pub use words::{
    Decision, Harness, NetworkMode, Policy, Provider, RunState, TurnPhase, TurnState, UnknownWord,
};

/// The format version of commands and acks this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// The largest command file the driver reads; anything larger is refused unread.
pub const MAX_COMMAND_BYTES: u64 = 1024 * 1024;

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
