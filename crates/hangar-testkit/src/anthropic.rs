//! Request handling of the fake Anthropic Messages API: routing, recording and consuming script
//! steps. The connection loop and the writing of replies are in `conn.rs`.

use serde_json::{Value, json};

use crate::conn::Plan;
use crate::http::HttpRequest;
use crate::recorded::{RecordedRequest, RequestKind};
use crate::script::{Block, error_body};
use crate::server::{Shared, State};
use crate::sse;

/// Whether `path` is Claude on Vertex AI's route for a model
/// (`[/v1]/projects/P/locations/L/publishers/anthropic/models/M:streamRawPredict` or
/// `:rawPredict`):
/// the same Messages body without `model`, answered the same way, so that Claude Code run with
/// `CLAUDE_CODE_USE_VERTEX` and `ANTHROPIC_VERTEX_BASE_URL` on loopback is served.
fn is_vertex(path: &str) -> bool {
    (path.starts_with("/projects/") || path.starts_with("/v1/projects/"))
        && path.contains("/publishers/anthropic/models/")
        && (path.ends_with(":streamRawPredict") || path.ends_with(":rawPredict"))
}

fn classify(request: &HttpRequest, body: &Value) -> RequestKind {
    match (request.method.as_str(), request.path()) {
        ("POST", p) if p == "/v1/messages" || is_vertex(p) => {
            if body.get("stream").and_then(Value::as_bool) == Some(true) {
                RequestKind::Main
            } else {
                RequestKind::Probe
            }
        }
        ("POST", "/v1/messages/count_tokens") => RequestKind::CountTokens,
        _ => RequestKind::Other,
    }
}

/// A 400 the CLI does not retry.
fn refusal(message: &str) -> Plan {
    Plan::Json {
        delay: None,
        status: 400,
        headers: vec![("x-should-retry", "false".to_owned())],
        body: error_body(400, message),
    }
}

/// Records the request and decides the reply.
pub(crate) fn plan(shared: &Shared, request: HttpRequest) -> Plan {
    let parsed = serde_json::from_slice::<Value>(&request.body);
    let body_is_object = matches!(parsed, Ok(Value::Object(_)));
    let body = parsed.unwrap_or(Value::Null);
    let kind = classify(&request, &body);
    let mut guard = shared.state();
    let state: &mut State = &mut guard;
    let recorded = state.record(shared, kind, request, body);
    let what = recorded.describe();
    let plan = if kind != RequestKind::Other && !body_is_object {
        state
            .unexpected
            .push(format!("{what}: body is not a JSON object"));
        refusal("hangar fake model: body is not a JSON object")
    } else {
        match kind {
            RequestKind::Main => {
                state.main.push(recorded.clone());
                main_plan(state, &recorded, &what)
            }
            RequestKind::Probe => {
                state.next_message += 1;
                let id = format!("msg_hk_{}", state.next_message);
                Plan::json(
                    200,
                    sse::plain_message(recorded.model().unwrap_or("unknown"), &id, "ok"),
                )
            }
            RequestKind::CountTokens => Plan::json(200, json!({"input_tokens": 10})),
            RequestKind::Other => {
                state.unexpected.push(format!("{what}: no such route"));
                Plan::json(
                    404,
                    error_body(404, &format!("hangar fake model: no route for {what}")),
                )
            }
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
            body: body.clone(),
        };
    }
    if step.reply.iter().any(|b| matches!(b, Block::Patch(_))) {
        state.unexpected.push(format!(
            "{what} (step {}): a patch block is only served by the OpenAI fake",
            state.steps_served
        ));
        return refusal("hangar fake model: patch blocks are not served by the Anthropic fake");
    }
    state.next_message += 1;
    let message_id = format!("msg_hk_{}", state.next_message);
    let mut next_tool = state.next_tool;
    let frames = sse::stream_frames(
        &step,
        recorded.model().unwrap_or("unknown"),
        &message_id,
        &mut || {
            next_tool += 1;
            format!("toolu_hk_{next_tool}")
        },
    );
    state.next_tool = next_tool;
    Plan::Stream {
        delay: step.delay,
        headers: vec![("request-id", format!("req_hk_{}", recorded.seq))],
        frames,
    }
}
