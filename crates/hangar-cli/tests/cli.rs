//! The `hangar` command line end to end: the real driver, the real Claude Code, the scripted model.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env, workspace_root};
use serde_json::{Value, json};

fn driver_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HANGAR_DRIVER_BIN").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    let p = workspace_root().join("target/debug/hangar-driver");
    assert!(
        p.exists(),
        "no driver at {}: run scripts/test, or set HANGAR_DRIVER_BIN",
        p.display()
    );
    p
}

/// A `HANGAR_URL` where nothing listens yet, so each test's `hangar run` serves its own (tests
/// run in parallel; they must not find each other's servers at the default address).
fn free_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

struct Env {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
    url: String,
}

impl Env {
    fn new(script: Script) -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            fake: FakeAnthropic::start(script).unwrap(),
            url: free_url(),
        }
    }

    fn hangar(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.home.path().join("hangar"))
            .env("HANGAR_URL", &self.url)
            .env("HANGAR_DRIVER_BIN", driver_bin())
            .env("HANGAR_CLAUDE_BIN", claude_bin().unwrap())
            .envs(claude_env(
                &self.fake.base_url(),
                &self.home.path().join("claude-config"),
            ));
        c
    }

    fn cmd(&self, args: &[&str]) -> Output {
        self.hangar().args(args).output().unwrap()
    }

    /// Starts `hangar run`, returns it, its run id, and a channel of its stdout lines.
    fn run(&self, args: &[&str]) -> (Child, String, mpsc::Receiver<String>) {
        let mut child = self
            .hangar()
            .arg("run")
            .arg("--dir")
            .arg(self.work.path())
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                if tx.send(line.unwrap()).is_err() {
                    return;
                }
            }
        });
        let first = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        let run = first
            .strip_prefix("run: ")
            .unwrap_or_else(|| panic!("first line {first:?}"))
            .to_owned();
        (child, run, rx)
    }
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn wait(child: &mut Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "hangar run did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

#[test]
fn run_approvals_approve_and_late_steer_through_the_cli() {
    // The tool runs 3 s after it is allowed, so the second answer below finds the turn still
    // running (refused: already answered), not ended (a clean-clone .ci/run saw exit 3).
    let env = Env::new(Script::new([
        bash("sleep 3 && echo hi > made.txt"),
        Step::text("made it"),
    ]));
    let (mut child, run, lines) = env.run(&["make a file"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let pending: Value = loop {
        let out = env.cmd(&["approvals", &run, "--json"]);
        assert!(out.status.success(), "{:?}", text(&out));
        if let Some(line) = text(&out).0.lines().next() {
            break serde_json::from_str(line).unwrap();
        }
        assert!(Instant::now() < deadline, "no approval listed");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(pending["tool_name"], "Bash");
    assert_eq!(pending["input"]["command"], "sleep 3 && echo hi > made.txt");
    let id = pending["request_id"].as_str().unwrap();

    // Without a run: every request this person may answer, as a table with its session, person
    // and wait (issue 21, item 1), or a JSON object per line.
    let everywhere = env.cmd(&["approvals", "--json"]);
    assert!(everywhere.status.success(), "{:?}", text(&everywhere));
    let all: Vec<Value> = text(&everywhere)
        .0
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(all.len(), 1, "{all:?}");
    let session = all[0]["session_id"].as_str().unwrap();
    assert!(session.starts_with("ses-"), "{all:?}");
    assert_eq!(all[0]["request_id"], pending["request_id"]);
    assert!(all[0]["person"].as_str().is_some_and(|p| p.contains('@')));
    assert!(all[0]["waiting_ms"].as_i64().is_some_and(|w| w >= 0));
    let shown = text(&env.cmd(&["approvals"])).0;
    let rows: Vec<&str> = shown.lines().collect();
    assert_eq!(rows.len(), 2, "a header and one row:\n{shown}");
    assert!(
        rows[0].starts_with("RUN") && rows[0].contains("WAITING"),
        "{shown}"
    );
    // Ids are cut to prefixes that name them (issue 21), which every command takes back.
    let (short_run, short_id) = (&run[..10], &id[..8]);
    for want in [
        short_run,
        &session[..10],
        "Bash",
        short_id,
        "sleep 3 && echo hi",
    ] {
        assert!(rows[1].contains(want), "missing {want:?} in:\n{shown}");
    }
    assert!(
        !rows[1].contains(run.as_str()),
        "the whole run id:\n{shown}"
    );
    assert_eq!(
        rows[0].find("TOOL"),
        rows[1].find("Bash"),
        "aligned:\n{shown}"
    );

    let bogus = env.cmd(&["approve", &run, "no-such-request"]);
    assert_eq!(bogus.status.code(), Some(1));
    assert!(text(&bogus).1.contains("refused:"), "{:?}", text(&bogus));

    let ok = env.cmd(&["approve", short_run, short_id]);
    assert_eq!(ok.status.code(), Some(0), "{:?}", text(&ok));
    assert_eq!(text(&ok).0.trim(), "done");
    let again = env.cmd(&["deny", &run, id, "--reason", "changed my mind"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again).1.contains("already answered"),
        "{:?}",
        text(&again)
    );

    assert_eq!(wait(&mut child), 0);
    let shown: Vec<String> = lines.try_iter().collect();
    let shown = shown.join("\n");
    for want in [
        "tool call: Bash",
        "approval waiting: ",
        "tool result: ",
        "result: success made it",
        "tokens: input 22 output 14",
        "turn ended: status 0",
    ] {
        assert!(shown.contains(want), "missing {want:?} in:\n{shown}");
    }
    assert!(env.work.path().join("made.txt").exists());
    assert_eq!(
        text(&env.cmd(&["approvals", &run])).0.trim(),
        "no permission requests are waiting"
    );

    let late = env.cmd(&["steer", &run, "one more thing"]);
    assert_eq!(late.status.code(), Some(3));
    let err = text(&late).1;
    assert!(
        err.contains("the turn has ended") && err.contains("one more thing"),
        "{err}"
    );

    // `hangar log` reads like `hangar run` (issue 21, item 3); `--json` is the raw log.
    let readable = text(&env.cmd(&["log", &run])).0;
    for want in [
        "tool call: Bash",
        "approval waiting: ",
        "result: success made it",
        "turn ended: status 0",
    ] {
        assert!(readable.contains(want), "missing {want:?} in:\n{readable}");
    }
    assert!(
        !readable.lines().any(|l| l.starts_with('{')),
        "raw lines in:\n{readable}"
    );
    let log = text(&env.cmd(&["log", &run, "--json"])).0;
    assert!(
        log.lines()
            .any(|l| l.contains("\"type\":\"hangar.turn_end\"")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("\"type\":\"result\"") && l.contains("hangar_process_usage"))
    );
}

#[test]
fn json_output_is_the_run_log_and_interrupt_exits_130() {
    let env = Env::new(Script::new([Step::slow_text(
        20,
        Duration::from_millis(400),
    )]));
    let (mut child, run, lines) = env.run(&["--json", "--policy", "auto", "talk slowly"]);
    env.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .unwrap();
    let out = env.cmd(&["interrupt", &run]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert_eq!(wait(&mut child), 130);
    let shown: Vec<Value> = lines
        .try_iter()
        .map(|l| serde_json::from_str(&l).expect("--json prints JSON lines"))
        .collect();
    assert!(
        shown
            .iter()
            .any(|v| v["type"] == "result" && v["terminal_reason"] == "aborted_streaming")
    );
    assert_eq!(shown.last().unwrap()["type"], "hangar.turn_end");
}

#[test]
fn ctrl_c_on_hangar_run_interrupts_the_turn() {
    let env = Env::new(Script::new([Step::slow_text(
        20,
        Duration::from_millis(400),
    )]));
    let (mut child, _run, lines) = env.run(&["--policy", "auto", "talk slowly"]);
    env.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(wait(&mut child), 130);
    let shown: Vec<String> = lines.try_iter().collect();
    assert!(
        shown.iter().any(|l| l.starts_with("interrupting the turn")),
        "{shown:?}"
    );
    assert!(
        shown
            .iter()
            .any(|l| l == "turn ended: status 130 (interrupted)"),
        "{shown:?}"
    );
    // What the interrupt stopped, and who sent it: with no `$USER` (the CLI runs with a clean
    // environment here) the person is the account's name, not a bare uid (issue 21).
    let me = Command::new("id").arg("-un").output().unwrap();
    let me = String::from_utf8(me.stdout).unwrap();
    let report = format!(
        "interrupted by {}@localhost: stopped the answer to prompt #1",
        me.trim()
    );
    assert!(shown.contains(&report), "{report}\n{shown:?}");
    assert!(
        shown.iter().any(|l| l == "result: interrupted"),
        "the stopped answer, not the CLI's diagnostic: {shown:?}"
    );
}

#[test]
fn errors_say_what_to_do() {
    let env = Env::new(Script::new([]));
    let out = env.cmd(&["steer", "run-nope", "hi"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(text(&out).1.contains("no run run-nope"), "{:?}", text(&out));
    let out = env.cmd(&["steer", "../etc", "hi"]);
    assert!(text(&out).1.contains("is not a run id"), "{:?}", text(&out));
    let out = env
        .hangar()
        .args(["run", "--dir", "/nonexistent/dir", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("/nonexistent/dir"));
}

#[test]
fn codex_runs_through_the_same_commands() {
    use hangar_testkit::{FakeOpenAi, codex_bin, codex_env, codex_offline_args};
    let fake = FakeOpenAi::start(Script::new([
        Step::exec("echo hi > made.txt"),
        Step::text("made it"),
    ]))
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let codex_home = home.path().join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let url = free_url();
    let hangar = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("HANGAR_HOME", home.path().join("hangar"))
            .env("HANGAR_URL", &url)
            .env("HANGAR_DRIVER_BIN", driver_bin())
            .env("HANGAR_CODEX_BIN", codex_bin().unwrap())
            .envs(codex_env(&codex_home))
            .args(args);
        c
    };
    let mut run_args = vec![
        "run".to_owned(),
        "--harness".into(),
        "codex".into(),
        "--dir".into(),
        work.path().display().to_string(),
    ];
    let offline = codex_offline_args(&fake.base_url());
    let mut it = offline.iter();
    while let Some(a) = it.next() {
        if a == "-c" {
            run_args.extend(["--codex-config".to_owned(), it.next().unwrap().clone()]);
        } else {
            it.next(); // --disable plugins: the driver always adds it
        }
    }
    run_args.push("make a file".into());
    let refs: Vec<&str> = run_args.iter().map(String::as_str).collect();
    let mut child = hangar(&refs).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = out.next().unwrap().unwrap();
    let run = first.strip_prefix("run: ").unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let o = hangar(&["approvals", &run, "--json"]).output().unwrap();
        if let Some(line) = String::from_utf8_lossy(&o.stdout).lines().next() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["tool_name"], "commandExecution");
            break v["request_id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no approval listed");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        hangar(&["approve", &run, &id])
            .output()
            .unwrap()
            .status
            .success()
    );
    assert_eq!(wait(&mut child), 0);
    let shown: Vec<String> = out.map_while(Result::ok).collect();
    let shown = shown.join("\n");
    for want in [
        "tool call: command",
        "approval waiting: codex-",
        "assistant: made it",
        "result: completed",
        "tokens: input",
    ] {
        assert!(shown.contains(want), "missing {want:?} in:\n{shown}");
    }
    assert!(work.path().join("made.txt").exists());
}

#[test]
fn hangar_run_works_in_a_local_sandbox_on_the_folder_unless_told_not_to() {
    let env = Env::new(Script::new([
        // The write to /usr is in a script the rules do not read (they deny `touch /usr/…`
        // on the command line): what stops it must be the sandbox.
        bash("pwd > where.txt; sh probe.sh; true"),
        Step::text("done there"),
        bash("pwd > where.txt"),
        Step::text("done here"),
    ]));
    std::fs::write(env.work.path().join("mine.txt"), "kept").unwrap();
    std::fs::write(
        env.work.path().join("probe.sh"),
        "touch /usr/hangar-run-test 2>/dev/null && echo wrote > sys.txt\n",
    )
    .unwrap();
    let (mut child, _run, _lines) = env.run(&["--policy", "auto", "look around"]);
    assert_eq!(wait(&mut child), 0);
    // In the sandbox: the folder itself at /workspace (the file lands in it), the rest of the
    // system read-only.
    assert_eq!(
        std::fs::read_to_string(env.work.path().join("where.txt")).unwrap(),
        "/workspace\n"
    );
    assert!(
        !env.work.path().join("sys.txt").exists(),
        "it wrote to /usr"
    );
    assert!(!std::path::Path::new("/usr/hangar-run-test").exists());
    let listed = env.cmd(&["sb", "list"]);
    let (out, err) = text(&listed);
    assert!(listed.status.success(), "{err}");
    assert!(out.contains("in-place"), "the sandbox is listed: {out}");

    // --no-sandbox: on this machine, in the folder as it is.
    let (mut child, _run, _lines) = env.run(&["--policy", "auto", "--no-sandbox", "look here"]);
    assert_eq!(wait(&mut child), 0);
    assert_eq!(
        std::fs::read_to_string(env.work.path().join("where.txt")).unwrap(),
        format!("{}\n", env.work.path().canonicalize().unwrap().display())
    );
    assert_eq!(
        std::fs::read_to_string(env.work.path().join("mine.txt")).unwrap(),
        "kept"
    );
}

/// `hangar run` shows the log of the server it embeds: its warnings always, more with each
/// `-v` (here its access log at `info`), never coloured when stderr is not a terminal.
#[test]
fn hangar_run_shows_its_embedded_servers_log_more_with_v() {
    let env = Env::new(Script::new([Step::text("one"), Step::text("two")]));
    let dir = env.work.path().to_str().unwrap().to_owned();
    let quiet = env.cmd(&[
        "run",
        "--dir",
        &dir,
        "--no-sandbox",
        "--policy",
        "auto",
        "hi",
    ]);
    let (_, err) = text(&quiet);
    assert!(quiet.status.success(), "{err}");
    assert!(
        !err.contains("hangar::access"),
        "info lines without -v: {err}"
    );
    let loud = env.cmd(&[
        "run",
        "-v",
        "--dir",
        &dir,
        "--no-sandbox",
        "--policy",
        "auto",
        "hi",
    ]);
    let (_, err) = text(&loud);
    assert!(loud.status.success(), "{err}");
    assert!(
        err.contains("hangar::access"),
        "no access log with -v: {err}"
    );
    assert!(!err.contains('\u{1b}'), "coloured on a pipe: {err}");
}
