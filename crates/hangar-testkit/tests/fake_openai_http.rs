//! The fake OpenAI Responses server over plain TCP: SSE framing for text, exec, patch and
//! multi-item replies, failures, HTTP errors, exhausted scripts, unknown routes, sessions,
//! aborted streams and shutdown.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed step fails the test"
)]

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::{Client, RESPONSES, deltas_of, names_of, responses_request, sse_events, start_openai};
use hangar_testkit::{FakeOpenAi, RequestKind, Script, Step};
use serde_json::{Value, json};

const USAGE: &str = r#"{"input_tokens":100,"input_tokens_details":{"cached_tokens":20},"output_tokens":10,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":110}"#;

/// Checks what every Responses stream shares: headers, one event per chunk, increasing
/// `sequence_number`s from 0, created / in_progress first, one response id throughout.
fn check_stream(response: &common::Response) -> Vec<(String, Value)> {
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    assert_eq!(response.header("transfer-encoding"), Some("chunked"));
    assert!(
        response
            .header("x-request-id")
            .unwrap()
            .starts_with("req_hk_")
    );
    let events = sse_events(&response.text());
    assert_eq!(response.chunks.len(), events.len(), "one event per chunk");
    for (i, (_, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], i, "{data}");
    }
    assert_eq!(events[0].0, "response.created");
    assert_eq!(events[1].0, "response.in_progress");
    let id = events[0].1["response"]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("resp_hk_"), "{id}");
    assert_eq!(events[0].1["response"]["status"], "in_progress");
    assert_eq!(events[0].1["response"]["output"], json!([]));
    assert_eq!(events.last().unwrap().1["response"]["id"], id.as_str());
    events
}

#[test]
fn streams_text_in_the_full_event_form() {
    let fake = start_openai(vec![Step::text("hello from the fake").chunks(3)]);
    assert!(fake.origin().starts_with("http://127.0.0.1:"));
    assert_eq!(fake.base_url(), format!("{}/v1", fake.origin()));
    assert_eq!(fake.origin(), format!("http://{}", fake.addr()));
    let mut client = Client::connect(&fake.origin());
    let response = client.post_json(RESPONSES, &responses_request("say hi"));
    assert_eq!(response.header("connection"), Some("keep-alive"));
    let events = check_stream(&response);
    assert_eq!(
        names_of(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(events[0].1["response"]["model"], "gpt-5.5");
    let added = &events[2].1;
    assert_eq!(added["output_index"], 0);
    assert_eq!(
        added["item"],
        json!({"id": "msg_hk_1_0", "type": "message", "status": "in_progress",
               "role": "assistant", "content": []})
    );
    assert_eq!(
        events[3].1["part"],
        json!({"type": "output_text", "text": "", "annotations": []})
    );
    for (_, data) in &events[3..=8] {
        assert_eq!(data["item_id"], "msg_hk_1_0");
        assert_eq!(data["output_index"], 0);
        assert_eq!(data["content_index"], 0);
    }
    assert_eq!(
        deltas_of(&events, "response.output_text.delta"),
        "hello from the fake"
    );
    assert_eq!(events[7].1["text"], "hello from the fake");
    assert_eq!(events[8].1["part"]["text"], "hello from the fake");
    let item = json!({"id": "msg_hk_1_0", "type": "message", "status": "completed",
                      "role": "assistant", "content": [
                          {"type": "output_text", "text": "hello from the fake", "annotations": []}]});
    assert_eq!(events[9].1["item"], item);
    let completed = &events[10].1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"], json!([item]));
    assert_eq!(completed["usage"].to_string(), USAGE);

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].kind, RequestKind::Main);
    assert_eq!(requests[0].path, RESPONSES);
    assert!(requests[0].is_responses());
    assert_eq!(requests[0].model(), Some("gpt-5.5"));
    assert_eq!(requests[0].last_user_text().as_deref(), Some("say hi"));
    assert!(fake.unexpected().is_empty(), "{:?}", fake.unexpected());
    assert_eq!(fake.remaining_steps(), 0);
}

#[test]
fn exec_is_an_exec_command_function_call_with_unique_ids() {
    let fake = start_openai(vec![
        Step::exec("echo hi > made.txt"),
        Step::exec_with(
            "sleep 2; echo late",
            json!({"yield_time_ms": 30000, "cmd": "ignored"}),
        ),
    ]);
    let mut client = Client::connect(&fake.origin());
    let events = check_stream(&client.post_json(RESPONSES, &responses_request("run it")));
    assert_eq!(
        names_of(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(
        events[2].1["item"],
        json!({"id": "fc_hk_1", "type": "function_call", "status": "in_progress",
               "call_id": "call_hk_1", "name": "exec_command", "arguments": ""})
    );
    let arguments = deltas_of(&events, "response.function_call_arguments.delta");
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"cmd": "echo hi > made.txt"})
    );
    assert_eq!(events[5].1["arguments"], arguments.as_str());
    assert_eq!(events[5].1["item_id"], "fc_hk_1");
    let done = &events[6].1["item"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["call_id"], "call_hk_1");
    assert_eq!(done["arguments"], arguments.as_str());
    assert_eq!(events[7].1["response"]["output"], json!([done]));

    // A second call gets fresh ids; extra arguments are merged, a `cmd` among them ignored.
    let events = check_stream(&client.post_json(RESPONSES, &responses_request("more")));
    let done = &events
        .iter()
        .find(|(n, _)| n == "response.output_item.done")
        .unwrap()
        .1["item"];
    assert_eq!(done["call_id"], "call_hk_2");
    assert_eq!(done["id"], "fc_hk_2");
    assert_eq!(
        serde_json::from_str::<Value>(done["arguments"].as_str().unwrap()).unwrap(),
        json!({"cmd": "sleep 2; echo late", "yield_time_ms": 30000})
    );
    assert_ne!(events[0].1["response"]["id"], "resp_hk_1");
}

#[test]
fn patch_is_an_apply_patch_custom_tool_call() {
    let patch = "*** Begin Patch\n*** Add File: hello.txt\n+héllo\n*** End Patch";
    let fake = start_openai(vec![Step::patch(patch).chunks(4)]);
    let mut client = Client::connect(&fake.origin());
    let events = check_stream(&client.post_json(RESPONSES, &responses_request("edit")));
    assert_eq!(
        names_of(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(
        events[2].1["item"],
        json!({"id": "ctc_hk_1", "type": "custom_tool_call", "status": "in_progress",
               "call_id": "call_hk_1", "name": "apply_patch", "input": ""})
    );
    assert_eq!(
        deltas_of(&events, "response.custom_tool_call_input.delta"),
        patch
    );
    assert_eq!(events[7].1["input"], patch);
    assert_eq!(events[7].1["item_id"], "ctc_hk_1");
    assert_eq!(
        events[8].1["item"],
        json!({"id": "ctc_hk_1", "type": "custom_tool_call", "status": "completed",
               "call_id": "call_hk_1", "name": "apply_patch", "input": patch})
    );
}

#[test]
fn several_items_keep_their_order_and_output_indices() {
    let fake = start_openai(vec![
        Step::text("let me look")
            .and_exec("ls")
            .and_tool("write_stdin", json!({"session_id": 7, "chars": ""}))
            .and_patch("*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"),
    ]);
    let mut client = Client::connect(&fake.origin());
    let events = check_stream(&client.post_json(RESPONSES, &responses_request("go")));
    let added: Vec<(u64, String, String)> = events
        .iter()
        .filter(|(n, _)| n == "response.output_item.added")
        .map(|(_, d)| {
            (
                d["output_index"].as_u64().unwrap(),
                d["item"]["type"].as_str().unwrap().to_owned(),
                d["item"]["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        added,
        [
            (0, "message".into(), "msg_hk_1_0".into()),
            (1, "function_call".into(), "fc_hk_1".into()),
            (2, "function_call".into(), "fc_hk_2".into()),
            (3, "custom_tool_call".into(), "ctc_hk_3".into()),
        ]
    );
    let output = events.last().unwrap().1["response"]["output"]
        .as_array()
        .unwrap()
        .clone();
    let names: Vec<&str> = output
        .iter()
        .map(|item| item["name"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(names, ["-", "exec_command", "write_stdin", "apply_patch"]);
    assert_eq!(
        output[2]["arguments"],
        json!({"chars": "", "session_id": 7}).to_string()
    );
    // Every event of an item carries that item's output_index.
    for (name, data) in &events {
        if let Some(item_id) = data["item_id"].as_str() {
            let index = added.iter().find(|(_, _, id)| id == item_id).unwrap().0;
            assert_eq!(data["output_index"], index, "{name}");
        }
    }
}

#[test]
fn failed_steps_end_with_response_failed() {
    let fake = start_openai(vec![
        Step::failed("the model broke"),
        Step::text("partial").fail("broke mid-way"),
    ]);
    let mut client = Client::connect(&fake.origin());
    let events = check_stream(&client.post_json(RESPONSES, &responses_request("x")));
    assert_eq!(
        names_of(&events),
        [
            "response.created",
            "response.in_progress",
            "response.failed"
        ]
    );
    let failed = &events[2].1["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["message"], "the model broke");
    assert_eq!(failed["error"]["code"], "server_error");

    let events = check_stream(&client.post_json(RESPONSES, &responses_request("y")));
    assert_eq!(deltas_of(&events, "response.output_text.delta"), "partial");
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "response.failed");
    assert_eq!(last["response"]["error"]["message"], "broke mid-way");
    assert_eq!(
        last["response"]["output"][0]["content"][0]["text"],
        "partial"
    );
    assert!(!response_has(&events, "response.completed"));
    assert!(fake.unexpected().is_empty());
}

fn response_has(events: &[(String, Value)], name: &str) -> bool {
    events.iter().any(|(n, _)| n == name)
}

#[test]
fn scripted_http_errors_use_the_openai_shape() {
    let raw = json!({"error": {"message": "raw body", "type": "custom"}});
    let fake = start_openai(vec![
        Step::error(500, "boom").delay(Duration::from_millis(300)),
        Step::error(429, "slow down"),
        Step::http_error(400, raw.clone()),
        Step::text("recovered"),
    ]);
    let mut client = Client::connect(&fake.origin());
    let started = Instant::now();
    let response = client.post_json(RESPONSES, &responses_request("x"));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(response.status, 500);
    assert_eq!(
        response.json(),
        json!({"error": {"message": "boom", "type": "server_error", "param": null, "code": null}})
    );
    let response = client.post_json(RESPONSES, &responses_request("x"));
    assert_eq!(response.status, 429);
    assert_eq!(response.json()["error"]["type"], "rate_limit_error");
    let response = client.post_json(RESPONSES, &responses_request("x"));
    assert_eq!(response.status, 400);
    assert_eq!(response.json(), raw, "a raw body is sent as is");
    let response = client.post_json(RESPONSES, &responses_request("x"));
    let events = check_stream(&response);
    assert_eq!(
        deltas_of(&events, "response.output_text.delta"),
        "recovered"
    );
    assert!(fake.unexpected().is_empty());
    assert_eq!(fake.requests().len(), 4);
}

#[test]
fn exhausted_script_answers_400_and_is_recorded() {
    let fake = start_openai(vec![]);
    let mut client = Client::connect(&fake.origin());
    let response = client.post_json(RESPONSES, &responses_request("anyone?"));
    assert_eq!(response.status, 400);
    assert_eq!(
        response.json(),
        json!({"error": {"message": "hangar fake model: script exhausted",
                         "type": "invalid_request_error", "param": null, "code": null}})
    );
    let unexpected = fake.unexpected();
    assert_eq!(unexpected.len(), 1, "{unexpected:?}");
    assert!(unexpected[0].contains("script exhausted"), "{unexpected:?}");
    assert!(
        unexpected[0].contains("POST /v1/responses"),
        "{unexpected:?}"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "still recorded as a model request"
    );
}

#[test]
fn other_routes_and_non_streaming_requests_are_404_and_unexpected() {
    let fake = start_openai(vec![Step::text("main")]);
    let mut client = Client::connect(&fake.origin());
    client.send("GET", "/v1/models", &[], "");
    let models = client.read_response();
    assert_eq!(models.status, 404);
    assert_eq!(models.json()["error"]["type"], "not_found_error");
    let mut not_streaming = responses_request("x");
    not_streaming["stream"] = json!(false);
    assert_eq!(client.post_json(RESPONSES, &not_streaming).status, 404);
    assert_eq!(
        client
            .post_json("/v1/messages", &responses_request("x"))
            .status,
        404
    );
    client.send("POST", RESPONSES, &[], "not json");
    assert_eq!(client.read_response().status, 400);
    // None of them consumed the step.
    let main = client.post_json("/v1/responses?x=1", &responses_request("x"));
    let events = check_stream(&main);
    assert_eq!(deltas_of(&events, "response.output_text.delta"), "main");

    let kinds: Vec<RequestKind> = fake.all_requests().iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            RequestKind::Other,
            RequestKind::Other,
            RequestKind::Other,
            RequestKind::Other,
            RequestKind::Main
        ]
    );
    let unexpected = fake.unexpected();
    assert_eq!(unexpected.len(), 4, "{unexpected:?}");
    assert!(unexpected[0].contains("GET /v1/models"), "{unexpected:?}");
    assert!(
        unexpected[1].contains("not a streaming request"),
        "{unexpected:?}"
    );
    assert!(
        unexpected[3].contains("not a JSON object"),
        "{unexpected:?}"
    );
}

#[test]
fn session_queues_follow_the_session_id_header() {
    let script = Script::new([Step::text("global")]).session("thread-a", vec![Step::text("for a")]);
    let fake = FakeOpenAi::start(script).unwrap();
    let mut client = Client::connect(&fake.origin());
    let body = responses_request("x").to_string();
    for (session, expected) in [("thread-a", "for a"), ("thread-b", "global")] {
        client.send(
            "POST",
            RESPONSES,
            &[("session-id", session), ("thread-id", session)],
            &body,
        );
        let events = sse_events(&client.read_response().text());
        assert_eq!(deltas_of(&events, "response.output_text.delta"), expected);
    }
    let requests = fake.requests();
    assert_eq!(requests[0].session_id(), Some("thread-a"));
    assert_eq!(requests[0].thread_id(), Some("thread-a"));
    assert_eq!(requests[1].session_id(), Some("thread-b"));
}

#[test]
fn responses_helpers_read_codex_bodies() {
    let fake = start_openai(vec![
        Step::exec("echo hi").expect_user_text("run it"),
        Step::text("seen").expect_tool_result(),
        Step::text("steered").expect_user_text("steer now"),
        Step::text("x").expect_tool_result(),
    ]);
    let mut client = Client::connect(&fake.origin());
    client.post_json(RESPONSES, &responses_request("please run it"));
    let mut continuation = responses_request("please run it");
    let input = continuation["input"].as_array_mut().unwrap();
    input.extend([
        json!({"type": "function_call", "id": "fc_hk_1", "call_id": "call_hk_1",
               "name": "exec_command", "arguments": "{\"cmd\":\"echo hi\"}"}),
        json!({"type": "function_call_output", "call_id": "call_hk_1",
               "output": "Process exited with code 0\nOutput:\nhi\n"}),
        json!({"type": "custom_tool_call", "id": "ctc_hk_2", "call_id": "call_hk_2",
               "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}),
        json!({"type": "custom_tool_call_output", "call_id": "call_hk_2",
               "output": [{"type": "input_text", "text": "Success."}]}),
    ]);
    client.post_json(RESPONSES, &continuation);
    // A steer after the model answered: a new user message, no tool output since.
    let mut steer = continuation.clone();
    let input = steer["input"].as_array_mut().unwrap();
    input.extend([
        json!({"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": "seen"}]}),
        json!({"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "steer now"}]}),
    ]);
    client.post_json(RESPONSES, &steer);
    client.post_json(RESPONSES, &steer);

    let unexpected = fake.unexpected();
    assert_eq!(unexpected.len(), 1, "{unexpected:?}");
    assert!(unexpected[0].contains("step 4"), "{unexpected:?}");
    assert!(unexpected[0].contains("tool_result"), "{unexpected:?}");

    let requests = fake.requests();
    let second = &requests[1];
    assert!(second.last_user_has_tool_result());
    assert_eq!(
        second.tool_outputs(),
        vec![
            (
                "call_hk_1".to_owned(),
                "Process exited with code 0\nOutput:\nhi\n".to_owned()
            ),
            ("call_hk_2".to_owned(), "Success.".to_owned()),
        ]
    );
    assert!(!second.tool_results()[0].2);
    assert_eq!(
        second.tool_calls(),
        vec![
            (
                "call_hk_1".to_owned(),
                "exec_command".to_owned(),
                "{\"cmd\":\"echo hi\"}".to_owned()
            ),
            (
                "call_hk_2".to_owned(),
                "apply_patch".to_owned(),
                "*** Begin Patch\n*** End Patch".to_owned()
            ),
        ]
    );
    assert_eq!(
        second.last_user_text().as_deref(),
        Some("please run it"),
        "tool outputs are items of their own"
    );
    assert_eq!(second.newest_input_text(), "");
    let all = second.all_text();
    for needle in ["You are Codex.", "please run it", "hi\n", "Success."] {
        assert!(all.contains(needle), "{needle:?} in {all:?}");
    }
    let third = &requests[2];
    assert!(!third.last_user_has_tool_result());
    assert_eq!(third.newest_input_text(), "steer now");
    assert_eq!(third.last_user_text().as_deref(), Some("steer now"));
    assert!(third.all_text().contains("seen"));
}

#[test]
fn slow_text_streams_slowly_and_a_hang_up_is_counted() {
    let fake = start_openai(vec![
        Step::slow_text(20, Duration::from_millis(50)),
        Step::text("after"),
    ]);
    let mut client = Client::connect(&fake.origin());
    client.send(
        "POST",
        RESPONSES,
        &[],
        &responses_request("interrupt me").to_string(),
    );
    assert_eq!(client.read_head().0, 200);
    let mut next_delta = || loop {
        let chunk = String::from_utf8(client.read_chunk().unwrap()).unwrap();
        if chunk.starts_with("event: response.output_text.delta\n") {
            return chunk;
        }
    };
    let first = next_delta();
    assert!(first.contains(r#""delta":"chunk0"#), "{first}");
    let started = Instant::now();
    next_delta();
    next_delta();
    assert!(
        started.elapsed() >= Duration::from_millis(80),
        "each delta waits 50 ms: {:?}",
        started.elapsed()
    );
    drop(client);
    assert_eq!(
        fake.wait_for_aborted_streams(1, Duration::from_secs(10))
            .unwrap(),
        1
    );
    let mut again = Client::connect(&fake.origin());
    let events = sse_events(
        &again
            .post_json(RESPONSES, &responses_request("next"))
            .text(),
    );
    assert_eq!(deltas_of(&events, "response.output_text.delta"), "after");
    assert!(fake.unexpected().is_empty());
}

#[test]
fn drop_closes_streaming_connections_promptly() {
    let fake = start_openai(vec![Step::slow_text(100, Duration::from_secs(1))]);
    let mut streaming = Client::connect(&fake.origin());
    streaming.send("POST", RESPONSES, &[], &responses_request("x").to_string());
    assert_eq!(streaming.read_head().0, 200);
    let started = Instant::now();
    drop(fake);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let mut rest = Vec::new();
    let _ = streaming.reader.read_to_end(&mut rest);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn wait_for_requests_times_out_with_a_count() {
    let fake = start_openai(vec![Step::text("a")]);
    let error = fake
        .wait_for_requests(1, Duration::from_millis(100))
        .unwrap_err();
    assert!(error.to_string().contains("got 0"), "{error}");
    let origin = fake.origin();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        Client::connect(&origin).post_json(RESPONSES, &responses_request("late"))
    });
    let requests = fake.wait_for_requests(1, Duration::from_secs(10)).unwrap();
    assert_eq!(requests[0].last_user_text().as_deref(), Some("late"));
    assert_eq!(sender.join().unwrap().status, 200);
}
