//! Scripting behaviour of the fake Anthropic server: expectations, per-session queues, waiting
//! for requests, multi-block replies.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed step fails the test"
)]

mod common;

use std::thread;
use std::time::Duration;

use common::{Client, MESSAGES, main_request, sse_events, start, text_of};
use hangar_testkit::{Block, FakeAnthropic, Script, Step};
use serde_json::json;

#[test]
fn expectations_are_checked_and_misses_recorded() {
    let fake = start(vec![
        Step::tool("Bash", json!({"command": "true"})).expect_user_text("run it"),
        Step::text("done").expect_tool_result(),
        Step::text("x").expect_user_text("never said"),
        Step::text("y").expect_tool_result(),
    ]);
    let mut client = Client::connect(&fake.base_url());
    client.post_json(MESSAGES, &main_request("please run it"));
    let continuation = json!({"model": "m", "stream": true, "messages": [
        {"role": "user", "content": "please run it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_hk_1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_hk_1",
                                      "content": "(Bash completed with no output)", "is_error": false}]},
        {"role": "system", "content": "The user sent a new message while you were working:\nsteer now"}
    ]});
    client.post_json(MESSAGES, &continuation);
    let third = client.post_json(MESSAGES, &main_request("something else"));
    assert_eq!(third.status, 200, "a missed expectation still replies");
    client.post_json(MESSAGES, &main_request("no tool result here"));

    let unexpected = fake.unexpected();
    assert_eq!(unexpected.len(), 2, "{unexpected:?}");
    assert!(unexpected[0].contains("never said"), "{unexpected:?}");
    assert!(unexpected[1].contains("tool_result"), "{unexpected:?}");

    let second = &fake.requests()[1];
    assert_eq!(
        second.tool_results(),
        vec![(
            "toolu_hk_1".to_owned(),
            "(Bash completed with no output)".to_owned(),
            false
        )]
    );
    assert!(second.newest_input_text().contains("steer now"));
    assert!(second.all_text().contains("please run it"));
    assert!(
        second
            .all_text()
            .contains("(Bash completed with no output)")
    );
    assert!(second.all_text().contains("steer now"));
    assert_eq!(
        second.last_user_text(),
        None,
        "last user message holds only a tool_result"
    );
}

#[test]
fn per_session_queues_take_precedence() {
    let script = Script::new([Step::text("global")]).session("sess-a", vec![Step::text("for a")]);
    let fake = FakeAnthropic::start(script).unwrap();
    let mut client = Client::connect(&fake.base_url());
    let body = main_request("x").to_string();
    client.send(
        "POST",
        MESSAGES,
        &[("X-Claude-Code-Session-Id", "sess-a")],
        &body,
    );
    assert_eq!(
        text_of(&sse_events(&client.read_response().text())),
        "for a"
    );
    client.send(
        "POST",
        MESSAGES,
        &[("X-Claude-Code-Session-Id", "sess-b")],
        &body,
    );
    assert_eq!(
        text_of(&sse_events(&client.read_response().text())),
        "global"
    );
    client.send(
        "POST",
        MESSAGES,
        &[("X-Claude-Code-Session-Id", "sess-a")],
        &body,
    );
    assert_eq!(client.read_response().status, 400, "sess-a queue exhausted");
    assert_eq!(fake.requests()[0].session_id(), Some("sess-a"));
    assert!(fake.unexpected()[0].contains("sess-a"));
}

#[test]
fn wait_for_requests_times_out_with_a_count() {
    let fake = start(vec![Step::text("a")]);
    let error = fake
        .wait_for_requests(1, Duration::from_millis(100))
        .unwrap_err();
    assert!(error.to_string().contains("got 0"), "{error}");
    let base = fake.base_url();
    let sender = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        Client::connect(&base).post_json(MESSAGES, &main_request("late"))
    });
    let requests = fake.wait_for_requests(1, Duration::from_secs(10)).unwrap();
    assert_eq!(requests[0].last_user_text().as_deref(), Some("late"));
    assert_eq!(sender.join().unwrap().status, 200);
}

#[test]
fn blocks_keep_their_order_and_indices() {
    let fake = start(vec![Step::blocks(vec![
        Block::Text("a".into()),
        Block::ToolUse {
            name: "Write".into(),
            input: json!({"file_path": "f", "content": "c"}),
        },
        Block::ToolUse {
            name: "Bash".into(),
            input: json!({"command": "ls"}),
        },
    ])]);
    let mut client = Client::connect(&fake.base_url());
    let events = sse_events(&client.post_json(MESSAGES, &main_request("x")).text());
    let starts: Vec<(u64, String)> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| {
            (
                d["index"].as_u64().unwrap(),
                d["content_block"]["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        starts,
        [
            (0, "text".into()),
            (1, "tool_use".into()),
            (2, "tool_use".into())
        ]
    );
}

#[test]
fn codex_blocks_map_onto_anthropic_shapes() {
    let fake = start(vec![
        Step::exec_with(
            "echo hi",
            json!({"description": "say hi", "command": "ignored"}),
        ),
        Step::text("partial").fail("overloaded mid-way"),
        Step::patch("*** Begin Patch\n*** End Patch"),
        Step::error(500, "boom"),
    ]);
    let mut client = Client::connect(&fake.base_url());
    let events = sse_events(&client.post_json(MESSAGES, &main_request("x")).text());
    let tool = events
        .iter()
        .find(|(_, d)| d["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(tool.1["content_block"]["name"], "Bash");
    let input: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&input).unwrap(),
        json!({"command": "echo hi", "description": "say hi"})
    );
    assert_eq!(events.last().unwrap().0, "message_stop");

    // `fail` ends the stream with an `error` event instead of message_delta / message_stop.
    let events = sse_events(&client.post_json(MESSAGES, &main_request("y")).text());
    assert_eq!(text_of(&events), "partial");
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(
        data["error"],
        json!({"type": "api_error", "message": "overloaded mid-way"})
    );
    assert!(!events.iter().any(|(n, _)| n == "message_stop"));

    // A patch cannot be served by the Anthropic fake: refused and recorded.
    let refused = client.post_json(MESSAGES, &main_request("z"));
    assert_eq!(refused.status, 400);
    assert_eq!(refused.header("x-should-retry"), Some("false"));
    let unexpected = fake.unexpected();
    assert_eq!(unexpected.len(), 1, "{unexpected:?}");
    assert!(unexpected[0].contains("patch"), "{unexpected:?}");

    // Errors keep the Anthropic shape here.
    let error = client.post_json(MESSAGES, &main_request("w"));
    assert_eq!(
        error.json(),
        json!({"type": "error", "error": {"type": "api_error", "message": "boom"}})
    );
}
