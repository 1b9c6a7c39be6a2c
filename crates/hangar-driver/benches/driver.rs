#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "benchmark binary"
)]

//! The driver's two benchmarks (`cargo bench -p hangar-driver`; `-- round` or `-- relay` runs
//! one of them):
//!
//! 1. **Command round trip** (target p99 < 5 ms): 1,000 signed `steer` commands, one after
//!    another, each timed from before `Mailbox::request` to the verified signed `done` ack
//!    (signed command written -> on the stub harness's stdin -> signed ack read). Printed beside
//!    it: the same file handshake without the driver (a responder thread in this process, woken
//!    by inotify). Two diagnostic rows repeat both with the client polling every 20 us instead
//!    of `Mailbox::wait`'s backoff, which shows how much of the latency is the client's polling.
//!    All four are interleaved, so load from elsewhere hits them alike.
//! 2. **Relay throughput** (target >= 90% of `cat`, driver peak RSS < 20 MB): a generated Claude
//!    Code stream-json file written by a stub harness (`cat FILE`) into a pipe and relayed by the
//!    driver into `run.log`, against `cat` in the driver's place (`cat FILE | cat > out`): the
//!    same pipe, the same copy through user space, no scanning. `cat FILE > out` is printed as
//!    well: GNU cat copies file to file with copy_file_range, in the kernel, which no relay of a
//!    pipe can match. The run log is checked after every run (every line, every patched
//!    `result`).
//!
//! The driver is `$HANGAR_DRIVER_BIN` if set (e.g. the static release build), else the
//! `hangar-driver` binary cargo built for this bench (bench profile = release).
//!
//! Every wait has a timeout; a failure kills (by pid) and reaps what this benchmark started, and
//! exits with status 1. Errors are `Result`s, not panics: the bench profile aborts on panic, so
//! no cleanup would run.

use std::ffi::CString;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hangar_mailbox::outbox::{Delivery, Mailbox, Outcome};
use hangar_protocol::command::body;
use hangar_protocol::{Command, Kind};
use serde_json::Value;

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

/// `HANGAR_BENCH_QUICK=1` (scripts/bench --quick): fewer commands, a smaller relay.
fn quick() -> bool {
    std::env::var("HANGAR_BENCH_QUICK").is_ok_and(|v| v == "1")
}

/// A line for scripts/bench's table: figure, value, unit, baseline (`-`: none), its value,
/// target, met.
fn figure(
    what: &str,
    value: f64,
    unit: &str,
    baseline: &str,
    base: f64,
    target: &str,
    met: Option<bool>,
) {
    let base = if baseline == "-" {
        "-".to_owned()
    } else {
        format!("{base:.3}")
    };
    let met = match met {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    };
    println!("hangar-bench\t{what}\t{value:.3}\t{unit}\t{baseline}\t{base}\t{target}\t{met}");
}

fn main() {
    // cargo passes `--bench`; any other word selects benchmarks by name.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let driver = driver_bin();
    println!("driver binary: {}", driver.display());
    let mut failed = false;
    if wanted("round_trip") {
        if let Err(e) = round_trip::run(&driver) {
            eprintln!("command round trip benchmark FAILED: {e}");
            failed = true;
        }
        println!();
    }
    if wanted("relay")
        && let Err(e) = relay::run(&driver)
    {
        eprintln!("relay benchmark FAILED: {e}");
        failed = true;
    }
    if failed {
        std::process::exit(1);
    }
}

/// The 1-minute load average, printed with each benchmark: both are sensitive to other work on
/// the machine (on a 2-core box one busy compiler doubles the tail latencies).
fn load() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn driver_bin() -> PathBuf {
    std::env::var_os("HANGAR_DRIVER_BIN")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_hangar-driver")),
            PathBuf::from,
        )
}

// ---------------------------------------------------------------------------------------------
// Processes: spawn, wait with a timeout (wait4, for the exit time and the peak RSS), clean up.
// ---------------------------------------------------------------------------------------------

/// How a waited-for child ended.
#[derive(Debug)]
struct Exit {
    /// The raw wait status.
    status: i32,
    /// `ru_maxrss` from wait4, KiB: the child's peak resident set (or that of a child it reaped,
    /// if larger).
    max_rss_kib: i64,
    /// When wait4 returned.
    at: Instant,
}

impl Exit {
    fn describe(&self) -> String {
        if libc::WIFEXITED(self.status) {
            format!("exit status {}", libc::WEXITSTATUS(self.status))
        } else if libc::WIFSIGNALED(self.status) {
            format!("killed by signal {}", libc::WTERMSIG(self.status))
        } else {
            format!("wait status {:#x}", self.status)
        }
    }
}

/// A child of this process that must not outlive the benchmark: dropping it before it was
/// waited for kills it (and the harness the driver started, read from the run log) by pid and
/// reaps it.
#[derive(Debug)]
struct Child {
    pid: libc::pid_t,
    what: String,
    /// The driver's run log, where the harness's pid is (`hangar.started`).
    run_log: Option<PathBuf>,
    reaped: bool,
}

impl Child {
    fn spawn(mut cmd: Process, what: &str, run_log: Option<PathBuf>) -> Res<Child> {
        let child = cmd.spawn().map_err(err(format!("start {what}")))?;
        // The std handle is dropped without waiting: the pid is reaped by `wait` or `Drop`.
        Child::adopt(&child, what, run_log)
    }

    /// Takes over reaping a child started by std (whose handle must not be waited on).
    fn adopt(child: &std::process::Child, what: &str, run_log: Option<PathBuf>) -> Res<Child> {
        let pid = libc::pid_t::try_from(child.id()).map_err(err("pid"))?;
        Ok(Child {
            pid,
            what: what.to_owned(),
            run_log,
            reaped: false,
        })
    }

    /// Waits up to `timeout` for the child to exit. wait4 blocks in a helper thread, so the exit
    /// time is taken the moment the kernel reports it (no polling interval in the measurement);
    /// on timeout the child is killed and reaped, and that is an error.
    fn wait(&mut self, timeout: Duration) -> Res<Exit> {
        let pid = self.pid;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(wait4(pid));
        });
        match rx.recv_timeout(timeout) {
            Ok(r) => {
                self.reaped = true;
                r
            }
            Err(_) => {
                self.kill();
                let _ = rx.recv_timeout(Duration::from_secs(10));
                self.reaped = true;
                Err(format!(
                    "{} did not exit within {timeout:?}; killed",
                    self.what
                ))
            }
        }
    }

    fn kill(&self) {
        if let Some(h) = self.run_log.as_deref().and_then(harness_pid) {
            // SAFETY: kill(2) on a pid; no memory is involved. The harness is still the (unreaped)
            // child of the driver, which is not reaped yet either, so the pid is not reused.
            unsafe { libc::kill(h, libc::SIGKILL) };
        }
        // SAFETY: as above; self.pid is our unreaped child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            eprintln!("(killing {} pid {})", self.what, self.pid);
            self.kill();
            let _ = wait4(self.pid);
        }
    }
}

/// Blocking wait4 for one child, retried on EINTR.
fn wait4(pid: libc::pid_t) -> Res<Exit> {
    let mut status = 0;
    // SAFETY: rusage is a plain C struct of integers; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: status and ru are valid for writes for the call's duration.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Ok(Exit {
                status,
                max_rss_kib: ru.ru_maxrss,
                at: Instant::now(),
            });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(format!("wait4({pid}): {e}"));
        }
    }
}

/// The harness pid from the driver's `hangar.started` line.
fn harness_pid(run_log: &Path) -> Option<libc::pid_t> {
    let text = fs::read_to_string(run_log).ok()?;
    text.lines()
        .filter(|l| l.starts_with("{\"type\":\"hangar.started\""))
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()?
                .get("harness_pid")?
                .as_i64()
        })
        .and_then(|p| libc::pid_t::try_from(p).ok())
}

/// Starts the driver on `mb`'s control folder with a raw stub harness.
fn spawn_driver(driver: &Path, mb: &Mailbox, cwd: &Path, harness: &[&str]) -> Res<Child> {
    let mut cmd = Process::new(driver);
    cmd.arg("--ctl")
        .arg(mb.ctl().root())
        .args(["--run", mb.run()])
        .arg("--cwd")
        .arg(cwd)
        .args(["--policy", "auto", "--raw", "--"])
        .args(harness)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    Child::spawn(cmd, "hangar-driver", Some(mb.ctl().run_log()))
}

/// Waits until the driver has written `hangar.started` (its inbox is watched and the harness
/// runs).
fn wait_started(mb: &Mailbox, timeout: Duration) -> Res<()> {
    let deadline = Instant::now() + timeout;
    let log = mb.ctl().run_log();
    loop {
        if fs::read_to_string(&log).is_ok_and(|t| t.contains("\"hangar.started\"")) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the driver did not start within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---------------------------------------------------------------------------------------------
// Bench 1: command round trip.
// ---------------------------------------------------------------------------------------------

mod round_trip {
    use super::*;

    /// Commands per row: 1,000, or 200 with `HANGAR_BENCH_QUICK=1` (scripts/bench --quick).
    fn commands() -> usize {
        if quick() { 200 } else { 1000 }
    }
    const WARMUP: usize = 50;
    const TARGET_P99: Duration = Duration::from_millis(5);
    const TIMEOUT: Duration = Duration::from_secs(5);
    /// The diagnostic client's fixed polling interval.
    const FINE_POLL: Duration = Duration::from_micros(20);

    /// The four round trips, measured interleaved (one of each per step, in rotating order) so
    /// that load from elsewhere on the machine hits them alike.
    #[derive(Clone, Copy, Debug)]
    enum Trip {
        /// `Mailbox::request` against the driver: the number the target is about.
        Driver,
        /// The driver, the client polling the ack every 20 us instead of backing off.
        DriverFine,
        /// The file handshake alone, polled like `Mailbox::wait`.
        Base,
        /// The file handshake alone, polled every 20 us.
        BaseFine,
    }

    const TRIPS: [Trip; 4] = [Trip::Driver, Trip::DriverFine, Trip::Base, Trip::BaseFine];

    pub fn run(driver: &Path) -> Res<()> {
        let home = tempfile::tempdir().map_err(err("temp HANGAR_HOME"))?;
        let cwd = tempfile::tempdir().map_err(err("temp cwd"))?;
        let mb = Mailbox::create(home.path(), "bench-1").map_err(err("create the mailbox"))?;
        let base_mb =
            Mailbox::create(home.path(), "bench-base").map_err(err("create the mailbox"))?;

        let load_before = load();
        let mut child = spawn_driver(driver, &mb, cwd.path(), &["sh", "-c", "cat >/dev/null"])?;
        wait_started(&mb, Duration::from_secs(10))?;
        let responder = Responder::start(&base_mb)?;
        let measured = measure(&mb, &base_mb);
        let stopped = responder.stop(&base_mb);
        // `end` closes the harness's stdin: the stub exits and the driver with it (status 1:
        // the stub never wrote a `result`).
        let end = mb.request(Kind::End, body::empty(), TIMEOUT);
        let exit = child.wait(Duration::from_secs(20));
        let lat = measured?;
        stopped?;
        let end = end.map_err(err("end"))?;
        ensure!(end == Outcome::Done, "end: {end:?}");
        let exit = exit?;
        ensure!(
            libc::WIFEXITED(exit.status),
            "the driver did not exit normally: {}",
            exit.describe()
        );
        // Every command was carried out (passed on to the harness), as the run log says.
        let log = fs::read_to_string(mb.ctl().run_log()).map_err(err("read run.log"))?;
        let done = log
            .lines()
            .filter(|l| l.contains("\"hangar.command\"") && l.contains("\"outcome\":\"done\""))
            .count();
        let sent = 2 * (WARMUP + commands()) + 1;
        ensure!(
            done == sent,
            "run.log records {done} commands done, not {sent}"
        );

        let [d, df, b, bf] = lat.map(Stats::of);
        println!(
            "command round trip, {} commands per row after {WARMUP} warm-up, rows interleaved \
             (stub harness: sh -c 'cat >/dev/null'; load average {} before, {} after)",
            commands(),
            load_before,
            load()
        );
        println!(
            "{:<24}{:>10}{:>10}{:>10}{:>10}",
            "", "p50", "p90", "p99", "max"
        );
        println!(
            "client waits as Mailbox::wait does (hangar_mailbox::wait::next_pause: 50 us doubling, at most 250 us in the first 100 ms):"
        );
        println!("{}", d.row("hangar-driver"));
        println!("{}", b.row("baseline (fs only)"));
        println!(
            "diagnostic: client polls every {} us instead:",
            FINE_POLL.as_micros()
        );
        println!("{}", df.row("hangar-driver"));
        println!("{}", bf.row("baseline (fs only)"));
        println!(
            "target: p99 < {} ms (hangar-driver, Mailbox::request) -> {}",
            TARGET_P99.as_millis(),
            if d.p99 < TARGET_P99 { "MET" } else { "MISSED" }
        );
        figure(
            "driver: command round trip, p99",
            d.p99.as_secs_f64() * 1e3,
            "ms",
            "the same file handshake, no driver, p99",
            b.p99.as_secs_f64() * 1e3,
            &format!("< {}", TARGET_P99.as_millis()),
            Some(d.p99 < TARGET_P99),
        );
        Ok(())
    }

    fn measure(mb: &Mailbox, base_mb: &Mailbox) -> Res<[Vec<Duration>; 4]> {
        let mut lat: [Vec<Duration>; 4] = Default::default();
        let mut base_seq = 0u64;
        for i in 0..WARMUP + commands() {
            for k in 0..TRIPS.len() {
                let j = (i + k) % TRIPS.len();
                let text = format!("steer {i}: also keep the old flag working, and add a test");
                let dt = match TRIPS[j] {
                    Trip::Driver => {
                        let t0 = Instant::now();
                        let out = mb
                            .request(Kind::Steer, body::text(&text), TIMEOUT)
                            .map_err(err(format!("steer {i}")))?;
                        let dt = t0.elapsed();
                        ensure!(out == Outcome::Done, "steer {i}: {out:?}");
                        dt
                    }
                    Trip::DriverFine => {
                        let t0 = Instant::now();
                        let sent = match mb
                            .send(Kind::Steer, body::text(&text))
                            .map_err(err(format!("steer {i}")))?
                        {
                            Delivery::Landed(sent) => sent,
                            Delivery::TurnEnded(_) => return Err("the turn ended".into()),
                        };
                        fine_poll(&mb.ctl().ack_for(&sent.name))?;
                        let out = mb.wait(&sent, TIMEOUT).map_err(err("wait"))?;
                        let dt = t0.elapsed();
                        ensure!(out == Outcome::Done, "steer {i}: {out:?}");
                        dt
                    }
                    Trip::Base | Trip::BaseFine => {
                        base_seq += 1;
                        base_trip(base_mb, base_seq, &text, matches!(TRIPS[j], Trip::BaseFine))?
                    }
                };
                if i >= WARMUP {
                    lat[j].push(dt);
                }
            }
        }
        Ok(lat)
    }

    /// One file handshake without the driver: a sealed command delivered with
    /// `Mailbox::deliver_bytes`, then the ack path polled.
    fn base_trip(mb: &Mailbox, seq: u64, text: &str, fine: bool) -> Res<Duration> {
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&seq.to_be_bytes());
        let c = Command::seal(
            mb.key(),
            mb.run(),
            seq,
            nonce,
            Kind::Steer,
            body::text(text),
        );
        let name = format!("{seq:010}-{}.cmd", hex4(&nonce));
        let bytes = c.to_bytes();
        let ack = mb.ctl().ack_for(&name);
        let t0 = Instant::now();
        let landed = mb
            .deliver_bytes(&name, &bytes)
            .map_err(err("deliver a command"))?;
        ensure!(landed, "in/ vanished");
        if fine {
            fine_poll(&ack)?;
        } else {
            backoff_poll(&ack)?;
        }
        Ok(t0.elapsed())
    }

    /// The baseline's responder: a thread that watches `in/` with inotify (`IN_MOVED_TO`, a
    /// blocking read, as the driver's doorbell does), reads and removes each command file and
    /// writes an ack by write + rename (no fsync, as the driver). The difference to the driver's
    /// numbers is the driver's own work (waking its main loop, checking the command, the pipe
    /// write, the run log, the HMAC-signed ack) plus the client's sequence lock and sealing.
    struct Responder(mpsc::Receiver<Res<()>>);

    impl Responder {
        fn start(mb: &Mailbox) -> Res<Responder> {
            let inbox = mb.ctl().inbox();
            let acks = mb.ctl().acks();
            let watch = Inotify::watch(&inbox)?;
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(respond(&watch, &inbox, &acks));
            });
            Ok(Responder(rx))
        }

        fn stop(self, mb: &Mailbox) -> Res<()> {
            let _ = mb.deliver_bytes(STOP, b"");
            match self.0.recv_timeout(TIMEOUT) {
                Ok(r) => r,
                Err(_) => Err("the baseline responder did not stop".into()),
            }
        }
    }

    const STOP: &str = "zzzz-stop";

    fn hex4(nonce: &[u8; 16]) -> String {
        nonce[..4].iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }

    /// The ack the baseline responder writes: the size of a real one.
    const FAKE_ACK: &[u8] = br#"{"v":1,"run":"bench-base","name":"0000000001-00000000.cmd","seq":1,"nonce":"00000000000000010000000000000000","status":"done","reason":"","created_ms":1796083200000,"mac":"0000000000000000000000000000000000000000000000000000000000000000"}
"#;

    fn respond(watch: &Inotify, inbox: &Path, acks: &Path) -> Res<()> {
        loop {
            watch.wait()?;
            let mut names: Vec<_> = fs::read_dir(inbox)
                .map_err(err("read in/"))?
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .collect();
            names.sort();
            for name in names {
                let path = inbox.join(&name);
                let _bytes = fs::read(&path).map_err(err("read a command"))?;
                fs::remove_file(&path).map_err(err("remove a command"))?;
                let name = name.to_string_lossy();
                if name == STOP {
                    return Ok(());
                }
                let tmp = acks.join(format!(".{name}.tmp"));
                let mut f = File::create_new(&tmp).map_err(err("create an ack"))?;
                f.write_all(FAKE_ACK).map_err(err("write an ack"))?;
                drop(f);
                fs::rename(&tmp, acks.join(format!("{name}.ack"))).map_err(err("rename an ack"))?;
            }
        }
    }

    /// Whether the ack is there (acks are renamed into place, so present means complete).
    fn ack_there(path: &Path) -> bool {
        fs::read(path).is_ok_and(|b| !b.is_empty())
    }

    /// Polls for the ack with `Mailbox::wait`'s schedule (`client::next_pause`).
    fn backoff_poll(path: &Path) -> Res<()> {
        let started = Instant::now();
        let deadline = started + TIMEOUT;
        let mut pause = hangar_mailbox::wait::FIRST_PAUSE;
        loop {
            if ack_there(path) {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "no ack within {TIMEOUT:?}");
            std::thread::sleep(pause);
            pause = hangar_mailbox::wait::next_pause(pause, started.elapsed());
        }
    }

    /// Polls for the ack every [`FINE_POLL`], with the timer slack at 1 ns meanwhile (the
    /// default 50 us slack would make each sleep at least 70 us).
    fn fine_poll(path: &Path) -> Res<()> {
        set_timer_slack(1);
        let deadline = Instant::now() + TIMEOUT;
        let found = loop {
            if ack_there(path) {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(FINE_POLL);
        };
        set_timer_slack(0);
        ensure!(found, "no ack within {TIMEOUT:?}");
        Ok(())
    }

    /// The calling thread's timer slack in ns; 0 restores the default.
    fn set_timer_slack(ns: libc::c_ulong) {
        // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory of ours.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns) };
    }

    /// A minimal inotify watch on one folder.
    struct Inotify(std::os::fd::OwnedFd);

    impl Inotify {
        fn watch(dir: &Path) -> Res<Inotify> {
            use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
            // SAFETY: inotify_init1 takes flags only.
            let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
            ensure!(fd >= 0, "inotify_init1: {}", io::Error::last_os_error());
            // SAFETY: fd is a fresh descriptor nobody else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let path = CString::new(dir.as_os_str().as_bytes()).map_err(err("path"))?;
            // SAFETY: fd is an inotify instance; path is NUL-terminated.
            let w = unsafe {
                libc::inotify_add_watch(
                    fd.as_raw_fd(),
                    path.as_ptr(),
                    libc::IN_MOVED_TO | libc::IN_ONLYDIR,
                )
            };
            ensure!(w >= 0, "inotify_add_watch: {}", io::Error::last_os_error());
            Ok(Inotify(fd))
        }

        /// Blocks until at least one event; drains what is there.
        fn wait(&self) -> Res<()> {
            use std::os::fd::AsRawFd;
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: buf is writable for its length; the fd is ours.
                let n =
                    unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0 {
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                ensure!(
                    n < 0 && e.kind() == io::ErrorKind::Interrupted,
                    "inotify read: {e}"
                );
            }
        }
    }

    /// Latency percentiles (nearest rank).
    struct Stats {
        p50: Duration,
        p90: Duration,
        p99: Duration,
        max: Duration,
    }

    impl Stats {
        fn of(mut v: Vec<Duration>) -> Stats {
            v.sort();
            let pick = |q: f64| {
                let rank = (q * v.len() as f64).ceil() as usize;
                v[rank.clamp(1, v.len()) - 1]
            };
            Stats {
                p50: pick(0.50),
                p90: pick(0.90),
                p99: pick(0.99),
                max: v[v.len() - 1],
            }
        }

        fn row(&self, label: &str) -> String {
            let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
            format!(
                "{label:<24}{:>10}{:>10}{:>10}{:>10}",
                ms(self.p50),
                ms(self.p90),
                ms(self.p99),
                ms(self.max)
            )
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bench 2: relay throughput.
// ---------------------------------------------------------------------------------------------

mod relay {
    use super::*;

    /// Measured repetitions: 5, or 2 with `HANGAR_BENCH_QUICK=1`.
    fn reps() -> usize {
        if quick() { 2 } else { 5 }
    }
    /// The relayed stream's size: 200 MB, or 50 MB with `HANGAR_BENCH_QUICK=1`.
    fn default_mb() -> u64 {
        if quick() { 50 } else { 200 }
    }
    /// 1 MB = 10^6 bytes throughout.
    const MB: f64 = 1e6;
    const TARGET_RATIO: f64 = 0.90;
    const TARGET_RSS_KIB: i64 = 20 * 1024;
    const TIMEOUT: Duration = Duration::from_secs(60);
    const PROCESS_USAGE: &str = "hangar_process_usage";
    const RESULT_LINE: &str = r#"{"type":"result","subtype":"success","is_error":false,"usage":{"input_tokens":11,"output_tokens":7},"user_message_uuids":[]}"#;

    pub fn run(driver: &Path) -> Res<()> {
        let size_mb = match std::env::var("HANGAR_BENCH_RELAY_MB") {
            Ok(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("HANGAR_BENCH_RELAY_MB={v:?} is not a positive number"))?,
            Err(_) => default_mb(),
        };
        let dir = tempfile::tempdir().map_err(err("temp folder"))?;
        let input = dir.path().join("stream.jsonl");
        let load_before = load();
        let t = Instant::now();
        let gen_ = generate(&input, size_mb * 1_000_000)?;
        println!(
            "relay input: {} lines ({} result lines), {:.1} MB, generated in {:.2} s",
            gen_.lines,
            gen_.results,
            gen_.bytes as f64 / MB,
            t.elapsed().as_secs_f64()
        );

        let home = dir.path().join("home");
        let cwd = dir.path().join("cwd");
        fs::create_dir(&cwd).map_err(err("create cwd"))?;
        let mbps = |d: Duration| gen_.bytes as f64 / MB / d.as_secs_f64();
        // Rep 0 warms up (page cache, the binaries, the VM's memory) and is not counted; the
        // three measurements rotate their order from rep to rep.
        let (mut cat_s, mut pipe_s, mut drv_s, mut rss) = (vec![], vec![], vec![], vec![]);
        let reps = reps();
        for rep in 0..=reps {
            let (mut c, mut p, mut d) = (Duration::ZERO, Duration::ZERO, (Duration::ZERO, 0));
            for k in 0..3 {
                match (rep + k) % 3 {
                    0 => c = cat_once(&input, dir.path(), gen_.bytes)?,
                    1 => p = cat_pipe_once(&input, dir.path(), gen_.bytes)?,
                    _ => d = driver_once(driver, &home, &cwd, rep, &input, &gen_)?,
                }
            }
            let (d, r) = d;
            println!(
                "  {}: cat {:>5.0} MB/s, cat|cat {:>5.0} MB/s, driver {:>5.0} MB/s, driver peak RSS {:.1} MB",
                if rep == 0 {
                    "warm-up".to_owned()
                } else {
                    format!("rep {rep}  ")
                },
                mbps(c),
                mbps(p),
                mbps(d),
                r as f64 / 1024.0
            );
            if rep > 0 {
                cat_s.push(c);
                pipe_s.push(p);
                drv_s.push(d);
            }
            rss.push(r);
        }
        for v in [&mut cat_s, &mut pipe_s, &mut drv_s] {
            v.sort();
        }
        let (cat_best, pipe_best, drv_best) = (mbps(cat_s[0]), mbps(pipe_s[0]), mbps(drv_s[0]));
        let med = |v: &[Duration]| mbps(v[v.len() / 2]);
        let (cat_med, pipe_med, drv_med) = (med(&cat_s), med(&pipe_s), med(&drv_s));
        // The relay's job is reading the harness's pipe and writing the log: the baseline is
        // `cat` doing that same job (`cat FILE | cat > out`), not `cat FILE > out`, which GNU cat
        // does in the kernel (copy_file_range) without any pipe; that figure is printed too.
        let ratio = drv_best / pipe_best;
        let peak = rss.iter().copied().max().unwrap_or(0);
        let verdict = |ok: bool| if ok { "MET" } else { "MISSED" };
        println!(
            "  run.log checked after every driver run: {} harness lines in order and unchanged, {} result lines patched with the right running {PROCESS_USAGE}; load average {load_before} before, {} after",
            gen_.lines,
            gen_.results,
            load()
        );
        println!(
            "  median of {reps}: driver {drv_med:.0} MB/s, cat {cat_med:.0} MB/s ({:.1}% of cat), cat|cat {pipe_med:.0} MB/s ({:.1}% of cat|cat)",
            100.0 * drv_med / cat_med,
            100.0 * drv_med / pipe_med,
        );
        println!(
            "  reference, best of {reps}: `cat FILE | cat > out` (the stub-to-driver path: a pipe and a copy through user space, no scanning) {pipe_best:.0} MB/s; driver = {:.1}% of it",
            100.0 * drv_best / pipe_best,
        );
        println!(
            "relay {size_mb} MB (best of {reps}): driver {drv_best:.0} MB/s, cat as the relay (`cat FILE | cat > out`) {pipe_best:.0} MB/s -> {:.1}% of cat (target >= {:.0}%: {}); file-to-file `cat FILE > out` {cat_best:.0} MB/s ({:.1}%); driver peak RSS {:.1} MB (target < {} MB: {})",
            100.0 * ratio,
            100.0 * TARGET_RATIO,
            verdict(ratio >= TARGET_RATIO),
            100.0 * drv_best / cat_best,
            peak as f64 / 1024.0,
            TARGET_RSS_KIB / 1024,
            verdict(peak < TARGET_RSS_KIB),
        );
        figure(
            &format!("driver: relay of {size_mb} MB, best of {reps}"),
            drv_best,
            "MB/s",
            "cat FILE | cat > out, best",
            pipe_best,
            &format!(">= {TARGET_RATIO}x"),
            Some(ratio >= TARGET_RATIO),
        );
        figure(
            "driver: relay, driver peak RSS",
            peak as f64 / 1024.0,
            "MB",
            "-",
            0.0,
            &format!("< {}", TARGET_RSS_KIB / 1024),
            Some(peak < TARGET_RSS_KIB),
        );
        Ok(())
    }

    /// `cat FILE > out`, wall clock from spawn to exit. (GNU cat copies a file to a file with
    /// copy_file_range: the bytes never enter user space.)
    fn cat_once(input: &Path, dir: &Path, bytes: u64) -> Res<Duration> {
        let out_path = dir.join("cat.out");
        let out = File::create(&out_path).map_err(err("create cat.out"))?;
        let mut cmd = Process::new("cat");
        cmd.arg(input)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::inherit());
        let t0 = Instant::now();
        let mut child = Child::spawn(cmd, "cat", None)?;
        let exit = child.wait(TIMEOUT)?;
        let dt = exit.at - t0;
        ensure!(exited_0(&exit), "cat: {}", exit.describe());
        check_out(&out_path, bytes)?;
        Ok(dt)
    }

    /// `cat FILE | cat > out`: the bytes go through a pipe and through user space once, as from
    /// the stub harness through the driver; wall clock from the first spawn to the last exit.
    fn cat_pipe_once(input: &Path, dir: &Path, bytes: u64) -> Res<Duration> {
        let out_path = dir.join("cat.out");
        let out = File::create(&out_path).map_err(err("create cat.out"))?;
        let mut first = Process::new("cat");
        first
            .arg(input)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let t0 = Instant::now();
        let mut std_first = first.spawn().map_err(err("start cat"))?;
        let pipe = std_first.stdout.take();
        let mut first = Child::adopt(&std_first, "cat (1st)", None)?;
        drop(std_first);
        let pipe = pipe.ok_or("cat's stdout")?;
        let mut second = Process::new("cat");
        second
            .stdin(Stdio::from(pipe))
            .stdout(Stdio::from(out))
            .stderr(Stdio::inherit());
        let mut second = Child::spawn(second, "cat (2nd)", None)?;
        let e2 = second.wait(TIMEOUT)?;
        let e1 = first.wait(TIMEOUT)?;
        let dt = e1.at.max(e2.at) - t0;
        ensure!(
            exited_0(&e1) && exited_0(&e2),
            "cat | cat: {}, {}",
            e1.describe(),
            e2.describe()
        );
        check_out(&out_path, bytes)?;
        Ok(dt)
    }

    fn exited_0(e: &Exit) -> bool {
        libc::WIFEXITED(e.status) && libc::WEXITSTATUS(e.status) == 0
    }

    /// The copy is complete; it is deleted (disk use stays bounded).
    fn check_out(out_path: &Path, bytes: u64) -> Res<()> {
        let len = fs::metadata(out_path).map_err(err("cat.out"))?.len();
        fs::remove_file(out_path).map_err(err("remove cat.out"))?;
        ensure!(len == bytes, "cat wrote {len} bytes, not {bytes}");
        Ok(())
    }

    /// The driver with the stub harness `cat FILE`, from spawn to the driver's exit; its peak RSS.
    fn driver_once(
        driver: &Path,
        home: &Path,
        cwd: &Path,
        rep: usize,
        input: &Path,
        gen_: &Generated,
    ) -> Res<(Duration, i64)> {
        let run = format!("relay-{}", rep + 1);
        let mb = Mailbox::create(home, &run).map_err(err("create the mailbox"))?;
        let input_s = input.to_str().ok_or("temp path is not UTF-8")?;
        let t0 = Instant::now();
        let mut child = spawn_driver(driver, &mb, cwd, &["cat", input_s])?;
        let exit = child.wait(TIMEOUT)?;
        let dt = exit.at - t0;
        ensure!(
            libc::WIFEXITED(exit.status),
            "the driver did not exit normally: {}",
            exit.describe()
        );
        let log = mb.ctl().run_log();
        let checked = verify(input, &log, gen_)
            .map_err(|e| format!("{e} (the driver ended with {})", exit.describe()));
        // Keep disk use bounded: the control folder (with the run log) and the client folder go.
        let _ = fs::remove_dir_all(mb.ctl().root());
        let _ = fs::remove_dir_all(hangar_mailbox::ctl::client_dir(home, &run));
        checked?;
        Ok((dt, exit.max_rss_kib))
    }

    /// The run log holds every input line, in order, unchanged, except that each `result` line
    /// gained the process usage as its last member (with the right running totals); besides
    /// them only hangar's own lines.
    fn verify(input: &Path, log: &Path, gen_: &Generated) -> Res<()> {
        let open = |p: &Path| {
            File::open(p)
                .map(|f| BufReader::with_capacity(1 << 20, f))
                .map_err(err(format!("open {}", p.display())))
        };
        let (mut a, mut b) = (open(input)?, open(log)?);
        let (mut la, mut lb) = (Vec::new(), Vec::new());
        let (mut lines, mut results, mut hangar_lines) = (0u64, 0u64, 0u64);
        let prefix = format!(
            "{},\"{PROCESS_USAGE}\":",
            &RESULT_LINE[..RESULT_LINE.len() - 1]
        );
        loop {
            la.clear();
            let na = a.read_until(b'\n', &mut la).map_err(err("read input"))?;
            let nb = loop {
                lb.clear();
                let n = b.read_until(b'\n', &mut lb).map_err(err("read run.log"))?;
                if n == 0 || !lb.starts_with(b"{\"type\":\"hangar.") {
                    break n;
                }
                hangar_lines += 1;
            };
            if na == 0 {
                ensure!(
                    nb == 0,
                    "run.log has harness lines beyond the input's {lines}"
                );
                break;
            }
            ensure!(
                nb != 0,
                "run.log ends after {lines} of {} input lines",
                gen_.lines
            );
            lines += 1;
            ensure!(lb.ends_with(b"\n"), "run.log line {lines} has no newline");
            if la.starts_with(b"{\"type\":\"result\"") {
                results += 1;
                ensure!(
                    lb.starts_with(prefix.as_bytes()),
                    "result line {lines} was not patched in place: {}",
                    String::from_utf8_lossy(&lb)
                );
                let v: Value = serde_json::from_slice(&lb)
                    .map_err(err(format!("patched result line {lines} is not JSON")))?;
                let u = &v[PROCESS_USAGE];
                ensure!(
                    u["input_tokens"].as_u64() == Some(11 * results)
                        && u["output_tokens"].as_u64() == Some(7 * results),
                    "result {results}: wrong running totals {u}"
                );
            } else {
                ensure!(la == lb, "run.log line {lines} differs from the input");
            }
        }
        ensure!(
            lines == gen_.lines && results == gen_.results,
            "run.log has {lines} lines ({results} results), the input {} ({})",
            gen_.lines,
            gen_.results
        );
        ensure!(hangar_lines >= 1, "no hangar lines in run.log");
        Ok(())
    }

    struct Generated {
        lines: u64,
        results: u64,
        bytes: u64,
    }

    /// A small deterministic PRNG (xorshift64*), so every run relays the same bytes.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn range(&mut self, lo: usize, hi: usize) -> usize {
            lo + usize::try_from(self.below((hi - lo + 1) as u64)).unwrap_or(0)
        }
        fn hex(&mut self, digits: usize) -> String {
            let mut s = String::with_capacity(digits);
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
    /// and non-ASCII, so the generator's JSON escaping is exercised.
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
            "C:\\Users\\dev",
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
            "naïve",
            "→",
            "✓",
            "日本語",
            "🚀",
            "<tag attr=\"v\">",
            "&amp;",
            "'single'",
            "$HOME",
            "#include",
            "<stdio.h>",
            "printf(\"%d\\n\",",
            "i);",
            "ok",
            "tests",
            "passed;",
            "0",
            "failed;",
            "Compiling",
            "hangar-driver",
            "v0.1.0",
            "Finished",
            "`release`",
            "profile",
            "[optimized]",
            "target(s)",
            "in",
            "12.34s",
            "I'll",
            "now",
            "update",
            "the",
            "README",
            "so",
            "it",
            "mentions",
            "this.",
        ];
        let mut s = String::with_capacity(len + 64);
        while s.len() < len {
            s.push_str(WORDS[usize::try_from(rng.below(WORDS.len() as u64)).unwrap_or(0)]);
            s.push(match rng.below(20) {
                0 => '\n',
                1 => '\t',
                _ => ' ',
            });
        }
        s
    }

    /// A slice of the pool of about `len` bytes at a random place, on char boundaries.
    fn snippet<'a>(rng: &mut Rng, pool: &'a str, len: usize) -> &'a str {
        let mut start = rng.range(0, pool.len() - len - 8);
        while !pool.is_char_boundary(start) {
            start += 1;
        }
        let mut end = start + len;
        while !pool.is_char_boundary(end) {
            end += 1;
        }
        &pool[start..end]
    }

    /// Writes about `target` bytes of Claude Code stream-json: assistant text messages, tool
    /// results, system `task_started` lines, and a `result` every 1,000 lines.
    fn generate(path: &Path, target: u64) -> Res<Generated> {
        let f = File::create(path).map_err(err("create the input"))?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let pool = text_pool(&mut rng, 1 << 20);
        let session = rng.uuid();
        let (mut lines, mut results, mut bytes) = (0u64, 0u64, 0u64);
        let mut line = Vec::with_capacity(8192);
        let wr = |e: io::Error| format!("write the input: {e}");
        let json = |e: serde_json::Error| format!("encode: {e}");
        while bytes < target {
            line.clear();
            if (lines + 1) % 1000 == 0 {
                line.extend_from_slice(RESULT_LINE.as_bytes());
                results += 1;
            } else {
                match rng.below(100) {
                    0..45 => {
                        let text = {
                            let n = rng.range(500, 2000);
                            snippet(&mut rng, &pool, n)
                        };
                        write!(
                            line,
                            r#"{{"type":"assistant","message":{{"id":"msg_01{}","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{{"type":"text","text":"#,
                            rng.hex(22)
                        )
                        .map_err(wr)?;
                        serde_json::to_writer(&mut line, text).map_err(json)?;
                        write!(
                            line,
                            r#"}}],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"cache_creation_input_tokens":{},"cache_read_input_tokens":{},"output_tokens":{},"service_tier":"standard"}}}},"parent_tool_use_id":null,"session_id":"{session}","uuid":"{}"}}"#,
                            rng.below(10),
                            rng.below(5000),
                            rng.below(90000),
                            rng.below(800),
                            rng.uuid()
                        )
                        .map_err(wr)?;
                    }
                    45..90 => {
                        let text = {
                            let n = rng.range(100, 4000);
                            snippet(&mut rng, &pool, n)
                        };
                        write!(
                            line,
                            r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"toolu_01{}","type":"tool_result","content":"#,
                            rng.hex(22)
                        )
                        .map_err(wr)?;
                        serde_json::to_writer(&mut line, text).map_err(json)?;
                        write!(
                            line,
                            r#","is_error":false}}]}},"parent_tool_use_id":null,"session_id":"{session}","uuid":"{}"}}"#,
                            rng.uuid()
                        )
                        .map_err(wr)?;
                    }
                    _ => {
                        let desc = {
                            let n = rng.range(20, 120);
                            snippet(&mut rng, &pool, n)
                        };
                        write!(
                            line,
                            r#"{{"type":"system","subtype":"task_started","task_id":"{}","description":"#,
                            rng.hex(9)
                        )
                        .map_err(wr)?;
                        serde_json::to_writer(&mut line, desc).map_err(json)?;
                        write!(
                            line,
                            r#","session_id":"{session}","uuid":"{}"}}"#,
                            rng.uuid()
                        )
                        .map_err(wr)?;
                    }
                }
            }
            // A few hundred lines are parsed back, to be sure the generator writes valid JSON.
            if lines < 300 {
                serde_json::from_slice::<Value>(&line)
                    .map_err(err(format!("generated line {lines} is not JSON")))?;
            }
            line.push(b'\n');
            w.write_all(&line).map_err(wr)?;
            bytes += line.len() as u64;
            lines += 1;
        }
        w.flush().map_err(wr)?;
        Ok(Generated {
            lines,
            results,
            bytes,
        })
    }
}
