//! Issue 20 on the web page, in real Chromium against a real `hangar serve` (the real driver and
//! Claude Code answering the scripted model): bob, a member, signs in with his own token and
//! opens alice's turn, whose tool call waits for an answer. The page shows the server's refusal
//! saying who may, offers him nothing to act with, and alice's approval stays pending; his
//! sessions list does not show hers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::time::Duration;

use common::{Server, until};
use hangar_testkit::browser::Browser;
use hangar_testkit::{Script, Step};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bob_on_alices_turn_sees_who_may_and_changes_nothing() {
    let s = Server::start(Script::new([Step::tool(
        "Bash",
        json!({"command": "echo hi > made.txt", "description": "make a file"}),
    )]));
    let token = |p: &str| {
        s.ok(&["token", "create", "--person", p])
            .lines()
            .last()
            .unwrap()
            .to_owned()
    };
    let (alice, bob) = (token("alice@example.com"), token("bob@example.com"));
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/sessions", s.url))
        .bearer_auth(&alice)
        .json(&json!({"dir": repo.path(), "policy": "ask", "prompt": "make a file"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let started: serde_json::Value = resp.json().await.unwrap();
    let (turn, run) = (
        started["turn"]["id"].as_str().unwrap().to_owned(),
        started["run"]["id"].as_str().unwrap().to_owned(),
    );
    let pending = async || {
        let v: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/v1/runs/{run}/approvals", s.url))
            .bearer_auth(&alice)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["approvals"].as_array().unwrap().len()
    };
    until("alice's approval", async || {
        (pending().await == 1).then_some(())
    })
    .await;

    let b = Browser::start(1280, 900).unwrap();
    b.goto(&format!("{}/", s.url)).unwrap();
    b.type_into("#token", &bob).unwrap();
    b.click("#signin button[type=submit]").unwrap();
    b.wait_js(
        "bob's sessions",
        "const l = document.querySelector('#sessions'); return l && !l.innerText.includes('Loading');",
        json!([]),
        WAIT,
    )
    .unwrap();
    let listed = b
        .js(
            "return document.querySelector('#sessions').innerText;",
            json!([]),
        )
        .unwrap();
    assert!(
        !listed
            .to_string()
            .contains(started["session"]["id"].as_str().unwrap()),
        "bob's list shows alice's session: {listed}"
    );

    // Alice's turn: the refusal, saying who may, and no approve button for bob.
    b.goto(&format!("{}/ui/turns/{turn}", s.url)).unwrap();
    b.wait_js(
        "the refusal",
        "return document.body.innerText.includes(arguments[0]);",
        json!([format!(
            "only alice@example.com (the owner) or an admin may read turn {turn}"
        )]),
        WAIT,
    )
    .unwrap();
    let buttons = b
        .js(
            "return [...document.querySelectorAll('button')].map((x) => x.innerText).join('|');",
            json!([]),
        )
        .unwrap();
    assert!(
        !buttons.to_string().to_lowercase().contains("approve"),
        "bob is offered an approve button: {buttons}"
    );
    assert_eq!(pending().await, 1, "alice's approval is still pending");
}
