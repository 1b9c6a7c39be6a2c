//! [`FakeAnthropic`] and [`FakeOpenAi`]: the listener, its connection threads, the shared state
//! they record into, and the accessors tests read it with. The connection loop is in `conn.rs`;
//! request handling per API in `anthropic.rs` and `openai.rs`.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::conn::{self, Plan};
use crate::error::TestkitError;
use crate::http::HttpRequest;
use crate::recorded::{RecordedRequest, RequestKind};
use crate::script::{Responder, Script, Step, error_body, openai_error_body};
use crate::{anthropic, openai};

/// Which wire API a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Anthropic,
    OpenAi,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
        }
    }

    /// Records the request and decides the reply.
    pub fn plan(self, shared: &Shared, request: HttpRequest) -> Plan {
        match self {
            Self::Anthropic => anthropic::plan(shared, request),
            Self::OpenAi => openai::plan(shared, request),
        }
    }

    /// An error body in this API's shape.
    pub fn error_body(self, status: u16, message: &str) -> Value {
        match self {
            Self::Anthropic => error_body(status, message),
            Self::OpenAi => openai_error_body(status, message),
        }
    }
}

/// How to start a [`FakeAnthropic`] or [`FakeOpenAi`] beyond its script.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Append one JSON line per received request to this file (see
    /// [`RecordedRequest::to_json`]).
    pub log: Option<PathBuf>,
}

/// Everything the connection threads record into.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub script: Script,
    pub all: Vec<RecordedRequest>,
    pub main: Vec<RecordedRequest>,
    pub unexpected: Vec<String>,
    pub aborted: usize,
    pub steps_served: usize,
    pub next_message: u64,
    pub next_tool: u64,
}

impl State {
    /// Builds the [`RecordedRequest`], logs it and appends it to `all`.
    pub fn record(
        &mut self,
        shared: &Shared,
        kind: RequestKind,
        request: HttpRequest,
        body: Value,
    ) -> RecordedRequest {
        let recorded = RecordedRequest {
            seq: self.all.len() + 1,
            kind,
            method: request.method,
            path: request.target,
            headers: request.headers,
            body,
        };
        shared.log(&recorded);
        self.all.push(recorded.clone());
        recorded
    }

    /// Takes the step for a main request and checks its expectation (a miss is recorded in
    /// `unexpected`). `Err` with the refusal message when the queue is exhausted (also recorded).
    pub fn take_step(
        &mut self,
        recorded: &RecordedRequest,
        what: &str,
    ) -> Result<Step, &'static str> {
        let session = recorded.session_id();
        let step = self.script.next_step(session).or_else(|| {
            self.script
                .responder
                .as_ref()
                .map(|Responder(f)| f(recorded))
        });
        let Some(step) = step else {
            let session = session
                .map(|s| format!(" (session {s})"))
                .unwrap_or_default();
            self.unexpected
                .push(format!("{what}{session}: script exhausted"));
            return Err("hangar fake model: script exhausted");
        };
        self.steps_served += 1;
        let step_no = self.steps_served;
        if let Some(expect) = &step.expect
            && let Err(miss) = expect.check(recorded)
        {
            self.unexpected
                .push(format!("{what} (step {step_no}): {miss}"));
        }
        Ok(step)
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    conns: Mutex<HashMap<u64, TcpStream>>,
    log: Option<Mutex<File>>,
}

fn relock<T>(result: std::sync::LockResult<T>) -> T {
    result.unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub fn state(&self) -> MutexGuard<'_, State> {
        relock(self.state.lock())
    }

    /// Wakes `wait_for_*` callers after the state changed.
    pub fn notify(&self) {
        self.changed.notify_all();
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps `delay` in small slices; `false` when the server began shutting down meanwhile.
    pub fn pause(&self, delay: Option<Duration>) -> bool {
        let Some(delay) = delay else {
            return !self.stopping();
        };
        let deadline = Instant::now() + delay;
        loop {
            if self.stopping() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            thread::sleep((deadline - now).min(Duration::from_millis(20)));
        }
    }

    /// Appends the request to the `--log` file, if any (write errors are ignored: the log is a
    /// debugging aid, the in-memory record is authoritative).
    pub fn log(&self, request: &RecordedRequest) {
        if let Some(file) = &self.log {
            let mut line = request.to_json().to_string();
            line.push('\n');
            let mut file = relock(file.lock());
            let _ignored = file.write_all(line.as_bytes());
        }
    }

    fn forget_conn(&self, id: u64) {
        relock(self.conns.lock()).remove(&id);
    }

    /// Waits until `ready(state)` returns `Some`, or the deadline.
    fn wait_until<T>(
        &self,
        timeout: Duration,
        mut ready: impl FnMut(&State) -> Result<T, usize>,
    ) -> Result<T, usize> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        loop {
            let got = match ready(&state) {
                Ok(value) => return Ok(value),
                Err(got) => got,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(got);
            }
            state = relock(self.changed.wait_timeout(state, deadline - now)).0;
        }
    }
}

/// The listener and everything both fakes share; the public types wrap it.
#[derive(Debug)]
struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    fn start(api: Api, script: Script, options: &ServerOptions) -> Result<Self, TestkitError> {
        let listener = TcpListener::bind(("127.0.0.1", options.port))
            .map_err(|e| TestkitError::io(format!("binding 127.0.0.1:{}", options.port), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestkitError::io("reading the listener address", e))?;
        let log = match &options.log {
            Some(path) => Some(Mutex::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| TestkitError::io(format!("opening log {}", path.display()), e))?,
            )),
            None => None,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                script,
                ..State::default()
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            log,
        });
        let for_thread = Arc::clone(&shared);
        let acceptor = thread::Builder::new()
            .name(format!("fake-{}-accept", api.name()))
            .spawn(move || accept_loop(api, &listener, &for_thread))
            .map_err(|e| TestkitError::io("spawning the accept thread", e))?;
        Ok(Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state().main.clone()
    }

    fn all_requests(&self) -> Vec<RecordedRequest> {
        self.shared.state().all.clone()
    }

    fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedRequest>, TestkitError> {
        self.shared
            .wait_until(timeout, |state| {
                if state.main.len() >= n {
                    Ok(state.main.clone())
                } else {
                    Err(state.main.len())
                }
            })
            .map_err(|got| TestkitError::Timeout {
                what: "model requests",
                wanted: n,
                got,
                waited: timeout,
            })
    }

    fn unexpected(&self) -> Vec<String> {
        self.shared.state().unexpected.clone()
    }

    fn aborted_streams(&self) -> usize {
        self.shared.state().aborted
    }

    fn wait_for_aborted_streams(&self, n: usize, timeout: Duration) -> Result<usize, TestkitError> {
        self.shared
            .wait_until(timeout, |state| {
                if state.aborted >= n {
                    Ok(state.aborted)
                } else {
                    Err(state.aborted)
                }
            })
            .map_err(|got| TestkitError::Timeout {
                what: "aborted streams",
                wanted: n,
                got,
                waited: timeout,
            })
    }

    fn remaining_steps(&self) -> usize {
        self.shared.state().script.remaining()
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept() with a connection to ourselves (loopback only).
        let woke = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).is_ok();
        if let Some(acceptor) = self.acceptor.take()
            && woke
        {
            let _ignored = acceptor.join();
        }
        for (_, stream) in relock(self.shared.conns.lock()).drain() {
            let _ignored = stream.shutdown(Shutdown::Both);
        }
        self.shared.notify();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The accessors both fakes share, documented once.
macro_rules! shared_accessors {
    ($main:literal, $all:literal) => {
        /// The bound address.
        pub fn addr(&self) -> SocketAddr {
            self.server.addr
        }

        #[doc = concat!("Main model requests (", $main, "), in arrival order.")]
        pub fn requests(&self) -> Vec<RecordedRequest> {
            self.server.requests()
        }

        #[doc = concat!("Every request, including ", $all, ", in arrival order.")]
        pub fn all_requests(&self) -> Vec<RecordedRequest> {
            self.server.all_requests()
        }

        /// Waits until at least `n` main model requests arrived; returns them all.
        pub fn wait_for_requests(
            &self,
            n: usize,
            timeout: Duration,
        ) -> Result<Vec<RecordedRequest>, TestkitError> {
            self.server.wait_for_requests(n, timeout)
        }

        /// One line per request that found its script queue exhausted, missed a step's `expect`,
        /// asked for something the fake cannot serve, or hit an unknown route / malformed body.
        pub fn unexpected(&self) -> Vec<String> {
            self.server.unexpected()
        }

        /// How many streamed replies the client abandoned mid-way (connection reset / broken
        /// pipe).
        pub fn aborted_streams(&self) -> usize {
            self.server.aborted_streams()
        }

        /// Waits until at least `n` streams were aborted by the client; returns the count.
        pub fn wait_for_aborted_streams(
            &self,
            n: usize,
            timeout: Duration,
        ) -> Result<usize, TestkitError> {
            self.server.wait_for_aborted_streams(n, timeout)
        }

        /// Steps not consumed yet (all queues).
        pub fn remaining_steps(&self) -> usize {
            self.server.remaining_steps()
        }

        /// Stops accepting, closes every open connection and ends running streams. Idempotent;
        /// `Drop` calls it.
        pub fn shutdown(&mut self) {
            self.server.shutdown();
        }
    };
}

/// A scripted fake Anthropic Messages server on 127.0.0.1 (std only, one thread per connection,
/// HTTP/1.1 keep-alive). Stops accepting and closes its connections when dropped.
#[derive(Debug)]
pub struct FakeAnthropic {
    server: Server,
}

impl FakeAnthropic {
    /// Starts a server on a free loopback port.
    pub fn start(script: Script) -> Result<Self, TestkitError> {
        Self::start_with(script, &ServerOptions::default())
    }

    /// Starts a server with options (fixed port, request log).
    pub fn start_with(script: Script, options: &ServerOptions) -> Result<Self, TestkitError> {
        Server::start(Api::Anthropic, script, options).map(|server| Self { server })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash): the value for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        self.server.origin()
    }

    shared_accessors!(
        "streaming `POST /v1/messages`",
        "probes, `count_tokens` and unknown routes"
    );
}

/// A scripted fake OpenAI Responses server on 127.0.0.1 for the Codex CLI (std only, one thread
/// per connection, HTTP/1.1 keep-alive). Stops accepting and closes its connections when dropped.
///
/// Point a Codex model provider at [`FakeOpenAi::base_url`] with `wire_api = "responses"` (see
/// [`crate::codex_offline_args`]).
#[derive(Debug)]
pub struct FakeOpenAi {
    server: Server,
}

impl FakeOpenAi {
    /// Starts a server on a free loopback port.
    pub fn start(script: Script) -> Result<Self, TestkitError> {
        Self::start_with(script, &ServerOptions::default())
    }

    /// Starts a server with options (fixed port, request log).
    pub fn start_with(script: Script, options: &ServerOptions) -> Result<Self, TestkitError> {
        Server::start(Api::OpenAi, script, options).map(|server| Self { server })
    }

    /// `http://127.0.0.1:PORT/v1`: the value for a Codex model provider's `base_url` (Codex
    /// appends `/responses`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.origin())
    }

    /// `http://127.0.0.1:PORT` (no path, no trailing slash).
    pub fn origin(&self) -> String {
        self.server.origin()
    }

    shared_accessors!("streaming `POST /v1/responses`", "unknown routes");
}

fn accept_loop(api: Api, listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id: u64 = 0;
    for incoming in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let stream = match incoming {
            Ok(stream) => stream,
            Err(_) => {
                // Transient (e.g. out of descriptors): do not spin.
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let _ignored = stream.set_nodelay(true);
        if let Ok(clone) = stream.try_clone() {
            relock(shared.conns.lock()).insert(id, clone);
        }
        let for_thread = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name(format!("fake-{}-conn-{id}", api.name()))
            .spawn(move || {
                conn::serve_connection(&for_thread, api, stream);
                for_thread.forget_conn(id);
            });
        if spawned.is_err() {
            shared.forget_conn(id);
        }
    }
}
