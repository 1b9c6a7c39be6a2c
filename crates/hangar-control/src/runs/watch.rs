//! The run watcher (S21): reads a live run's log from its saved cursor, commits each slice's
//! events, the new cursor and the parser state in one transaction, and acts on what happened
//! (approvals asked, the harness's session id, the turn's end). A restarted control plane resumes
//! from the stored cursor and state, so every line becomes events exactly once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hangar_events::watcher::DEFAULT_MAX_BYTES;
use hangar_events::{Batch, EventKind, Hook, LogReader, Manifest, ParseContext, ProgressEvent};
use hangar_store::{
    AckStatus, Decision, EncodedEvent, Run, SentBy, SliceEffect, Store, StoreError, TurnState,
    TurnUpdate, Usage,
};
use serde_json::json;

use crate::runs::Runs;

/// Usage summed over a turn's events.
#[derive(Debug, Default)]
struct Totals {
    usage: Usage,
    cost: Option<f64>,
    /// The watcher started past the log's start (a re-attach): the events before are not in
    /// these sums, so the turn's end sums the run's stored `usage` events instead.
    partial: bool,
    /// The last denied call, in words, until a call after it runs: the turn's `blocked`.
    blocked: Option<String>,
    /// Tool names by `tool_use_id` and by approval request id, to name a denied call.
    tools: std::collections::HashMap<String, String>,
    /// The last interrupt's report in words: the turn's `interrupted`.
    interrupted: Option<String>,
    /// Each command's kind by its number, so the report names messages as `steer #2`.
    kinds: std::collections::HashMap<u64, String>,
}

impl Totals {
    /// The sums over every `usage` event stored for the run (after a re-attach).
    async fn stored(store: &Store, run: &str) -> Result<Totals, StoreError> {
        let mut t = Totals::default();
        let mut after = 0;
        loop {
            let page = store
                .events_after(hangar_store::EventScope::Run(run), after, 1000)
                .await?;
            let Some(last) = page.last() else {
                return Ok(t);
            };
            after = last.id;
            for e in page.iter().filter(|e| e.kind == "usage") {
                if let Ok(ProgressEvent {
                    kind:
                        EventKind::Usage {
                            input_tokens,
                            output_tokens,
                            cached_input_tokens,
                            cost_usd,
                        },
                    ..
                }) = serde_json::from_value(e.payload.clone())
                {
                    t.add(
                        Usage::from_tokens(input_tokens, output_tokens, cached_input_tokens),
                        cost_usd,
                    );
                }
            }
        }
    }

    /// Follows denials: a denied call (by the rules, a person, the policy or Tower's hook) is
    /// the turn's `blocked` until a call after it runs without an error. And interrupts: the
    /// last one's report is the turn's `interrupted`.
    fn follow_denials(&mut self, kind: &EventKind) {
        let name =
            |t: &Totals, id: &str| t.tools.get(id).cloned().unwrap_or_else(|| "a call".into());
        match kind {
            EventKind::ToolCall {
                tool_use_id, name, ..
            } => {
                self.tools.insert(tool_use_id.clone(), name.clone());
            }
            EventKind::ApprovalRequested {
                request_id,
                tool_name,
                ..
            } => {
                self.tools.insert(request_id.clone(), tool_name.clone());
            }
            EventKind::CommandAcked { seq, command, .. } => {
                self.kinds.insert(*seq, command.clone());
            }
            EventKind::Interrupted {
                seq,
                person,
                answering,
                queued,
                approvals,
            } => {
                self.interrupted = Some(hangar_events::interrupt::describe(
                    *seq,
                    person.as_deref(),
                    answering,
                    queued,
                    approvals.len(),
                    |n| self.kinds.get(&n).cloned(),
                ));
            }
            EventKind::RulesDenied {
                tool_name,
                rule,
                reason,
                ..
            } => self.blocked = Some(format!("the rules ({rule}) denied {tool_name}: {reason}")),
            EventKind::ApprovalAnswered {
                request_id,
                decision,
                by,
                person,
                note,
                ..
            } if decision == "deny" => {
                let who = person.clone().unwrap_or_else(|| by.clone());
                let tool = name(self, request_id);
                self.blocked = Some(match note {
                    Some(n) if !n.is_empty() => format!("{who} denied {tool}: {n}"),
                    _ => format!("{who} denied {tool}"),
                });
            }
            EventKind::ToolResult {
                tool_use_id,
                output,
                is_error,
            } => {
                if !is_error {
                    self.blocked = None;
                } else if let Some(why) = output.trim().strip_prefix("Tower denied this call:") {
                    let tool = name(self, tool_use_id);
                    self.blocked = Some(format!("Tower denied {tool}:{why}"));
                }
            }
            _ => {}
        }
    }

    /// One `usage` event: the counts saturate at `i64::MAX` (what the harness wrote is not
    /// trusted to stay small).
    fn add(&mut self, usage: Usage, cost_usd: Option<f64>) {
        self.usage = self.usage.saturating_add(usage);
        if let Some(c) = cost_usd {
            self.cost = Some(self.cost.unwrap_or(0.0) + c);
        }
    }
}

/// Watches a run until its turn ends (or another replica holds it): reads its log from the
/// saved cursor, commits events, cursor and parser state together, and notices a driver that
/// stopped without ending the turn.
pub(crate) async fn run_watcher(plane: Arc<Runs>, run: Run) {
    let Some(mut w) = Watcher::open(plane, run).await else {
        return;
    };
    loop {
        if !w.hold.keep(&w.plane, &w.run.id).await {
            return;
        }
        if !w.sync_checked {
            w.sync_checked = true;
            w.sync = crate::runs::remote::start(&w.plane, &w.run).await;
        }
        let grown = w.ahead.is_some() || has_news(&w.log, w.cursor, w.stuck);
        let next = if grown {
            w.take_slice().await
        } else {
            w.idle().await
        };
        match next {
            Next::Stop => return,
            Next::Now => continue,
            Next::Wait => w.wait().await,
        }
    }
}

/// What a watcher does after a step.
enum Next {
    /// Reads again at once.
    Now,
    /// Waits one poll first.
    Wait,
    /// The watch is over.
    Stop,
}

/// One run's watch: where its log is read up to, and what the reading knows.
struct Watcher {
    plane: Arc<Runs>,
    run: Run,
    log: PathBuf,
    cursor: u64,
    ctx: ParseContext,
    /// Among replicas: renewed while this one watches the run; lost, it stops.
    hold: crate::runs::lease::Hold,
    reader: hangar_events::LogReader,
    totals: Totals,
    /// Idle polls cost little: the log is only read when it has grown past the cursor, the
    /// driver's pid is kept once known, and /proc is looked at about once a second.
    pid: Option<i64>,
    /// A run in a sandbox has no pid of ours: its tmux session is asked instead.
    sandboxed: bool,
    last_alive_check: std::time::Instant,
    /// A read of the slice at `cursor` already under way.
    ahead: Option<SliceRead>,
    /// The log's length when a read took nothing from it.
    stuck: Option<u64>,
    /// A run in a kubernetes or e2b sandbox: its control folder here is a mirror, kept by a
    /// sync task that lives as long as this watcher (`remote.rs`).
    sync: Option<crate::runs::remote::Sync>,
    sync_checked: bool,
    /// Wakes the watcher when its log changes (issue 22); none yet, or none to be had: polls.
    bell: Option<crate::runs::logbell::Bell>,
    /// Readable once the driver (a process of this machine) has exited.
    exit: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
    /// The driver's exit was seen: its end is looked at without waiting for the next check.
    pid_exited: bool,
    /// A pidfd was asked for once (it is not asked again on every wait, nor after it fired).
    exit_tried: bool,
    /// The run's session, looked up once a stream of a session is open: such streams are
    /// woken by this run's commits too.
    session: Option<String>,
}

impl Watcher {
    /// Starts where the run's saved cursor and parser state are; `None` if the lease is lost
    /// while the log's seal key is awaited.
    async fn open(plane: Arc<Runs>, run: Run) -> Option<Watcher> {
        let log = PathBuf::from(&run.ctl_path).join("run.log");
        let cursor = u64::try_from(run.log_cursor).unwrap_or(0);
        let mut ctx: ParseContext = run
            .watch_state
            .clone()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_else(|| ParseContext::at(cursor));
        let mut hold = crate::runs::lease::Hold::new(&plane);
        // How the log is read is decided once, when its reading starts, from where the run runs
        // (`logtrust.rs`), and kept with the parser's state. A run re-attached from before seals
        // were written is read as it was.
        if ctx.log.is_none() && cursor == 0 {
            ctx.log = Some(plane.log_mode(&run).await);
        }
        let reader = loop {
            let r = plane.steps.log_reader(&run).await;
            if r.has_seal_key() || !ctx.log.as_ref().is_some_and(|m| m.sealed) {
                break r;
            }
            tracing::warn!(run = %run.id, "the run's log is sealed and its key cannot be read; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            if !hold.keep(&plane, &run.id).await {
                return None;
            }
        };
        let pid = run.driver_pid;
        let sandboxed = pid.is_none() && plane.sandbox_run_alive(&run.id).await.is_some();
        Some(Watcher {
            log,
            cursor,
            ctx,
            hold,
            reader,
            totals: Totals {
                partial: cursor > 0,
                ..Totals::default()
            },
            pid,
            sandboxed,
            last_alive_check: std::time::Instant::now(),
            ahead: None,
            stuck: None,
            sync: None,
            sync_checked: false,
            bell: None,
            exit: None,
            pid_exited: false,
            exit_tried: false,
            session: None,
            plane,
            run,
        })
    }

    /// Waits until there may be something to do: the log changed, the driver exited, a check
    /// is due. With a watch on its log an idle watcher costs nothing between those (issue 22);
    /// without one (no inotify), it polls.
    async fn wait(&mut self) {
        if self.bell.is_none() {
            self.bell = self.plane.log_bells.watch(&self.log);
        }
        if !self.exit_tried
            && let Some(pid) = self.pid
        {
            self.exit_tried = true;
            self.exit = exit_of(pid);
        }
        let Some(bell) = &self.bell else {
            tokio::time::sleep(self.plane.poll).await;
            return;
        };
        // A remote run's mirror says how the pod is in memory: cheap to ask each second. A
        // sandbox's driver is asked through its tmux, and a local one is awaited by its exit:
        // a slow check is the safety net for a driver that died without a word.
        let check = if self.sync.is_some() {
            Duration::from_secs(1)
        } else if self.exit.is_some() {
            IDLE_CHECK_AWAITING_EXIT
        } else {
            IDLE_CHECK
        };
        let check = self.hold.due_in().map_or(check, |d| d.min(check));
        let exited = async {
            match &self.exit {
                Some(fd) => {
                    let _ = fd.readable().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = bell.notify.notified() => {}
            () = exited => {
                // Looked at at once (and not awaited again: it stays readable).
                self.exit = None;
                self.pid_exited = true;
            }
            () = tokio::time::sleep(check) => {}
        }
    }

    /// Nothing new in the log: about once a second, whether the driver still runs; if it
    /// stopped without ending the turn, the turn is ended for it.
    async fn idle(&mut self) -> Next {
        if self.last_alive_check.elapsed() < Duration::from_secs(1) && !self.pid_exited {
            return Next::Wait;
        }
        self.last_alive_check = std::time::Instant::now();
        let plane = &self.plane;
        if self.pid.is_none() && !self.sandboxed {
            self.pid = plane
                .store
                .run(&self.run.id)
                .await
                .ok()
                .and_then(|r| r.driver_pid);
        }
        let mut gone = None;
        let alive = if let Some(s) = &self.sync {
            match s.status() {
                crate::runs::remote::Status::Running => true,
                crate::runs::remote::Status::Stopped => false,
                crate::runs::remote::Status::Gone(why) => {
                    gone = Some(why);
                    false
                }
            }
        } else if self.sandboxed {
            plane.sandbox_run_alive(&self.run.id).await.unwrap_or(true)
        } else {
            driver_alive(self.pid)
        };
        // Looked at again after the check: the driver may have written its last lines.
        if alive || has_news(&self.log, self.cursor, self.stuck) {
            return Next::Wait;
        }
        // The driver did end the turn, and this process stopped (killed) after committing its
        // end and before acting on it: the stored end is acted on now, not taken for a crash.
        if let Ok(Some(e)) = plane.store.last_run_event(&self.run.id, "turn_end").await
            && let Ok(end) = serde_json::from_value::<ProgressEvent>(e.payload)
        {
            let totals = &mut self.totals;
            totals.partial = true;
            act(plane, &self.run, std::slice::from_ref(&end), totals).await;
            return Next::Stop;
        }
        // What the driver would have done at the end: `in/` closed, what waited there
        // answered, its messages handed to the next turn.
        let handed_back = crate::runs::orphan::close(plane, &self.run.id).await;
        end_turn(
            plane,
            &self.run,
            -1,
            gone.as_deref()
                .unwrap_or("the driver stopped without ending the turn"),
            None,
            &handed_back,
            &self.totals,
        )
        .await;
        Next::Stop
    }

    /// Reads the log's next slice and commits its events, cursor and parser state together;
    /// acts on what they say (an approval asked, the turn's end).
    async fn take_slice(&mut self) -> Next {
        let read = match self.ahead.take() {
            Some(h) => h.await,
            None => read_slice_now(&self.log, self.cursor, self.ctx.clone(), &self.reader).await,
        };
        let Slice {
            batch,
            ctx: new_ctx,
            encoded: events,
            state,
            len_before,
        } = match read {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                tracing::warn!(run = %self.run.id, error = %e, "cannot read the run log");
                tokio::time::sleep(Duration::from_secs(1)).await;
                return Next::Now;
            }
            Err(_) => return Next::Stop,
        };
        if batch.new_cursor == self.cursor {
            // Nothing complete to take: a partial last line, or bytes no seal covers (yet, or
            // ever: the agent's). Until the log grows again, it is as if it had not grown, so
            // the driver's end is still noticed. The length is the one the read started from:
            // one taken after it could include the very bytes the read missed (a seal written
            // just after), and the watcher would wait for growth that never comes (scripts/load
            // hung on a run waiting for its approval, its request unread).
            self.stuck = len_before;
            return Next::Wait;
        }
        self.stuck = None;
        let plane = Arc::clone(&self.plane);
        // The next slice is read and parsed while this one commits (two cores at work); it is
        // used only if this commit lands.
        let meta = std::fs::metadata(&self.log).ok();
        let more = meta.as_ref().is_some_and(|m| m.len() > batch.new_cursor);
        let written = meta.and_then(|m| m.modified().ok());
        let next =
            more.then(|| read_slice(&self.log, batch.new_cursor, new_ctx.clone(), &self.reader));
        let effects = effects_of(&batch.events);
        if effects
            .iter()
            .any(|e| matches!(e, SliceEffect::ApprovalRequested { .. }))
            && let Err(e) = plane.mailbox(&self.run.id).await
        {
            // Answers still go through; they read the key from the store first.
            tracing::warn!(run = %self.run.id, error = %e, "cannot open the run's mailbox");
        }
        let commit = plane
            .store
            .commit_slice(
                &self.run.id,
                self.cursor as i64,
                batch.new_cursor as i64,
                &events,
                state.as_ref(),
                &effects,
            )
            .await;
        match commit {
            Ok(ids) => {
                if let Some(lag) = written.and_then(|w| w.elapsed().ok()) {
                    crate::metrics::ingest_lag(lag);
                }
                self.cursor = batch.new_cursor;
                self.ctx = new_ctx;
                self.ahead = next;
                if let Some(newest) = ids.last() {
                    if self.session.is_none() && plane.wakes.has_session_streams() {
                        self.session = plane
                            .store
                            .turn(&self.run.turn_id)
                            .await
                            .ok()
                            .map(|t| t.session_id);
                    }
                    plane.events_stored(&self.run.id, self.session.as_deref(), *newest);
                }
                if act(&plane, &self.run, &batch.events, &mut self.totals).await {
                    return Next::Stop;
                }
                Next::Now
            }
            Err(StoreError::CursorMoved { .. }) => {
                // Another watcher (a replica) got there first: resume from what it stored.
                match plane.store.run(&self.run.id).await {
                    Ok(r) if r.state == hangar_store::RunState::Live => {
                        self.cursor = u64::try_from(r.log_cursor).unwrap_or(self.cursor);
                        self.ctx = r
                            .watch_state
                            .and_then(|v| serde_json::from_value(v).ok())
                            .unwrap_or_else(|| ParseContext::at(self.cursor));
                        Next::Wait
                    }
                    _ => Next::Stop,
                }
            }
            Err(e) => {
                tracing::warn!(run = %self.run.id, error = %e, "cannot store the run's events; retrying");
                Next::Wait
            }
        }
    }
}

/// A slice of the log read, parsed and encoded for the store.
struct Slice {
    /// Its events and the cursor after it.
    batch: Batch,
    /// The parser's context after it.
    ctx: ParseContext,
    /// Its events as the store takes them.
    encoded: Vec<EncodedEvent>,
    /// `ctx` as JSON, stored with the cursor.
    state: Option<serde_json::Value>,
    /// The log's length before it was read: all the read could have seen.
    len_before: Option<u64>,
}

/// A slice being read on a blocking thread.
type SliceRead = tokio::task::JoinHandle<Result<Slice, hangar_events::CoreError>>;

/// Reads, parses and encodes the log from `cursor` with `ctx` on a blocking thread (all of the
/// CPU work of a slice but its commit, so it overlaps the previous slice's commit).
fn read_slice(log: &Path, cursor: u64, ctx: ParseContext, reader: &LogReader) -> SliceRead {
    let (path, reader) = (log.to_owned(), reader.clone());
    tokio::task::spawn_blocking(move || slice_of(&path, cursor, ctx, DEFAULT_MAX_BYTES, &reader))
}

/// Whether the log holds bytes past `cursor` that were not there when a read last took nothing.
fn has_news(log: &Path, cursor: u64, stuck: Option<u64>) -> bool {
    std::fs::metadata(log)
        .map(|m| m.len() > cursor && Some(m.len()) != stuck)
        .unwrap_or(false)
}

/// At most this much of a log left to read is read on the watcher's own task: a few hundred
/// microseconds of work, less than handing it to a blocking thread costs. (A control plane that
/// re-attaches to 1,000 runs had 1,000 blocking threads started at once for their short tails.)
const READ_INLINE_BYTES: u64 = 64 << 10;

/// The slice at `cursor`: read here when little is left, else on a blocking thread.
async fn read_slice_now(
    log: &Path,
    cursor: u64,
    ctx: ParseContext,
    reader: &LogReader,
) -> Result<Result<Slice, hangar_events::CoreError>, tokio::task::JoinError> {
    let left = std::fs::metadata(log)
        .map(|m| m.len().saturating_sub(cursor))
        .unwrap_or(u64::MAX);
    if left <= READ_INLINE_BYTES {
        // Capped: the log may have grown since.
        return Ok(slice_of(log, cursor, ctx, READ_INLINE_BYTES, reader));
    }
    read_slice(log, cursor, ctx, reader).await
}

/// At least `max_bytes` of complete lines from `cursor` (or all there are), parsed and encoded.
fn slice_of(
    path: &Path,
    cursor: u64,
    mut ctx: ParseContext,
    max_bytes: u64,
    reader: &LogReader,
) -> Result<Slice, hangar_events::CoreError> {
    let len_before = std::fs::metadata(path).ok().map(|m| m.len());
    let batch = reader.ingest(path, cursor, max_bytes, &mut ctx)?;
    let encoded = batch.events.iter().map(stored_event).collect();
    let state = serde_json::to_value(&ctx).ok();
    Ok(Slice {
        batch,
        ctx,
        encoded,
        state,
        len_before,
    })
}

/// An event as the run watchers store it: its kind, and its whole JSON (offset included),
/// serialized once.
pub fn stored_event(e: &ProgressEvent) -> EncodedEvent {
    let json = serde_json::to_string(e).unwrap_or_else(|_| "{}".to_owned());
    EncodedEvent::new(e.kind.name(), json)
}

/// Whether the driver's process is there (not gone, not a zombie); `true` while its pid is unknown.
/// How long an idle watcher with a watch on its log sleeps at most (see [`Watcher::wait`]).
const IDLE_CHECK: Duration = Duration::from_secs(5);
/// The same when the driver's exit wakes the watcher (a pidfd): the check is only a safety net.
const IDLE_CHECK_AWAITING_EXIT: Duration = Duration::from_secs(30);

/// A descriptor that becomes readable when process `pid` exits (a pidfd), where the kernel
/// gives one.
fn exit_of(pid: i64) -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
    // Without a reactor (a runtime built without I/O), there is no waiting on it: the slow
    // check stands in.
    tokio::runtime::Handle::try_current().ok()?;
    // SAFETY: an OwnedFd is a valid open descriptor that stays the same and open for as long as
    // the AsyncFd owns it.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE).ok()
    }
}

fn driver_alive(pid: Option<i64>) -> bool {
    match pid.and_then(|p| i32::try_from(p).ok()) {
        // /proc/<pid> exists while the process (or its zombie) does.
        Some(p) => std::path::Path::new(&format!("/proc/{p}")).exists() && !is_zombie(p),
        None => true,
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The turn's manifest gets the harness's argv and hooks as the driver reported them (the
/// control plane only knew the driver's argv), sealed again.
async fn record_harness_argv(
    store: &Store,
    turn_id: &str,
    argv: &[String],
    hooks: &[Hook],
) -> Result<(), StoreError> {
    let turn = store.turn(turn_id).await?;
    let Some(mut m) = turn
        .manifest
        .and_then(|v| serde_json::from_value::<Manifest>(v).ok())
    else {
        return Ok(());
    };
    m.argv = argv.to_vec();
    m.hooks = hooks.to_vec();
    match serde_json::to_value(m.sealed()) {
        Ok(v) => store.set_turn_manifest(turn_id, &v).await,
        Err(_) => Ok(()),
    }
}

/// The sender of a command as its log line names it.
fn sent_by<'a>(kind: &'a str, person: Option<&'a str>) -> Option<SentBy<'a>> {
    person.map(|person| SentBy { kind, person })
}

/// What a slice changes in the store besides its events, committed with them: permission
/// requests, answers (a person's too: the sender records none), the driver's answers to
/// commands, and the harness's session id.
fn effects_of(events: &[ProgressEvent]) -> Vec<SliceEffect<'_>> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Session { harness_session_id } => {
                Some(SliceEffect::HarnessSession(harness_session_id))
            }
            EventKind::ApprovalRequested {
                request_id,
                tool_name,
                input,
                ..
            } => Some(SliceEffect::ApprovalRequested {
                request_id,
                tool_name,
                input,
            }),
            // A person's answer is recorded here only, from the driver's line (which names the
            // person, from the command's sealed `by`): the sender returns at the ack.
            EventKind::ApprovalAnswered {
                request_id,
                decision,
                by,
                seq: Some(seq),
                person,
                note,
                updated_input,
            } if by == "command" => Some(SliceEffect::ApprovalAnsweredByCommand {
                request_id,
                decision: if decision == "allow" {
                    Decision::Allow
                } else {
                    Decision::Deny
                },
                seq: i64::try_from(*seq).unwrap_or(i64::MAX),
                person: person.as_deref(),
                note: note.as_deref(),
                updated_input: updated_input.as_ref(),
            }),
            // The driver's answers to commands: the log is their one source.
            EventKind::CommandAcked {
                seq,
                command,
                outcome,
                person,
                ..
            } => Some(SliceEffect::CommandAnswered {
                seq: i64::try_from(*seq).unwrap_or(i64::MAX),
                status: if outcome == "ended" {
                    AckStatus::Ended
                } else {
                    AckStatus::Done
                },
                reason: (outcome == "ended").then_some("the turn has ended"),
                sent: sent_by(command, person.as_deref()),
            }),
            EventKind::CommandRefused {
                seq: Some(seq),
                command,
                reason,
                person,
                ..
            } => Some(SliceEffect::CommandAnswered {
                seq: i64::try_from(*seq).unwrap_or(i64::MAX),
                status: AckStatus::Refused,
                reason: Some(reason),
                sent: command
                    .as_deref()
                    .and_then(|c| sent_by(c, person.as_deref())),
            }),
            EventKind::ApprovalAnswered {
                request_id,
                decision,
                by,
                ..
            } if by != "command" => Some(SliceEffect::ApprovalSettled {
                request_id,
                decision: if decision == "allow" {
                    Decision::Allow
                } else {
                    Decision::Deny
                },
                by,
                note: Some(decision),
            }),
            _ => None,
        })
        .collect()
}

/// Acts on a committed slice (its store effects are committed with it: [`effects_of`]);
/// `true` when the turn is over.
async fn act(plane: &Arc<Runs>, run: &Run, events: &[ProgressEvent], totals: &mut Totals) -> bool {
    let store = &plane.store;
    for e in events {
        totals.follow_denials(&e.kind);
        match &e.kind {
            EventKind::Started { argv, hooks, .. } if !argv.is_empty() => {
                if let Err(err) = record_harness_argv(store, &run.turn_id, argv, hooks).await {
                    tracing::warn!(run = %run.id, error = %err, "cannot record the harness's argv");
                }
            }
            EventKind::Usage {
                input_tokens,
                output_tokens,
                cached_input_tokens,
                cost_usd,
            } => totals.add(
                Usage::from_tokens(*input_tokens, *output_tokens, *cached_input_tokens),
                *cost_usd,
            ),
            EventKind::TurnEnd {
                status,
                verify,
                handed_back,
                reason,
                ..
            } => {
                // In a remote sandbox, messages that came after the pod's in/ closed were
                // answered on this side (`remote.rs`): they go to the next turn too.
                let mut handed_back = handed_back.clone();
                for seq in crate::runs::remote::late_handed_back(Path::new(&run.ctl_path)) {
                    if !handed_back.contains(&seq) {
                        handed_back.push(seq);
                    }
                }
                end_turn(
                    plane,
                    run,
                    *status,
                    reason,
                    verify.clone(),
                    &handed_back,
                    totals,
                )
                .await;
                return true;
            }
            _ => {}
        }
    }
    false
}

/// The turn is over: record its end, destroy the run key, and start the next turn with any
/// messages the driver handed back (S19).
async fn end_turn(
    plane: &Arc<Runs>,
    run: &Run,
    status: i32,
    reason: &str,
    verify: Option<String>,
    handed_back: &[u64],
    totals: &Totals,
) {
    // The run's key files for Tower go first (T15): no renewal writes one back after this, and
    // nobody sees the turn ended with one there.
    plane.governance.key_files_gone(run).await;
    // The log's seal key is kept with it, so it can still be checked once the run key is gone.
    if let Err(e) = plane.steps.keep_seal_key(&run.id).await {
        tracing::warn!(run = %run.id, error = %e, "cannot keep the run's seal key");
    }
    // The turn's objects and its log go into the control plane's store before anyone sees the
    // turn ended, so its steps outlive the control folder.
    let (home, id, ctl) = (
        plane.tools.home.clone(),
        run.id.clone(),
        PathBuf::from(&run.ctl_path),
    );
    match tokio::task::spawn_blocking(move || crate::steps::trees::keep_run(&home, &id, &ctl)).await
    {
        Ok(Ok(())) => plane.steps.store_kept(&run.id).await,
        Ok(Err(e)) => {
            tracing::warn!(run = %run.id, error = %e, "cannot keep the run's pack and log")
        }
        Err(e) => tracing::warn!(run = %run.id, error = %e, "cannot keep the run's pack and log"),
    }
    plane.sandbox_run_ended(&run.id).await;
    crate::runs::orphan::settle_commands(plane, &run.id, handed_back).await;
    let store = &plane.store;
    plane.mailboxes.remove(&run.id);
    let stored = if totals.partial {
        Totals::stored(store, &run.id)
            .await
            .inspect_err(|e| tracing::warn!(run = %run.id, error = %e, "cannot sum the run's usage; the turn's totals count only what came after the re-attach"))
            .ok()
    } else {
        None
    };
    // The denials seen (a re-attach sees only those after it).
    let blocked = totals.blocked.clone();
    let interrupted = totals.interrupted.clone();
    let totals = stored.as_ref().unwrap_or(totals);
    let mut u = TurnUpdate::to(TurnState::Ended);
    u.status = Some(i64::from(status));
    u.reason = Some(reason.to_owned());
    u.verify_state = verify;
    u.usage = Some(totals.usage);
    u.cost_usd = totals.cost;
    u.blocked = blocked;
    u.interrupted = interrupted;
    if let Err(e) = store.update_turn_state(&run.turn_id, &u).await {
        tracing::warn!(run = %run.id, error = %e, "cannot record the turn's end");
    }
    let _ = store.end_run(&run.id).await;
    if matches!(store.destroy_run_key(&run.id).await, Ok(true)) {
        let _ = store
            .audit()
            .append("hangar", "run.key_destroyed", &json!({"run": run.id}))
            .await;
    }
    // The turn's trace, off the watcher's path (an endpoint that is slow to answer never holds
    // up the next turn).
    let (me, id) = (Arc::clone(plane), run.id.clone());
    tokio::spawn(async move { me.steps.export_turn_trace(&id).await });
    if handed_back.is_empty() {
        return;
    }
    let mut texts = Vec::new();
    let mut person = "hangar".to_owned();
    for seq in handed_back {
        if let Ok(c) = store
            .command(&run.id, i64::try_from(*seq).unwrap_or(i64::MAX))
            .await
            && let Some(t) = c.body.get("text").and_then(|t| t.as_str())
        {
            texts.push(t.to_owned());
            person = c.sent_by.clone();
        }
    }
    if texts.is_empty() {
        return;
    }
    let session = match store.turn(&run.turn_id).await {
        Ok(t) => t.session_id,
        Err(_) => return,
    };
    if crate::runs::handback::exhausted(store, &run.turn_id, &texts)
        .await
        .unwrap_or(false)
    {
        crate::runs::handback::stop(store, &session, &run.id, &person, &texts).await;
        return;
    }
    let _ = store
        .audit()
        .append(
            &person,
            "turn.handed_back",
            &json!({"run": run.id, "messages": texts.len()}),
        )
        .await;
    if let Err(e) = plane.start_turn(&session, &texts, &person).await {
        tracing::warn!(run = %run.id, error = %e, "cannot start the next turn with the handed-back messages");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that took nothing (the last line not complete yet) remembers the length it read
    /// from, not one taken after: the rest of the line, written just after the read, is news,
    /// and the watcher reads again instead of waiting for growth that never comes.
    #[test]
    fn a_line_completed_just_after_a_read_that_took_nothing_is_news() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        std::fs::write(
            &log,
            br#"{"type":"system","subtype":"init","session_id":"s"#,
        )
        .unwrap();
        let slice = slice_of(
            &log,
            0,
            ParseContext::at(0),
            READ_INLINE_BYTES,
            &LogReader::new(),
        )
        .unwrap();
        assert_eq!(slice.batch.new_cursor, 0, "nothing complete to take");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(b"\"}\n")
            .unwrap();
        assert!(has_news(&log, 0, slice.len_before));
        // Stuck at the length after the line was completed, the watcher would wait forever.
        let after = std::fs::metadata(&log).ok().map(|m| m.len());
        assert!(!has_news(&log, 0, after));
    }

    /// Token totals stop at `i64::MAX` instead of wrapping (or panicking in a debug build),
    /// whether one count or the sum is too big.
    #[test]
    fn usage_totals_saturate() {
        let mut t = Totals::default();
        t.add(Usage::from_tokens(10, 20, 5), Some(0.5));
        t.add(Usage::from_tokens(1, 2, 3), None);
        assert_eq!(
            t.usage,
            Usage {
                input: 11,
                output: 22,
                cached: 8
            }
        );
        assert_eq!(t.cost, Some(0.5));
        t.add(Usage::from_tokens(u64::MAX, i64::MAX as u64, 0), None);
        assert_eq!(t.usage.input, i64::MAX, "a count past i64::MAX");
        assert_eq!(t.usage.output, i64::MAX, "22 + i64::MAX");
        assert_eq!(t.usage.cached, 8);
        t.add(Usage::from_tokens(1, 1, u64::MAX), Some(0.25));
        assert_eq!(
            t.usage,
            Usage {
                input: i64::MAX,
                output: i64::MAX,
                cached: i64::MAX
            }
        );
        assert_eq!(t.cost, Some(0.75));
    }
}
