//! Passports through `hangar serve`: its signing key's public half at `/.well-known/jwks.json`
//! (no token), which the Tower double reads over HTTP to trust the sandbox token of a governed
//! turn (`HANGAR_GOVERNANCE_HOOK_AUTH=passport`) run by the real driver and Claude Code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hangar_testkit::{
    FakeAnthropic, Script, Step, TowerDouble, claude_bin, claude_env, workspace_root,
};
use serde_json::{Value, json};

struct Serve {
    child: Child,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_trusts_the_keys_hangar_serve_publishes() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let fake = FakeAnthropic::start(Script::new([
        Step::tool(
            "Bash",
            json!({"command": "echo hi > made.txt", "description": "make it"}),
        ),
        Step::text("made it"),
    ]))
    .unwrap();
    let tower = TowerDouble::start().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    tower.trust_hangar(&url);
    let config = home.path().join("claude-config");
    std::fs::create_dir_all(&config).unwrap();
    let hangar = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("HANGAR_HOME", home.path().join("hangar"))
            .env(
                "HANGAR_DRIVER_BIN",
                std::env::var_os("HANGAR_DRIVER_BIN")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver")),
            )
            .env("HANGAR_CLAUDE_BIN", claude_bin().unwrap())
            .env("HANGAR_URL", &url)
            .env("HANGAR_GOVERNANCE_URL", tower.url())
            .env("HANGAR_GOVERNANCE_HOOK_AUTH", "passport")
            .envs(claude_env(&fake.base_url(), &config))
            .args(args);
        c
    };
    // Ada runs a plain folder (an admin's, issue 20) and reads the whole audit.
    assert!(
        hangar(&["person", "add", "--admin", "ada@example.com"])
            .output()
            .unwrap()
            .status
            .success()
    );
    let out = hangar(&["token", "create", "--person", "ada@example.com"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .to_owned();
    // The passport of a run in a plain folder: this server allows one.
    let mut child = hangar(&[
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--unsandboxed-folders",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), format!("listening: {url}"));
    let _serve = Serve { child };

    let client = reqwest::Client::new();
    // No token needed; the same key each time.
    let get_keys = async || -> Value {
        let r = client
            .get(format!("{url}/.well-known/jwks.json"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.json().await.unwrap()
    };
    let keys = get_keys().await;
    let key = &keys["keys"][0];
    assert_eq!(
        (key["kty"].clone(), key["crv"].clone(), key["alg"].clone()),
        (json!("OKP"), json!("Ed25519"), json!("EdDSA"))
    );
    assert!(key.get("d").is_none(), "the private half is never served");
    assert_eq!(get_keys().await, keys);

    let api = async |method: &str, path: &str, body: Option<Value>| -> Value {
        let mut req = client
            .request(method.parse().unwrap(), format!("{url}{path}"))
            .bearer_auth(&token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().await.unwrap().json().await.unwrap()
    };
    let started = api(
        "POST",
        "/v1/sessions",
        Some(
            json!({"no_sandbox": true, "dir": work.path(), "policy": "governed", "prompt": "make a file"}),
        ),
    )
    .await;
    let turn_id = started["turn"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(90);
    let turn = loop {
        let t = api("GET", &format!("/v1/turns/{turn_id}"), None).await;
        if t["state"] == "ended" {
            break t;
        }
        assert!(Instant::now() < deadline, "the turn did not end: {t}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(turn["status"], 0, "{turn}");
    assert!(work.path().join("made.txt").exists());
    let ex = tower.exchanges();
    assert_eq!(ex.len(), 1, "{ex:?}");
    assert_eq!(ex[0].subject["iss"], url);
    let passport = ex[0].passport.clone().unwrap();
    let calls = tower.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some(format!("Bearer {passport}").as_str())
    );
    let audit = api("GET", "/v1/audit?limit=1000", None).await;
    let actions: Vec<&str> = audit["records"]
        .as_array()
        .unwrap_or_else(|| panic!("{audit}"))
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions
            .iter()
            .filter(|a| **a == "governance.signing_key_made")
            .count(),
        1
    );
    assert!(
        actions.contains(&"governance.passport_issued"),
        "{actions:?}"
    );
}
