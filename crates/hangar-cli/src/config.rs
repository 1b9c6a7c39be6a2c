//! `hangar serve --config FILE` (or `HANGAR_CONFIG`): every server setting in one TOML file.
//!
//! Each setting of the file is one of the environment variables `hangar serve` reads (the
//! table below names it), so the file and the environment mean the same thing and one code path
//! reads both: the file's values are laid under the process's environment before anything reads
//! a setting ([`hangar_protocol::env::layer_under_environment`]), and a variable set in the
//! environment wins. `listen` and `[tls]` have no variable: there the flags win. A key the file
//! does not know, or a value of the wrong type, is refused with the file's name and the key, so a
//! typo never leaves a setting silently at its default.
//!
//! ```toml
//! listen = "0.0.0.0:7700"
//! home = "/var/lib/hangar"
//! database_url = "postgres://hangar@db.example.com/hangar"
//! [tls]
//! cert = "/etc/hangar/tls/cert.pem"
//! key = "/etc/hangar/tls/key.pem"
//! [oidc]
//! issuer = "https://id.example.com"
//! client_id = "hangar"
//! ```

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use hangar_protocol::env as var;

use crate::exit::CliError;

/// Where `hangar serve` listens unless `--listen` or the file says otherwise.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7700,
));

/// What a value of the file becomes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    /// Text (a path, a URL, a name).
    Text,
    /// A whole number.
    Number,
    /// `true`/`false`, written as the variable's own words for each.
    Switch {
        on: &'static str,
        off: Option<&'static str>,
    },
}

/// Every setting of the file: its key (`table.key` for a table's), the variable it sets, what it
/// holds, and what it is for (shown when a key is unknown).
const SETTINGS: &[(&str, &str, Kind)] = &[
    ("home", var::HANGAR_HOME, Kind::Text),
    ("database_url", var::HANGAR_DATABASE_URL, Kind::Text),
    ("master_key_file", var::HANGAR_MASTER_KEY_FILE, Kind::Text),
    ("public_url", var::HANGAR_PUBLIC_URL, Kind::Text),
    ("ca_file", var::HANGAR_CA_FILE, Kind::Text),
    ("log", var::HANGAR_LOG, Kind::Text),
    ("log_format", var::HANGAR_LOG_FORMAT, Kind::Text),
    ("retention_days", var::HANGAR_RETENTION_DAYS, Kind::Number),
    ("harness_versions", var::HANGAR_HARNESS_VERSIONS, Kind::Text),
    ("driver_bin", var::HANGAR_DRIVER_BIN, Kind::Text),
    ("tower_hook_bin", var::HANGAR_TOWER_HOOK_BIN, Kind::Text),
    ("claude_bin", var::HANGAR_CLAUDE_BIN, Kind::Text),
    ("codex_bin", var::HANGAR_CODEX_BIN, Kind::Text),
    (
        "live_turns",
        var::HANGAR_LIVE_TURNS,
        Kind::Switch {
            on: "true",
            off: Some("false"),
        },
    ),
    (
        "unsandboxed_folders",
        var::HANGAR_UNSANDBOXED_FOLDERS,
        Kind::Switch {
            on: hangar_control::UNSANDBOXED_FOLDERS_ALLOW,
            off: None,
        },
    ),
    ("run_lease_ms", var::HANGAR_RUN_LEASE_MS, Kind::Number),
    (
        "attach_idle_secs",
        var::HANGAR_ATTACH_IDLE_SECS,
        Kind::Number,
    ),
    ("tree_slow_ms", var::HANGAR_TREE_SLOW_MS, Kind::Number),
    ("otlp_endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", Kind::Text),
    ("oidc.issuer", var::HANGAR_OIDC_ISSUER, Kind::Text),
    ("oidc.client_id", var::HANGAR_OIDC_CLIENT_ID, Kind::Text),
    (
        "oidc.client_secret",
        var::HANGAR_OIDC_CLIENT_SECRET,
        Kind::Text,
    ),
    (
        "oidc.create_members",
        var::HANGAR_OIDC_CREATE_MEMBERS,
        Kind::Switch {
            on: "members",
            off: None,
        },
    ),
    ("governance.url", var::HANGAR_GOVERNANCE_URL, Kind::Text),
    ("governance.hook", var::HANGAR_GOVERNANCE_HOOK, Kind::Text),
    (
        "governance.hook_credential",
        var::HANGAR_GOVERNANCE_HOOK_CREDENTIAL,
        Kind::Text,
    ),
    (
        "governance.hook_auth",
        var::HANGAR_GOVERNANCE_HOOK_AUTH,
        Kind::Text,
    ),
    (
        "governance.hook_agent",
        var::HANGAR_GOVERNANCE_HOOK_AGENT,
        Kind::Text,
    ),
    (
        "governance.hook_wait_seconds",
        var::HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS,
        Kind::Number,
    ),
    (
        "governance.hook_call_seconds",
        var::HANGAR_GOVERNANCE_HOOK_CALL_SECONDS,
        Kind::Number,
    ),
    ("e2b.api_key", var::HANGAR_E2B_API_KEY, Kind::Text),
    ("e2b.url", var::HANGAR_E2B_URL, Kind::Text),
    ("e2b.domain", var::HANGAR_E2B_DOMAIN, Kind::Text),
    ("e2b.envd_url", var::HANGAR_E2B_ENVD_URL, Kind::Text),
    (
        "e2b.timeout_secs",
        var::HANGAR_E2B_TIMEOUT_SECS,
        Kind::Number,
    ),
    ("k8s.namespace", var::HANGAR_K8S_NAMESPACE, Kind::Text),
    (
        "k8s.start_timeout_secs",
        var::HANGAR_K8S_START_TIMEOUT_SECS,
        Kind::Number,
    ),
    ("k8s.mirror", var::HANGAR_K8S_MIRROR, Kind::Text),
    ("docker.mirror", var::HANGAR_DOCKER_MIRROR, Kind::Text),
    ("advertise_url", var::HANGAR_ADVERTISE_URL, Kind::Text),
];

/// The keys with no variable behind them: the flags win over them.
const OWN_KEYS: &[&str] = &["listen", "tls.cert", "tls.key"];

/// What the file says beyond the variables it sets.
#[derive(Debug, Default, PartialEq)]
pub struct ServeFile {
    pub listen: Option<SocketAddr>,
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// The file `hangar serve` reads: `--config`, else `$HANGAR_CONFIG`; none if neither is given.
pub fn chosen(flag: Option<PathBuf>) -> Option<PathBuf> {
    flag.or_else(|| var::config_file().map(PathBuf::from))
}

/// Reads `path`: its own settings, and the variables it sets (to lay under the environment
/// with [`lay_under_environment`]).
pub fn load(path: &Path) -> Result<(ServeFile, Vec<(String, OsString)>), CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::Usage(format!(
            "cannot read the configuration file {}: {e}",
            path.display()
        ))
    })?;
    parse(&text).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}

/// Lays the files' variables under the environment, later ones over earlier ones. Call once,
/// before any setting is read.
pub fn lay_under_environment(vars: Vec<(String, OsString)>) -> Result<(), CliError> {
    var::layer_under_environment(vars).map_err(|_| {
        CliError::Failed(
            "internal error: a setting was read before the configuration file was".into(),
        )
    })
}

/// The file's own settings and the variables it sets, or what is wrong with it.
fn parse(text: &str) -> Result<(ServeFile, Vec<(String, OsString)>), String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut flat = Vec::new();
    flatten("", &table, &mut flat)?;
    let mut file = ServeFile::default();
    let mut vars = Vec::new();
    let (mut cert, mut key) = (None, None);
    for (name, value) in flat {
        match name.as_str() {
            "listen" => {
                let text = value
                    .as_str()
                    .ok_or("`listen` must be a string such as \"127.0.0.1:7700\"")?;
                file.listen = Some(text.parse().map_err(|e| {
                    format!("`listen` = {text:?} is not an address and port (e.g. \"0.0.0.0:7700\"): {e}")
                })?);
            }
            "tls.cert" => cert = Some(path_of(&name, &value)?),
            "tls.key" => key = Some(path_of(&name, &value)?),
            _ => {
                let Some((_, env, kind)) = SETTINGS.iter().find(|(k, _, _)| *k == name) else {
                    return Err(format!(
                        "unknown setting `{name}`; the settings are: {}",
                        known_keys()
                    ));
                };
                if let Some(v) = value_of(&name, *kind, &value)? {
                    vars.push(((*env).to_owned(), OsString::from(v)));
                }
            }
        }
    }
    file.tls = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err("[tls] needs both `cert` and `key`".into()),
    };
    Ok((file, vars))
}

/// The file's values by their dotted keys (one level of tables).
fn flatten(
    prefix: &str,
    table: &toml::Table,
    out: &mut Vec<(String, toml::Value)>,
) -> Result<(), String> {
    for (k, v) in table {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) if prefix.is_empty() => flatten(&name, t, out)?,
            toml::Value::Table(_) => {
                return Err(format!(
                    "unknown setting `{name}`; the settings are: {}",
                    known_keys()
                ));
            }
            other => out.push((name, other.clone())),
        }
    }
    Ok(())
}

fn known_keys() -> String {
    OWN_KEYS
        .iter()
        .copied()
        .chain(SETTINGS.iter().map(|(k, _, _)| *k))
        .collect::<Vec<_>>()
        .join(", ")
}

fn path_of(name: &str, value: &toml::Value) -> Result<PathBuf, String> {
    value
        .as_str()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| format!("`{name}` must be a path (a string)"))
}

/// The variable's value for one setting; `None` for a switch turned off that has no word for
/// off (the variable stays unset).
pub(crate) fn value_of(
    name: &str,
    kind: Kind,
    value: &toml::Value,
) -> Result<Option<String>, String> {
    match (kind, value) {
        (Kind::Text, toml::Value::String(s)) => Ok(Some(s.clone())),
        (Kind::Text, _) => Err(format!("`{name}` must be a string")),
        (Kind::Number, toml::Value::Integer(n)) if *n >= 0 => Ok(Some(n.to_string())),
        (Kind::Number, _) => Err(format!("`{name}` must be a whole number, 0 or more")),
        (Kind::Switch { on, off }, toml::Value::Boolean(b)) => Ok(if *b {
            Some(on.to_owned())
        } else {
            off.map(str::to_owned)
        }),
        (Kind::Switch { .. }, _) => Err(format!("`{name}` must be true or false")),
    }
}

/// The help text's list of the settings and their variables.
pub fn help() -> String {
    let mut s = String::from(
        "Settings of --config FILE (TOML; a variable set in the environment wins over the file):\n  listen, tls.cert, tls.key (the flags win)\n",
    );
    for (k, env, _) in SETTINGS {
        s.push_str(&format!("  {k:<30} {env}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(text: &str) -> Vec<(String, String)> {
        let (_, v) = parse(text).unwrap();
        v.into_iter()
            .map(|(k, v)| (k, v.into_string().unwrap()))
            .collect()
    }

    #[test]
    fn every_key_sets_its_variable() {
        let got = vars(
            "home = \"/var/lib/hangar\"\nrun_lease_ms = 7000\nunsandboxed_folders = true\nlive_turns = false\n\
             [oidc]\nissuer = \"https://id.example.com\"\ncreate_members = true\n\
             [governance]\nurl = \"https://tower.example.com\"\n",
        );
        let want = [
            ("HANGAR_HOME", "/var/lib/hangar"),
            ("HANGAR_RUN_LEASE_MS", "7000"),
            (
                "HANGAR_UNSANDBOXED_FOLDERS",
                hangar_control::UNSANDBOXED_FOLDERS_ALLOW,
            ),
            ("HANGAR_LIVE_TURNS", "false"),
            ("HANGAR_OIDC_ISSUER", "https://id.example.com"),
            ("HANGAR_OIDC_CREATE_MEMBERS", "members"),
            ("HANGAR_GOVERNANCE_URL", "https://tower.example.com"),
        ];
        for (k, v) in want {
            assert!(
                got.iter().any(|(gk, gv)| gk == k && gv == v),
                "{k}={v} not in {got:?}"
            );
        }
        assert_eq!(got.len(), want.len());
        // Off with no word for off: the variable stays unset.
        assert!(vars("unsandboxed_folders = false").is_empty());
    }

    #[test]
    fn listen_and_tls_are_the_files_own() {
        let (file, v) =
            parse("listen = \"0.0.0.0:7700\"\n[tls]\ncert = \"/c.pem\"\nkey = \"/k.pem\"\n")
                .unwrap();
        assert!(v.is_empty());
        assert_eq!(file.listen, Some("0.0.0.0:7700".parse().unwrap()));
        assert_eq!(
            file.tls,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );
        assert!(
            parse("[tls]\ncert = \"/c.pem\"\n")
                .unwrap_err()
                .contains("both")
        );
        assert!(
            parse("listen = \"localhost\"")
                .unwrap_err()
                .contains("listen")
        );
    }

    #[test]
    fn a_typo_or_a_wrong_type_is_refused_naming_the_key() {
        let e = parse("databse_url = \"sqlite:///x.db\"").unwrap_err();
        assert!(e.contains("unknown setting `databse_url`"), "{e}");
        assert!(e.contains("database_url"), "the known keys are listed: {e}");
        let e = parse("[oidc]\nissuer_url = \"x\"").unwrap_err();
        assert!(e.contains("`oidc.issuer_url`"), "{e}");
        let e = parse("[oidc.extra]\nx = 1").unwrap_err();
        assert!(e.contains("`oidc.extra`"), "{e}");
        assert!(
            parse("run_lease_ms = \"5000\"")
                .unwrap_err()
                .contains("whole number")
        );
        assert!(
            parse("run_lease_ms = -1")
                .unwrap_err()
                .contains("whole number")
        );
        assert!(
            parse("live_turns = \"no\"")
                .unwrap_err()
                .contains("true or false")
        );
        assert!(parse("home = 3").unwrap_err().contains("string"));
        assert!(parse("home = ").is_err(), "not TOML");
    }
}
