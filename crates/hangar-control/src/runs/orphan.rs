//! A run whose driver stopped without ending its turn (killed, or the machine's OOM killer):
//! the control plane does what the driver would have done at the end (S18, S19). It renames
//! `in/` away, so a command sent from now on is told at once that the turn has ended (and a
//! message then starts the next turn); it answers every command still waiting there `ended`
//! with an ack signed with the run's key (the sender waiting for it is told the message is
//! handed back), and returns the messages among them for the next turn. Commands the store
//! holds with no answer (the driver read them and stopped, or their sender's answer was
//! never recorded) are recorded as not landed, so none stays unanswered, and its pending
//! permission requests are settled (denied by `hangar`, saying the driver stopped).
//!
//! Found by `scripts/chaos`: before, a message sent after the driver was killed landed in an
//! `in/` nobody read, its sender waited 30 s for an ack, and the message was lost.

use hangar_mailbox::Inbox;
use hangar_protocol::Verifier;
use hangar_store::{AckStatus, Decision};

use crate::runs::Runs;

/// The reason recorded for a command the driver never answered.
pub const NOT_LANDED: &str = "not landed: no answer from the driver before the turn ended";

/// Closes the orphaned run's `in/`, answers what waited there, and records the commands left
/// unanswered; the sequence numbers of the messages handed back, in order.
pub(crate) async fn close(plane: &Runs, run_id: &str) -> Vec<u64> {
    let mut handed_back = Vec::new();
    if let Ok(mailbox) = plane.mailbox(run_id).await {
        let (ctl, key, run) = (
            mailbox.ctl().clone(),
            mailbox.key().clone(),
            run_id.to_owned(),
        );
        handed_back = tokio::task::spawn_blocking(move || {
            // No in/ (the driver closed it after all) or one that is not a real folder: nothing
            // is taken from it.
            let Ok(mut inbox) = Inbox::open(ctl, Verifier::new(&run, key)) else {
                return Vec::new();
            };
            inbox
                .end_as(&(), "in.ended-hangar", &|_| false)
                .unwrap_or_default()
        })
        .await
        .unwrap_or_default();
    }
    settle_commands(plane, run_id, &handed_back).await;
    // Its permission requests can no longer be answered: settled, saying why.
    if let Ok(pending) = plane.store.pending_approvals(run_id).await {
        for a in pending {
            let _ = plane
                .store
                .answer_approval(
                    run_id,
                    &a.request_id,
                    Decision::Deny,
                    "hangar",
                    Some("the driver stopped before it was answered"),
                )
                .await;
        }
    }
    handed_back
}

/// At a turn's end, after its last slice is stored (so every answer in the log is recorded):
/// a command with no answer never reached the driver (its sender recorded it, then was
/// stopped before it landed) or reached a driver that stopped; it is recorded as not landed,
/// `handed_back` ones as ended.
pub(crate) async fn settle_commands(plane: &Runs, run_id: &str, handed_back: &[u64]) {
    if let Ok(commands) = plane.store.commands(run_id).await {
        for c in commands.iter().filter(|c| c.ack.is_none()) {
            let seq = u64::try_from(c.seq).unwrap_or(0);
            if handed_back.contains(&seq) {
                let _ = plane
                    .store
                    .record_ack(
                        run_id,
                        c.seq,
                        AckStatus::Ended,
                        Some(hangar_mailbox::inbox::ENDED),
                    )
                    .await;
            } else {
                let _ = plane
                    .store
                    .record_ack(run_id, c.seq, AckStatus::Ended, Some(NOT_LANDED))
                    .await;
            }
        }
    }
}
