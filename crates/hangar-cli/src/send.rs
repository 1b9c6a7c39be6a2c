//! Commands that send: `steer`, `interrupt`, `approve`, `deny`. Each exits 0 only when the
//! driver's signed ack says `done`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use hangar_protocol::Kind;
use hangar_protocol::client::{Mailbox, Outcome};
use hangar_protocol::command::body;
use serde_json::Value;

use crate::exit::CliError;
use crate::progress;

/// How long to wait for the driver's answer.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

fn send(home: &Path, run: &str, kind: Kind, b: Value) -> Result<ExitCode, CliError> {
    let mailbox = Mailbox::open(home, run)?;
    match mailbox.request(kind, b, ACK_TIMEOUT)? {
        Outcome::Done => {
            progress::say("done");
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Refused(reason) => Err(CliError::Refused(reason)),
        Outcome::Ended { handed_back } => Err(CliError::Ended(match handed_back.text() {
            Some(text) => {
                format!("; this message was not delivered (start the next turn with it): {text}")
            }
            None => String::new(),
        })),
    }
}

pub fn steer(home: &Path, run: &str, text: &str) -> Result<ExitCode, CliError> {
    send(home, run, Kind::Steer, body::text(text))
}

pub fn interrupt(home: &Path, run: &str) -> Result<ExitCode, CliError> {
    send(home, run, Kind::Interrupt, body::empty())
}

pub fn approve(
    home: &Path,
    run: &str,
    request_id: &str,
    input: Option<&str>,
) -> Result<ExitCode, CliError> {
    let updated = match input {
        None => None,
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => return Err(CliError::Usage("--input must be a JSON object".into())),
        },
    };
    send(home, run, Kind::Approve, body::approve(request_id, updated))
}

pub fn deny(
    home: &Path,
    run: &str,
    request_id: &str,
    reason: Option<&str>,
) -> Result<ExitCode, CliError> {
    send(home, run, Kind::Deny, body::deny(request_id, reason))
}

/// `hangar run`'s Ctrl-C: send an interrupt and say what came of it, without failing the run.
pub fn interrupt_quietly(mailbox: &Mailbox) {
    match mailbox.request(Kind::Interrupt, body::empty(), ACK_TIMEOUT) {
        Ok(Outcome::Done) => {}
        Ok(Outcome::Refused(reason)) => progress::say(&format!("interrupt refused: {reason}")),
        Ok(Outcome::Ended { .. }) => progress::say("the turn had already ended"),
        Err(e) => progress::say(&format!("could not interrupt: {e}")),
    }
}
