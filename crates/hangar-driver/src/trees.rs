//! The work tree's git tree id after each step of the turn (S23, S25-S27).
//!
//! A thread of its own hashes the work tree (`hangar-treehash`: the id `git add -A && git
//! write-tree` would give, incremental, into the turn's own object store `<ctl>/tree/` with the
//! repository's objects as alternates) and writes `hangar.tree` lines to the run log:
//!
//! * at the turn's start and end (`phase`), always;
//! * after tool results that may change files (`tool_use_id`), only when the tree changed.
//!   Results that arrive while a hash runs are taken together: one hash, named after the last.
//!
//! One hash over [`SLOW`] (or `HANGAR_TREE_SLOW_MS`) is written with `skipped: "slow"` and ends hashing for the turn, so a
//! huge work tree never holds the turn up. Lines carry `trusted: false` unless the agent runs as
//! a uid of its own (the agent could otherwise change what was hashed while it was hashed).
//! At the end the objects the turn made go into `<ctl>/trees.pack` for the control plane, and
//! the store is deleted.
//!
//! Non-goals: reading the pack back (the control plane's job), hashing for raw commands.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hangar_protocol::runlog::{HangarLine, TreePhase};
use hangar_treehash::{Options, RepoLayout, Store, TreeHasher};

use crate::runlog::RunLog;

/// A hash that takes longer than this is the last of the turn (`HANGAR_TREE_SLOW_MS` changes
/// it).
pub const SLOW: Duration = Duration::from_secs(2);

fn slow_limit() -> Duration {
    hangar_protocol::env::var(hangar_protocol::env::HANGAR_TREE_SLOW_MS)
        .and_then(|v| v.parse().ok())
        .map_or(SLOW, Duration::from_millis)
}

/// Tools that only read: their results never start a hash.
const READ_ONLY_TOOLS: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "LS",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "TodoRead",
    "ExitPlanMode",
    "ListMcpResourcesTool",
    "ReadMcpResourceTool",
];

/// Whether a result of tool `name` may have changed the work tree.
pub fn may_change_files(name: &str) -> bool {
    !READ_ONLY_TOOLS.contains(&name)
}

enum Request {
    Phase(TreePhase),
    Tools(Vec<String>),
    Finish { pack: PathBuf },
}

/// The hashing thread of one turn.
#[derive(Debug)]
pub struct Trees {
    tx: Sender<Request>,
    thread: Option<JoinHandle<()>>,
}

impl Trees {
    /// Starts hashing `workdir` into the store at `store_dir`; hashes the start at once.
    pub fn start(workdir: &Path, store_dir: PathBuf, log: RunLog, trusted: bool) -> Trees {
        let (tx, rx) = mpsc::channel();
        let workdir = workdir.to_owned();
        let thread = std::thread::Builder::new()
            .name("trees".into())
            .spawn(move || worker(&workdir, store_dir, log, trusted, rx))
            .ok();
        let t = Trees { tx, thread };
        let _ = t.tx.send(Request::Phase(TreePhase::Start));
        t
    }

    /// Tool calls whose results came in (only those that may change files).
    pub fn after(&self, tool_use_ids: Vec<String>) {
        if !tool_use_ids.is_empty() {
            let _ = self.tx.send(Request::Tools(tool_use_ids));
        }
    }

    /// Hashes the end, writes the turn's objects to `pack` and deletes the store; waits for it.
    pub fn finish(mut self, pack: &Path) {
        let _ = self.tx.send(Request::Phase(TreePhase::End));
        let _ = self.tx.send(Request::Finish {
            pack: pack.to_owned(),
        });
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Worker {
    hasher: Option<TreeHasher>,
    log: RunLog,
    trusted: bool,
    last: Option<String>,
    /// A hash was slow: no more this turn.
    stopped: bool,
    slow: Duration,
}

fn worker(workdir: &Path, store_dir: PathBuf, log: RunLog, trusted: bool, rx: Receiver<Request>) {
    let alternates: Vec<PathBuf> = RepoLayout::discover(workdir)
        .objects_dir()
        .into_iter()
        .collect();
    let hasher = Store::open(&store_dir, &alternates)
        .and_then(|store| TreeHasher::with_options(workdir, store, Options::default()));
    let hasher = match hasher {
        Ok(h) => Some(h),
        Err(e) => {
            log.hangar(&HangarLine::Warning {
                message: format!("no trees this turn: cannot hash {}: {e}", workdir.display()),
            });
            None
        }
    };
    let mut w = Worker {
        hasher,
        log,
        trusted,
        last: None,
        stopped: false,
        slow: slow_limit(),
    };
    let mut queue: VecDeque<Request> = VecDeque::new();
    loop {
        let req = match queue.pop_front() {
            Some(r) => r,
            None => match rx.recv() {
                Ok(r) => r,
                Err(_) => break,
            },
        };
        match req {
            Request::Phase(phase) => w.hash(None, Some(phase)),
            Request::Tools(mut ids) => {
                // Results that came while the last hash ran share this one.
                while let Ok(next) = rx.try_recv() {
                    match next {
                        Request::Tools(more) if queue.is_empty() => ids.extend(more),
                        other => queue.push_back(other),
                    }
                }
                w.hash(ids.pop(), None);
            }
            Request::Finish { pack } => {
                w.finish(&pack);
                break;
            }
        }
    }
}

impl Worker {
    /// One hash; a line for a phase always, for a tool only when the tree changed.
    fn hash(&mut self, tool_use_id: Option<String>, phase: Option<TreePhase>) {
        if self.stopped {
            return;
        }
        let Some(h) = self.hasher.as_mut() else {
            return;
        };
        let t = Instant::now();
        let tree = match h.hash() {
            Ok(id) => id.to_hex(),
            Err(e) => {
                self.log.hangar(&HangarLine::Warning {
                    message: format!("no more trees this turn: hashing failed: {e}"),
                });
                self.stopped = true;
                return;
            }
        };
        let took = t.elapsed();
        let slow = took > self.slow;
        let changed = self.last.as_deref() != Some(tree.as_str());
        if phase.is_some() || changed || slow {
            self.log.hangar(&HangarLine::Tree {
                tool_use_id,
                phase,
                tree: tree.clone(),
                ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                skipped: slow.then(|| "slow".to_owned()),
                trusted: (!self.trusted).then_some(false),
            });
        }
        self.last = Some(tree);
        if slow {
            self.stopped = true;
        }
    }

    fn finish(&mut self, pack: &Path) {
        let Some(h) = self.hasher.take() else {
            return;
        };
        let store = h.into_store();
        if let Err(e) = store.export_pack(pack) {
            self.log.hangar(&HangarLine::Warning {
                message: format!("the turn's trees could not be kept: {e}"),
            });
        }
        if let Err(e) = store.destroy() {
            self.log.hangar(&HangarLine::Warning {
                message: format!("the turn's tree store could not be removed: {e}"),
            });
        }
    }
}
