//! Issue 20's permission matrix, against a real `hangar serve` with the real driver and Claude
//! Code answering the scripted model: two members (alice owns everything here, bob is another
//! member), carol (an approver named by alice's environment), an admin (the server's local
//! user) and vera (a viewer: reads the team's work, acts on nothing) call every endpoint of the route table (`hangar_server::route_table`, so a new
//! endpoint without a rule fails this test) on alice's resources, and the same for the CLI
//! commands. Refusals are 403s that say who may, audited as `access.refused`.
//!
//! The matrix's calls are chosen so the allowed callers get a known answer without changing
//! what the other rows use (an ended run's steer is 409, an empty message is 400, ...): each
//! such answer comes from past the permission check, which runs first.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::collections::BTreeMap;
use std::process::Output;

use common::{Server, until};
use hangar_testkit::{Script, Step};
use serde_json::{Value, json};

const ALICE: &str = "alice@example.com";
const BOB: &str = "bob@example.com";
const CAROL: &str = "carol@example.com";
const VERA: &str = "vera@example.com";

/// Each prompt: a Bash call (under policy `ask` it waits for an answer), then, once its result
/// is back, a closing text.
fn script() -> Script {
    Script::new([]).responder(|r| {
        if r.last_user_has_tool_result() {
            return Step::text("made it");
        }
        Step::tool(
            "Bash",
            json!({"command": "echo hi > made.txt", "description": "make a file"}),
        )
    })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn token_for(s: &Server, person: &str) -> String {
    let out = s.ok(&["token", "create", "--person", person]);
    out.lines().last().unwrap().to_owned()
}

/// One caller: who and with which token.
#[derive(Clone)]
struct Caller {
    label: &'static str,
    token: String,
}

async fn call(
    s: &Server,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method.parse().unwrap(), format!("{}{path}", s.url))
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    // A live stream answers its headers, then never ends: its status is all the matrix needs.
    if resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"))
    {
        return (status, Value::Null);
    }
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// What a cell expects: this status, or a refusal (403) whose message names who may.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    Is(u16),
    /// 403: "only alice@example.com (the owner) or an admin may …".
    Owner,
    /// 403: "only an admin may …".
    Admin,
    /// 403: a member may not start a plain folder's session.
    Folder,
    /// 403: "only a member or an admin may …" (a viewer acts on nothing).
    Viewer,
}

impl Cell {
    fn status(self) -> u16 {
        match self {
            Cell::Is(s) => s,
            _ => 403,
        }
    }

    fn message(self) -> Option<String> {
        match self {
            Cell::Is(_) => None,
            Cell::Owner => Some(format!("only {ALICE} (the owner)")),
            Cell::Admin | Cell::Folder => Some("only an admin may".to_owned()),
            Cell::Viewer => Some("only a member or an admin may".to_owned()),
        }
    }
}

/// One row: a route of the table, called with this path and body by each column's caller.
struct Row {
    method: &'static str,
    route: &'static str,
    /// What this row calls it on, when a route has several rows.
    case: &'static str,
    path: String,
    body: Option<Value>,
    /// owner (alice), another member (bob), the environment's approver (carol), admin, viewer
    /// (vera: the last column comes from [`viewer`]).
    expect: [Cell; 5],
}

/// What vera, a viewer, gets from each row: every read of the team's work (as an admin would
/// see it), and a refusal for anything that acts (her own tokens aside). Every row has an arm:
/// a row without one fails the test.
fn viewer(method: &str, route: &str, case: &str) -> Cell {
    match (method, route, case) {
        ("GET", "/v1/audit", _) => Admin,
        // Another person's secrets are an admin's to read (the server's too).
        ("GET", "/v1/credentials", _) => Admin,
        ("DELETE", "/v1/tokens/{id}", "alice's spare token") => Admin,
        ("POST", "/v1/tokens", "own") => Is(201),
        // Another token's relayed terminal: not found, as for everyone.
        ("GET", "/v1/attaches/{id}/output", _) => Is(404),
        // Sign-in takes no token: the same answer as everyone's.
        ("GET", "/v1/auth", _) => Is(200),
        (_, r, _) if r.starts_with("/v1/auth/") => Is(404),
        (
            "GET",
            "/v1/health"
            | "/v1/ready"
            | "/.well-known/jwks.json"
            | "/v1/openapi.json"
            | "/v1/sessions"
            | "/v1/sessions/{id}"
            | "/v1/sessions/{id}/transcript"
            | "/v1/sessions/{id}/events"
            | "/v1/sessions/{id}/events/stream"
            | "/v1/turns/{id}"
            | "/v1/runs/{id}"
            | "/v1/runs/{id}/approvals"
            | "/v1/approvals"
            | "/v1/runs/{id}/events"
            | "/v1/runs/{id}/events/stream"
            | "/v1/runs/{id}/log"
            | "/v1/runs/{id}/steps"
            | "/v1/runs/{id}/diff"
            | "/v1/runs/{id}/forks"
            | "/v1/audit/verify"
            | "/v1/me"
            | "/v1/ids/{prefix}"
            | "/v1/board"
            | "/v1/turns/{id}/audit"
            | "/v1/environments"
            | "/v1/environments/{name}"
            | "/v1/sandboxes"
            | "/v1/sandboxes/{id}"
            | "/v1/people"
            | "/v1/tokens",
            _,
        ) => Is(200),
        (
            "POST" | "DELETE",
            "/v1/sessions"
            | "/v1/sessions/{id}/messages"
            | "/v1/runs/{id}/steer"
            | "/v1/runs/{id}/interrupt"
            | "/v1/runs/{id}/approvals/{request_id}"
            | "/v1/runs/{id}/fork"
            | "/v1/environments"
            | "/v1/environments/{name}/pull"
            | "/v1/sandboxes"
            | "/v1/sandboxes/{id}"
            | "/v1/sandboxes/{id}/exec"
            | "/v1/sandboxes/{id}/attach"
            | "/v1/attaches/{id}/input"
            | "/v1/attaches/{id}/resize"
            | "/v1/attaches/{id}"
            | "/v1/credentials/{name}"
            | "/v1/people"
            | "/v1/people/{email}",
            _,
        ) => Viewer,
        other => panic!("{other:?} has no viewer rule in the permission matrix: add one"),
    }
}

use Cell::{Admin, Folder, Is, Owner, Viewer};

const OK: [Cell; 4] = [Is(200), Is(200), Is(200), Is(200)];
const OWNER_READS: [Cell; 4] = [Is(200), Owner, Owner, Is(200)];

/// The resources of alice's the rows act on.
struct Alice {
    /// A session whose run waits for an approval.
    session: String,
    turn: String,
    run: String,
    request: String,
    sandbox: String,
    /// A session whose only turn has ended.
    ended_session: String,
    ended_run: String,
    repo: std::path::PathBuf,
    token_id: String,
}

fn rows(a: &Alice) -> Vec<Row> {
    let team_env = env_spec();
    let r = |method, route, case, path: String, body: Option<Value>, expect: [Cell; 4]| Row {
        method,
        route,
        case,
        path,
        body,
        expect: [
            expect[0],
            expect[1],
            expect[2],
            expect[3],
            viewer(method, route, case),
        ],
    };
    let (ses, run, ended, sb) = (&a.session, &a.run, &a.ended_run, &a.sandbox);
    vec![
        r("GET", "/v1/health", "", "/v1/health".into(), None, OK),
        r("GET", "/v1/ready", "", "/v1/ready".into(), None, OK),
        r(
            "GET",
            "/.well-known/jwks.json",
            "",
            "/.well-known/jwks.json".into(),
            None,
            OK,
        ),
        r(
            "GET",
            "/v1/openapi.json",
            "",
            "/v1/openapi.json".into(),
            None,
            OK,
        ),
        r(
            "GET",
            "/v1/sessions",
            "lists own only",
            "/v1/sessions".into(),
            None,
            OK,
        ),
        r(
            "POST",
            "/v1/sessions",
            "in alice's sandbox (empty prompt)",
            "/v1/sessions".into(),
            Some(json!({"sandbox": a.sandbox, "prompt": "", "policy": "ask"})),
            [Is(400), Owner, Owner, Is(400)],
        ),
        r(
            "POST",
            "/v1/sessions",
            "on a plain folder (empty prompt)",
            "/v1/sessions".into(),
            Some(json!({"no_sandbox": true, "dir": a.repo, "prompt": "", "policy": "ask"})),
            [Folder, Folder, Folder, Is(400)],
        ),
        r(
            "GET",
            "/v1/sessions/{id}",
            "",
            format!("/v1/sessions/{ses}"),
            None,
            OWNER_READS,
        ),
        r(
            "POST",
            "/v1/sessions/{id}/messages",
            "empty text",
            format!("/v1/sessions/{}/messages", a.ended_session),
            Some(json!({"text": ""})),
            [Is(400), Owner, Owner, Is(400)],
        ),
        r(
            "GET",
            "/v1/sessions/{id}/transcript",
            "",
            format!("/v1/sessions/{ses}/transcript"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/sessions/{id}/events",
            "",
            format!("/v1/sessions/{ses}/events"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/sessions/{id}/events/stream",
            "",
            format!("/v1/sessions/{ses}/events/stream"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/turns/{id}",
            "",
            format!("/v1/turns/{}", a.turn),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/runs/{id}",
            "",
            format!("/v1/runs/{run}"),
            None,
            // The approver reads the run's record (its state) to answer.
            [Is(200), Owner, Is(200), Is(200)],
        ),
        r(
            "POST",
            "/v1/runs/{id}/steer",
            "ended run",
            format!("/v1/runs/{ended}/steer?next_turn=false"),
            Some(json!({"text": "go on"})),
            [Is(409), Owner, Owner, Is(409)],
        ),
        // A prefix of the id is the run itself (made whole before routing): the same owner
        // check, not a 404 that would let anyone by.
        r(
            "POST",
            "/v1/runs/{id}/steer",
            "ended run, by a prefix of its id",
            format!("/v1/runs/{}/steer?next_turn=false", &ended[..14]),
            Some(json!({"text": "go on"})),
            [Is(409), Owner, Owner, Is(409)],
        ),
        // Naming someone else's run by a prefix finds nothing, as if it did not exist.
        r(
            "GET",
            "/v1/ids/{prefix}",
            "alice's run",
            format!("/v1/ids/{}", &a.run[..14]),
            None,
            [Is(200), Is(404), Is(404), Is(200)],
        ),
        r(
            "POST",
            "/v1/runs/{id}/interrupt",
            "ended run",
            format!("/v1/runs/{ended}/interrupt"),
            None,
            [Is(409), Owner, Owner, Is(409)],
        ),
        r(
            "GET",
            "/v1/runs/{id}/approvals",
            "",
            format!("/v1/runs/{run}/approvals"),
            None,
            [Is(200), Owner, Is(200), Is(200)],
        ),
        r(
            "GET",
            "/v1/approvals",
            "lists answerable only",
            "/v1/approvals".into(),
            None,
            OK,
        ),
        r(
            "POST",
            "/v1/runs/{id}/approvals/{request_id}",
            "unknown request",
            format!("/v1/runs/{run}/approvals/no-such-request"),
            Some(json!({"decision": "allow"})),
            // The driver's answer: no such request was issued (422), past the check.
            [Is(422), Owner, Is(422), Is(422)],
        ),
        r(
            "GET",
            "/v1/runs/{id}/events",
            "",
            format!("/v1/runs/{run}/events"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/runs/{id}/events/stream",
            "",
            format!("/v1/runs/{run}/events/stream"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/runs/{id}/log",
            "",
            format!("/v1/runs/{run}/log"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/runs/{id}/steps",
            "",
            format!("/v1/runs/{ended}/steps"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/runs/{id}/diff",
            "",
            format!("/v1/runs/{ended}/diff?from=0&to=0"),
            None,
            OWNER_READS,
        ),
        r(
            "POST",
            "/v1/runs/{id}/fork",
            "no such step",
            format!("/v1/runs/{ended}/fork"),
            Some(json!({"step": 9999})),
            [Is(400), Owner, Owner, Is(400)],
        ),
        r(
            "GET",
            "/v1/runs/{id}/forks",
            "",
            format!("/v1/runs/{ended}/forks"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/audit",
            "",
            "/v1/audit".into(),
            None,
            [Admin, Admin, Admin, Is(200)],
        ),
        r(
            "GET",
            "/v1/audit/verify",
            "",
            "/v1/audit/verify".into(),
            None,
            OK,
        ),
        r("GET", "/v1/me", "", "/v1/me".into(), None, OK),
        r(
            "GET",
            "/v1/board",
            "lists own only",
            "/v1/board".into(),
            None,
            OK,
        ),
        r(
            "GET",
            "/v1/board",
            "one session",
            format!("/v1/board?session={ses}"),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/turns/{id}/audit",
            "",
            format!("/v1/turns/{}/audit", a.turn),
            None,
            OWNER_READS,
        ),
        r(
            "GET",
            "/v1/environments",
            "",
            "/v1/environments".into(),
            None,
            OK,
        ),
        r(
            "POST",
            "/v1/environments",
            "replace team",
            "/v1/environments".into(),
            Some(team_env),
            [Admin, Admin, Admin, Is(200)],
        ),
        r(
            "GET",
            "/v1/environments/{name}",
            "",
            "/v1/environments/team".into(),
            None,
            OK,
        ),
        // Environments are the admins' (so is filling the machine with their images); team is
        // a local environment, which has no image: the admin's 400 comes past the check.
        r(
            "POST",
            "/v1/environments/{name}/pull",
            "team (local: no image)",
            "/v1/environments/team/pull".into(),
            None,
            [Admin, Admin, Admin, Is(400)],
        ),
        r(
            "GET",
            "/v1/sandboxes",
            "lists own only",
            "/v1/sandboxes".into(),
            None,
            OK,
        ),
        r(
            "POST",
            "/v1/sandboxes",
            "for alice",
            "/v1/sandboxes".into(),
            Some(json!({"env": "no-such-env", "repo": a.repo, "person": ALICE})),
            [Is(404), Admin, Admin, Is(404)],
        ),
        r(
            "GET",
            "/v1/sandboxes/{id}",
            "",
            format!("/v1/sandboxes/{sb}"),
            None,
            OWNER_READS,
        ),
        r(
            "DELETE",
            "/v1/sandboxes/{id}",
            "a turn runs in it",
            format!("/v1/sandboxes/{sb}"),
            None,
            [Is(409), Owner, Owner, Is(409)],
        ),
        r(
            "POST",
            "/v1/sandboxes/{id}/exec",
            "",
            format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["true"]})),
            OWNER_READS,
        ),
        r(
            "POST",
            "/v1/sandboxes/{id}/attach",
            "",
            format!("/v1/sandboxes/{sb}/attach"),
            Some(json!({"run": run})),
            OWNER_READS,
        ),
        // A relayed terminal is bound to the token that started it: no other token finds it.
        r(
            "GET",
            "/v1/attaches/{id}/output",
            "another token's",
            "/v1/attaches/att-none/output".into(),
            None,
            [Is(404); 4],
        ),
        r(
            "POST",
            "/v1/attaches/{id}/input",
            "another token's",
            "/v1/attaches/att-none/input".into(),
            Some(json!({"data": ""})),
            [Is(404); 4],
        ),
        r(
            "POST",
            "/v1/attaches/{id}/resize",
            "another token's",
            "/v1/attaches/att-none/resize".into(),
            Some(json!({"cols": 80, "rows": 24})),
            [Is(404); 4],
        ),
        r(
            "DELETE",
            "/v1/attaches/{id}",
            "another token's",
            "/v1/attaches/att-none".into(),
            None,
            [Is(404); 4],
        ),
        // Secrets: a person's are theirs and an admin's to manage; the server's and an
        // environment's are an admin's (names here are never a harness's variable).
        r(
            "GET",
            "/v1/credentials",
            "alice's",
            format!("/v1/credentials?person={ALICE}"),
            None,
            [Is(200), Admin, Admin, Is(200)],
        ),
        r(
            "GET",
            "/v1/credentials",
            "the server's",
            "/v1/credentials".into(),
            None,
            [Admin, Admin, Admin, Is(200)],
        ),
        r(
            "POST",
            "/v1/credentials/{name}",
            "alice's",
            format!("/v1/credentials/MATRIX_EXAMPLE?person={ALICE}"),
            Some(json!({"value": "example"})),
            [Is(200), Admin, Admin, Is(200)],
        ),
        r(
            "POST",
            "/v1/credentials/{name}",
            "the server's",
            "/v1/credentials/MATRIX_EXAMPLE".into(),
            Some(json!({"value": "example"})),
            [Admin, Admin, Admin, Is(200)],
        ),
        r(
            "DELETE",
            "/v1/credentials/{name}",
            "alice's, never set",
            format!("/v1/credentials/MATRIX_NEVER_SET?person={ALICE}"),
            None,
            [Is(404), Admin, Admin, Is(404)],
        ),
        // Sign-in takes no token (this server has no issuer): the same answer for everyone.
        r(
            "GET",
            "/v1/auth",
            "no token needed",
            "/v1/auth".into(),
            None,
            OK,
        ),
        r(
            "POST",
            "/v1/auth/oidc/start",
            "no token needed; no issuer",
            "/v1/auth/oidc/start".into(),
            Some(json!({"redirect_uri": "http://127.0.0.1:9/ui/signin/callback"})),
            [Is(404), Is(404), Is(404), Is(404)],
        ),
        r(
            "POST",
            "/v1/auth/oidc/finish",
            "no token needed; no issuer",
            "/v1/auth/oidc/finish".into(),
            Some(json!({"flow": "f", "state": "s", "code": "c"})),
            [Is(404), Is(404), Is(404), Is(404)],
        ),
        r(
            "POST",
            "/v1/auth/device",
            "no token needed; no issuer",
            "/v1/auth/device".into(),
            None,
            [Is(404), Is(404), Is(404), Is(404)],
        ),
        r(
            "POST",
            "/v1/auth/device/poll",
            "no token needed; no issuer",
            "/v1/auth/device/poll".into(),
            Some(json!({"flow": "f"})),
            [Is(404), Is(404), Is(404), Is(404)],
        ),
        r("GET", "/v1/people", "", "/v1/people".into(), None, OK),
        r(
            "POST",
            "/v1/people",
            "",
            "/v1/people".into(),
            Some(json!({"email": "dave@example.com"})),
            [Admin, Admin, Admin, Is(201)],
        ),
        r(
            "DELETE",
            "/v1/people/{email}",
            "unknown person",
            "/v1/people/nobody@example.com".into(),
            None,
            [Admin, Admin, Admin, Is(404)],
        ),
        r(
            "GET",
            "/v1/tokens",
            "own only",
            "/v1/tokens".into(),
            None,
            OK,
        ),
        r(
            "POST",
            "/v1/tokens",
            "own",
            "/v1/tokens".into(),
            Some(json!({"name": "matrix"})),
            [Is(201); 4],
        ),
        r(
            "DELETE",
            "/v1/tokens/{id}",
            "alice's spare token",
            format!("/v1/tokens/{}", a.token_id),
            None,
            [Is(200), Admin, Admin, Is(409)],
        ),
    ]
}

/// Alice's environment: local sandboxes on the host's network (the scripted model is on
/// loopback), carol answers its approvals too.
fn env_spec() -> Value {
    json!({"name": "team", "provider": "local", "network": "host",
           "governance": {"approvers": [CAROL]}})
}

async fn pending(s: &Server, token: &str, run: &str) -> Vec<Value> {
    let (status, a) = call(s, token, "GET", &format!("/v1/runs/{run}/approvals"), None).await;
    assert_eq!(status, 200, "{a}");
    a["approvals"].as_array().unwrap().clone()
}

/// Alice starts a session in environment team and waits for its approval: (body, request id).
async fn alice_session(s: &Server, alice: &str, repo: &std::path::Path) -> (Value, String) {
    let (status, started) = call(
        s,
        alice,
        "POST",
        "/v1/sessions",
        Some(&json!({"dir": repo, "env": "team", "policy": "ask", "prompt": "make a file"})),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let req = until("an approval", async || {
        pending(s, alice, &run)
            .await
            .first()
            .map(|a| a["request_id"].as_str().unwrap().to_owned())
    })
    .await;
    (started, req)
}

async fn audit(s: &Server) -> Vec<Value> {
    let (status, page) = s.call("GET", "/v1/audit?limit=1000", None).await;
    assert_eq!(status, 200, "{page}");
    page["records"].as_array().unwrap().clone()
}

struct Setup {
    s: Server,
    callers: [Caller; 5],
    alice: Alice,
    _repo: tempfile::TempDir,
}

async fn setup() -> Setup {
    let s = Server::start_with(
        script(),
        vec![("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned())],
        None,
    );
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let (status, env) = s.call("POST", "/v1/environments", Some(env_spec())).await;
    assert_eq!(status, 201, "{env}");
    let callers = [
        Caller {
            label: "owner (alice)",
            token: token_for(&s, ALICE),
        },
        Caller {
            label: "other member (bob)",
            token: token_for(&s, BOB),
        },
        Caller {
            label: "env approver (carol)",
            token: token_for(&s, CAROL),
        },
        Caller {
            label: "admin",
            token: s.token(),
        },
        Caller {
            label: "viewer (vera)",
            token: {
                s.ok(&["person", "add", "--viewer", VERA]);
                token_for(&s, VERA)
            },
        },
    ];
    let alice = &callers[0].token;

    // An ended session: alice answers her own approval (the owner may), the tool runs.
    let (ended, req) = alice_session(&s, alice, repo.path()).await;
    let ended_run = ended["run"]["id"].as_str().unwrap().to_owned();
    let (status, r) = call(
        &s,
        alice,
        "POST",
        &format!("/v1/runs/{ended_run}/approvals/{req}"),
        Some(&json!({"decision": "allow"})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let t = s.turn_ended(ended["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");

    // A live one, waiting for its approval.
    let (live, request) = alice_session(&s, alice, repo.path()).await;
    let out = s.ok(&["token", "create", "--person", ALICE, "--name", "spare"]);
    let token_id = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("id: ")
        .unwrap()
        .to_owned();
    let alice = Alice {
        session: live["session"]["id"].as_str().unwrap().into(),
        turn: live["turn"]["id"].as_str().unwrap().into(),
        run: live["run"]["id"].as_str().unwrap().into(),
        request,
        sandbox: live["session"]["sandbox_id"].as_str().unwrap().into(),
        ended_session: ended["session"]["id"].as_str().unwrap().into(),
        ended_run,
        repo: repo.path().to_owned(),
        token_id,
    };
    Setup {
        s,
        callers,
        alice,
        _repo: repo,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_own_vs_another_vs_approver_vs_admin() {
    let Setup {
        s,
        callers,
        alice: a,
        _repo,
    } = setup().await;
    let rows = rows(&a);

    // Every route of the table has a row, and every row a route (or is another work's).
    let table = hangar_server::route_table();
    for (m, p) in &table {
        assert!(
            rows.iter().any(|r| r.method == *m && r.route == *p),
            "{m} {p} has no rule in the permission matrix: add a row (who may call it on whose resource)"
        );
    }
    for r in &rows {
        assert!(
            table.contains(&(r.method, r.route)),
            "{} {} is not a route",
            r.method,
            r.route
        );
    }

    // Vera, bob and carol first: their refusals must leave alice's things as they were for the
    // calls after them (and the checks below).
    let mut got: BTreeMap<(usize, usize), (u16, Value)> = BTreeMap::new();
    for col in [4, 1, 2, 0, 3] {
        for (i, row) in rows.iter().enumerate() {
            let ans = call(
                &s,
                &callers[col].token,
                row.method,
                &row.path,
                row.body.as_ref(),
            )
            .await;
            got.insert((i, col), ans);
        }
    }

    // What only the viewer gate stops, no route's own rule (they are vera's own): her own
    // credentials, and a sandbox of her own.
    let vera = &callers[4].token;
    let (status, r) = call(
        &s,
        vera,
        "POST",
        &format!("/v1/credentials/VIEWER_OWN?person={VERA}"),
        Some(&json!({"value": "v"})),
    )
    .await;
    assert_eq!(status, 403, "a viewer's own credential: {r}");
    let (status, r) = call(
        &s,
        vera,
        "POST",
        "/v1/sandboxes",
        Some(&json!({"env": "team", "repo": a.repo})),
    )
    .await;
    assert_eq!(status, 403, "a viewer's own sandbox: {r}");

    // The table, as the closing note quotes it.
    let mut table_text = String::from("| endpoint | case |");
    for c in &callers {
        table_text.push_str(&format!(" {} |", c.label));
    }
    table_text.push_str("\n| --- | --- | --- | --- | --- | --- | --- |\n");
    let mut wrong = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        table_text.push_str(&format!("| {} {} | {} |", row.method, row.route, row.case));
        for col in 0..5 {
            let (status, body) = &got[&(i, col)];
            let want = row.expect[col];
            let msg = body["error"]["message"].as_str().unwrap_or_default();
            let ok = *status == want.status() && want.message().is_none_or(|m| msg.contains(&m));
            table_text.push_str(&format!(" {status}{} |", if ok { "" } else { " ✗" }));
            if !ok {
                wrong.push(format!(
                    "{} {} ({}) as {}: {status} {body}, expected {want:?}",
                    row.method, row.path, row.case, callers[col].label
                ));
            }
        }
        table_text.push('\n');
    }
    println!("{table_text}");
    assert!(
        wrong.is_empty(),
        "cells not as expected:\n{}",
        wrong.join("\n")
    );

    // What each one's lists show.
    // Vera's inbox shows every pending approval (she reads them; answering is refused).
    for (col, answers) in [(0, true), (1, false), (2, true), (3, true), (4, true)] {
        let (_, inbox) = call(&s, &callers[col].token, "GET", "/v1/approvals", None).await;
        let ids: Vec<&str> = inbox["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["request_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids.contains(&a.request.as_str()),
            answers,
            "{}: {inbox}",
            callers[col].label
        );
    }

    // Bob's refusals changed nothing and are audited with bob as the actor.
    let records = audit(&s).await;
    let bobs: Vec<&Value> = records.iter().filter(|r| r["actor"] == BOB).collect();
    assert!(
        bobs.iter()
            .all(|r| r["action"] == "access.refused" || r["action"] == "token.created"),
        "{bobs:?}"
    );
    let refused = bobs
        .iter()
        .filter(|r| r["action"] == "access.refused")
        .count();
    let owner_rows = rows
        .iter()
        .filter(|r| r.expect[1] != Is(200) && r.expect[1].status() == 403)
        .count();
    assert_eq!(
        refused, owner_rows,
        "one audited refusal per refused call: {bobs:?}"
    );
    // The same for vera: she changed nothing, and each refusal is hers in the audit log.
    let veras: Vec<&Value> = records.iter().filter(|r| r["actor"] == VERA).collect();
    assert!(
        veras
            .iter()
            .all(|r| r["action"] == "access.refused" || r["action"] == "token.created"),
        "{veras:?}"
    );
    let refused = veras
        .iter()
        .filter(|r| r["action"] == "access.refused")
        .count();
    // Her matrix refusals, and the two of her own above.
    let viewer_rows = rows.iter().filter(|r| r.expect[4].status() == 403).count() + 2;
    assert_eq!(
        refused, viewer_rows,
        "one audited refusal per refused call: {veras:?}"
    );
    // What vera's lists show: all of the team's sessions and sandboxes.
    let (_, sessions) = call(&s, &callers[4].token, "GET", "/v1/sessions", None).await;
    assert!(sessions.to_string().contains(&a.session), "{sessions}");
    let (_, sandboxes) = call(&s, &callers[4].token, "GET", "/v1/sandboxes", None).await;
    assert!(sandboxes.to_string().contains(&a.sandbox), "{sandboxes}");

    // The real answer: bob may not approve alice's pending call, carol (the environment's
    // approver) may, and the tool runs.
    let path = format!("/v1/runs/{}/approvals/{}", a.run, a.request);
    let (status, r) = call(
        &s,
        &callers[1].token,
        "POST",
        &path,
        Some(&json!({"decision": "allow"})),
    )
    .await;
    assert_eq!(status, 403, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains(&format!(
            "only {ALICE} (the owner), an approver of environment team ({CAROL}) or an admin may approve in run {}",
            a.run
        )),
        "{r}"
    );
    assert_eq!(
        pending(&s, &callers[0].token, &a.run).await.len(),
        1,
        "bob's answer went nowhere"
    );
    // Nor may vera, who sees it.
    let (status, r) = call(
        &s,
        &callers[4].token,
        "POST",
        &path,
        Some(&json!({"decision": "allow"})),
    )
    .await;
    assert_eq!(status, 403, "{r}");
    assert_eq!(
        pending(&s, &callers[0].token, &a.run).await.len(),
        1,
        "vera's answer went nowhere"
    );
    let (status, r) = call(
        &s,
        &callers[2].token,
        "POST",
        &path,
        Some(&json!({"decision": "allow"})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let t = s.turn_ended(&a.turn).await;
    assert_eq!(t["status"], 0, "{t}");
    let answered = audit(&s).await.into_iter().any(|r| {
        r["actor"] == CAROL
            && r["detail"]
                .as_str()
                .unwrap_or_default()
                .contains(&a.request)
    });
    assert!(answered, "carol's answer is audited as hers");
}

/// `hangar ARGS` as this caller (`HANGAR_URL` and `HANGAR_TOKEN`: the API, as a person uses it
/// from their own machine).
fn cli(s: &Server, c: &Caller, args: &[&str]) -> Output {
    s.hangar()
        .env("HANGAR_TOKEN", &c.token)
        .args(args)
        .output()
        .unwrap()
}

/// What a CLI cell expects.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Says {
    /// Exits 0.
    Ok,
    /// Fails, but not refused: the API let the caller through (an ended run, an empty text...).
    Fails,
    /// Refused: "only alice@example.com (the owner)…".
    Owner,
    /// Refused: "only an admin may…".
    Admin,
    /// Refused: "only a member or an admin may…" (a viewer).
    Viewer,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cli_command_own_vs_another_vs_approver_vs_admin() {
    let Setup {
        s,
        callers,
        alice: a,
        _repo,
    } = setup().await;
    let (ses, turn, run, sb) = (&a.session, &a.turn, &a.run, &a.sandbox);
    let (ended, ended_ses) = (&a.ended_run, &a.ended_session);
    use Says::{Admin as A, Fails as F, Ok as K, Owner as O, Viewer as V};
    // Columns: alice, bob, carol, the admin, vera (a viewer).
    let rows: Vec<(Vec<&str>, [Says; 5])> = vec![
        (vec!["sessions"], [K, K, K, K, K]),
        (vec!["sb", "list"], [K, K, K, K, K]),
        (vec!["approvals"], [K, K, K, K, K]),
        (vec!["approvals", run], [K, O, K, K, K]),
        (vec!["transcript", ses], [K, O, O, K, K]),
        (vec!["turn", "show", turn], [K, O, O, K, K]),
        (vec!["log", ended], [K, O, O, K, K]),
        (vec!["diff", ended], [K, O, O, K, K]),
        (vec!["steer", ended, "go on"], [F, O, O, F, V]),
        (vec!["interrupt", ended], [F, O, O, F, V]),
        (vec!["send", ended_ses, ""], [F, O, O, F, V]),
        (vec!["approve", run, "no-such-request"], [F, O, F, F, V]),
        (vec!["deny", run, "no-such-request"], [F, O, F, F, V]),
        (vec!["fork", ended, "--step", "9999"], [F, O, O, F, V]),
        (vec!["sb", "exec", sb, "--", "true"], [K, O, O, K, V]),
        (vec!["sb", "rm", sb], [F, O, O, F, V]),
        (vec!["audit"], [A, A, A, K, A]),
    ];
    let mut text = String::from("| command |");
    for c in &callers {
        text.push_str(&format!(" {} |", c.label));
    }
    text.push_str("\n| --- | --- | --- | --- | --- | --- |\n");
    let mut wrong = Vec::new();
    for (args, want) in &rows {
        text.push_str(&format!("| hangar {} |", args.join(" ")));
        // Vera, bob and carol first, as in the API's matrix.
        let mut outs: Vec<Option<Output>> = vec![None, None, None, None, None];
        for col in [4, 1, 2, 0, 3] {
            outs[col] = Some(cli(&s, &callers[col], args));
        }
        for col in 0..5 {
            let out = outs[col].as_ref().unwrap();
            let err = stderr(out);
            let refused = err.contains("only ") && err.contains(" may ");
            let (ok, shown) = match want[col] {
                Says::Ok => (out.status.success(), "ok"),
                Says::Fails => (!out.status.success() && !refused, "fails, not refused"),
                Says::Owner => (
                    !out.status.success() && err.contains(&format!("only {ALICE} (the owner)")),
                    "refused",
                ),
                Says::Admin => (
                    !out.status.success() && err.contains("only an admin may"),
                    "refused",
                ),
                Says::Viewer => (
                    !out.status.success() && err.contains("only a member or an admin may"),
                    "refused",
                ),
            };
            text.push_str(&format!(" {shown}{} |", if ok { "" } else { " ✗" }));
            if !ok {
                wrong.push(format!(
                    "hangar {args:?} as {}: {:?}\nstdout: {}\nstderr: {err}",
                    callers[col].label,
                    out.status,
                    String::from_utf8_lossy(&out.stdout)
                ));
            }
        }
        text.push('\n');
    }
    println!("{text}");
    assert!(
        wrong.is_empty(),
        "cells not as expected:\n{}",
        wrong.join("\n")
    );

    // The lists show only what each may see: bob none of alice's, carol her approvals only.
    for (col, sees) in [(0, true), (1, false), (2, false), (3, true), (4, true)] {
        for args in [&["sessions"][..], &["sb", "list"][..]] {
            let out = cli(&s, &callers[col], args);
            let listed = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                // (`sessions` shows ids cut to their unique prefixes.)
                listed.contains(&ses[..10]) || listed.contains(&sb[..9]),
                sees,
                "hangar {args:?} as {}: {listed}",
                callers[col].label
            );
        }
    }
    for (col, sees) in [(0, true), (1, false), (2, true), (3, true), (4, true)] {
        let out = cli(&s, &callers[col], &["approvals"]);
        let listed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            listed
                .lines()
                .any(|l| l.starts_with(&run[..10]) && l.contains(&a.request[..8])),
            sees,
            "hangar approvals as {}: {listed}",
            callers[col].label
        );
    }
    // Bob's `hangar approve` of the real request is refused, named whole or by the prefixes the
    // table shows (made whole before the owner check); alice's own goes through.
    let out = cli(&s, &callers[1], &["approve", &run[..10], &a.request[..8]]);
    assert!(
        !out.status.success() && stderr(&out).contains("may approve in run"),
        "{}",
        stderr(&out)
    );
    let out = cli(&s, &callers[1], &["approve", run, &a.request]);
    assert!(
        !out.status.success() && stderr(&out).contains("may approve in run"),
        "{}",
        stderr(&out)
    );
    let out = cli(&s, &callers[0], &["approve", run, &a.request]);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = s.turn_ended(turn).await;
    assert_eq!(t["status"], 0, "{t}");
}
