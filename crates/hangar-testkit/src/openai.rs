//! Request handling of the fake OpenAI Responses API (what Codex talks to): routing, recording and
//! consuming script steps. The connection loop and the writing of replies are in `conn.rs`.

use serde_json::Value;

use crate::conn::Plan;
use crate::http::HttpRequest;
use crate::recorded::{RecordedRequest, RequestKind};
use crate::responses;
use crate::script::{as_openai_error, openai_error_body};
use crate::server::{Shared, State};

fn classify(request: &HttpRequest, body: &Value) -> RequestKind {
    match (request.method.as_str(), request.path()) {
        ("POST", "/v1/responses") if body.get("stream").and_then(Value::as_bool) == Some(true) => {
            RequestKind::Main
        }
        _ => RequestKind::Other,
    }
}

/// A 400 (Codex does not retry a 4xx other than 429).
fn refusal(message: &str) -> Plan {
    Plan::json(400, openai_error_body(400, message))
}

/// Records the request and decides the reply.
pub(crate) fn plan(shared: &Shared, request: HttpRequest) -> Plan {
    let parsed = serde_json::from_slice::<Value>(&request.body);
    let body_is_object = matches!(parsed, Ok(Value::Object(_)));
    let body = parsed.unwrap_or(Value::Null);
    let is_responses_path = request.method == "POST" && request.path() == "/v1/responses";
    let kind = classify(&request, &body);
    let mut guard = shared.state();
    let state: &mut State = &mut guard;
    let recorded = state.record(shared, kind, request, body);
    let what = recorded.describe();
    let plan = match kind {
        RequestKind::Main => {
            state.main.push(recorded.clone());
            main_plan(state, &recorded, &what)
        }
        _ if is_responses_path && !body_is_object => {
            state
                .unexpected
                .push(format!("{what}: body is not a JSON object"));
            refusal("hangar fake model: body is not a JSON object")
        }
        _ => {
            let why = if is_responses_path {
                "not a streaming request"
            } else {
                "no such route"
            };
            state.unexpected.push(format!("{what}: {why}"));
            Plan::json(
                404,
                openai_error_body(404, &format!("hangar fake model: {why}: {what}")),
            )
        }
    };
    drop(guard);
    shared.notify();
    plan
}

fn main_plan(state: &mut State, recorded: &RecordedRequest, what: &str) -> Plan {
    let step = match state.take_step(recorded, what) {
        Ok(step) => step,
        Err(message) => return refusal(message),
    };
    if let Some((status, body)) = &step.http_error {
        return Plan::Json {
            delay: step.delay,
            status: *status,
            headers: Vec::new(),
            body: as_openai_error(*status, body),
        };
    }
    state.next_message += 1;
    let frames = responses::stream_frames(
        &step,
        recorded.model().unwrap_or("unknown"),
        state.next_message,
        &mut state.next_tool,
    );
    Plan::Stream {
        delay: step.delay,
        headers: vec![("x-request-id", format!("req_hk_{}", recorded.seq))],
        frames,
    }
}
