//! The one error type of the test kit.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while starting a fake server, loading a scenario or finding a CLI.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// An I/O operation failed; `context` says which one.
    #[error("{context}: {source}")]
    Io {
        /// What the kit was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A scenario file or string is not valid JSON or does not map onto steps.
    #[error("invalid scenario: {0}")]
    Scenario(String),
    /// `wait_for_*` gave up.
    #[error("timed out after {waited:?} waiting for {wanted} {what} (got {got})")]
    Timeout {
        /// What was awaited, e.g. "model requests".
        what: &'static str,
        /// How many were wanted.
        wanted: usize,
        /// How many there were at the deadline.
        got: usize,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// The pinned harness CLI is not installed where the kit looks for it.
    #[error("{what} not found at {path}: {hint}")]
    ToolNotFound {
        /// Which tool, e.g. "Claude Code".
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// How to install it.
        hint: &'static str,
    },
    /// The test browser (chromedriver, Chromium or a WebDriver command) failed; says what.
    #[error("browser: {0}")]
    Browser(String),
}

impl TestkitError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
