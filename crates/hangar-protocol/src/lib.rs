//! hangar's wire types and the command mailbox.
//!
//! This crate is what the control plane (the client) and the driver (in the sandbox) agree on:
//!
//! * [`ctl`]: the layout of a run's control folder, `$HANGAR_HOME/runs/<run>.ctl/`.
//! * [`command`]: the command envelope (`prompt`, `steer`, `interrupt`, `approve`, `deny`, `end`),
//!   its canonical byte encoding and its HMAC-SHA256 seal, and the driver-side [`command::Verifier`]
//!   that refuses forged, replayed, malformed and oversized commands.
//! * [`ack`]: the driver's signed answer to each command (`done`, `refused`, `ended`).
//! * [`runlog`]: hangar's own lines in the run log (`"type":"hangar.<what>"`).
//! * [`logseal`]: the seals that prove which bytes of a run log hangar wrote.
//! * [`client`]: the client side of the mailbox (stage, rename into `in/`, wait for the signed ack).
//! * [`claude_settings`]: which Claude Code settings a reviewed settings file may hold.
//! * [`env`]: every environment variable hangar reads, and the allow-list passed to a harness.
//!
//! Non-goals: no async runtime, no network, no harness logic. The only I/O is the plain file
//! handling of the mailbox, which both sides need to agree on byte for byte.

pub mod ack;
pub mod atomic;
pub mod claude_settings;
pub mod client;
pub mod command;
pub mod ctl;
pub mod env;
pub mod key;
pub mod logseal;
pub mod runlog;
mod seal;

pub use ack::{Ack, AckStatus};
pub use command::{Command, Kind, Refusal, Rejected, Verified, Verifier};
pub use ctl::ControlDir;
pub use key::RunKey;

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
