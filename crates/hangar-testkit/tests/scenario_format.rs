//! The JSON scenario format maps onto `Script` / `Step`.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed step fails the test"
)]

use std::time::Duration;

use hangar_testkit::{Block, Expect, Script, Step, TestkitError};
use serde_json::json;

#[test]
fn every_step_form_maps_onto_steps() {
    let script = Script::from_json_str(
        r#"{
          "steps": [
            {"text": "hello"},
            {"tool": "Bash", "input": {"command": "echo hi > made.txt", "description": "run cmd"}},
            {"slow_text": {"chunks": 6, "delay_ms": 1000}},
            {"slow_text": {"chunks": 4, "delay_ms": 500, "text": "custom slow text"}},
            {"error": {"status": 500, "message": "boom"}},
            {"error": {"status": 400, "body": {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}}},
            {"blocks": [{"text": "writing"}, {"tool": "Write", "input": {"file_path": "a.txt", "content": "x"}}],
             "expect": "after_tool_result"},
            {"text": "ok", "expect": {"user_text_contains": "steer me"}, "delay_ms": 200,
             "chunks": 3, "chunk_delay_ms": 100}
          ],
          "sessions": {"sess-1": [{"tool": "Read"}]}
        }"#,
    )
    .unwrap();

    let steps: Vec<Step> = script.steps.iter().cloned().collect();
    assert_eq!(steps[0], Step::text("hello"));
    assert_eq!(
        steps[1],
        Step::tool(
            "Bash",
            json!({"command": "echo hi > made.txt", "description": "run cmd"})
        )
    );
    assert_eq!(steps[2], Step::slow_text(6, Duration::from_secs(1)));
    assert_eq!(steps[3].reply, vec![Block::Text("custom slow text".into())]);
    assert_eq!(steps[3].chunks, 4);
    assert_eq!(steps[3].chunk_delay, Some(Duration::from_millis(500)));
    assert_eq!(steps[4], Step::error(500, "boom"));
    assert_eq!(
        steps[4].http_error,
        Some((
            500,
            json!({"type": "error", "error": {"type": "api_error", "message": "boom"}})
        ))
    );
    assert_eq!(
        steps[5].http_error.as_ref().unwrap().1["error"]["message"],
        "bad"
    );
    assert_eq!(
        steps[6],
        Step::text("writing")
            .and_tool("Write", json!({"file_path": "a.txt", "content": "x"}))
            .expect(Expect::AfterToolResult)
    );
    assert_eq!(
        steps[7],
        Step::text("ok")
            .expect_user_text("steer me")
            .delay(Duration::from_millis(200))
            .chunks(3)
            .chunk_delay(Duration::from_millis(100))
    );
    assert_eq!(
        script.sessions["sess-1"].front(),
        Some(&Step::tool("Read", json!({})))
    );
    assert_eq!(script.remaining(), 9);
}

#[test]
fn malformed_steps_are_rejected_with_their_position() {
    for (text, needle) in [
        (r#"{"steps":[{"text":"a","tool":"Bash"}]}"#, "steps[0]"),
        (r#"{"steps":[{"text":"a"},{}]}"#, "steps[1]"),
        (r#"{"steps":[{"text":"a","input":{}}]}"#, "input"),
        (r#"{"steps":[{"txet":"a"}]}"#, "txet"),
        (
            r#"{"steps":[{"blocks":[{"text":"a","tool":"B"}]}]}"#,
            "blocks[0]",
        ),
        (
            r#"{"steps":[{"error":{"status":500,"message":"m","body":{}}}]}"#,
            "not both",
        ),
        (
            r#"{"steps":[{"text":"a","expect":"sometimes"}]}"#,
            "sometimes",
        ),
        (r#"{"sessions":{"s":[{"nope":1}]}}"#, "nope"),
        (r#"{"sessions":{"s":[{}]}}"#, "sessions.s[0]"),
        ("not json", "invalid scenario"),
    ] {
        let error = Script::from_json_str(text).unwrap_err();
        assert!(
            matches!(error, TestkitError::Scenario(_)),
            "{text}: {error}"
        );
        assert!(error.to_string().contains(needle), "{text}: {error}");
    }
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(&good, r#"{"steps":[{"text":"hi"}]}"#).unwrap();
    assert_eq!(
        Script::load(&good).unwrap(),
        Script::new([Step::text("hi")])
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"steps":[{}]}"#).unwrap();
    assert!(
        Script::load(&bad)
            .unwrap_err()
            .to_string()
            .contains("bad.json")
    );
    let missing = dir.path().join("missing.json");
    assert!(matches!(
        Script::load(&missing).unwrap_err(),
        TestkitError::Io { .. }
    ));
}

#[test]
fn codex_step_forms_map_onto_steps() {
    let script = Script::from_json_str(
        r#"{
          "steps": [
            {"exec": "echo hi > made.txt"},
            {"exec": {"cmd": "sleep 5; echo late", "yield_time_ms": 30000, "workdir": "sub"}},
            {"patch": "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch",
             "expect": "after_tool_result"},
            {"failed": "the model broke"},
            {"text": "partial", "failed": "broke mid-way", "chunks": 2},
            {"blocks": [{"text": "two calls"}, {"exec": "ls"}, {"exec": {"cmd": "pwd", "login": false}},
                        {"patch": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"}]}
          ],
          "sessions": {"01a2299f-thread": [{"exec": "true"}]}
        }"#,
    )
    .unwrap();
    let steps: Vec<Step> = script.steps.iter().cloned().collect();
    assert_eq!(steps[0], Step::exec("echo hi > made.txt"));
    assert_eq!(
        steps[1],
        Step::exec_with(
            "sleep 5; echo late",
            json!({"yield_time_ms": 30000, "workdir": "sub"})
        )
    );
    assert_eq!(
        steps[2],
        Step::patch("*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch")
            .expect_tool_result()
    );
    assert_eq!(steps[3], Step::failed("the model broke"));
    assert!(steps[3].reply.is_empty());
    assert_eq!(
        steps[4],
        Step::text("partial").fail("broke mid-way").chunks(2)
    );
    let mut extra = serde_json::Map::new();
    extra.insert("login".into(), json!(false));
    assert_eq!(
        steps[5].reply,
        vec![
            Block::Text("two calls".into()),
            Block::exec("ls"),
            Block::Exec {
                cmd: "pwd".into(),
                extra
            },
            Block::Patch("*** Begin Patch\n*** Delete File: a.txt\n*** End Patch".into()),
        ]
    );
    assert!(steps[5].has_tool_use());
    assert!(!steps[4].has_tool_use());
    assert_eq!(
        script.sessions["01a2299f-thread"].front(),
        Some(&Step::exec("true"))
    );
}

#[test]
fn malformed_codex_steps_are_rejected() {
    for (text, needle) in [
        (r#"{"steps":[{"exec":"a","patch":"b"}]}"#, "exactly one"),
        (r#"{"steps":[{"exec":{"yield_time_ms":1}}]}"#, "cmd"),
        (r#"{"steps":[{"exec":{"cmd":5}}]}"#, "cmd"),
        (r#"{"steps":[{"exec":"a","input":{}}]}"#, "input"),
        (
            r#"{"steps":[{"error":{"status":500},"failed":"x"}]}"#,
            "failed",
        ),
        (
            r#"{"steps":[{"failed":"x","text":"a","exec":"b"}]}"#,
            "steps[0]",
        ),
        (
            r#"{"steps":[{"blocks":[{"exec":"a","patch":"b"}]}]}"#,
            "blocks[0]",
        ),
        (r#"{"steps":[{"blocks":[{"patch":1}]}]}"#, "invalid"),
    ] {
        let error = Script::from_json_str(text).unwrap_err();
        assert!(
            matches!(error, TestkitError::Scenario(_)),
            "{text}: {error}"
        );
        assert!(error.to_string().contains(needle), "{text}: {error}");
    }
}
