//! Conversations from hand-made events.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

fn evs(kinds: Vec<EventKind>) -> Vec<ProgressEvent> {
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| ProgressEvent {
            offset: i as u64 * 10,
            kind,
        })
        .collect()
}

fn acked(seq: u64, command: &str) -> EventKind {
    EventKind::CommandAcked {
        person: None,
        text: None,
        seq,
        command: command.into(),
        outcome: "done".into(),
    }
}

#[test]
fn calls_carry_their_approval_and_result() {
    let events = evs(vec![
        EventKind::Started {
            harness: "claude".into(),
            policy: "ask".into(),
            uid_split: false,
            argv: Vec::new(),
            hooks: Vec::new(),
        },
        acked(1, "prompt"),
        EventKind::AssistantText {
            text: "let me".into(),
            unverified: false,
        },
        EventKind::ToolCall {
            tool_use_id: "t1".into(),
            name: "Bash".into(),
            input: json!({"command": "ls"}),
        },
        EventKind::ApprovalRequested {
            request_id: "r1".into(),
            tool_name: "Bash".into(),
            input: json!({"command": "ls"}),
            tool_use_id: Some("t1".into()),
        },
        EventKind::ApprovalAnswered {
            updated_input: None,
            note: Some("not in that folder".into()),
            person: Some("ada@example.com".into()),
            request_id: "r1".into(),
            decision: "deny".into(),
            by: "command".into(),
            seq: Some(2),
        },
        acked(2, "deny"),
        EventKind::ToolResult {
            tool_use_id: "t1".into(),
            output: "not here".into(),
            is_error: true,
        },
        EventKind::UserMessage {
            text: "STEER".into(),
        },
        EventKind::Usage {
            input_tokens: 1,
            output_tokens: 1,
            cached_input_tokens: 0,
            cost_usd: None,
        },
        EventKind::Result {
            is_error: false,
            text: "ok".into(),
            status: "success".into(),
            unverified: false,
        },
        EventKind::TurnEnd {
            status: 0,
            reason: "result".into(),
            verify: None,
            verify_rounds: None,
            handed_back: vec![],
        },
    ]);
    assert_eq!(
        conversation(&events),
        vec![
            Entry::Sent {
                at: None,
                seq: 1,
                command: "prompt".into(),
                text: None,
                by: None,
            },
            Entry::Assistant {
                text: "let me".into(),
                unverified: false,
            },
            Entry::Tool {
                tool_use_id: "t1".into(),
                name: "Bash".into(),
                input: json!({"command": "ls"}),
                // Who denied it and the words they gave (issue 21).
                approval: Some(Approval {
                    note: Some("not in that folder".into()),
                    updated_input: None,
                    request_id: "r1".into(),
                    decision: Some("deny".into()),
                    by: Some("ada@example.com".into())
                }),
                result: Some(ToolOutput {
                    output: "not here".into(),
                    is_error: true
                }),
            },
            Entry::User {
                text: "STEER".into()
            },
        ]
    );
}

#[test]
fn orphans_verify_and_failures_are_kept() {
    let events = evs(vec![
        EventKind::ApprovalRequested {
            request_id: "r9".into(),
            tool_name: "Write".into(),
            input: json!({}),
            tool_use_id: Some("gone".into()),
        },
        EventKind::ApprovalAnswered {
            updated_input: None,
            note: None,
            person: None,
            request_id: "r9".into(),
            decision: "cancelled".into(),
            by: "command".into(),
            seq: None,
        },
        EventKind::ToolResult {
            tool_use_id: "t7".into(),
            output: "x".into(),
            is_error: false,
        },
        EventKind::Verify {
            round: 1,
            exit_code: Some(7),
            outcome: "feedback".into(),
            output_tail: "nope".into(),
            ms: 1,
        },
        acked(3, "interrupt"),
        EventKind::Result {
            is_error: true,
            text: "the turn was interrupted".into(),
            status: "interrupted".into(),
            unverified: false,
        },
        EventKind::Error {
            message: "boom".into(),
        },
        EventKind::CommandAcked {
            person: None,
            text: None,
            seq: 4,
            command: "steer".into(),
            outcome: "ended".into(),
        },
    ]);
    assert_eq!(
        conversation(&events),
        vec![
            Entry::Approval {
                tool_name: "Write".into(),
                input: json!({}),
                approval: Approval {
                    note: None,
                    updated_input: None,
                    request_id: "r9".into(),
                    decision: Some("cancelled".into()),
                    by: Some("command".into())
                }
            },
            Entry::ToolResult {
                tool_use_id: "t7".into(),
                result: ToolOutput {
                    output: "x".into(),
                    is_error: false
                }
            },
            Entry::Verify {
                round: 1,
                outcome: "feedback".into(),
                exit_code: Some(7),
                output_tail: "nope".into()
            },
            Entry::Sent {
                at: None,
                seq: 3,
                command: "interrupt".into(),
                text: None,
                by: None,
            },
            Entry::Failed {
                status: "interrupted".into(),
                text: "the turn was interrupted".into(),
                unverified: false,
            },
            Entry::Error {
                message: "boom".into()
            },
        ]
    );
}

#[test]
fn entries_serialize_with_their_kind() {
    let e = Entry::Assistant {
        text: "hi".into(),
        unverified: false,
    };
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"kind": "assistant", "text": "hi"})
    );
}

#[test]
fn sent_entries_get_their_text_and_sender_from_the_commands() {
    let events = evs(vec![
        acked(1, "prompt"),
        acked(2, "steer"),
        acked(3, "interrupt"),
    ]);
    let mut conv = conversation(&events);
    crate::fill_sent(&mut conv, |seq| match seq {
        1 => Some(crate::SentRecord {
            text: Some("do it".into()),
            by: "ada@example.com".into(),
            at: 1_000,
        }),
        3 => Some(crate::SentRecord {
            text: None,
            by: "bob@example.com".into(),
            at: 3_000,
        }),
        _ => None,
    });
    let got: Vec<(Option<&str>, Option<&str>, Option<i64>)> = conv
        .iter()
        .map(|e| match e {
            Entry::Sent { text, by, at, .. } => (text.as_deref(), by.as_deref(), *at),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            (Some("do it"), Some("ada@example.com"), Some(1_000)),
            (None, None, None),
            (None, Some("bob@example.com"), Some(3_000))
        ]
    );
}
