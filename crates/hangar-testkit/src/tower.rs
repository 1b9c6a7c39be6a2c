//! [`TowerDouble`]: a stand-in for Tower, the approvals server, following
//! `../shared/design/tower-contract.md` (std only, 127.0.0.1, port 0 by default).
//!
//! Contract endpoints: `POST /hooks/claude-code` and `POST /approvals` (answer `allow`, `deny` or
//! `wait` with an approval), `GET /approvals/<id>?wait=N` (long poll, at most 60 s). Every
//! request needs `Authorization: Bearer <key>`: an unknown key gets 401, a key marked forbidden
//! 403, both with `{"error","message"}`. Only in the double: `POST /_test/approvals/<id>/sign`
//! `{"decision": "allow"|"deny", "person": ...}`, and the knobs below to fail in each way.
//!
//! Passports: `POST /oauth/token` (RFC 8693, form-encoded) verifies hangar's sandbox token
//! against hangar's keys ([`TowerDouble::trust_hangar`]: fetched from
//! `<hangar>/.well-known/jwks.json` at each exchange, or [`TowerDouble::trust_keys`]) and its
//! claims (`iss`, `aud` = the double, `exp`, at most 5 minutes, `sub` `hangar:env:...`), then
//! issues a passport (`iss` the double, `sub` the token's person, `agent` the `audience`,
//! `email`, `iat`, `exp`, `jti`) signed with its own key, published at
//! `/.well-known/jwks.json`. The passports it issued, unexpired, are accepted as bearer tokens.
//! [`PassportFault`] gets them wrong in each way hangar checks, or refuses the exchange; and
//! [`TowerDouble::set_passport_seconds`] makes them short-lived. Neither endpoint needs a bearer
//! token, and the [`TowerFault`] knobs do not touch them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::error::TestkitError;
use crate::http::{self, HttpRequest};
use crate::jose::{self, PassportAlg, Signer};

const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// How the double gets a passport wrong (each check hangar makes), or refuses the exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassportFault {
    /// Issue good passports.
    None,
    /// `agent` names another agent.
    WrongAgent,
    /// `sub` and `email` are another person's.
    WrongPerson,
    /// `iss` is not the double.
    WrongIssuer,
    /// `exp` has passed already.
    Expired,
    /// Signed by a key that is not in the double's JWKS (under the published key's `kid`).
    BadSignature,
    /// `400 {"error": "invalid_grant"}`.
    ExchangeRefused,
}

/// One token exchange the double answered.
#[derive(Clone, Debug)]
pub struct TowerExchange {
    /// The form as sent.
    pub form: Vec<(String, String)>,
    /// The claims of hangar's sandbox token, once verified (`Null` when it did not verify).
    pub subject: Value,
    /// The passport issued, if one was.
    pub passport: Option<String>,
    /// Why none was.
    pub error: Option<String>,
}

#[derive(Clone, Debug)]
enum Trust {
    /// hangar's URL: its keys are read from `<url>/.well-known/jwks.json`, and it is the issuer.
    Url(String),
    Keys {
        issuer: String,
        jwks: Value,
    },
}

/// How Tower answers a call (`/hooks/claude-code`, `/approvals`).
#[derive(Clone, Debug, PartialEq)]
pub enum TowerAnswer {
    Allow(String),
    Deny(String),
    /// `wait` with a new approval; `sign` signs it after a delay (`true` allows), else it waits
    /// for [`TowerDouble::sign`] or `/_test/approvals/<id>/sign`.
    Wait {
        reason: String,
        sign: Option<(Duration, bool)>,
    },
}

/// A way to fail, for the contract's endpoints (calls and polls alike).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TowerFault {
    /// Answer normally.
    None,
    /// Accept the connection and close it without a word.
    Hangup,
    /// This status with an `{"error","message"}` body (500, 401, 403, ...).
    Status(u16),
    /// `200` with a body that is not JSON.
    Garbage,
    /// `200` with JSON of another shape (no `decision` / `state`).
    WrongShape,
    /// `200` with a `content-length` longer than the body sent, then the connection closes.
    Truncated,
    /// `200` with a body of this many bytes (valid JSON, padded).
    Huge(usize),
}

/// One request the double received.
#[derive(Clone, Debug)]
pub struct TowerRequest {
    pub method: String,
    /// The target with its query string.
    pub target: String,
    pub authorization: Option<String>,
    /// The JSON body (`Null` when none or not JSON).
    pub body: Value,
}

#[derive(Clone, Debug)]
struct Approval {
    state: &'static str,
    reason: String,
    signer: Option<(String, String)>,
}

#[derive(Debug)]
struct State {
    answer: TowerAnswer,
    fault: TowerFault,
    delay: Duration,
    keys: Vec<String>,
    forbidden: Vec<String>,
    requests: Vec<TowerRequest>,
    approvals: HashMap<String, Approval>,
    passport_key: Signer,
    /// Signs [`PassportFault::BadSignature`] passports (same `kid`, another key).
    rogue_key: Signer,
    trust: Option<Trust>,
    passport_fault: PassportFault,
    passport_seconds: u64,
    exchanges: Vec<TowerExchange>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stopping: AtomicBool,
    next_id: AtomicU64,
    base: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The Tower double. Stops (and frees its port) when dropped.
#[derive(Debug)]
pub struct TowerDouble {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// The key the double accepts unless told otherwise.
pub const TOWER_KEY: &str = "tower-test-key";

impl TowerDouble {
    /// Starts on 127.0.0.1 (port 0: a free one) answering `allow`, accepting [`TOWER_KEY`].
    pub fn start() -> Result<TowerDouble, TestkitError> {
        TowerDouble::start_on(0)
    }

    /// Starts on 127.0.0.1:`port`.
    pub fn start_on(port: u16) -> Result<TowerDouble, TestkitError> {
        TowerDouble::start_with(port, None)
    }

    /// Starts on 127.0.0.1 (a free port) speaking HTTPS only, with the PEM certificate chain
    /// `cert` and its PEM private key `key` (rustls); [`TowerDouble::url`] is then `https://`.
    pub fn start_tls(cert: &Path, key: &Path) -> Result<TowerDouble, TestkitError> {
        TowerDouble::start_with(0, Some(crate::tls::server_config(cert, key)?))
    }

    fn start_with(
        port: u16,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Result<TowerDouble, TestkitError> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .map_err(|e| TestkitError::io("binding the Tower double to 127.0.0.1", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestkitError::io("reading the Tower double's address", e))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                answer: TowerAnswer::Allow("allowed by the Tower double".into()),
                fault: TowerFault::None,
                delay: Duration::ZERO,
                keys: vec![TOWER_KEY.into()],
                forbidden: Vec::new(),
                requests: Vec::new(),
                approvals: HashMap::new(),
                passport_key: Signer::generate(PassportAlg::EdDsa, "tower-double-1")?,
                rogue_key: Signer::generate(PassportAlg::EdDsa, "tower-double-1")?,
                trust: None,
                passport_fault: PassportFault::None,
                passport_seconds: 900,
                exchanges: Vec::new(),
            }),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            base: format!("{}://{addr}", if tls.is_some() { "https" } else { "http" }),
        });
        let s = Arc::clone(&shared);
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let s = Arc::clone(&s);
                let tls = tls.clone();
                thread::spawn(move || match tls {
                    None => serve(&s, conn),
                    Some(cfg) => {
                        // A client that refuses the certificate ends the handshake: no request.
                        if let Ok(c) = rustls::ServerConnection::new(cfg) {
                            serve(&s, rustls::StreamOwned::new(c, conn));
                        }
                    }
                });
            }
        });
        Ok(TowerDouble { addr, shared })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash): `HANGAR_GOVERNANCE_URL`.
    pub fn url(&self) -> String {
        self.shared.base.clone()
    }

    /// A URL where nothing listens (Tower down): a port bound and released at once.
    pub fn down_url() -> Result<String, TestkitError> {
        let l = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| TestkitError::io("binding a port to release", e))?;
        let addr = l
            .local_addr()
            .map_err(|e| TestkitError::io("reading a released port", e))?;
        drop(l);
        Ok(format!("http://{addr}"))
    }

    /// How calls are answered from now on.
    pub fn set_answer(&self, a: TowerAnswer) {
        self.shared.lock().answer = a;
    }

    /// How every contract endpoint fails from now on ([`TowerFault::None`] to stop failing).
    pub fn set_fault(&self, f: TowerFault) {
        self.shared.lock().fault = f;
    }

    /// A pause before every answer (slow Tower).
    pub fn set_delay(&self, d: Duration) {
        self.shared.lock().delay = d;
    }

    /// The keys (or passports) accepted; others get 401.
    pub fn set_keys(&self, keys: &[&str]) {
        self.shared.lock().keys = keys.iter().map(|k| (*k).to_owned()).collect();
    }

    /// Keys that are known but may not make calls: 403.
    pub fn set_forbidden(&self, keys: &[&str]) {
        self.shared.lock().forbidden = keys.iter().map(|k| (*k).to_owned()).collect();
    }

    /// Trusts the sandbox tokens of the hangar at `url` (its keys read from
    /// `<url>/.well-known/jwks.json` at each exchange; `iss` must be `url`).
    pub fn trust_hangar(&self, url: &str) {
        self.shared.lock().trust = Some(Trust::Url(url.trim_end_matches('/').to_owned()));
    }

    /// Trusts sandbox tokens from `issuer` signed by a key of `jwks` (`{"keys": [...]}`).
    pub fn trust_keys(&self, issuer: &str, jwks: Value) {
        self.shared.lock().trust = Some(Trust::Keys {
            issuer: issuer.trim_end_matches('/').to_owned(),
            jwks,
        });
    }

    /// How passports are issued from now on ([`PassportFault::None`]: good ones).
    pub fn set_passport_fault(&self, f: PassportFault) {
        self.shared.lock().passport_fault = f;
    }

    /// A passport's lifetime (900 s unless told otherwise).
    pub fn set_passport_seconds(&self, s: u64) {
        self.shared.lock().passport_seconds = s;
    }

    /// Signs passports with a new key of this algorithm from now on.
    pub fn set_passport_alg(&self, alg: PassportAlg) -> Result<(), TestkitError> {
        let key = Signer::generate(alg, "tower-double-2")?;
        let rogue = Signer::generate(alg, "tower-double-2")?;
        let mut st = self.shared.lock();
        st.passport_key = key;
        st.rogue_key = rogue;
        Ok(())
    }

    /// A passport for `sub` (with `email`, for `agent`) as the double would issue one now, the
    /// passport fault and lifetime applied, without an exchange: for tests of what reads it.
    pub fn mint_passport(&self, sub: &str, email: Option<&str>, agent: &str) -> String {
        let (fault, seconds, key, rogue) = {
            let st = self.shared.lock();
            (
                st.passport_fault.clone(),
                st.passport_seconds,
                st.passport_key.clone(),
                st.rogue_key.clone(),
            )
        };
        make_passport(
            &self.shared,
            sub,
            email,
            agent,
            (&fault, seconds, &key, &rogue),
        )
    }

    /// The double's public keys (`/.well-known/jwks.json`).
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.shared.lock().passport_key.public_jwk()]})
    }

    /// Every token exchange so far, in order.
    pub fn exchanges(&self) -> Vec<TowerExchange> {
        self.shared.lock().exchanges.clone()
    }

    /// Signs a pending approval as `person` (`allow` true or false); false if there is none.
    pub fn sign(&self, id: &str, allow: bool, person: &str) -> bool {
        sign(&self.shared, id, allow, person)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<TowerRequest> {
        self.shared.lock().requests.clone()
    }

    /// The calls (`POST /hooks/claude-code` and `POST /approvals`) received so far.
    pub fn calls(&self) -> Vec<TowerRequest> {
        self.requests()
            .into_iter()
            .filter(|r| {
                r.method == "POST"
                    && !r.target.starts_with("/_test/")
                    && !r.target.starts_with("/oauth/")
            })
            .collect()
    }

    /// Ids of the approvals created so far.
    pub fn approvals(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.shared.lock().approvals.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Waits until `n` calls have arrived.
    pub fn wait_for_calls(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<TowerRequest>, TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let calls = self.calls();
            if calls.len() >= n {
                return Ok(calls);
            }
            if Instant::now() > deadline {
                return Err(TestkitError::Timeout {
                    what: "Tower calls",
                    wanted: n,
                    got: calls.len(),
                    waited: timeout,
                });
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TowerDouble {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wake the accept loop so it sees `stopping`.
        let _ = TcpStream::connect(self.addr);
    }
}

fn sign(shared: &Shared, id: &str, allow: bool, person: &str) -> bool {
    let mut st = shared.lock();
    let Some(a) = st.approvals.get_mut(id) else {
        return false;
    };
    if a.state != "pending" {
        return false;
    }
    a.state = if allow { "allowed" } else { "denied" };
    a.reason = format!("{} by {person}", if allow { "signed" } else { "refused" });
    a.signer = Some((person.to_owned(), format!("{person}@example.com")));
    drop(st);
    shared.changed.notify_all();
    true
}

/// One connection's two ends (request reader, answer writer) over one stream, plain or TLS:
/// the double reads a request, then writes its answer, never both at once.
struct Both<S>(Rc<RefCell<S>>);

impl<S: Read> Read for Both<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

impl<S: Write> Write for Both<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

fn serve<S: Read + Write>(shared: &Arc<Shared>, stream: S) {
    let both = Rc::new(RefCell::new(stream));
    let mut writer = Both(Rc::clone(&both));
    let mut reader = BufReader::new(Both(both));
    loop {
        let req = match http::read_request(&mut reader, &mut writer) {
            Ok(Some(r)) => r,
            _ => return,
        };
        let keep_alive = !req.wants_close() && !shared.stopping.load(Ordering::SeqCst);
        if respond(shared, &req, &mut writer, keep_alive).is_err() || !keep_alive {
            // Dropping both ends closes the connection.
            let _ = writer.flush();
            return;
        }
    }
}

fn error(code: &str, message: &str) -> Value {
    json!({"error": code, "message": message})
}

/// What the double is set to do, read (with the request recorded) under one lock.
struct Setting {
    fault: TowerFault,
    delay: Duration,
    answer: TowerAnswer,
    /// The bearer token is a key or a passport the double knows.
    known: bool,
    /// The bearer token is one the double refuses (403).
    forbidden: bool,
}

/// Records the request and reads the double's setting for it.
fn record(shared: &Arc<Shared>, req: &HttpRequest, body: &Value) -> Setting {
    let auth = req.header("authorization").map(str::to_owned);
    let mut st = shared.lock();
    st.requests.push(TowerRequest {
        method: req.method.clone(),
        target: req.target.clone(),
        authorization: auth.clone(),
        body: body.clone(),
    });
    let token = auth.as_deref().and_then(|a| a.strip_prefix("Bearer "));
    Setting {
        fault: st.fault.clone(),
        delay: st.delay,
        answer: st.answer.clone(),
        known: token.is_some_and(|t| st.keys.iter().any(|k| k == t) || passport_ok(&st, t)),
        forbidden: token.is_some_and(|t| st.forbidden.iter().any(|k| k == t)),
    }
}

fn send(w: &mut impl Write, status: u16, v: &Value, keep_alive: bool) -> std::io::Result<()> {
    http::write_json(w, status, &[], v.to_string().as_bytes(), keep_alive)
}

fn respond(
    shared: &Arc<Shared>,
    req: &HttpRequest,
    w: &mut impl Write,
    keep_alive: bool,
) -> std::io::Result<()> {
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let Setting {
        fault,
        delay,
        answer,
        known,
        forbidden,
    } = record(shared, req, &body);
    let path = req.path().to_owned();
    // The double's own endpoint: no auth, no faults.
    if let Some(rest) = path.strip_prefix("/_test/approvals/")
        && let Some(id) = rest.strip_suffix("/sign")
        && req.method == "POST"
    {
        let allow = body.get("decision").and_then(Value::as_str) == Some("allow");
        let person = body
            .get("person")
            .and_then(Value::as_str)
            .unwrap_or("someone");
        return if sign(shared, id, allow, person) {
            send(w, 200, &json!({"id": id, "signed": true}), keep_alive)
        } else {
            send(
                w,
                404,
                &error("not_found", "no pending approval with that id"),
                keep_alive,
            )
        };
    }
    // Passports: no bearer token, no faults but their own.
    match (req.method.as_str(), path.as_str()) {
        ("GET", "/.well-known/jwks.json") => {
            let jwks = json!({"keys": [shared.lock().passport_key.public_jwk()]});
            return send(w, 200, &jwks, keep_alive);
        }
        ("POST", "/oauth/token") => {
            let (status, v) = exchange(shared, &req.body);
            return send(w, status, &v, keep_alive);
        }
        _ => {}
    }
    if !delay.is_zero() {
        thread::sleep(delay);
    }
    if let Some(done) = answer_fault(&fault, w, keep_alive) {
        return done;
    }
    if !known {
        return send(
            w,
            401,
            &error("unauthorized", "missing, unknown, expired or revoked token"),
            keep_alive,
        );
    }
    if forbidden {
        return send(
            w,
            403,
            &error("forbidden", "this token may not make this call"),
            keep_alive,
        );
    }
    match (req.method.as_str(), path.as_str()) {
        ("POST", "/hooks/claude-code" | "/approvals") => {
            if body.get("tool_name").and_then(Value::as_str).is_none() {
                return send(
                    w,
                    400,
                    &error("invalid_request", "tool_name is required"),
                    keep_alive,
                );
            }
            send(w, 200, &verdict(shared, answer), keep_alive)
        }
        ("GET", p) if p.starts_with("/approvals/") => {
            let (status, v) = approval_state(shared, req, &p["/approvals/".len()..]);
            send(w, status, &v, keep_alive)
        }
        _ => send(
            w,
            404,
            &error("not_found", "no such endpoint in the Tower contract"),
            keep_alive,
        ),
    }
}

/// The fault the double is set to, answered (`None`: no fault, answer normally).
fn answer_fault(
    fault: &TowerFault,
    w: &mut impl Write,
    keep_alive: bool,
) -> Option<std::io::Result<()>> {
    Some(match fault {
        TowerFault::None => return None,
        TowerFault::Hangup => Err(std::io::Error::other("hang up")),
        TowerFault::Status(code) => send(
            w,
            *code,
            &error("fault", &format!("the Tower double answers {code}")),
            keep_alive,
        ),
        TowerFault::Garbage => http::write_json(w, 200, &[], b"<html>not json at all", keep_alive),
        TowerFault::WrongShape => send(w, 200, &json!({"verdict": "yes", "ok": true}), keep_alive),
        TowerFault::Truncated => truncated(w),
        TowerFault::Huge(n) => {
            let pad = "x".repeat(*n);
            send(
                w,
                200,
                &json!({"decision": "allow", "reason": "huge", "pad": pad}),
                keep_alive,
            )
        }
    })
}

/// An answer cut off halfway through its body.
fn truncated(w: &mut impl Write) -> std::io::Result<()> {
    let full = json!({"decision": "allow", "reason": "cut short"}).to_string();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        full.len() + 100
    );
    w.write_all(head.as_bytes())?;
    w.write_all(&full.as_bytes()[..full.len() / 2])?;
    w.flush()?;
    Err(std::io::Error::other("truncated"))
}

/// The verdict on a tool call the double is set to give; a wait opens a pending approval
/// (signed after a while when set so).
fn verdict(shared: &Arc<Shared>, answer: TowerAnswer) -> Value {
    match answer {
        TowerAnswer::Allow(reason) => json!({"decision": "allow", "reason": reason}),
        TowerAnswer::Deny(reason) => json!({"decision": "deny", "reason": reason}),
        TowerAnswer::Wait { reason, sign: auto } => {
            let id = format!("ap_{}", shared.next_id.fetch_add(1, Ordering::SeqCst));
            shared.lock().approvals.insert(
                id.clone(),
                Approval {
                    state: "pending",
                    reason: reason.clone(),
                    signer: None,
                },
            );
            if let Some((after, allow)) = auto {
                let s = Arc::clone(shared);
                let id = id.clone();
                thread::spawn(move || {
                    thread::sleep(after);
                    sign(&s, &id, allow, "signer");
                });
            }
            json!({"decision": "wait", "approval": {"id": id, "url": format!("{}/approvals/{id}", shared.base)}, "reason": reason})
        }
    }
}

/// `GET /approvals/{id}?wait=S`: the approval's state once it is decided or `S` seconds
/// (at most 60) have passed.
fn approval_state(shared: &Arc<Shared>, req: &HttpRequest, id: &str) -> (u16, Value) {
    let wait = req
        .target
        .split_once("wait=")
        .and_then(|(_, v)| v.split('&').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(60);
    let deadline = Instant::now() + Duration::from_secs(wait);
    let mut st = shared.lock();
    loop {
        let Some(a) = st.approvals.get(id).cloned() else {
            drop(st);
            return (404, error("not_found", "no approval with that id"));
        };
        let now = Instant::now();
        if a.state != "pending" || now >= deadline || shared.stopping.load(Ordering::SeqCst) {
            drop(st);
            let signer = a
                .signer
                .map(|(p, e)| json!({"person": p, "email": e}))
                .unwrap_or(Value::Null);
            return (
                200,
                json!({"id": id, "state": a.state, "reason": a.reason, "signer": signer}),
            );
        }
        st = shared
            .changed
            .wait_timeout(st, deadline - now)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Whether `token` is a passport the double issued that has not expired.
fn passport_ok(st: &State, token: &str) -> bool {
    let jwks = json!({"keys": [st.passport_key.public_jwk()]});
    jose::verify(token, &jwks).is_ok_and(|c| {
        c.get("exp")
            .and_then(Value::as_i64)
            .is_some_and(|e| e > now_secs())
    })
}

/// `POST /oauth/token`: hangar's sandbox token in, a passport out (or why not).
fn exchange(shared: &Arc<Shared>, body: &[u8]) -> (u16, Value) {
    let form = jose::form(body);
    let get = |k: &str| {
        form.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let (trust, fault, seconds, key, rogue) = {
        let st = shared.lock();
        (
            st.trust.clone(),
            st.passport_fault.clone(),
            st.passport_seconds,
            st.passport_key.clone(),
            st.rogue_key.clone(),
        )
    };
    let record = |subject: Value, passport: Option<String>, error: Option<String>| {
        shared.lock().exchanges.push(TowerExchange {
            form: form.clone(),
            subject,
            passport,
            error,
        });
    };
    let refuse = |code: &str, why: String, subject: Value| {
        record(subject, None, Some(why.clone()));
        (400, json!({"error": code, "error_description": why}))
    };
    if get("grant_type").as_deref() != Some(TOKEN_EXCHANGE) {
        return refuse(
            "unsupported_grant_type",
            "grant_type must be token-exchange".into(),
            Value::Null,
        );
    }
    if get("subject_token_type").as_deref() != Some(JWT_TYPE) {
        return refuse(
            "invalid_request",
            "subject_token_type must be the JWT type".into(),
            Value::Null,
        );
    }
    let (Some(subject), Some(audience)) = (get("subject_token"), get("audience")) else {
        return refuse(
            "invalid_request",
            "subject_token and audience are required".into(),
            Value::Null,
        );
    };
    let (issuer, jwks) = match trust {
        None => {
            return refuse(
                "invalid_grant",
                "the Tower double trusts no hangar (trust_hangar or trust_keys)".into(),
                Value::Null,
            );
        }
        Some(Trust::Keys { issuer, jwks }) => (issuer, jwks),
        Some(Trust::Url(url)) => {
            let got = crate::browser::http(
                "GET",
                &format!("{url}/.well-known/jwks.json"),
                None,
                None,
                Duration::from_secs(10),
            );
            match got {
                Ok((200, b)) => (url, serde_json::from_slice(&b).unwrap_or(Value::Null)),
                Ok((status, _)) => {
                    return refuse(
                        "invalid_grant",
                        format!("hangar's keys at {url}/.well-known/jwks.json answered {status}"),
                        Value::Null,
                    );
                }
                Err(e) => {
                    return refuse(
                        "invalid_grant",
                        format!("hangar's keys at {url}/.well-known/jwks.json: {e}"),
                        Value::Null,
                    );
                }
            }
        }
    };
    let claims = match jose::verify(&subject, &jwks) {
        Ok(c) => c,
        Err(e) => return refuse("invalid_grant", format!("hangar's token: {e}"), Value::Null),
    };
    let now = now_secs();
    let text = |k: &str| claims.get(k).and_then(Value::as_str).unwrap_or_default();
    let num = |k: &str| claims.get(k).and_then(Value::as_i64);
    let problem = if text("iss") != issuer {
        Some(format!(
            "iss {:?} is not the trusted hangar {issuer:?}",
            text("iss")
        ))
    } else if text("aud") != shared.base {
        Some(format!("aud {:?} is not this Tower", text("aud")))
    } else if !text("sub").starts_with("hangar:env:") {
        Some(format!("sub {:?} is not hangar:env:<env>", text("sub")))
    } else if text("jti").is_empty() {
        Some("no jti".into())
    } else if num("exp").is_none_or(|e| e <= now) {
        Some("expired".into())
    } else if num("exp").zip(num("iat")).is_none_or(|(e, i)| e - i > 300) {
        Some("lives longer than 5 minutes".into())
    } else {
        None
    };
    if let Some(p) = problem {
        return refuse("invalid_grant", format!("hangar's token: {p}"), claims);
    }
    if fault == PassportFault::ExchangeRefused {
        return refuse(
            "invalid_grant",
            "the Tower double refuses this exchange".into(),
            claims,
        );
    }
    let person = claims.get("person").and_then(Value::as_str);
    let token = make_passport(
        shared,
        person.unwrap_or(text("sub")),
        claims.get("email").and_then(Value::as_str),
        &audience,
        (&fault, seconds, &key, &rogue),
    );
    record(claims, Some(token.clone()), None);
    (
        200,
        json!({"access_token": token, "issued_token_type": JWT_TYPE, "token_type": "Bearer",
               "expires_in": seconds}),
    )
}

/// A passport for `sub`, signed (or got wrong) as `fault` says.
fn make_passport(
    shared: &Shared,
    sub: &str,
    email: Option<&str>,
    agent: &str,
    (fault, seconds, key, rogue): (&PassportFault, u64, &Signer, &Signer),
) -> String {
    let now = now_secs();
    let mut passport = json!({
        "iss": shared.base,
        "sub": sub,
        "agent": agent,
        "email": email,
        "iat": now,
        "exp": now + i64::try_from(seconds).unwrap_or(900),
        "jti": format!("pp_{}", shared.next_id.fetch_add(1, Ordering::SeqCst)),
    });
    let mut signer = key;
    match fault {
        PassportFault::WrongAgent => passport["agent"] = json!("someone-else"),
        PassportFault::WrongPerson => {
            passport["sub"] = json!("mallory@example.com");
            passport["email"] = json!("mallory@example.com");
        }
        PassportFault::WrongIssuer => passport["iss"] = json!("http://not-tower.invalid"),
        PassportFault::Expired => {
            passport["iat"] = json!(now - 1000);
            passport["exp"] = json!(now - 100);
        }
        PassportFault::BadSignature => signer = rogue,
        PassportFault::None | PassportFault::ExchangeRefused => {}
    }
    signer.sign(&passport)
}
