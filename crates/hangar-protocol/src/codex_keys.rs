//! The variables Codex's model providers read their keys from: `--codex-config
//! model_providers.X.env_key=NAME` (or the provider as one inline table, `model_providers.X={
//! ..., env_key="NAME" }`). Codex fails a turn whose provider's variable is missing ("Missing
//! environment variable"); the control plane instead hands the variable to the turn from the
//! vault (or refuses the turn up front, saying what to set), and the driver lets exactly these
//! names through to Codex besides its usual ones.
//!
//! Read by a small scanner rather than a TOML parser: the driver links no TOML crate, and only
//! one key of one table is wanted.

/// One provider's key variable: (the provider's name, the variable).
pub type ProviderKey = (String, String);

/// Every `env_key` the settings name, in order. An `env_key` whose value is not a variable
/// name hangar hands on ([`name_ok`]) is an error naming it.
pub fn provider_keys(settings: &[String]) -> Result<Vec<ProviderKey>, String> {
    let mut out: Vec<ProviderKey> = Vec::new();
    for kv in settings {
        let Some((key, value)) = kv.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let Some(rest) = key.strip_prefix("model_providers.") else {
            continue;
        };
        let provider = rest
            .split('.')
            .next()
            .unwrap_or("")
            .trim_matches('"')
            .to_owned();
        let names: Vec<String> = if rest.ends_with(".env_key") {
            vec![unquote(value.trim())]
        } else if rest == provider || rest.trim_matches('"') == provider {
            inline_env_keys(value)
        } else {
            Vec::new()
        };
        for name in names {
            if !name_ok(&name) {
                return Err(format!(
                    "--codex-config {key}: the model provider's key variable {name:?} is not one hangar hands to a turn (letters, digits and _, not starting with a digit or HANGAR_)"
                ));
            }
            if !out.iter().any(|(_, n)| *n == name) {
                out.push((provider.clone(), name));
            }
        }
    }
    Ok(out)
}

/// Whether `name` may be a provider's key variable: an upper- or lower-case variable name,
/// never one of hangar's own (`HANGAR_*`), nor one that steers the harness's process
/// (`PATH`, `HOME`, `LD_*`, `NODE_OPTIONS`, ...).
pub fn name_ok(name: &str) -> bool {
    const STEERS: &[&str] = &[
        "PATH",
        "HOME",
        "USER",
        "SHELL",
        "TMPDIR",
        "CODEX_HOME",
        "NODE_OPTIONS",
        "IFS",
        "ENV",
        "BASH_ENV",
    ];
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 128
        && !name.to_ascii_uppercase().starts_with("HANGAR_")
        && !name.starts_with("LD_")
        && !STEERS.contains(&name)
        // What the harness's environment is made of besides credentials (its base URLs, proxy,
        // CA file, config folder, the quiet-mode switches) is set by hangar, never by a key.
        && !crate::env::HARNESS_ENV_PLAIN.contains(&name)
        && !crate::env::HARNESS_ENV_FIXED.iter().any(|(k, _)| *k == name)
        && name != "IS_SANDBOX"
}

/// A TOML string's text (`"NAME"` or `'NAME'`), or the value as it is (Codex takes a value that
/// is not TOML as a literal string).
fn unquote(v: &str) -> String {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner.to_owned();
        }
    }
    v.to_owned()
}

/// The `env_key = "NAME"` entries of an inline table's text.
fn inline_env_keys(table: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = table;
    while let Some(at) = rest.find("env_key") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "env_key".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let Some(after_eq) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let v = after_eq.trim_start();
        let end = v.find([',', '}']).unwrap_or(v.len());
        out.push(unquote(v[..end].trim()));
        rest = &v[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(s: &[&str]) -> Result<Vec<ProviderKey>, String> {
        provider_keys(&s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn the_dotted_and_the_inline_table_forms_name_the_variable() {
        assert_eq!(
            keys(&[
                "model_provider=\"mine\"",
                "model_providers.mine.env_key=\"MINE_KEY\"",
                "model_providers.other={name=\"o\", base_url=\"http://127.0.0.1:9/v1\", env_key = 'OTHER_KEY', wire_api=\"responses\"}",
                "model_providers.bare.env_key=BARE_KEY",
                "model_providers.mine.base_url=\"http://127.0.0.1:9/v1\"",
                "model_providers.x={name=\"x\", my_env_key=\"NOT_THIS\"}",
            ])
            .unwrap(),
            vec![
                ("mine".into(), "MINE_KEY".into()),
                ("other".into(), "OTHER_KEY".into()),
                ("bare".into(), "BARE_KEY".into()),
            ]
        );
    }

    #[test]
    fn hangars_own_and_process_steering_variables_are_refused() {
        for bad in [
            "model_providers.m.env_key=\"HANGAR_MASTER_KEY_FILE\"",
            "model_providers.m.env_key=\"hangar_home\"",
            "model_providers.m.env_key=\"PATH\"",
            "model_providers.m.env_key=\"LD_PRELOAD\"",
            "model_providers.m.env_key=\"HTTPS_PROXY\"",
            "model_providers.m.env_key=\"ANTHROPIC_BASE_URL\"",
            "model_providers.m.env_key=\"DISABLE_TELEMETRY\"",
            "model_providers.m.env_key=\"IS_SANDBOX\"",
            "model_providers.m={env_key=\"NODE_OPTIONS\"}",
            "model_providers.m.env_key=\"A B\"",
            "model_providers.m.env_key=\"\"",
        ] {
            let e = keys(&[bad]).unwrap_err();
            assert!(e.contains("model_providers.m"), "{e}");
        }
    }
}
