//! Finding the pinned Codex CLI, and the arguments and environment that keep it offline against a
//! [`crate::FakeOpenAi`].

use std::path::{Path, PathBuf};

use crate::error::TestkitError;

/// The Codex CLI version hangar is pinned to (installed by `scripts/install-tools`).
pub const CODEX_VERSION: &str = "0.169.0";

/// Environment variable that overrides where the `codex` binary is.
pub const CODEX_BIN_ENV: &str = "HANGAR_CODEX_BIN";

/// The model provider id [`codex_offline_args`] defines and selects.
pub const CODEX_PROVIDER: &str = "hangar-fake";

/// The environment variable the fake provider reads its API key from (its `env_key`); Codex sends
/// the value as `Authorization: Bearer …`.
/// The provider's key variable: one the driver passes to the harness (its allow-list).
pub const CODEX_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// The API key [`codex_env`] sets.
pub const CODEX_API_KEY: &str = "sk-test";

/// The model [`codex_offline_args`] selects: in Codex 0.169's bundled catalog, offered
/// `exec_command` and the freeform `apply_patch` tool (`gpt-5` is not, and gets no `apply_patch`).
pub const CODEX_MODEL: &str = "gpt-5.5";

const INSTALL_HINT: &str = "run scripts/install-tools (installs the pinned Codex 0.169.0 from \
                            the npm registry) or set HANGAR_CODEX_BIN";

/// The `codex` binary: `$HANGAR_CODEX_BIN` if set, else
/// `<workspace>/.tools/npm/node_modules/.bin/codex`. Errors (with install instructions) when the
/// chosen path is not a file.
pub fn codex_bin() -> Result<PathBuf, TestkitError> {
    crate::claude::pinned_tool(CODEX_BIN_ENV, "codex", "Codex", INSTALL_HINT)
}

/// A TOML string literal (`-c` values are parsed as TOML).
fn toml_string(value: &str) -> String {
    // A JSON string is a valid TOML basic string for everything serde_json emits.
    serde_json::Value::String(value.to_owned()).to_string()
}

/// The arguments that keep Codex offline and pointed at a fake Responses server at `base_url`
/// (`http://127.0.0.1:PORT/v1`, see [`crate::FakeOpenAi::base_url`]). Put them after the
/// subcommand: `codex exec <these> …`, `codex app-server <these>`.
///
/// * `--disable plugins`: with plugins on, Codex resolves `api.github.com` and `chatgpt.com` at
///   start.
/// * a model provider [`CODEX_PROVIDER`] with `wire_api = "responses"`, the key from
///   [`CODEX_API_KEY_ENV`], and no request / stream retries (a scripted error fails the turn at
///   once instead of after back-off delays);
/// * `model = "gpt-5.5"` ([`CODEX_MODEL`]);
/// * `analytics.enabled = false`: `codex exec` has analytics on by default (its turn metadata
///   says `analytics_enabled: true`); `app-server` has them off already.
pub fn codex_offline_args(base_url: &str) -> Vec<String> {
    let provider = format!("model_providers.{CODEX_PROVIDER}");
    let overrides = [
        format!("model_provider={}", toml_string(CODEX_PROVIDER)),
        format!("{provider}.name={}", toml_string("hangar fake")),
        format!("{provider}.base_url={}", toml_string(base_url)),
        format!("{provider}.wire_api={}", toml_string("responses")),
        format!("{provider}.env_key={}", toml_string(CODEX_API_KEY_ENV)),
        format!("{provider}.request_max_retries=0"),
        format!("{provider}.stream_max_retries=0"),
        format!("model={}", toml_string(CODEX_MODEL)),
        "analytics.enabled=false".to_owned(),
    ];
    let mut args = vec!["--disable".to_owned(), "plugins".to_owned()];
    for value in overrides {
        args.push("-c".to_owned());
        args.push(value);
    }
    args
}

/// The `-c KEY=VALUE` values of [`codex_offline_args`], as hangar's API takes them
/// (`options.codex_config`, `hangar run --codex-config`; the driver adds `--disable plugins`
/// itself).
pub fn codex_offline_config(base_url: &str) -> Vec<String> {
    codex_offline_args(base_url)
        .chunks(2)
        .filter(|p| p[0] == "-c")
        .map(|p| p[1].clone())
        .collect()
}

/// Environment for running `codex` with its state in `codex_home` (add `PATH` and `HOME` after
/// `env_clear()`): `CODEX_HOME`, the fake provider's key [`CODEX_API_KEY_ENV`] =
/// [`CODEX_API_KEY`], and `TMPDIR` = `<codex_home>/tmpdir` so that `CODEX_HOME` is never under the
/// temp dir (Codex refuses to create its sandbox helpers there, and every `read-only` /
/// `workspace-write` command then fails). The `tmpdir` directory is created here if it is missing.
pub fn codex_env(codex_home: &Path) -> Vec<(String, String)> {
    let tmpdir = codex_home.join("tmpdir");
    // Best effort: if it cannot be created, Codex reports it when it needs it.
    let _ignored = std::fs::create_dir_all(&tmpdir);
    [
        ("CODEX_HOME", codex_home.display().to_string()),
        (CODEX_API_KEY_ENV, CODEX_API_KEY.to_owned()),
        // A `hangar serve` started with it passes the key to turns (see `claude_env`).
        ("HANGAR_SERVER_CREDENTIALS", "allow".to_owned()),
        ("TMPDIR", tmpdir.display().to_string()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_args_define_and_select_the_fake_provider() {
        let args = codex_offline_args("http://127.0.0.1:9/v1");
        let expected = [
            "--disable",
            "plugins",
            "-c",
            r#"model_provider="hangar-fake""#,
            "-c",
            r#"model_providers.hangar-fake.name="hangar fake""#,
            "-c",
            r#"model_providers.hangar-fake.base_url="http://127.0.0.1:9/v1""#,
            "-c",
            r#"model_providers.hangar-fake.wire_api="responses""#,
            "-c",
            r#"model_providers.hangar-fake.env_key="OPENAI_API_KEY""#,
            "-c",
            "model_providers.hangar-fake.request_max_retries=0",
            "-c",
            "model_providers.hangar-fake.stream_max_retries=0",
            "-c",
            r#"model="gpt-5.5""#,
            "-c",
            "analytics.enabled=false",
        ];
        assert_eq!(args, expected);
    }

    #[test]
    fn env_sets_home_key_and_a_tmpdir_outside_the_temp_dir() {
        let dir = std::env::temp_dir().join(format!("hangar-codex-env-{}", std::process::id()));
        let env = codex_env(&dir);
        let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        assert_eq!(get("CODEX_HOME"), Some(dir.display().to_string()));
        assert_eq!(get("OPENAI_API_KEY").as_deref(), Some("sk-test"));
        let tmpdir = get("TMPDIR").unwrap_or_default();
        assert!(PathBuf::from(&tmpdir).is_dir(), "{tmpdir}");
        assert!(!dir.starts_with(&tmpdir));
        assert_eq!(env.len(), 4);
        let _ignored = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_cli_error_says_how_to_install() {
        let error = TestkitError::ToolNotFound {
            what: "Codex",
            path: PathBuf::from("/nowhere/codex"),
            hint: INSTALL_HINT,
        };
        let text = error.to_string();
        assert!(text.contains("run scripts/install-tools"), "{text}");
        assert!(text.contains(CODEX_VERSION), "{text}");
        assert!(text.contains("HANGAR_CODEX_BIN"), "{text}");
    }
}
