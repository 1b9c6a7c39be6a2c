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

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use hangar_fakecloud::FakeCloud;
use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env, workspace_root};
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
        let mut s = Server {
            home: tempfile::tempdir().unwrap(),
            _model: FakeAnthropic::start(Script::new([Step::text("never asked")])).unwrap(),
            child: None,
            url: String::new(),
            env,
        };
        let mut child = s
            .hangar()
            .args(["serve", "--listen", "127.0.0.1:0"])
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
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some()
            && let Ok(out) = self.hangar().args(["sb", "list"]).output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
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
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "cloud",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
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
