//! A session's conversation as a person reads it: its stored events, run by run (turns run one
//! after another), each run's conversation with the texts and senders of its prompts and steers
//! taken from the run's recorded commands (the run log does not hold them).

use hangar_events::{Entry, ProgressEvent};
use hangar_store::{EventScope, MAX_PAGE, Store};
use serde_json::Value;

use crate::error::ControlError;

/// The conversation of `session`, oldest first.
pub async fn transcript(store: &Store, session: &str) -> Result<Vec<Entry>, ControlError> {
    let mut runs: Vec<(Option<String>, Vec<ProgressEvent>)> = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .events_after(EventScope::Session(session), after, MAX_PAGE)
            .await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for e in page {
            // An event this version does not read is left out of the conversation.
            let Ok(ev) = serde_json::from_value::<ProgressEvent>(e.payload) else {
                continue;
            };
            match runs.last_mut() {
                Some((run, evs)) if *run == e.run_id => evs.push(ev),
                _ => runs.push((e.run_id, vec![ev])),
            }
        }
    }
    let mut entries = Vec::new();
    for (run, events) in runs {
        let mut conv = hangar_events::conversation(&events);
        if let Some(run) = run {
            let commands = store.commands(&run).await?;
            hangar_events::fill_sent(&mut conv, |seq| {
                commands
                    .iter()
                    .find(|c| u64::try_from(c.seq).ok() == Some(seq))
                    .map(|c| hangar_events::SentRecord {
                        text: c
                            .body
                            .get("text")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        by: c.sent_by.clone(),
                        at: c.sent_at,
                    })
            });
        }
        entries.extend(conv);
    }
    Ok(entries)
}
