//! The Tower hook (`hangar-tower-hook`, installed as `/var/lib/hangar/tower_hook`): Claude Code
//! runs it before every tool call, as a PreToolUse command hook from the turn's own settings
//! file (`--settings FILE --setting-sources ''`, the command ending in `|| exit 2`).
//!
//! It sends the call to `TOWER/hooks/claude-code` with the run's key or passport (read from a
//! file of the run) and:
//! * `deny`: exits 2 with Tower's reason (the call is blocked; the agent sees the reason);
//! * `allow`: checks the deny-risky rules itself (a Tower allow never skips them), then exits 0
//!   **without** a permission decision, so Claude Code goes on to hangar's own checks;
//! * `wait`: long-polls the approval until a person signs or refuses, at most `--wait-seconds`
//!   (`HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS`, 300), then goes on as for allow or deny.
//!
//! Tower's URL is `https://` (rustls; the system's roots plus `--ca-file` or `HANGAR_CA_FILE`), or
//! `http://` to a loopback host only: see [`tls`]. A certificate that does not check out, or
//! plain http to anywhere else, blocks the call like any other fault.
//!
//! Every fault exits 2 with the reason on stderr: Tower unreachable, too slow, 5xx, 401/403, an
//! answer it cannot read (not JSON, wrong shape, cut short, too large), a missing key file, bad
//! arguments. Its own deadline (`--call-seconds` + `--wait-seconds`) is shorter than the hook
//! timeout the driver writes into the settings ([`settings_timeout`]), so it always answers
//! before Claude Code would give up on it (and let the call run).
//!
//! The [`client`] module is also the driver's Tower client for the `governed` policy.

pub mod client;
pub mod tls;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hangar_rules::{Context, Rules};
use serde_json::Value;

use crate::client::{Decision, Tower};

/// Exit status that blocks the call (Claude Code shows stderr to the agent).
pub const BLOCK: i32 = 2;
/// How long a person may take to sign, by default (`HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS`).
pub const DEFAULT_WAIT_SECONDS: u64 = 300;
/// How long the call itself may take, by default.
pub const DEFAULT_CALL_SECONDS: u64 = 20;
/// The largest hook input read.
const MAX_INPUT: usize = 16 * 1024 * 1024;

/// The hook timeout to write into the settings for these limits: longer than the hook's own
/// deadline by a margin, so the hook answers first.
pub fn settings_timeout(call_seconds: u64, wait_seconds: u64) -> u64 {
    call_seconds + wait_seconds + 30
}

/// The hook's arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args {
    pub url: String,
    pub key_file: PathBuf,
    pub wait_seconds: u64,
    pub call_seconds: u64,
    pub workspace: Option<PathBuf>,
    pub rules: Option<PathBuf>,
    pub env: Option<String>,
    pub sandbox: Option<String>,
    pub run: Option<String>,
    /// Extra CA certificates for an `https://` Tower (else `HANGAR_CA_FILE`).
    pub ca_file: Option<PathBuf>,
    /// `--approvals`: the driver's Tower client for the `governed` policy (see [`run`]).
    pub approvals: bool,
}

/// `--url URL --key-file FILE [--wait-seconds N] [--call-seconds N] [--workspace DIR]
/// [--rules FILE] [--env NAME] [--sandbox ID] [--run ID] [--ca-file PEM]`.
pub fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        wait_seconds: DEFAULT_WAIT_SECONDS,
        call_seconds: DEFAULT_CALL_SECONDS,
        ..Args::default()
    };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--url" => a.url = value()?,
            "--key-file" => a.key_file = PathBuf::from(value()?),
            "--wait-seconds" => {
                a.wait_seconds = value()?
                    .parse()
                    .map_err(|_| "--wait-seconds wants a number")?
            }
            "--call-seconds" => {
                a.call_seconds = value()?
                    .parse()
                    .map_err(|_| "--call-seconds wants a number")?
            }
            "--workspace" => a.workspace = Some(PathBuf::from(value()?)),
            "--rules" => a.rules = Some(PathBuf::from(value()?)),
            "--env" => a.env = Some(value()?),
            "--sandbox" => a.sandbox = Some(value()?),
            "--run" => a.run = Some(value()?),
            "--ca-file" => a.ca_file = Some(PathBuf::from(value()?)),
            "--approvals" => a.approvals = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.url.is_empty() {
        return Err("--url is required".into());
    }
    if a.key_file.as_os_str().is_empty() {
        return Err("--key-file is required".into());
    }
    Ok(a)
}

/// What the hook does: exit status and the text for stderr (empty on allow).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub code: i32,
    pub message: String,
}

fn block(message: impl Into<String>) -> Outcome {
    Outcome {
        code: BLOCK,
        message: format!("hangar's Tower hook blocked this call: {}", message.into()),
    }
}

/// Runs the hook on its argv (without the program) and the hook input from stdin.
///
/// With `--approvals` it is the driver's Tower client for the `governed` policy instead: the
/// input is the body for `TOWER/approvals` (the driver checked the rules already), exit 0 when
/// Tower allows (or a person signs), else exit 2 with why not, unprefixed, for the agent.
pub fn run(argv: &[String], input: &[u8]) -> Outcome {
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(e) => return block(format!("the hook is misconfigured: {e}")),
    };
    if args.approvals {
        return approvals(&args, input);
    }
    let call = match read_call(input) {
        Ok(c) => c,
        Err(o) => return o,
    };
    let key = match std::fs::read_to_string(&args.key_file) {
        Ok(k) => k,
        Err(e) => {
            return block(format!(
                "the key file {} is missing or unreadable ({e})",
                args.key_file.display()
            ));
        }
    };
    let ca_from_env =
        hangar_protocol::env::var_os(hangar_protocol::env::HANGAR_CA_FILE).map(PathBuf::from);
    let tower = match Tower::with_ca_file(
        &args.url,
        &key,
        args.ca_file
            .as_ref()
            .or(ca_from_env.as_ref())
            .map(PathBuf::as_path),
    ) {
        Ok(t) => t,
        Err(f) => return block(f.0),
    };
    let mut body = call.clone();
    if let Value::Object(m) = &mut body {
        m.insert(
            "client".into(),
            client::client_info(
                args.env.as_deref(),
                args.sandbox.as_deref(),
                args.run.as_deref(),
            ),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(args.call_seconds);
    match tower.call("hooks/claude-code", &body, deadline) {
        Err(f) => return block(f.0),
        Ok(Decision::Deny { reason }) => {
            return Outcome {
                code: BLOCK,
                message: format!(
                    "Tower denied this call: {}",
                    if reason.is_empty() {
                        "no reason given"
                    } else {
                        &reason
                    }
                ),
            };
        }
        Ok(Decision::Wait { id, .. }) => {
            if let Err(f) = tower.wait_for_signature(&id, Duration::from_secs(args.wait_seconds)) {
                return block(f.0);
            }
        }
        Ok(Decision::Allow { .. }) => {}
    }
    // Tower allowed (or a person signed): hangar's own rules still apply.
    check_rules(&args, &call)
}

/// Tower at `--url`, trusting `--ca-file` (else `HANGAR_CA_FILE`) on top of the system's roots.
fn tower(args: &Args, key: &str) -> Result<Tower, client::Fault> {
    let from_env =
        hangar_protocol::env::var_os(hangar_protocol::env::HANGAR_CA_FILE).map(PathBuf::from);
    let ca = args.ca_file.as_ref().or(from_env.as_ref());
    Tower::with_ca_file(&args.url, key, ca.map(PathBuf::as_path))
}

/// `--approvals`: one `governed` permission request to `TOWER/approvals`, as the driver asks it.
fn approvals(args: &Args, input: &[u8]) -> Outcome {
    let deny = |message: String| Outcome {
        code: BLOCK,
        message,
    };
    let body = match read_call(input) {
        Ok(b) => b,
        Err(o) => return deny(o.message),
    };
    let key = match std::fs::read_to_string(&args.key_file) {
        Ok(k) => k,
        Err(e) => {
            return deny(format!(
                "Tower could not be asked: the key file {} is unreadable ({e})",
                args.key_file.display()
            ));
        }
    };
    let tower = match tower(args, &key) {
        Ok(t) => t,
        Err(f) => return deny(f.0),
    };
    let deadline = Instant::now() + Duration::from_secs(args.call_seconds);
    let decided = match tower.call("approvals", &body, deadline) {
        Ok(Decision::Allow { .. }) => Ok(()),
        Ok(Decision::Deny { reason }) => Err(format!(
            "Tower denied this call: {}",
            if reason.is_empty() {
                "no reason given"
            } else {
                &reason
            }
        )),
        Ok(Decision::Wait { id, .. }) => tower
            .wait_for_signature(&id, Duration::from_secs(args.wait_seconds))
            .map_err(|f| f.0),
        Err(f) => Err(f.0),
    };
    match decided {
        Ok(()) => Outcome {
            code: 0,
            message: String::new(),
        },
        Err(why) => deny(why),
    }
}

/// Claude Code's hook input: one JSON object, at most 16 MiB.
fn read_call(input: &[u8]) -> Result<Value, Outcome> {
    if input.len() > MAX_INPUT {
        return Err(block("the hook input is larger than 16 MiB"));
    }
    match serde_json::from_slice(input) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(block(
            "the hook input from Claude Code is not a JSON object",
        )),
    }
}

/// What the hook does with Claude Code's hook input once Tower has allowed the call (or a
/// person signed): the reading of the input and the deny-risky rules, as [`run`] does them.
/// For `fuzz/` only (built with `--cfg fuzzing`): no key file, no network.
#[cfg(fuzzing)]
pub fn fuzz_after_allow(args: &Args, input: &[u8]) -> Outcome {
    match read_call(input) {
        Ok(call) => check_rules(args, &call),
        Err(o) => o,
    }
}

fn check_rules(args: &Args, call: &Value) -> Outcome {
    let rules = match &args.rules {
        Some(f) => match std::fs::read_to_string(f)
            .map_err(|e| format!("cannot read the rules file {}: {e}", f.display()))
            .and_then(|t| Rules::configure(&t))
        {
            Ok(r) => r,
            Err(e) => return block(e),
        },
        None => Rules::default_set(),
    };
    let workspace = args
        .workspace
        .clone()
        .or_else(|| call.get("cwd").and_then(Value::as_str).map(PathBuf::from))
        .or_else(|| std::env::current_dir().ok());
    let Some(workspace) = workspace else {
        return block("the workspace is unknown, so the rules cannot be checked");
    };
    let mut ctx = Context::new(workspace);
    ctx.protected.push(args.key_file.clone());
    let tool = call
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let input = call.get("tool_input").cloned().unwrap_or(Value::Null);
    let v = rules.check_tool(tool, &input, &ctx);
    if v.allowed() {
        Outcome {
            code: 0,
            message: String::new(),
        }
    } else {
        Outcome {
            code: BLOCK,
            message: format!(
                "Denied by hangar's rule {} (Tower allowed it, the rules do not): {}",
                v.rule.as_deref().unwrap_or("deny-risky"),
                v.reason
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let a = parse_args(&[
            "--url".into(),
            "http://t".into(),
            "--key-file".into(),
            "/k".into(),
        ])
        .unwrap();
        assert_eq!(a.wait_seconds, DEFAULT_WAIT_SECONDS);
        assert!(parse_args(&["--url".into(), "http://t".into()]).is_err());
        assert!(parse_args(&["--nope".into()]).is_err());
        assert!(settings_timeout(20, 300) > 320);
        let o = run(&[], b"{}");
        assert_eq!(o.code, BLOCK);
        assert!(o.message.contains("misconfigured"), "{o:?}");
    }
}
