//! The driver's command line, resolved into [`Settings`] before anything runs.
//!
//! ```text
//! hangar-driver --ctl DIR --run RUN --cwd DIR [--harness claude] [--policy ask|auto]
//!               [--claude-bin PATH] [--resume SESSION_ID] [--session-id UUID]
//!               [--agent-uid UID --agent-gid GID --agent-home DIR]
//!               [--raw -- CMD [ARG...]]
//! ```
//! `--raw` runs CMD as the harness with its argv unchanged, speaking Claude Code's stream-json
//! (benchmarks and protocol tests use a stub harness this way). Hand-parsed: the driver keeps
//! its dependencies to the protocol crate and libc.

use std::ffi::OsString;
use std::path::PathBuf;

/// How permission requests are answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// A person answers each request through `approve` / `deny` commands.
    Ask,
    /// No requests: the harness runs with permissions skipped (hangar's sandbox is the boundary).
    Auto,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Ask => "ask",
            Policy::Auto => "auto",
        }
    }
}

/// The uid the harness runs as, when it is not the driver's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agent {
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// Everything the driver needs to know, resolved from argv.
#[derive(Clone, Debug)]
pub struct Settings {
    pub ctl: PathBuf,
    pub run: String,
    pub cwd: PathBuf,
    pub policy: Policy,
    pub claude_bin: PathBuf,
    pub resume: Option<String>,
    pub session_id: Option<String>,
    pub agent: Option<Agent>,
    pub raw: Option<Vec<OsString>>,
}

pub const USAGE: &str = "usage: hangar-driver --ctl DIR --run RUN --cwd DIR [--harness claude] [--policy ask|auto] \
[--claude-bin PATH] [--resume SESSION_ID] [--session-id UUID] [--agent-uid UID --agent-gid GID --agent-home DIR] [--raw -- CMD ARGS...]";

/// Parses argv (without the program name).
pub fn parse(args: Vec<OsString>) -> Result<Settings, String> {
    let mut it = args.into_iter();
    let (mut ctl, mut run, mut cwd) = (None, None, None);
    let mut policy = Policy::Ask;
    let mut claude_bin = PathBuf::from("claude");
    let (mut resume, mut session_id) = (None, None);
    let (mut uid, mut gid, mut home) = (None, None, None);
    let mut raw = None;
    while let Some(a) = it.next() {
        let flag = a.to_string_lossy().into_owned();
        if flag == "--raw" {
            let rest: Vec<OsString> = it.by_ref().skip_while(|x| x == "--").collect();
            if rest.is_empty() {
                return Err("--raw needs a command after --".into());
            }
            raw = Some(rest);
            break;
        }
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--ctl" => ctl = Some(PathBuf::from(value()?)),
            "--run" => run = Some(value()?.to_string_lossy().into_owned()),
            "--cwd" => cwd = Some(PathBuf::from(value()?)),
            "--harness" => {
                let h = value()?;
                if h != "claude" {
                    return Err(format!(
                        "harness {h:?} is not supported by this driver (supported: claude)"
                    ));
                }
            }
            "--policy" => {
                policy = match value()?.to_str() {
                    Some("ask") => Policy::Ask,
                    Some("auto") => Policy::Auto,
                    other => return Err(format!("policy {other:?} is not one of ask, auto")),
                }
            }
            "--claude-bin" => claude_bin = PathBuf::from(value()?),
            "--resume" => resume = Some(value()?.to_string_lossy().into_owned()),
            "--session-id" => session_id = Some(value()?.to_string_lossy().into_owned()),
            "--agent-uid" => uid = Some(number(&flag, value()?)?),
            "--agent-gid" => gid = Some(number(&flag, value()?)?),
            "--agent-home" => home = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        }
    }
    let agent = match (uid, gid, home) {
        (Some(uid), Some(gid), Some(home)) => Some(Agent { uid, gid, home }),
        (None, None, None) => None,
        _ => return Err("--agent-uid, --agent-gid and --agent-home go together".into()),
    };
    let run = run.ok_or("--run is required")?;
    if !hangar_protocol::ctl::valid_run_id(&run) {
        return Err(format!("{run:?} is not a run id"));
    }
    Ok(Settings {
        ctl: ctl.ok_or("--ctl is required")?,
        run,
        cwd: cwd.ok_or("--cwd is required")?,
        policy,
        claude_bin,
        resume,
        session_id,
        agent,
        raw,
    })
}

fn number(flag: &str, v: OsString) -> Result<u32, String> {
    v.to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{flag} needs a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_a_full_line() {
        let s = parse(os(&[
            "--ctl",
            "/c",
            "--run",
            "r1",
            "--cwd",
            "/w",
            "--policy",
            "auto",
            "--agent-uid",
            "1001",
            "--agent-gid",
            "1002",
            "--agent-home",
            "/home/a",
            "--raw",
            "--",
            "cat",
            "-u",
        ]))
        .unwrap();
        assert_eq!(s.policy, Policy::Auto);
        assert_eq!(
            s.agent,
            Some(Agent {
                uid: 1001,
                gid: 1002,
                home: "/home/a".into()
            })
        );
        assert_eq!(s.raw, Some(os(&["cat", "-u"])));
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        assert!(
            parse(os(&["--ctl", "/c", "--cwd", "/w"]))
                .unwrap_err()
                .contains("--run")
        );
        assert!(parse(os(&["--ctl", "/c", "--run", "../x", "--cwd", "/w"])).is_err());
        assert!(
            parse(os(&[
                "--ctl", "/c", "--run", "r", "--cwd", "/w", "--policy", "yolo"
            ]))
            .is_err()
        );
        assert!(
            parse(os(&[
                "--ctl",
                "/c",
                "--run",
                "r",
                "--cwd",
                "/w",
                "--agent-uid",
                "5"
            ]))
            .is_err()
        );
        assert!(
            parse(os(&[
                "--ctl",
                "/c",
                "--run",
                "r",
                "--cwd",
                "/w",
                "--harness",
                "codex"
            ]))
            .is_err()
        );
    }
}
