//! Sign-in with a real OpenID provider: `oidc-provider` (npm, installed by scripts/install-tools)
//! started on loopback by `tests/oidc/provider.mjs`, trusted by a real `hangar serve
//! --oidc-issuer`. The provider's login pages finish themselves as the person the test names
//! (`POST /test/login`), so a test drives the real redirects, cookies, codes, PKCE and device
//! codes of the provider without a form to fill; and it can doctor the next ID token it issues
//! (`POST /test/id-token`) as an attacker in the middle or a broken issuer would.
//!
//! The web page's sign-in runs in a real Chromium; the refusals drive the same flow over HTTP
//! (following the provider's redirects with its cookies) to reach the server's checks directly.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hangar_testkit::browser::{Browser, http_json};
use hangar_testkit::workspace_root;
use serde_json::{Value, json};

const CLIENT_ID: &str = "hangar-test";
const CLIENT_SECRET: &str = "a-client-secret-for-tests-only";
const WAIT: Duration = Duration::from_secs(60);

/// The provider, a process of this test's.
struct Provider {
    child: Child,
    issuer: String,
}

impl Provider {
    /// Node itself has been seen to hang while starting (its threads all asleep on futexes,
    /// nothing printed, for 15 minutes in a CI run): a start that says nothing within
    /// [`START_WAIT`] is killed and tried again.
    fn start() -> Provider {
        const START_WAIT: Duration = Duration::from_secs(30);
        const TRIES: usize = 3;
        let dir = workspace_root().join(".tools/npm/node_modules/oidc-provider");
        assert!(
            dir.join("package.json").exists(),
            "oidc-provider is not installed: run scripts/install-tools"
        );
        for _ in 0..TRIES {
            let mut child = Command::new("node")
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc/provider.mjs"))
                .env("OIDC_PROVIDER_DIR", &dir)
                .env("CLIENT_ID", CLIENT_ID)
                .env("CLIENT_SECRET", CLIENT_SECRET)
                .env("REDIRECT_URI", "http://127.0.0.1/ui/signin/callback")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("node (Node.js 20+) runs the OpenID provider");
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = out.read_line(&mut line);
                let _ = tx.send(line);
                // Whatever it says later is read (and dropped): a closed pipe would end it.
                std::io::copy(&mut out, &mut std::io::sink())
            });
            let Ok(line) = rx.recv_timeout(START_WAIT) else {
                eprintln!("the OpenID provider said nothing in {START_WAIT:?}: starting it again");
                let _ = child.kill();
                let _ = child.wait();
                continue;
            };
            let issuer = line
                .trim()
                .strip_prefix("issuer: ")
                .unwrap_or_else(|| panic!("the provider said {line:?}"))
                .to_owned();
            return Provider { child, issuer };
        }
        panic!("the OpenID provider did not start in {TRIES} tries");
    }

    /// Every login from now on signs in as `email`, its verification as given.
    fn login_as(&self, email: &str, verified: bool) {
        let (status, _) = http_json(
            "POST",
            &format!("{}/test/login", self.issuer),
            None,
            Some(&json!({"email": email, "email_verified": verified})),
        )
        .unwrap();
        assert_eq!(status, 200);
    }

    /// The provider rotates its signing key (see provider.mjs).
    fn rotate_key(&self) {
        let (status, _) = http_json(
            "POST",
            &format!("{}/test/rotate-key", self.issuer),
            None,
            Some(&json!({})),
        )
        .unwrap();
        assert_eq!(status, 200);
    }

    /// How many times the provider's key set was read.
    fn jwks_reads(&self) -> u64 {
        let (status, v) = http_json(
            "GET",
            &format!("{}/test/jwks-reads", self.issuer),
            None,
            None,
        )
        .unwrap();
        assert_eq!(status, 200);
        v["reads"].as_u64().unwrap()
    }

    /// The next ID token the provider issues is doctored so (see provider.mjs).
    fn doctor_next_id_token(&self, mode: &str) {
        let (status, _) = http_json(
            "POST",
            &format!("{}/test/id-token", self.issuer),
            None,
            Some(&json!({"mode": mode})),
        )
        .unwrap();
        assert_eq!(status, 200);
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `hangar serve` trusting the provider; alice is a member of it, ada its admin.
struct Hangar {
    home: tempfile::TempDir,
    child: Option<Child>,
    url: String,
    admin: String,
    /// The database and master key shared with other replicas, if any.
    shared: Option<(String, PathBuf)>,
}

/// How a test's `hangar serve` starts, beyond [`Hangar::start`].
#[derive(Default)]
struct Opts {
    create_members: bool,
    /// A database URL and master key file shared with another replica.
    shared: Option<(String, PathBuf)>,
    /// Extra environment of `hangar serve`.
    env: Vec<(&'static str, String)>,
}

/// A schema of its own on the test PostgreSQL (`HANGAR_TEST_DATABASE_URL`), dropped at the end.
struct PgSchema {
    base: String,
    schema: String,
}

impl PgSchema {
    fn new() -> PgSchema {
        let base = std::env::var("HANGAR_TEST_DATABASE_URL").unwrap_or_else(|_| {
            panic!(
                "HANGAR_TEST_DATABASE_URL is not set: the replica sign-in test never skips. Start \
                 the test database with `url=$(scripts/start-postgres) && export \"$url\"`."
            )
        });
        let mut b = [0u8; 6];
        getrandom::fill(&mut b).unwrap();
        let suffix: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let schema = format!("oidc_{}_{suffix}", std::process::id());
        psql(&base, &format!("CREATE SCHEMA {schema}"));
        PgSchema { base, schema }
    }

    fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}options=-c%20search_path%3D{}",
            self.base, self.schema
        )
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        psql(
            &self.base,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        );
    }
}

fn psql(url: &str, sql: &str) {
    let out = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qc", sql])
        .output()
        .expect("psql (Debian's postgresql-client) runs");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn driver_bin() -> PathBuf {
    std::env::var_os("HANGAR_DRIVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"))
}

impl Hangar {
    fn start(p: &Provider, create_members: bool) -> Hangar {
        Hangar::start_with(
            p,
            Opts {
                create_members,
                ..Opts::default()
            },
        )
    }

    fn start_with(p: &Provider, opts: Opts) -> Hangar {
        let create_members = opts.create_members;
        let mut h = Hangar {
            home: tempfile::tempdir().unwrap(),
            child: None,
            url: String::new(),
            admin: String::new(),
            shared: opts.shared,
        };
        // A replica of a shared database finds its people there already.
        let known = h
            .run(&["person", "list"])
            .stdout
            .windows(b"ada@example.com".len())
            .any(|w| w == b"ada@example.com");
        if !known {
            assert!(
                h.run(&["person", "add", "alice@example.com"])
                    .status
                    .success()
            );
            assert!(
                h.run(&["person", "add", "--admin", "ada@example.com"])
                    .status
                    .success()
            );
        }
        let out = h.run(&["token", "create", "--person", "ada@example.com"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        h.admin = last_line(&out.stdout);
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--oidc-issuer",
            &p.issuer,
            "--oidc-client-id",
            CLIENT_ID,
        ];
        if create_members {
            args.push("--oidc-create-members");
        }
        let mut child = h
            .hangar()
            .args(&args)
            .envs(opts.env)
            .env("HANGAR_OIDC_CLIENT_SECRET", CLIENT_SECRET)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        h.url = line
            .trim()
            .strip_prefix("listening: ")
            .unwrap_or_else(|| panic!("hangar serve said {line:?}"))
            .to_owned();
        h.child = Some(child);
        h
    }

    /// `hangar` with this server's home (the server's machine).
    fn hangar(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.home.path().join("hangar"))
            .env("HANGAR_DRIVER_BIN", driver_bin());
        if let Some((url, key)) = &self.shared {
            c.env("HANGAR_DATABASE_URL", url)
                .env("HANGAR_MASTER_KEY_FILE", key);
        }
        c
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.hangar().args(args).output().unwrap()
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        http_json(method, &format!("{}{path}", self.url), token, body.as_ref()).unwrap()
    }

    /// The tokens (all of them: ada is an admin).
    fn tokens(&self) -> Vec<Value> {
        let (s, v) = self.call("GET", "/v1/tokens", Some(&self.admin), None);
        assert_eq!(s, 200, "{v}");
        v["tokens"].as_array().unwrap().clone()
    }

    fn audit_actions(&self) -> Vec<Value> {
        let (s, v) = self.call("GET", "/v1/audit?limit=1000", Some(&self.admin), None);
        assert_eq!(s, 200, "{v}");
        v["records"].as_array().unwrap().clone()
    }
}

impl Drop for Hangar {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn last_line(out: &[u8]) -> String {
    String::from_utf8_lossy(out)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// A browser's part in the code flow, over HTTP: follows the provider's redirects (with its
/// cookies) from the authorization URL until it sends the browser back to hangar's callback,
/// whose query it returns.
fn authorize(authorize_url: &str) -> HashMap<String, String> {
    authorize_to(authorize_url).1
}

/// [`authorize`], with the callback URL the provider sent the browser to.
fn authorize_to(authorize_url: &str) -> (reqwest::Url, HashMap<String, String>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .unwrap();
        let mut cookies: HashMap<String, String> = HashMap::new();
        let mut url = authorize_url.to_owned();
        for _ in 0..20 {
            let cookie = cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ");
            let r = http
                .get(&url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            for c in r.headers().get_all("set-cookie") {
                let c = c.to_str().unwrap();
                let pair = c.split(';').next().unwrap();
                let (k, v) = pair.split_once('=').unwrap();
                cookies.insert(k.to_owned(), v.to_owned());
            }
            let status = r.status();
            let Some(to) = r
                .headers()
                .get("location")
                .map(|l| l.to_str().unwrap().to_owned())
            else {
                panic!(
                    "{url} answered {status} without a redirect: {}",
                    r.text().await.unwrap()
                );
            };
            let next = reqwest::Url::parse(&url).unwrap().join(&to).unwrap();
            if next.path() == "/ui/signin/callback" {
                let query = next.query_pairs().into_owned().collect();
                return (next, query);
            }
            url = next.to_string();
        }
        panic!("the provider never sent the browser back to hangar");
    })
}

/// Begins a web sign-in at hangar: (flow, state, authorization URL).
fn start_web(h: &Hangar) -> (String, String, String) {
    let (s, v) = h.call(
        "POST",
        "/v1/auth/oidc/start",
        None,
        Some(json!({"redirect_uri": format!("{}/ui/signin/callback", h.url)})),
    );
    assert_eq!(s, 200, "{v}");
    (
        v["flow"].as_str().unwrap().to_owned(),
        v["state"].as_str().unwrap().to_owned(),
        v["authorize_url"].as_str().unwrap().to_owned(),
    )
}

/// A whole web sign-in over HTTP: the status and answer of `/v1/auth/oidc/finish`.
fn web_sign_in(h: &Hangar) -> (u16, Value) {
    let (flow, state, url) = start_web(h);
    let back = authorize(&url);
    assert_eq!(
        back["state"], state,
        "the provider returns the state it was given"
    );
    h.call(
        "POST",
        "/v1/auth/oidc/finish",
        None,
        Some(json!({"flow": flow, "state": state, "code": back["code"]})),
    )
}

fn tokens_of<'a>(tokens: &'a [Value], email: &str) -> Vec<&'a Value> {
    tokens.iter().filter(|t| t["person"] == email).collect()
}

#[test]
fn a_verified_known_person_signs_in_over_http_and_gets_a_web_token_with_a_life() {
    let p = Provider::start();
    let h = Hangar::start(&p, false);
    let (s, cfg) = h.call("GET", "/v1/auth", None, None);
    assert_eq!(s, 200);
    assert_eq!(cfg["oidc"]["issuer"], p.issuer.as_str());
    assert_eq!(cfg["oidc"]["device_flow"], true);
    p.login_as("alice@example.com", true);
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["person"], "alice@example.com");
    assert_eq!(v["role"], "member");
    assert_eq!(v["added"], false);
    let token = v["token"].as_str().unwrap();
    let (s, me) = h.call("GET", "/v1/me", Some(token), None);
    assert_eq!(s, 200, "{me}");
    assert_eq!(me["person"], "alice@example.com");
    let all = h.tokens();
    let mine = tokens_of(&all, "alice@example.com");
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["name"], "web sign-in");
    let life = mine[0]["expires_at"].as_i64().unwrap() - mine[0]["created_at"].as_i64().unwrap();
    assert_eq!(life, 90 * 24 * 3600 * 1000, "the normal token life");
}

#[test]
fn an_unverified_email_is_refused_and_no_token_is_made() {
    let p = Provider::start();
    let h = Hangar::start(&p, true);
    p.login_as("alice@example.com", false);
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 403, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("not a verified email"), "{msg}");
    assert!(tokens_of(&h.tokens(), "alice@example.com").is_empty());
    // Not even added as a member, though the server adds unknown people.
    p.login_as("carol@example.com", false);
    let (s, _) = web_sign_in(&h);
    assert_eq!(s, 403);
    let (_, people) = h.call("GET", "/v1/people", Some(&h.admin), None);
    assert!(
        !people.to_string().contains("carol@example.com"),
        "{people}"
    );
    assert!(
        h.audit_actions()
            .iter()
            .any(|r| r["action"] == "signin.refused"),
        "the refusal is audited"
    );
}

#[test]
fn an_unknown_person_is_refused_by_default() {
    let p = Provider::start();
    let h = Hangar::start(&p, false);
    p.login_as("mallory@example.com", true);
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 403, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("is not a person here"), "{msg}");
    assert!(tokens_of(&h.tokens(), "mallory@example.com").is_empty());
    let (_, people) = h.call("GET", "/v1/people", Some(&h.admin), None);
    assert!(!people.to_string().contains("mallory"), "{people}");
}

#[test]
fn an_unknown_person_is_added_as_a_member_when_configured_but_a_removed_one_stays_out() {
    let p = Provider::start();
    let h = Hangar::start(&p, true);
    p.login_as("bob@example.com", true);
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["added"], true);
    assert_eq!(v["role"], "member", "never more than a member");
    let (_, people) = h.call("GET", "/v1/people", Some(&h.admin), None);
    let bob = people["people"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["email"] == "bob@example.com")
        .cloned()
        .unwrap();
    assert_eq!(bob["role"], "member");
    // An admin removes bob: signing in again does not bring him back.
    let (s, _) = h.call("DELETE", "/v1/people/bob@example.com", Some(&h.admin), None);
    assert_eq!(s, 200);
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("was removed"),
        "{v}"
    );
}

#[test]
fn a_doctored_id_token_is_refused_whatever_was_changed() {
    let p = Provider::start();
    let h = Hangar::start(&p, true);
    p.login_as("alice@example.com", true);
    for mode in [
        "tamper", "audience", "expired", "issuer", "nonce", "unsigned",
    ] {
        p.doctor_next_id_token(mode);
        let (s, v) = web_sign_in(&h);
        assert_eq!(s, 401, "{mode}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("ID token did not check out"), "{mode}: {msg}");
    }
    let all = h.tokens();
    assert!(tokens_of(&all, "alice@example.com").is_empty());
    assert!(tokens_of(&all, "mallory@example.com").is_empty());
    // The same provider, undoctored: the sign-in works (the refusals were the checks').
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 200, "{v}");
}

#[test]
fn a_callback_with_another_state_or_another_sign_ins_code_is_refused() {
    let p = Provider::start();
    let h = Hangar::start(&p, false);
    p.login_as("alice@example.com", true);
    // The state: an answer whose state is not the flow's.
    let (flow, state, url) = start_web(&h);
    let back = authorize(&url);
    let (s, v) = h.call(
        "POST",
        "/v1/auth/oidc/finish",
        None,
        Some(json!({"flow": flow, "state": format!("{state}x"), "code": back["code"]})),
    );
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("state"),
        "{v}"
    );
    // And the flow is spent: the right state afterwards does not revive it.
    let (s, _) = h.call(
        "POST",
        "/v1/auth/oidc/finish",
        None,
        Some(json!({"flow": flow, "state": state, "code": back["code"]})),
    );
    assert_eq!(s, 400);
    // A code obtained for sign-in A (an attacker's, say) presented in sign-in B: B's PKCE
    // verifier does not match A's challenge (and B's nonce is not in A's ID token).
    let (_flow_a, _state_a, url_a) = start_web(&h);
    let code_a = authorize(&url_a)["code"].clone();
    let (flow_b, state_b, _url_b) = start_web(&h);
    let (s, v) = h.call(
        "POST",
        "/v1/auth/oidc/finish",
        None,
        Some(json!({"flow": flow_b, "state": state_b, "code": code_a})),
    );
    assert_eq!(s, 401, "{v}");
    assert!(tokens_of(&h.tokens(), "alice@example.com").is_empty());
}

/// The browser's half of the device flow: opens the verification page with the code filled in
/// and continues; the provider's login finishes itself.
fn approve_device(b: &Browser, url: &str) {
    b.goto(url).unwrap();
    // The page posts the code itself (a script), then asks to confirm it.
    b.wait_for("button[autofocus]", WAIT).unwrap();
    b.click("button[autofocus]").unwrap();
    b.wait_js(
        "the provider's success page",
        "return document.body && /success/i.test(document.body.innerText) ? true : null;",
        json!([]),
        WAIT,
    )
    .unwrap();
}

#[test]
fn hangar_login_signs_in_with_the_device_flow_and_keeps_the_token_for_that_server() {
    let p = Provider::start();
    let h = Hangar::start(&p, false);
    p.login_as("alice@example.com", true);
    let client_home = tempfile::tempdir().unwrap();
    let config = client_home.path().join("config");
    // A client machine: no HANGAR_TOKEN, a hangar home with no local token.
    let client = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", client_home.path())
            .env("HANGAR_HOME", client_home.path().join("hangar"))
            .env("XDG_CONFIG_HOME", &config)
            .args(args);
        c
    };
    let mut login = client(&["login", &h.url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(login.stdout.take().unwrap());
    let mut said = String::new();
    let complete = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "hangar login said only {said:?}"
        );
        said.push_str(&line);
        if let Some(u) = line.trim().strip_prefix("or open: ") {
            break u.to_owned();
        }
    };
    assert!(
        said.contains(&format!("sign in at {}/device", p.issuer)),
        "{said}"
    );
    assert!(said.contains("code: "), "{said}");
    let b = Browser::start(1000, 800).unwrap();
    approve_device(&b, &complete);
    let status = login.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(status.success(), "hangar login: {said}{rest}");
    assert!(
        rest.contains("signed in to") && rest.contains("as alice@example.com"),
        "{rest}"
    );
    let hosts = config.join("hangar/hosts.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&hosts).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "only its owner reads the hosts file");
    let kept: Value = serde_json::from_slice(&std::fs::read(&hosts).unwrap()).unwrap();
    let token = kept["servers"][&h.url]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, me) = h.call("GET", "/v1/me", Some(&token), None);
    assert_eq!(s, 200);
    assert_eq!(me["person"], "alice@example.com");
    let mine = tokens_of(&h.tokens(), "alice@example.com")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["name"], "hangar login");
    // The CLI uses the kept token for that server: `token list` shows alice's own token.
    let out = client(&["token", "list", "--json"])
        .env("HANGAR_URL", &h.url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains(mine[0]["id"].as_str().unwrap()), "{listed}");

    // --token-stdin keeps a pasted token the same way (ada's, checked with the server first).
    let mut paste = client(&["login", &h.url, "--token-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(paste.stdin.take().unwrap(), "{}", h.admin).unwrap();
    let out = paste.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("as ada@example.com"));
    let kept: Value = serde_json::from_slice(&std::fs::read(&hosts).unwrap()).unwrap();
    assert_eq!(kept["servers"][&h.url]["token"], h.admin.as_str());
    // A token the server does not take is not kept.
    let mut bad = client(&["login", &h.url, "--token-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    writeln!(bad.stdin.take().unwrap(), "hgr_{}", "0".repeat(64)).unwrap();
    assert!(!bad.wait().unwrap().success());
    let kept: Value = serde_json::from_slice(&std::fs::read(&hosts).unwrap()).unwrap();
    assert_eq!(kept["servers"][&h.url]["token"], h.admin.as_str());
}

#[test]
fn the_web_page_signs_in_with_the_issuer_and_the_person_menu_makes_revokes_and_signs_out() {
    let p = Provider::start();
    let h = Hangar::start(&p, false);
    p.login_as("alice@example.com", true);
    let b = Browser::start(1200, 900).unwrap();
    b.goto(&format!("{}/", h.url)).unwrap();
    b.wait_for("#signin-oidc", WAIT).unwrap();
    let label = b.text("#signin-oidc").unwrap();
    assert_eq!(label, "Sign in with 127.0.0.1");
    // The paste-a-token form is still there beside it.
    assert!(b.find("#token").unwrap().is_some());
    b.click("#signin-oidc").unwrap();
    b.wait_js(
        "signed in as alice",
        "const w = document.querySelector('#who'); return w && w.innerText === 'alice@example.com' ? true : null;",
        json!([]),
        WAIT,
    )
    .unwrap();
    let at = b.url().unwrap();
    assert!(
        at.ends_with("/ui/sessions"),
        "the code left the address bar: {at}"
    );
    let web_token = b
        .js("return localStorage.getItem('hangar.token');", json!([]))
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(h.call("GET", "/v1/me", Some(&web_token), None).0, 200);

    // The person menu: who, their role, their tokens.
    b.click("#who").unwrap();
    b.wait_for("#person-email", WAIT).unwrap();
    assert_eq!(b.text("#person-email").unwrap(), "alice@example.com");
    assert_eq!(b.text("#person-role").unwrap(), "member");
    b.wait_js(
        "the token list",
        "return document.querySelectorAll('#tokens tr').length === 1 ? true : null;",
        json!([]),
        WAIT,
    )
    .unwrap();
    assert!(b.text("#tokens").unwrap().contains("web sign-in"));
    // Make a token: shown once, it works.
    b.type_into("#token-name", "laptop").unwrap();
    b.click("#new-token button[type=submit]").unwrap();
    b.wait_for("#token-created", WAIT).unwrap();
    let made = b.text("#token-created").unwrap();
    assert!(made.starts_with("hgr_"), "{made}");
    assert_eq!(h.call("GET", "/v1/me", Some(&made), None).0, 200);
    b.wait_js(
        "two tokens listed",
        "return document.querySelectorAll('#tokens tr').length === 2 ? true : null;",
        json!([]),
        WAIT,
    )
    .unwrap();
    // Revoke it from the page: refused at once.
    let laptop = tokens_of(&h.tokens(), "alice@example.com")
        .into_iter()
        .find(|t| t["name"] == "laptop")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    b.click(&format!("#tokens tr[data-id='{laptop}'] button.revoke"))
        .unwrap();
    b.wait_js(
        "one token listed",
        "return document.querySelectorAll('#tokens tr').length === 1 ? true : null;",
        json!([]),
        WAIT,
    )
    .unwrap();
    assert_eq!(h.call("GET", "/v1/me", Some(&made), None).0, 401);
    // Sign out: the page's token is revoked on the server, not only forgotten.
    b.click("#person-signout").unwrap();
    b.wait_for("#signin", WAIT).unwrap();
    assert_eq!(h.call("GET", "/v1/me", Some(&web_token), None).0, 401);
}

#[test]
fn a_web_sign_in_begun_on_one_replica_finishes_on_another_and_only_once() {
    let p = Provider::start();
    let db = PgSchema::new();
    let keys = tempfile::tempdir().unwrap();
    let shared = Some((db.url(), keys.path().join("master.key")));
    let a = Hangar::start_with(
        &p,
        Opts {
            shared: shared.clone(),
            ..Opts::default()
        },
    );
    let b = Hangar::start_with(
        &p,
        Opts {
            shared,
            ..Opts::default()
        },
    );
    p.login_as("alice@example.com", true);
    // Begun on A (the PKCE verifier and nonce stay on the server side), the issuer's answer
    // comes back to B: B finishes it with the state A kept.
    let (flow, state, url) = start_web(&a);
    let back = authorize(&url);
    let finish = json!({"flow": flow, "state": state, "code": back["code"]});
    let (s, v) = b.call("POST", "/v1/auth/oidc/finish", None, Some(finish.clone()));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["person"], "alice@example.com");
    assert_eq!(b.call("GET", "/v1/me", v["token"].as_str(), None).0, 200);
    assert_eq!(a.call("GET", "/v1/me", v["token"].as_str(), None).0, 200);
    // The same state again, on either replica: refused, and no second token.
    for h in [&a, &b] {
        let (s, v) = h.call("POST", "/v1/auth/oidc/finish", None, Some(finish.clone()));
        assert_eq!(s, 400, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no web sign-in"),
            "{v}"
        );
    }
    assert_eq!(tokens_of(&a.tokens(), "alice@example.com").len(), 1);

    // A device sign-in begun on A is polled on B once the person approved it; A's poll after
    // that finds it finished.
    let (s, started) = a.call("POST", "/v1/auth/device", None, None);
    assert_eq!(s, 200, "{started}");
    let complete = started["verification_uri_complete"].as_str().unwrap();
    let browser = Browser::start(1000, 800).unwrap();
    approve_device(&browser, complete);
    let poll = json!({"flow": started["flow"]});
    let signed_in = loop {
        let (s, v) = b.call("POST", "/v1/auth/device/poll", None, Some(poll.clone()));
        assert_eq!(s, 200, "{v}");
        if !v["signed_in"].is_null() {
            break v["signed_in"].clone();
        }
    };
    assert_eq!(signed_in["person"], "alice@example.com");
    let (s, v) = a.call("POST", "/v1/auth/device/poll", None, Some(poll));
    assert_eq!(s, 400, "{v}");
    assert_eq!(tokens_of(&a.tokens(), "alice@example.com").len(), 2);
}

#[test]
fn a_rotated_issuer_key_is_read_again_but_not_for_every_unknown_key_id() {
    let p = Provider::start();
    let h = Hangar::start(&p, false);
    p.login_as("alice@example.com", true);
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 200, "{v}");
    let reads = p.jwks_reads();
    // The issuer rotates its key: its next ID token names a key hangar has not read. hangar
    // reads the key set again and the sign-in goes through.
    p.rotate_key();
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 200, "{v}");
    assert_eq!(p.jwks_reads(), reads + 1, "the key set was read again once");
    // A token naming a key the issuer does not have either (a forger's): refused, and within a
    // minute of the last read the key set is not read again for it.
    for _ in 0..2 {
        p.doctor_next_id_token("unknown-kid");
        let (s, v) = web_sign_in(&h);
        assert_eq!(s, 401, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("ID token did not check out"),
            "{v}"
        );
    }
    assert_eq!(p.jwks_reads(), reads + 1, "no read per unknown key id");
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 200, "{v}");
}

#[test]
fn behind_a_proxy_the_issuer_sends_the_browser_back_to_the_public_url() {
    let p = Provider::start();
    // The proxy's address (any loopback port is one the provider takes for this client): not
    // the address the test reaches hangar serve at.
    let public = "http://127.0.0.1:9";
    let h = Hangar::start_with(
        &p,
        Opts {
            env: vec![("HANGAR_PUBLIC_URL", public.to_owned())],
            ..Opts::default()
        },
    );
    p.login_as("alice@example.com", true);
    let (flow, state, url) = start_web(&h);
    let (back_to, back) = authorize_to(&url);
    assert_eq!(
        format!("{}://{}", back_to.scheme(), back_to.authority()),
        public,
        "the issuer sent the browser to the public URL, not {back_to}"
    );
    let (s, v) = h.call(
        "POST",
        "/v1/auth/oidc/finish",
        None,
        Some(json!({"flow": flow, "state": state, "code": back["code"]})),
    );
    assert_eq!(s, 200, "{v}");
    // A public URL that is not one is refused at start, saying what is wrong.
    let out = h
        .hangar()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--oidc-issuer",
            &p.issuer,
            "--oidc-client-id",
            CLIENT_ID,
            "--public-url",
            "https://hangar.example.com/some/path",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--public-url") && err.contains("no path"),
        "{err}"
    );
}

#[test]
fn an_issuers_email_in_another_case_is_the_same_person() {
    let p = Provider::start();
    let h = Hangar::start(&p, false);
    p.login_as("Alice@Example.COM", true);
    let (s, v) = web_sign_in(&h);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["person"], "alice@example.com");
    let (s, me) = h.call("GET", "/v1/me", v["token"].as_str(), None);
    assert_eq!(s, 200);
    assert_eq!(me["person"], "alice@example.com");
    assert_eq!(tokens_of(&h.tokens(), "alice@example.com").len(), 1);
}
