//! Issue 20, Deliver 7, in sandboxes: a governed Claude Code turn (the real CLI, the scripted
//! model, the real driver and Tower hook) in a local sandbox with the uid split and in a Docker
//! sandbox reaches an HTTPS Tower (`TowerDouble::start_tls`) whose certificate a private CA
//! (`TestCa`) signed, trusting the control plane's `HANGAR_CA_FILE`, which hangar copies into the
//! sandbox (the sandbox does not see the server's path). Both ways a turn asks Tower are run: the
//! Claude Code hook, as the agent, and the driver's Tower client under policy `governed`, as
//! hangar's user. Tower's answer decides the tool call. Without that CA, or with another CA's,
//! every call fails closed: the tool does not run and Tower never sees a request.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{Server, hook_bin, is_root};
use hangar_testkit::{Script, Step, TestCa, TowerAnswer, TowerDouble};
use serde_json::json;

/// The Tower double over TLS with a certificate of its own CA for 127.0.0.1, and a second CA
/// that signed nothing of it: (double, its CA, the other CA).
fn https_tower(dir: &Path) -> (TowerDouble, PathBuf, PathBuf) {
    let (mine, other) = (dir.join("ca"), dir.join("other-ca"));
    std::fs::create_dir(&mine).unwrap();
    std::fs::create_dir(&other).unwrap();
    let ca = TestCa::make(&mine, "IP:127.0.0.1").unwrap();
    let wrong = TestCa::make(&other, "IP:127.0.0.1").unwrap();
    let t = TowerDouble::start_tls(&ca.cert, &ca.key).unwrap();
    assert!(t.url().starts_with("https://"), "{}", t.url());
    (t, ca.ca, wrong.ca)
}

/// The server's variables: Tower at `url`, its key in the vault as `tower`, the hook binary,
/// and `HANGAR_CA_FILE` when `ca` is given.
fn tower_env(url: &str, ca: Option<&Path>) -> Vec<(String, String)> {
    let mut env = vec![
        ("HANGAR_GOVERNANCE_URL".to_owned(), url.to_owned()),
        (
            "HANGAR_GOVERNANCE_HOOK_CREDENTIAL".to_owned(),
            "tower".to_owned(),
        ),
        (
            "HANGAR_TOWER_HOOK_BIN".to_owned(),
            hook_bin().display().to_string(),
        ),
    ];
    if let Some(ca) = ca {
        env.push(("HANGAR_CA_FILE".to_owned(), ca.display().to_string()));
    }
    env
}

/// A Bash tool call, then the model's closing words: one turn's two model requests.
fn turn(cmd: &str, words: &str) -> [Step; 2] {
    [
        Step::tool("Bash", json!({"command": cmd, "description": words})),
        Step::text(words),
    ]
}

/// Makes a sandbox of a new environment `name` (`yaml`: the environment without its name) on
/// `repo`; its id and its workspace on this machine.
async fn sandbox(s: &Server, name: &str, yaml: &str, repo: &Path) -> (String, PathBuf) {
    let env = s.home.path().join(format!("{name}.yaml"));
    std::fs::write(&env, format!("name: {name}\n{yaml}")).unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        name,
        "--repo",
        repo.to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("sandbox: ")
        .unwrap()
        .to_owned();
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    (sb, ws)
}

/// Starts one turn of a session in `sb`: the first (`session` is `None`: started with
/// `policy`) or the next. The session's id and the turn's.
async fn start_turn(
    s: &Server,
    sb: &str,
    session: Option<&str>,
    policy: &str,
    prompt: &str,
) -> (String, String) {
    match session {
        None => {
            let (status, started) = s
                .call(
                    "POST",
                    "/v1/sessions",
                    Some(json!({"sandbox": sb, "policy": policy, "prompt": prompt})),
                )
                .await;
            assert_eq!(status, 201, "{started}");
            (
                started["session"]["id"].as_str().unwrap().to_owned(),
                started["turn"]["id"].as_str().unwrap().to_owned(),
            )
        }
        Some(id) => {
            let out = s.ok(&["send", id, prompt]);
            let run = out
                .lines()
                .find_map(|l| l.strip_prefix("run: "))
                .unwrap_or_else(|| panic!("{out}"))
                .to_owned();
            let (_, r) = s.call("GET", &format!("/v1/runs/{run}"), None).await;
            (id.to_owned(), r["turn_id"].as_str().unwrap().to_owned())
        }
    }
}

/// Waits for `turn` to end; the tool call's result as the model saw it (text, whether an
/// error): in the model's last request of the turn (the conversation grows: the newest result
/// is the last one).
async fn finish_turn(s: &Server, turn: &str) -> (String, bool) {
    let t = s.turn_ended(turn).await;
    assert_eq!(t["status"], 0, "{t}");
    let reqs = s.fake.requests();
    let results = reqs.last().unwrap().tool_results();
    let (_, text, err) = results.last().cloned().expect("a tool result");
    (text, err)
}

/// [`start_turn`], then [`finish_turn`]: the session's id, the tool call's result.
async fn run_turn(
    s: &Server,
    sb: &str,
    session: Option<&str>,
    policy: &str,
    prompt: &str,
) -> (String, String, bool) {
    let (session, turn) = start_turn(s, sb, session, policy, prompt).await;
    let (text, err) = finish_turn(s, &turn).await;
    (session, text, err)
}

/// `HANGAR_CA_FILE` from now on (`None`: unset): `hangar serve` restarted with it.
fn trust(s: &mut Server, tower: &TowerDouble, ca: Option<&Path>) {
    s.env = tower_env(&tower.url(), ca);
    s.restart();
}

/// The whole story in a sandbox of `provider` (an environment's YAML without its name and
/// governance): with the CA, the hook (as the agent) and policy governed (the driver's client)
/// each reach Tower over TLS, whose allow runs the tool and whose deny does not; the agent can
/// read the CA's copy but not change it. Without the CA, and with another CA, the tool does not
/// run and Tower sees no request.
async fn tls_turns_in(provider: &str) {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let dir = tempfile::tempdir().unwrap();
    let (tower, ca, wrong) = https_tower(dir.path());
    // Each turn: a tool call, then the model's words, whether the call ran or not.
    let mut steps = Vec::new();
    // The first call waits, once allowed, for the test to look at the sandbox (`go`).
    steps.extend(turn(
        "while [ ! -e go ]; do sleep 0.1; done; echo one > one.txt",
        "hook allowed",
    ));
    steps.extend(turn("echo two > two.txt", "hook denied"));
    steps.extend(turn("echo three > three.txt", "governed allowed"));
    steps.extend(turn("echo four > four.txt", "governed denied"));
    for n in ["five", "six", "seven", "eight"] {
        steps.extend(turn(&format!("echo {n} > {n}.txt"), n));
    }
    let mut s = Server::start_with(
        Script::new(steps),
        tower_env(&tower.url(), Some(&ca)),
        Some(("tower", hangar_testkit::TOWER_KEY)),
    );
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let (hooked, hooked_ws) = sandbox(
        &s,
        "hooked",
        &format!("{provider}governance: {{hook: required}}\n"),
        repo.path(),
    )
    .await;
    let (governed, governed_ws) = sandbox(&s, "governed", provider, repo.path()).await;

    // The hook, as the agent, with the CA: Tower's allow runs the tool.
    let (hook_session, turn1) = start_turn(&s, &hooked, None, "ask", "one").await;
    common::until("the hook's call to reach Tower", async || {
        if !tower.calls().is_empty() {
            return Some(());
        }
        let (_, t) = s.call("GET", &format!("/v1/turns/{turn1}"), None).await;
        if t["state"] == "ended" {
            let (text, _) = finish_turn(&s, &turn1).await;
            panic!("the turn ended and Tower never got the call: {text}");
        }
        None
    })
    .await;
    // While the allowed call runs: the run's copy of the control plane's CA is in the sandbox,
    // readable by the agent (the hook's user) and not changeable by it.
    let listed = s.ok(&[
        "sb",
        "exec",
        &hooked,
        "--as",
        "hangar",
        "--",
        "sh",
        "-c",
        "ls /var/lib/hangar/*.tower-ca.pem",
    ]);
    let run_ca = listed.trim().to_owned();
    assert!(
        run_ca.starts_with("/var/lib/hangar/run-") && !run_ca.contains('\n'),
        "one copy, the run's: {listed}"
    );
    let seen = s.ok(&["sb", "exec", &hooked, "--", "cat", &run_ca]);
    assert_eq!(
        seen.as_bytes(),
        std::fs::read(&ca).unwrap(),
        "the agent reads the CA"
    );
    let out = s
        .hangar()
        .args([
            "sb",
            "exec",
            &hooked,
            "--",
            "sh",
            "-c",
            "echo forged >> \"$1\"",
            "sh",
        ])
        .arg(&run_ca)
        .output()
        .unwrap();
    let after = s.ok(&[
        "sb", "exec", &hooked, "--as", "hangar", "--", "cat", &run_ca,
    ]);
    assert!(
        !out.status.success() && after.as_bytes() == std::fs::read(&ca).unwrap(),
        "the agent changed the CA the hook trusts: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(hooked_ws.join("go"), "").unwrap();
    let (text, err) = finish_turn(&s, &turn1).await;
    assert!(!err, "{text}");
    assert_eq!(
        std::fs::read_to_string(hooked_ws.join("one.txt")).unwrap(),
        "one\n"
    );
    let calls = tower.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].target, "/hooks/claude-code");
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some(format!("Bearer {}", hangar_testkit::TOWER_KEY).as_str())
    );
    // Tower's deny, over TLS, blocks it with Tower's reason.
    tower.set_answer(TowerAnswer::Deny("Tower says no over TLS".into()));
    let (_, text, err) = run_turn(&s, &hooked, Some(&hook_session), "ask", "two").await;
    assert!(err && text.contains("Tower says no over TLS"), "{text}");
    assert!(!hooked_ws.join("two.txt").exists(), "a denied call ran");
    assert_eq!(tower.calls().len(), 2);

    // Policy governed without the hook: the driver's Tower client, as hangar's user.
    tower.set_answer(TowerAnswer::Allow("fine".into()));
    let (gov_session, text, err) = run_turn(&s, &governed, None, "governed", "three").await;
    assert!(!err, "{text}");
    assert!(governed_ws.join("three.txt").exists());
    assert_eq!(tower.calls().last().unwrap().target, "/approvals");
    tower.set_answer(TowerAnswer::Deny("governed says no over TLS".into()));
    let (_, text, err) = run_turn(&s, &governed, Some(&gov_session), "governed", "four").await;
    assert!(err && text.contains("governed says no over TLS"), "{text}");
    assert!(!governed_ws.join("four.txt").exists(), "a denied call ran");
    let seen = tower.requests().len();
    tower.set_answer(TowerAnswer::Allow("would allow".into()));

    // No CA given, then another CA's: Tower's certificate does not check, nothing reaches it,
    // and the tool does not run, though Tower would allow it.
    let mut files = ["five", "six", "seven", "eight"].into_iter();
    for (what, trusted) in [("no CA", None), ("another CA", Some(wrong.as_path()))] {
        trust(&mut s, &tower, trusted);
        for (sb, session, policy, ws) in [
            (&hooked, &hook_session, "ask", &hooked_ws),
            (&governed, &gov_session, "governed", &governed_ws),
        ] {
            let n = files.next().unwrap();
            let (_, text, err) = run_turn(&s, sb, Some(session), policy, n).await;
            assert!(
                err && text.contains("failed the TLS check"),
                "{what}, {policy}: {text}"
            );
            assert!(
                !ws.join(format!("{n}.txt")).exists(),
                "{what}, {policy}: the tool ran"
            );
        }
    }
    assert_eq!(tower.requests().len(), seen, "a request reached Tower");

    // The run's copy of the CA goes with the run.
    let out = s.ok(&[
        "sb",
        "exec",
        &hooked,
        "--as",
        "hangar",
        "--",
        "ls",
        "/var/lib/hangar",
    ]);
    assert!(!out.contains("tower-ca.pem"), "the CA's copy stayed: {out}");
    s.ok(&["sb", "rm", &hooked]);
    s.ok(&["sb", "rm", &governed]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_turn_in_a_local_sandbox_reaches_an_https_tower_through_the_ca() {
    tls_turns_in("provider: local\nnetwork: host\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_turn_in_a_docker_sandbox_reaches_an_https_tower_through_the_ca() {
    // The image with the pinned Claude Code in it: the turn runs the image's own CLI.
    let image = hangar_testkit::claude_image().unwrap();
    tls_turns_in(&format!(
        "provider: docker\nimage: {image}\nnetwork: host\n"
    ))
    .await;
}

/// `HANGAR_GOVERNANCE_HOOK_AUTH=passport` with an HTTPS Tower: the control plane exchanges the
/// sandbox's token at Tower's token endpoint trusting `HANGAR_CA_FILE` too, and the hook shows
/// the passport over TLS. Without the CA the exchange fails closed: no passport, so no turn, and
/// the refusal says the certificate did not check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_passport_is_exchanged_over_https_through_the_ca() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let dir = tempfile::tempdir().unwrap();
    let (tower, ca, _) = https_tower(dir.path());
    let env = |ca: Option<&Path>| {
        let mut env = tower_env(&tower.url(), ca);
        env.retain(|(k, _)| k != "HANGAR_GOVERNANCE_HOOK_CREDENTIAL");
        env.extend([
            ("HANGAR_GOVERNANCE_HOOK".to_owned(), "required".to_owned()),
            (
                "HANGAR_GOVERNANCE_HOOK_AUTH".to_owned(),
                "passport".to_owned(),
            ),
        ]);
        env
    };
    let mut s = Server::start_with(
        Script::new(turn("echo made > made.txt", "made")),
        env(None),
        None,
    );
    let keys: serde_json::Value = reqwest::get(format!("{}/.well-known/jwks.json", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Tower trusts this hangar's keys; its issuer is HANGAR_URL's default.
    tower.trust_keys("http://127.0.0.1:7700", keys);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let (sb, ws) = sandbox(&s, "gov", "provider: local\nnetwork: host\n", repo.path()).await;

    let (status, answer) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "x"})),
        )
        .await;
    let text = answer.to_string();
    assert!((400..500).contains(&status), "{status} {answer}");
    assert!(
        text.contains("no passport from Tower") && text.contains("certificate"),
        "{text}"
    );
    assert!(tower.requests().is_empty(), "a request reached Tower");
    assert!(s.fake.requests().is_empty(), "a harness ran");

    s.env = env(Some(&ca));
    s.restart();
    let (_, text, err) = run_turn(&s, &sb, None, "ask", "make it").await;
    assert!(!err, "{text}");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "made\n"
    );
    let issued: Vec<String> = tower
        .exchanges()
        .into_iter()
        .filter_map(|e| e.passport)
        .collect();
    let calls = tower.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let bearer = calls[0]
        .authorization
        .as_deref()
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap();
    assert!(
        issued.iter().any(|p| p == bearer),
        "the hook showed the passport"
    );
    s.ok(&["sb", "rm", &sb]);
}
