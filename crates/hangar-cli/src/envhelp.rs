//! The "Environment:" section of every command's `--help`: the variables that command reads,
//! from one table, so a person (or a script) sees what changes its behaviour without reading
//! the README. Added to the parsed command definition before arguments are read.

use hangar_protocol::env as var;

/// Every variable some command reads, with what it does.
const MEANING: &[(&str, &str)] = &[
    (
        var::HANGAR_URL,
        "the server to talk to (default http://127.0.0.1:7700; the config file's `url`)",
    ),
    (
        var::HANGAR_TOKEN,
        "the API token (else the one `hangar login` kept for the server, else $HANGAR_HOME/token)",
    ),
    (
        var::HANGAR_HOME,
        "hangar's folder on this machine: store, vault key, runs (default ~/.hangar)",
    ),
    (
        var::HANGAR_CONFIG,
        "a server settings file (TOML, `hangar serve --help` lists its keys)",
    ),
    (
        "XDG_CONFIG_HOME",
        "where the CLI's config.toml and hosts.json are (default ~/.config): hangar/",
    ),
    (
        var::HANGAR_CA_FILE,
        "a PEM file of CA certificates to trust for the server's HTTPS",
    ),
    (
        var::HANGAR_HARNESS,
        "the harness without --harness (the config file's `run.harness`)",
    ),
    (
        var::HANGAR_POLICY,
        "the policy without --policy (`run.policy`)",
    ),
    (var::HANGAR_MODEL, "the model without --model (`run.model`)"),
    (
        var::HANGAR_CLAUDE_BIN,
        "the Claude Code executable (default: claude on PATH)",
    ),
    (
        var::HANGAR_CODEX_BIN,
        "the Codex executable (default: codex on PATH)",
    ),
    (
        var::HANGAR_DRIVER_BIN,
        "the driver (default: beside hangar, or ../lib/hangar from it)",
    ),
    (
        var::HANGAR_TOWER_HOOK_BIN,
        "the Tower hook (default: beside the driver)",
    ),
    (
        var::HANGAR_DATABASE_URL,
        "the store (default sqlite://$HANGAR_HOME/hangar.db; postgres://...)",
    ),
    (
        var::HANGAR_MASTER_KEY_FILE,
        "the vault's master key (default $HANGAR_HOME/master.key)",
    ),
    (
        "DOCKER_HOST",
        "the dockerd to use (default its local socket)",
    ),
    (
        var::HANGAR_LOG,
        "which log lines to show (tracing's filter syntax; RUST_LOG too)",
    ),
    (var::HANGAR_LOG_FORMAT, "text or json"),
    ("NO_COLOR", "set: no colour"),
];

/// What each command reads beyond the shared ones, by its path (`sb create`).
fn extra(path: &str) -> &'static [&'static str] {
    match path {
        "run" | "session start" => &[
            var::HANGAR_HARNESS,
            var::HANGAR_POLICY,
            var::HANGAR_MODEL,
            var::HANGAR_CLAUDE_BIN,
            var::HANGAR_CODEX_BIN,
            var::HANGAR_DRIVER_BIN,
        ],
        "serve" | "token create" | "person add" | "person list" | "person rm" | "credential"
        | "audit" | "events" => &[var::HANGAR_DATABASE_URL, var::HANGAR_MASTER_KEY_FILE],
        "harness check" | "harness list" | "doctor" => &[
            var::HANGAR_CLAUDE_BIN,
            var::HANGAR_CODEX_BIN,
            var::HANGAR_DRIVER_BIN,
            var::HANGAR_TOWER_HOOK_BIN,
            var::HANGAR_DATABASE_URL,
            "DOCKER_HOST",
        ],
        p if p.starts_with("sb") || p.starts_with("env") => &["DOCKER_HOST"],
        _ => &[],
    }
}

/// The variables every command reads: where its server is, who it is, its own files, its log.
const SHARED: &[&str] = &[
    var::HANGAR_URL,
    var::HANGAR_TOKEN,
    var::HANGAR_HOME,
    var::HANGAR_CONFIG,
    "XDG_CONFIG_HOME",
    var::HANGAR_CA_FILE,
    var::HANGAR_LOG,
    var::HANGAR_LOG_FORMAT,
    "NO_COLOR",
];

/// The section for the command at `path`.
pub fn section(path: &str) -> String {
    let own = extra(path);
    let names: Vec<&str> = own
        .iter()
        .chain(SHARED.iter().filter(|n| !own.contains(n)))
        .copied()
        .collect();
    let mut s = String::from("Environment:\n");
    for n in names {
        let meaning = MEANING
            .iter()
            .find(|(k, _)| *k == n)
            .map_or("", |(_, m)| *m);
        s.push_str(&format!("  {n:<24} {meaning}\n"));
    }
    if path == "run" || path == "session start" {
        s.push_str("  and, for the server started here when none answers, those of `hangar serve --help`\n");
    }
    s
}

/// `cmd` with the section under every command's help (after what it already says there).
pub fn with_environment(cmd: clap::Command) -> clap::Command {
    walk(cmd, "")
}

fn walk(cmd: clap::Command, path: &str) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    let mut cmd = cmd;
    for name in names {
        let sub_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        cmd = cmd.mut_subcommand(&name, |s| walk(s, &sub_path));
    }
    if path.is_empty() || path == "help" {
        return cmd;
    }
    let before = cmd
        .get_after_help()
        .map(|h| format!("{h}\n"))
        .unwrap_or_default();
    cmd.after_help(format!("{before}{}", section(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_named_has_a_meaning() {
        for n in SHARED.iter().chain(
            ["run", "serve", "harness check", "sb create"]
                .iter()
                .flat_map(|p| extra(p).iter()),
        ) {
            assert!(MEANING.iter().any(|(k, _)| k == n), "{n} has no meaning");
        }
    }
}
