//! Issue 20, item 5, through a real `hangar serve`: secrets have an owner (the server, a
//! person, an environment); a member writes only their own; a turn gets its person's and its
//! environment's, in the form its harness takes, and never the server's own
//! `ANTHROPIC_API_KEY` unless the server opts in (`HANGAR_SERVER_CREDENTIALS=allow`). The
//! real Claude Code runs in the in-place local sandbox against the scripted model, which
//! records the headers of each request the harness makes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use common::Server;
use hangar_testkit::{Script, Step};
use serde_json::{Value, json};

/// The server's own key in its environment (`claude_env` gives `hangar serve` this one).
const SERVER_KEY: &str = "sk-hangar-test";

/// The scripted model: a Bash call that shows what the agent's environment holds of the
/// credentials, then a closing text.
fn shows_env() -> Script {
    Script::new([]).responder(|r| {
        if r.last_user_has_tool_result() {
            return Step::text("that is what I have");
        }
        Step::tool(
            "Bash",
            json!({
                "command": "echo \"api key=[${ANTHROPIC_API_KEY:-none}]\"",
                "description": "look"
            }),
        )
    })
}

/// A server whose own environment holds `ANTHROPIC_API_KEY` but does not pass it on (the
/// default: `HANGAR_SERVER_CREDENTIALS` unset; `claude_env` sets it for the other tests).
fn server(script: Script) -> Server {
    Server::start_with(
        script,
        vec![("HANGAR_SERVER_CREDENTIALS".to_owned(), String::new())],
        None,
    )
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

fn member_token(s: &Server, email: &str) -> String {
    let out = s.ok(&["token", "create", "--person", email]);
    out.lines().last().unwrap().trim().to_owned()
}

async fn admin_email(s: &Server) -> String {
    let (_, me) = s.call("GET", "/v1/me", None).await;
    me["person"].as_str().unwrap().to_owned()
}

/// Starts a session in the in-place sandbox and waits for its turn to end; the turn.
async fn one_turn(s: &Server) -> Value {
    let work = tempfile::tempdir().unwrap();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": work.path(), "policy": "auto", "prompt": "show me"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    s.turn_ended(started["turn"]["id"].as_str().unwrap()).await
}

fn tool_results(s: &Server) -> Vec<String> {
    s.fake
        .requests()
        .iter()
        .flat_map(|r| r.tool_results())
        .map(|(_, text, _)| text)
        .collect()
}

/// The attack of issue 20: the server's own key went into every sandbox, one key every agent
/// could read. Here the person keeps a Claude subscription token (`claude setup-token`): it
/// reaches Claude Code, which sends it as `authorization: Bearer`, and the server's key is in
/// neither the agent's environment nor any request. Another member's key does not reach this
/// person's turn either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_oauth_token_reaches_claude_and_the_servers_key_does_not() {
    let s = server(shows_env());
    let me = admin_email(&s).await;
    let bob = member_token(&s, "bob@example.com");
    let bobs_key = "sk-ant-bob-0f9e8d";
    let (status, answer) = as_token(
        &s,
        &bob,
        "POST",
        "/v1/credentials/ANTHROPIC_API_KEY?person=bob@example.com",
        json!({"value": bobs_key}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let oauth = "sk-ant-oat01-hangar-test-subscription";
    let (status, answer) = s
        .call(
            "POST",
            &format!("/v1/credentials/CLAUDE_CODE_OAUTH_TOKEN?person={me}"),
            Some(json!({"value": oauth})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");

    let turn = one_turn(&s).await;
    assert_eq!(turn["status"], 0, "{turn}");

    let requests = s.fake.requests();
    let messages: Vec<_> = requests
        .iter()
        .filter(|r| r.path.starts_with("/v1/messages"))
        .collect();
    assert!(messages.len() >= 2, "the call and the answer: {requests:?}");
    for r in &messages {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {oauth}").as_str()),
            "the subscription token is how Claude Code signs in: {:?}",
            r.headers
        );
        assert_eq!(r.header("x-api-key"), None, "{:?}", r.headers);
    }
    for r in &s.fake.all_requests() {
        let all = format!("{:?} {}", r.headers, r.all_text());
        assert!(
            !all.contains(SERVER_KEY),
            "the server's key reached the model: {all}"
        );
        assert!(
            !all.contains(bobs_key),
            "bob's key reached this person's turn: {all}"
        );
    }
    let results = tool_results(&s);
    assert!(
        results.iter().any(|t| t.contains("api key=[none]")),
        "the agent's environment (Claude Code keeps its own OAuth token out of its tools'): {results:?}"
    );
}

/// The single-user local mode is an explicit opt-in: with `HANGAR_SERVER_CREDENTIALS=allow`
/// the server's key reaches the turn as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_key_reaches_a_turn_only_when_the_server_opts_in() {
    let s = Server::start(shows_env());
    let turn = one_turn(&s).await;
    assert_eq!(turn["status"], 0, "{turn}");
    let messages: Vec<_> = s
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/v1/messages"))
        .collect();
    assert!(!messages.is_empty());
    assert!(
        messages
            .iter()
            .all(|r| r.header("x-api-key") == Some(SERVER_KEY))
    );
    let results = tool_results(&s);
    assert!(
        results
            .iter()
            .any(|t| t.contains(&format!("api key=[{SERVER_KEY}]"))),
        "{results:?}"
    );
}

/// Who may write, remove and list whose secrets: a member their own only; the server's and an
/// environment's the admins'; `hangar.*` names nobody's through the API. Every refusal is a
/// 403 with the member as the audited actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_write_only_their_own_secrets() {
    let s = server(Script::new([Step::text("never asked")]));
    let me = admin_email(&s).await;
    let alice = member_token(&s, "alice@example.com");
    let bob = member_token(&s, "bob@example.com");
    let v = json!({"value": "sk-secret-value"});
    let cases: Vec<(&str, &str, &str, u16)> = vec![
        // bob, about alice's, the server's and an environment's: refused.
        (
            &bob,
            "POST",
            "/v1/credentials/ANTHROPIC_API_KEY?person=alice@example.com",
            403,
        ),
        (
            &bob,
            "DELETE",
            "/v1/credentials/ANTHROPIC_API_KEY?person=alice@example.com",
            403,
        ),
        (&bob, "GET", "/v1/credentials?person=alice@example.com", 403),
        (&bob, "POST", "/v1/credentials/ANTHROPIC_API_KEY", 403),
        (&bob, "DELETE", "/v1/credentials/ANTHROPIC_API_KEY", 403),
        (&bob, "GET", "/v1/credentials", 403),
        (
            &bob,
            "POST",
            "/v1/credentials/ANTHROPIC_API_KEY?environment=in-place",
            403,
        ),
        (&bob, "GET", "/v1/credentials?environment=in-place", 403),
        (
            &bob,
            "POST",
            "/v1/credentials/hangar.mine?person=bob@example.com",
            403,
        ),
        // His own: yes.
        (
            &bob,
            "POST",
            "/v1/credentials/ANTHROPIC_API_KEY?person=bob@example.com",
            200,
        ),
        (&bob, "GET", "/v1/credentials?person=bob@example.com", 200),
        // alice keeps hers.
        (
            &alice,
            "POST",
            "/v1/credentials/CLAUDE_CODE_OAUTH_TOKEN?person=alice@example.com",
            200,
        ),
        (
            &alice,
            "POST",
            "/v1/credentials/x?person=alice@example.com&environment=in-place",
            400,
        ),
    ];
    for (token, method, path, want) in &cases {
        let (status, answer) = as_token(&s, token, method, path, v.clone()).await;
        assert_eq!(status, *want, "{method} {path}: {answer}");
    }
    // The admin: the server's, an environment's, anyone's.
    for path in [
        "/v1/credentials/ANTHROPIC_API_KEY".to_owned(),
        "/v1/credentials/ANTHROPIC_API_KEY?environment=in-place".to_owned(),
        "/v1/credentials/ANTHROPIC_API_KEY?person=alice@example.com".to_owned(),
        format!("/v1/credentials/OPENAI_API_KEY?person={me}"),
    ] {
        let (status, answer) = s.call("POST", &path, Some(v.clone())).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    let names = |t: &str, q: &str| {
        let (s, t, q) = (&s, t.to_owned(), q.to_owned());
        async move {
            let (status, a) =
                as_token(s, &t, "GET", &format!("/v1/credentials{q}"), json!({})).await;
            assert_eq!(status, 200, "{a}");
            a["credentials"].clone()
        }
    };
    assert_eq!(
        names(&bob, "?person=bob@example.com").await,
        json!(["ANTHROPIC_API_KEY"])
    );
    assert_eq!(
        names(&alice, "?person=alice@example.com").await,
        json!(["ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"])
    );
    let admin = s.token();
    assert_eq!(
        names(&admin, "?environment=in-place").await,
        json!(["ANTHROPIC_API_KEY"])
    );
    // bob's refusals are in the audit log, with him as the actor.
    let audit = s.ok(&["audit"]);
    let refused = audit
        .lines()
        .filter(|l| {
            l.contains("bob@example.com")
                && (l.contains("access.refused") || l.contains("credential.refused"))
        })
        .count();
    assert_eq!(refused, 9, "{audit}");
    // On the server's machine: a person's hangar.* name is refused too.
    let out = s
        .hangar()
        .args([
            "credential",
            "set",
            "hangar.x",
            "--person",
            "bob@example.com",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let listed = s.ok(&["credential", "list", "--person", "alice@example.com"]);
    assert_eq!(
        listed.split_whitespace().collect::<Vec<_>>(),
        ["ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"]
    );
}

/// base64url without padding (a JWT's parts).
fn b64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A JWT with these claims (Codex reads the claims of the tokens in `auth.json`; the
/// signature is the issuer's business, not the CLI's).
fn jwt(claims: &Value) -> String {
    format!(
        "{}.{}.c2lnbmF0dXJl",
        b64url(br#"{"alg":"RS256","typ":"JWT"}"#),
        b64url(claims.to_string().as_bytes())
    )
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A server that runs the real Codex and passes none of its own credentials on.
fn codex_server() -> Server {
    Server::start_with(
        Script::new([]),
        vec![
            ("HANGAR_SERVER_CREDENTIALS".to_owned(), String::new()),
            (
                "HANGAR_CODEX_BIN".to_owned(),
                hangar_testkit::codex_bin().unwrap().display().to_string(),
            ),
        ],
        None,
    )
}

/// A Codex session in a new folder with `config` (Codex's own settings) whose turn reached
/// `model`: the ended turn and the model's requests.
async fn codex_turn(
    s: &Server,
    model: &hangar_testkit::FakeOpenAi,
    config: Vec<String>,
) -> (Value, Vec<hangar_testkit::RecordedRequest>) {
    let work = tempfile::tempdir().unwrap();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(
                json!({"dir": work.path(), "harness": "codex", "policy": "auto", "prompt": "hi",
                        "options": {"codex_config": config}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    let requests = model.requests();
    assert!(
        !requests.is_empty(),
        "Codex reached the model: {turn} {:?}",
        model.all_requests()
    );
    (turn, requests)
}

/// Codex's own settings for the scripted model as a provider that signs in the way the real
/// ChatGPT sign-in does (`requires_openai_auth`: the tokens of `auth.json`, no key variable).
fn chatgpt_provider(base_url: &str) -> Vec<String> {
    vec![
        r#"model_provider="hangar-chatgpt""#.into(),
        r#"model_providers.hangar-chatgpt.name="hangar chatgpt""#.into(),
        format!(r#"model_providers.hangar-chatgpt.base_url="{base_url}""#),
        r#"model_providers.hangar-chatgpt.wire_api="responses""#.into(),
        "model_providers.hangar-chatgpt.requires_openai_auth=true".into(),
        "model_providers.hangar-chatgpt.request_max_retries=0".into(),
        "model_providers.hangar-chatgpt.stream_max_retries=0".into(),
        r#"model="gpt-5.5""#.into(),
        "analytics.enabled=false".into(),
    ]
}

/// A person's Codex ChatGPT sign-in (`auth.json`, kept as the secret `CODEX_AUTH_JSON`) is
/// written in the turn's `CODEX_HOME`; the real Codex reads it and sends its access token and
/// account to the model, with no API key anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_codex_chatgpt_sign_in_reaches_codex() {
    let model = hangar_testkit::FakeOpenAi::start(Script::new([Step::text("signed in")])).unwrap();
    let s = codex_server();
    let me = admin_email(&s).await;
    let now = now_secs();
    let access = jwt(&json!({"exp": now + 10 * 86400, "iat": now, "sub": "user-hangar"}));
    let id = jwt(&json!({
        "email": "me@example.com",
        "exp": now + 10 * 86400,
        "https://api.openai.com/auth": {
            "chatgpt_plan_type": "plus",
            "chatgpt_account_id": "acct-hangar-test",
            "chatgpt_user_id": "user-hangar"
        }
    }));
    let last_refresh = String::from_utf8(
        std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let auth = json!({
        "OPENAI_API_KEY": null,
        "tokens": {
            "id_token": id,
            "access_token": access,
            "refresh_token": "rt-hangar-test",
            "account_id": "acct-hangar-test"
        },
        "last_refresh": last_refresh.trim()
    });
    let (status, answer) = s
        .call(
            "POST",
            &format!("/v1/credentials/CODEX_AUTH_JSON?person={me}"),
            Some(json!({"value": auth.to_string()})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (turn, requests) = codex_turn(&s, &model, chatgpt_provider(&model.base_url())).await;
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {access}").as_str()),
            "{:?}",
            r.headers
        );
        assert_eq!(
            r.header("chatgpt-account-id"),
            Some("acct-hangar-test"),
            "{:?}",
            r.headers
        );
    }
    assert_eq!(turn["status"], 0, "{turn}");
}

/// Sets `owner`'s credentials through the API as the admin (`owner` is `person=…` or
/// `environment=…`).
async fn set_all(s: &Server, owner: &str, pairs: &[(&str, String)]) {
    for (name, value) in pairs {
        let (status, answer) = s
            .call(
                "POST",
                &format!("/v1/credentials/{name}?{owner}"),
                Some(json!({"value": value})),
            )
            .await;
        assert_eq!(status, 200, "{name}: {answer}");
    }
}

/// Claude Code on Bedrock, with the environment's credentials (a team's shared account): the
/// real CLI sends its Bedrock request to the base URL on loopback with the bearer token the
/// environment keeps. The scripted model does not speak Bedrock's event stream, so the turn
/// ends in an error after the request; what is checked is the request the harness made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environments_bedrock_credentials_reach_claude_code() {
    let s = server(Script::new([]));
    let token = "bedrock-api-key-hangar-test-4c1d";
    set_all(
        &s,
        "environment=in-place",
        &[
            ("CLAUDE_CODE_USE_BEDROCK", "1".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_BEARER_TOKEN_BEDROCK", token.into()),
            ("ANTHROPIC_BEDROCK_BASE_URL", s.fake.base_url()),
        ],
    )
    .await;
    one_turn(&s).await;
    let bedrock: Vec<_> = s
        .fake
        .all_requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/model/") && r.path.contains("/invoke"))
        .collect();
    assert!(!bedrock.is_empty(), "{:?}", s.fake.all_requests());
    for r in &bedrock {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {token}").as_str()),
            "{:?}",
            r.headers
        );
    }
}

/// Claude Code on Vertex, with a person's service account key: the key (kept as the
/// credential `GOOGLE_APPLICATION_CREDENTIALS`, its JSON) becomes a file the variable names,
/// mode 0600, owned by this turn's agent, in a folder of mode 0700; another agent's uid cannot
/// read it while the turn runs; the real CLI sends its Vertex request to the base URL on
/// loopback (with `CLAUDE_CODE_SKIP_VERTEX_AUTH`: the scripted model has no Google token
/// endpoint) and the scripted model answers it. The tool call holds the turn until the test
/// has tried the read (a file the test writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_vertex_key_file_reaches_claude_code_for_its_agent_only() {
    if !common::is_root() {
        eprintln!("skipped: the uid split needs root");
        return;
    }
    let script = Script::new([]).responder(|r| {
        if r.last_user_has_tool_result() {
            return Step::text("done");
        }
        Step::tool(
            "Bash",
            json!({
                "command": "f=\"$GOOGLE_APPLICATION_CREDENTIALS\"; echo \"file=$f $(stat -c 'mode=%a owner=%u' \"$f\") dir=$(stat -c '%a' \"$(dirname \"$f\")\") me=$(id -u) $(grep -o 'agent@[a-z.-]*' \"$f\")\" | tee started; while [ ! -e go ]; do sleep 0.1; done",
                "description": "look"
            }),
        )
    });
    let s = server(script);
    let me = admin_email(&s).await;
    let key = json!({
        "type": "service_account",
        "project_id": "hangar-test",
        "client_email": "agent@hangar-test.iam.gserviceaccount.com",
        "private_key_id": "k1",
        "private_key": "-----BEGIN PRIVATE KEY-----\nnot used here\n-----END PRIVATE KEY-----\n",
    });
    set_all(
        &s,
        &format!("person={me}"),
        &[
            ("CLAUDE_CODE_USE_VERTEX", "1".into()),
            ("CLAUDE_CODE_SKIP_VERTEX_AUTH", "1".into()),
            ("CLOUD_ML_REGION", "us-east5".into()),
            ("ANTHROPIC_VERTEX_PROJECT_ID", "hangar-test".into()),
            (
                "ANTHROPIC_VERTEX_BASE_URL",
                format!("{}/v1", s.fake.base_url()),
            ),
            ("GOOGLE_APPLICATION_CREDENTIALS", key.to_string()),
        ],
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": work.path(), "policy": "auto", "prompt": "show me"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let sb = started["session"]["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let fake = &s.fake;
    let line = common::until("the tool call to show the file", async || {
        eprintln!(
            "requests so far: {:?}",
            fake.all_requests()
                .iter()
                .map(|r| (&r.path, r.kind))
                .collect::<Vec<_>>()
        );
        std::fs::read_to_string(work.path().join("started"))
            .ok()
            .filter(|l| l.ends_with('\n'))
    })
    .await;
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} in {line}"))
            .to_owned()
    };
    let (file, agent) = (field("file"), field("me"));
    assert_eq!(field("mode"), "600", "{line}");
    assert_eq!(field("owner"), agent, "{line}");
    assert_eq!(field("dir"), "700", "{line}");
    assert!(
        line.contains("agent@hangar-test.iam"),
        "the key's content: {line}"
    );
    // Inside the sandbox, as another sandbox's agent (the next uid hangar gives one) and, to
    // show the path is right, as this turn's.
    let read_as = |uid: String| {
        let (s, sb, file) = (&s, sb.clone(), file.clone());
        async move {
            let argv = json!([
                "setpriv",
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups",
                "cat",
                file
            ]);
            let (status, out) = s
                .call(
                    "POST",
                    &format!("/v1/sandboxes/{sb}/exec"),
                    Some(json!({"argv": argv, "as": "hangar"})),
                )
                .await;
            assert_eq!(status, 200, "{out}");
            out
        }
    };
    let other: u32 = agent.parse::<u32>().unwrap() + 1;
    let theirs = read_as(other.to_string()).await;
    assert_ne!(theirs["status"], 0, "another agent read the key: {theirs}");
    assert!(
        theirs["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("Permission denied"),
        "{theirs}"
    );
    let ours = read_as(agent.clone()).await;
    assert_eq!(ours["status"], 0, "{ours}");
    assert!(
        ours["stdout"]
            .as_str()
            .unwrap()
            .contains("agent@hangar-test"),
        "{ours}"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    let turn = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(turn["status"], 0, "{turn}");
    let vertex: Vec<_> = s
        .fake
        .requests()
        .into_iter()
        .filter(|r| {
            r.path
                .contains("/projects/hangar-test/locations/us-east5/publishers/anthropic/models/")
        })
        .collect();
    assert!(
        vertex.len() >= 2,
        "the call and the answer: {:?}",
        s.fake.all_requests()
    );
    // The turn's files are gone with it.
    let (_, out) = s
        .call(
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["test", "-e", file], "as": "hangar"})),
        )
        .await;
    assert_ne!(out["status"], 0, "the key file outlived the turn: {out}");
}

/// The scripted model for [`credentials_in_a_sandbox`]: a Bash call that shows the key
/// variable and the Vertex key file (its mode, owner, folder's mode, who runs it, its content).
fn shows_key_and_file() -> Script {
    Script::new([]).responder(|r| {
        if r.last_user_has_tool_result() {
            return Step::text("done");
        }
        Step::tool(
            "Bash",
            json!({
                "command": "f=\"$GOOGLE_APPLICATION_CREDENTIALS\"; echo \"key=[${ANTHROPIC_API_KEY:-none}] file=$f $(stat -c 'mode=%a owner=%u' \"$f\") dir=$(stat -c '%a' \"$(dirname \"$f\")\") me=$(id -u) $(grep -o 'agent@[a-z.-]*' \"$f\")\"",
                "description": "look"
            }),
        )
    })
}

/// In a sandbox of the environment `yaml` (named `box`) under the uid split: the person's key
/// reaches the harness as a variable and their Vertex key file as a file of the agent's alone
/// (0600 in a 0700 folder), removed when the turn ends; the server's own key reaches nothing.
async fn credentials_in_a_sandbox(s: &Server, yaml: &str) {
    let me = admin_email(s).await;
    let key = "sk-ant-person-sandboxed-7a2b";
    let google = json!({"type": "service_account", "client_email": "agent@hangar-test.iam.gserviceaccount.com"});
    set_all(
        s,
        &format!("person={me}"),
        &[
            ("ANTHROPIC_API_KEY", key.into()),
            ("GOOGLE_APPLICATION_CREDENTIALS", google.to_string()),
        ],
    )
    .await;
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let sb = s.sandbox_of(yaml, repo.path());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "show me"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(turn["status"], 0, "{turn}");
    let results = tool_results(s);
    let line = results
        .iter()
        .find(|t| t.contains("key=["))
        .unwrap_or_else(|| panic!("{results:?}"));
    assert!(line.contains(&format!("key=[{key}]")), "{line}");
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} in {line}"))
            .to_owned()
    };
    assert_eq!(field("mode"), "600", "{line}");
    assert_eq!(field("owner"), field("me"), "{line}");
    assert_ne!(field("me"), "0", "the agent is not root: {line}");
    assert_eq!(field("dir"), "700", "{line}");
    assert!(line.contains("agent@hangar-test.iam"), "{line}");
    let messages: Vec<_> = s
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/v1/messages"))
        .collect();
    assert!(!messages.is_empty());
    for r in &messages {
        assert_eq!(r.header("x-api-key"), Some(key), "{:?}", r.headers);
    }
    for r in &s.fake.all_requests() {
        let all = format!("{:?} {}", r.headers, r.all_text());
        assert!(!all.contains(SERVER_KEY), "the server's key: {all}");
    }
    // Gone with the turn.
    let (status, out) = s
        .call(
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["test", "-e", field("file")], "as": "hangar"})),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_ne!(out["status"], 0, "the key file outlived the turn: {out}");
    s.ok(&["sb", "rm", &sb]);
}

/// A one-shot turn (`HANGAR_LIVE_TURNS=false`: no driver to take the secrets file) in a local
/// sandbox: the control plane places the credentials itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_turn_gets_its_persons_credentials_in_a_sandbox() {
    if !common::is_root() {
        eprintln!("skipped: the uid split needs root");
        return;
    }
    let s = Server::start_with(
        shows_key_and_file(),
        vec![
            ("HANGAR_SERVER_CREDENTIALS".to_owned(), String::new()),
            ("HANGAR_LIVE_TURNS".to_owned(), "false".to_owned()),
        ],
        None,
    );
    credentials_in_a_sandbox(&s, "name: box\nprovider: local\nnetwork: host\n").await;
}

/// A Docker sandbox (the real dockerd): the driver in the container takes the secrets file
/// from the control folder it shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_turn_gets_its_persons_credentials() {
    if !common::is_root() {
        eprintln!("skipped: the uid split needs root");
        return;
    }
    let s = server(shows_key_and_file());
    let yaml = format!(
        "name: box\nprovider: docker\nimage: {}\nnetwork: host\n",
        common::docker_image()
    );
    credentials_in_a_sandbox(&s, &yaml).await;
}

/// Codex on Azure OpenAI with the environment's key: Codex's own Azure provider settings
/// (`env_key = "AZURE_OPENAI_API_KEY"`, the `api-version` query) point at the scripted model on
/// loopback; the key kept by the environment reaches the real Codex, which sends it with each
/// request, and the server's own key goes nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environments_azure_openai_key_reaches_codex() {
    let model = hangar_testkit::FakeOpenAi::start(Script::new([Step::text("on azure")])).unwrap();
    let s = codex_server();
    let key = "azure-key-hangar-test-91c3";
    set_all(
        &s,
        "environment=in-place",
        &[("AZURE_OPENAI_API_KEY", key.into())],
    )
    .await;
    let azure: Vec<String> = vec![
        r#"model_provider="azure""#.into(),
        r#"model_providers.azure.name="Azure""#.into(),
        format!(r#"model_providers.azure.base_url="{}""#, model.base_url()),
        r#"model_providers.azure.env_key="AZURE_OPENAI_API_KEY""#.into(),
        r#"model_providers.azure.query_params={api-version="2025-04-01-preview"}"#.into(),
        r#"model_providers.azure.wire_api="responses""#.into(),
        "model_providers.azure.request_max_retries=0".into(),
        "model_providers.azure.stream_max_retries=0".into(),
        r#"model="gpt-5.5""#.into(),
        "analytics.enabled=false".into(),
    ];
    let (turn, requests) = codex_turn(&s, &model, azure).await;
    for r in &requests {
        assert!(
            r.path.contains("api-version=2025-04-01-preview"),
            "{}",
            r.path
        );
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {key}").as_str()),
            "{:?}",
            r.headers
        );
    }
    for r in &model.all_requests() {
        let all = format!("{:?} {}", r.headers, r.all_text());
        assert!(!all.contains(SERVER_KEY), "the server's key: {all}");
    }
    assert_eq!(turn["status"], 0, "{turn}");
}

/// Codex settings for the scripted model as a provider whose key is read from `env_key`.
fn keyed_provider(base_url: &str, env_key: &str) -> Vec<String> {
    vec![
        r#"model_provider="mine""#.into(),
        format!(
            r#"model_providers.mine={{name="mine", base_url="{base_url}", wire_api="responses", env_key="{env_key}", request_max_retries=0, stream_max_retries=0}}"#
        ),
        r#"model="gpt-5.5""#.into(),
        "analytics.enabled=false".into(),
    ]
}

/// Issue 23, item 8: a model provider's key variable of any name (`--codex-config
/// model_providers.X.env_key=NAME`) reaches Codex from the person's credential of that name.
/// Without one the turn is refused before anything runs, saying what to set (Codex itself
/// would fail with "Missing environment variable"); a name that is hangar's own, steers the
/// harness's process or is an environment's registry login is refused too, so a session cannot
/// have the server hand it one of those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_key_variable_of_any_name_reaches_codex_or_the_turn_is_refused() {
    let model = hangar_testkit::FakeOpenAi::start(Script::new([Step::text("keyed")])).unwrap();
    let s = codex_server();
    let me = admin_email(&s).await;
    let start = async |config: Vec<String>| {
        let work = tempfile::tempdir().unwrap();
        s.call(
            "POST",
            "/v1/sessions",
            Some(
                json!({"dir": work.path(), "harness": "codex", "policy": "auto", "prompt": "hi",
                        "options": {"codex_config": config}}),
            ),
        )
        .await
    };
    let (status, refused) = start(keyed_provider(&model.base_url(), "MINE_MODEL_KEY")).await;
    assert_eq!(status, 400, "{refused}");
    let why = refused["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("MINE_MODEL_KEY") && why.contains("hangar credential set MINE_MODEL_KEY"),
        "{why}"
    );
    assert!(model.all_requests().is_empty(), "Codex ran");
    // ... and so is the environment's registry login, which only dockerd gets.
    for own in ["HANGAR_DATABASE_URL", "PATH", "DOCKER_REGISTRY_AUTH"] {
        let (status, refused) = start(keyed_provider(&model.base_url(), own)).await;
        assert_eq!(status, 400, "{own}: {refused}");
    }
    let (_, refused) = start(keyed_provider(&model.base_url(), "DOCKER_REGISTRY_AUTH")).await;
    let why = refused["error"]["message"].as_str().unwrap();
    assert!(why.contains("the environment's registry login"), "{why}");

    let key = "mine-key-hangar-test-5e1a";
    set_all(
        &s,
        &format!("person={me}"),
        &[("MINE_MODEL_KEY", key.into())],
    )
    .await;
    let (turn, requests) = codex_turn(
        &s,
        &model,
        keyed_provider(&model.base_url(), "MINE_MODEL_KEY"),
    )
    .await;
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {key}").as_str()),
            "{:?}",
            r.headers
        );
    }
    assert_eq!(turn["status"], 0, "{turn}");
}

/// A session's Codex provider settings are its owner's, and may point anywhere: when someone
/// else (an admin) sends a message into it, the provider's key still comes from the owner's
/// credential of that name, never from the sender's (whose key would go to the owner's
/// server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_key_is_the_sessions_owners_never_the_senders() {
    let model =
        hangar_testkit::FakeOpenAi::start(Script::new([Step::text("first"), Step::text("second")]))
            .unwrap();
    let s = codex_server();
    let me = admin_email(&s).await;
    let bob = member_token(&s, "bob@example.com");
    let (bobs, admins) = ("bob-key-hangar-test-1c", "admin-key-hangar-test-SECRET");
    set_all(
        &s,
        "person=bob@example.com",
        &[("SHARED_MODEL_KEY", bobs.into())],
    )
    .await;
    set_all(
        &s,
        &format!("person={me}"),
        &[("SHARED_MODEL_KEY", admins.into())],
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let (status, started) = as_token(
        &s,
        &bob,
        "POST",
        "/v1/sessions",
        json!({"dir": work.path(), "harness": "codex", "policy": "auto", "prompt": "hi",
               "options": {"codex_config": keyed_provider(&model.base_url(), "SHARED_MODEL_KEY")}}),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    let session = started["session"]["id"].as_str().unwrap();
    let (status, sent) = s
        .call(
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Some(json!({"text": "more, from the admin"})),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    let next = sent["turn"].as_str().unwrap_or_else(|| panic!("{sent}"));
    s.turn_ended(next).await;
    let all = model.all_requests();
    assert!(all.len() >= 2, "{all:?}");
    for r in &all {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {bobs}").as_str()),
            "{:?}",
            r.headers
        );
    }
}
