//! The reader on hand-made files: a missing file, partial lines, lines split across reads,
//! huge lines, budgets, and a cursor that never returns a line twice.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::Write;

use pretty_assertions::assert_eq;

use super::*;

fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

fn line(msg: &str) -> String {
    HangarLine::Warning {
        message: msg.into(),
    }
    .to_json()
}

#[test]
fn a_missing_file_has_no_lines_yet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    assert_eq!(
        LogReader::new().read_from(&path, 0, 100).unwrap(),
        (vec![], 0)
    );
    let mut ctx = ParseContext::new();
    let b = ingest(&path, 0, &mut ctx).unwrap();
    assert_eq!((b.events.len(), b.new_cursor), (0, 0));
    assert_eq!(rebuild(&path), vec![]);
}

#[test]
fn a_partial_last_line_waits_for_its_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    let r = LogReader::new();
    append(&path, b"first\nsec");
    assert_eq!(
        r.read_from(&path, 0, 1 << 20).unwrap(),
        (vec![(0, "first".to_owned())], 6)
    );
    assert_eq!(r.read_from(&path, 6, 1 << 20).unwrap(), (vec![], 6));
    append(&path, b"ond\nthi");
    assert_eq!(
        r.read_from(&path, 6, 1 << 20).unwrap(),
        (vec![(6, "second".to_owned())], 13)
    );
    append(&path, b"rd\n");
    assert_eq!(
        r.read_from(&path, 13, 1 << 20).unwrap(),
        (vec![(13, "third".to_owned())], 19)
    );
    assert_eq!(r.read_from(&path, 19, 1 << 20).unwrap(), (vec![], 19));
}

#[test]
fn the_budget_stops_at_a_line_end_and_takes_at_least_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    append(&path, b"aaaa\nbbbb\ncccc\n");
    let r = LogReader::new();
    // A budget smaller than a line still takes one whole line.
    assert_eq!(
        r.read_from(&path, 0, 1).unwrap(),
        (vec![(0, "aaaa".to_owned())], 5)
    );
    assert_eq!(
        r.read_from(&path, 0, 0).unwrap(),
        (vec![(0, "aaaa".to_owned())], 5)
    );
    // Budget reached after the second line.
    let (lines, cursor) = r.read_from(&path, 0, 6).unwrap();
    assert_eq!((lines.len(), cursor), (2, 10));
    let (lines, cursor) = r.read_from(&path, cursor, 6).unwrap();
    assert_eq!((lines, cursor), (vec![(10, "cccc".to_owned())], 15));
}

#[test]
fn a_line_over_the_budget_is_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    let big = line(&"x".repeat(300_000));
    append(&path, format!("{big}\n{}\n", line("after")).as_bytes());
    let (lines, cursor) = LogReader::new().read_from(&path, 0, 1024).unwrap();
    assert_eq!(lines, vec![(0, big.clone())]);
    assert_eq!(cursor, big.len() as u64 + 1);
}

#[test]
fn a_line_over_the_line_limit_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    let r = LogReader::with_max_line_bytes(1000);
    let huge = "y".repeat(200_000);
    append(&path, format!("{}\n{huge}", line("before")).as_bytes());
    // The huge line has no newline yet: nothing after the first line.
    let (lines, cursor) = r.read_from(&path, 0, 10).unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(r.read_from(&path, cursor, 10).unwrap(), (vec![], cursor));
    append(&path, format!("\n{}\n", line("after")).as_bytes());
    let mut ctx = ParseContext::new();
    let b = r.ingest(&path, 0, 1 << 20, &mut ctx).unwrap();
    let kinds: Vec<&EventKind> = b.events.iter().map(|e| &e.kind).collect();
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    let EventKind::Warning { message } = kinds[1] else {
        panic!("{kinds:?}")
    };
    assert!(message.contains("200000 bytes"), "{message}");
    assert_eq!(
        b.events[1].offset, cursor,
        "the warning points at the huge line"
    );
    assert_eq!(
        kinds[2],
        &EventKind::Warning {
            message: "after".into()
        }
    );
    assert_eq!(b.events[2].offset, cursor + 200_001);
    assert_eq!(
        b.new_cursor,
        std::fs::metadata(&path).unwrap().len(),
        "all read"
    );
}

#[test]
fn the_default_line_limit_is_64_mib() {
    assert_eq!(LogReader::new(), LogReader::with_max_line_bytes(64 << 20));
}

#[test]
fn invalid_utf8_is_replaced_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    append(
        &path,
        b"{\"type\":\"hangar.warning\",\"message\":\"a\xffb\"}\n",
    );
    let evs = rebuild(&path);
    assert_eq!(
        evs[0].kind,
        EventKind::Warning {
            message: "a\u{fffd}b".into()
        }
    );
}

#[test]
fn a_cursor_past_the_end_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    append(&path, b"abc\n");
    let err = LogReader::new().read_from(&path, 10, 100).unwrap_err();
    assert!(
        matches!(
            err,
            CoreError::CursorPastEnd {
                cursor: 10,
                len: 4,
                ..
            }
        ),
        "{err}"
    );
}

/// Appends a log in pieces of every size from 1 byte, ingesting after each piece with a small
/// budget: the batches add up to `rebuild`, with no line twice.
#[test]
fn byte_by_byte_growth_adds_up_to_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.log");
    let text = [
        line("one"),
        "junk".to_owned(),
        String::new(),
        line("two é"),
        r#"{"type":"hangar.error","message":"three"}"#.to_owned(),
    ]
    .join("\n")
        + "\n";
    append(&whole, text.as_bytes());
    let want = rebuild(&whole);
    assert_eq!(want.len(), 4);
    for piece in 1..=7 {
        let growing = dir.path().join(format!("grow-{piece}.log"));
        let mut ctx = ParseContext::new();
        let (mut cursor, mut got) = (0, vec![]);
        for chunk in text.as_bytes().chunks(piece) {
            append(&growing, chunk);
            let b = LogReader::new()
                .ingest(&growing, cursor, 3, &mut ctx)
                .unwrap();
            got.extend(b.events);
            cursor = b.new_cursor;
        }
        loop {
            let b = LogReader::new()
                .ingest(&growing, cursor, 3, &mut ctx)
                .unwrap();
            got.extend(b.events);
            if b.new_cursor == cursor {
                break;
            }
            cursor = b.new_cursor;
        }
        assert_eq!(got, want, "pieces of {piece}");
    }
}
