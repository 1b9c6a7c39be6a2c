//! The control plane's operations: sessions, turns, commands, approvals.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_mailbox::outbox::{Delivery, Mailbox, Outcome};
use hangar_protocol::command::body;
use hangar_protocol::{Kind, RunKey};
use hangar_store::{
    AckStatus, AnswerRecord, Decision, Harness, NewSandbox, Policy, Run, Session, Store,
    StoreError, Turn, TurnState, TurnUpdate, new_id,
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::error::ControlError;
use crate::launch::{self, Tools, TurnOptions};

/// Why a message recorded before it landed is answered without the driver: its turn had ended.
const NOT_LANDED_ENDED: &str = "not landed: the turn had ended";

/// How long a command waits for the driver's signed answer.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// A request to start a session.
#[derive(Clone, Debug)]
pub struct SessionRequest {
    /// The folder: the repository a sandbox of `env` copies, or, without `env` and `sandbox`,
    /// the folder the in-place local sandbox works on (or, with `no_sandbox`, a plain folder).
    pub dir: PathBuf,
    /// Run in this existing sandbox (then `dir` is not used).
    pub sandbox: Option<String>,
    /// Make a sandbox of this environment holding a copy of `dir`, and run there.
    pub env: Option<String>,
    /// Run in `dir` itself with no sandbox, as the server's own user: refused unless the server
    /// allows it (`HANGAR_UNSANDBOXED_FOLDERS=allow`).
    pub no_sandbox: bool,
    pub harness: Harness,
    /// The policy asked for; `None`: the environment's `governance.policy`, else `ask`. An
    /// environment's policy is a floor: a weaker one is refused.
    pub policy: Option<Policy>,
    pub prompt: String,
    pub person: String,
    pub options: TurnOptions,
}

/// What starting a session or a turn made.
#[derive(Clone, Debug)]
pub struct Started {
    pub session: Session,
    pub turn: Turn,
    pub run: Run,
}

/// What became of a command.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// The driver carried it out.
    Done { run: String, seq: u64 },
    /// The driver refused it (its reason).
    Refused { run: String, reason: String },
    /// The turn had ended; the message started the next turn.
    NextTurn { turn: String, run: String },
    /// The turn had ended before the command landed (nothing reached the driver).
    Ended { run: String },
    /// The command landed, but the harness had gone: the driver handed it back, and the next
    /// turn starts with it (the run's watcher sees to it; nobody else must start one).
    HandedBack { run: String },
}

/// The control plane.
#[derive(Debug)]
pub struct ControlPlane {
    pub(crate) store: Store,
    pub(crate) tools: Tools,
    pub(crate) poll: Duration,
    newest: watch::Sender<i64>,
    watching: Mutex<HashSet<String>>,
    pub(crate) providers: crate::sandboxes::Providers,
    pub(crate) keys: crate::passport::Keys,
    pub(crate) mailboxes: crate::live::Mailboxes,
    pub(crate) traces: crate::traces::Traces,
    /// The one-shot turns running in this process (nothing reads their mailbox).
    pub(crate) one_shots: Mutex<HashSet<String>>,
    /// This process among replicas sharing the database (the holder of its runs' leases).
    pub(crate) replica: String,
    /// How long a claim on a run holds (`lease`); none on SQLite.
    pub(crate) lease: Option<Duration>,
    /// The takeover of runs no replica holds has started.
    pub(crate) taking_over: std::sync::atomic::AtomicBool,
    /// The terminals this control plane relays (`hangar sb attach` on e2b).
    pub(crate) attaches: crate::attaches::Attaches,
}

impl ControlPlane {
    /// A control plane over `store` (which must have its vault attached).
    pub fn new(store: Store, tools: Tools) -> Arc<ControlPlane> {
        let (newest, _) = watch::channel(0);
        let traces = crate::traces::Traces::from_tools(&tools);
        let lease = crate::lease::configured(&store);
        let providers = crate::sandboxes::Providers::for_tools(&tools);
        let replica =
            new_id("replica").unwrap_or_else(|_| format!("replica-{}", std::process::id()));
        Arc::new(ControlPlane {
            traces,
            replica,
            lease,
            taking_over: Default::default(),
            store,
            tools,
            poll: Duration::from_millis(100),
            newest,
            watching: Mutex::new(HashSet::new()),
            providers,
            keys: crate::passport::Keys::default(),
            mailboxes: Default::default(),
            one_shots: Mutex::new(HashSet::new()),
            attaches: Default::default(),
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A receiver that changes whenever events are stored (its value: the newest event id).
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.newest.subscribe()
    }

    pub(crate) fn events_stored(&self, newest: i64) {
        self.newest.send_modify(|v| *v = (*v).max(newest));
    }

    /// Starts a watcher for every live run (after a restart). Returns how many.
    pub async fn reattach(self: &Arc<Self>) -> Result<usize, ControlError> {
        let runs = self.store.live_runs().await?;
        let n = runs.len();
        for run in runs {
            self.resume_passport(&run).await;
            self.watch(run);
        }
        // Replicas: runs whose replica died are taken over once their lease runs out.
        crate::lease::take_over_orphans(self);
        Ok(n)
    }

    /// Whether this process watches the run.
    pub(crate) fn is_watching(&self, run_id: &str) -> bool {
        self.watching
            .lock()
            .map(|w| w.contains(run_id))
            .unwrap_or(false)
    }

    /// Starts watching a run unless a watcher already does.
    pub(crate) fn watch(self: &Arc<Self>, run: Run) {
        let fresh = self
            .watching
            .lock()
            .map(|mut w| w.insert(run.id.clone()))
            .unwrap_or(false);
        if fresh {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                let id = run.id.clone();
                // Among replicas, the one that holds the run's lease watches it.
                if crate::lease::claim(&me, &id).await {
                    crate::watch::run_watcher(Arc::clone(&me), run).await;
                }
                if let Ok(mut w) = me.watching.lock() {
                    w.remove(&id);
                }
            });
        }
    }

    /// A new session in a local folder, and its first turn.
    pub async fn start_session(
        self: &Arc<Self>,
        req: SessionRequest,
    ) -> Result<Started, ControlError> {
        if req.prompt.trim().is_empty() {
            return Err(ControlError::BadRequest("the prompt is empty".into()));
        }
        let (sandbox, policy) = match (&req.sandbox, &req.env, req.no_sandbox) {
            (Some(_), Some(_), _) => {
                return Err(ControlError::BadRequest(
                    "give a sandbox or an environment to make one from, not both".into(),
                ));
            }
            (Some(_), None, true) | (None, Some(_), true) => {
                return Err(ControlError::BadRequest(
                    "no_sandbox runs the session in a plain folder: give it with dir alone, not with a sandbox or an environment".into(),
                ));
            }
            (Some(id), None, false) => {
                let sb = self.provider_sandbox(id).await?;
                let policy = crate::envs::session_policy(req.policy, Some(&sb.env))?;
                (self.store.sandbox(id).await?, policy)
            }
            (None, None, true) => {
                crate::folders::unsandboxed_allowed(&self.tools)?;
                let sandbox = self.folder_sandbox(&req.dir, &req.person).await?;
                (sandbox, req.policy.unwrap_or(Policy::Ask))
            }
            // A folder alone runs in the in-place local sandbox (issue 18: never as the
            // server's user by default).
            (None, env, false) => {
                let env = env.as_deref().unwrap_or(crate::sandboxes::IN_PLACE_ENV);
                let spec = self.env_spec(env, &req.person).await?;
                let policy = crate::envs::session_policy(req.policy, Some(&spec))?;
                let made = self.create_sandbox(env, &req.dir, &req.person).await?;
                (self.store.sandbox(&made.id).await?, policy)
            }
        };
        let session = self
            .store
            .create_session(&new_id("ses")?, &sandbox.id, req.harness, policy)
            .await?;
        let options = serde_json::to_value(&req.options)
            .map_err(|e| ControlError::Internal(e.to_string()))?;
        self.store
            .set_session_options(&session.id, &options)
            .await?;
        self.store.audit().append(&req.person, "session.started", &json!({"session": session.id, "dir": sandbox.workdir, "harness": req.harness.as_str(), "policy": policy.as_str()})).await?;
        self.start_turn(&session.id, &[req.prompt], &req.person)
            .await
    }

    /// A plain local folder as a sandbox row (no provider); never hangar's home, a folder above
    /// it or one inside it.
    async fn folder_sandbox(
        &self,
        dir: &std::path::Path,
        person: &str,
    ) -> Result<hangar_store::Sandbox, ControlError> {
        let dir = crate::folders::outside_home(&self.tools.home, dir)?;
        // The embedded default: local folders, no sandbox provider yet.
        match self
            .store
            .create_environment("local", &json!({"provider": "local"}))
            .await
        {
            Ok(()) | Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(self
            .store
            .create_sandbox(&NewSandbox {
                id: new_id("sb")?,
                environment: "local".into(),
                kind: "local".into(),
                workdir: dir.display().to_string(),
                person: person.to_owned(),
                handle: None,
            })
            .await?)
    }

    /// Starts the next turn of a session with these messages: planned (records, mailbox, where
    /// it runs), then placed; whatever refuses it after its records exist refuses it here,
    /// once, audited.
    pub async fn start_turn(
        self: &Arc<Self>,
        session_id: &str,
        messages: &[String],
        person: &str,
    ) -> Result<Started, ControlError> {
        let plan = self.plan_turn(session_id, messages, person).await?;
        let placed = match self.placement(&plan).await {
            Ok(placement) => self.place(&plan, &placement).await,
            Err(e) => Err(e),
        };
        let launched = match placed {
            Ok(l) => l,
            Err(e) => {
                self.refuse_turn(&plan.turn, plan.run_id(), person, &e.to_string())
                    .await?;
                return Err(e);
            }
        };
        if let Some(pid) = launched.pid {
            self.store
                .set_driver_pid(plan.run_id(), i64::from(pid))
                .await?;
        }
        let mut update = TurnUpdate::to(TurnState::Running);
        update.manifest = serde_json::to_value(&launched.manifest).ok();
        let turn = self.store.update_turn_state(&plan.turn.id, &update).await?;
        let run = self.store.run(plan.run_id()).await?;
        self.watch(run.clone());
        Ok(Started {
            session: self.store.session(&plan.session.id).await?,
            turn,
            run,
        })
    }

    /// Writes the coding agent's key in Tower (the vault credential) as `<ctl>/tower.key`
    /// (0600); Tower's address and the file.
    pub(crate) async fn tower_key(
        &self,
        ctl: &std::path::Path,
    ) -> Result<(String, PathBuf), ControlError> {
        let (url, cred) = launch::governance(&self.tools)?;
        let key = self.store.credential(&cred).await.map_err(|e| {
            ControlError::BadRequest(format!(
                "policy governed: the credential {cred:?} (HANGAR_GOVERNANCE_HOOK_CREDENTIAL) cannot be read: {e}"
            ))
        })?;
        let file = ctl.join(crate::passport::KEY_FILE);
        let bytes = key.expose().to_vec();
        let path = file.clone();
        blocking(move || crate::passport::write_key_file(&path, &bytes))
            .await?
            .map_err(|e| ControlError::Internal(format!("cannot write {}: {e}", file.display())))?;
        Ok((url, file))
    }

    async fn refuse_turn(
        &self,
        turn: &Turn,
        run_id: &str,
        person: &str,
        why: &str,
    ) -> Result<(), ControlError> {
        let mut u = TurnUpdate::to(TurnState::Refused);
        u.reason = Some(why.to_owned());
        self.store.update_turn_state(&turn.id, &u).await?;
        self.store.end_run(run_id).await?;
        self.store.destroy_run_key(run_id).await?;
        if let Ok(r) = self.store.run(run_id).await {
            self.key_files_gone(&r).await;
        }
        self.store
            .audit()
            .append(
                person,
                "turn.refused",
                &json!({"turn": turn.id, "why": why}),
            )
            .await?;
        Ok(())
    }

    /// The mailbox of a live run, with its key from the vault.
    /// A live run's mailbox: the one kept in memory, or opened with the key from the vault (and
    /// kept).
    pub(crate) async fn mailbox(&self, run_id: &str) -> Result<Mailbox, ControlError> {
        if let Some(m) = self.mailboxes.get(run_id) {
            return Ok(m);
        }
        let key = self.store.run_key(run_id).await?;
        let bytes: [u8; 32] = key.expose().try_into().map_err(|_| {
            ControlError::Internal(format!("run {run_id}: the vault's key is not 32 bytes"))
        })?;
        let (home, rid) = (self.tools.home.clone(), run_id.to_owned());
        let m = blocking(move || Mailbox::open_with_key(&home, &rid, RunKey::from_bytes(bytes)))
            .await??;
        self.mailboxes.insert(run_id, m.clone());
        Ok(m)
    }

    /// Sends one command, recording and auditing it; then, as `then` says, returns or waits
    /// for the signed ack (and records it with the approval answer the command carried).
    pub(crate) async fn deliver(
        &self,
        mailbox: &Mailbox,
        run_id: &str,
        kind: Kind,
        b: Value,
        person: &str,
        then: Then<'_>,
    ) -> Result<(Outcome, bool), ControlError> {
        let (m, b2) = (mailbox.clone(), b.clone());
        // A message is recorded before it lands (scripts/chaos: a server killed between the
        // two left a steer the harness had and the store did not); answers and interrupts
        // after, off their latency (the watcher records their answers from the log).
        let recorded_first = kind.is_message();
        let delivery = if recorded_first {
            let (store, run, who, b3) = (
                self.store.clone(),
                run_id.to_owned(),
                person.to_owned(),
                b.clone(),
            );
            let rt = tokio::runtime::Handle::current();
            blocking(move || {
                m.send_recorded(kind, b2, |c| {
                    let seq = i64::try_from(c.seq).unwrap_or(i64::MAX);
                    rt.block_on(store.record_command(&run, seq, kind.as_str(), &b3, &who))
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
            })
            .await??
        } else {
            blocking(move || m.send(kind, b2)).await??
        };
        let sent = match delivery {
            Delivery::Landed(sent) => sent,
            Delivery::TurnEnded(command) => {
                if recorded_first {
                    let seq = i64::try_from(command.seq).unwrap_or(i64::MAX);
                    self.store
                        .record_ack(run_id, seq, AckStatus::Ended, Some(NOT_LANDED_ENDED))
                        .await?;
                }
                return Ok((
                    Outcome::Ended {
                        handed_back: command,
                    },
                    false,
                ));
            }
        };
        let seq = i64::try_from(sent.command.seq).unwrap_or(i64::MAX);
        // Two write transactions a command where it can be (under load each one queues behind
        // the watchers' commits): the command with its audit record, then its ack with its own
        // (and the approval answer it carried out with its record). A message was recorded
        // before it landed: its audit record follows on its own.
        if recorded_first {
            self.store
                .audit()
                .append(
                    person,
                    "command.sent",
                    &json!({"run": run_id, "seq": seq, "kind": kind.as_str()}),
                )
                .await?;
        } else {
            self.store
                .record_command_sent(run_id, seq, kind.as_str(), &b, person)
                .await?;
        }
        let answer = match then {
            Then::Return => return Ok((Outcome::Done, true)),
            Then::Ack { answer } => answer,
        };
        let outcome = crate::live::wait_ack(mailbox, &sent, ACK_TIMEOUT).await?;
        let (status, reason) = match &outcome {
            Outcome::Done => (AckStatus::Done, None),
            Outcome::Refused(r) => (AckStatus::Refused, Some(r.clone())),
            Outcome::Ended { .. } => (AckStatus::Ended, Some("the turn has ended".to_owned())),
        };
        let answer = answer.filter(|_| outcome == Outcome::Done);
        self.store
            .record_ack_audited(run_id, seq, status, reason.as_deref(), person, answer)
            .await?;
        Ok((outcome, true))
    }

    /// The session's current run, if its turn is still running.
    pub(crate) async fn live_run_of(&self, session_id: &str) -> Result<Option<Run>, ControlError> {
        let turns = self.store.turns(session_id).await?;
        let Some(last) = turns.last() else {
            return Ok(None);
        };
        match (&last.run_id, last.state) {
            (Some(run), TurnState::Running | TurnState::Queued) => {
                let run = self.store.run(run).await?;
                Ok(Some(run).filter(|r| r.state == hangar_store::RunState::Live))
            }
            _ => Ok(None),
        }
    }

    /// A message for a session: a steer into the running turn, or the next turn (S19).
    pub async fn send(
        self: &Arc<Self>,
        session_id: &str,
        text: &str,
        person: &str,
    ) -> Result<Reply, ControlError> {
        if let Some(run) = self.live_run_of(session_id).await? {
            match self
                .command(&run.id, Kind::Steer, body::text(text), person, None)
                .await?
            {
                Reply::Ended { .. } => {}
                other => return Ok(other),
            }
        }
        let started = self
            .start_turn(session_id, &[text.to_owned()], person)
            .await?;
        Ok(Reply::NextTurn {
            turn: started.turn.id,
            run: started.run.id,
        })
    }

    /// A steer into a run; if its turn has ended, it starts the next turn of the session.
    pub async fn steer(
        self: &Arc<Self>,
        run_id: &str,
        text: &str,
        person: &str,
    ) -> Result<Reply, ControlError> {
        match self
            .command(run_id, Kind::Steer, body::text(text), person, None)
            .await?
        {
            Reply::Ended { .. } => {
                let run = self.store.run(run_id).await?;
                let turn = self.store.turn(&run.turn_id).await?;
                let started = self
                    .start_turn(&turn.session_id, &[text.to_owned()], person)
                    .await?;
                Ok(Reply::NextTurn {
                    turn: started.turn.id,
                    run: started.run.id,
                })
            }
            other => Ok(other),
        }
    }

    pub async fn interrupt(
        self: &Arc<Self>,
        run_id: &str,
        person: &str,
    ) -> Result<Reply, ControlError> {
        self.command(run_id, Kind::Interrupt, body::empty(), person, None)
            .await
    }

    /// Answers a pending permission request, recording who answered.
    pub async fn answer(
        self: &Arc<Self>,
        run_id: &str,
        request_id: &str,
        allow: bool,
        reason: Option<&str>,
        input: Option<Value>,
        person: &str,
    ) -> Result<Reply, ControlError> {
        let (kind, b) = if allow {
            (Kind::Approve, body::approve(request_id, input))
        } else {
            (Kind::Deny, body::deny(request_id, reason))
        };
        // Recorded (with its audit record) in the ack's transaction when the driver carried it
        // out; an answer to a request already answered or unknown changes no approval.
        let answer = AnswerRecord {
            request_id,
            decision: if allow {
                Decision::Allow
            } else {
                Decision::Deny
            },
            note: reason,
        };
        self.command(run_id, kind, b, person, Some(answer)).await
    }

    async fn command(
        &self,
        run_id: &str,
        kind: Kind,
        b: Value,
        person: &str,
        answer: Option<AnswerRecord<'_>>,
    ) -> Result<Reply, ControlError> {
        if self.one_shots.lock().is_ok_and(|o| o.contains(run_id)) {
            return Ok(Reply::Refused {
                run: run_id.to_owned(),
                reason: format!(
                    "run {run_id} is a one-shot turn: its harness runs once in its plain mode and nothing reads commands; wait for it to end, then send the next message"
                ),
            });
        }
        // A mailbox in memory is a live run's (a turn that ended meanwhile refuses the command).
        let mailbox = match self.mailboxes.get(run_id) {
            Some(m) => m,
            None => {
                let run = self.store.run(run_id).await?;
                if run.state != hangar_store::RunState::Live || !run.has_key {
                    return Ok(Reply::Ended {
                        run: run_id.to_owned(),
                    });
                }
                self.mailbox(run_id).await?
            }
        };
        Ok(
            match self
                .deliver(&mailbox, run_id, kind, b, person, Then::Ack { answer })
                .await?
            {
                (Outcome::Ended { .. }, true) => Reply::HandedBack {
                    run: run_id.to_owned(),
                },
                (outcome, _) => match outcome {
                    Outcome::Done => Reply::Done {
                        run: run_id.to_owned(),
                        seq: 0,
                    },
                    Outcome::Refused(reason) => Reply::Refused {
                        run: run_id.to_owned(),
                        reason,
                    },
                    Outcome::Ended { .. } => Reply::Ended {
                        run: run_id.to_owned(),
                    },
                },
            },
        )
    }
}

/// What [`ControlPlane::deliver`] does once the command landed.
pub(crate) enum Then<'a> {
    /// Returns (the prompts of a turn that is starting: no driver reads them yet).
    Return,
    /// Waits for the driver's ack and records it, with `answer` if the command carried one.
    Ack { answer: Option<AnswerRecord<'a>> },
}

/// Runs blocking file work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ControlError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ControlError::Internal(format!("a blocking task failed: {e}")))
}
