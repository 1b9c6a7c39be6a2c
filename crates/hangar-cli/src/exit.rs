//! The one table from error kinds to exit codes, and how errors are shown.

use std::process::ExitCode;

/// Exit codes of the `hangar` command (besides a turn's own status from `hangar run`).
pub mod code {
    /// The command was refused by the driver.
    pub const REFUSED: u8 = 1;
    /// Bad usage (clap uses 2 as well).
    pub const USAGE: u8 = 2;
    /// The turn has ended; the command was not carried out (and was handed back).
    pub const ENDED: u8 = 3;
    /// No answer, no such run, no server, or an I/O failure.
    pub const FAILED: u8 = 4;
}

/// An error the person sees: what went wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("the turn has ended{0}")]
    Ended(String),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CliError::Refused(_) => code::REFUSED,
            CliError::Usage(_) => code::USAGE,
            CliError::Ended(_) => code::ENDED,
            CliError::Failed(_) => code::FAILED,
        })
    }
}

#[expect(clippy::print_stderr, reason = "the CLI reports errors on stderr")]
pub fn report(e: &CliError) {
    eprintln!("hangar: {e}");
}
