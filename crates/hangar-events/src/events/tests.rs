//! Hand-written lines: hangar's own lines, junk, offsets, serde (the harnesses' lines are in
//! `harness_tests.rs`), and the helpers both files use.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

/// Parses lines in order from offset 0; the kinds.
pub(super) fn kinds(lines: &[&str]) -> Vec<EventKind> {
    let mut ctx = ParseContext::new();
    lines
        .iter()
        .flat_map(|l| parse_line(l, &mut ctx))
        .map(|e| e.kind)
        .collect()
}

pub(super) fn one(line: &str) -> EventKind {
    let mut k = kinds(&[line]);
    assert_eq!(k.len(), 1, "{line} → {k:?}");
    k.remove(0)
}

pub(super) fn started(harness: &str, uid_split: bool) -> String {
    json!({"type":"hangar.started","run":"r","harness":harness,"policy":"ask","driver_pid":1,
           "harness_pid":2,"uid_split":uid_split,"driver_version":"0.1.0"})
    .to_string()
}

#[test]
fn started_line() {
    assert_eq!(
        one(&started("claude", false)),
        EventKind::Started {
            harness: "claude".into(),
            policy: "ask".into(),
            uid_split: false,
            argv: Vec::new(),
            hooks: Vec::new()
        }
    );
}

#[test]
fn hangar_lines() {
    let cases: Vec<(&str, EventKind)> = vec![
        (
            r#"{"type":"hangar.command","name":"0000000001-ab.cmd","seq":1,"kind":"prompt","outcome":"done"}"#,
            EventKind::CommandAcked {
                person: None,
                text: None,
                seq: 1,
                command: "prompt".into(),
                outcome: "done".into(),
            },
        ),
        (
            r#"{"type":"hangar.refused","name":"x.cmd","seq":4,"kind":"approve","code":"unknown_request","reason":"no such request"}"#,
            EventKind::CommandRefused {
                person: None,
                seq: Some(4),
                command: Some("approve".into()),
                code: "unknown_request".into(),
                reason: "no such request".into(),
            },
        ),
        (
            r#"{"type":"hangar.refused","name":"x.cmd","code":"not_json","reason":"not JSON"}"#,
            EventKind::CommandRefused {
                person: None,
                seq: None,
                command: None,
                code: "not_json".into(),
                reason: "not JSON".into(),
            },
        ),
        (
            r#"{"type":"hangar.approval","request_id":"r1","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}"#,
            EventKind::ApprovalRequested {
                request_id: "r1".into(),
                tool_name: "Bash".into(),
                input: json!({"command": "ls"}),
                tool_use_id: Some("toolu_1".into()),
            },
        ),
        (
            r#"{"type":"hangar.approval_answered","request_id":"r1","decision":"allow","by":"command","seq":2}"#,
            EventKind::ApprovalAnswered {
                updated_input: None,
                note: None,
                person: None,
                request_id: "r1".into(),
                decision: "allow".into(),
                by: "command".into(),
                seq: Some(2),
            },
        ),
        (
            r#"{"type":"hangar.verify","round":1,"exit_code":7,"ms":3,"outcome":"feedback","output_tail":"nope\n"}"#,
            EventKind::Verify {
                round: 1,
                exit_code: Some(7),
                outcome: "feedback".into(),
                output_tail: "nope\n".into(),
                ms: 3,
            },
        ),
        (
            r#"{"type":"hangar.turn_end","status":1,"reason":"result","handed_back":[5],"verify":"failed","verify_rounds":1}"#,
            EventKind::TurnEnd {
                status: 1,
                reason: "result".into(),
                verify: Some("failed".into()),
                verify_rounds: Some(1),
                handed_back: vec![5],
            },
        ),
        (
            r#"{"type":"hangar.interrupted","seq":3,"person":"ada@example.com","answering":[1],"queued":[2],"approvals":["q1"]}"#,
            EventKind::Interrupted {
                seq: 3,
                person: Some("ada@example.com".into()),
                answering: vec![1],
                queued: vec![2],
                approvals: vec!["q1".into()],
            },
        ),
        (
            r#"{"type":"hangar.warning","message":"careful"}"#,
            EventKind::Warning {
                message: "careful".into(),
            },
        ),
        (
            r#"{"type":"hangar.error","message":"stopped"}"#,
            EventKind::Error {
                message: "stopped".into(),
            },
        ),
    ];
    for (line, want) in cases {
        assert_eq!(one(line), want, "{line}");
    }
}

#[test]
fn tree_lines_are_trusted_only_under_the_uid_split() {
    let tool = r#"{"type":"hangar.tree","tool_use_id":"toolu_1","tree":"abc","ms":12}"#;
    let phase = r#"{"type":"hangar.tree","phase":"end","tree":"def","ms":3,"skipped":"too many files","trusted":false}"#;
    let tree =
        |tool_use_id: Option<&str>, phase: Option<&str>, tree: &str, ms, skipped, trusted| {
            EventKind::Tree {
                tool_use_id: tool_use_id.map(str::to_owned),
                phase: phase.map(str::to_owned),
                tree: tree.into(),
                ms,
                skipped,
                trusted,
            }
        };
    let split = started("claude", true);
    let shared = started("claude", false);
    assert_eq!(
        kinds(&[&split, tool, phase])[1..],
        [
            tree(Some("toolu_1"), None, "abc", 12, None, true),
            tree(
                None,
                Some("end"),
                "def",
                3,
                Some(json!("too many files")),
                false
            ),
        ]
    );
    assert_eq!(
        kinds(&[&shared, tool])[1..],
        [tree(Some("toolu_1"), None, "abc", 12, None, false)]
    );
    assert_eq!(
        kinds(&[tool]),
        [tree(Some("toolu_1"), None, "abc", 12, None, false)],
        "no hangar.started yet: not trusted"
    );
}

#[test]
fn junk_lines_become_warnings_and_never_break_parsing() {
    let junk = [
        "not json at all",
        "{\"type\":\"assistant\",",
        "[1,2,3]",
        "42",
        r#"{"no_type":true}"#,
        r#"{"type":7}"#,
        r#"{"type":"hangar.verify","round":"one"}"#,
        r#"{"type":"hangar.tree","tool_use_id":"t"}"#,
        "\u{1F600} emoji and \u{fffd}",
    ];
    let mut ctx = ParseContext::new();
    for line in junk {
        let evs = parse_line(line, &mut ctx);
        assert_eq!(evs.len(), 1, "{line}");
        assert!(
            matches!(&evs[0].kind, EventKind::Warning { .. }),
            "{line}: {evs:?}"
        );
    }
    // Blank lines are nothing, and parsing goes on after junk.
    assert_eq!(parse_line("", &mut ctx), vec![]);
    assert_eq!(parse_line("   ", &mut ctx), vec![]);
    assert_eq!(
        parse_line(r#"{"type":"hangar.warning","message":"ok"}"#, &mut ctx).len(),
        1
    );
}

#[test]
fn a_long_junk_line_is_quoted_short() {
    let line = "x".repeat(10_000);
    let evs = parse_line(&line, &mut ParseContext::new());
    let EventKind::Warning { message } = &evs[0].kind else {
        panic!("{evs:?}")
    };
    assert!(message.len() < 400, "{message}");
    assert!(message.contains("10000 bytes"), "{message}");
}

#[test]
fn offsets_are_the_line_starts() {
    let a = r#"{"type":"hangar.warning","message":"a"}"#;
    let b = r#"{"type":"hangar.error","message":"b"}"#;
    let mut ctx = ParseContext::new();
    let mut offsets = vec![];
    for l in [a, "junk", b] {
        offsets.extend(parse_line(l, &mut ctx).into_iter().map(|e| e.offset));
    }
    assert_eq!(offsets, [0, a.len() as u64 + 1, a.len() as u64 + 6]);
    assert_eq!(ctx.offset, (a.len() + 6 + b.len() + 1) as u64);
}

#[test]
fn events_serialize_flat_with_their_kind_and_round_trip() {
    let ev = ProgressEvent {
        offset: 9,
        kind: EventKind::CommandAcked {
            person: None,
            text: None,
            seq: 1,
            command: "prompt".into(),
            outcome: "done".into(),
        },
    };
    let v = serde_json::to_value(&ev).unwrap();
    assert_eq!(
        v,
        json!({"offset": 9, "kind": "command_acked", "seq": 1, "command": "prompt", "outcome": "done"})
    );
    let all = kinds(&[
        &started("codex", true),
        r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"a"}}"#,
        r#"{"type":"hangar.tree","tool_use_id":"item_0","tree":"abc","ms":1,"skipped":true}"#,
        r#"{"type":"result","is_error":false,"result":"x","total_cost_usd":0.5,"usage":{"input_tokens":1}}"#,
    ]);
    for kind in all {
        let ev = ProgressEvent { offset: 3, kind };
        let text = serde_json::to_string(&ev).unwrap();
        let back: ProgressEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ev, "{text}");
    }
}

#[test]
fn the_context_round_trips_through_serde() {
    let mut ctx = ParseContext::new();
    for l in [
        &started("codex", true) as &str,
        r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"a"}}"#,
    ] {
        parse_line(l, &mut ctx);
    }
    let text = serde_json::to_string(&ctx).unwrap();
    let mut back: ParseContext = serde_json::from_str(&text).unwrap();
    assert_eq!(back, ctx);
    let done = r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"a","exit_code":0,"status":"completed"}}"#;
    assert_eq!(parse_line(done, &mut back), parse_line(done, &mut ctx));
    assert!(back.trees_trusted());
}
