//! Terminals relayed by the control plane (`hangar sb attach` on an e2b sandbox): the control
//! plane starts envd's PTY process itself, holding envd's access token (root in the sandbox for
//! its life), and the person's client exchanges bytes with the control plane only, through an
//! attach id: its output as a stream of [`RelayEvent`]s, what is typed, resizes, and its end.
//!
//! An attach belongs to the API token that opened it; any other token is told it does not exist.
//! It ends, its PTY process killed (`SendSignal` SIGKILL) unless the process ended by itself, so
//! no root `tmux attach` stays in the sandbox, when its client ends it, drops its output stream,
//! sends nothing (no input, no keepalive) for [`ATTACH_IDLE`], when envd's stream breaks or says
//! nothing for [`hangar_cloud::e2b::terminal::IDLE`], or when the process ends. Both its start
//! (`sandbox.attach`) and its end (`sandbox.attach.ended`, with the reason) are audited.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hangar_cloud::e2b::terminal::{self, PtyEvent, PtyEvents, PtyOutput, PtySession};
use hangar_store::Store;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::error::ControlError;

/// How long an attach lives without a word from its client (input, a resize or a keepalive:
/// an empty input), unless `HANGAR_ATTACH_IDLE_SECS` says otherwise; clients are told to send a
/// keepalive every [`ATTACH_KEEPALIVE`] (or a third of a shorter limit).
pub const ATTACH_IDLE: Duration = Duration::from_secs(60);

/// How often a client of a relayed attach says it is still there.
pub const ATTACH_KEEPALIVE: Duration = Duration::from_secs(15);

/// How many relayed attaches one API token may have live at once.
pub const ATTACHES_PER_TOKEN: usize = 8;

/// What a relayed terminal's output stream carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEvent {
    /// Bytes the terminal shows.
    Data(Vec<u8>),
    /// The PTY process ended with this status (tmux's: 0 when the person detached).
    End(i32),
    /// The attach ended otherwise, and why.
    Ended(String),
}

/// The size and type of the terminal an attach starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermSpec {
    pub cols: u16,
    pub rows: u16,
    pub term: String,
}

impl Default for TermSpec {
    fn default() -> TermSpec {
        TermSpec {
            cols: 80,
            rows: 24,
            term: "xterm-256color".into(),
        }
    }
}

impl TermSpec {
    /// Checks what a client sent: a size of 1..=1000 each way, a terminal type of at most 64
    /// letters, digits and `.+-_`.
    pub fn check(&self) -> Result<(), ControlError> {
        if !(1..=1000).contains(&self.cols) || !(1..=1000).contains(&self.rows) {
            return Err(ControlError::Invalid(format!(
                "a terminal of {}x{} makes no sense: cols and rows are 1 to 1000",
                self.cols, self.rows
            )));
        }
        if self.term.is_empty()
            || self.term.len() > 64
            || !self
                .term
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-' | b'_'))
        {
            return Err(ControlError::Invalid(format!(
                "term {:?} is not a terminal type (letters, digits and .+-_, at most 64): try `TERM=xterm-256color hangar sb attach SANDBOX`",
                self.term
            )));
        }
        Ok(())
    }
}

/// One relayed attach.
struct Relay {
    id: String,
    /// The API token (its id) that opened it: the only one that may use it.
    owner: String,
    sandbox: String,
    pty: PtySession,
    /// Its output, read by its current reader (`reader`: the newest one's number).
    output: tokio::sync::Mutex<mpsc::Receiver<RelayEvent>>,
    reader: std::sync::atomic::AtomicU64,
    /// Told when a newer reader came: the older one stops reading.
    preempt: tokio::sync::Notify,
    /// When its client last said something.
    heard: Mutex<Instant>,
    /// Why it is to end, once it is.
    stop: watch::Sender<Option<String>>,
    /// Another replica took it over (this one lost its lease): its process is left alone.
    handed_over: std::sync::atomic::AtomicBool,
}

impl Relay {
    fn touch(&self) {
        *self.heard.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn quiet_for(&self) -> Duration {
        self.heard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    fn end(&self, why: &str) {
        self.stop.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(why.to_owned());
                true
            } else {
                false
            }
        });
    }
}

/// The relayed attaches of this control plane.
#[derive(Clone)]
pub(crate) struct Attaches {
    /// This process among replicas (the holder of its leases).
    pub(crate) replica: String,
    /// How long a replica's claim on an attach holds, renewed while it relays it; none (SQLite:
    /// one process) and attaches are not recorded.
    lease: Option<Duration>,
    /// One takeover at a time here: two requests for the same attach (its output and a
    /// keystroke) must not both join its process.
    adopting: Arc<tokio::sync::Mutex<()>>,
    live: Arc<Mutex<HashMap<String, Arc<Relay>>>>,
    /// Attaches being opened (their PTY process starting), per API token: they count towards
    /// [`ATTACHES_PER_TOKEN`]. Locked after `live` when both are.
    opening: Arc<Mutex<HashMap<String, usize>>>,
    /// Told whenever an attach has ended (its process killed, its end audited).
    ended: Arc<tokio::sync::Notify>,
    /// How long a client may say nothing.
    idle: Duration,
}

impl Attaches {
    /// With the idle limit of `HANGAR_ATTACH_IDLE_SECS`, else [`ATTACH_IDLE`].
    pub(crate) fn new(replica: String, lease: Option<Duration>) -> Attaches {
        let idle = hangar_protocol::env::var(hangar_protocol::env::HANGAR_ATTACH_IDLE_SECS)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map_or(ATTACH_IDLE, Duration::from_secs);
        Attaches {
            replica,
            lease,
            adopting: Arc::default(),
            live: Arc::default(),
            opening: Arc::default(),
            ended: Arc::default(),
            idle,
        }
    }
}

impl std::fmt::Debug for Attaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attaches")
            .field("live", &self.lock().len())
            .finish()
    }
}

/// A relayed attach's output, for one reader. Dropping it (its client went away) ends the
/// attach. Among replicas the client may ask for it again instead, through whichever replica
/// (the one that passed the stream on may be the one that went away, before this one noticed):
/// the newest reader takes the output over, a dropped one ends nothing, and the attach ends when
/// its client has said nothing for the idle limit.
pub struct RelayOutput {
    relay: Arc<Relay>,
    /// This reader's number: once a newer one came, this one reads nothing more.
    reader: u64,
    /// Among replicas: readers take over from each other, and a dropped one ends nothing.
    give_back: bool,
}

impl std::fmt::Debug for RelayOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayOutput")
            .field("attach", &self.relay.id)
            .finish()
    }
}

impl RelayOutput {
    /// The next event; `None` once the attach has ended and everything was read.
    pub async fn next(&mut self) -> Option<RelayEvent> {
        use std::sync::atomic::Ordering::SeqCst;
        let preempted = self.relay.preempt.notified();
        tokio::pin!(preempted);
        preempted.as_mut().enable();
        if self.relay.reader.load(SeqCst) != self.reader {
            return None;
        }
        // Cancelled by a newer reader while waiting, nothing is taken from the output.
        let read = async { self.relay.output.lock().await.recv().await };
        tokio::select! {
            ev = read => ev,
            () = preempted => None,
        }
    }
}

impl Drop for RelayOutput {
    fn drop(&mut self) {
        if self.give_back {
            return;
        }
        self.relay.end("its client dropped the output stream");
    }
}

fn unknown(id: &str) -> ControlError {
    ControlError::NotFound(format!(
        "no attach {id}: it has ended, or it was opened with another API token; start one with `hangar sb attach SANDBOX` (POST /v1/sandboxes/SANDBOX/attach)"
    ))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// A place for one more attach of an API token, held while its PTY process starts.
pub(crate) struct Slot {
    attaches: Attaches,
    owner: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut opening = self
            .attaches
            .opening
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = opening.get_mut(&self.owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                opening.remove(&self.owner);
            }
        }
    }
}

impl Attaches {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Relay>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, id: &str, owner: &str) -> Result<Arc<Relay>, ControlError> {
        self.lock()
            .get(id)
            // One that is ending (its process being killed) takes nothing more.
            .filter(|r| r.owner == owner && r.stop.borrow().is_none())
            .cloned()
            .ok_or_else(|| unknown(id))
    }

    /// A place for one more attach of API token `owner`, refused when it has
    /// [`ATTACHES_PER_TOKEN`] live (or being opened).
    pub(crate) fn reserve(&self, owner: &str) -> Result<Slot, ControlError> {
        let live = self.lock();
        let mut opening = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        let n = live.values().filter(|r| r.owner == owner).count()
            + opening.get(owner).copied().unwrap_or(0);
        if n >= ATTACHES_PER_TOKEN {
            return Err(ControlError::WrongState(format!(
                "this API token has {n} attaches open, the most it may have ({ATTACHES_PER_TOKEN}); end one first: detach a running `hangar sb attach` (Ctrl-b d), or DELETE /v1/attaches/ID"
            )));
        }
        *opening.entry(owner.to_owned()).or_default() += 1;
        Ok(Slot {
            attaches: self.clone(),
            owner: owner.to_owned(),
        })
    }

    /// Relays the PTY process `pty` (its output `out`) of sandbox `sandbox`'s run `run` as
    /// attach `id`, opened by `person` with the API token `slot` was reserved for
    /// (`sandbox.attach` audited).
    #[allow(clippy::too_many_arguments, reason = "each names a different thing")]
    pub(crate) async fn open(
        &self,
        store: Store,
        slot: Slot,
        (pty, out): (PtySession, PtyOutput),
        id: &str,
        sandbox: &str,
        run: &str,
        person: &str,
    ) -> Result<(), ControlError> {
        // Among replicas it is recorded first, so that another one can take it over.
        if let Some(lease) = self.lease {
            let now = hangar_store::now_ms();
            let recorded = store
                .record_attach(&hangar_store::AttachRecord {
                    id: id.to_owned(),
                    owner: slot.owner.clone(),
                    person: person.to_owned(),
                    sandbox: sandbox.to_owned(),
                    run: run.to_owned(),
                    pid: i64::try_from(pty.pid()).unwrap_or(i64::MAX),
                    replica: self.replica.clone(),
                    lease_until: now + ms(lease),
                    opened_at: now,
                    ended_at: None,
                })
                .await;
            if let Err(e) = recorded {
                let _ = pty.kill().await;
                return Err(e.into());
            }
        }
        self.relay(
            store,
            &slot.owner.clone(),
            (pty, out),
            id,
            sandbox,
            run,
            person,
        );
        drop(slot);
        Ok(())
    }

    /// Relays `pty` as attach `id` (recorded already, if it is to be).
    #[allow(clippy::too_many_arguments, reason = "each names a different thing")]
    fn relay(
        &self,
        store: Store,
        owner: &str,
        (pty, out): (PtySession, PtyOutput),
        id: &str,
        sandbox: &str,
        run: &str,
        person: &str,
    ) {
        let id = id.to_owned();
        let (tx, rx) = mpsc::channel(256);
        // Made here, not in the task: an end that comes before the task first runs (the
        // server stopping right after the open) is still seen.
        let (stop, stopped) = watch::channel(None);
        let relay = Arc::new(Relay {
            id: id.clone(),
            owner: owner.to_owned(),
            sandbox: sandbox.to_owned(),
            pty,
            output: tokio::sync::Mutex::new(rx),
            reader: std::sync::atomic::AtomicU64::new(0),
            preempt: tokio::sync::Notify::new(),
            heard: Mutex::new(Instant::now()),
            stop,
            handed_over: std::sync::atomic::AtomicBool::new(false),
        });
        self.lock().insert(id.clone(), relay.clone());
        let live = self.clone();
        let (run, person) = (run.to_owned(), person.to_owned());
        // Its own task, so a client that reads nothing (the pump waiting on a full output
        // channel) still meets the idle limit; among replicas it renews the lease too.
        let lease = self.lease.map(|l| (store.clone(), self.replica.clone(), l));
        let watchdog = tokio::spawn(watch_idle(relay.clone(), stopped.clone(), self.idle, lease));
        tokio::spawn(async move {
            let (why, status, killed) = pump(&relay, out, tx, stopped).await;
            watchdog.abort();
            if live.lease.is_some()
                && !relay.handed_over.load(std::sync::atomic::Ordering::SeqCst)
                && let Err(e) = store
                    .end_attach_record(&relay.id, &live.replica, hangar_store::now_ms())
                    .await
            {
                tracing::warn!(attach = %relay.id, error = %e, "cannot record the end of an attach");
            }
            let detail = json!({
                "sandbox": relay.sandbox, "run": run, "attach": relay.id,
                "reason": why, "status": status, "killed": killed,
            });
            if let Err(e) = store
                .audit()
                .append(&person, "sandbox.attach.ended", &detail)
                .await
            {
                tracing::warn!(attach = %relay.id, error = %e, "cannot audit the end of an attach");
            }
            live.lock().remove(&relay.id);
            live.ended.notify_waiters();
        });
    }

    /// The output of attach `id`: one reader at a time, a second refused; among replicas the
    /// newest reader takes it over.
    pub(crate) fn output(&self, id: &str, owner: &str) -> Result<RelayOutput, ControlError> {
        use std::sync::atomic::Ordering::SeqCst;
        let relay = self.get(id, owner)?;
        relay.touch();
        let give_back = self.lease.is_some();
        let reader = if give_back {
            relay.reader.fetch_add(1, SeqCst) + 1
        } else {
            relay
                .reader
                .compare_exchange(0, 1, SeqCst, SeqCst)
                .map_err(|_| {
                    ControlError::WrongState(format!(
                        "the output of attach {id} is already being read (or was, and its reader went away, which ended the attach); start another with `hangar sb attach SANDBOX`"
                    ))
                })?
                + 1
        };
        relay.preempt.notify_waiters();
        Ok(RelayOutput {
            relay,
            reader,
            give_back,
        })
    }

    /// Types `bytes` into attach `id` (none: a keepalive).
    pub(crate) async fn input(
        &self,
        id: &str,
        owner: &str,
        bytes: &[u8],
    ) -> Result<(), ControlError> {
        let relay = self.get(id, owner)?;
        relay.touch();
        if bytes.is_empty() {
            return Ok(());
        }
        relay.pty.input(bytes).await.map_err(ControlError::from)
    }

    /// Resizes attach `id`'s terminal.
    pub(crate) async fn resize(
        &self,
        id: &str,
        owner: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(), ControlError> {
        let relay = self.get(id, owner)?;
        relay.touch();
        TermSpec {
            cols,
            rows,
            term: "x".into(),
        }
        .check()?;
        relay
            .pty
            .resize(cols, rows)
            .await
            .map_err(ControlError::from)
    }

    /// Ends attach `id` (its PTY process killed), as its client asks.
    pub(crate) fn end(&self, id: &str, owner: &str) -> Result<(), ControlError> {
        let relay = self.get(id, owner)?;
        relay.end("its client ended it");
        Ok(())
    }

    /// Ends every attach, saying `why`, and waits (up to `limit`) until each one's process was
    /// killed and its end audited; how many were still ending then.
    pub(crate) async fn end_all(&self, why: &str, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let live: Vec<Arc<Relay>> = self.lock().values().cloned().collect();
            if live.is_empty() {
                return 0;
            }
            for r in &live {
                r.end(why);
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.lock().len();
            }
        }
    }
}

/// Ends `relay` once its client has said nothing for `idle`, whatever its pump is doing; among
/// replicas (`lease`: the store, this replica, the lease's length) renews its lease a few times
/// per lease, and lets it go (its process left alone) if another replica took it over.
async fn watch_idle(
    relay: Arc<Relay>,
    mut stop: watch::Receiver<Option<String>>,
    idle: Duration,
    lease: Option<(Store, String, Duration)>,
) {
    // A lease is renewed a few times over its length, however short it is set.
    let period = lease
        .as_ref()
        .map_or(Duration::from_secs(1), |(_, _, ttl)| {
            (*ttl / 3).min(Duration::from_secs(1))
        });
    let mut tick = tokio::time::interval(period);
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {
                if let Some((store, me, ttl)) = &lease
                    && renewed.elapsed() >= *ttl / 3
                {
                    let until = hangar_store::now_ms() + ms(*ttl);
                    match store.renew_attach(&relay.id, me, until).await {
                        Ok(true) => renewed = Instant::now(),
                        Ok(false) => {
                            relay.handed_over.store(true, std::sync::atomic::Ordering::SeqCst);
                            relay.end("another replica took it over");
                            return;
                        }
                        // Not renewed for a whole lease: another replica may take it over at
                        // any moment; this one lets it go (its process left to that one).
                        Err(e) if renewed.elapsed() >= *ttl => {
                            tracing::warn!(attach = %relay.id, error = %e, "the attach's lease could not be renewed: letting it go");
                            relay.handed_over.store(true, std::sync::atomic::Ordering::SeqCst);
                            relay.end("its lease could not be renewed");
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(attach = %relay.id, error = %e, "cannot renew the attach's lease");
                        }
                    }
                }
                let quiet = relay.quiet_for();
                if quiet > idle {
                    relay.end(&format!(
                        "its client said nothing (no input, no keepalive) for {} s",
                        quiet.as_secs()
                    ));
                    return;
                }
            }
        }
    }
}

/// Passes the PTY process's output to the attach's reader until the attach ends (`stop` says
/// why); then kills the process unless it ended by itself. Why it ended, the process's status,
/// whether it was killed.
async fn pump(
    relay: &Relay,
    mut out: PtyOutput,
    tx: mpsc::Sender<RelayEvent>,
    mut stop: watch::Receiver<Option<String>>,
) -> (String, Option<i32>, bool) {
    let mut status = None;
    let why = loop {
        // envd's silence is measured from what it last sent, however often this is called.
        let ev = tokio::select! {
            ev = out.next_within(Some(terminal::IDLE)) => ev,
            _ = stop.changed() => break stop.borrow().clone().unwrap_or_default(),
        };
        let (event, last) = match ev {
            Ok(Some(PtyEvent::Data(b))) => (RelayEvent::Data(b), None),
            Ok(Some(PtyEvent::End(s))) => {
                status = Some(s);
                (RelayEvent::End(s), None)
            }
            Ok(None) if status.is_some() => break "the process ended".to_owned(),
            Ok(None) => {
                let why = "envd's stream ended without the process's end".to_owned();
                (RelayEvent::Ended(why.clone()), Some(why))
            }
            Err(e) => {
                let why = e.to_string();
                (RelayEvent::Ended(why.clone()), Some(why))
            }
        };
        tokio::select! {
            sent = tx.send(event) => if sent.is_err() {
                break "its client dropped the output stream".to_owned();
            },
            _ = stop.changed() => break stop.borrow().clone().unwrap_or_default(),
        }
        if let Some(why) = last {
            break why;
        }
    };
    let mut killed = false;
    if status.is_none() && !relay.handed_over.load(std::sync::atomic::Ordering::SeqCst) {
        // Not the process's end: kill it, so no root `tmux attach` stays in the sandbox.
        killed = match tokio::time::timeout(Duration::from_secs(10), relay.pty.kill()).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(attach = %relay.id, error = %e, "cannot kill an attach's PTY process");
                false
            }
            Err(_) => {
                tracing::warn!(attach = %relay.id, "killing an attach's PTY process took over 10 s");
                false
            }
        };
        let _ = tx.try_send(RelayEvent::Ended(format!("the attach ended: {why}")));
    }
    (why, status, killed)
}

impl crate::sandboxes::Sandboxes {
    /// How often a client of a relayed attach must say it is there (input or a keepalive).
    pub fn attach_keepalive(&self) -> Duration {
        ATTACH_KEEPALIVE
            .min(self.attaches.idle / 3)
            .max(Duration::from_secs(1))
    }

    /// The output of relayed attach `id` for API token `owner` (one reader; dropping it ends
    /// the attach).
    pub async fn attach_output(&self, id: &str, owner: &str) -> Result<RelayOutput, ControlError> {
        self.attach_here(id, owner).await?;
        self.attaches.output(id, owner)
    }

    /// Types `bytes` into relayed attach `id` (empty: a keepalive).
    pub async fn attach_input(
        &self,
        id: &str,
        owner: &str,
        bytes: &[u8],
    ) -> Result<(), ControlError> {
        self.attach_here(id, owner).await?;
        self.attaches.input(id, owner, bytes).await
    }

    /// Resizes relayed attach `id`'s terminal.
    pub async fn attach_resize(
        &self,
        id: &str,
        owner: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(), ControlError> {
        self.attach_here(id, owner).await?;
        self.attaches.resize(id, owner, cols, rows).await
    }

    /// Ends the attaches no replica relays and no client came back for within the idle limit
    /// (their replica stopped): each is claimed first (one replica does it), its PTY process
    /// killed, so no root `tmux attach` stays in the sandbox, and its end recorded and audited.
    pub(crate) async fn sweep_attaches(&self) {
        let Some(lease) = self.attaches.lease else {
            return;
        };
        let me = self.attaches.replica.clone();
        let now = hangar_store::now_ms();
        let Ok(stale) = self
            .store
            .stale_attaches(now - ms(self.attaches.idle))
            .await
        else {
            return;
        };
        for id in stale {
            let claim_until = now + ms(lease) + ms(hangar_cloud::e2b::terminal::ENVD_WITHIN);
            if !self
                .store
                .take_attach_over(&id, &me, now, claim_until)
                .await
                .unwrap_or(false)
            {
                continue;
            }
            let Ok(Some(rec)) = self.store.attach_record(&id).await else {
                continue;
            };
            let killed = async {
                let sb = self.provider_sandbox(&rec.sandbox).await?;
                let target = self.providers.e2b().await?.pty_target(&sb, &rec.run)?;
                let pty = PtySession::for_pid(&target, u64::try_from(rec.pid).unwrap_or(0))?;
                pty.kill().await.map_err(ControlError::from)
            }
            .await;
            let _ = self
                .store
                .end_attach_record(&id, &me, hangar_store::now_ms())
                .await;
            let detail = json!({
                "sandbox": rec.sandbox, "run": rec.run, "attach": id,
                "reason": format!(
                    "the hangar serve replica that relayed it stopped, and its client did not come back for it within {} s",
                    self.attaches.idle.as_secs()
                ),
                "status": null, "killed": killed.is_ok(),
            });
            let _ = self
                .store
                .audit()
                .append(&rec.person, "sandbox.attach.ended", &detail)
                .await;
        }
    }

    /// Makes sure attach `id` of API token `owner` is relayed here (issue 24): one this
    /// replica relays already is; one another live replica relays is answered there
    /// ([`ControlError::Elsewhere`]: the server passes the request on); one whose replica
    /// stopped (its lease ran out) is taken over: this replica joins its PTY process through
    /// envd's `Connect` and relays it from now on. Anything else is no attach of `owner`'s.
    async fn attach_here(&self, id: &str, owner: &str) -> Result<(), ControlError> {
        if self.attaches.get(id, owner).is_ok() {
            return Ok(());
        }
        let Some(lease) = self.attaches.lease else {
            return Err(unknown(id));
        };
        let me = self.attaches.replica.clone();
        let Some(rec) = self.store.attach_record(id).await? else {
            return Err(unknown(id));
        };
        // Another token's attach is not told apart from none at all.
        if rec.owner != owner || rec.ended_at.is_some() {
            return Err(unknown(id));
        }
        let now = hangar_store::now_ms();
        // Held by a live replica: answered there, without waiting on a takeover here.
        let held_elsewhere = rec.replica != me && rec.lease_until >= now;
        let _one = if held_elsewhere {
            None
        } else {
            // Taken over one at a time here (its output and a keystroke may both ask).
            let one = self.attaches.adopting.lock().await;
            if self.attaches.get(id, owner).is_ok() {
                return Ok(());
            }
            if rec.replica == me {
                return Err(unknown(id));
            }
            Some(one)
        };
        // A record whose replica went away longer ago than a client may stay silent belongs to
        // an attach that would have ended: its pid is not joined (envd may have given it to
        // another process since).
        if !held_elsewhere && now - rec.lease_until > ms(self.attaches.idle) {
            let _ = self.store.end_attach_record(id, &rec.replica, now).await;
            return Err(unknown(id));
        }
        // The claim covers the time `Connect` may take, so no other replica takes it meanwhile.
        let claim_until = now + ms(lease) + ms(hangar_cloud::e2b::terminal::ENVD_WITHIN);
        if held_elsewhere
            || !self
                .store
                .take_attach_over(id, &me, now, claim_until)
                .await?
        {
            let holder = self
                .store
                .attach_record(id)
                .await?
                .filter(|r| r.ended_at.is_none())
                .ok_or_else(|| unknown(id))?;
            let message = format!(
                "attach {id} is relayed by another hangar serve replica ({})",
                holder.replica
            );
            return Err(match self.store.replica_url(&holder.replica).await? {
                Some(url) => ControlError::Elsewhere { url, message },
                None => ControlError::Unavailable(format!(
                    "{message}, which gave no address to reach it at (HANGAR_ADVERTISE_URL): ask through it"
                )),
            });
        }
        let joined = async {
            let sb = self.provider_sandbox(&rec.sandbox).await?;
            let target = self.providers.e2b().await?.pty_target(&sb, &rec.run)?;
            let pid = u64::try_from(rec.pid).unwrap_or(0);
            PtySession::connect(&target, pid)
                .await
                .map_err(ControlError::from)
        }
        .await;
        let detail = json!({"sandbox": rec.sandbox, "run": rec.run, "attach": id, "from_replica": rec.replica});
        match joined {
            Ok(pty) => {
                let _ = self
                    .store
                    .audit()
                    .append(&rec.person, "sandbox.attach.taken_over", &detail)
                    .await;
                self.attaches.relay(
                    self.store.clone(),
                    owner,
                    pty,
                    id,
                    &rec.sandbox,
                    &rec.run,
                    &rec.person,
                );
                Ok(())
            }
            Err(e) => {
                // Its process is gone (or its sandbox): the attach has ended.
                let _ = self
                    .store
                    .end_attach_record(id, &me, hangar_store::now_ms())
                    .await;
                let mut detail = detail;
                detail["reason"] = json!(format!(
                    "its replica stopped and its terminal could not be joined again: {e}"
                ));
                let _ = self
                    .store
                    .audit()
                    .append(&rec.person, "sandbox.attach.ended", &detail)
                    .await;
                Err(ControlError::WrongState(format!(
                    "attach {id} has ended: the hangar serve replica that relayed it stopped, and its terminal could not be joined again ({e}); start another with `hangar sb attach {}`",
                    rec.sandbox
                )))
            }
        }
    }

    /// Ends every relayed attach (their processes killed, their ends audited), waiting up to
    /// 15 s: what `hangar serve` does before it stops, so no output stream holds it open and no
    /// root `tmux attach` stays behind.
    pub async fn end_all_attaches(&self, why: &str) {
        let left = self.attaches.end_all(why, Duration::from_secs(15)).await;
        if left > 0 {
            tracing::warn!(left, "attaches still ending when the server stopped");
        }
    }

    /// Ends relayed attach `id` (its PTY process killed, the end audited).
    pub async fn end_attach(&self, id: &str, owner: &str) -> Result<(), ControlError> {
        self.attach_here(id, owner).await?;
        self.attaches.end(id, owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_must_have_a_sane_size_and_type() {
        assert!(TermSpec::default().check().is_ok());
        for (cols, rows, term) in [
            (0, 24, "xterm"),
            (80, 1001, "xterm"),
            (80, 24, ""),
            (80, 24, "xterm;true"),
            (80, 24, "xterm 256"),
            (80, 24, &"x".repeat(65)[..]),
        ] {
            let t = TermSpec {
                cols,
                rows,
                term: term.into(),
            };
            assert!(matches!(t.check(), Err(ControlError::Invalid(_))), "{t:?}");
        }
    }
}
