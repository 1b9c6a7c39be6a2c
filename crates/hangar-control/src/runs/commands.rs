//! Commands into a live run (steer, interrupt, approve, deny) and messages for a session: sent
//! through the run's signed mailbox, recorded and audited with the person who sent them.

use std::sync::Arc;
use std::time::Duration;

use hangar_mailbox::outbox::{Delivery, Mailbox, Outcome};
use hangar_protocol::command::body;
use hangar_protocol::{Kind, RunKey};
use hangar_store::{AckStatus, Store};
use serde_json::{Value, json};

use super::Runs;
use crate::blocking::blocking;
use crate::error::ControlError;

/// Why a message recorded before it landed is answered without the driver: its turn had ended.
const NOT_LANDED_ENDED: &str = "not landed: the turn had ended";

/// How long a command waits for the driver's signed answer.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

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

impl Runs {
    /// The mailbox of a live run, with its key from the vault.
    /// A live run's mailbox: the one kept in memory, or opened with the key from the vault (and
    /// kept).
    pub(crate) async fn mailbox(&self, run_id: &str) -> Result<Mailbox, ControlError> {
        if let Some(m) = self.mailboxes.get(run_id) {
            return Ok(m);
        }
        let key = self.run_key(run_id).await?;
        let (home, rid) = (self.tools.home.clone(), run_id.to_owned());
        let m = match blocking(move || Mailbox::open_with_key(&home, &rid, key)).await? {
            Ok(m) => m,
            Err(hangar_mailbox::MailboxError::NoSuchRun { .. }) => {
                return Err(self.run_elsewhere(run_id).await);
            }
            Err(e) => return Err(e.into()),
        };
        self.mailboxes.insert(run_id, m.clone());
        Ok(m)
    }

    /// The run's key, from the vault.
    pub(crate) async fn run_key(&self, run_id: &str) -> Result<RunKey, ControlError> {
        let key = self.store.run_key(run_id).await?;
        let bytes: [u8; 32] = key.expose().try_into().map_err(|_| {
            ControlError::Internal(format!("run {run_id}: the vault's key is not 32 bytes"))
        })?;
        Ok(RunKey::from_bytes(bytes))
    }

    /// Why a live run has no mailbox here: another replica that shares no disk with this one
    /// watches it (a command must go through that one), or this one is taking it over and its
    /// mirror has not yet shown the driver's acks. A run that is not live has none anywhere.
    async fn run_elsewhere(&self, run_id: &str) -> ControlError {
        if let Ok(Some((holder, Some(url)))) =
            self.store.run_holder(run_id, hangar_store::now_ms()).await
            && holder != self.replica
        {
            return ControlError::Elsewhere {
                message: format!(
                    "run {run_id} is watched by replica {holder} ({url}), which shares no disk with this one, and it could not be reached: send the command again in a few seconds"
                ),
                url,
            };
        }
        match self.store.run(run_id).await {
            Ok(r) if r.state == hangar_store::RunState::Live => ControlError::Unavailable(format!(
                "run {run_id}'s control folder is not on this replica yet: the replica that watches it shares no disk with this one, or this one is taking the run over (its lease runs out {} s after its replica stops); send the command again in a few seconds",
                self.lease.map_or(0, |l| l.as_secs().max(1))
            )),
            Ok(_) => ControlError::WrongState(format!("run {run_id} has ended")),
            Err(e) => e.into(),
        }
    }

    /// Sends one command and records that it was sent (with its `command.sent` audit record);
    /// then, as `then` says, returns or waits for the driver's signed ack.
    ///
    /// A command sent for a reply names its sender, sealed in its body (`by`): the driver
    /// writes that into the run log's lines about the command, and the run's watcher records
    /// the ack and any approval answer from there, audited as that person. So the answer has
    /// one writer and one source, the log: the reply goes back at the ack, and a crash between
    /// the ack and the record loses nothing (the watcher reads the log again).
    pub(crate) async fn deliver(
        &self,
        mailbox: &Mailbox,
        run_id: &str,
        kind: Kind,
        b: Value,
        person: &str,
        then: Then,
    ) -> Result<(Outcome, bool), ControlError> {
        let b = match then {
            Then::Ack => body::by(b, person),
            Then::Return => b,
        };
        let (m, b2) = (mailbox.clone(), b.clone());
        // A message is recorded before it lands (scripts/chaos: a server killed between the
        // two left a steer the harness had and the store did not).
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
            crate::blocking::blocking_here(move || m.send(kind, b2)).await??
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
        let record = sent_record(
            self.store.clone(),
            run_id.to_owned(),
            seq,
            kind,
            b,
            person.to_owned(),
            recorded_first,
        );
        match then {
            // The prompts of a turn that is starting: recorded before the turn is said started.
            Then::Return => {
                record.await?;
                return Ok((Outcome::Done, true));
            }
            // Off the reply's path: under load each write queues behind the watchers' commits,
            // and the person waits for the driver, not for the database.
            Then::Ack => {
                let run = run_id.to_owned();
                tokio::spawn(async move {
                    if let Err(e) = record.await {
                        tracing::warn!(run = %run, seq, error = %e, "cannot record a command as sent");
                    }
                });
            }
        }
        let outcome = crate::runs::live::wait_ack(mailbox, &sent, ACK_TIMEOUT).await?;
        Ok((outcome, true))
    }

    /// A message for a session: a steer into the running turn, or the next turn (S19).
    pub async fn send(
        self: &Arc<Self>,
        session_id: &str,
        text: &str,
        person: &str,
    ) -> Result<Reply, ControlError> {
        if let Some(run) = self.store.live_run_of(session_id).await? {
            match self
                .command(&run.id, Kind::Steer, body::text(text), person)
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
            .command(run_id, Kind::Steer, body::text(text), person)
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
        self.command(run_id, Kind::Interrupt, body::empty(), person)
            .await
    }

    /// Answers a pending permission request. Returns at the driver's ack; the run's watcher
    /// records the answer, its note and who gave it from the run log ([`Runs::deliver`]).
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
        let reply = self.command(run_id, kind, b, person).await?;
        if matches!(reply, Reply::Done { .. }) {
            // How long the request waited, read off the reply's path.
            let (store, run, request) =
                (self.store.clone(), run_id.to_owned(), request_id.to_owned());
            tokio::spawn(async move {
                if let Ok(a) = store.approval(&run, &request).await {
                    let waited = hangar_store::now_ms().saturating_sub(a.requested_at);
                    crate::metrics::approval_wait(Duration::from_millis(
                        u64::try_from(waited).unwrap_or(0),
                    ));
                }
            });
        }
        Ok(reply)
    }

    async fn command(
        &self,
        run_id: &str,
        kind: Kind,
        b: Value,
        person: &str,
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
        let sending = std::time::Instant::now();
        let delivered = self
            .deliver(&mailbox, run_id, kind, b, person, Then::Ack)
            .await;
        let took = sending.elapsed();
        crate::metrics::command(
            kind.as_str(),
            match &delivered {
                Err(_) => "error",
                Ok((Outcome::Ended { .. }, true)) => "handed_back",
                Ok((Outcome::Done, _)) => "done",
                Ok((Outcome::Refused(_), _)) => "refused",
                Ok((Outcome::Ended { .. }, false)) => "ended",
            },
            matches!(delivered, Ok((Outcome::Done | Outcome::Refused(_), _))).then_some(took),
        );
        Ok(match delivered? {
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
        })
    }
}

/// What [`Runs::deliver`] does once the command landed.
pub(crate) enum Then {
    /// Returns (the prompts of a turn that is starting: no driver reads them yet).
    Return,
    /// Waits for the driver's ack (the watcher records it, from the run log).
    Ack,
}

/// Records that command `seq` was sent: a message's `command.sent` audit record (the message
/// itself was recorded before it landed), or any other command with its audit record.
async fn sent_record(
    store: Store,
    run: String,
    seq: i64,
    kind: Kind,
    b: Value,
    person: String,
    recorded_first: bool,
) -> Result<(), ControlError> {
    if recorded_first {
        store
            .audit()
            .append(
                &person,
                "command.sent",
                &json!({"run": run, "seq": seq, "kind": kind.as_str()}),
            )
            .await?;
    } else {
        store
            .record_command_sent(&run, seq, kind.as_str(), &b, &person)
            .await?;
    }
    Ok(())
}
