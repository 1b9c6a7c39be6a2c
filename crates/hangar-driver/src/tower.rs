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
//!   `TOWER/approvals` from the driver (a thread per request, so the turn loop never blocks);
//!   Tower's answer is final, a fault denies.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use hangar_hook::client::{Decision, Tower};
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

fn decide(t: &TowerSettings, body: &Value) -> Result<(), String> {
    let key = fs::read_to_string(&t.key_file).map_err(|e| {
        format!(
            "Tower could not be asked: the key file {} is unreadable ({e})",
            t.key_file.display()
        )
    })?;
    let tower = Tower::new(&t.url, &key).map_err(|f| f.0)?;
    let deadline = Instant::now() + Duration::from_secs(t.call_seconds);
    match tower.call("approvals", body, deadline).map_err(|f| f.0)? {
        Decision::Allow { .. } => Ok(()),
        Decision::Deny { reason } => Err(format!(
            "Tower denied this call: {}",
            if reason.is_empty() {
                "no reason given"
            } else {
                &reason
            }
        )),
        Decision::Wait { id, .. } => tower
            .wait_for_signature(&id, Duration::from_secs(t.wait_seconds))
            .map_err(|f| f.0),
    }
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
