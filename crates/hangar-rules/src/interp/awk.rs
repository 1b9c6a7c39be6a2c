//! awk programs: `system(CMD)`, `CMD | getline`, `print … | CMD`, `print … > FILE`,
//! `getline < FILE`, `ENVIRON["HOME"]`, gawk's `@load`.

use super::lex::{self, Syntax, Tok};
use super::{Code, Effects};
use crate::paths::ANY;
use crate::shell::Arg;

/// awk's options: `-f PROGFILE` (also gawk's `-E`), gawk's `-e`/`--source` program text,
/// `-F`, `-v`, and the first operand as the program otherwise.
pub(super) fn code_of(args: &[Arg]) -> Code {
    let mut c = Code::default();
    let mut i = 0;
    let mut has_file = false;
    while i < args.len() {
        let Some(s) = args[i].lit() else { break };
        if s == "--" {
            i += 1;
            break;
        }
        if !s.starts_with('-') || s == "-" {
            break;
        }
        if let Some(long) = s.strip_prefix("--") {
            let (k, v) = match long.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (long, None),
            };
            let takes = matches!(
                k,
                "file" | "source" | "exec" | "field-separator" | "assign" | "include" | "load"
            );
            let value = match v {
                Some(v) => Some(Arg::Lit(v.to_owned())),
                None if takes => {
                    i += 1;
                    args.get(i).cloned()
                }
                None => None,
            };
            match k {
                "source" => c.inline.extend(value),
                "file" | "exec" => {
                    has_file = true;
                    if c.file.is_none() && v.is_none() {
                        c.file = Some(i);
                    }
                }
                _ => {}
            }
            i += 1;
            continue;
        }
        let flag = s[1..].chars().next().unwrap_or('-');
        let attached = &s[1 + flag.len_utf8()..];
        let value_at = if attached.is_empty() { i + 1 } else { i };
        match flag {
            'f' | 'E' => {
                has_file = true;
                if c.file.is_none() {
                    c.file = Some(value_at);
                }
            }
            'e' => c.inline.push(if attached.is_empty() {
                args.get(i + 1).cloned().unwrap_or(Arg::Lit(String::new()))
            } else {
                Arg::Lit(attached.to_owned())
            }),
            _ => {}
        }
        i += if matches!(flag, 'f' | 'E' | 'e' | 'F' | 'v' | 'i' | 'l') && attached.is_empty() {
            2
        } else {
            1
        };
    }
    if c.inline.is_empty() && !has_file {
        c.inline.extend(args.get(i).cloned());
    }
    c
}

/// What an awk program does.
pub(super) fn read(code: &str, fx: &mut Effects) {
    let toks = lex::lex(code, Syntax::Awk).toks;
    let n = toks.len();
    let close = super::calls::brackets(&toks);
    let is = |i: usize, p: &str| matches!(toks.get(i), Some(Tok::Punct(q)) if *q == p);
    let ident = |i: usize| match toks.get(i) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Str(s) if !s.is_empty() => fx.named.push(s.clone()),
            Tok::Computed => fx
                .opaque
                .push("its program is only known at run time".into()),
            _ => {}
        }
        // system(CMD)
        if ident(i) == Some("system") && is(i + 1, "(") {
            let end = close[i + 1].max(i + 2).min(n);
            fx.shell.push(concat(&toks[i + 2..end]));
        }
        // CMD | getline
        if (is(i, "|") || is(i, "|&")) && ident(i + 1) == Some("getline") {
            let start = expression_start(&toks, i);
            fx.shell.push(concat(&toks[start..i]));
        }
        // getline < FILE: read, named above.
        // print … | CMD, print … > FILE
        if matches!(ident(i), Some("print" | "printf")) {
            let mut k = i + 1;
            while k < n {
                match &toks[k] {
                    // The next statement's keyword: this one ended without a `;`.
                    Tok::Ident(w) if matches!(w.as_str(), "print" | "printf") => break,
                    Tok::Punct("(" | "[" | "{") => {
                        k = close[k].max(k) + 1;
                        continue;
                    }
                    Tok::Punct(";" | "}" | ")" | "]") | Tok::Newline => break,
                    Tok::Punct(p @ ("|" | "|&" | ">" | ">>")) => {
                        let end = statement_end(&toks, &close, k + 1);
                        let target = concat(&toks[k + 1..end]);
                        if p.starts_with('|') {
                            fx.shell.push(target);
                        } else {
                            fx.writes.push(target);
                        }
                        break;
                    }
                    _ => {}
                }
                k += 1;
            }
        }
        if is(i, "@") && matches!(ident(i + 1), Some("load")) {
            fx.opaque.push("it loads a native extension".into());
        }
    }
}

/// Where the statement that continues at `from` ends.
fn statement_end(toks: &[Tok], close: &[usize], from: usize) -> usize {
    let mut k = from;
    while k < toks.len() {
        match &toks[k] {
            Tok::Punct("(" | "[" | "{") => {
                k = close[k].max(k) + 1;
                continue;
            }
            Tok::Punct(";" | "}" | ")" | "]") | Tok::Newline => return k,
            Tok::Ident(w) if matches!(w.as_str(), "print" | "printf") => return k,
            _ => {}
        }
        k += 1;
    }
    toks.len()
}

/// Where the expression that ends before `at` starts (awk concatenates by juxtaposition).
fn expression_start(toks: &[Tok], at: usize) -> usize {
    let mut depth = 0usize;
    let mut k = at;
    while k > 0 {
        match &toks[k - 1] {
            Tok::Punct(")" | "]") => depth += 1,
            Tok::Punct("(" | "[") if depth > 0 => depth -= 1,
            Tok::Punct("(" | "{" | ";" | "," | "=" | "&&" | "||" | "}") | Tok::Newline
                if depth == 0 =>
            {
                return k;
            }
            Tok::Ident(w)
                if depth == 0
                    && matches!(
                        w.as_str(),
                        "while" | "if" | "print" | "printf" | "return" | "getline"
                    ) =>
            {
                return k;
            }
            _ => {}
        }
        k -= 1;
    }
    0
}

/// The value of an awk expression: its strings joined, [`ANY`] for the rest;
/// `ENVIRON["HOME"]` is the home.
fn concat(toks: &[Tok]) -> String {
    let mut out = String::new();
    let mut k = 0;
    let mut unknown = false;
    while k < toks.len() {
        match &toks[k] {
            Tok::Str(s) => {
                if unknown {
                    out.push(ANY);
                    unknown = false;
                }
                out.push_str(s);
            }
            Tok::Ident(e) if e == "ENVIRON" => {
                if let (Some(Tok::Punct("[")), Some(Tok::Str(v)), Some(Tok::Punct("]"))) =
                    (toks.get(k + 1), toks.get(k + 2), toks.get(k + 3))
                {
                    if unknown {
                        out.push(ANY);
                        unknown = false;
                    }
                    match v.as_str() {
                        "HOME" => out.push('~'),
                        _ => out.push(ANY),
                    }
                    k += 4;
                    continue;
                }
                unknown = true;
            }
            Tok::Punct("(" | ")") => {}
            _ => unknown = true,
        }
        k += 1;
    }
    if unknown || out.is_empty() {
        out.push(ANY);
    }
    out
}
