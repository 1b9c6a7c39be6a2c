//! A Docker image's own harness CLI (#5): when the image has `claude` on its system PATH, that
//! is what the turn runs, and its version (from its npm package) is the one the conformance check
//! applies to and the manifest records; an image whose CLI is of a version that has not passed
//! is refused. Real dockerd, real Claude Code (the image's CLI runs the pinned one, bound in), the
//! scripted model. Needs root and the test image (`scripts/build-image`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar_control::{ControlPlane, SessionRequest, Tools, TurnOptions};
use hangar_store::{Harness, Policy, Store, TurnState, Vault};
use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env, workspace_root};
use serde_json::json;

fn base_image() -> String {
    std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into())
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// An image like the test image with its own `claude`: an npm-style package of `version` whose
/// executable (linked from /usr/local/bin) runs the pinned CLI, bound into every container at
/// its host path. Removed on drop.
struct Image(String);

impl Image {
    fn with_claude(version: &str) -> Image {
        let tag = format!("hangar-test-own-claude:{version}-{}", std::process::id());
        let pinned = claude_bin().unwrap().canonicalize().unwrap();
        let setup = format!(
            "mkdir -p /opt/claude-code/bin && printf '%s' '{{\"name\":\"@anthropic-ai/claude-code\",\"version\":\"{version}\"}}' > /opt/claude-code/package.json && printf '#!/bin/sh\\nexec %s \"$@\"\\n' '{}' > /opt/claude-code/bin/claude && chmod 755 /opt/claude-code/bin/claude && ln -s /opt/claude-code/bin/claude /usr/local/bin/claude",
            pinned.display()
        );
        let name = format!("hangar-test-own-claude-{}-{version}", std::process::id());
        docker(&[
            "run",
            "--name",
            &name,
            "--network",
            "none",
            &base_image(),
            "sh",
            "-c",
            &setup,
        ]);
        docker(&["commit", &name, &tag]);
        docker(&["rm", &name]);
        Image(tag)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

struct Env {
    home: tempfile::TempDir,
    repo: tempfile::TempDir,
    fake: FakeAnthropic,
}

impl Env {
    async fn plane(&self) -> Arc<ControlPlane> {
        let driver = std::env::var_os("HANGAR_DRIVER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/debug/hangar-driver"));
        let config = self.home.path().join("claude-config");
        std::fs::create_dir_all(&config).unwrap();
        let tools = Tools {
            home: self.home.path().join("hangar"),
            driver,
            claude: claude_bin().unwrap(),
            codex: PathBuf::from("codex"),
            env: claude_env(&self.fake.base_url(), &config),
        };
        let db = self.home.path().join("hangar.db");
        let store = Store::open(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        let vault = Vault::open_or_create(&self.home.path().join("master.key")).unwrap();
        ControlPlane::new(store.with_vault(vault).await.unwrap(), tools)
    }

    /// A sandbox of a docker environment with `image` (host networking: the scripted model
    /// listens on the host's loopback).
    async fn sandbox(&self, plane: &ControlPlane, image: &str) -> String {
        let name = format!(
            "own-{}",
            image.rsplit(':').next().unwrap().replace('.', "-")
        );
        plane
            .sandboxes()
            .apply_environment(
                &json!({"name": name, "provider": "docker", "image": image, "network": "host"}),
                "ada@example.com",
            )
            .await
            .unwrap();
        plane
            .sandboxes()
            .create_sandbox(&name, self.repo.path(), "ada@example.com")
            .await
            .unwrap()
            .id
    }

    fn request(&self, sandbox: &str) -> SessionRequest {
        SessionRequest {
            dir: self.repo.path().to_owned(),
            sandbox: Some(sandbox.to_owned()),
            env: None,
            no_sandbox: false,
            harness: Harness::Claude,
            policy: Some(Policy::Auto),
            prompt: "hello".into(),
            person: "ada@example.com".into(),
            options: TurnOptions::default(),
        }
    }
}

async fn ended(plane: &ControlPlane, turn: &str) -> hangar_store::Turn {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let t = plane.store().turn(turn).await.unwrap();
        if t.state == TurnState::Ended {
            return t;
        }
        assert!(Instant::now() < deadline, "the turn did not end: {t:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_own_claude_runs_and_its_version_is_the_one_checked() {
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!("skipped: HANGAR_TEST_DOCKER=0");
        return;
    }
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "needs root (CI runs as root)"
    );
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        repo: tempfile::tempdir().unwrap(),
        fake: FakeAnthropic::start(Script::new([Step::text("hi from the image's CLI")])).unwrap(),
    };
    let plane = env.plane().await;

    // The image's CLI is of the pinned version: it passes (built in) and it is what runs.
    let good = Image::with_claude(hangar_testkit::CLAUDE_CODE_VERSION);
    let sb = env.sandbox(&plane, &good.0).await;
    let started = plane.runs().start_session(env.request(&sb)).await.unwrap();
    let t = ended(&plane, &started.turn.id).await;
    assert_eq!(t.status, Some(0), "{t:?}");
    let m: hangar_events::Manifest = serde_json::from_value(t.manifest.unwrap()).unwrap();
    assert!(m.digest_matches());
    assert_eq!(m.harness_version, hangar_testkit::CLAUDE_CODE_VERSION);
    assert_eq!(m.harness_check, "passed:built-in");
    // The harness's argv as the driver started it: the image's executable.
    assert_eq!(m.argv[0], "/opt/claude-code/bin/claude", "{:?}", m.argv);
    assert!(
        env.fake.requests()[0].all_text().contains("hello"),
        "the model was asked"
    );
    plane
        .sandboxes()
        .remove_sandbox(&sb, false, true, "ada@example.com")
        .await
        .unwrap();

    // The image's CLI is of a version that never passed: refused, naming that version, though
    // hangar's own pinned copy would have passed.
    let other = Image::with_claude("0.0.3-image");
    let sb = env.sandbox(&plane, &other.0).await;
    let err = plane
        .runs()
        .start_session(env.request(&sb))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("claude 0.0.3-image has not passed hangar's conformance suite"),
        "{err}"
    );
    assert_eq!(env.fake.requests().len(), 1, "no second turn ran");
    plane
        .sandboxes()
        .remove_sandbox(&sb, false, true, "ada@example.com")
        .await
        .unwrap();
}
