//! The fake Anthropic server over plain TCP: framing, tool deltas, errors, concurrency,
//! keep-alive, chunked request bodies, aborted streams and shutdown.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed step fails the test"
)]

mod common;

use std::io::Read;
use std::thread;
use std::time::{Duration, Instant};

use common::{Client, MESSAGES, main_request, sse_events, start, text_of};
use hangar_testkit::{RequestKind, Step};
use serde_json::{Value, json};

#[test]
fn streams_text_with_exact_sse_framing() {
    let fake = start(vec![Step::text("hello from the fake").chunks(3)]);
    assert!(fake.base_url().starts_with("http://127.0.0.1:"));
    let mut client = Client::connect(&fake.base_url());
    let response = client.post_json(MESSAGES, &main_request("say hi"));

    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    assert_eq!(response.header("transfer-encoding"), Some("chunked"));
    assert_eq!(response.header("connection"), Some("keep-alive"));
    let events = sse_events(&response.text());
    assert_eq!(response.chunks.len(), events.len(), "one event per chunk");
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let start = &events[0].1["message"];
    assert_eq!(start["model"], "claude-opus-5-5");
    assert_eq!(start["role"], "assistant");
    assert!(start["id"].as_str().unwrap().starts_with("msg_hk_"));
    assert_eq!(start["usage"]["input_tokens"], 11);
    assert_eq!(
        events[1].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    assert_eq!(text_of(&events), "hello from the fake");
    assert_eq!(events[6].1["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[6].1["usage"]["output_tokens"], 7);

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].kind, RequestKind::Main);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, MESSAGES);
    assert_eq!(requests[0].last_user_text().as_deref(), Some("say hi"));
    assert_eq!(requests[0].header("Content-Type"), Some("application/json"));
    assert!(fake.unexpected().is_empty());
    assert_eq!(fake.remaining_steps(), 0);
}

#[test]
fn tool_use_deltas_concatenate_to_the_input() {
    let input = json!({"command": "echo hi > made.txt", "description": "run cmd"});
    let fake = start(vec![
        Step::text("let me run it").and_tool("Bash", input.clone()),
        Step::tool("Write", json!({"file_path": "a.txt", "content": "é"})),
    ]);
    let mut client = Client::connect(&fake.base_url());
    let events = sse_events(&client.post_json(MESSAGES, &main_request("go")).text());

    assert_eq!(text_of(&events), "let me run it");
    let tool_start = events
        .iter()
        .find(|(_, d)| d["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(tool_start.1["index"], 1);
    assert_eq!(tool_start.1["content_block"]["name"], "Bash");
    assert_eq!(tool_start.1["content_block"]["input"], json!({}));
    let first_id = tool_start.1["content_block"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(first_id.starts_with("toolu_hk_"));
    let pieces = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .inspect(|(_, d)| assert_eq!(d["index"], 1))
        .count();
    assert!(pieces >= 2, "input split into at least two deltas");
    let joined: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&joined).unwrap(), input);
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");

    // A second tool call gets a different id.
    let events = sse_events(&client.post_json(MESSAGES, &main_request("more")).text());
    let second_id = events
        .iter()
        .find_map(|(_, d)| d["content_block"]["id"].as_str())
        .unwrap();
    assert_ne!(second_id, first_id);
    let joined: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(joined, r#"{"content":"é","file_path":"a.txt"}"#);
}

#[test]
fn exhausted_script_answers_400_and_is_recorded() {
    let fake = start(vec![]);
    let mut client = Client::connect(&fake.base_url());
    let response = client.post_json(MESSAGES, &main_request("anyone?"));
    assert_eq!(response.status, 400);
    assert_eq!(response.header("x-should-retry"), Some("false"));
    assert_eq!(
        response.json(),
        json!({"type": "error", "error": {"type": "invalid_request_error",
               "message": "hangar fake model: script exhausted"}})
    );
    let unexpected = fake.unexpected();
    assert_eq!(unexpected.len(), 1, "{unexpected:?}");
    assert!(unexpected[0].contains("script exhausted"), "{unexpected:?}");
    assert_eq!(
        fake.requests().len(),
        1,
        "still recorded as a model request"
    );
}

#[test]
fn scripted_http_errors_and_delay() {
    let fake = start(vec![
        Step::error(500, "boom").delay(Duration::from_millis(300)),
        Step::error(400, "bad request"),
        Step::text("recovered"),
    ]);
    let mut client = Client::connect(&fake.base_url());
    let started = Instant::now();
    let response = client.post_json(MESSAGES, &main_request("x"));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(response.status, 500);
    assert_eq!(
        response.json(),
        json!({"type": "error", "error": {"type": "api_error", "message": "boom"}})
    );
    let response = client.post_json(MESSAGES, &main_request("x"));
    assert_eq!(response.status, 400);
    assert_eq!(response.json()["error"]["type"], "invalid_request_error");
    let response = client.post_json(MESSAGES, &main_request("x"));
    assert_eq!(text_of(&sse_events(&response.text())), "recovered");
    assert!(fake.unexpected().is_empty());
}

#[test]
fn probes_count_tokens_and_unknown_routes_do_not_consume_steps() {
    let fake = start(vec![Step::text("main")]);
    let mut client = Client::connect(&fake.base_url());
    let probe = client.post_json(
        MESSAGES,
        &json!({"model": "claude-sonnet-4-5", "max_tokens": 1,
                "messages": [{"role": "user", "content": "Hi"}]}),
    );
    assert_eq!(probe.status, 200);
    let probe = probe.json();
    assert_eq!(probe["type"], "message");
    assert_eq!(probe["model"], "claude-sonnet-4-5");
    assert_eq!(probe["content"][0]["text"], "ok");
    let count = client.post_json(
        "/v1/messages/count_tokens?beta=true",
        &json!({"model": "m", "messages": []}),
    );
    assert_eq!(count.json(), json!({"input_tokens": 10}));
    client.send("GET", "/v1/models", &[], "");
    let missing = client.read_response();
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["type"], "not_found_error");
    let main = client.post_json("/v1/messages", &main_request("x"));
    assert_eq!(text_of(&sse_events(&main.text())), "main");

    let kinds: Vec<RequestKind> = fake.all_requests().iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            RequestKind::Probe,
            RequestKind::CountTokens,
            RequestKind::Other,
            RequestKind::Main
        ]
    );
    assert_eq!(fake.requests().len(), 1);
    let unexpected = fake.unexpected();
    assert_eq!(unexpected.len(), 1, "the 404 is unexpected: {unexpected:?}");
    assert!(unexpected[0].contains("GET /v1/models"));
}

#[test]
fn serves_connections_concurrently() {
    // A 10 s stream: a server serving one connection at a time could not answer the others
    // within the 5 s allowed below.
    let fake = start(vec![
        Step::slow_text(20, Duration::from_millis(500)),
        Step::text("fast"),
    ]);
    let base = fake.base_url();
    let mut slow = Client::connect(&base);
    slow.send(
        "POST",
        MESSAGES,
        &[("content-type", "application/json")],
        &main_request("slow").to_string(),
    );
    let (status, _) = slow.read_head();
    assert_eq!(status, 200);

    // While the slow stream is running, another connection is served at once…
    let started = Instant::now();
    let mut fast = Client::connect(&base);
    let response = fast.post_json(MESSAGES, &main_request("fast"));
    assert_eq!(text_of(&sse_events(&response.text())), "fast");
    // …and so are parallel count_tokens calls (Claude issues many at once).
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let base = base.clone();
            thread::spawn(move || {
                Client::connect(&base)
                    .post_json("/v1/messages/count_tokens", &json!({"messages": []}))
                    .json()
            })
        })
        .collect();
    for worker in workers {
        assert_eq!(worker.join().unwrap(), json!({"input_tokens": 10}));
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "served while the slow stream ran ({:?})",
        started.elapsed()
    );
    // The slow stream is still going; its first delta arrives in order.
    let mut first = String::new();
    while !first.contains("content_block_delta") {
        first = String::from_utf8(slow.read_chunk().unwrap()).unwrap();
    }
    assert!(first.contains("chunk0"), "{first}");
    assert_eq!(fake.all_requests().len(), 10);
    drop(slow);
    fake.wait_for_aborted_streams(1, Duration::from_secs(10))
        .unwrap();
}

#[test]
fn keeps_the_connection_alive_across_requests() {
    let fake = start(vec![
        Step::text("one"),
        Step::tool("Read", json!({"file_path": "/x"})),
    ]);
    let mut client = Client::connect(&fake.base_url());
    let first = client.post_json(MESSAGES, &main_request("first"));
    assert_eq!(text_of(&sse_events(&first.text())), "one");
    let count = client.post_json("/v1/messages/count_tokens", &json!({"messages": []}));
    assert_eq!(count.status, 200);
    let second = client.post_json(MESSAGES, &main_request("second"));
    assert_eq!(second.status, 200);
    assert!(second.text().contains("\"name\":\"Read\""));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].last_user_text().as_deref(), Some("second"));
}

#[test]
fn accepts_chunked_request_bodies() {
    let fake = start(vec![Step::text("chunked ok")]);
    let body = main_request("sent in chunks").to_string();
    let (a, rest) = body.split_at(10);
    let (b, c) = rest.split_at(rest.len() / 2);
    let mut client = Client::connect(&fake.base_url());
    client.send_chunked(MESSAGES, &[a, b, c]);
    let response = client.read_response();
    assert_eq!(text_of(&sse_events(&response.text())), "chunked ok");
    // The connection is still usable afterwards.
    let count = client.post_json("/v1/messages/count_tokens", &json!({}));
    assert_eq!(count.status, 200);
    let recorded = &fake.requests()[0];
    assert_eq!(recorded.body, main_request("sent in chunks"));
    assert_eq!(recorded.last_user_text().as_deref(), Some("sent in chunks"));
}

#[test]
fn client_hanging_up_mid_stream_is_counted_not_fatal() {
    let fake = start(vec![
        Step::slow_text(20, Duration::from_millis(50)),
        Step::text("after"),
    ]);
    let mut client = Client::connect(&fake.base_url());
    client.send(
        "POST",
        MESSAGES,
        &[],
        &main_request("interrupt me").to_string(),
    );
    assert_eq!(client.read_head().0, 200);
    assert!(client.read_chunk().is_some());
    drop(client);
    assert_eq!(
        fake.wait_for_aborted_streams(1, Duration::from_secs(10))
            .unwrap(),
        1
    );
    // The server goes on serving.
    let mut again = Client::connect(&fake.base_url());
    let response = again.post_json(MESSAGES, &main_request("next"));
    assert_eq!(text_of(&sse_events(&response.text())), "after");
    assert_eq!(fake.aborted_streams(), 1);
    assert!(fake.unexpected().is_empty());
}

#[test]
fn drop_closes_idle_and_streaming_connections_promptly() {
    let fake = start(vec![Step::slow_text(100, Duration::from_secs(1))]);
    let mut idle = Client::connect(&fake.base_url());
    let mut streaming = Client::connect(&fake.base_url());
    streaming.send("POST", MESSAGES, &[], &main_request("x").to_string());
    assert_eq!(streaming.read_head().0, 200);
    // Make sure the idle connection was accepted before dropping.
    assert_eq!(
        idle.post_json("/v1/messages/count_tokens", &json!({}))
            .status,
        200
    );
    let started = Instant::now();
    drop(fake);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let mut rest = Vec::new();
    let _ = idle.reader.read_to_end(&mut rest);
    assert!(rest.is_empty());
    let _ = streaming.reader.read_to_end(&mut rest);
    assert!(started.elapsed() < Duration::from_secs(5));
}
