//! How far a turn's handed-back messages (S19) are carried. A harness that ends before it
//! begins anything (a broken install, a model server that refuses every request) hands its own
//! prompt back at every turn; carried without a limit, that starts turns without end, each one
//! a driver and a harness started for nothing (and, with a real model, paid for). A turn's own
//! whole prompt handed back is carried once; if the turn that carried it hands it back whole
//! again, it is not carried a second time: the person is told, in the audit log and as a
//! session event, and sends it again when the harness works.

use hangar_events::{EventKind, ProgressEvent};
use hangar_store::{NewEvent, Store, StoreError};
use serde_json::json;

/// Whether the messages `texts`, handed back by run `run` of turn `turn_id`, were already
/// carried once and came back unbegun: `turn_id` handed back its whole prompt, and the turn
/// before it did the same with the same prompt.
pub(crate) async fn exhausted(
    store: &Store,
    turn_id: &str,
    texts: &[String],
) -> Result<bool, StoreError> {
    let turn = store.turn(turn_id).await?;
    if turn.prompt != texts.join("\n\n") || turn.index == 0 {
        return Ok(false);
    }
    let turns = store.turns(&turn.session_id).await?;
    let Some(before) = turns.iter().find(|t| t.index == turn.index - 1) else {
        return Ok(false);
    };
    // The turn before ended without success on the same prompt: this turn was its retry (or a
    // person sent the same words again to a harness that had just failed on them).
    Ok(before.prompt == turn.prompt && before.status.is_some_and(|s| s != 0))
}

/// Records that `texts` are not carried again: an audit record and a session event saying what
/// to do.
pub(crate) async fn stop(store: &Store, session: &str, run: &str, person: &str, texts: &[String]) {
    let message = format!(
        "the harness ended twice before it began {} (the turn's whole prompt, handed back and carried once to a next turn); {} not sent again: see the turns' errors (`hangar turn show TURN`), fix the harness, then send {} again",
        if texts.len() == 1 {
            "its message"
        } else {
            "its messages"
        },
        if texts.len() == 1 {
            "it is"
        } else {
            "they are"
        },
        if texts.len() == 1 { "it" } else { "them" },
    );
    tracing::warn!(run, "{message}");
    if let Err(e) = store
        .audit()
        .append(
            person,
            "turn.handback_stopped",
            &json!({"run": run, "messages": texts.len()}),
        )
        .await
    {
        tracing::warn!(run, error = %e, "cannot record the stopped hand-back in the audit log");
    }
    // A session event, not one of the run's: the run's events stay exactly what its log says.
    let payload = serde_json::to_value(ProgressEvent {
        offset: 0,
        kind: EventKind::Warning { message },
    })
    .unwrap_or_default();
    let event = NewEvent {
        kind: "warning".to_owned(),
        payload,
    };
    if let Err(e) = store.append_event(session, None, &event).await {
        tracing::warn!(run, error = %e, "cannot record the stopped hand-back as an event");
    }
}
