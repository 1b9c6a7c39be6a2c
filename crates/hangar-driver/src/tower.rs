//! Governance with Tower (`../shared/design/tower-contract.md`):
//!
//! * **The Tower hook** (`--tower-hook PATH`, Claude Code only): the turn's own settings file
//!   (hangar's user's, loaded with `--settings FILE --setting-sources ''`, so the agent's
//!   `~/.claude/settings.json`, the repo's `.claude/` and `disableAllHooks` do not count) runs
//!   the hook before every tool call; the command ends in `|| exit 2`, so a hook that cannot
//!   start blocks too, and its timeout is longer than the hook's own deadline. With the hook on,
//!   the driver answers permission requests from the deny-risky rules only and never relays a
//!   call to Tower as well (one call, one approval).
//! * **The `governed` policy** (no hook): a permission request the rules allow goes to
//!   `TOWER/approvals` (a thread per request, so the turn loop never blocks); Tower's answer is
//!   final, a fault denies.
//!
//! **Why the driver asks Tower through the hook executable** (`hangar-tower-hook --approvals`,
//! `--tower-client`, by default beside the driver) rather than linking a client: Tower speaks
//! HTTPS (issue 20, Deliver 7), and rustls with ring is about 1.4 MB of code; the driver was
//! 3,967,504 bytes of its 4 MiB budget (`scripts/check-static`), so linking TLS would break
//! the budget, and two copies of the client would be two things to keep safe. One process per
//! approval is nothing next to a person's or Tower's answer time, and the one client (URL rules,
//! CA file, fail-closed reading of answers) is the one the Claude Code hook already runs.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use serde_json::{Value, json};

use crate::turn::Event;

/// Where the driver reaches Tower: `--tower-url`, `--tower-key-file`, `--tower-wait-seconds`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TowerSettings {
    pub url: String,
    pub key_file: PathBuf,
    pub wait_seconds: u64,
    /// The deadline of one call to Tower.
    pub call_seconds: u64,
    /// The Tower client executable for the `governed` policy (`--tower-client`; by default
    /// [`default_client`]).
    pub client: PathBuf,
    /// Extra CA certificates for an `https://` Tower, handed to the Tower client and written
    /// into the hook's command line: `--tower-ca-file` (what the control plane copies into a
    /// sandbox, where the control plane's own path means nothing), else [`ca_file`].
    pub ca_file: Option<PathBuf>,
}

/// The hook's folder (only hangar's user can write it) and the turn's settings file in it.
#[derive(Debug)]
pub struct HookSettings {
    pub dir: PathBuf,
    pub settings: PathBuf,
}

impl HookSettings {
    pub fn remove(&self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `'text'` for /bin/sh.
fn quote(p: &str) -> String {
    format!("'{}'", p.replace('\'', "'\\''"))
}

/// Writes the turn's settings with the Tower hook as a PreToolUse command hook for every tool,
/// merged with `base` (the job's Stop hook settings, when there is one).
pub fn write_hook_settings(
    parent: &Path,
    run: &str,
    hook: &Path,
    t: &TowerSettings,
    workspace: &Path,
    rules: Option<&Path>,
    base: Option<&Path>,
) -> io::Result<HookSettings> {
    let dir = parent.join(format!("hangar-{run}-tower"));
    let _ = fs::remove_dir_all(&dir);
    fs::DirBuilder::new().mode(0o755).create(&dir)?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    let call_seconds = t.call_seconds;
    let mut cmd = format!(
        "{} --url {} --key-file {} --wait-seconds {} --call-seconds {} --workspace {} --run {}",
        quote(&hook.to_string_lossy()),
        quote(&t.url),
        quote(&t.key_file.to_string_lossy()),
        t.wait_seconds,
        call_seconds,
        quote(&workspace.to_string_lossy()),
        quote(run),
    );
    if let Some(r) = rules {
        cmd.push_str(&format!(" --rules {}", quote(&r.to_string_lossy())));
    }
    if let Some(ca) = &t.ca_file {
        cmd.push_str(&format!(" --ca-file {}", quote(&ca.to_string_lossy())));
    }
    cmd.push_str(" || exit 2");
    let mut settings: Value = match base {
        Some(b) => serde_json::from_slice(&fs::read(b)?)
            .map_err(|e| io::Error::other(format!("the Stop hook's settings: {e}")))?,
        None => json!({}),
    };
    let entry = json!({"matcher": "*", "hooks": [{"type": "command", "command": cmd,
        "timeout": hangar_hook::settings_timeout(call_seconds, t.wait_seconds)}]});
    if !settings.get("hooks").is_some_and(Value::is_object) {
        settings["hooks"] = json!({});
    }
    settings["hooks"]["PreToolUse"] = json!([entry]);
    let file = dir.join("settings.json");
    fs::write(&file, settings.to_string())?;
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644))?;
    Ok(HookSettings {
        dir,
        settings: file,
    })
}

/// Asks Tower about one permission request (policy `governed`) on a thread of its own; the
/// answer comes back to the turn loop as [`Event::Tower`]. Any fault denies.
pub fn ask(t: &TowerSettings, tx: Sender<Event>, request_id: String, body: Value) {
    let t = t.clone();
    std::thread::spawn(move || {
        let (allow, reason) = match decide(&t, &body) {
            Ok(()) => (true, String::new()),
            Err(why) => (false, why),
        };
        let _ = tx.send(Event::Tower {
            request_id,
            allow,
            reason,
        });
    });
}

/// Asks Tower through the Tower client executable (`hangar-tower-hook --approvals`): the body
/// on its stdin, exit 0 for allow, else its stderr is why not. It runs as the driver's user
/// (hangar's), so it reads the run's key file the agent cannot. Every way it can fail denies.
fn decide(t: &TowerSettings, body: &Value) -> Result<(), String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(&t.client);
    cmd.arg("--approvals")
        .arg("--url")
        .arg(&t.url)
        .arg("--key-file")
        .arg(&t.key_file)
        .arg("--wait-seconds")
        .arg(t.wait_seconds.to_string())
        .arg("--call-seconds")
        .arg(t.call_seconds.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(ca) = &t.ca_file {
        cmd.arg("--ca-file").arg(ca);
    }
    let mut child = cmd.spawn().map_err(|e| {
        format!(
            "Tower could not be asked: the Tower client {} cannot start ({e})",
            t.client.display()
        )
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A client that exits early (a bad URL) closes its stdin: its exit status says why.
        let _ = stdin.write_all(body.to_string().as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| {
        format!(
            "Tower could not be asked: the Tower client {} failed ({e})",
            t.client.display()
        )
    })?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    Err(if why.is_empty() {
        format!(
            "Tower could not be asked: the Tower client {} ended with {} and said nothing",
            t.client.display(),
            out.status
        )
    } else {
        why
    })
}

/// `HANGAR_CA_FILE` of the driver's environment, when `--tower-ca-file` names none (a driver in
/// a plain folder inherits the control plane's environment). It goes on the hook's command line
/// because Claude Code gives hooks only the environment the driver gave it, which lacks it.
pub fn ca_file() -> Option<PathBuf> {
    hangar_protocol::env::var_os(hangar_protocol::env::HANGAR_CA_FILE).map(PathBuf::from)
}

/// The Tower client for the `governed` policy when `--tower-client` names none: the Tower hook
/// executable beside the driver's own (`hangar-tower-hook`, as hangar installs both).
pub fn default_client() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("hangar-tower-hook")))
        .unwrap_or_else(|| PathBuf::from("hangar-tower-hook"))
}

/// The hook's name in `hangar.started` and the turn's manifest (part of `harness_digest`).
pub const HOOK_NAME: &str = "hangar:tower_hook";

/// Policy `governed` without the hook: Tower, the channel answers come back on, the harness's
/// name for Tower, the run.
#[derive(Debug)]
pub struct Governed {
    pub tower: TowerSettings,
    pub tx: Sender<Event>,
    pub harness: &'static str,
    pub run: String,
}
