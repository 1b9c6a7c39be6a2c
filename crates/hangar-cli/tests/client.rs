//! The `hangar` command line as a client of the HTTP API, end to end with the real driver, the
//! real Claude Code and the scripted model: `hangar run` serving itself when no server runs (and
//! other commands reaching it), `hangar run` and sessions through a running `hangar serve`, and
//! `hangar log --follow` riding out a `kill -9` and restart of the server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env, workspace_root};
use serde_json::{Value, json};

fn driver_bin() -> PathBuf {
    std::env::var_os("HANGAR_DRIVER_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"))
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A test's world: a scripted model, a folder for the agent, a `HANGAR_HOME`, a `HANGAR_URL`,
/// and maybe a `hangar serve` on it.
struct World {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
    port: u16,
    server: Option<Child>,
    /// Commands run as a client elsewhere: their own empty HANGAR_HOME, the token in
    /// HANGAR_TOKEN (so nothing they do can touch the server's store but through the API).
    remote: bool,
}

impl World {
    fn new(script: Script) -> World {
        World {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            fake: FakeAnthropic::start(script).unwrap(),
            port: free_port(),
            server: None,
            remote: false,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn hangar_home(&self) -> PathBuf {
        self.home.path().join("hangar")
    }

    fn hangar(&self) -> Command {
        let mut c = self.server_side();
        if self.remote {
            c.env("HANGAR_HOME", self.home.path().join("client"))
                .env("HANGAR_TOKEN", self.token());
        }
        c
    }

    fn server_side(&self) -> Command {
        let config = self.home.path().join("claude-config");
        std::fs::create_dir_all(&config).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("USER", "ada")
            .env("HANGAR_HOME", self.hangar_home())
            .env("HANGAR_URL", self.url())
            .env("HANGAR_DRIVER_BIN", driver_bin())
            .env("HANGAR_CLAUDE_BIN", claude_bin().unwrap())
            .envs(claude_env(&self.fake.base_url(), &config));
        c
    }

    fn cmd(&self, args: &[&str]) -> Output {
        self.hangar().args(args).output().unwrap()
    }

    /// `hangar serve` on this world's port.
    fn start_server(&mut self) {
        let mut child = self
            .server_side()
            .args(["serve", "--listen", &format!("127.0.0.1:{}", self.port)])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), format!("listening: {}", self.url()));
        self.server = Some(child);
    }

    fn kill9_server(&mut self) {
        let mut c = self.server.take().unwrap();
        unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
        let _ = c.wait();
    }

    /// The local user's token, as the server (or `hangar run`) wrote it.
    fn token(&self) -> String {
        std::fs::read_to_string(self.hangar_home().join("token"))
            .unwrap()
            .trim()
            .to_owned()
    }

    fn get(&self, path: &str) -> Result<Value, String> {
        let (url, token) = (format!("{}{path}", self.url()), self.token());
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let r = reqwest::Client::new()
                    .get(url)
                    .bearer_auth(token)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                r.json::<Value>().await.map_err(|e| e.to_string())
            })
    }

    fn run_log(&self, run: &str) -> String {
        std::fs::read_to_string(self.hangar_home().join(format!("runs/{run}.ctl/run.log"))).unwrap()
    }

    /// Waits for `hangar turn show TURN` to say the turn has ended; the turn.
    fn turn_ended(&self, turn: &str) -> Value {
        until("the turn to end", || {
            let out = self.cmd(&["turn", "show", turn]);
            assert!(out.status.success(), "{:?}", text(&out));
            let t: Value = serde_json::from_slice(&out.stdout).unwrap();
            (t["state"] == "ended").then_some(t)
        })
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait(child: &mut Child) -> i32 {
    until("the command to finish", || child.try_wait().unwrap())
        .code()
        .unwrap_or(-1)
}

/// `key: value` from a command's stdout.
fn field(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key}: in {out:?}"))
        .to_owned()
}

/// Spawns a command with its stdout as a channel of lines.
fn spawn_lines(mut c: Command) -> (Child, mpsc::Receiver<String>) {
    let mut child = c.stdout(Stdio::piped()).spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

#[test]
fn hangar_run_with_no_server_serves_the_api_for_its_turn() {
    let w = World::new(Script::new([
        bash("echo hi > made.txt"),
        Step::text("made it"),
    ]));
    let mut c = w.hangar();
    c.args(["run", "--dir"])
        .arg(w.work.path())
        .arg("make a file");
    let (mut child, lines) = spawn_lines(c);
    let first = lines.recv_timeout(Duration::from_secs(30)).unwrap();
    let run = first.strip_prefix("run: ").unwrap().to_owned();

    // It serves on HANGAR_URL, for the local user, whose token it wrote (0600).
    let mode = std::fs::metadata(w.hangar_home().join("token"))
        .unwrap()
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let sessions = w.get("/v1/sessions").unwrap();
    assert_eq!(
        sessions["sessions"].as_array().unwrap().len(),
        1,
        "{sessions}"
    );

    // Other processes reach it through HANGAR_URL.
    let pending: Value = until("an approval", || {
        let out = w.cmd(&["approvals", &run, "--json"]);
        assert!(out.status.success(), "{:?}", text(&out));
        text(&out)
            .0
            .lines()
            .next()
            .map(|l| serde_json::from_str(l).unwrap())
    });
    assert_eq!(pending["tool_name"], "Bash");
    let id = pending["request_id"].as_str().unwrap();
    let ok = w.cmd(&["approve", &run, id]);
    assert_eq!(ok.status.code(), Some(0), "{:?}", text(&ok));
    assert_eq!(text(&ok).0.trim(), "done");
    assert_eq!(wait(&mut child), 0);
    assert!(w.work.path().join("made.txt").exists());

    // The answer was recorded by the control plane with the person who gave it.
    let audit = text(&w.cmd(&["audit"])).0;
    assert!(
        audit
            .lines()
            .any(|l| l.contains("ada@localhost") && l.contains("approval.answered")),
        "{audit}"
    );
    // Its server stopped with it; the commands read the store (and the log) without one.
    assert!(w.get("/v1/health").is_err(), "the server is still up");
    let shown = text(&w.cmd(&["log", &run, "--json"])).0;
    assert_eq!(shown, w.run_log(&run));
    let turns = text(&w.cmd(&["sessions", "--json"])).0;
    let session: Value = serde_json::from_str(turns.lines().next().unwrap()).unwrap();
    assert_eq!(session["turn_count"], 1, "{turns}");
}

#[test]
fn run_session_start_and_send_go_through_a_running_server() {
    let mut w = World::new(Script::new([
        Step::text("answer one"),
        Step::text("answer two"),
        Step::text("answer three"),
    ]));
    w.start_server();
    w.remote = true;

    // `hangar run` finds the server and uses it: its session is the server's.
    let mut run = w.hangar();
    run.args(["run", "--policy", "auto", "--dir"])
        .arg(w.work.path())
        .arg("first prompt");
    let out = run.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(
        text(&out).0.contains("result: success answer one"),
        "{:?}",
        text(&out)
    );
    let run_id = field(&text(&out).0, "run");
    let sessions = w.get("/v1/sessions").unwrap();
    assert_eq!(
        sessions["sessions"].as_array().unwrap().len(),
        1,
        "{sessions}"
    );

    // A session, then the next turn with `send`: Claude Code resumes the conversation.
    let mut start = w.hangar();
    start
        .args(["session", "start", "--policy", "auto", "--dir"])
        .arg(w.work.path())
        .arg("remember the word PELICAN");
    let out = start.output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let (session, turn1) = (
        field(&text(&out).0, "session"),
        field(&text(&out).0, "turn"),
    );
    assert!(field(&text(&out).0, "run").starts_with("run-"));
    w.turn_ended(&turn1);
    let out = w.cmd(&["send", &session, "which word was it?"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let turn2 = field(&text(&out).0, "turn");
    let t2 = w.turn_ended(&turn2);
    assert_eq!(t2["status"], 0);
    let reqs = w.fake.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[2].last_user_text().as_deref(),
        Some("which word was it?")
    );
    let resumed = reqs[2].all_text();
    assert!(
        resumed.contains("remember the word PELICAN") && resumed.contains("answer two"),
        "the second turn does not carry the first: {resumed}"
    );

    // `turn show`: the turn with its manifest.
    let out = w.cmd(&["turn", "show", &turn1]);
    let t1: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t1["state"], "ended");
    assert_eq!(t1["manifest"]["harness"], "claude");
    let digest = t1["manifest"]["harness_digest"].as_str().unwrap();
    assert!(!digest.is_empty(), "{t1}");

    // `transcript`: the conversation, one line per entry.
    let out = w.cmd(&["transcript", &session]);
    assert!(out.status.success(), "{:?}", text(&out));
    // (A plain folder's text is marked unverified: the agent there is hangar's own user.)
    let lines: Vec<String> = text(&out)
        .0
        .lines()
        .map(|l| l.replacen("assistant (unverified):", "assistant:", 1))
        .collect();
    let at = |want: &str| {
        lines
            .iter()
            .position(|l| l == want)
            .unwrap_or_else(|| panic!("no {want:?} in {lines:#?}"))
    };
    // What a person sent comes with who sent it and when (issue 21).
    let sent = |words: &str| {
        lines
            .iter()
            .position(|l| {
                l.starts_with("ada@localhost (prompt, 20") && l.ends_with(&format!("Z): {words}"))
            })
            .unwrap_or_else(|| panic!("no prompt {words:?} from ada in {lines:#?}"))
    };
    assert!(sent("remember the word PELICAN") < at("assistant: answer two"));
    assert!(at("assistant: answer two") < sent("which word was it?"));
    assert!(sent("which word was it?") < at("assistant: answer three"));

    // `sessions` and `audit` list what the server holds.
    // (A header, then each session under its short id.)
    let listed = text(&w.cmd(&["sessions"])).0;
    assert!(listed.contains(&session[..10]), "{listed}");
    assert_eq!(listed.lines().count(), 3, "{listed}");
    let audit = text(&w.cmd(&["audit"])).0;
    assert!(audit.contains("session.started"), "{audit}");

    // A steer to an ended turn is reported (exit 3), and starts nothing.
    let late = w.cmd(&["steer", &run_id, "too late"]);
    assert_eq!(late.status.code(), Some(3), "{:?}", text(&late));
    assert!(
        text(&late).1.contains("the turn has ended"),
        "{:?}",
        text(&late)
    );
    assert!(text(&late).1.contains("too late"));
    assert_eq!(w.fake.requests().len(), 3);
    assert!(
        !w.home.path().join("client/hangar.db").exists(),
        "the client made a store of its own"
    );
}

#[test]
fn log_follow_rides_out_a_kill_9_and_restart_of_the_server() {
    let mut w = World::new(Script::new([Step::slow_text(
        16,
        Duration::from_millis(250),
    )]));
    w.start_server();
    let mut start = w.hangar();
    start
        .args(["session", "start", "--policy", "auto", "--dir"])
        .arg(w.work.path())
        .arg("talk slowly");
    let out = start.output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let run = field(&text(&out).0, "run");

    let mut follow = w.hangar();
    follow
        .args(["log", &run, "--follow", "--json"])
        .stderr(Stdio::piped());
    let (mut child, lines) = spawn_lines(follow);
    let mut seen = vec![lines.recv_timeout(Duration::from_secs(30)).unwrap()];
    w.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .unwrap();
    assert!(
        !w.run_log(&run).contains("hangar.turn_end"),
        "the turn ended before the server was killed"
    );
    w.kill9_server();
    std::thread::sleep(Duration::from_millis(1500));
    w.start_server();
    assert_eq!(wait(&mut child), 0);
    seen.extend(lines.try_iter());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("lost the server; reconnecting…"), "{err}");
    assert!(err.contains("reconnected"), "{err}");

    // Every line of the run log, each once, in order (its seal lines, which vouch for them,
    // are the server's to check, not shown).
    let log: String = w
        .run_log(&run)
        .lines()
        .filter(|l| !l.starts_with("{\"type\":\"hangar.seal\""))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(log.contains("\"type\":\"hangar.turn_end\""));
    assert_eq!(seen.join("\n") + "\n", log);
}

#[test]
fn hangar_run_rides_out_a_restart_and_serves_its_run_when_the_server_stays_away() {
    let mut w = World::new(Script::new([
        Step::slow_text(6, Duration::from_millis(250)),
        Step::slow_text(30, Duration::from_millis(250)),
    ]));
    w.start_server();
    let run_in = |w: &World, prompt: &str| {
        let mut c = w.hangar();
        c.args(["run", "--policy", "auto", "--dir"])
            .arg(w.work.path())
            .arg(prompt)
            .stderr(Stdio::piped());
        let (child, lines) = spawn_lines(c);
        let first = lines.recv_timeout(Duration::from_secs(30)).unwrap();
        (
            child,
            first.strip_prefix("run: ").unwrap().to_owned(),
            lines,
        )
    };
    let stderr = |child: &mut Child| {
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        err
    };

    // The server is killed and comes back: `hangar run` reconnects and shows the rest.
    let (mut child, run, lines) = run_in(&w, "talk");
    w.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .unwrap();
    w.kill9_server();
    std::thread::sleep(Duration::from_millis(1000));
    w.start_server();
    assert_eq!(wait(&mut child), 0);
    let shown: Vec<String> = lines.try_iter().collect();
    let err = stderr(&mut child);
    assert!(err.contains("lost the server; reconnecting…"), "{err}");
    assert!(
        shown
            .iter()
            .any(|l| l == "turn ended: status 0 (succeeded)"),
        "{shown:#?}"
    );
    assert_eq!(
        shown.iter().filter(|l| l.starts_with("result: ")).count(),
        1,
        "{shown:#?}"
    );
    assert!(w.run_log(&run).contains("hangar.turn_end"));

    // The server is killed for good: after a while `hangar run` serves its run itself.
    let (mut child, _run, lines) = run_in(&w, "talk longer");
    w.fake
        .wait_for_requests(2, Duration::from_secs(60))
        .unwrap();
    w.kill9_server();
    assert_eq!(wait(&mut child), 0);
    let shown: Vec<String> = lines.try_iter().collect();
    let err = stderr(&mut child);
    assert!(err.contains("serving this run from here"), "{err}");
    assert!(
        shown
            .iter()
            .any(|l| l == "turn ended: status 0 (succeeded)"),
        "{shown:#?}"
    );
}
