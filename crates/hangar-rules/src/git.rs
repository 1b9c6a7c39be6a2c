//! git settings that make git run a program: `-c core.fsmonitor=…`, `core.sshCommand`,
//! `core.pager`, `alias.x='!…'`, `filter.*.clean`, … given on the command line, written with
//! `git config`, or set through the environment (`GIT_SSH_COMMAND`, `GIT_CONFIG_PARAMETERS`,
//! `GIT_CONFIG_KEY_n`, …); and the transports and options that run one (`ext::` URLs,
//! `--upload-pack`, `--exec-path`). Written into a repository's config they would also run
//! later, under hangar's own git commands; so they are denied, not read.

use crate::paths::glob_text;
use crate::shell::Arg;

/// Keys (lower case; `*` for a subsection) whose value git runs as a program, hands to a
/// shell, or reads more config from.
const RUNS_A_PROGRAM: &[&str] = &[
    "core.fsmonitor",
    "core.sshcommand",
    "core.pager",
    "core.editor",
    "core.hookspath",
    "core.askpass",
    "core.gitproxy",
    "core.alternaterefscommand",
    "diff.external",
    "diff.*.textconv",
    "diff.*.command",
    "difftool.*",
    "mergetool.*",
    "merge.*.driver",
    "filter.*",
    "alias.*",
    "sequence.editor",
    "credential.helper",
    "credential.*.helper",
    "gpg.program",
    "gpg.*.program",
    "gpg.ssh.defaultkeycommand",
    "uploadpack.packobjectshook",
    "protocol.allow",
    "protocol.ext.allow",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "remote.*.vcs",
    "pager.*",
    "interactive.difffilter",
    "sendemail.*",
    "web.browser",
    "browser.*",
    "man.*",
    "include.path",
    "includeif.*",
    "submodule.*.update",
    "init.templatedir",
    "hook.*",
];

/// Environment variables git runs as a program or reads settings from.
const RUNS_A_PROGRAM_ENV: &[&str] = &[
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_PARAMETERS",
];

/// Variables git falls back to (`core.editor`, `core.pager` unset) when they are set for git.
const FALLBACK_ENV: &[&str] = &["EDITOR", "VISUAL", "PAGER"];

/// Editors and pagers that run nothing: `GIT_EDITOR=true git rebase --continue`,
/// `git -c core.pager=cat log`.
const HARMLESS_PROGRAMS: &[&str] = &["", "true", ":", "cat"];

/// Whether setting `key` to `value` (`None`: only known at run time) makes git run a program.
pub fn setting_runs_code(key: &str, value: Option<&str>) -> bool {
    let key = normalize_key(key);
    if !RUNS_A_PROGRAM.iter().any(|p| glob_text(p, &key)) {
        return false;
    }
    let Some(value) = value else { return true };
    let v = value.trim();
    let boolean = matches!(
        v.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
    );
    match key.as_str() {
        k if k.starts_with("alias.") => v.starts_with('!'),
        k if k.starts_with("submodule.") => v.starts_with('!'),
        "protocol.allow" => v == "always",
        "protocol.ext.allow" => v != "never",
        "core.fsmonitor" => !boolean,
        "core.hookspath" => v != "/dev/null",
        k if k.starts_with("pager.") => !(boolean || HARMLESS_PROGRAMS.contains(&v)),
        "core.pager" | "core.editor" | "sequence.editor" => !HARMLESS_PROGRAMS.contains(&v),
        "credential.helper" | "diff.external" => !v.is_empty(),
        k if k.starts_with("credential.") => !v.is_empty(),
        _ => true,
    }
}

/// Whether an environment variable set to `value` (`None`: only known at run time) makes
/// git run a program.
pub fn env_runs_code(name: &str, value: Option<&str>) -> bool {
    let harmless = value.is_some_and(|v| HARMLESS_PROGRAMS.contains(&v.trim()));
    match name {
        "GIT_PAGER" | "GIT_EDITOR" | "GIT_SEQUENCE_EDITOR" => !harmless,
        "GIT_CONFIG_GLOBAL" | "GIT_CONFIG_SYSTEM" | "GIT_CONFIG" => value != Some("/dev/null"),
        "GIT_CONFIG_PARAMETERS" => match value {
            Some(v) => match config_parameters(v) {
                Some(pairs) => pairs
                    .iter()
                    .any(|(k, v)| setting_runs_code(k, Some(v.as_str()))),
                None => true,
            },
            None => true,
        },
        n if RUNS_A_PROGRAM_ENV.contains(&n) => true,
        _ => false,
    }
}

/// Whether `name ARGS`, with `env` set for it, makes git run a program: a code-running
/// setting given with `-c`, written with `git config`, or in its environment (also through
/// `GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`); an `ext::` URL; `--upload-pack`, `--receive-pack`,
/// `--exec`, `--exec-path`. `export`/`declare` of such a variable counts too.
pub fn runs_code(name: &str, args: &[Arg], env: &[(String, Arg)]) -> bool {
    let value_of = |n: &str| env.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.lit());
    let is_git = name == "git";
    for (n, v) in env {
        if env_runs_code(n, v.lit())
            || (is_git && FALLBACK_ENV.contains(&n.as_str()) && {
                let v = v.lit().map(str::trim);
                !v.is_some_and(|v| HARMLESS_PROGRAMS.contains(&v))
            })
        {
            return true;
        }
        if let Some(k) = n.strip_prefix("GIT_CONFIG_KEY_") {
            let value = value_of(&format!("GIT_CONFIG_VALUE_{k}")).flatten();
            match v.lit() {
                Some(key) if !setting_runs_code(key, value) => {}
                _ => return true,
            }
        }
    }
    match name {
        "export" | "declare" | "typeset" | "local" | "readonly" => args.iter().any(|a| match a {
            Arg::Lit(s) => s
                .split_once('=')
                .is_some_and(|(n, v)| env_runs_code(n, Some(v))),
            Arg::Computed(_) => false,
        }),
        "git" => git_args_run_code(args),
        _ => false,
    }
}

/// git's own options and its `config` subcommand.
fn git_args_run_code(args: &[Arg]) -> bool {
    let mut i = 0;
    // Global options, before the subcommand.
    while i < args.len() {
        let Some(s) = args[i].lit() else { return true };
        match s {
            "-c" => {
                match args.get(i + 1) {
                    Some(Arg::Lit(kv)) => {
                        let (k, v) = kv.split_once('=').unwrap_or((kv, "true"));
                        if setting_runs_code(k, Some(v)) {
                            return true;
                        }
                    }
                    Some(Arg::Computed(shape)) => {
                        let key = shape.split_once('=').map_or("", |(k, _)| k);
                        if key.contains(crate::paths::ANY) || setting_runs_code(key, None) {
                            return true;
                        }
                    }
                    None => {}
                }
                i += 2;
            }
            "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix"
            | "--list-cmds" | "--attr-source" => i += 2,
            _ if s.starts_with("--config-env=") => {
                let kv = &s["--config-env=".len()..];
                let k = kv.split_once('=').map_or(kv, |(k, _)| k);
                if setting_runs_code(k, None) {
                    return true;
                }
                i += 1;
            }
            _ if s.starts_with("--exec-path=") => return true,
            _ if s.starts_with('-') => i += 1,
            _ => break,
        }
    }
    let sub = args.get(i).and_then(Arg::lit);
    let rest = args.get(i + 1..).unwrap_or(&[]);
    for (k, a) in rest.iter().enumerate() {
        let Some(s) = a.lit() else { continue };
        if s.starts_with("ext::")
            || ["--upload-pack", "--receive-pack", "--exec"]
                .iter()
                .any(|o| s == *o || s.strip_prefix(o).is_some_and(|r| r.starts_with('=')))
        {
            return true;
        }
        // `git clone -u PROG`, `git clone -c KEY=VALUE` / `--config KEY=VALUE`.
        if sub == Some("clone") {
            if s == "-u" {
                return true;
            }
            let kv = match s {
                "-c" | "--config" => rest.get(k + 1).and_then(Arg::lit),
                _ => s.strip_prefix("--config="),
            };
            if let Some(kv) = kv {
                let (key, v) = kv.split_once('=').unwrap_or((kv, "true"));
                if setting_runs_code(key, Some(v)) {
                    return true;
                }
            }
        }
    }
    sub == Some("config") && config_sets_code(rest)
}

/// `git config [OPTIONS] KEY VALUE`, `git config set KEY VALUE`, `--add`, `--replace-all`:
/// whether it writes a code-running setting (reading one, `--get`, `--unset`, is harmless).
fn config_sets_code(args: &[Arg]) -> bool {
    let mut positional: Vec<&Arg> = Vec::new();
    let mut reads = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        match a.lit() {
            Some("-f" | "--file" | "--blob" | "--type" | "--default" | "--comment" | "--value") => {
                i += 1
            }
            Some(
                "--get" | "--get-all" | "--get-regexp" | "--get-urlmatch" | "--get-color"
                | "--get-colorbool" | "--list" | "-l" | "--unset" | "--unset-all"
                | "--remove-section" | "--rename-section" | "-e" | "--edit",
            ) => reads = true,
            Some(s) if s.starts_with('-') && s.len() > 1 => {}
            _ => positional.push(a),
        }
    }
    if reads {
        return false;
    }
    // git 2.46's subcommands.
    match positional.first().and_then(|a| a.lit()) {
        Some("get" | "list" | "unset" | "edit" | "rename-section" | "remove-section") => {
            return false;
        }
        Some("set") => {
            positional.remove(0);
        }
        _ => {}
    }
    match positional.as_slice() {
        [] | [_] => false,
        [key, value, ..] => match key {
            Arg::Lit(k) => setting_runs_code(k, value.lit()),
            Arg::Computed(_) => true,
        },
    }
}

/// `section.subsection.key` with the section and key in lower case (git compares them so;
/// the subsection keeps its case but patterns only use `*` for it).
fn normalize_key(key: &str) -> String {
    key.trim().to_ascii_lowercase()
}

/// `GIT_CONFIG_PARAMETERS`: `'key'='value'` pairs, single-quoted as git writes them; `None`
/// when it does not read so.
fn config_parameters(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let quoted = |chars: &mut std::iter::Peekable<std::str::Chars>| -> Option<String> {
        if chars.next()? != '\'' {
            return None;
        }
        let mut s = String::new();
        loop {
            match chars.next()? {
                '\'' => {
                    // `'\''` is a quote inside.
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                        chars.next();
                        chars.next();
                        s.push('\'');
                        continue;
                    }
                    return Some(s);
                }
                c => s.push(c),
            }
        }
    };
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let first = quoted(&mut chars)?;
        if chars.peek() == Some(&'=') {
            chars.next();
            let v = quoted(&mut chars)?;
            out.push((first, v));
        } else {
            let (k, v) = first.split_once('=').unwrap_or((&first, "true"));
            out.push((k.to_owned(), v.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(s: &str) -> Vec<Arg> {
        s.split(' ').map(|w| Arg::Lit(w.to_owned())).collect()
    }

    #[test]
    fn settings_that_run_programs() {
        assert!(setting_runs_code("core.fsmonitor", Some("./x")));
        assert!(!setting_runs_code("core.fsmonitor", Some("false")));
        assert!(setting_runs_code("core.sshCommand", Some("ssh")));
        assert!(setting_runs_code("alias.x", Some("!sh")));
        assert!(!setting_runs_code("alias.co", Some("checkout")));
        assert!(setting_runs_code("Diff.Foo.textconv", Some("cat")));
        assert!(setting_runs_code("filter.lfs.smudge", Some("x")));
        assert!(!setting_runs_code("core.pager", Some("cat")));
        assert!(!setting_runs_code("color.ui", Some("always")));
        assert!(!setting_runs_code("protocol.file.allow", Some("always")));
        assert!(setting_runs_code("protocol.ext.allow", Some("always")));
        assert!(setting_runs_code("core.editor", None));
        assert!(!setting_runs_code("credential.helper", Some("")));
    }

    #[test]
    fn git_command_lines() {
        assert!(runs_code("git", &lits("-c core.fsmonitor=./x status"), &[]));
        assert!(runs_code("git", &lits("config core.pager less"), &[]));
        assert!(runs_code(
            "git",
            &lits("config --global --add alias.x !sh"),
            &[]
        ));
        assert!(runs_code("git", &lits("config set core.editor vim"), &[]));
        assert!(runs_code("git", &lits("clone ext::sh x"), &[]));
        assert!(runs_code("git", &lits("fetch --upload-pack=x origin"), &[]));
        assert!(!runs_code("git", &lits("config user.name x"), &[]));
        assert!(!runs_code("git", &lits("config --get core.pager"), &[]));
        assert!(!runs_code("git", &lits("-c color.ui=always log"), &[]));
        let env = |n: &str, v: &str| vec![(n.to_owned(), Arg::Lit(v.to_owned()))];
        assert!(runs_code("git", &lits("log"), &env("GIT_PAGER", "sh -c x")));
        assert!(!runs_code("git", &lits("log"), &env("GIT_PAGER", "cat")));
        assert!(runs_code("git", &lits("log"), &env("PAGER", "x")));
        assert!(!runs_code("make", &[], &env("PAGER", "x")));
        assert!(runs_code(
            "git",
            &lits("status"),
            &env("GIT_CONFIG_PARAMETERS", "'core.fsmonitor'='./x'")
        ));
        assert!(!runs_code(
            "git",
            &lits("status"),
            &env("GIT_CONFIG_PARAMETERS", "'color.ui'='always'")
        ));
        let mut kv = env("GIT_CONFIG_COUNT", "1");
        kv.extend(env("GIT_CONFIG_KEY_0", "core.pager"));
        kv.extend(env("GIT_CONFIG_VALUE_0", "sh"));
        assert!(runs_code("git", &lits("log"), &kv));
        assert!(runs_code("export", &lits("GIT_SSH_COMMAND=ssh"), &[]));
    }
}
