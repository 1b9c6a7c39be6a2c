#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "benchmark binary"
)]

//! The control plane's three benchmarks (`cargo bench -p hangar-control`; `-- ingest`,
//! `-- reattach` or `-- approval` runs one of them). Each runs in a child process of this
//! binary (fresh memory figures, and a hard timeout: a child that overruns is killed by pid, with
//! any driver it started).
//!
//! 1. **Ingest** (targets: the watcher on SQLite >= 0.7x the parse-only rate of the same run,
//!    on PostgreSQL >= 0.5x; issue 22): a generated run log of 1M lines
//!    (`HANGAR_BENCH_LINES` overrides): Claude Code stream-json (`system`, `assistant` text and
//!    `tool_use`, `user` `tool_result`, `result`), a Codex share (`codex exec --json` lines) and
//!    hangar's own lines (commands, approvals, trees). Printed beside the raw line-read rate of
//!    the same file (`BufRead`, the reader's 64 KiB buffer): parse only (`hangar_events::ingest`
//!    in 1 MiB slices, as the watcher reads), parse + the watcher's conversion to JSON text,
//!    parse + `Store::commit_events_with_state` one slice after the other, and the control
//!    plane's own watcher end to end (`ControlPlane::reattach` on that log until its turn ended;
//!    it parses the next slice while one commits: the target's row), on SQLite; on PostgreSQL
//!    when `HANGAR_TEST_DATABASE_URL` is set (a fresh schema per row, dropped after), over the
//!    log's first 200k lines (`HANGAR_BENCH_PG_LINES`). Every database row is checked: the
//!    stored events, read back with `events_after`, equal `hangar_events::rebuild` of the log in
//!    count, order and content.
//! 2. **Re-attach** (target < 2 s, resident memory < 200 MB): 1,000 live runs
//!    (`HANGAR_BENCH_RUNS`) with small real logs and saved cursors half-way (events, cursor and
//!    parser state committed as a watcher would have), their driver pid this process's own (so
//!    the watchers keep watching). Timed from opening the store to every run's cursor at the
//!    end of its log, beside the same tails parsed in one thread; resident memory (VmRSS
//!    sampled, VmHWM) while the 1,000 watchers run, beside the same process before
//!    re-attaching; then 3 s of idle watching (CPU), and what each piece of an idle poll costs.
//!    Checked: every run's stored events equal a rebuild of its log.
//! 3. **Approval latency under load**: 200 concurrent runs (`HANGAR_BENCH_APPROVAL_RUNS`) of
//!    the real driver (`--policy ask --raw`) with a stub harness (this binary) that asks
//!    `can_use_tool` five times, its model thinking about a second before each tool call
//!    (`HANGAR_BENCH_THINK_MS`, as `scripts/load`'s), each answered through
//!    `ControlPlane::answer` as soon as the watcher has recorded it. Latency: from the start of the `answer` call to the stub
//!    reading the `control_response` on its stdin (CLOCK_MONOTONIC on both sides). Baseline:
//!    one run alone, `answer` and the bare mailbox (`Mailbox::request`, no control plane)
//!    interleaved. A second phase of 200 runs, a burst (each stub asks again the moment it is
//!    answered: a stress figure, no target), answers half through `answer` and half through a
//!    timed step-by-step copy of the answer path before live mailboxes were kept in memory (the
//!    run and its key read from the store for every command, a blocking thread polling for
//!    the ack): the old path measured in the same run, under the same load. The driver is
//!    `$HANGAR_DRIVER_BIN` or the static one `scripts/build-driver` makes.
//!
//! Every wait has a timeout; errors are `Result`s (the bench profile aborts on panic, so no
//! cleanup would run), and started processes are killed by pid and reaped.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::hash::{DefaultHasher, Hasher};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar_control::{ControlPlane, Reply, Tools};
use hangar_events::{ParseContext, ProgressEvent};
use hangar_mailbox::outbox::{Mailbox, Outcome};
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_protocol::runlog::HangarLine;
use hangar_store::{
    EncodedEvent, EventScope, Harness, MAX_PAGE, NewRun, NewSandbox, Policy, RunState, Secret,
    Store, TurnState, TurnUpdate, Vault, new_id,
};
use serde_json::{Value, json};

type Res<T> = Result<T, String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

/// argv[1] that makes this binary the stub harness (benchmark 3).
const STUB: &str = "__hangar_bench_stub";
/// argv[1] that makes this binary run one benchmark (the parent's child).
const CHILD: &str = "__hangar_bench_child";
/// Where a child appends the pids of the drivers it starts, for the parent to kill on timeout.
const PIDS_ENV: &str = "HANGAR_BENCH_PIDFILE";

/// The benchmarks, in order, with the time each child gets before it is killed.
const BENCHES: &[(&str, Duration)] = &[
    ("ingest", Duration::from_secs(1500)),
    ("reattach", Duration::from_secs(300)),
    ("approval", Duration::from_secs(300)),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some(STUB) => std::process::exit(stub::main(&args[2..])),
        Some(CHILD) => std::process::exit(child(args.get(2).map_or("", String::as_str))),
        _ => {}
    }
    // cargo passes `--bench`; any other word selects benchmarks by name.
    let filters: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    println!(
        "hangar-control benchmarks: {} CPUs, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );
    let mut failed = false;
    for (name, timeout) in BENCHES {
        if !wanted(name) {
            continue;
        }
        println!();
        if let Err(e) = supervise(name, *timeout) {
            eprintln!("{name} benchmark FAILED: {e}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}

fn child(name: &str) -> i32 {
    let r = match name {
        "ingest" => ingest::run(),
        "reattach" => reattach::run(),
        "approval" => approval::run(),
        other => Err(format!("no benchmark {other:?}")),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{name} benchmark FAILED: {e}");
            1
        }
    }
}

/// Runs one benchmark in a child process, killing it (and the drivers it listed) on timeout.
fn supervise(name: &str, timeout: Duration) -> Res<()> {
    let exe = std::env::current_exe().map_err(err("this benchmark's executable"))?;
    let scratch = tempfile::tempdir().map_err(err("temp folder"))?;
    let pids = scratch.path().join("pids");
    let mut child = Process::new(&exe)
        .args([CHILD, name])
        .env(PIDS_ENV, &pids)
        .stdin(Stdio::null())
        .spawn()
        .map_err(err(format!("start the {name} benchmark")))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().map_err(err("wait for the benchmark"))? {
            Some(s) => break Some(s),
            None if Instant::now() >= deadline => break None,
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let outcome = match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!("its process ended with {s}")),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("it did not finish within {timeout:?}; killed"))
        }
    };
    kill_leftovers(&pids);
    outcome
}

/// Kills drivers a failed child left behind (their stub harnesses then read EOF and exit).
fn kill_leftovers(pids: &Path) {
    let Ok(text) = fs::read_to_string(pids) else {
        return;
    };
    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmd.windows(13).any(|w| w == b"hangar-driver") {
            eprintln!("(killing leftover driver pid {pid})");
            // SAFETY: kill(2) on a pid whose command line we just read; no memory is involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers: load, clocks, memory, runtime, statistics.
// ---------------------------------------------------------------------------------------------

/// The 1-minute load average (the machine is shared: printed with every benchmark).
fn load() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// CLOCK_MONOTONIC in nanoseconds: the same clock in this process and in the stub harness.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// This process's user + system CPU seconds.
fn cpu_secs() -> f64 {
    // SAFETY: rusage is plain integers; all-zero is valid, and getrusage writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Wall-clock time and this process's CPU time from one moment: on a shared machine the CPU
/// seconds say what a figure cost when the wall clock also counts waiting for a core.
struct Timer {
    wall: Instant,
    cpu: f64,
}

impl Timer {
    fn start() -> Timer {
        Timer {
            wall: Instant::now(),
            cpu: cpu_secs(),
        }
    }

    /// Wall time and CPU seconds since [`Timer::start`].
    fn stop(&self) -> (Duration, f64) {
        (self.wall.elapsed(), cpu_secs() - self.cpu)
    }
}

/// This process's memory and threads, from /proc/self/status.
#[derive(Clone, Copy, Debug, Default)]
struct Mem {
    rss_kib: u64,
    hwm_kib: u64,
    threads: u64,
}

fn mem() -> Mem {
    let text = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Mem {
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
        threads: field("Threads:"),
    }
}

/// Resets VmHWM to the current RSS (Linux `clear_refs` 5).
fn reset_hwm() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The runtime `hangar serve` builds (multi-threaded, default sizes).
fn runtime() -> Res<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(err("build the tokio runtime"))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn verdict(ok: bool) -> &'static str {
    if ok { "MET" } else { "MISSED" }
}

/// A line for scripts/bench's table: figure, value, unit, baseline, its value, target (`-`:
/// none), met.
fn figure(
    what: &str,
    value: f64,
    unit: &str,
    baseline: &str,
    base: f64,
    target: &str,
    met: Option<bool>,
) {
    let met = match met {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    };
    println!("hangar-bench\t{what}\t{value:.3}\t{unit}\t{baseline}\t{base:.3}\t{target}\t{met}");
}

/// Latency percentiles (nearest rank).
#[derive(Clone, Copy, Debug)]
struct Stats {
    n: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

impl Stats {
    /// Of values in milliseconds; `None` when there are none.
    fn of(mut v: Vec<f64>) -> Option<Stats> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let pick = |q: f64| {
            let rank = (q * v.len() as f64).ceil() as usize;
            v[rank.clamp(1, v.len()) - 1]
        };
        Some(Stats {
            n: v.len(),
            p50: pick(0.50),
            p90: pick(0.90),
            p99: pick(0.99),
            max: v[v.len() - 1],
        })
    }

    fn row(s: Option<Stats>, label: &str) -> String {
        match s {
            Some(s) => format!(
                "  {label:<58}{:>6}{:>10.2}{:>10.2}{:>10.2}{:>10.2}",
                s.n, s.p50, s.p90, s.p99, s.max
            ),
            None => format!("  {label:<58}{:>6}", 0),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The store: opening one (SQLite file or a fresh PostgreSQL schema), seeding runs, digests.
// ---------------------------------------------------------------------------------------------

mod db {
    use super::*;

    /// A database for one measurement: a SQLite file, or a PostgreSQL schema of its own.
    #[derive(Debug)]
    pub struct Db {
        pub url: String,
        pub key: PathBuf,
        /// The SQLite file (`None` on PostgreSQL).
        pub file: Option<PathBuf>,
        /// PostgreSQL: the server's URL and the schema, dropped by [`Db::cleanup`].
        pg: Option<(String, String)>,
    }

    impl Db {
        pub fn sqlite(dir: &Path, name: &str) -> Db {
            let file = dir.join(format!("{name}.db"));
            Db {
                url: format!("sqlite://{}", file.display()),
                key: dir.join("master.key"),
                file: Some(file),
                pg: None,
            }
        }

        pub async fn postgres(base: &str, dir: &Path) -> Res<Db> {
            use sqlx::Connection;
            let schema = new_id("bench").map_err(err("id"))?.replace('-', "_");
            let mut c = sqlx::PgConnection::connect(base)
                .await
                .map_err(err(format!("connect to {}", redact(base))))?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                .execute(&mut c)
                .await
                .map_err(err("create a schema"))?;
            let _ = c.close().await;
            let sep = if base.contains('?') { '&' } else { '?' };
            Ok(Db {
                url: format!("{base}{sep}options=-c%20search_path%3D{schema}"),
                key: dir.join("master.key"),
                file: None,
                pg: Some((base.to_owned(), schema)),
            })
        }

        pub async fn open(&self) -> Res<Store> {
            let store = Store::open(&self.url)
                .await
                .map_err(err(format!("open {}", redact(&self.url))))?;
            let vault = Vault::open_or_create(&self.key).map_err(err("the vault"))?;
            store
                .with_vault(vault)
                .await
                .map_err(err("attach the vault"))
        }

        /// Drops the PostgreSQL schema; removes the SQLite files.
        pub async fn cleanup(&self) {
            use sqlx::Connection;
            if let Some((base, schema)) = &self.pg
                && let Ok(mut c) = sqlx::PgConnection::connect(base).await
            {
                let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                    .execute(&mut c)
                    .await;
                let _ = c.close().await;
            }
            if let Some(f) = &self.file {
                for ext in ["", "-wal", "-shm"] {
                    let _ = fs::remove_file(format!("{}{ext}", f.display()));
                }
            }
        }
    }

    /// The URL with its password replaced.
    pub fn redact(url: &str) -> String {
        match (url.find("://"), url.rfind('@')) {
            (Some(s), Some(a)) if a > s => {
                let auth = &url[s + 3..a];
                match auth.split_once(':') {
                    Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[a..]),
                    None => url.to_owned(),
                }
            }
            _ => url.to_owned(),
        }
    }

    pub const SANDBOX: &str = "sb-bench";

    /// The environment and the sandbox every benchmark session lives in.
    pub async fn seed_base(store: &Store, workdir: &Path) -> Res<()> {
        store
            .create_environment("local", &json!({"provider": "local"}))
            .await
            .map_err(err("create the environment"))?;
        store
            .create_sandbox(&NewSandbox {
                id: SANDBOX.into(),
                environment: "local".into(),
                kind: "local".into(),
                workdir: workdir.display().to_string(),
                person: "bench@example.com".into(),
                handle: None,
            })
            .await
            .map_err(err("create the sandbox"))?;
        Ok(())
    }

    /// What [`seed_run`] made besides the run: its turn.
    pub struct Seeded {
        pub turn: String,
    }

    /// A session, its turn (running) and a live run `run_id` whose control folder is `ctl`.
    pub async fn seed_run(
        store: &Store,
        run_id: &str,
        ctl: &Path,
        key: &Secret,
        driver_pid: Option<i64>,
    ) -> Res<Seeded> {
        let id = |p: &str| new_id(p).map_err(err("id"));
        let session = store
            .create_session(&id("ses")?, SANDBOX, Harness::Claude, Policy::Ask)
            .await
            .map_err(err("create a session"))?;
        let turn = store
            .create_turn(&id("turn")?, &session.id, "benchmark turn")
            .await
            .map_err(err("create a turn"))?;
        store
            .create_run(
                &NewRun {
                    id: run_id.to_owned(),
                    turn_id: turn.id.clone(),
                    ctl_path: ctl.display().to_string(),
                    driver_pid,
                    lease: None,
                },
                key,
            )
            .await
            .map_err(err("create a run"))?;
        store
            .update_turn_state(&turn.id, &TurnUpdate::to(TurnState::Running))
            .await
            .map_err(err("start the turn"))?;
        Ok(Seeded { turn: turn.id })
    }

    /// An event as the watcher stores it.
    pub fn stored(e: &ProgressEvent) -> EncodedEvent {
        hangar_control::stored_event(e)
    }

    /// A count and an order-sensitive hash of events' JSON, and each event's own hash (to
    /// name the first difference).
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct Digest {
        pub count: u64,
        pub hash: u64,
        each: Vec<u64>,
    }

    impl Digest {
        /// Where `self` and `other` first differ (an index into the events), if they do.
        pub fn first_difference(&self, other: &Digest) -> Option<usize> {
            if self == other {
                return None;
            }
            Some(
                self.each
                    .iter()
                    .zip(&other.each)
                    .position(|(a, b)| a != b)
                    .unwrap_or(self.each.len().min(other.each.len())),
            )
        }
    }

    #[derive(Default)]
    pub struct Digester {
        h: DefaultHasher,
        each: Vec<u64>,
    }

    impl Digester {
        pub fn add(&mut self, v: &Value) {
            let text = v.to_string();
            let mut one = DefaultHasher::new();
            one.write(text.as_bytes());
            self.each.push(one.finish());
            self.h.write(text.as_bytes());
            self.h.write_u8(0xff);
        }

        pub fn finish(self) -> Digest {
            Digest {
                count: self.each.len() as u64,
                hash: self.h.finish(),
                each: self.each,
            }
        }
    }

    /// The digest of events as parsed, each as it reads back from JSON text (what a store
    /// returns: serde_json parses floats to within 1 ULP unless its `float_roundtrip` feature is
    /// on, so a `cost_usd` can come back one bit off; see [`float_losses`]).
    pub fn digest_events(events: &[ProgressEvent]) -> Digest {
        let mut d = Digester::default();
        for e in events {
            let text = serde_json::to_string(e).unwrap_or_default();
            d.add(&serde_json::from_str(&text).unwrap_or_default());
        }
        d.finish()
    }

    /// How many events do not survive a JSON text round trip unchanged (always a float).
    pub fn float_losses(events: &[ProgressEvent]) -> u64 {
        events
            .iter()
            .filter(|e| {
                let v = serde_json::to_value(e).unwrap_or_default();
                serde_json::from_str::<Value>(&v.to_string()).ok().as_ref() != Some(&v)
            })
            .count() as u64
    }

    /// The digest of a run's stored events, read back through `events_after`; each event's
    /// `kind` column must be its payload's `kind`.
    pub async fn digest_stored(store: &Store, run: &str) -> Res<Digest> {
        let mut d = Digester::default();
        let mut after = 0;
        loop {
            let page = store
                .events_after(EventScope::Run(run), after, MAX_PAGE)
                .await
                .map_err(err("read events back"))?;
            let Some(last) = page.last() else {
                return Ok(d.finish());
            };
            after = last.id;
            for e in &page {
                ensure!(
                    e.payload.get("kind").and_then(Value::as_str) == Some(e.kind.as_str()),
                    "event {}: kind column {:?} differs from its payload",
                    e.id,
                    e.kind
                );
                d.add(&e.payload);
            }
        }
    }

    /// Checks that a run's stored events equal `truth` (a rebuild of `log`); on a difference,
    /// names the first differing event with both JSON texts. Returns the count.
    pub async fn check_stored(store: &Store, run: &str, log: &Path, truth: &Digest) -> Res<u64> {
        let got = digest_stored(store, run).await?;
        let Some(i) = got.first_difference(truth) else {
            return Ok(got.count);
        };
        let (mut after, mut k, mut stored) = (0, 0, String::from("(none)"));
        'pages: loop {
            let page = store
                .events_after(EventScope::Run(run), after, MAX_PAGE)
                .await
                .map_err(err("read events back"))?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for e in &page {
                if k == i {
                    stored = e.payload.to_string();
                    break 'pages;
                }
                k += 1;
            }
        }
        let parsed = hangar_events::rebuild(log)
            .get(i)
            .and_then(|e| serde_json::to_value(e).ok())
            .map_or_else(|| "(none)".into(), |v| v.to_string());
        Err(format!(
            "run {run}: {} stored events, {} in hangar_events::rebuild of its log; event {i} differs:\n  stored:  {stored}\n  rebuild: {parsed}",
            got.count, truth.count
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// The stub harness (benchmark 3): asks `can_use_tool` ROUNDS times, recording when each answer
// arrives, then prints a `result` and waits for its stdin to close.
// ---------------------------------------------------------------------------------------------

mod stub {
    use super::*;

    /// argv after [`STUB`]: RECV_FILE ROUNDS DEADLINE_SECS THINK_MS (its model thinks
    /// THINK_MS/2 to 3*THINK_MS/2 before each tool call; 0: none, a burst).
    pub fn main(args: &[String]) -> i32 {
        match run(args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("bench stub harness: {e}");
                5
            }
        }
    }

    fn run(args: &[String]) -> Res<()> {
        let [recv, rounds, deadline, think] = args else {
            return Err(format!(
                "usage: {STUB} RECV_FILE ROUNDS DEADLINE_SECS THINK_MS"
            ));
        };
        let rounds: u32 = rounds.parse().map_err(err("ROUNDS"))?;
        let think: u64 = think.parse().map_err(err("THINK_MS"))?;
        let mut rng = loggen::Rng::new(mono_ns() ^ u64::from(std::process::id()).rotate_left(32));
        let deadline: u64 = deadline.parse().map_err(err("DEADLINE_SECS"))?;
        // Never outlive the benchmark, whatever happens to it.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(deadline));
            std::process::exit(3);
        });
        let mut recv = OpenOptions::new()
            .create(true)
            .append(true)
            .open(recv)
            .map_err(err("open the receipt file"))?;
        let mut out = io::stdout().lock();
        let mut inp = io::stdin().lock();
        let w = |e: io::Error| format!("write stdout: {e}");
        let session = "5e55a0b1-0000-4000-8000-000000000001";
        writeln!(
            out,
            r#"{{"type":"system","subtype":"init","cwd":"/work","session_id":"{session}","tools":["Bash"],"model":"stub","permissionMode":"default"}}"#
        )
        .map_err(w)?;
        let mut line = String::new();
        for n in 1..=rounds {
            if think > 0 {
                let ms = think / 2 + rng.below(think + 1);
                std::thread::sleep(Duration::from_millis(ms));
            }
            let tool = format!("toolu_bench_{n:04}");
            writeln!(
                out,
                r#"{{"type":"assistant","message":{{"id":"msg_bench_{n}","type":"message","role":"assistant","content":[{{"type":"tool_use","id":"{tool}","name":"Bash","input":{{"command":"echo {n}","description":"say {n}"}}}}]}},"parent_tool_use_id":null,"session_id":"{session}"}}"#
            )
            .map_err(w)?;
            writeln!(
                out,
                r#"{{"type":"control_request","request_id":"q{n}","request":{{"subtype":"can_use_tool","tool_name":"Bash","input":{{"command":"echo {n}","description":"say {n}"}},"tool_use_id":"{tool}"}}}}"#
            )
            .map_err(w)?;
            out.flush().map_err(w)?;
            let want = format!("\"request_id\":\"q{n}\"");
            loop {
                line.clear();
                let k = inp.read_line(&mut line).map_err(err("read stdin"))?;
                let at = mono_ns();
                ensure!(k > 0, "stdin closed before the answer to q{n}");
                if line.contains("\"control_response\"") && line.contains(&want) {
                    let allowed = line.contains("\"behavior\":\"allow\"");
                    writeln!(recv, "q{n} {at} {allowed}").map_err(err("write a receipt"))?;
                    break;
                }
            }
            writeln!(
                out,
                r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"{tool}","type":"tool_result","content":"{n}","is_error":false}}]}},"parent_tool_use_id":null,"session_id":"{session}"}}"#
            )
            .map_err(w)?;
        }
        writeln!(
            out,
            r#"{{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"{session}","total_cost_usd":0.001,"usage":{{"input_tokens":10,"output_tokens":5}}}}"#
        )
        .map_err(w)?;
        out.flush().map_err(w)?;
        // The driver closes stdin when the turn is over.
        loop {
            line.clear();
            if inp.read_line(&mut line).map_err(err("read stdin"))? == 0 {
                return Ok(());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A synthetic run log.
// ---------------------------------------------------------------------------------------------

mod loggen {
    use super::*;

    /// A small deterministic PRNG (xorshift64*), so every run writes the same log.
    pub struct Rng(u64);

    impl Rng {
        pub fn new(seed: u64) -> Rng {
            Rng(seed | 1)
        }
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        pub fn range(&mut self, lo: usize, hi: usize) -> usize {
            lo + usize::try_from(self.below((hi - lo + 1) as u64)).unwrap_or(0)
        }
        fn percent(&mut self, p: u64) -> bool {
            self.below(100) < p
        }
        fn hex(&mut self, digits: usize) -> String {
            let mut s = String::with_capacity(digits + 16);
            while s.len() < digits {
                let _ = write!(s, "{:016x}", self.next());
            }
            s.truncate(digits);
            s
        }
        fn uuid(&mut self) -> String {
            let h = self.hex(32);
            format!(
                "{}-{}-4{}-a{}-{}",
                &h[..8],
                &h[8..12],
                &h[13..16],
                &h[17..20],
                &h[20..]
            )
        }
    }

    /// Text with what agent output has in it: prose, code, quotes, backslashes, newlines, tabs
    /// and non-ASCII, so JSON escaping is exercised.
    fn text_pool(rng: &mut Rng, len: usize) -> String {
        const WORDS: &[&str] = &[
            "the",
            "function",
            "returns",
            "a",
            "value",
            "of",
            "type",
            "Result<T,",
            "E>",
            "and",
            "we",
            "should",
            "check",
            "that",
            "file",
            "src/main.rs",
            "line",
            "42:",
            "error[E0308]:",
            "mismatched",
            "types",
            "expected",
            "`u64`,",
            "found",
            "`i32`",
            "\"quoted\"",
            "path\\to\\file",
            "fn",
            "main()",
            "{",
            "}",
            "let",
            "x",
            "=",
            "vec![1,",
            "2,",
            "3];",
            "TODO:",
            "résumé",
            "→",
            "✓",
            "日本語",
            "<tag attr=\"v\">",
            "$HOME",
            "ok",
            "tests",
            "passed;",
            "0",
            "failed;",
            "Compiling",
            "hangar-events",
            "v0.1.0",
            "Finished",
            "in",
            "12.34s",
            "I'll",
            "now",
            "update",
            "README",
            "so",
            "it",
            "mentions",
            "this.",
        ];
        let mut s = String::with_capacity(len + 64);
        while s.len() < len {
            s.push_str(WORDS[usize::try_from(rng.below(WORDS.len() as u64)).unwrap_or(0)]);
            s.push(match rng.below(16) {
                0 => '\n',
                1 => '\t',
                _ => ' ',
            });
        }
        s
    }

    /// What was written.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Counts {
        pub lines: u64,
        /// Every byte, seal lines included.
        pub bytes: u64,
        /// Seal lines (one after each line, as the driver seals each write).
        pub seals: u64,
        pub claude: u64,
        pub codex: u64,
        pub hangar: u64,
    }

    /// Writes run-log lines: segments of one harness process each (`hangar.started`, then
    /// Claude Code, 4 in 5, or Codex), with commands, approvals and trees.
    pub struct LogGen {
        rng: Rng,
        pool: String,
        queue: VecDeque<(u8, String)>,
        run: String,
        seq: u64,
        approvals: u64,
        /// Seals every line as the driver seals a write (`hangar_protocol::logseal`).
        sealer: Option<hangar_protocol::logseal::Sealer>,
    }

    const CLAUDE: u8 = 0;
    const CODEX: u8 = 1;
    const HANGAR: u8 = 2;

    impl LogGen {
        pub fn new(seed: u64, run: &str) -> LogGen {
            let mut rng = Rng::new(seed);
            let pool = text_pool(&mut rng, 1 << 20);
            LogGen {
                rng,
                pool,
                queue: VecDeque::new(),
                run: run.to_owned(),
                seq: 0,
                approvals: 0,
                sealer: None,
            }
        }

        /// Every line written is followed by its seal with `key` for run `run`, as the driver
        /// writes its log.
        pub fn sealed(mut self, key: hangar_protocol::logseal::SealKey, run: &str) -> LogGen {
            self.sealer = Some(hangar_protocol::logseal::Sealer::new(key, run, 0));
            self
        }

        /// Writes `line` and its newline (and its seal, when sealing).
        fn line_out(&mut self, w: &mut impl Write, line: &str, c: &mut Counts) -> Res<()> {
            let wr = |e: io::Error| format!("write the log: {e}");
            let mut bytes = Vec::with_capacity(line.len() + 128);
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
            c.bytes += bytes.len() as u64;
            if let Some(sealer) = &mut self.sealer {
                let seal = sealer.seal(&[&bytes]);
                sealer.written();
                c.bytes += seal.len() as u64;
                c.seals += 1;
                bytes.extend_from_slice(&seal);
            }
            w.write_all(&bytes).map_err(wr)
        }

        /// About `len` bytes of the pool, as a JSON string literal.
        fn text(&mut self, lo: usize, hi: usize) -> String {
            let len = self.rng.range(lo, hi).min(self.pool.len() / 2);
            let mut start = self.rng.range(0, self.pool.len() - len - 8);
            while !self.pool.is_char_boundary(start) {
                start += 1;
            }
            let mut end = start + len;
            while !self.pool.is_char_boundary(end) {
                end += 1;
            }
            serde_json::to_string(&self.pool[start..end]).unwrap_or_default()
        }

        /// A tool output: mostly short, sometimes long.
        fn output(&mut self) -> String {
            match self.rng.below(100) {
                0..70 => self.text(10, 400),
                70..95 => self.text(400, 3000),
                _ => self.text(3000, 12000),
            }
        }

        fn push(&mut self, who: u8, line: String) {
            self.queue.push_back((who, line));
        }

        fn hangar(&mut self, l: HangarLine) {
            self.push(HANGAR, l.to_json());
        }

        fn command(&mut self, kind: &str) {
            self.seq += 1;
            let seq = self.seq;
            let name = format!("{seq:010}-{}.cmd", self.rng.hex(8));
            self.hangar(HangarLine::Command {
                name,
                seq,
                kind: kind.into(),
                outcome: hangar_protocol::runlog::CommandOutcome::Done,
                // As a real driver writes it: the command's sealed sender.
                person: Some("ada@example.com".into()),
                text: None,
            });
        }

        fn segment(&mut self) {
            let codex = self.rng.percent(20);
            self.hangar(HangarLine::Started {
                run: self.run.clone(),
                harness: if codex { "codex" } else { "claude" }.into(),
                policy: "ask".into(),
                driver_pid: 4242,
                harness_pid: 4243,
                uid_split: false,
                agent_uid: None,
                driver_version: "0.1.0".into(),
                argv: Vec::new(),
                hooks: Vec::new(),
            });
            let turns = self.rng.range(3, 12);
            if codex {
                self.codex(turns);
            } else {
                self.claude(turns);
            }
        }

        fn claude(&mut self, turns: usize) {
            let session = self.rng.uuid();
            let mut cost = 0.0f64;
            let msg_tail = |g: &mut LogGen, session: &str| {
                format!(
                    r#"],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"cache_creation_input_tokens":{},"cache_read_input_tokens":{},"output_tokens":{},"service_tier":"standard"}}}},"parent_tool_use_id":null,"session_id":"{session}","uuid":"{}"}}"#,
                    g.rng.below(10),
                    g.rng.below(5000),
                    g.rng.below(90000),
                    g.rng.below(800),
                    g.rng.uuid()
                )
            };
            let msg_head = |g: &mut LogGen| {
                format!(
                    r#"{{"type":"assistant","message":{{"id":"msg_01{}","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":["#,
                    g.rng.hex(22)
                )
            };
            for t in 0..turns {
                self.command(if t == 0 { "prompt" } else { "steer" });
                let init = format!(
                    r#"{{"type":"system","subtype":"init","cwd":"/work/repo","session_id":"{session}","tools":["Task","Bash","Glob","Grep","Read","Edit","Write","TodoWrite"],"mcp_servers":[],"model":"claude-sonnet-4-5-20250929","permissionMode":"default","slash_commands":["compact","review"],"apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.0.0","output_style":"default","uuid":"{}"}}"#,
                    self.rng.uuid()
                );
                self.push(CLAUDE, init);
                let tools = self.rng.range(1, 10);
                for _ in 0..tools {
                    if self.rng.percent(60) {
                        let (head, text) = (msg_head(self), self.text(40, 900));
                        let tail = msg_tail(self, &session);
                        self.push(
                            CLAUDE,
                            format!(r#"{head}{{"type":"text","text":{text}}}{tail}"#),
                        );
                    }
                    let id = format!("toolu_01{}", self.rng.hex(22));
                    let (name, input) = match self.rng.below(5) {
                        0 => ("Read", json!({"file_path": "/work/repo/src/lib.rs"})),
                        1 => (
                            "Edit",
                            json!({"file_path": "/work/repo/src/lib.rs", "old_string": "let x = 1;", "new_string": "let x = 2;"}),
                        ),
                        2 => (
                            "Grep",
                            json!({"pattern": "fn main", "path": "/work/repo", "output_mode": "content"}),
                        ),
                        _ => (
                            "Bash",
                            json!({"command": "cargo test --workspace 2>&1 | tail -20", "description": "Run the tests"}),
                        ),
                    };
                    let head = msg_head(self);
                    let tail = msg_tail(self, &session);
                    self.push(
                        CLAUDE,
                        format!(
                            r#"{head}{{"type":"tool_use","id":"{id}","name":"{name}","input":{input}}}{tail}"#
                        ),
                    );
                    if self.rng.percent(10) {
                        self.approvals += 1;
                        let request_id = format!("req-{}", self.approvals);
                        self.hangar(HangarLine::Approval {
                            request_id: request_id.clone(),
                            tool_name: name.into(),
                            input: input.clone(),
                            tool_use_id: Some(id.clone()),
                        });
                        self.command("approve");
                        self.hangar(HangarLine::ApprovalAnswered {
                            request_id,
                            decision: hangar_protocol::runlog::ApprovalDecision::Allow,
                            by: "command".into(),
                            seq: Some(self.seq),
                            person: Some("ada@example.com".into()),
                            note: None,
                            updated_input: None,
                        });
                    }
                    if self.rng.percent(5) {
                        let desc = self.text(20, 120);
                        let line = format!(
                            r#"{{"type":"system","subtype":"task_started","task_id":"{}","description":{desc},"session_id":"{session}","uuid":"{}"}}"#,
                            self.rng.hex(9),
                            self.rng.uuid()
                        );
                        self.push(CLAUDE, line);
                    }
                    let out = self.output();
                    let is_error = self.rng.percent(5);
                    let line = format!(
                        r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"{id}","type":"tool_result","content":{out},"is_error":{is_error}}}]}},"parent_tool_use_id":null,"session_id":"{session}","uuid":"{}"}}"#,
                        self.rng.uuid()
                    );
                    self.push(CLAUDE, line);
                    if self.rng.percent(40) {
                        let line = format!(
                            r#"{{"type":"hangar.tree","tool_use_id":"{id}","tree":"{}","ms":{}}}"#,
                            self.rng.hex(64),
                            self.rng.below(40)
                        );
                        self.push(HANGAR, line);
                    }
                }
                let (head, text) = (msg_head(self), self.text(40, 600));
                let tail = msg_tail(self, &session);
                self.push(
                    CLAUDE,
                    format!(r#"{head}{{"type":"text","text":{text}}}{tail}"#),
                );
                cost += self.rng.below(50_000) as f64 / 1e6;
                let result = self.text(40, 600);
                let line = format!(
                    r#"{{"type":"result","subtype":"success","is_error":false,"duration_ms":{},"duration_api_ms":{},"num_turns":{},"result":{result},"session_id":"{session}","total_cost_usd":{cost},"usage":{{"input_tokens":{},"cache_creation_input_tokens":{},"cache_read_input_tokens":{},"output_tokens":{},"server_tool_use":{{"web_search_requests":0}},"service_tier":"standard"}},"permission_denials":[],"uuid":"{}","hangar_process_usage":{{"input_tokens":1,"output_tokens":2,"cache_creation_input_tokens":3,"cache_read_input_tokens":4}}}}"#,
                    self.rng.below(90_000),
                    self.rng.below(80_000),
                    tools + 1,
                    self.rng.below(100),
                    self.rng.below(10_000),
                    self.rng.below(200_000),
                    self.rng.below(5_000),
                    self.rng.uuid()
                );
                self.push(CLAUDE, line);
            }
        }

        fn codex(&mut self, turns: usize) {
            let thread = self.rng.uuid();
            self.push(
                CODEX,
                format!(r#"{{"type":"thread.started","thread_id":"{thread}"}}"#),
            );
            let mut item = 0u64;
            for t in 0..turns {
                self.command(if t == 0 { "prompt" } else { "steer" });
                self.push(CODEX, r#"{"type":"turn.started"}"#.to_owned());
                let tools = self.rng.range(1, 10);
                for _ in 0..tools {
                    let text = self.text(40, 400);
                    self.push(
                        CODEX,
                        format!(
                            r#"{{"type":"item.completed","item":{{"id":"item_{item}","type":"reasoning","text":{text}}}}}"#
                        ),
                    );
                    item += 1;
                    if self.rng.percent(25) {
                        self.push(
                            CODEX,
                            format!(
                                r#"{{"type":"item.completed","item":{{"id":"item_{item}","type":"file_change","changes":[{{"path":"/work/repo/src/lib.rs","kind":"update"}}],"status":"completed"}}}}"#
                            ),
                        );
                        item += 1;
                        continue;
                    }
                    let cmd = r#""bash -lc 'cargo test --workspace'""#;
                    self.push(
                        CODEX,
                        format!(
                            r#"{{"type":"item.started","item":{{"id":"item_{item}","type":"command_execution","command":{cmd},"aggregated_output":"","exit_code":null,"status":"in_progress"}}}}"#
                        ),
                    );
                    if self.rng.percent(10) {
                        self.approvals += 1;
                        let request_id = format!("req-{}", self.approvals);
                        let call = format!("call_{}", self.rng.hex(12));
                        self.hangar(HangarLine::Approval {
                            request_id: request_id.clone(),
                            tool_name: "commandExecution".into(),
                            input: json!({"command": "bash -lc 'cargo test --workspace'"}),
                            tool_use_id: Some(call),
                        });
                        self.command("approve");
                        self.hangar(HangarLine::ApprovalAnswered {
                            request_id,
                            decision: hangar_protocol::runlog::ApprovalDecision::Allow,
                            by: "command".into(),
                            seq: Some(self.seq),
                            person: Some("ada@example.com".into()),
                            note: None,
                            updated_input: None,
                        });
                    }
                    let out = self.output();
                    let code = if self.rng.percent(10) { 1 } else { 0 };
                    self.push(
                        CODEX,
                        format!(
                            r#"{{"type":"item.completed","item":{{"id":"item_{item}","type":"command_execution","command":{cmd},"aggregated_output":{out},"exit_code":{code},"status":"completed"}}}}"#
                        ),
                    );
                    item += 1;
                }
                let text = self.text(40, 600);
                self.push(
                    CODEX,
                    format!(
                        r#"{{"type":"item.completed","item":{{"id":"item_{item}","type":"agent_message","text":{text}}}}}"#
                    ),
                );
                item += 1;
                let line = format!(
                    r#"{{"type":"turn.completed","usage":{{"input_tokens":{},"cached_input_tokens":{},"output_tokens":{}}}}}"#,
                    self.rng.below(200_000),
                    self.rng.below(150_000),
                    self.rng.below(5_000)
                );
                self.push(CODEX, line);
            }
        }

        /// Writes exactly `lines` lines; with `turn_end`, the last one is `hangar.turn_end`.
        pub fn write(&mut self, path: &Path, lines: u64, turn_end: bool) -> Res<Counts> {
            let f = File::create(path).map_err(err(format!("create {}", path.display())))?;
            let mut w = BufWriter::with_capacity(1 << 20, f);
            let mut c = Counts::default();
            let wr = |e: io::Error| format!("write the log: {e}");
            let body = if turn_end { lines - 1 } else { lines };
            while c.lines < body {
                let (who, line) = match self.queue.pop_front() {
                    Some(x) => x,
                    None => {
                        self.segment();
                        continue;
                    }
                };
                // A few hundred lines are parsed back: the generator must write valid JSON.
                if c.lines < 500 {
                    serde_json::from_str::<Value>(&line)
                        .map_err(err(format!("generated line {} is not JSON", c.lines)))?;
                }
                self.line_out(&mut w, &line, &mut c)?;
                c.lines += 1;
                match who {
                    CLAUDE => c.claude += 1,
                    CODEX => c.codex += 1,
                    _ => c.hangar += 1,
                }
            }
            if turn_end {
                let line = HangarLine::TurnEnd {
                    status: 0,
                    reason: "result".into(),
                    handed_back: Vec::new(),
                    verify: None,
                    verify_rounds: None,
                }
                .to_json();
                self.line_out(&mut w, &line, &mut c)?;
                c.lines += 1;
                c.hangar += 1;
            }
            w.flush().map_err(wr)?;
            Ok(c)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bench 1: ingest.
// ---------------------------------------------------------------------------------------------

mod ingest {
    use super::db::{
        Db, Digest, check_stored, digest_events, float_losses, seed_base, seed_run, stored,
    };
    use super::*;

    const DEFAULT_LINES: u64 = 1_000_000;
    /// PostgreSQL rows run on the log's first lines only (its per-row path is slow).
    const DEFAULT_PG_LINES: u64 = 200_000;
    /// Issue 22: the watcher parsed and stored at least this share of the parse-only rate.
    const TARGET_SQLITE_SHARE: f64 = 0.7;
    const TARGET_POSTGRES_SHARE: f64 = 0.5;
    const SEED: u64 = 0x9e37_79b9_7f4a_7c15;
    /// The run every pass stores the log under (each pass has a database of its own): the
    /// log's seals are made for it, with the run key [`RUN_KEY`].
    const RUN: &str = "bench-ingest";
    const RUN_KEY: [u8; 32] = [7; 32];
    /// The longest one pass may take.
    const PASS_TIMEOUT: Duration = Duration::from_secs(600);

    /// One measured pass over a log.
    struct Pass {
        label: String,
        lines: u64,
        bytes: u64,
        events: u64,
        time: Duration,
        /// This process's CPU seconds over the pass (all threads).
        cpu: f64,
        note: String,
    }

    /// A log and what it must add up to.
    struct Log {
        path: PathBuf,
        counts: loggen::Counts,
        truth: Digest,
    }

    impl Log {
        fn pass(
            &self,
            label: &str,
            events: u64,
            (time, cpu): (Duration, f64),
            note: String,
        ) -> Pass {
            Pass {
                label: label.into(),
                lines: self.counts.lines,
                bytes: self.counts.bytes,
                events,
                time,
                cpu,
                note,
            }
        }
    }

    fn lines_from_env(var: &str, default: u64) -> Res<u64> {
        match std::env::var(var) {
            Ok(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n >= 10)
                .ok_or_else(|| format!("{var}={v:?} is not a number >= 10")),
            Err(_) => Ok(default),
        }
    }

    pub fn run() -> Res<()> {
        let lines = lines_from_env("HANGAR_BENCH_LINES", DEFAULT_LINES)?;
        let dir = tempfile::tempdir().map_err(err("temp folder"))?;
        let ctl = dir.path().join("runs/bench-ingest.ctl");
        fs::create_dir_all(&ctl).map_err(err("create the control folder"))?;
        let path = ctl.join("run.log");
        let load_before = load();
        let t = Instant::now();
        let counts = loggen::LogGen::new(SEED, RUN)
            .sealed(seal_key(), RUN)
            .write(&path, lines, true)?;
        let gen_secs = t.elapsed().as_secs_f64();
        let pct = |n: u64| 100.0 * n as f64 / counts.lines as f64;
        println!(
            "ingest: a synthetic run log of {} lines, {:.1} MB (Claude Code {:.0}%, Codex {:.0}%, hangar.* {:.0}% of lines; avg {} bytes/line), written in {gen_secs:.1} s",
            counts.lines,
            counts.bytes as f64 / 1e6,
            pct(counts.claude),
            pct(counts.codex),
            pct(counts.hangar),
            counts.bytes / counts.lines
        );

        // Page cache warm-up, then the baseline.
        raw_read(&path)?;
        let (raw_lines, raw_bytes, raw_time) = raw_read(&path)?;
        ensure!(
            raw_lines == counts.lines + counts.seals && raw_bytes == counts.bytes,
            "read {raw_lines} lines / {raw_bytes} bytes back, wrote {} / {}",
            counts.lines,
            counts.bytes
        );
        let t = Instant::now();
        let (log, losses, usage) = truth_of(path, counts)?;
        println!(
            "  hangar_events::rebuild of the log: {} events ({:.2} per line) in {:.1} s; every row below is checked against it",
            log.truth.count,
            log.truth.count as f64 / counts.lines as f64,
            t.elapsed().as_secs_f64()
        );
        if losses > 0 {
            println!(
                "  NOTE: {losses} of {usage} usage events do not survive a JSON round trip: read back from the store, their cost_usd differs from the rebuild in the last bit (serde_json parses floats without its `float_roundtrip` feature); rows are compared as events read back"
            );
        }

        let mut rows = Vec::new();
        let (events, time) = unsealed_parse_pass(&log.path)?;
        ensure!(
            events == log.truth.count,
            "parse only, seals unchecked: {events} events, rebuild {}",
            log.truth.count
        );
        rows.push(log.pass(
            "parse only, seals not checked (as logs before seals were read)",
            events,
            time,
            String::new(),
        ));
        let (events, time) = parse_pass(&log.path, false)?;
        ensure!(
            events == log.truth.count,
            "parse only: {events} events, rebuild {}",
            log.truth.count
        );
        // The baseline of the targets: what the watcher's own reader parses alone.
        let parse_rate = events as f64 / time.0.as_secs_f64();
        rows.push(log.pass(
            "parse only, seals checked (hangar_events::LogReader, 1 MiB slices)",
            events,
            time,
            String::new(),
        ));
        let (events, time) = parse_pass(&log.path, true)?;
        ensure!(
            events == log.truth.count,
            "parse + convert: {events} events"
        );
        rows.push(log.pass(
            "parse + the watcher's encoding to JSON text, no db",
            events,
            time,
            String::new(),
        ));

        let rt = runtime()?;
        let db_rows = rt.block_on(db_passes(dir.path(), &log));
        rt.shutdown_timeout(Duration::from_secs(10));
        let db_rows = db_rows?;
        rows.extend(db_rows);

        let secs = raw_time.as_secs_f64();
        println!(
            "  {:<66}{:>8}{:>7}{:>11}{:>11}{:>8}",
            "", "time s", "cpu s", "lines/s", "events/s", "MB/s"
        );
        println!(
            "  {:<66}{:>8.2}{:>7}{:>11.0}{:>11}{:>8.0}",
            "baseline: raw line read of the file (BufRead::read_until, 64 KiB)",
            secs,
            "-",
            raw_lines as f64 / secs,
            "-",
            raw_bytes as f64 / 1e6 / secs
        );
        for r in &rows {
            let s = r.time.as_secs_f64();
            println!(
                "  {:<66}{:>8.2}{:>7.2}{:>11.0}{:>11.0}{:>8.1}{}",
                r.label,
                s,
                r.cpu,
                r.lines as f64 / s,
                r.events as f64 / s,
                r.bytes as f64 / 1e6 / s,
                r.note
            );
        }
        println!(
            "  (the watcher reads and parses the next slice while one commits; the store writes a slice in multi-row INSERTs)"
        );
        println!("  load average {load_before} before, {} after", load());
        // Issue 22's targets: the watcher parsed and stored, beside the parse alone.
        for r in &rows {
            let (backend, share) = if r.label.starts_with("SQLite: the control plane's watcher") {
                ("SQLite", TARGET_SQLITE_SHARE)
            } else if r
                .label
                .starts_with("PostgreSQL: the control plane's watcher")
            {
                ("PostgreSQL", TARGET_POSTGRES_SHARE)
            } else {
                continue;
            };
            let rate = r.events as f64 / r.time.as_secs_f64();
            let ratio = rate / parse_rate;
            println!(
                "ingest target: the watcher on {backend} >= {share}x the parse alone ({:.1}k events/s) -> {:.1}k events/s, {ratio:.2}x: {}",
                parse_rate / 1e3,
                rate / 1e3,
                verdict(ratio >= share)
            );
            figure(
                &format!("control: ingest, {} lines, watcher on {backend}", r.lines),
                rate,
                "events/s",
                "parse only (seals checked), events/s",
                parse_rate,
                &format!(">= {share}x"),
                Some(ratio >= share),
            );
        }
        Ok(())
    }

    /// The rebuild of a log as the digest every stored copy must equal; and how many of its
    /// events do not survive a JSON round trip, of how many `usage` events.
    /// The seal key of [`RUN`]'s log.
    fn seal_key() -> hangar_protocol::logseal::SealKey {
        hangar_protocol::logseal::SealKey::derive(&hangar_protocol::RunKey::from_bytes(RUN_KEY))
    }

    /// How the control plane reads [`RUN`]'s log: sealed, in a plain folder, so not trusted
    /// (the assistant's text is marked).
    fn mode() -> Option<hangar_events::LogMode> {
        Some(hangar_events::LogMode {
            sealed: true,
            trusted: false,
            why: None,
        })
    }

    fn reader() -> hangar_events::LogReader {
        hangar_events::LogReader::new().sealed(seal_key(), RUN)
    }

    fn truth_of(path: PathBuf, counts: loggen::Counts) -> Res<(Log, u64, usize)> {
        let events = hangar_events::rebuild_with(&path, &reader(), mode());
        ensure!(
            !events.iter().any(|e| matches!(
                &e.kind,
                hangar_events::EventKind::Warning { message } if message.starts_with("rebuild stopped")
            )),
            "hangar_events::rebuild of {} stopped early",
            path.display()
        );
        let losses = float_losses(&events);
        let usage = events
            .iter()
            .filter(|e| matches!(e.kind, hangar_events::EventKind::Usage { .. }))
            .count();
        let log = Log {
            truth: digest_events(&events),
            path,
            counts,
        };
        Ok((log, losses, usage))
    }

    fn raw_read(path: &Path) -> Res<(u64, u64, Duration)> {
        let t = Instant::now();
        let f = File::open(path).map_err(err("open the log"))?;
        let mut r = BufReader::with_capacity(64 << 10, f);
        let mut buf = Vec::with_capacity(64 << 10);
        let (mut lines, mut bytes) = (0u64, 0u64);
        loop {
            buf.clear();
            let n = r.read_until(b'\n', &mut buf).map_err(err("read the log"))?;
            if n == 0 {
                break;
            }
            lines += 1;
            bytes += n as u64;
        }
        std::hint::black_box(&buf);
        Ok((lines, bytes, t.elapsed()))
    }

    /// A pass found no complete line at `cursor`: that must be the end of the file.
    fn stopped_at(path: &Path, cursor: u64) -> Res<()> {
        let len = fs::metadata(path).map(|m| m.len());
        if len.as_ref().is_ok_and(|l| *l == cursor) {
            return Ok(());
        }
        let again = hangar_events::LogReader::new()
            .read_from(path, cursor, 1 << 20)
            .map(|(lines, c)| (lines.len(), c));
        Err(format!(
            "hangar_events::ingest stopped at byte {cursor} of {}: file size now {len:?}; read again: {again:?}",
            path.display()
        ))
    }

    /// Reads and parses the whole log in the watcher's slices; with `convert`, also turns each
    /// slice into `NewEvent`s and serializes the parser state, as the watcher does before a
    /// commit. Returns the number of events.
    fn parse_pass(path: &Path, convert: bool) -> Res<(u64, (Duration, f64))> {
        let t = Timer::start();
        let mut ctx = ParseContext::with_log(mode());
        let (mut cursor, mut events) = (0u64, 0u64);
        let reader = reader();
        loop {
            let batch = reader
                .ingest(
                    path,
                    cursor,
                    hangar_events::watcher::DEFAULT_MAX_BYTES,
                    &mut ctx,
                )
                .map_err(err("ingest"))?;
            if batch.new_cursor == cursor {
                stopped_at(path, cursor)?;
                break;
            }
            events += batch.events.len() as u64;
            if convert {
                let new: Vec<EncodedEvent> = batch.events.iter().map(stored).collect();
                let state = serde_json::to_value(&ctx).ok();
                std::hint::black_box((new, state));
            }
            cursor = batch.new_cursor;
        }
        Ok((events, t.stop()))
    }

    /// [`parse_pass`] reading every line as logs were read before seals (the seal lines are
    /// lines of an unknown `hangar.*` type), untrusted: the same events, no MAC checked.
    fn unsealed_parse_pass(path: &Path) -> Res<(u64, (Duration, f64))> {
        let t = Timer::start();
        let mut ctx = ParseContext::with_log(Some(hangar_events::LogMode {
            sealed: false,
            trusted: false,
            why: None,
        }));
        let (mut cursor, mut events) = (0u64, 0u64);
        loop {
            let batch = hangar_events::ingest(path, cursor, &mut ctx).map_err(err("ingest"))?;
            if batch.new_cursor == cursor {
                stopped_at(path, cursor)?;
                break;
            }
            events += batch.events.len() as u64;
            cursor = batch.new_cursor;
        }
        Ok((events, t.stop()))
    }

    async fn db_passes(dir: &Path, log: &Log) -> Res<Vec<Pass>> {
        let mut rows = Vec::new();
        let workdir = dir.join("work");
        fs::create_dir_all(&workdir).map_err(err("work folder"))?;
        // Each row gets a fresh database.
        let sqlite = |name: &str| Db::sqlite(dir, name);
        let db = sqlite("store");
        let r = commit_pass(
            &db,
            &workdir,
            log,
            "SQLite: parse + Store::commit_events_with_state",
        )
        .await;
        db.cleanup().await;
        rows.push(r?);
        let db = sqlite("watcher");
        let r = watcher_pass(
            &db,
            &workdir,
            log,
            "SQLite: the control plane's watcher (reattach -> every event stored)",
        )
        .await;
        db.cleanup().await;
        rows.push(r?);

        let Some(base) = std::env::var("HANGAR_TEST_DATABASE_URL")
            .ok()
            .filter(|v| !v.is_empty())
        else {
            println!(
                "  PostgreSQL: skipped (HANGAR_TEST_DATABASE_URL is not set; `url=$(scripts/start-postgres) && export \"$url\"`)"
            );
            return Ok(rows);
        };
        // PostgreSQL on a shorter log from the same generator (same seed, so the same first
        // lines), ending with the turn's end as the long one does (the watcher row waits for it).
        let pg_lines = lines_from_env("HANGAR_BENCH_PG_LINES", DEFAULT_PG_LINES)?;
        let pg_log = if pg_lines >= log.counts.lines {
            None
        } else {
            let ctl = dir.join("runs/bench-ingest-pg.ctl");
            fs::create_dir_all(&ctl).map_err(err("create the control folder"))?;
            let path = ctl.join("run.log");
            let counts = loggen::LogGen::new(SEED, RUN)
                .sealed(seal_key(), RUN)
                .write(&path, pg_lines, true)?;
            Some(truth_of(path, counts)?.0)
        };
        let pg_log = pg_log.as_ref().unwrap_or(log);
        println!(
            "  PostgreSQL rows: {} (a fresh schema each), on a log of {} lines ({} events; HANGAR_BENCH_PG_LINES)",
            db::redact(&base),
            pg_log.counts.lines,
            pg_log.truth.count
        );
        let db = Db::postgres(&base, dir).await?;
        let r = commit_pass(
            &db,
            &workdir,
            pg_log,
            "PostgreSQL: parse + Store::commit_events_with_state",
        )
        .await;
        db.cleanup().await;
        rows.push(r?);
        let db = Db::postgres(&base, dir).await?;
        let r = watcher_pass(
            &db,
            &workdir,
            pg_log,
            "PostgreSQL: the control plane's watcher (reattach -> every event stored)",
        )
        .await;
        db.cleanup().await;
        rows.push(r?);
        Ok(rows)
    }

    /// A live run for the log on a fresh store.
    async fn store_with_run(
        db: &Db,
        workdir: &Path,
        log: &Log,
        pid: Option<i64>,
    ) -> Res<(Store, String)> {
        let store = db.open().await?;
        seed_base(&store, workdir).await?;
        let ctl = log.path.parent().ok_or("log folder")?;
        let run = RUN.to_owned();
        seed_run(&store, &run, ctl, &Secret::new(RUN_KEY.to_vec()), pid).await?;
        Ok((store, run))
    }

    /// The watcher's loop without the watcher and one step at a time: read + parse a slice,
    /// convert, commit events, cursor and state in one transaction; then the stored events are
    /// read back and checked.
    async fn commit_pass(db: &Db, workdir: &Path, log: &Log, label: &str) -> Res<Pass> {
        let (store, run) = store_with_run(db, workdir, log, None).await?;
        let t = Timer::start();
        let deadline = Instant::now() + PASS_TIMEOUT;
        let mut ctx = ParseContext::with_log(mode());
        let (mut cursor, mut events, mut slices) = (0u64, 0u64, 0u64);
        let reader = reader();
        loop {
            ensure!(
                Instant::now() < deadline,
                "{label}: not done within {PASS_TIMEOUT:?}"
            );
            let batch = reader
                .ingest(
                    &log.path,
                    cursor,
                    hangar_events::watcher::DEFAULT_MAX_BYTES,
                    &mut ctx,
                )
                .map_err(err("ingest"))?;
            if batch.new_cursor == cursor {
                stopped_at(&log.path, cursor)?;
                break;
            }
            let new: Vec<EncodedEvent> = batch.events.iter().map(stored).collect();
            let state = serde_json::to_value(&ctx).ok();
            let (from, to) = (cursor as i64, batch.new_cursor as i64);
            let n = store
                .commit_events_with_state(&run, from, to, &new, state.as_ref())
                .await
                .map_err(err("commit_events_with_state"))?
                .len();
            ensure!(n == new.len(), "{label}: {n} ids for {} events", new.len());
            events += n as u64;
            slices += 1;
            cursor = batch.new_cursor;
        }
        let time = t.stop();
        let r = store.run(&run).await.map_err(err("read the run"))?;
        ensure!(
            r.log_cursor as u64 == log.counts.bytes,
            "{label}: cursor {} != log size {}",
            r.log_cursor,
            log.counts.bytes
        );
        check_stored(&store, &run, &log.path, &log.truth)
            .await
            .map_err(|e| format!("{label}: {e}"))?;
        store.close().await;
        Ok(log.pass(
            label,
            events,
            time,
            format!("  ({slices} commits, checked)"),
        ))
    }

    /// The control plane's own watcher on the log (its run's driver pid is this process): from
    /// `ControlPlane::new` + `reattach` until every event is stored (the run's cursor at the
    /// log's end: the row's time), then until the run ended (the log's last line is
    /// `hangar.turn_end`; ending copies the run's files, the whole log among them, into
    /// `kept/`: shown beside the row, not in it).
    async fn watcher_pass(db: &Db, workdir: &Path, log: &Log, label: &str) -> Res<Pass> {
        let pid = i64::from(std::process::id());
        let (store, run) = store_with_run(db, workdir, log, Some(pid)).await?;
        let tools = Tools {
            home: workdir.to_owned(),
            driver: PathBuf::from("/nonexistent/hangar-driver"),
            claude: PathBuf::from("claude"),
            codex: PathBuf::from("codex"),
            env: Vec::new(),
        };
        let t = Timer::start();
        let deadline = Instant::now() + PASS_TIMEOUT;
        let plane = ControlPlane::new(store.clone(), tools);
        let n = plane.reattach().await.map_err(err("reattach"))?;
        ensure!(n == 1, "reattach found {n} runs");
        let mut stored_at = None;
        loop {
            let r = store.run(&run).await.map_err(err("read the run"))?;
            if stored_at.is_none() && r.log_cursor as u64 == log.counts.bytes {
                stored_at = Some(t.stop());
            }
            if r.state == RunState::Ended {
                ensure!(
                    r.log_cursor as u64 == log.counts.bytes,
                    "{label}: the run ended at cursor {} of {}",
                    r.log_cursor,
                    log.counts.bytes
                );
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "{label}: not done within {PASS_TIMEOUT:?} (cursor {})",
                r.log_cursor
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ended = t.stop().0;
        let time = stored_at.ok_or("the run ended before its cursor reached the log's end")?;
        let stored = check_stored(&store, &run, &log.path, &log.truth)
            .await
            .map_err(|e| format!("{label}: {e}"))?;
        drop(plane);
        store.close().await;
        Ok(log.pass(
            label,
            stored,
            time,
            format!(
                "  (checked; the turn ended, its files kept, {:.2} s later)",
                ended.saturating_sub(time.0).as_secs_f64()
            ),
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Bench 2: re-attach.
// ---------------------------------------------------------------------------------------------

mod reattach {
    use super::db::{Db, check_stored, digest_events, seed_base, seed_run, stored};
    use super::*;

    const DEFAULT_RUNS: usize = 1000;
    /// Lines of each run's log (a few turns of a small run).
    const LOG_LINES: u64 = 40;
    const TARGET: Duration = Duration::from_secs(2);
    const TARGET_RSS_MIB: f64 = 200.0;
    const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(120);
    /// How long the watchers are watched once caught up (nothing left to read).
    /// Long enough for the idle watchers' slow checks to count (every 30 s for these runs,
    /// whose driver's exit would wake them: `watch.rs`).
    const IDLE: Duration = Duration::from_secs(32);

    struct Seeded {
        run: String,
        log: PathBuf,
        len: u64,
        cursor: u64,
        state: ParseContext,
    }

    pub fn run() -> Res<()> {
        let runs = match std::env::var("HANGAR_BENCH_RUNS") {
            Ok(v) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("HANGAR_BENCH_RUNS={v:?} is not a positive number"))?,
            Err(_) => DEFAULT_RUNS,
        };
        let dir = tempfile::tempdir().map_err(err("temp folder"))?;
        let home = dir.path().join("home");
        let work = dir.path().join("work");
        fs::create_dir_all(&work).map_err(err("work folder"))?;
        let db = Db::sqlite(dir.path(), "hangar");
        let load_before = load();

        // Seed in a runtime of its own, dropped before the measurement.
        let t = Instant::now();
        let seeded = {
            let rt = runtime()?;
            let r = rt.block_on(seed(&db, &home, &work, runs));
            rt.shutdown_timeout(Duration::from_secs(10));
            r?
        };
        let left: u64 = seeded.iter().map(|s| s.len - s.cursor).sum();
        let total: u64 = seeded.iter().map(|s| s.len).sum();
        println!(
            "re-attach: {runs} live runs on SQLite, each with a real log of {LOG_LINES} lines (avg {:.1} KB) and a saved cursor half-way; {:.1} MB left to commit in all; seeded in {:.1} s",
            total as f64 / runs as f64 / 1e3,
            left as f64 / 1e6,
            t.elapsed().as_secs_f64()
        );

        // Baseline work: the same tails read and parsed from the saved cursors, in one thread,
        // no store.
        let t = Instant::now();
        let mut tail_events = 0u64;
        for s in &seeded {
            let mut ctx = s.state.clone();
            let mut cursor = s.cursor;
            loop {
                let b = hangar_events::ingest(&s.log, cursor, &mut ctx).map_err(err("ingest"))?;
                if b.new_cursor == cursor {
                    break;
                }
                tail_events += b.events.len() as u64;
                cursor = b.new_cursor;
            }
        }
        let parse_tails = t.elapsed();

        let before = mem();
        let hwm_reset = reset_hwm();
        let rt = runtime()?;
        let r = rt.block_on(measure(&db, &home, &seeded, before));
        // Stop the watchers: their tasks die with the runtime.
        let t = Instant::now();
        rt.shutdown_timeout(Duration::from_secs(10));
        let stop = t.elapsed();
        let m = r?;
        // The same-run baseline for idle watching: the previous watcher's idle loop (issue 22's
        // "10 polls a second"), run for as many runs with no other watcher running: stat the
        // log every 100 ms, look at /proc/<pid> once a second.
        let previous_idle = {
            let rt = runtime()?;
            let logs: Vec<PathBuf> = seeded.iter().map(|s| s.log.clone()).collect();
            let cpu = rt.block_on(previous_idle_cpu(logs, Duration::from_secs(4)));
            rt.shutdown_timeout(Duration::from_secs(10));
            cpu
        };
        // What one idle poll costs, piece by piece, with no watcher running.
        let costs = {
            let rt = runtime()?;
            let r = rt.block_on(idle_costs(&db, &seeded[0]));
            rt.shutdown_timeout(Duration::from_secs(10));
            r?
        };

        let rate = |d: Duration| tail_events as f64 / d.as_secs_f64();
        println!(
            "  {:<62}{:>10.3} s",
            "open the store + vault (Store::open, with_vault)",
            m.open.as_secs_f64()
        );
        println!(
            "  {:<62}{:>10.3} s",
            "ControlPlane::new + reattach() returned (watchers spawned)",
            m.reattached.as_secs_f64()
        );
        println!(
            "  {:<62}{:>10.3} s  ({tail_events} events, {:.0} events/s)",
            "every watcher's cursor at the end of its log (from the open)",
            m.all.as_secs_f64(),
            rate(m.all)
        );
        println!(
            "  {:<62}{:>10.3} s  ({:.0} events/s)",
            "baseline: the same tails read + parsed in one thread, no store",
            parse_tails.as_secs_f64(),
            rate(parse_tails)
        );
        println!(
            "  resident memory: {:.1} MB before re-attaching (baseline, {} threads); while {runs} watchers run: VmRSS up to {:.1} MB (+{:.1} MB), VmHWM {:.1} MB{}, {} threads",
            mib(before.rss_kib),
            before.threads,
            mib(m.max_rss_kib),
            mib(m.max_rss_kib.saturating_sub(before.rss_kib)),
            mib(m.hwm_kib),
            if hwm_reset {
                " (reset before re-attaching)"
            } else {
                " (since the process started)"
            },
            m.max_threads
        );
        println!(
            "  idle watching ({:.0} s, nothing new to read): {:.0}% of one CPU ({:.1} ms CPU per watcher per second); runtime shut down in {:.2} s",
            IDLE.as_secs_f64(),
            100.0 * m.idle_cpu,
            1e3 * m.idle_cpu / runs as f64,
            stop.as_secs_f64()
        );
        // The previous watcher looked ten times a second; this one wakes when its log changes,
        // its driver exits, or every 5 s for a slow check (issue 22).
        let polled = 100.0 * previous_idle;
        println!(
            "  baseline: the previous watcher's idle loop ({runs} tasks: stat the log every 100 ms, /proc/<pid> once a second), measured alone: {polled:.1}% of one CPU"
        );
        println!(
            "  one idle look, CPU us each (measured alone, {IDLE_OPS} times): {}",
            costs
                .iter()
                .map(|(what, us)| format!("{what} {us:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        println!(
            "  checked: every run's stored events equal hangar_events::rebuild of its log; load average {load_before} before, {} after",
            load()
        );
        let rss_mib = mib(m.max_rss_kib.max(m.hwm_kib));
        println!(
            "re-attach target: < {} s for {runs} runs -> {:.2} s: {}; resident memory < {TARGET_RSS_MIB:.0} MB while watching -> {rss_mib:.1} MB: {}",
            TARGET.as_secs(),
            m.all.as_secs_f64(),
            verdict(m.all < TARGET),
            verdict(rss_mib < TARGET_RSS_MIB)
        );
        figure(
            &format!("control: re-attach {runs} runs, all caught up"),
            m.all.as_secs_f64(),
            "s",
            "the same tails parsed in one thread, no store",
            parse_tails.as_secs_f64(),
            &format!("< {}", TARGET.as_secs()),
            Some(m.all < TARGET),
        );
        figure(
            &format!("control: re-attach {runs} runs vs one-thread parse"),
            m.all.as_secs_f64() / parse_tails.as_secs_f64(),
            "x",
            "issue 22's bound",
            10.0,
            "<= 10",
            Some(m.all.as_secs_f64() <= 10.0 * parse_tails.as_secs_f64()),
        );
        figure(
            &format!("control: idle watching {runs} runs"),
            100.0 * m.idle_cpu,
            "% of a CPU",
            "the previous watcher's idle loop, same run",
            polled,
            "< 1",
            Some(100.0 * m.idle_cpu < 1.0),
        );
        figure(
            &format!("control: resident memory watching {runs} runs"),
            rss_mib,
            "MB",
            "the same process before re-attaching",
            mib(before.rss_kib),
            &format!("< {TARGET_RSS_MIB:.0}"),
            Some(rss_mib < TARGET_RSS_MIB),
        );
        Ok(())
    }

    async fn seed(db: &Db, home: &Path, work: &Path, runs: usize) -> Res<Vec<Seeded>> {
        let store = db.open().await?;
        seed_base(&store, work).await?;
        let pid = i64::from(std::process::id());
        let key = Secret::new(vec![7; 32]);
        let mut out = Vec::with_capacity(runs);
        for i in 0..runs {
            let run = new_id("run").map_err(err("id"))?;
            let ctl = home.join("runs").join(format!("{run}.ctl"));
            fs::create_dir_all(&ctl).map_err(err("control folder"))?;
            let log = ctl.join("run.log");
            let counts =
                loggen::LogGen::new(1000 + i as u64, &run).write(&log, LOG_LINES, false)?;
            seed_run(&store, &run, &ctl, &key, Some(pid)).await?;
            // A watcher before the restart took the first half.
            let mut ctx = ParseContext::new();
            let batch = hangar_events::LogReader::new()
                .ingest(&log, 0, counts.bytes / 2, &mut ctx)
                .map_err(err("ingest"))?;
            let events: Vec<EncodedEvent> = batch.events.iter().map(stored).collect();
            let state = serde_json::to_value(&ctx).ok();
            store
                .commit_events_with_state(&run, 0, batch.new_cursor as i64, &events, state.as_ref())
                .await
                .map_err(err("commit the first half"))?;
            out.push(Seeded {
                run,
                log,
                len: counts.bytes,
                cursor: batch.new_cursor,
                state: ctx,
            });
        }
        store.close().await;
        Ok(out)
    }

    /// The CPU share (of one CPU) of the previous watcher's idle loop for each of `logs`, over
    /// `window`: a task per log that stats it every 100 ms and looks at this process's /proc
    /// entry once a second, as `watch.rs` did before its watchers were woken by events.
    async fn previous_idle_cpu(logs: Vec<PathBuf>, window: Duration) -> f64 {
        let pid = std::process::id();
        let stop = Instant::now() + window;
        let cpu0 = cpu_secs();
        let w0 = Instant::now();
        let tasks: Vec<_> = logs
            .into_iter()
            .map(|log| {
                tokio::spawn(async move {
                    let mut last_alive = Instant::now();
                    let mut seen = 0u64;
                    while Instant::now() < stop {
                        let len = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
                        seen = seen.max(len);
                        if last_alive.elapsed() >= Duration::from_secs(1) {
                            last_alive = Instant::now();
                            let _ = fs::read_to_string(format!("/proc/{pid}/stat"));
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    seen
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        (cpu_secs() - cpu0) / w0.elapsed().as_secs_f64()
    }

    /// Operations per idle-poll cost measurement.
    const IDLE_OPS: u32 = 3000;

    /// The CPU time (process, user + system) of each piece of a watcher's idle poll (`watch.rs`:
    /// `ingest` at the end of the log on the blocking pool, then `driver_alive`: the run's row
    /// from the store and `/proc/<pid>`), and of a `stat` of the log, the cheap check that
    /// could come first.
    async fn idle_costs(db: &Db, s: &Seeded) -> Res<Vec<(&'static str, f64)>> {
        let store = db.open().await?;
        let pid = std::process::id();
        let run = store.run(&s.run).await.map_err(err("run"))?;
        let cursor = u64::try_from(run.log_cursor).unwrap_or(0);
        let state: ParseContext = run
            .watch_state
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let per_op = |c0: f64| (cpu_secs() - c0) * 1e6 / f64::from(IDLE_OPS);
        let mut out = Vec::new();

        let c0 = cpu_secs();
        for _ in 0..IDLE_OPS {
            let (path, cx) = (s.log.clone(), state.clone());
            let b = tokio::task::spawn_blocking(move || {
                let mut cx = cx;
                hangar_events::ingest(&path, cursor, &mut cx).map(|b| (b, cx))
            })
            .await
            .map_err(err("blocking task"))?
            .map_err(err("ingest"))?;
            ensure!(b.0.new_cursor == cursor, "the log grew");
        }
        out.push(("ingest at EOF (spawn_blocking)", per_op(c0)));

        let c0 = cpu_secs();
        for _ in 0..IDLE_OPS {
            std::hint::black_box(store.run(&s.run).await.map_err(err("run"))?);
        }
        out.push(("store.run() (driver_alive)", per_op(c0)));

        let c0 = cpu_secs();
        for _ in 0..IDLE_OPS {
            let alive = Path::new(&format!("/proc/{pid}")).exists()
                && fs::read_to_string(format!("/proc/{pid}/stat")).is_ok();
            std::hint::black_box(alive);
        }
        out.push(("/proc/<pid> check", per_op(c0)));

        let c0 = cpu_secs();
        for _ in 0..IDLE_OPS {
            let len = fs::metadata(&s.log).map(|m| m.len()).unwrap_or(0);
            std::hint::black_box(len == cursor);
        }
        out.push(("vs: stat(run.log)", per_op(c0)));
        store.close().await;
        Ok(out)
    }

    struct Measured {
        open: Duration,
        reattached: Duration,
        all: Duration,
        max_rss_kib: u64,
        hwm_kib: u64,
        max_threads: u64,
        idle_cpu: f64,
    }

    async fn measure(db: &Db, home: &Path, seeded: &[Seeded], before: Mem) -> Res<Measured> {
        let ends: HashMap<&str, u64> = seeded.iter().map(|s| (s.run.as_str(), s.len)).collect();
        let mut max_rss = before.rss_kib;
        let mut max_threads = before.threads;
        let sample = |max_rss: &mut u64, max_threads: &mut u64| {
            let m = mem();
            *max_rss = (*max_rss).max(m.rss_kib);
            *max_threads = (*max_threads).max(m.threads);
        };
        let t0 = Instant::now();
        let store = db.open().await?;
        let open = t0.elapsed();
        let tools = Tools {
            home: home.to_owned(),
            driver: PathBuf::from("/nonexistent/hangar-driver"),
            claude: PathBuf::from("claude"),
            codex: PathBuf::from("codex"),
            env: Vec::new(),
        };
        let plane = ControlPlane::new(store.clone(), tools);
        let n = plane.reattach().await.map_err(err("reattach"))?;
        let reattached = t0.elapsed();
        ensure!(n == seeded.len(), "reattach found {n} live runs");
        let deadline = t0 + CATCH_UP_TIMEOUT;
        let all = loop {
            sample(&mut max_rss, &mut max_threads);
            let live = store.live_runs().await.map_err(err("live_runs"))?;
            let behind = live
                .iter()
                .filter(|r| {
                    ends.get(r.id.as_str())
                        .is_some_and(|&e| (r.log_cursor as u64) < e)
                })
                .count();
            ensure!(
                live.len() == seeded.len(),
                "{} runs are live, not {}",
                live.len(),
                seeded.len()
            );
            if behind == 0 {
                break t0.elapsed();
            }
            ensure!(
                Instant::now() < deadline,
                "{behind} watchers still behind after {CATCH_UP_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let cpu0 = cpu_secs();
        let w0 = Instant::now();
        while w0.elapsed() < IDLE {
            sample(&mut max_rss, &mut max_threads);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let idle_cpu = (cpu_secs() - cpu0) / w0.elapsed().as_secs_f64();
        sample(&mut max_rss, &mut max_threads);
        let hwm_kib = mem().hwm_kib;
        // Checked after the measurement: nothing lost, nothing twice across the restart.
        for s in seeded {
            let truth = digest_events(&hangar_events::rebuild(&s.log));
            check_stored(&store, &s.run, &s.log, &truth).await?;
        }
        Ok(Measured {
            open,
            reattached,
            all,
            max_rss_kib: max_rss,
            hwm_kib,
            max_threads,
            idle_cpu,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Bench 3: approval latency under load.
// ---------------------------------------------------------------------------------------------

mod approval {
    use super::db::{Db, check_stored, digest_events, seed_base, seed_run};
    use super::*;

    const DEFAULT_RUNS: usize = 200;
    /// Approvals each stub asks for, one after another, under load.
    const ROUNDS: u32 = 5;
    /// Approvals the lone baseline run asks for (odd ones through the control plane, even ones
    /// through the bare mailbox).
    const BASE_ROUNDS: u32 = 40;
    /// How long each stub's model thinks before a tool call in the first phase under load
    /// (`HANGAR_BENCH_THINK_MS`; half to one and a half times it, at random), as
    /// `scripts/load`'s does: 200 live runs whose agents call tools about once a second each.
    /// The lone baseline does not think (the stricter baseline: nothing else runs), nor does
    /// the second phase (a burst: each stub asks again the moment it is answered).
    const DEFAULT_THINK_MS: u64 = 1000;
    const PERSON: &str = "bench@example.com";
    /// The stub harness exits by itself after this long, whatever happens.
    const STUB_DEADLINE_S: u64 = 240;
    const PHASE_TIMEOUT: Duration = Duration::from_secs(150);
    const START_TIMEOUT: Duration = Duration::from_secs(60);

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Via {
        /// `ControlPlane::answer`.
        Plane,
        /// The bare mailbox: `Mailbox::request`, nothing recorded.
        Mailbox,
        /// [`answer_mirror`]: a step-by-step copy of the previous `answer`, timed per step.
        Traced,
    }

    /// One answer: when the call started and returned (CLOCK_MONOTONIC ns); for the mirrored
    /// paths, when each step ended (see [`answer_mirror`]).
    #[derive(Debug)]
    struct Sample {
        run: String,
        req: String,
        via: Via,
        t0: u64,
        t1: u64,
        steps: Option<[u64; 4]>,
    }

    struct Live {
        /// Its place among the runs started together.
        i: usize,
        run: String,
        turn: String,
        ctl: PathBuf,
        recv: PathBuf,
        mailbox: Mailbox,
        pid: u32,
    }

    /// The drivers this benchmark started: killed (by pid) and reaped unless they exited.
    struct Procs {
        list: Vec<std::process::Child>,
        pidfile: Option<File>,
    }

    impl Procs {
        fn new() -> Procs {
            let pidfile = std::env::var_os(PIDS_ENV)
                .and_then(|p| OpenOptions::new().create(true).append(true).open(p).ok());
            Procs {
                list: Vec::new(),
                pidfile,
            }
        }

        fn spawn(&mut self, mut cmd: Process, what: &str) -> Res<u32> {
            let child = cmd.spawn().map_err(err(format!("start {what}")))?;
            let pid = child.id();
            if let Some(f) = &mut self.pidfile {
                let _ = writeln!(f, "{pid}");
            }
            self.list.push(child);
            Ok(pid)
        }

        /// Waits for every process to exit; their exit codes.
        fn wait_all(&mut self, timeout: Duration) -> Res<Vec<Option<i32>>> {
            let deadline = Instant::now() + timeout;
            let mut codes = vec![None; self.list.len()];
            let mut done = vec![false; self.list.len()];
            loop {
                for (i, c) in self.list.iter_mut().enumerate() {
                    if !done[i]
                        && let Some(st) = c.try_wait().map_err(err("wait for a driver"))?
                    {
                        done[i] = true;
                        codes[i] = st.code();
                    }
                }
                let left = done.iter().filter(|d| !**d).count();
                if left == 0 {
                    return Ok(codes);
                }
                ensure!(
                    Instant::now() < deadline,
                    "{left} drivers still running after {timeout:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    impl Drop for Procs {
        fn drop(&mut self) {
            for c in &mut self.list {
                if matches!(c.try_wait(), Ok(None)) {
                    eprintln!("(killing driver pid {})", c.id());
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
    }

    fn driver_bin() -> Res<(PathBuf, &'static str)> {
        if let Some(p) = std::env::var_os("HANGAR_DRIVER_BIN").filter(|v| !v.is_empty()) {
            return Ok((PathBuf::from(p), "$HANGAR_DRIVER_BIN"));
        }
        let p = workspace_root().join("target/x86_64-unknown-linux-gnu/release/hangar-driver");
        ensure!(
            p.exists(),
            "no driver at {}: build the static driver with `scripts/build-driver`, or set HANGAR_DRIVER_BIN",
            p.display()
        );
        Ok((
            p,
            "the workspace's static release build (scripts/build-driver)",
        ))
    }

    pub fn run() -> Res<()> {
        let runs = match std::env::var("HANGAR_BENCH_APPROVAL_RUNS") {
            Ok(v) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    format!("HANGAR_BENCH_APPROVAL_RUNS={v:?} is not a positive number")
                })?,
            Err(_) => DEFAULT_RUNS,
        };
        let (driver, which) = driver_bin()?;
        let driver = driver.canonicalize().map_err(err("driver path"))?;
        let age = fs::metadata(&driver)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.elapsed().ok())
            .map_or_else(
                || "?".into(),
                |d| format!("{:.0} min", d.as_secs_f64() / 60.0),
            );
        let think_ms = match std::env::var("HANGAR_BENCH_THINK_MS") {
            Ok(v) => v
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("HANGAR_BENCH_THINK_MS={v:?} is not a number of ms"))?,
            Err(_) => DEFAULT_THINK_MS,
        };
        let stub = std::env::current_exe().map_err(err("this benchmark's executable"))?;
        let dir = tempfile::tempdir().map_err(err("temp folder"))?;
        let rt = runtime()?;
        let mut procs = Procs::new();
        let r = rt.block_on(bench(
            dir.path(),
            &driver,
            &stub,
            (runs, think_ms),
            &mut procs,
        ));
        rt.shutdown_timeout(Duration::from_secs(10));
        drop(procs);
        let report = r?;
        println!(
            "approval latency: from ControlPlane::answer() to the stub harness reading the control_response on its stdin (CLOCK_MONOTONIC on both sides), SQLite"
        );
        println!(
            "  driver: {} ({which}, built {age} ago); stub harness: this benchmark's binary ({STUB}) under `hangar-driver --policy ask --raw --`",
            driver.display()
        );
        print!("{report}");
        Ok(())
    }

    async fn bench(
        dir: &Path,
        driver: &Path,
        stub: &Path,
        (runs, think_ms): (usize, u64),
        procs: &mut Procs,
    ) -> Res<String> {
        let home = dir.join("home");
        let work = dir.join("work");
        let recv = dir.join("recv");
        for d in [&home, &work, &recv] {
            fs::create_dir_all(d).map_err(err("create a folder"))?;
        }
        let db = Db::sqlite(dir, "hangar");
        let store = db.open().await?;
        seed_base(&store, &work).await?;
        let tools = Tools {
            home: home.clone(),
            driver: driver.to_owned(),
            claude: PathBuf::from("claude"),
            codex: PathBuf::from("codex"),
            env: Vec::new(),
        };
        let plane = ControlPlane::new(store.clone(), tools);
        // The person's view of pending approvals: one query on a connection of its own, so
        // 200 pollers do not load the store's pool.
        let reader = {
            use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
            let opts = SqliteConnectOptions::new()
                .filename(db.file.clone().ok_or("no SQLite file")?)
                .read_only(true);
            SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(opts)
                .await
                .map_err(err("open a reader"))?
        };
        let ctx = Ctx {
            store: &store,
            home: &home,
            work: &work,
            recv: &recv,
            driver,
            stub,
        };
        let mut out = String::new();
        let load_before = load();

        // Baseline: one run alone.
        let base = start_run(&ctx, procs, BASE_ROUNDS, 0, 0).await?;
        wait_started(std::slice::from_ref(&base)).await?;
        let base_inotify = HashMap::from([(base.run.as_str(), has_inotify(base.pid))]);
        plane.reattach().await.map_err(err("reattach"))?;
        let base_samples = dispatch(
            &plane,
            &reader,
            std::slice::from_ref(&base),
            BASE_ROUNDS,
            &home,
            |_, n| if n % 2 == 1 { Via::Plane } else { Via::Mailbox },
        )
        .await?;
        wait_ended(&store, std::slice::from_ref(&base)).await?;
        let base_lat = latencies(
            std::slice::from_ref(&base),
            &base_samples,
            BASE_ROUNDS,
            &base_inotify,
        )?;

        // Under load: `runs` runs at once, every answer through ControlPlane::answer; then a
        // second phase: half through answer(), half through a timed copy of the previous
        // answer path (store reads before every command).
        let main = load_phase(&ctx, &plane, &reader, procs, runs, think_ms, |_, _| {
            Via::Plane
        })
        .await?;
        let diag = load_phase(&ctx, &plane, &reader, procs, runs, 0, |l, _| {
            if l.i % 2 == 0 {
                Via::Traced
            } else {
                Via::Plane
            }
        })
        .await?;
        reader.close().await;

        // Every driver exited 0 (the turn settled on the stub's `result`).
        let codes = procs.wait_all(Duration::from_secs(30))?;
        ensure!(
            codes.iter().all(|c| *c == Some(0)),
            "driver exit codes: {:?}",
            codes.iter().filter(|c| **c != Some(0)).collect::<Vec<_>>()
        );
        // The store agrees: turns ended 0, approvals answered by the person, events exactly
        // those of the log, the audit chain intact.
        let all_runs: Vec<&Live> = std::iter::once(&base)
            .chain(&main.live)
            .chain(&diag.live)
            .collect();
        for l in &all_runs {
            let turn = store.turn(&l.turn).await.map_err(err("turn"))?;
            ensure!(
                turn.state == TurnState::Ended && turn.status == Some(0),
                "run {}: turn {:?} status {:?}",
                l.run,
                turn.state,
                turn.status
            );
            let log = l.ctl.join("run.log");
            // Read as the watcher read it (a run whose agent could write its log has its text
            // marked unverified); its seals were checked then, with the run's key.
            let mode = store
                .run(&l.run)
                .await
                .map_err(err("run"))?
                .watch_state
                .and_then(|v| serde_json::from_value::<hangar_events::ParseContext>(v).ok())
                .and_then(|c| c.log)
                .map(|m| hangar_events::LogMode { sealed: false, ..m });
            let events =
                hangar_events::rebuild_with(&log, &hangar_events::LogReader::default(), mode);
            let truth = digest_events(&events);
            check_stored(&store, &l.run, &log, &truth).await?;
        }
        let answered = base_samples
            .iter()
            .chain(&main.samples)
            .chain(&diag.samples)
            .filter(|s| s.via != Via::Mailbox);
        for s in answered {
            let a = store
                .approval(&s.run, &s.req)
                .await
                .map_err(err("approval"))?;
            ensure!(
                a.answered_by.as_deref() == Some(PERSON),
                "approval {}/{} answered by {:?}",
                s.run,
                s.req,
                a.answered_by
            );
        }
        let audited = store.audit().verify().await.map_err(err("audit verify"))?;
        let p99 = |s: Option<Stats>| s.map_or_else(|| "-".into(), |s| format!("{:.1} ms", s.p99));

        let row = |out: &mut String, s: Option<Stats>, label: &str| {
            let _ = writeln!(out, "{}", Stats::row(s, label));
        };
        let via = |v: Via| move |l: &Lat| (l.via == v).then_some(l.to_harness);
        let _ = writeln!(
            out,
            "  {:<58}{:>6}{:>10}{:>10}{:>10}{:>10}",
            "ms", "n", "p50", "p90", "p99", "max"
        );
        row(
            &mut out,
            stats(&base_lat, via(Via::Plane)),
            "baseline, 1 run alone: answer() -> harness",
        );
        row(
            &mut out,
            stats(&base_lat, via(Via::Mailbox)),
            "baseline, 1 run alone: bare Mailbox::request -> harness",
        );
        row(
            &mut out,
            stats(&base_lat, |l| (l.via == Via::Plane).then_some(l.returned)),
            "baseline, 1 run alone: answer() returned (acked+recorded)",
        );
        let under = stats(&main.lat, via(Via::Plane));
        row(
            &mut out,
            under,
            &format!("{runs} runs x {ROUNDS}, thinking ~{think_ms} ms: answer() -> harness"),
        );
        row(
            &mut out,
            stats(&main.lat, |l| Some(l.returned)),
            &format!("{runs} runs x {ROUNDS}, thinking ~{think_ms} ms: answer() returned"),
        );
        if main.inotify < runs {
            row(
                &mut out,
                stats(&main.lat, |l| l.inotify.then_some(l.to_harness)),
                "  answer() -> harness, drivers with a doorbell (bell or inotify)",
            );
            row(
                &mut out,
                stats(&main.lat, |l| (!l.inotify).then_some(l.to_harness)),
                "  answer() -> harness, drivers without (rescan every 20 ms)",
            );
        }
        let limit = fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
            .map_or_else(|_| "?".into(), |s| s.trim().to_owned());
        let _ = writeln!(
            out,
            "  {runs} runs: drivers started in {:.2} s; {} of {runs} drivers have a doorbell (the bell FIFO, or inotify: fs.inotify.max_user_instances = {limit} per user); {} approvals answered {:.2} s after reattach",
            main.started_in.as_secs_f64(),
            main.inotify,
            runs * ROUNDS as usize,
            main.answered_in.as_secs_f64(),
        );
        let _ = writeln!(
            out,
            "  second phase, a burst: {runs} more runs x {ROUNDS}, each stub asking again the moment it is answered ({} with a doorbell): half answered by answer(), half by a timed step-by-step copy of the PREVIOUS answer path (the run and its key read from the store before every command; a blocking thread polls for the ack):",
            diag.inotify
        );
        let traced = |i: usize| {
            move |l: &Lat| {
                if l.via == Via::Traced {
                    l.steps.map(|s| s[i])
                } else {
                    None
                }
            }
        };
        let diag_plane = stats(&diag.lat, via(Via::Plane));
        row(&mut out, diag_plane, "answer() -> harness");
        if diag.inotify < runs {
            row(
                &mut out,
                stats(&diag.lat, |l| {
                    (l.via == Via::Plane && l.inotify).then_some(l.to_harness)
                }),
                "  drivers with a doorbell (bell or inotify)",
            );
            row(
                &mut out,
                stats(&diag.lat, |l| {
                    (l.via == Via::Plane && !l.inotify).then_some(l.to_harness)
                }),
                "  drivers without (rescan every 20 ms)",
            );
        }
        row(
            &mut out,
            stats(&diag.lat, |l| (l.via == Via::Plane).then_some(l.returned)),
            "answer() returned (acked+recorded)",
        );
        let previous = stats(&diag.lat, via(Via::Traced));
        row(&mut out, previous, "PREVIOUS answer path -> harness");
        row(&mut out, stats(&diag.lat, traced(0)), "  1 store.run()");
        row(
            &mut out,
            stats(&diag.lat, traced(1)),
            "  2 store.run_key() (vault)",
        );
        row(
            &mut out,
            stats(&diag.lat, traced(2)),
            "  3 Mailbox::open_with_key (blocking pool)",
        );
        row(
            &mut out,
            stats(&diag.lat, traced(3)),
            "  4 Mailbox::send (blocking pool) = delivered",
        );
        row(
            &mut out,
            stats(&diag.lat, traced(4)),
            "  then 2 writes + audit, ack wait, 4 writes + 2 audits",
        );
        let _ = writeln!(
            out,
            "  checked: every stub got every answer (allow) once, every driver exited 0, every turn ended 0, every answered approval recorded for {PERSON}, stored events = rebuild for all {} runs, audit chain of {audited} records verified; load average {load_before} before, {} after",
            all_runs.len(),
            load()
        );
        let _ = writeln!(
            out,
            "approval latency under load ({runs} concurrent runs, their models thinking ~{think_ms} ms): answer() -> harness p99 {} (the burst of the second phase {}, the previous path in the same burst {}), baseline alone {}",
            p99(under),
            p99(diag_plane),
            p99(previous),
            p99(stats(&base_lat, via(Via::Plane))),
        );
        // For scripts/bench's table (written to `out`, which is printed whole). Issue 22's
        // target: under load, p99 at most twice the same figure for one run alone.
        let mut line = |what: &str, under: Option<Stats>, alone: Option<Stats>| {
            if let (Some(u), Some(a)) = (under, alone) {
                let met = if u.p99 <= 2.0 * a.p99 { "yes" } else { "no" };
                let _ = writeln!(
                    out,
                    "hangar-bench\tcontrol: approval, {runs} runs (think {think_ms} ms), {what}, p99\t{:.3}\tms\t1 run alone, p99\t{:.3}\t<= 2x alone\t{met}",
                    u.p99, a.p99
                );
            }
        };
        line(
            "answer() -> harness",
            under,
            stats(&base_lat, via(Via::Plane)),
        );
        line(
            "answer() returned",
            stats(&main.lat, |l| Some(l.returned)),
            stats(&base_lat, |l| (l.via == Via::Plane).then_some(l.returned)),
        );
        // The burst: a stress figure of a saturated machine's queue (200 answers outstanding
        // at every moment), shown beside the same baseline, with no target.
        if let (Some(u), Some(a)) = (diag_plane, stats(&base_lat, via(Via::Plane))) {
            let _ = writeln!(
                out,
                "hangar-bench\tcontrol: approval, {runs} runs in a burst (stress), answer() -> harness, p99\t{:.3}\tms\t1 run alone, p99\t{:.3}\t(no target)\t-",
                u.p99, a.p99
            );
        }
        Ok(out)
    }

    /// What one load phase gave.
    struct Phase {
        live: Vec<Live>,
        samples: Vec<Sample>,
        lat: Vec<Lat>,
        /// How many drivers had an inotify doorbell.
        inotify: usize,
        started_in: Duration,
        answered_in: Duration,
    }

    /// Starts `runs` runs, waits until their drivers run, watches them (reattach), answers
    /// every approval as `via` says, waits until every turn ended.
    async fn load_phase(
        ctx: &Ctx<'_>,
        plane: &Arc<ControlPlane>,
        reader: &sqlx::SqlitePool,
        procs: &mut Procs,
        runs: usize,
        think_ms: u64,
        via: impl Fn(&Live, u32) -> Via,
    ) -> Res<Phase> {
        let t = Instant::now();
        let mut live = Vec::with_capacity(runs);
        for i in 0..runs {
            live.push(start_run(ctx, procs, ROUNDS, i, think_ms).await?);
        }
        let started_in = t.elapsed();
        wait_started(&live).await?;
        let inotify: HashMap<&str, bool> = live
            .iter()
            .map(|l| (l.run.as_str(), has_inotify(l.pid)))
            .collect();
        let t = Instant::now();
        plane.reattach().await.map_err(err("reattach"))?;
        let samples = dispatch(plane, reader, &live, ROUNDS, ctx.home, via).await?;
        let answered_in = t.elapsed();
        wait_ended(ctx.store, &live).await?;
        let lat = latencies(&live, &samples, ROUNDS, &inotify)?;
        let with = inotify.values().filter(|v| **v).count();
        drop(inotify);
        Ok(Phase {
            live,
            samples,
            lat,
            inotify: with,
            started_in,
            answered_in,
        })
    }

    struct Ctx<'a> {
        store: &'a Store,
        home: &'a Path,
        work: &'a Path,
        recv: &'a Path,
        driver: &'a Path,
        stub: &'a Path,
    }

    /// A turn as `ControlPlane::start_turn` makes it (session, turn, mailbox with the key in the
    /// vault, run, the driver started detached), but with the stub as a `--raw` harness.
    async fn start_run(
        c: &Ctx<'_>,
        procs: &mut Procs,
        rounds: u32,
        i: usize,
        think_ms: u64,
    ) -> Res<Live> {
        let run = new_id("run").map_err(err("id"))?;
        let mailbox =
            Mailbox::create_keeping_key(c.home, &run).map_err(err("create the mailbox"))?;
        let ctl = mailbox.ctl().root().to_owned();
        let key = Secret::new(mailbox.key().expose().to_vec());
        let seeded = seed_run(c.store, &run, &ctl, &key, None).await?;
        let recv = c.recv.join(format!("{run}.recv"));
        let stderr = File::create(ctl.join("driver.stderr")).map_err(err("driver.stderr"))?;
        let mut cmd = Process::new(c.driver);
        {
            use std::os::unix::process::CommandExt;
            cmd.arg("--ctl")
                .arg(&ctl)
                .args(["--run", &run])
                .arg("--cwd")
                .arg(c.work)
                .args(["--harness", "claude", "--policy", "ask", "--raw", "--"])
                .arg(c.stub)
                .arg(STUB)
                .arg(&recv)
                .arg(rounds.to_string())
                .arg(STUB_DEADLINE_S.to_string())
                .arg(think_ms.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(stderr))
                .process_group(0);
        }
        let pid = procs.spawn(cmd, "hangar-driver")?;
        c.store
            .set_driver_pid(&run, i64::from(pid))
            .await
            .map_err(err("set_driver_pid"))?;
        Ok(Live {
            i,
            run,
            turn: seeded.turn,
            ctl,
            recv,
            mailbox,
            pid,
        })
    }

    /// Waits until every driver wrote `hangar.started` (its doorbell is set up).
    async fn wait_started(runs: &[Live]) -> Res<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        for l in runs {
            let log = l.ctl.join("run.log");
            loop {
                if fs::read_to_string(&log).is_ok_and(|t| t.contains("\"hangar.started\"")) {
                    break;
                }
                if Instant::now() >= deadline {
                    let e = fs::read_to_string(l.ctl.join("driver.stderr")).unwrap_or_default();
                    return Err(format!(
                        "run {}: the driver did not start within {START_TIMEOUT:?}; its stderr: {e}",
                        l.run
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(())
    }

    /// Whether the driver has a doorbell: its control folder's bell FIFO open, or an inotify
    /// instance (the doorbell of a folder without a bell).
    fn has_inotify(pid: u32) -> bool {
        fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|rd| {
            rd.filter_map(Result::ok).any(|e| {
                fs::read_link(e.path()).is_ok_and(|t| {
                    let t = t.to_string_lossy();
                    t.contains("inotify") || t.ends_with(".ctl/bell")
                })
            })
        })
    }

    /// Answers every approval of `runs` as soon as the watcher has recorded it (seen by polling
    /// the approvals table every 5 ms), each in a task of its own; returns when all
    /// `runs.len() * rounds` were answered.
    async fn dispatch(
        plane: &Arc<ControlPlane>,
        reader: &sqlx::SqlitePool,
        runs: &[Live],
        rounds: u32,
        home: &Path,
        via: impl Fn(&Live, u32) -> Via,
    ) -> Res<Vec<Sample>> {
        let by_id: HashMap<&str, &Live> = runs.iter().map(|l| (l.run.as_str(), l)).collect();
        let total = runs.len() * rounds as usize;
        let mut seen = HashSet::new();
        let mut tasks = Vec::with_capacity(total);
        let deadline = Instant::now() + PHASE_TIMEOUT;
        while seen.len() < total {
            ensure!(
                Instant::now() < deadline,
                "only {} of {total} approvals were asked within {PHASE_TIMEOUT:?}",
                seen.len()
            );
            let rows: Vec<(String, String)> =
                sqlx::query_as("SELECT run_id, request_id FROM approvals WHERE decision IS NULL")
                    .fetch_all(reader)
                    .await
                    .map_err(err("poll approvals"))?;
            for (run, req) in rows {
                let Some(l) = by_id.get(run.as_str()) else {
                    continue;
                };
                if !seen.insert((run.clone(), req.clone())) {
                    continue;
                }
                let n: u32 = req
                    .strip_prefix('q')
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| format!("unexpected request id {req:?}"))?;
                let (plane, mailbox, v) = (Arc::clone(plane), l.mailbox.clone(), via(l, n));
                let home = home.to_owned();
                tasks.push(tokio::spawn(answer_one(plane, mailbox, home, run, req, v)));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut samples = Vec::with_capacity(total);
        for t in tasks {
            let left = deadline.saturating_duration_since(Instant::now());
            let s = tokio::time::timeout(left, t)
                .await
                .map_err(|_| format!("answers not done within {PHASE_TIMEOUT:?}"))?
                .map_err(err("an answer task"))??;
            samples.push(s);
        }
        Ok(samples)
    }

    async fn answer_one(
        plane: Arc<ControlPlane>,
        mailbox: Mailbox,
        home: PathBuf,
        run: String,
        req: String,
        via: Via,
    ) -> Res<Sample> {
        let t0 = mono_ns();
        let mut steps = None;
        match via {
            Via::Plane => {
                let r = plane
                    .runs()
                    .answer(&run, &req, true, None, None, PERSON)
                    .await
                    .map_err(err(format!("answer {run}/{req}")))?;
                ensure!(matches!(r, Reply::Done { .. }), "answer {run}/{req}: {r:?}");
            }
            Via::Mailbox => {
                let r2 = req.clone();
                let out = tokio::task::spawn_blocking(move || {
                    mailbox.request(
                        Kind::Approve,
                        body::approve(&r2, None),
                        Duration::from_secs(30),
                    )
                })
                .await
                .map_err(err("a blocking task"))?
                .map_err(err(format!("approve {run}/{req}")))?;
                ensure!(out == Outcome::Done, "approve {run}/{req}: {out:?}");
            }
            Via::Traced => {
                steps = Some(
                    answer_mirror(plane.store(), &home, &run, &req)
                        .await
                        .map_err(|e| format!("answer {run}/{req}: {e}"))?,
                );
            }
        }
        let t1 = mono_ns();
        Ok(Sample {
            run,
            req,
            via,
            t0,
            t1,
            steps,
        })
    }

    /// A step-by-step copy of `ControlPlane::answer(run, req, allow)` as it was before live
    /// mailboxes were kept in memory (plane.rs: `command`, `mailbox`, `deliver`, then the
    /// approval's record and audit), returning when each of its first steps ended: [the run
    /// read, the key read from the vault, the mailbox opened, the command landed in `in/`].
    async fn answer_mirror(store: &Store, home: &Path, run: &str, req: &str) -> Res<[u64; 4]> {
        use hangar_mailbox::outbox::Delivery;
        use hangar_protocol::RunKey;
        use hangar_store::{AckStatus, Decision};
        let mut at = [0u64; 4];
        let r = store.run(run).await.map_err(err("run"))?;
        ensure!(r.state == RunState::Live && r.has_key, "the run ended");
        at[0] = mono_ns();
        let key = store.run_key(run).await.map_err(err("run_key"))?;
        let bytes: [u8; 32] = key
            .expose()
            .try_into()
            .map_err(|_| "the vault's key is not 32 bytes")?;
        at[1] = mono_ns();
        let (home, rid) = (home.to_owned(), run.to_owned());
        let mailbox = tokio::task::spawn_blocking(move || {
            Mailbox::open_with_key(&home, &rid, RunKey::from_bytes(bytes))
        })
        .await
        .map_err(err("a blocking task"))?
        .map_err(err("open the mailbox"))?;
        at[2] = mono_ns();
        // Sealed with its sender, as every answer is now: the run's watcher records the answer
        // from the driver's line, naming the person from it (unsealed, the record could race
        // this copy's own writes and name no one).
        let b = body::by(body::approve(req, None), PERSON);
        let (m, b2) = (mailbox.clone(), b.clone());
        let delivery = tokio::task::spawn_blocking(move || m.send(Kind::Approve, b2))
            .await
            .map_err(err("a blocking task"))?
            .map_err(err("send"))?;
        at[3] = mono_ns();
        let Delivery::Landed(sent) = delivery else {
            return Err("the turn ended".into());
        };
        let seq = i64::try_from(sent.command.seq).map_err(err("seq"))?;
        let audit = |action: &'static str, detail: Value| async move {
            store
                .audit()
                .append(PERSON, action, &detail)
                .await
                .map(|_| ())
                .map_err(err(action))
        };
        match store.record_command(run, seq, "approve", &b, PERSON).await {
            Ok(_) => {}
            // The watcher may have made the row first, from the driver's sealed line.
            Err(hangar_store::StoreError::Conflict(m)) if m.starts_with("already exists") => {}
            Err(e) => return Err(err("record_command")(e)),
        }
        audit(
            "command.sent",
            json!({"run": run, "seq": seq, "kind": "approve"}),
        )
        .await?;
        let m = mailbox.clone();
        let outcome = tokio::task::spawn_blocking(move || m.wait(&sent, Duration::from_secs(30)))
            .await
            .map_err(err("a blocking task"))?
            .map_err(err("wait"))?;
        ensure!(outcome == Outcome::Done, "{outcome:?}");
        store
            .record_ack(run, seq, AckStatus::Done, None)
            .await
            .map_err(err("record_ack"))?;
        audit(
            "command.acked",
            json!({"run": run, "seq": seq, "status": "done", "reason": null}),
        )
        .await?;
        // The run's watcher may have recorded the answer first, from the driver's
        // `approval_answered` line (the previous `answer` raced it the same way): the first
        // answer stands, and it is this person's either way.
        match store
            .answer_approval(run, req, Decision::Allow, PERSON, None)
            .await
        {
            Ok(_) | Err(hangar_store::StoreError::AlreadyAnswered { .. }) => {}
            Err(e) => return Err(format!("answer_approval: {e}")),
        }
        audit(
            "approval.answered",
            json!({"run": run, "request_id": req, "decision": "allow"}),
        )
        .await?;
        Ok(at)
    }

    /// Waits until none of `runs` is live (their watchers saw `hangar.turn_end`).
    async fn wait_ended(store: &Store, runs: &[Live]) -> Res<()> {
        let ours: HashSet<&str> = runs.iter().map(|l| l.run.as_str()).collect();
        let deadline = Instant::now() + PHASE_TIMEOUT;
        loop {
            let live = store.live_runs().await.map_err(err("live_runs"))?;
            let left = live.iter().filter(|r| ours.contains(r.id.as_str())).count();
            if left == 0 {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{left} runs still live after {PHASE_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// One answer, in milliseconds.
    struct Lat {
        via: Via,
        /// The run's driver has an inotify doorbell.
        inotify: bool,
        /// From the start of the call to the harness reading the answer.
        to_harness: f64,
        /// From the start of the call until it returned.
        returned: f64,
        /// For the mirrored paths: how long each step took ([`answer_mirror`]'s four, then the
        /// rest until it returned).
        steps: Option<[f64; 5]>,
    }

    /// The statistics of `f` over the answers it gives a value for.
    fn stats(v: &[Lat], f: impl Fn(&Lat) -> Option<f64>) -> Option<Stats> {
        Stats::of(v.iter().filter_map(f).collect())
    }

    /// Pairs each answer with the stub's receipt; every request was received, allowed, once.
    fn latencies(
        runs: &[Live],
        samples: &[Sample],
        rounds: u32,
        inotify: &HashMap<&str, bool>,
    ) -> Res<Vec<Lat>> {
        let mut recv: HashMap<(String, String), u64> = HashMap::new();
        for l in runs {
            let text = fs::read_to_string(&l.recv).map_err(err(format!("{}", l.recv.display())))?;
            let mut n = 0;
            for line in text.lines() {
                let mut f = line.split_whitespace();
                let (Some(req), Some(at), Some(allowed)) = (f.next(), f.next(), f.next()) else {
                    return Err(format!("bad receipt line {line:?}"));
                };
                ensure!(allowed == "true", "run {}: {req} was not allowed", l.run);
                let at: u64 = at.parse().map_err(err("receipt time"))?;
                ensure!(
                    recv.insert((l.run.clone(), req.to_owned()), at).is_none(),
                    "run {}: {req} received twice",
                    l.run
                );
                n += 1;
            }
            ensure!(
                n == rounds,
                "run {}: {n} of {rounds} answers received",
                l.run
            );
        }
        ensure!(
            samples.len() == recv.len(),
            "{} answers sent, {} received",
            samples.len(),
            recv.len()
        );
        let mut lat = Vec::with_capacity(samples.len());
        for s in samples {
            let at = recv
                .get(&(s.run.clone(), s.req.clone()))
                .ok_or_else(|| format!("{}/{} was answered but never received", s.run, s.req))?;
            ensure!(
                *at >= s.t0,
                "{}/{} received before it was answered",
                s.run,
                s.req
            );
            let to_harness = (*at - s.t0) as f64 / 1e6;
            let returned = (s.t1 - s.t0) as f64 / 1e6;
            let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
            lat.push(Lat {
                via: s.via,
                inotify: inotify.get(s.run.as_str()).copied().unwrap_or(true),
                to_harness,
                returned,
                steps: s.steps.map(|a| {
                    [
                        ms(s.t0, a[0]),
                        ms(a[0], a[1]),
                        ms(a[1], a[2]),
                        ms(a[2], a[3]),
                        ms(a[3], s.t1),
                    ]
                }),
            });
        }
        Ok(lat)
    }
}
