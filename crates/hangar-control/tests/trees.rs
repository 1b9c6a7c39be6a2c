//! Trees through the control plane, with the real Claude Code and Codex against the scripted
//! models: one-shot turns (S29, S30: `HANGAR_LIVE_TURNS=false`, the harness in its plain mode,
//! start and end trees on the turn record, untrusted), and the OTLP trace export (S28) received
//! by an OTLP/HTTP endpoint on loopback that decodes what arrives (opentelemetry-proto).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hangar_control::{ControlPlane, SessionRequest, Tools, TurnOptions};
use hangar_store::{EventScope, Harness, Policy, Store, TurnState, Vault};
use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, Script, Step, claude_bin, claude_env, codex_bin, codex_env,
    codex_offline_args, workspace_root,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A folder with a committed repository, and hangar's home beside it.
struct Place {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The tree `git add -A && git write-tree` gives for `dir`, in a throwaway copy.
fn git_tree(dir: &Path) -> String {
    let copy = tempfile::tempdir().unwrap();
    let out = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", dir.display()))
        .arg(copy.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    git(copy.path(), &["add", "-A"]);
    git(copy.path(), &["write-tree"])
}

impl Place {
    fn new() -> Place {
        let p = Place {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        };
        std::fs::write(p.work.path().join("a.txt"), "a\n").unwrap();
        git(p.work.path(), &["init", "-q"]);
        git(p.work.path(), &["add", "-A"]);
        git(p.work.path(), &["commit", "-qm", "start"]);
        p
    }

    fn tools(&self, env: Vec<(String, String)>) -> Tools {
        let driver = std::env::var_os("HANGAR_DRIVER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"));
        Tools {
            home: self.home.path().join("hangar"),
            driver,
            claude: claude_bin().unwrap(),
            codex: codex_bin().unwrap(),
            env,
        }
    }

    async fn plane(&self, mut tools: Tools) -> Arc<ControlPlane> {
        // Plain folders (the trees as the driver hashes them there): allowed on this server.
        tools
            .env
            .push(("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned()));
        // The agent's login shells (`bash -l`) read this HOME, not the machine's: a root
        // `.bashrc` that runs `pyenv rehash` leaves a lock behind when a test kills the
        // shell mid-rehash, and every later turn on the machine then waits on it.
        tools
            .env
            .push(("HOME".to_owned(), agent_home(self.home.path())));
        let db = self.home.path().join("hangar.db");
        let store = Store::open(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        let vault = Vault::open_or_create(&self.home.path().join("master.key")).unwrap();
        ControlPlane::new(store.with_vault(vault).await.unwrap(), tools)
    }

    fn request(&self, harness: Harness, prompt: &str, options: TurnOptions) -> SessionRequest {
        SessionRequest {
            dir: self.work.path().to_owned(),
            sandbox: None,
            env: None,
            no_sandbox: true,
            harness,
            policy: Some(Policy::Auto),
            prompt: prompt.into(),
            person: "ada@example.com".into(),
            options,
        }
    }

    fn claude_env(&self, fake: &FakeAnthropic) -> Vec<(String, String)> {
        let config = self.home.path().join("claude-config");
        std::fs::create_dir_all(&config).unwrap();
        claude_env(&fake.base_url(), &config)
    }
}

async fn ended(plane: &ControlPlane, turn: &str) -> hangar_store::Turn {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let t = plane.store().turn(turn).await.unwrap();
        if t.state == TurnState::Ended {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out: {t:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn events(plane: &ControlPlane, run: &str) -> Vec<Value> {
    plane
        .store()
        .events_after(EventScope::Run(run), 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect()
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

fn one_shot() -> (String, String) {
    ("HANGAR_LIVE_TURNS".into(), "false".into())
}

/// The one-shot turn's record: start and end trees equal git's, untrusted, and nothing of the
/// driver (no tree events, no driver in the argv).
async fn assert_one_shot_trees(
    plane: &ControlPlane,
    turn: &hangar_store::Turn,
    start: &str,
    end: &str,
) {
    let g = turn.git_trees.as_ref().expect("git_trees on the turn");
    assert_eq!(g["start"]["tree"], start, "{g}");
    assert_eq!(g["end"]["tree"], end, "{g}");
    assert_eq!(g["trusted"], false, "{g}");
    assert!(
        g["why"]
            .as_str()
            .unwrap()
            .contains("HANGAR_LIVE_TURNS=false"),
        "{g}"
    );
    let run = turn.run_id.as_deref().unwrap();
    let evs = events(plane, run).await;
    assert!(
        evs.iter().all(|e| e["kind"] != "tree"),
        "no driver trees: {evs:?}"
    );
    assert!(
        evs.iter()
            .any(|e| e["kind"] == "warning"
                && e["message"].as_str().unwrap_or("").contains("one-shot")),
        "{evs:?}"
    );
    let argv = turn.manifest.as_ref().unwrap()["argv"].to_string();
    assert!(!argv.contains("hangar-driver"), "{argv}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_claude_turn_records_its_start_and_end_trees() {
    let place = Place::new();
    let fake = FakeAnthropic::start(Script::new([
        bash("printf 'b\\n' > b.txt && printf 'more\\n' >> a.txt"),
        // Slow enough for a steer to find the turn running.
        Step::slow_text(10, Duration::from_millis(200)).expect_tool_result(),
    ]))
    .unwrap();
    let mut env = place.claude_env(&fake);
    env.push(one_shot());
    let plane = place.plane(place.tools(env)).await;
    let start = git_tree(place.work.path());
    let started = plane
        .runs()
        .start_session(place.request(Harness::Claude, "make b", TurnOptions::default()))
        .await
        .unwrap();
    // Nothing reads a one-shot turn's commands: a steer is refused at once, saying why.
    let t = Instant::now();
    let reply = plane
        .runs()
        .steer(&started.run.id, "and c", "ada@example.com")
        .await
        .unwrap();
    match &reply {
        hangar_control::Reply::Refused { reason, .. } => {
            assert!(reason.contains("one-shot"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let turn = ended(&plane, &started.turn.id).await;
    assert_eq!(turn.status, Some(0), "{turn:?}");
    assert_eq!(
        std::fs::read_to_string(place.work.path().join("b.txt")).unwrap(),
        "b\n"
    );
    let end = git_tree(place.work.path());
    assert_ne!(start, end);
    assert_one_shot_trees(&plane, &turn, &start, &end).await;
    let argv: Vec<String> =
        serde_json::from_value(turn.manifest.as_ref().unwrap()["argv"].clone()).unwrap();
    assert_eq!(
        &argv[1..6],
        [
            "-p",
            "make b",
            "--output-format",
            "stream-json",
            "--verbose"
        ],
        "{argv:?}"
    );
    // The plain mode's lines are the run log: the same events as a live turn's.
    let evs = events(&plane, &started.run.id).await;
    let kinds: Vec<&str> = evs.iter().filter_map(|e| e["kind"].as_str()).collect();
    for k in [
        "session",
        "tool_call",
        "tool_result",
        "assistant_text",
        "turn_end",
    ] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    // The next turn resumes the harness's session, one-shot again.
    let fake_requests = fake.requests().len();
    assert_eq!(fake_requests, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_codex_turn_records_its_start_and_end_trees() {
    let place = Place::new();
    let fake = FakeOpenAi::start(Script::new([
        Step::exec("printf 'x\\n' > x.txt"),
        Step::patch("*** Begin Patch\n*** Add File: notes.txt\n+some notes\n*** End Patch")
            .expect_tool_result(),
        Step::text("made them").expect_tool_result(),
    ]))
    .unwrap();
    let codex_home = place.home.path().join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let mut env = codex_env(&codex_home);
    env.push(one_shot());
    let plane = place.plane(place.tools(env)).await;
    let start = git_tree(place.work.path());
    let options = TurnOptions {
        codex_config: codex_offline_args(&fake.base_url())
            .chunks(2)
            .filter(|p| p[0] == "-c")
            .map(|p| p[1].clone())
            .collect(),
        ..TurnOptions::default()
    };
    let started = plane
        .runs()
        .start_session(place.request(Harness::Codex, "make x and notes", options))
        .await
        .unwrap();
    let turn = ended(&plane, &started.turn.id).await;
    assert_eq!(turn.status, Some(0), "{turn:?}");
    assert_eq!(
        std::fs::read_to_string(place.work.path().join("x.txt")).unwrap(),
        "x\n"
    );
    assert_eq!(
        std::fs::read_to_string(place.work.path().join("notes.txt")).unwrap(),
        "some notes\n"
    );
    let end = git_tree(place.work.path());
    assert_one_shot_trees(&plane, &turn, &start, &end).await;
    let argv: Vec<String> =
        serde_json::from_value(turn.manifest.as_ref().unwrap()["argv"].clone()).unwrap();
    assert_eq!(
        &argv[1..5],
        ["exec", "--json", "--disable", "plugins"],
        "{argv:?}"
    );
    assert_eq!(argv.last().unwrap(), "make x and notes");
    let evs = events(&plane, &started.run.id).await;
    let kinds: Vec<&str> = evs.iter().filter_map(|e| e["kind"].as_str()).collect();
    for k in [
        "session",
        "tool_call",
        "tool_result",
        "assistant_text",
        "turn_end",
    ] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    assert!(fake.unexpected().is_empty(), "{:?}", fake.unexpected());
}

/// An OTLP/HTTP endpoint on loopback: every `POST /v1/traces` body decoded, answered 200.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = Arc::clone(&got);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let g = Arc::clone(&g);
                tokio::spawn(async move {
                    // One request per connection is enough for the exporter; keep-alive requests
                    // are read in turn.
                    let mut buf = Vec::new();
                    loop {
                        let Some(head_end) = find(&buf, b"\r\n\r\n") else {
                            let mut chunk = [0u8; 8192];
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse().ok())?
                            })
                            .unwrap_or(0);
                        while buf.len() < head_end + 4 + len {
                            let mut chunk = [0u8; 8192];
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let body = buf[head_end + 4..head_end + 4 + len].to_vec();
                        buf.drain(..head_end + 4 + len);
                        assert!(head.starts_with("POST /v1/traces "), "{head}");
                        assert!(
                            head.to_ascii_lowercase()
                                .contains("content-type: application/x-protobuf"),
                            "{head}"
                        );
                        let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
                        g.lock().unwrap().push(req);
                        let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Receiver { url, got }
    }

    /// The spans received so far, with their resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let mut out = Vec::new();
        for req in self.got.lock().unwrap().iter() {
            for rs in &req.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .map(|r| attrs(&r.attributes))
                    .and_then(|a| a.get("service.name").cloned())
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    for s in &ss.spans {
                        out.push((service.to_string(), s.clone()));
                    }
                }
            }
        }
        out
    }

    async fn wait_for(&self, turn_id: &str) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if let Some((service, turn)) = spans.iter().find(|(_, s)| {
                s.name == "hangar.turn" && attrs(&s.attributes)["hangar.turn.id"] == turn_id
            }) {
                assert_eq!(service, "\"hangar\"");
                return spans
                    .iter()
                    .filter(|(_, s)| s.trace_id == turn.trace_id)
                    .map(|(_, s)| s.clone())
                    .collect();
            }
            assert!(Instant::now() < deadline, "no trace for {turn_id}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A span's attributes as JSON values.
fn attrs(kv: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> BTreeMap<String, Value> {
    kv.iter()
        .map(|a| {
            let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => json!(s),
                Some(Any::BoolValue(b)) => json!(b),
                Some(Any::IntValue(i)) => json!(i),
                other => json!(format!("{other:?}")),
            };
            (a.key.clone(), v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_are_exported_as_otlp_traces_with_their_trees() {
    let receiver = Receiver::start().await;
    let place = Place::new();
    let notes = place.work.path().join("notes.txt");
    let fake = FakeAnthropic::start(Script::new([
        // A live turn (the driver): Bash, a read-only call, then Edit.
        bash("printf 'one\\n' > notes.txt"),
        Step::tool("Read", json!({"file_path": notes})).expect_tool_result(),
        Step::tool(
            "Edit",
            json!({"file_path": notes, "old_string": "one", "new_string": "two"}),
        )
        .expect_tool_result(),
        Step::text("edited").expect_tool_result(),
        // The one-shot turn.
        bash("printf 'three\\n' > more.txt").expect_user_text("one shot"),
        Step::text("made more").expect_tool_result(),
    ]))
    .unwrap();
    let mut env = place.claude_env(&fake);
    env.push((
        "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
        format!("{}/", receiver.url),
    ));
    let plane = place.plane(place.tools(env.clone())).await;
    let started = plane
        .runs()
        .start_session(place.request(Harness::Claude, "write notes", TurnOptions::default()))
        .await
        .unwrap();
    let turn = ended(&plane, &started.turn.id).await;
    assert_eq!(turn.status, Some(0), "{turn:?}");
    let trees: Vec<Value> = events(&plane, &started.run.id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "tree")
        .collect();
    let tree_of = |phase: &str| {
        trees
            .iter()
            .find(|t| t["phase"] == phase)
            .unwrap_or_else(|| panic!("{phase} in {trees:?}"))["tree"]
            .clone()
    };
    let spans = receiver.wait_for(&started.turn.id).await;
    let turn_span = spans.iter().find(|s| s.name == "hangar.turn").unwrap();
    let a = attrs(&turn_span.attributes);
    assert_eq!(a["hangar.git.tree.start"], tree_of("start"), "{a:?}");
    assert_eq!(a["hangar.git.tree.end"], tree_of("end"), "{a:?}");
    assert_eq!(a["hangar.git.tree.end"], json!(git_tree(place.work.path())));
    assert_eq!(a["hangar.git.tree.trusted"], false, "no uid split here");
    assert_eq!(a["hangar.run.id"], json!(started.run.id));
    assert_eq!(a["hangar.harness"], "claude");
    assert!(!a.contains_key("hangar.git.tree.skipped"), "{a:?}");
    assert!(turn_span.end_time_unix_nano >= turn_span.start_time_unix_nano);
    let tools: Vec<BTreeMap<String, Value>> = spans
        .iter()
        .filter(|s| s.name == "hangar.tool_call")
        .inspect(|s| assert_eq!(s.parent_span_id, turn_span.span_id))
        .map(|s| attrs(&s.attributes))
        .collect();
    let names: Vec<&Value> = tools.iter().map(|t| &t["hangar.tool.name"]).collect();
    assert_eq!(names, [&json!("Bash"), &json!("Read"), &json!("Edit")]);
    for t in &tools {
        let id = &t["hangar.tool_use_id"];
        let line = trees.iter().find(|l| &l["tool_use_id"] == id);
        match line {
            // Its own tree line.
            Some(l) => assert_eq!(t["hangar.git.tree"], l["tree"], "{t:?}"),
            // The read-only call: the tree as it stood.
            None => assert_eq!(t["hangar.tool.name"], "Read", "{t:?} {trees:?}"),
        }
        assert_eq!(t["hangar.git.tree.trusted"], false);
    }
    assert_eq!(tools[1]["hangar.git.tree"], tools[0]["hangar.git.tree"]);
    assert_ne!(tools[2]["hangar.git.tree"], tools[0]["hangar.git.tree"]);

    // A one-shot turn: its start and end trees from the turn record, untrusted.
    env.push(one_shot());
    drop(plane);
    let plane = place.plane(place.tools(env)).await;
    let reply = plane
        .runs()
        .send(&started.session.id, "one shot", "ada@example.com")
        .await
        .unwrap();
    let hangar_control::Reply::NextTurn { turn: next, .. } = reply else {
        panic!("{reply:?}")
    };
    let t = ended(&plane, &next).await;
    assert_eq!(t.status, Some(0), "{t:?}");
    let spans = receiver.wait_for(&next).await;
    let turn_span = spans.iter().find(|s| s.name == "hangar.turn").unwrap();
    let a = attrs(&turn_span.attributes);
    let g = t.git_trees.unwrap();
    assert_eq!(a["hangar.git.tree.start"], g["start"]["tree"], "{a:?}");
    assert_eq!(a["hangar.git.tree.end"], g["end"]["tree"], "{a:?}");
    assert_eq!(a["hangar.git.tree.end"], json!(git_tree(place.work.path())));
    assert_eq!(a["hangar.git.tree.trusted"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_hash_is_exported_as_skipped() {
    let receiver = Receiver::start().await;
    let place = Place::new();
    let fake = FakeAnthropic::start(Script::new([
        bash("printf 'b\\n' > b.txt"),
        Step::text("done").expect_tool_result(),
    ]))
    .unwrap();
    let mut env = place.claude_env(&fake);
    env.push((
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".into(),
        format!("{}/v1/traces", receiver.url),
    ));
    // Every hash is over a limit of 0 ms: the start tree is the turn's only one.
    env.push(("HANGAR_TREE_SLOW_MS".into(), "0".into()));
    let plane = place.plane(place.tools(env)).await;
    let started = plane
        .runs()
        .start_session(place.request(Harness::Claude, "make b", TurnOptions::default()))
        .await
        .unwrap();
    let turn = ended(&plane, &started.turn.id).await;
    assert_eq!(turn.status, Some(0), "{turn:?}");
    let spans = receiver.wait_for(&started.turn.id).await;
    let turn_span = spans.iter().find(|s| s.name == "hangar.turn").unwrap();
    let a = attrs(&turn_span.attributes);
    assert_eq!(a["hangar.git.tree.skipped"], "slow", "{a:?}");
    let tool = spans.iter().find(|s| s.name == "hangar.tool_call").unwrap();
    let t = attrs(&tool.attributes);
    assert_eq!(t["hangar.git.tree.skipped"], "slow", "{t:?}");
    assert!(!t.contains_key("hangar.git.tree"), "{t:?}");
}

/// A HOME of the test's own for the agent (see where it is set).
fn agent_home(root: &std::path::Path) -> String {
    let h = root.join("agent-home");
    std::fs::create_dir_all(&h).unwrap();
    h.display().to_string()
}
