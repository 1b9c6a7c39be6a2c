//! `egress: {allowlist: [hosts]}` for the local and docker providers: a network namespace of the
//! sandbox's own with only loopback (as `none`), and in it one way out, hangar's egress proxy.
//!
//! How it holds:
//! - The sandbox's network namespace has no interface but `lo`, so nothing inside has a route
//!   anywhere. A program that ignores the proxy variables gets no network at all.
//! - The proxy's listening socket, `127.0.0.1:980` ([`PROXY_PORT`]), is made *in* that namespace
//!   by a thread of hangar's process that enters it for the moment of `bind` (`setns`), and is
//!   then served by hangar's process on the host: the connections it accepts come from inside,
//!   the connections it makes go out from the host's namespace. No process of hangar's runs in
//!   the sandbox, so there is nothing there for the agent to kill, replace or read; the port is
//!   below `net.ipv4.ip_unprivileged_port_start` (1024; docker's default of 0 is set back for
//!   these containers), so the agent's uid, without capabilities, cannot bind it either.
//! - The local provider makes the namespace at create (`unshare`) and keeps it as a bind mount
//!   of its nsfs file at `<host_dir>/netns`; every command of the sandbox joins it (`nsenter
//!   --net`, then bubblewrap without `--unshare-net`). The docker provider uses the container's
//!   own (`--network none`), found through the container's pid.
//! - The proxy speaks HTTP `CONNECT host:port` (what HTTPS clients send through a proxy) and
//!   plain HTTP proxying (`GET http://host/path`, sent on with `Connection: close`). A host is let
//!   through when it is on the allowlist exactly, or under a `*.example.com` entry (any depth of
//!   subdomain, never `example.com` itself); an IP address only when that address is itself an
//!   entry; any port. Names are resolved on the host, and a name that resolves only to this
//!   machine's own addresses (loopback, unspecified, link-local) is refused. Everything else
//!   gets `403 Forbidden` with the reason in the `X-Hangar-Egress-Refused` header and the body.
//! - The sandbox's commands get `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (and lower-case) set to
//!   `http://127.0.0.1:980`, and `NO_PROXY=localhost,127.0.0.1,::1`.
//! - A connection through the proxy that carries no byte either way for [`Limits::idle`] (5
//!   minutes by default) is closed, tunnel or plain request alike; the head of a request must
//!   come within 30 s. One sandbox's proxy holds at most [`Limits::max_connections`] (256)
//!   connections at once: the next one gets `503 Service Unavailable` with the reason (and is
//!   recorded) while the earlier ones go on. So an agent cannot hold hangar's tasks and file
//!   descriptors, which every other sandbox shares, by opening connections and leaving them.
//! - Every connection the proxy answers, allowed or refused, is a JSON line in
//!   `<host_dir>/ctl/egress.log` (`at` in ms, `method`, `host`, `port`, `allowed`, `reason`,
//!   `address`): on the host in hangar's own folder, unreadable to the agent, kept by
//!   `sb rm --keep-logs`.
//! - The proxy lives in the process that holds the provider (`hangar serve`). Every operation on
//!   a sandbox (exec, tmux, the watcher's liveness check) first makes sure its proxy runs, so after
//!   a restart it is back before anything needs it; until then the sandbox has no network (it
//!   fails closed). `destroy` stops it, closing the socket, and removes the namespace.
//! - Making or entering a namespace needs root (`CAP_SYS_ADMIN`); without it an allowlist is
//!   refused at create, saying so.
//!
//! **Test only:** `HANGAR_EGRESS_TEST_RESOLVE=name=127.0.0.1:PORT,...` makes the proxy resolve
//! those names to those addresses (the port included), so tests check the allowlist by name
//! against servers on the host's loopback. Never set it outside tests.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::{EnvSpec, Sandbox, SandboxError, failed};

/// The proxy's port on the sandbox's own loopback (privileged: the agent cannot bind it).
pub const PROXY_PORT: u16 = 980;
/// The proxy's URL inside the sandbox.
pub const PROXY_URL: &str = "http://127.0.0.1:980";
/// Test only: `name=IP:PORT,...`, names the proxy resolves to those addresses.
pub const TEST_RESOLVE_VAR: &str = hangar_protocol::env::HANGAR_EGRESS_TEST_RESOLVE;
/// Where the proxy's record goes, under the sandbox's folder.
pub const LOG: &str = "ctl/egress.log";

/// Longest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How much one sandbox's proxy lets its agent hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A connection with no byte either way for this long is closed.
    pub idle: Duration,
    /// The most connections open at once; the next is refused with `503`.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            idle: Duration::from_secs(300),
            max_connections: 256,
        }
    }
}

/// The variables a sandbox with an allowlist gives every command.
pub fn proxy_env(env: &EnvSpec) -> Vec<(String, String)> {
    if !matches!(env.egress, crate::Egress::Allowlist(_)) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for k in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        out.push((k.to_owned(), PROXY_URL.to_owned()));
        out.push((k.to_ascii_lowercase(), PROXY_URL.to_owned()));
    }
    for k in ["NO_PROXY", "no_proxy"] {
        out.push((k.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
    }
    out
}

/// An environment's allowlist as the proxy applies it.
#[derive(Clone, Debug)]
pub struct Allowlist {
    env: String,
    hosts: Vec<String>,
}

impl Allowlist {
    pub fn new(env: &str, hosts: &[String]) -> Allowlist {
        Allowlist {
            env: env.to_owned(),
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
        }
    }

    /// `Ok` when `host` may be reached, else why not.
    pub fn check(&self, host: &str) -> Result<(), String> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() {
            return Err("the request names no host".into());
        }
        let listed = || self.hosts.join(", ");
        if host.parse::<IpAddr>().is_ok() {
            if self.hosts.contains(&host) {
                return Ok(());
            }
            return Err(format!(
                "{host} is an address, not a host name on environment {}'s egress allowlist ({}); addresses are refused unless listed",
                self.env,
                listed()
            ));
        }
        if self.hosts.iter().any(|e| entry_matches(e, &host)) {
            return Ok(());
        }
        Err(format!(
            "{host} is not on environment {}'s egress allowlist ({})",
            self.env,
            listed()
        ))
    }
}

/// An entry (`github.com`, `*.pkg.example.com`) names `host` (lower-case).
fn entry_matches(entry: &str, host: &str) -> bool {
    match entry.strip_prefix('*') {
        Some(suffix) if suffix.starts_with('.') => {
            host.len() > suffix.len() && host.ends_with(suffix)
        }
        _ => entry == host,
    }
}

/// The test-only name map from [`TEST_RESOLVE_VAR`].
pub fn test_resolve_from_env() -> HashMap<String, SocketAddr> {
    hangar_protocol::env::var(TEST_RESOLVE_VAR)
        .map(|v| parse_test_resolve(&v))
        .unwrap_or_default()
}

fn parse_test_resolve(text: &str) -> HashMap<String, SocketAddr> {
    text.split(',')
        .filter_map(|pair| {
            let (name, addr) = pair.trim().split_once('=')?;
            Some((name.trim().to_ascii_lowercase(), addr.trim().parse().ok()?))
        })
        .collect()
}

/// The egress proxies one provider serves, by sandbox id.
#[derive(Clone, Debug, Default)]
pub struct Proxies {
    running: Arc<Mutex<HashMap<String, JoinHandle<()>>>>,
    test_resolve: Arc<HashMap<String, SocketAddr>>,
    limits: Limits,
}

/// Where a sandbox's network namespace is.
#[derive(Clone, Debug)]
pub enum Netns {
    /// Made now, kept as a bind mount at this path (the local provider's create).
    Make(PathBuf),
    /// An nsfs file to enter (`<host_dir>/netns`, `/proc/<pid>/ns/net`).
    Enter(PathBuf),
}

impl Proxies {
    /// With the test-only name map of [`TEST_RESOLVE_VAR`], if it is set.
    pub fn from_env() -> Proxies {
        Proxies::with_test_resolve(test_resolve_from_env())
    }

    /// Test only: names the proxy resolves to these addresses.
    pub fn with_test_resolve(map: HashMap<String, SocketAddr>) -> Proxies {
        Proxies {
            running: Arc::default(),
            test_resolve: Arc::new(map),
            limits: Limits::default(),
        }
    }

    /// With other limits than the defaults (tests shorten the idle timeout).
    pub fn with_limits(mut self, limits: Limits) -> Proxies {
        self.limits = limits;
        self
    }

    /// The limits each proxy gets.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether this process serves a proxy for sandbox `id`.
    pub fn is_running(&self, id: &str) -> bool {
        self.running
            .lock()
            .ok()
            .and_then(|m| m.get(id).map(|h| !h.is_finished()))
            .unwrap_or(false)
    }

    /// Makes sure the proxy of `sb` (which has an allowlist) runs, making its socket in `ns`.
    pub async fn ensure(&self, sb: &Sandbox, ns: Netns) -> Result<(), SandboxError> {
        let crate::Egress::Allowlist(hosts) = &sb.env.egress else {
            return Ok(());
        };
        if self.is_running(&sb.id) {
            return Ok(());
        }
        let made = tokio::task::spawn_blocking(move || in_netns(&ns))
            .await
            .map_err(|e| failed("egress proxy", e))?;
        let std_listener = match made {
            Ok(l) => l,
            // Another process of hangar's (a replica) serves it already.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => return Ok(()),
            Err(e) => {
                return Err(failed(
                    format!("sandbox {}: cannot open its egress proxy", sb.id),
                    e,
                ));
            }
        };
        std_listener
            .set_nonblocking(true)
            .map_err(|e| failed("egress proxy", e))?;
        let listener =
            TcpListener::from_std(std_listener).map_err(|e| failed("egress proxy", e))?;
        let ctx = Arc::new(Ctx {
            allow: Allowlist::new(&sb.env.name, hosts),
            log: sb.host_dir.join(LOG),
            test_resolve: self.test_resolve.clone(),
            limits: self.limits,
        });
        let task = tokio::spawn(serve(listener, ctx));
        if let Ok(mut m) = self.running.lock()
            && let Some(old) = m.insert(sb.id.clone(), task)
        {
            old.abort();
        }
        Ok(())
    }

    /// Stops the proxy of sandbox `id` (its socket and every connection through it).
    pub fn stop(&self, id: &str) {
        if let Some(h) = self.running.lock().ok().and_then(|mut m| m.remove(id)) {
            h.abort();
        }
    }
}

/// Whether this process may make and enter network namespaces.
pub fn can_make_netns() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Why an allowlist cannot be had here, if it cannot.
pub fn refusal(provider: crate::ProviderKind) -> Option<String> {
    (!can_make_netns()).then(|| {
        format!(
            "egress: an allowlist needs hangar to run as root with the {provider} provider (hangar opens the proxy's socket inside the sandbox's own network namespace); run hangar as root, or use egress none or open"
        )
    })
}

/// On a thread of its own (namespaces are per thread): into `ns`, then the listening socket.
fn in_netns(ns: &Netns) -> std::io::Result<std::net::TcpListener> {
    let ns = ns.clone();
    std::thread::spawn(move || -> std::io::Result<std::net::TcpListener> {
        match &ns {
            Netns::Make(path) => {
                // SAFETY: plain syscall on this thread only.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                loopback_up()?;
                File::create(path)?;
                let src = std::ffi::CString::new("/proc/thread-self/ns/net")?;
                let dst = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
                // SAFETY: both are valid C strings; a bind mount of this thread's namespace.
                let r = unsafe {
                    libc::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    )
                };
                if r != 0 {
                    let e = std::io::Error::last_os_error();
                    let _ = std::fs::remove_file(path);
                    return Err(e);
                }
            }
            Netns::Enter(path) => {
                let f = File::open(path)?;
                // SAFETY: a valid fd of an nsfs file; changes this thread's namespace only.
                if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, PROXY_PORT))
    })
    .join()
    .map_err(|_| std::io::Error::other("the namespace thread panicked"))?
}

/// Brings `lo` up in this thread's (new) network namespace.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a datagram socket only to carry the ioctls; closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: fd is ours, req a valid ifreq for these requests.
    let r = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) != 0 {
            -1
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &req)
        }
    };
    let e = std::io::Error::last_os_error();
    // SAFETY: closing our own fd.
    unsafe { libc::close(fd) };
    if r != 0 { Err(e) } else { Ok(()) }
}

/// Removes a namespace kept at `path` by [`Netns::Make`] (the mount, then the file).
pub fn remove_netns(path: &Path) -> Result<(), SandboxError> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
        // SAFETY: a valid C string; detaching a mount of ours (EINVAL when it is not one).
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
    std::fs::remove_file(path).map_err(|e| failed(path.display(), e))
}

/// What one proxy knows.
struct Ctx {
    allow: Allowlist,
    log: PathBuf,
    test_resolve: Arc<HashMap<String, SocketAddr>>,
    limits: Limits,
}

/// Connections being refused for being over [`Limits::max_connections`] at once; past it a new
/// one is closed without an answer (each refusal takes a moment to read what the client sent).
const MAX_REFUSING: usize = 64;

/// The egress log stops growing past this (a line says so once): an agent that connects in a
/// loop cannot fill the control plane's disk.
const MAX_LOG_BYTES: u64 = 16 << 20;

async fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    // The connections live in these sets, so stopping the proxy ends them too. The agent cannot
    // spend the control plane's file descriptors (each connection costs two), which every other
    // sandbox, the store and the API share: past the limit a connection is refused at once.
    let mut conns = tokio::task::JoinSet::new();
    let mut refusing = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if conns.len() < ctx.limits.max_connections => {
                    conns.spawn(handle(stream, ctx.clone()));
                }
                Ok((mut stream, _)) => {
                    if refusing.len() < MAX_REFUSING {
                        let ctx = ctx.clone();
                        refusing.spawn(async move {
                            let why = format!(
                                "this sandbox has {} connections open through its egress proxy, the most it may hold at once; close one first",
                                ctx.limits.max_connections
                            );
                            ctx.record(None, false, &why, None);
                            refuse(&mut stream, "503 Service Unavailable", &why).await;
                        });
                    }
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            Some(_) = refusing.join_next(), if !refusing.is_empty() => {}
        }
    }
}

/// One request as the proxy reads it.
#[derive(Debug, PartialEq)]
struct Request {
    connect: bool,
    method: String,
    host: String,
    port: u16,
    /// For plain HTTP: the head to send on (origin-form, `Connection: close`).
    forward_head: Vec<u8>,
}

fn parse_head(head: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request is not text".to_owned())?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not an HTTP request line: {first:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("{version} is not HTTP/1.x"));
    }
    if method == "CONNECT" {
        let (host, port) = split_authority(target, None)?;
        return Ok(Request {
            connect: true,
            method: method.to_owned(),
            host,
            port,
            forward_head: Vec::new(),
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(format!(
            "{method} {target}: a proxy request names an http:// URL (use CONNECT for https)"
        ));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_owned()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_owned()),
    };
    let (host, port) = split_authority(authority, Some(80))?;
    let mut out = format!("{method} {path} {version}\r\n");
    // The Host the server sees is the one the allowlist checked, never one the agent wrote
    // beside it (which a shared front would route to a host not on the list).
    let shown = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    if port == 80 {
        out.push_str(&format!("Host: {shown}\r\n"));
    } else {
        out.push_str(&format!("Host: {shown}:{port}\r\n"));
    }
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let name = line
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive" | "host"
        ) {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        connect: false,
        method: method.to_owned(),
        host,
        port,
        forward_head: out.into_bytes(),
    })
}

/// `host:port` (`[v6]:port`); `default` when the port may be left out.
fn split_authority(a: &str, default: Option<u16>) -> Result<(String, u16), String> {
    let a = a.rsplit('@').next().unwrap_or(a);
    let (host, port) = if let Some(v6) = a.strip_prefix('[') {
        let (h, rest) = v6
            .split_once(']')
            .ok_or_else(|| format!("{a:?} is not host:port"))?;
        (h, rest.strip_prefix(':'))
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    let port = match (port, default) {
        (Some(p), _) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{a:?}: {p:?} is not a port"))?,
        (None, Some(d)) => d,
        (None, None) => return Err(format!("{a:?} names no port")),
    };
    if host.is_empty() {
        return Err(format!("{a:?} names no host"));
    }
    Ok((host.trim_end_matches('.').to_ascii_lowercase(), port))
}

/// Whether `ip` is this machine's own (what a listed name must not lead to).
fn own_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| own_address(IpAddr::V4(v4)))
        }
    }
}

impl Ctx {
    async fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, String> {
        if let Some(a) = self.test_resolve.get(host) {
            return Ok(*a);
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return if own_address(ip) {
                Err(format!("{ip} is an address of this machine"))
            } else {
                Ok(SocketAddr::new(ip, port))
            };
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("{host} does not resolve: {e}"))?
            .collect();
        addrs
            .iter()
            .copied()
            .find(|a| !own_address(a.ip()))
            .ok_or_else(|| {
                if addrs.is_empty() {
                    format!("{host} does not resolve")
                } else {
                    format!("{host} resolves only to addresses of this machine")
                }
            })
    }

    fn record(
        &self,
        req: Option<&Request>,
        allowed: bool,
        reason: &str,
        address: Option<SocketAddr>,
    ) {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let line = serde_json::json!({
            "at": at,
            "method": req.map(|r| r.method.as_str()),
            "host": req.map(|r| r.host.as_str()),
            "port": req.map(|r| r.port),
            "allowed": allowed,
            "reason": reason,
            "address": address.map(|a| a.to_string()),
        });
        let mut text = line.to_string();
        text.push('\n');
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
        {
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            if size >= MAX_LOG_BYTES {
                return;
            }
            if size + text.len() as u64 >= MAX_LOG_BYTES {
                text = format!(
                    "{}\n",
                    serde_json::json!({"at": at, "truncated": true, "reason": "the egress log is full: later connections are not recorded"})
                );
            }
            let _ = f.write_all(text.as_bytes());
        }
    }
}

async fn refuse(client: &mut TcpStream, status: &str, reason: &str) {
    let body = format!("hangar egress: {reason}\n");
    let header = reason.replace(['\r', '\n'], " ");
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Hangar-Egress-Refused: {header}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(text.as_bytes()).await;
    let _ = client.shutdown().await;
    // Read what the client still sends until it closes (briefly): closing with unread bytes
    // would reset the connection, and the client could lose the answer with its reason.
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Ok(n) = client.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// Reads up to the end of the request head; returns the head and what came after it.
async fn read_head(client: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            buf.truncate(end);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err("the request head is too long".into());
        }
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            return Err("the connection closed before a request".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn handle(mut client: TcpStream, ctx: Arc<Ctx>) {
    let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(h)) => h,
        Ok(Err(why)) => {
            ctx.record(None, false, &why, None);
            refuse(&mut client, "400 Bad Request", &why).await;
            return;
        }
        Err(_) => return,
    };
    let req = match parse_head(&head) {
        Ok(r) => r,
        Err(why) => {
            ctx.record(None, false, &why, None);
            refuse(&mut client, "400 Bad Request", &why).await;
            return;
        }
    };
    if let Err(why) = ctx.allow.check(&req.host) {
        ctx.record(Some(&req), false, &why, None);
        refuse(&mut client, "403 Forbidden", &why).await;
        return;
    }
    let addr = match ctx.resolve(&req.host, req.port).await {
        Ok(a) => a,
        Err(why) => {
            ctx.record(Some(&req), false, &why, None);
            refuse(&mut client, "502 Bad Gateway", &why).await;
            return;
        }
    };
    let upstream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let why = format!("{}:{} ({addr}): {e}", req.host, req.port);
            ctx.record(Some(&req), false, &why, Some(addr));
            refuse(&mut client, "502 Bad Gateway", &why).await;
            return;
        }
        Err(_) => {
            let why = format!("{}:{} ({addr}) did not answer", req.host, req.port);
            ctx.record(Some(&req), false, &why, Some(addr));
            refuse(&mut client, "504 Gateway Timeout", &why).await;
            return;
        }
    };
    ctx.record(Some(&req), true, "on the allowlist", Some(addr));
    let mut upstream = upstream;
    let sent = if req.connect {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
    } else {
        upstream.write_all(&req.forward_head).await
    };
    if sent.is_err() {
        return;
    }
    if !rest.is_empty() && upstream.write_all(&rest).await.is_err() {
        return;
    }
    relay(client, upstream, ctx.limits.idle).await;
}

/// Copies both ways until both sides are done, or until no byte went either way for `idle`.
async fn relay(mut client: TcpStream, mut upstream: TcpStream, idle: Duration) {
    let start = tokio::time::Instant::now();
    // Milliseconds from `start` to the last byte moved, either way.
    let last = std::sync::atomic::AtomicU64::new(0);
    let (cr, cw) = client.split();
    let (ur, uw) = upstream.split();
    let both = async {
        tokio::join!(pipe(cr, uw, &last, start), pipe(ur, cw, &last, start));
    };
    let watchdog = async {
        loop {
            let at = start
                + Duration::from_millis(last.load(std::sync::atomic::Ordering::Relaxed))
                + idle;
            if tokio::time::Instant::now() >= at {
                return;
            }
            tokio::time::sleep_until(at).await;
        }
    };
    tokio::select! {
        () = both => {}
        () = watchdog => {}
    }
}

/// One direction of [`relay`]: `from` to `to`, then the end of `to`'s writing half.
async fn pipe(
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
    last: &std::sync::atomic::AtomicU64,
    start: tokio::time::Instant,
) {
    let moved = || {
        let ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        last.fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        moved();
        let mut off = 0;
        while off < n {
            match to.write(&buf[off..n]).await {
                Ok(0) | Err(_) => return,
                Ok(w) => {
                    off += w;
                    moved();
                }
            }
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn hosts_match_exactly_or_under_a_wildcard() {
        let a = Allowlist::new(
            "e",
            &[
                "github.com".into(),
                "*.pkg.example.com".into(),
                "192.0.2.3".into(),
            ],
        );
        for ok in [
            "github.com",
            "GitHub.com.",
            "registry.pkg.example.com",
            "a.b.pkg.example.com",
            "192.0.2.3",
        ] {
            assert!(a.check(ok).is_ok(), "{ok}");
        }
        for (no, why) in [
            ("api.github.com", "not on environment e's egress allowlist"),
            ("pkg.example.com", "not on"),
            ("evilpkg.example.com", "not on"),
            ("github.com.evil.org", "not on"),
            ("192.0.2.4", "is an address"),
            ("::1", "is an address"),
            ("", "names no host"),
        ] {
            let e = a.check(no).unwrap_err();
            assert!(e.contains(why), "{no}: {e}");
        }
    }

    #[test]
    fn request_heads_are_read() {
        let r = parse_head(b"CONNECT github.com:443 HTTP/1.1\r\nHost: github.com:443").unwrap();
        assert!(r.connect);
        assert_eq!((r.host.as_str(), r.port), ("github.com", 443));
        let r = parse_head(
            b"GET http://Example.test:8080/a/b?c HTTP/1.1\r\nHost: example.test\r\nProxy-Connection: keep-alive\r\nAccept: */*",
        )
        .unwrap();
        assert!(!r.connect);
        assert_eq!((r.host.as_str(), r.port), ("example.test", 8080));
        assert_eq!(
            String::from_utf8(r.forward_head).unwrap(),
            "GET /a/b?c HTTP/1.1\r\nHost: example.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        // A Host beside the checked URL never reaches the server: the checked one does.
        let r = parse_head(
            b"GET http://allowed.test/x HTTP/1.1\r\nHost: other.test\r\nhost: third.test\r\nAccept: */*",
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(r.forward_head).unwrap(),
            "GET /x HTTP/1.1\r\nHost: allowed.test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse_head(b"GET http://x.test?q HTTP/1.0").unwrap();
        assert!(
            String::from_utf8(r.forward_head)
                .unwrap()
                .starts_with("GET /?q HTTP/1.0\r\n")
        );
        let r = parse_head(b"CONNECT [::1]:22 HTTP/1.1").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("::1", 22));
        for bad in [
            &b"CONNECT github.com HTTP/1.1"[..],
            b"GET https://github.com/ HTTP/1.1",
            b"GET / HTTP/1.1",
            b"CONNECT a:99999 HTTP/1.1",
            b"hello",
            b"GET http://a/ HTTP/2",
        ] {
            assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn own_addresses_are_known_and_the_test_map_reads() {
        for ip in [
            "127.0.0.1",
            "0.0.0.0",
            "169.254.1.1",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(own_address(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["198.51.100.1", "203.0.113.3", "2001:db8::1"] {
            assert!(!own_address(ip.parse().unwrap()), "{ip}");
        }
        let m = parse_test_resolve("A.test=127.0.0.1:81, b.test=127.0.0.1:82,bad,c=x");
        assert_eq!(m.len(), 2);
        assert_eq!(m["a.test"], "127.0.0.1:81".parse().unwrap());
    }

    #[test]
    fn proxy_variables_only_for_an_allowlist() {
        let open = EnvSpec::from_yaml("name: o\nprovider: local\nnetwork: host\n").unwrap();
        assert!(proxy_env(&open).is_empty());
        let listed = EnvSpec::from_yaml(
            "name: l\nprovider: kubernetes\nimage: i\negress: {allowlist: [a.test]}\n",
        )
        .unwrap();
        let env = proxy_env(&listed);
        for k in [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
        ] {
            assert!(env.iter().any(|(n, _)| n == k), "{k}");
        }
    }
}
