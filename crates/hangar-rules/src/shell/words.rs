//! Words and what they stand for: a parameter's shape, literal `echo` output, ANSI-C and
//! backquote escapes, job specs, glob characters.

use brush_parser::ast::{Command, CommandPrefixOrSuffixItem, CompoundList};
use brush_parser::word::{self, ParameterExpr, WordPiece};

use super::{Arg, JOB, SECRET_ROOTS, parse_word};
use crate::paths::{ANY, DIGITS};

/// What a parameter expansion stands for in a word's shape.
pub(super) enum ParamShape {
    /// `$HOME`: the home, when known.
    Home,
    /// `$HANGAR_HOME`, `$CODEX_HOME`, …: [`root_shape`].
    Root(&'static str),
    /// A mark: [`DIGITS`] for the numbers the shell keeps (`$$`, `$PPID`, …), [`JOB`] for
    /// `$!`, [`ANY`] for the rest.
    Mark(char),
}

pub(super) fn parameter_shape(expr: &ParameterExpr) -> ParamShape {
    let ParameterExpr::Parameter {
        parameter,
        indirect: false,
    } = expr
    else {
        return ParamShape::Mark(ANY);
    };
    match parameter {
        word::Parameter::Named(n) => match n.as_str() {
            "HOME" => ParamShape::Home,
            n if SECRET_ROOTS.contains(&n) => ParamShape::Root(
                SECRET_ROOTS
                    .iter()
                    .find(|r| **r == n)
                    .copied()
                    .unwrap_or(""),
            ),
            "PPID" | "BASHPID" | "UID" | "EUID" | "RANDOM" | "SRANDOM" | "SECONDS" | "LINENO"
            | "EPOCHSECONDS" => ParamShape::Mark(DIGITS),
            _ => ParamShape::Mark(ANY),
        },
        word::Parameter::Special(sp) => match sp {
            word::SpecialParameter::LastBackgroundProcessId => ParamShape::Mark(JOB),
            word::SpecialParameter::ProcessId
            | word::SpecialParameter::LastExitStatus
            | word::SpecialParameter::PositionalParameterCount => ParamShape::Mark(DIGITS),
            _ => ParamShape::Mark(ANY),
        },
        _ => ParamShape::Mark(ANY),
    }
}

/// Whether a path is written as `.` or `..` as its last component (`rm` refuses those).
pub(super) fn names_a_dot(s: &str) -> bool {
    let t = s.trim_end_matches('/');
    let last = t.rsplit('/').next().unwrap_or(t);
    !t.is_empty() && (last == "." || last == "..")
}

pub(super) fn shown(a: &Arg) -> String {
    match a {
        Arg::Lit(s) => format!("{s:?}"),
        Arg::Computed(s) => format!("{:?}", shown_shape(s)),
    }
}

/// A shape as the agent reads it: `…` where a value is only known at run time.
pub(super) fn shown_shape(s: &str) -> String {
    s.replace(ANY, "…")
        .replace(DIGITS, "<number>")
        .replace(JOB, "$!")
        .replace('\u{3}', "$")
}

/// The non-empty lines of literal text (what `parallel` reads as arguments).
pub(super) fn literal_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// What a process substitution's or `$(…)`'s list writes when it is one literal `echo` or
/// `printf`.
pub(super) fn list_literal_output(list: &CompoundList) -> Option<String> {
    let [item] = list.0.as_slice() else {
        return None;
    };
    if !item.0.additional.is_empty() {
        return None;
    }
    let [cmd] = item.0.first.seq.as_slice() else {
        return None;
    };
    literal_echo(cmd)
}

/// Whether `kill ARGS` is aimed only at the shell's own jobs (`%1`, `%%`, `$!`): what job
/// control does, and nothing of hangar's.
pub(super) fn own_jobs(args: &[Arg]) -> bool {
    let mut targets = Vec::new();
    let mut i = 0;
    let mut options = true;
    while i < args.len() {
        match &args[i] {
            Arg::Lit(s) if options && s == "--" => options = false,
            Arg::Lit(s) if options && (s == "-s" || s == "-n") => i += 1,
            Arg::Lit(s) if options && i == 0 && s.starts_with('-') && s.len() > 1 => {
                // The signal (`-9`, `-TERM`, `-SIGKILL`); a later `-1` is a pid.
                if s == "-l" || s == "-L" {
                    return false;
                }
            }
            a => {
                options = false;
                targets.push(a);
            }
        }
        i += 1;
    }
    !targets.is_empty()
        && targets.iter().all(|a| match a {
            Arg::Lit(s) => s.starts_with('%'),
            Arg::Computed(s) => s == &JOB.to_string(),
        })
}

/// Whether unquoted text holds a glob pattern (`*`, `?`, or a `[...]` class; a lone `[` is
/// the test command).
pub(super) fn is_pattern(t: &str) -> bool {
    t.contains(['*', '?']) || t.find('[').is_some_and(|i| t[i + 1..].contains(']'))
}

/// `echo 'x'` / `printf 'x'` with literal arguments: what it writes (roughly).
pub(super) fn literal_echo(cmd: &Command) -> Option<String> {
    let Command::Simple(sc) = cmd else {
        return None;
    };
    let name = sc.word_or_name.as_ref()?.value.as_str();
    if name != "echo" && name != "printf" {
        return None;
    }
    let mut parts = Vec::new();
    for item in sc.suffix.iter().flat_map(|s| s.0.iter()) {
        if let CommandPrefixOrSuffixItem::Word(w) = item {
            let pieces = parse_word(&w.value).ok()?;
            let mut s = String::new();
            for p in &pieces {
                match &p.piece {
                    WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => s.push_str(t),
                    WordPiece::EscapeSequence(e) => s.push_str(e.strip_prefix('\\').unwrap_or(e)),
                    WordPiece::DoubleQuotedSequence(inner) => {
                        for q in inner {
                            match &q.piece {
                                WordPiece::Text(t) => s.push_str(t),
                                WordPiece::EscapeSequence(e) => {
                                    s.push_str(e.strip_prefix('\\').unwrap_or(e))
                                }
                                _ => return None,
                            }
                        }
                    }
                    _ => return None,
                }
            }
            if !(parts.is_empty() && s.starts_with('-')) {
                parts.push(s);
            }
        }
    }
    Some(parts.join(" ").replace("\\n", "\n"))
}

/// Backslashes inside backquotes escape `$`, `` ` `` and `\`.
pub(super) fn unescape_backquoted(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && matches!(chars.peek(), Some('$' | '`' | '\\')) {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Decodes `$'...'`; `None` for an escape it does not know (the word is then computed).
pub(super) fn ansi_c(raw: &str) -> Option<String> {
    let body = raw
        .strip_prefix("$'")
        .and_then(|r| r.strip_suffix('\''))
        .unwrap_or(raw);
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut hex = String::new();
                while hex.len() < max && chars.peek().is_some_and(char::is_ascii_hexdigit) {
                    hex.extend(chars.next());
                }
                let n = u32::from_str_radix(&hex, 16).ok()?;
                out.push(char::from_u32(n)?);
            }
            '0'..='7' => {
                let mut oct = String::from(e);
                while oct.len() < 3 && chars.peek().is_some_and(|c| ('0'..='7').contains(c)) {
                    oct.extend(chars.next());
                }
                let n = u32::from_str_radix(&oct, 8).ok()?;
                out.push(char::from_u32(n)?);
            }
            _ => return None,
        }
    }
    Some(out)
}
