//! The main loop: one turn of a harness, steered by commands.
//!
//! The loop owns the mailbox, the policy and the record of permission requests (so an `approve`
//! or `deny` is only taken for a request the harness asked and nobody answered, S16); the
//! adapter speaks the harness's protocol. When the adapter says everything passed on is done
//! ([`Signal::Settled`]), `in/` is renamed away (S18): commands that landed before the rename are
//! still carried out, and a message among them continues the turn (with a fresh `in/`). If the
//! harness exits first (S19), no command is taken any more and each one not passed on is
//! answered `ended`.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use hangar_protocol::runlog::{ApprovalDecision, HangarLine, VerifyOutcome};
use hangar_protocol::{Command, Kind, Refusal, Verified};
use serde_json::Value;

use crate::adapter::{Adapter, Answer, SendError, Signal};
use crate::args::Policy;
use crate::harness::Harness;
use crate::relay::HarnessEvent;
use crate::runlog::RunLog;
use hangar_mailbox::{Inbox, Incoming};

/// What wakes the main loop.
#[derive(Debug)]
pub enum Event {
    /// Something landed in `in/`.
    Wake,
    /// A line the driver acts on, or the end of the harness's output.
    Harness(HarnessEvent),
    /// Tower's final answer to a permission request (policy `governed`).
    Tower {
        request_id: String,
        allow: bool,
        reason: String,
    },
}

/// Exit status after an interrupt that brought no new message.
pub const EXIT_INTERRUPTED: i32 = 130;
/// Exit status when the harness reported an error or went away without finishing the turn.
pub const EXIT_HARNESS_ERROR: i32 = 1;

/// How long the main loop sleeps between scans of `in/` when the doorbell is quiet.
const RESCAN: Duration = Duration::from_millis(250);
/// The same without a doorbell (no inotify instance left for the user): a command waits for
/// the next scan, so scans are frequent (a listing of a near-empty folder, about 50 a second).
const RESCAN_WITHOUT_DOORBELL: Duration = Duration::from_millis(20);

/// How the turn ended, for the caller (the verify loop decides on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Settled; `is_error` as the harness said; `interrupted` when an interrupt came after the
    /// last message.
    Settled { is_error: bool, interrupted: bool },
    /// The harness went away or failed.
    Gone,
}

/// One turn's state.
pub struct Turn {
    policy: Policy,
    pub log: RunLog,
    inbox: Inbox,
    pub harness: Harness,
    pub adapter: Box<dyn Adapter>,
    pending: HashMap<String, Value>,
    answered: HashSet<String>,
    /// An interrupt was sent after the last message.
    interrupted: bool,
    /// Ids of the messages not yet begun at the last interrupt: if the model begins one after
    /// it, the turn goes on and ends by that message's result, not as interrupted.
    queued_at_interrupt: Vec<String>,
    last_error: bool,
    end_requested: bool,
    failed: Option<String>,
    handed_back: Vec<u64>,
    /// Messages passed on to the harness: (seq, the id they were passed with).
    passed: Vec<(u64, String)>,
    /// The job's check's final state (`passed`, `failed`, `not_run`) when there is a check.
    pub verify_state: Option<String>,
    /// Rounds of check feedback sent.
    pub verify_rounds: Option<u32>,
    /// Claude Code's Stop hook (the job's check), when the turn has one.
    pub stop_hook: Option<(crate::verify::StopHook, u32)>,
    /// The turn has a check (its final state is reported, `not_run` if it never ran).
    pub verify_configured: bool,
    /// SIGTERM/SIGHUP arrived and the harness was told to stop.
    stopping: bool,
    /// The turn's trees (none for a raw command), and where their objects go at the end.
    pub trees: Option<(crate::trees::Trees, std::path::PathBuf)>,
    checks_run: u32,
    /// The deny-risky rules: the floor under every policy.
    rules: hangar_rules::Rules,
    /// Where the harness's calls run (workspace, home, hangar's own paths).
    rules_ctx: hangar_rules::Context,
    /// The Tower hook is on: permission requests are answered from the rules only (T7).
    pub hook_on: bool,
    /// The Tower hook's settings folder, removed when the turn ends.
    pub tower_settings: Option<crate::tower::HookSettings>,
    /// Policy `governed` without the hook: where requests go.
    pub governed: Option<crate::tower::Governed>,
    /// Requests waiting for Tower (no person may answer them).
    tower_pending: HashMap<String, Value>,
    /// Folders of the turn's own (its Claude Code settings, its Codex home), removed at the end.
    pub remove_at_end: Vec<std::path::PathBuf>,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Turn {
    pub fn new(
        policy: Policy,
        log: RunLog,
        inbox: Inbox,
        harness: Harness,
        adapter: Box<dyn Adapter>,
        rules: (hangar_rules::Rules, hangar_rules::Context),
    ) -> Turn {
        let (rules, rules_ctx) = rules;
        Turn {
            rules,
            rules_ctx,
            hook_on: false,
            tower_settings: None,
            governed: None,
            tower_pending: HashMap::new(),
            remove_at_end: Vec::new(),
            policy,
            log,
            inbox,
            harness,
            adapter,
            pending: HashMap::new(),
            answered: HashSet::new(),
            interrupted: false,
            queued_at_interrupt: Vec::new(),
            last_error: false,
            end_requested: false,
            failed: None,
            handed_back: Vec::new(),
            passed: Vec::new(),
            verify_state: None,
            verify_rounds: None,
            stop_hook: None,
            verify_configured: false,
            stopping: false,
            checks_run: 0,
            trees: None,
        }
    }

    /// Starts the adapter; a failure ends the turn before any command is taken.
    pub fn start(&mut self) -> Result<(), String> {
        self.adapter
            .start(&mut self.harness, &self.log)
            .map_err(|e| match e {
                SendError::Gone => "the harness went away while starting".to_owned(),
                SendError::Unsupported(m) => m,
            })
    }

    /// Runs until everything passed on is done (or the harness is gone). Does not close `in/`:
    /// the caller may still send a message of its own (the verify loop) before [`Turn::finish`].
    pub fn run_until_settled(&mut self, rx: &Receiver<Event>) -> Outcome {
        let rescan = if self.inbox.has_doorbell() {
            RESCAN
        } else {
            RESCAN_WITHOUT_DOORBELL
        };
        loop {
            match rx.recv_timeout(rescan) {
                Ok(Event::Wake) | Err(RecvTimeoutError::Timeout) => {
                    self.on_os_signals();
                    for c in self.inbox.take(&self.log) {
                        self.execute(c);
                    }
                    // `in/` or `acks/` was replaced (folder.rs): no command can be trusted to
                    // arrive or be answered; the turn stops as if the harness had failed.
                    if let Some(why) = self.inbox.broken() {
                        self.failed = Some(why.to_owned());
                        return Outcome::Gone;
                    }
                    let signals = self.adapter.tick(&mut self.harness, &self.log);
                    if let Some(o) = self.handle(signals) {
                        return o;
                    }
                }
                Ok(Event::Harness(HarnessEvent::Eof)) | Err(RecvTimeoutError::Disconnected) => {
                    return Outcome::Gone;
                }
                Ok(Event::Tower {
                    request_id,
                    allow,
                    reason,
                }) => self.on_tower(request_id, allow, reason),
                Ok(Event::Harness(ev)) => {
                    let signals = self.adapter.on_event(&mut self.harness, &self.log, ev);
                    if let Some(o) = self.handle(signals) {
                        return o;
                    }
                }
            }
        }
    }

    /// Ctrl-C in the turn's terminal (tmux) interrupts the turn, as `hangar run` does; SIGTERM or
    /// SIGHUP (the sandbox stopping) stops the harness, and the turn ends as if it had exited.
    fn on_os_signals(&mut self) {
        let interrupts = crate::signals::take_interrupts();
        if interrupts > 0 && self.adapter.interrupt(&mut self.harness, 0).is_ok() {
            self.log.hangar(&HangarLine::Warning {
                message: "interrupted from the terminal (Ctrl-C)".into(),
            });
            self.on_interrupt(0, None);
        }
        if crate::signals::stop_requested() && !self.stopping {
            self.stopping = true;
            self.log.hangar(&HangarLine::Warning {
                message: "the driver was told to stop (SIGTERM/SIGHUP); stopping the harness"
                    .into(),
            });
            self.harness.close_input();
            self.harness.signal_group(libc::SIGTERM);
        }
    }

    /// Acts on the adapter's signals; `Some` when the turn has settled or failed.
    fn handle(&mut self, signals: Vec<Signal>) -> Option<Outcome> {
        let mut settled = None;
        for s in signals {
            match s {
                Signal::Ask {
                    request_id,
                    tool_name,
                    input,
                    tool_use_id,
                } => {
                    self.on_permission_request(request_id, tool_name, input, tool_use_id);
                }
                Signal::PreToolUse {
                    request_id,
                    tool_name,
                    input,
                    tool_use_id,
                } => {
                    let v = self.rules.check_tool(&tool_name, &input, &self.rules_ctx);
                    let deny = (!v.allowed()).then(|| rules_message(&v));
                    let _ =
                        self.adapter
                            .answer_hook(&mut self.harness, &request_id, deny.as_deref());
                    if !v.allowed() {
                        self.log_rules_denied(request_id, tool_name, tool_use_id, v);
                    }
                }
                Signal::Withdrawn { request_id } => {
                    if self.pending.remove(&request_id).is_some()
                        || self.tower_pending.remove(&request_id).is_some()
                    {
                        self.answered.insert(request_id.clone());
                        self.log.hangar(&HangarLine::ApprovalAnswered {
                            request_id,
                            decision: ApprovalDecision::Cancelled,
                            by: "harness".into(),
                            seq: None,
                            person: None,
                            note: None,
                            updated_input: None,
                        });
                    }
                }
                Signal::Settled { is_error } => {
                    self.last_error = is_error;
                    // A message queued at the interrupt that the model then began: the turn
                    // went on, and this result is its end.
                    let never = self.adapter.never_started();
                    if self
                        .queued_at_interrupt
                        .iter()
                        .any(|id| !never.contains(id))
                    {
                        self.interrupted = false;
                    }
                    self.queued_at_interrupt.clear();
                    settled = Some(Outcome::Settled {
                        is_error,
                        interrupted: self.interrupted,
                    });
                }
                Signal::Verified {
                    outcome,
                    exit_code,
                    tail,
                } => self.record_check(outcome, exit_code, 0, tail),
                Signal::ToolsDone { ids } => {
                    if let Some((t, _)) = &self.trees {
                        t.after(ids);
                    }
                }
                Signal::Failed { message } => {
                    self.log.hangar(&HangarLine::Error {
                        message: message.clone(),
                    });
                    self.failed = Some(message);
                    return Some(Outcome::Gone);
                }
            }
        }
        settled
    }

    /// Records one run of the job's check: a `hangar.verify` line and the turn's check state;
    /// a `feedback` round also lowers the rounds the Stop hook has left.
    pub fn record_check(
        &mut self,
        outcome: VerifyOutcome,
        exit_code: Option<i32>,
        ms: u64,
        output_tail: String,
    ) {
        self.checks_run += 1;
        let rounds = self.verify_rounds.get_or_insert(0);
        if outcome == VerifyOutcome::Feedback {
            *rounds += 1;
        }
        let rounds = *rounds;
        if let Some((hook, max)) = &self.stop_hook {
            hook.set_rounds_left(max.saturating_sub(rounds));
        }
        self.verify_state = Some(outcome.as_str().into());
        self.log.hangar(&HangarLine::Verify {
            round: self.checks_run,
            exit_code,
            ms,
            outcome,
            output_tail,
        });
    }

    /// Settled: close `in/` and carry out what landed before; `true` if that continued the turn.
    pub fn close_and_drain(&mut self) -> bool {
        for late in self.inbox.close(&self.log) {
            self.execute(late);
        }
        if self.adapter.busy() {
            if !self.end_requested {
                self.inbox.reopen(&self.log);
            }
            return true;
        }
        false
    }

    /// Passes a message of the driver's own (the verify loop's feedback) to the harness.
    pub fn own_message(&mut self, text: &str, id: &str) -> bool {
        self.interrupted = false;
        self.adapter.message(&mut self.harness, text, id).is_ok()
    }

    fn on_permission_request(
        &mut self,
        request_id: String,
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
    ) {
        // The rules first, under every policy: a call they deny is never shown to anyone.
        let v = self.rules.check_tool(&tool_name, &input, &self.rules_ctx);
        if !v.allowed() {
            let deny = Answer {
                allow: false,
                updated_input: None,
                message: rules_message(&v),
            };
            let _ = self
                .adapter
                .answer(&mut self.harness, &request_id, &input, &deny);
            self.answered.insert(request_id.clone());
            self.log_rules_denied(request_id, tool_name, tool_use_id, v);
            return;
        }
        if self.hook_on {
            // Tower hears of every call through the hook; the driver never asks it again.
            self.answer_allow(request_id, &input, "rules");
            return;
        }
        match self.policy {
            Policy::Governed => {
                let Some(g) = &self.governed else {
                    let deny = Answer {
                        allow: false,
                        updated_input: None,
                        message: "The governed policy has no Tower to ask; the call is refused."
                            .into(),
                    };
                    let _ = self
                        .adapter
                        .answer(&mut self.harness, &request_id, &input, &deny);
                    self.answered.insert(request_id);
                    return;
                };
                self.log.hangar(&HangarLine::Approval {
                    request_id: request_id.clone(),
                    tool_name: tool_name.clone(),
                    input: input.clone(),
                    tool_use_id: tool_use_id.clone(),
                });
                let body = serde_json::json!({
                    "tool_name": tool_name,
                    "tool_input": input,
                    "tool_use_id": tool_use_id,
                    "harness": g.harness,
                    "client": hangar_hook::client::client_info(None, None, Some(&g.run)),
                });
                crate::tower::ask(&g.tower, g.tx.clone(), request_id.clone(), body);
                self.tower_pending.insert(request_id, input);
            }
            Policy::Ask => {
                self.log.hangar(&HangarLine::Approval {
                    request_id: request_id.clone(),
                    tool_name,
                    input: input.clone(),
                    tool_use_id,
                });
                self.pending.insert(request_id, input);
            }
            Policy::Auto => {
                // Neither harness asks under auto; if one ever does, auto means allow.
                self.answer_allow(request_id, &input, "policy");
            }
        }
    }

    fn answer_allow(&mut self, request_id: String, input: &Value, by: &str) {
        let allow = Answer {
            allow: true,
            updated_input: None,
            message: String::new(),
        };
        let _ = self
            .adapter
            .answer(&mut self.harness, &request_id, input, &allow);
        self.answered.insert(request_id.clone());
        self.log.hangar(&HangarLine::ApprovalAnswered {
            request_id,
            decision: ApprovalDecision::Allow,
            by: by.into(),
            seq: None,
            person: None,
            note: None,
            updated_input: None,
        });
    }

    /// Tower's final answer to a `governed` request (a fault arrives as a deny with its reason).
    fn on_tower(&mut self, request_id: String, allow: bool, reason: String) {
        let Some(input) = self.tower_pending.remove(&request_id) else {
            return;
        };
        let answer = Answer {
            allow,
            updated_input: None,
            message: reason.clone(),
        };
        let _ = self
            .adapter
            .answer(&mut self.harness, &request_id, &input, &answer);
        self.answered.insert(request_id.clone());
        if !allow {
            self.log.hangar(&HangarLine::Warning {
                message: format!("Tower refused {request_id}: {reason}"),
            });
        }
        self.log.hangar(&HangarLine::ApprovalAnswered {
            request_id,
            decision: if allow {
                ApprovalDecision::Allow
            } else {
                ApprovalDecision::Deny
            },
            by: "tower".into(),
            seq: None,
            person: None,
            note: None,
            updated_input: None,
        });
    }

    fn log_rules_denied(
        &self,
        request_id: String,
        tool_name: String,
        tool_use_id: Option<String>,
        v: hangar_rules::Verdict,
    ) {
        self.log.hangar(&HangarLine::RulesDenied {
            request_id,
            tool_name,
            tool_use_id,
            rule: v.rule.unwrap_or_default(),
            reason: v.reason,
        });
    }

    /// Carries out one checked command and answers it.
    fn execute(&mut self, c: Incoming) {
        let Incoming { name, verified } = c;
        let Verified { command: cmd, kind } = verified;
        let result: Result<(), Refusal> = match kind {
            Kind::Prompt | Kind::Steer => {
                let text = cmd.text().unwrap_or_default();
                match self.adapter.message(&mut self.harness, text, &cmd.nonce) {
                    Ok(()) => {
                        self.passed.push((cmd.seq, cmd.nonce.clone()));
                        self.interrupted = false;
                        Ok(())
                    }
                    Err(e) => Err(refusal_for(e)),
                }
            }
            Kind::Interrupt => match self.adapter.interrupt(&mut self.harness, cmd.seq) {
                Ok(()) => {
                    self.on_interrupt(cmd.seq, cmd.sender().map(str::to_owned));
                    Ok(())
                }
                Err(e) => Err(refusal_for(e)),
            },
            Kind::Approve | Kind::Deny => self.answer(&cmd, kind),
            Kind::End => {
                self.end_requested = true;
                let handed_back = self.inbox.end(&self.log);
                self.handed_back.extend(handed_back);
                self.harness.close_input();
                Ok(())
            }
        };
        match result {
            Ok(()) => self.inbox.answer_done(&self.log, &name, &cmd, kind),
            Err(Refusal::TurnEnded) => {
                let c = Incoming {
                    name,
                    verified: Verified { command: cmd, kind },
                };
                self.answer_ended(&c);
            }
            Err(refusal) => self.inbox.refuse_checked(&self.log, &name, &cmd, &refusal),
        }
    }

    /// An interrupt went to the harness: the turn is interrupted unless a message follows, and
    /// `hangar.interrupted` says what it stopped and what still runs (issue 21).
    fn on_interrupt(&mut self, seq: u64, person: Option<String>) {
        self.interrupted = true;
        let seqs = |ids: &[String]| -> Vec<u64> {
            self.passed
                .iter()
                .filter(|(_, id)| ids.contains(id))
                .map(|(seq, _)| *seq)
                .collect()
        };
        let answering = seqs(&self.adapter.answering());
        self.queued_at_interrupt = self.adapter.never_started();
        let queued = seqs(&self.queued_at_interrupt);
        let mut approvals: Vec<String> = self
            .pending
            .keys()
            .chain(self.tower_pending.keys())
            .cloned()
            .collect();
        approvals.sort();
        self.log.hangar(&HangarLine::Interrupted {
            seq,
            person,
            answering,
            queued,
            approvals,
        });
    }

    /// `approve` / `deny`: only for a request this harness asked and nobody answered (S16).
    fn answer(&mut self, cmd: &Command, kind: Kind) -> Result<(), Refusal> {
        let id = cmd.request_id().unwrap_or_default().to_owned();
        if self.answered.contains(&id) {
            return Err(Refusal::AlreadyAnswered(id));
        }
        let Some(input) = self.pending.get(&id).cloned() else {
            return Err(Refusal::UnknownRequest(id));
        };
        let allow = kind == Kind::Approve;
        let answer = Answer {
            allow,
            updated_input: cmd.body.get("updated_input").cloned(),
            message: cmd
                .body
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("The person denied this tool call.")
                .to_owned(),
        };
        self.adapter
            .answer(&mut self.harness, &id, &input, &answer)
            .map_err(refusal_for)?;
        self.pending.remove(&id);
        self.answered.insert(id.clone());
        self.log.hangar(&HangarLine::ApprovalAnswered {
            request_id: id,
            decision: if allow {
                ApprovalDecision::Allow
            } else {
                ApprovalDecision::Deny
            },
            by: "command".into(),
            seq: Some(cmd.seq),
            person: cmd.sender().map(str::to_owned),
            note: cmd.note().filter(|_| !allow).map(str::to_owned),
            // The person's edit of the call, kept with who made it (issue 21).
            updated_input: answer.updated_input.filter(|u| allow && *u != input),
        });
        Ok(())
    }

    fn answer_ended(&mut self, c: &Incoming) {
        if let Some(seq) = self.inbox.answer_ended(&self.log, c) {
            self.handed_back.push(seq);
        }
    }

    /// The turn is over after it settled: close the harness's input, let the relay write the
    /// last lines, reap the harness, write `hangar.turn_end`. Returns the exit status (S20).
    pub fn finish(&mut self, rx: &Receiver<Event>) -> i32 {
        self.settle_verify_state();
        let status = if self.interrupted {
            EXIT_INTERRUPTED
        } else if self.last_error || self.verify_state.as_deref() == Some("failed") {
            EXIT_HARNESS_ERROR
        } else {
            0
        };
        self.harness.close_input();
        self.drain_until_eof(rx);
        self.reap();
        self.hand_back_never_started();
        self.end_trees();
        self.log.hangar(&HangarLine::TurnEnd {
            status,
            reason: "result".into(),
            handed_back: self.handed_back.clone(),
            verify: self.verify_state.clone(),
            verify_rounds: self.verify_rounds,
        });
        status
    }

    /// Messages the harness took but never began (it was killed, or crashed, with them queued;
    /// or it settled without them) go to the next turn like those that came too late: a message
    /// acked `done` is never lost.
    fn hand_back_never_started(&mut self) {
        let never = self.adapter.never_started();
        for (seq, id) in &self.passed {
            if never.contains(id) && !self.handed_back.contains(seq) {
                self.handed_back.push(*seq);
            }
        }
    }

    /// The end tree, and the turn's objects handed over, before the turn's last line.
    fn end_trees(&mut self) {
        if let Some((trees, pack)) = self.trees.take() {
            trees.finish(&pack);
        }
    }

    /// The harness's output ended, or the adapter failed, before the turn settled (S19).
    /// A check still at `feedback` never got its last word (e.g. an interrupt came): `not_run`
    /// if it never ran, else it stands as failed.
    fn settle_verify_state(&mut self) {
        if let Some((hook, _)) = &self.stop_hook {
            hook.remove();
        }
        if let Some(t) = &self.tower_settings {
            t.remove();
        }
        for dir in &self.remove_at_end {
            let _ = std::fs::remove_dir_all(dir);
        }
        match self.verify_state.as_deref() {
            Some("feedback") => self.verify_state = Some("failed".into()),
            None if self.verify_configured => self.verify_state = Some("not_run".into()),
            _ => {}
        }
    }

    pub fn harness_gone(&mut self, rx: &Receiver<Event>) -> i32 {
        self.settle_verify_state();
        let handed_back = self.inbox.end(&self.log);
        self.handed_back.extend(handed_back);
        self.pending.clear();
        if self.failed.is_some() {
            self.harness.close_input();
            self.drain_until_eof(rx);
        }
        let code = self.reap();
        let status = if self.end_requested
            && !self.adapter.busy()
            && code == Some(0)
            && self.failed.is_none()
        {
            0
        } else {
            EXIT_HARNESS_ERROR
        };
        if status == EXIT_HARNESS_ERROR && self.failed.is_none() {
            let how = code.map_or_else(
                || "was killed by a signal".to_owned(),
                |c| format!("exited with status {c}"),
            );
            self.log.hangar(&HangarLine::Error {
                message: format!("the harness {how} before the turn finished"),
            });
        }
        self.hand_back_never_started();
        self.end_trees();
        self.log.hangar(&HangarLine::TurnEnd {
            status,
            reason: "harness_exited".into(),
            handed_back: self.handed_back.clone(),
            verify: self.verify_state.clone(),
            verify_rounds: self.verify_rounds,
        });
        status
    }

    /// Lets the relay write the harness's last lines (it sends `Eof` when done).
    fn drain_until_eof(&mut self, rx: &Receiver<Event>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(Event::Harness(HarnessEvent::Eof)) | Err(_) => return,
                Ok(Event::Wake) => {
                    for c in self.inbox.take(&self.log) {
                        self.answer_ended(&c);
                    }
                }
                Ok(Event::Harness(ev)) => {
                    // Codex's last notifications still become run-log lines.
                    let _ = self.adapter.on_event(&mut self.harness, &self.log, ev);
                }
                Ok(Event::Tower { .. }) => {}
            }
        }
        self.harness.signal_group(libc::SIGTERM);
    }

    /// Waits for the harness to exit (SIGTERM, then SIGKILL to its group if it lingers); its exit
    /// code, `None` if a signal ended it.
    fn reap(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut pause = Duration::from_millis(1);
        let mut termed = false;
        loop {
            match self.harness.child.try_wait() {
                Ok(Some(st)) => {
                    // Whatever the harness left in its group goes with it.
                    self.harness.signal_group(libc::SIGKILL);
                    return st.code();
                }
                Ok(None) if Instant::now() < deadline => {
                    // The harness usually exits right after its output ends: look again soon.
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Ok(None) if !termed => {
                    self.harness.signal_group(libc::SIGTERM);
                    termed = true;
                    std::thread::sleep(Duration::from_secs(2));
                }
                Ok(None) => {
                    self.harness.signal_group(libc::SIGKILL);
                    return self.harness.child.wait().ok().and_then(|s| s.code());
                }
                Err(_) => return None,
            }
        }
    }
}

/// What the agent is told when the rules deny a call: the rule and its reason.
fn rules_message(v: &hangar_rules::Verdict) -> String {
    format!(
        "Denied by hangar's rule {}: {}",
        v.rule.as_deref().unwrap_or("deny-risky"),
        v.reason
    )
}

fn refusal_for(e: SendError) -> Refusal {
    match e {
        SendError::Gone => Refusal::TurnEnded,
        SendError::Unsupported(why) => Refusal::Unsupported(why),
    }
}
