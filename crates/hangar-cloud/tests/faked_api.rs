//! What the kubernetes and e2b providers send and refuse, against hangar-fakecloud (a fake
//! Kubernetes API server and E2B API on 127.0.0.1 whose pods and sandboxes are containers of
//! the local dockerd; no cluster or E2B account is reachable here). The suite every provider
//! passes is hangar-sandbox's `tests/conformance.rs` (`faked_api_*`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::path::Path;
use std::time::Duration;

use hangar_cloud::{E2bProvider, KubernetesProvider};
use hangar_fakecloud::FakeCloud;
use hangar_sandbox::{CreateRequest, EnvSpec, ExecRequest, Provider, SandboxError, Who};
use serde_json::Value;

const KEY: &str = "e2b-key";

fn image() -> String {
    std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into())
}

fn fake() -> Option<FakeCloud> {
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!(
            "HANGAR_TEST_DOCKER=0: the faked API tests (their pods are containers) are skipped"
        );
        return None;
    }
    Some(FakeCloud::start(KEY).unwrap())
}

fn request(yaml: &str, home: &Path, repo: &Path, id: &str) -> CreateRequest {
    CreateRequest {
        agent_uid: None,
        id: id.into(),
        env: EnvSpec::from_yaml(yaml).unwrap(),
        repo: repo.to_owned(),
        person: "ada@example.com".into(),
        home: home.to_owned(),
    }
}

async fn kube(f: &FakeCloud, dir: &Path) -> KubernetesProvider {
    let path = dir.join("kubeconfig");
    f.write_kubeconfig(&path, "team-a").unwrap();
    KubernetesProvider::from_kubeconfig(&path, None)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_the_pod_is_locked_down_limited_and_isolated() {
    let Some(f) = fake() else { return };
    let t = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("f"), "x").unwrap();
    let p = kube(&f, t.path()).await;
    assert_eq!(p.namespace(), "team-a");
    let yaml = format!(
        "name: k\nprovider: kubernetes\nimage: {}\nresources: {{cpu: 0.5, memory: 256m}}\n",
        image()
    );
    let req = request(&yaml, t.path(), repo.path(), "Sb_1");
    p.check(&req.env).await.unwrap();
    let sb = p.create(&req).await.unwrap();
    assert!(!sb.capabilities.uid_split);
    assert!(sb.agent.is_none());
    // The image runs as root: the agent is root, which the capabilities say.
    assert!(sb.capabilities.sudo);

    let pods = f.pods();
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    assert_eq!(pod["metadata"]["name"], "hangar-sb-1");
    assert_eq!(pod["metadata"]["labels"]["dev.hangar.sandbox"], "Sb_1");
    let spec = &pod["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["enableServiceLinks"], false);
    let c = &spec["containers"][0];
    assert_eq!(c["image"], image().as_str());
    assert_eq!(c["resources"]["limits"]["cpu"], "500m");
    assert_eq!(
        c["resources"]["limits"]["memory"],
        (256u64 << 20).to_string()
    );
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);

    let policies = f.network_policies();
    assert_eq!(policies.len(), 1, "egress: none is a network policy");
    let np = &policies[0];
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"]["dev.hangar.sandbox"],
        "Sb_1"
    );
    assert_eq!(np["spec"]["egress"], Value::Array(vec![]));
    assert_eq!(np["spec"]["ingress"], Value::Array(vec![]));
    // The memory limit reached the container (the fake gives it docker's).
    let o = p
        .exec(
            &sb,
            Who::Agent,
            &ExecRequest::new([
                "sh",
                "-c",
                "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
            ]),
        )
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        (256u64 << 20).to_string()
    );

    p.destroy(&sb, false).await.unwrap();
    assert!(f.pods().is_empty() && f.network_policies().is_empty());
    assert!(f.containers_of("Sb_1").await.is_empty());
    assert!(!sb.host_dir.exists());
    let gone = p.exec(&sb, Who::Agent, &ExecRequest::new(["true"])).await;
    assert!(matches!(gone, Err(SandboxError::Gone(_))), "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_what_a_pod_cannot_give_is_refused_and_nothing_is_left() {
    let Some(f) = fake() else { return };
    let t = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let p = kube(&f, t.path()).await;
    for (yaml, want) in [
        (
            format!(
                "name: k\nprovider: kubernetes\nimage: {}\nresources: {{pids: 100}}\n",
                image()
            ),
            "resources.pids",
        ),
        (
            format!(
                "name: k\nprovider: kubernetes\nimage: {}\negress: {{allowlist: [github.com]}}\n",
                image()
            ),
            "egress",
        ),
    ] {
        let req = request(&yaml, t.path(), repo.path(), "refused");
        let e = p.create(&req).await.unwrap_err();
        assert!(
            matches!(&e, SandboxError::Unsupported(m) if m.contains(want)),
            "{e:?}"
        );
    }
    // An image the cluster cannot get: said, and the pod and its policy are taken back.
    let req = request(
        "name: k\nprovider: kubernetes\nimage: hangar-no-such-image:1\n",
        t.path(),
        repo.path(),
        "noimage",
    );
    let e = p.create(&req).await.unwrap_err();
    assert!(
        matches!(&e, SandboxError::Unavailable(m) if m.contains("ErrImagePull")),
        "{e:?}"
    );
    assert!(f.pods().is_empty() && f.network_policies().is_empty());
    assert!(!t.path().join("sandboxes/noimage").exists());
}

fn e2b(f: &FakeCloud, key: &str) -> E2bProvider {
    E2bProvider::new(
        f.url(),
        key.into(),
        f.envd_url(),
        "e2b.invalid".into(),
        Duration::from_secs(600),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_e2b_keys_templates_and_refusals() {
    let Some(f) = fake() else { return };
    let t = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let yaml = format!("name: e\nprovider: e2b\nimage: {}\n", image());
    let e = e2b(&f, "wrong-key")
        .create(&request(&yaml, t.path(), repo.path(), "badkey"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SandboxError::Unavailable(m) if m.contains("HANGAR_E2B_API_KEY")),
        "{e:?}"
    );
    let p = e2b(&f, KEY);
    let e = p
        .create(&request(
            "name: e\nprovider: e2b\nimage: hangar-no-such-template\n",
            t.path(),
            repo.path(),
            "notemplate",
        ))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("hangar-no-such-template"), "{e:?}");
    let e = p
        .create(&request(
            "name: e\nprovider: e2b\nresources: {cpu: 2}\n",
            t.path(),
            repo.path(),
            "sized",
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SandboxError::Unsupported(m) if m.contains("resources")),
        "{e:?}"
    );
    assert!(!t.path().join("sandboxes/badkey").exists());

    let sb = p
        .create(&request(&yaml, t.path(), repo.path(), "ok"))
        .await
        .unwrap();
    assert!(!sb.capabilities.uid_split && sb.capabilities.sudo);
    assert_eq!(f.containers_of("ok").await.len(), 1);
    p.destroy(&sb, false).await.unwrap();
    assert!(f.containers_of("ok").await.is_empty());
    let gone = p.exec(&sb, Who::Agent, &ExecRequest::new(["true"])).await;
    assert!(matches!(gone, Err(SandboxError::Gone(_))), "{gone:?}");
}

/// `egress: {allowlist: [...]}` for e2b is E2B's own egress firewall, which keeps less than
/// hangar's proxy: refused (nothing made at E2B) unless the environment says
/// `enforcement: e2b-firewall`. Then the sandbox is made with `network.allowOut` the list and
/// `denyOut` all traffic (what E2B needs for names), and says it can keep an allowlist. Verified
/// only against the fake, which checks the rules' shape as E2B's API describes it and, unable
/// to filter by name, gives such a sandbox no network at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_an_e2b_allowlist_is_sent_as_e2bs_egress_rules() {
    let Some(f) = fake() else { return };
    let t = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let p = e2b(&f, KEY);
    let unsaid = format!(
        "name: e\nprovider: e2b\nimage: {}\negress: {{allowlist: [github.com]}}\n",
        image()
    );
    let refused = p
        .create(&request(&unsaid, t.path(), repo.path(), "unsaid"))
        .await
        .unwrap_err();
    let why = refused.to_string();
    assert!(
        matches!(refused, SandboxError::Unsupported(_))
            && why.contains("enforcement: e2b-firewall")
            && why.contains("8.8.8.8"),
        "{why}"
    );
    assert!(
        !p.capabilities(&hangar_sandbox::EnvSpec::from_yaml(&unsaid).unwrap())
            .network_modes
            .contains(&hangar_sandbox::NetworkMode::Allowlist)
    );
    assert!(f.e2b_created().is_empty());
    let yaml = format!(
        "name: e\nprovider: e2b\nimage: {}\negress: {{allowlist: [github.com, '*.pkg.example.com', 192.0.2.1], enforcement: e2b-firewall}}\n",
        image()
    );
    let sb = p
        .create(&request(&yaml, t.path(), repo.path(), "listed"))
        .await
        .unwrap();
    let sent = f.e2b_created().pop().unwrap();
    assert_eq!(
        sent["network"],
        serde_json::json!({"allowOut": ["github.com", "*.pkg.example.com", "192.0.2.1"], "denyOut": ["0.0.0.0/0"]}),
        "{sent}"
    );
    assert_eq!(sent["allow_internet_access"], true, "{sent}");
    assert!(
        sb.capabilities
            .network_modes
            .contains(&hangar_sandbox::NetworkMode::Allowlist)
    );
    // The fake's stand-in for E2B's firewall: nothing but loopback.
    let out = p
        .exec(&sb, Who::Agent, &ExecRequest::new(["ls", "/sys/class/net"]))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "lo");
    p.destroy(&sb, false).await.unwrap();

    // What E2B refuses, the fake refuses: a name in the deny list, a name allowed without all
    // traffic denied.
    let client = reqwest::Client::new();
    for network in [
        serde_json::json!({"denyOut": ["github.com"]}),
        serde_json::json!({"allowOut": ["github.com"]}),
    ] {
        let r = client
            .post(format!("{}/sandboxes", f.url()))
            .header("x-api-key", KEY)
            .json(&serde_json::json!({"templateID": image(), "network": network}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{network}");
    }
    assert_eq!(f.e2b_created().len(), 1);
}

/// An attach that ends without the PTY process's end (here: envd says nothing for longer than
/// the idle limit) ends with an error and kills the process (`SendSignal`), so no root
/// `tmux attach` is left in the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_an_e2b_attach_that_goes_quiet_ends_and_kills_its_process() {
    let Some(f) = fake() else { return };
    let t = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let p = e2b(&f, KEY);
    let yaml = format!("name: e\nprovider: e2b\nimage: {}\n", image());
    let sb = p
        .create(&request(&yaml, t.path(), repo.path(), "quiet"))
        .await
        .unwrap();
    let mut target = p.pty_target(&sb, "any").unwrap();
    target.argv = ["sleep", "321"].map(str::to_owned).to_vec();
    let started = std::time::Instant::now();
    let e = hangar_cloud::e2b::terminal::attach_terminal_within(&target, Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("sent nothing for 2 s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        f.requests()
            .iter()
            .any(|r| r.ends_with("/process.Process/SendSignal")),
        "{:?}",
        f.requests()
    );
    let listed = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done";
    let mut left = String::new();
    for _ in 0..50 {
        let out = p
            .exec(&sb, Who::Agent, &ExecRequest::new(["sh", "-c", listed]))
            .await
            .unwrap();
        left = String::from_utf8_lossy(&out.stdout).into_owned();
        if !left.lines().any(|l| l.starts_with("sleep 321")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !left.lines().any(|l| l.starts_with("sleep 321")),
        "the PTY process was left running:\n{left}"
    );
    p.destroy(&sb, false).await.unwrap();
}
