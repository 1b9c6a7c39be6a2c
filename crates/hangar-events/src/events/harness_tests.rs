//! Hand-written Claude Code and Codex lines for every event kind they give.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use pretty_assertions::assert_eq;
use serde_json::json;

use super::tests::{kinds, one, started};
use super::*;

#[test]
fn claude_assistant_text_and_tool_use() {
    let line = r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"let me look"},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},"parent_tool_use_id":null,"extra":1}"#;
    assert_eq!(
        kinds(&[line]),
        vec![
            EventKind::AssistantText {
                text: "let me look".into(),
                unverified: false,
            },
            EventKind::ToolCall {
                tool_use_id: "toolu_1".into(),
                name: "Bash".into(),
                input: json!({"command": "ls"})
            }
        ]
    );
}

#[test]
fn claude_tool_results_string_and_parts() {
    let line = r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a\nb","is_error":false},{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"x"},{"type":"image","source":{}},{"type":"text","text":"y"}],"is_error":true}]}}"#;
    assert_eq!(
        kinds(&[line]),
        vec![
            EventKind::ToolResult {
                tool_use_id: "toolu_1".into(),
                output: "a\nb".into(),
                is_error: false
            },
            EventKind::ToolResult {
                tool_use_id: "toolu_2".into(),
                output: "x\n[image]\ny".into(),
                is_error: true
            }
        ]
    );
}

#[test]
fn claude_user_text_is_a_user_message_but_not_markers_synthetic_or_subagent() {
    assert_eq!(
        one(r#"{"type":"user","message":{"role":"user","content":"STEER: shorter"}}"#),
        EventKind::UserMessage {
            text: "STEER: shorter".into()
        }
    );
    assert_eq!(
        one(r#"{"type":"user","message":{"content":[{"type":"text","text":"hello"}]}}"#),
        EventKind::UserMessage {
            text: "hello".into()
        }
    );
    let none = [
        r#"{"type":"user","message":{"content":[{"type":"text","text":"[Request interrupted by user]"}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"text","text":"[Request interrupted by user for tool use]"}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"text","text":"Stop hook feedback:\nfix it"}]},"isSynthetic":true}"#,
        r#"{"type":"user","message":{"content":"do the sub-task"},"parent_tool_use_id":"toolu_9"}"#,
        r#"{"type":"user","message":{"content":""}}"#,
        r#"{"type":"user"}"#,
    ];
    for l in none {
        assert_eq!(kinds(&[l]), vec![], "{l}");
    }
}

#[test]
fn claude_result_gives_usage_then_result_with_cost_per_turn() {
    let r1 = r#"{"type":"result","subtype":"success","is_error":false,"result":"made it","total_cost_usd":0.25,"usage":{"input_tokens":22,"output_tokens":14,"cache_read_input_tokens":5,"cache_creation_input_tokens":3},"hangar_process_usage":{"input_tokens":22}}"#;
    let r2 = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["boom","bang"],"total_cost_usd":0.75,"usage":{"input_tokens":11,"output_tokens":7}}"#;
    assert_eq!(
        kinds(&[r1, r2]),
        vec![
            EventKind::Usage {
                input_tokens: 30,
                output_tokens: 14,
                cached_input_tokens: 5,
                cost_usd: Some(0.25)
            },
            EventKind::Result {
                is_error: false,
                text: "made it".into(),
                status: "success".into(),
                unverified: false,
            },
            EventKind::Usage {
                input_tokens: 11,
                output_tokens: 7,
                cached_input_tokens: 0,
                cost_usd: Some(0.5)
            },
            EventKind::Result {
                is_error: true,
                text: "boom\nbang".into(),
                status: "error_during_execution".into(),
                unverified: false,
            },
        ]
    );
}

/// Token counts near u64::MAX (the agent writes these lines) add up without overflowing: the
/// sum used to panic in debug builds and wrap in release ones.
#[test]
fn claude_usage_sums_saturate() {
    let r = r#"{"type":"result","usage":{"input_tokens":18446744073709551615,"cache_read_input_tokens":5,"cache_creation_input_tokens":3}}"#;
    assert_eq!(
        kinds(&[r])[0],
        EventKind::Usage {
            input_tokens: u64::MAX,
            output_tokens: 0,
            cached_input_tokens: 5,
            cost_usd: None
        }
    );
}

#[test]
fn claude_init_names_the_session() {
    let lines = [r#"{"type":"system","subtype":"init","session_id":"s-123","tools":["Bash"]}"#];
    assert_eq!(
        kinds(&lines),
        vec![EventKind::Session {
            harness_session_id: "s-123".into()
        }]
    );
}

#[test]
fn claude_lines_that_are_not_events() {
    let lines = [
        r#"{"type":"system","subtype":"status","tools":["Bash"]}"#,
        r#"{"type":"control_request","request_id":"x","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{}}}"#,
        r#"{"type":"control_response","response":{"subtype":"success","request_id":"hangar-interrupt-2"}}"#,
        r#"{"type":"control_cancel_request","request_id":"x"}"#,
        r#"{"type":"command_lifecycle","state":"queued"}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta"}}"#,
        r#"{"type":"something_new","with":{"fields":[1,2,3]}}"#,
        r#"{"type":"hangar.something_newer","x":1}"#,
    ];
    assert_eq!(kinds(&lines), vec![]);
}

#[test]
fn codex_turn_with_command_patch_and_message() {
    let lines = [
        &started("codex", false) as &str,
        r#"{"type":"thread.started","thread_id":"t1"}"#,
        r#"{"type":"turn.started"}"#,
        r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"bash -lc ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"bash -lc ls","aggregated_output":"a\n","exit_code":0,"status":"completed"}}"#,
        r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"false","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"failed"}}"#,
        r#"{"type":"item.started","item":{"id":"item_2","type":"file_change","changes":[{"kind":"add","path":"/w/a.txt"}],"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"kind":"add","path":"/w/a.txt"}],"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_3","type":"reasoning","text":"thinking"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":"done"}}"#,
        r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":20,"output_tokens":10,"reasoning_output_tokens":3},"hangar_process_usage":{}}"#,
    ];
    let call = |id: &str, name: &str, input| EventKind::ToolCall {
        tool_use_id: id.into(),
        name: name.into(),
        input,
    };
    let result = |id: &str, output: &str, is_error| EventKind::ToolResult {
        tool_use_id: id.into(),
        output: output.into(),
        is_error,
    };
    assert_eq!(
        kinds(&lines)[1],
        EventKind::Session {
            harness_session_id: "t1".into()
        },
        "the thread id is the session the next turn resumes"
    );
    assert_eq!(
        kinds(&lines)[2..],
        [
            call("item_0", "command", json!({"command": "bash -lc ls"})),
            result("item_0", "a\n", false),
            call("item_1", "command", json!({"command": "false"})),
            result("item_1", "failed", true),
            call(
                "item_2",
                "file_change",
                json!({"changes": [{"kind": "add", "path": "/w/a.txt"}]})
            ),
            result("item_2", "add /w/a.txt", false),
            EventKind::AssistantText {
                text: "done".into(),
                unverified: false,
            },
            EventKind::Usage {
                input_tokens: 100,
                output_tokens: 10,
                cached_input_tokens: 20,
                cost_usd: None
            },
            EventKind::Result {
                is_error: false,
                text: "done".into(),
                status: "completed".into(),
                unverified: false,
            },
        ]
    );
}

#[test]
fn codex_declined_nonzero_exit_mcp_and_unstarted_items() {
    let lines = [
        r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"rm x","status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"rm x","aggregated_output":"","exit_code":null,"status":"declined"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"x","aggregated_output":"oops","exit_code":2,"status":"completed"}}"#,
        r#"{"type":"item.started","item":{"id":"item_2","type":"mcp_tool_call","server":"gh","tool":"search","arguments":{"q":"x"},"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_3","type":"web_search","query":"rust"}}"#,
    ];
    assert_eq!(
        kinds(&lines),
        vec![
            EventKind::ToolCall {
                tool_use_id: "item_0".into(),
                name: "command".into(),
                input: json!({"command": "rm x"})
            },
            EventKind::ToolResult {
                tool_use_id: "item_0".into(),
                output: "declined".into(),
                is_error: true
            },
            EventKind::ToolCall {
                tool_use_id: "item_1".into(),
                name: "command".into(),
                input: json!({"command": "x"})
            },
            EventKind::ToolResult {
                tool_use_id: "item_1".into(),
                output: "oops".into(),
                is_error: true
            },
            EventKind::ToolCall {
                tool_use_id: "item_2".into(),
                name: "mcp__gh__search".into(),
                input: json!({"q": "x"})
            },
            EventKind::ToolCall {
                tool_use_id: "item_3".into(),
                name: "web_search".into(),
                input: json!({"query": "rust"})
            },
            EventKind::ToolResult {
                tool_use_id: "item_3".into(),
                output: String::new(),
                is_error: false
            },
        ]
    );
}

#[test]
fn codex_turn_failed_interrupted_and_error() {
    assert_eq!(
        kinds(&[
            r#"{"type":"turn.failed","error":{"message":"the turn was interrupted"}}"#,
            r#"{"type":"turn.failed","error":{"message":"model broke"}}"#,
            r#"{"type":"error","message":"Reconnecting... 1/5"}"#,
        ]),
        vec![
            EventKind::Result {
                is_error: true,
                text: "the turn was interrupted".into(),
                status: "interrupted".into(),
                unverified: false,
            },
            EventKind::Result {
                is_error: true,
                text: "model broke".into(),
                status: "failed".into(),
                unverified: false,
            },
            EventKind::Error {
                message: "Reconnecting... 1/5".into()
            },
        ]
    );
}

#[test]
fn codex_approvals_pair_with_the_open_item_of_their_tool() {
    let lines = [
        &started("codex", false) as &str,
        r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"a","status":"in_progress"}}"#,
        r#"{"type":"item.started","item":{"id":"item_1","type":"file_change","changes":[],"status":"in_progress"}}"#,
        r#"{"type":"hangar.approval","request_id":"codex-0","tool_name":"fileChange","input":{"changes":[]},"tool_use_id":"call_hk_2"}"#,
        r#"{"type":"hangar.approval","request_id":"codex-1","tool_name":"commandExecution","input":{"command":"a"},"tool_use_id":"call_hk_1"}"#,
        r#"{"type":"hangar.approval","request_id":"codex-2","tool_name":"commandExecution","input":{"command":"b"},"tool_use_id":"call_hk_3"}"#,
    ];
    let ids: Vec<Option<String>> = kinds(&lines)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ApprovalRequested { tool_use_id, .. } => Some(tool_use_id),
            _ => None,
        })
        .collect();
    assert_eq!(
        ids,
        [
            Some("item_1".to_owned()),
            Some("item_0".to_owned()),
            Some("call_hk_3".to_owned())
        ],
        "an approval with no open item keeps the driver's id"
    );
}
