//! A client of Tower's contract (`../shared/design/tower-contract.md`), std only: HTTP/1.1 over
//! a TCP connection per request (`connection: close`), a deadline on every step, answers capped
//! at [`MAX_ANSWER`]. Every way Tower can fail to give a readable answer is a [`Fault`]: the
//! callers fail closed on it. With `HTTP_PROXY` (or `http_proxy`) set and Tower's host not in
//! `NO_PROXY`, requests go through that proxy in absolute form (`POST http://tower/... HTTP/1.1`):
//! how a sandbox with an egress allowlist reaches Tower, through hangar's egress proxy.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The largest answer read; a longer one is a fault.
pub const MAX_ANSWER: usize = 1024 * 1024;
/// The longest single long poll the contract allows.
pub const MAX_POLL: u64 = 60;

/// Why Tower gave no answer the client can use. The text says it for a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault(pub String);

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Tower's answer to a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow {
        reason: String,
    },
    Deny {
        reason: String,
    },
    /// A person must sign approval `id` first.
    Wait {
        id: String,
        reason: String,
    },
}

/// An approval's state after a poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalState {
    /// `pending`, `allowed`, `denied` or `expired`.
    pub state: String,
    pub reason: String,
    /// Who signed (person, or email), when someone did.
    pub signer: Option<String>,
}

/// Where Tower is and how to reach it.
#[derive(Clone)]
pub struct Tower {
    /// `host:port` for the Host header (and a proxy's CONNECT).
    authority: String,
    /// Tower's host, lower-case, without brackets: the name its certificate must carry.
    host: String,
    /// Tower's addresses, or the proxy's.
    addrs: Vec<SocketAddr>,
    /// Through a proxy: absolute-form requests in clear (loopback Tower), a CONNECT tunnel
    /// for TLS.
    via_proxy: bool,
    /// TLS settings when Tower's URL is `https://`; `None` for loopback in clear.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Path prefix of `TOWER` (without a trailing slash).
    prefix: String,
    token: String,
    shown: String,
}

impl std::fmt::Debug for Tower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Tower")
            .field("url", &self.shown)
            .field("tls", &self.tls.is_some())
            .field("via_proxy", &self.via_proxy)
            .finish_non_exhaustive()
    }
}

impl Tower {
    /// `url` is `HANGAR_GOVERNANCE_URL` (`https://host[:port][/prefix]`, or `http://` to a
    /// loopback host only); `token` the key or passport. Extra CA certificates come from
    /// `HANGAR_CA_FILE` (see [`Tower::with_ca_file`]).
    pub fn new(url: &str, token: &str) -> Result<Tower, Fault> {
        let ca = hangar_protocol::env::var_os(hangar_protocol::env::HANGAR_CA_FILE);
        Tower::with_ca_file(url, token, ca.as_deref().map(std::path::Path::new))
    }

    /// [`Tower::new`] trusting the PEM certificates of `ca_file` on top of the system's roots.
    pub fn with_ca_file(
        url: &str,
        token: &str,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Tower, Fault> {
        let url = url.trim_end_matches('/');
        let (rest, secure) = if let Some(r) = url.strip_prefix("https://") {
            (r, true)
        } else if let Some(r) = url.strip_prefix("http://") {
            (r, false)
        } else {
            return Err(Fault(format!(
                "Tower's address {url:?} is not an https:// URL"
            )));
        };
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(Fault(format!("Tower's address {url:?} names no host")));
        }
        let host = host_of(authority);
        if !secure && !crate::tls::plain_http_allowed(&host) {
            return Err(Fault(format!(
                "Tower's address {url} is plain http to a host that is not loopback, so the key or passport would cross the network in clear; refused. Give Tower's https:// address (with HANGAR_CA_FILE if a private CA signed its certificate)"
            )));
        }
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(h, p)| p.parse::<u16>().is_ok() && !h.ends_with(':'))
        {
            authority.to_owned()
        } else {
            format!("{authority}:{}", if secure { 443 } else { 80 })
        };
        let proxy = proxy_for(
            &host,
            env_either("HTTP_PROXY", "http_proxy").as_deref(),
            env_either("NO_PROXY", "no_proxy").as_deref(),
        )?;
        let addrs: Vec<SocketAddr> = match &proxy {
            Some(p) => p
                .to_socket_addrs()
                .map_err(|e| {
                    Fault(format!(
                        "Tower at {url} is unreachable: cannot resolve the proxy {p} (HTTP_PROXY): {e}"
                    ))
                })?
                .collect(),
            None => with_port
                .to_socket_addrs()
                .map_err(|e| {
                    Fault(format!(
                        "Tower at {url} is unreachable: cannot resolve {authority}: {e}"
                    ))
                })?
                .collect(),
        };
        // `localhost` in clear must really be this machine.
        if !secure && proxy.is_none() && addrs.iter().any(|a| !a.ip().is_loopback()) {
            return Err(Fault(format!(
                "Tower's address {url} is plain http and {host} resolves to an address that is not loopback; refused. Give Tower's https:// address"
            )));
        }
        let tls = if secure {
            Some(crate::tls::client_config(ca_file)?)
        } else {
            None
        };
        if token.trim().is_empty() {
            return Err(Fault("the key or passport for Tower is empty".into()));
        }
        Ok(Tower {
            authority: with_port,
            host,
            addrs,
            via_proxy: proxy.is_some(),
            tls,
            prefix: prefix.to_owned(),
            token: token.trim().to_owned(),
            shown: url.to_owned(),
        })
    }

    /// `POST TOWER/<path>` (`hooks/claude-code` or `approvals`) with `body`; Tower's decision.
    pub fn call(&self, path: &str, body: &Value, deadline: Instant) -> Result<Decision, Fault> {
        let v = self.json("POST", &format!("/{path}"), Some(body), deadline)?;
        decision_of(&v)
    }

    /// One long poll of approval `id` (`wait` seconds, at most 60).
    pub fn poll(&self, id: &str, wait: u64, deadline: Instant) -> Result<ApprovalState, Fault> {
        if !valid_id(id) {
            return Err(Fault(format!("{id:?} is not an approval id")));
        }
        let v = self.json(
            "GET",
            &format!("/approvals/{id}?wait={}", wait.min(MAX_POLL)),
            None,
            deadline,
        )?;
        approval_state_of(&v)
    }

    /// Asks until the approval is signed, refused or expired, or `limit` passes: `Ok` when a
    /// person allowed it, `Err` with the reason otherwise.
    pub fn wait_for_signature(&self, id: &str, limit: Duration) -> Result<(), Fault> {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Fault(format!(
                    "no one signed Tower's approval {id} within {} s, so the call is refused as unsigned",
                    limit.as_secs()
                )));
            }
            let wait = left.as_secs().clamp(1, MAX_POLL);
            let st = self.poll(id, wait, Instant::now() + Duration::from_secs(wait + 10))?;
            match st.state.as_str() {
                "allowed" => return Ok(()),
                "denied" => {
                    return Err(Fault(format!(
                        "{} refused Tower's approval {id}{}",
                        st.signer.as_deref().unwrap_or("a person"),
                        if st.reason.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", st.reason)
                        }
                    )));
                }
                "expired" => return Err(Fault(format!("Tower's approval {id} expired unsigned"))),
                _ => {}
            }
        }
    }

    fn json(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        deadline: Instant,
    ) -> Result<Value, Fault> {
        let (status, bytes) = self.request(method, path, body, deadline)?;
        answer_json(status, &bytes)
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        deadline: Instant,
    ) -> Result<(u16, Vec<u8>), Fault> {
        let timeout = || {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                Err(Fault(format!(
                    "Tower at {} did not answer in time",
                    self.shown
                )))
            } else {
                Ok(left)
            }
        };
        let mut last = None;
        let mut stream = None;
        for a in &self.addrs {
            match TcpStream::connect_timeout(a, timeout()?) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(tcp) = stream else {
            return Err(Fault(format!(
                "Tower at {} is unreachable: {}",
                self.shown,
                last.map_or_else(|| "no address".to_owned(), |e| e.to_string())
            )));
        };
        let _ = tcp.set_nodelay(true);
        let mut s = self.connect(tcp, &timeout)?;
        let payload = body.map(Value::to_string).unwrap_or_default();
        let origin = if self.via_proxy && self.tls.is_none() {
            format!("http://{}", self.authority)
        } else {
            String::new()
        };
        let mut req = format!(
            "{method} {origin}{}{path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\naccept: application/json\r\nconnection: close\r\nuser-agent: hangar-tower-hook\r\n",
            self.prefix, self.authority, self.token
        );
        if body.is_some() {
            req.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                payload.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(&payload);
        let io_fault = |e: std::io::Error| {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                Fault(format!("Tower at {} did not answer in time", self.shown))
            } else {
                Fault(format!(
                    "the connection to Tower at {} failed: {e}",
                    self.shown
                ))
            }
        };
        s.tcp()
            .set_write_timeout(Some(timeout()?))
            .map_err(io_fault)?;
        s.write_all(req.as_bytes())
            .and_then(|()| s.flush())
            .map_err(|e| self.tls_fault(e).unwrap_or_else(&io_fault))?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            s.tcp()
                .set_read_timeout(Some(timeout()?))
                .map_err(io_fault)?;
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    raw.extend_from_slice(&buf[..n]);
                    if raw.len() > MAX_ANSWER + 16 * 1024 {
                        return Err(Fault(format!(
                            "Tower's answer is larger than {} KiB",
                            MAX_ANSWER / 1024
                        )));
                    }
                    if complete(&raw) {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.tls_fault(e).unwrap_or_else(&io_fault)),
            }
        }
        parse_response(&raw)
    }

    /// The connection to speak HTTP on: TLS to Tower for `https://` (through the proxy's
    /// CONNECT tunnel when there is one), else the socket as it is.
    fn connect(
        &self,
        mut tcp: TcpStream,
        timeout: &dyn Fn() -> Result<Duration, Fault>,
    ) -> Result<crate::tls::Conn, Fault> {
        let Some(config) = &self.tls else {
            return Ok(crate::tls::Conn::Plain(tcp));
        };
        let fault = |e: std::io::Error| {
            Fault(format!(
                "the proxy (HTTP_PROXY) on the way to Tower at {} failed: {e}",
                self.shown
            ))
        };
        tcp.set_write_timeout(Some(timeout()?)).map_err(fault)?;
        tcp.set_read_timeout(Some(timeout()?)).map_err(fault)?;
        if self.via_proxy {
            let connect = format!(
                "CONNECT {a} HTTP/1.1\r\nhost: {a}\r\nuser-agent: hangar-tower-hook\r\n\r\n",
                a = self.authority
            );
            tcp.write_all(connect.as_bytes()).map_err(fault)?;
            // Byte by byte up to the blank line: nothing of the TLS stream may be read here.
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if head.len() > 16 * 1024 {
                    return Err(Fault("the proxy's answer to CONNECT is too long".into()));
                }
                match tcp.read(&mut b).map_err(fault)? {
                    0 => return Err(Fault("the proxy closed the connection on CONNECT".into())),
                    _ => head.push(b[0]),
                }
            }
            let line = String::from_utf8_lossy(&head);
            let status = line.split_whitespace().nth(1).unwrap_or_default();
            if status != "200" {
                return Err(Fault(format!(
                    "the proxy (HTTP_PROXY) refused a tunnel to Tower at {}: {}",
                    self.shown,
                    short(line.lines().next().unwrap_or_default())
                )));
            }
        }
        crate::tls::Conn::tls(Arc::clone(config), &self.host, tcp)
    }

    /// A TLS failure said for a person (`Ok`), or the error back when it is not one.
    fn tls_fault(&self, e: std::io::Error) -> Result<Fault, std::io::Error> {
        if self.tls.is_none() || e.kind() != std::io::ErrorKind::InvalidData {
            return Err(e);
        }
        Ok(Fault(format!(
            "Tower at {} failed the TLS check: {e}; the call is refused. If a private CA signed Tower's certificate, give that CA's certificate in HANGAR_CA_FILE",
            self.shown
        )))
    }
}

fn env_either(upper: &str, lower: &str) -> Option<String> {
    std::env::var(upper)
        .ok()
        .or_else(|| std::env::var(lower).ok())
        .filter(|v| !v.trim().is_empty())
}

/// An authority's host, lower-case, without port or brackets.
fn host_of(authority: &str) -> String {
    let a = authority.rsplit('@').next().unwrap_or(authority);
    let host = if let Some(v6) = a.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        a.rsplit_once(':').map_or(a, |(h, _)| h)
    };
    host.to_ascii_lowercase()
}

/// The proxy (`host:port`) to reach `host` through: `http_proxy` unless `no_proxy` names the
/// host (`*`, the host itself, or a domain it is under; ports are not compared). A proxy
/// variable that is not an `http://host:port` address is a fault, not a reason to go direct.
fn proxy_for(
    host: &str,
    http_proxy: Option<&str>,
    no_proxy: Option<&str>,
) -> Result<Option<String>, Fault> {
    let Some(proxy) = http_proxy else {
        return Ok(None);
    };
    let bypass = no_proxy.unwrap_or_default().split(',').any(|e| {
        let e = e.trim().to_ascii_lowercase();
        let e = e.rsplit_once(':').map_or(e.as_str(), |(h, p)| {
            if p.parse::<u16>().is_ok() && !h.ends_with(':') {
                h
            } else {
                e.as_str()
            }
        });
        let e = e.trim_start_matches("*.").trim_start_matches('.');
        e == "*" || (!e.is_empty() && (host == e || host.ends_with(&format!(".{e}"))))
    });
    if bypass {
        return Ok(None);
    }
    let rest = proxy.trim().strip_prefix("http://").ok_or_else(|| {
        Fault(format!(
            "the proxy {proxy:?} (HTTP_PROXY) is not an http:// address"
        ))
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    if authority.is_empty() {
        return Err(Fault(format!(
            "the proxy {proxy:?} (HTTP_PROXY) names no host"
        )));
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(h, p)| p.parse::<u16>().is_ok() && !h.is_empty());
    Ok(Some(if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    }))
}

/// The JSON body of an answer, or the fault its status says.
fn answer_json(status: u16, bytes: &[u8]) -> Result<Value, Fault> {
    if status != 200 {
        let detail = serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| {
                let code = v.get("error").and_then(Value::as_str)?.to_owned();
                let msg = v.get("message").and_then(Value::as_str).unwrap_or_default();
                Some(format!("{code}: {msg}"))
            })
            .unwrap_or_else(|| short(&String::from_utf8_lossy(bytes)));
        let what = match status {
            401 => "Tower refused the key or passport (401)".to_owned(),
            403 => "Tower does not let this key or passport make the call (403)".to_owned(),
            s if s >= 500 => format!("Tower failed ({s})"),
            s => format!("Tower answered {s}"),
        };
        return Err(Fault(format!("{what}: {detail}")));
    }
    serde_json::from_slice(bytes).map_err(|_| {
        Fault(format!(
            "Tower's answer is not JSON: {}",
            short(&String::from_utf8_lossy(bytes))
        ))
    })
}

/// Tower's decision in the JSON answer to a call.
fn decision_of(v: &Value) -> Result<Decision, Fault> {
    let reason = v
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    match v.get("decision").and_then(Value::as_str) {
        Some("allow") => Ok(Decision::Allow { reason }),
        Some("deny") => Ok(Decision::Deny { reason }),
        Some("wait") => {
            let id = v
                .get("approval")
                .and_then(|a| a.get("id"))
                .and_then(Value::as_str)
                .filter(|id| valid_id(id))
                .ok_or_else(|| Fault("Tower said wait but named no readable approval id".into()))?;
            Ok(Decision::Wait {
                id: id.to_owned(),
                reason,
            })
        }
        _ => Err(Fault(format!(
            "Tower's answer has no decision hangar can read: {}",
            short(&v.to_string())
        ))),
    }
}

/// An approval's state in the JSON answer to a poll.
fn approval_state_of(v: &Value) -> Result<ApprovalState, Fault> {
    let state = v.get("state").and_then(Value::as_str);
    let state = match state {
        Some(s @ ("pending" | "allowed" | "denied" | "expired")) => s.to_owned(),
        _ => {
            return Err(Fault(format!(
                "Tower's approval answer has no state hangar can read: {}",
                short(&v.to_string())
            )));
        }
    };
    let signer = v.get("signer").and_then(|s| {
        s.get("person")
            .or_else(|| s.get("email"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    Ok(ApprovalState {
        state,
        reason: v
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        signer,
    })
}

/// Entry points for `fuzz/` (built with `--cfg fuzzing` only): the reading of Tower's answer
/// as the client does it once the bytes are in, without a network.
#[cfg(fuzzing)]
pub mod fuzzing {
    use super::*;

    /// Whether the client would stop reading after these bytes.
    pub fn complete(raw: &[u8]) -> bool {
        super::complete(raw)
    }

    /// The status and body of a raw HTTP answer.
    pub fn response(raw: &[u8]) -> Result<(u16, Vec<u8>), Fault> {
        parse_response(raw)
    }

    /// A raw HTTP answer to a call (`hooks/claude-code`, `approvals`) read as [`Tower::call`]
    /// reads it.
    pub fn decision(raw: &[u8]) -> Result<Decision, Fault> {
        let (status, body) = parse_response(raw)?;
        decision_of(&answer_json(status, &body)?)
    }

    /// A raw HTTP answer to a poll read as [`Tower::poll`] reads it.
    pub fn approval_state(raw: &[u8]) -> Result<ApprovalState, Fault> {
        let (status, body) = parse_response(raw)?;
        approval_state_of(&answer_json(status, &body)?)
    }

    /// Whether an approval id would be used in a poll's path.
    pub fn valid_id(id: &str) -> bool {
        super::valid_id(id)
    }
}

/// Approval ids are tokens, never paths.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && id != "."
        && id != ".."
}

fn short(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= 200 {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(200).collect::<String>())
    }
}

fn head_end(raw: &[u8]) -> Option<usize> {
    raw.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())
            .flatten()
    })
}

fn chunked(head: &str) -> bool {
    head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.to_ascii_lowercase().contains("chunked")
        })
    })
}

/// Whether the whole answer is in (so a server that keeps the connection open is not waited on).
fn complete(raw: &[u8]) -> bool {
    let Some(end) = head_end(raw) else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    match content_length(&head) {
        // A content-length near usize::MAX must not wrap (found by `scripts/fuzz tower_answer`).
        Some(n) => end.checked_add(n).is_some_and(|total| raw.len() >= total),
        None => chunked(&head) && raw.ends_with(b"0\r\n\r\n"),
    }
}

fn parse_response(raw: &[u8]) -> Result<(u16, Vec<u8>), Fault> {
    let end = head_end(raw).ok_or_else(|| {
        Fault(if raw.is_empty() {
            "Tower closed the connection without an answer".into()
        } else {
            "Tower's answer is cut short (no complete header)".into()
        })
    })?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Fault("Tower's answer has no HTTP status line".into()))?;
    let body = &raw[end..];
    let body = if let Some(n) = content_length(&head) {
        if body.len() < n {
            return Err(Fault(format!(
                "Tower's answer is cut short ({} of {n} bytes)",
                body.len()
            )));
        }
        body[..n].to_vec()
    } else if chunked(&head) {
        dechunk(body).ok_or_else(|| Fault("Tower's chunked answer is cut short".into()))?
    } else {
        body.to_vec()
    };
    if body.len() > MAX_ANSWER {
        return Err(Fault(format!(
            "Tower's answer is larger than {} KiB",
            MAX_ANSWER / 1024
        )));
    }
    Ok((status, body))
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..nl]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[nl + 2..];
        if size == 0 {
            return Some(out);
        }
        // A size near usize::MAX must not wrap (found by `scripts/fuzz tower_answer`).
        let end = size.checked_add(2)?;
        if b.len() < end {
            return None;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[end..];
    }
}

/// The `client` member hangar adds to what it sends Tower.
pub fn client_info(env: Option<&str>, sandbox: Option<&str>, run: Option<&str>) -> Value {
    json!({"name": "hangar", "env": env, "sandbox": sandbox, "run": run})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_is_used_unless_no_proxy_names_the_host() {
        let p = Some("http://127.0.0.1:980");
        let np = Some("localhost,127.0.0.1,::1");
        assert_eq!(
            proxy_for("tower.example.com", p, np).unwrap().as_deref(),
            Some("127.0.0.1:980")
        );
        assert_eq!(proxy_for("127.0.0.1", p, np).unwrap(), None);
        assert_eq!(proxy_for("::1", p, np).unwrap(), None);
        assert_eq!(
            proxy_for("a.example.com", p, Some(".example.com")).unwrap(),
            None
        );
        assert_eq!(
            proxy_for("a.example.com", p, Some("example.com:443")).unwrap(),
            None
        );
        assert_eq!(proxy_for("x.test", p, Some("*")).unwrap(), None);
        assert!(
            proxy_for("notexample.com", p, Some("example.com"))
                .unwrap()
                .is_some()
        );
        assert_eq!(proxy_for("x.test", None, np).unwrap(), None);
        assert_eq!(
            proxy_for("x.test", Some("http://proxy.test/"), None)
                .unwrap()
                .as_deref(),
            Some("proxy.test:80")
        );
        assert!(proxy_for("x.test", Some("socks5://p:1"), None).is_err());
        assert_eq!(host_of("[::1]:8080"), "::1");
        assert_eq!(host_of("Tower.Test:80"), "tower.test");
        assert_eq!(host_of("tower.test"), "tower.test");
    }

    #[test]
    fn responses_are_read_or_refused() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_response(ok).unwrap(), (200, b"{}".to_vec()));
        let cut = b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\n{}";
        assert!(parse_response(cut).is_err());
        let ch = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        assert_eq!(parse_response(ch).unwrap(), (200, b"{}".to_vec()));
        assert!(parse_response(b"").is_err());
        assert!(Tower::new("http://tower.example.com", "k").is_err());
        assert!(Tower::new("http://127.0.0.1:1", " ").is_err());
        assert!(!valid_id("../x") && valid_id("ap_1"));
    }

    /// Found by `scripts/fuzz tower_answer`: a content-length near `usize::MAX` overflowed
    /// while checking whether the whole answer was in.
    #[test]
    fn a_huge_content_length_is_never_complete_and_is_cut_short() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-length: 18446744073709551615\r\n\r\n{}";
        assert!(!complete(raw));
        let f = parse_response(raw).unwrap_err();
        assert!(f.0.contains("cut short"), "{f}");
    }

    /// Found by `scripts/fuzz tower_answer`: a chunk size near `usize::MAX` overflowed (a panic:
    /// the driver's governed turn died, the hook aborted) instead of being a cut-short answer.
    #[test]
    fn a_huge_chunk_size_is_a_fault_not_a_panic() {
        for size in ["ffffffffffffffff", "fffffffffffffffe", "fffffffffffffffd"] {
            let raw = format!(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{size}\r\n{{}}\r\n0\r\n\r\n"
            );
            let f = parse_response(raw.as_bytes()).unwrap_err();
            assert!(f.0.contains("cut short"), "{f}");
        }
    }
}
