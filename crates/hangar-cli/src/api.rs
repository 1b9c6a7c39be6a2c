//! The client side of the HTTP API (`hangar serve`, or a server the CLI runs in-process): where
//! it is (`HANGAR_URL`, default `http://127.0.0.1:7700`), the token (`HANGAR_TOKEN`, else the one
//! `hangar login` kept for that server, else the local user's token in `$HANGAR_HOME/token`), and its answers sorted into what the CLI does
//! about them (retry, serve locally, or show the person why).
//!
//! With no server to reach, a command calls the API's router in this process
//! ([`Api::in_process`]): the same routes, authentication and answers, with no port bound and
//! no HTTP spoken to itself.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use hangar_protocol::env::{HANGAR_TOKEN, HANGAR_URL};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::exit::CliError;

/// Where clients look for the server when `HANGAR_URL` is not set.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7700";

/// The file under `$HANGAR_HOME` that holds the local user's token (0600).
pub const TOKEN_FILE: &str = "token";

/// A client of one server.
#[derive(Clone, Debug)]
pub struct Api {
    base: String,
    token: Option<String>,
    transport: Transport,
}

/// How requests reach the API.
#[derive(Clone, Debug)]
enum Transport {
    Http(reqwest::Client),
    /// The router itself, called in this process.
    InProcess(axum::Router),
}

/// How long a whole answer may take: a command waits for the driver's signed answer (up to
/// 30 s) before the server answers.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(90);

/// An answer whose body is read as it comes (an event stream).
#[derive(Debug)]
pub struct Streamed(StreamBody);

#[derive(Debug)]
enum StreamBody {
    Http(reqwest::Response),
    InProcess(axum::body::BodyDataStream),
}

impl Streamed {
    /// The next part of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, String> {
        match &mut self.0 {
            StreamBody::Http(r) => r.chunk().await.map_err(|e| chain(&e)),
            StreamBody::InProcess(s) => {
                use futures_util::StreamExt;
                s.next().await.transpose().map_err(|e| e.to_string())
            }
        }
    }
}

/// What went wrong talking to the server.
#[derive(Debug)]
pub enum ApiError {
    /// Nothing listens there (the connection was refused, or could not be made): worth
    /// retrying, or serving the API locally.
    NoServer(String),
    /// The connection broke or the answer did not come in time: worth retrying.
    Unreachable(String),
    /// The server answered with an error (its JSON error body, or the status alone).
    Status { status: u16, message: String },
    /// A request that can never work (a bad URL, a body that is not JSON).
    Other(String),
}

impl ApiError {
    /// Whether waiting and asking again may help (a server restarting, a proxy in front of one).
    pub fn transient(&self) -> bool {
        match self {
            ApiError::NoServer(_) | ApiError::Unreachable(_) => true,
            ApiError::Status { status, .. } => matches!(status, 502..=504),
            ApiError::Other(_) => false,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The error as the person sees it, by the one table: 400 → usage (exit 2), 409 "the turn
    /// has ended" → ended (exit 3), 422 → refused (exit 1), anything else → failed (exit 4).
    pub fn into_cli(self) -> CliError {
        match self {
            ApiError::NoServer(m) | ApiError::Unreachable(m) | ApiError::Other(m) => {
                CliError::Failed(m)
            }
            ApiError::Status {
                status, message, ..
            } => match status {
                400 => CliError::Usage(message),
                401 => CliError::Failed(format!(
                    "{message} (the token is HANGAR_TOKEN, else $HANGAR_HOME/{TOKEN_FILE})"
                )),
                409 if message.starts_with("the turn has ended") => CliError::Ended(String::new()),
                422 => CliError::Refused(
                    message
                        .strip_prefix("refused: ")
                        .unwrap_or(&message)
                        .to_owned(),
                ),
                _ => CliError::Failed(message),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::NoServer(m) | ApiError::Unreachable(m) | ApiError::Other(m) => f.write_str(m),
            ApiError::Status {
                status, message, ..
            } => write!(f, "{message} (HTTP {status})"),
        }
    }
}

/// `HANGAR_URL`, else the default, without a trailing slash.
pub fn url_from_env() -> String {
    hangar_protocol::env::var(HANGAR_URL)
        .map(|u| u.trim().trim_end_matches('/').to_owned())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

/// `HANGAR_TOKEN`, else the token `hangar login` kept for `HANGAR_URL`'s server, else the local
/// user's token file, else none.
pub fn token_from_env(home: &Path) -> Option<String> {
    hangar_protocol::env::var(HANGAR_TOKEN)
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .or_else(|| crate::login::stored_token(&url_from_env()))
        .or_else(|| {
            std::fs::read_to_string(home.join(TOKEN_FILE))
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
        })
}

/// The address a server for `url` would listen on, when it is a plain `http://` URL of this
/// machine's.
pub fn listen_addr(url: &str) -> Option<SocketAddr> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let with_port = if authority.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':')
    }) {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    with_port
        .to_socket_addrs()
        .ok()?
        .find(|a| a.ip().is_loopback())
}

fn is_loopback_url(url: &str) -> bool {
    listen_addr(url).is_some()
}

/// The error's text with its causes (reqwest's own says little: "error sending request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// What of a connection's failure is TLS refusing the server (its certificate, the handshake),
/// if that is what failed.
fn tls_refusal(e: &reqwest::Error) -> Option<String> {
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(c) = cur {
        let text = c.to_string();
        let lower = text.to_ascii_lowercase();
        if lower.contains("certificate") || lower.contains("handshake") {
            return Some(text);
        }
        cur = c.source();
    }
    None
}

/// The CA certificates of `HANGAR_CA_FILE`, trusted on top of the system's.
fn extra_roots() -> Result<Vec<reqwest::Certificate>, CliError> {
    let Some(file) = hangar_protocol::env::var_os(hangar_protocol::env::HANGAR_CA_FILE) else {
        return Ok(Vec::new());
    };
    let shown = std::path::PathBuf::from(&file).display().to_string();
    let pem = std::fs::read(&file)
        .map_err(|e| CliError::Usage(format!("HANGAR_CA_FILE {shown}: {e}")))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        CliError::Usage(format!(
            "HANGAR_CA_FILE {shown}: not PEM certificates ({}); give the CA's certificate as PEM",
            chain(&e)
        ))
    })?;
    if certs.is_empty() {
        return Err(CliError::Usage(format!(
            "HANGAR_CA_FILE {shown}: no certificate in it"
        )));
    }
    Ok(certs)
}

impl Api {
    pub fn new(base: &str, token: Option<String>) -> Result<Api, CliError> {
        let mut b = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(ANSWER_TIMEOUT);
        if is_loopback_url(base) {
            b = b.no_proxy();
        }
        for cert in extra_roots()? {
            b = b.add_root_certificate(cert);
        }
        let http = b
            .build()
            .map_err(|e| CliError::Failed(format!("cannot make an HTTP client: {}", chain(&e))))?;
        Ok(Api {
            base: base.trim_end_matches('/').to_owned(),
            token,
            transport: Transport::Http(http),
        })
    }

    /// A client that calls `router` in this process, as `token`'s holder. `shown` names it in
    /// messages.
    pub fn in_process(router: axum::Router, token: String, shown: &str) -> Api {
        Api {
            base: shown.to_owned(),
            token: Some(token),
            transport: Transport::InProcess(router),
        }
    }

    /// The server named by `HANGAR_URL`, with the token from the environment.
    pub fn from_env(home: &Path) -> Result<Api, CliError> {
        Api::new(&url_from_env(), token_from_env(home))
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn sort(&self, e: reqwest::Error) -> ApiError {
        if e.is_builder() {
            return ApiError::Other(format!("bad server URL {}: {}", self.base, chain(&e)));
        }
        if e.is_connect()
            && let Some(why) = tls_refusal(&e)
        {
            // A server is there, but it is not the one to trust: never taken for absent (that
            // would answer from this machine's own store instead).
            return ApiError::Unreachable(format!(
                "the hangar server at {} was refused: its TLS certificate is not trusted ({why}); if a private CA signed it, give that CA's certificate in HANGAR_CA_FILE",
                self.base
            ));
        }
        if e.is_connect() {
            // The innermost cause says it: "Connection refused (os error 111)".
            let mut inner: &dyn std::error::Error = &e;
            while let Some(c) = inner.source() {
                inner = c;
            }
            return ApiError::NoServer(format!(
                "no hangar server answers at {} ({inner})",
                self.base
            ));
        }
        ApiError::Unreachable(format!(
            "the hangar server at {} did not answer: {}",
            self.base,
            chain(&e)
        ))
    }

    /// Sends one request; the answer's status and its body as a stream. `timeout` limits the
    /// whole answer over HTTP (in process, the caller limits it).
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
        with_token: bool,
    ) -> Result<(u16, Streamed), ApiError> {
        let token = self.token.as_deref().filter(|_| with_token);
        match &self.transport {
            Transport::Http(http) => {
                let mut r = http
                    .request(method, format!("{}{path}", self.base))
                    .timeout(timeout);
                if let Some(t) = token {
                    r = r.bearer_auth(t);
                }
                if let Some(b) = body {
                    r = r.json(b);
                }
                let resp = r.send().await.map_err(|e| self.sort(e))?;
                Ok((resp.status().as_u16(), Streamed(StreamBody::Http(resp))))
            }
            Transport::InProcess(router) => {
                let mut req = axum::http::Request::builder().method(method).uri(path);
                if let Some(t) = token {
                    req = req.header(axum::http::header::AUTHORIZATION, format!("Bearer {t}"));
                }
                let bytes = match body {
                    Some(b) => {
                        req = req.header(axum::http::header::CONTENT_TYPE, "application/json");
                        serde_json::to_vec(b).map_err(|e| ApiError::Other(e.to_string()))?
                    }
                    None => Vec::new(),
                };
                let req = req
                    .body(axum::body::Body::from(bytes))
                    .map_err(|e| ApiError::Other(format!("request {path}: {e}")))?;
                let resp = match tower::ServiceExt::oneshot(router.clone(), req).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                let status = resp.status().as_u16();
                Ok((
                    status,
                    Streamed(StreamBody::InProcess(resp.into_body().into_data_stream())),
                ))
            }
        }
    }

    /// The whole answer as JSON, or the error it says.
    async fn answer(&self, (status, mut body): (u16, Streamed)) -> Result<Value, ApiError> {
        let mut bytes = Vec::new();
        let read = async {
            while let Some(part) = body.chunk().await? {
                bytes.extend_from_slice(&part);
            }
            Ok::<(), String>(())
        };
        match tokio::time::timeout(ANSWER_TIMEOUT, read).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(ApiError::Unreachable(format!(
                    "the hangar server at {} did not answer: {e}",
                    self.base
                )));
            }
            Err(_) => {
                return Err(ApiError::Unreachable(format!(
                    "the hangar server at {} did not answer within {} s",
                    self.base,
                    ANSWER_TIMEOUT.as_secs()
                )));
            }
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return Ok(body);
        }
        // Something in front of the server (a proxy) may answer without hangar's error body.
        let message = serde_json::from_value::<hangar_api::ErrorBody>(body)
            .map(|b| b.error.message)
            .unwrap_or_else(|_| format!("the server at {} answered {status}", self.base));
        Err(ApiError::Status { status, message })
    }

    /// `GET /v1/health` (no token needed): is a hangar server there?
    pub async fn health(&self) -> Result<(), ApiError> {
        let sent = self
            .send(
                reqwest::Method::GET,
                "/v1/health",
                None,
                Duration::from_secs(10),
                false,
            )
            .await?;
        let v = self.answer(sent).await?;
        if serde_json::from_value::<hangar_api::Health>(v).is_ok_and(|h| h.ok) {
            Ok(())
        } else {
            Err(ApiError::Other(format!(
                "{} answers, but not as a hangar server (is HANGAR_URL right?)",
                self.base
            )))
        }
    }

    /// `GET path`, its answer read as the API's type for it.
    pub async fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let v = self.get(path).await?;
        self.typed(path, v)
    }

    /// `POST path` with one of the API's request types, its answer read as the API's type for it.
    pub async fn post_as<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl hangar_api::RequestBody,
    ) -> Result<T, ApiError> {
        let v = self.post(path, body).await?;
        self.typed(path, v)
    }

    /// [`Api::post_as`] for work that takes as long as its provider needs (a sandbox whose image
    /// is pulled, a large repository copied): waits up to `limit` for the answer.
    pub async fn post_waiting<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl hangar_api::RequestBody,
        limit: Duration,
    ) -> Result<T, ApiError> {
        let body = serde_json::to_value(body)
            .map_err(|e| ApiError::Other(format!("the body of POST {path}: {e}")))?;
        let sent = self
            .send(reqwest::Method::POST, path, Some(&body), limit, true)
            .await?;
        let v = self.answer(sent).await?;
        self.typed(path, v)
    }

    /// `DELETE path`, its answer read as the API's type for it.
    pub async fn delete_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let v = self.delete(path).await?;
        self.typed(path, v)
    }

    /// An answer as its hangar-api type: one that does not fit is a server of another version
    /// (or not hangar), said so, rather than fields read as missing.
    pub fn typed<T: DeserializeOwned>(&self, path: &str, v: Value) -> Result<T, ApiError> {
        serde_json::from_value(v).map_err(|e| {
            ApiError::Other(format!(
                "the server at {} answered {path} in a shape this hangar does not read ({e}): are the server and this CLI the same version?",
                self.base
            ))
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, ApiError> {
        let sent = self
            .send(reqwest::Method::GET, path, None, ANSWER_TIMEOUT, true)
            .await?;
        self.answer(sent).await
    }

    /// `POST path` with one of the API's request types (only those: a body is never JSON
    /// written by hand, so a field renamed in hangar-api breaks this build); the answer as JSON.
    pub async fn post(
        &self,
        path: &str,
        body: &impl hangar_api::RequestBody,
    ) -> Result<Value, ApiError> {
        let body = serde_json::to_value(body)
            .map_err(|e| ApiError::Other(format!("the body of POST {path}: {e}")))?;
        let sent = self
            .send(
                reqwest::Method::POST,
                path,
                Some(&body),
                ANSWER_TIMEOUT,
                true,
            )
            .await?;
        self.answer(sent).await
    }

    /// `GET path` answered as a stream (no time limit on the whole answer: the caller limits
    /// how long it waits between its parts); an error status is read as any other answer's.
    pub async fn stream(&self, path: &str) -> Result<Streamed, ApiError> {
        let (status, body) = self
            .send(
                reqwest::Method::GET,
                path,
                None,
                Duration::from_secs(365 * 24 * 3600),
                true,
            )
            .await?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        Err(self
            .answer((status, body))
            .await
            .err()
            .unwrap_or_else(|| ApiError::Other("the server answered an error".into())))
    }

    /// `POST path` (with `body`) answered as a stream, as [`Api::stream`] reads it: an action
    /// whose progress comes as it goes (`hangar env apply --pull`).
    pub async fn post_stream(
        &self,
        path: &str,
        body: &impl hangar_api::RequestBody,
    ) -> Result<Streamed, ApiError> {
        let body = serde_json::to_value(body)
            .map_err(|e| ApiError::Other(format!("the body of POST {path}: {e}")))?;
        let (status, streamed) = self
            .send(
                reqwest::Method::POST,
                path,
                Some(&body),
                Duration::from_secs(365 * 24 * 3600),
                true,
            )
            .await?;
        if (200..300).contains(&status) {
            return Ok(streamed);
        }
        Err(self
            .answer((status, streamed))
            .await
            .err()
            .unwrap_or_else(|| ApiError::Other("the server answered an error".into())))
    }

    pub async fn delete(&self, path: &str) -> Result<Value, ApiError> {
        let sent = self
            .send(reqwest::Method::DELETE, path, None, ANSWER_TIMEOUT, true)
            .await?;
        self.answer(sent).await
    }
}

/// A path segment as the URL needs it (ids are plain, but a person may type anything).
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_of_local_urls_only() {
        assert_eq!(
            listen_addr("http://127.0.0.1:7700"),
            Some("127.0.0.1:7700".parse().unwrap())
        );
        assert_eq!(
            listen_addr("http://127.0.0.1:7701/"),
            Some("127.0.0.1:7701".parse().unwrap())
        );
        assert_eq!(
            listen_addr("http://[::1]:7700"),
            Some("[::1]:7700".parse().unwrap())
        );
        assert_eq!(listen_addr("https://127.0.0.1:7700"), None);
        assert_eq!(listen_addr("http://192.0.2.1:7700"), None);
    }

    #[test]
    fn errors_follow_the_exit_table() {
        let st = |status, message: &str| ApiError::Status {
            status,
            message: message.into(),
        };
        assert!(matches!(st(400, "x").into_cli(), CliError::Usage(_)));
        assert!(matches!(
            st(409, "the turn has ended (run r)").into_cli(),
            CliError::Ended(_)
        ));
        match st(422, "refused: no such request").into_cli() {
            CliError::Refused(r) => assert_eq!(r, "no such request"),
            other => panic!("{other:?}"),
        }
        assert!(st(503, "x").transient());
        assert!(!st(404, "x").transient());
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
    }
}
