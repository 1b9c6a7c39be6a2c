//! Issue 23's "images are pulled", as a person does it with no server running: `hangar env apply
//! --pull` pulls a docker environment's image (with the environment's `DOCKER_REGISTRY_AUTH` as
//! the registry login, printing the pull's progress), and `hangar sb create` pulls one that is
//! missing. The registry is a private one on 127.0.0.1 that takes only a login (Debian's
//! docker-registry, `scripts/start-registry` installs it); the image is the test image, pushed
//! there and removed here. Needs dockerd and the test image; `HANGAR_TEST_DOCKER=0` skips.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

#[path = "../../hangar-sandbox/tests/registry/mod.rs"]
mod registry;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn hangar(home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"))
        .args(args)
        .env("HANGAR_HOME", home)
        // Nothing listens here: every command serves the API itself.
        .env("HANGAR_URL", "http://127.0.0.1:9")
        .env_remove("HANGAR_TOKEN")
        .env_remove("HANGAR_DATABASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = c.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).unwrap();
    }
    drop(input);
    c.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn image() -> String {
    std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_apply_pull_and_sb_create_pull_with_the_environments_login() {
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!("HANGAR_TEST_DOCKER=0: the docker tests are skipped");
        return;
    }
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let reg = registry::LoginRegistry::start();
    let repo = format!("{}/hangar-pull-cli", reg.addr);
    let remote = registry::push(
        &docker,
        &image(),
        &repo,
        &registry::unique_tag(),
        Some(reg.credentials()),
    )
    .await;

    let home = tempfile::tempdir().unwrap();
    let hangar_home = home.path().join("hangar");
    let file = home.path().join("pulled.yaml");
    std::fs::write(
        &file,
        format!("name: pulled\nprovider: docker\nimage: {remote}\n"),
    )
    .unwrap();
    let apply_pull = || {
        hangar(
            &hangar_home,
            &["env", "apply", "--pull", file.to_str().unwrap()],
            None,
        )
    };

    // No login kept for the environment: it is applied, the pull is refused, and the message
    // says what to do.
    let out = apply_pull();
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("environment: pulled\ncreated\n"),
        "{stdout}"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "image {remote} is not on this machine and pulling it from {} failed: ",
            reg.addr
        )) && err.contains("no basic auth credentials")
            && err.contains("hangar credential set DOCKER_REGISTRY_AUTH --environment pulled"),
        "{err}"
    );
    assert!(!registry::is_local(&docker, &remote).await);

    // The environment's login: pulled, its progress printed.
    let login = format!(
        r#"{{"username": "{}", "password": "{}"}}"#,
        registry::USER,
        registry::PASSWORD
    );
    let out = hangar(
        &hangar_home,
        &[
            "credential",
            "set",
            "DOCKER_REGISTRY_AUTH",
            "--environment",
            "pulled",
        ],
        Some(&login),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = apply_pull();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..2],
        [
            "environment: pulled",
            "replaced (sandboxes made before keep the old spec)"
        ],
        "{stdout}"
    );
    assert_eq!(lines[2], format!("pull: pulling {remote}"), "{stdout}");
    assert_eq!(
        lines.last().copied(),
        Some(format!("image: {remote} (pulled)").as_str()),
        "{stdout}"
    );
    assert!(
        lines.contains(&format!("pull: pulled {remote}").as_str()),
        "{stdout}"
    );
    assert!(registry::is_local(&docker, &remote).await, "{stdout}");
    assert!(
        !stdout.contains(registry::PASSWORD) && !text(&out.stderr).contains(registry::PASSWORD)
    );

    // Here already: nothing pulled.
    let out = apply_pull();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).ends_with(&format!("image: {remote} (already here)\n")),
        "{}",
        text(&out.stdout)
    );

    // A sandbox of it, the image gone again: made, pulled with the environment's login.
    registry::untag(&docker, &remote).await;
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("f"), "from the repo\n").unwrap();
    let out = hangar(
        &hangar_home,
        &[
            "sb",
            "create",
            "--env",
            "pulled",
            "--repo",
            work.path().to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Its progress on stderr (the pull, then the making); stdout starts with the sandbox.
    let said = text(&out.stderr);
    for want in [
        "[1/2] the image of environment pulled",
        "pull: ",
        "(pulled)",
        "[2/2] making the sandbox",
    ] {
        assert!(
            said.contains(want),
            "{want:?} missing from sb create's progress:\n{said}"
        );
    }
    let sb = text(&out.stdout)
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap()
        .to_owned();
    let out = hangar(&hangar_home, &["sb", "exec", &sb, "--", "cat", "f"], None);
    assert_eq!(
        text(&out.stdout),
        "from the repo\n",
        "{}",
        text(&out.stderr)
    );
    assert!(registry::is_local(&docker, &remote).await);
    let out = hangar(&hangar_home, &["sb", "rm", &sb], None);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Pulls are audited.
    let out = hangar(&hangar_home, &["audit", "--json"], None);
    // (a record's detail is its JSON as text)
    let pulls: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["action"] == "environment.pulled")
        .map(|r| serde_json::from_str(r["detail"].as_str().unwrap()).unwrap())
        .collect();
    let pulled: Vec<&serde_json::Value> = pulls.iter().map(|d| &d["pulled"]).collect();
    // env apply --pull (pulled), again (already here), sb create ahead of making the sandbox
    // (pulled again: the test removed the image).
    assert_eq!(pulled, [true, false, true], "{pulls:?}");
    assert!(
        pulls.iter().all(|d| d["image"] == remote.as_str()),
        "{pulls:?}"
    );

    // --pull on an environment without an image: applied, and said so.
    std::fs::write(&file, "name: plain\nprovider: local\n").unwrap();
    let out = apply_pull();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("only a docker environment's image is pulled"),
        "{}",
        text(&out.stderr)
    );
    registry::untag(&docker, &remote).await;
}
