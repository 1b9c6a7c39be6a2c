//! Starting Claude Code and speaking to its stdin (stream-json user messages and control
//! messages). What comes back on stdout is the relay's business.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use hangar_protocol::env::{HARNESS_ENV_FIXED, harness_may_inherit};
use serde_json::{Value, json};

use crate::args::{Policy, Settings};

/// The Claude Code argv for the settings (without the program).
pub fn claude_args(s: &Settings) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    match s.policy {
        Policy::Ask => a.extend(["--permission-prompt-tool", "stdio"].map(OsString::from)),
        Policy::Auto => a.push("--dangerously-skip-permissions".into()),
    }
    if let Some(r) = &s.resume {
        a.extend([OsString::from("--resume"), r.into()]);
    }
    if let Some(id) = &s.session_id {
        a.extend([OsString::from("--session-id"), id.into()]);
    }
    a
}

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
    env
}

/// A started harness.
#[derive(Debug)]
pub struct Harness {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
}

/// Starts the harness in `s.cwd`, in a process group of its own, as the agent under the uid split.
pub fn spawn(s: &Settings) -> io::Result<(Harness, ChildStdout)> {
    let (program, args) = match &s.raw {
        Some(argv) => (argv[0].clone(), argv[1..].to_vec()),
        None => (s.claude_bin.clone().into_os_string(), claude_args(s)),
    };
    let mut cmd = Command::new(&program);
    cmd.args(&args)
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
    /// Writes one JSON line to the harness's stdin.
    pub fn send(&mut self, msg: &Value) -> io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "harness input is closed"))?;
        let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
        line.push(b'\n');
        stdin.write_all(&line)?;
        stdin.flush()
    }

    /// Closes the harness's stdin: Claude Code finishes the running turn, then exits.
    pub fn close_input(&mut self) {
        self.stdin = None;
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

/// A user message (`prompt` / `steer`). The `uuid` makes Claude Code report the message's
/// lifecycle and list it in `user_message_uuids` of the `result` that covers it.
pub fn user_message(text: &str, uuid: &str) -> Value {
    json!({"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": null, "session_id": "", "uuid": uuid})
}

/// An `interrupt` control request.
pub fn interrupt(request_id: &str) -> Value {
    json!({"type": "control_request", "request_id": request_id, "request": {"subtype": "interrupt"}})
}

/// The answer to a `can_use_tool` request: allow (with the input to run) or deny (with a message
/// the agent sees).
pub fn permission_response(request_id: &str, allow: bool, input: &Value, message: &str) -> Value {
    let response = if allow {
        json!({"behavior": "allow", "updatedInput": input})
    } else {
        json!({"behavior": "deny", "message": message})
    };
    json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}})
}

/// A UUID-shaped id for a command, derived from its nonce (unique per run).
pub fn message_uuid(nonce_hex: &str) -> String {
    let h: String = nonce_hex
        .chars()
        .filter(char::is_ascii_hexdigit)
        .chain(std::iter::repeat('0'))
        .take(32)
        .collect();
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_shape() {
        let u = message_uuid("00112233445566778899aabbccddeeff");
        assert_eq!(u, "00112233-4455-4677-8899-aabbccddeeff");
        assert_eq!(message_uuid("").len(), 36);
    }
}
