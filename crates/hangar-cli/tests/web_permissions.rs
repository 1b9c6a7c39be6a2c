//! Issue 20 on the web page, in real Chromium against a real `hangar serve` (the real driver and
//! Claude Code answering the scripted model).
//!
//! - bob, a member, signs in with his own token and opens alice's turn, whose tool call waits for
//!   an answer: the page shows the server's refusal saying who may and offers him nothing to act
//!   with; alice's approval stays pending; his sessions list and his approvals inbox do not show
//!   hers.
//! - The page's actions (steer, interrupt, fork, approve and deny, from the turn view and from the
//!   approvals inbox): bob's page, even when made to read alice's turn as she does (a client that
//!   shows him everything), greys each control out saying who may, and when he forces them
//!   anyway every action is the server's 403 saying who may, shown on the page, with nothing
//!   changed on the server (the approval pending, no command sent, no fork made). carol, an
//!   approver named by alice's environment, answers alice's request from her inbox; alice (the
//!   owner) and an admin do every action from the page and each is carried out.
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
use serde_json::{Value, json};

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
    // Nothing to act with on what the server would not show him.
    let shown = b
        .js(
            "return [...document.querySelectorAll('#actions button, .fork-step, .approve, .deny')].filter((x) => x.offsetParent !== null).map((x) => x.innerText);",
            json!([]),
        )
        .unwrap();
    assert_eq!(shown, json!([]), "bob is offered actions on alice's turn");
    assert_eq!(pending().await, 1, "alice's approval is still pending");
}

const ALICE: &str = "alice@example.com";
const BOB: &str = "bob@example.com";
const CAROL: &str = "carol@example.com";

/// Each prompt names its gates, `GATES[g1 g2]`: the agent makes one Bash call per gate, in
/// order, each waiting for the file `<gate>.go` in its work folder (which the test writes), and
/// says it is done after the last. Under policy `ask` each call first waits for an answer.
fn gated() -> Script {
    Script::new([]).responder(|r| {
        let text = r.all_text();
        let gates: Vec<String> = text
            .split_once("GATES[")
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(g, _)| g.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        match gates.get(r.tool_results().len()) {
            Some(g) => Step::tool(
                "Bash",
                json!({"command": format!("until [ -e {g}.go ]; do sleep 0.1; done; echo passed {g}"),
                       "description": format!("wait at gate {g}")}),
            ),
            None => Step::text("all gates passed"),
        }
    })
}

async fn call(
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
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A session of alice's in environment `team` (carol is its approver), started through the API.
struct Work {
    session: String,
    turn: String,
    run: String,
}

async fn start(s: &Server, alice: &str, repo: &std::path::Path, policy: &str, gates: &str) -> Work {
    let (status, started) = call(
        s,
        alice,
        "POST",
        "/v1/sessions",
        Some(json!({"dir": repo, "env": "team", "policy": policy, "prompt": format!("wait at GATES[{gates}]")})),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let id = |k: &str| started[k]["id"].as_str().unwrap().to_owned();
    Work {
        session: id("session"),
        turn: id("turn"),
        run: id("run"),
    }
}

/// The requests of a run waiting for an answer, as its owner reads them.
async fn waiting(s: &Server, alice: &str, run: &str) -> Vec<Value> {
    let (status, a) = call(s, alice, "GET", &format!("/v1/runs/{run}/approvals"), None).await;
    assert_eq!(status, 200, "{a}");
    a["approvals"].as_array().unwrap().clone()
}

/// Waits for the run's next request (after `answered` ones) and returns its id.
async fn request_of(s: &Server, alice: &str, run: &str) -> String {
    until("a request waiting for an answer", async || {
        waiting(s, alice, run)
            .await
            .first()
            .map(|a| a["request_id"].as_str().unwrap().to_owned())
    })
    .await
}

/// Lets the run's current gate pass: writes `<gate>.go` into its sandbox's work folder.
async fn open_gate(s: &Server, w: &Work, gate: &str) {
    let (_, board) = s
        .call("GET", &format!("/v1/board?session={}", w.session), None)
        .await;
    let dir = board["sessions"][0]["sandbox"]["workdir"].as_str().unwrap();
    std::fs::write(std::path::Path::new(dir).join(format!("{gate}.go")), "").unwrap();
}

async fn audit(s: &Server) -> Vec<Value> {
    let (status, page) = s.call("GET", "/v1/audit?limit=1000", None).await;
    assert_eq!(status, 200, "{page}");
    page["records"].as_array().unwrap().clone()
}

/// A screenshot of the page, beside the other web tests' (`target/screenshots/web/`).
fn shot(b: &Browser, name: &str) {
    let dir = std::env::var_os("HANGAR_SCREENSHOTS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| hangar_testkit::workspace_root().join("target/screenshots/web"));
    b.screenshot(&dir.join(format!("{name}.png"))).unwrap();
}

/// The page's element `css` whose text contains `needle`: its text, once there.
fn wait_text(b: &Browser, css: &str, needle: &str) -> String {
    b.wait_js(
        &format!("{css} to say {needle:?}"),
        "for (const e of document.querySelectorAll(arguments[0])) { if (e.innerText.includes(arguments[1])) return e.innerText; } return null;",
        json!([css, needle]),
        WAIT,
    )
    .unwrap()
    .as_str()
    .unwrap()
    .to_owned()
}

fn wait_gone(b: &Browser, css: &str) {
    b.wait_js(
        &format!("{css} to leave"),
        "return document.querySelector(arguments[0]) === null;",
        json!([css]),
        WAIT,
    )
    .unwrap();
}

/// Opens `path` on the page signed in with `token` (the page reads its token when it loads).
fn open_as(b: &Browser, url: &str, token: &str, who: &str, path: &str) {
    b.goto(&format!("{url}/ui/me")).unwrap();
    b.js(
        "localStorage.setItem('hangar.token', arguments[0]); localStorage.removeItem('hangar.token.origin');",
        json!([token]),
    )
    .unwrap();
    b.goto(&format!("{url}{path}")).unwrap();
    wait_text(b, "#who", who);
}

/// Moves within the page (no reload, so a script put into the page stays).
fn page_go(b: &Browser, path: &str) {
    b.js(
        "history.pushState(null, '', arguments[0]); dispatchEvent(new PopStateEvent('popstate'));",
        json!([path]),
    )
    .unwrap();
}

/// The controls `css` as (disabled, title) pairs.
fn controls(b: &Browser, css: &str) -> Vec<(bool, String)> {
    let v = b
        .js(
            "return [...document.querySelectorAll(arguments[0])].map((x) => [x.disabled, x.title]);",
            json!([css]),
        )
        .unwrap();
    serde_json::from_value(v).unwrap()
}

/// What a person with devtools can do: make a greyed-out control usable and click it (in one
/// step: the page greys it out again whenever it redraws).
fn force_click(b: &Browser, css: &str) {
    let clicked = b
        .js(
            "const x = document.querySelector(arguments[0]); if (!x) return false; x.disabled = false; delete x.dataset.locked; x.click(); return true;",
            json!([css]),
        )
        .unwrap();
    assert_eq!(clicked, true, "no {css} to click");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_actions_owner_vs_another_vs_approver_vs_admin() {
    let s = Server::start(gated());
    let admin = s.token();
    let (status, env) = s
        .call(
            "POST",
            "/v1/environments",
            Some(
                json!({"name": "team", "provider": "local", "network": "host",
                        "governance": {"approvers": [CAROL]}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{env}");
    let token = |p: &str| {
        s.ok(&["token", "create", "--person", p])
            .lines()
            .last()
            .unwrap()
            .to_owned()
    };
    let (alice, bob, carol) = (token(ALICE), token(BOB), token(CAROL));
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();

    // Alice's work: A for bob's tries, carol's answer and alice's interrupt; B for alice's
    // approve, steer, deny and fork; C for the admin's.
    let a = start(&s, &alice, repo.path(), "ask", "a").await;
    let b_ = start(&s, &alice, repo.path(), "ask", "b1 b2").await;
    let c = start(&s, &alice, repo.path(), "ask", "c1 c2").await;
    let req_a = request_of(&s, &alice, &a.run).await;
    let b = Browser::start(1280, 900).unwrap();

    // --- bob, as the page is: his inbox is empty, alice's turn is refused with no controls.
    open_as(&b, &s.url, &bob, BOB, "/ui/approvals");
    b.wait_for("#inbox-empty", WAIT).unwrap();
    wait_text(&b, "#inbox-status", "updated");
    assert_eq!(
        b.js(
            "return document.querySelectorAll('.inbox-item').length;",
            json!([])
        )
        .unwrap(),
        0,
        "bob's inbox lists a request he may not answer"
    );
    b.wait_js(
        "bob's count",
        "return document.querySelector('#inbox-count').dataset.count === '0' && document.querySelector('#inbox').title.includes('nothing');",
        json!([]),
        WAIT,
    )
    .unwrap();
    page_go(&b, &format!("/ui/turns/{}", a.turn));
    wait_text(
        &b,
        "#turn-refused",
        &format!(
            "only {ALICE} (the owner) or an admin may read turn {}",
            a.turn
        ),
    );
    assert_eq!(
        b.js(
            "return document.querySelector('#actions').hidden;",
            json!([])
        )
        .unwrap(),
        true
    );

    let audited_before = audit(&s)
        .await
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .max()
        .unwrap();

    // --- bob's page made to read what alice reads (every GET but "who am I" with her token;
    // every action still with his own): each control is greyed out saying who may.
    open_as(&b, &s.url, &bob, BOB, "/ui/sessions");
    b.js(
        "const alice = arguments[0]; const real = window.fetch.bind(window);
         window.fetch = (url, o) => {
           o = o || {};
           if ((o.method || 'GET') === 'GET' && !String(url).startsWith('/v1/me')) {
             o = { ...o, headers: { ...o.headers, Authorization: 'Bearer ' + alice } };
           }
           return real(url, o);
         };",
        json!([alice]),
    )
    .unwrap();
    page_go(&b, &format!("/ui/turns/{}", a.turn));
    let owner_only = format!("only {ALICE} (the owner) or an admin may");
    wait_text(&b, "#actions-locked", &owner_only);
    b.wait_for(
        &format!(".approval[data-request-id='{req_a}'] .approve"),
        WAIT,
    )
    .unwrap();
    b.wait_js(
        "the approval's buttons greyed",
        "return [...document.querySelectorAll('#approvals .approve, #approvals .deny')].every((x) => x.disabled && x.title.includes(arguments[0]));",
        json!([format!("only {ALICE} (the owner), an approver named by environment team or an admin may answer")]),
        WAIT,
    )
    .unwrap();
    shot(&b, "21-another-persons-turn-greyed");
    for (disabled, title) in controls(&b, "#send, #interrupt, #message") {
        assert!(
            disabled && title.contains(&owner_only),
            "{disabled} {title}"
        );
    }

    // He forces them: each action is the server's refusal, on the page.
    b.js(
        "document.querySelector('#message').value = arguments[0];",
        json!(["STEER: from bob"]),
    )
    .unwrap();
    force_click(&b, "#send");
    wait_text(
        &b,
        "#action-answer[data-outcome=forbidden]",
        &format!("steer: {owner_only} steer run {}", a.run),
    );
    force_click(&b, "#interrupt");
    wait_text(
        &b,
        "#action-answer[data-outcome=forbidden]",
        &format!("interrupt: {owner_only} interrupt run {}", a.run),
    );
    let approver_may = format!(
        "only {ALICE} (the owner), an approver of environment team ({CAROL}) or an admin may"
    );
    let card = format!(".approval[data-request-id='{req_a}']");
    force_click(&b, &format!("{card} .approve"));
    wait_text(
        &b,
        &format!("{card} .answer[data-outcome=forbidden]"),
        &format!("approve: {approver_may} approve in run {}", a.run),
    );
    b.type_into(&format!("{card} .reason"), "bob says no")
        .unwrap();
    force_click(&b, &format!("{card} .deny"));
    wait_text(
        &b,
        &format!("{card} .answer[data-outcome=forbidden]"),
        &format!("deny: {approver_may} deny in run {}", a.run),
    );
    b.click(".tab[data-tab=timeline]").unwrap();
    b.wait_for(".step[data-step='0'] .fork-step", WAIT).unwrap();
    for (disabled, title) in controls(&b, ".fork-step") {
        assert!(
            disabled && title.contains(&owner_only),
            "{disabled} {title}"
        );
    }
    force_click(&b, ".step[data-step='0'] .fork-step");
    force_click(&b, ".step[data-step='0'] .fork-go");
    wait_text(
        &b,
        ".step[data-step='0'] .fork-answer[data-outcome=forbidden]",
        &format!("fork: {owner_only} fork run {}", a.run),
    );

    // The same from his inbox, listing alice's request as her page would.
    page_go(&b, "/ui/approvals");
    let item = format!(".inbox-item[data-request-id='{req_a}']");
    wait_text(&b, &format!("{item} .person"), ALICE);
    b.click(&format!("{item} .approve")).unwrap();
    wait_text(
        &b,
        &format!("{item} .answer[data-outcome=forbidden]"),
        &format!("approve: {approver_may} approve in run {}", a.run),
    );
    b.click(&format!("{item} .deny")).unwrap();
    wait_text(
        &b,
        &format!("{item} .answer[data-outcome=forbidden]"),
        &format!("deny: {approver_may} deny in run {}", a.run),
    );

    // Nothing changed: the request waits, no command went to the run, no fork was made; each
    // try is an audited refusal.
    let w = waiting(&s, &alice, &a.run).await;
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0]["request_id"], req_a.as_str());
    assert!(w[0]["decision"].is_null(), "{w:?}");
    let (_, forks) = s
        .call("GET", &format!("/v1/runs/{}/forks", a.run), None)
        .await;
    assert_eq!(forks["forks"], json!([]), "{forks}");
    let records = audit(&s).await;
    let by_bob = |action: &str| {
        records
            .iter()
            .filter(|r| r["actor"] == BOB && r["action"] == action)
            .count()
    };
    assert_eq!(by_bob("command.sent"), 0);
    assert_eq!(by_bob("fork.created"), 0);
    assert_eq!(by_bob("approval.answered"), 0);
    let mut refused: Vec<String> = records
        .iter()
        .filter(|r| {
            r["actor"] == BOB
                && r["action"] == "access.refused"
                && r["seq"].as_i64().unwrap() > audited_before
        })
        .map(|r| {
            let d: Value = serde_json::from_str(r["detail"].as_str().unwrap()).unwrap();
            d["asked"].as_str().unwrap().to_owned()
        })
        .collect();
    refused.sort();
    let run = &a.run;
    assert_eq!(
        refused,
        [
            format!("approve in run {run}"),
            format!("approve in run {run}"),
            format!("deny in run {run}"),
            format!("deny in run {run}"),
            format!("fork run {run}"),
            format!("interrupt run {run}"),
            format!("steer run {run}"),
        ],
        "each of bob's tries is an audited refusal (his page's reads went with alice's token)"
    );
    let sent: Vec<&Value> = records
        .iter()
        .filter(|r| {
            r["action"] == "command.sent"
                && r["seq"].as_i64().unwrap() > audited_before
                && r["detail"].as_str().unwrap().contains(&a.run)
        })
        .collect();
    assert!(sent.is_empty(), "a command reached alice's run: {sent:?}");

    // --- carol, the environment's approver: alice's request is in her inbox (without a link to
    // a turn she may not read); she approves it there and it leaves the list.
    open_as(&b, &s.url, &carol, CAROL, "/ui/approvals");
    let item_a = format!(".inbox-item[data-request-id='{req_a}']");
    wait_text(&b, &format!("{item_a} .person"), ALICE);
    assert_eq!(
        b.js(
            "return document.querySelectorAll(arguments[0] + ' a').length;",
            json!([item_a])
        )
        .unwrap(),
        0
    );
    b.wait_js(
        "carol's count",
        "return Number(document.querySelector('#inbox-count').dataset.count) >= 1;",
        json!([]),
        WAIT,
    )
    .unwrap();
    wait_text(&b, &format!("{item_a} dd"), &a.session);
    let (_, hers) = call(&s, &carol, "GET", "/v1/approvals", None).await;
    assert!(
        hers["runs"].as_array().unwrap().contains(&json!({
            "run_id": a.run, "turn_id": a.turn, "session_id": a.session,
            "person": ALICE, "environment": "team"})),
        "{hers}"
    );
    shot(&b, "20-approvals-inbox");
    b.click(&format!("{item_a} .approve")).unwrap();
    wait_gone(&b, &item_a);
    // The answer returns at the driver's ack; the run's watcher records it from the log just
    // after (issue 22: off the reply's path).
    until("the answer recorded", async || {
        waiting(&s, &alice, &a.run).await.is_empty().then_some(())
    })
    .await;
    let (_, mine) = call(&s, &carol, "GET", "/v1/approvals", None).await;
    assert!(
        !mine["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["request_id"] == req_a.as_str()),
        "{mine}"
    );
    assert!(
        audit(&s)
            .await
            .iter()
            .any(|r| r["action"] == "approval.answered"
                && r["actor"] == CAROL
                && r["detail"].as_str().unwrap().contains(&req_a))
    );

    // --- alice, the owner: nothing greyed; she interrupts A (its tool waits at gate a).
    open_as(&b, &s.url, &alice, ALICE, &format!("/ui/turns/{}", a.turn));
    wait_text(&b, "#feed [data-kind=approval_answered]", "allowed");
    wait_text(&b, "#stream-state", "live");
    assert_eq!(
        b.js(
            "return document.querySelector('#actions-locked').hidden;",
            json!([])
        )
        .unwrap(),
        true
    );
    for (disabled, title) in controls(&b, "#send, #interrupt") {
        assert!(!disabled && title.is_empty(), "{disabled} {title}");
    }
    b.click("#interrupt").unwrap();
    wait_text(&b, "#action-answer[data-outcome=done]", "interrupt: done");
    assert_eq!(s.turn_ended(&a.turn).await["status"], 130);

    // B: she approves from the turn, steers while the tool waits, opens the gate; the second
    // request she denies from her inbox; then forks the turn's first step.
    let req_b1 = request_of(&s, &alice, &b_.run).await;
    page_go(&b, &format!("/ui/turns/{}", b_.turn));
    let card_b1 = format!(".approval[data-request-id='{req_b1}']");
    b.wait_for(&format!("{card_b1} .approve"), WAIT).unwrap();
    b.click(&format!("{card_b1} .approve")).unwrap();
    wait_text(
        &b,
        &format!("{card_b1} .answer[data-outcome=done]"),
        "approve: done",
    );
    b.type_into("#message", "STEER: from alice").unwrap();
    b.click("#send").unwrap();
    wait_text(&b, "#action-answer[data-outcome=done]", "steer: done");
    open_gate(&s, &b_, "b1").await;
    let req_b2 = until("b's second request", async || {
        waiting(&s, &alice, &b_.run)
            .await
            .iter()
            .map(|x| x["request_id"].as_str().unwrap().to_owned())
            .find(|r| *r != req_b1)
    })
    .await;
    page_go(&b, "/ui/approvals");
    let item_b2 = format!(".inbox-item[data-request-id='{req_b2}']");
    wait_text(&b, &format!("{item_b2} .person"), ALICE);
    b.type_into(&format!("{item_b2} .reason"), "not now")
        .unwrap();
    b.click(&format!("{item_b2} .deny")).unwrap();
    wait_gone(&b, &item_b2);
    assert_eq!(s.turn_ended(&b_.turn).await["status"], 0);
    page_go(&b, &format!("/ui/turns/{}/timeline", b_.turn));
    b.wait_for(".step[data-step='0'] .fork-step", WAIT).unwrap();
    b.click(".step[data-step='0'] .fork-step").unwrap();
    b.click(".step[data-step='0'] .fork-go").unwrap();
    wait_text(
        &b,
        ".step[data-step='0'] .fork-answer[data-outcome=done]",
        "forked",
    );
    let (_, forks) = s
        .call("GET", &format!("/v1/runs/{}/forks", b_.run), None)
        .await;
    assert_eq!(forks["forks"].as_array().unwrap().len(), 1, "{forks}");
    let records = audit(&s).await;
    let sent_by = |who: &str, run: &str| {
        records
            .iter()
            .filter(|r| {
                r["action"] == "command.sent"
                    && r["actor"] == who
                    && r["detail"].as_str().unwrap().contains(run)
            })
            .count()
    };
    // approve, steer, deny
    assert!(sent_by(ALICE, &b_.run) >= 3, "{records:?}");

    // --- the admin on alice's C: approves from the inbox, steers, denies from the turn, forks;
    // and interrupts D (auto: its tool waits at gate d at once).
    let req_c1 = request_of(&s, &alice, &c.run).await;
    open_as(&b, &s.url, &admin, "@localhost", "/ui/approvals");
    let item_c1 = format!(".inbox-item[data-request-id='{req_c1}']");
    wait_text(&b, &format!("{item_c1} .person"), ALICE);
    b.click(&format!("{item_c1} .approve")).unwrap();
    wait_gone(&b, &item_c1);
    page_go(&b, &format!("/ui/turns/{}", c.turn));
    wait_text(&b, "#feed [data-kind=approval_answered]", "allowed");
    b.type_into("#message", "STEER: from the admin").unwrap();
    b.click("#send").unwrap();
    wait_text(&b, "#action-answer[data-outcome=done]", "steer: done");
    open_gate(&s, &c, "c1").await;
    let req_c2 = until("c's second request", async || {
        waiting(&s, &alice, &c.run)
            .await
            .iter()
            .map(|x| x["request_id"].as_str().unwrap().to_owned())
            .find(|r| *r != req_c1)
    })
    .await;
    let card_c2 = format!(".approval[data-request-id='{req_c2}']");
    b.wait_for(&format!("{card_c2} .deny"), WAIT).unwrap();
    b.type_into(&format!("{card_c2} .reason"), "not that")
        .unwrap();
    b.click(&format!("{card_c2} .deny")).unwrap();
    wait_text(
        &b,
        &format!("{card_c2} .answer[data-outcome=done]"),
        "deny: done",
    );
    assert_eq!(s.turn_ended(&c.turn).await["status"], 0);
    page_go(&b, &format!("/ui/turns/{}/timeline", c.turn));
    b.wait_for(".step[data-step='0'] .fork-step", WAIT).unwrap();
    b.click(".step[data-step='0'] .fork-step").unwrap();
    b.click(".step[data-step='0'] .fork-go").unwrap();
    wait_text(
        &b,
        ".step[data-step='0'] .fork-answer[data-outcome=done]",
        "forked",
    );
    let (_, forks) = s
        .call("GET", &format!("/v1/runs/{}/forks", c.run), None)
        .await;
    assert_eq!(forks["forks"].as_array().unwrap().len(), 1, "{forks}");

    let d = start(&s, &alice, repo.path(), "auto", "d").await;
    page_go(&b, &format!("/ui/turns/{}", d.turn));
    wait_text(&b, "#feed [data-kind=tool_call]", "until [ -e d.go ]");
    b.click("#interrupt").unwrap();
    wait_text(&b, "#action-answer[data-outcome=done]", "interrupt: done");
    assert_eq!(s.turn_ended(&d.turn).await["status"], 130);
}
