//! Request handling of the fake Anthropic Messages API: routing, recording, consuming script
//! steps, and writing JSON or SSE replies (treating a client that hangs up mid-stream as normal).

use std::io::{self, BufReader, ErrorKind};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::http::{self, HttpRequest};
use crate::recorded::{RecordedRequest, RequestKind};
use crate::script::error_body;
use crate::server::{Shared, State};
use crate::sse::{self, Frame};

/// What to send back, decided under the state lock and executed outside it.
enum Plan {
    Json {
        delay: Option<Duration>,
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Value,
    },
    Stream {
        delay: Option<Duration>,
        request_id: String,
        frames: Vec<Frame>,
    },
}

/// Serves requests on one connection until the client closes it, asks to close, or the server
/// stops.
pub(crate) fn serve_connection(shared: &Shared, stream: TcpStream) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let request = match http::read_request(&mut reader, &mut writer) {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(error) => {
                if error.kind() == ErrorKind::InvalidData {
                    let body = error_body(400, &format!("hangar fake model: {error}"));
                    let _ignored =
                        http::write_json(&mut writer, 400, &[], body.to_string().as_bytes(), false);
                }
                return;
            }
        };
        let keep_alive = !request.wants_close() && !shared.stopping();
        let plan = plan(shared, request);
        if execute(shared, &mut writer, plan, keep_alive).is_err() || !keep_alive {
            return;
        }
    }
}

fn classify(request: &HttpRequest, body: &Value) -> RequestKind {
    match (request.method.as_str(), request.path()) {
        ("POST", "/v1/messages") => {
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

fn json_plan(status: u16, body: Value) -> Plan {
    Plan::Json {
        delay: None,
        status,
        headers: Vec::new(),
        body,
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
fn plan(shared: &Shared, request: HttpRequest) -> Plan {
    let parsed = serde_json::from_slice::<Value>(&request.body);
    let body_is_object = matches!(parsed, Ok(Value::Object(_)));
    let body = parsed.unwrap_or(Value::Null);
    let kind = classify(&request, &body);
    let mut guard = shared.state();
    let state: &mut State = &mut guard;
    let recorded = RecordedRequest {
        seq: state.all.len() + 1,
        kind,
        method: request.method,
        path: request.target,
        headers: request.headers,
        body,
    };
    shared.log(&recorded);
    state.all.push(recorded.clone());
    let what = format!(
        "request #{} {} {}",
        recorded.seq, recorded.method, recorded.path
    );
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
                json_plan(
                    200,
                    sse::plain_message(recorded.model().unwrap_or("unknown"), &id, "ok"),
                )
            }
            RequestKind::CountTokens => json_plan(200, json!({"input_tokens": 10})),
            RequestKind::Other => {
                state.unexpected.push(format!("{what}: no such route"));
                json_plan(
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
    let session = recorded.session_id();
    let Some(step) = state.script.next_step(session) else {
        let session = session
            .map(|s| format!(" (session {s})"))
            .unwrap_or_default();
        state
            .unexpected
            .push(format!("{what}{session}: script exhausted"));
        return refusal("hangar fake model: script exhausted");
    };
    state.steps_served += 1;
    let step_no = state.steps_served;
    if let Some(expect) = &step.expect
        && let Err(miss) = expect.check(recorded)
    {
        state
            .unexpected
            .push(format!("{what} (step {step_no}): {miss}"));
    }
    if let Some((status, body)) = &step.http_error {
        return Plan::Json {
            delay: step.delay,
            status: *status,
            headers: Vec::new(),
            body: body.clone(),
        };
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
        request_id: format!("req_hk_{}", recorded.seq),
        frames,
    }
}

fn stopping_error() -> io::Error {
    io::Error::other("fake server is shutting down")
}

fn is_disconnect(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
    )
}

fn execute(
    shared: &Shared,
    writer: &mut TcpStream,
    plan: Plan,
    keep_alive: bool,
) -> io::Result<()> {
    match plan {
        Plan::Json {
            delay,
            status,
            headers,
            body,
        } => {
            if !shared.pause(delay) {
                return Err(stopping_error());
            }
            http::write_json(
                writer,
                status,
                &headers,
                body.to_string().as_bytes(),
                keep_alive,
            )
        }
        Plan::Stream {
            delay,
            request_id,
            frames,
        } => {
            let result = stream(shared, writer, delay, &request_id, &frames, keep_alive);
            if let Err(error) = &result
                && is_disconnect(error)
                && !shared.stopping()
            {
                shared.state().aborted += 1;
                shared.notify();
            }
            result
        }
    }
}

fn stream(
    shared: &Shared,
    writer: &mut TcpStream,
    delay: Option<Duration>,
    request_id: &str,
    frames: &[Frame],
    keep_alive: bool,
) -> io::Result<()> {
    if !shared.pause(delay) {
        return Err(stopping_error());
    }
    let headers = [
        ("content-type", "text/event-stream".to_owned()),
        ("cache-control", "no-cache".to_owned()),
        ("request-id", request_id.to_owned()),
    ];
    http::start_chunked(writer, 200, &headers, keep_alive)?;
    for frame in frames {
        if !shared.pause(frame.delay) {
            return Err(stopping_error());
        }
        http::write_chunk(writer, frame.bytes.as_bytes())?;
    }
    http::finish_chunks(writer)
}
