//! The JSON shapes the API returns for the store's records.

use hangar_store::{Approval, Event, Run, Session, Turn};
use serde_json::{Value, json};

pub fn session(s: &Session) -> Value {
    json!({
        "id": s.id, "sandbox_id": s.sandbox_id, "harness": s.harness.as_str(), "policy": s.policy.as_str(),
        "harness_session_id": s.harness_session_id, "options": s.options, "turn_count": s.turn_count,
        "created_at": s.created_at,
    })
}

pub fn turn(t: &Turn) -> Value {
    json!({
        "id": t.id, "session_id": t.session_id, "index": t.index, "run_id": t.run_id, "state": t.state.as_str(),
        "status": t.status, "reason": t.reason, "prompt": t.prompt, "manifest": t.manifest,
        "verify_state": t.verify_state,
        "usage": {"input_tokens": t.usage.input, "output_tokens": t.usage.output, "cached_input_tokens": t.usage.cached},
        "cost_usd": t.cost_usd, "created_at": t.created_at, "started_at": t.started_at, "ended_at": t.ended_at,
        "git_trees": t.git_trees,
    })
}

pub fn run(r: &Run) -> Value {
    json!({
        "id": r.id, "turn_id": r.turn_id, "state": r.state.as_str(), "log_cursor": r.log_cursor,
        "driver_pid": r.driver_pid, "has_key": r.has_key, "created_at": r.created_at, "ended_at": r.ended_at,
        "log": r.watch_state.as_ref().and_then(|s| s.get("log")),
    })
}

pub fn approval(a: &Approval) -> Value {
    json!({
        "run_id": a.run_id, "request_id": a.request_id, "tool_name": a.tool_name, "input": a.input,
        "requested_at": a.requested_at, "decision": a.decision.map(|d| d.as_str()),
        "answered_by": a.answered_by, "answered_at": a.answered_at,
    })
}

pub fn event(e: &Event) -> Value {
    json!({"id": e.id, "session_id": e.session_id, "run_id": e.run_id, "kind": e.kind, "payload": e.payload, "created_at": e.created_at})
}
