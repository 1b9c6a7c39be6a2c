//! The CLI's own settings: `$XDG_CONFIG_HOME/hangar/config.toml` (else
//! `~/.config/hangar/config.toml`), beside the tokens `hangar login` keeps. Each key stands for
//! a variable, laid under the environment as the server's file is (`config.rs`): a variable set
//! in the environment, and a flag, win.
//!
//! ```toml
//! url = "https://hangar.example.com"   # HANGAR_URL: the server the commands talk to
//! [run]                                # defaults of `hangar run` and `hangar session start`
//! harness = "codex"                    # HANGAR_HARNESS
//! policy = "ask"                       # HANGAR_POLICY
//! model = "gpt-5.5"                    # HANGAR_MODEL
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

use hangar_protocol::env as var;

use crate::config::{Kind, value_of};
use crate::exit::CliError;

/// Every key: its name (`table.key`), the variable, and the words it may hold (empty: any text).
const SETTINGS: &[(&str, &str, &[&str])] = &[
    ("url", var::HANGAR_URL, &[]),
    ("run.harness", var::HANGAR_HARNESS, &["claude", "codex"]),
    (
        "run.policy",
        var::HANGAR_POLICY,
        &["ask", "auto", "governed"],
    ),
    ("run.model", var::HANGAR_MODEL, &[]),
];

/// Where the file is. Read from the process's environment itself: the settings snapshot is
/// taken only after the files are laid under it.
pub fn path() -> Option<PathBuf> {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    non_empty("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|d| d.join("hangar").join("config.toml"))
}

/// The variables the file sets; none when there is no file. A key it does not know, or a value
/// of the wrong kind, is an error naming the file and the key.
pub fn read() -> Result<Vec<(String, OsString)>, CliError> {
    let Some(path) = path() else {
        return Ok(Vec::new());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CliError::Usage(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    parse(&text).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}

fn parse(text: &str) -> Result<Vec<(String, OsString)>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut flat: Vec<(String, toml::Value)> = Vec::new();
    for (k, v) in table {
        match v {
            toml::Value::Table(t) => {
                flat.extend(t.into_iter().map(|(k2, v2)| (format!("{k}.{k2}"), v2)))
            }
            other => flat.push((k, other)),
        }
    }
    let known = || {
        SETTINGS
            .iter()
            .map(|(k, _, _)| *k)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut vars = Vec::new();
    for (name, value) in flat {
        let Some((_, env, words)) = SETTINGS.iter().find(|(k, _, _)| *k == name) else {
            return Err(format!(
                "unknown setting `{name}`; the settings are: {}",
                known()
            ));
        };
        let Some(v) = value_of(&name, Kind::Text, &value)? else {
            continue;
        };
        if !words.is_empty() && !words.contains(&v.as_str()) {
            return Err(format!("`{name}` = {v:?}: one of {}", words.join(", ")));
        }
        vars.push(((*env).to_owned(), OsString::from(v)));
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_sets_its_variable_and_a_wrong_one_is_named() {
        let got = parse(
            "url = \"https://hangar.example.com\"\n[run]\nharness = \"codex\"\npolicy = \"ask\"\n",
        )
        .unwrap();
        let mut got = got;
        got.sort();
        assert_eq!(
            got,
            vec![
                ("HANGAR_HARNESS".to_owned(), OsString::from("codex")),
                ("HANGAR_POLICY".to_owned(), OsString::from("ask")),
                (
                    "HANGAR_URL".to_owned(),
                    OsString::from("https://hangar.example.com")
                ),
            ]
        );
        assert!(
            parse("[run]\nharnes = \"codex\"\n")
                .unwrap_err()
                .contains("`run.harnes`")
        );
        assert!(
            parse("[run]\npolicy = \"yolo\"\n")
                .unwrap_err()
                .contains("ask, auto, governed")
        );
        assert!(
            parse("url = 7\n")
                .unwrap_err()
                .contains("`url` must be a string")
        );
    }
}
