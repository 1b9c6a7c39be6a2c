//! A small rig for capturing REAL run logs: a temp hangar home, a work folder, the scripted fake
//! model, the real Claude Code / Codex CLI, and the real driver (`HANGAR_DRIVER_BIN`, else
//! `<workspace>/target/debug/hangar-driver`; `cargo build -p hangar-driver` makes it).
//!
//! Copied in small from `crates/hangar-driver/tests/common/mod.rs` (only what these tests need).
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers"
)]

pub mod check;
pub mod scenarios;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hangar_mailbox::outbox::{Delivery, Mailbox, Outcome, Sent};
use hangar_protocol::command::body;
use hangar_protocol::{Kind, command::body::text};
use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, Script, claude_bin, claude_env, codex_bin, codex_env,
    codex_offline_args, workspace_root,
};
use serde_json::Value;

pub const LONG: Duration = Duration::from_secs(60);

/// The driver binary, or a panic that says how to get one.
pub fn driver_bin() -> PathBuf {
    let path = match std::env::var_os("HANGAR_DRIVER_BIN").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => workspace_root()
            .join("target")
            .join("debug")
            .join("hangar-driver"),
    };
    assert!(
        path.is_file(),
        "the hangar driver is missing at {}: run `cargo build -p hangar-driver` (or set \
         HANGAR_DRIVER_BIN to a built driver)",
        path.display()
    );
    path
}

/// The scripted model behind the harness.
pub enum Fake {
    Anthropic(FakeAnthropic),
    OpenAi(FakeOpenAi),
}

impl Fake {
    pub fn base_url(&self) -> String {
        match self {
            Fake::Anthropic(f) => f.base_url(),
            Fake::OpenAi(f) => f.base_url(),
        }
    }

    pub fn wait_for_requests(&self, n: usize) {
        match self {
            Fake::Anthropic(f) => f.wait_for_requests(n, LONG).map(|_| ()),
            Fake::OpenAi(f) => f.wait_for_requests(n, LONG).map(|_| ()),
        }
        .unwrap();
    }
}

/// One run: the fake, its mailbox (the prompt already waiting in `in/`) and the driver.
pub struct Rig {
    pub home: tempfile::TempDir,
    pub work: tempfile::TempDir,
    pub user_home: tempfile::TempDir,
    pub fake: Fake,
    pub mailbox: Mailbox,
    pub run: String,
    child: Option<Child>,
}

impl Rig {
    /// A Claude Code rig.
    pub fn claude(script: Script, prompt: &str) -> Rig {
        Rig::with_fake(
            Fake::Anthropic(FakeAnthropic::start(script).unwrap()),
            prompt,
        )
    }

    /// A Codex rig.
    pub fn codex(script: Script, prompt: &str) -> Rig {
        Rig::with_fake(Fake::OpenAi(FakeOpenAi::start(script).unwrap()), prompt)
    }

    fn with_fake(fake: Fake, prompt: &str) -> Rig {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        // Unique per test: the Stop hook's folder is named after the run, in the shared /tmp.
        let run = format!(
            "run-core-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let home = tempfile::tempdir().unwrap();
        let mailbox = Mailbox::create(home.path(), &run).unwrap();
        let rig = Rig {
            home,
            work: tempfile::tempdir().unwrap(),
            user_home: tempfile::tempdir().unwrap(),
            fake,
            mailbox,
            run,
            child: None,
        };
        rig.send(Kind::Prompt, text(prompt));
        rig
    }

    pub fn log_path(&self) -> PathBuf {
        self.mailbox.ctl().run_log()
    }

    fn base(&self, policy: &str, harness: &str) -> Command {
        let mut c = Command::new(driver_bin());
        c.arg("--ctl")
            .arg(self.mailbox.ctl().root())
            .args(["--run", &self.run, "--harness", harness, "--policy", policy])
            .arg("--cwd")
            .arg(self.work.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.user_home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        c
    }

    /// Starts the driver on Claude Code.
    pub fn start_claude(&mut self, policy: &str, extra: &[&str]) {
        let config = self.user_home.path().join(".claude-config");
        let mut c = self.base(policy, "claude");
        c.arg("--claude-bin")
            .arg(claude_bin().unwrap())
            .args(extra)
            .envs(claude_env(&self.fake.base_url(), &config));
        self.spawn(c);
    }

    /// Starts the driver on Codex, offline against the fake: exactly the testkit's
    /// `codex_offline_args` (the driver adds `--disable plugins` itself, always).
    pub fn start_codex(&mut self, policy: &str, extra: &[&str]) {
        let codex_home = self.user_home.path().join(".codex-home");
        fs::create_dir_all(&codex_home).unwrap();
        let mut c = self.base(policy, "codex");
        c.arg("--codex-bin")
            .arg(codex_bin().unwrap())
            .args(["--model-timeout", "20"]);
        let offline = codex_offline_args(&self.fake.base_url());
        let mut it = offline.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "-c" => {
                    c.arg("--codex-config").arg(it.next().unwrap());
                }
                "--disable" => assert_eq!(it.next().map(String::as_str), Some("plugins")),
                other => panic!("unexpected offline argument {other}"),
            }
        }
        c.args(extra).envs(codex_env(&codex_home));
        self.spawn(c);
    }

    fn spawn(&mut self, mut c: Command) {
        c.process_group(0);
        self.child = Some(c.spawn().unwrap());
    }

    /// Waits for the driver to exit; its status.
    pub fn wait_exit(&mut self) -> i32 {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + LONG;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return st.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "driver did not exit; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits until a run-log line matches.
    pub fn wait_line(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + LONG;
        loop {
            let found = self
                .log_text()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| pred(v));
            if let Some(v) = found {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "no run-log line {what}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the first permission request; its request id.
    pub fn wait_approval(&self) -> String {
        self.wait_line("hangar.approval", |v| v["type"] == "hangar.approval")["request_id"]
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

    /// Sends a command and waits for the driver's signed `done`.
    pub fn request_done(&self, kind: Kind, body: Value) {
        assert_eq!(
            self.mailbox.request(kind, body, LONG).unwrap(),
            Outcome::Done,
            "log:\n{}",
            self.log_text()
        );
    }

    pub fn approve(&self, id: &str) {
        self.request_done(Kind::Approve, body::approve(id, None));
    }

    pub fn deny(&self, id: &str, reason: &str) {
        self.request_done(Kind::Deny, body::deny(id, Some(reason)));
    }

    pub fn interrupt(&self) {
        self.request_done(Kind::Interrupt, body::empty());
    }

    /// Keeps a copy of the log when `HANGAR_CORE_KEEP_LOGS` names a folder (for looking at).
    pub fn keep_log(&self, name: &str) {
        if let Some(dir) = std::env::var_os("HANGAR_CORE_KEEP_LOGS") {
            let dir = Path::new(&dir);
            fs::create_dir_all(dir).unwrap();
            fs::copy(self.log_path(), dir.join(format!("{name}.log"))).unwrap();
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // The driver runs in a process group of its own; the harness in another. Kill both.
            for v in self
                .log_text()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| v["type"] == "hangar.started")
            {
                if let Some(pid) = v["harness_pid"]
                    .as_i64()
                    .and_then(|p| i32::try_from(p).ok())
                {
                    // SAFETY: kill(2) with a negative pid signals that process group only.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
