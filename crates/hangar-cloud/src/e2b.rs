//! The e2b provider: an E2B sandbox (a microVM made from a template) per hangar sandbox, through
//! E2B's HTTP API: `POST /sandboxes` and `DELETE /sandboxes/{id}` on the API
//! (`HANGAR_E2B_URL`, key in `HANGAR_E2B_API_KEY`), and the sandbox's own daemon (envd) for
//! processes: `process.Process/Start` (a Connect server stream, JSON), `SendInput` and
//! `CloseStdin` (Connect unary, JSON).
//!
//! No uid split: every command runs as the sandbox's root (E2B's `user` has passwordless sudo, so
//! a split between them would be none), and `capabilities` says so. `egress: none` is
//! `allow_internet_access: false`; `open` is E2B's default; an allowlist is E2B's own egress
//! firewall, `network: {allowOut: HOSTS, denyOut: [0.0.0.0/0]}` (E2B matches a name only on
//! port 80 by the Host header and on 443 by TLS's SNI, and lets DNS to 8.8.8.8 out whenever a
//! name is listed; hangar's proxy is not involved), which keeps less than hangar's proxy, so it
//! is refused unless the environment accepts it with `egress.enforcement: e2b-firewall`
//! ([`hangar_sandbox::E2B_FIREWALL_CAVEAT`]); `network: host` and resources (a
//! template's size is set when it is built) are refused. The environment's `image` is
//! the template (`base` when absent). Commands start under `env -i` with hangar's minimal
//! environment, as on the other providers; the workspace is the repository as a tar unpacked by
//! `tar -x`; copy in and read out run inside ([`hangar_sandbox::inside`]); tmux as on kubernetes.
//!
//! Attaching a person's terminal is a PTY process of envd running `tmux attach-session`
//! ([`terminal`]: `Start` with a `pty`, `SendInput`, `Update`, `SendSignal`), which
//! `hangar serve` starts with what [`E2bProvider::pty_target`] gives it and relays to
//! `hangar sb attach` (envd's token stays on the server); no host command does that, so
//! `attach_argv` names the E2B CLI's shell (`e2b sandbox connect ID`), from which
//! `tmux -S /run/hangar-tmux/default attach -t NAME` attaches by hand.
//! An E2B sandbox also ends at its timeout (`HANGAR_E2B_TIMEOUT_SECS`, 3600 by default), after
//! which hangar finds it gone; while a turn runs the control plane extends it
//! ([`E2bProvider::keep_alive`]).

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::StreamExt;
use hangar_sandbox::layout::{self, CTL_INSIDE, WORKSPACE};
use hangar_sandbox::{
    Capabilities, CreateRequest, E2B_FIREWALL_CAVEAT, Egress, EgressEnforcement, EnvSpec,
    ExecRequest, ExecStream, NetworkMode, Output, Provider, ProviderKind, Sandbox, SandboxError,
    Who, copy,
};
use serde_json::{Value, json};

use crate::{failed, shell_wrap};

pub mod terminal;
pub use terminal::PtyTarget;

/// envd's port in every E2B sandbox.
const ENVD_PORT: u16 = 49983;
use crate::TMUX_SOCKET;
/// The user commands run as.
const USER: &str = "root";

/// The e2b provider.
#[derive(Clone)]
pub struct E2bProvider {
    http: reqwest::Client,
    api: String,
    key: String,
    /// envd's address, `{sandbox}` standing for the sandbox's id (and `{domain}` for its domain).
    envd: String,
    domain: String,
    timeout: Duration,
}

impl std::fmt::Debug for E2bProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bProvider")
            .field("api", &self.api)
            .field("envd", &self.envd)
            .finish()
    }
}

fn env_var(name: &str) -> Option<String> {
    hangar_protocol::env::var(name).filter(|v| !v.is_empty())
}

impl E2bProvider {
    /// The provider configured by `HANGAR_E2B_API_KEY` (required), `HANGAR_E2B_URL` (the API,
    /// `https://api.e2b.dev` by default), `HANGAR_E2B_DOMAIN` (`e2b.app`) and
    /// `HANGAR_E2B_ENVD_URL` (envd's address with `{sandbox}` for the id; by default
    /// `https://49983-{sandbox}.{domain}`).
    pub fn from_env() -> Result<E2bProvider, SandboxError> {
        let key = env_var(hangar_protocol::env::HANGAR_E2B_API_KEY).ok_or_else(|| {
            SandboxError::Unavailable(
                "no E2B API key: set HANGAR_E2B_API_KEY (and HANGAR_E2B_URL for an API other than https://api.e2b.dev)".into(),
            )
        })?;
        let api = env_var(hangar_protocol::env::HANGAR_E2B_URL)
            .unwrap_or_else(|| "https://api.e2b.dev".into());
        let domain =
            env_var(hangar_protocol::env::HANGAR_E2B_DOMAIN).unwrap_or_else(|| "e2b.app".into());
        let envd = env_var(hangar_protocol::env::HANGAR_E2B_ENVD_URL)
            .unwrap_or_else(|| format!("https://{ENVD_PORT}-{{sandbox}}.{{domain}}"));
        let timeout = env_var(hangar_protocol::env::HANGAR_E2B_TIMEOUT_SECS)
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or(Duration::from_secs(3600));
        Self::new(api, key, envd, domain, timeout)
    }

    pub fn new(
        api: String,
        key: String,
        envd: String,
        domain: String,
        timeout: Duration,
    ) -> Result<E2bProvider, SandboxError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| SandboxError::Unavailable(format!("cannot make an HTTP client: {e}")))?;
        Ok(E2bProvider {
            http,
            api: api.trim_end_matches('/').to_owned(),
            key,
            envd,
            domain,
            timeout,
        })
    }

    fn envd_url(&self, sandbox: &str, domain: Option<&str>) -> String {
        self.envd
            .replace("{sandbox}", sandbox)
            .replace("{domain}", domain.unwrap_or(&self.domain))
            .trim_end_matches('/')
            .to_owned()
    }

    fn handle(sb: &Sandbox) -> Result<Envd, SandboxError> {
        let get = |k: &str| sb.handle.get(k).and_then(Value::as_str).map(str::to_owned);
        Ok(Envd {
            id: sb.id.clone(),
            sandbox: get("sandbox").ok_or_else(|| {
                SandboxError::Failed(format!("sandbox {} has no e2b sandbox id", sb.id))
            })?,
            url: get("envd").ok_or_else(|| {
                SandboxError::Failed(format!("sandbox {} has no envd address", sb.id))
            })?,
            token: get("token"),
        })
    }

    fn envd_request(&self, e: &Envd, method: &str, content_type: &str) -> reqwest::RequestBuilder {
        envd_post(&self.http, &e.url, e.token.as_deref(), method, content_type)
    }

    /// What a terminal in tmux session `session` of the sandbox needs: a PTY process of envd
    /// running `tmux attach-session` ([`terminal`]), with envd's token (for the server's relay,
    /// never for an API answer).
    pub fn pty_target(&self, sb: &Sandbox, session: &str) -> Result<PtyTarget, SandboxError> {
        layout::check_session(session)?;
        let e = Self::handle(sb)?;
        Ok(PtyTarget {
            sandbox: sb.id.clone(),
            envd: e.url,
            token: e.token,
            argv: [
                "tmux",
                "-S",
                TMUX_SOCKET,
                "attach-session",
                "-t",
                &format!("={session}"),
            ]
            .map(str::to_owned)
            .to_vec(),
        })
    }

    async fn unary(&self, e: &Envd, method: &str, body: Value) -> Result<(), SandboxError> {
        let r = self
            .envd_request(e, method, "application/json")
            .json(&body)
            .send()
            .await
            .map_err(|err| failed(format!("e2b, sandbox {}: {method}", e.id), err))?;
        if !r.status().is_success() {
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            return Err(e.error(status, &format!("{method}: {text}")));
        }
        Ok(())
    }

    /// Runs `argv` in the sandbox to its end (envd's `Start`, its events read to `end`).
    async fn run(
        &self,
        e: &Envd,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, SandboxError> {
        let Some((cmd, args)) = argv.split_first() else {
            return Err(SandboxError::Invalid("the command is empty".into()));
        };
        let req = json!({
            "process": { "cmd": cmd, "args": args, "cwd": "/" },
            "stdin": stdin.is_some(),
        });
        let body = envelope(0, &serde_json::to_vec(&req).map_err(|x| failed("e2b", x))?);
        let resp = self
            .envd_request(e, "Start", "application/connect+json")
            .body(body)
            .send()
            .await
            .map_err(|err| failed(format!("e2b, sandbox {}: starting a command", e.id), err))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            return Err(e.error(status, &text));
        }
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut stdin = stdin;
        let mut writer: Option<tokio::task::JoinHandle<Result<(), SandboxError>>> = None;
        let mut end: Option<Value> = None;
        'read: loop {
            while let Some((flags, msg, used)) = take_envelope(&buf) {
                buf.drain(..used);
                let v: Value = serde_json::from_slice(&msg)
                    .map_err(|x| failed(format!("e2b, sandbox {}: envd said", e.id), x))?;
                if flags & 2 != 0 {
                    if let Some(err) = v.get("error") {
                        return Err(SandboxError::Failed(format!(
                            "e2b, sandbox {}: {}",
                            e.id,
                            err.get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("error")
                        )));
                    }
                    break 'read;
                }
                let ev = v.get("event").cloned().unwrap_or(Value::Null);
                if let Some(start) = ev.get("start") {
                    let pid = start.get("pid").and_then(Value::as_u64).unwrap_or(0);
                    if let Some(bytes) = stdin.take() {
                        let (p, e2) = (self.clone(), e.clone());
                        writer = Some(tokio::spawn(async move { p.feed(&e2, pid, bytes).await }));
                    }
                } else if let Some(data) = ev.get("data") {
                    for (k, out) in [("stdout", &mut stdout), ("stderr", &mut stderr)] {
                        if let Some(s) = data.get(k).and_then(Value::as_str) {
                            out.extend(B64.decode(s).map_err(|x| {
                                failed(format!("e2b, sandbox {}: output", e.id), x)
                            })?);
                        }
                    }
                } else if let Some(x) = ev.get("end") {
                    end = Some(x.clone());
                }
            }
            match stream.next().await {
                Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                Some(Err(err)) => {
                    return Err(failed(
                        format!("e2b, sandbox {}: reading a command", e.id),
                        err,
                    ));
                }
                None => break,
            }
        }
        if let Some(w) = writer {
            // The command may have ended without reading all of its input: not an error.
            let _ = w.await;
        }
        let end = end.ok_or_else(|| {
            SandboxError::Failed(format!(
                "sandbox {}: the command's end never came (is the e2b sandbox still there?)",
                e.id
            ))
        })?;
        Ok(Output {
            status: end_status(&end),
            stdout,
            stderr,
        })
    }

    /// Starts `argv` with its stdin open and leaves it running: its stdout comes from `Start`'s
    /// event stream (read by a task of its own), and what is written to its stdin goes as
    /// `SendInput` calls, `CloseStdin` at the end (a task that ends by itself once the stdin
    /// handed out is dropped, so the command is told to end even as the stream is dropped).
    async fn stream(&self, e: &Envd, argv: Vec<String>) -> Result<ExecStream, SandboxError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Some((cmd, args)) = argv.split_first() else {
            return Err(SandboxError::Invalid("the command is empty".into()));
        };
        let req = json!({ "process": { "cmd": cmd, "args": args, "cwd": "/" }, "stdin": true });
        let body = envelope(0, &serde_json::to_vec(&req).map_err(|x| failed("e2b", x))?);
        let resp = self
            .envd_request(e, "Start", "application/connect+json")
            .body(body)
            .send()
            .await
            .map_err(|err| failed(format!("e2b, sandbox {}: starting a command", e.id), err))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            return Err(e.error(status, &text));
        }
        let (mut out, stdout) = tokio::io::duplex(256 << 10);
        let (stdin, mut input) = tokio::io::duplex(64 << 10);
        let (pid_tx, pid_rx) = tokio::sync::oneshot::channel::<u64>();
        let reader = tokio::spawn(async move {
            let mut stream = resp.bytes_stream();
            let mut buf: Vec<u8> = Vec::new();
            let mut pid_tx = Some(pid_tx);
            loop {
                while let Some((flags, msg, used)) = take_envelope(&buf) {
                    buf.drain(..used);
                    let Ok(v) = serde_json::from_slice::<Value>(&msg) else {
                        return;
                    };
                    if flags & 2 != 0 {
                        return;
                    }
                    let ev = v.get("event").cloned().unwrap_or(Value::Null);
                    if let Some(start) = ev.get("start") {
                        let pid = start.get("pid").and_then(Value::as_u64).unwrap_or(0);
                        if let Some(t) = pid_tx.take() {
                            let _ = t.send(pid);
                        }
                    } else if let Some(s) = ev
                        .get("data")
                        .and_then(|d| d.get("stdout"))
                        .and_then(Value::as_str)
                    {
                        let Ok(bytes) = B64.decode(s) else { return };
                        if out.write_all(&bytes).await.is_err() {
                            return;
                        }
                    } else if ev.get("end").is_some() {
                        return;
                    }
                }
                match stream.next().await {
                    Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                    _ => return,
                }
            }
        });
        let (p, e2) = (self.clone(), e.clone());
        tokio::spawn(async move {
            let Ok(pid) = pid_rx.await else { return };
            let mut chunk = vec![0u8; 64 << 10];
            loop {
                match input.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let sent = p
                            .unary(
                                &e2,
                                "SendInput",
                                json!({ "process": { "pid": pid }, "input": { "stdin": B64.encode(&chunk[..n]) } }),
                            )
                            .await;
                        if sent.is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = p
                .unary(&e2, "CloseStdin", json!({ "process": { "pid": pid } }))
                .await;
        });
        Ok(ExecStream {
            stdin: Box::pin(stdin),
            stdout: Box::pin(stdout),
            keep: Box::new(Reader(reader)),
        })
    }

    /// A command's stdin, in pieces, then its end.
    async fn feed(&self, e: &Envd, pid: u64, bytes: Vec<u8>) -> Result<(), SandboxError> {
        for chunk in bytes.chunks(256 << 10) {
            self.unary(
                e,
                "SendInput",
                json!({ "process": { "pid": pid }, "input": { "stdin": B64.encode(chunk) } }),
            )
            .await?;
        }
        self.unary(e, "CloseStdin", json!({ "process": { "pid": pid } }))
            .await
    }

    /// The timeout every sandbox is made with (`HANGAR_E2B_TIMEOUT_SECS`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sets the sandbox's timeout to [`E2bProvider::timeout`] from now (`POST
    /// /sandboxes/{id}/timeout`), so it does not expire under a running turn.
    pub async fn keep_alive(&self, sb: &Sandbox) -> Result<(), SandboxError> {
        let e = Self::handle(sb)?;
        let r = self
            .http
            .post(format!("{}/sandboxes/{}/timeout", self.api, e.sandbox))
            .header("x-api-key", &self.key)
            .json(&json!({ "timeout": self.timeout.as_secs() }))
            .send()
            .await
            .map_err(|err| failed(format!("e2b, extending sandbox {}", e.sandbox), err))?;
        let status = r.status();
        if status.is_success() {
            return Ok(());
        }
        let text = r.text().await.unwrap_or_default();
        Err(e.error(status, &text))
    }

    async fn kill(&self, sandbox: &str) -> Result<(), SandboxError> {
        let r = self
            .http
            .delete(format!("{}/sandboxes/{sandbox}", self.api))
            .header("x-api-key", &self.key)
            .send()
            .await
            .map_err(|e| failed(format!("e2b, killing sandbox {sandbox}"), e))?;
        if r.status().is_success() || r.status() == reqwest::StatusCode::NOT_FOUND {
            Ok(())
        } else {
            let status = r.status();
            Err(SandboxError::Failed(format!(
                "e2b, killing sandbox {sandbox}: {status}: {}",
                r.text().await.unwrap_or_default()
            )))
        }
    }

    async fn build(&self, req: &CreateRequest) -> Result<(Envd, Option<String>), SandboxError> {
        let mut body = json!({
            "templateID": req.env.image.clone().unwrap_or_else(|| "base".into()),
            "timeout": self.timeout.as_secs(),
            "metadata": { "hangar.sandbox": req.id, "hangar.person": req.person },
            "secure": true,
            "allow_internet_access": req.env.egress != Egress::None,
        });
        if let Egress::Allowlist(hosts) = &req.env.egress {
            body["network"] = allowlist_network(hosts);
        }
        let r = self
            .http
            .post(format!("{}/sandboxes", self.api))
            .header("x-api-key", &self.key)
            .json(&body)
            .send()
            .await
            .map_err(|e| {
                SandboxError::Unavailable(format!(
                    "the E2B API ({}) does not answer: {e}; check HANGAR_E2B_URL",
                    self.api
                ))
            })?;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(SandboxError::Unavailable(format!(
                "the E2B API refused the key ({status}): check HANGAR_E2B_API_KEY"
            )));
        }
        if !status.is_success() {
            return Err(SandboxError::Failed(format!(
                "e2b could not make a sandbox of template {}: {status}: {text}",
                body["templateID"]
            )));
        }
        let made: Value = serde_json::from_str(&text).map_err(|e| failed("e2b said", e))?;
        let sandbox = made
            .get("sandboxID")
            .and_then(Value::as_str)
            .ok_or_else(|| SandboxError::Failed(format!("e2b made no sandbox id: {text}")))?
            .to_owned();
        let envd = Envd {
            id: req.id.clone(),
            url: self.envd_url(&sandbox, made.get("domain").and_then(Value::as_str)),
            token: made
                .get("envdAccessToken")
                .and_then(Value::as_str)
                .map(str::to_owned),
            sandbox: sandbox.clone(),
        };
        let result = async {
            const SCRIPT: &str = r#"set -e
mkdir -p /workspace /home/agent /var/lib/hangar /run/hangar /run/hangar-tmux
chmod 700 /run/hangar /run/hangar-tmux /home/agent
chmod 755 /var/lib/hangar
for p in tar tmux git; do command -v "$p" >/dev/null 2>&1 || echo "missing: $p" >&2; done
"#;
            let out = self
                .run(&envd, shell_wrap(&[], "/", &["sh".into(), "-c".into(), SCRIPT.into()]), None)
                .await?;
            let err = String::from_utf8_lossy(&out.stderr);
            if !out.success() || err.contains("missing: ") {
                return Err(SandboxError::Unavailable(format!(
                    "e2b template {} cannot hold a hangar sandbox: {} (hangar needs sh, tar, tmux and git in the template)",
                    body["templateID"],
                    err.trim()
                )));
            }
            let repo = std::fs::canonicalize(&req.repo)
                .map_err(|e| SandboxError::Invalid(format!("repo {}: {e}", req.repo.display())))?;
            let home = std::fs::canonicalize(&req.home).ok();
            let tar = tokio::task::spawn_blocking(move || {
                let skip = home.as_deref().filter(|h| h.starts_with(&repo));
                copy::tar_tree(&repo, skip)
            })
            .await
            .map_err(|e| failed("packing the repo", e))?
            .map_err(|e| failed("cannot pack the repo for the sandbox", e))?;
            let argv = shell_wrap(
                &[],
                "/",
                &["tar", "-x", "--no-same-owner", "-C", WORKSPACE, "-f", "-"].map(str::to_owned),
            );
            let out = self.run(&envd, argv, Some(tar)).await?;
            if !out.success() {
                return Err(SandboxError::Failed(format!(
                    "cannot unpack the repo in sandbox {}: {}",
                    req.id,
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => Ok((
                envd,
                made.get("domain")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )),
            Err(e) => {
                let _ = self.kill(&sandbox).await;
                Err(e)
            }
        }
    }
}

/// Where one sandbox's envd is (its `Debug` leaves the token out).
#[derive(Clone)]
struct Envd {
    /// hangar's sandbox id.
    id: String,
    /// E2B's.
    sandbox: String,
    url: String,
    token: Option<String>,
}

impl std::fmt::Debug for Envd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envd")
            .field("id", &self.id)
            .field("sandbox", &self.sandbox)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Envd {
    fn error(&self, status: reqwest::StatusCode, text: &str) -> SandboxError {
        // E2B's edge answers 502 for a sandbox it no longer has.
        if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::BAD_GATEWAY {
            SandboxError::Gone(self.id.clone())
        } else {
            SandboxError::Failed(format!("e2b, sandbox {}: {status}: {text}", self.id))
        }
    }
}

/// An egress allowlist as E2B's network configuration: the hosts (names, `*.` wildcards,
/// addresses) allowed out, everything else (`0.0.0.0/0`) denied; E2B lets an allowed entry win
/// over a denied one.
/// Aborts the task reading an exec stream's events when the stream is dropped.
struct Reader(tokio::task::JoinHandle<()>);

impl Drop for Reader {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn allowlist_network(hosts: &[String]) -> Value {
    json!({ "allowOut": hosts, "denyOut": [ALL_TRAFFIC] })
}

/// E2B's "all traffic" for its deny list.
const ALL_TRAFFIC: &str = "0.0.0.0/0";

/// A Connect request to envd's process service (`{url}/process.Process/{method}`) as `USER`.
fn envd_post(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    method: &str,
    content_type: &str,
) -> reqwest::RequestBuilder {
    let mut r = http
        .post(format!("{url}/process.Process/{method}"))
        .header("content-type", content_type)
        .header("connect-protocol-version", "1")
        .header(
            "authorization",
            format!("Basic {}", B64.encode(format!("{USER}:"))),
        );
    if let Some(t) = token {
        r = r.header("x-access-token", t);
    }
    r
}

/// A Connect envelope: flags, the length (big-endian), the message.
fn envelope(flags: u8, msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

/// The first whole envelope in `buf`: its flags, message, and the bytes it took.
fn take_envelope(buf: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    let head: [u8; 4] = buf.get(1..5)?.try_into().ok()?;
    let len = u32::from_be_bytes(head) as usize;
    let msg = buf.get(5..5 + len)?;
    Some((buf[0], msg.to_vec(), 5 + len))
}

/// A command's status from envd's end event (proto3 JSON leaves out zeros and falses).
fn end_status(end: &Value) -> i32 {
    let code = end.get("exitCode").and_then(Value::as_i64).unwrap_or(0);
    let exited = end.get("exited").and_then(Value::as_bool).unwrap_or(false);
    let status = end.get("status").and_then(Value::as_str).unwrap_or("");
    if exited || code > 0 {
        return i32::try_from(code).unwrap_or(255);
    }
    if code == 0 && status.is_empty() {
        return 0;
    }
    // Killed: envd says `signal: killed` (or `terminated`, ...).
    match status.strip_prefix("signal: ") {
        Some("killed") => 128 + 9,
        Some("terminated") => 128 + 15,
        Some("interrupt") => 128 + 2,
        Some("hangup") => 128 + 1,
        _ => 255,
    }
}

impl crate::RunsArgv for E2bProvider {
    async fn run_argv(
        &self,
        sb: &Sandbox,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, SandboxError> {
        self.run(&Self::handle(sb)?, argv, stdin).await
    }
}

impl Provider for E2bProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::E2b
    }

    fn capabilities(&self, env: &EnvSpec) -> Capabilities {
        // An allowlist only where the environment accepts E2B's firewall for it.
        let mut network_modes = vec![NetworkMode::None, NetworkMode::Open];
        if env.egress_enforcement == Some(EgressEnforcement::E2bFirewall) {
            network_modes.push(NetworkMode::Allowlist);
        }
        Capabilities {
            provider: ProviderKind::E2b,
            uid_split: false,
            uid_split_off: Some(
                "an e2b sandbox runs the agent and hangar's programs as one user (root)".to_owned(),
            ),
            // Everything runs as root.
            sudo: true,
            network_modes,
            resource_limits: false,
        }
    }

    async fn check(&self, env: &EnvSpec) -> Result<(), SandboxError> {
        if env.provider != ProviderKind::E2b {
            return Err(SandboxError::Unsupported(format!(
                "environment {} is for provider {}, not e2b",
                env.name, env.provider
            )));
        }
        refusals(env)
    }

    async fn create(&self, req: &CreateRequest) -> Result<Sandbox, SandboxError> {
        if req.env.provider != ProviderKind::E2b {
            return Err(SandboxError::Unsupported(format!(
                "environment {} is for provider {}, not e2b",
                req.env.name, req.env.provider
            )));
        }
        layout::check_id(&req.id)?;
        refusals(&req.env)?;
        let host_dir = crate::make_host_dir(req)?;
        let (envd, domain) = match self.build(req).await {
            Ok(made) => made,
            Err(e) => {
                let _ = copy::remove_tree(&host_dir);
                return Err(e);
            }
        };
        Ok(Sandbox {
            id: req.id.clone(),
            env: req.env.clone(),
            host_dir,
            workspace: PathBuf::from(WORKSPACE),
            host_workspace: None,
            ctl_inside: PathBuf::from(CTL_INSIDE),
            agent: None,
            handle: json!({
                "sandbox": envd.sandbox,
                "envd": envd.url,
                "token": envd.token,
                "domain": domain,
            }),
            capabilities: self.capabilities(&req.env),
        })
    }

    async fn exec(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> Result<Output, SandboxError> {
        crate::exec_in(self, sb, who, req).await
    }

    /// One envd process left running, stdin and stdout open ([`E2bProvider::stream`]).
    async fn exec_stream(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> Result<ExecStream, SandboxError> {
        let argv = crate::wrapped_argv(who, req)?;
        self.stream(&Self::handle(sb)?, argv).await
    }

    async fn start_tmux(
        &self,
        sb: &Sandbox,
        session: &str,
        who: Who,
        req: &ExecRequest,
    ) -> Result<(), SandboxError> {
        crate::start_tmux_in(self, sb, session, who, req).await
    }

    async fn tmux_alive(&self, sb: &Sandbox, session: &str) -> Result<bool, SandboxError> {
        crate::tmux_alive_in(self, sb, session).await
    }

    fn attach_argv(&self, sb: &Sandbox, _session: &str) -> Vec<String> {
        let id = sb
            .handle
            .get("sandbox")
            .and_then(Value::as_str)
            .unwrap_or(&sb.id)
            .to_owned();
        ["e2b", "sandbox", "connect", &id]
            .map(str::to_owned)
            .to_vec()
    }

    async fn destroy(&self, sb: &Sandbox, keep_logs: bool) -> Result<(), SandboxError> {
        if let Ok(e) = Self::handle(sb) {
            self.kill(&e.sandbox).await?;
        }
        copy::remove_host_dir(&sb.host_dir, keep_logs).await
    }
}

fn refusals(env: &EnvSpec) -> Result<(), SandboxError> {
    if matches!(env.egress, Egress::Allowlist(_))
        && env.egress_enforcement != Some(EgressEnforcement::E2bFirewall)
    {
        return Err(SandboxError::Unsupported(format!(
            "egress: an allowlist on provider e2b can only be E2B's own firewall, which keeps less than hangar's proxy does on local and docker ({E2B_FIREWALL_CAVEAT}); to accept that, write egress: {{allowlist: [...], enforcement: e2b-firewall}}, or use egress none or open"
        )));
    }
    if env.host_network {
        return Err(SandboxError::Unsupported(
            "network: host is not possible with provider e2b".into(),
        ));
    }
    let r = &env.resources;
    if r.cpu.is_some() || r.memory.is_some() || r.pids.is_some() {
        return Err(SandboxError::Unsupported(
            "resources: an e2b sandbox has the size its template was built with; remove resources for provider e2b".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn envelopes_round_trip_and_wait_for_whole_messages() {
        let e = envelope(2, b"{}");
        assert_eq!(e, [2, 0, 0, 0, 2, b'{', b'}']);
        assert_eq!(take_envelope(&e[..6]), None);
        assert_eq!(take_envelope(&e), Some((2, b"{}".to_vec(), 7)));
    }

    #[test]
    fn envds_token_stays_out_of_debug_output() {
        let t = PtyTarget {
            sandbox: "sb".into(),
            envd: "http://envd".into(),
            token: Some("s3cr3t-token".into()),
            argv: vec!["tmux".into()],
        };
        let e = Envd {
            id: "sb".into(),
            sandbox: "x".into(),
            url: "http://envd".into(),
            token: Some("s3cr3t-token".into()),
        };
        for shown in [format!("{t:?}"), format!("{t}"), format!("{e:?}")] {
            assert!(!shown.contains("s3cr3t"), "{shown}");
        }
    }

    #[test]
    fn end_events_give_exit_statuses() {
        assert_eq!(end_status(&json!({"exited": true})), 0);
        assert_eq!(end_status(&json!({"exitCode": 3, "exited": true})), 3);
        assert_eq!(
            end_status(&json!({"exitCode": -1, "status": "signal: killed"})),
            137
        );
        assert_eq!(end_status(&json!({})), 0);
    }
}
