//! hangar's own log (not a run's): tracing events to stderr, for `hangar serve` and for the
//! server `hangar run` and other commands embed when no server answers, so a person sees that
//! server's warnings too.
//!
//! Which events: `HANGAR_LOG`, else `RUST_LOG` (tracing's `EnvFilter` syntax), else a level
//! from `-v`: `hangar serve` logs `info` and up (its access log included), every other command
//! `warn` and up; each `-v` adds one level. How: `--log-format text|json` (`HANGAR_LOG_FORMAT`);
//! text is coloured only on a terminal and never with `NO_COLOR` set.

use std::io::IsTerminal;

use hangar_protocol::env::{HANGAR_LOG, HANGAR_LOG_FORMAT};
use tracing_subscriber::EnvFilter;

use crate::exit::CliError;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The filter when no variable sets one: `serve` starts at `info`, other commands at `warn`.
pub fn default_filter(serving: bool, verbose: u8) -> &'static str {
    const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];
    let start = if serving { 2 } else { 1 };
    LEVELS[(start + usize::from(verbose)).min(LEVELS.len() - 1)]
}

/// Installs the process's log. A bad filter or format is a usage error, said before anything
/// runs.
pub fn init(serving: bool, verbose: u8, format: Option<Format>) -> Result<(), CliError> {
    let filter = match hangar_protocol::env::var(HANGAR_LOG)
        .or_else(|| std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()))
    {
        Some(spec) => EnvFilter::try_new(&spec)
            .map_err(|e| CliError::Usage(format!("log filter {spec:?}: {e}")))?,
        None => EnvFilter::new(default_filter(serving, verbose)),
    };
    let format = match format {
        Some(f) => f,
        None => match hangar_protocol::env::var(HANGAR_LOG_FORMAT).as_deref() {
            None | Some("text") => Format::Text,
            Some("json") => Format::Json,
            Some(other) => {
                return Err(CliError::Usage(format!(
                    "{HANGAR_LOG_FORMAT}={other:?}: use text or json"
                )));
            }
        },
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        Format::Json => builder.json().flatten_event(true).try_init(),
        Format::Text => builder.with_ansi(colour()).try_init(),
    };
    Ok(())
}

/// Colour on stderr: a terminal, and `NO_COLOR` unset or empty.
fn colour() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_logs_more_than_other_commands_and_each_v_adds_a_level() {
        assert_eq!(default_filter(true, 0), "info");
        assert_eq!(default_filter(false, 0), "warn");
        assert_eq!(default_filter(false, 1), "info");
        assert_eq!(default_filter(true, 2), "trace");
        assert_eq!(default_filter(true, 9), "trace");
    }
}
