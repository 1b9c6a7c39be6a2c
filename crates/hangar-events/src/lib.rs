//! The control plane's pure logic for reading run logs.
//!
//! * [`events`]: one run-log line → progress events ([`parse_line`]), the same for Claude Code
//!   and Codex.
//! * [`watcher`]: reading a growing run log from a saved byte cursor, complete lines only
//!   ([`LogReader`]), [`ingest`] (read + parse) and [`rebuild`] (all events from offset 0).
//! * [`transcript`]: the conversation of a session from its events ([`conversation`]).
//! * [`interrupt`]: an interrupt's report in words, the same in the CLI and the API.
//! * [`manifest`]: a turn's manifest and its `harness_digest` ([`harness_digest`]), and
//!   [`file_digest`].
//!
//! Non-goals: no async runtime, no database, no HTTP. The only I/O is reading files (the run
//! log, files to digest); persisting events and cursors is the store's job.

pub mod error;
pub mod events;
pub mod interrupt;
pub mod manifest;
pub mod transcript;
pub mod watcher;

pub use error::CoreError;
pub use events::{
    EventKind, LogMode, ParseContext, ProgressEvent, parse_line, parse_line_via_value,
};
pub use manifest::{Hook, Manifest, RulesRecord, file_digest, harness_digest};
pub use transcript::{Entry, SentRecord, conversation, fill_sent};
pub use watcher::{Batch, LogReader, SealedRead, ingest, rebuild, rebuild_with};
