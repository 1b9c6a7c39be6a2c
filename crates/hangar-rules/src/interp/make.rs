//! A makefile read from stdin or given with `--eval`: its recipes and `$(shell …)` calls are
//! shell commands, `VAR != …` too; `$(file >F,…)` writes; `$(eval …)` is more makefile;
//! a `SHELL` of its own runs the recipes.

use std::collections::HashMap;

use super::{Code, Effects};
use crate::shell::Arg;

/// How deep `$(eval …)` and nested references are read.
const MAX_DEPTH: usize = 8;

/// make's options: `-f FILE` (`-` and `/dev/stdin` are stdin), `--eval TEXT`.
pub(super) fn code_of(args: &[Arg]) -> Code {
    let mut c = Code::default();
    let mut i = 0;
    while i < args.len() {
        let s = args[i].lit().unwrap_or("");
        let file = if s == "-f" || s == "--file" || s == "--makefile" {
            i += 1;
            Some(i)
        } else if s.starts_with("--file=") || s.starts_with("--makefile=") {
            let v = s.split_once('=').map_or("", |(_, v)| v);
            if v == "-" || v.starts_with("/dev/") || v.starts_with("/proc/") {
                c.stdin |= v == "-" || v == "/dev/stdin";
                if v != "-" && v != "/dev/stdin" {
                    c.inline.push(Arg::Computed(crate::paths::ANY.to_string()));
                }
            }
            None
        } else if let Some(v) = s
            .strip_prefix("-f")
            .filter(|v| !v.is_empty() && !s.starts_with("--"))
        {
            if v == "-" || v == "/dev/stdin" {
                c.stdin = true;
            }
            None
        } else {
            None
        };
        if let Some(f) = file {
            match args.get(f).and_then(Arg::lit) {
                Some("-") => c.stdin = true,
                Some(_) | None => {
                    if c.file.is_none() {
                        c.file = Some(f);
                    }
                }
            }
        }
        // `make 'X:=$(shell …)'`: a variable set on the command line is makefile text.
        if !s.starts_with('-')
            && let Some((name, _)) = s.split_once('=')
            && !name.is_empty()
            && name
                .trim_end_matches([':', '+', '?', '!'])
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            c.inline.push(args[i].clone());
        } else if args[i].computed().is_some_and(|s| s.contains('=')) {
            c.inline.push(args[i].clone());
        }
        if s == "-E" || s == "--eval" {
            i += 1;
            c.inline.extend(args.get(i).cloned());
        } else if let Some(v) = s.strip_prefix("--eval=") {
            c.inline.push(Arg::Lit(v.to_owned()));
        } else if matches!(
            s,
            "-C" | "--directory"
                | "-I"
                | "--include-dir"
                | "-o"
                | "-W"
                | "--old-file"
                | "--what-if"
                | "--new-file"
                | "--assume-old"
                | "--assume-new"
        ) {
            i += 1;
        }
        i += 1;
    }
    c
}

/// What a makefile does.
pub(super) fn read(text: &str, fx: &mut Effects) {
    read_at(text, fx, 0);
}

fn read_at(text: &str, fx: &mut Effects, depth: usize) {
    if depth > MAX_DEPTH {
        fx.opaque
            .push("its makefile nests too deeply to read".into());
        return;
    }
    let joined = text.replace("\\\n", " ");
    let mut vars: HashMap<String, String> = [
        ("CC", "cc"),
        ("CXX", "g++"),
        ("CPP", "cc -E"),
        ("LD", "ld"),
        ("AR", "ar"),
        ("AS", "as"),
        ("RM", "rm -f"),
        ("MAKE", "make"),
        ("SHELL", "/bin/sh"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    // Assignments with literal values.
    for line in joined.lines() {
        if line.starts_with('\t') {
            continue;
        }
        if let Some((name, value, op)) = assignment(line) {
            if op == "!=" {
                let cmd = expand(value.trim(), &vars, fx, depth);
                fx.shell.push(cmd);
                continue;
            }
            if (name == "SHELL" || name == ".SHELLFLAGS")
                && !matches!(
                    value.trim(),
                    "/bin/sh"
                        | "/bin/bash"
                        | "sh"
                        | "bash"
                        | "-c"
                        | "-ec"
                        | "-euc"
                        | "-eu -c"
                        | "-e -c"
                )
            {
                fx.opaque
                    .push("its recipes run through a shell it names".into());
            }
            if !value.contains('$') {
                vars.insert(name.to_owned(), value.trim().to_owned());
            } else {
                vars.remove(name);
            }
        }
    }
    for line in joined.lines() {
        if let Some(recipe) = line.strip_prefix('\t') {
            let cmd = recipe.trim_start_matches(['@', '-', '+', ' ']);
            let cmd = expand(cmd, &vars, fx, depth);
            fx.shell.push(cmd);
            continue;
        }
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if let Some(f) = t
            .strip_prefix("include ")
            .or_else(|| t.strip_prefix("-include "))
            .or_else(|| t.strip_prefix("sinclude "))
        {
            for f in f.split_whitespace() {
                if f.starts_with("/dev/") || f.starts_with("/proc/") {
                    fx.opaque
                        .push("it includes a makefile another command writes at run time".into());
                }
                fx.named.push(f.to_owned());
            }
            continue;
        }
        // `target: prereqs ; recipe`
        if assignment(t).is_none()
            && let Some((_, after)) = t.split_once(':')
            && let Some((_, recipe)) = after.split_once(';')
        {
            let cmd = expand(recipe.trim(), &vars, fx, depth);
            fx.shell.push(cmd);
        }
        // Functions in any other line run when it is read.
        let _ = expand(t, &vars, fx, depth);
    }
}

/// `NAME = value`, `:=`, `::=`, `?=`, `+=`, `!=` (with `export`/`override` before).
fn assignment(line: &str) -> Option<(&str, &str, &str)> {
    let l = line
        .trim_start()
        .trim_start_matches("export ")
        .trim_start_matches("override ");
    for op in ["::=", ":::=", ":=", "?=", "+=", "!=", "="] {
        if let Some((name, value)) = l.split_once(op) {
            let name = name.trim();
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
            {
                return Some((name, value, op));
            }
            return None;
        }
    }
    None
}

/// A line with make's references expanded as far as known: `$$` is `$`, known variables
/// their values, `$(shell …)` runs (and stands for its output), other references a shell
/// parameter only known at run time.
fn expand(text: &str, vars: &HashMap<String, String>, fx: &mut Effects, depth: usize) -> String {
    if depth > MAX_DEPTH {
        fx.opaque
            .push("its makefile references nest too deeply to read".into());
        return "${HANGAR_MAKE_VALUE}".to_owned();
    }
    let c: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < c.len() {
        if c[i] != '$' {
            out.push(c[i]);
            i += 1;
            continue;
        }
        match c.get(i + 1) {
            Some('$') => {
                out.push('$');
                i += 2;
            }
            Some(&open @ ('(' | '{')) => {
                let close = if open == '(' { ')' } else { '}' };
                let mut d = 0usize;
                let mut j = i + 2;
                while j < c.len() {
                    if c[j] == open {
                        d += 1;
                    } else if c[j] == close {
                        if d == 0 {
                            break;
                        }
                        d -= 1;
                    }
                    j += 1;
                }
                let inner: String = c[i + 2..j.min(c.len())].iter().collect();
                out.push_str(&reference(&inner, vars, fx, depth));
                i = j + 1;
            }
            Some(_) => {
                // `$@`, `$<`, `$X`: automatic or one-letter variables.
                out.push_str("${HANGAR_MAKE_VALUE}");
                i += 2;
            }
            None => i += 1,
        }
    }
    out
}

/// One `$(…)` reference.
fn reference(
    inner: &str,
    vars: &HashMap<String, String>,
    fx: &mut Effects,
    depth: usize,
) -> String {
    let (func, arg) = match inner.split_once([' ', '\t']) {
        Some((f, a)) => (f, a.trim_start()),
        None => (inner, ""),
    };
    let unknown = "${HANGAR_MAKE_VALUE}".to_owned();
    match func {
        "shell" => {
            let cmd = expand(arg, vars, fx, depth + 1);
            fx.shell.push(cmd);
            unknown
        }
        "file" => {
            let target = arg.split(',').next().unwrap_or("").trim();
            if let Some(path) = target
                .strip_prefix(">>")
                .or_else(|| target.strip_prefix('>'))
            {
                fx.writes.push(path.trim().to_owned());
            } else if let Some(path) = target.strip_prefix('<') {
                fx.named.push(path.trim().to_owned());
            }
            unknown
        }
        "eval" => {
            if arg.contains('$') {
                fx.opaque
                    .push("it evaluates makefile text built at run time".into());
            } else {
                read_at(arg, fx, depth + 1);
            }
            String::new()
        }
        "guile" | "load" => {
            fx.opaque.push("it loads code into make".into());
            unknown
        }
        _ if arg.is_empty() => match vars.get(inner) {
            Some(v) => v.clone(),
            None => unknown,
        },
        _ => {
            // Other functions: their arguments may hold `$(shell …)`.
            let _ = expand(arg, vars, fx, depth + 1);
            unknown
        }
    }
}
