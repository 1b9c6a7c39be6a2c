//! What the chaos run (`hangar-chaos`, `scripts/chaos`) and the load run (`hangar-load`,
//! `scripts/load`) share: a real `hangar serve` started, killed with SIGKILL and started again
//! (by pid, never by name), its API with a bearer token, a PostgreSQL schema of their own, a
//! seeded random generator, and the check that a run's stored events equal a rebuild of its log.
//!
//! Nothing here is a mock: the server, the driver and the store are hangar's own; only the model
//! (hangar-testkit's fake) or the harness (`hangar-stub-claude`, for load) are stand-ins.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub type Res<T> = Result<T, String>;

/// Formats an error with what was being done.
pub fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

/// The folder of this executable: `hangar`, `hangar-driver` and `hangar-stub-claude` are built
/// next to it (`cargo build` puts every binary of the workspace in one folder).
pub fn bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// An executable: `$ENV` if set, else `NAME` next to this one.
pub fn exe(env: &str, name: &str) -> Res<PathBuf> {
    let p = std::env::var_os(env)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| bin_dir().join(name));
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found (build it: cargo build -p hangar-cli -p hangar-driver -p hangar-chaos, or set {env})",
            p.display()
        ))
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the clock `hangar-stub-claude` stamps its receipts with).
pub fn mono_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// A small seeded generator (xorshift64*): the same seed replays the same choices.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A seed from the system's randomness.
    pub fn fresh_seed() -> u64 {
        let mut b = [0u8; 8];
        let _ = getrandom::fill(&mut b);
        u64::from_le_bytes(b) % 1_000_000_000
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A pause of `lo..hi` milliseconds.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo).max(1)))
    }
}

/// A schema of its own on the PostgreSQL at `base` (`HANGAR_TEST_DATABASE_URL`), dropped at the
/// end.
#[derive(Debug)]
pub struct PgSchema {
    base: String,
    schema: String,
}

impl PgSchema {
    pub fn new(base: &str, prefix: &str) -> Res<PgSchema> {
        let mut b = [0u8; 4];
        let _ = getrandom::fill(&mut b);
        let schema = format!(
            "{prefix}_{}_{:08x}",
            std::process::id(),
            u32::from_le_bytes(b)
        );
        psql(base, &format!("CREATE SCHEMA {schema}"))?;
        Ok(PgSchema {
            base: base.to_owned(),
            schema,
        })
    }

    /// `HANGAR_DATABASE_URL` for this schema.
    pub fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}options=-c%20search_path%3D{}",
            self.base, self.schema
        )
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let _ = psql(
            &self.base,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        );
    }
}

fn psql(url: &str, sql: &str) -> Res<()> {
    let out = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qc", sql])
        .output()
        .map_err(err("psql (Debian's postgresql-client)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// hangar's environment for one run of the tool: a home of its own, the executables, and what
/// every `hangar` it starts gets.
#[derive(Debug)]
pub struct Env {
    pub hangar: PathBuf,
    /// HOME and HANGAR_HOME (`<root>/hangar`).
    pub root: tempfile::TempDir,
    pub vars: Vec<(String, String)>,
}

impl Env {
    pub fn new(vars: Vec<(String, String)>) -> Res<Env> {
        let root = tempfile::Builder::new()
            .prefix("hangar-chaos-")
            .tempdir()
            .map_err(err("a temporary folder"))?;
        Ok(Env {
            hangar: exe("HANGAR_BIN", "hangar")?,
            root,
            vars,
        })
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("hangar")
    }

    /// `hangar ARGS` with this environment only (PATH kept).
    pub fn hangar(&self) -> Command {
        let mut c = Command::new(&self.hangar);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.path())
            .env("HANGAR_HOME", self.home())
            .envs(self.vars.iter().map(|(k, v)| (k, v)));
        c
    }

    /// A token for `person`, made an admin first (`hangar person add --admin`, `hangar token
    /// create`): the runs start on plain folders, which only admins may.
    pub fn admin_token(&self, person: &str) -> Res<String> {
        let out = self
            .hangar()
            .args(["person", "add", "--admin", person])
            .output()
            .map_err(err("hangar person add"))?;
        if !out.status.success() {
            return Err(format!(
                "hangar person add --admin {person}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        self.token(person)
    }

    /// A token for `person` (`hangar token create`).
    pub fn token(&self, person: &str) -> Res<String> {
        let out = self
            .hangar()
            .args(["token", "create", "--person", person])
            .output()
            .map_err(err("hangar token create"))?;
        if !out.status.success() {
            return Err(format!(
                "hangar token create: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // The token is alone on the last line (`id: …` and the expiry come first).
        let out = String::from_utf8_lossy(&out.stdout);
        Ok(out.lines().last().unwrap_or_default().trim().to_owned())
    }

    /// The control folder of a run (a plain folder's turn).
    pub fn ctl(&self, run: &str) -> PathBuf {
        self.home().join("runs").join(format!("{run}.ctl"))
    }
}

/// One `hangar serve` process.
#[derive(Debug)]
pub struct Serve {
    child: Option<Child>,
    pub url: String,
    pub pid: u32,
    /// Its stderr (tracing), appended over restarts.
    pub log: PathBuf,
}

impl Serve {
    /// Starts `hangar serve --listen 127.0.0.1:0` and waits for its `listening:` line. It allows
    /// plain folders (`--unsandboxed-folders`): the runs it measures are the driver's and the
    /// control plane's, in plain folders, as they were before sessions got the in-place sandbox
    /// by default.
    pub fn start(env: &Env, extra: &[(String, String)], log: &Path) -> Res<Serve> {
        Serve::start_in(env, extra, log, None)
    }

    /// [`Serve::start`]; with `own_home`, in a mount namespace of its own in which that folder
    /// is seen at the environment's home (the folder there for everyone else is hidden under
    /// it): a replica that shares no disk with the others, as on another machine. The folder
    /// gets the environment's master key.
    pub fn start_in(
        env: &Env,
        extra: &[(String, String)],
        log: &Path,
        own_home: Option<&Path>,
    ) -> Res<Serve> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(err("the server's log"))?;
        let mut cmd = env.hangar();
        cmd.envs(extra.iter().map(|(k, v)| (k, v))).args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--unsandboxed-folders",
        ]);
        if let Some(own) = own_home {
            std::fs::create_dir_all(own).map_err(err("the replica's home"))?;
            let key = own.join("master.key");
            if !key.exists() {
                std::fs::copy(env.home().join("master.key"), &key)
                    .map_err(err("the master key"))?;
            }
            let mut wrapped = Command::new("unshare");
            wrapped
                .env_clear()
                .envs(
                    cmd.get_envs()
                        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
                )
                .args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(r#"mount --bind "$1" "$2" && shift 2 && exec "$@""#)
                .arg("sh")
                .arg(own)
                .arg(env.home())
                .arg(cmd.get_program())
                .args(cmd.get_args());
            cmd = wrapped;
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(err("start hangar serve"))?;
        let pid = child.id();
        let mut line = String::new();
        let read = child
            .stdout
            .take()
            .map(|o| BufReader::new(o).read_line(&mut line));
        let url = match (read, line.trim().strip_prefix("listening: ")) {
            (Some(Ok(_)), Some(u)) => u.to_owned(),
            _ => {
                kill(pid, libc::SIGKILL);
                let _ = child.wait();
                let tail = std::fs::read_to_string(log).unwrap_or_default();
                let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join("\n");
                return Err(format!("hangar serve did not start ({line:?}): {tail}"));
            }
        };
        Ok(Serve {
            child: Some(child),
            url,
            pid,
            log: log.to_owned(),
        })
    }

    /// SIGKILL, and reaped.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(self.pid, libc::SIGKILL);
            let _ = c.wait();
        }
    }

    /// SIGTERM, and reaped (a clean stop).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(self.pid, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            kill(self.pid, libc::SIGKILL);
            let _ = c.wait();
        }
    }

    /// Its resident memory and its peak, in KiB (VmRSS, VmHWM).
    pub fn memory_kib(&self) -> (u64, u64) {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Sends `sig` to `pid` (a process this tool started, or one of its descendants).
pub fn kill(pid: u32, sig: i32) -> bool {
    match i32::try_from(pid) {
        // SAFETY: a plain kill(2); pid > 0 names one process.
        Ok(p) if p > 0 => unsafe { libc::kill(p, sig) == 0 },
        _ => false,
    }
}

/// Sends `sig` to the process group `pgid` (a harness the driver started in a group of its own:
/// Codex's npm wrapper and the binary under it, or Claude Code and the tools it runs).
pub fn kill_group(pgid: u32, sig: i32) -> bool {
    match i32::try_from(pgid) {
        // SAFETY: a plain kill(2); a negative pid names the process group, never 0 or -1.
        Ok(p) if p > 1 => unsafe { libc::kill(-p, sig) == 0 },
        _ => false,
    }
}

/// Whether `pid` is there and not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| !s[i + 1..].trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// A client of the API.
#[derive(Debug, Clone)]
pub struct Api {
    client: reqwest::Client,
    /// For live streams: no limit on the whole request (only on connecting).
    streams: reqwest::Client,
    pub base: String,
    token: String,
}

/// One event of a live stream.
#[derive(Debug, Clone)]
pub struct StreamEvent {
    pub id: i64,
    pub kind: String,
    pub data: Value,
}

/// What a call got: its status and JSON body, or the transport failed (a server killed
/// mid-request).
pub type Call = Result<(u16, Value), String>;

impl Api {
    pub fn new(base: &str, token: &str) -> Res<Api> {
        Ok(Api {
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .timeout(Duration::from_secs(90))
                .build()
                .map_err(err("an HTTP client"))?,
            streams: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .map_err(err("an HTTP client"))?,
            base: base.to_owned(),
            token: token.to_owned(),
        })
    }

    pub fn at(&self, base: &str) -> Api {
        Api {
            base: base.to_owned(),
            ..self.clone()
        }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Call {
        let m: reqwest::Method = method.parse().map_err(err("method"))?;
        let mut req = self
            .client
            .request(m, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// A live event stream (`text/event-stream`) from after event `after`: its events as they
    /// come, each with its id, kind and JSON data (`eventsource-stream` parses the wire format).
    pub async fn stream(
        &self,
        path: &str,
        after: i64,
    ) -> Res<impl futures_util::Stream<Item = Res<StreamEvent>> + use<>> {
        use eventsource_stream::Eventsource;
        use futures_util::StreamExt;
        let resp = self
            .streams
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("last-event-id", after.to_string())
            .send()
            .await
            .map_err(|e| format!("GET {path}: {e}"))?;
        if resp.status() != 200 {
            return Err(format!("GET {path}: {}", resp.status()));
        }
        Ok(resp.bytes_stream().eventsource().map(|e| {
            let e = e.map_err(|e| format!("the event stream: {e}"))?;
            Ok(StreamEvent {
                id: e.id.parse().unwrap_or(0),
                kind: e.event,
                data: serde_json::from_str(&e.data).unwrap_or(Value::Null),
            })
        }))
    }

    /// A GET that must answer 200 (retried while the server restarts, up to `patience`).
    pub async fn get(&self, path: &str) -> Res<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.call("GET", path, None).await {
                Ok((200, v)) => return Ok(v),
                Ok((s, v)) if s != 502 && s != 503 => return Err(format!("GET {path}: {s} {v}")),
                other => {
                    if Instant::now() >= deadline {
                        return Err(format!("GET {path}: {other:?}"));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every stored event of a run (id, kind, payload, created_at), paged.
    pub async fn events(&self, run: &str) -> Res<Vec<Value>> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .get(&format!("/v1/runs/{run}/events?after={after}&limit=1000"))
                .await?;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            let Some(last) = events.last() else { break };
            after = last["id"].as_i64().unwrap_or(i64::MAX);
            all.extend(events);
        }
        Ok(all)
    }
}

/// A run's log rebuilt from offset 0 with the parser the server uses (the source of truth).
pub fn rebuild(log: &Path) -> Vec<Value> {
    hangar_events::rebuild(log)
        .iter()
        .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
        .collect()
}

/// [`rebuild`] as the server read the log: in the mode its watcher stored (the run's `log`),
/// with the seal key the control plane kept beside the ended run's log
/// (`<home>/kept/<run>/seal.key`).
pub fn rebuild_as_read(log: &Path, home: &Path, run: &str, mode: &Value) -> Vec<Value> {
    let mode: Option<hangar_events::LogMode> = serde_json::from_value(mode.clone()).ok();
    let mut reader = hangar_events::LogReader::new();
    if let Ok(text) = std::fs::read_to_string(home.join("kept").join(run).join("seal.key"))
        && let Ok(key) = hangar_events::watcher::SealKey::from_file_text(&text)
    {
        reader = reader.sealed(key, run);
    }
    hangar_events::rebuild_with(log, &reader, mode)
        .iter()
        .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
        .collect()
}

/// Compares a run's stored events with a rebuild of its log, read as the server read it:
/// `(events checked, mismatch)`.
pub async fn check_events(
    api: &Api,
    home: &Path,
    run: &str,
    log: &Path,
) -> Res<(usize, Option<String>)> {
    let stored: Vec<Value> = api
        .events(run)
        .await?
        .into_iter()
        .map(|e| e["payload"].clone())
        .collect();
    let mode = api.get(&format!("/v1/runs/{run}")).await?["log"].clone();
    let rebuilt = rebuild_as_read(log, home, run, &mode);
    if stored == rebuilt {
        return Ok((stored.len(), None));
    }
    let first = stored
        .iter()
        .zip(&rebuilt)
        .position(|(a, b)| a != b)
        .unwrap_or(stored.len().min(rebuilt.len()));
    Ok((
        stored.len().max(rebuilt.len()),
        Some(format!(
            "run {run}: {} events stored, {} rebuilt from the log; first difference at #{first}: stored {} / rebuilt {}",
            stored.len(),
            rebuilt.len(),
            stored.get(first).unwrap_or(&json!(null)),
            rebuilt.get(first).unwrap_or(&json!(null)),
        )),
    ))
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}
