//! The connection loop both fakes share: read a request, let the API decide a [`Plan`] (recording
//! the request under the state lock), then write the JSON reply or the SSE stream outside the lock,
//! treating a client that hangs up mid-stream as normal.

use std::io::{self, BufReader, ErrorKind};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::http;
use crate::server::{Api, Shared};
use crate::sse::Frame;

/// What to send back, decided under the state lock and executed outside it.
#[derive(Debug)]
pub(crate) enum Plan {
    Json {
        delay: Option<Duration>,
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Value,
    },
    Stream {
        delay: Option<Duration>,
        /// Extra response headers besides `content-type` and `cache-control`.
        headers: Vec<(&'static str, String)>,
        frames: Vec<Frame>,
    },
}

impl Plan {
    /// An immediate JSON reply.
    pub fn json(status: u16, body: Value) -> Self {
        Self::Json {
            delay: None,
            status,
            headers: Vec::new(),
            body,
        }
    }
}

/// Serves requests on one connection until the client closes it, asks to close, or the server
/// stops.
pub(crate) fn serve_connection(shared: &Shared, api: Api, stream: TcpStream) {
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
                    let body = api.error_body(400, &format!("hangar fake model: {error}"));
                    let _ignored =
                        http::write_json(&mut writer, 400, &[], body.to_string().as_bytes(), false);
                }
                return;
            }
        };
        let keep_alive = !request.wants_close() && !shared.stopping();
        let plan = api.plan(shared, request);
        if execute(shared, &mut writer, plan, keep_alive).is_err() || !keep_alive {
            return;
        }
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
            headers,
            frames,
        } => {
            let result = stream(shared, writer, delay, headers, &frames, keep_alive);
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
    extra_headers: Vec<(&'static str, String)>,
    frames: &[Frame],
    keep_alive: bool,
) -> io::Result<()> {
    if !shared.pause(delay) {
        return Err(stopping_error());
    }
    let mut headers = vec![
        ("content-type", "text/event-stream".to_owned()),
        ("cache-control", "no-cache".to_owned()),
    ];
    headers.extend(extra_headers);
    http::start_chunked(writer, 200, &headers, keep_alive)?;
    for frame in frames {
        if !shared.pause(frame.delay) {
            return Err(stopping_error());
        }
        http::write_chunk(writer, frame.bytes.as_bytes())?;
    }
    http::finish_chunks(writer)
}
