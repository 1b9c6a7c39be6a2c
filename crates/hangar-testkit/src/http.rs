//! Just enough HTTP/1.1 for the fake servers: reading requests (headers, `Content-Length` or
//! chunked bodies, `Expect: 100-continue`) and writing fixed-length or chunked responses.

use std::io::{self, BufRead, Read, Write};

const MAX_LINE: u64 = 64 * 1024;
const MAX_HEADERS: usize = 200;
const MAX_BODY: usize = 64 * 1024 * 1024;

/// A parsed request.
#[derive(Debug)]
pub(crate) struct HttpRequest {
    pub method: String,
    pub target: String,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_in(&self.headers, name)
    }

    /// The target without its query string.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// Whether the connection should close after the reply.
    pub fn wants_close(&self) -> bool {
        match self.header("connection") {
            Some(value) if value.eq_ignore_ascii_case("close") => true,
            Some(value) if value.eq_ignore_ascii_case("keep-alive") => false,
            _ => self.version.eq_ignore_ascii_case("HTTP/1.0"),
        }
    }
}

fn header_in<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

/// Reads one CRLF- (or LF-) terminated line without its terminator. `None` at a clean EOF.
fn read_line(reader: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = reader.by_ref().take(MAX_LINE).read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(invalid("line too long or truncated"));
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| invalid("line is not UTF-8"))
}

/// Reads one request. `Ok(None)` when the peer closed the connection between requests.
/// `continue_to` receives `100 Continue` when the client asks for it.
pub(crate) fn read_request(
    reader: &mut impl BufRead,
    continue_to: &mut impl Write,
) -> io::Result<Option<HttpRequest>> {
    // Tolerate stray empty lines between requests (RFC 9112 §2.2).
    let request_line = loop {
        match read_line(reader)? {
            None => return Ok(None),
            Some(line) if line.is_empty() => continue,
            Some(line) => break line,
        }
    };
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("malformed request line"));
    };
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader)?.ok_or_else(|| invalid("EOF inside headers"))?;
        if line.is_empty() {
            break;
        }
        if headers.len() >= MAX_HEADERS {
            return Err(invalid("too many headers"));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid("malformed header"))?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    if header_in(&headers, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        continue_to.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        continue_to.flush()?;
    }
    let chunked = header_in(&headers, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        read_chunked_body(reader)?
    } else if let Some(length) = header_in(&headers, "content-length") {
        let length: usize = length.parse().map_err(|_| invalid("bad content-length"))?;
        if length > MAX_BODY {
            return Err(invalid("body too large"));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    } else {
        Vec::new()
    };
    Ok(Some(HttpRequest {
        method: method.to_owned(),
        target: target.to_owned(),
        version: version.to_owned(),
        headers,
        body,
    }))
}

fn read_chunked_body(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(reader)?.ok_or_else(|| invalid("EOF inside chunked body"))?;
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size line"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while let Some(trailer) = read_line(reader)? {
                if trailer.is_empty() {
                    break;
                }
            }
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(invalid("body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
        if &crlf != b"\r\n" {
            return Err(invalid("chunk not followed by CRLF"));
        }
    }
}

pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

fn write_head(
    w: &mut impl Write,
    status: u16,
    headers: &[(&str, String)],
    keep_alive: bool,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let connection = if keep_alive { "keep-alive" } else { "close" };
    head.push_str(&format!("connection: {connection}\r\n\r\n"));
    w.write_all(head.as_bytes())
}

/// Writes a complete `application/json` response.
pub(crate) fn write_json(
    w: &mut impl Write,
    status: u16,
    extra_headers: &[(&str, String)],
    body: &[u8],
    keep_alive: bool,
) -> io::Result<()> {
    let mut headers = vec![
        ("content-type", "application/json".to_owned()),
        ("content-length", body.len().to_string()),
    ];
    headers.extend(extra_headers.iter().cloned());
    let mut out = Vec::with_capacity(body.len() + 256);
    write_head(&mut out, status, &headers, keep_alive)?;
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}

/// Writes the head of a chunked response; follow with [`write_chunk`] and [`finish_chunks`].
pub(crate) fn start_chunked(
    w: &mut impl Write,
    status: u16,
    extra_headers: &[(&str, String)],
    keep_alive: bool,
) -> io::Result<()> {
    let mut headers = vec![("transfer-encoding", "chunked".to_owned())];
    headers.extend(extra_headers.iter().cloned());
    write_head(w, status, &headers, keep_alive)?;
    w.flush()
}

/// Writes one chunk and flushes it.
pub(crate) fn write_chunk(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let mut frame = format!("{:x}\r\n", data.len()).into_bytes();
    frame.extend_from_slice(data);
    frame.extend_from_slice(b"\r\n");
    w.write_all(&frame)?;
    w.flush()
}

/// Writes the terminating zero chunk.
pub(crate) fn finish_chunks(w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}
