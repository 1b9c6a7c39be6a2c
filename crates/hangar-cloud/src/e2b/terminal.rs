//! A person's terminal in a run's tmux session in an e2b sandbox (`hangar sb attach`).
//!
//! E2B gives a terminal as a PTY process of the sandbox's daemon (envd), over the same Connect
//! protocol as every command: `process.Process/Start` with `pty` (its size) streams the
//! terminal's output as `data.pty` events until the process's `end`; `SendInput` with
//! `input.pty` types into it; `Update` with `pty` resizes it; `SendSignal` kills it. Attaching
//! is a PTY process running `tmux attach-session` on the run's session: this module is the
//! client of those calls ([`PtySession`], [`PtyOutput`]), which `hangar serve` uses to relay a
//! terminal (envd's token stays on the server), and [`join_terminal`], which joins any
//! [`PtyLink`] and [`PtyEvents`] (envd's directly: [`attach_terminal`]; the server's relay:
//! `hangar sb attach`) to the terminal of the process that calls it (raw mode while attached,
//! its size followed on SIGWINCH).
//!
//! [`PtyTarget`] holds envd's address and access token (root in the sandbox for its life): it
//! is for the process that speaks envd, never for an API answer.

use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::StreamExt;
use hangar_sandbox::SandboxError;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{end_status, envd_post, envelope, take_envelope};
use crate::{failed, shell_wrap};

/// What a terminal needs to reach a run's tmux session in an e2b sandbox. Its `Debug` leaves
/// the token out (a log line must not hand it on); it never goes into an API answer, and is
/// not `Serialize` so that putting it into one does not compile.
#[derive(Clone, Deserialize, PartialEq, Eq)]
pub struct PtyTarget {
    /// hangar's sandbox id (for messages).
    pub sandbox: String,
    /// The sandbox's envd.
    pub envd: String,
    /// envd's access token (the sandbox's `envdAccessToken`), when it has one.
    pub token: Option<String>,
    /// The command the terminal runs (started under `env -i` with hangar's minimal environment
    /// and the terminal's `TERM`).
    pub argv: Vec<String>,
}

impl std::fmt::Debug for PtyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyTarget")
            .field("sandbox", &self.sandbox)
            .field("envd", &self.envd)
            .field("token", &self.token.as_ref().map(|_| "(hidden)"))
            .field("argv", &self.argv)
            .finish()
    }
}

impl std::fmt::Display for PtyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "e2b sandbox {} ({})", self.sandbox, self.envd)
    }
}

/// What a PTY process sends.
#[derive(Debug, PartialEq, Eq)]
pub enum PtyEvent {
    /// Bytes the terminal shows.
    Data(Vec<u8>),
    /// The process ended with this status.
    End(i32),
}

/// What a terminal sends to its PTY process: typing, resizes, and the kill that ends an attach
/// which did not see the process's end.
pub trait PtyLink: Clone + Send + Sync + 'static {
    /// Types `bytes` into the terminal.
    fn input(&self, bytes: &[u8]) -> impl Future<Output = Result<(), SandboxError>> + Send;
    /// Resizes the terminal.
    fn resize(&self, cols: u16, rows: u16)
    -> impl Future<Output = Result<(), SandboxError>> + Send;
    /// Kills the PTY process (ends the attach).
    fn kill(&self) -> impl Future<Output = Result<(), SandboxError>> + Send;
}

/// A PTY process's output as a terminal reads it.
pub trait PtyEvents: Send {
    /// The next output or the end; `None` once the stream is over; an error when nothing at
    /// all (not even a keepalive) came for `idle`.
    fn next_within(
        &mut self,
        idle: Option<Duration>,
    ) -> impl Future<Output = Result<Option<PtyEvent>, SandboxError>> + Send;
}

/// A PTY process in an e2b sandbox: input and resizes.
#[derive(Clone, Debug)]
pub struct PtySession {
    http: reqwest::Client,
    target: PtyTarget,
    pid: u64,
}

/// The PTY process's output stream.
pub struct PtyOutput {
    stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Vec<u8>>> + Send>>,
    buf: Vec<u8>,
    sandbox: String,
    ended: bool,
    /// When envd last sent anything (a keepalive too): its silence is measured from here.
    heard: tokio::time::Instant,
}

impl std::fmt::Debug for PtyOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyOutput")
            .field("sandbox", &self.sandbox)
            .finish()
    }
}

impl PtyOutput {
    /// The next output or the end; `None` once the stream is over.
    pub async fn next(&mut self) -> Result<Option<PtyEvent>, SandboxError> {
        self.read(None).await
    }

    /// [`PtyOutput::next`], an error when envd has sent nothing at all (not even its
    /// keepalive) for `idle`, counted from what it last sent (not from this call).
    async fn read(&mut self, idle: Option<Duration>) -> Result<Option<PtyEvent>, SandboxError> {
        loop {
            while let Some((flags, msg, used)) = take_envelope(&self.buf) {
                self.buf.drain(..used);
                let v: Value = serde_json::from_slice(&msg)
                    .map_err(|x| failed(format!("e2b, sandbox {}: envd said", self.sandbox), x))?;
                if flags & 2 != 0 {
                    self.ended = true;
                    if let Some(err) = v.get("error") {
                        return Err(SandboxError::Failed(format!(
                            "e2b, sandbox {}: {}",
                            self.sandbox,
                            err.get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("error")
                        )));
                    }
                    return Ok(None);
                }
                let ev = v.get("event").cloned().unwrap_or(Value::Null);
                if let Some(data) = ev.get("data") {
                    if let Some(s) = data
                        .get("pty")
                        .or_else(|| data.get("stdout"))
                        .or_else(|| data.get("stderr"))
                        .and_then(Value::as_str)
                    {
                        let bytes = B64.decode(s).map_err(|x| {
                            failed(format!("e2b, sandbox {}: output", self.sandbox), x)
                        })?;
                        return Ok(Some(PtyEvent::Data(bytes)));
                    }
                } else if let Some(end) = ev.get("end") {
                    return Ok(Some(PtyEvent::End(end_status(end))));
                }
                // `start` (read by `start`) and `keepalive`: nothing to show.
            }
            if self.ended {
                return Ok(None);
            }
            let read = match idle {
                Some(d) => tokio::time::timeout_at(self.heard + d, self.stream.next())
                    .await
                    .map_err(|_| {
                        SandboxError::Failed(format!(
                            "e2b, sandbox {}: envd sent nothing for {} s (not even its keepalive)",
                            self.sandbox,
                            d.as_secs()
                        ))
                    })?,
                None => self.stream.next().await,
            };
            match read {
                Some(Ok(chunk)) => {
                    self.heard = tokio::time::Instant::now();
                    self.buf.extend_from_slice(&chunk);
                }
                Some(Err(e)) => {
                    return Err(failed(
                        format!("e2b, sandbox {}: the terminal's stream", self.sandbox),
                        e,
                    ));
                }
                None => {
                    self.ended = true;
                    return Ok(None);
                }
            }
        }
    }
}

fn http() -> Result<reqwest::Client, SandboxError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| SandboxError::Unavailable(format!("cannot make an HTTP client: {e}")))
}

/// How long envd has to start a terminal (answer `Start` and name the process), and to
/// answer one of the calls that type into, resize or kill it.
pub const ENVD_WITHIN: Duration = Duration::from_secs(30);

/// The terminal size envd is sent (cols and rows of at least 1).
fn size(cols: u16, rows: u16) -> Value {
    json!({ "cols": cols.max(1), "rows": rows.max(1) })
}

impl PtySession {
    /// Starts `target`'s command as a PTY process of `cols` x `rows` with `TERM=term`; its
    /// session and output stream (read past the process's `start`). An error when envd has
    /// not started it within [`ENVD_WITHIN`].
    pub async fn start(
        target: &PtyTarget,
        term: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(PtySession, PtyOutput), SandboxError> {
        tokio::time::timeout(ENVD_WITHIN, Self::start_now(target, term, cols, rows))
            .await
            .unwrap_or_else(|_| {
                Err(SandboxError::Unavailable(format!(
                    "e2b, sandbox {}: envd did not start the terminal within {} s",
                    target.sandbox,
                    ENVD_WITHIN.as_secs()
                )))
            })
    }

    async fn start_now(
        target: &PtyTarget,
        term: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(PtySession, PtyOutput), SandboxError> {
        let Some(_) = target.argv.first() else {
            return Err(SandboxError::Invalid("the command is empty".into()));
        };
        // The terminal's own TERM when the sandbox knows it (tmux refuses a terminal it has no
        // terminfo for), else xterm-256color.
        let argv: Vec<String> = [
            "sh",
            "-c",
            "tput -T \"$TERM\" longname >/dev/null 2>&1 || TERM=xterm-256color; export TERM; exec \"$@\"",
            "sh",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain(target.argv.iter().cloned())
        .collect();
        let argv = shell_wrap(&[("TERM".into(), term.to_owned())], "/", &argv);
        let Some((cmd, args)) = argv.split_first() else {
            return Err(SandboxError::Invalid("the command is empty".into()));
        };
        let req = json!({
            "process": { "cmd": cmd, "args": args, "cwd": "/" },
            "pty": { "size": size(cols, rows) },
        });
        Self::stream(target, "Start", &req, "starting a terminal").await
    }

    /// Joins PTY process `pid` that another process started (`process.Process/Connect`): a
    /// relayed terminal taken over from a replica that stopped. Its session and output stream,
    /// read past the process's `start`; an error when envd does not answer within
    /// [`ENVD_WITHIN`] (or no longer has the process).
    pub async fn connect(
        target: &PtyTarget,
        pid: u64,
    ) -> Result<(PtySession, PtyOutput), SandboxError> {
        let req = json!({ "process": { "pid": pid } });
        tokio::time::timeout(
            ENVD_WITHIN,
            Self::stream(target, "Connect", &req, "joining a terminal"),
        )
        .await
        .unwrap_or_else(|_| {
            Err(SandboxError::Unavailable(format!(
                "e2b, sandbox {}: envd did not join the terminal within {} s",
                target.sandbox,
                ENVD_WITHIN.as_secs()
            )))
        })
    }

    /// Calls envd's server stream `method` (Start or Connect) with `req`, and reads its output
    /// up to the process's `start`.
    async fn stream(
        target: &PtyTarget,
        method: &str,
        req: &Value,
        doing: &str,
    ) -> Result<(PtySession, PtyOutput), SandboxError> {
        let http = http()?;
        let body = envelope(0, &serde_json::to_vec(req).map_err(|x| failed("e2b", x))?);
        let resp = envd_post(
            &http,
            &target.envd,
            target.token.as_deref(),
            method,
            "application/connect+json",
        )
        // envd sends a keepalive event this often, so no proxy between cuts a quiet terminal.
        .header("keepalive-ping-interval", "50")
        .body(body)
        .send()
        .await
        .map_err(|e| failed(format!("e2b, sandbox {}: {doing}", target.sandbox), e))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            return Err(
                if status == reqwest::StatusCode::NOT_FOUND
                    || status == reqwest::StatusCode::BAD_GATEWAY
                {
                    SandboxError::Gone(target.sandbox.clone())
                } else {
                    SandboxError::Failed(format!(
                        "e2b, sandbox {}: {doing}: {status}: {text}",
                        target.sandbox
                    ))
                },
            );
        }
        let mut out = PtyOutput {
            stream: Box::pin(resp.bytes_stream().map(|c| c.map(|b| b.to_vec()))),
            buf: Vec::new(),
            sandbox: target.sandbox.clone(),
            ended: false,
            heard: tokio::time::Instant::now(),
        };
        // The first event names the process.
        let pid = 'start: loop {
            while let Some((flags, msg, used)) = take_envelope(&out.buf) {
                let v: Value = serde_json::from_slice(&msg).map_err(|x| {
                    failed(format!("e2b, sandbox {}: envd said", target.sandbox), x)
                })?;
                if flags & 2 != 0 {
                    return Err(SandboxError::Failed(format!(
                        "e2b, sandbox {}: the terminal did not start: {}",
                        target.sandbox,
                        v.pointer("/error/message")
                            .and_then(Value::as_str)
                            .unwrap_or("no start event")
                    )));
                }
                out.buf.drain(..used);
                if let Some(pid) = v.pointer("/event/start").map(|s| {
                    // proto3 JSON leaves a zero out.
                    s.get("pid").and_then(Value::as_u64).unwrap_or(0)
                }) {
                    break 'start pid;
                }
            }
            match out.stream.next().await {
                Some(Ok(chunk)) => out.buf.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    return Err(failed(
                        format!("e2b, sandbox {}: {doing}", target.sandbox),
                        e,
                    ));
                }
                None => {
                    return Err(SandboxError::Failed(format!(
                        "e2b, sandbox {}: the terminal's stream ended before it started",
                        target.sandbox
                    )));
                }
            }
        };
        out.heard = tokio::time::Instant::now();
        Ok((
            PtySession {
                http,
                target: target.clone(),
                pid,
            },
            out,
        ))
    }

    /// PTY process `pid` of `target`'s sandbox, to signal without reading it (what ends a
    /// terminal nobody relays any more).
    pub fn for_pid(target: &PtyTarget, pid: u64) -> Result<PtySession, SandboxError> {
        Ok(PtySession {
            http: http()?,
            target: target.clone(),
            pid,
        })
    }

    /// envd's pid of the PTY process.
    pub fn pid(&self) -> u64 {
        self.pid
    }

    async fn unary(&self, method: &str, body: Value) -> Result<(), SandboxError> {
        let r = envd_post(
            &self.http,
            &self.target.envd,
            self.target.token.as_deref(),
            method,
            "application/json",
        )
        .timeout(ENVD_WITHIN)
        .json(&body)
        .send()
        .await
        .map_err(|e| failed(format!("e2b, sandbox {}: {method}", self.target.sandbox), e))?;
        if r.status().is_success() {
            return Ok(());
        }
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        Err(SandboxError::Failed(format!(
            "e2b, sandbox {}: {method}: {status}: {text}",
            self.target.sandbox
        )))
    }

    /// Types `bytes` into the terminal.
    pub async fn input(&self, bytes: &[u8]) -> Result<(), SandboxError> {
        self.unary(
            "SendInput",
            json!({ "process": { "pid": self.pid }, "input": { "pty": B64.encode(bytes) } }),
        )
        .await
    }

    /// Kills the PTY process (`SendSignal` SIGKILL): what an attach that ends other than by the
    /// process's end does, so no root `tmux attach` is left in the sandbox.
    pub async fn kill(&self) -> Result<(), SandboxError> {
        self.unary(
            "SendSignal",
            json!({ "process": { "pid": self.pid }, "signal": "SIGNAL_SIGKILL" }),
        )
        .await
    }

    /// Resizes the terminal.
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), SandboxError> {
        self.unary(
            "Update",
            json!({ "process": { "pid": self.pid }, "pty": { "size": size(cols, rows) } }),
        )
        .await
    }
}

impl PtyEvents for PtyOutput {
    async fn next_within(
        &mut self,
        idle: Option<Duration>,
    ) -> Result<Option<PtyEvent>, SandboxError> {
        self.read(idle).await
    }
}

impl PtyLink for PtySession {
    async fn input(&self, bytes: &[u8]) -> Result<(), SandboxError> {
        PtySession::input(self, bytes).await
    }
    async fn resize(&self, cols: u16, rows: u16) -> Result<(), SandboxError> {
        PtySession::resize(self, cols, rows).await
    }
    async fn kill(&self) -> Result<(), SandboxError> {
        PtySession::kill(self).await
    }
}

/// The calling process's terminal size (of stdout, else stdin), when it has one.
pub fn window_size() -> Option<(u16, u16)> {
    for fd in [1, 0] {
        let mut ws = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one `winsize` into the one we pass.
        let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
        if r == 0 && ws.ws_col > 0 && ws.ws_row > 0 {
            return Some((ws.ws_col, ws.ws_row));
        }
    }
    None
}

/// A terminal in raw mode until dropped (then as it was).
struct RawMode {
    fd: i32,
    saved: libc::termios,
}

impl RawMode {
    /// `None` when `fd` is no terminal (input from a pipe is passed on as it is).
    fn enter(fd: i32) -> Option<RawMode> {
        // SAFETY: isatty only reads the descriptor's state.
        if unsafe { libc::isatty(fd) } != 1 {
            return None;
        }
        let mut t = std::mem::MaybeUninit::<libc::termios>::uninit();
        // SAFETY: tcgetattr fills the termios it is given, and we read it only when it did.
        let saved = unsafe {
            if libc::tcgetattr(fd, t.as_mut_ptr()) != 0 {
                return None;
            }
            t.assume_init()
        };
        let mut raw = saved;
        // SAFETY: cfmakeraw and tcsetattr read and write the termios we own.
        unsafe {
            libc::cfmakeraw(&mut raw);
            if libc::tcsetattr(fd, libc::TCSANOW, &raw) != 0 {
                return None;
            }
        }
        Some(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: puts back the termios read from the same descriptor.
        unsafe {
            libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved);
        }
    }
}

/// Reads the calling process's stdin into `tx` until its end, `stop`, or `tx` is closed; it
/// polls so that it notices `stop` within a tenth of a second.
fn read_stdin(tx: tokio::sync::mpsc::Sender<Vec<u8>>, stop: Arc<AtomicBool>) {
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let mut fds = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, ours.
        let n = unsafe { libc::poll(&mut fds, 1, 100) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if n == 0 {
            continue;
        }
        // SAFETY: reads at most `buf.len()` bytes into `buf`.
        let got = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if got == 0 || tx.blocking_send(buf[..got as usize].to_vec()).is_err() {
            return;
        }
    }
}

/// How long an attach waits for anything from envd (output or its keepalive, every 50 s)
/// before it ends as lost: twice the keepalive.
pub const IDLE: Duration = Duration::from_secs(100);

/// Waits for a signal, forever when it could not be set up.
async fn signalled(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// The calling process's `TERM` as a PTY process should get it (`xterm-256color` when unset or
/// dumb).
pub fn terminal_type() -> String {
    std::env::var("TERM")
        .ok()
        .filter(|t| !t.is_empty() && t != "dumb")
        .unwrap_or_else(|| "xterm-256color".into())
}

/// Joins the calling process's terminal to `target`'s PTY process, speaking envd itself (the
/// conformance suite's attach check; `hangar sb attach` goes through the server's relay, so
/// envd's token stays there): [`join_terminal`] over [`PtySession`].
pub async fn attach_terminal(target: &PtyTarget) -> Result<i32, SandboxError> {
    attach_terminal_within(target, IDLE).await
}

/// [`attach_terminal`] with another idle limit (tests).
pub async fn attach_terminal_within(
    target: &PtyTarget,
    idle: Duration,
) -> Result<i32, SandboxError> {
    let (cols, rows) = window_size().unwrap_or((80, 24));
    let (pty, mut out) = PtySession::start(target, &terminal_type(), cols, rows).await?;
    join_terminal(pty, &mut out, &target.sandbox, idle).await
}

/// Joins the calling process's terminal to a PTY process until the process ends: stdin in raw
/// mode while attached (put back after, also on SIGHUP and SIGTERM), what is typed to
/// [`PtyLink::input`], the output to stdout, the terminal's size at each SIGWINCH to
/// [`PtyLink::resize`] (the start's size is the caller's to send). The process's exit status
/// (tmux's: 0 when the person detaches or the session ends). It ends with an error when typing
/// fails, when the output says nothing for `idle`, or on SIGHUP/SIGTERM; whenever it ends
/// without the process's end it kills the process ([`PtyLink::kill`]), so no `tmux attach` is
/// left running as root in the sandbox. `sandbox` names it in messages.
pub async fn join_terminal<L: PtyLink, O: PtyEvents>(
    pty: L,
    out: &mut O,
    sandbox: &str,
    idle: Duration,
) -> Result<i32, SandboxError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).ok();
    let mut terminate = signal(SignalKind::terminate()).ok();
    let raw = RawMode::enter(0);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || read_stdin(tx, stop))
    };
    let (failed_tx, mut failed_rx) = tokio::sync::oneshot::channel::<SandboxError>();
    let typer = {
        let pty = pty.clone();
        tokio::spawn(async move {
            while let Some(mut keys) = rx.recv().await {
                // What was typed meanwhile goes in the same call, in order.
                while let Ok(more) = rx.try_recv() {
                    keys.extend(more);
                }
                if let Err(e) = pty.input(&keys).await {
                    let _ = failed_tx.send(e);
                    return;
                }
            }
        })
    };
    let resizer = {
        let pty = pty.clone();
        tokio::spawn(async move {
            let Ok(mut winch) = signal(SignalKind::window_change()) else {
                return;
            };
            while winch.recv().await.is_some() {
                if let Some((c, r)) = window_size() {
                    let _ = pty.resize(c, r).await;
                }
            }
        })
    };
    let mut status = None;
    let mut typing = true;
    let result = loop {
        tokio::select! {
            ev = out.next_within(Some(idle)) => match ev {
                Ok(Some(PtyEvent::Data(b))) => {
                    let mut o = std::io::stdout().lock();
                    if o.write_all(&b).and_then(|()| o.flush()).is_err() {
                        break Ok(());
                    }
                }
                Ok(Some(PtyEvent::End(s))) => status = Some(s),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            },
            typed = &mut failed_rx, if typing => match typed {
                Ok(e) => break Err(SandboxError::Failed(format!(
                    "e2b, sandbox {sandbox}: what was typed could not be sent, so the attach is ended: {e}"
                ))),
                // stdin ended: the output goes on.
                Err(_) => typing = false,
            },
            () = signalled(&mut hup) => break Err(SandboxError::Failed(format!(
                "e2b, sandbox {sandbox}: the terminal hung up (SIGHUP); the attach is ended"
            ))),
            () = signalled(&mut terminate) => break Err(SandboxError::Failed(format!(
                "e2b, sandbox {sandbox}: terminated (SIGTERM); the attach is ended"
            ))),
        }
    };
    stop.store(true, Ordering::Relaxed);
    typer.abort();
    resizer.abort();
    drop(raw);
    if status.is_none() {
        // Not the process's end: kill it, so no root `tmux attach` stays behind.
        let _ = tokio::time::timeout(Duration::from_secs(10), pty.kill()).await;
    }
    let _ = tokio::task::spawn_blocking(move || reader.join()).await;
    result?;
    status.ok_or_else(|| {
        SandboxError::Failed(format!(
            "e2b, sandbox {sandbox}: the terminal's stream ended without the process's end"
        ))
    })
}
