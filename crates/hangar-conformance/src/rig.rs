//! One scenario's world: a hangar home with the run's control folder, a work folder, a home for
//! the CLI, the scripted model, and the real driver running the CLI under test. Every wait has a
//! deadline and says what it waited for; nothing panics (a scenario that goes wrong is a failed
//! capability, not a crashed suite).

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hangar_mailbox::outbox::{Delivery, Mailbox, Outcome};
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, RecordedRequest, Script, claude_env, codex_env, codex_offline_args,
};
use serde_json::Value;

use crate::{Harness, Tools};

/// How long any one wait may take.
pub const LONG: Duration = Duration::from_secs(60);

pub type Check<T = ()> = Result<T, String>;

/// The scripted model behind the CLI.
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

    fn base_url(&self) -> String {
        match self {
            Fake::Anthropic(f) => f.base_url(),
            Fake::OpenAi(f) => f.base_url(),
        }
    }
}

pub struct Rig<'t> {
    tools: &'t Tools,
    harness: Harness,
    home: tempfile::TempDir,
    pub work: tempfile::TempDir,
    user_home: tempfile::TempDir,
    pub fake: Fake,
    pub mailbox: Mailbox,
    run: String,
    child: Option<Child>,
}

impl<'t> Rig<'t> {
    /// A rig whose first command (the prompt) is already waiting in `in/`.
    pub fn new(tools: &'t Tools, harness: Harness, script: Script, prompt: &str) -> Check<Rig<'t>> {
        let fake = match harness {
            Harness::Claude => Fake::Anthropic(FakeAnthropic::start(script).map_err(text)?),
            Harness::Codex => Fake::OpenAi(FakeOpenAi::start(script).map_err(text)?),
        };
        let home = tempfile::tempdir().map_err(text)?;
        let run = next_run_id();
        let mailbox = Mailbox::create(home.path(), &run).map_err(text)?;
        let rig = Rig {
            tools,
            harness,
            home,
            work: tempfile::tempdir().map_err(text)?,
            user_home: tempfile::tempdir().map_err(text)?,
            fake,
            mailbox,
            run,
            child: None,
        };
        rig.send(Kind::Prompt, body::text(prompt))?;
        Ok(rig)
    }

    /// The next run (turn) in the same homes and folder, with its prompt waiting.
    pub fn next_run(&mut self, prompt: &str) -> Check {
        if self.child.is_some() {
            return Err("the previous run is still going".into());
        }
        self.run = next_run_id();
        self.mailbox = Mailbox::create(self.home.path(), &self.run).map_err(text)?;
        self.send(Kind::Prompt, body::text(prompt))
    }

    /// Starts the driver for this rig's harness under `policy`, with `extra` driver flags.
    pub fn start(&mut self, policy: &str, extra: &[&str]) -> Check {
        let mut c = Command::new(&self.tools.driver);
        c.arg("--ctl")
            .arg(self.mailbox.ctl().root())
            .args(["--run", &self.run, "--policy", policy])
            .arg("--cwd")
            .arg(self.work.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.user_home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match self.harness {
            Harness::Claude => {
                let config = self.user_home.path().join(".claude-config");
                fs::create_dir_all(&config).map_err(text)?;
                c.arg("--claude-bin")
                    .arg(&self.tools.bin)
                    .envs(claude_env(&self.fake.base_url(), &config));
            }
            Harness::Codex => {
                // Offline: our own model provider and plugins off (the driver turns plugins off
                // itself), never Codex's default hosts.
                let codex_home = self.user_home.path().join(".codex-home");
                fs::create_dir_all(&codex_home).map_err(text)?;
                c.args(["--harness", "codex", "--model-timeout", "20"])
                    .arg("--codex-bin")
                    .arg(&self.tools.bin)
                    .envs(codex_env(&codex_home));
                let offline = codex_offline_args(&self.fake.base_url());
                let mut it = offline.iter();
                while let Some(a) = it.next() {
                    match (a.as_str(), it.next()) {
                        ("-c", Some(v)) => {
                            c.arg("--codex-config").arg(v);
                        }
                        ("--disable", Some(p)) if p == "plugins" => {}
                        (other, _) => return Err(format!("unexpected offline argument {other}")),
                    }
                }
            }
        }
        c.args(extra).process_group(0);
        self.child = Some(c.spawn().map_err(|e| {
            format!(
                "cannot start the driver {}: {e}",
                self.tools.driver.display()
            )
        })?);
        Ok(())
    }

    /// Waits for the driver to exit; its status.
    pub fn wait_exit(&mut self) -> Check<i32> {
        let deadline = Instant::now() + LONG;
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err("the driver was not started".into());
            };
            if let Some(st) = child.try_wait().map_err(text)? {
                self.child = None;
                return Ok(st.code().unwrap_or(-1));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the driver did not exit within {LONG:?}{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The driver's exit status if it has exited (it is then reaped and forgotten).
    fn exited(&mut self) -> Check<Option<i32>> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        match child.try_wait().map_err(text)? {
            Some(st) => {
                self.child = None;
                Ok(Some(st.code().unwrap_or(-1)))
            }
            None => Ok(None),
        }
    }

    /// Waits for the driver to exit with `want`.
    pub fn expect_exit(&mut self, want: i32) -> Check {
        match self.wait_exit()? {
            code if code == want => Ok(()),
            code => Err(format!(
                "the driver exited {code}, not {want}{}",
                self.log_tail()
            )),
        }
    }

    pub fn send(&self, kind: Kind, b: Value) -> Check {
        match self.mailbox.send(kind, b).map_err(text)? {
            Delivery::Landed(_) => Ok(()),
            Delivery::TurnEnded(_) => Err(format!("the turn ended before the {kind} landed")),
        }
    }

    /// Sends a command and waits for the driver's answer, which must be `done`.
    pub fn request_done(&self, kind: Kind, b: Value) -> Check {
        match self.mailbox.request(kind, b, LONG).map_err(text)? {
            Outcome::Done => Ok(()),
            other => Err(format!("the {kind} was answered {other:?}, not done")),
        }
    }

    pub fn log_lines(&self) -> Vec<Value> {
        fs::read_to_string(self.mailbox.ctl().run_log())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The run log's lines of one `type`.
    pub fn lines_of(&self, ty: &str) -> Vec<Value> {
        self.log_lines()
            .into_iter()
            .filter(|v| v["type"] == ty)
            .collect()
    }

    /// Waits for the first run-log line of `type`.
    pub fn wait_type(&mut self, ty: &str) -> Check<Value> {
        let deadline = Instant::now() + LONG;
        loop {
            if let Some(v) = self.lines_of(ty).into_iter().next() {
                return Ok(v);
            }
            if let Some(code) = self.exited()? {
                return Err(format!(
                    "the driver exited {code} with no {ty} line{}",
                    self.log_tail()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!("no {ty} line within {LONG:?}{}", self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the model has had `n` requests.
    pub fn wait_requests(&self, n: usize) -> Check<Vec<RecordedRequest>> {
        let r = match &self.fake {
            Fake::Anthropic(f) => f.wait_for_requests(n, LONG),
            Fake::OpenAi(f) => f.wait_for_requests(n, LONG),
        };
        r.map_err(|e| format!("the model did not get {n} requests: {e}{}", self.log_tail()))
    }

    pub fn workspace(&self) -> &Path {
        self.work.path()
    }

    /// The CLI's `HOME`.
    pub fn user_home(&self) -> &Path {
        self.user_home.path()
    }

    /// Claude Code's `CLAUDE_CONFIG_DIR` in this rig.
    pub fn claude_config_dir(&self) -> std::path::PathBuf {
        self.user_home.path().join(".claude-config")
    }

    /// Codex's `CODEX_HOME` in this rig.
    pub fn codex_home(&self) -> std::path::PathBuf {
        self.user_home.path().join(".codex-home")
    }

    /// The last lines of the run log, for a failure's message.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.mailbox.ctl().run_log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(6)..].join("\n  ");
        if tail.is_empty() {
            String::new()
        } else {
            format!("; the run log ends:\n  {tail}")
        }
    }
}

impl Drop for Rig<'_> {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // The driver runs in a process group of its own; the harness in another. End both,
            // by the pids this rig started and the driver reported.
            for line in self.lines_of("hangar.started") {
                if let Some(pid) = line["harness_pid"]
                    .as_i64()
                    .and_then(|p| i32::try_from(p).ok())
                    && pid > 1
                {
                    // SAFETY: kill(2) with a process group id this rig's driver started.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn next_run_id() -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "run-conformance-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

pub fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}
