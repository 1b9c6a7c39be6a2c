//! REAL Codex run logs, captured live: the real driver runs the real Codex app-server (always
//! `--disable plugins`, against the scripted Responses model through the testkit's offline
//! provider) and the tests parse what it wrote (each log also goes through the
//! incremental-ingestion property check, `common::check::events_of`).
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use common::check::{assert_subsequence, events_of, find, has_session, kinds, streamed_text};
use common::scenarios;
use hangar_events::transcript::{Entry, ToolOutput};
use hangar_events::{EventKind, conversation};
use pretty_assertions::assert_eq;
use serde_json::json;

#[test]
fn codex_turn_with_commands_and_a_patch_under_auto() {
    let (rig, status) = scenarios::codex_auto();
    assert_eq!(status, 0, "log:\n{}", rig.log_text());
    let events = events_of(&rig.log_path(), 0);
    assert_eq!(
        kinds(&events),
        [
            "started",
            "command_acked",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "assistant_text",
            "usage",
            "result",
            "turn_end"
        ]
    );
    assert!(has_session(&events));
    // The closing text came as the model streamed it (the driver's `item.delta` lines).
    let text = events.iter().find_map(|e| match &e.kind {
        EventKind::AssistantText { text, .. } => Some(text.clone()),
        _ => None,
    });
    assert_eq!(Some(streamed_text(&events)), text);
    let k: Vec<&EventKind> = events
        .iter()
        .map(|e| &e.kind)
        .filter(|e| {
            !matches!(
                e,
                EventKind::Session { .. } | EventKind::Tree { .. } | EventKind::TextDelta { .. }
            )
        })
        .collect();
    let hello = rig.work.path().join("hello.txt").display().to_string();
    assert_eq!(
        k[2..8],
        [
            &EventKind::ToolCall {
                tool_use_id: "item_0".into(),
                name: "command".into(),
                input: json!({"command": "/bin/bash -lc 'echo hi > made.txt'"})
            },
            &EventKind::ToolResult {
                tool_use_id: "item_0".into(),
                output: String::new(),
                is_error: false
            },
            &EventKind::ToolCall {
                tool_use_id: "item_1".into(),
                name: "command".into(),
                input: json!({"command": "/bin/bash -lc 'echo oops; exit 3'"})
            },
            &EventKind::ToolResult {
                tool_use_id: "item_1".into(),
                output: "oops\n".into(),
                is_error: true
            },
            &EventKind::ToolCall {
                tool_use_id: "item_2".into(),
                name: "file_change".into(),
                input: json!({"changes": [{"kind": "add", "path": hello}]})
            },
            &EventKind::ToolResult {
                tool_use_id: "item_2".into(),
                output: format!("add {hello}"),
                is_error: false
            },
        ]
    );
    // Four model calls of the scripted Responses usage (100 in, 20 of them cached, 10 out).
    assert_eq!(
        k[9],
        &EventKind::Usage {
            input_tokens: 400,
            output_tokens: 40,
            cached_input_tokens: 80,
            cost_usd: None
        }
    );
    assert_eq!(
        k[10],
        &EventKind::Result {
            is_error: false,
            text: "made it".into(),
            status: "completed".into(),
            unverified: false,
        }
    );
    let conv = conversation(&events);
    assert_eq!(conv.len(), 5, "{conv:#?}");
    assert!(conv[1..4].iter().all(|e| matches!(
        e,
        Entry::Tool {
            result: Some(_),
            approval: None,
            ..
        }
    )));
}

#[test]
fn codex_turn_under_ask_pairs_approvals_with_items() {
    let (rig, status) = scenarios::codex_ask();
    assert_eq!(status, 0, "log:\n{}", rig.log_text());
    let events = events_of(&rig.log_path(), 0);
    let asked: Vec<(String, Option<String>)> = find(&events, "approval_requested")
        .into_iter()
        .map(|k| match k {
            EventKind::ApprovalRequested {
                tool_name,
                tool_use_id,
                ..
            } => (tool_name.clone(), tool_use_id.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        asked,
        [
            ("commandExecution".to_owned(), Some("item_0".to_owned())),
            ("fileChange".to_owned(), Some("item_1".to_owned()))
        ]
    );
    let conv = conversation(&events);
    let tools: Vec<(&str, Option<&str>, Option<bool>)> = conv
        .iter()
        .filter_map(|e| match e {
            Entry::Tool {
                name,
                approval,
                result,
                ..
            } => Some((
                name.as_str(),
                approval.as_ref().and_then(|a| a.decision.as_deref()),
                result.as_ref().map(|r| r.is_error),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        tools,
        [
            ("command", Some("allow"), Some(false)),
            ("file_change", Some("deny"), Some(true))
        ]
    );
}

#[test]
fn codex_turn_interrupted_while_a_command_runs() {
    let (rig, status) = scenarios::codex_interrupted();
    assert_eq!(status, 130, "log:\n{}", rig.log_text());
    // The driver's own warning that it stopped the command left running.
    let events = events_of(&rig.log_path(), 1);
    assert_subsequence(
        &kinds(&events),
        &[
            "started",
            "command_acked",
            "tool_call",
            "command_acked",
            "result",
            "warning",
            "turn_end",
        ],
    );
    // The command never finished its work: no result at all, or (when Codex reports the item
    // as it stops it, a race with the interrupt) a failed one without the command's output.
    for r in find(&events, "tool_result") {
        let EventKind::ToolResult {
            output, is_error, ..
        } = r
        else {
            unreachable!()
        };
        assert!(
            *is_error && !output.contains("late"),
            "the command completed: {r:?}"
        );
    }
    assert_eq!(
        find(&events, "result")[0],
        &EventKind::Result {
            is_error: true,
            text: "the turn was interrupted".into(),
            status: "interrupted".into(),
            unverified: false,
        }
    );
    let conv = conversation(&events);
    assert!(
        conv.iter().any(|e| matches!(
            e,
            Entry::Tool { result: None, .. }
                | Entry::Tool {
                    result: Some(ToolOutput { is_error: true, .. }),
                    ..
                }
        )),
        "{conv:#?}"
    );
}

#[test]
fn codex_turn_with_a_failing_check() {
    let (rig, status) = scenarios::codex_verify();
    assert_eq!(status, 1, "log:\n{}", rig.log_text());
    let events = events_of(&rig.log_path(), 0);
    assert_eq!(
        kinds(&events),
        [
            "started",
            "command_acked",
            "assistant_text",
            "usage",
            "result",
            "verify",
            "assistant_text",
            "usage",
            "result",
            "verify",
            "turn_end"
        ]
    );
    for u in find(&events, "usage") {
        assert_eq!(
            u,
            &EventKind::Usage {
                input_tokens: 100,
                output_tokens: 10,
                cached_input_tokens: 20,
                cost_usd: None
            },
            "each usage is its own turn's"
        );
    }
    let texts: Vec<&EventKind> = find(&events, "result");
    assert!(matches!(texts[1], EventKind::Result { text, .. } if text == "done again"));
}
