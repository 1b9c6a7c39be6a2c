//! Starting a harness process and writing to its stdin. The adapters (`claude.rs`, `codex/`)
//! decide the argv and what to write; the relay reads what comes back.

use std::ffi::OsString;
use std::io::{self, Write};
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
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(&s.cwd)
        .env_clear()
        .envs(harness_env(s))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0);
    if let Some(agent) = &s.agent {
        // std drops supplementary groups (setgroups(0)) when it changes uid as root.
        cmd.uid(agent.uid).gid(agent.gid);
    }
    let mut child = cmd.spawn().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot start the harness {}: {e}",
                program.to_string_lossy()
            ),
        )
    })?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("harness stdout missing"))?;
    widen_pipe(&stdout);
    let stdin = child.stdin.take();
    Ok((Harness { child, stdin }, stdout))
}

/// Asks for a 1 MiB pipe buffer on the harness's stdout, so a fast writer and the relay trade
/// 1 MiB per wake-up instead of 64 KiB. Best effort: the default limit
/// (`/proc/sys/fs/pipe-max-size`) allows it; on failure the pipe keeps its size.
fn widen_pipe(stdout: &ChildStdout) {
    use std::os::fd::AsRawFd;
    // SAFETY: F_SETPIPE_SZ on a pipe fd we own; it takes an integer and touches no memory.
    unsafe {
        libc::fcntl(stdout.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
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
