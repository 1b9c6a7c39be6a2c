//! The main loop: one turn of the harness, steered by commands.
//!
//! The turn is over when a `result` covers every message passed on (Claude Code lists them in
//! `user_message_uuids`; a steer sent while the model streams is queued by the CLI and runs as a
//! further `result`, which this loop waits for). Then `in/` is renamed away (S18): commands that
//! landed before the rename are still carried out, and a message among them continues the turn
//! (with a fresh `in/`). If the harness exits first (S19), no command is taken any more and each
//! one not passed on is answered `ended`.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use hangar_protocol::runlog::HangarLine;
use hangar_protocol::{AckStatus, Kind, Refusal};
use serde_json::Value;

use crate::args::{Policy, Settings};
use crate::harness::{self, Harness};
use crate::inbox::{Inbox, Incoming};
use crate::relay::HarnessEvent;
use crate::runlog::RunLog;

/// What wakes the main loop.
#[derive(Debug)]
pub enum Event {
    /// Something landed in `in/`.
    Wake,
    /// A line the driver acts on, or the end of the harness's output.
    Harness(HarnessEvent),
}

/// Exit status after an interrupt that brought no new message.
pub const EXIT_INTERRUPTED: i32 = 130;
/// Exit status when the harness reported an error or went away without finishing the turn.
pub const EXIT_HARNESS_ERROR: i32 = 1;

/// How long the main loop sleeps between scans of `in/` when the doorbell is quiet.
const RESCAN: Duration = Duration::from_millis(250);

#[derive(Debug)]
struct Pending {
    input: Value,
}

/// One turn's state.
#[derive(Debug)]
pub struct Turn {
    policy: Policy,
    log: RunLog,
    inbox: Inbox,
    harness: Harness,
    pending: HashMap<String, Pending>,
    answered: HashSet<String>,
    /// uuids of messages passed on that no `result` has covered yet.
    outstanding: Vec<String>,
    /// An interrupt was sent after the last message.
    interrupted: bool,
    last_result_error: Option<bool>,
    end_requested: bool,
    handed_back: Vec<u64>,
}

impl Turn {
    pub fn new(s: &Settings, log: RunLog, inbox: Inbox, harness: Harness) -> Turn {
        Turn {
            policy: s.policy,
            log,
            inbox,
            harness,
            pending: HashMap::new(),
            answered: HashSet::new(),
            outstanding: Vec::new(),
            interrupted: false,
            last_result_error: None,
            end_requested: false,
            handed_back: Vec::new(),
        }
    }

    /// Runs until the turn is over; returns the exit status (S20).
    pub fn run(mut self, rx: &Receiver<Event>) -> i32 {
        loop {
            match rx.recv_timeout(RESCAN) {
                Ok(Event::Wake) | Err(RecvTimeoutError::Timeout) => {
                    for c in self.inbox.take(&self.log) {
                        self.execute(c);
                    }
                }
                Ok(Event::Harness(HarnessEvent::Result { is_error, uuids })) => {
                    self.last_result_error = Some(is_error);
                    match uuids {
                        Some(u) => self.outstanding.retain(|x| !u.contains(x)),
                        None => self.outstanding.clear(),
                    }
                    if self.outstanding.is_empty()
                        && let Some(status) = self.end_turn(rx)
                    {
                        return status;
                    }
                }
                Ok(Event::Harness(HarnessEvent::CanUseTool {
                    request_id,
                    tool_name,
                    input,
                    tool_use_id,
                })) => {
                    self.on_permission_request(request_id, tool_name, input, tool_use_id);
                }
                Ok(Event::Harness(HarnessEvent::Cancel { request_id })) => {
                    if self.pending.remove(&request_id).is_some() {
                        self.answered.insert(request_id.clone());
                        self.log.hangar(&HangarLine::ApprovalAnswered {
                            request_id,
                            decision: "cancelled".into(),
                            by: "harness".into(),
                            seq: None,
                        });
                    }
                }
                Ok(Event::Harness(HarnessEvent::Eof)) | Err(RecvTimeoutError::Disconnected) => {
                    return self.harness_gone();
                }
            }
        }
    }

    fn on_permission_request(
        &mut self,
        request_id: String,
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
    ) {
        match self.policy {
            Policy::Ask => {
                self.log.hangar(&HangarLine::Approval {
                    request_id: request_id.clone(),
                    tool_name,
                    input: input.clone(),
                    tool_use_id,
                });
                self.pending.insert(request_id, Pending { input });
            }
            Policy::Auto => {
                // Claude Code asks nothing under --dangerously-skip-permissions; if it ever does,
                // auto means allow.
                let _ =
                    self.harness
                        .send(&harness::permission_response(&request_id, true, &input, ""));
                self.answered.insert(request_id.clone());
                self.log.hangar(&HangarLine::ApprovalAnswered {
                    request_id,
                    decision: "allow".into(),
                    by: "policy".into(),
                    seq: None,
                });
            }
        }
    }

    /// Carries out one checked command and answers it.
    fn execute(&mut self, c: Incoming) {
        let Incoming { name, verified } = c;
        let cmd = verified.command;
        let kind = verified.kind;
        let result: Result<(), Refusal> = match kind {
            Kind::Prompt | Kind::Steer => {
                let uuid = harness::message_uuid(&cmd.nonce);
                let text = cmd.text().unwrap_or_default();
                match self.harness.send(&harness::user_message(text, &uuid)) {
                    Ok(()) => {
                        self.outstanding.push(uuid);
                        self.interrupted = false;
                        Ok(())
                    }
                    Err(_) => Err(Refusal::TurnEnded),
                }
            }
            Kind::Interrupt => {
                let id = format!("hangar-interrupt-{}", cmd.seq);
                self.harness
                    .send(&harness::interrupt(&id))
                    .map(|()| self.interrupted = true)
                    .map_err(|_| Refusal::TurnEnded)
            }
            Kind::Approve | Kind::Deny => self.answer(&cmd, kind),
            Kind::End => {
                self.end_requested = true;
                for late in self.inbox.close(&self.log) {
                    self.answer_ended(&late);
                }
                self.harness.close_input();
                Ok(())
            }
        };
        match result {
            Ok(()) => {
                self.log.hangar(&HangarLine::Command {
                    name: name.clone(),
                    seq: cmd.seq,
                    kind: kind.to_string(),
                    outcome: "done".into(),
                });
                self.inbox.ack(&name, Some(&cmd), AckStatus::Done, "");
            }
            Err(Refusal::TurnEnded) => {
                let c = Incoming {
                    name,
                    verified: hangar_protocol::Verified { command: cmd, kind },
                };
                self.answer_ended(&c);
            }
            Err(refusal) => self.inbox.refuse(&self.log, &name, Some(&cmd), &refusal),
        }
    }

    /// `approve` / `deny`: only for a request this harness asked and nobody answered (S16).
    fn answer(&mut self, cmd: &hangar_protocol::Command, kind: Kind) -> Result<(), Refusal> {
        let id = cmd.request_id().unwrap_or_default().to_owned();
        if self.answered.contains(&id) {
            return Err(Refusal::AlreadyAnswered(id));
        }
        let Some(p) = self.pending.get(&id) else {
            return Err(Refusal::UnknownRequest(id));
        };
        let allow = kind == Kind::Approve;
        let input = cmd
            .body
            .get("updated_input")
            .cloned()
            .unwrap_or_else(|| p.input.clone());
        let message = cmd
            .body
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("The person denied this tool call.");
        self.harness
            .send(&harness::permission_response(&id, allow, &input, message))
            .map_err(|_| Refusal::TurnEnded)?;
        self.pending.remove(&id);
        self.answered.insert(id.clone());
        self.log.hangar(&HangarLine::ApprovalAnswered {
            request_id: id,
            decision: if allow { "allow" } else { "deny" }.into(),
            by: "command".into(),
            seq: Some(cmd.seq),
        });
        Ok(())
    }

    fn answer_ended(&mut self, c: &Incoming) {
        let cmd = &c.verified.command;
        if c.verified.kind.is_message() {
            self.handed_back.push(cmd.seq);
        }
        self.log.hangar(&HangarLine::Command {
            name: c.name.clone(),
            seq: cmd.seq,
            kind: c.verified.kind.to_string(),
            outcome: "ended".into(),
        });
        self.inbox
            .ack(&c.name, Some(cmd), AckStatus::Ended, "the turn has ended");
    }

    /// The last `result` covered every message. Close `in/`; late commands are carried out, and a
    /// late message continues the turn. `None` means the turn goes on.
    fn end_turn(&mut self, rx: &Receiver<Event>) -> Option<i32> {
        for late in self.inbox.close(&self.log) {
            self.execute(late);
        }
        if !self.outstanding.is_empty() {
            if !self.end_requested {
                self.inbox.reopen();
            }
            return None;
        }
        let status = if self.interrupted {
            EXIT_INTERRUPTED
        } else if self.last_result_error == Some(true) {
            EXIT_HARNESS_ERROR
        } else {
            0
        };
        self.harness.close_input();
        self.drain_until_eof(rx);
        self.reap();
        self.log.hangar(&HangarLine::TurnEnd {
            status,
            reason: "result".into(),
            handed_back: self.handed_back.clone(),
        });
        Some(status)
    }

    /// The harness's output ended before the turn did (S19).
    fn harness_gone(&mut self) -> i32 {
        for c in self.inbox.close(&self.log) {
            self.answer_ended(&c);
        }
        self.pending.clear();
        let code = self.reap();
        let finished = self.outstanding.is_empty() && self.last_result_error.is_some();
        let status = match (finished, self.last_result_error) {
            (true, _) if self.interrupted => EXIT_INTERRUPTED,
            (true, Some(false)) => 0,
            _ if self.end_requested && self.outstanding.is_empty() && code == Some(0) => 0,
            _ => EXIT_HARNESS_ERROR,
        };
        if status == EXIT_HARNESS_ERROR {
            let how = code.map_or_else(
                || "was killed by a signal".to_owned(),
                |c| format!("exited with status {c}"),
            );
            self.log.hangar(&HangarLine::Error {
                message: format!("the harness {how} before the turn finished"),
            });
        }
        self.log.hangar(&HangarLine::TurnEnd {
            status,
            reason: "harness_exited".into(),
            handed_back: self.handed_back.clone(),
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
                Ok(Event::Harness(_)) => {}
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
