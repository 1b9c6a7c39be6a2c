//! The local provider, the embedded default: every command runs under bubblewrap (`bwrap`, the
//! Debian package `bubblewrap`) on this machine.
//!
//! What a command inside sees (see [`crate::layout`] for the sandbox's own paths):
//! - this machine's system read-only: every top-level folder of `/` bound read-only, except
//!   `/proc` and `/dev` (fresh ones of the sandbox), `/tmp` (the sandbox's own) and `/run` (empty
//!   but for `/run/hangar`: no host daemon's socket is reachable); hangar's home is hidden under an
//!   empty tmpfs (its database, vault key and every other sandbox);
//! - the workspace, the agent's home, `/var/lib/hangar`, `/run/hangar` and `/tmp` bound from the
//!   sandbox's folder;
//! - hangar's pinned harness CLIs' folders (`with_ro_binds`) read-only at their own path (never
//!   one inside hangar's home, or above it under `/tmp` or `/run`: that would show the home), also
//!   where the sandbox has its own folder over the host's (a checkout under `/tmp`: the folders
//!   down to it are hangar's, made in the sandbox's folder on the host and shown read-only, so
//!   bubblewrap never makes a folder where the agent could have planted a link);
//! - a pid, IPC and UTS namespace of its own, and a network namespace with only loopback unless
//!   the environment has `network: host` or `egress: open` (bubblewrap has no network of its own
//!   with a route out, so open egress is the host's network); with an egress allowlist, the
//!   sandbox's one network namespace made at create (`<host_dir>/netns`, which every command
//!   joins through `nsenter --net`) where hangar's egress proxy listens (see [`crate::egress`]);
//! - the uid split, when hangar runs as root: hangar's user is root with only the capabilities the
//!   driver needs (set uid and gid, signal and read the agent's processes and files); the agent is
//!   a uid of its own (set with `setpriv` inside, no capabilities, no new privileges), named
//!   `agent` in the sandbox's `/etc/passwd`. Without root the split is off: bubblewrap runs in a
//!   user namespace and everything runs as hangar's user.
//!
//! A turn's driver gets the run key through `start_tmux_handing`: the window's first command,
//! on the host, opens the key file (in the sandbox's folder, which nothing inside sees) and
//! removes it, and bubblewrap copies it into that command's own `/dev/shm`, which no other
//! command of the sandbox shares; so without the uid split, where the agent is the driver's own
//! user, no process of the agent's can find it.
//!
//! tmux: one tmux server per sandbox on the host, its socket in the sandbox's folder; each window
//! runs `bwrap` (so the process outlives the call that started it, and `tmux -S SOCK attach`
//! puts a person's terminal into it). `destroy` kills that server, then every process whose
//! mount namespace still holds the sandbox's folders (see [`crate::procs`]), then removes the
//! folder.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::egress::{self, Netns, Proxies};
use crate::failed;
use crate::layout::{self, AGENT_HOME, CTL_INSIDE, HANGAR_LIB, WORKSPACE};
use crate::{
    AgentUser, Capabilities, CreateRequest, Egress, EnvSpec, ExecRequest, NetworkMode, Output,
    Provider, ProviderKind, Sandbox, SandboxError, Who, copy, procs, uids,
};

/// The descriptor a file handed to a tmux window's command is read from (`start_tmux_handing`).
const HANDOFF_FD: &str = "3";
/// Run on the host before bubblewrap: `$1` opened as descriptor 3 and removed, then the rest.
const HANDOFF_SCRIPT: &str = r#"exec 3<"$1" || exit 111
rm -f -- "$1" || exit 111
shift
exec "$@"
"#;

/// Top-level folders of `/` a sandbox gets its own of.
const REPLACED: &[&str] = &["/proc", "/dev", "/tmp", "/run"];

/// What root keeps inside under the split: enough for the driver to become the agent for the
/// harness, signal it, and read (hash) and fix up the agent's files. No mounting, no ptrace.
const HANGAR_CAPS: &[&str] = &[
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_KILL",
    "CAP_CHOWN",
    "CAP_FOWNER",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
];

/// The arguments of the one-line sandbox bubblewrap is asked to make to show it can make
/// sandboxes here (this provider's check, and `hangar doctor`'s).
pub const BWRAP_PROBE: &[&str] = &[
    "--unshare-pid",
    "--unshare-net",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "true",
];

/// The local (bubblewrap) provider.
#[derive(Debug, Clone)]
pub struct LocalProvider {
    root: bool,
    uid: u32,
    bwrap: PathBuf,
    tmux: PathBuf,
    nsenter: PathBuf,
    /// The egress proxies of this process's sandboxes with an allowlist.
    egress: Proxies,
    /// Host folders every command sees read-only at their own path (see `with_ro_binds`).
    ro_binds: Vec<PathBuf>,
}

impl Default for LocalProvider {
    fn default() -> Self {
        LocalProvider::new()
    }
}

impl LocalProvider {
    pub fn new() -> LocalProvider {
        // SAFETY: geteuid has no arguments and cannot fail.
        let uid = unsafe { libc::geteuid() };
        LocalProvider {
            root: uid == 0,
            uid,
            bwrap: program("bwrap").unwrap_or_else(|| "bwrap".into()),
            tmux: program("tmux").unwrap_or_else(|| "tmux".into()),
            nsenter: program("nsenter").unwrap_or_else(|| "nsenter".into()),
            egress: Proxies::from_env(),
            ro_binds: Vec::new(),
        }
    }

    /// Host folders (hangar's pinned harness CLIs') that every command sees read-only at their
    /// own path, also where the sandbox has a folder of its own over the host's: under its `/tmp`
    /// (a checkout in `/tmp`) or `/run`. One the sandbox cannot show (under `/proc`, `/dev`, one
    /// of the sandbox's own folders, inside hangar's hidden home, or above it where it would be
    /// bound: `/tmp/x` with hangar's home in `/tmp/x/hangar`) is left out, and
    /// [`LocalProvider::hidden`] says why.
    pub fn with_ro_binds(mut self, paths: Vec<PathBuf>) -> LocalProvider {
        let mut binds: Vec<PathBuf> = paths
            .into_iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        binds.sort();
        binds.dedup();
        // One inside another is seen through the outer one.
        let outer = binds.clone();
        binds.retain(|b| !outer.iter().any(|o| o != b && b.starts_with(o)));
        self.ro_binds = binds;
        self
    }

    /// Why `path` (a host path), or the folder hangar binds it through, is not seen inside `sb`,
    /// if hangar knows: for a turn refused before it starts.
    pub fn hidden(&self, sb: &Sandbox, path: &Path) -> Option<String> {
        let real = std::fs::canonicalize(path).ok()?;
        let bind = self
            .ro_binds
            .iter()
            .find(|b| real.starts_with(b))
            .cloned()
            .unwrap_or_else(|| real.clone());
        match self.placement(sb, &bind) {
            Placement::Refused(why) => Some(why),
            Placement::Tmp { first, .. } => self.tmp_mount_point(sb, &first).err(),
            Placement::Visible | Placement::Fresh => None,
        }
    }

    /// Where a host folder to bind read-only lies, as the sandbox sees it.
    fn placement(&self, sb: &Sandbox, path: &Path) -> Placement {
        for own in ["/proc", "/dev"] {
            if path.starts_with(own) {
                return Placement::Refused(format!(
                    "{} is under {own}, which every sandbox has its own of",
                    path.display()
                ));
            }
        }
        for own in [WORKSPACE, AGENT_HOME, HANGAR_LIB, CTL_INSIDE] {
            if path.starts_with(own) {
                return Placement::Refused(format!(
                    "{} is under {own}, where the sandbox has a folder of its own; install it elsewhere",
                    path.display()
                ));
            }
        }
        // hangar's home is hidden under an empty tmpfs; a bind inside it, or one above it that
        // the sandbox would be shown (under its own /tmp or /run), would show the database, the
        // vault key and every other sandbox again.
        let home = Dirs::of(sb)
            .hangar_home()
            .and_then(|h| std::fs::canonicalize(h).ok());
        if let Some(home) = &home {
            let shown = path.starts_with("/tmp") || path.starts_with("/run");
            if path.starts_with(home) || (shown && home.starts_with(path)) {
                return Placement::Refused(format!(
                    "{} is {} hangar's home {} (its database, vault key and sandboxes), which no sandbox may see; install the harness CLI elsewhere",
                    path.display(),
                    if path.starts_with(home) {
                        "inside"
                    } else {
                        "above"
                    },
                    home.display()
                ));
            }
        }
        if let Ok(rest) = path.strip_prefix("/tmp") {
            let mut parts = rest.components();
            return match parts.next() {
                Some(std::path::Component::Normal(first)) => Placement::Tmp {
                    first: first.to_owned(),
                    below: parts.as_path().to_owned(),
                },
                _ => Placement::Refused(format!("{} is the sandbox's own /tmp", path.display())),
            };
        }
        if path.starts_with("/run") {
            Placement::Fresh
        } else {
            Placement::Visible
        }
    }

    /// Makes sure the sandbox's `/tmp/<first>` can carry a read-only bind: a folder, made by
    /// hangar when it is not there; under the uid split, hangar's own (the agent cannot rename
    /// or replace it in the sticky /tmp, so the bind cannot be sent elsewhere).
    fn tmp_mount_point(&self, sb: &Sandbox, first: &std::ffi::OsStr) -> Result<(), String> {
        let p = Dirs::of(sb).tmp().join(first);
        let shown = Path::new("/tmp").join(first);
        let m = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                make_mount_point(&p)
                    .map_err(|e| format!("cannot make the sandbox's {}: {e}", shown.display()))?;
                std::fs::symlink_metadata(&p)
                    .map_err(|e| format!("the sandbox's {}: {e}", shown.display()))?
            }
            Err(e) => return Err(format!("the sandbox's {}: {e}", shown.display())),
        };
        use std::os::unix::fs::MetadataExt;
        if !m.file_type().is_dir() {
            return Err(format!(
                "the sandbox's {} is not a folder (something inside the sandbox made it), so hangar cannot bind its harness CLI there; remove it",
                shown.display()
            ));
        }
        if sb.agent.is_some() && (m.uid() != self.uid || m.mode() & 0o022 != 0) {
            return Err(format!(
                "the sandbox's {} belongs to uid {} (it was made inside the sandbox), so the agent could move what hangar binds there; remove it, or install hangar's tools outside /tmp",
                shown.display(),
                m.uid()
            ));
        }
        Ok(())
    }

    /// bubblewrap's arguments for the read-only binds (after the sandbox's own folders).
    fn ro_bind_args(&self, sb: &Sandbox, a: &mut Args) {
        let dirs = Dirs::of(sb);
        for bind in &self.ro_binds {
            match self.placement(sb, bind) {
                Placement::Visible | Placement::Refused(_) => {}
                Placement::Fresh => a.add([
                    OsString::from("--ro-bind-try"),
                    bind.clone().into_os_string(),
                    bind.clone().into_os_string(),
                ]),
                Placement::Tmp { first, below } => {
                    if self.tmp_mount_point(sb, &first).is_err() {
                        continue;
                    }
                    // The folders down to the bind are hangar's, made on the host in the
                    // sandbox's folder (which nothing inside can reach) and shown read-only:
                    // bubblewrap never makes a folder where the agent could have put a link.
                    let own = dirs.host.join("tmpbinds").join(&first);
                    let made = std::fs::create_dir_all(own.join(&below)).and_then(|()| {
                        let mut d = own.join(&below);
                        loop {
                            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))?;
                            if d == own || !d.pop() {
                                return Ok(());
                            }
                        }
                    });
                    if made.is_err() {
                        continue;
                    }
                    let inside = Path::new("/tmp").join(&first);
                    a.add([
                        OsString::from("--ro-bind"),
                        own.into_os_string(),
                        inside.into_os_string(),
                        OsString::from("--ro-bind-try"),
                        bind.clone().into_os_string(),
                        bind.clone().into_os_string(),
                    ]);
                }
            }
        }
    }

    /// Test only: the egress proxy resolves these names to these addresses (see
    /// [`crate::egress`]; what `HANGAR_EGRESS_TEST_RESOLVE` sets otherwise).
    pub fn with_egress_test_resolve(
        mut self,
        map: std::collections::HashMap<String, std::net::SocketAddr>,
    ) -> LocalProvider {
        let limits = self.egress.limits();
        self.egress = Proxies::with_test_resolve(map).with_limits(limits);
        self
    }

    /// Other limits for the egress proxies than [`egress::Limits::default`] (tests shorten them).
    pub fn with_egress_limits(mut self, limits: egress::Limits) -> Self {
        self.egress = self.egress.with_limits(limits);
        self
    }

    /// Whether this process serves an egress proxy for sandbox `id`.
    pub fn egress_running(&self, id: &str) -> bool {
        self.egress.is_running(id)
    }

    /// Makes sure the egress proxy of `sb` runs (after a restart of hangar's process, it does
    /// not until something asks).
    async fn egress_up(&self, sb: &Sandbox) -> Result<(), SandboxError> {
        if !matches!(sb.env.egress, Egress::Allowlist(_)) {
            return Ok(());
        }
        self.egress
            .ensure(sb, Netns::Enter(Dirs::of(sb).netns()))
            .await
    }

    /// The program that runs bubblewrap for `sb`, with its arguments before bwrap's: with an
    /// allowlist, `nsenter` into the sandbox's network namespace.
    fn launcher(&self, sb: &Sandbox) -> (PathBuf, Vec<OsString>) {
        if matches!(sb.env.egress, Egress::Allowlist(_)) {
            let mut net = OsString::from("--net=");
            net.push(Dirs::of(sb).netns());
            (
                self.nsenter.clone(),
                vec![net, "--".into(), self.bwrap.clone().into_os_string()],
            )
        } else {
            (self.bwrap.clone(), Vec::new())
        }
    }

    fn split_off_reason(&self, env: &EnvSpec) -> Option<String> {
        if !env.uid_split {
            Some("the environment sets uid_split: false".to_owned())
        } else if !self.root {
            Some(format!(
                "hangar runs as uid {}, not root, so bubblewrap can only run everything as hangar's own user; run hangar as root for the uid split",
                self.uid
            ))
        } else {
            None
        }
    }
}

/// Where a host folder bound read-only lies in a sandbox.
enum Placement {
    /// The host's system, bound read-only everywhere, shows it already.
    Visible,
    /// Under a folder the sandbox makes afresh (`/run`): bound there.
    Fresh,
    /// Under the sandbox's own `/tmp`: `/tmp/<first>/<below>`.
    Tmp { first: OsString, below: PathBuf },
    /// It cannot be shown, and why.
    Refused(String),
}

/// Makes the folder `p` (0755 less the umask) unless something is there already. Its mode is set
/// by mkdir, never by path afterwards: what mkdir finds (a link the agent made since hangar
/// looked) is left for the caller's lstat, so hangar never changes a file a link points to.
fn make_mount_point(p: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o755).create(p) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// The host folder's parts.
struct Dirs {
    host: PathBuf,
}

impl Dirs {
    fn of(sb: &Sandbox) -> Dirs {
        Dirs {
            host: sb.host_dir.clone(),
        }
    }
    fn workspace(&self) -> PathBuf {
        self.host.join("workspace")
    }
    fn home(&self) -> PathBuf {
        self.host.join("home")
    }
    fn lib(&self) -> PathBuf {
        self.host.join("lib")
    }
    fn ctl(&self) -> PathBuf {
        self.host.join("ctl")
    }
    fn tmp(&self) -> PathBuf {
        self.host.join("tmp")
    }
    fn etc(&self) -> PathBuf {
        self.host.join("etc")
    }
    fn tmux_socket(&self) -> PathBuf {
        self.host.join("tmux.sock")
    }
    /// The sandbox's network namespace, with an egress allowlist.
    fn netns(&self) -> PathBuf {
        self.host.join("netns")
    }
    /// hangar's home: `<home>/sandboxes/<id>`'s grandparent.
    fn hangar_home(&self) -> Option<&Path> {
        self.host.parent()?.parent()
    }
}

fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| layout::PATH.into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn need(name: &str, package: &str) -> Result<PathBuf, SandboxError> {
    program(name).ok_or_else(|| {
        SandboxError::Unavailable(format!(
            "the local provider needs {name}, which is not on PATH; install it (Debian: apt-get install {package})"
        ))
    })
}

fn status_of(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code()
        .or_else(|| s.signal().map(|n| 128 + n))
        .unwrap_or(-1)
}

fn mkdir(path: &Path, mode: u32, owner: Option<(u32, u32)>) -> Result<(), SandboxError> {
    std::fs::create_dir(path).map_err(|e| failed(path.display(), e))?;
    if let Some((u, g)) = owner {
        chown(path, Some(u), Some(g)).map_err(|e| failed(path.display(), e))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| failed(path.display(), e))
}

impl LocalProvider {
    /// Makes the sandbox's folder; on error the caller removes it.
    fn build(
        &self,
        req: &CreateRequest,
        dirs: &Dirs,
        agent: Option<&AgentUser>,
    ) -> Result<(), SandboxError> {
        let owner = agent.map(|a| (a.uid, a.gid));
        mkdir(&dirs.ctl(), 0o700, None)?;
        mkdir(&dirs.lib(), 0o755, None)?;
        mkdir(&dirs.tmp(), 0o1777, None)?;
        mkdir(&dirs.home(), 0o700, owner)?;
        if let Some(a) = agent {
            mkdir(&dirs.etc(), 0o755, None)?;
            for (name, line) in [
                ("passwd", layout::agent_passwd_line(a)),
                ("group", layout::agent_group_line(a)),
            ] {
                let mut text = std::fs::read_to_string(Path::new("/etc").join(name))
                    .map_err(|e| failed(format!("/etc/{name}"), e))?;
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&line);
                let p = dirs.etc().join(name);
                std::fs::write(&p, text).map_err(|e| failed(p.display(), e))?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))
                    .map_err(|e| failed(p.display(), e))?;
            }
        }
        let repo = std::fs::canonicalize(&req.repo)
            .map_err(|e| SandboxError::Invalid(format!("repo {}: {e}", req.repo.display())))?;
        if req.env.in_place {
            // hangar's own home (the vault's key, the database) must not show under /workspace.
            if let Some(home) = std::fs::canonicalize(&req.home)
                .ok()
                .filter(|h| h.starts_with(&repo))
            {
                return Err(SandboxError::Invalid(format!(
                    "hangar's home {} is inside {}: an agent working in place there would see it; work in another folder, move HANGAR_HOME out of it, or make a sandbox with a copy (--env)",
                    home.display(),
                    repo.display()
                )));
            }
            // The folder itself, bound at /workspace through this link (bubblewrap resolves it;
            // destroy removes the link, never what it points to).
            return std::os::unix::fs::symlink(&repo, dirs.workspace())
                .map_err(|e| failed("cannot link the folder into the sandbox", e));
        }
        let home = std::fs::canonicalize(&req.home).ok();
        let skip = home.as_deref().filter(|h| h.starts_with(&repo));
        copy::copy_tree(&repo, &dirs.workspace(), owner, skip)
            .map_err(|e| failed("cannot copy the repo into the sandbox", e))
    }

    /// bubblewrap's arguments for a command of `who` (`exec`: run to its end by the caller, in a
    /// session of its own; otherwise a tmux window's).
    fn bwrap_args(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
        exec: bool,
        handoff: Option<&Path>,
    ) -> Result<Vec<OsString>, SandboxError> {
        let dirs = Dirs::of(sb);
        let agent = sb.agent.as_ref();
        // Without the split the agent is hangar's user: one treatment for both.
        let who = if agent.is_none() { Who::Hangar } else { who };
        let mut a = Args::default();
        a.add(["--unshare-pid", "--unshare-ipc", "--unshare-uts"]);
        a.add(["--unshare-cgroup-try"]);
        // With an allowlist the command is already in the sandbox's own namespace (`launcher`).
        if !(sb.env.host_network || sb.env.egress != Egress::None) {
            a.add(["--unshare-net"]);
        }
        a.add(["--die-with-parent"]);
        if exec {
            // No controlling terminal to push input into (TIOCSTI).
            a.add(["--new-session"]);
        }

        // Mount points of the sandbox's own, in the order they are made (parents first).
        let mut holes: Vec<(PathBuf, PathBuf, bool)> = vec![
            (PathBuf::from("/tmp"), dirs.tmp(), true),
            (PathBuf::from(WORKSPACE), dirs.workspace(), true),
            (PathBuf::from(AGENT_HOME), dirs.home(), true),
            (PathBuf::from(HANGAR_LIB), dirs.lib(), true),
            (PathBuf::from(CTL_INSIDE), dirs.ctl(), true),
        ];
        // Those the host lacks: their parents are rebuilt entry by entry (see system_binds).
        let points: Vec<PathBuf> = holes
            .iter()
            .map(|(p, _, _)| p.clone())
            .filter(|p| !p.is_dir())
            .collect();
        if agent.is_some() {
            // Over the host's files (so /etc stays one bind, not one per entry).
            holes.push(("/etc/passwd".into(), dirs.etc().join("passwd"), false));
            holes.push(("/etc/group".into(), dirs.etc().join("group"), false));
        }
        system_binds(Path::new("/"), &points, &mut a);
        a.add(["--proc", "/proc", "--dev", "/dev"]);
        a.add(["--perms", "1777", "--tmpfs", "/dev/shm"]);
        // Empty but for /run/hangar (bubblewrap would make it 0700 as the bind's parent).
        a.add(["--perms", "0755", "--dir", "/run"]);
        if let Some(home) = dirs
            .hangar_home()
            .and_then(|h| std::fs::canonicalize(h).ok())
        {
            let hidden_anyway = REPLACED.iter().any(|r| home.starts_with(r))
                || holes.iter().any(|(p, _, _)| home.starts_with(p));
            if !hidden_anyway && home != Path::new("/") {
                a.add(["--tmpfs".into(), home.into_os_string()]);
            }
        }
        for (inside, host, rw) in holes {
            a.add([
                OsString::from(if rw { "--bind" } else { "--ro-bind" }),
                host.into_os_string(),
                inside.into_os_string(),
            ]);
        }
        self.ro_bind_args(sb, &mut a);
        if let Some(dest) = handoff {
            // Its own /dev/shm, which no other command of the sandbox sees.
            a.add(["--perms", "0400", "--file", HANDOFF_FD]);
            a.add([dest.as_os_str()]);
        }
        a.add(["--remount-ro", "/"]);

        a.add(["--clearenv"]);
        let mut env = layout::sandbox_env(sb, who, req);
        if !exec && !env.iter().any(|(k, _)| k == "TERM") {
            env.push(("TERM".into(), "screen".into()));
        }
        for (k, v) in env {
            a.add(["--setenv".to_owned(), k, v]);
        }
        let cwd = req.cwd.clone().unwrap_or_else(|| PathBuf::from(WORKSPACE));
        a.add(["--chdir".into(), cwd.into_os_string()]);

        if self.root {
            a.add(["--cap-drop", "ALL"]);
            let caps: &[&str] = match who {
                Who::Hangar => HANGAR_CAPS,
                // Only to become the agent; setpriv's change of uid clears them.
                Who::Agent => &["CAP_SETUID", "CAP_SETGID"],
            };
            for c in caps {
                a.add(["--cap-add", c]);
            }
        }
        a.add(["--"]);
        if let (Who::Agent, Some(ag)) = (who, agent) {
            a.add([
                "setpriv".to_owned(),
                format!("--reuid={}", ag.uid),
                format!("--regid={}", ag.gid),
                "--clear-groups".to_owned(),
                "--inh-caps=-all".to_owned(),
                "--".to_owned(),
            ]);
        }
        if req.argv.is_empty() {
            return Err(SandboxError::Invalid("the command is empty".into()));
        }
        a.add(req.argv.iter().cloned());
        Ok(a.0)
    }

    /// [`Provider::start_tmux`], handing the command a file that only it sees: `secret`, a host
    /// file outside anything a sandbox sees, is opened and removed on the host by the window's
    /// first command, and its bytes are at `inside` (`/dev/shm/...`, mode 0400) in the command's
    /// own namespace, which no other command of the sandbox (another turn's agent, `sb exec`)
    /// shares. How a turn's driver gets the run key: without the uid split the agent is the
    /// driver's own user and could read it from any folder the sandbox shares.
    pub async fn start_tmux_handing(
        &self,
        sb: &Sandbox,
        session: &str,
        who: Who,
        req: &ExecRequest,
        secret: &Path,
        inside: &Path,
    ) -> Result<(), SandboxError> {
        if !inside.starts_with("/dev/shm") || inside.file_name().is_none() {
            return Err(SandboxError::Invalid(format!(
                "{} is not a file in /dev/shm",
                inside.display()
            )));
        }
        self.start_window(sb, session, who, req, Some((secret, inside)))
            .await
    }

    async fn start_window(
        &self,
        sb: &Sandbox,
        session: &str,
        who: Who,
        req: &ExecRequest,
        handoff: Option<(&Path, &Path)>,
    ) -> Result<(), SandboxError> {
        self.gone_unless_there(sb)?;
        layout::check_session(session)?;
        layout::check_env(req)?;
        self.egress_up(sb).await?;
        let args = self.bwrap_args(sb, who, req, false, handoff.map(|(_, i)| i))?;
        let (program, before) = self.launcher(sb);
        let mut tmux = self.tmux(sb);
        tmux.args(["-f", "/dev/null", "new-session", "-d", "-s", session])
            .args(["-x", "200", "-y", "50", "--"]);
        if let Some((secret, _)) = handoff {
            // On the host: the file becomes bubblewrap's descriptor and is gone before the
            // sandbox starts.
            tmux.args(["/bin/sh", "-c", HANDOFF_SCRIPT, "sh"])
                .arg(secret);
        }
        let out = tmux
            .arg(&program)
            .args(&before)
            .args(&args)
            .output()
            .await
            .map_err(|e| failed("cannot run tmux (apt-get install tmux)", e))?;
        if !out.status.success() {
            return Err(SandboxError::Failed(format!(
                "tmux could not start session {session} in sandbox {}: {}",
                sb.id,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// One run of bubblewrap for `exec`.
    async fn exec_once(
        &self,
        program: &Path,
        before: &[OsString],
        args: &[OsString],
        req: &ExecRequest,
    ) -> Result<Output, SandboxError> {
        let mut child = Command::new(program)
            .args(before)
            .args(args)
            .env_clear()
            .stdin(if req.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed("cannot run bwrap (apt-get install bubblewrap)", e))?;
        let writer = match (child.stdin.take(), req.stdin.clone()) {
            (Some(mut stdin), Some(bytes)) => Some(tokio::spawn(async move {
                // The command may exit without reading it all: not an error of ours.
                let _ = stdin.write_all(&bytes).await;
                let _ = stdin.shutdown().await;
            })),
            _ => None,
        };
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| failed("bwrap", e))?;
        if let Some(w) = writer {
            let _ = w.await;
        }
        Ok(Output {
            status: status_of(out.status),
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }

    fn gone_unless_there(&self, sb: &Sandbox) -> Result<(), SandboxError> {
        if sb.host_dir.join("workspace").is_dir() {
            Ok(())
        } else {
            Err(SandboxError::Gone(sb.id.clone()))
        }
    }

    fn tmux(&self, sb: &Sandbox) -> Command {
        let mut c = Command::new(&self.tmux);
        // The server starts with this environment: nothing of hangar's.
        c.env_clear()
            .env("PATH", layout::PATH)
            .arg("-S")
            .arg(Dirs::of(sb).tmux_socket())
            .stdin(Stdio::null());
        c
    }

    /// The tmux server's pid, when one runs.
    async fn tmux_server_pid(&self, sb: &Sandbox) -> Option<i32> {
        if !Dirs::of(sb).tmux_socket().exists() {
            return None;
        }
        let out = self
            .tmux(sb)
            .args(["display-message", "-p", "#{pid}"])
            .output()
            .await
            .ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn add<I, S>(&mut self, items: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.0.extend(items.into_iter().map(Into::into));
    }
}

/// Binds `dir`'s entries read-only at the same place, except the replaced ones and the sandbox's
/// own mount points; a folder holding one of those is made afresh and its other entries bound
/// one by one, since nothing can be created inside a read-only bind.
fn system_binds(dir: &Path, points: &[PathBuf], a: &mut Args) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if dir == Path::new("/") && REPLACED.iter().any(|r| p == Path::new(r)) {
            continue;
        }
        if points.contains(&p) {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let ft = m.file_type();
        if points.iter().any(|pt| pt.starts_with(&p)) {
            a.add(["--dir".into(), p.clone().into_os_string()]);
            if ft.is_dir() {
                system_binds(&p, points, a);
            }
        } else if ft.is_symlink() {
            if let Ok(target) = std::fs::read_link(&p) {
                a.add([
                    OsString::from("--symlink"),
                    target.into_os_string(),
                    p.into_os_string(),
                ]);
            }
        } else if ft.is_dir() || ft.is_file() {
            a.add([
                OsString::from("--ro-bind"),
                p.clone().into_os_string(),
                p.into_os_string(),
            ]);
        }
    }
}

impl Provider for LocalProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Local
    }

    fn capabilities(&self, env: &EnvSpec) -> Capabilities {
        let off = self.split_off_reason(env);
        Capabilities {
            provider: ProviderKind::Local,
            uid_split: off.is_none(),
            uid_split_off: off,
            sudo: false,
            network_modes: if egress::can_make_netns() {
                vec![NetworkMode::None, NetworkMode::Host, NetworkMode::Allowlist]
            } else {
                vec![NetworkMode::None, NetworkMode::Host]
            },
            resource_limits: false,
        }
    }

    async fn check(&self, env: &EnvSpec) -> Result<(), SandboxError> {
        if env.provider != ProviderKind::Local {
            return Err(SandboxError::Unsupported(format!(
                "environment {} is for provider {}, not local",
                env.name, env.provider
            )));
        }
        let bwrap = need("bwrap", "bubblewrap")?;
        need("tmux", "tmux")?;
        if self.split_off_reason(env).is_none() {
            need("setpriv", "util-linux")?;
        }
        if matches!(env.egress, Egress::Allowlist(_)) {
            if let Some(why) = egress::refusal(ProviderKind::Local) {
                return Err(SandboxError::Unsupported(why));
            }
            need("nsenter", "util-linux")?;
        }
        // The probe binds `/` with every mount below it: one that goes away meanwhile (dockerd
        // removing a container's overlay) fails its read-only remount, which says nothing about
        // this machine (CI failed a session's start on it). Asked again, as commands are.
        let mut out;
        let mut tries = 0;
        loop {
            out = Command::new(&bwrap)
                .args(BWRAP_PROBE)
                .stdin(Stdio::null())
                .output()
                .await
                .map_err(|e| failed("cannot run bwrap", e))?;
            tries += 1;
            if out.status.success() || tries == 4 || !bwrap_mount_race(&out.stderr) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20 * tries)).await;
        }
        if !out.status.success() {
            return Err(SandboxError::Unavailable(format!(
                "bubblewrap cannot make a sandbox here ({}); without root it needs user namespaces (sysctl kernel.unprivileged_userns_clone=1)",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    async fn create(&self, req: &CreateRequest) -> Result<Sandbox, SandboxError> {
        if req.env.provider != ProviderKind::Local {
            return Err(SandboxError::Unsupported(format!(
                "environment {} is for provider {}, not local",
                req.env.name, req.env.provider
            )));
        }
        layout::check_id(&req.id)?;
        if matches!(req.env.egress, Egress::Allowlist(_))
            && let Some(why) = egress::refusal(ProviderKind::Local)
        {
            return Err(SandboxError::Unsupported(why));
        }
        if self.root {
            // A mount point for /var/lib/hangar, so that /var is one read-only bind instead of one
            // per entry of /var and /var/lib (half of a command's start-up). Best effort.
            let _ = std::fs::create_dir(HANGAR_LIB);
        }
        let capabilities = self.capabilities(&req.env);
        let (host_dir, agent) = uids::new_host_dir(req, capabilities.uid_split)?;
        let dirs = Dirs {
            host: host_dir.clone(),
        };
        let made = std::fs::set_permissions(&host_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| failed(host_dir.display(), e))
            .map(|()| {
                let this = self.clone();
                let req = req.clone();
                let agent = agent.clone();
                let dirs = Dirs {
                    host: host_dir.clone(),
                };
                tokio::task::spawn_blocking(move || this.build(&req, &dirs, agent.as_ref()))
            });
        let made = match made {
            Ok(task) => task
                .await
                .unwrap_or_else(|e| Err(failed("making the sandbox", e))),
            Err(e) => Err(e),
        };
        if let Err(e) = made {
            let _ = copy::remove_tree(&dirs.host);
            if let Some(a) = &agent {
                uids::release(&req.home, &req.id, a.uid);
            }
            return Err(e);
        }
        let sb = Sandbox {
            id: req.id.clone(),
            env: req.env.clone(),
            host_dir: host_dir.clone(),
            workspace: PathBuf::from(WORKSPACE),
            host_workspace: Some(if req.env.in_place {
                std::fs::canonicalize(&req.repo).unwrap_or_else(|_| req.repo.clone())
            } else {
                dirs.workspace()
            }),
            ctl_inside: PathBuf::from(CTL_INSIDE),
            agent,
            handle: serde_json::json!({ "tmux_socket": dirs.tmux_socket() }),
            capabilities,
        };
        if matches!(req.env.egress, Egress::Allowlist(_))
            && let Err(e) = self.egress.ensure(&sb, Netns::Make(dirs.netns())).await
        {
            self.egress.stop(&sb.id);
            let _ = egress::remove_netns(&dirs.netns());
            let _ = copy::remove_tree(&dirs.host);
            if let Some(a) = &sb.agent {
                uids::release(&req.home, &req.id, a.uid);
            }
            return Err(e);
        }
        Ok(sb)
    }

    async fn exec(
        &self,
        sb: &Sandbox,
        who: Who,
        req: &ExecRequest,
    ) -> Result<Output, SandboxError> {
        self.gone_unless_there(sb)?;
        layout::check_env(req)?;
        self.egress_up(sb).await?;
        let args = self.bwrap_args(sb, who, req, true, None)?;
        let (program, before) = self.launcher(sb);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let out = self.exec_once(&program, &before, &args, req).await?;
            // bubblewrap binds the host's folders recursively and remounts each mount under them
            // read-only; one that vanishes meanwhile (dockerd removing a container's overlay under
            // /var/lib/docker) fails the setup before the command starts. Try again.
            if attempt < 4
                && out.status == 1
                && out.stdout.is_empty()
                && bwrap_mount_race(&out.stderr)
            {
                tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
                continue;
            }
            return Ok(out);
        }
    }

    async fn start_tmux(
        &self,
        sb: &Sandbox,
        session: &str,
        who: Who,
        req: &ExecRequest,
    ) -> Result<(), SandboxError> {
        self.start_window(sb, session, who, req, None).await
    }

    async fn tmux_alive(&self, sb: &Sandbox, session: &str) -> Result<bool, SandboxError> {
        layout::check_session(session)?;
        if !Dirs::of(sb).tmux_socket().exists() {
            return Ok(false);
        }
        let st = self
            .tmux(sb)
            .args(["has-session", "-t", &format!("={session}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .map_err(|e| failed("cannot run tmux", e))?;
        // What a control plane that restarted asks first about a live turn: its proxy too. Only
        // for a live session, and never in place of the answer: a namespace gone with a reboot
        // must not make a dead turn look alive (the next exec says why the proxy is not up).
        if st.success() && Dirs::of(sb).netns().exists() {
            let _ = self.egress_up(sb).await;
        }
        Ok(st.success())
    }

    fn attach_argv(&self, sb: &Sandbox, session: &str) -> Vec<String> {
        vec![
            "tmux".into(),
            "-S".into(),
            Dirs::of(sb).tmux_socket().to_string_lossy().into_owned(),
            "attach-session".into(),
            "-t".into(),
            format!("={session}"),
        ]
    }

    async fn destroy(&self, sb: &Sandbox, keep_logs: bool) -> Result<(), SandboxError> {
        let dirs = Dirs::of(sb);
        self.egress.stop(&sb.id);
        if !dirs.host.exists() {
            return Ok(());
        }
        if let Some(pid) = self.tmux_server_pid(sb).await {
            let _ = self.tmux(sb).arg("kill-server").output().await;
            wait_gone(&[pid], Duration::from_secs(3)).await;
            kill(pid);
        }
        // Whatever still has the sandbox mounted: windows' sandboxes, an exec still running,
        // a process the agent left behind.
        if let Some(src) = procs::source_of(&dirs.host) {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let left = procs::holding(&src);
                if left.is_empty() {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(SandboxError::Failed(format!(
                        "sandbox {}: processes {left:?} survived SIGKILL",
                        sb.id
                    )));
                }
                for pid in &left {
                    kill(*pid);
                }
                wait_gone(&left, Duration::from_millis(500)).await;
            }
        }
        egress::remove_netns(&dirs.netns())?;
        copy::remove_host_dir(&dirs.host, keep_logs).await?;
        if let (Some(a), Some(home)) = (&sb.agent, dirs.hangar_home()) {
            uids::release(home, &sb.id, a.uid);
        }
        Ok(())
    }
}

/// bubblewrap's own failure to remount a submount that went away while it set up the sandbox.
fn bwrap_mount_race(stderr: &[u8]) -> bool {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim_end();
    !text.contains('\n')
        && text.starts_with("bwrap: Can't bind mount ")
        && (text.contains("Unable to apply mount flags")
            || text.contains("No such file or directory"))
}

fn kill(pid: i32) {
    // SAFETY: kill takes plain integers; a pid that is gone only gives ESRCH.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Whether `pid` is gone (or a zombie, which holds nothing).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

async fn wait_gone(pids: &[i32], within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && !pids.iter().all(|p| gone(*p)) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bubblewraps_own_mount_race_is_told_from_a_commands_output() {
        // As bubblewrap 0.8 printed it while dockerd removed a container.
        let race = b"bwrap: Can't bind mount /oldroot/var on /newroot/var: Unable to apply mount flags: remount \"/newroot/var/lib/docker/overlay2/7263e5c3-init/merged\": Invalid argument\n";
        assert!(bwrap_mount_race(race));
        assert!(!bwrap_mount_race(
            b"bwrap: execvp x: No such file or directory\n"
        ));
        assert!(!bwrap_mount_race(
            b"some output\nbwrap: Can't bind mount a: Unable to apply mount flags\n"
        ));
        assert!(!bwrap_mount_race(b""));
    }

    /// The agent plants a link at `/tmp/<first>` between hangar's lstat and its mkdir: the
    /// link's target (here a 0700 folder standing for the vault or a control folder) keeps its
    /// mode, and the link is what the caller's lstat then refuses.
    #[test]
    fn a_link_planted_where_the_mount_point_goes_is_not_followed() {
        #![allow(clippy::unwrap_used)]
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = d.path().join("first");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        make_mount_point(&link).unwrap();
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let fresh = d.path().join("fresh");
        make_mount_point(&fresh).unwrap();
        assert!(std::fs::symlink_metadata(&fresh).unwrap().is_dir());
    }
}
