//! `hangar serve` for end-to-end tests: a temp home, the scripted model, the real driver
//! (`HANGAR_DRIVER_BIN`), the real Claude Code, and the API and CLI as a person uses them.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers"
)]

pub mod answers;
pub mod forks;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hangar_testkit::{FakeAnthropic, Script, claude_bin, claude_env, workspace_root};
use serde_json::Value;

pub fn driver_bin() -> PathBuf {
    std::env::var_os("HANGAR_DRIVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"))
}

pub struct Server {
    pub home: tempfile::TempDir,
    pub fake: FakeAnthropic,
    pub child: Option<Child>,
    pub url: String,
    pub env: Vec<(String, String)>,
}

impl Server {
    pub fn start(script: Script) -> Server {
        Server::start_with(script, Vec::new(), None)
    }

    /// With more variables for the server and, set in its vault first, a credential.
    pub fn start_with(
        script: Script,
        env: Vec<(String, String)>,
        credential: Option<(&str, &str)>,
    ) -> Server {
        let mut s = Server {
            home: tempfile::tempdir().unwrap(),
            fake: FakeAnthropic::start(script).unwrap(),
            child: None,
            url: String::new(),
            env,
        };
        if let Some((name, value)) = credential {
            let mut c = s
                .hangar()
                .args(["credential", "set", name])
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            c.stdin.take().unwrap().write_all(value.as_bytes()).unwrap();
            assert!(c.wait().unwrap().success());
        }
        s.serve();
        s
    }

    /// Starts `hangar serve` on a free port of 127.0.0.1.
    fn serve(&mut self) {
        let mut child = self
            .hangar()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        self.url = line.trim().strip_prefix("listening: ").unwrap().to_owned();
        self.child = Some(child);
    }

    /// Kills `hangar serve` (SIGKILL: the runs go on) and starts it again on the same home;
    /// it re-attaches to the live runs. Its address changes.
    pub fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.url.clear();
        self.serve();
    }

    pub fn hangar(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        let config = self.home.path().join("claude-config");
        std::fs::create_dir_all(&config).unwrap();
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.home.path().join("hangar"))
            .env("HANGAR_DRIVER_BIN", driver_bin())
            .env("HANGAR_CLAUDE_BIN", claude_bin().unwrap())
            .envs(claude_env(&self.fake.base_url(), &config))
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if !self.url.is_empty() {
            c.env("HANGAR_URL", &self.url);
        }
        c
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.hangar().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "hangar {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.home.path().join("hangar/token"))
            .unwrap()
            .trim()
            .to_owned()
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = reqwest::Client::new()
            .request(method.parse().unwrap(), format!("{}{path}", self.url))
            .bearer_auth(self.token());
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        answers::check(&self.url, method, path, status, &body).await;
        (status, body)
    }
}

impl Server {
    pub async fn turn_ended(&self, turn: &str) -> Value {
        until("the turn to end", async || {
            let (_, t) = self.call("GET", &format!("/v1/turns/{turn}"), None).await;
            (t["state"] == "ended").then_some(t)
        })
        .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A test that failed half-way leaves no sandbox (and no tmux server) behind.
        if self.child.is_some()
            && let Ok(out) = self.hangar().args(["sb", "list"]).output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some(id) = line.split_whitespace().next() {
                    let _ = self.hangar().args(["sb", "rm", "--force", id]).output();
                }
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn hook_bin() -> PathBuf {
    std::env::var_os("HANGAR_TOWER_HOOK_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/hangar-tower-hook"))
}

/// The image the docker sandboxes use (`scripts/build-image` makes it; CI runs that).
pub fn docker_image() -> String {
    std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into())
}

impl Server {
    /// `hangar sb create --env ENV --repo REPO`: the sandbox's id.
    pub fn create_sandbox(&self, env: &str, repo: &std::path::Path) -> String {
        let out = self.ok(&[
            "sb",
            "create",
            "--env",
            env,
            "--repo",
            repo.to_str().unwrap(),
        ]);
        out.lines()
            .next()
            .and_then(|l| l.strip_prefix("sandbox: "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned()
    }

    /// Applies the environment `yaml` (`hangar env apply`) and makes a sandbox of it on `repo`:
    /// the sandbox's id.
    pub fn sandbox_of(&self, yaml: &str, repo: &std::path::Path) -> String {
        let name = yaml
            .lines()
            .find_map(|l| l.strip_prefix("name: "))
            .unwrap_or_else(|| panic!("no name: in {yaml}"))
            .trim()
            .to_owned();
        let file = self.home.path().join(format!("{name}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        self.ok(&["env", "apply", file.to_str().unwrap()]);
        self.create_sandbox(&name, repo)
    }
}
