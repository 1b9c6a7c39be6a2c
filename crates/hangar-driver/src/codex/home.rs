//! The turn's own `CODEX_HOME` (issue 18): Codex loads `config.toml`, `hooks.json` and the exec
//! policy `rules/` from `CODEX_HOME`, and the agent can write its own `~/.codex` during a turn, so
//! the next turn would load what it wrote (MCP servers and `notify` that run code, a model
//! provider that gets the conversation, hooks, rules that approve commands without a person).
//! A `-c` override cannot take a table the agent added away (Codex merges tables key by key),
//! so each turn gets a fresh home that only hangar's user writes:
//!
//! * the folder is hangar's user's, sticky and writable by the agent's group (Codex creates its
//!   caches there), so the agent can add files but never replace or remove hangar's;
//! * `config.toml` (hangar's, empty of settings: every setting is a `-c` on the argv, recorded in
//!   `hangar.started`) and an empty `rules/` are hangar's user's, read-only to the agent;
//! * `sessions/` and `archived_sessions/` are links to the agent's own Codex home, so a thread
//!   is resumed, and a fork's copied rollout found, where they always were; `auth.json` too when
//!   there is one. Codex's SQLite state (its thread index, whose rollout paths name the turn's
//!   home) is the turn's own: with `sqlite_home` in the agent's home a resume found only the
//!   path of a home already removed ("no rollout found"); without it Codex finds the rollout in
//!   `sessions/`.
//!
//! The folder is removed when the turn ends; the agent's own home is never changed except for
//! creating its `sessions/` folders.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use crate::args::Agent;

/// What Codex keeps between turns: linked from the turn's home to the agent's.
const KEPT_FOLDERS: &[&str] = &["sessions", "archived_sessions"];

/// The turn's Codex home.
#[derive(Debug)]
pub struct CodexHome {
    /// The turn's home (`CODEX_HOME` for the harness).
    pub dir: PathBuf,
}

impl CodexHome {
    /// Makes `<parent>/hangar-<run>-codex-home` for a turn whose agent keeps its Codex state in
    /// `agent_home` (its `CODEX_HOME`, else `~/.codex`).
    pub fn prepare(
        parent: &Path,
        run: &str,
        agent_home: &Path,
        agent: Option<&Agent>,
    ) -> io::Result<CodexHome> {
        let owner = agent.map(|a| (a.uid, a.gid));
        ensure_agent_dir(agent_home, owner)?;
        for f in KEPT_FOLDERS {
            ensure_agent_dir(&agent_home.join(f), owner)?;
        }
        let dir = parent.join(format!("hangar-{run}-codex-home"));
        let _ = fs::remove_dir_all(&dir);
        fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let config = dir.join("config.toml");
        fs::write(
            &config,
            "# hangar's own Codex configuration for this turn: every setting is a -c on the argv.\n",
        )?;
        fs::set_permissions(&config, fs::Permissions::from_mode(0o644))?;
        // An empty exec-policy folder the agent cannot add a rule to.
        fs::DirBuilder::new()
            .mode(0o755)
            .create(dir.join("rules"))?;
        for f in KEPT_FOLDERS {
            symlink(agent_home.join(f), dir.join(f))?;
        }
        let auth = agent_home.join("auth.json");
        if auth.is_file() {
            symlink(&auth, dir.join("auth.json"))?;
        }
        match agent {
            Some(a) => {
                // Sticky and group-writable: the agent adds its caches, never removes ours.
                std::os::unix::fs::chown(&dir, None, Some(a.gid))?;
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o1770))?;
            }
            None => fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?,
        }
        Ok(CodexHome { dir })
    }
}

/// A folder of the agent's, made if missing (owned by the agent under the uid split).
fn ensure_agent_dir(dir: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// A TOML basic string: a JSON string is one for everything serde_json writes.
pub fn toml_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_turns_home_links_the_agents_threads_and_holds_only_hangars_config() {
        let parent = tempfile::tempdir().unwrap();
        let agent = tempfile::tempdir().unwrap();
        let own = agent.path().join(".codex");
        fs::create_dir_all(own.join("rules")).unwrap();
        fs::write(own.join("config.toml"), "notify = [\"sh\"]\n").unwrap();
        fs::write(
            own.join("rules/allow.rules"),
            "prefix_rule(pattern=[\"rm\"])\n",
        )
        .unwrap();
        fs::write(own.join("auth.json"), "{}").unwrap();
        let h = CodexHome::prepare(parent.path(), "r1", &own, None).unwrap();
        let config = fs::read_to_string(h.dir.join("config.toml")).unwrap();
        assert!(!config.contains("notify"), "{config}");
        assert_eq!(fs::read_dir(h.dir.join("rules")).unwrap().count(), 0);
        for f in ["sessions", "archived_sessions", "auth.json"] {
            assert_eq!(fs::read_link(h.dir.join(f)).unwrap(), own.join(f), "{f}");
        }
        assert!(own.join("sessions").is_dir());
        assert!(
            own.join("config.toml").exists(),
            "the agent's own home is left alone"
        );
    }
}
