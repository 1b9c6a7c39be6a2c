//! `egress: {allowlist: [hosts]}` on the local (bubblewrap) and docker providers, against the real
//! thing: from inside a sandbox, as the agent, a client that follows the proxy variables reaches
//! an allowed host (plain HTTP proxying and `CONNECT`), is refused a host not on the list and an
//! address with the proxy's reason, and reaches nothing by going around the proxy; the agent can
//! neither take the proxy's port nor stop it; the Tower hook reaches Tower by its name through
//! the proxy; every connection is recorded; `destroy` leaves no proxy, socket or namespace behind.
//!
//! The "outside" hosts are servers on the host's loopback; the proxy is told, through its
//! test-only name map (`with_egress_test_resolve`, what `HANGAR_EGRESS_TEST_RESOLVE` sets), that
//! `allowed.test` and `api.wild.test` are one of them and `denied.test` the other, which must
//! never be reached. Making the sandbox's network namespace needs root (CI runs as root); the
//! docker tests need dockerd and the test image (`HANGAR_TEST_DOCKER=0` skips them).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hangar_sandbox::{
    CreateRequest, DockerProvider, EnvSpec, ExecRequest, LocalProvider, Provider, Sandbox,
    SandboxError, Who, egress,
};
use hangar_testkit::{TOWER_KEY, TowerDouble};

/// An HTTP server on the host's loopback that answers every request with its name.
struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Server {
    fn start(name: &'static str) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                h.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut b = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    }
                    let body = format!("hello from {name}\n");
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Server { addr, hits }
    }
}

const ALLOWLIST: &str = "egress: {allowlist: [allowed.test, '*.wild.test', tower.test]}\n";
const LISTED: &str = "(allowed.test, *.wild.test, tower.test)";

fn names(allowed: &Server, denied: &Server, tower: &TowerDouble) -> HashMap<String, SocketAddr> {
    let url = tower.url();
    let tower_addr: SocketAddr = url
        .split_once("://")
        .unwrap()
        .1
        .trim_end_matches('/')
        .parse()
        .unwrap();
    HashMap::from([
        ("allowed.test".to_owned(), allowed.addr),
        ("api.wild.test".to_owned(), allowed.addr),
        ("denied.test".to_owned(), denied.addr),
        ("tower.test".to_owned(), tower_addr),
    ])
}

/// The Tower hook (hangar-hook's client, which the driver's `governed` policy shares), run as
/// the agent, reaches Tower by its name through the proxy (`HTTP_PROXY`), and is blocked when
/// Tower's host is not on the list. Needs `HANGAR_TOWER_HOOK_BIN` (scripts/build-hook; set by
/// scripts/test), else says it is skipped.
async fn the_hook_reaches_tower_through_the_proxy<P: Provider>(
    p: &P,
    sb: &Sandbox,
    tower: &TlsTower,
) {
    let TlsTower { tower, ca, .. } = tower;
    let Some(hook) = std::env::var_os("HANGAR_TOWER_HOOK_BIN").filter(|v| !v.is_empty()) else {
        eprintln!(
            "HANGAR_TOWER_HOOK_BIN is not set (scripts/build-hook): the hook's path through the proxy is not checked"
        );
        return;
    };
    let key = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key.path(), TOWER_KEY).unwrap();
    p.copy_in(
        sb,
        Path::new(&hook),
        Path::new("/var/lib/hangar/tower_hook"),
        Who::Hangar,
        0o755,
    )
    .await
    .unwrap();
    p.copy_in(
        sb,
        key.path(),
        Path::new("/home/agent/tower.key"),
        Who::Agent,
        0o600,
    )
    .await
    .unwrap();
    p.copy_in(
        sb,
        ca,
        Path::new("/var/lib/hangar/tower-ca.pem"),
        Who::Hangar,
        0o644,
    )
    .await
    .unwrap();
    let port = tower
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let input = r#"{"session_id":"s","cwd":"/workspace","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"cargo test"},"tool_use_id":"toolu_1","permission_mode":"default"}"#;
    let run = |host: &str| {
        format!(
            "echo '{input}' | /var/lib/hangar/tower_hook --url https://{host}:{port} --ca-file /var/lib/hangar/tower-ca.pem --key-file /home/agent/tower.key --run r1; echo \"exit $?\""
        )
    };
    let (_, out) = sh(p, sb, Who::Agent, &run("tower.test")).await;
    assert!(out.ends_with("exit 0"), "{out}");
    let calls = tower.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].target, "/hooks/claude-code");
    assert_eq!(calls[0].body["tool_input"]["command"], "cargo test");
    assert!(recorded(sb, "tower.test", true), "{:?}", records(sb));
    let (_, out) = sh(p, sb, Who::Agent, &run("denied.test")).await;
    // Over HTTPS the hook asks the proxy for a tunnel, which it refuses (and records).
    assert!(
        out.contains("exit 2")
            && out.contains(
                "the proxy (HTTP_PROXY) refused a tunnel to Tower at https://denied.test"
            ),
        "{out}"
    );
    assert!(recorded(sb, "denied.test", false), "{:?}", records(sb));
    assert_eq!(
        tower.calls().len(),
        1,
        "a call reached Tower by another way"
    );
}

/// The Tower double over HTTPS (the hook speaks nothing else off loopback), its certificate
/// made for `tower.test` by a CA of the test's.
struct TlsTower {
    tower: TowerDouble,
    ca: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn tls_tower() -> TlsTower {
    let dir = tempfile::tempdir().unwrap();
    let made = hangar_testkit::TestCa::make(dir.path(), "DNS:tower.test").unwrap();
    TlsTower {
        tower: TowerDouble::start_tls(&made.cert, &made.key).unwrap(),
        ca: made.ca,
        _dir: dir,
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

async fn sh<P: Provider>(p: &P, sb: &Sandbox, who: Who, script: &str) -> (i32, String) {
    let o = p
        .exec(sb, who, &ExecRequest::new(["bash", "-c", script]))
        .await
        .unwrap();
    let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&o.stderr));
    (o.status, text.trim().to_owned())
}

fn request(id: &str, home: &Path, env: EnvSpec) -> CreateRequest {
    let repo = home.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("f"), "x").unwrap();
    CreateRequest {
        agent_uid: None,
        id: format!("{id}-{}", std::process::id()),
        env,
        repo,
        person: "ada@example.com".into(),
        home: home.to_owned(),
    }
}

/// The proxy's record of the sandbox, one JSON value per connection.
fn records(sb: &Sandbox) -> Vec<serde_json::Value> {
    std::fs::read_to_string(sb.host_dir.join("ctl/egress.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn recorded(sb: &Sandbox, host: &str, allowed: bool) -> bool {
    records(sb)
        .iter()
        .any(|r| r["host"] == host && r["allowed"] == allowed)
}

/// What is left on the host of a sandbox's egress once it is destroyed: nothing.
fn assert_nothing_left(sb: &Sandbox, running: bool) {
    assert!(!running, "the proxy of {} still runs", sb.id);
    assert!(!sb.host_dir.exists(), "{} is left", sb.host_dir.display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&*sb.host_dir.to_string_lossy()),
        "a mount of the sandbox is left:\n{mounts}"
    );
}

/// The agent's side, the same in both providers: a client that does not go through the proxy
/// reaches nothing, neither by name nor by address; the proxy's port cannot be taken (it is
/// privileged, and hangar holds it) and killing every process the agent can reach leaves the
/// proxy serving; the record is out of the agent's reach.
async fn agent_cannot_go_around<P: Provider>(p: &P, sb: &Sandbox, allowed: &Server) {
    let port = allowed.addr.port();
    let (st, out) = sh(
        p,
        sb,
        Who::Agent,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
    )
    .await;
    assert!(st != 0 && !out.contains("connected"), "direct: {out}");
    let (st, out) = sh(
        p,
        sb,
        Who::Agent,
        "exec 3<>/dev/tcp/allowed.test/80 && echo connected",
    )
    .await;
    assert!(st != 0 && !out.contains("connected"), "by name: {out}");

    for port in [980, 81] {
        let (st, out) = sh(
            p,
            sb,
            Who::Agent,
            &format!(
                "perl -MIO::Socket::INET -e 'IO::Socket::INET->new(LocalAddr => \"127.0.0.1\", LocalPort => {port}, Listen => 1, ReuseAddr => 1, ReusePort => 1) or die \"bind: $!\\n\"; print \"bound\\n\"'"
            ),
        )
        .await;
        assert!(st != 0 && out.contains("bind:"), "port {port}: {out}");
    }
    let (_, out) = sh(p, sb, Who::Agent, "kill -KILL -1; echo tried").await;
    assert!(out.contains("tried") || out.is_empty(), "{out}");
    let (st, out) = sh(p, sb, Who::Agent, "cat /run/hangar/egress.log").await;
    assert_ne!(st, 0, "the agent read the proxy's record: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_an_allowlist_lets_through_only_its_hosts() {
    let allowed = Server::start("allowed");
    let denied = Server::start("denied");
    let tower = tls_tower();
    let p = LocalProvider::new().with_egress_test_resolve(names(&allowed, &denied, &tower.tower));
    let env = EnvSpec::from_yaml(&format!("name: eg\nprovider: local\n{ALLOWLIST}")).unwrap();
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let req = request("egress-local", home.path(), env.clone());
    if !is_root() {
        let e = p.create(&req).await.unwrap_err();
        assert!(
            matches!(&e, SandboxError::Unsupported(m) if m.contains("needs hangar to run as root")),
            "{e}"
        );
        eprintln!("not root: only the refusal is checked");
        return;
    }
    p.check(&env).await.unwrap();
    let sb = p.create(&req).await.unwrap();
    assert!(sb.agent.is_some(), "the uid split");
    assert!(p.egress_running(&sb.id));

    // Through the proxy, as curl finds it in the environment: plain HTTP, and CONNECT (-p).
    for who in [Who::Agent, Who::Hangar] {
        let (st, out) = sh(&p, &sb, who, "curl -sS --max-time 10 http://allowed.test/x").await;
        assert_eq!((st, out.as_str()), (0, "hello from allowed"), "{who:?}");
    }
    let (st, out) = sh(
        &p,
        &sb,
        Who::Agent,
        "curl -sS --max-time 10 -p http://api.wild.test/x",
    )
    .await;
    assert_eq!((st, out.as_str()), (0, "hello from allowed"));

    // Refused, with the proxy's reason.
    let reason = format!("denied.test is not on environment eg's egress allowlist {LISTED}");
    let (st, out) = sh(
        &p,
        &sb,
        Who::Agent,
        "curl -sS --max-time 10 -w '%{http_code}' http://denied.test/",
    )
    .await;
    assert!(
        st == 0 && out.contains(&reason) && out.ends_with("403"),
        "{out}"
    );
    let (st, out) = sh(
        &p,
        &sb,
        Who::Agent,
        "curl -sS -v --max-time 10 -p http://denied.test/",
    )
    .await;
    assert!(
        st != 0 && out.contains("403") && out.contains(&reason),
        "{out}"
    );
    let (st, out) = sh(
        &p,
        &sb,
        Who::Agent,
        &format!(
            "curl -sS --max-time 10 -x http://127.0.0.1:980 --noproxy '' http://127.0.0.1:{}/",
            allowed.addr.port()
        ),
    )
    .await;
    assert!(
        st == 0 && out.contains("127.0.0.1 is an address, not a host name"),
        "{out}"
    );
    // Around it: nothing.
    let (st, out) = sh(
        &p,
        &sb,
        Who::Agent,
        &format!(
            "curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{}/",
            allowed.addr.port()
        ),
    )
    .await;
    assert!(st != 0 && !out.contains("hello"), "{out}");
    agent_cannot_go_around(&p, &sb, &allowed).await;
    the_hook_reaches_tower_through_the_proxy(&p, &sb, &tower).await;
    let (st, out) = sh(
        &p,
        &sb,
        Who::Agent,
        "curl -sS --max-time 10 http://allowed.test/",
    )
    .await;
    assert_eq!(
        (st, out.as_str()),
        (0, "hello from allowed"),
        "after kill -1"
    );

    // A window in tmux (how turns run) goes through it too.
    p.start_tmux(
        &sb,
        "egress",
        Who::Agent,
        &ExecRequest::new([
            "sh",
            "-c",
            "curl -sS --max-time 10 http://api.wild.test/ > /workspace/out 2>&1",
        ]),
    )
    .await
    .unwrap();
    let out = sb.host_workspace.clone().unwrap().join("out");
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.tmux_alive(&sb, "egress").await.unwrap() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "hello from allowed\n"
    );

    assert!(recorded(&sb, "allowed.test", true), "{:?}", records(&sb));
    assert!(recorded(&sb, "api.wild.test", true), "{:?}", records(&sb));
    assert!(recorded(&sb, "denied.test", false), "{:?}", records(&sb));
    assert!(recorded(&sb, "127.0.0.1", false), "{:?}", records(&sb));
    assert_eq!(
        denied.hits.load(Ordering::SeqCst),
        0,
        "denied.test was reached"
    );

    p.destroy(&sb, false).await.unwrap();
    assert_nothing_left(&sb, p.egress_running(&sb.id));
}

/// A TCP server on the host's loopback that runs `serve` on each connection (its own thread).
fn tcp_server(serve: fn(std::net::TcpStream)) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve(s));
        }
    });
    addr
}

/// Reads what comes and never answers; holds the connection until the other side closes it.
fn silent(mut s: std::net::TcpStream) {
    let mut b = [0u8; 1024];
    while matches!(s.read(&mut b), Ok(n) if n > 0) {}
}

/// Sends a line every 300 ms for 3 s, then closes.
fn ticker(mut s: std::net::TcpStream) {
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(300));
        if s.write_all(b"tick\n").is_err() {
            return;
        }
    }
}

/// Sends back what it reads until the other side closes.
fn echo(mut s: std::net::TcpStream) {
    let mut b = [0u8; 1024];
    while let Ok(n) = s.read(&mut b) {
        if n == 0 || s.write_all(&b[..n]).is_err() {
            return;
        }
    }
}

/// A sandbox with an allowlist naming the servers above, on a provider with these limits;
/// `None` when not root (an allowlist needs root; the refusal is checked elsewhere).
async fn limited(
    id: &str,
    home: &Path,
    limits: egress::Limits,
) -> Option<(LocalProvider, Sandbox)> {
    if !is_root() {
        eprintln!("not root: an egress allowlist cannot be made, {id} is skipped");
        return None;
    }
    let names = HashMap::from([
        ("silent.test".to_owned(), tcp_server(silent)),
        ("ticker.test".to_owned(), tcp_server(ticker)),
        ("echo.test".to_owned(), tcp_server(echo)),
    ]);
    let p = LocalProvider::new()
        .with_egress_limits(limits)
        .with_egress_test_resolve(names);
    let env = EnvSpec::from_yaml(
        "name: lim\nprovider: local\negress: {allowlist: [silent.test, ticker.test, echo.test]}\n",
    )
    .unwrap();
    let sb = p.create(&request(id, home, env)).await.unwrap();
    Some((p, sb))
}

/// Opens fd `fd` to the proxy with `first` sent on it (bash, as the agent).
fn open_proxy(fd: u32, first: &str) -> String {
    format!("exec {fd}<>/dev/tcp/127.0.0.1/980 || exit 9; printf '{first}' >&{fd}; ")
}

/// A connection through the proxy that carries nothing is closed after the idle timeout (a
/// CONNECT tunnel and a plain request alike); one that carries bytes lives on past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_an_idle_connection_through_the_proxy_is_closed() {
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let limits = egress::Limits {
        idle: Duration::from_secs(1),
        ..egress::Limits::default()
    };
    let Some((p, sb)) = limited("egress-idle", home.path(), limits).await else {
        return;
    };
    let ms = "$(( ($(date +%s%N) - t0) / 1000000 ))";
    for first in [
        r"CONNECT silent.test:80 HTTP/1.1\r\n\r\n",
        r"GET http://silent.test/ HTTP/1.1\r\nHost: silent.test\r\n\r\n",
    ] {
        let script = format!(
            "{}t0=$(date +%s%N); timeout 20 cat <&3; echo \"status $? after {ms} ms\"",
            open_proxy(3, first)
        );
        let (_, out) = sh(&p, &sb, Who::Agent, &script).await;
        let after: u64 = out
            .rsplit_once("after ")
            .and_then(|(_, r)| r.strip_suffix(" ms"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        assert!(
            out.contains("status 0 "),
            "{first}: still open at 20 s: {out}"
        );
        assert!(
            (900..6000).contains(&after),
            "{first}: closed after {after} ms, the idle timeout is 1 s: {out}"
        );
        if first.starts_with("CONNECT") {
            assert!(out.contains("200 Connection established"), "{out}");
        }
    }
    // Bytes every 300 ms for 3 s: not idle, so it lives to its end.
    let script = format!(
        "{}t0=$(date +%s%N); timeout 20 cat <&3 | grep -c tick; echo \"after {ms} ms\"",
        open_proxy(3, r"CONNECT ticker.test:80 HTTP/1.1\r\n\r\n")
    );
    let (_, out) = sh(&p, &sb, Who::Agent, &script).await;
    let after: u64 = out
        .rsplit_once("after ")
        .and_then(|(_, r)| r.strip_suffix(" ms"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(out.starts_with("10\n"), "every tick came through: {out}");
    assert!(after >= 2900, "the tunnel was cut after {after} ms: {out}");
    p.destroy(&sb, false).await.unwrap();
    assert_nothing_left(&sb, p.egress_running(&sb.id));
}

/// Past its limit of connections at once the proxy refuses the next one with 503 and its
/// reason, while the earlier ones go on working; once one is closed, a new one is let in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_the_proxy_refuses_connections_past_its_limit() {
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let limits = egress::Limits {
        max_connections: 3,
        ..egress::Limits::default()
    };
    let Some((p, sb)) = limited("egress-cap", home.path(), limits).await else {
        return;
    };
    let connect = r"CONNECT echo.test:80 HTTP/1.1\r\n\r\n";
    let mut script = String::new();
    for fd in [3, 4, 5] {
        // The proxy's answer and the blank line after it.
        script.push_str(&open_proxy(fd, connect));
        script.push_str(&format!(
            "read -r -t 5 l <&{fd}; read -r -t 5 e <&{fd}; echo \"open {fd}: $l\"; "
        ));
    }
    script.push_str(&open_proxy(6, connect));
    script.push_str("echo \"fourth: $(timeout 5 cat <&6 | tr -d '\\r' | tr '\\n' ' ')\"; ");
    for fd in [3, 4, 5] {
        script.push_str(&format!(
            "printf 'ping {fd}\\n' >&{fd}; read -r -t 5 r <&{fd}; echo \"echo {fd}: $r\"; "
        ));
    }
    // One closed, and the slot is free again.
    script.push_str("exec 3>&-; sleep 0.5; ");
    script.push_str(&open_proxy(7, connect));
    script.push_str(
        "read -r -t 5 l <&7; read -r -t 5 e <&7; printf 'ping 7\\n' >&7; read -r -t 5 r <&7; echo \"echo 7: $r\"",
    );
    let (_, out) = sh(&p, &sb, Who::Agent, &script).await;
    for fd in [3, 4, 5] {
        assert!(
            out.contains(&format!("open {fd}: HTTP/1.1 200 Connection established")),
            "{out}"
        );
        assert!(out.contains(&format!("echo {fd}: ping {fd}")), "{out}");
    }
    assert!(
        out.contains("fourth: HTTP/1.1 503 Service Unavailable")
            && out.contains("this sandbox has 3 connections open through its egress proxy"),
        "{out}"
    );
    assert!(out.contains("echo 7: ping 7"), "{out}");
    assert!(
        records(&sb).iter().any(|r| r["allowed"] == false
            && r["reason"]
                .as_str()
                .is_some_and(|m| m.contains("3 connections open"))),
        "{:?}",
        records(&sb)
    );
    p.destroy(&sb, false).await.unwrap();
    assert_nothing_left(&sb, p.egress_running(&sb.id));
}

async fn docker() -> Option<DockerProvider> {
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!("HANGAR_TEST_DOCKER=0: the docker tests are skipped");
        return None;
    }
    Some(DockerProvider::connect().await.unwrap_or_else(|e| {
        panic!("{e}\nrun scripts/start-docker && scripts/build-image (HANGAR_TEST_DOCKER=0 skips)")
    }))
}

/// perl's HTTP::Tiny (in the test image), which follows `http_proxy` from the environment.
fn tiny_get(url: &str) -> String {
    format!(
        "perl -MHTTP::Tiny -e '$r = HTTP::Tiny->new(timeout => 10)->get($ARGV[0]); print \"$r->{{status}} $r->{{content}}\"' {url}"
    )
}

/// A CONNECT by hand to the proxy named in `$HTTPS_PROXY`, then a request through the tunnel.
fn connect_by_hand(authority: &str) -> String {
    format!(
        "p=${{HTTPS_PROXY#http://}}; exec 3<>/dev/tcp/${{p%:*}}/${{p##*:}} || exit 1; printf 'CONNECT {authority} HTTP/1.1\\r\\nHost: {authority}\\r\\n\\r\\nGET /x HTTP/1.0\\r\\nHost: {authority}\\r\\n\\r\\n' >&3; timeout 10 cat <&3"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_an_allowlist_lets_through_only_its_hosts() {
    let Some(p) = docker().await else { return };
    let allowed = Server::start("allowed");
    let denied = Server::start("denied");
    let tower = tls_tower();
    let p = p.with_egress_test_resolve(names(&allowed, &denied, &tower.tower));
    let image =
        std::env::var("HANGAR_TEST_IMAGE").unwrap_or_else(|_| "hangar-base:bookworm".into());
    let env = EnvSpec::from_yaml(&format!(
        "name: eg\nprovider: docker\nimage: {image}\n{ALLOWLIST}"
    ))
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let req = request("egress-docker", home.path(), env.clone());
    if !is_root() {
        let e = p.create(&req).await.unwrap_err();
        assert!(
            matches!(&e, SandboxError::Unsupported(m) if m.contains("needs hangar to run as root")),
            "{e}"
        );
        eprintln!("not root: only the refusal is checked");
        return;
    }
    p.check(&env).await.unwrap();
    let sb = p.create(&req).await.unwrap();
    assert!(sb.agent.is_some(), "the uid split");
    assert!(p.egress_running(&sb.id));

    for who in [Who::Agent, Who::Hangar] {
        let (st, out) = sh(&p, &sb, who, &tiny_get("http://allowed.test/x")).await;
        assert_eq!((st, out.as_str()), (0, "200 hello from allowed"), "{who:?}");
    }
    let (st, out) = sh(&p, &sb, Who::Agent, &connect_by_hand("api.wild.test:80")).await;
    assert!(
        st == 0
            && out.starts_with("HTTP/1.1 200 Connection established")
            && out.ends_with("hello from allowed"),
        "{out}"
    );

    let reason = format!("denied.test is not on environment eg's egress allowlist {LISTED}");
    let (_, out) = sh(&p, &sb, Who::Agent, &tiny_get("http://denied.test/")).await;
    assert!(out.starts_with("403 ") && out.contains(&reason), "{out}");
    let (_, out) = sh(&p, &sb, Who::Agent, &connect_by_hand("denied.test:443")).await;
    assert!(
        out.starts_with("HTTP/1.1 403 Forbidden") && out.contains(&reason),
        "{out}"
    );
    let (_, out) = sh(
        &p,
        &sb,
        Who::Agent,
        &connect_by_hand(&format!("127.0.0.1:{}", allowed.addr.port())),
    )
    .await;
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("127.0.0.1 is an address"),
        "{out}"
    );
    agent_cannot_go_around(&p, &sb, &allowed).await;
    the_hook_reaches_tower_through_the_proxy(&p, &sb, &tower).await;
    let (st, out) = sh(&p, &sb, Who::Agent, &tiny_get("http://allowed.test/")).await;
    assert_eq!(
        (st, out.as_str()),
        (0, "200 hello from allowed"),
        "after kill -1"
    );

    assert!(recorded(&sb, "allowed.test", true), "{:?}", records(&sb));
    assert!(recorded(&sb, "api.wild.test", true), "{:?}", records(&sb));
    assert!(recorded(&sb, "denied.test", false), "{:?}", records(&sb));
    assert!(recorded(&sb, "127.0.0.1", false), "{:?}", records(&sb));
    assert_eq!(
        denied.hits.load(Ordering::SeqCst),
        0,
        "denied.test was reached"
    );

    p.destroy(&sb, false).await.unwrap();
    assert_nothing_left(&sb, p.egress_running(&sb.id));
}
