//! Issue 18, first list item 4, end to end: commands of the classes the deny-risky rules missed
//! (inline interpreter code, git settings that run code, brace expansion in the command word,
//! writes outside the workspace, `/proc/<pid>/environ`) asked for by the scripted model in real
//! Claude Code and Codex turns, through `hangar run` and through the API. The turns run as a
//! plain folder on this machine (`--no-sandbox`; the API server with
//! `HANGAR_UNSANDBOXED_FOLDERS=allow`), so the rules are the only thing between the command and
//! the victims: on a main without the new readers each victim goes or the marker appears.
//!
//! Safety: every victim and marker is in a folder of the test's own under cargo's target folder
//! (outside `/tmp`, which the rules leave to scratch files); HOME is a temp folder.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, driver_bin};
use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, Script, Step, claude_bin, claude_env, codex_bin, codex_env,
    codex_offline_args,
};
use serde_json::{Value, json};

/// The victims outside the workspace and the marker a code-running git setting would make.
struct Victims {
    _dir: tempfile::TempDir,
    inline: PathBuf,
    brace: PathBuf,
    written: PathBuf,
    marker: PathBuf,
}

impl Victims {
    fn new() -> Victims {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let v = Victims {
            inline: dir.path().join("inline-victim"),
            brace: dir.path().join("brace-victim"),
            written: dir.path().join("written-victim"),
            marker: dir.path().join("git-ran-this"),
            _dir: dir,
        };
        for f in [&v.inline, &v.brace, &v.written] {
            std::fs::write(f, "intact\n").unwrap();
        }
        v
    }

    /// The risky commands, one tool call each.
    fn commands(&self) -> Vec<String> {
        let p = |p: &Path| p.display().to_string();
        vec![
            format!("python3 -c \"import os; os.remove('{}')\"", p(&self.inline)),
            format!("git -c alias.x='!touch {}' x", p(&self.marker)),
            format!("{{rm,-f,{}}}", p(&self.brace)),
            format!("echo pwned >> {}", p(&self.written)),
            "cat /proc/$PPID/environ | tr '\\0' '\\n'".to_owned(),
        ]
    }

    fn assert_untouched(&self) {
        for f in [&self.inline, &self.brace, &self.written] {
            assert_eq!(
                std::fs::read_to_string(f).ok().as_deref(),
                Some("intact\n"),
                "{} was changed or removed",
                f.display()
            );
        }
        assert!(!self.marker.exists(), "git ran the alias's program");
    }
}

/// The allowed neighbour: inline code writing inside the workspace.
const NEIGHBOUR: &str = "python3 -c \"open('ok.txt', 'w').write('ok')\"";

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// What the model was told back: every risky call denied by a named rule, and no secret of the
/// harness's environment (the fake model's key) in any request.
fn assert_denied(all_text: &str, secret: &str, risky: usize) {
    let denials = all_text.matches("deny-risky/").count();
    assert!(
        denials >= risky,
        "{denials} denials for {risky} risky calls: {all_text}"
    );
    assert!(
        !all_text.contains(secret),
        "the harness's environment reached the model"
    );
}

fn hangar(home: &Path, url: &str, env: &[(String, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HANGAR_HOME", home.join("hangar"))
        .env("HANGAR_URL", url)
        .env("HANGAR_DRIVER_BIN", driver_bin())
        .envs(env.iter().map(|(k, v)| (k, v)));
    c
}

fn free_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

/// Runs `hangar run ARGS` to its end, failing if any call is held for a person (the rules must
/// answer every risky call themselves). Its exit status.
fn run_to_end(home: &Path, url: &str, env: &[(String, String)], args: &[String]) -> i32 {
    let mut child: Child = hangar(home, url, env)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = out.next().unwrap().unwrap();
    let run = first
        .strip_prefix("run: ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    // What `hangar run` showed, kept to say why a turn that should pass did not.
    let shown = std::thread::spawn(move || out.map_while(Result::ok).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let code = st.code().unwrap_or(-1);
            if code != 0 {
                let log = hangar(home, url, env)
                    .args(["log", &run, "--json"])
                    .output()
                    .unwrap();
                eprintln!(
                    "hangar run exited {code}; it showed:\n{}\nthe run log:\n{}{}",
                    shown.join().unwrap_or_default().join("\n"),
                    String::from_utf8_lossy(&log.stdout),
                    String::from_utf8_lossy(&log.stderr)
                );
            }
            return code;
        }
        let o = hangar(home, url, env)
            .args(["approvals", &run, "--json"])
            .output()
            .unwrap();
        if let Some(line) = String::from_utf8_lossy(&o.stdout).lines().next() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the rules let a call through to a person: {line}");
        }
        assert!(Instant::now() < deadline, "hangar run did not finish");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn claude_through_hangar_run_the_rules_deny_what_they_missed() {
    let victims = Victims::new();
    let risky = victims.commands();
    let mut steps: Vec<Step> = risky.iter().map(|c| bash(c)).collect();
    steps.push(bash(NEIGHBOUR));
    steps.push(Step::text("done"));
    let fake = FakeAnthropic::start(Script::new(steps)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut env = claude_env(&fake.base_url(), &home.path().join("claude-config"));
    env.push((
        "HANGAR_CLAUDE_BIN".into(),
        claude_bin().unwrap().display().to_string(),
    ));
    let args: Vec<String> = [
        "run",
        "--no-sandbox",
        "--policy",
        "auto",
        "--dir",
        work.path().to_str().unwrap(),
        "clean up",
    ]
    .map(str::to_owned)
    .to_vec();
    assert_eq!(run_to_end(home.path(), &free_url(), &env, &args), 0);
    victims.assert_untouched();
    assert!(
        work.path().join("ok.txt").exists(),
        "the allowed neighbour did not run"
    );
    let all: String = fake.requests().iter().map(|r| r.all_text()).collect();
    assert_denied(&all, "sk-hangar-test", risky.len());
}

#[test]
fn codex_through_hangar_run_the_rules_deny_what_they_missed_before_anyone_is_asked() {
    let victims = Victims::new();
    let risky = victims.commands();
    let mut steps: Vec<Step> = risky.iter().map(Step::exec).collect();
    steps.push(Step::text("done"));
    let fake = FakeOpenAi::start(Script::new(steps)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let codex_home = home.path().join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let mut env = codex_env(&codex_home);
    env.push((
        "HANGAR_CODEX_BIN".into(),
        codex_bin().unwrap().display().to_string(),
    ));
    // Under Codex `auto` nothing asks (approvalPolicy `never`): the rules answer Codex's
    // approval requests under `ask`, before any person is asked.
    let mut args: Vec<String> = [
        "run",
        "--no-sandbox",
        "--harness",
        "codex",
        "--policy",
        "ask",
        "--dir",
        work.path().to_str().unwrap(),
    ]
    .map(str::to_owned)
    .to_vec();
    let offline = codex_offline_args(&fake.base_url());
    let mut it = offline.iter();
    while let Some(a) = it.next() {
        if a == "-c" {
            args.extend(["--codex-config".to_owned(), it.next().unwrap().clone()]);
        } else {
            it.next();
        }
    }
    args.push("clean up".into());
    let code = run_to_end(home.path(), &free_url(), &env, &args);
    if code != 0 {
        for r in fake.all_requests() {
            eprintln!(
                "model request {} {:?} {} {}",
                r.seq,
                r.kind,
                r.path,
                short_text(&r.all_text())
            );
        }
    }
    assert_eq!(code, 0);
    victims.assert_untouched();
    let all: String = fake.requests().iter().map(|r| r.all_text()).collect();
    assert!(
        all.matches("deny-risky/").count() >= risky.len(),
        "not every risky command was denied by a rule: {all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_through_the_api_the_rules_deny_what_they_missed() {
    let victims = Victims::new();
    let risky = victims.commands();
    let mut steps: Vec<Step> = risky.iter().map(|c| bash(c)).collect();
    steps.push(bash(NEIGHBOUR));
    steps.push(Step::text("done"));
    let s = Server::start_with(
        Script::new(steps),
        vec![("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned())],
        None,
    );
    let work = tempfile::tempdir().unwrap();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": work.path(), "no_sandbox": true, "policy": "auto", "prompt": "clean up"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t: Value = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    victims.assert_untouched();
    assert!(work.path().join("ok.txt").exists());
    let all: String = s.fake.requests().iter().map(|r| r.all_text()).collect();
    assert_denied(&all, "sk-hangar-test", risky.len());
}

/// The first 400 characters of a request's text, for a failure's report.
fn short_text(text: &str) -> String {
    text.chars().take(400).collect()
}
