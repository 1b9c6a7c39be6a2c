//! Checks shared by the real-log tests: event kinds, and the property that incremental
//! ingestion adds up to `rebuild`.
#![allow(dead_code, clippy::unwrap_used, clippy::panic, reason = "test helpers")]

use std::path::Path;

use hangar_events::{EventKind, LogReader, ParseContext, ProgressEvent, rebuild};
use pretty_assertions::assert_eq;

/// The `kind` tag of each event.
/// The kinds of the events in order, without `session` (whose place relative to the prompt's
/// ack is a race in Codex's start-up; tests check it with [`has_session`]) and without `tree`
/// (the driver hashes on a thread of its own, so the start tree's place is a race too; the
/// driver's own tests check the tree lines).
/// The text the model streamed (`text_delta` events, not thinking), joined.
pub fn streamed_text(events: &[ProgressEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            hangar_events::EventKind::TextDelta {
                text,
                thinking: false,
                ..
            } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The events' kinds, without the harness's session, the trees and the streamed pieces of
/// text (how many pieces a message comes in is the model's business; [`streamed_text`]).
pub fn kinds(events: &[ProgressEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            !matches!(
                e.kind,
                hangar_events::EventKind::Session { .. }
                    | hangar_events::EventKind::Tree { .. }
                    | hangar_events::EventKind::TextDelta { .. }
            )
        })
        .map(|e| {
            serde_json::to_value(e).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// `want` appears in `have` in order (other kinds may come between).
pub fn assert_subsequence(have: &[String], want: &[&str]) {
    let mut it = have.iter();
    for w in want {
        assert!(it.any(|h| h == w), "{want:?} is not in order in {have:?}");
    }
}

/// Parses the log, checks it against incremental ingestion, and checks that every line parsed
/// (no warning of the parser's own: only the driver's `hangar.warning`s, listed in `allowed`).
pub fn events_of(path: &Path, allowed_warnings: usize) -> Vec<ProgressEvent> {
    let events = rebuild(path);
    assert!(!events.is_empty(), "no events from {}", path.display());
    let warnings: Vec<&ProgressEvent> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Warning { .. }))
        .collect();
    assert_eq!(warnings.len(), allowed_warnings, "{warnings:#?}");
    // `EventKind::name` (what the watcher stores as the kind) is the serialized tag.
    for e in &events {
        assert_eq!(
            serde_json::to_value(e).unwrap()["kind"].as_str(),
            Some(e.kind.name()),
            "{e:?}"
        );
    }
    assert_increments_match_rebuild(path, &events);
    assert_sealed_read_takes_every_line(path, &events);
    events
}

/// Read as the control plane reads a sealed log (with the run's seal key, from the client's
/// copy of the run key beside the control folder), the driver's log gives exactly the same
/// events: every line it wrote is sealed, and the seal lines make none.
pub fn assert_sealed_read_takes_every_line(path: &Path, want: &[ProgressEvent]) {
    let ctl = path.parent().unwrap();
    let name = ctl.file_name().unwrap().to_str().unwrap();
    let run = name.strip_suffix(".ctl").unwrap();
    let key_file = ctl.with_file_name(format!("{run}.client")).join("key");
    let key = hangar_protocol::RunKey::read_file(&key_file).unwrap();
    let reader = LogReader::new().sealed(hangar_protocol::logseal::SealKey::derive(&key), run);
    let mode = Some(hangar_events::LogMode {
        sealed: true,
        trusted: true,
        why: None,
    });
    assert_eq!(hangar_events::rebuild_with(path, &reader, mode), want);
}

/// Property: copying the log into a new file in random-size pieces (splitting lines anywhere)
/// and ingesting after random pieces with random budgets, resuming from each returned cursor,
/// gives exactly `rebuild`'s events: nothing lost, nothing twice. Seeded, so a failure names
/// its seed and repeats. Every few calls the context goes through serde, as a store that
/// persists it with the cursor and restarts would see it.
pub fn assert_increments_match_rebuild(path: &Path, want: &[ProgressEvent]) {
    let bytes = std::fs::read(path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..24u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let copy = dir.path().join(format!("copy-{seed}.log"));
        let reader = LogReader::new();
        let mut ctx = ParseContext::new();
        let (mut cursor, mut got, mut written) = (0u64, Vec::new(), 0usize);
        let mut ingest =
            |cursor: &mut u64, got: &mut Vec<ProgressEvent>, rng: &mut fastrand::Rng| {
                if rng.u8(0..4) == 0 {
                    let saved = serde_json::to_string(&ctx).unwrap();
                    ctx = serde_json::from_str(&saved).unwrap();
                }
                let budget = match rng.u8(0..3) {
                    0 => rng.u64(0..16),
                    1 => rng.u64(16..1024),
                    _ => rng.u64(1024..65_536),
                };
                let batch = reader.ingest(&copy, *cursor, budget, &mut ctx).unwrap();
                assert!(
                    batch.new_cursor >= *cursor,
                    "seed {seed}: the cursor went back"
                );
                got.extend(batch.events);
                *cursor = batch.new_cursor;
            };
        while written < bytes.len() {
            let piece = match rng.u8(0..3) {
                0 => rng.usize(1..8),
                1 => rng.usize(8..400),
                _ => rng.usize(400..8_000),
            };
            let end = (written + piece).min(bytes.len());
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&copy)
                .unwrap();
            std::io::Write::write_all(&mut f, &bytes[written..end]).unwrap();
            written = end;
            for _ in 0..rng.usize(0..3) {
                ingest(&mut cursor, &mut got, &mut rng);
            }
        }
        loop {
            let before = cursor;
            ingest(&mut cursor, &mut got, &mut rng);
            if cursor == before {
                break;
            }
        }
        assert_eq!(cursor, bytes.len() as u64, "seed {seed}: not all read");
        if got != want {
            let i = got.iter().zip(want).take_while(|(g, w)| g == w).count();
            panic!(
                "seed {seed} on {}: incremental events differ from rebuild at event {i} \
                 ({} vs {} events): got {:?}, rebuild {:?}",
                path.display(),
                got.len(),
                want.len(),
                got.get(i),
                want.get(i)
            );
        }
    }
}

pub fn find<'a>(events: &'a [ProgressEvent], kind: &str) -> Vec<&'a EventKind> {
    events
        .iter()
        .filter(|e| serde_json::to_value(e).unwrap()["kind"] == kind)
        .map(|e| &e.kind)
        .collect()
}

/// The scripted Anthropic model reports 11 input and 7 output tokens per call.
pub fn anthropic_usage(calls: u64) -> EventKind {
    EventKind::Usage {
        input_tokens: 11 * calls,
        output_tokens: 7 * calls,
        cached_input_tokens: 0,
        cost_usd: None,
    }
}

/// A usage event with its cost taken out (the cost is the CLI's price list, not the script's).
pub fn without_cost(k: &EventKind) -> (EventKind, Option<f64>) {
    match k {
        EventKind::Usage {
            input_tokens,
            output_tokens,
            cached_input_tokens,
            cost_usd,
        } => (
            EventKind::Usage {
                input_tokens: *input_tokens,
                output_tokens: *output_tokens,
                cached_input_tokens: *cached_input_tokens,
                cost_usd: None,
            },
            *cost_usd,
        ),
        other => panic!("not usage: {other:?}"),
    }
}

/// Whether the log named the harness's session (the id the next turn resumes).
pub fn has_session(events: &[ProgressEvent]) -> bool {
    events.iter().any(|e| matches!(&e.kind, hangar_events::EventKind::Session { harness_session_id } if !harness_session_id.is_empty()))
}
