//! The run-log line parsers: hangar-events's `parse_line` over Claude Code stream-json, Codex
//! `exec --json` and hangar's own lines (the agent writes the harness's stdout, so all of it is
//! untrusted), and hangar-protocol's `HangarLine::parse`.
//!
//! The input is a run log (lines split at `\n`, invalid UTF-8 replaced as the watcher does).
//! Checked: nothing panics; the direct read of a line's fields gives what reading it through a
//! `serde_json::Value` gives (events and context); every event carries its line's offset; a hangar line reads back
//! from its own JSON; the parser's context, persisted as JSON at a line the input picks (what
//! the watcher stores with its cursor) and read back, gives the same events as reading on;
//! the transcript of the events can be made.
#![no_main]

use hangar_events::{ParseContext, ProgressEvent, conversation, parse_line, parse_line_via_value};
use hangar_protocol::runlog::HangarLine;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.split('\n').collect();
    let cut = data
        .first()
        .map_or(0, |b| usize::from(*b) % lines.len().max(1));

    let mut ctx = ParseContext::new();
    let mut straight: Vec<ProgressEvent> = Vec::new();
    let mut resumed: Vec<ProgressEvent> = Vec::new();
    let mut saved: Option<ParseContext> = None;
    let mut offset = 0u64;
    for (i, line) in lines.iter().enumerate() {
        if i == cut {
            let json = serde_json::to_string(&ctx).expect("the context serializes");
            saved = Some(serde_json::from_str(&json).expect("the context reads back"));
        }
        let mut via_value = ctx.clone();
        let want = parse_line_via_value(line, &mut via_value);
        let events = parse_line(line, &mut ctx);
        assert_eq!(events, want, "the direct read differs from the Value read");
        assert_eq!(ctx, via_value, "the direct read's context differs");
        for e in &events {
            assert_eq!(e.offset, offset, "event offset is not its line's");
            serde_json::to_string(e).expect("an event serializes");
        }
        if i >= cut {
            resumed.extend(events.iter().cloned());
        }
        straight.extend(events);
        offset += line.len() as u64 + 1;
        assert_eq!(ctx.offset, offset);

        if let Some(h) = HangarLine::parse(line) {
            let again = HangarLine::parse(&h.to_json());
            assert_eq!(again.as_ref(), Some(&h), "a hangar line does not read back");
        }
    }
    // The same lines from the persisted context.
    if let Some(mut ctx2) = saved {
        let mut again = Vec::new();
        for line in &lines[cut..] {
            again.extend(parse_line(line, &mut ctx2));
        }
        assert_eq!(
            again, resumed,
            "resuming from the stored context changed the events"
        );
        assert_eq!(ctx2, ctx);
    }
    let _ = conversation(&straight);
});
