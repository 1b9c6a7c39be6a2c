//! What every provider lays out the same way: the paths inside a sandbox, the host folder's
//! parts, the agent's user, the minimal environment, tmux session names.
//!
//! Inside a sandbox (local and docker alike):
//!
//! | path | what | owner, mode |
//! | --- | --- | --- |
//! | `/workspace` | the work tree (a copy of the repo) | the agent (hangar's user without the split) |
//! | `/home/agent` | the agent's home | the agent, 0700 |
//! | `/var/lib/hangar` | hangar's programs (driver, hook), copied in per turn | root, 0755 |
//! | `/run/hangar` | `<host_dir>/ctl`: the runs' control folders | root (hangar's user), 0700 |
//! | `/tmp` | the sandbox's own | 1777 |
//!
//! On the host, `<home>/sandboxes/<id>/` (0700, hangar's user) holds `workspace/`, `home/`,
//! `lib/`, `ctl/`, `tmp/` (the local provider binds them; docker binds `workspace/` and `ctl/`)
//! and the provider's own state.

use std::path::{Path, PathBuf};

use crate::{AgentUser, ExecRequest, Output, Sandbox, SandboxError, Who};

/// The work tree inside.
pub const WORKSPACE: &str = "/workspace";
/// The agent's home inside.
pub const AGENT_HOME: &str = "/home/agent";
/// hangar's own programs inside (the driver and the hook are copied here per turn).
pub const HANGAR_LIB: &str = "/var/lib/hangar";
/// Where `<host_dir>/ctl` is seen inside.
pub const CTL_INSIDE: &str = "/run/hangar";
/// The root-owned tmux server's socket inside a container or pod (its folder is root's, 0700).
pub const TMUX_SOCKET: &str = "/run/hangar-tmux/default";
/// The agent's user name in the sandbox's passwd.
pub const AGENT_NAME: &str = "agent";

/// The agents' uids (and gids, the same number): one per sandbox, claimed from this range.
pub const AGENT_UID_FIRST: u32 = 60000;
pub const AGENT_UID_LAST: u32 = 64999;

/// PATH inside.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The sandbox's folder on the host.
pub fn host_dir(home: &Path, id: &str) -> PathBuf {
    home.join("sandboxes").join(id)
}

/// Sandbox ids become folder and container names: letters, digits, `-`, `_`, 1 to 64.
pub fn check_id(id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !id.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Invalid(format!(
            "sandbox id {id:?}: use 1-64 letters, digits, - and _ (not starting with -)"
        )))
    }
}

/// tmux session names: letters, digits, `-`, `_` (tmux gives `.` and `:` a meaning).
pub fn check_session(name: &str) -> Result<(), SandboxError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Invalid(format!(
            "tmux session {name:?}: use letters, digits, - and _"
        )))
    }
}

/// The home of `who` inside.
pub fn home_of(who: Who, agent: Option<&AgentUser>) -> &'static str {
    match (who, agent) {
        // Under the split hangar's user is root, whose home is hangar's own folder.
        (Who::Hangar, Some(_)) => HANGAR_LIB,
        _ => AGENT_HOME,
    }
}

/// The environment a command starts with: PATH, HOME, LANG, then the request's variables.
pub fn base_env(who: Who, agent: Option<&AgentUser>, req: &ExecRequest) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_owned(), PATH.to_owned()),
        ("HOME".to_owned(), home_of(who, agent).to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ];
    for (k, v) in &req.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// [`base_env`] for a command in `sb`: with the egress proxy's variables when its environment has
/// an allowlist (the request's own variables still come last).
pub fn sandbox_env(sb: &Sandbox, who: Who, req: &ExecRequest) -> Vec<(String, String)> {
    let proxy = crate::egress::proxy_env(&sb.env);
    if proxy.is_empty() {
        return base_env(who, sb.agent.as_ref(), req);
    }
    let mut with = req.clone();
    with.env = proxy
        .into_iter()
        .filter(|(k, _)| !req.env.iter().any(|(rk, _)| rk == k))
        .chain(req.env.iter().cloned())
        .collect();
    base_env(who, sb.agent.as_ref(), &with)
}

/// `/etc/passwd` and `/etc/group` lines for the agent.
pub fn agent_passwd_line(agent: &AgentUser) -> String {
    format!(
        "{AGENT_NAME}:x:{}:{}:hangar agent:{}:/bin/sh\n",
        agent.uid,
        agent.gid,
        agent.home.display()
    )
}

pub fn agent_group_line(agent: &AgentUser) -> String {
    format!("{AGENT_NAME}:x:{}:\n", agent.gid)
}

/// The variables a request may not set: they would change how the sandbox itself works.
/// The argv of `tmux -S SOCKET new-session` for a detached session `session` (200x50, in `cwd`)
/// that runs `env -i ENV... PREFIX... ARGV`: `env` as `K=V` (with `TERM=screen` unless it sets
/// TERM), `prefix` e.g. a `setpriv` that drops to the agent. One shape for every provider whose
/// tmux runs inside a container or pod.
pub fn tmux_new_session_argv(
    socket: &str,
    session: &str,
    cwd: &str,
    mut env: Vec<String>,
    prefix: Vec<String>,
    argv: &[String],
) -> Vec<String> {
    if !env.iter().any(|v| v.starts_with("TERM=")) {
        env.push("TERM=screen".into());
    }
    let mut out: Vec<String> = [
        "tmux",
        "-S",
        socket,
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "200",
        "-y",
        "50",
        "-c",
        cwd,
        "--",
        "env",
        "-i",
    ]
    .map(str::to_owned)
    .to_vec();
    out.extend(env);
    out.extend(prefix);
    out.extend(argv.iter().cloned());
    out
}

/// A command's folder inside once the request is checked (the variables it may set, a command
/// at all): the folder it names, else the workspace. Every provider checks a request this way.
pub fn checked_cwd(req: &ExecRequest) -> Result<String, SandboxError> {
    check_env(req)?;
    if req.argv.is_empty() {
        return Err(SandboxError::Invalid("the command is empty".into()));
    }
    Ok(req
        .cwd
        .clone()
        .unwrap_or_else(|| PathBuf::from(WORKSPACE))
        .to_string_lossy()
        .into_owned())
}

/// The argv of `tmux -S SOCKET has-session -t =SESSION` (an exact name, never a prefix).
pub fn tmux_has_session_argv(socket: &str, session: &str) -> Result<Vec<String>, SandboxError> {
    check_session(session)?;
    Ok(["tmux", "-S", socket, "has-session", "-t"]
        .map(str::to_owned)
        .into_iter()
        .chain([format!("={session}")])
        .collect())
}

/// What `tmux new-session` answered, as a provider's `start_tmux` answers.
pub fn tmux_started(sb: &Sandbox, session: &str, out: &Output) -> Result<(), SandboxError> {
    if out.success() {
        return Ok(());
    }
    Err(SandboxError::Failed(format!(
        "tmux could not start session {session} in sandbox {}: {}",
        sb.id,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

pub fn check_env(req: &ExecRequest) -> Result<(), SandboxError> {
    for (k, _) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(SandboxError::Invalid(format!(
                "environment variable name {k:?} is not allowed"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ids_and_sessions_are_checked() {
        assert!(check_id("sb_01-a").is_ok());
        for bad in ["", "-x", "a/b", "a.b", &"x".repeat(65)] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
        assert!(check_session("run-1_a").is_ok());
        for bad in ["", "a.b", "a:b", "a b"] {
            assert!(check_session(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn request_variables_override_the_base_ones() {
        let mut req = ExecRequest::new(["true"]);
        req.env.push(("HOME".into(), "/x".into()));
        req.env.push(("A".into(), "1".into()));
        let env = base_env(Who::Agent, None, &req);
        assert_eq!(
            env.iter()
                .filter(|(k, _)| k == "HOME")
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>(),
            ["/x"]
        );
        assert!(env.contains(&("A".into(), "1".into())));
    }
}
