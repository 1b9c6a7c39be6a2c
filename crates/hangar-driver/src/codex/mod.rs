//! Codex through `codex app-server` (JSON-RPC over stdio, S8, S9).
//!
//! Start-up: `initialize` → `initialized` → `thread/start` (or `thread/resume`, `thread/fork`)
//! with `approvalPolicy` `untrusted` (`never` under `auto`) and sandbox `danger-full-access`
//! (hangar's sandbox is the boundary). Messages that arrive before the thread is ready wait in
//! order. A message becomes `turn/start` when no turn runs and `turn/steer` (with the expected
//! turn id) while one does; a steer that loses the race with the turn's end is sent again as
//! `turn/start`. An interrupt is `turn/interrupt`.
//!
//! Codex 0.169 leaves a running command alive when a turn is interrupted. The driver stops it:
//! when the interrupted turn completes with a command item still in progress, every process
//! below the app-server (the app-server itself and its Node.js wrapper are spared) is killed
//! (stopped first, then SIGKILL, so none forks away). The item's
//! `processId` is unified exec's own id, not a pid, so the process tree is the handle; with
//! plugins disabled and `danger-full-access` the app-server's only children are the commands it
//! runs. Closing the app-server's stdin at the turn's end kills what is left.
//!
//! Approval requests (`item/commandExecution/requestApproval`, `item/fileChange/requestApproval`)
//! go through the same policy path as Claude Code's `can_use_tool`, as `codex-<id>` request ids.
//! `approve` answers `accept`, `deny` answers `decline` and then sends the person's reason as a
//! steer, so the agent sees why. A changed input is refused: Codex cannot run a command other
//! than the one it asked for. Other server requests are answered with an error.
//!
//! Codex retries a model server that does not answer forever; the driver gives up after
//! `--model-timeout` of nothing but retry errors, interrupts the turn and fails it.

pub mod exec_json;
pub mod home;
mod procs;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::time::{Duration, Instant};

use hangar_protocol::runlog::HangarLine;
use serde_json::{Value, json};

use crate::adapter::{Adapter, Answer, SendError, Signal};
use crate::args::{Policy, Settings};
use crate::harness::Harness;
use crate::relay::HarnessEvent;
use crate::runlog::RunLog;
use exec_json::Translator;
pub use home::CodexHome;

/// The `codex` argv (without the program). `--disable plugins` is always there: with plugins,
/// Codex 0.169 looks up outside hosts at start. Then the session's own `-c` settings, then
/// hangar's, which come last so that they win (issue 18, see [`governance_overrides`]).
pub fn args(s: &Settings) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "app-server".into(),
        "--disable".into(),
        "plugins".into(),
        // Hooks run code at every tool call and session start; hangar's governance is the
        // approval path, and a hardened turn runs none.
        "--disable".into(),
        "hooks".into(),
    ];
    let ours = governance_overrides(s);
    for kv in s.codex_config.iter().chain(&ours) {
        a.push("-c".into());
        a.push(kv.into());
    }
    a
}

/// The settings no repository or agent file may change, as `-c` overrides (the session flags
/// layer, above the user's and the project's `config.toml`):
///
/// * the workspace is an untrusted project: Codex 0.169 and 0.171 then load no project-local
///   `.codex/config.toml`, hooks or exec policies (a `thread/start` with `danger-full-access`
///   otherwise marks the folder trusted in `CODEX_HOME/config.toml` and loads them, MCP servers
///   included);
/// * `notify` runs nothing; approval requests go to the user (hangar), never to Codex's
///   automatic reviewer (`approvals_reviewer`).
///
/// The approval policy and sandbox are `thread/start` parameters, which win over every layer.
pub fn governance_overrides(s: &Settings) -> Vec<String> {
    let cwd = home::toml_string(&s.cwd.to_string_lossy());
    vec![
        format!("projects={{{cwd}={{trust_level=\"untrusted\"}}}}"),
        "notify=[]".into(),
        "approvals_reviewer=\"user\"".into(),
    ]
}

#[derive(Clone, Debug)]
enum Call {
    Initialize,
    Thread,
    TurnStart,
    /// A message steered into turn `turn`.
    TurnSteer {
        text: String,
        turn: String,
    },
    TurnInterrupt,
}

#[derive(Clone, Debug)]
struct Approval {
    rpc_id: Value,
}

/// Codex's side of the turn.
#[derive(Debug)]
pub struct Codex {
    policy: Policy,
    cwd: String,
    model: Option<String>,
    resume: Option<String>,
    fork: Option<(String, Option<String>)>,
    next_id: u64,
    calls: HashMap<u64, Call>,
    thread: Option<String>,
    waiting: Vec<String>,
    active_turn: Option<String>,
    /// Messages sent (turn/start or turn/steer) whose reply has not come yet.
    in_flight: usize,
    approvals: HashMap<String, Approval>,
    items: HashMap<String, Value>,
    /// Command items in progress.
    running: HashSet<String>,
    kill_running_at_turn_end: bool,
    translator: Translator,
    model_timeout: Duration,
    retrying_since: Option<Instant>,
    gave_up: bool,
    /// Messages passed on ([`Adapter::message`]), in order: (id, text).
    passed: Vec<(String, String)>,
    /// Ids of those Codex began: its `userMessage` item for the text came (see
    /// [`Adapter::never_started`]).
    begun: HashSet<String>,
    /// Ids of the `userMessage` items seen.
    user_items: HashSet<String>,
    /// Ids of begun messages whose turn has completed (answered, or stopped by an interrupt).
    finished: HashSet<String>,
    /// Ids of messages passed on again as a new turn after an interrupted turn dropped them.
    resent: HashSet<String>,
    /// Messages Codex took into a running turn (`turn/steer` answered): (turn, text).
    steered: Vec<(String, String)>,
    /// Turns that ended interrupted.
    interrupted_turns: HashSet<String>,
    /// Codex refused the thread or a turn: a failure that would come again, so nothing is handed
    /// back for a next turn to fail on.
    refused: bool,
}

impl Codex {
    pub fn new(s: &Settings) -> Codex {
        Codex {
            policy: s.policy,
            cwd: s.cwd.to_string_lossy().into_owned(),
            model: s.model.clone(),
            resume: s.resume.clone(),
            fork: s.fork.clone().map(|f| (f, s.fork_at.clone())),
            next_id: 1,
            calls: HashMap::new(),
            thread: None,
            waiting: Vec::new(),
            active_turn: None,
            in_flight: 0,
            approvals: HashMap::new(),
            items: HashMap::new(),
            running: HashSet::new(),
            kill_running_at_turn_end: false,
            translator: Translator::default(),
            model_timeout: s.model_timeout,
            retrying_since: None,
            gave_up: false,
            passed: Vec::new(),
            begun: HashSet::new(),
            user_items: HashSet::new(),
            finished: HashSet::new(),
            resent: HashSet::new(),
            steered: Vec::new(),
            interrupted_turns: HashSet::new(),
            refused: false,
        }
    }

    /// A `userMessage` item: the first message passed on with its text that Codex had not begun
    /// yet has now begun (a steer waits in Codex until the running command or model request
    /// is done, and only then becomes an item).
    fn user_message_began(&mut self, item: &Value) {
        // Each item comes twice (`item/started`, `item/completed`): once is a message begun.
        let item_id = item.get("id").and_then(Value::as_str).unwrap_or_default();
        if !self.user_items.insert(item_id.to_owned()) {
            return;
        }
        let text: String = item
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        if let Some((id, _)) = self
            .passed
            .iter()
            .find(|(id, t)| *t == text && !self.begun.contains(id))
        {
            self.begun.insert(id.clone());
        }
    }

    fn call(
        &mut self,
        h: &mut Harness,
        method: &str,
        params: Value,
        kind: Call,
    ) -> Result<(), SendError> {
        let id = self.next_id;
        self.next_id += 1;
        h.send(&json!({"id": id, "method": method, "params": params}))
            .map_err(|_| SendError::Gone)?;
        self.calls.insert(id, kind);
        Ok(())
    }

    fn approval_policy(&self) -> &'static str {
        match self.policy {
            Policy::Ask | Policy::Governed => "untrusted",
            Policy::Auto => "never",
        }
    }

    fn start_thread(&mut self, h: &mut Harness) -> Result<(), SendError> {
        let mut p = json!({"cwd": self.cwd, "approvalPolicy": self.approval_policy(), "sandbox": "danger-full-access"});
        if let (Some(m), Some(o)) = (&self.model, p.as_object_mut()) {
            o.insert("model".into(), json!(m));
        }
        let method = match (&self.resume, &self.fork) {
            (Some(id), _) => {
                p["threadId"] = json!(id);
                "thread/resume"
            }
            (None, Some((id, at))) => {
                p["threadId"] = json!(id);
                if let Some(at) = at {
                    p["lastTurnId"] = json!(at);
                }
                "thread/fork"
            }
            (None, None) => "thread/start",
        };
        self.call(h, method, p, Call::Thread)
    }

    fn send_text(&mut self, h: &mut Harness, text: &str) -> Result<(), SendError> {
        let Some(thread) = self.thread.clone() else {
            self.waiting.push(text.to_owned());
            return Ok(());
        };
        let input = json!([{"type": "text", "text": text, "text_elements": []}]);
        match self.active_turn.clone() {
            Some(turn) => self.call(
                h,
                "turn/steer",
                json!({"threadId": thread, "expectedTurnId": turn, "input": input}),
                Call::TurnSteer {
                    text: text.to_owned(),
                    turn: turn.clone(),
                },
            )?,
            None => self.call(
                h,
                "turn/start",
                json!({"threadId": thread, "input": input}),
                Call::TurnStart,
            )?,
        }
        self.in_flight += 1;
        Ok(())
    }

    fn on_response(&mut self, h: &mut Harness, log: &RunLog, id: u64, msg: &Value) -> Vec<Signal> {
        let Some(call) = self.calls.remove(&id) else {
            return Vec::new();
        };
        let error = msg.get("error").map(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_owned()
        });
        let result = msg.get("result").cloned().unwrap_or(Value::Null);
        match (call, error) {
            (Call::Initialize, None) => {
                let sent = h.send(&json!({"method": "initialized"})).is_ok()
                    && self.start_thread(h).is_ok();
                if sent {
                    Vec::new()
                } else {
                    vec![Signal::Failed {
                        message: "Codex went away during its handshake".into(),
                    }]
                }
            }
            (Call::Thread, None) => {
                let Some(thread) = result
                    .pointer("/thread/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    self.refused = true;
                    return vec![Signal::Failed {
                        message: "Codex started no thread".into(),
                    }];
                };
                log.write_json(&Translator::thread_started(&thread));
                self.thread = Some(thread);
                for text in std::mem::take(&mut self.waiting) {
                    if self.send_text(h, &text).is_err() {
                        return vec![Signal::Failed {
                            message: "Codex went away".into(),
                        }];
                    }
                }
                Vec::new()
            }
            (Call::Initialize | Call::Thread, Some(e)) => {
                self.refused = true;
                vec![Signal::Failed {
                    message: format!("Codex refused to start the thread: {e}"),
                }]
            }
            (Call::TurnStart, None) => {
                self.in_flight = self.in_flight.saturating_sub(1);
                if let Some(turn) = result.pointer("/turn/id").and_then(Value::as_str) {
                    self.active_turn = Some(turn.to_owned());
                }
                Vec::new()
            }
            (Call::TurnSteer { text, turn }, None) => {
                self.in_flight = self.in_flight.saturating_sub(1);
                // Taken into a turn that was interrupted meanwhile: dropped unless passed on.
                if self.interrupted_turns.contains(&turn) {
                    return self.resend_dropped(h, &text);
                }
                self.steered.push((turn, text));
                Vec::new()
            }
            (Call::TurnSteer { text, .. }, Some(_)) => {
                // The turn ended between our look and Codex's: the message starts the next one.
                self.in_flight = self.in_flight.saturating_sub(1);
                self.active_turn = None;
                match self.send_text(h, &text) {
                    Ok(()) => Vec::new(),
                    Err(_) => vec![Signal::Failed {
                        message: "Codex went away".into(),
                    }],
                }
            }
            (Call::TurnStart, Some(e)) => {
                self.in_flight = self.in_flight.saturating_sub(1);
                self.refused = true;
                vec![Signal::Failed {
                    message: format!("Codex refused the turn: {e}"),
                }]
            }
            (Call::TurnInterrupt, _) => Vec::new(),
        }
    }

    fn on_server_request(
        &mut self,
        h: &mut Harness,
        id: Value,
        method: &str,
        params: &Value,
    ) -> Vec<Signal> {
        let request_id = format!(
            "codex-{}",
            id.as_u64()
                .map_or_else(|| id.to_string(), |n| n.to_string())
        );
        let (tool_name, input) = match method {
            "item/commandExecution/requestApproval" => (
                "commandExecution",
                json!({"command": params.get("command").cloned().unwrap_or(Value::Null), "cwd": params.get("cwd").cloned().unwrap_or(Value::Null)}),
            ),
            "item/fileChange/requestApproval" => {
                let item = params
                    .get("itemId")
                    .and_then(Value::as_str)
                    .and_then(|i| self.items.get(i));
                let changes = item
                    .and_then(|i| i.get("changes"))
                    .cloned()
                    .unwrap_or(json!([]));
                (
                    "fileChange",
                    json!({"changes": changes, "reason": params.get("reason").cloned().unwrap_or(Value::Null)}),
                )
            }
            other => {
                let _ = h.send(&json!({"id": id, "error": {"code": -32601, "message": format!("hangar does not answer {other}")}}));
                return Vec::new();
            }
        };
        self.approvals
            .insert(request_id.clone(), Approval { rpc_id: id });
        let tool_use_id = params
            .get("itemId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        vec![Signal::Ask {
            request_id,
            tool_name: tool_name.into(),
            input,
            tool_use_id,
        }]
    }

    fn on_notification(
        &mut self,
        h: &mut Harness,
        log: &RunLog,
        method: &str,
        params: &Value,
    ) -> Vec<Signal> {
        if method == "error" {
            if params.get("willRetry").and_then(Value::as_bool) == Some(true) {
                self.retrying_since.get_or_insert_with(Instant::now);
            }
        } else if method.starts_with("item/") || method.starts_with("turn/") {
            self.retrying_since = None;
        }
        for line in self.translator.notification(method, params) {
            log.write_json(&line);
        }
        let mut signals = Vec::new();
        match method {
            "item/started" | "item/completed" => {
                if let Some(item) = params.get("item") {
                    let id = item
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    let in_progress = method == "item/started"
                        || item.get("status").and_then(Value::as_str) == Some("inProgress");
                    let kind = item.get("type").and_then(Value::as_str);
                    if !in_progress
                        && matches!(kind, Some("commandExecution" | "fileChange"))
                        && let Some(logged) = self.translator.logged_id(&id)
                    {
                        signals.push(Signal::ToolsDone { ids: vec![logged] });
                    }
                    if kind == Some("userMessage") {
                        self.user_message_began(item);
                    }
                    match kind {
                        Some("commandExecution") if in_progress => {
                            self.running.insert(id.clone());
                        }
                        _ if !in_progress => {
                            self.running.remove(&id);
                        }
                        _ => {}
                    }
                    self.items.insert(id, item.clone());
                }
            }
            "serverRequest/resolved" => {
                let rid = params
                    .get("requestId")
                    .map(|v| v.as_u64().map_or_else(|| v.to_string(), |n| n.to_string()));
                if let Some(rid) = rid {
                    let request_id = format!("codex-{rid}");
                    if self.approvals.remove(&request_id).is_some() {
                        signals.push(Signal::Withdrawn { request_id });
                    }
                }
            }
            "turn/completed" => {
                let status = params
                    .pointer("/turn/status")
                    .and_then(Value::as_str)
                    .unwrap_or("completed");
                let turn = params.pointer("/turn/id").and_then(Value::as_str);
                if turn.is_none() || turn == self.active_turn.as_deref() {
                    self.active_turn = None;
                }
                if status == "interrupted" || self.kill_running_at_turn_end {
                    self.stop_running(h, log);
                }
                self.kill_running_at_turn_end = false;
                if self.active_turn.is_none() {
                    self.finished.extend(self.begun.iter().cloned());
                }
                if let Some(turn) = turn {
                    let (ours, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.steered)
                        .into_iter()
                        .partition(|(t, _)| t == turn);
                    self.steered = others;
                    if status == "interrupted" {
                        self.interrupted_turns.insert(turn.to_owned());
                        for (_, text) in ours {
                            signals.extend(self.resend_dropped(h, &text));
                        }
                    }
                }
                if self.active_turn.is_none() && self.in_flight == 0 && self.waiting.is_empty() {
                    let is_error = status == "failed" || self.gave_up;
                    signals.push(Signal::Settled { is_error });
                }
            }
            _ => {}
        }
        signals
    }

    /// Codex drops a steer it took into a turn (`turn/steer`) but had not begun when that turn
    /// is interrupted. Claude Code runs such a queued message after the interrupt; so that a
    /// message acked `done` is never lost and both harnesses behave alike, the driver passes
    /// it on again as a new turn (once; not if Codex began it after all).
    fn resend_dropped(&mut self, h: &mut Harness, text: &str) -> Vec<Signal> {
        let Some(id) = self
            .passed
            .iter()
            .find(|(id, t)| t == text && !self.begun.contains(id) && !self.resent.contains(id))
            .map(|(id, _)| id.clone())
        else {
            return Vec::new();
        };
        self.resent.insert(id);
        match self.send_text(h, text) {
            Ok(()) => Vec::new(),
            Err(_) => vec![Signal::Failed {
                message: "Codex went away".into(),
            }],
        }
    }

    /// Kills the commands an interrupted turn left running (see the module docs): every process
    /// below the app-server (which is spared, with the npm package's Node.js wrapper, by its
    /// `app-server` argument). The item's `processId` is unified exec's own id, not a pid; with
    /// plugins disabled and `danger-full-access`, the app-server's only children are the
    /// commands it runs.
    fn stop_running(&mut self, h: &Harness, log: &RunLog) {
        let items: Vec<String> = std::mem::take(&mut self.running).into_iter().collect();
        if items.is_empty() {
            return;
        }
        let killed = procs::kill_descendants(h.pid(), |p| procs::has_arg(p, "app-server"));
        if killed > 0 {
            log.hangar(&HangarLine::Warning {
                message: format!(
                    "stopped {killed} process(es) of command(s) {} that the interrupted turn left running",
                    items.join(", ")
                ),
            });
        }
    }
}

impl Adapter for Codex {
    fn start(&mut self, h: &mut Harness, _log: &RunLog) -> Result<(), SendError> {
        let params = json!({"clientInfo": {"name": "hangar", "title": null, "version": env!("CARGO_PKG_VERSION")}});
        self.call(h, "initialize", params, Call::Initialize)
    }

    fn message(&mut self, h: &mut Harness, text: &str, id: &str) -> Result<(), SendError> {
        self.send_text(h, text)?;
        self.passed.push((id.to_owned(), text.to_owned()));
        Ok(())
    }

    fn interrupt(&mut self, h: &mut Harness, _seq: u64) -> Result<(), SendError> {
        let (Some(thread), Some(turn)) = (self.thread.clone(), self.active_turn.clone()) else {
            // Nothing runs: nothing to stop.
            return Ok(());
        };
        self.kill_running_at_turn_end = true;
        self.call(
            h,
            "turn/interrupt",
            json!({"threadId": thread, "turnId": turn}),
            Call::TurnInterrupt,
        )
    }

    fn answer(
        &mut self,
        h: &mut Harness,
        request_id: &str,
        _original: &Value,
        a: &Answer,
    ) -> Result<(), SendError> {
        if a.allow && a.updated_input.is_some() {
            return Err(SendError::Unsupported(
                "Codex cannot run a changed command; deny it and steer the agent instead".into(),
            ));
        }
        let Some(ap) = self.approvals.remove(request_id) else {
            return Err(SendError::Gone);
        };
        let decision = if a.allow { "accept" } else { "decline" };
        h.send(&json!({"id": ap.rpc_id, "result": {"decision": decision}}))
            .map_err(|_| SendError::Gone)?;
        if !a.allow && !a.message.is_empty() {
            self.send_text(h, &format!("The person declined that: {}", a.message))?;
        }
        Ok(())
    }

    fn on_event(&mut self, h: &mut Harness, log: &RunLog, ev: HarnessEvent) -> Vec<Signal> {
        let HarnessEvent::Rpc(msg) = ev else {
            return Vec::new();
        };
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        match (msg.get("id").cloned(), method) {
            (Some(id), Some(m)) => {
                self.on_server_request(h, id, &m, msg.get("params").unwrap_or(&Value::Null))
            }
            (Some(id), None) => match id.as_u64() {
                Some(n) => self.on_response(h, log, n, &msg),
                None => Vec::new(),
            },
            (None, Some(m)) => {
                self.on_notification(h, log, &m, msg.get("params").unwrap_or(&Value::Null))
            }
            (None, None) => Vec::new(),
        }
    }

    fn tick(&mut self, h: &mut Harness, log: &RunLog) -> Vec<Signal> {
        let Some(since) = self.retrying_since else {
            return Vec::new();
        };
        if self.gave_up || since.elapsed() < self.model_timeout {
            return Vec::new();
        }
        self.gave_up = true;
        self.retrying_since = None;
        log.hangar(&HangarLine::Error {
            message: format!(
                "the model server has not answered for {} s; interrupting the turn",
                self.model_timeout.as_secs()
            ),
        });
        if self.interrupt(h, 0).is_err() || self.active_turn.is_none() {
            return vec![Signal::Failed {
                message: "the model server did not answer".into(),
            }];
        }
        Vec::new()
    }

    fn busy(&self) -> bool {
        self.active_turn.is_some() || self.in_flight > 0 || !self.waiting.is_empty()
    }

    /// Messages Codex never made a `userMessage` item of: waiting for the thread, a `turn/start`
    /// or `turn/steer` not answered, or a steer Codex accepted and held until the running
    /// command (or approval) was done. None when Codex refused the thread or a turn.
    fn answering(&self) -> Vec<String> {
        self.passed
            .iter()
            .filter(|(id, _)| self.begun.contains(id) && !self.finished.contains(id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn never_started(&self) -> Vec<String> {
        if self.refused {
            return Vec::new();
        }
        self.passed
            .iter()
            .filter(|(id, _)| !self.begun.contains(id))
            .map(|(id, _)| id.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc(v: Value) -> HarnessEvent {
        HarnessEvent::Rpc(v)
    }

    fn user_item(item_id: &str, text: &str) -> Value {
        json!({"type": "userMessage", "id": item_id,
               "content": [{"type": "text", "text": text, "text_elements": []}]})
    }

    /// Codex killed with a steer it accepted but held (a command ran): the steer is handed back,
    /// the prompt it made an item of is not, and neither is a message of the same text twice.
    #[test]
    fn messages_codex_made_no_item_of_are_the_ones_handed_back() {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut h = Harness { stdin: None, child };
        h.stdin = h.child.stdin.take();
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::open(&dir.path().join("run.log")).unwrap();
        let s = crate::args::parse(
            [
                "--ctl",
                "/nowhere",
                "--run",
                "r",
                "--cwd",
                "/",
                "--harness",
                "codex",
            ]
            .into_iter()
            .map(OsString::from)
            .collect(),
        )
        .unwrap();
        let mut c = Codex::new(&s);
        c.start(&mut h, &log).unwrap();
        // Before the thread is ready the prompt waits in the adapter: never begun.
        c.message(&mut h, "same text", "p1").unwrap();
        assert_eq!(c.never_started(), vec!["p1".to_owned()]);
        c.on_event(&mut h, &log, rpc(json!({"id": 1, "result": {}})));
        c.on_event(
            &mut h,
            &log,
            rpc(json!({"id": 2, "result": {"thread": {"id": "th"}}})),
        );
        c.on_event(
            &mut h,
            &log,
            rpc(json!({"id": 3, "result": {"turn": {"id": "tu"}}})),
        );
        for m in ["item/started", "item/completed"] {
            c.on_event(
                &mut h,
                &log,
                rpc(json!({"method": m, "params": {"item": user_item("u1", "same text")}})),
            );
        }
        assert!(c.never_started().is_empty(), "the prompt began");
        // A steer of the same text and another, both accepted by Codex (turn/steer answered).
        c.message(&mut h, "same text", "s1").unwrap();
        c.message(&mut h, "other text", "s2").unwrap();
        c.on_event(
            &mut h,
            &log,
            rpc(json!({"id": 4, "result": {"turnId": "tu"}})),
        );
        c.on_event(
            &mut h,
            &log,
            rpc(json!({"id": 5, "result": {"turnId": "tu"}})),
        );
        assert_eq!(c.never_started(), vec!["s1".to_owned(), "s2".to_owned()]);
        c.on_event(
            &mut h,
            &log,
            rpc(json!({"method": "item/started", "params": {"item": user_item("u2", "other text")}})),
        );
        assert_eq!(c.never_started(), vec!["s1".to_owned()]);
        let _ = h.child.kill();
        let _ = h.child.wait();
    }

    /// A thread Codex refused fails again in a next turn: nothing is handed back to loop on.
    #[test]
    fn nothing_is_handed_back_when_codex_refused_the_thread() {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut h = Harness { stdin: None, child };
        h.stdin = h.child.stdin.take();
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::open(&dir.path().join("run.log")).unwrap();
        let s = crate::args::parse(
            [
                "--ctl",
                "/nowhere",
                "--run",
                "r",
                "--cwd",
                "/",
                "--harness",
                "codex",
            ]
            .into_iter()
            .map(OsString::from)
            .collect(),
        )
        .unwrap();
        let mut c = Codex::new(&s);
        c.start(&mut h, &log).unwrap();
        c.message(&mut h, "hello", "p1").unwrap();
        c.on_event(&mut h, &log, rpc(json!({"id": 1, "result": {}})));
        let out = c.on_event(
            &mut h,
            &log,
            rpc(json!({"id": 2, "error": {"message": "no rollout found"}})),
        );
        assert!(matches!(out.as_slice(), [Signal::Failed { .. }]), "{out:?}");
        assert!(c.never_started().is_empty());
        let _ = h.child.kill();
        let _ = h.child.wait();
    }
}
