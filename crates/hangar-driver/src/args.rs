//! The driver's command line, resolved into [`Settings`] before anything runs.
//!
//! ```text
//! hangar-driver --ctl DIR --run RUN --cwd DIR [--key-file FILE] [--secrets-file FILE] [--harness claude|codex]
//!               [--policy ask|auto|governed] [--claude-bin PATH] [--codex-bin PATH] [--model NAME] [--codex-config KEY=VALUE]...
//!               [--resume ID | --fork ID [--fork-at MESSAGE_OR_TURN]] [--session-id UUID]
//!               [--model-timeout SECS]
//!               [--verify CMD [--max-verify-rounds N] [--verify-timeout SECS]]
//!               [--agent-uid UID --agent-gid GID --agent-home DIR] [--rules FILE]
//!               [--policy governed] [--tower-hook PATH] [--tower-url URL --tower-key-file FILE
//!               [--tower-wait-seconds N] [--tower-call-seconds N] [--tower-client PATH]
//!               [--tower-ca-file PEM]] [--tower-hook-digest SHA256]
//!               [--claude-settings FILE] [--hide PATH]... [--raw -- CMD [ARG...]]
//! ```
//! `--key-file FILE` is where the run key is, read and deleted before anything else starts
//! (default: the control folder's `key`; a local sandbox hands it over in the driver's own
//! `/dev/shm`, which no other process sees).
//! `--claude-settings FILE` is a reviewed Claude Code settings file the environment names (MCP
//! servers, the model, deny rules): merged into the turn's own settings file, recorded with its
//! digest in `hangar.started`; a file that would loosen governance is refused (`claude_settings.rs`).
//! `--tower-ca-file PEM` is the CA certificates an `https://` Tower's certificate must chain to
//! (with the system's roots), given to the hook and the Tower client; without it,
//! `HANGAR_CA_FILE` of the driver's environment. In a sandbox the control plane copies its own
//! `HANGAR_CA_FILE` in and names the copy here: its own path means nothing inside.
//! `--rules FILE` is the environment's deny-risky rules file (rules added, default rules turned
//! off by id; see hangar-rules); without it the default set applies.
//! `--resume`/`--fork` take Claude Code's session id or Codex's thread id; `--fork-at` is where
//! the fork's conversation ends: Claude Code's message uuid (`--resume-session-at`, the last
//! entry kept) or Codex's turn id (`thread/fork` `lastTurnId`, the last turn kept). `--raw` runs CMD as
//! the harness with its argv unchanged, speaking Claude Code's stream-json (benchmarks and
//! protocol tests use a stub harness this way). Hand-parsed: the driver keeps its dependencies
//! to the protocol crate and libc.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// How permission requests are answered, and which coding agent runs: hangar's shared words
/// (`harness::Harness` is the running harness process, hence the other name here).
pub use hangar_protocol::{Harness as HarnessKind, Policy};

/// The uid the harness runs as, when it is not the driver's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agent {
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// The job's check (S22).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verify {
    pub command: String,
    pub max_rounds: u32,
    pub timeout: Duration,
}

/// Everything the driver needs to know, resolved from argv.
#[derive(Clone, Debug)]
pub struct Settings {
    pub ctl: PathBuf,
    /// Where the run key is, when not in the control folder.
    pub key_file: Option<PathBuf>,
    pub run: String,
    pub cwd: PathBuf,
    pub harness: HarnessKind,
    pub policy: Policy,
    pub claude_bin: PathBuf,
    pub codex_bin: PathBuf,
    pub model: Option<String>,
    pub codex_config: Vec<String>,
    pub resume: Option<String>,
    pub fork: Option<String>,
    pub fork_at: Option<String>,
    pub session_id: Option<String>,
    pub model_timeout: Duration,
    pub verify: Option<Verify>,
    pub agent: Option<Agent>,
    pub raw: Option<Vec<OsString>>,
    /// The environment's deny-risky rules file, if any.
    pub rules_file: Option<PathBuf>,
    /// The Tower hook to install for this turn (Claude Code only).
    pub tower_hook: Option<PathBuf>,
    /// The SHA-256 the Tower hook must have (what hangar installed); another refuses the turn.
    pub tower_hook_digest: Option<String>,
    /// Where Tower is, for the hook or the `governed` policy.
    pub tower: Option<crate::tower::TowerSettings>,
    /// A reviewed Claude Code settings file the environment names (`--claude-settings`): merged
    /// into the turn's own settings, its digest recorded; see `claude_settings.rs`.
    pub claude_settings: Option<PathBuf>,
    /// The turn's own Codex home (not a flag: the driver makes it, see `codex/home.rs`).
    pub codex_home: Option<PathBuf>,
    /// `--hide PATH`: kept out of the harness's and the check's sight (see `hide.rs`).
    pub hide: Vec<PathBuf>,
    /// The turn's credentials file (`--secrets-file`, see `secrets.rs`).
    pub secrets_file: Option<PathBuf>,
    /// The turn's credential variables (not a flag: read from the secrets file).
    pub secret_env: Vec<(String, String)>,
}

pub const USAGE: &str = "usage: hangar-driver --ctl DIR --run RUN --cwd DIR [--key-file FILE] [--secrets-file FILE] [--harness claude|codex] [--policy ask|auto|governed] \
[--claude-bin PATH] [--codex-bin PATH] [--model NAME] [--codex-config KEY=VALUE]... \
[--resume ID | --fork ID [--fork-at MESSAGE_OR_TURN]] [--session-id UUID] [--model-timeout SECS] \
[--verify CMD [--max-verify-rounds N] [--verify-timeout SECS]] \
[--agent-uid UID --agent-gid GID --agent-home DIR] [--rules FILE] \
[--tower-hook PATH [--tower-hook-digest SHA256]] [--tower-url URL --tower-key-file FILE [--tower-wait-seconds N] [--tower-call-seconds N] [--tower-client PATH] [--tower-ca-file PEM]] \
[--claude-settings FILE] [--hide PATH]... [--raw -- CMD ARGS...]";

/// Parses argv (without the program name).
pub fn parse(args: Vec<OsString>) -> Result<Settings, String> {
    let mut it = args.into_iter();
    let (mut ctl, mut run, mut cwd) = (None, None, None);
    let mut harness = HarnessKind::Claude;
    let mut policy = Policy::Ask;
    let mut claude_bin = PathBuf::from("claude");
    let mut codex_bin = PathBuf::from("codex");
    let (mut model, mut codex_config) = (None, Vec::new());
    let (mut resume, mut fork, mut fork_at, mut session_id) = (None, None, None, None);
    let mut model_timeout = Duration::from_secs(300);
    let (mut verify_cmd, mut max_rounds, mut verify_timeout) = (None, 3, Duration::from_secs(600));
    let (mut uid, mut gid, mut home) = (None, None, None);
    let mut raw = None;
    let mut rules_file = None;
    let mut key_file = None;
    let mut secrets_file = None;
    let (mut tower_hook, mut tower_url, mut tower_key) = (None, None, None);
    let (mut tower_wait, mut tower_call) = (300u64, 20u64);
    let mut tower_hook_digest = None;
    let (mut tower_client, mut tower_ca) = (None, None);
    let mut hide = Vec::new();
    let mut claude_settings = None;
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
            "--run" => run = Some(text(value()?)),
            "--cwd" => cwd = Some(PathBuf::from(value()?)),
            "--harness" => {
                harness = match value()?.to_str() {
                    Some("claude") => HarnessKind::Claude,
                    Some("codex") => HarnessKind::Codex,
                    other => return Err(format!("harness {other:?} is not one of claude, codex")),
                }
            }
            "--policy" => {
                policy = match value()?.to_str() {
                    Some("ask") => Policy::Ask,
                    Some("auto") => Policy::Auto,
                    Some("governed") => Policy::Governed,
                    other => {
                        return Err(format!(
                            "policy {other:?} is not one of ask, auto, governed"
                        ));
                    }
                }
            }
            "--claude-bin" => claude_bin = PathBuf::from(value()?),
            "--codex-bin" => codex_bin = PathBuf::from(value()?),
            "--model" => model = Some(text(value()?)),
            "--codex-config" => {
                let kv = text(value()?);
                if !kv.contains('=') {
                    return Err(format!("--codex-config wants KEY=VALUE, not {kv:?}"));
                }
                codex_config.push(kv);
            }
            "--resume" => resume = Some(text(value()?)),
            "--fork" => fork = Some(text(value()?)),
            "--fork-at" => fork_at = Some(text(value()?)),
            "--session-id" => session_id = Some(text(value()?)),
            "--model-timeout" => {
                model_timeout = Duration::from_secs(number(&flag, value()?)?.into())
            }
            "--verify" => verify_cmd = Some(text(value()?)),
            "--max-verify-rounds" => max_rounds = number(&flag, value()?)?,
            "--verify-timeout" => {
                verify_timeout = Duration::from_secs(number(&flag, value()?)?.into())
            }
            "--agent-uid" => uid = Some(number(&flag, value()?)?),
            "--agent-gid" => gid = Some(number(&flag, value()?)?),
            "--agent-home" => home = Some(PathBuf::from(value()?)),
            "--rules" => rules_file = Some(PathBuf::from(value()?)),
            "--key-file" => key_file = Some(PathBuf::from(value()?)),
            "--secrets-file" => secrets_file = Some(PathBuf::from(value()?)),
            "--claude-settings" => claude_settings = Some(PathBuf::from(value()?)),
            "--tower-hook" => tower_hook = Some(PathBuf::from(value()?)),
            "--tower-hook-digest" => tower_hook_digest = Some(text(value()?).to_ascii_lowercase()),
            "--tower-url" => tower_url = Some(text(value()?)),
            "--tower-key-file" => tower_key = Some(PathBuf::from(value()?)),
            "--tower-wait-seconds" => tower_wait = number(&flag, value()?)?.into(),
            "--tower-call-seconds" => tower_call = number(&flag, value()?)?.into(),
            "--tower-client" => tower_client = Some(PathBuf::from(value()?)),
            "--tower-ca-file" => tower_ca = Some(PathBuf::from(value()?)),
            "--hide" => hide.push(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        }
    }
    let (agent, tower) = combined(
        (harness, policy),
        (uid, gid, home),
        (resume.is_some(), fork.is_some(), fork_at.is_some()),
        (tower_url, tower_key, tower_wait, tower_call),
        (tower_client, tower_ca),
        (tower_hook.is_some(), claude_settings.is_some()),
    )?;
    let run = run.ok_or("--run is required")?;
    if !hangar_mailbox::ctl::valid_run_id(&run) {
        return Err(format!("{run:?} is not a run id"));
    }
    Ok(Settings {
        ctl: ctl.ok_or("--ctl is required")?,
        key_file,
        run,
        cwd: cwd.ok_or("--cwd is required")?,
        harness,
        policy,
        claude_bin,
        codex_bin,
        model,
        codex_config,
        resume,
        fork,
        fork_at,
        session_id,
        model_timeout,
        verify: verify_cmd.map(|command| Verify {
            command,
            max_rounds,
            timeout: verify_timeout,
        }),
        agent,
        raw,
        rules_file,
        tower_hook,
        tower_hook_digest,
        tower,
        claude_settings,
        codex_home: None,
        hide,
        secrets_file,
        secret_env: Vec::new(),
    })
}

/// The flags that go together, checked together, in this order: the agent's uid split, what
/// excludes what, Tower's address and key and what needs them.
fn combined(
    (harness, policy): (HarnessKind, Policy),
    (uid, gid, home): (Option<u32>, Option<u32>, Option<PathBuf>),
    (resume, fork, fork_at): (bool, bool, bool),
    (tower_url, tower_key, tower_wait, tower_call): (Option<String>, Option<PathBuf>, u64, u64),
    (tower_client, tower_ca): (Option<PathBuf>, Option<PathBuf>),
    (tower_hook, claude_settings): (bool, bool),
) -> Result<(Option<Agent>, Option<crate::tower::TowerSettings>), String> {
    let agent = match (uid, gid, home) {
        (Some(uid), Some(gid), Some(home)) => Some(Agent { uid, gid, home }),
        (None, None, None) => None,
        _ => return Err("--agent-uid, --agent-gid and --agent-home go together".into()),
    };
    if resume && fork {
        return Err("--resume and --fork exclude each other".into());
    }
    if fork_at && !fork {
        return Err("--fork-at needs --fork".into());
    }
    let tower = match (tower_url, tower_key) {
        (Some(url), Some(key_file)) => Some(crate::tower::TowerSettings {
            url,
            key_file,
            wait_seconds: tower_wait,
            call_seconds: tower_call,
            client: tower_client.unwrap_or_else(crate::tower::default_client),
            // Given, the control plane's copy inside the sandbox; else the environment's.
            ca_file: tower_ca.or_else(crate::tower::ca_file),
        }),
        (None, None) if tower_ca.is_some() => {
            return Err("--tower-ca-file needs --tower-url and --tower-key-file".into());
        }
        (None, None) => None,
        _ => return Err("--tower-url and --tower-key-file go together".into()),
    };
    if (tower_hook || policy == Policy::Governed) && tower.is_none() {
        return Err(
            "the Tower hook and the governed policy need --tower-url and --tower-key-file".into(),
        );
    }
    if claude_settings && harness == HarnessKind::Codex {
        return Err(
            "--claude-settings is a Claude Code settings file; a Codex turn takes none".into(),
        );
    }
    if tower_hook && harness == HarnessKind::Codex {
        return Err("Codex turns that require the Tower hook are refused: a hardened Codex turn runs with hooks disabled, and turning them on would also run hooks the agent writes in ~/.codex".into());
    }
    Ok((agent, tower))
}

fn text(v: OsString) -> String {
    v.to_string_lossy().into_owned()
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
            "--key-file",
            "/dev/shm/k",
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
        assert_eq!(s.key_file, Some(PathBuf::from("/dev/shm/k")));
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
    fn the_tower_ca_file_goes_with_tower_and_is_taken_as_given() {
        let base = [
            "--ctl",
            "/c",
            "--run",
            "r1",
            "--cwd",
            "/w",
            "--policy",
            "governed",
            "--tower-url",
            "https://tower.example.com",
            "--tower-key-file",
            "/k",
        ];
        let mut with_ca = base.to_vec();
        with_ca.extend(["--tower-ca-file", "/var/lib/hangar/r1.tower-ca.pem"]);
        let t = parse(os(&with_ca)).unwrap().tower.unwrap();
        assert_eq!(
            t.ca_file,
            Some(PathBuf::from("/var/lib/hangar/r1.tower-ca.pem"))
        );
        let err = parse(os(&[
            "--ctl",
            "/c",
            "--run",
            "r1",
            "--cwd",
            "/w",
            "--tower-ca-file",
            "/ca.pem",
        ]))
        .unwrap_err();
        assert!(err.contains("--tower-ca-file needs --tower-url"), "{err}");
    }

    #[test]
    fn parses_codex_and_verify() {
        let s = parse(os(&[
            "--ctl",
            "/c",
            "--run",
            "r1",
            "--cwd",
            "/w",
            "--harness",
            "codex",
            "--codex-config",
            "a.b=\"c\"",
            "--codex-config",
            "model=\"x\"",
            "--fork",
            "t1",
            "--fork-at",
            "turn1",
            "--verify",
            "make test",
            "--max-verify-rounds",
            "2",
        ]))
        .unwrap();
        assert_eq!(s.harness, HarnessKind::Codex);
        assert_eq!(s.codex_config, vec!["a.b=\"c\"", "model=\"x\""]);
        assert_eq!(s.fork_at.as_deref(), Some("turn1"));
        let v = s.verify.unwrap();
        assert_eq!((v.command.as_str(), v.max_rounds), ("make test", 2));
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
                "gemini"
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
                "--codex-config",
                "nokey"
            ]))
            .is_err()
        );
        assert!(
            parse(os(&[
                "--ctl", "/c", "--run", "r", "--cwd", "/w", "--resume", "a", "--fork", "b"
            ]))
            .is_err()
        );
    }
}
