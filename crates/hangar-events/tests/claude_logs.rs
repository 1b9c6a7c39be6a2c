//! REAL Claude Code run logs, captured live: the real driver runs the real CLI against the
//! scripted Anthropic model and the tests parse what it wrote (each log also goes through the
//! incremental-ingestion property check, `common::check::events_of`).
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use common::check::{
    anthropic_usage, assert_subsequence, events_of, find, has_session, kinds, streamed_text,
    without_cost,
};
use common::scenarios;
use hangar_events::transcript::{Approval, Entry, ToolOutput};
use hangar_events::{EventKind, conversation};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

#[test]
fn claude_turn_with_an_approved_bash_call() {
    let (rig, status) = scenarios::claude_approved();
    assert_eq!(status, 0, "log:\n{}", rig.log_text());
    let events = events_of(&rig.log_path(), 0);
    assert_eq!(
        kinds(&events),
        [
            "started",
            "command_acked",
            "tool_call",
            "approval_requested",
            "approval_answered",
            "command_acked",
            "tool_result",
            "assistant_text",
            "usage",
            "result",
            "turn_end"
        ]
    );
    assert!(has_session(&events));
    // The closing text came as the model streamed it, piece by piece, before the whole message.
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
    let EventKind::Started {
        harness,
        policy,
        uid_split,
        argv,
        hooks,
    } = k[0]
    else {
        panic!("first event {:?}", k[0]);
    };
    assert_eq!(
        (harness.as_str(), policy.as_str(), *uid_split),
        ("claude", "ask", false)
    );
    assert!(argv.iter().any(|a| a == "stream-json"), "{argv:?}");
    // The prompt's words are in the record, with the command that carried them (issue 21).
    let EventKind::CommandAcked {
        command,
        text: prompt_words,
        ..
    } = k[1]
    else {
        panic!("{:?}", k[1]);
    };
    assert_eq!(command, "prompt");
    assert!(
        prompt_words.as_deref().is_some_and(|t| !t.is_empty()),
        "{:?}",
        k[1]
    );
    assert!(hooks.is_empty(), "no check, no hook: {hooks:?}");
    let EventKind::ToolCall {
        tool_use_id,
        name,
        input,
    } = k[2]
    else {
        panic!("{k:?}")
    };
    assert_eq!(
        (name.as_str(), &input["command"]),
        ("Bash", &json!("echo hi > made.txt"))
    );
    assert!(tool_use_id.starts_with("toolu_hk_"), "{tool_use_id}");
    let EventKind::ApprovalRequested {
        tool_use_id: asked_for,
        request_id,
        tool_name,
        ..
    } = k[3]
    else {
        panic!("{k:?}")
    };
    assert_eq!(
        (asked_for.as_ref(), tool_name.as_str()),
        (Some(tool_use_id), "Bash")
    );
    assert_eq!(
        k[4],
        &EventKind::ApprovalAnswered {
            updated_input: None,
            note: None,
            person: None,
            request_id: request_id.clone(),
            decision: "allow".into(),
            by: "command".into(),
            seq: Some(2)
        }
    );
    assert_eq!(
        k[5],
        &EventKind::CommandAcked {
            person: None,
            text: None,
            seq: 2,
            command: "approve".into(),
            outcome: "done".into()
        }
    );
    let EventKind::ToolResult {
        tool_use_id: result_for,
        is_error,
        ..
    } = k[6]
    else {
        panic!("{k:?}")
    };
    assert_eq!(
        (result_for, *is_error),
        (tool_use_id, false),
        "the result pairs with the call"
    );
    assert_eq!(
        k[7],
        &EventKind::AssistantText {
            text: "made it".into(),
            unverified: false,
        }
    );
    let (usage, cost) = without_cost(k[8]);
    assert_eq!(usage, anthropic_usage(2), "two model calls");
    assert!(cost.is_some_and(|c| c > 0.0), "{cost:?}");
    assert_eq!(
        k[9],
        &EventKind::Result {
            is_error: false,
            text: "made it".into(),
            status: "success".into(),
            unverified: false,
        }
    );
    assert!(matches!(k[10], EventKind::TurnEnd { status: 0, .. }));
    // Offsets point at the lines the events came from.
    let text = rig.log_text();
    for e in &events {
        let line = text[e.offset as usize..].lines().next().unwrap();
        let ty = serde_json::from_str::<Value>(line).unwrap()["type"].clone();
        assert!(ty.is_string(), "offset {} is a line start", e.offset);
    }
    assert_eq!(
        conversation(&events),
        vec![
            Entry::Sent {
                at: None,
                seq: 1,
                command: "prompt".into(),
                text: prompt_words.clone(),
                by: None,
            },
            Entry::Tool {
                tool_use_id: tool_use_id.clone(),
                name: "Bash".into(),
                input: input.clone(),
                approval: Some(Approval {
                    note: None,
                    updated_input: None,
                    request_id: request_id.clone(),
                    decision: Some("allow".into()),
                    by: Some("command".into())
                }),
                result: Some(ToolOutput {
                    output: "(Bash completed with no output)".into(),
                    is_error: false
                }),
            },
            Entry::Assistant {
                text: "made it".into(),
                unverified: false,
            },
        ]
    );
}

#[test]
fn claude_turn_with_a_denied_bash_call() {
    let (rig, status) = scenarios::claude_denied();
    assert_eq!(status, 0, "log:\n{}", rig.log_text());
    let events = events_of(&rig.log_path(), 0);
    assert_subsequence(
        &kinds(&events),
        &[
            "started",
            "tool_call",
            "approval_requested",
            "approval_answered",
            "tool_result",
            "assistant_text",
            "usage",
            "result",
            "turn_end",
        ],
    );
    let answered = find(&events, "approval_answered");
    assert!(
        matches!(answered[0], EventKind::ApprovalAnswered { decision, .. } if decision == "deny")
    );
    let call_id = match find(&events, "tool_call")[0] {
        EventKind::ToolCall { tool_use_id, .. } => tool_use_id.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        find(&events, "tool_result")[0],
        &EventKind::ToolResult {
            tool_use_id: call_id,
            output: "not in this repo, please".into(),
            is_error: true
        }
    );
    assert_eq!(
        without_cost(find(&events, "usage")[0]).0,
        anthropic_usage(2)
    );
    let conv = conversation(&events);
    assert!(
        matches!(&conv[1], Entry::Tool { approval: Some(a), result: Some(r), .. }
            if a.decision.as_deref() == Some("deny") && r.is_error),
        "{conv:#?}"
    );
    assert_eq!(
        conv.last(),
        Some(&Entry::Assistant {
            text: "understood".into(),
            unverified: false,
        })
    );
}

#[test]
fn claude_turn_interrupted() {
    let (rig, status) = scenarios::claude_interrupted();
    assert_eq!(status, 130, "log:\n{}", rig.log_text());
    let events = events_of(&rig.log_path(), 0);
    let ks = kinds(&events);
    assert_subsequence(
        &ks,
        &[
            "started",
            "interrupted",
            "command_acked",
            "usage",
            "result",
            "turn_end",
        ],
    );
    assert!(
        find(&events, "command_acked").iter().any(|k| matches!(k,
            EventKind::CommandAcked { seq: 2, command, outcome, .. } if command == "interrupt" && outcome == "done")),
        "{events:#?}"
    );
    assert!(
        find(&events, "user_message").is_empty(),
        "the interrupt marker is not a message"
    );
    let result = find(&events, "result");
    assert!(
        // The answer the interrupt stopped, said so (not the CLI's diagnostic text).
        matches!(result[0], EventKind::Result { is_error: true, status, text, .. } if status == "interrupted" && text.is_empty()),
        "{result:?}"
    );
    assert!(matches!(
        find(&events, "turn_end")[0],
        EventKind::TurnEnd { status: 130, .. }
    ));
    let conv = conversation(&events);
    assert!(
        conv.iter()
            .any(|e| matches!(e, Entry::Sent { command, .. } if command == "interrupt"))
    );
    assert!(
        conv.iter().any(|e| matches!(e, Entry::Failed { .. })),
        "{conv:#?}"
    );
}

#[test]
fn claude_turn_with_a_failing_check() {
    let (rig, status) = scenarios::claude_verify();
    assert_eq!(status, 1, "log:\n{}", rig.log_text());
    let events = events_of(&rig.log_path(), 0);
    // The last round's Stop hook answer is a line of Claude Code's, written before or after the
    // turn's usage and result (both seen, CI failed on the second): anywhere between the last
    // text and the turn's end.
    let mut ks = kinds(&events);
    let last = ks.iter().rposition(|k| k == "verify").unwrap();
    let text = ks.iter().rposition(|k| k == "assistant_text").unwrap();
    let end = ks.iter().position(|k| k == "turn_end").unwrap();
    assert!(text < last && last < end, "{ks:?}");
    ks.remove(last);
    assert_eq!(
        ks,
        [
            "started",
            "command_acked",
            "assistant_text",
            "verify",
            "assistant_text",
            "usage",
            "result",
            "turn_end"
        ]
    );
    let verify = find(&events, "verify");
    assert!(
        matches!(verify[0], EventKind::Verify { round: 1, exit_code: Some(7), outcome, output_tail, .. }
        if outcome == "feedback" && output_tail.contains("CHECK-FAILED: nope"))
    );
    assert!(
        matches!(verify[1], EventKind::Verify { round: 2, outcome, .. } if outcome == "failed")
    );
    assert_eq!(
        without_cost(find(&events, "usage")[0]).0,
        anthropic_usage(2)
    );
    assert_eq!(
        find(&events, "turn_end")[0],
        &EventKind::TurnEnd {
            status: 1,
            reason: "result".into(),
            verify: Some("failed".into()),
            verify_rounds: Some(1),
            handed_back: vec![]
        }
    );
    let conv = conversation(&events);
    assert!(
        matches!(&conv[2], Entry::Verify { outcome, .. } if outcome == "feedback"),
        "{conv:#?}"
    );
}
