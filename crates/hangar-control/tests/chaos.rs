//! What `scripts/chaos` found, kept as regression tests (the real driver and Claude Code, the
//! scripted model, SQLite): a driver killed mid-turn leaves no message behind and no command or
//! permission request unanswered, and a prompt's ack (which nobody waits for) is recorded.
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
use hangar_store::{AckStatus, Decision, Harness, Policy, Store, TurnState, Vault};
use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env, workspace_root};
use serde_json::json;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_after_the_driver_was_killed_starts_the_next_turn() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let fake = FakeAnthropic::start(Script::new([
        Step::tool(
            "Bash",
            json!({"command": "echo hi > made.txt", "description": "run it"}),
        ),
        Step::text("carried on").expect_user_text("after the kill"),
    ]))
    .unwrap();
    let config = home.path().join("claude-config");
    std::fs::create_dir_all(&config).unwrap();
    let tools = Tools {
        home: home.path().join("hangar"),
        driver: std::env::var_os("HANGAR_DRIVER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver")),
        claude: claude_bin().unwrap(),
        codex: PathBuf::from("codex"),
        // A plain folder, allowed on this control plane.
        env: claude_env(&fake.base_url(), &config)
            .into_iter()
            .chain([
                ("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned()),
                // The agent's login shells read this HOME, not the machine's (whose `.bashrc`
                // may run `pyenv rehash`: killed mid-rehash, it leaves a lock every later turn
                // on the machine waits on).
                ("HOME".to_owned(), {
                    let h = home.path().join("agent-home");
                    std::fs::create_dir_all(&h).unwrap();
                    h.display().to_string()
                }),
            ])
            .collect(),
    };
    let store = Store::open(&format!(
        "sqlite://{}",
        home.path().join("hangar.db").display()
    ))
    .await
    .unwrap();
    let vault = Vault::open_or_create(&home.path().join("master.key")).unwrap();
    let plane: Arc<ControlPlane> = ControlPlane::new(store.with_vault(vault).await.unwrap(), tools);
    let started = plane
        .runs()
        .start_session(SessionRequest {
            dir: work.path().to_owned(),
            sandbox: None,
            env: None,
            no_sandbox: true,
            harness: Harness::Claude,
            policy: Some(Policy::Ask),
            prompt: "make a file".into(),
            person: "ada@example.com".into(),
            options: TurnOptions::default(),
        })
        .await
        .unwrap();
    let run = started.run.id.clone();
    let pending = until("a pending approval", async || {
        let p = plane.store().pending_approvals(&run).await.unwrap();
        p.into_iter().next()
    })
    .await;
    // The driver is killed with a permission request pending; its harness goes with it.
    let r = plane.store().run(&run).await.unwrap();
    let driver = i32::try_from(r.driver_pid.unwrap()).unwrap();
    let log = std::fs::read_to_string(PathBuf::from(&r.ctl_path).join("run.log")).unwrap();
    let started_line: serde_json::Value = serde_json::from_str(
        log.lines()
            .find(|l| l.contains("\"hangar.started\""))
            .unwrap(),
    )
    .unwrap();
    let harness = i32::try_from(started_line["harness_pid"].as_i64().unwrap()).unwrap();
    unsafe {
        libc::kill(driver, libc::SIGKILL);
        libc::kill(harness, libc::SIGKILL);
    }
    // A message right after: it lands in `in/` before the control plane noticed, or finds the
    // turn over; either way it starts the next turn (before, it waited 30 s and was lost).
    let t0 = Instant::now();
    let reply = plane
        .runs()
        .steer(&run, "after the kill, carry on", "ada@example.com")
        .await
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the sender waited {:?}",
        t0.elapsed()
    );
    assert!(
        matches!(reply, Reply::HandedBack { .. } | Reply::NextTurn { .. }),
        "{reply:?}"
    );
    let first = until("the killed turn to end", async || {
        let t = plane.store().turn(&started.turn.id).await.unwrap();
        (t.state == TurnState::Ended).then_some(t)
    })
    .await;
    assert_eq!(first.status, Some(-1));
    assert_eq!(
        first.reason.as_deref(),
        Some("the driver stopped without ending the turn")
    );
    // The next turn starts with the message, once, and runs to its end.
    let next = until("the next turn to end", async || {
        let turns = plane.store().turns(&started.session.id).await.unwrap();
        turns
            .into_iter()
            .skip(1)
            .find(|t| t.state == TurnState::Ended)
    })
    .await;
    assert_eq!(next.prompt, "after the kill, carry on");
    assert_eq!(next.status, Some(0));
    assert_eq!(
        plane
            .store()
            .turns(&started.session.id)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(fake.unexpected().is_empty(), "{:?}", fake.unexpected());
    // Every command of both runs has its answer (the prompts' acks come from the log), and the
    // request nobody can answer any more is settled, saying why.
    for run in [&run, next.run_id.as_ref().unwrap()] {
        for c in plane.store().commands(run).await.unwrap() {
            assert!(c.ack.is_some(), "run {run}: command {c:?} has no answer");
            if c.kind == "prompt" && *run != started.run.id {
                assert_eq!(c.ack, Some(AckStatus::Done));
            }
        }
    }
    let settled = plane
        .store()
        .approval(&run, &pending.request_id)
        .await
        .unwrap();
    assert_eq!(
        (settled.decision, settled.answered_by.as_deref()),
        (Some(Decision::Deny), Some("hangar"))
    );
    assert!(!PathBuf::from(&r.ctl_path).join("in").exists());
}
