//! Live runs' mailboxes, kept in memory: a command to a live run goes straight to its control
//! folder, with no store read first (under load, reading the run and its key from the store
//! waited behind the watchers' and the audit log's writes, and made up nearly all of an
//! approval's latency). A run's watcher opens its mailbox before it commits the first
//! permission request anyone could answer, and forgets it when the turn ends.
//!
//! A mailbox kept after its turn ended is harmless: the driver renamed `in/` away, so a command
//! finds the turn over ([`hangar_mailbox::outbox::Delivery::TurnEnded`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use hangar_mailbox::{AckWait, Mailbox, MailboxError, Outcome, Poll, Sent};

/// The mailboxes of live runs, by run id.
#[derive(Default)]
pub(crate) struct Mailboxes(Mutex<HashMap<String, Mailbox>>);

impl fmt::Debug for Mailboxes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.lock().map(|m| m.len()).unwrap_or(0);
        write!(f, "Mailboxes({n} live)")
    }
}

impl Mailboxes {
    pub(crate) fn get(&self, run: &str) -> Option<Mailbox> {
        self.0.lock().ok()?.get(run).cloned()
    }

    pub(crate) fn insert(&self, run: &str, mailbox: Mailbox) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(run.to_owned(), mailbox);
        }
    }

    pub(crate) fn remove(&self, run: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(run);
        }
    }
}

/// Waits for the driver's signed answer to `sent` on the async runtime, on the mailbox's one
/// schedule ([`AckWait`]; the runtime's timer rounds its pauses up to 1 ms), with no blocking
/// thread held per waiting command (200 commands waiting at once kept 200 threads polling).
pub(crate) async fn wait_ack(
    mailbox: &Mailbox,
    sent: &Sent,
    timeout: Duration,
) -> Result<Outcome, MailboxError> {
    let mut wait = AckWait::new(timeout);
    loop {
        match wait.poll(mailbox, sent)? {
            Poll::Answered(outcome) => return Ok(outcome),
            Poll::Again(pause) => tokio::time::sleep(pause).await,
        }
    }
}
