#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "benchmark binary"
)]

//! Sandbox create -> ready to run the driver (`cargo bench -p hangar-sandbox`): `create` from a
//! small git repository, then the first `exec` of `true` as hangar's user, p50 over 20, for each
//! provider this machine has, beside that provider's bare cost measured in the same run,
//! interleaved: `bwrap` with the same namespaces running `true`, and `docker run --rm IMAGE true`
//! made through the same Engine API (create, start, wait, remove). The sandbox is destroyed
//! after each round, outside the timing. Targets: local < 300 ms, docker < 1.5 s.
//! `HANGAR_TEST_DOCKER=0` leaves docker out; `HANGAR_TEST_IMAGE` names its image
//! (default hangar-base:bookworm, from `scripts/build-image`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hangar_sandbox::{
    CreateRequest, DockerProvider, EnvSpec, ExecRequest, LocalProvider, Provider, Who,
};

/// Rounds per provider (5 with `HANGAR_BENCH_QUICK=1`, scripts/bench --quick).
fn rounds() -> usize {
    if std::env::var("HANGAR_BENCH_QUICK").is_ok_and(|v| v == "1") {
        5
    } else {
        20
    }
}

fn p50(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn git(repo: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args(["-c", "user.name=b", "-c", "user.email=b@example.com"])
        .args(args)
        .current_dir(repo)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
}

/// A small repository: 50 files in a few folders, one commit, one uncommitted change.
fn repo() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    git(d.path(), &["init", "-q"]);
    for i in 0..50 {
        let dir = d.path().join(format!("src/m{}", i % 5));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("f{i}.rs")),
            format!("// file {i}\n").repeat(40),
        )
        .unwrap();
    }
    git(d.path(), &["add", "."]);
    git(d.path(), &["commit", "-q", "-m", "bench"]);
    std::fs::write(d.path().join("src/m0/f0.rs"), "changed\n").unwrap();
    d
}

/// Create -> ready, and the destroy after it.
async fn create_to_ready<P: Provider>(
    p: &P,
    env: &EnvSpec,
    repo: &Path,
    home: &Path,
    n: usize,
) -> (Duration, Duration) {
    let req = CreateRequest {
        agent_uid: None,
        id: format!("bench-{}-{n}", std::process::id()),
        env: env.clone(),
        repo: repo.to_owned(),
        person: "bench@example.com".into(),
        home: home.to_owned(),
    };
    let t = Instant::now();
    let sb = p.create(&req).await.unwrap();
    let out = p
        .exec(&sb, Who::Hangar, &ExecRequest::new(["true"]))
        .await
        .unwrap();
    let d = t.elapsed();
    assert!(out.success(), "{out:?}");
    let t = Instant::now();
    p.destroy(&sb, false).await.unwrap();
    (d, t.elapsed())
}

/// What copying the repository costs on this disk: `cp -a` of it next to hangar's home.
fn bare_copy(repo: &Path, home: &Path) -> Duration {
    let dst = home.join("cp-a");
    let t = Instant::now();
    let st = Command::new("cp")
        .arg("-a")
        .arg(repo)
        .arg(&dst)
        .status()
        .unwrap();
    let d = t.elapsed();
    assert!(st.success());
    std::fs::remove_dir_all(&dst).unwrap();
    d
}

fn bare_bwrap() -> Duration {
    let t = Instant::now();
    let st = Command::new("bwrap")
        .args([
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-net",
        ])
        .args([
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--die-with-parent",
        ])
        .arg("true")
        .status()
        .unwrap();
    let d = t.elapsed();
    assert!(st.success());
    d
}

/// `docker run --rm --network none IMAGE true` through the Engine API: create, start, wait,
/// remove.
async fn bare_docker_run(p: &DockerProvider, image: &str) -> Duration {
    use bollard::models::{ContainerCreateBody, HostConfig};
    let docker = p.client();
    let t = Instant::now();
    let made = docker
        .create_container(
            None,
            ContainerCreateBody {
                image: Some(image.to_owned()),
                cmd: Some(vec!["true".into()]),
                host_config: Some(HostConfig {
                    network_mode: Some("none".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    docker.start_container(&made.id, None).await.unwrap();
    let mut wait = docker.wait_container(&made.id, None);
    while let Some(w) = wait.next().await {
        assert_eq!(w.unwrap().status_code, 0);
    }
    docker
        .remove_container(
            &made.id,
            Some(
                bollard::query_parameters::RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build(),
            ),
        )
        .await
        .unwrap();
    t.elapsed()
}

fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let ft = e.file_type().unwrap();
            1 + if ft.is_dir() { count(&e.path()) } else { 0 }
        })
        .sum()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = rounds();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "sandbox create -> ready (exec `true` as hangar's user), p50 over {rounds}; load average {}",
        load.split(' ').take(3).collect::<Vec<_>>().join(" ")
    );
    let repo = repo();
    let home = tempfile::tempdir_in("/var/tmp").unwrap();

    let local = LocalProvider::new();
    let env = EnvSpec::from_yaml("name: bench\nprovider: local\n").unwrap();
    local.check(&env).await.unwrap();
    let (mut made, mut gone, mut bare, mut copy) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for n in 0..rounds {
        let (m, g) = create_to_ready(&local, &env, repo.path(), home.path(), n).await;
        made.push(m);
        gone.push(g);
        bare.push(bare_bwrap());
        copy.push(bare_copy(repo.path(), home.path()));
    }
    let split = if local.capabilities(&env).uid_split {
        "on"
    } else {
        "off"
    };
    let (made50, bare50) = (p50(&mut made), p50(&mut bare));
    println!(
        "  local   create -> ready   p50 {made50:7.1} ms   (target < 300 ms; uid split {split})"
    );
    println!("  local   bare bwrap true   p50 {bare50:7.1} ms   (baseline)");
    println!(
        "  local   cp -a of the repo p50 {:7.1} ms   (baseline: the copy alone, {} entries)",
        p50(&mut copy),
        count(repo.path())
    );
    println!("  local   destroy           p50 {:7.1} ms", p50(&mut gone));
    figure("local", made50, "bare bwrap true", bare50, 300.0);

    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        println!("  docker  skipped (HANGAR_TEST_DOCKER=0)");
        return;
    }
    let image =
        std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into());
    let docker = DockerProvider::connect().await.unwrap();
    let env =
        EnvSpec::from_yaml(&format!("name: bench\nprovider: docker\nimage: {image}\n")).unwrap();
    docker.check(&env).await.unwrap();
    let (mut made, mut gone, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..rounds {
        let (m, g) = create_to_ready(&docker, &env, repo.path(), home.path(), rounds + n).await;
        made.push(m);
        gone.push(g);
        bare.push(bare_docker_run(&docker, &image).await);
    }
    let (made50, bare50) = (p50(&mut made), p50(&mut bare));
    println!(
        "  docker  create -> ready   p50 {made50:7.1} ms   (target < 1500 ms; uid split on, {image})"
    );
    println!(
        "  docker  bare run --rm true p50 {bare50:6.1} ms   (baseline: create, start, wait, remove via the API)"
    );
    println!("  docker  destroy           p50 {:7.1} ms", p50(&mut gone));
    figure(
        "docker",
        made50,
        "docker run --rm true (API)",
        bare50,
        1500.0,
    );
}

/// A line for scripts/bench's table: figure, value, unit, baseline, its value, target, met.
fn figure(provider: &str, ms: f64, baseline: &str, base_ms: f64, target_ms: f64) {
    println!(
        "hangar-bench\tsandbox: {provider} create -> ready, p50\t{ms:.1}\tms\t{baseline}, p50\t{base_ms:.1}\t< {target_ms}\t{}",
        if ms < target_ms { "yes" } else { "no" }
    );
}
