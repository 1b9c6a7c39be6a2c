//! Passports (`HANGAR_GOVERNANCE_HOOK_AUTH=passport`, T11-T15) end to end: the real driver and
//! the real Claude Code against the scripted model, policy `governed`, the Tower double issuing
//! the passports. The control plane mints the sandbox's token, exchanges it, checks the passport
//! and writes it as the run's key file; the driver shows it to Tower on each call; a refresh
//! loop renews it while the run lives and never after.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use hangar_control::{ControlPlane, SessionRequest, Tools, TurnOptions};
use hangar_store::{Harness, Policy, Store, TurnState, Vault};
use hangar_testkit::{
    FakeAnthropic, PassportAlg, PassportFault, Script, Step, TowerDouble, claude_bin, claude_env,
    workspace_root,
};
use serde_json::{Value, json};

/// hangar's URL in these tests (the sandbox token's issuer; the double trusts it by its keys).
const HANGAR: &str = "http://hangar.test";
const ADA: &str = "ada@example.com";

struct Env {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
    tower: TowerDouble,
}

impl Env {
    fn new(script: Script) -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            fake: FakeAnthropic::start(script).unwrap(),
            tower: TowerDouble::start().unwrap(),
        }
    }

    async fn plane(&self) -> Arc<ControlPlane> {
        self.plane_at(&self.tower.url()).await
    }

    /// A control plane that finds Tower at `tower`.
    async fn plane_at(&self, tower: &str) -> Arc<ControlPlane> {
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
        let mut env = claude_env(&self.fake.base_url(), &config);
        env.extend([
            ("HANGAR_GOVERNANCE_URL".to_owned(), tower.to_owned()),
            (
                "HANGAR_GOVERNANCE_HOOK_AUTH".to_owned(),
                "passport".to_owned(),
            ),
            ("HANGAR_URL".to_owned(), HANGAR.to_owned()),
            // The passport's exchange in a plain folder: allowed on this server.
            ("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned()),
            // The agent's login shells (`bash -l`) read this HOME, not the machine's: a root
            // `.bashrc` that runs `pyenv rehash` leaves a lock behind when a test kills the
            // shell mid-rehash, and every later turn on the machine then waits on it.
            ("HOME".to_owned(), agent_home(self.home.path())),
        ]);
        let tools = Tools {
            home: self.home.path().join("hangar"),
            driver,
            claude: claude_bin().unwrap(),
            codex: PathBuf::from("codex"),
            env,
        };
        let db = self.home.path().join("hangar.db");
        let store = Store::open(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        let vault = Vault::open_or_create(&self.home.path().join("master.key")).unwrap();
        let plane = ControlPlane::new(store.with_vault(vault).await.unwrap(), tools);
        // Tower trusts this hangar's keys (`/.well-known/jwks.json`, served by hangar-server).
        self.tower
            .trust_keys(HANGAR, plane.governance().jwks().await.unwrap());
        plane
    }

    fn request(&self, prompt: &str) -> SessionRequest {
        SessionRequest {
            dir: self.work.path().to_owned(),
            sandbox: None,
            env: None,
            no_sandbox: true,
            harness: Harness::Claude,
            policy: Some(Policy::Governed),
            prompt: prompt.into(),
            person: ADA.into(),
            options: TurnOptions::default(),
        }
    }
}

async fn until<T>(what: &str, secs: u64, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_turn_ended(plane: &ControlPlane, turn: &str) -> hangar_store::Turn {
    until("the turn to end", 90, async || {
        let t = plane.store().turn(turn).await.unwrap();
        (t.state == TurnState::Ended).then_some(t)
    })
    .await
}

async fn audit(plane: &ControlPlane, action: &str) -> Vec<Value> {
    plane
        .store()
        .audit()
        .records(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.action == action)
        .map(|r| serde_json::from_str(&r.detail).unwrap())
        .collect()
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// A JWT's header or claims (part 0 or 1), unverified: what the test looks at.
fn jwt_part(token: &str, i: usize) -> Value {
    let part = token.split('.').nth(i).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn bearer(r: &hangar_testkit::TowerRequest) -> String {
    r.authorization
        .as_deref()
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap()
        .to_owned()
}

fn key_file(run: &hangar_store::Run) -> PathBuf {
    Path::new(&run.ctl_path).join("tower.key")
}

/// The turn's tool call reaches Tower with a passport the control plane checked: the sandbox
/// token carried the contract's claims, the passport is the one Tower issued, and the key file
/// is gone once the run ends. The next turn gets its own passport (ES256 this time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_turn_shows_tower_a_checked_passport() {
    let env = Env::new(Script::new([
        bash("echo one > one.txt"),
        Step::text("made one"),
        bash("echo two > two.txt"),
        Step::text("made two"),
    ]));
    let plane = env.plane().await;
    let started = plane
        .runs()
        .start_session(env.request("make a file"))
        .await
        .unwrap();
    let turn = wait_turn_ended(&plane, &started.turn.id).await;
    assert_eq!(turn.status, Some(0), "{:?}", turn.reason);
    assert!(env.work.path().join("one.txt").exists());

    let ex = env.tower.exchanges();
    assert_eq!(ex.len(), 1, "{ex:?}");
    let form: std::collections::HashMap<_, _> = ex[0].form.iter().cloned().collect();
    assert_eq!(
        form["grant_type"],
        "urn:ietf:params:oauth:grant-type:token-exchange"
    );
    assert_eq!(
        form["subject_token_type"],
        "urn:ietf:params:oauth:token-type:jwt"
    );
    assert_eq!(form["audience"], "hangar");
    let sub = &ex[0].subject;
    assert_eq!(sub["iss"], HANGAR);
    assert_eq!(sub["sub"], "hangar:env:local");
    assert_eq!(sub["aud"], env.tower.url());
    assert_eq!(
        (sub["person"].clone(), sub["email"].clone()),
        (json!(ADA), json!(ADA))
    );
    assert_eq!(sub["sandbox"], started.session.sandbox_id);
    assert_eq!(
        sub["exp"].as_i64().unwrap() - sub["iat"].as_i64().unwrap(),
        300
    );
    assert!(!sub["jti"].as_str().unwrap().is_empty());
    let header = jwt_part(&form["subject_token"], 0);
    assert_eq!(header["alg"], "EdDSA");

    let passport = ex[0].passport.clone().unwrap();
    let calls = env.tower.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].target, "/approvals");
    assert_eq!(
        bearer(&calls[0]),
        passport,
        "the driver showed the passport"
    );
    assert_eq!(jwt_part(&passport, 1)["sub"], ADA);

    let run = plane.store().run(&started.run.id).await.unwrap();
    assert!(!key_file(&run).exists(), "the key file outlived the run");
    let made = audit(&plane, "governance.signing_key_made").await;
    assert_eq!(made.len(), 1);
    assert_eq!(
        made[0]["kid"],
        plane.governance().signing_key().await.unwrap().kid()
    );
    let issued = audit(&plane, "governance.passport_issued").await;
    assert_eq!(issued.len(), 1);
    assert_eq!(issued[0]["run"], started.run.id);

    // The next turn: a fresh exchange, and an ES256 passport checks too.
    env.tower.set_passport_alg(PassportAlg::Es256).unwrap();
    let reply = plane
        .runs()
        .send(&started.session.id, "and another", ADA)
        .await
        .unwrap();
    let hangar_control::Reply::NextTurn { turn, .. } = reply else {
        panic!("{reply:?}")
    };
    let t2 = wait_turn_ended(&plane, &turn).await;
    assert_eq!(t2.status, Some(0), "{:?}", t2.reason);
    assert!(env.work.path().join("two.txt").exists());
    let ex = env.tower.exchanges();
    assert_eq!(ex.len(), 2);
    let second = ex[1].passport.clone().unwrap();
    assert_eq!(jwt_part(&second, 0)["alg"], "ES256");
    assert_eq!(bearer(&env.tower.calls()[1]), second);
    assert_eq!(
        audit(&plane, "governance.signing_key_made").await.len(),
        1,
        "one signing key"
    );
}

/// Each check failure refuses the turn before any harness runs, with the reason on the turn,
/// in the error and in the audit log (`governance.passport_refused`, `turn.refused`); no key
/// file is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passport_that_fails_a_check_refuses_the_turn() {
    let env = Env::new(Script::new([Step::text("never")]));
    let plane = env.plane().await;
    let cases = [
        (
            PassportFault::WrongAgent,
            "for the agent \"someone-else\", not \"hangar\"",
        ),
        (
            PassportFault::WrongPerson,
            "not the sandbox's person \"ada@example.com\"",
        ),
        (PassportFault::Expired, "the passport expired"),
        (
            PassportFault::BadSignature,
            "signature does not check against Tower's keys",
        ),
        (PassportFault::WrongIssuer, "not by Tower"),
        (
            PassportFault::ExchangeRefused,
            "Tower refused the token exchange (400 invalid_grant",
        ),
    ];
    for (i, (fault, want)) in cases.iter().enumerate() {
        env.tower.set_passport_fault(fault.clone());
        let err = plane
            .runs()
            .start_session(env.request("x"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no passport from Tower, so no turn"),
            "{fault:?}: {err}"
        );
        assert!(err.contains(want), "{fault:?}: {err}");
        let refused = audit(&plane, "governance.passport_refused").await;
        assert_eq!(refused.len(), i + 1);
        assert!(refused[i]["why"].as_str().unwrap().contains(want));
        let turns = audit(&plane, "turn.refused").await;
        assert_eq!(turns.len(), i + 1);
        assert!(turns[i]["why"].as_str().unwrap().contains(want));
        let turn = plane
            .store()
            .turn(turns[i]["turn"].as_str().unwrap())
            .await
            .unwrap();
        assert_eq!(turn.state, TurnState::Refused);
        assert!(turn.reason.unwrap().contains(want));
    }
    assert_eq!(env.tower.exchanges().len(), cases.len());
    assert!(env.tower.calls().is_empty(), "no call reached Tower");
    assert!(env.fake.requests().is_empty(), "no harness ran");
    let runs = env.home.path().join("hangar/runs");
    for e in std::fs::read_dir(&runs).unwrap() {
        assert!(!e.unwrap().path().join("tower.key").exists());
    }

    // Tower unreachable: no passport either.
    let plane = env.plane_at(&TowerDouble::down_url().unwrap()).await;
    let err = plane
        .runs()
        .start_session(env.request("x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be reached"), "{err}");
}

/// Short-lived passports (9 s): the refresh loop renews the run's passport well before it
/// expires and swaps the file while the turn runs (the next call shows Tower the new one);
/// once the run has ended the file stays gone and no passport is asked for again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_passport_is_renewed_while_the_run_lives_and_never_after() {
    let env = Env::new(Script::new([
        bash("sleep 7 && echo one > one.txt"),
        bash("echo two > two.txt"),
        Step::text("done"),
    ]));
    env.tower.set_passport_seconds(9);
    let plane = env.plane().await;
    let started = plane
        .runs()
        .start_session(env.request("make files slowly"))
        .await
        .unwrap();
    let file = key_file(&started.run);
    let first = std::fs::read_to_string(&file).unwrap();
    let first_exp = jwt_part(&first, 1)["exp"].as_i64().unwrap();
    // Renewed (a third into its 9 s), the file swapped, before the first passport expired.
    let renewed = until("the passport to be renewed", 30, async || {
        let now = std::fs::read_to_string(&file).ok()?;
        (now != first).then_some(now)
    })
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(now < first_exp, "renewed only after the old one expired");
    assert!(jwt_part(&renewed, 1)["exp"].as_i64().unwrap() > first_exp);
    assert!(
        env.tower
            .exchanges()
            .iter()
            .any(|e| e.passport.as_deref() == Some(renewed.as_str()))
    );

    let turn = wait_turn_ended(&plane, &started.turn.id).await;
    assert_eq!(turn.status, Some(0), "{:?}", turn.reason);
    assert!(env.work.path().join("two.txt").exists());
    let calls = env.tower.calls();
    assert_eq!(calls.len(), 2);
    // Each call showed a passport Tower issued; the second (7 s later) a renewed one.
    let issued: Vec<String> = env
        .tower
        .exchanges()
        .into_iter()
        .filter_map(|e| e.passport)
        .collect();
    assert!(calls.iter().all(|c| issued.contains(&bearer(c))));
    assert_ne!(
        bearer(&calls[1]),
        bearer(&calls[0]),
        "the second call showed a renewed passport"
    );
    assert!(
        !audit(&plane, "governance.passport_renewed")
            .await
            .is_empty()
    );

    // Ended: the file is gone and stays gone; no more exchanges.
    assert!(!file.exists());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after_end = env.tower.exchanges().len();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!file.exists(), "an ended run got a passport back");
    assert_eq!(
        env.tower.exchanges().len(),
        after_end,
        "renewed after the run ended"
    );
}

/// The control plane restarts while a run with a short-lived passport (9 s) is in its first
/// tool call: the restarted one resumes the run's refresh loop from the key file (`reattach`),
/// renews the passport before it expires, and the second call, after the first passport has
/// expired, shows Tower the renewed one (an expired passport would be refused: 401). Once the
/// run has ended nothing is renewed again.
#[test]
fn a_restarted_control_plane_resumes_renewing_the_passports_of_live_runs() {
    let env = Env::new(Script::new([
        bash("sleep 12 && echo one > one.txt"),
        bash("echo two > two.txt"),
        Step::text("done"),
    ]));
    env.tower.set_passport_seconds(9);
    let (run, turn, first) = {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let started = rt.block_on(async {
            let plane = env.plane().await;
            plane
                .runs()
                .start_session(env.request("make files slowly"))
                .await
                .unwrap()
        });
        // The control plane stops before the first renewal is due (a third into 9 s); the
        // driver and the harness go on.
        rt.shutdown_background();
        let first = std::fs::read_to_string(key_file(&started.run)).unwrap();
        (started.run, started.turn.id, first)
    };
    assert_eq!(env.tower.exchanges().len(), 1, "renewed before the restart");
    let first_exp = jwt_part(&first, 1)["exp"].as_i64().unwrap();
    let file = key_file(&run);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let plane = env.plane().await;
        assert_eq!(plane.reattach().await.unwrap(), 1);
        let renewed = until(
            "the passport to be renewed after the restart",
            30,
            async || {
                let now = std::fs::read_to_string(&file).ok()?;
                (now != first).then_some(now)
            },
        )
        .await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(now < first_exp, "renewed only after the old one expired");
        assert!(jwt_part(&renewed, 1)["exp"].as_i64().unwrap() > first_exp);
        // The key file is swapped first, the renewal audited right after.
        until("the renewal's audit record", 10, async || {
            (!audit(&plane, "governance.passport_renewed")
                .await
                .is_empty())
            .then_some(())
        })
        .await;

        let t = wait_turn_ended(&plane, &turn).await;
        assert_eq!(t.status, Some(0), "{:?}", t.reason);
        assert!(
            env.work.path().join("two.txt").exists(),
            "the second call was refused"
        );
        let calls = env.tower.calls();
        assert_eq!(calls.len(), 2, "{calls:?}");
        // The first call may show the first passport or (on a slow machine) one renewed after
        // the restart; the second, 12 s on, must show a renewed one: the first had expired.
        let issued: Vec<String> = env
            .tower
            .exchanges()
            .into_iter()
            .filter_map(|e| e.passport)
            .collect();
        assert!(calls.iter().all(|c| issued.contains(&bearer(c))));
        let second = bearer(&calls[1]);
        assert_ne!(second, first, "the second call showed a renewed passport");
        assert!(jwt_part(&second, 1)["exp"].as_i64().unwrap() > first_exp);

        // Ended: the file is gone and stays gone; no more exchanges.
        assert!(!file.exists());
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let after_end = env.tower.exchanges().len();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!file.exists(), "an ended run got a passport back");
        assert_eq!(
            env.tower.exchanges().len(),
            after_end,
            "renewed after the run ended"
        );
    });
}

/// A HOME of the test's own for the agent (see where it is set).
fn agent_home(root: &std::path::Path) -> String {
    let h = root.join("agent-home");
    std::fs::create_dir_all(&h).unwrap();
    h.display().to_string()
}
