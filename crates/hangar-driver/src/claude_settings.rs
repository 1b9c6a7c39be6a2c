//! The turn's own Claude Code settings (issue 18). Every real Claude Code turn, under every
//! policy, runs with `--settings <this file> --setting-sources '' --strict-mcp-config`: Claude
//! Code then loads no user (`~/.claude/settings.json`), project (`.claude/settings.json`) or local
//! (`.claude/settings.local.json`) settings and no MCP server but those given with
//! `--mcp-config`, so neither the repository nor the agent's home can add a hook (code run at
//! session start or an `allow` that skips the person), an `env` (`ANTHROPIC_BASE_URL` sending the
//! conversation and the key elsewhere), a permission rule or an MCP server (`.mcp.json`,
//! `~/.claude.json`). The file lives in a folder only hangar's user can write.
//!
//! An environment may name **reviewed** settings (its `claude_settings:`, which the control plane
//! writes to a file and passes with `--claude-settings`). Their keys are taken from an allow-list
//! (`hangar_protocol::claude_settings`, which the control plane also checks when the environment
//! is applied) and anything else **refuses the turn** rather than being dropped, so a reviewer
//! never believes a setting applies that does not. Its `mcpServers` become the turn's
//! `--mcp-config` (an MCP tool call still passes the rules and the person or Tower like any
//! other). Its SHA-256 goes into `hangar.started` and so into the turn's manifest.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hangar_protocol::claude_settings::check;
use hangar_protocol::runlog::HookDigest;
use serde_json::{Map, Value, json};

/// The name of a reviewed settings file in `hangar.started` and the manifest.
pub fn digest_name(path: &Path) -> String {
    format!("claude_settings: {}", path.display())
}

/// A reviewed settings file, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Reviewed {
    /// The settings, without `mcpServers`.
    pub settings: Map<String, Value>,
    /// Its `mcpServers`, if any.
    pub mcp_servers: Option<Value>,
    pub digest: HookDigest,
}

impl Reviewed {
    /// Reads and checks the file; the error says which key is refused and why.
    pub fn load(path: &Path) -> Result<Reviewed, String> {
        let bytes = fs::read(path).map_err(|e| {
            format!(
                "cannot read the environment's Claude Code settings {}: {e}",
                path.display()
            )
        })?;
        let digest = HookDigest::of_file(digest_name(path), path)
            .map_err(|e| format!("cannot hash {}: {e}", path.display()))?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "the environment's Claude Code settings {} are not JSON: {e}",
                path.display()
            )
        })?;
        let (settings, mcp_servers) = check(value)
            .map_err(|why| format!("the environment's Claude Code settings {}: {why}; the turn is refused (fix the file: hangar's governance cannot be loosened by settings)", path.display()))?;
        Ok(Reviewed {
            settings,
            mcp_servers,
            digest,
        })
    }
}

/// The turn's settings folder (hangar's user's), its settings file and MCP config.
#[derive(Debug)]
pub struct TurnSettings {
    pub dir: PathBuf,
    pub settings: PathBuf,
    /// The `--mcp-config` file, when the reviewed settings name MCP servers.
    pub mcp: Option<PathBuf>,
}

impl TurnSettings {
    /// Writes `<parent>/hangar-<run>-claude/` with the reviewed settings (if any) and the job's
    /// Stop hook (the `hooks` of `stop`, the Stop hook's own settings file).
    pub fn write(
        parent: &Path,
        run: &str,
        reviewed: Option<&Reviewed>,
        stop: Option<&Path>,
    ) -> io::Result<TurnSettings> {
        let dir = parent.join(format!("hangar-{run}-claude"));
        let _ = fs::remove_dir_all(&dir);
        fs::DirBuilder::new().mode(0o755).create(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        let mut settings = reviewed.map(|r| r.settings.clone()).unwrap_or_default();
        if let Some(stop) = stop {
            let s: Value = serde_json::from_slice(&fs::read(stop)?)
                .map_err(|e| io::Error::other(format!("the Stop hook's settings: {e}")))?;
            if let Some(hooks) = s.get("hooks") {
                settings.insert("hooks".into(), hooks.clone());
            }
        }
        let file = dir.join("settings.json");
        write_readable(&file, &Value::Object(settings))?;
        let mcp = match reviewed.and_then(|r| r.mcp_servers.as_ref()) {
            Some(servers) => {
                let f = dir.join("mcp.json");
                write_readable(&f, &json!({"mcpServers": servers}))?;
                Some(f)
            }
            None => None,
        };
        Ok(TurnSettings {
            dir,
            settings: file,
            mcp,
        })
    }
}

fn write_readable(file: &Path, v: &Value) -> io::Result<()> {
    fs::write(file, v.to_string())?;
    fs::set_permissions(file, fs::Permissions::from_mode(0o644))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reviewed_file_may_name_mcp_servers_and_tighten_but_never_loosen() {
        let ok = json!({"model": "m", "permissions": {"deny": ["Bash(curl:*)"]},
            "mcpServers": {"docs": {"command": "docs-server"}}});
        let (s, mcp) = check(ok).unwrap();
        assert_eq!(s["model"], "m");
        assert!(s.get("mcpServers").is_none());
        assert_eq!(mcp.unwrap()["docs"]["command"], "docs-server");
        for (bad, names) in [
            (json!({"hooks": {"PreToolUse": []}}), "\"hooks\" is not one"),
            (
                json!({"env": {"ANTHROPIC_BASE_URL": "http://example.com"}}),
                "\"env\"",
            ),
            (json!({"apiKeyHelper": "cat key"}), "\"apiKeyHelper\""),
            (json!({"statusLine": {"command": "x"}}), "\"statusLine\""),
            (json!({"disableAllHooks": true}), "\"disableAllHooks\""),
            (
                json!({"permissions": {"allow": ["Bash"]}}),
                "permissions.allow",
            ),
            (
                json!({"permissions": {"defaultMode": "bypassPermissions"}}),
                "permissions.defaultMode",
            ),
            (json!({"mcpServers": []}), "not an object"),
            (json!([1]), "not a JSON object"),
        ] {
            let why = check(bad.clone()).unwrap_err();
            assert!(why.contains(names), "{bad}: {why}");
        }
    }

    #[test]
    fn the_turns_file_holds_the_reviewed_settings_the_stop_hook_and_an_mcp_config() {
        let parent = tempfile::tempdir().unwrap();
        let reviewed_file = parent.path().join("reviewed.json");
        fs::write(
            &reviewed_file,
            r#"{"model":"m","mcpServers":{"docs":{"command":"docs-server"}}}"#,
        )
        .unwrap();
        let r = Reviewed::load(&reviewed_file).unwrap();
        assert_eq!(r.digest.name, digest_name(&reviewed_file));
        assert_eq!(r.digest.digest.len(), 64);
        let stop = parent.path().join("stop.json");
        fs::write(&stop, r#"{"hooks":{"Stop":[{"hooks":[]}]}}"#).unwrap();
        let t = TurnSettings::write(parent.path(), "r1", Some(&r), Some(&stop)).unwrap();
        let s: Value = serde_json::from_str(&fs::read_to_string(&t.settings).unwrap()).unwrap();
        assert_eq!(s, json!({"model": "m", "hooks": {"Stop": [{"hooks": []}]}}));
        let m: Value =
            serde_json::from_str(&fs::read_to_string(t.mcp.as_ref().unwrap()).unwrap()).unwrap();
        assert_eq!(m["mcpServers"]["docs"]["command"], "docs-server");
        let bare = TurnSettings::write(parent.path(), "r2", None, None).unwrap();
        assert_eq!(fs::read_to_string(&bare.settings).unwrap(), "{}");
        assert!(bare.mcp.is_none());
    }

    #[test]
    fn a_refused_file_says_which_key_and_what_to_do() {
        let parent = tempfile::tempdir().unwrap();
        let f = parent.path().join("s.json");
        fs::write(&f, r#"{"env":{"ANTHROPIC_BASE_URL":"http://example.com"}}"#).unwrap();
        let why = Reviewed::load(&f).unwrap_err();
        assert!(why.contains("\"env\"") && why.contains("refused"), "{why}");
    }
}
