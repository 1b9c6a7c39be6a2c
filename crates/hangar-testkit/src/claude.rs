//! Finding the pinned Claude Code CLI and the environment that keeps it offline and quiet
//! against a [`crate::FakeAnthropic`].

use std::path::{Path, PathBuf};

use crate::error::TestkitError;

/// The Claude Code version hangar is pinned to (installed by `scripts/install-tools`).
pub const CLAUDE_CODE_VERSION: &str = "2.1.328";

/// Environment variable that overrides where the `claude` binary is.
pub const CLAUDE_BIN_ENV: &str = "HANGAR_CLAUDE_BIN";

const INSTALL_HINT: &str = "run scripts/install-tools (installs the pinned Claude Code 2.1.328 \
                            from the npm registry) or set HANGAR_CLAUDE_BIN";

/// The workspace root (two levels above this crate's manifest).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..")
}

/// The `claude` binary: `$HANGAR_CLAUDE_BIN` if set, else
/// `<workspace>/.tools/npm/node_modules/.bin/claude`. Errors (with install instructions) when the
/// chosen path is not a file.
pub fn claude_bin() -> Result<PathBuf, TestkitError> {
    pinned_tool(CLAUDE_BIN_ENV, "claude", "Claude Code", INSTALL_HINT)
}

/// A CLI installed by `scripts/install-tools`: `$<env_var>` if set, else
/// `<workspace>/.tools/npm/node_modules/.bin/<name>`; an error with `hint` when it is not a file.
pub(crate) fn pinned_tool(
    env_var: &str,
    name: &str,
    what: &'static str,
    hint: &'static str,
) -> Result<PathBuf, TestkitError> {
    let path = match std::env::var_os(env_var) {
        Some(value) if !value.is_empty() => PathBuf::from(value),
        _ => workspace_root()
            .join(".tools")
            .join("npm")
            .join("node_modules")
            .join(".bin")
            .join(name),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(TestkitError::ToolNotFound { what, path, hint })
    }
}

/// Environment for running `claude` against a fake server at `base_url`, with its state in
/// `config_dir`: no network besides the fake, no telemetry, no auto-update, at most one retry.
/// A `hangar serve` started with it passes its `ANTHROPIC_API_KEY` to every turn
/// (`HANGAR_SERVER_CREDENTIALS=allow`, the single-user local mode): the tests that are not
/// about credentials run as one person would on their own machine.
pub fn claude_env(base_url: &str, config_dir: &Path) -> Vec<(String, String)> {
    [
        ("ANTHROPIC_BASE_URL", base_url.to_owned()),
        ("ANTHROPIC_API_KEY", "sk-hangar-test".to_owned()),
        ("CLAUDE_CONFIG_DIR", config_dir.display().to_string()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("CLAUDE_CODE_MAX_RETRIES", "1".to_owned()),
        ("HANGAR_SERVER_CREDENTIALS", "allow".to_owned()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_points_the_cli_at_the_fake_and_keeps_it_quiet() {
        let env = claude_env("http://127.0.0.1:9", Path::new("/cfg"));
        let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        assert_eq!(get("ANTHROPIC_BASE_URL"), Some("http://127.0.0.1:9"));
        assert_eq!(get("ANTHROPIC_API_KEY"), Some("sk-hangar-test"));
        assert_eq!(get("CLAUDE_CONFIG_DIR"), Some("/cfg"));
        assert_eq!(get("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), Some("1"));
        assert_eq!(get("DISABLE_TELEMETRY"), Some("1"));
        assert_eq!(get("DISABLE_AUTOUPDATER"), Some("1"));
        assert_eq!(get("CLAUDE_CODE_MAX_RETRIES"), Some("1"));
        assert_eq!(get("HANGAR_SERVER_CREDENTIALS"), Some("allow"));
        assert_eq!(env.len(), 8);
    }

    #[test]
    fn missing_cli_error_says_how_to_install() {
        let error = TestkitError::ToolNotFound {
            what: "Claude Code",
            path: PathBuf::from("/nowhere/claude"),
            hint: INSTALL_HINT,
        };
        let text = error.to_string();
        assert!(text.contains("run scripts/install-tools"), "{text}");
        assert!(text.contains(CLAUDE_CODE_VERSION), "{text}");
        assert!(text.contains("HANGAR_CLAUDE_BIN"), "{text}");
    }
}
