//! The refusal matrix (T9, T18) through `hangar serve`: where the Tower hook is required but
//! could not hold, nothing runs. Docker sandboxes without the uid split or with `sudo: true`,
//! Codex turns, and environments naming kubernetes or e2b (whose providers this control plane
//! does not have yet; the hook's own reason is given before that) are each refused with the
//! reason, audited, and neither the model nor Tower is ever asked. `HANGAR_UID_SPLIT` is set
//! on the server to show it changes nothing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::process::Command;

use common::{Server, docker_image, hook_bin, is_root};
use hangar_testkit::{PassportFault, Script, Step, TOWER_KEY, TowerDouble};
use serde_json::{Value, json};

/// `docker_image()` with a stand-in `sudo` (it exits 1; nothing runs it: the turn is refused
/// first), so that a `sudo: true` sandbox can be made; removed when dropped.
struct SudoImage(String);

impl SudoImage {
    fn make(dir: &std::path::Path) -> SudoImage {
        let tag = format!("hangar-sudo-test:{}", std::process::id());
        let stub = dir.join("sudo");
        std::fs::write(&stub, "#!/bin/sh\nexit 1\n").unwrap();
        std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let docker = |args: &[&str]| {
            let out = Command::new("docker").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "docker {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        let c = docker(&["create", &docker_image(), "/bin/true"]);
        docker(&["cp", stub.to_str().unwrap(), &format!("{c}:/usr/bin/sudo")]);
        docker(&["commit", &c, &tag]);
        docker(&["rm", &c]);
        SudoImage(tag)
    }
}

impl Drop for SudoImage {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

fn server(tower: &TowerDouble, global: bool) -> Server {
    let mut env = vec![
        ("HANGAR_GOVERNANCE_URL".to_owned(), tower.url()),
        (
            "HANGAR_GOVERNANCE_HOOK_CREDENTIAL".to_owned(),
            "tower".to_owned(),
        ),
        (
            "HANGAR_TOWER_HOOK_BIN".to_owned(),
            hook_bin().display().to_string(),
        ),
        ("HANGAR_UID_SPLIT".to_owned(), "1".to_owned()),
    ];
    if global {
        env.push(("HANGAR_GOVERNANCE_HOOK".to_owned(), "required".to_owned()));
    }
    Server::start_with(
        Script::new([Step::text("never asked")]),
        env,
        Some(("tower", TOWER_KEY)),
    )
}

/// Applies `yaml` (an environment named `name`).
fn apply(s: &Server, name: &str, yaml: &str) {
    let f = s.home.path().join(format!("{name}.yaml"));
    std::fs::write(&f, format!("name: {name}\n{yaml}")).unwrap();
    s.ok(&["env", "apply", f.to_str().unwrap()]);
}

/// The audit records with this action (`hangar audit`: seq, time, actor, action, detail).
fn audited(s: &Server, action: &str) -> Vec<String> {
    s.ok(&["audit"])
        .lines()
        .filter(|l| l.split("  ").nth(3) == Some(action))
        .map(str::to_owned)
        .collect()
}

async fn refused(s: &Server, body: Value, want: &str) -> String {
    let (status, answer) = s.call("POST", "/v1/sessions", Some(body.clone())).await;
    assert_eq!(status, 400, "{body}: {answer}");
    let text = answer.to_string();
    assert!(text.contains(want), "{body}: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_the_required_hook_could_not_hold_the_turn_is_refused_and_audited() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let tower = TowerDouble::start().unwrap();
    let s = server(&tower, true);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let image = docker_image();
    let sudo_image = SudoImage::make(s.home.path());

    // Docker with the uid split off.
    apply(
        &s,
        "nosplit",
        &format!("provider: docker\nimage: {image}\nnetwork: host\nuid_split: false\n"),
    );
    let sb = s.create_sandbox("nosplit", repo.path());
    refused(
        &s,
        json!({"sandbox": sb, "prompt": "x"}),
        "has no uid split",
    )
    .await;
    s.ok(&["sb", "rm", &sb]);

    // Docker giving the agent sudo.
    apply(
        &s,
        "sudo",
        &format!(
            "provider: docker\nimage: {}\nnetwork: host\nsudo: true\n",
            sudo_image.0
        ),
    );
    let sb = s.create_sandbox("sudo", repo.path());
    refused(
        &s,
        json!({"sandbox": sb, "prompt": "x"}),
        "gives the agent sudo",
    )
    .await;
    s.ok(&["sb", "rm", &sb]);

    // Codex, in a sandbox where Claude Code would run with the hook.
    apply(
        &s,
        "split",
        &format!("provider: docker\nimage: {image}\nnetwork: host\n"),
    );
    let sb = s.create_sandbox("split", repo.path());
    refused(
        &s,
        json!({"sandbox": sb, "harness": "codex", "prompt": "x"}),
        "Codex turns that require the Tower hook are refused",
    )
    .await;
    s.ok(&["sb", "rm", &sb]);
    let turns = audited(&s, "turn.refused");
    assert_eq!(turns.len(), 3, "{turns:?}");

    // An egress allowlist without Tower's host: refused naming the host (before the provider's
    // reason, which comes once the host is on the list).
    apply(
        &s,
        "listed",
        "provider: kubernetes\nimage: i\negress: {allowlist: [github.com, '*.pkg.example.com']}\n",
    );
    refused(
        &s,
        json!({"env": "listed", "dir": repo.path(), "prompt": "x"}),
        "Tower's host 127.0.0.1 (HANGAR_GOVERNANCE_URL) is not one of them",
    )
    .await;
    let sandboxes = audited(&s, "sandbox.refused");
    assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");
    assert!(s.fake.requests().is_empty(), "a harness ran");
    assert!(tower.calls().is_empty(), "Tower was asked");
}

/// `HANGAR_GOVERNANCE_HOOK_AUTH=passport` in a Docker sandbox with the uid split: a passport that
/// fails one of hangar's checks (another agent, another person, expired, a bad signature)
/// refuses the turn before the hook is given anything, with the reason, audited
/// (`governance.passport_refused`, `turn.refused`); the model and Tower's hook endpoint are
/// never reached, and no key file is left in the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passport_that_fails_a_check_refuses_the_sandboxed_turn() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let tower = TowerDouble::start().unwrap();
    let s = Server::start_with(
        Script::new([Step::text("never asked")]),
        vec![
            ("HANGAR_GOVERNANCE_HOOK".to_owned(), "required".to_owned()),
            ("HANGAR_GOVERNANCE_URL".to_owned(), tower.url()),
            (
                "HANGAR_GOVERNANCE_HOOK_AUTH".to_owned(),
                "passport".to_owned(),
            ),
            (
                "HANGAR_TOWER_HOOK_BIN".to_owned(),
                hook_bin().display().to_string(),
            ),
        ],
        None,
    );
    let keys: Value = reqwest::get(format!("{}/.well-known/jwks.json", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    tower.trust_keys("http://127.0.0.1:7700", keys);
    let repo = tempfile::tempdir().unwrap();
    apply(
        &s,
        "gov",
        &format!(
            "provider: docker\nimage: {}\nnetwork: host\n",
            docker_image()
        ),
    );
    let sb = s.create_sandbox("gov", repo.path());
    let cases = [
        (PassportFault::WrongAgent, "not \"hangar\""),
        (PassportFault::WrongPerson, "not the sandbox's person"),
        (PassportFault::Expired, "the passport expired"),
        (
            PassportFault::BadSignature,
            "signature does not check against Tower's keys",
        ),
    ];
    for (fault, want) in &cases {
        tower.set_passport_fault(fault.clone());
        let (status, answer) = s
            .call(
                "POST",
                "/v1/sessions",
                Some(json!({"sandbox": sb, "policy": "ask", "prompt": "x"})),
            )
            .await;
        let text = answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!((400..500).contains(&status), "{fault:?}: {status} {answer}");
        assert!(
            text.contains("no passport from Tower, so no turn"),
            "{fault:?}: {text}"
        );
        assert!(text.contains(want), "{fault:?}: {text}");
    }
    assert_eq!(
        audited(&s, "governance.passport_refused").len(),
        cases.len()
    );
    assert_eq!(audited(&s, "turn.refused").len(), cases.len());
    assert!(s.fake.requests().is_empty(), "a harness ran");
    assert!(tower.calls().is_empty(), "the hook asked Tower");
    let out = s
        .hangar()
        .args([
            "sb",
            "exec",
            &sb,
            "--as",
            "hangar",
            "--",
            "ls",
            "-a",
            "/var/lib/hangar",
        ])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !listing.contains("tower-key"),
        "a key file was left: {listing}"
    );
    s.ok(&["sb", "rm", &sb]);
}
