//! Following a run's log through the API (`GET /v1/runs/{id}/log?offset=N`), riding out a
//! restart of the server: the offset is this client's, so after a reconnect it goes on from the
//! last complete line it showed — every line once, none skipped.

use std::time::{Duration, Instant};

use hangar_protocol::runlog::HangarLine;

use crate::api::{Api, seg};
use crate::exit::CliError;
use crate::progress;

/// How often to ask for new lines while the run is quiet.
pub const POLL: Duration = Duration::from_millis(100);
/// The longest wait between two attempts to reach a lost server.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What one poll gave.
#[derive(Debug)]
pub enum Polled {
    /// New complete lines (maybe none).
    Lines(Vec<String>),
    /// The server cannot be reached, for this long already; wait [`LogFollower::backoff`].
    Lost(Duration),
}

/// Where a follower is in a run's log.
#[derive(Debug)]
pub struct LogFollower {
    pub api: Api,
    run: String,
    offset: u64,
    lost: Option<Instant>,
    backoff: Duration,
    saw_turn_end: bool,
    drained: bool,
    /// The run has ended in the store and every line has been read.
    pub ended: bool,
    /// The `handed_back` of the turn's end line, once read.
    pub handed_back: Vec<u64>,
    /// The server's word on the run's log: the agent could not have written it. When not, why.
    pub verified: bool,
    pub why: Option<String>,
}

impl LogFollower {
    pub fn new(api: Api, run: &str) -> LogFollower {
        LogFollower {
            api,
            run: run.to_owned(),
            offset: 0,
            lost: None,
            backoff: Duration::from_millis(250),
            saw_turn_end: false,
            drained: false,
            ended: false,
            handed_back: Vec::new(),
            verified: false,
            why: None,
        }
    }

    /// The run's turn-end line has been read and nothing came after it.
    pub fn turn_over(&self) -> bool {
        self.ended || self.drained
    }

    /// How long to wait after [`Polled::Lost`].
    pub fn backoff(&mut self) -> Duration {
        let b = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        b
    }

    /// Asks for the lines after the offset.
    pub async fn poll(&mut self) -> Result<Polled, CliError> {
        let path = format!("/v1/runs/{}/log?offset={}", seg(&self.run), self.offset);
        match self.api.get_as::<hangar_api::LogPage>(&path).await {
            Ok(v) => {
                if self.lost.take().is_some() {
                    progress::note("reconnected; going on from where it was");
                }
                self.backoff = Duration::from_millis(250);
                let lines = v.lines;
                self.offset = v.next_offset;
                self.verified = v.verified;
                self.why = v.why;
                if lines.is_empty() && self.saw_turn_end {
                    self.drained = true;
                }
                for l in &lines {
                    if let Some(HangarLine::TurnEnd { handed_back, .. }) = HangarLine::parse(l) {
                        self.saw_turn_end = true;
                        self.handed_back = handed_back;
                    }
                }
                self.ended |= v.ended;
                Ok(Polled::Lines(lines))
            }
            Err(e) if e.transient() => {
                let since = *self.lost.get_or_insert_with(|| {
                    progress::note("lost the server; reconnecting…");
                    Instant::now()
                });
                Ok(Polled::Lost(since.elapsed()))
            }
            Err(e) if e.status() == Some(404) => Err(CliError::Failed(format!(
                "no run {} at {}",
                self.run,
                self.api.base()
            ))),
            Err(e) => Err(e.into_cli()),
        }
    }

    /// Switches to another server (one this process now serves) without losing the offset.
    pub fn switch(&mut self, api: Api) {
        self.api = api;
        self.lost = None;
        self.backoff = Duration::from_millis(250);
    }
}
