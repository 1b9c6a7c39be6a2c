//! A rig for end-to-end driver tests: a temp hangar home, a work folder, the scripted fake model,
//! the real Claude Code CLI, and the driver under test (`HANGAR_DRIVER_BIN`, the static release
//! build that scripts/test makes, else this package's debug build).
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers"
)]

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hangar_mailbox::outbox::{Delivery, Mailbox, Sent};
use hangar_protocol::{Ack, Kind};
use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, RecordedRequest, Script, TestkitError, claude_bin, claude_env,
    codex_bin, codex_env, codex_offline_args, workspace_root,
};
use serde_json::Value;

pub const LONG: Duration = Duration::from_secs(60);

pub fn driver_bin() -> PathBuf {
    match std::env::var_os("HANGAR_DRIVER_BIN").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_BIN_EXE_hangar-driver")),
    }
}

/// The Tower hook executable (also the governed policy's Tower client).
#[allow(dead_code, reason = "not every test file asks Tower")]
pub fn tower_hook_bin() -> PathBuf {
    let p = std::env::var_os("HANGAR_TOWER_HOOK_BIN")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || workspace_root().join("target/debug/hangar-tower-hook"),
            PathBuf::from,
        );
    assert!(
        p.exists(),
        "no Tower hook at {}: cargo build -p hangar-hook, or set HANGAR_TOWER_HOOK_BIN",
        p.display()
    );
    p
}

/// The scripted model behind the harness.
pub enum Fake {
    Anthropic(FakeAnthropic),
    OpenAi(FakeOpenAi),
}

impl Fake {
    pub fn requests(&self) -> Vec<RecordedRequest> {
        match self {
            Fake::Anthropic(f) => f.requests(),
            Fake::OpenAi(f) => f.requests(),
        }
    }

    pub fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedRequest>, TestkitError> {
        match self {
            Fake::Anthropic(f) => f.wait_for_requests(n, timeout),
            Fake::OpenAi(f) => f.wait_for_requests(n, timeout),
        }
    }

    pub fn base_url(&self) -> String {
        match self {
            Fake::Anthropic(f) => f.base_url(),
            Fake::OpenAi(f) => f.base_url(),
        }
    }
}

pub struct Rig {
    pub home: tempfile::TempDir,
    pub work: tempfile::TempDir,
    pub user_home: tempfile::TempDir,
    pub fake: Fake,
    pub mailbox: Mailbox,
    pub run: String,
    pub child: Option<Child>,
}

impl Rig {
    /// A Claude Code rig whose first command (the prompt) is already waiting in `in/`.
    pub fn new(script: Script, prompt: &str) -> Rig {
        Rig::with_fake(
            Fake::Anthropic(FakeAnthropic::start(script).unwrap()),
            prompt,
        )
    }

    /// A Codex rig (drive it with [`Rig::codex_command`]).
    pub fn codex(script: Script, prompt: &str) -> Rig {
        Rig::with_fake(Fake::OpenAi(FakeOpenAi::start(script).unwrap()), prompt)
    }

    fn with_fake(fake: Fake, prompt: &str) -> Rig {
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let user_home = tempfile::tempdir().unwrap();
        // Unique per test: the Stop hook's folder is named after the run, in the shared /tmp.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let run = format!(
            "run-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mailbox = Mailbox::create(home.path(), &run).unwrap();
        let rig = Rig {
            home,
            work,
            user_home,
            fake,
            mailbox,
            run,
            child: None,
        };
        rig.send(Kind::Prompt, hangar_protocol::command::body::text(prompt));
        rig
    }

    /// A further run (turn) in the same home and folder, with its prompt waiting.
    pub fn next_run(&mut self, prompt: &str) {
        assert!(self.child.is_none(), "the previous run is still going");
        self.run = format!("{}-next", self.run);
        self.mailbox = Mailbox::create(self.home.path(), &self.run).unwrap();
        self.send(Kind::Prompt, hangar_protocol::command::body::text(prompt));
    }

    pub fn codex_home(&self) -> PathBuf {
        self.user_home.path().join(".codex-home")
    }

    /// The driver's command line for a Codex turn, offline against the fake.
    pub fn codex_command(&self, policy: &str, extra: &[&str]) -> Command {
        std::fs::create_dir_all(self.codex_home()).unwrap();
        let mut c = Command::new(driver_bin());
        c.arg("--ctl")
            .arg(self.ctl())
            .args(["--run", &self.run, "--harness", "codex", "--policy", policy])
            .arg("--cwd")
            .arg(self.work.path())
            .arg("--codex-bin")
            .arg(codex_bin().unwrap())
            .args(["--model-timeout", "20"]);
        let offline = codex_offline_args(&self.fake.base_url());
        let mut it = offline.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "-c" => {
                    c.arg("--codex-config").arg(it.next().unwrap());
                }
                // The driver always disables plugins itself.
                "--disable" => {
                    assert_eq!(it.next().map(String::as_str), Some("plugins"));
                }
                other => panic!("unexpected offline argument {other}"),
            }
        }
        c.args(extra)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.user_home.path())
            .env("HANGAR_SHOULD_NOT_PASS", "driver-only")
            .envs(codex_env(&self.codex_home()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        c
    }

    pub fn ctl(&self) -> &Path {
        self.mailbox.ctl().root()
    }

    pub fn config_dir(&self) -> PathBuf {
        self.user_home.path().join(".claude-config")
    }

    /// The driver's command line for this rig.
    pub fn driver_command(&self, policy: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(driver_bin());
        c.arg("--ctl")
            .arg(self.ctl())
            .args(["--run", &self.run, "--policy", policy])
            .arg("--cwd")
            .arg(self.work.path())
            .arg("--claude-bin")
            .arg(claude_bin().unwrap())
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.user_home.path())
            .env("HANGAR_SHOULD_NOT_PASS", "driver-only")
            .envs(claude_env(&self.fake.base_url(), &self.config_dir()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        c
    }

    pub fn start(&mut self, policy: &str) {
        self.start_with(self.driver_command(policy, &[]));
    }

    pub fn start_with(&mut self, mut cmd: Command) {
        cmd.process_group(0);
        self.child = Some(cmd.spawn().unwrap());
    }

    pub fn driver_pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Waits for the driver to exit; its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> i32 {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return st.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                panic!(
                    "driver did not exit within {timeout:?}; log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(self.mailbox.ctl().run_log()).unwrap_or_default()
    }

    pub fn log_lines(&self) -> Vec<Value> {
        self.log_text()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Lines of one `type`.
    pub fn lines_of(&self, ty: &str) -> Vec<Value> {
        self.log_lines()
            .into_iter()
            .filter(|v| v["type"] == ty)
            .collect()
    }

    /// Waits until a run-log line matches.
    pub fn wait_line(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + LONG;
        loop {
            if let Some(v) = self.log_lines().into_iter().find(|v| pred(v)) {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "no run-log line {what} within {LONG:?}; log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn wait_type(&self, ty: &str) -> Value {
        self.wait_line(ty, |v| v["type"] == ty)
    }

    /// Waits for the first permission request; its request id.
    pub fn wait_approval(&self) -> String {
        self.wait_type("hangar.approval")["request_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub fn send(&self, kind: Kind, body: Value) -> Sent {
        match self.mailbox.send(kind, body).unwrap() {
            Delivery::Landed(s) => s,
            Delivery::TurnEnded(c) => panic!("turn ended before {c:?} landed"),
        }
    }

    /// Delivers raw bytes as a command file and returns the verified ack (seq/nonce as given).
    pub fn deliver_raw(&self, name: &str, bytes: &[u8], seq: u64, nonce: &str) -> Ack {
        assert!(
            self.mailbox.deliver_bytes(name, bytes).unwrap(),
            "in/ is open"
        );
        self.wait_ack(name, seq, nonce)
    }

    pub fn wait_ack(&self, name: &str, seq: u64, nonce: &str) -> Ack {
        let path = self.mailbox.ctl().ack_for(name);
        let deadline = Instant::now() + LONG;
        loop {
            if let Ok(b) = fs::read(&path)
                && let Some(a) =
                    Ack::parse_verified(&b, self.mailbox.key(), &self.run, name, seq, nonce)
            {
                return a;
            }
            if Instant::now() > deadline {
                panic!("no verified ack for {name}; log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // The driver runs in a process group of its own; the harness in another. Kill both.
            for line in self.lines_of("hangar.started") {
                if let Some(pid) = line["harness_pid"].as_i64() {
                    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The agent's uid and gid in the uid-split tests (`nobody`).
pub const AGENT: u32 = 65534;

/// Hands folders and everything in them to the agent's uid.
pub fn give_to_agent(paths: &[&Path]) {
    for p in paths {
        std::os::unix::fs::chown(p, Some(AGENT), Some(AGENT)).unwrap();
        if p.is_dir() {
            for e in fs::read_dir(p).unwrap() {
                give_to_agent(&[&e.unwrap().path()]);
            }
        }
    }
}

/// Fails unless running as root (the uid-split tests need it; CI runs as root).
pub fn assert_root() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test checks the uid split and needs root (CI runs as root)"
    );
}
