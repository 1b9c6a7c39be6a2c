//! The check every end-to-end test's answers go through (`common/answers.rs`) catches what it is
//! for: an answer missing a field, a field renamed, a word outside its closed set, a path the
//! document does not have. (The end-to-end suites run it on real answers; this runs it on the
//! document the server serves, without a server.)
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

#[path = "common/answers.rs"]
mod answers;

use serde_json::json;

fn run() -> serde_json::Value {
    json!({"id": "run-1", "turn_id": "turn-1", "state": "ended", "log_cursor": 10,
           "driver_pid": null, "has_key": false, "created_at": 1, "ended_at": 2,
           "log": {"sealed": true, "trusted": true}})
}

#[test]
fn a_run_as_the_server_answers_it_holds() {
    let doc = hangar_server::api_doc::openapi();
    assert_eq!(
        answers::mismatch(&doc, "GET", "/v1/runs/run-1", 200, &run()),
        None
    );
}

#[test]
fn a_missing_renamed_or_unknown_field_value_fails() {
    let doc = hangar_server::api_doc::openapi();
    let mut renamed = run();
    let state = renamed.as_object_mut().unwrap().remove("state").unwrap();
    renamed["run_state"] = state;
    let why = answers::mismatch(&doc, "GET", "/v1/runs/run-1", 200, &renamed).unwrap();
    assert!(why.contains("state"), "{why}");

    let mut unknown = run();
    unknown["state"] = json!("paused");
    assert!(answers::mismatch(&doc, "GET", "/v1/runs/run-1", 200, &unknown).is_some());

    let mut null_where_never = run();
    null_where_never["has_key"] = json!(null);
    assert!(answers::mismatch(&doc, "GET", "/v1/runs/run-1", 200, &null_where_never).is_some());

    // An error answer is held to the error body.
    let error = json!({"error": {"code": "not_found", "message": "no run run-9"}});
    assert_eq!(
        answers::mismatch(&doc, "GET", "/v1/runs/run-9", 404, &error),
        None
    );
    let bad_error = json!({"error": "no run"});
    assert!(answers::mismatch(&doc, "GET", "/v1/runs/run-9", 404, &bad_error).is_some());

    assert!(answers::mismatch(&doc, "GET", "/v1/nothing/here", 200, &json!({})).is_some());
}
