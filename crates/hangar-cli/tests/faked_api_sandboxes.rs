//! Kubernetes and E2B sandboxes through `hangar serve`, against faked APIs (hangar-fakecloud:
//! a fake Kubernetes API server and a fake E2B API on 127.0.0.1 whose pods and sandboxes are
//! containers of the local dockerd; no cluster or E2B account is reachable here). `sb create`,
//! `sb exec`, `sb rm` go through the provider the environment names; a turn that needs the Tower
//! hook is refused there (no uid split, T9), saying why, audited; without their configuration
//! the providers say what to set.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

#[path = "common/answers.rs"]
mod answers;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use hangar_fakecloud::FakeCloud;
use hangar_testkit::{
    FakeAnthropic, Script, Step, Terminal, claude_bin, claude_env, workspace_root,
};
use serde_json::{Value, json};

const E2B_KEY: &str = "e2b-key-for-the-fake";

fn driver_bin() -> PathBuf {
    std::env::var_os("HANGAR_DRIVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"))
}

fn image() -> String {
    std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into())
}

fn skip() -> bool {
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!(
            "HANGAR_TEST_DOCKER=0: the faked API tests (their pods are containers) are skipped"
        );
        return true;
    }
    false
}

struct Server {
    home: tempfile::TempDir,
    _model: FakeAnthropic,
    child: Option<Child>,
    url: String,
    env: Vec<(String, String)>,
}

impl Server {
    fn start(env: Vec<(String, String)>) -> Server {
        Server::start_in(tempfile::tempdir().unwrap(), env)
    }

    /// With `home` as its home's parent (`home/hangar`).
    fn start_in(home: tempfile::TempDir, env: Vec<(String, String)>) -> Server {
        Server::start_at(home, env, "127.0.0.1:0")
    }

    /// Listening on `listen`.
    fn start_at(home: tempfile::TempDir, env: Vec<(String, String)>, listen: &str) -> Server {
        let mut s = Server {
            home,
            _model: FakeAnthropic::start(Script::new([Step::text("never asked")])).unwrap(),
            child: None,
            url: String::new(),
            env,
        };
        let mut child = s
            .hangar()
            .args(["serve", "--listen", listen])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        s.url = line.trim().strip_prefix("listening: ").unwrap().to_owned();
        s.child = Some(child);
        s
    }

    fn hangar(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        let config = self.home.path().join("claude-config");
        std::fs::create_dir_all(&config).unwrap();
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.home.path().join("hangar"))
            .env("HANGAR_DRIVER_BIN", driver_bin())
            .env("HANGAR_CLAUDE_BIN", claude_bin().unwrap())
            .envs(claude_env(&self._model.base_url(), &config))
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if !self.url.is_empty() {
            c.env("HANGAR_URL", &self.url);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.hangar().args(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "hangar {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn apply(&self, yaml: &str) {
        let f = self.home.path().join("env.yaml");
        std::fs::write(&f, yaml).unwrap();
        self.ok(&["env", "apply", f.to_str().unwrap()]);
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let token = std::fs::read_to_string(self.home.path().join("hangar/token")).unwrap();
        let mut req = reqwest::Client::new()
            .request(method.parse().unwrap(), format!("{}{path}", self.url))
            .bearer_auth(token.trim());
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        answers::check(&self.url, method, path, status, &body).await;
        (status, body)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some()
            && let Ok(out) = self.hangar().args(["sb", "list"]).output()
        {
            // (Under the table's header, each sandbox by a prefix of its id.)
            for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
                if let Some(id) = line.split_whitespace().next() {
                    let _ = self.hangar().args(["sb", "rm", "--force", id]).output();
                }
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A `hangar serve` with the fake e2b API (and `extra` variables) and one e2b sandbox made
/// through it: the fake, the server, the repository it was made from, the sandbox's id.
fn e2b_sandbox(extra: &[(&str, &str)]) -> (FakeCloud, Server, tempfile::TempDir, String) {
    let fake = FakeCloud::start(E2B_KEY).unwrap();
    let mut vars = vec![
        ("HANGAR_E2B_API_KEY".to_owned(), E2B_KEY.to_owned()),
        ("HANGAR_E2B_URL".to_owned(), fake.url()),
        ("HANGAR_E2B_ENVD_URL".to_owned(), fake.envd_url()),
    ];
    vars.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let s = Server::start(vars);
    s.apply(&format!("name: cloud\nprovider: e2b\nimage: {}\n", image()));
    let repo = repo();
    let sb = create_sandbox(&s, &repo);
    (fake, s, repo, sb)
}

/// `hangar sb create --env cloud --repo REPO`: the new sandbox's id (its first line).
fn create_sandbox(s: &Server, repo: &tempfile::TempDir) -> String {
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "cloud",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    out.lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned()
}

fn repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    std::fs::create_dir(repo.path().join("src")).unwrap();
    std::fs::write(repo.path().join("src/main.rs"), "fn main() {}\n").unwrap();
    repo
}

/// `sb create`, `sb exec`, a refused turn, `sb rm`, for an environment of `yaml`.
async fn through_serve(fake: &FakeCloud, s: &Server, yaml: &str, provider: &str) {
    s.apply(yaml);
    let repo = repo();
    let sb = create_sandbox(s, &repo);
    assert_eq!(
        fake.containers_of(&sb).await.len(),
        1,
        "the sandbox is one pod or e2b sandbox of the fake"
    );
    let out = s.ok(&[
        "sb",
        "exec",
        &sb,
        "--",
        "sh",
        "-c",
        "cat README src/main.rs; pwd",
    ]);
    assert_eq!(out, "the repo\nfn main() {}\n/workspace\n");
    let out = s.run(&["sb", "exec", &sb, "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let (_, view) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    assert_eq!(view["sandbox"]["provider"], provider, "{view}");
    assert_eq!(
        view["sandbox"]["capabilities"]["uid_split"], false,
        "{view}"
    );

    // The Tower hook is required (HANGAR_GOVERNANCE_HOOK): no uid split, so the turn is refused.
    let (status, body) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "x"})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let why = format!("a {provider} sandbox runs the agent as the only uid");
    assert!(body.to_string().contains(&why), "{body}");
    let audit = s.ok(&["audit"]);
    assert!(
        audit
            .lines()
            .any(|l| l.contains("turn.refused") && l.contains(&why)),
        "{audit}"
    );

    s.ok(&["sb", "rm", &sb]);
    assert!(
        fake.containers_of(&sb).await.is_empty(),
        "sb rm left the pod or e2b sandbox"
    );
    let out = s.run(&["sb", "exec", &sb, "--", "true"]);
    assert!(!out.status.success(), "exec in a removed sandbox");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_kubernetes_and_e2b_sandboxes_through_serve() {
    if skip() {
        return;
    }
    let fake = FakeCloud::start(E2B_KEY).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig, "team-a").unwrap();
    let tower = hangar_testkit::TowerDouble::start().unwrap();
    let s = Server::start(vec![
        ("KUBECONFIG".into(), kubeconfig.display().to_string()),
        ("HANGAR_E2B_API_KEY".into(), E2B_KEY.into()),
        ("HANGAR_E2B_URL".into(), fake.url()),
        ("HANGAR_E2B_ENVD_URL".into(), fake.envd_url()),
        ("HANGAR_GOVERNANCE_HOOK".into(), "required".into()),
        ("HANGAR_GOVERNANCE_URL".into(), tower.url()),
    ]);
    through_serve(
        &fake,
        &s,
        &format!(
            "name: cloud\nprovider: kubernetes\nimage: {}\nresources: {{cpu: 0.5, memory: 256m}}\n",
            image()
        ),
        "kubernetes",
    )
    .await;
    // The pod was made in the kubeconfig's namespace, with the limits and the deny-all policy.
    let requests = fake.requests();
    assert!(
        requests
            .iter()
            .any(|r| r == "POST /api/v1/namespaces/team-a/pods"),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r == "POST /apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies"),
        "{requests:?}"
    );
    through_serve(
        &fake,
        &s,
        &format!("name: cloud\nprovider: e2b\nimage: {}\n", image()),
        "e2b",
    )
    .await;
    assert!(
        tower.calls().is_empty(),
        "Tower was asked about a refused turn"
    );
}

/// An e2b egress allowlist is E2B's firewall, weaker than hangar's proxy: refused unless the
/// environment says `enforcement: e2b-firewall`; then `sb create` warns and the audit keeps it;
/// and where Tower must be reached, its URL must use port 80 or 443 (E2B lets a listed name
/// through on those alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_an_e2b_allowlist_needs_its_enforcement_said_and_is_warned_about() {
    if skip() {
        return;
    }
    let fake = FakeCloud::start(E2B_KEY).unwrap();
    let e2b = vec![
        ("HANGAR_E2B_API_KEY".to_owned(), E2B_KEY.to_owned()),
        ("HANGAR_E2B_URL".to_owned(), fake.url()),
        ("HANGAR_E2B_ENVD_URL".to_owned(), fake.envd_url()),
    ];
    let s = Server::start(e2b.clone());
    let repo = repo();
    let create = |s: &Server| {
        s.run(&[
            "sb",
            "create",
            "--env",
            "cloud",
            "--repo",
            repo.path().to_str().unwrap(),
        ])
    };
    s.apply(&format!(
        "name: cloud\nprovider: e2b\nimage: {}\negress: {{allowlist: [127.0.0.1]}}\n",
        image()
    ));
    let out = create(&s);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("enforcement: e2b-firewall")
            && err.contains("8.8.8.8"),
        "{out:?}"
    );
    assert!(fake.e2b_created().is_empty(), "an e2b sandbox was made");

    s.apply(&format!(
        "name: cloud\nprovider: e2b\nimage: {}\negress: {{allowlist: [127.0.0.1], enforcement: e2b-firewall}}\n",
        image()
    ));
    let out = create(&s);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.lines().any(
            |l| l.starts_with("warning: egress.enforcement: e2b-firewall")
                && l.contains("DNS to 8.8.8.8 stays open")
                && l.contains("port 80")
        ),
        "{said}"
    );
    let audit = s.ok(&["audit"]);
    assert!(
        audit
            .lines()
            .any(|l| l.contains("sandbox.created") && l.contains("DNS to 8.8.8.8")),
        "{audit}"
    );
    assert_eq!(fake.e2b_created().len(), 1);
    drop(s);

    // Tower must be reached (the hook is required) at a port E2B would not let its name through.
    let tower = hangar_testkit::TowerDouble::start().unwrap();
    let mut env = e2b;
    env.push(("HANGAR_GOVERNANCE_HOOK".into(), "required".into()));
    env.push(("HANGAR_GOVERNANCE_URL".into(), tower.url()));
    let s = Server::start(env);
    s.apply(&format!(
        "name: cloud\nprovider: e2b\nimage: {}\negress: {{allowlist: [127.0.0.1], enforcement: e2b-firewall}}\n",
        image()
    ));
    let out = create(&s);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("only on port 80 or 443"),
        "{out:?}"
    );
    assert_eq!(fake.e2b_created().len(), 1, "an e2b sandbox was made");
    let audit = s.ok(&["audit"]);
    assert!(
        audit
            .lines()
            .any(|l| l.contains("sandbox.refused") && l.contains("port 80 or 443")),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_their_configuration_the_providers_say_what_to_set() {
    let s = Server::start(vec![(
        "KUBECONFIG".into(),
        "/nonexistent/kubeconfig".into(),
    )]);
    let repo = repo();
    for (yaml, want) in [
        (
            "name: cloud\nprovider: kubernetes\nimage: x\n".to_owned(),
            "KUBECONFIG",
        ),
        (
            "name: cloud\nprovider: e2b\n".to_owned(),
            "HANGAR_E2B_API_KEY",
        ),
    ] {
        s.apply(&yaml);
        let out = s.run(&[
            "sb",
            "create",
            "--env",
            "cloud",
            "--repo",
            repo.path().to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{yaml}: {err}");
    }
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> Option<String>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        match f() {
            None => return,
            Some(why) => assert!(
                std::time::Instant::now() < deadline,
                "{what} did not happen in {secs} s: {why}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The processes of sandbox `sb` running `tmux attach-session` (envd's PTY processes).
fn attach_processes(s: &Server, sb: &str) -> Vec<String> {
    let listed = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done";
    s.ok(&["sb", "exec", sb, "--as", "hangar", "--", "sh", "-c", listed])
        .lines()
        .filter(|l| l.contains("attach-session"))
        .map(str::to_owned)
        .collect()
}

impl Server {
    /// A request with `token`; the status and the body as text.
    async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        token: &str,
    ) -> (u16, String) {
        let mut req = reqwest::Client::new()
            .request(method.parse().unwrap(), format!("{}{path}", self.url))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    fn token(&self) -> String {
        std::fs::read_to_string(self.home.path().join("hangar/token"))
            .unwrap()
            .trim()
            .to_owned()
    }
}

/// `hangar sb attach` on an e2b sandbox goes through `hangar serve`, which starts envd's PTY
/// process itself and relays the terminal: the person types into a run's tmux session and sees
/// its output, a resize is followed, Ctrl-b d ends the attach with status 0. Hostile: no answer
/// (the attach, the relayed output, input, resize, end) holds envd's token; another person's
/// token is told the attach does not exist; a second reader is refused; a client that drops the
/// output stream leaves no `tmux attach` process in the sandbox (the fake's envd was sent
/// `SendSignal`); an unknown attach id is a JSON error saying what to do. Both ends audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_an_e2b_attach_is_relayed_by_serve_and_envds_token_never_leaves() {
    if skip() {
        return;
    }
    let (fake, s, _repo, sb) = e2b_sandbox(&[]);
    let tokens = fake.envd_tokens();
    assert_eq!(tokens.len(), 1, "one e2b sandbox, one envd token");
    let envd_token = tokens[0].clone();
    let leaks = |what: &str, text: &str| {
        assert!(
            !text.contains(&envd_token),
            "{what} holds envd's token: {text}"
        );
    };
    // A run's tmux session with a shell in it (a turn's holds its driver; the e2b turn test of
    // faked_api_turns.rs attaches to one of those).
    let run = "run-relayed";
    s.ok(&[
        "sb", "exec", &sb, "--as", "hangar", "--", "sh", "-c",
        "mkdir -p /run/hangar-tmux && tmux -S /run/hangar-tmux/default new-session -d -s run-relayed -x 80 -y 24 sh",
    ]);

    // The person's terminal: typing goes through, the output comes back, a resize is followed.
    let mut attach = s.hangar();
    attach.args(["sb", "attach", &sb, "--run", run]);
    let status = s.home.path().join("attach.status");
    let argv: Vec<String> = [
        "sh",
        "-c",
        "\"$@\"; echo $? > \"$0\"",
        status.to_str().unwrap(),
        "env",
    ]
    .map(str::to_owned)
    .into_iter()
    .chain(
        attach
            .get_envs()
            .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v?.to_str()?))),
    )
    .chain(std::iter::once(
        attach.get_program().to_string_lossy().into_owned(),
    ))
    .chain(attach.get_args().map(|a| a.to_string_lossy().into_owned()))
    .collect();
    let term = Terminal::start(s.home.path(), &argv, 100, 30).unwrap();
    wait_until("the attach", 60, || {
        let clients = s.ok(&[
            "sb",
            "exec",
            &sb,
            "--as",
            "hangar",
            "--",
            "tmux",
            "-S",
            "/run/hangar-tmux/default",
            "list-clients",
            "-F",
            "#{client_width}x#{client_height}",
        ]);
        (!clients.contains("100x"))
            .then(|| format!("clients: {clients:?}; screen: {}", term.screen()))
    });
    term.tmux(&["send-keys", "-t", "t", "echo relayed-$((6*7))", "Enter"])
        .unwrap();
    wait_until("the relayed output", 30, || {
        let screen = term.screen();
        (!screen.contains("relayed-42")).then_some(screen)
    });
    term.tmux(&["resize-window", "-t", "t", "-x", "120", "-y", "40"])
        .unwrap();
    wait_until("the resize", 30, || {
        let clients = s.ok(&[
            "sb",
            "exec",
            &sb,
            "--as",
            "hangar",
            "--",
            "tmux",
            "-S",
            "/run/hangar-tmux/default",
            "list-clients",
            "-F",
            "#{client_width}x#{client_height}",
        ]);
        (!clients.contains("120x40")).then_some(clients)
    });
    term.tmux(&["send-keys", "-t", "t", "C-b", "d"]).unwrap();
    wait_until("the end of `hangar sb attach` on detaching", 30, || {
        let written = std::fs::read_to_string(&status).unwrap_or_default();
        (!written.ends_with('\n')).then(|| term.screen())
    });
    assert_eq!(
        std::fs::read_to_string(&status).unwrap().trim(),
        "0",
        "{}",
        term.screen()
    );
    drop(term);

    // Through the API itself.
    let token = s.token();
    let (code, body) = s
        .raw(
            "POST",
            &format!("/v1/sandboxes/{sb}/attach"),
            Some(json!({"run": run, "cols": 90, "rows": 20})),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    leaks("the attach answer", &body);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["argv"], json!([]), "{answer}");
    assert!(answer.get("e2b_pty").is_none(), "{answer}");
    let aid = answer["attach"].as_str().unwrap().to_owned();

    // Another person's token: the attach does not exist for it.
    let out = s.ok(&["token", "create", "--person", "eve@example.com"]);
    let eve = out.lines().last().unwrap().trim().to_owned();
    for (method, path, body) in [
        ("GET", format!("/v1/attaches/{aid}/output"), None),
        (
            "POST",
            format!("/v1/attaches/{aid}/input"),
            Some(json!({"data": "ZXhpdAo="})),
        ),
        (
            "POST",
            format!("/v1/attaches/{aid}/resize"),
            Some(json!({"cols": 10, "rows": 10})),
        ),
        ("DELETE", format!("/v1/attaches/{aid}"), None),
    ] {
        let (code, text) = s.raw(method, &path, body, &eve).await;
        assert_eq!(
            code, 404,
            "{method} {path} with another person's token: {text}"
        );
        leaks("a refusal", &text);
    }

    // The owner reads the output and types; the answers hold no token.
    let mut output = reqwest::Client::new()
        .get(format!("{}/v1/attaches/{aid}/output", s.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(output.status(), 200);
    let (code, text) = s
        .raw("GET", &format!("/v1/attaches/{aid}/output"), None, &token)
        .await;
    assert_eq!(code, 409, "a second reader: {text}");
    let (code, text) = s
        .raw(
            "POST",
            &format!("/v1/attaches/{aid}/input"),
            Some(json!({"data": "ZWNobyBhcGktJCgoMyozKSkN"})),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{text}");
    leaks("the input answer", &text);
    let (code, text) = s
        .raw(
            "POST",
            &format!("/v1/attaches/{aid}/resize"),
            Some(json!({"cols": 100, "rows": 30})),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{text}");
    leaks("the resize answer", &text);
    let (code, text) = s
        .raw(
            "POST",
            &format!("/v1/attaches/{aid}/input"),
            Some(json!({})),
            &token,
        )
        .await;
    assert_eq!(code, 200, "a keepalive: {text}");
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !seen.contains("event: data") || !decoded(&seen).contains("api-9") {
        assert!(
            std::time::Instant::now() < deadline,
            "the relayed output: {seen}"
        );
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), output.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    leaks("the relayed output", &seen);
    assert_eq!(
        attach_processes(&s, &sb).len(),
        1,
        "the relayed attach's process"
    );

    // The client goes away: the attach ends, its process killed.
    drop(output);
    // The server notices at its next write to the stream: output or its SSE keepalive (10 s).
    wait_until("the end of an attach whose client went away", 60, || {
        let left = attach_processes(&s, &sb);
        (!left.is_empty()).then(|| format!("left running: {left:?}"))
    });
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.ends_with("/process.Process/SendSignal")),
        "{:?}",
        fake.requests()
    );
    let (code, text) = s
        .raw(
            "POST",
            &format!("/v1/attaches/{aid}/input"),
            Some(json!({"data": ""})),
            &token,
        )
        .await;
    assert_eq!(code, 404, "an ended attach: {text}");
    let (code, text) = s
        .raw("DELETE", "/v1/attaches/att-nonesuch", None, &token)
        .await;
    let err: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{text}"
    );
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("hangar sb attach"),
        "{text}"
    );

    let audit = s.ok(&["audit"]);
    leaks("the audit", &audit);
    assert!(
        audit.lines().any(|l| l.contains("sandbox.attach.ended")
            && l.contains(&aid)
            && l.contains("dropped the output stream")),
        "{audit}"
    );
    assert!(
        audit
            .lines()
            .any(|l| l.contains("sandbox.attach.ended") && l.contains("the process ended")),
        "{audit}"
    );

    // One API token may have 8 attaches live; the 9th is refused, saying how to end one;
    // another token's count is its own; once one ends there is room again.
    let open = |token: String| {
        let path = format!("/v1/sandboxes/{sb}/attach");
        let s = &s;
        async move {
            s.raw("POST", &path, Some(json!({"run": run})), &token)
                .await
        }
    };
    let mut opened = Vec::new();
    for _ in 0..8 {
        let (code, body) = open(token.clone()).await;
        assert_eq!(code, 200, "{body}");
        let a: Value = serde_json::from_str(&body).unwrap();
        opened.push(a["attach"].as_str().unwrap().to_owned());
    }
    let (code, body) = open(token.clone()).await;
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("DELETE /v1/attaches/") && msg.contains("hangar sb attach"),
        "{body}"
    );
    // Another token's count is its own: an admin's (a member like eve may not attach to
    // another person's sandbox at all).
    s.ok(&["person", "add", "--admin", "ops@example.com"]);
    let ops = s.ok(&["token", "create", "--person", "ops@example.com"]);
    let ops = ops.lines().last().unwrap().trim().to_owned();
    let (code, body) = open(eve.clone()).await;
    assert_eq!(code, 403, "a member's attach to another's sandbox: {body}");
    let (code, body) = open(ops).await;
    assert_eq!(code, 200, "another token's attach: {body}");
    let (code, text) = s
        .raw(
            "DELETE",
            &format!("/v1/attaches/{}", opened[0]),
            None,
            &token,
        )
        .await;
    assert_eq!(code, 200, "{text}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, body) = open(token.clone()).await;
        if code == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no room after an attach ended: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    s.ok(&["sb", "rm", &sb]);
}

/// Keepalives for an attach (every half second) until dropped.
struct Keepalive(tokio::task::JoinHandle<()>);

impl Drop for Keepalive {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn keepalive(s: &Server, aid: &str) -> Keepalive {
    let (url, token, aid) = (s.url.clone(), s.token(), aid.to_owned());
    Keepalive(tokio::spawn(async move {
        loop {
            let _ = reqwest::Client::new()
                .post(format!("{url}/v1/attaches/{aid}/input"))
                .bearer_auth(&token)
                .json(&json!({"data": ""}))
                .send()
                .await;
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }))
}

/// How many `SendSignal` calls the fake's envd was sent.
fn signals(fake: &FakeCloud) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.ends_with("/process.Process/SendSignal"))
        .count()
}

/// What the SSE text's `data` lines decode to, joined.
fn decoded(sse: &str) -> String {
    use base64::Engine;
    let mut out = Vec::new();
    for line in sse.lines() {
        if let Some(d) = line.strip_prefix("data: ")
            && let Ok(b) = base64::engine::general_purpose::STANDARD.decode(d.trim())
        {
            out.extend(b);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A relayed attach whose client keeps its output stream open but stops sending keepalives
/// ends at the idle limit (`HANGAR_ATTACH_IDLE_SECS`, here 3 s), saying so on the stream, its
/// PTY process killed; while the keepalives come it lives on past the limit. A client that
/// never reads the output of a terminal that prints without end is ended at the limit too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_an_e2b_attach_without_keepalives_ends_and_kills_its_process() {
    if skip() {
        return;
    }
    let (fake, s, _repo, sb) = e2b_sandbox(&[("HANGAR_ATTACH_IDLE_SECS", "3")]);
    s.ok(&[
        "sb", "exec", &sb, "--as", "hangar", "--", "sh", "-c",
        "mkdir -p /run/hangar-tmux && tmux -S /run/hangar-tmux/default new-session -d -s run-idle sh",
    ]);
    let token = s.token();
    let (code, body) = s
        .raw(
            "POST",
            &format!("/v1/sandboxes/{sb}/attach"),
            Some(json!({"run": "run-idle"})),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["keepalive_secs"], 1, "{answer}");
    let aid = answer["attach"].as_str().unwrap().to_owned();
    let mut output = reqwest::Client::new()
        .get(format!("{}/v1/attaches/{aid}/output", s.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(output.status(), 200);
    // Keepalives for twice the limit: the attach lives on.
    for _ in 0..6 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let (code, text) = s
            .raw(
                "POST",
                &format!("/v1/attaches/{aid}/input"),
                Some(json!({"data": ""})),
                &token,
            )
            .await;
        assert_eq!(code, 200, "a keepalive: {text}");
    }
    let alive = keepalive(&s, &aid);
    assert_eq!(attach_processes(&s, &sb).len(), 1, "the attach's process");
    drop(alive);
    // Then none: the stream says why it ended, and it ends.
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the stream did not end: {seen}"
        );
        match tokio::time::timeout(std::time::Duration::from_secs(30), output.chunk())
            .await
            .unwrap()
            .unwrap()
        {
            Some(c) => seen.push_str(&String::from_utf8_lossy(&c)),
            None => break,
        }
    }
    assert!(
        seen.contains("event: ended") && seen.contains("no input, no keepalive"),
        "{seen}"
    );
    wait_until("the kill of the quiet attach's process", 30, || {
        let left = attach_processes(&s, &sb);
        (!left.is_empty()).then(|| format!("left running: {left:?}"))
    });
    let audit = s.ok(&["audit"]);
    assert!(
        audit.lines().any(|l| l.contains("sandbox.attach.ended")
            && l.contains(&aid)
            && l.contains("no keepalive")),
        "{audit}"
    );

    // A client that opens an attach and never reads its output, while the terminal prints
    // without end (the relay's output channel fills): it ends at the idle limit all the same.
    let tmux = |keys: &[&str]| {
        let mut argv = vec![
            "sb",
            "exec",
            &sb,
            "--as",
            "hangar",
            "--",
            "tmux",
            "-S",
            "/run/hangar-tmux/default",
            "send-keys",
            "-t",
            "run-idle",
        ];
        argv.extend_from_slice(keys);
        s.ok(&argv);
    };
    tmux(&["yes busy-printing", "Enter"]);
    let before = signals(&fake);
    let (code, body) = s
        .raw(
            "POST",
            &format!("/v1/sandboxes/{sb}/attach"),
            Some(json!({"run": "run-idle"})),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let unread: Value = serde_json::from_str(&body).unwrap();
    let unread = unread["attach"].as_str().unwrap().to_owned();
    wait_until("the kill of an unread attach's process", 30, || {
        (signals(&fake) == before).then(|| format!("{:?}", fake.requests()))
    });
    wait_until("the audited end of an unread attach", 30, || {
        let audit = s.ok(&["audit"]);
        (!audit.lines().any(|l| {
            l.contains("sandbox.attach.ended") && l.contains(&unread) && l.contains("no keepalive")
        }))
        .then_some(audit)
    });
    tmux(&["C-c"]);

    // `hangar serve` stopping (SIGTERM) ends a live attach first, its process killed; the open
    // output stream does not hold the server up.
    let (code, body) = s
        .raw(
            "POST",
            &format!("/v1/sandboxes/{sb}/attach"),
            Some(json!({"run": "run-idle"})),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let aid: Value = serde_json::from_str(&body).unwrap();
    let aid = aid["attach"].as_str().unwrap().to_owned();
    let mut output = reqwest::Client::new()
        .get(format!("{}/v1/attaches/{aid}/output", s.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(output.status(), 200);
    let alive = keepalive(&s, &aid);
    assert_eq!(attach_processes(&s, &sb).len(), 1, "the attach's process");
    drop(alive);
    let mut s = s;
    let mut child = s.child.take().unwrap();
    // SAFETY: a signal to the server this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let mut seen = String::new();
    while let Ok(Ok(Some(c))) =
        tokio::time::timeout(std::time::Duration::from_secs(30), output.chunk()).await
    {
        seen.push_str(&String::from_utf8_lossy(&c));
    }
    assert!(seen.contains("hangar serve is stopping"), "{seen}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "hangar serve did not stop on SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Nothing listens there: the commands below serve the API in-process.
    s.url = "http://127.0.0.1:9".into();
    assert!(
        attach_processes(&s, &sb).is_empty(),
        "left running after the server stopped"
    );
    let audit = s.ok(&["audit"]);
    assert!(
        audit.lines().any(|l| l.contains("sandbox.attach.ended")
            && l.contains(&aid)
            && l.contains("hangar serve is stopping")),
        "{audit}"
    );
    s.ok(&["sb", "rm", &sb]);
}

/// A schema of its own on the test PostgreSQL (`HANGAR_TEST_DATABASE_URL`, which CI sets: this
/// test never skips for want of it): the URL to give `hangar serve`; the schema is dropped with
/// the guard.
struct PgSchema {
    base: String,
    schema: String,
}

impl PgSchema {
    fn new() -> PgSchema {
        let base = std::env::var("HANGAR_TEST_DATABASE_URL").unwrap_or_else(|_| {
            panic!(
                "HANGAR_TEST_DATABASE_URL is not set: start the test database with `url=$(scripts/start-postgres) && export \"$url\"`"
            )
        });
        let schema = format!("attach_{}_{}", std::process::id(), rand_hex());
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

fn rand_hex() -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
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

/// Reads `stream` (a relayed output) until what it shows holds `want`.
async fn read_until(stream: &mut reqwest::Response, want: &str) -> String {
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !decoded(&seen).contains(want) {
        assert!(
            std::time::Instant::now() < deadline,
            "{want} in the relayed output: {}",
            decoded(&seen)
        );
        match tokio::time::timeout(std::time::Duration::from_secs(30), stream.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("the relayed output ended ({other:?}) before {want}: {seen}"),
        }
    }
    seen
}

/// Relayed attaches survive the loss of the replica that opened them (issue 24, item 3): two
/// `hangar serve` replicas with homes of their own share a PostgreSQL; an attach opened through
/// A is read and typed into through B (which passes each request on to A); A is killed with
/// SIGKILL; the client asks B again (503s saying why while A's lease holds, never anything
/// else), B joins the same PTY process through envd's `Connect` and relays it: what is typed
/// then comes back. Another person's token is still told the attach does not exist, and ending
/// it through B kills its process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_a_relayed_attach_outlives_the_replica_that_opened_it() {
    if skip() {
        return;
    }
    let Replicas {
        _db,
        fake,
        mut a,
        b,
        sb,
        aid,
        token,
    } = Replicas::start(&[]).await;
    let client = reqwest::Client::new();
    let output = |url: String| {
        let (client, token, aid) = (client.clone(), token.clone(), aid.clone());
        async move {
            client
                .get(format!("{url}/v1/attaches/{aid}/output"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
        }
    };
    let typed = |text: &str| json!({"data": base64_of(text)});
    // Through B while A lives: passed on to A.
    let mut out = output(b.url.clone()).await;
    assert_eq!(out.status(), 200);
    let (code, text) = b
        .raw(
            "POST",
            &format!("/v1/attaches/{aid}/input"),
            Some(typed("echo before-$((6*7))\r")),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{text}");
    read_until(&mut out, "before-42").await;
    assert_eq!(attach_processes(&a, &sb).len(), 1);
    // The stream through B goes away (as if B had): the client asks A at once, before A has
    // noticed; the newest reader takes the output over, and the attach goes on.
    drop(out);
    let mut out = output(a.url.clone()).await;
    assert_eq!(
        out.status(),
        200,
        "{}",
        out.text().await.unwrap_or_default()
    );
    let (code, text) = a
        .raw(
            "POST",
            &format!("/v1/attaches/{aid}/input"),
            Some(typed("echo again-$((6*7))\r")),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{text}");
    read_until(&mut out, "again-42").await;

    // A dies.
    let mut a_child = a.child.take().unwrap();
    a_child.kill().unwrap();
    a_child.wait().unwrap();
    drop(out);
    // B takes it over once A's lease has run out; until then it says it cannot reach A.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut out = loop {
        let r = output(b.url.clone()).await;
        match r.status().as_u16() {
            200 => break r,
            503 => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "B never took the attach over"
                );
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
            other => panic!(
                "asking B for the output: {other} {}",
                r.text().await.unwrap()
            ),
        }
    };
    let (code, text) = b
        .raw(
            "POST",
            &format!("/v1/attaches/{aid}/input"),
            Some(typed("echo after-$((6*7))\r")),
            &token,
        )
        .await;
    assert_eq!(code, 200, "{text}");
    read_until(&mut out, "after-42").await;
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.ends_with("/process.Process/Connect")),
        "{:?}",
        fake.requests()
    );
    // Still the same one process: joined again, not started again.
    assert_eq!(attach_processes(&b, &sb).len(), 1);
    // Still no one else's.
    let out_eve = b.ok(&["token", "create", "--person", "eve@example.com"]);
    let eve = out_eve.lines().last().unwrap().trim().to_owned();
    let (code, text) = b
        .raw(
            "POST",
            &format!("/v1/attaches/{aid}/input"),
            Some(typed("exit\r")),
            &eve,
        )
        .await;
    assert_eq!(code, 404, "another person's token: {text}");
    // Ended through B: its process goes.
    let (code, text) = b
        .raw("DELETE", &format!("/v1/attaches/{aid}"), None, &token)
        .await;
    assert_eq!(code, 200, "{text}");
    wait_until("the end of the attach taken over", 30, || {
        let left = attach_processes(&b, &sb);
        (!left.is_empty()).then(|| format!("left running: {left:?}"))
    });
    drop(out);
    let audit = b.ok(&["audit", "--json"]);
    assert!(
        audit
            .lines()
            .any(|l| l.contains("sandbox.attach.taken_over") && l.contains(&aid)),
        "{audit}"
    );
    a.url.clear();
    drop(a);
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// `hangar sb attach`'s own side of it: the client's server is replaced while it is attached
/// (A killed with SIGKILL, B started at the same address, as a Service in front of replicas
/// would send it elsewhere). The client asks for the output again and retries what is typed
/// until B has taken the attach over; what is typed then comes back on the person's screen, and
/// detaching still ends with status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_hangar_sb_attach_carries_on_through_another_replica() {
    if skip() {
        return;
    }
    let db = PgSchema::new();
    let fake = FakeCloud::start(E2B_KEY).unwrap();
    let vars = vec![
        ("HANGAR_E2B_API_KEY".to_owned(), E2B_KEY.to_owned()),
        ("HANGAR_E2B_URL".to_owned(), fake.url()),
        ("HANGAR_E2B_ENVD_URL".to_owned(), fake.envd_url()),
        ("HANGAR_DATABASE_URL".to_owned(), db.url()),
        ("HANGAR_RUN_LEASE_MS".to_owned(), "1500".to_owned()),
    ];
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut a = Server::start_at(tempfile::tempdir().unwrap(), vars.clone(), &listen);
    a.apply(&format!("name: cloud\nprovider: e2b\nimage: {}\n", image()));
    let repo = repo();
    let sb = create_sandbox(&a, &repo);
    a.ok(&[
        "sb", "exec", &sb, "--as", "hangar", "--", "sh", "-c",
        "mkdir -p /run/hangar-tmux && tmux -S /run/hangar-tmux/default new-session -d -s run-relayed -x 80 -y 24 sh",
    ]);
    let mut attach = a.hangar();
    attach.args(["sb", "attach", &sb, "--run", "run-relayed"]);
    let status = a.home.path().join("attach.status");
    let argv: Vec<String> = [
        "sh",
        "-c",
        "\"$@\"; echo $? > \"$0\"",
        status.to_str().unwrap(),
        "env",
    ]
    .map(str::to_owned)
    .into_iter()
    .chain(
        attach
            .get_envs()
            .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v?.to_str()?))),
    )
    .chain(std::iter::once(
        attach.get_program().to_string_lossy().into_owned(),
    ))
    .chain(attach.get_args().map(|a| a.to_string_lossy().into_owned()))
    .collect();
    let term = Terminal::start(a.home.path(), &argv, 100, 30).unwrap();
    term.tmux(&["send-keys", "-t", "t", "echo before-$((6*7))", "Enter"])
        .unwrap();
    wait_until("the relayed output", 60, || {
        let screen = term.screen();
        (!screen.contains("before-42")).then_some(screen)
    });

    // A dies; B comes up at its address, with a home of its own.
    let mut a_child = a.child.take().unwrap();
    a_child.kill().unwrap();
    a_child.wait().unwrap();
    let b_home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(b_home.path().join("hangar")).unwrap();
    std::fs::copy(
        a.home.path().join("hangar/master.key"),
        b_home.path().join("hangar/master.key"),
    )
    .unwrap();
    let b = Server::start_at(b_home, vars, &listen);
    term.tmux(&["send-keys", "-t", "t", "echo after-$((6*7))", "Enter"])
        .unwrap();
    wait_until("the output through the other replica", 60, || {
        let screen = term.screen();
        (!screen.contains("after-42")).then_some(screen)
    });
    term.tmux(&["send-keys", "-t", "t", "C-b", "d"]).unwrap();
    wait_until("the end of `hangar sb attach` on detaching", 30, || {
        let written = std::fs::read_to_string(&status).unwrap_or_default();
        (!written.ends_with('\n')).then(|| term.screen())
    });
    assert_eq!(
        std::fs::read_to_string(&status).unwrap().trim(),
        "0",
        "{}",
        term.screen()
    );
    drop(term);
    drop(b);
    a.url.clear();
    drop(a);
}

/// Two `hangar serve` replicas with homes of their own on one PostgreSQL and the fake e2b API
/// (`extra` variables for both), an e2b sandbox made through A with a run's tmux session in it,
/// and an attach to it opened through A.
struct Replicas {
    _db: PgSchema,
    fake: FakeCloud,
    a: Server,
    b: Server,
    sb: String,
    aid: String,
    token: String,
}

impl Replicas {
    async fn start(extra: &[(&str, &str)]) -> Replicas {
        let db = PgSchema::new();
        let fake = FakeCloud::start(E2B_KEY).unwrap();
        let mut vars = vec![
            ("HANGAR_E2B_API_KEY".to_owned(), E2B_KEY.to_owned()),
            ("HANGAR_E2B_URL".to_owned(), fake.url()),
            ("HANGAR_E2B_ENVD_URL".to_owned(), fake.envd_url()),
            ("HANGAR_DATABASE_URL".to_owned(), db.url()),
            ("HANGAR_RUN_LEASE_MS".to_owned(), "1500".to_owned()),
        ];
        vars.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let a = Server::start(vars.clone());
        a.apply(&format!("name: cloud\nprovider: e2b\nimage: {}\n", image()));
        let repo = repo();
        let sb = create_sandbox(&a, &repo);
        a.ok(&[
            "sb", "exec", &sb, "--as", "hangar", "--", "sh", "-c",
            "mkdir -p /run/hangar-tmux && tmux -S /run/hangar-tmux/default new-session -d -s run-relayed -x 80 -y 24 sh",
        ]);
        // B: a home of its own, the same master key (the vault's credentials are shared).
        let b_home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(b_home.path().join("hangar")).unwrap();
        std::fs::copy(
            a.home.path().join("hangar/master.key"),
            b_home.path().join("hangar/master.key"),
        )
        .unwrap();
        let b = Server::start_in(b_home, vars);
        let token = a.token();
        let (code, body) = a
            .raw(
                "POST",
                &format!("/v1/sandboxes/{sb}/attach"),
                Some(json!({"run": "run-relayed", "cols": 90, "rows": 20})),
                &token,
            )
            .await;
        assert_eq!(code, 200, "{body}");
        let aid = serde_json::from_str::<Value>(&body).unwrap()["attach"]
            .as_str()
            .unwrap()
            .to_owned();
        Replicas {
            _db: db,
            fake,
            a,
            b,
            sb,
            aid,
            token,
        }
    }
}

/// A relayed attach whose replica stopped and whose client never came back is ended by another
/// replica once the idle limit has passed (here 3 s): its PTY process killed, so no root `tmux
/// attach` stays in the sandbox, and its end audited saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_an_attach_nobody_comes_back_for_is_ended_by_another_replica() {
    if skip() {
        return;
    }
    let Replicas {
        _db,
        fake: _fake,
        mut a,
        b,
        sb,
        aid,
        token: _,
    } = Replicas::start(&[("HANGAR_ATTACH_IDLE_SECS", "3")]).await;
    assert_eq!(attach_processes(&a, &sb).len(), 1);
    let mut a_child = a.child.take().unwrap();
    a_child.kill().unwrap();
    a_child.wait().unwrap();
    wait_until("the end of the attach nobody came back for", 60, || {
        let left = attach_processes(&b, &sb);
        (!left.is_empty()).then(|| format!("left running: {left:?}"))
    });
    let audit = b.ok(&["audit", "--json"]);
    assert!(
        audit.lines().any(|l| l.contains("sandbox.attach.ended")
            && l.contains(&aid)
            && l.contains("did not come back")),
        "{audit}"
    );
    a.url.clear();
    drop(a);
}
