//! People, roles and tokens with a life, against a real `hangar serve`: the CLI on the server's
//! machine, the API as a team member's token uses it, and the attack of a member acting as
//! someone else.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::process::Output;

use common::Server;
use hangar_testkit::{Script, Step};
use serde_json::{Value, json};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `hangar token create --person EMAIL ARGS…` on the server's machine: (id, token, stderr).
fn token_for(s: &Server, person: &str, args: &[&str]) -> (String, String, String) {
    let out = s
        .hangar()
        .args(["token", "create", "--person", person])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let id = lines[0]
        .strip_prefix("id: ")
        .unwrap_or_else(|| panic!("the first line is not `id: …`: {text}"))
        .to_owned();
    let token = (*lines.last().unwrap()).to_owned();
    assert!(
        token.starts_with("hgr_") && token.len() == 68,
        "the last line is not the token alone: {text}"
    );
    (id, token, stderr(&out))
}

async fn as_token(
    s: &Server,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method.parse().unwrap(), format!("{}{path}", s.url))
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.json().await.unwrap_or(Value::Null);
    common::answers::check(&s.url, method, path, status, &body).await;
    (status, body)
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn audit(s: &Server) -> Vec<Value> {
    let (status, page) = s.call("GET", "/v1/audit?limit=1000", None).await;
    assert_eq!(status, 200, "{page}");
    // Each record's detail is JSON text (what the hash covers): read it as JSON here.
    let mut records = page["records"].as_array().unwrap().clone();
    for r in &mut records {
        r["detail"] = serde_json::from_str(r["detail"].as_str().unwrap()).unwrap();
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cannot_make_a_sandbox_for_another_person() {
    let s = Server::start(Script::new([Step::text("never asked")]));
    let (_, bob, _) = token_for(&s, "bob@example.com", &[]);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "a repo\n").unwrap();

    // bob, a member, names alice: refused before anything is made, and the audit names bob.
    let (status, answer) = as_token(
        &s,
        &bob,
        "POST",
        "/v1/sandboxes",
        Some(json!({"env": "in-place", "repo": repo.path(), "person": "alice@example.com"})),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        message(&answer).contains("only an admin may act for another person"),
        "{answer}"
    );
    let (_, list) = s.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(list["sandboxes"], json!([]), "{list}");
    let records = audit(&s).await;
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| r["action"] == "access.refused")
        .collect();
    assert_eq!(refused.len(), 1, "{records:?}");
    assert_eq!(refused[0]["actor"], "bob@example.com");
    assert!(
        refused[0]["detail"]
            .to_string()
            .contains("alice@example.com"),
        "{}",
        refused[0]
    );
    assert!(
        !records.iter().any(|r| r["actor"] == "alice@example.com"),
        "a record names alice as the actor: {records:?}"
    );

    // The same through the CLI with bob's token: `sb create --person` is refused, saying why.
    let out = s
        .hangar()
        .env("HANGAR_TOKEN", &bob)
        .args([
            "sb",
            "create",
            "--env",
            "in-place",
            "--person",
            "alice@example.com",
        ])
        .arg("--repo")
        .arg(repo.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("only an admin may act for another person"),
        "{}",
        stderr(&out)
    );
    let (_, list) = s.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(list["sandboxes"], json!([]), "{list}");

    // Naming themselves is no impersonation: the request goes on (to the unknown environment).
    let (status, answer) = as_token(
        &s,
        &bob,
        "POST",
        "/v1/sandboxes",
        Some(json!({"env": "no-such-env", "repo": repo.path(), "person": "bob@example.com"})),
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    // An admin (the local user) may act for alice, once she is a person here: past the check,
    // to the unknown environment.
    s.ok(&["person", "add", "alice@example.com"]);
    let (status, answer) = s
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"env": "no-such-env", "repo": repo.path(), "person": "alice@example.com"})),
        )
        .await;
    assert_eq!(status, 404, "{answer}");

    // The same hole through tokens: bob cannot make a token that speaks for alice.
    let (status, answer) = as_token(
        &s,
        &bob,
        "POST",
        "/v1/tokens",
        Some(json!({"person": "alice@example.com"})),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        message(&answer).contains("only an admin may act for another person"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_are_added_and_removed_by_admins_only() {
    let s = Server::start(Script::new([Step::text("never asked")]));
    assert!(
        s.ok(&["person", "add", "--admin", "ada@example.com"])
            .contains("admin")
    );
    s.ok(&["person", "add", "bob@example.com"]);
    let again = s
        .hangar()
        .args(["person", "add", "bob@example.com"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(stderr(&again).contains("already"), "{}", stderr(&again));
    let listed: Vec<Value> = s
        .ok(&["person", "list", "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let roles: Vec<(&str, &str)> = listed
        .iter()
        .map(|p| (p["email"].as_str().unwrap(), p["role"].as_str().unwrap()))
        .filter(|(e, _)| e.ends_with("@example.com"))
        .collect();
    assert_eq!(
        roles,
        [("ada@example.com", "admin"), ("bob@example.com", "member")]
    );

    let (_, ada, _) = token_for(&s, "ada@example.com", &[]);
    let (_, bob, _) = token_for(&s, "bob@example.com", &[]);
    let (status, me) = as_token(&s, &bob, "GET", "/v1/me", None).await;
    assert_eq!((status, me["role"].as_str()), (200, Some("member")), "{me}");

    // Anyone signed in lists the people; only admins change them.
    let (status, people) = as_token(&s, &bob, "GET", "/v1/people", None).await;
    assert_eq!(status, 200, "{people}");
    assert!(people.to_string().contains("ada@example.com"));
    let carol = Some(json!({"email": "carol@example.com"}));
    let (status, answer) = as_token(&s, &bob, "POST", "/v1/people", carol.clone()).await;
    assert_eq!(status, 403, "{answer}");
    assert!(message(&answer).contains("only an admin may"), "{answer}");
    let (status, answer) = as_token(&s, &bob, "DELETE", "/v1/people/ada@example.com", None).await;
    assert_eq!(status, 403, "{answer}");
    assert!(message(&answer).contains("only an admin may"), "{answer}");
    let (status, answer) = as_token(&s, &ada, "POST", "/v1/people", carol).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["person"]["role"], "member");

    let (status, answer) = as_token(&s, &ada, "DELETE", "/v1/people/ada@example.com", None).await;
    assert_eq!(status, 409, "{answer}");
    // A removed person's tokens stop working at once.
    let (status, _) = as_token(&s, &bob, "GET", "/v1/sessions", None).await;
    assert_eq!(status, 200);
    let (status, answer) = as_token(&s, &ada, "DELETE", "/v1/people/bob@example.com", None).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = as_token(&s, &bob, "GET", "/v1/sessions", None).await;
    assert_eq!(status, 401, "{answer}");
    // And on the server's machine: `person rm` ends ada's token too.
    s.ok(&["person", "rm", "ada@example.com"]);
    let (status, _) = as_token(&s, &ada, "GET", "/v1/sessions", None).await;
    assert_eq!(status, 401);

    let records = audit(&s).await;
    let acts: Vec<(String, String, String)> = records
        .iter()
        .filter(|r| r["action"].as_str().unwrap().starts_with("person."))
        .map(|r| {
            (
                r["actor"].as_str().unwrap().to_owned(),
                r["action"].as_str().unwrap().to_owned(),
                r["detail"]["email"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .filter(|(_, _, email)| email.ends_with("@example.com"))
        .collect();
    let local = acts[0].0.clone();
    assert!(local.ends_with("@localhost"), "{acts:?}");
    let expect = |a: &str, act: &str, e: &str| (a.to_owned(), act.to_owned(), e.to_owned());
    assert_eq!(
        acts,
        [
            expect(&local, "person.added", "ada@example.com"),
            expect(&local, "person.added", "bob@example.com"),
            expect("ada@example.com", "person.added", "carol@example.com"),
            expect("ada@example.com", "person.removed", "bob@example.com"),
            expect(&local, "person.removed", "ada@example.com"),
        ]
    );
    let refusals = records
        .iter()
        .filter(|r| r["action"] == "access.refused" && r["actor"] == "bob@example.com")
        .count();
    assert_eq!(refusals, 2, "{records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_listed_and_revoked_by_their_person_or_an_admin() {
    let s = Server::start(Script::new([Step::text("never asked")]));
    // An unknown person is added as a member, saying so; the token is named and expires.
    let (bob_id, bob, said) = token_for(&s, "bob@example.com", &["--name", "laptop"]);
    assert!(said.contains("added as a member"), "{said}");
    let (carol_id, carol, _) = token_for(&s, "carol@example.com", &["--expires", "12h"]);
    for bad in ["never", "366d", "0d", "soon"] {
        let out = s
            .hangar()
            .args([
                "token",
                "create",
                "--person",
                "bob@example.com",
                "--expires",
                bad,
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "--expires {bad} was taken");
        assert!(stderr(&out).contains("365d"), "{}", stderr(&out));
    }

    // bob lists his own tokens only, never a token or its hash, and sees when it was used.
    let as_bob = |args: &[&str]| {
        s.hangar()
            .env("HANGAR_TOKEN", &bob)
            .args(args)
            .output()
            .unwrap()
    };
    let out = as_bob(&["token", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mine: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["id"], bob_id.as_str());
    assert_eq!(mine[0]["name"], "laptop");
    assert!(mine[0]["last_used_at"].is_i64(), "{}", mine[0]);
    let day = 86_400_000;
    let life = mine[0]["expires_at"].as_i64().unwrap() - mine[0]["created_at"].as_i64().unwrap();
    assert_eq!(life, 90 * day);
    assert!(!stdout(&out).contains(&bob[4..]));
    assert!(!stdout(&out).contains("hash"));
    // An admin (the local user) sees everyone's.
    let all = s.ok(&["token", "list"]);
    assert!(all.contains(&bob_id) && all.contains(&carol_id), "{all}");
    assert!(!all.contains(&carol[4..]));

    // bob makes a token for himself through the API; it works.
    let (status, made) =
        as_token(&s, &bob, "POST", "/v1/tokens", Some(json!({"name": "ci"}))).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["person"], "bob@example.com");
    let second = made["token"].as_str().unwrap().to_owned();
    let (status, _) = as_token(&s, &second, "GET", "/v1/sessions", None).await;
    assert_eq!(status, 200);

    // A member may not revoke another's token: 403, and carol's token still works.
    let (status, answer) =
        as_token(&s, &bob, "DELETE", &format!("/v1/tokens/{carol_id}"), None).await;
    assert_eq!(status, 403, "{answer}");
    assert!(message(&answer).contains("only an admin may"), "{answer}");
    let (status, _) = as_token(&s, &carol, "GET", "/v1/sessions", None).await;
    assert_eq!(status, 200);
    let out = as_bob(&["token", "revoke", &carol_id]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("only an admin may"),
        "{}",
        stderr(&out)
    );

    // bob revokes his own (from the CLI, through the API): refused at once.
    let out = as_bob(&["token", "revoke", &bob_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (status, answer) = as_token(&s, &bob, "GET", "/v1/sessions", None).await;
    assert_eq!(status, 401, "{answer}");
    // An admin revokes anyone's.
    s.ok(&["token", "revoke", &carol_id]);
    let (status, _) = as_token(&s, &carol, "GET", "/v1/sessions", None).await;
    assert_eq!(status, 401);

    let records = audit(&s).await;
    let revokes: Vec<(&str, &str)> = records
        .iter()
        .filter(|r| r["action"] == "token.revoked")
        .map(|r| {
            (
                r["actor"].as_str().unwrap(),
                r["detail"]["id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(revokes.len(), 2, "{revokes:?}");
    assert_eq!(revokes[0], ("bob@example.com", bob_id.as_str()));
    assert!(revokes[1].0.ends_with("@localhost"), "{revokes:?}");
    assert_eq!(revokes[1].1, carol_id.as_str());
    let made_by_bob = records
        .iter()
        .filter(|r| r["action"] == "token.created" && r["actor"] == "bob@example.com")
        .count();
    assert_eq!(made_by_bob, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_users_token_is_renewed_before_it_expires() {
    let mut s = Server::start(Script::new([Step::text("never asked")]));
    let (status, me) = s.call("GET", "/v1/me", None).await;
    assert_eq!((status, me["role"].as_str()), (200, Some("admin")), "{me}");
    let local = me["person"].as_str().unwrap().to_owned();
    // A local token with a day left (as after 89 days of a running server).
    let (_, short, _) = token_for(&s, &local, &["--expires", "1d"]);
    let file = s.home.path().join("hangar/token");
    std::fs::write(&file, format!("{short}\n")).unwrap();
    s.restart();
    let renewed = s.token();
    assert_ne!(renewed, short, "a token with a day left was kept");
    let (status, me) = s.call("GET", "/v1/me", None).await;
    assert_eq!((status, me["person"].as_str()), (200, Some(local.as_str())));
    // A fresh one is kept as it is.
    s.restart();
    assert_eq!(s.token(), renewed);
}

/// An admin acting for someone names a person who is in: otherwise what they make would belong
/// to no one who can sign in (and an audit record would name a person who is not one). Emails
/// compare without case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_acts_only_for_a_person_who_is_in_whatever_the_case() {
    let s = Server::start(Script::new([Step::text("never asked")]));
    let admin = s.token();
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "a repo\n").unwrap();
    let nobody = "nobody@example.com";
    let calls = [
        (
            "POST",
            "/v1/sandboxes".to_owned(),
            Some(json!({"env": "in-place", "repo": repo.path(), "person": nobody})),
        ),
        (
            "POST",
            "/v1/tokens".to_owned(),
            Some(json!({"person": nobody})),
        ),
        (
            "POST",
            format!("/v1/credentials/SOME_KEY?person={nobody}"),
            Some(json!({"value": "v"})),
        ),
        ("GET", format!("/v1/credentials?person={nobody}"), None),
    ];
    for (method, path, body) in calls {
        let (status, answer) = as_token(&s, &admin, method, &path, body).await;
        assert_eq!(status, 400, "{method} {path}: {answer}");
        assert!(
            message(&answer).contains(&format!("hangar person add {nobody}")),
            "{method} {path}: {answer}"
        );
    }
    let (_, list) = s.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(list["sandboxes"], json!([]), "nothing was made: {list}");
    let records = audit(&s).await;
    let refused = records
        .iter()
        .filter(|r| r["action"] == "access.refused" && r["detail"]["for"] == nobody)
        .count();
    assert_eq!(refused, 4, "each refusal is audited: {records:?}");
    // The CLI says the same.
    let out = s
        .hangar()
        .env("HANGAR_TOKEN", &admin)
        .args(["sb", "create", "--env", "in-place", "--person", nobody])
        .arg("--repo")
        .arg(repo.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("hangar person add {nobody}")),
        "{}",
        stderr(&out)
    );
    // A removed person is no one to act for either.
    s.ok(&["person", "add", "gone@example.com"]);
    s.ok(&["person", "rm", "gone@example.com"]);
    let (status, answer) = as_token(
        &s,
        &admin,
        "POST",
        "/v1/tokens",
        Some(json!({"person": "gone@example.com"})),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(message(&answer).contains("was removed"), "{answer}");

    // Alice, however her email is written, is the one person.
    s.ok(&["person", "add", "Alice@Example.com"]);
    let (status, made) = as_token(
        &s,
        &admin,
        "POST",
        "/v1/tokens",
        Some(json!({"person": "ALICE@example.COM"})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["person"], "alice@example.com");
    let alice = made["token"].as_str().unwrap().to_owned();
    // Her own token naming herself in another case is no impersonation.
    let (status, answer) = as_token(
        &s,
        &alice,
        "POST",
        "/v1/tokens",
        Some(json!({"person": "Alice@EXAMPLE.com"})),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let listed = s.ok(&["person", "list"]);
    assert_eq!(listed.matches("alice@example.com").count(), 1, "{listed}");
    assert!(!listed.contains("Alice@"), "{listed}");
    // Her sandbox, made by an admin naming her in capitals, is hers.
    let (status, sb) = as_token(
        &s,
        &admin,
        "POST",
        "/v1/sandboxes",
        Some(json!({"env": "in-place", "repo": repo.path(), "person": "ALICE@EXAMPLE.COM"})),
    )
    .await;
    assert_eq!(status, 201, "{sb}");
    let (_, mine) = as_token(&s, &alice, "GET", "/v1/sandboxes", None).await;
    assert_eq!(mine["sandboxes"].as_array().unwrap().len(), 1, "{mine}");
    let id = sb["sandbox"]["id"].as_str().unwrap();
    let (status, gone) = as_token(&s, &alice, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{gone}");
}
