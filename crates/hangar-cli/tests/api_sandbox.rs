//! Issue 18, items 2 and 3 of the attacks, through a real `hangar serve`: a session started
//! through the API with only a folder runs in the in-place local sandbox (the real Claude Code
//! against the scripted model tries to read hangar's vault and cannot), hangar's home is never a
//! session's folder, a plain folder needs the server's own setting, and no API token can set or
//! remove hangar's own credentials (the passport signing key stays the server's).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::io::Write;
use std::process::Stdio;

use common::Server;
use hangar_testkit::{Script, Step};
use serde_json::{Value, json};

/// The scripted model's answers: to a prompt `READ <home>`, a Bash call that reads the vault's
/// master key and lists hangar's home; once the call's result is back, a closing text.
fn reader() -> Script {
    Script::new([]).responder(|r| {
        if r.last_user_has_tool_result() {
            return Step::text("that is all I found");
        }
        let text = r.last_user_text().unwrap_or_default();
        let home = text
            .split_once("READ ")
            .map(|(_, h)| h.trim().to_owned())
            .unwrap_or_default();
        Step::tool(
            "Bash",
            json!({"command": format!("cat {home}/master.key; ls -a {home}"), "description": "look"}),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_session_with_only_a_folder_runs_sandboxed_and_its_agent_never_reads_the_vault() {
    let s = Server::start(reader());
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("README"), "the repo\n").unwrap();
    let home = s.home.path().join("hangar").canonicalize().unwrap();
    let key = std::fs::read_to_string(home.join("master.key")).unwrap();
    let key = key.trim();
    assert_eq!(key.len(), 64, "the master key file is its hex");

    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": work.path(), "policy": "auto", "prompt": format!("READ {}", home.display())})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(turn["status"], 0, "{turn}");

    // The agent's call ran and found nothing of hangar's: the vault's key and the database
    // never reached the model.
    let requests = s.fake.requests();
    for r in &requests {
        let all = r.all_text();
        assert!(
            !all.contains(key),
            "the vault's master key reached the model"
        );
        assert!(
            !all.contains("hangar.db"),
            "hangar's database was listed to the model: {all}"
        );
    }
    let results: Vec<String> = requests
        .iter()
        .flat_map(|r| r.tool_results())
        .map(|(_, text, _)| text)
        .collect();
    assert!(
        results
            .iter()
            .any(|t| t.contains("master.key: No such file or directory")),
        "the agent's read of the key ran and found no file: {results:?}"
    );
    // It ran in the in-place sandbox `hangar run` uses, not as the server's user.
    let sb = started["session"]["sandbox_id"].as_str().unwrap();
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    assert_eq!(v["sandbox"]["environment"], "in-place", "{v}");
    assert_eq!(v["sandbox"]["provider"], "local", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hangars_home_a_folder_above_it_or_inside_it_is_never_a_sessions_folder() {
    // Plain folders allowed: they are refused there too.
    let s = Server::start_with(
        Script::new([Step::text("never asked")]),
        vec![("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned())],
        None,
    );
    let f = s.home.path().join("copy.yaml");
    std::fs::write(&f, "name: copy\nprovider: local\nnetwork: host\n").unwrap();
    s.ok(&["env", "apply", f.to_str().unwrap()]);
    let home = s.home.path().join("hangar");
    let inside = home.join("runs");
    std::fs::create_dir_all(&inside).unwrap();
    for (dir, why) in [
        (home.clone(), "is hangar's home"),
        (s.home.path().to_owned(), "holds hangar's home"),
        (inside.clone(), "is inside hangar's home"),
    ] {
        for how in [
            json!({}),
            json!({"no_sandbox": true}),
            json!({"env": "copy"}),
        ] {
            let mut body = json!({"dir": dir, "policy": "auto", "prompt": "x"});
            body.as_object_mut()
                .unwrap()
                .extend(how.as_object().unwrap().clone());
            let (status, answer) = s.call("POST", "/v1/sessions", Some(body.clone())).await;
            assert_eq!(status, 400, "{body}: {answer}");
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(why), "{body}: {message}");
        }
        let (status, answer) = s
            .call(
                "POST",
                "/v1/sandboxes",
                Some(json!({"env": "copy", "repo": dir})),
            )
            .await;
        assert_eq!(status, 400, "sb create --repo {}: {answer}", dir.display());
    }
    // `hangar run` says so too, with the in-place sandbox's own check behind it.
    let out = s
        .hangar()
        .args(["run", "--policy", "auto", "--dir"])
        .arg(&home)
        .arg("x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is hangar's home"));
    let (_, sandboxes) = s.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(sandboxes["sandboxes"], json!([]), "a sandbox was made");
    let (_, sessions) = s.call("GET", "/v1/sessions", None).await;
    assert_eq!(sessions["sessions"], json!([]), "a session was made");
    assert!(s.fake.requests().is_empty(), "a harness ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_folder_needs_the_servers_own_setting() {
    let s = Server::start(Script::new([Step::text("never asked")]));
    let work = tempfile::tempdir().unwrap();
    let (status, answer) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": work.path(), "no_sandbox": true, "policy": "auto", "prompt": "x"})),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("HANGAR_UNSANDBOXED_FOLDERS=allow"),
        "{message}"
    );
    // `hangar run --no-sandbox` against this server fails, saying what to set.
    let out = s
        .hangar()
        .args(["run", "--no-sandbox", "--policy", "auto", "--dir"])
        .arg(work.path())
        .arg("x")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("--no-sandbox is refused by the server")
            && err.contains("HANGAR_UNSANDBOXED_FOLDERS=allow")
            && err.contains("--unsandboxed-folders"),
        "{err}"
    );
    assert!(s.fake.requests().is_empty(), "a harness ran");
    let (_, sessions) = s.call("GET", "/v1/sessions", None).await;
    assert_eq!(sessions["sessions"], json!([]));
}

/// A session a server allowed in a plain folder gets no later turn from a server that does not
/// (the setting is checked at every turn, not only when the session started).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_folders_later_turns_need_the_setting_too() {
    let mut s = Server::start_with(
        Script::new([Step::text("first"), Step::text("never asked")]),
        vec![("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned())],
        None,
    );
    let work = tempfile::tempdir().unwrap();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(
                json!({"dir": work.path(), "no_sandbox": true, "policy": "auto", "prompt": "one"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    s.env.clear();
    s.restart();
    let session = started["session"]["id"].as_str().unwrap();
    let (status, answer) = s
        .call(
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Some(json!({"text": "two"})),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("HANGAR_UNSANDBOXED_FOLDERS=allow"),
        "{answer}"
    );
    assert_eq!(
        s.fake.requests().len(),
        1,
        "the second turn reached the model"
    );
}

/// `x` of the public JWK a 32-byte seed makes (what `/.well-known/jwks.json` serves).
fn public_x(seed: [u8; 32]) -> Value {
    hangar_control::jwt::EdKey::from_seed(&seed).public_jwk()["x"].clone()
}

async fn jwks_x(s: &Server) -> Value {
    let keys: Value = reqwest::get(format!("{}/.well-known/jwks.json", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    keys["keys"][0]["x"].clone()
}

async fn as_token(s: &Server, token: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .request(method.parse().unwrap(), format!("{}{path}", s.url))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// `hangar credential set NAME` on the server's machine with `value` on stdin.
fn set_here(s: &Server, name: &str, value: &str) -> std::process::Output {
    let mut c = s
        .hangar()
        .args(["credential", "set", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(value.as_bytes()).unwrap();
    c.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_api_token_sets_or_removes_hangars_own_credentials() {
    let mut s = Server::start(Script::new([Step::text("never asked")]));
    let mallory = s.ok(&["token", "create", "--person", "mallory@example.com"]);
    let mallory = mallory.lines().last().unwrap().trim();
    let chosen = [b'A'; 32];
    let name = "hangar.passport-signing-key";

    // Before the server ever made its key, and after: refused, the key the server's own.
    let (status, answer) = as_token(
        &s,
        mallory,
        "POST",
        &format!("/v1/credentials/{name}"),
        json!({"value": String::from_utf8(chosen.to_vec()).unwrap()}),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("hangar credential set hangar.passport-signing-key"),
        "{message}"
    );
    let served = jwks_x(&s).await;
    assert_ne!(
        served,
        public_x(chosen),
        "the server signs with mallory's key"
    );
    let (status, answer) = as_token(
        &s,
        mallory,
        "DELETE",
        &format!("/v1/credentials/{name}"),
        json!({}),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    // A restarted server reads the key from the vault: still its own.
    s.restart();
    assert_eq!(jwks_x(&s).await, served, "the vault's key was changed");
    let audit = s.ok(&["audit"]);
    let refused: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains("credential.refused") && l.contains("mallory@example.com"))
        .collect();
    assert_eq!(refused.len(), 2, "{audit}");
    // The server's other credentials (here Tower's key, which the hook shows Tower) are the
    // admins' (issue 20): a member writes only their own.
    let (status, answer) = as_token(
        &s,
        mallory,
        "POST",
        "/v1/credentials/tower",
        json!({"value": "k"}),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = as_token(
        &s,
        mallory,
        "POST",
        "/v1/credentials/tower?person=mallory@example.com",
        json!({"value": "k"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = s
        .call("POST", "/v1/credentials/tower", Some(json!({"value": "k"})))
        .await;
    assert_eq!(status, 200, "an admin sets the server's: {answer}");

    // On the server's machine: checked, then used from the next start.
    let out = set_here(&s, name, "not a key\n");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("64 hex digits"));
    let out = set_here(&s, "hangar.anything", "x");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not one of hangar's credentials"));
    let mine = [0x11u8; 32];
    let out = set_here(&s, name, &format!("{}\n", "11".repeat(32)));
    assert!(out.status.success(), "{out:?}");
    s.restart();
    assert_eq!(jwks_x(&s).await, public_x(mine));
}
