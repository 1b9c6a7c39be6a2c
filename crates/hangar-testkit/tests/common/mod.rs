//! A minimal blocking HTTP/1.1 client for talking to the fake servers in tests.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed step fails the test"
)]
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hangar_testkit::{FakeAnthropic, FakeOpenAi, Script, Step};
use serde_json::Value;

/// One connection (keep-alive capable).
pub struct Client {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// For chunked replies: the chunks as received.
    pub chunks: Vec<Vec<u8>>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }
}

impl Client {
    pub fn connect(base_url: &str) -> Client {
        let addr = base_url.trim_start_matches("http://");
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// Sends a request with a Content-Length body.
    pub fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: test\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        self.writer.write_all(req.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Sends a request with a chunked body split into `pieces`.
    pub fn send_chunked(&mut self, path: &str, pieces: &[&str]) {
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        for piece in pieces {
            req.push_str(&format!("{:X};ext=1\r\n{piece}\r\n", piece.len()));
        }
        req.push_str("0\r\nx-trailer: yes\r\n\r\n");
        self.writer.write_all(req.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    pub fn post_json(&mut self, path: &str, body: &Value) -> Response {
        self.send(
            "POST",
            path,
            &[("content-type", "application/json")],
            &body.to_string(),
        );
        self.read_response()
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line.trim_end_matches(['\r', '\n']).to_owned()
    }

    /// Reads the status line and headers only.
    pub fn read_head(&mut self) -> (u16, Vec<(String, String)>) {
        let status_line = self.line();
        let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let line = self.line();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').unwrap();
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        (status, headers)
    }

    /// Reads one chunk; `None` for the terminating zero chunk.
    pub fn read_chunk(&mut self) -> Option<Vec<u8>> {
        let size = usize::from_str_radix(&self.line(), 16).unwrap();
        if size == 0 {
            assert_eq!(self.line(), "", "no trailers expected");
            return None;
        }
        let mut data = vec![0; size];
        self.reader.read_exact(&mut data).unwrap();
        assert_eq!(self.line(), "");
        Some(data)
    }

    pub fn read_response(&mut self) -> Response {
        let (status, headers) = self.read_head();
        let find = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        let mut chunks = Vec::new();
        if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            while let Some(chunk) = self.read_chunk() {
                body.extend_from_slice(&chunk);
                chunks.push(chunk);
            }
        } else {
            let len: usize = find("content-length").unwrap().parse().unwrap();
            body = vec![0; len];
            self.reader.read_exact(&mut body).unwrap();
        }
        Response {
            status,
            headers,
            body,
            chunks,
        }
    }
}

/// Parses an SSE body into `(event name, data JSON)` pairs, checking the framing.
pub fn sse_events(body: &str) -> Vec<(String, Value)> {
    assert!(
        body.ends_with("\n\n"),
        "SSE body must end with a blank line"
    );
    body.trim_end()
        .split("\n\n")
        .map(|frame| {
            let mut lines = frame.lines();
            let event = lines.next().unwrap().strip_prefix("event: ").unwrap();
            let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
            assert!(lines.next().is_none(), "one data line per event");
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], event, "event name matches data.type");
            (event.to_owned(), data)
        })
        .collect()
}

/// A minimal main model request body.
pub fn main_request(prompt: &str) -> Value {
    serde_json::json!({
        "model": "claude-opus-5-5",
        "stream": true,
        "max_tokens": 128000,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>x</system-reminder>"},
            {"type": "text", "text": prompt}
        ]}]
    })
}

pub const MESSAGES: &str = "/v1/messages?beta=true";

pub fn start(steps: Vec<Step>) -> FakeAnthropic {
    FakeAnthropic::start(Script::new(steps)).unwrap()
}

pub fn text_of(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect()
}

pub const RESPONSES: &str = "/v1/responses";

pub fn start_openai(steps: Vec<Step>) -> FakeOpenAi {
    FakeOpenAi::start(Script::new(steps)).unwrap()
}

/// A minimal Responses request body shaped like Codex's first request of a turn.
pub fn responses_request(prompt: &str) -> Value {
    serde_json::json!({
        "model": "gpt-5.5",
        "stream": true,
        "store": false,
        "tool_choice": "auto",
        "input": [
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "<environment_context>x</environment_context>"}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": prompt}]}
        ]
    })
}

/// The concatenated `delta`s of all events named `kind`.
pub fn deltas_of(events: &[(String, Value)], kind: &str) -> String {
    events
        .iter()
        .filter(|(name, _)| name == kind)
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect()
}

/// The event names in order.
pub fn names_of(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}
