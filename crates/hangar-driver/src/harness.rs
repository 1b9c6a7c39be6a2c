//! Starting a harness process and writing to its stdin. The adapters (`claude.rs`, `codex/`)
//! decide the argv and what to write; the relay reads what comes back.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use hangar_protocol::env::{HARNESS_ENV_FIXED, harness_may_inherit};
use serde_json::Value;

use crate::args::{Policy, Settings};

/// The harness's environment: the allow-listed variables of the driver's own, the fixed quiet
/// ones, the agent's `HOME` under the uid split, and `IS_SANDBOX=1` under `auto` (Claude Code
/// refuses to skip permissions as root without it; hangar's sandbox is the boundary).
pub fn harness_env(s: &Settings) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k.to_str().is_some_and(harness_may_inherit))
        .collect();
    let mut set = |k: &str, v: OsString| {
        env.retain(|(name, _)| name != k);
        env.push((k.into(), v));
    };
    for (k, v) in HARNESS_ENV_FIXED {
        set(k, (*v).into());
    }
    if let Some(agent) = &s.agent {
        set("HOME", agent.home.clone().into_os_string());
    }
    if s.policy == Policy::Auto {
        set("IS_SANDBOX", "1".into());
    }
    if let Some(home) = &s.codex_home {
        // The turn's own Codex home (codex/home.rs): the agent's `~/.codex` is not read.
        set("CODEX_HOME", home.clone().into_os_string());
    }
    // The turn's own credentials (secrets.rs), over anything the driver was started with; a
    // Codex model provider's key variable only from there (`codex_keys.rs`).
    let provider_keys =
        hangar_protocol::codex_keys::provider_keys(&s.codex_config).unwrap_or_default();
    for (k, v) in &s.secret_env {
        if harness_may_inherit(k) || provider_keys.iter().any(|(_, name)| name == k) {
            set(k, v.into());
        }
    }
    env
}

/// A started harness.
#[derive(Debug)]
pub struct Harness {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
}

/// Starts `program args` in `s.cwd`, in a process group of its own, as the agent under the uid
/// split, with [`harness_env`].
pub fn spawn(
    program: &OsString,
    args: &[OsString],
    s: &Settings,
) -> io::Result<(Harness, ChildStdout)> {
    // The harness's stdin and stdout are Unix sockets, not pipes: a pipe of a process can be
    // opened again through `/proc/<pid>/fd/N` by any process of its uid (a tool of the agent's,
    // writing lines into the stream the driver relays and seals as the harness's, or answers
    // into the harness's input), a socket cannot (ENXIO).
    let (stdin_ours, stdin_theirs) = socket_pair()?;
    let (stdout_ours, stdout_theirs) = socket_pair()?;
    widen(&stdout_ours, libc::SO_RCVBUF, libc::SO_RCVBUFFORCE);
    widen(&stdout_theirs, libc::SO_SNDBUF, libc::SO_SNDBUFFORCE);
    let (program, args) =
        hangar_protocol::hide::wrap(&s.hide, program, args).map_err(io::Error::other)?;
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .current_dir(&s.cwd)
        .env_clear()
        .envs(harness_env(s))
        .stdin(Stdio::from(stdin_theirs))
        .stdout(Stdio::from(stdout_theirs))
        .stderr(Stdio::inherit())
        .process_group(0);
    if let Some(agent) = &s.agent {
        // std drops supplementary groups (setgroups(0)) when it changes uid as root.
        cmd.uid(agent.uid).gid(agent.gid);
    }
    let child = cmd.spawn().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot start the harness {}: {e}",
                program.to_string_lossy()
            ),
        )
    })?;
    // The harness's ends were moved into `cmd` and closed with it: the driver's ends see the
    // harness's output end, and the harness sees its input end when the driver closes it.
    drop(cmd);
    let stdin = Some(ChildStdin::from(stdin_ours));
    Ok((Harness { child, stdin }, ChildStdout::from(stdout_ours)))
}

/// A connected pair of Unix stream sockets, closed on exec (the harness gets its end as a
/// standard descriptor, which `dup2` makes without the flag).
fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid array of two ints for socketpair to fill.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded: both descriptors are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Asks for a 1 MiB socket buffer on the harness's stdout, so a fast writer and the relay trade
/// up to 1 MiB per wake-up. Best effort: past the system's limit (`net.core.rmem_max`) only
/// root's `*BUFFORCE` is taken; otherwise the buffer stays as large as allowed.
fn widen(fd: &OwnedFd, opt: libc::c_int, force: libc::c_int) {
    let size: libc::c_int = 1 << 20;
    for o in [force, opt] {
        // SAFETY: setsockopt on a socket we own with a valid int of the given length.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                o,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return;
        }
    }
}

impl Harness {
    /// Writes one JSON line to the harness's stdin. A harness that has exited takes nothing,
    /// even when a process it left behind still holds its stdin open (the write would succeed
    /// and the message be lost): the caller hands the message back instead.
    pub fn send(&mut self, msg: &Value) -> io::Result<()> {
        if let Ok(Some(_)) = self.child.try_wait() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the harness has exited",
            ));
        }
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "harness input is closed"))?;
        let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
        line.push(b'\n');
        stdin.write_all(&line)?;
        stdin.flush()
    }

    /// Closes the harness's stdin: Claude Code finishes the running turn, then exits; Codex's
    /// app-server exits at once.
    pub fn close_input(&mut self) {
        self.stdin = None;
    }

    /// The harness's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Signals the harness's whole process group.
    pub fn signal_group(&self, sig: i32) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
            unsafe {
                libc::kill(-pid, sig);
            }
        }
    }
}
