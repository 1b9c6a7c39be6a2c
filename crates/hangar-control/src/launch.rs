//! Starting the driver for a turn, and the turn's manifest (H4).
//!
//! The driver is started in a process group of its own with its stdout discarded and its stderr
//! in `<ctl>/driver.stderr`; a thread reaps it. Nothing ties it to the control plane's process:
//! when the control plane stops (even `kill -9`), the driver and the harness go on, and the
//! restarted control plane re-attaches to the run log.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use hangar_events::{CoreError, Manifest, file_digest};
use hangar_protocol::env::{HARNESS_ENV_FIXED, harness_env_names};
use hangar_store::{Harness, Policy};

use crate::error::ControlError;

/// Where hangar's home and the executables a turn needs are.
#[derive(Clone, Debug)]
pub struct Tools {
    pub home: PathBuf,
    pub driver: PathBuf,
    pub claude: PathBuf,
    pub codex: PathBuf,
    /// Variables set for the driver on top of the control plane's own environment (the driver
    /// passes only its allow-list on to the harness).
    pub env: Vec<(String, String)>,
}

/// How a session's turns run: the API's type, stored on the session as it came.
pub use hangar_api::TurnOptions;

/// Everything one launch needs.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    pub run_id: &'a str,
    pub ctl: &'a Path,
    pub workdir: &'a Path,
    pub harness: Harness,
    pub policy: Policy,
    pub resume: Option<&'a str>,
    /// A forked session's first turn: the conversation to fork and its last entry kept.
    pub fork: Option<(&'a str, Option<&'a str>)>,
    pub options: &'a TurnOptions,
    /// Policy `governed`: Tower's address and the run's key file (see [`governance`]).
    pub tower: Option<(String, PathBuf)>,
}

/// Whether every turn must run with the Tower hook (`HANGAR_GOVERNANCE_HOOK=required`, from
/// [`Tools::env`] or the control plane's environment).
pub fn hook_required(tools: &Tools) -> bool {
    setting(tools, hangar_protocol::env::HANGAR_GOVERNANCE_HOOK).is_some_and(|v| v == "required")
}

/// Why a turn that requires the Tower hook cannot run here (T9, T18): the hook must sit where
/// the agent cannot remove it, which needs the uid split; a plain folder has none (sandboxes:
/// `sandbox_turn::hook::refusal`).
pub fn hook_refusal(harness: Harness) -> &'static str {
    match harness {
        Harness::Codex => {
            "Codex turns that require the Tower hook are refused: a hardened Codex turn runs with hooks disabled, and turning them on would also run hooks the agent writes and trusts in ~/.codex"
        }
        Harness::Claude => {
            "the Tower hook is required (HANGAR_GOVERNANCE_HOOK=required), but a plain folder runs the agent as the driver's own user (no uid split), so the agent could remove the hook; run the turn in a sandbox with the uid split (`hangar sb create`, then `--sb`)"
        }
    }
}

/// Tower's address for the `governed` policy (`HANGAR_GOVERNANCE_URL`) and the vault credential
/// with the coding agent's key in Tower (`HANGAR_GOVERNANCE_HOOK_CREDENTIAL`): from the
/// driver's variables in [`Tools::env`], else the control plane's own environment.
pub fn governance(tools: &Tools) -> Result<(String, String), ControlError> {
    let get = |name: &str| setting(tools, name);
    match (get(hangar_protocol::env::HANGAR_GOVERNANCE_URL), get(hangar_protocol::env::HANGAR_GOVERNANCE_HOOK_CREDENTIAL)) {
        (Some(url), Some(cred)) => Ok((url, cred)),
        _ => Err(ControlError::Invalid(
            "policy governed needs HANGAR_GOVERNANCE_URL (Tower's address) and HANGAR_GOVERNANCE_HOOK_CREDENTIAL (the vault credential holding the coding agent's key in Tower); set both, or use ask or auto".into(),
        )),
    }
}

/// The driver's argv (without the program).
pub fn driver_args(tools: &Tools, l: &Launch<'_>) -> Result<Vec<OsString>, ControlError> {
    let policy = match l.policy {
        Policy::Ask => "ask",
        Policy::Auto => "auto",
        Policy::Governed => "governed",
    };
    if l.policy == Policy::Governed && l.tower.is_none() {
        return Err(ControlError::Invalid(
            "policy governed needs Tower: set HANGAR_GOVERNANCE_URL and HANGAR_GOVERNANCE_HOOK_CREDENTIAL".into(),
        ));
    }
    let mut a: Vec<OsString> = vec![
        "--ctl".into(),
        l.ctl.into(),
        "--run".into(),
        l.run_id.into(),
    ];
    a.extend(["--cwd".into(), l.workdir.into()]);
    a.extend([
        "--harness".into(),
        l.harness.as_str().into(),
        "--policy".into(),
        policy.into(),
    ]);
    match l.harness {
        Harness::Claude => a.extend(["--claude-bin".into(), tools.claude.clone().into_os_string()]),
        Harness::Codex => a.extend(["--codex-bin".into(), tools.codex.clone().into_os_string()]),
    }
    if let Some(m) = &l.options.model {
        a.extend(["--model".into(), m.into()]);
    }
    for kv in &l.options.codex_config {
        a.extend(["--codex-config".into(), kv.into()]);
    }
    if let Some(r) = l.resume {
        a.extend(["--resume".into(), r.into()]);
    } else if let Some((parent, at)) = l.fork {
        a.extend(["--fork".into(), parent.into()]);
        if let Some(at) = at {
            a.extend(["--fork-at".into(), at.into()]);
        }
    }
    if let Some(v) = &l.options.verify {
        a.extend(["--verify".into(), v.into()]);
        if let Some(n) = l.options.max_verify_rounds {
            a.extend(["--max-verify-rounds".into(), n.to_string().into()]);
        }
    }
    if let Some(t) = l.options.model_timeout {
        a.extend(["--model-timeout".into(), t.to_string().into()]);
    }
    if let Some((url, key_file)) = &l.tower {
        a.extend([
            "--tower-url".into(),
            url.into(),
            "--tower-key-file".into(),
            key_file.into(),
        ]);
        let (wait, call) = tower_limits(tools)?;
        a.extend([
            "--tower-wait-seconds".into(),
            wait.to_string().into(),
            "--tower-call-seconds".into(),
            call.to_string().into(),
        ]);
    }
    Ok(a)
}

/// How long a person may take to sign a `wait` (`HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS`, 300) and
/// the deadline of one call to Tower (`HANGAR_GOVERNANCE_HOOK_CALL_SECONDS`, 20), for the Tower
/// hook and the `governed` policy alike. The hook timeout the driver writes in Claude Code's
/// settings is longer than both together, so the hook always answers first.
pub fn tower_limits(tools: &Tools) -> Result<(u64, u64), ControlError> {
    let number = |name: &str, default: u64, min: u64| -> Result<u64, ControlError> {
        match setting(tools, name) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if (min..=86_400).contains(&n) => Ok(n),
                _ => Err(ControlError::Invalid(format!(
                    "{name}={v:?} is not a number of seconds from {min} to 86400"
                ))),
            },
        }
    };
    Ok((
        number(
            hangar_protocol::env::HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS,
            tower_defaults::WAIT_SECONDS,
            0,
        )?,
        number(
            hangar_protocol::env::HANGAR_GOVERNANCE_HOOK_CALL_SECONDS,
            tower_defaults::CALL_SECONDS,
            1,
        )?,
    ))
}

/// The driver's own defaults for [`tower_limits`] (hangar-driver `--tower-wait-seconds`,
/// `--tower-call-seconds`).
mod tower_defaults {
    pub const WAIT_SECONDS: u64 = 300;
    pub const CALL_SECONDS: u64 = 20;
}

/// Starts the driver detached; its pid.
pub fn spawn_driver(tools: &Tools, args: &[OsString], ctl: &Path) -> Result<u32, ControlError> {
    let stderr = File::create(ctl.join("driver.stderr")).map_err(|e| {
        ControlError::Launch(format!(
            "cannot create {}: {e}",
            ctl.join("driver.stderr").display()
        ))
    })?;
    let mut cmd = Command::new(&tools.driver);
    // The control plane's credential variables stay here unless the single-user local mode
    // passes them (`HANGAR_SERVER_CREDENTIALS=allow`, see `turn_secrets.rs`).
    for name in hangar_protocol::env::HARNESS_CREDENTIAL_ENV {
        if !keep_var(tools, name) {
            cmd.env_remove(name);
        }
    }
    let mut child = cmd
        .args(args)
        .envs(
            tools
                .env
                .iter()
                .filter(|(k, _)| keep_var(tools, k))
                .map(|(k, v)| (k, v)),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .process_group(0)
        .spawn()
        .map_err(|e| {
            ControlError::Launch(format!(
                "{}: {e} (set HANGAR_DRIVER_BIN)",
                tools.driver.display()
            ))
        })?;
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(pid)
}

/// The harness's version, read from its npm package (no process is started: Codex must never
/// run without its offline settings).
pub fn harness_version(bin: &Path) -> String {
    static CACHE: Mutex<Option<HashMap<PathBuf, String>>> = Mutex::new(None);
    let Ok(mut cache) = CACHE.lock() else {
        return "unknown".into();
    };
    let map = cache.get_or_insert_with(HashMap::new);
    map.entry(bin.to_owned())
        .or_insert_with(|| version_from_package(bin).unwrap_or_else(|| "unknown".into()))
        .clone()
}

fn version_from_package(bin: &Path) -> Option<String> {
    let real = bin.canonicalize().ok()?;
    real.ancestors().skip(1).take(6).find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v.get("version")?.as_str().map(str::to_owned)
    })
}

/// The SHA-256 of an executable hangar hands to sandboxes (the driver, the Tower hook), for
/// every turn's manifest: hashed again only when the file may have changed. Each turn hashed the
/// driver whole (20 MB unoptimized in a debug build: most of a session's start with 16 starting
/// at once, measured by `scripts/load`'s `starts` phase). The digest is kept with the file's
/// device, inode, size, modification and change times; a file changed within the last two
/// seconds is hashed every time and not kept (the times' granularity could hide a change made
/// in the same tick, as git's "racy" entries).
pub(crate) fn digest_of(path: &Path) -> Result<String, CoreError> {
    use std::os::unix::fs::MetadataExt;
    type Stamp = (u64, u64, u64, i64, i64, i64, i64);
    static CACHE: Mutex<Option<HashMap<PathBuf, (Stamp, String)>>> = Mutex::new(None);
    let Ok(m) = std::fs::metadata(path) else {
        return file_digest(path);
    };
    let stamp: Stamp = (
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    );
    let lock = || {
        CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if let Some((kept, digest)) = lock().as_ref().and_then(|c| c.get(path))
        && *kept == stamp
    {
        return Ok(digest.clone());
    }
    let digest = file_digest(path)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let settled = m.mtime().max(m.ctime()) < now - 2;
    // The file as hashed is the one stamped only if nothing changed it meanwhile.
    let again = std::fs::metadata(path).ok();
    if settled && again.is_some_and(|a| a.ino() == m.ino() && a.ctime_nsec() == m.ctime_nsec()) {
        lock()
            .get_or_insert_with(HashMap::new)
            .insert(path.to_owned(), (stamp, digest.clone()));
    }
    Ok(digest)
}

/// The turn's manifest at launch: harness and version, the driver's argv (the watcher replaces
/// it with the harness's argv and hooks once the driver reports them in `hangar.started`), the names (never the values) of
/// the variables passed to the harness, the policies, the driver's digest and the rules, sealed with its
/// `harness_digest`. `rules`: the deny-risky rules the driver was given.
pub fn manifest(
    tools: &Tools,
    l: &Launch<'_>,
    args: &[OsString],
    rules: hangar_events::RulesRecord,
) -> Manifest {
    let bin = match l.harness {
        Harness::Claude => &tools.claude,
        Harness::Codex => &tools.codex,
    };
    let mut env_names: Vec<String> = harness_env_names()
        .filter(|n| std::env::var_os(n).is_some())
        .filter(|n| keep_var(tools, n))
        .map(|n| (*n).to_owned())
        .collect();
    env_names.extend(HARNESS_ENV_FIXED.iter().map(|(n, _)| (*n).to_owned()));
    if l.policy == Policy::Auto {
        env_names.push("IS_SANDBOX".into());
    }
    let policy = l.policy.as_str().to_owned();
    Manifest {
        harness: l.harness.as_str().into(),
        harness_version: harness_version(bin),
        argv: std::iter::once(tools.driver.display().to_string())
            .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect(),
        env_names,
        policy_requested: policy.clone(),
        policy_effective: policy,
        hooks: Vec::new(),
        driver_digest: digest_of(&tools.driver).unwrap_or_else(|_| "unreadable".into()),
        harness_check: String::new(),
        rules: Some(rules),
        harness_digest: String::new(),
    }
    .sealed()
}

/// A setting: from the driver's variables in [`Tools::env`], else the control plane's own
/// environment as the process read it once ([`hangar_protocol::env::var`]); empty counts as
/// unset. Every setting of the control plane is read through here.
/// Whether the control plane's own credential variables pass to turns (opt-in,
/// `HANGAR_SERVER_CREDENTIALS=allow`; see `runs/turn_secrets.rs`).
pub(crate) fn server_credentials_pass(tools: &Tools) -> bool {
    setting(tools, hangar_protocol::env::HANGAR_SERVER_CREDENTIALS).as_deref()
        == Some(hangar_protocol::env::SERVER_CREDENTIALS_ALLOW)
}

/// Keeps a variable unless it is a credential variable and the server's credentials do not
/// pass to turns.
pub(crate) fn keep_var(tools: &Tools, name: &str) -> bool {
    !hangar_protocol::env::is_credential_var(name) || server_credentials_pass(tools)
}

pub(crate) fn setting(tools: &Tools, name: &str) -> Option<String> {
    tools
        .env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .or_else(|| hangar_protocol::env::var(name))
        .filter(|v| !v.is_empty())
}

/// What a harness run as hangar's own user (a plain folder: the driver's `--hide`, or a
/// one-shot turn) must not see (issue 20, Deliver 6): hangar's home and the master key file
/// when it lies elsewhere.
pub(crate) fn hidden_from_agent(tools: &Tools) -> Vec<PathBuf> {
    let mut hide = vec![tools.home.clone()];
    if let Some(k) = setting(tools, hangar_protocol::env::HANGAR_MASTER_KEY_FILE) {
        hide.push(PathBuf::from(k));
    }
    hide
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    /// The kept digest of an executable never outlives a change to it: rewritten in place with
    /// the same size (a new change time), replaced by another file (a new inode), or changed
    /// while settled digests are kept.
    #[test]
    fn a_kept_digest_follows_every_change_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hangar-driver");
        std::fs::write(&path, b"first driver").unwrap();
        let fresh = digest_of(&path).unwrap();
        assert_eq!(fresh, file_digest(&path).unwrap());
        // Settled: kept, and given back while the file stays as it is.
        std::thread::sleep(std::time::Duration::from_millis(3100));
        assert_eq!(digest_of(&path).unwrap(), fresh);
        std::fs::write(&path, b"other driver").unwrap();
        let rewritten = digest_of(&path).unwrap();
        assert_ne!(rewritten, fresh, "a rewrite of the same size is seen");
        assert_eq!(rewritten, file_digest(&path).unwrap());
        // Replaced by a rename over it, the same bytes as the first.
        let new = dir.path().join("new");
        std::fs::write(&new, b"first driver").unwrap();
        std::fs::rename(&new, &path).unwrap();
        assert_eq!(digest_of(&path).unwrap(), fresh);
    }

    fn tools(env: &[(&str, &str)]) -> Tools {
        Tools {
            home: PathBuf::from("/nonexistent"),
            driver: PathBuf::from("/nonexistent/hangar-driver"),
            claude: PathBuf::from("claude"),
            codex: PathBuf::from("codex"),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn tower_limits_have_defaults_and_refuse_what_is_not_a_number() {
        // The process may have them set (a person trying hangar); set both here.
        let t = tools(&[
            ("HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS", "7"),
            ("HANGAR_GOVERNANCE_HOOK_CALL_SECONDS", "3"),
        ]);
        assert_eq!(tower_limits(&t).unwrap(), (7, 3));
        for (name, bad) in [
            ("HANGAR_GOVERNANCE_HOOK_CALL_SECONDS", "0"),
            ("HANGAR_GOVERNANCE_HOOK_CALL_SECONDS", "soon"),
            ("HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS", "-1"),
            ("HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS", "100000"),
        ] {
            let err = tower_limits(&tools(&[(name, bad)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(name), "{err}");
        }
        if std::env::var_os("HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS").is_none()
            && std::env::var_os("HANGAR_GOVERNANCE_HOOK_CALL_SECONDS").is_none()
        {
            assert_eq!(tower_limits(&tools(&[])).unwrap(), (300, 20));
        }
    }
}
