//! The control plane end to end: the real driver and the real Claude Code against the scripted
//! model, the store on SQLite: approvals answered through the control plane, events stored
//! exactly once (equal to a rebuild from the log), a restart mid-turn, and the next turn.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar_control::{ControlPlane, Reply, SessionRequest, Tools, TurnOptions};
use hangar_store::{EventScope, Harness, Policy, Store, TurnState, Vault};
use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env, workspace_root};
use serde_json::{Value, json};

struct Env {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
}

impl Env {
    fn new(script: Script) -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            fake: FakeAnthropic::start(script).unwrap(),
        }
    }

    fn tools(&self) -> Tools {
        let driver = std::env::var_os("HANGAR_DRIVER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"));
        assert!(
            driver.exists(),
            "no driver at {}: cargo build -p hangar-driver, or set HANGAR_DRIVER_BIN",
            driver.display()
        );
        let config = self.home.path().join("claude-config");
        std::fs::create_dir_all(&config).unwrap();
        Tools {
            home: self.home.path().join("hangar"),
            driver,
            claude: claude_bin().unwrap(),
            codex: PathBuf::from("codex"),
            // These tests are about the control plane over a plain folder: it allows one.
            env: claude_env(&self.fake.base_url(), &config)
                .into_iter()
                .chain([
                    ("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned()),
                    // The agent's login shells (`bash -l`) read this HOME, not the machine's: a root
                    // `.bashrc` that runs `pyenv rehash` leaves a lock behind when a test kills the
                    // shell mid-rehash, and every later turn on the machine then waits on it.
                    ("HOME".to_owned(), agent_home(self.home.path())),
                ])
                .collect(),
        }
    }

    async fn plane(&self) -> Arc<ControlPlane> {
        self.plane_with(self.tools()).await
    }

    /// A control plane over this home's store and vault, with these tools.
    async fn plane_with(&self, tools: Tools) -> Arc<ControlPlane> {
        let db = self.home.path().join("hangar.db");
        let store = Store::open(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        let vault = Vault::open_or_create(&self.home.path().join("master.key")).unwrap();
        ControlPlane::new(store.with_vault(vault).await.unwrap(), tools)
    }

    fn request(&self, policy: Policy, prompt: &str) -> SessionRequest {
        SessionRequest {
            dir: self.work.path().to_owned(),
            sandbox: None,
            env: None,
            no_sandbox: true,
            harness: Harness::Claude,
            policy: Some(policy),
            prompt: prompt.into(),
            person: "ada@example.com".into(),
            options: TurnOptions::default(),
        }
    }
}

async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_turn_ended(plane: &ControlPlane, turn: &str) -> hangar_store::Turn {
    until("the turn to end", async || {
        let t = plane.store().turn(turn).await.unwrap();
        (t.state == TurnState::Ended).then_some(t)
    })
    .await
}

/// The stored events of a run equal a rebuild from its log: nothing lost, nothing twice.
async fn assert_events_equal_rebuild(plane: &ControlPlane, run: &str) {
    let r = plane.store().run(run).await.unwrap();
    // Read as the watcher read it: in the mode it stored, with the run's seal key.
    let reader = plane.steps().log_reader(&r).await;
    let mode = hangar_control::Steps::stored_log_mode(&r);
    let rebuilt: Vec<Value> =
        hangar_events::rebuild_with(&PathBuf::from(&r.ctl_path).join("run.log"), &reader, mode)
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
    let stored: Vec<Value> = plane
        .store()
        .events_after(EventScope::Run(run), 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect();
    assert_eq!(
        stored, rebuilt,
        "stored events differ from a rebuild of the log"
    );
    assert!(!stored.is_empty());
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_through_the_control_plane_runs_the_tool() {
    let env = Env::new(Script::new([
        bash("echo hi > made.txt"),
        Step::text("made it"),
    ]));
    let plane = env.plane().await;
    let started = plane
        .runs()
        .start_session(env.request(Policy::Ask, "make a file"))
        .await
        .unwrap();
    let run = started.run.id.clone();
    let pending = until("a pending approval", async || {
        let p = plane.store().pending_approvals(&run).await.unwrap();
        p.into_iter().next()
    })
    .await;
    assert_eq!(pending.tool_name, "Bash");
    let reply = plane
        .runs()
        .answer(
            &run,
            &pending.request_id,
            true,
            None,
            None,
            "ada@example.com",
        )
        .await
        .unwrap();
    assert!(matches!(reply, Reply::Done { .. }), "{reply:?}");
    let turn = wait_turn_ended(&plane, &started.turn.id).await;
    assert_eq!(turn.status, Some(0));
    assert!(env.work.path().join("made.txt").exists());
    assert_eq!(
        (turn.usage.input, turn.usage.output),
        (22, 14),
        "two model calls of 11 in / 7 out"
    );
    let answered = plane
        .store()
        .approval(&run, &pending.request_id)
        .await
        .unwrap();
    assert_eq!(answered.answered_by.as_deref(), Some("ada@example.com"));
    assert!(
        plane
            .store()
            .pending_approvals(&run)
            .await
            .unwrap()
            .is_empty()
    );
    // The manifest is sealed; the run key is gone; the audit chain holds.
    let manifest: hangar_events::Manifest = serde_json::from_value(turn.manifest.unwrap()).unwrap();
    assert!(manifest.digest_matches());
    // A plain folder runs the default rules, unchanged, and the manifest says so.
    let rules = manifest.rules.clone().unwrap();
    assert!(
        rules.disabled.is_empty() && rules.added.is_empty(),
        "{rules:?}"
    );
    assert_eq!(rules.digest.len(), 64);
    assert_eq!(
        manifest.harness_version,
        hangar_testkit::CLAUDE_CODE_VERSION
    );
    assert!(manifest.env_names.iter().all(|n| !n.starts_with("HANGAR")));
    // The argv is the harness's as the driver started it, not the driver's.
    assert_eq!(
        std::path::Path::new(&manifest.argv[0]),
        env.tools().claude.as_path(),
        "{:?}",
        manifest.argv
    );
    assert!(
        manifest.argv.iter().any(|a| a == "stream-json"),
        "{:?}",
        manifest.argv
    );
    assert!(
        !manifest.argv.iter().any(|a| a == "--ctl"),
        "{:?}",
        manifest.argv
    );
    until("the run key to be destroyed", async || {
        (!plane.store().run(&run).await.unwrap().has_key).then_some(())
    })
    .await;
    assert!(plane.store().audit().verify().await.unwrap() >= 5);
    assert_events_equal_rebuild(&plane, &run).await;
    // The harness's session id is kept for the next turn.
    assert!(
        plane
            .store()
            .session(&started.session.id)
            .await
            .unwrap()
            .harness_session_id
            .is_some()
    );
}

/// S21: the control plane stops mid-turn (its tasks die with its runtime); the driver never
/// notices; a new control plane on the same database re-attaches from the saved cursor, the
/// pending approval is still there and answerable, and no event is lost or stored twice.
#[test]
fn a_restarted_control_plane_reattaches_and_the_approval_is_still_answerable() {
    let env = Env::new(Script::new([
        bash("echo hi > made.txt"),
        Step::text("made it"),
    ]));
    let (run, turn) = {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let ids = rt.block_on(async {
            let plane = env.plane().await;
            let s = plane
                .runs()
                .start_session(env.request(Policy::Ask, "make a file"))
                .await
                .unwrap();
            until("a pending approval", async || {
                plane
                    .store()
                    .pending_approvals(&s.run.id)
                    .await
                    .unwrap()
                    .into_iter()
                    .next()
            })
            .await;
            (s.run.id, s.turn.id)
        });
        rt.shutdown_background();
        ids
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let plane = env.plane().await;
        assert_eq!(plane.reattach().await.unwrap(), 1);
        let pending = plane.store().pending_approvals(&run).await.unwrap();
        assert_eq!(pending.len(), 1, "still pending after the restart");
        let reply = plane
            .runs()
            .answer(
                &run,
                &pending[0].request_id,
                true,
                None,
                None,
                "ada@example.com",
            )
            .await
            .unwrap();
        assert!(matches!(reply, Reply::Done { .. }), "{reply:?}");
        let t = wait_turn_ended(&plane, &turn).await;
        assert_eq!(t.status, Some(0));
        assert!(env.work.path().join("made.txt").exists());
        assert_events_equal_rebuild(&plane, &run).await;
    });
}

/// One writer per answer, and nothing lost between the ack and the record: the sender of a
/// deny records nothing of the answer (here it stops for good right after the driver's ack,
/// with no control plane running at all), and a control plane that re-attaches later records
/// it from the run log alone: who answered (the command's sealed sender), the note they gave,
/// the command's ack, and one audit record of each, in that person's name.
#[test]
fn an_answer_is_recorded_from_the_run_log_even_when_its_sender_stopped_at_the_ack() {
    let env = Env::new(Script::new([
        bash("echo hi > made.txt"),
        Step::text("it was refused"),
    ]));
    let (run, turn, request, key) = {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let ids = rt.block_on(async {
            let plane = env.plane().await;
            let s = plane
                .runs()
                .start_session(env.request(Policy::Ask, "make a file"))
                .await
                .unwrap();
            let p = until("a pending approval", async || {
                plane
                    .store()
                    .pending_approvals(&s.run.id)
                    .await
                    .unwrap()
                    .into_iter()
                    .next()
            })
            .await;
            let key: [u8; 32] = plane
                .store()
                .run_key(&s.run.id)
                .await
                .unwrap()
                .expose()
                .try_into()
                .unwrap();
            (s.run.id, s.turn.id, p.request_id, key)
        });
        rt.shutdown_background();
        ids
    };
    // A sender as the control plane is one, stopped at the ack: it seals the deny with its
    // sender, waits for the driver's signed answer, and writes nothing anywhere.
    let mailbox = hangar_mailbox::outbox::Mailbox::open_with_key(
        &env.home.path().join("hangar"),
        &run,
        hangar_protocol::RunKey::from_bytes(key),
    )
    .unwrap();
    let b = hangar_protocol::command::body::by(
        hangar_protocol::command::body::deny(&request, Some("too broad")),
        "ada@example.com",
    );
    let hangar_mailbox::outbox::Delivery::Landed(sent) =
        mailbox.send(hangar_protocol::Kind::Deny, b).unwrap()
    else {
        panic!("the deny did not land")
    };
    let outcome = mailbox.wait(&sent, Duration::from_secs(30)).unwrap();
    assert_eq!(outcome, hangar_mailbox::outbox::Outcome::Done);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let plane = env.plane().await;
        let store = plane.store();
        let a = store.approval(&run, &request).await.unwrap();
        assert_eq!(
            a.decision, None,
            "nothing recorded the answer before a watcher read it"
        );
        let (head, _) = store.audit().head().await.unwrap();
        assert_eq!(plane.reattach().await.unwrap(), 1);
        let t = wait_turn_ended(&plane, &turn).await;
        assert_eq!(t.status, Some(0));
        assert!(!env.work.path().join("made.txt").exists(), "the tool ran");
        let a = store.approval(&run, &request).await.unwrap();
        assert_eq!(
            (a.decision, a.answered_by.as_deref(), a.note.as_deref()),
            (
                Some(hangar_store::Decision::Deny),
                Some("ada@example.com"),
                Some("too broad")
            )
        );
        let seq = i64::try_from(sent.command.seq).unwrap();
        let c = store.command(&run, seq).await.unwrap();
        assert_eq!(
            (c.kind.as_str(), c.sent_by.as_str(), c.ack),
            (
                "deny",
                "ada@example.com",
                Some(hangar_store::AckStatus::Done)
            )
        );
        let records = store.audit().records(head, 1000).await.unwrap();
        let of = |action: &str| {
            records
                .iter()
                .filter(|r| r.action == action && r.detail.contains(&run))
                .map(|r| (r.actor.clone(), r.detail.clone()))
                .collect::<Vec<_>>()
        };
        let answered = of("approval.answered");
        assert_eq!(answered.len(), 1, "{answered:?}");
        assert_eq!(answered[0].0, "ada@example.com");
        assert!(
            answered[0].1.contains(r#""note":"too broad""#),
            "{answered:?}"
        );
        let acked = of("command.acked");
        assert_eq!(acked.len(), 1, "{acked:?}");
        assert_eq!(acked[0].0, "ada@example.com");
    });
}

/// S19 and the next turn: a message for a session whose turn has ended starts the next turn,
/// which resumes the harness's conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_after_the_turn_ended_starts_the_next_turn_in_the_same_conversation() {
    let env = Env::new(Script::new([
        Step::text("first answer"),
        Step::text("second answer"),
    ]));
    let plane = env.plane().await;
    let started = plane
        .runs()
        .start_session(env.request(Policy::Auto, "FIRST-PROMPT"))
        .await
        .unwrap();
    wait_turn_ended(&plane, &started.turn.id).await;
    let reply = plane
        .runs()
        .send(&started.session.id, "SECOND-PROMPT", "ada@example.com")
        .await
        .unwrap();
    let Reply::NextTurn { turn, .. } = reply else {
        panic!("{reply:?}")
    };
    let second = wait_turn_ended(&plane, &turn).await;
    assert_eq!((second.index, second.status), (1, Some(0)));
    let reqs = env.fake.requests();
    assert_eq!(reqs.len(), 2);
    let text = reqs[1].all_text();
    assert!(
        text.contains("FIRST-PROMPT")
            && text.contains("first answer")
            && text.contains("SECOND-PROMPT"),
        "resumed"
    );
    let turns = plane.store().turns(&started.session.id).await.unwrap();
    assert_eq!(turns.len(), 2);
}

/// S19 end to end: the harness dies with a steer landed but not passed on; the driver hands it
/// back, and the control plane starts the next turn with it — exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_back_message_starts_the_next_turn_exactly_once() {
    let env = Env::new(Script::new([
        bash("echo hi > made.txt"),
        Step::text("picked it up"),
    ]));
    let plane = env.plane().await;
    let started = plane
        .runs()
        .start_session(env.request(Policy::Ask, "make a file"))
        .await
        .unwrap();
    let run = started.run.id.clone();
    until("a pending approval", async || {
        plane
            .store()
            .pending_approvals(&run)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await;
    let r = plane.store().run(&run).await.unwrap();
    let driver = r.driver_pid.unwrap() as i32;
    let log = std::fs::read_to_string(PathBuf::from(&r.ctl_path).join("run.log")).unwrap();
    let harness = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "hangar.started")
        .unwrap()["harness_pid"]
        .as_i64()
        .unwrap() as i32;
    // Hold the driver, let the steer land, kill the harness, let the driver go on.
    unsafe { libc::kill(driver, libc::SIGSTOP) };
    let p = Arc::clone(&plane);
    let run2 = run.clone();
    let steer = tokio::spawn(async move {
        p.runs()
            .steer(&run2, "HANDED-BACK-MSG", "ada@example.com")
            .await
    });
    let inbox = PathBuf::from(&r.ctl_path).join("in");
    until("the steer to land", async || {
        (std::fs::read_dir(&inbox).map(|d| d.count()).unwrap_or(0) > 0).then_some(())
    })
    .await;
    unsafe { libc::kill(-harness, libc::SIGKILL) };
    // The harness has exited: a zombie the stopped driver has not reaped, all its threads gone
    // (a killed process's leader shows `Z` while its other threads are still dying, and until
    // they are, its stdin is open and a write into it succeeds). The driver must then hand the
    // steer back, not write it into the dead harness's stdin.
    until("the harness to exit", async || {
        let status = std::fs::read_to_string(format!("/proc/{harness}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        let zombie = field("State:").is_some_and(|s| s.starts_with('Z'));
        let threads = field("Threads:");
        (status.is_empty() || (zombie && threads.as_deref() == Some("1"))).then_some(())
    })
    .await;
    unsafe { libc::kill(driver, libc::SIGCONT) };
    let reply = steer.await.unwrap().unwrap();
    assert!(matches!(reply, Reply::HandedBack { .. }), "{reply:?}");
    let first = wait_turn_ended(&plane, &started.turn.id).await;
    assert_eq!(first.status, Some(1), "the harness died");
    let second = until("the next turn", async || {
        let turns = plane.store().turns(&started.session.id).await.unwrap();
        turns.get(1).cloned()
    })
    .await;
    assert!(second.prompt.contains("HANDED-BACK-MSG"), "{second:?}");
    let second = wait_turn_ended(&plane, &second.id).await;
    assert_eq!(second.status, Some(0));
    assert_eq!(
        env.fake
            .requests()
            .last()
            .unwrap()
            .last_user_text()
            .as_deref(),
        Some("HANDED-BACK-MSG")
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        plane
            .store()
            .turns(&started.session.id)
            .await
            .unwrap()
            .len(),
        2,
        "exactly one next turn"
    );
}

/// Policy `governed`: the control plane writes the run's copy of Tower's key (the vault
/// credential named by HANGAR_GOVERNANCE_HOOK_CREDENTIAL) and the driver asks Tower, whose answer
/// is final; without the settings the turn is refused with what to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn governed_asks_tower_with_the_vault_credential() {
    let env = Env::new(Script::new([
        bash("echo hi > made.txt"),
        Step::text("made it"),
    ]));
    let tower = hangar_testkit::TowerDouble::start().unwrap();
    let mut tools = env.tools();
    tools
        .env
        .push(("HANGAR_GOVERNANCE_URL".into(), tower.url()));
    tools
        .env
        .push(("HANGAR_GOVERNANCE_HOOK_CREDENTIAL".into(), "tower".into()));
    let db = env.home.path().join("hangar.db");
    let store = Store::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let vault = Vault::open_or_create(&env.home.path().join("master.key")).unwrap();
    let store = store.with_vault(vault).await.unwrap();
    store
        .set_credential(
            "tower",
            &hangar_store::Secret::new(hangar_testkit::TOWER_KEY.as_bytes().to_vec()),
        )
        .await
        .unwrap();
    let plane = ControlPlane::new(store, tools);
    let started = plane
        .runs()
        .start_session(env.request(Policy::Governed, "make a file"))
        .await
        .unwrap();
    let turn = wait_turn_ended(&plane, &started.turn.id).await;
    assert_eq!(turn.status, Some(0));
    assert!(env.work.path().join("made.txt").exists());
    // T15: the run's copy of the key is removed when the run ends.
    assert!(
        !PathBuf::from(&started.run.ctl_path)
            .join("tower.key")
            .exists()
    );
    let calls = tower.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].target, "/approvals");
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some(format!("Bearer {}", hangar_testkit::TOWER_KEY).as_str())
    );
    assert!(
        plane
            .store()
            .pending_approvals(&started.run.id)
            .await
            .unwrap()
            .is_empty()
    );

    // No Tower settings: refused, saying what to set.
    let env2 = Env::new(Script::new([Step::text("never")]));
    let plane2 = env2.plane().await;
    let err = plane2
        .runs()
        .start_session(env2.request(Policy::Governed, "x"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("HANGAR_GOVERNANCE_URL"), "{err}");
}

/// `HANGAR_GOVERNANCE_HOOK=required`: a local sandbox has no uid split, so the agent could remove
/// the hook; the turn is refused and audited (Codex turns with their own reason).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_hook_refuses_turns_where_the_agent_could_remove_it() {
    let env = Env::new(Script::new([Step::text("never")]));
    let mut tools = env.tools();
    tools
        .env
        .push(("HANGAR_GOVERNANCE_HOOK".into(), "required".into()));
    let plane = env.plane_with(tools).await;
    let err = plane
        .runs()
        .start_session(env.request(Policy::Ask, "x"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no uid split"), "{err}");
    let mut codex = env.request(Policy::Ask, "x");
    codex.harness = Harness::Codex;
    let err = plane.runs().start_session(codex).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("Codex turns that require the Tower hook"),
        "{err}"
    );
    let refused = plane
        .store()
        .audit()
        .records(0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.action == "turn.refused")
        .count();
    assert_eq!(refused, 2);
    assert!(env.fake.requests().is_empty(), "no harness ran");
}

/// A Claude Code of another version: a package of its own (version `v`) whose `claude` runs the
/// pinned CLI.
fn claude_of_version(dir: &std::path::Path, v: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(dir.join("package.json"), json!({"version": v}).to_string()).unwrap();
    let bin = dir.join("claude");
    let real = claude_bin().unwrap().canonicalize().unwrap();
    std::fs::write(
        &bin,
        format!("#!/bin/sh\nexec '{}' \"$@\"\n", real.display()),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_version_that_has_not_passed_the_suite_is_refused_unless_the_session_says_so() {
    let env = Env::new(Script::new([
        Step::text("ran unverified"),
        Step::text("ran after its suite passed"),
    ]));
    // The pinned version passes: built in.
    let pinned = env.plane().await;
    let started = pinned
        .runs()
        .start_session(env.request(Policy::Auto, "pinned"))
        .await
        .unwrap();
    let t = wait_turn_ended(&pinned, &started.turn.id).await;
    let m = t.manifest.unwrap();
    assert_eq!(m["harness_check"], "passed:built-in");
    drop(pinned);

    let pkg = tempfile::tempdir().unwrap();
    let mut tools = env.tools();
    tools.claude = claude_of_version(pkg.path(), "0.0.1-conformance");
    let plane = env.plane_with(tools).await;

    // Never checked: refused, saying how to check it or run it anyway; audited; nothing ran.
    let err = plane
        .runs()
        .start_session(env.request(Policy::Auto, "x"))
        .await
        .unwrap_err();
    let said = err.to_string();
    assert!(
        said.contains("claude 0.0.1-conformance has not passed hangar's conformance suite")
            && said.contains("hangar harness check --claude PATH")
            && said.contains("--unverified-harness"),
        "{said}"
    );
    let requests_before = env.fake.requests().len();

    // A recorded failing run is refused too, naming what failed.
    plane
        .store()
        .record_harness_check(
            Harness::Claude,
            "0.0.1-conformance",
            hangar_control::conformance::SUITE,
            false,
            &json!({"steer": "fails: the steer never reached the model", "interrupt": "holds"}),
            "ada@example.com",
        )
        .await
        .unwrap();
    let err = plane
        .runs()
        .start_session(env.request(Policy::Auto, "x"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("its suite failed: steer"), "{err}");
    assert_eq!(env.fake.requests().len(), requests_before, "no harness ran");

    // The session says to run it unverified: it runs, warns, and the manifest records it.
    let mut req = env.request(Policy::Auto, "run it anyway");
    req.options.unverified_harness = true;
    let started = plane.runs().start_session(req).await.unwrap();
    let t = wait_turn_ended(&plane, &started.turn.id).await;
    let m = t.manifest.clone().unwrap();
    assert_eq!(m["harness_check"], "unverified");
    assert_eq!(m["harness_version"], "0.0.1-conformance");
    let manifest: hangar_events::Manifest = serde_json::from_value(m).unwrap();
    assert!(manifest.digest_matches());
    let warned = plane
        .store()
        .events_after(EventScope::Run(&started.run.id), 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .any(|e| {
            e.payload
                .to_string()
                .contains("runs unverified, as the session asked")
        });
    assert!(warned, "the turn carries the warning");

    // Its suite passes (recorded here): it runs without the override.
    plane
        .store()
        .record_harness_check(
            Harness::Claude,
            "0.0.1-conformance",
            hangar_control::conformance::SUITE,
            true,
            &json!({"steer": "holds"}),
            "ada@example.com",
        )
        .await
        .unwrap();
    let started = plane
        .runs()
        .start_session(env.request(Policy::Auto, "checked now"))
        .await
        .unwrap();
    let t = wait_turn_ended(&plane, &started.turn.id).await;
    assert_eq!(t.manifest.unwrap()["harness_check"], "passed:recorded");

    let actions: Vec<String> = plane
        .store()
        .audit()
        .records(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.action)
        .collect();
    assert_eq!(
        actions.iter().filter(|a| *a == "turn.refused").count(),
        2,
        "{actions:?}"
    );
    assert_eq!(
        actions
            .iter()
            .filter(|a| *a == "harness.unverified")
            .count(),
        1,
        "{actions:?}"
    );
}

/// A harness that dies before it begins anything (a broken install) hands its prompt back at
/// every turn: the control plane retries it once, then stops, and says why, instead of starting
/// turns without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_handed_back_again_by_its_own_retry_is_not_retried_without_end() {
    let env = Env::new(Script::new([Step::text("never asked")]));
    let broken = env.home.path().join("broken-claude");
    std::fs::write(&broken, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut tools = env.tools();
    tools.claude = broken;
    let plane = env.plane_with(tools).await;
    let started = plane
        .runs()
        .start_session(env.request(Policy::Auto, "LOOPING-PROMPT"))
        .await
        .unwrap();
    wait_turn_ended(&plane, &started.turn.id).await;
    // Long enough for many turns if each handed-back prompt started another.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let turns = plane.store().turns(&started.session.id).await.unwrap();
    assert_eq!(
        turns
            .iter()
            .map(|t| (t.index, t.state, t.status, t.prompt.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (0, TurnState::Ended, Some(1), "LOOPING-PROMPT"),
            (1, TurnState::Ended, Some(1), "LOOPING-PROMPT"),
        ],
        "the prompt is carried once, then not again"
    );
    let audit = plane.store().audit().records(0, 10_000).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(
        actions.iter().filter(|a| **a == "turn.handed_back").count(),
        1,
        "{actions:?}"
    );
    assert_eq!(
        actions
            .iter()
            .filter(|a| **a == "turn.handback_stopped")
            .count(),
        1,
        "{actions:?}"
    );
    let events = plane
        .store()
        .events_after(EventScope::Session(&started.session.id), 0, 1000)
        .await
        .unwrap();
    let warning = events
        .iter()
        .filter(|e| e.kind == "warning" && e.run_id.is_none())
        .map(|e| e.payload["message"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(warning.len(), 1, "{events:?}");
    assert!(
        warning[0].contains("not sent again") && warning[0].contains("send it again"),
        "{warning:?}"
    );
    // The runs' own events are still exactly what their logs say.
    for t in &turns {
        assert_events_equal_rebuild(&plane, t.run_id.as_deref().unwrap()).await;
    }
}

/// A HOME of the test's own for the agent (see where it is set).
fn agent_home(root: &std::path::Path) -> String {
    let h = root.join("agent-home");
    std::fs::create_dir_all(&h).unwrap();
    h.display().to_string()
}
