//! The conformance suite every provider runs, against the real thing: bubblewrap, dockerd, tmux.
//!
//! One set of checks (`checks`), instantiated per provider by `conformance!`. Docker's run
//! against the dockerd `scripts/start-docker` starts and the image `scripts/build-image` builds;
//! without them they fail, saying what to run (`HANGAR_TEST_DOCKER=0` skips them, saying so).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hangar_cloud::{E2bProvider, KubernetesProvider};
use hangar_fakecloud::FakeCloud;
use hangar_sandbox::{
    CreateRequest, DockerProvider, EnvSpec, ExecRequest, LocalProvider, Provider, Sandbox, Who,
};
use tempfile::TempDir;

/// A provider under test and how to make its environments.
trait Subject: Provider + Sized + 'static {
    /// `None` when the suite is told to skip this provider (said on stderr).
    async fn make() -> Option<Self>;
    fn env_yaml(host_network: bool) -> String;
    /// Everything of a sandbox that should be gone after destroy, checked on the host.
    async fn traces(&self, sb: &Sandbox) -> Traces;
    /// Whether `<host_dir>/ctl` is seen inside (a remote sandbox cannot bind a host folder).
    fn ctl_on_host() -> bool {
        true
    }
    /// Why `attach_argv` cannot be run by this suite, when it cannot.
    fn no_attach() -> Option<&'static str> {
        None
    }
    /// The tmux server's socket inside the sandbox, where commands inside can ask it (docker,
    /// kubernetes, e2b: one root-owned server in the sandbox).
    fn tmux_socket_inside() -> Option<&'static str> {
        None
    }
    /// The command a person's terminal runs to attach (the provider's `attach_argv`).
    fn attach_command(&self, sb: &Sandbox, session: &str) -> Vec<String> {
        self.attach_argv(sb, session)
    }
}

/// What a live sandbox leaves on the host: processes, mounts, folders, containers.
#[derive(Debug, Default)]
struct Traces {
    pids: Vec<i32>,
    mounts: Vec<String>,
    paths: Vec<PathBuf>,
    containers: Vec<String>,
}

impl Traces {
    fn is_empty(&self) -> bool {
        self.pids.is_empty()
            && self.mounts.is_empty()
            && self.paths.is_empty()
            && self.containers.is_empty()
    }
}

/// Processes whose mount table mentions `needle`, mounts of the host's that do, and whether
/// the folder is still there.
fn host_traces(host_dir: &Path, extra_mounts: &[String]) -> Traces {
    let needle = host_dir.to_string_lossy().into_owned();
    let me = std::process::id() as i32;
    let mut t = Traces::default();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(m) = std::fs::read_to_string(e.path().join("mountinfo"))
            && m.contains(&needle)
        {
            t.pids.push(pid);
        }
    }
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    for line in mounts.lines() {
        if line.contains(&needle) || extra_mounts.iter().any(|m| line.contains(m.as_str())) {
            t.mounts.push(line.to_owned());
        }
    }
    if host_dir.exists() {
        t.paths.push(host_dir.to_owned());
    }
    t
}

impl Subject for LocalProvider {
    async fn make() -> Option<Self> {
        Some(LocalProvider::new())
    }
    fn env_yaml(host_network: bool) -> String {
        let net = if host_network { "network: host\n" } else { "" };
        format!("name: conformance\nprovider: local\n{net}")
    }
    async fn traces(&self, sb: &Sandbox) -> Traces {
        let mut t = host_traces(&sb.host_dir, &[]);
        // The tmux server lives on the host, outside the sandbox's namespaces.
        let sock = sb.host_dir.join("tmux.sock");
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
                && String::from_utf8_lossy(&cmd).contains(&*sock.to_string_lossy())
                && let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok())
                && !t.pids.contains(&pid)
            {
                t.pids.push(pid);
            }
        }
        t
    }
}

/// A sandbox made from a small git repository with a commit, an uncommitted change, an untracked
/// and an ignored file; destroyed on drop if a check failed before destroying it.
struct Fixture<P: Subject> {
    p: std::sync::Arc<P>,
    sb: Option<Sandbox>,
    _home: TempDir,
    _repo: TempDir,
}

impl<P: Subject> Drop for Fixture<P> {
    fn drop(&mut self) {
        if let Some(sb) = self.sb.take() {
            let p = self.p.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                let _ = rt.block_on(p.destroy(&sb, false));
            })
            .join()
            .unwrap();
        }
    }
}

fn git(repo: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", repo)
        .output()
        .unwrap();
    assert!(st.status.success(), "git {args:?}: {st:?}");
}

fn make_repo() -> TempDir {
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    git(r, &["init", "-q"]);
    std::fs::write(r.join("README"), "committed\n").unwrap();
    std::fs::write(r.join(".gitignore"), "ignored.txt\n").unwrap();
    std::fs::write(r.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(r.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    git(r, &["add", "."]);
    git(r, &["commit", "-q", "-m", "first"]);
    std::fs::write(r.join("README"), "committed\nchanged, not committed\n").unwrap();
    std::fs::write(r.join("untracked.txt"), "untracked\n").unwrap();
    std::fs::write(r.join("ignored.txt"), "ignored\n").unwrap();
    repo
}

async fn fixture<P: Subject>(host_network: bool) -> Option<Fixture<P>> {
    let p = P::make().await?;
    let env = EnvSpec::from_yaml(&P::env_yaml(host_network)).unwrap();
    p.check(&env).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let repo = make_repo();
    let req = CreateRequest {
        agent_uid: None,
        id: format!("conf-{}", std::process::id() as u64 * 1000 + next()),
        env,
        repo: repo.path().to_owned(),
        person: "ada@example.com".into(),
        home: home.path().to_owned(),
    };
    let sb = p.create(&req).await.unwrap();
    let t = p.traces(&sb).await;
    assert!(
        !t.is_empty(),
        "a live sandbox shows on the host: the checks can fail"
    );
    Some(Fixture {
        p: std::sync::Arc::new(p),
        sb: Some(sb),
        _home: home,
        _repo: repo,
    })
}

fn next() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

impl<P: Subject> Fixture<P> {
    fn sb(&self) -> &Sandbox {
        self.sb.as_ref().unwrap()
    }

    async fn sh(&self, who: Who, script: &str) -> hangar_sandbox::Output {
        self.p
            .exec(self.sb(), who, &ExecRequest::new(["sh", "-c", script]))
            .await
            .unwrap()
    }

    async fn out(&self, who: Who, script: &str) -> String {
        let o = self.sh(who, script).await;
        assert!(
            o.success(),
            "{script}: status {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap().trim().to_owned()
    }

    /// Destroys and checks that nothing is left.
    async fn destroy_clean(&mut self, keep_logs: bool) {
        let sb = self.sb.take().unwrap();
        self.p.destroy(&sb, keep_logs).await.unwrap();
        let mut t = self.p.traces(&sb).await;
        if keep_logs {
            assert_eq!(
                std::fs::read_dir(&sb.host_dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect::<Vec<_>>(),
                ["ctl"],
                "keep_logs keeps ctl/ alone"
            );
            t.paths.retain(|p| p != &sb.host_dir);
        }
        assert!(t.is_empty(), "left behind: {t:#?}");
        // Twice is fine: the second finds nothing to do.
        self.p.destroy(&sb, keep_logs).await.unwrap();
    }
}

mod checks {
    use super::*;

    pub async fn workspace_is_the_repo_as_it_was<P: Subject>() {
        let Some(mut f) = fixture::<P>(false).await else {
            return;
        };
        let sb = f.sb().clone();
        assert_eq!(sb.workspace, Path::new("/workspace"));
        let meta = std::fs::metadata(&sb.host_dir).unwrap();
        assert_eq!(
            meta.mode() & 0o777,
            0o700,
            "the sandbox's folder is hangar's alone"
        );
        let listing = f
            .out(Who::Agent, "cat README untracked.txt ignored.txt; ls -a")
            .await;
        assert!(
            listing.contains("changed, not committed")
                && listing.contains("untracked\nignored")
                && listing.contains(".git"),
            "{listing}"
        );
        let status = f
            .out(Who::Agent, "git status --porcelain --untracked-files=all")
            .await;
        assert_eq!(status, "M README\n?? untracked.txt", "{status}");
        assert_eq!(f.out(Who::Agent, "./run.sh").await, "ran");
        if let Some(a) = &sb.agent {
            let owners = f
                .out(Who::Hangar, "stat -c %u README .git .git/HEAD .")
                .await;
            let want = format!("{0}\n{0}\n{0}\n{0}", a.uid);
            assert_eq!(owners, want, "the workspace is the agent's");
        }
        f.destroy_clean(false).await;
    }

    pub async fn exec_as_the_agent_and_as_hangar<P: Subject>() {
        let Some(mut f) = fixture::<P>(false).await else {
            return;
        };
        let sb = f.sb().clone();
        let agent_uid = f.out(Who::Agent, "id -u").await;
        let hangar_uid = f.out(Who::Hangar, "id -u").await;
        match &sb.agent {
            Some(a) => {
                assert!(sb.capabilities.uid_split);
                assert_eq!(agent_uid, a.uid.to_string());
                assert_eq!(hangar_uid, "0");
                assert_eq!(
                    f.out(Who::Agent, "id -un; echo $HOME").await,
                    "agent\n/home/agent"
                );
                assert_eq!(f.out(Who::Agent, "id -G").await, a.gid.to_string());
            }
            None => {
                assert!(!sb.capabilities.uid_split);
                assert!(sb.capabilities.uid_split_off.is_some());
                assert_eq!(agent_uid, hangar_uid);
            }
        }
        // Status, both streams, stdin, variables, the working folder.
        let o = f.sh(Who::Agent, "echo out; echo err >&2; exit 3").await;
        assert_eq!(
            (o.status, &o.stdout[..], &o.stderr[..]),
            (3, &b"out\n"[..], &b"err\n"[..])
        );
        let mut req = ExecRequest::new(["sh", "-c", "cat; echo \"$GREETING\"; pwd"]);
        req.stdin = Some(b"from stdin\n".to_vec());
        req.env.push(("GREETING".into(), "hello there".into()));
        let o = f.p.exec(&sb, Who::Agent, &req).await.unwrap();
        assert_eq!(
            String::from_utf8(o.stdout).unwrap(),
            "from stdin\nhello there\n/workspace\n"
        );
        // A large stdin goes through whole.
        let mut req = ExecRequest::new(["sh", "-c", "wc -c"]);
        req.stdin = Some(vec![b'x'; 3 << 20]);
        req.cwd = Some("/tmp".into());
        let o = f.p.exec(&sb, Who::Hangar, &req).await.unwrap();
        assert_eq!(
            String::from_utf8(o.stdout).unwrap().trim(),
            (3 << 20).to_string()
        );
        // Nothing of the test's environment leaks in (docker adds the container's HOSTNAME).
        let env = f
            .out(
                Who::Agent,
                "env | cut -d= -f1 | grep -vx HOSTNAME | sort | tr '\\n' ' '",
            )
            .await;
        assert_eq!(env, "HOME LANG PATH PWD", "{env}");
        f.destroy_clean(false).await;
    }

    pub async fn copy_in_and_read_out<P: Subject>() {
        let Some(mut f) = fixture::<P>(false).await else {
            return;
        };
        let sb = f.sb().clone();
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("f");
        std::fs::write(&src, b"\x00binary\xffbytes\n").unwrap();
        let uid = sb.agent.as_ref().map(|a| a.uid);
        let hangar_uid = f.out(Who::Hangar, "id -u").await;

        f.p.copy_in(
            &sb,
            &src,
            Path::new("/workspace/in/a.bin"),
            Who::Agent,
            0o640,
        )
        .await
        .unwrap();
        let st = f
            .out(Who::Hangar, "stat -c '%u %a' /workspace/in/a.bin")
            .await;
        let want_uid = uid.map(|u| u.to_string()).unwrap_or(hangar_uid.clone());
        assert_eq!(st, format!("{want_uid} 640"));
        assert_eq!(
            f.p.read_file(&sb, Path::new("/workspace/in/a.bin"))
                .await
                .unwrap(),
            b"\x00binary\xffbytes\n"
        );

        f.p.copy_in(
            &sb,
            &src,
            Path::new("/var/lib/hangar/driver"),
            Who::Hangar,
            0o755,
        )
        .await
        .unwrap();
        let st = f
            .out(
                Who::Hangar,
                "stat -c '%u %a' /var/lib/hangar /var/lib/hangar/driver",
            )
            .await;
        assert_eq!(st, format!("{hangar_uid} 755\n{hangar_uid} 755"));
        // Again, over the old one (each turn copies the driver in).
        std::fs::write(&src, b"v2").unwrap();
        f.p.copy_in(
            &sb,
            &src,
            Path::new("/var/lib/hangar/driver"),
            Who::Hangar,
            0o700,
        )
        .await
        .unwrap();
        assert_eq!(
            f.p.read_file(&sb, Path::new("/var/lib/hangar/driver"))
                .await
                .unwrap(),
            b"v2"
        );
        if sb.agent.is_some() {
            let o = f
                .sh(
                    Who::Agent,
                    "echo x > /var/lib/hangar/driver || touch /var/lib/hangar/new",
                )
                .await;
            assert!(!o.success(), "the agent changed /var/lib/hangar");
            let o = f.sh(Who::Agent, "cat /var/lib/hangar/driver").await;
            assert!(!o.success(), "the agent read a 0700 file of hangar's");
        }
        // A link the agent planted is followed inside the sandbox, never on the host.
        let outside = t.path().join("host-file");
        std::fs::write(&outside, "host").unwrap();
        f.out(
            Who::Agent,
            &format!("ln -s {} /workspace/planted", outside.display()),
        )
        .await;
        let r = f.p.read_file(&sb, Path::new("/workspace/planted")).await;
        assert!(r.is_err(), "read a host file through a planted link: {r:?}");
        let _ =
            f.p.copy_in(
                &sb,
                &src,
                Path::new("/workspace/planted"),
                Who::Agent,
                0o644,
            )
            .await;
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "host");

        let missing = f.p.read_file(&sb, Path::new("/workspace/nope")).await;
        assert!(missing.is_err());
        f.destroy_clean(false).await;
    }

    pub async fn a_detached_process_in_tmux_outlives_the_call_and_can_be_attached<P: Subject>() {
        let Some(mut f) = fixture::<P>(false).await else {
            return;
        };
        let sb = f.sb().clone();
        let script = "echo HELLO-FROM-TMUX-$(id -u); i=0; while true; do i=$((i+1)); echo $i > /tmp/ticks; sleep 0.1; done";
        f.p.start_tmux(
            &sb,
            "run-1",
            Who::Agent,
            &ExecRequest::new(["sh", "-c", script]),
        )
        .await
        .unwrap();
        assert!(f.p.tmux_alive(&sb, "run-1").await.unwrap());
        assert!(!f.p.tmux_alive(&sb, "run-2").await.unwrap());
        assert!(
            !f.p.tmux_alive(&sb, "run").await.unwrap(),
            "names match exactly"
        );
        // It keeps running after start_tmux returned.
        let ticks = || async {
            let b =
                f.p.read_file(&sb, Path::new("/tmp/ticks"))
                    .await
                    .unwrap_or_default();
            String::from_utf8_lossy(&b)
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while ticks().await < 2 {
            assert!(Instant::now() < deadline, "the tmux process did not run");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Still ticking after the call returned (waited for, not timed: the machine may be loaded).
        let a = ticks().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while ticks().await <= a {
            assert!(Instant::now() < deadline, "the tmux process stopped");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Its uid is the agent's.
        let agent_uid = f.out(Who::Agent, "id -u").await;

        // Attach from a terminal of the test's own (a tmux on the host), and see the output.
        if let Some(why) = P::no_attach() {
            eprintln!("attach is not checked: {why}");
            f.destroy_clean(false).await;
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let sock = t.path().join("viewer.sock");
        let argv = f.p.attach_command(&sb, "run-1");
        let st = Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "30",
                "--",
            ])
            .args(&argv)
            .env_remove("TMUX")
            .status()
            .unwrap();
        assert!(st.success(), "viewer tmux for {argv:?}");
        let want = format!("HELLO-FROM-TMUX-{agent_uid}");
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut screen = String::new();
        while !screen.contains(&want) {
            assert!(
                Instant::now() < deadline,
                "{argv:?} never showed {want}; screen:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let o = Command::new("tmux")
                .arg("-S")
                .arg(&sock)
                .args(["capture-pane", "-p"])
                .output()
                .unwrap();
            screen = String::from_utf8_lossy(&o.stdout).into_owned();
        }
        // The terminal's size reaches the session: the viewer's window narrowed, the session's
        // window follows (a resize of `docker exec`/`kubectl exec -it`, envd's `Update`).
        if let Some(inner) = P::tmux_socket_inside() {
            let st = Command::new("tmux")
                .arg("-S")
                .arg(&sock)
                .args(["resize-window", "-x", "100", "-y", "30"])
                .status()
                .unwrap();
            assert!(st.success());
            let ask =
                format!("tmux -S {inner} display-message -p -t '=run-1:' '#{{window_width}}'");
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let width = f.out(Who::Hangar, &ask).await;
                if width == "100" {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the session's window stayed {width} wide after the terminal became 100"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // Typing reaches it: Ctrl-b d detaches, which ends the attach command (and with it the
        // viewer), while the session runs on.
        let st = Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .args(["send-keys", "C-b", "d"])
            .status()
            .unwrap();
        assert!(st.success());
        let deadline = Instant::now() + Duration::from_secs(15);
        while Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .arg("has-session")
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
        {
            assert!(
                Instant::now() < deadline,
                "{argv:?} did not end when the person detached"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(f.p.tmux_alive(&sb, "run-1").await.unwrap());

        let before = f.p.traces(&sb).await;
        assert!(
            !before.is_empty(),
            "a live sandbox shows on the host: the check can fail"
        );
        f.destroy_clean(false).await;
    }

    pub async fn destroy_stops_what_still_runs<P: Subject>() {
        let Some(mut f) = fixture::<P>(false).await else {
            return;
        };
        let sb = f.sb().clone();
        let p = f.p.clone();
        let running = tokio::spawn(async move {
            let req = ExecRequest::new(["sh", "-c", "echo started > /tmp/started; sleep 300"]);
            p.exec(&sb, Who::Agent, &req).await
        });
        let sb = f.sb().clone();
        let deadline = Instant::now() + Duration::from_secs(10);
        while f.p.read_file(&sb, Path::new("/tmp/started")).await.is_err() {
            assert!(Instant::now() < deadline, "the command did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            !f.p.traces(&sb).await.pids.is_empty(),
            "a running command shows on the host"
        );
        f.destroy_clean(false).await;
        let ended = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("the command outlived its sandbox")
            .unwrap();
        assert!(
            ended.as_ref().map_or(true, |o| !o.success()),
            "the command ended well: {ended:?}"
        );
    }

    pub async fn no_network_means_no_route<P: Subject>() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let probe = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
        let routes = "tail -n +2 /proc/net/route | wc -l";

        let Some(mut f) = fixture::<P>(false).await else {
            return;
        };
        let o = f.sh(Who::Agent, &format!("bash -c '{probe}'")).await;
        assert!(
            !o.success(),
            "reached the host's 127.0.0.1:{port} with no network"
        );
        assert_eq!(
            f.out(Who::Agent, routes).await,
            "0",
            "a route with no network"
        );
        assert_eq!(f.out(Who::Hangar, routes).await, "0");
        f.destroy_clean(false).await;

        // The same probe succeeds with the host's network: the check above can fail.
        let Some(mut f) = fixture::<P>(true).await else {
            return;
        };
        assert_eq!(
            f.out(Who::Agent, &format!("bash -c '{probe}'")).await,
            "connected"
        );
        f.destroy_clean(false).await;
        drop(listener);
    }

    pub async fn the_agent_cannot_read_the_control_folder<P: Subject>() {
        let Some(mut f) = fixture::<P>(false).await else {
            return;
        };
        let sb = f.sb().clone();
        if !P::ctl_on_host() {
            eprintln!(
                "{:?} sandboxes do not see the host's control folder: nothing to check",
                sb.env.provider
            );
            f.destroy_clean(true).await;
            return;
        }
        let run = sb.ctl_host().join("run-1.ctl");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(run.join("key"), "secret-key").unwrap();
        let inside = sb.inside_ctl(&run.join("key")).unwrap();
        let cat = format!("cat {}", inside.display());
        assert_eq!(f.out(Who::Hangar, &cat).await, "secret-key");
        if sb.agent.is_some() {
            for probe in [
                cat.clone(),
                format!("ls {}", sb.ctl_inside.display()),
                format!("touch {}/x", sb.ctl_inside.display()),
            ] {
                let o = f.sh(Who::Agent, &probe).await;
                assert!(!o.success(), "the agent could: {probe}");
            }
        }
        f.destroy_clean(true).await;
        // The logs stay with keep_logs.
        assert_eq!(
            std::fs::read_to_string(run.join("key")).unwrap(),
            "secret-key"
        );
    }
}

macro_rules! conformance {
    ($name:ident, $p:ty) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn workspace_is_the_repo_as_it_was() {
                checks::workspace_is_the_repo_as_it_was::<$p>().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn exec_as_the_agent_and_as_hangar() {
                checks::exec_as_the_agent_and_as_hangar::<$p>().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn copy_in_and_read_out() {
                checks::copy_in_and_read_out::<$p>().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_detached_process_in_tmux_outlives_the_call_and_can_be_attached() {
                checks::a_detached_process_in_tmux_outlives_the_call_and_can_be_attached::<$p>()
                    .await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn destroy_stops_what_still_runs() {
                checks::destroy_stops_what_still_runs::<$p>().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn no_network_means_no_route() {
                checks::no_network_means_no_route::<$p>().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_agent_cannot_read_the_control_folder() {
                checks::the_agent_cannot_read_the_control_folder::<$p>().await;
            }
        }
    };
}

conformance!(local, LocalProvider);
conformance!(docker, DockerProvider);
conformance!(docker_streamed, StreamedDocker);
conformance!(faked_api_kubernetes, KubernetesProvider);
conformance!(faked_api_e2b, E2bProvider);

/// The image the docker suite runs (`scripts/build-image` makes it).
fn image() -> String {
    std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into())
}

/// Host paths of containers' root file systems, recorded while they live, so that destroy can be
/// checked to have unmounted them.
static ROOTFS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

impl Subject for DockerProvider {
    fn tmux_socket_inside() -> Option<&'static str> {
        Some("/run/hangar-tmux/default")
    }
    async fn make() -> Option<Self> {
        if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
            eprintln!("HANGAR_TEST_DOCKER=0: the docker conformance suite is skipped");
            return None;
        }
        match DockerProvider::connect().await {
            Ok(p) => Some(p),
            Err(e) => panic!(
                "{e}\nthe docker suite needs dockerd and the test image: scripts/start-docker && scripts/build-image (HANGAR_TEST_DOCKER=0 skips it)"
            ),
        }
    }
    fn env_yaml(host_network: bool) -> String {
        let net = if host_network { "network: host\n" } else { "" };
        format!(
            "name: conformance\nprovider: docker\nimage: {}\n{net}",
            image()
        )
    }
    async fn traces(&self, sb: &Sandbox) -> Traces {
        let cid = sb.handle["container"].as_str().unwrap().to_owned();
        if let Ok(info) = self.client().inspect_container(&cid, None).await
            && let Some(merged) = info
                .graph_driver
                .and_then(|g| g.data.get("MergedDir").cloned())
        {
            ROOTFS.lock().unwrap().push((cid.clone(), merged));
        }
        let mounts: Vec<String> = ROOTFS
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _)| *c == cid)
            .map(|(_, m)| m.clone())
            .collect();
        let mut t = host_traces(&sb.host_dir, &mounts);
        // The container's processes, by their cgroup (named after the container).
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            if let Ok(cg) = std::fs::read_to_string(e.path().join("cgroup"))
                && cg.contains(&cid)
                && let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok())
                && !t.pids.contains(&pid)
            {
                t.pids.push(pid);
            }
        }
        let filters = std::collections::HashMap::from([(
            "label".to_owned(),
            vec![format!("dev.hangar.sandbox={}", sb.id)],
        )]);
        let listed = self
            .client()
            .list_containers(Some(
                bollard::query_parameters::ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .unwrap();
        t.containers = listed.into_iter().filter_map(|c| c.id).collect();
        t
    }
}

/// The docker provider with `HANGAR_DOCKER_MIRROR=stream`: nothing of this machine bound in (the
/// workspace sent in as a tar, the control folder only inside).
struct StreamedDocker(DockerProvider);

impl Provider for StreamedDocker {
    fn kind(&self) -> hangar_sandbox::ProviderKind {
        self.0.kind()
    }
    fn capabilities(&self, env: &EnvSpec) -> hangar_sandbox::Capabilities {
        self.0.capabilities(env)
    }
    async fn check(&self, env: &EnvSpec) -> Result<(), hangar_sandbox::SandboxError> {
        self.0.check(env).await
    }
    async fn create(&self, req: &CreateRequest) -> Result<Sandbox, hangar_sandbox::SandboxError> {
        self.0.create(req).await
    }
    async fn exec(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> Result<hangar_sandbox::Output, hangar_sandbox::SandboxError> {
        self.0.exec(sb, who, req).await
    }
    async fn start_tmux(
        &self,
        sb: &Sandbox,
        session: &str,
        who: Who,
        req: &ExecRequest,
    ) -> Result<(), hangar_sandbox::SandboxError> {
        self.0.start_tmux(sb, session, who, req).await
    }
    async fn tmux_alive(
        &self,
        sb: &Sandbox,
        session: &str,
    ) -> Result<bool, hangar_sandbox::SandboxError> {
        self.0.tmux_alive(sb, session).await
    }
    fn attach_argv(&self, sb: &Sandbox, session: &str) -> Vec<String> {
        self.0.attach_argv(sb, session)
    }
    async fn destroy(
        &self,
        sb: &Sandbox,
        keep_logs: bool,
    ) -> Result<(), hangar_sandbox::SandboxError> {
        self.0.destroy(sb, keep_logs).await
    }
}

impl Subject for StreamedDocker {
    fn tmux_socket_inside() -> Option<&'static str> {
        DockerProvider::tmux_socket_inside()
    }
    fn ctl_on_host() -> bool {
        false
    }
    async fn make() -> Option<Self> {
        let p = DockerProvider::make().await?;
        Some(StreamedDocker(
            p.with_mirror(hangar_sandbox::DockerMirror::Stream),
        ))
    }
    fn env_yaml(host_network: bool) -> String {
        DockerProvider::env_yaml(host_network)
    }
    async fn traces(&self, sb: &Sandbox) -> Traces {
        self.0.traces(sb).await
    }
}

/// Without root the local provider still works, with the split off and saying why: the whole
/// local suite again, as `nobody`. (When the suite itself runs without root, it has just done so.)
#[test]
fn local_without_root() {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "local_without_root: not root, so the local suite above ran without root already"
        );
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args(["local::", "--test-threads=2"])
        .env("TMPDIR", "/tmp")
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the local suite as nobody:\n{text}");
    let passed = text
        .split("test result: ok. ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    assert!(passed >= 7, "{text}");
}

/// The fake Kubernetes API server and E2B API every faked_api test of this binary uses (no
/// cluster or E2B account is reachable here): its pods and sandboxes are containers of the local
/// dockerd, of the test image, so the docker suite's needs are theirs.
fn fake() -> Option<&'static FakeCloud> {
    static FAKE: std::sync::OnceLock<FakeCloud> = std::sync::OnceLock::new();
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!(
            "HANGAR_TEST_DOCKER=0: the faked API suites (their pods are containers) are skipped"
        );
        return None;
    }
    Some(FAKE.get_or_init(|| {
        FakeCloud::start("e2b-test-key")
            .unwrap_or_else(|e| panic!("the fake cloud needs dockerd: scripts/start-docker ({e})"))
    }))
}

/// What a fake's sandbox leaves: its folder on the host, its containers and their processes.
async fn fake_traces(sb: &Sandbox) -> Traces {
    let mut t = host_traces(&sb.host_dir, &[]);
    t.containers = fake().unwrap().containers_of(&sb.id).await;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cg) = std::fs::read_to_string(e.path().join("cgroup"))
            && t.containers.iter().any(|c| cg.contains(c.as_str()))
            && let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok())
        {
            t.pids.push(pid);
        }
    }
    t
}

impl Subject for KubernetesProvider {
    fn tmux_socket_inside() -> Option<&'static str> {
        Some("/run/hangar-tmux/default")
    }
    async fn make() -> Option<Self> {
        let f = fake()?;
        static KUBECONFIG: std::sync::OnceLock<(TempDir, PathBuf)> = std::sync::OnceLock::new();
        let (_, path) = KUBECONFIG.get_or_init(|| {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("kubeconfig");
            f.write_kubeconfig(&p, "hangar-test").unwrap();
            (d, p)
        });
        Some(
            KubernetesProvider::from_kubeconfig(path, None)
                .await
                .unwrap(),
        )
    }
    fn env_yaml(open: bool) -> String {
        let egress = if open { "egress: open\n" } else { "" };
        format!(
            "name: conformance\nprovider: kubernetes\nimage: {}\n{egress}",
            image()
        )
    }
    async fn traces(&self, sb: &Sandbox) -> Traces {
        fake_traces(sb).await
    }
    fn ctl_on_host() -> bool {
        false
    }
    fn no_attach() -> Option<&'static str> {
        // The attach command is kubectl's (the fake serves its discovery, pod and websocket exec).
        let found = Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .is_ok_and(|o| o.status.success());
        (!found).then_some("kubectl is not installed on this machine")
    }
}

impl Subject for E2bProvider {
    fn tmux_socket_inside() -> Option<&'static str> {
        Some("/run/hangar-tmux/default")
    }
    async fn make() -> Option<Self> {
        let f = fake()?;
        Some(
            E2bProvider::new(
                f.url(),
                "e2b-test-key".into(),
                f.envd_url(),
                "e2b.invalid".into(),
                Duration::from_secs(600),
            )
            .unwrap(),
        )
    }
    fn env_yaml(open: bool) -> String {
        let egress = if open { "egress: open\n" } else { "" };
        format!(
            "name: conformance\nprovider: e2b\nimage: {}\n{egress}",
            image()
        )
    }
    async fn traces(&self, sb: &Sandbox) -> Traces {
        fake_traces(sb).await
    }
    fn ctl_on_host() -> bool {
        false
    }
    /// `hangar sb attach`'s client of envd's PTY process, run by this binary itself
    /// ([`e2b_pty_terminal`]) in the test's terminal.
    fn attach_command(&self, sb: &Sandbox, session: &str) -> Vec<String> {
        let target = self.pty_target(sb, session).unwrap();
        vec![
            "env".into(),
            format!(
                "HANGAR_TEST_E2B_PTY={}",
                serde_json::json!({
                    "sandbox": target.sandbox,
                    "envd": target.envd,
                    "token": target.token,
                    "argv": target.argv,
                })
            ),
            std::env::current_exe().unwrap().display().to_string(),
            "e2b_pty_terminal".into(),
            "--exact".into(),
            "--ignored".into(),
            "--nocapture".into(),
        ]
    }
}

/// The terminal of the e2b attach check: this process's terminal joined to envd's PTY process
/// directly (`hangar_cloud::e2b::terminal::attach_terminal`); it checks envd's PTY and the
/// provider's target, not `hangar sb attach`, which goes through `hangar serve`'s relay (the
/// `faked_api_an_e2b_attach_...` tests of hangar-cli).
#[test]
#[ignore = "run by the e2b attach check in a terminal of its own (HANGAR_TEST_E2B_PTY)"]
fn e2b_pty_terminal() {
    let Ok(target) = std::env::var("HANGAR_TEST_E2B_PTY") else {
        eprintln!("HANGAR_TEST_E2B_PTY is not set: nothing to attach to");
        return;
    };
    let target: hangar_cloud::e2b::PtyTarget = serde_json::from_str(&target).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt
        .block_on(hangar_cloud::e2b::terminal::attach_terminal(&target))
        .unwrap();
    std::process::exit(status);
}
