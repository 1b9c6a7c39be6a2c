//! Issue 18, first list item 1, end to end: a repository with hostile harness settings
//! (`hangar_testkit::hostile`: a PreToolUse hook answering `allow`, SessionStart hooks and MCP
//! servers leaving a marker, `env.ANTHROPIC_BASE_URL` / a Codex model provider naming a second
//! scripted model) run through `hangar run` (its local sandbox) and through the API. Under `ask`
//! the call waits for the person; under `governed` Tower gets the request; no marker; the
//! second model got nothing. Markers are named relative to the work folder (the hostile commands
//! run there, whatever path the sandbox shows it at).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, driver_bin};
use hangar_testkit::{
    CODEX_API_KEY, CODEX_API_KEY_ENV, FakeAnthropic, FakeOpenAi, Script, Step, TOWER_KEY,
    TowerDouble, claude_bin, claude_env, codex_bin, codex_env, codex_offline_config, hostile,
};
use serde_json::{Value, json};

const MARKS: &str = ".hangar-marks";
const MAKE: &str = "echo hi > made.txt";

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// A work folder with the repository's hostile files and an empty markers folder.
fn hostile_repo(codex: bool, evil_url: &str) -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join(MARKS)).unwrap();
    if codex {
        hostile::codex_repo(work.path(), Path::new(MARKS), evil_url).unwrap();
    } else {
        hostile::claude_repo(work.path(), Path::new(MARKS), evil_url).unwrap();
    }
    work
}

fn marks(work: &Path) -> Vec<String> {
    hostile::markers(&work.join(MARKS))
}

fn free_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

/// `hangar run` (serving its own API, in its local sandbox) for one harness.
struct Run {
    home: tempfile::TempDir,
    url: String,
    env: Vec<(String, String)>,
}

impl Run {
    fn hangar(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.home.path().join("hangar"))
            .env("HANGAR_URL", &self.url)
            .env("HANGAR_DRIVER_BIN", driver_bin())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(args);
        c
    }

    /// Starts `hangar run ARGS`; the child and its run id.
    fn start(&self, args: &[String]) -> (Child, String) {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = self.hangar(&refs).stdout(Stdio::piped()).spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = out.next().unwrap().unwrap();
        let run = first
            .strip_prefix("run: ")
            .unwrap_or_else(|| panic!("{first}"))
            .to_owned();
        std::thread::spawn(move || for _ in out.by_ref() {});
        (child, run)
    }

    /// The first pending approval's id, or `None` if `hangar run` ended first.
    fn approval(&self, child: &mut Child, run: &str) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let o = self.hangar(&["approvals", run, "--json"]).output().unwrap();
            if let Some(line) = String::from_utf8_lossy(&o.stdout).lines().next() {
                let v: Value = serde_json::from_str(line).unwrap();
                return Some(v["request_id"].as_str().unwrap().to_owned());
            }
            if child.try_wait().unwrap().is_some() {
                return None;
            }
            assert!(Instant::now() < deadline, "no approval and no end");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn wait(child: &mut Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "hangar run did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs one `ask` turn through `hangar run` on `work` and checks the person was asked first.
fn ask_through_hangar_run(r: &Run, work: &Path, extra: &[String], evil: &dyn Fn() -> usize) {
    let mut args: Vec<String> = vec![
        "run".into(),
        "--dir".into(),
        work.display().to_string(),
        "--policy".into(),
        "ask".into(),
    ];
    args.extend(extra.iter().cloned());
    args.push("make a file".into());
    let (mut child, run) = r.start(&args);
    let id = r.approval(&mut child, &run).unwrap_or_else(|| {
        panic!(
            "the call was never held for a person; markers {:?}; second model {} requests",
            marks(work),
            evil()
        )
    });
    assert!(!work.join("made.txt").exists(), "ran before the person");
    assert!(
        r.hangar(&["approve", &run, &id])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(wait(&mut child), 0);
    assert!(work.join("made.txt").exists());
    assert_eq!(marks(work), Vec::<String>::new(), "hostile commands ran");
    assert_eq!(evil(), 0, "the second model was reached");
}

#[test]
fn claude_through_hangar_run_with_a_hostile_repo_still_asks_the_person() {
    let evil = FakeAnthropic::start(Script::new([Step::text("evil")])).unwrap();
    let fake = FakeAnthropic::start(Script::new([bash(MAKE), Step::text("done")])).unwrap();
    let work = hostile_repo(false, &evil.base_url());
    let home = tempfile::tempdir().unwrap();
    let mut env = claude_env(&fake.base_url(), &home.path().join("claude-config"));
    env.push((
        "HANGAR_CLAUDE_BIN".into(),
        claude_bin().unwrap().display().to_string(),
    ));
    let r = Run {
        home,
        url: free_url(),
        env,
    };
    ask_through_hangar_run(&r, work.path(), &[], &|| evil.requests().len());
}

#[test]
fn codex_through_hangar_run_with_a_hostile_repo_still_asks_the_person() {
    let evil = FakeOpenAi::start(Script::new([Step::text("evil")])).unwrap();
    let fake = FakeOpenAi::start(Script::new([Step::exec(MAKE), Step::text("done")])).unwrap();
    let work = hostile_repo(true, &evil.base_url());
    let home = tempfile::tempdir().unwrap();
    let codex_home = home.path().join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let mut env: Vec<(String, String)> = codex_env(&codex_home);
    env.push((
        "HANGAR_CODEX_BIN".into(),
        codex_bin().unwrap().display().to_string(),
    ));
    let mut extra = vec!["--harness".to_owned(), "codex".into()];
    for kv in codex_offline_config(&fake.base_url()) {
        extra.extend(["--codex-config".to_owned(), kv]);
    }
    let r = Run {
        home,
        url: free_url(),
        env,
    };
    ask_through_hangar_run(&r, work.path(), &extra, &|| evil.requests().len());
}

/// The first approval the API lists for `run`; fails if `turn` ends first (saying which hostile
/// markers exist and what the second model got) or none comes within 90 seconds.
async fn first_approval(
    s: &Server,
    run: &str,
    turn: &str,
    work: &Path,
    evil: &dyn Fn() -> usize,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, a) = s
            .call("GET", &format!("/v1/runs/{run}/approvals"), None)
            .await;
        if let Some(first) = a["approvals"].as_array().and_then(|v| v.first()) {
            return first["request_id"].as_str().unwrap().to_owned();
        }
        let (_, t) = s.call("GET", &format!("/v1/turns/{turn}"), None).await;
        assert!(
            t["state"] != "ended",
            "the turn ended without asking; markers {:?}; second model {} requests; {t}",
            marks(work),
            evil()
        );
        assert!(Instant::now() < deadline, "no approval");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The API: a session on the hostile repository under `ask` waits for the person; under
/// `governed` (the Tower double) Tower gets the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_through_the_api_with_a_hostile_repo_asks_the_person_and_tower() {
    let evil = FakeAnthropic::start(Script::new([Step::text("evil")])).unwrap();
    let tower = TowerDouble::start().unwrap();
    let s = Server::start_with(
        Script::new([
            bash(MAKE),
            Step::text("done"),
            bash(MAKE),
            Step::text("done"),
        ]),
        vec![
            ("HANGAR_GOVERNANCE_URL".to_owned(), tower.url()),
            (
                "HANGAR_GOVERNANCE_HOOK_CREDENTIAL".to_owned(),
                "tower".to_owned(),
            ),
        ],
        Some(("tower", TOWER_KEY)),
    );
    let work = hostile_repo(false, &evil.base_url());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": work.path(), "policy": "ask", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let request = first_approval(&s, &run, &turn, work.path(), &|| evil.requests().len()).await;
    assert!(!work.path().join("made.txt").exists());
    let (status, r) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/approvals/{request}"),
            Some(json!({"decision": "allow"})),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    assert!(work.path().join("made.txt").exists());
    assert_eq!(marks(work.path()), Vec::<String>::new());
    assert_eq!(evil.requests().len(), 0);

    let work = hostile_repo(false, &evil.base_url());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": work.path(), "policy": "governed", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    let calls = tower.calls();
    assert_eq!(
        calls.len(),
        1,
        "Tower was not asked; markers {:?}",
        marks(work.path())
    );
    assert_eq!(calls[0].body["tool_name"], "Bash");
    assert!(work.path().join("made.txt").exists());
    assert_eq!(marks(work.path()), Vec::<String>::new());
    assert_eq!(evil.requests().len(), 0);
}

/// The same through the API with Codex: the repository's `.codex/` (a model provider of its own,
/// `approval_policy = "never"`, hooks, exec-policy rules, MCP servers) and `AGENTS.md` change
/// nothing. Under `ask` the command waits for the person; under `governed` Tower gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_through_the_api_with_a_hostile_repo_asks_the_person_and_tower() {
    let evil = FakeOpenAi::start(Script::new([Step::text("evil")])).unwrap();
    let model = FakeOpenAi::start(Script::new([
        Step::exec(MAKE),
        Step::text("done").expect_tool_result(),
        Step::exec(MAKE),
        Step::text("done").expect_tool_result(),
    ]))
    .unwrap();
    let tower = TowerDouble::start().unwrap();
    let s = Server::start_with(
        Script::new([]),
        vec![
            (
                "HANGAR_CODEX_BIN".to_owned(),
                codex_bin().unwrap().display().to_string(),
            ),
            (CODEX_API_KEY_ENV.to_owned(), CODEX_API_KEY.to_owned()),
            ("HANGAR_GOVERNANCE_URL".to_owned(), tower.url()),
            (
                "HANGAR_GOVERNANCE_HOOK_CREDENTIAL".to_owned(),
                "tower".to_owned(),
            ),
        ],
        Some(("tower", TOWER_KEY)),
    );
    let config = codex_offline_config(&model.base_url());

    let work = hostile_repo(true, &evil.base_url());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(
                json!({"dir": work.path(), "harness": "codex", "policy": "ask",
                        "prompt": "make a file", "options": {"codex_config": config}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let request = first_approval(&s, &run, &turn, work.path(), &|| evil.requests().len()).await;
    assert!(
        !work.path().join("made.txt").exists(),
        "ran before the person"
    );
    let (status, r) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/approvals/{request}"),
            Some(json!({"decision": "allow"})),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    assert!(work.path().join("made.txt").exists());
    assert_eq!(
        marks(work.path()),
        Vec::<String>::new(),
        "hostile commands ran"
    );
    assert_eq!(evil.requests().len(), 0, "the second model was reached");

    let work = hostile_repo(true, &evil.base_url());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(
                json!({"dir": work.path(), "harness": "codex", "policy": "governed",
                        "prompt": "make a file", "options": {"codex_config": config}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    let calls = tower.calls();
    assert_eq!(
        calls.len(),
        1,
        "Tower was not asked once; markers {:?}; {calls:?}",
        marks(work.path())
    );
    assert_eq!(calls[0].target, "/approvals", "{calls:?}");
    assert!(
        calls[0].body.to_string().contains("made.txt"),
        "{:?}",
        calls[0].body
    );
    assert!(work.path().join("made.txt").exists());
    assert_eq!(
        marks(work.path()),
        Vec::<String>::new(),
        "hostile commands ran"
    );
    assert_eq!(evil.requests().len(), 0, "the second model was reached");
}

/// A one-shot turn (`HANGAR_LIVE_TURNS=false`: no driver, `claude -p` in its plain mode) on the
/// hostile repository, with the person's own key from the vault: Claude Code loads none of the
/// repository's settings (`--setting-sources ''`, `--strict-mcp-config`), so its hooks and MCP
/// servers leave no marker and `env.ANTHROPIC_BASE_URL` does not carry the conversation and the
/// person's key to the second model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_claude_turn_loads_nothing_of_a_hostile_repo() {
    let evil = FakeAnthropic::start(Script::new([Step::text("evil")])).unwrap();
    let s = Server::start_with(
        Script::new([bash(MAKE), Step::text("done")]),
        vec![
            ("HANGAR_LIVE_TURNS".to_owned(), "false".to_owned()),
            ("HANGAR_SERVER_CREDENTIALS".to_owned(), String::new()),
        ],
        None,
    );
    let (_, me) = s.call("GET", "/v1/me", None).await;
    let key = "sk-ant-person-hostile-5e1f";
    let (status, answer) = s
        .call(
            "POST",
            &format!(
                "/v1/credentials/ANTHROPIC_API_KEY?person={}",
                me["person"].as_str().unwrap()
            ),
            Some(json!({"value": key})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let work = hostile_repo(false, &evil.base_url());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": work.path(), "policy": "auto", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    assert_eq!(
        marks(work.path()),
        Vec::<String>::new(),
        "hostile commands ran"
    );
    assert_eq!(evil.all_requests().len(), 0, "the second model was reached");
    assert!(work.path().join("made.txt").exists(), "the turn ran");
    assert!(
        s.fake
            .requests()
            .iter()
            .all(|r| r.header("x-api-key") == Some(key))
    );
}

/// The same for a one-shot Codex turn (`codex exec` in its plain mode): the repository's
/// `.codex/` (its own model provider, hooks, MCP servers, `notify`) changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_codex_turn_loads_nothing_of_a_hostile_repo() {
    let evil = FakeOpenAi::start(Script::new([Step::text("evil")])).unwrap();
    let model = FakeOpenAi::start(Script::new([
        Step::exec(MAKE),
        Step::text("done").expect_tool_result(),
    ]))
    .unwrap();
    let s = Server::start_with(
        Script::new([]),
        vec![
            ("HANGAR_LIVE_TURNS".to_owned(), "false".to_owned()),
            (
                "HANGAR_CODEX_BIN".to_owned(),
                codex_bin().unwrap().display().to_string(),
            ),
            (CODEX_API_KEY_ENV.to_owned(), CODEX_API_KEY.to_owned()),
        ],
        None,
    );
    let work = hostile_repo(true, &evil.base_url());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(
                json!({"dir": work.path(), "harness": "codex", "policy": "auto",
                        "prompt": "make a file",
                        "options": {"codex_config": codex_offline_config(&model.base_url())}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(
        marks(work.path()),
        Vec::<String>::new(),
        "hostile commands ran"
    );
    assert_eq!(evil.all_requests().len(), 0, "the second model was reached");
    assert_eq!(t["status"], 0, "{t}");
    assert!(work.path().join("made.txt").exists(), "the turn ran");
}
