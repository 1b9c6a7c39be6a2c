//! Live runs' mailboxes, kept in memory: a command to a live run goes straight to its control
//! folder, with no store read first (under load, reading the run and its key from the store
//! waited behind the watchers' and the audit log's writes, and made up nearly all of an
//! approval's latency). A run's watcher opens its mailbox before it commits the first
//! permission request anyone could answer, and forgets it when the turn ends.
//!
//! A mailbox kept after its turn ended is harmless: the driver renamed `in/` away, so a command
//! finds the turn over ([`hangar_protocol::client::Delivery::TurnEnded`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hangar_protocol::client::{Mailbox, MailboxError, Outcome, Sent};

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

/// Waits for the driver's signed answer to `sent` on the async runtime: one small read per
/// pause (1 ms, doubling to 8 ms), and no blocking thread held per waiting command (200
/// commands waiting at once kept 200 threads polling every 250 us).
pub(crate) async fn wait_ack(
    mailbox: &Mailbox,
    sent: &Sent,
    timeout: Duration,
) -> Result<Outcome, MailboxError> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(outcome) = mailbox.poll_ack(sent) {
            return Ok(outcome);
        }
        if Instant::now() >= deadline {
            return Err(MailboxError::Timeout(timeout));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(8));
    }
}
