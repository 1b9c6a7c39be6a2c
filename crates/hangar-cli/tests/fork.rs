//! `hangar fork` and `POST /v1/runs/{id}/fork` end to end: a real Claude Code (or Codex) turn
//! with the scripted model makes several steps; a fork at step N has exactly step N's files (its
//! tree hashed again, its contents compared) and its next turn sends the model the conversation
//! up to that step. A tampered pack or a recorded id the run log does not back refuses the fork.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use common::answers;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, RecordedRequest, Script, Step, claude_bin, claude_env, codex_bin,
    codex_env, codex_offline_args,
};
use serde_json::{Value, json};

use common::driver_bin;
use common::forks::{blob_id, files, git, repo, swap_in_idx};

enum Fake {
    Claude(FakeAnthropic),
    Codex(FakeOpenAi),
}

impl Fake {
    fn requests(&self) -> Vec<RecordedRequest> {
        match self {
            Fake::Claude(f) => f.requests(),
            Fake::Codex(f) => f.requests(),
        }
    }
}

struct Server {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: Fake,
    child: Option<Child>,
    url: String,
    token: String,
}

impl Server {
    fn new(work: tempfile::TempDir, fake: Fake) -> Server {
        let mut s = Server {
            home: tempfile::tempdir().unwrap(),
            work,
            fake,
            child: None,
            url: String::new(),
            token: String::new(),
        };
        // Ada runs plain folders (an admin's, issue 20) and reads the whole audit.
        let made = s
            .hangar()
            .args(["person", "add", "--admin", "ada@example.com"])
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let out = s
            .hangar()
            .args(["token", "create", "--person", "ada@example.com"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        s.token = stdout(&out).lines().last().unwrap().trim().to_owned();
        // Forks of runs in plain folders: this server allows them.
        let mut child = s
            .hangar()
            .args(["serve", "--listen", "127.0.0.1:0", "--unsandboxed-folders"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        s.url = line
            .trim()
            .strip_prefix("listening: ")
            .unwrap_or_else(|| panic!("{line:?}"))
            .to_owned();
        s.child = Some(child);
        s
    }

    fn hangar(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.home.path().join("hangar"))
            .env("HANGAR_DRIVER_BIN", driver_bin());
        if !self.url.is_empty() {
            c.env("HANGAR_URL", &self.url)
                .env("HANGAR_TOKEN", &self.token);
        }
        match &self.fake {
            Fake::Claude(f) => {
                let config = self.home.path().join("claude-config");
                std::fs::create_dir_all(&config).unwrap();
                c.env("HANGAR_CLAUDE_BIN", claude_bin().unwrap())
                    .envs(claude_env(&f.base_url(), &config));
            }
            Fake::Codex(_) => {
                let codex_home = self.home.path().join("codex-home");
                std::fs::create_dir_all(&codex_home).unwrap();
                c.env("HANGAR_CODEX_BIN", codex_bin().unwrap())
                    .envs(codex_env(&codex_home));
            }
        }
        c
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let client = reqwest::Client::new();
        let mut req = client
            .request(method.parse().unwrap(), format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        answers::check(&self.url, method, path, status, &body).await;
        (status, body)
    }

    async fn turn_ended(&self, turn: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (_, t) = self.call("GET", &format!("/v1/turns/{turn}"), None).await;
            if t["state"] == "ended" {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {turn}: {t}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts a session in the work folder and waits for its first turn: (session, run).
    async fn first_turn(&self, harness: &str, prompt: &str) -> (String, String) {
        let mut body = json!({"no_sandbox": true, "dir": self.work.path(), "harness": harness, "policy": "auto", "prompt": prompt});
        if let Fake::Codex(f) = &self.fake {
            body["options"] = json!({"codex_config": codex_config(&f.base_url())});
        }
        let (status, started) = self.call("POST", "/v1/sessions", Some(body)).await;
        assert_eq!(status, 201, "{started}");
        let turn = started["turn"]["id"].as_str().unwrap();
        let ended = self.turn_ended(turn).await;
        assert_eq!(ended["status"], 0, "{ended}");
        (
            started["session"]["id"].as_str().unwrap().to_owned(),
            started["run"]["id"].as_str().unwrap().to_owned(),
        )
    }

    async fn steps(&self, run: &str) -> Vec<Value> {
        let (status, s) = self
            .call("GET", &format!("/v1/runs/{run}/steps"), None)
            .await;
        assert_eq!(status, 200, "{s}");
        s["steps"].as_array().unwrap().clone()
    }

    /// `hangar send SESSION TEXT` and wait for the turn it starts.
    async fn send_and_wait(&self, session: &str, text: &str) -> Value {
        let out = self
            .hangar()
            .args(["send", session, text])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let turn = stdout(&out)
            .lines()
            .find_map(|l| l.strip_prefix("turn: "))
            .unwrap()
            .to_owned();
        let t = self.turn_ended(&turn).await;
        assert_eq!(t["status"], 0, "{t}");
        t
    }

    fn ctl(&self, run: &str) -> PathBuf {
        self.home.path().join(format!("hangar/runs/{run}.ctl"))
    }

    /// Where the control plane keeps an ended run's pack and log.
    fn kept(&self, run: &str) -> PathBuf {
        self.home.path().join(format!("hangar/kept/{run}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The Codex `-c` overrides that point it at the fake (the driver adds `--disable plugins`).
fn codex_config(base_url: &str) -> Vec<String> {
    codex_offline_args(base_url)
        .chunks(2)
        .filter(|p| p[0] == "-c")
        .map(|p| p[1].clone())
        .collect()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tree_of(s: &Server, dir: &Path) -> String {
    let out = s.hangar().arg("tree").arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim().to_owned()
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_fork_has_the_steps_files_and_the_conversation_up_to_it() {
    let work = repo();
    let notes = work.path().join("notes.txt");
    let s = Server::new(
        work,
        Fake::Claude(
            FakeAnthropic::start(Script::new([
                Step::tool("Write", json!({"file_path": notes, "content": "one\n"})),
                bash("printf 'two\\n' >> notes.txt && printf 'b\\n' > b.txt && rm gone.txt")
                    .expect_tool_result(),
                Step::text("done with both").expect_tool_result(),
                Step::text("answer in the fork").expect_user_text("what now"),
            ]))
            .unwrap(),
        ),
    );
    let (source, run) = s.first_turn("claude", "write notes").await;
    let steps = s.steps(&run).await;
    let what: Vec<(Value, Value)> = steps
        .iter()
        .map(|st| (st["phase"].clone(), st["tool_use_id"].clone()))
        .collect();
    assert_eq!(
        what,
        [
            (json!("start"), Value::Null),
            (Value::Null, json!("toolu_hk_1")),
            (Value::Null, json!("toolu_hk_2")),
            (json!("end"), Value::Null),
        ],
        "{steps:?}"
    );

    // Fork at step 1: after the Write, before the Bash.
    let dir = s.home.path().join("the-fork");
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "1", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&out);
    let lines: Vec<&str> = shown.lines().collect();
    let fork = lines[0]
        .strip_prefix("fork: ")
        .unwrap_or_else(|| panic!("{shown}"));
    let sandbox = lines[1]
        .strip_prefix("sandbox: ")
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        fork.starts_with("ses-") && sandbox.starts_with("sb-"),
        "{shown}"
    );
    assert_eq!(lines[2], format!("dir: {}", dir.display()));
    let tree1 = steps[1]["tree"].as_str().unwrap();
    assert_eq!(
        lines[3],
        format!("tree: {tree1} (step 1 of run {run}, untrusted)")
    );
    assert!(lines[4].starts_with("conversation: session "), "{shown}");
    assert!(
        stderr(&out).contains("hangar: warning: step 1's tree is untrusted"),
        "{}",
        stderr(&out)
    );

    // Exactly step 1's files: the tree hashed again, and the contents.
    assert_eq!(tree_of(&s, &dir), tree1);
    assert_eq!(
        files(&dir),
        BTreeMap::from([
            ("a.txt".to_owned(), "a\n".to_owned()),
            ("gone.txt".to_owned(), "bye\n".to_owned()),
            ("notes.txt".to_owned(), "one\n".to_owned()),
        ])
    );
    assert_eq!(
        git(&dir, &["rev-parse", "HEAD"]),
        git(s.work.path(), &["rev-parse", "HEAD"]),
        "a clone of the source, on its commit"
    );
    assert_eq!(
        git(&dir, &["write-tree"]),
        tree1,
        "its index is the step's tree"
    );
    assert_eq!(
        files(s.work.path())["notes.txt"],
        "one\ntwo\n",
        "the source is where its turn left it"
    );

    // The record, through the API.
    let (status, listed) = s.call("GET", &format!("/v1/runs/{run}/forks"), None).await;
    assert_eq!(status, 200, "{listed}");
    let record = &listed["forks"][0];
    assert_eq!(record["session"], fork);
    assert_eq!(record["source_session"], source);
    assert_eq!(record["conversation"]["exact"], true);
    assert_eq!(record["capability"]["cut"], "message");
    let cut = record["conversation"]["at"].as_str().unwrap().to_owned();

    // The fork's first turn: the conversation up to the Write's result, and nothing after.
    let before = s.fake.requests().len();
    let t = s.send_and_wait(fork, "what now").await;
    let argv = t["manifest"]["argv"].to_string();
    assert!(
        argv.contains("--fork-session")
            && argv.contains("--resume-session-at")
            && argv.contains(&cut),
        "{argv}"
    );
    let requests = s.fake.requests();
    assert_eq!(requests.len(), before + 1);
    let sent = &requests[before];
    let calls: Vec<String> = sent.tool_calls().into_iter().map(|c| c.1).collect();
    assert_eq!(calls, ["Write"], "{:?}", sent.messages());
    let results: Vec<String> = sent.tool_results().into_iter().map(|r| r.0).collect();
    assert_eq!(results, ["toolu_hk_1"]);
    let said = sent.all_text();
    assert!(
        said.contains("write notes") && said.contains("what now"),
        "{said}"
    );
    assert!(!said.contains("done with both"), "{said}");
    let (_, fs) = s.call("GET", &format!("/v1/sessions/{fork}"), None).await;
    let (_, src) = s.call("GET", &format!("/v1/sessions/{source}"), None).await;
    assert_ne!(
        fs["session"]["harness_session_id"], src["session"]["harness_session_id"],
        "the fork has a session of its own"
    );
    let (_, audit) = s.call("GET", "/v1/audit?limit=500", None).await;
    assert!(
        audit["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["action"] == "fork.created"
                && serde_json::from_str::<Value>(r["detail"].as_str().unwrap()).unwrap()["session"]
                    == fork),
        "{audit}"
    );

    // The turn's pack and log are in the control plane's store: the run's control folder can
    // go, and every step still forks and diffs.
    let ctl = s.ctl(&run);
    for name in ["trees.pack", "trees.idx", "run.log"] {
        assert_eq!(
            std::fs::read(s.kept(&run).join(name)).unwrap(),
            std::fs::read(ctl.join(name)).unwrap(),
            "{name} kept as the driver left it"
        );
    }
    std::fs::remove_dir_all(&ctl).unwrap();
    let again = s.home.path().join("after-ctl-gone");
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "2", "--dir"])
        .arg(&again)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tree_of(&s, &again), steps[2]["tree"].as_str().unwrap());
    assert_eq!(files(&again)["notes.txt"], "one\ntwo\n");
    let out = s
        .hangar()
        .args(["diff", &run, "--from", "1", "--to", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("b.txt"), "{}", stdout(&out));

    // A pack whose index names one blob's content with another's id: the rebuilt tree is not
    // step 2's, so the fork is refused, and nothing is left behind.
    let ctl = s.kept(&run);
    let idx = ctl.join("trees.idx");
    let good = std::fs::read(&idx).unwrap();
    swap_in_idx(&idx, &blob_id("one\n"), &blob_id("one\ntwo\n"));
    let refused_dir = s.home.path().join("refused");
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "2", "--dir"])
        .arg(&refused_dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let why = stderr(&out);
    let tree2 = steps[2]["tree"].as_str().unwrap();
    assert!(why.contains("hashes to") && why.contains(tree2), "{why}");
    assert!(!refused_dir.exists(), "the half-made fork is removed");
    std::fs::write(&idx, good).unwrap();

    // A run log that does not back the stored step: refused too (and audited).
    let log = ctl.join("run.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let tree0 = steps[0]["tree"].as_str().unwrap();
    let tampered = text.replacen(
        &format!("\"tree\":\"{tree2}\""),
        &format!("\"tree\":\"{tree0}\""),
        1,
    );
    assert_ne!(tampered, text);
    std::fs::write(&log, tampered).unwrap();
    let (status, body) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/fork"),
            Some(json!({"step": 2})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let m = body["error"]["message"].as_str().unwrap();
    assert!(m.contains("run log's tree line says"), "{m}");
    std::fs::write(&log, text).unwrap();
    let (_, audit) = s.call("GET", "/v1/audit?limit=500", None).await;
    let refusals = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "fork.refused")
        .count();
    assert_eq!(refusals, 2, "{audit}");

    // Put back, step 2 forks (through the API, into $HANGAR_HOME/forks/<sandbox>).
    let (status, body) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/fork"),
            Some(json!({"step": 2})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let d = PathBuf::from(body["sandbox"]["workdir"].as_str().unwrap());
    assert_eq!(
        d,
        s.home
            .path()
            .join("hangar/forks")
            .join(body["sandbox"]["id"].as_str().unwrap())
    );
    assert_eq!(tree_of(&s, &d), tree2);
    assert_eq!(
        files(&d),
        BTreeMap::from([
            ("a.txt".to_owned(), "a\n".to_owned()),
            ("b.txt".to_owned(), "b\n".to_owned()),
            ("notes.txt".to_owned(), "one\ntwo\n".to_owned()),
        ])
    );
    // A folder that is not empty is refused before anything is made.
    let (status, body) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/fork"),
            Some(json!({"step": 0, "dir": s.work.path()})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_fork_is_exact_between_turns_and_says_so_inside_one() {
    let work = repo();
    let s = Server::new(
        work,
        Fake::Codex(
            FakeOpenAi::start(Script::new([
                Step::exec("printf 'x\\n' > x.txt"),
                Step::text("made x").expect_tool_result(),
                Step::text("from the end").expect_user_text("after the end"),
                Step::text("from inside").expect_user_text("from the middle"),
            ]))
            .unwrap(),
        ),
    );
    let (_, run) = s.first_turn("codex", "make x").await;
    let steps = s.steps(&run).await;
    assert_eq!(steps.len(), 3, "start, after the command, end: {steps:?}");

    // The end of the turn is between turns: exact, the whole turn kept.
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let end: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let c = &end["fork"]["conversation"];
    assert_eq!(c["exact"], true, "{end}");
    assert!(c["parent"].is_string() && c["at"].is_string(), "{end}");
    assert_eq!(end["fork"]["capability"]["cut"], "turn");
    assert_eq!(end["fork"]["capability"]["exact_at_every_step"], false);
    let before = s.fake.requests().len();
    let fork = end["session"]["id"].as_str().unwrap();
    s.send_and_wait(fork, "after the end").await;
    let sent = &s.fake.requests()[before];
    let said = sent.all_text();
    assert!(said.contains("make x") && said.contains("made x"), "{said}");
    assert_eq!(sent.tool_calls().len(), 1, "the turn's command is kept");

    // Inside the turn (after the command): Codex cannot cut there; the record says so, and the
    // fork's conversation starts before that turn (here: a new one).
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let warned = stderr(&out);
    assert!(
        warned.contains("warning: Codex forks a thread only between turns"),
        "{warned}"
    );
    assert!(
        stdout(&out).contains("conversation: a new conversation (not exact: see the warning)"),
        "{}",
        stdout(&out)
    );
    let fork = stdout(&out)
        .lines()
        .next()
        .unwrap()
        .strip_prefix("fork: ")
        .unwrap()
        .to_owned();
    let (_, listed) = s.call("GET", &format!("/v1/runs/{run}/forks"), None).await;
    let mid = listed["forks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["session"] == fork.as_str())
        .unwrap();
    assert_eq!(mid["conversation"]["exact"], false, "{mid}");
    assert!(mid["conversation"]["parent"].is_null());
    let dir = PathBuf::from(mid["dir"].as_str().unwrap());
    assert_eq!(files(&dir)["x.txt"], "x\n");
    assert_eq!(tree_of(&s, &dir), steps[1]["tree"].as_str().unwrap());
    let before = s.fake.requests().len();
    s.send_and_wait(&fork, "from the middle").await;
    let said = s.fake.requests()[before].all_text();
    assert!(
        !said.contains("make x") && !said.contains("made x"),
        "{said}"
    );
}

/// A Codex run in a local sandbox with the uid split: the fork from the turn's end is a new
/// sandbox with the thread's rollout carried from the source's agent home, and its next turn
/// sends the model the whole of that turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_fork_of_a_sandboxed_run_carries_the_thread() {
    let work = repo();
    let s = Server::new(
        work,
        Fake::Codex(
            FakeOpenAi::start(Script::new([
                Step::exec("printf 'x\\n' > x.txt"),
                Step::text("made x").expect_tool_result(),
                Step::text("from the end").expect_user_text("after the end"),
                // A fork made after the source sandbox was removed.
                Step::text("from the end").expect_user_text("after the end"),
            ]))
            .unwrap(),
        ),
    );
    let env = s.home.path().join("fk.yaml");
    std::fs::write(&env, "name: fk\nprovider: local\nnetwork: host\n").unwrap();
    let out = s
        .hangar()
        .args(["env", "apply"])
        .arg(&env)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = s
        .hangar()
        .args(["sb", "create", "--env", "fk", "--repo"])
        .arg(s.work.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let source_sb = stdout(&out)
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap()
        .to_owned();
    let Fake::Codex(f) = &s.fake else {
        unreachable!()
    };
    let body = json!({"sandbox": source_sb, "harness": "codex", "policy": "auto", "prompt": "make x",
                      "options": {"codex_config": codex_config(&f.base_url())}});
    let (status, started) = s.call("POST", "/v1/sessions", Some(body)).await;
    assert_eq!(status, 201, "{started}");
    let ended = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(ended["status"], 0, "{ended}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let steps = s.steps(&run).await;
    let end = steps.len() - 1;

    let out = s
        .hangar()
        .args(["fork", &run, "--step", &end.to_string(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let forked: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(forked["fork"]["conversation"]["exact"], true, "{forked}");
    let sb = forked["sandbox"]["id"].as_str().unwrap();
    assert_ne!(sb, source_sb);
    let dir = PathBuf::from(forked["fork"]["dir"].as_str().unwrap());
    assert_eq!(files(&dir)["x.txt"], "x\n");
    assert_eq!(tree_of(&s, &dir), steps[end]["tree"].as_str().unwrap());

    let before = s.fake.requests().len();
    let fork = forked["session"]["id"].as_str().unwrap();
    s.send_and_wait(fork, "after the end").await;
    let said = s.fake.requests()[before].all_text();
    assert!(said.contains("make x") && said.contains("made x"), "{said}");

    // The source sandbox removed: the thread's rollout kept at the turn's end, and the
    // repository kept at `sb rm`, still make the fork.
    let out = s.hangar().args(["sb", "rm", &source_sb]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = s
        .hangar()
        .args(["fork", &run, "--step", &end.to_string(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let again: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let dir = PathBuf::from(again["fork"]["dir"].as_str().unwrap());
    assert_eq!(files(&dir)["x.txt"], "x\n");
    assert_eq!(tree_of(&s, &dir), steps[end]["tree"].as_str().unwrap());
    let before = s.fake.requests().len();
    s.send_and_wait(again["session"]["id"].as_str().unwrap(), "after the end")
        .await;
    let said = s.fake.requests()[before].all_text();
    assert!(said.contains("make x") && said.contains("made x"), "{said}");
    for id in [sb, again["sandbox"]["id"].as_str().unwrap()] {
        let _ = s.hangar().args(["sb", "rm", "--force", id]).output();
    }
}
