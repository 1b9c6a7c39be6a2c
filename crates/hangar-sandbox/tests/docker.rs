//! What only the docker provider promises, beyond the conformance suite: the image check names
//! what is missing, an image only a registry has is pulled (with a login where the registry wants
//! one) and a failed pull says why, resource limits reach the container, the tmux server is
//! root's alone, and `uid_split: false` is said. Needs dockerd, the test image and a registry on
//! 127.0.0.1 (`scripts/start-docker`, `scripts/build-image`, `scripts/start-registry`);
//! `HANGAR_TEST_DOCKER=0` skips, saying so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod registry;

use std::path::Path;

use hangar_sandbox::{
    CreateRequest, DockerProvider, EnvSpec, ExecRequest, Provider, RegistryAuth, Sandbox,
    SandboxError, Who,
};

fn image() -> String {
    std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into())
}

async fn provider() -> Option<DockerProvider> {
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!("HANGAR_TEST_DOCKER=0: the docker tests are skipped");
        return None;
    }
    Some(DockerProvider::connect().await.unwrap_or_else(|e| {
        panic!("{e}\nrun scripts/start-docker && scripts/build-image (HANGAR_TEST_DOCKER=0 skips)")
    }))
}

fn env(extra: &str) -> EnvSpec {
    EnvSpec::from_yaml(&format!(
        "name: d\nprovider: docker\nimage: {}\n{extra}",
        image()
    ))
    .unwrap()
}

async fn make(p: &DockerProvider, home: &Path, env: EnvSpec, n: u32) -> Sandbox {
    let repo = home.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("f"), "x").unwrap();
    p.create(&CreateRequest {
        agent_uid: None,
        id: format!("docker-{}-{n}", std::process::id()),
        env,
        repo,
        person: "ada@example.com".into(),
        home: home.to_owned(),
    })
    .await
    .unwrap()
}

async fn sh(p: &DockerProvider, sb: &Sandbox, who: Who, script: &str) -> (i32, String) {
    let o = p
        .exec(sb, who, &ExecRequest::new(["sh", "-c", script]))
        .await
        .unwrap();
    let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&o.stderr));
    (o.status, text.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_check_says_what_is_missing() {
    let Some(p) = provider().await else { return };
    p.check(&env("")).await.unwrap();

    // Not here, and its registry (on loopback: nothing listens on port 1) does not answer.
    let e = p
        .check(
            &EnvSpec::from_yaml(
                "name: d\nprovider: docker\nimage: 127.0.0.1:1/hangar-no-such:image\n",
            )
            .unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SandboxError::Unavailable(m) if m.contains("image 127.0.0.1:1/hangar-no-such:image is not on this machine and pulling it from 127.0.0.1:1 failed: ") && m.contains("DOCKER_REGISTRY_AUTH --environment d") && m.contains("docker load")),
        "{e}"
    );

    // An image without git and tmux: the test image with them removed, committed.
    let home = tempfile::tempdir().unwrap();
    let sb = make(&p, home.path(), env("uid_split: false\n"), 0).await;
    let (st, out) = sh(&p, &sb, Who::Hangar, "rm /usr/bin/git /usr/bin/tmux").await;
    assert_eq!(st, 0, "{out}");
    let tag = format!("{}", std::process::id());
    let lacking = format!("hangar-test-lacking:{tag}");
    p.client()
        .commit_container(
            bollard::query_parameters::CommitContainerOptionsBuilder::default()
                .container(sb.handle["container"].as_str().unwrap())
                .repo("hangar-test-lacking")
                .tag(&tag)
                .build(),
            bollard::models::ContainerConfig::default(),
        )
        .await
        .unwrap();
    p.destroy(&sb, false).await.unwrap();
    let lacking_env =
        EnvSpec::from_yaml(&format!("name: d\nprovider: docker\nimage: {lacking}\n")).unwrap();
    let e = p.check(&lacking_env).await.unwrap_err();
    let sudo_env = EnvSpec::from_yaml(&format!(
        "name: d\nprovider: docker\nimage: {}\nsudo: true\n",
        image()
    ))
    .unwrap();
    let e_sudo = p.check(&sudo_env).await;
    let _ = p
        .client()
        .remove_image(
            &lacking,
            Some(
                bollard::query_parameters::RemoveImageOptionsBuilder::default()
                    .force(true)
                    .build(),
            ),
            None,
        )
        .await;
    let m = e.to_string();
    assert!(m.contains("lacks what hangar needs: git, tmux ("), "{m}");
    // The test image has no sudo, so sudo: true is refused at the check.
    let m = e_sudo.unwrap_err().to_string();
    assert!(m.contains("sudo"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_limits_reach_the_container() {
    let Some(p) = provider().await else { return };
    let home = tempfile::tempdir().unwrap();
    let sb = make(
        &p,
        home.path(),
        env("resources: {cpu: 0.5, memory: 256m, pids: 64}\n"),
        1,
    )
    .await;
    assert!(sb.capabilities.resource_limits);
    let info = p
        .client()
        .inspect_container(sb.handle["container"].as_str().unwrap(), None)
        .await
        .unwrap();
    let hc = info.host_config.unwrap();
    assert_eq!(
        (hc.nano_cpus, hc.memory, hc.pids_limit),
        (Some(500_000_000), Some(256 << 20), Some(64))
    );
    let (_, pids) = sh(
        &p,
        &sb,
        Who::Agent,
        "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max",
    )
    .await;
    assert_eq!(pids, "64");
    p.destroy(&sb, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tmux_server_is_roots_alone() {
    let Some(p) = provider().await else { return };
    let home = tempfile::tempdir().unwrap();
    let sb = make(&p, home.path(), env(""), 2).await;
    p.start_tmux(&sb, "s1", Who::Hangar, &ExecRequest::new(["sleep", "300"]))
        .await
        .unwrap();
    assert!(p.tmux_alive(&sb, "s1").await.unwrap());
    let (_, owner) = sh(&p, &sb, Who::Hangar, "stat -c '%U %a' /run/hangar-tmux").await;
    assert_eq!(owner, "root 700");
    for probe in [
        "ls /run/hangar-tmux",
        "tmux -S /run/hangar-tmux/default list-sessions",
    ] {
        let (st, out) = sh(&p, &sb, Who::Agent, probe).await;
        assert_ne!(st, 0, "the agent could: {probe}: {out}");
    }
    p.destroy(&sb, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_split_everything_is_root_and_says_so() {
    let Some(p) = provider().await else { return };
    let home = tempfile::tempdir().unwrap();
    let sb = make(&p, home.path(), env("uid_split: false\n"), 3).await;
    assert!(!sb.capabilities.uid_split);
    assert!(
        sb.capabilities
            .uid_split_off
            .as_deref()
            .unwrap()
            .contains("uid_split: false")
    );
    assert!(sb.agent.is_none());
    assert_eq!(sh(&p, &sb, Who::Agent, "id -u").await, (0, "0".into()));
    p.destroy(&sb, false).await.unwrap();
}

/// An image without the harness runs hangar's pinned Claude Code, bound read-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pinned_harness_cli_is_bound_read_only_for_a_plain_image() {
    let Some(p) = provider().await else { return };
    let claude = hangar_testkit::claude_bin().unwrap();
    let real = std::fs::canonicalize(&claude).unwrap();
    // The npm prefix holding node_modules/ (.tools/npm).
    let prefix = real
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .and_then(Path::parent)
        .unwrap()
        .to_owned();
    let p = p.with_ro_binds(vec![prefix.clone()]);
    let home = tempfile::tempdir().unwrap();
    let sb = make(&p, home.path(), env(""), 4).await;
    let bin = prefix.join("node_modules/.bin/claude");
    let (st, out) = sh(&p, &sb, Who::Agent, &format!("{} --version", bin.display())).await;
    assert_eq!(st, 0, "{out}");
    assert!(out.contains(hangar_testkit::CLAUDE_CODE_VERSION), "{out}");
    let (st, _) = sh(
        &p,
        &sb,
        Who::Hangar,
        &format!("touch {}/x", prefix.display()),
    )
    .await;
    assert_ne!(st, 0, "the pinned CLI is writable from the sandbox");
    p.destroy(&sb, false).await.unwrap();
}

fn env_of(image: &str) -> EnvSpec {
    EnvSpec::from_yaml(&format!("name: pulled\nprovider: docker\nimage: {image}\n")).unwrap()
}

/// An image only the registry has: `create` pulls it (nobody checked first) and the sandbox
/// runs; `check` and `ensure_image` pull it too, saying how it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_only_a_registry_has_is_pulled() {
    let Some(p) = provider().await else { return };
    let docker = p.client();
    let repo = format!("{}/hangar-pull-test", registry::open_registry());
    let remote = registry::push(docker, &image(), &repo, &registry::unique_tag(), None).await;

    let home = tempfile::tempdir().unwrap();
    let sb = make(&p, home.path(), env_of(&remote), 10).await;
    assert_eq!(
        sh(&p, &sb, Who::Agent, "cat f && echo ran").await,
        (0, "xran".into())
    );
    assert!(registry::is_local(docker, &remote).await);
    p.destroy(&sb, false).await.unwrap();

    registry::untag(docker, &remote).await;
    p.check(&env_of(&remote)).await.unwrap();
    assert!(registry::is_local(docker, &remote).await, "check pulls");

    registry::untag(docker, &remote).await;
    let mut lines = Vec::new();
    let pulled = p
        .ensure_image(&env_of(&remote), None, &mut |l| lines.push(l.to_owned()))
        .await
        .unwrap();
    assert!(pulled);
    assert_eq!(
        lines.first(),
        Some(&format!("pulling {remote}")),
        "{lines:?}"
    );
    assert_eq!(lines.last(), Some(&format!("pulled {remote}")), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("Pull complete")
            || l.contains("Already exists")
            || l.starts_with("Digest: ")),
        "{lines:?}"
    );
    // Here now: nothing to pull, nothing said.
    let mut again = Vec::new();
    let pulled = p
        .ensure_image(&env_of(&remote), None, &mut |l| again.push(l.to_owned()))
        .await
        .unwrap();
    assert!(!pulled && again.is_empty(), "{again:?}");
    registry::untag(docker, &remote).await;
}

/// A name the registry does not have: the check and the create fail naming the image and the
/// registry's own words, and leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_registry_lacks_fails_naming_it() {
    let Some(p) = provider().await else { return };
    let missing = format!(
        "{}/hangar-pull-missing:{}",
        registry::open_registry(),
        registry::unique_tag()
    );
    let e = p.check(&env_of(&missing)).await.unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(e, SandboxError::Unavailable(_))
            && m.contains(&format!(
                "image {missing} is not on this machine and pulling it from 127."
            ))
            && m.contains("manifest unknown"),
        "{m}"
    );
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let id = format!("docker-{}-11", std::process::id());
    let e = p
        .create(&CreateRequest {
            agent_uid: None,
            id: id.clone(),
            env: env_of(&missing),
            repo,
            person: "ada@example.com".into(),
            home: home.path().to_owned(),
        })
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("image {missing} is not on this machine")),
        "{e}"
    );
    assert!(!home.path().join("sandboxes").join(&id).exists());
    assert!(
        p.client()
            .inspect_container(&format!("hangar-{id}"), None)
            .await
            .is_err(),
        "a container was left behind"
    );
}

/// A registry that takes only a login: refused without it (or with a wrong one), saying so;
/// pulled with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_wants_a_login_gets_the_environments() {
    let Some(p) = provider().await else { return };
    let docker = p.client();
    let reg = registry::LoginRegistry::start();
    let repo = format!("{}/hangar-pull-login", reg.addr);
    let remote = registry::push(
        docker,
        &image(),
        &repo,
        &registry::unique_tag(),
        Some(reg.credentials()),
    )
    .await;
    let env = env_of(&remote);

    let e = p
        .ensure_image(&env, None, &mut |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "image {remote} is not on this machine and pulling it from {} failed: ",
            reg.addr
        )) && e.contains("no basic auth credentials"),
        "{e}"
    );
    let wrong = RegistryAuth::basic(registry::USER, "not-the-password");
    let e = p
        .ensure_image(&env, Some(&wrong), &mut |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("(with environment pulled's DOCKER_REGISTRY_AUTH) failed: ")
            && e.contains("unauthorized"),
        "{e}"
    );
    assert!(!e.contains("not-the-password"), "{e}");
    assert!(!registry::is_local(docker, &remote).await);

    let right = RegistryAuth::from_json(&format!(
        r#"{{"username": "{}", "password": "{}"}}"#,
        registry::USER,
        registry::PASSWORD
    ))
    .unwrap();
    assert!(
        p.ensure_image(&env, Some(&right), &mut |_| {})
            .await
            .unwrap()
    );
    assert!(registry::is_local(docker, &remote).await);
    registry::untag(docker, &remote).await;
}

/// `HANGAR_DOCKER_MIRROR=stream`: the container has no mount of this machine's (the workspace
/// came in as a tar, the agent's; the control folder is only inside, root's), and an exec stream
/// carries bytes both ways and ends its command when dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_sandbox_sees_no_folder_of_this_machine_and_keeps_an_exec_stream() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let Some(p) = provider().await else { return };
    let p = p.with_mirror(hangar_sandbox::DockerMirror::Stream);
    let home = tempfile::tempdir().unwrap();
    let sb = make(&p, home.path(), env(""), 7).await;
    assert!(sb.mirrored());
    assert!(sb.host_workspace.is_none());
    let cid = sb.handle["container"].as_str().unwrap().to_owned();
    let info = p.client().inspect_container(&cid, None).await.unwrap();
    let mounts: Vec<String> = info
        .mounts
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.source)
        .collect();
    assert!(mounts.is_empty(), "bound from this machine: {mounts:?}");
    let a = sb.agent.clone().unwrap();
    assert_eq!(
        sh(
            &p,
            &sb,
            Who::Hangar,
            "stat -c '%u %a' /workspace/f /run/hangar; cat /workspace/f"
        )
        .await,
        (0, format!("{} 644\n0 700\nx", a.uid))
    );
    let (st, _) = sh(&p, &sb, Who::Agent, "ls /run/hangar").await;
    assert_ne!(st, 0, "the agent can list the control folder");

    let mut s = p
        .exec_stream(
            &sb,
            Who::Hangar,
            &ExecRequest::new(["sh", "-c", "echo $$ > /tmp/streamed.pid; exec cat"]),
        )
        .await
        .unwrap();
    let mut lines = tokio::io::BufReader::new(s.stdout).lines();
    for word in ["one", "two"] {
        s.stdin
            .write_all(format!("{word}\n").as_bytes())
            .await
            .unwrap();
        s.stdin.flush().await.unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
            .await
            .expect("no echo within 10 s")
            .unwrap();
        assert_eq!(got.as_deref(), Some(word));
    }
    drop((s.stdin, lines, s.keep));
    // Its stdin closed, the command ends.
    let mut ended = false;
    for _ in 0..100 {
        let (st, _) = sh(&p, &sb, Who::Hangar, "kill -0 $(cat /tmp/streamed.pid)").await;
        if st != 0 {
            ended = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ended, "the stream's command outlived the stream");
    p.destroy(&sb, false).await.unwrap();
}
