//! Reading calls out of a token stream ([`super::lex`]): each call's callee is resolved
//! through the names the code binds (`import subprocess as sp`, `const cp =
//! require("child_process")`, `from os import system`), looked up in the language's table
//! ([`super::tables`]), and its arguments are evaluated as far as they are literal: strings,
//! concatenations (`"/proc/" + pid + "/environ"` is `/proc/…/environ`), lists, the home
//! (`os.path.expanduser("~")`, `Path.home()`), path joins. What the table says the call does
//! (runs a shell, runs a program, deletes, writes, evaluates code) becomes an [`Effects`]
//! entry; what cannot be read becomes a reason in [`Effects::opaque`].

use std::collections::HashMap;

use super::Effects;
use super::lex::{Syntax, Tok};
use super::tables::{Effect, Table};
use crate::paths::{ANY, DIGITS};

/// How deep evaluated code (`exec("…")`) and nested values are read.
const MAX_EVAL_DEPTH: usize = 8;
/// The most segments of one chain (`a.b(c)[d]…`) read; a longer one cannot be read (and
/// reading it would take time quadratic in its length).
const MAX_CHAIN: usize = 64;
/// The most tokens a call without parentheses (`system "a", "b"`) takes as its arguments.
const MAX_PAREN_LESS: usize = 1024;

/// A value as far as it is known.
#[derive(Clone, Debug)]
enum Val {
    /// A string (a shape: [`ANY`] where only the run knows).
    Str(String),
    /// A list or tuple of values.
    List(Vec<Val>),
    /// A path object (`Path("x")`, `Pathname.new("x")`).
    Path(String),
    /// A keyword argument (`shell=True`): not a positional one.
    Kw,
    /// A module or a function of one (`os`, `subprocess.run`).
    Module,
    /// Unknown.
    Unknown,
}

impl Val {
    /// The string this value stands for in a concatenation.
    fn shape(&self) -> String {
        match self {
            Val::Str(s) | Val::Path(s) => s.clone(),
            _ => ANY.to_string(),
        }
    }
}

/// One segment of a postfix chain: `a.b(c)[d]`.
#[derive(Clone, Debug)]
enum Seg {
    Name(String),
    /// A call's argument ranges (token index ranges).
    Args(Vec<(usize, usize)>),
    /// A subscript's range.
    Index(usize, usize),
    /// A literal the chain starts with (`"x".encode()`).
    Lit(Val),
}

pub(super) struct Reader<'a> {
    toks: &'a [Tok],
    /// For each opening bracket, the index of its closing one.
    close: Vec<usize>,
    table: &'static Table,
    aliases: HashMap<String, String>,
    /// Token indexes that bind names (import statements): not calls or references.
    binding: Vec<bool>,
    pub(super) fx: &'a mut Effects,
    depth: usize,
}

/// Reads the calls of `toks` with `table` into `fx`; `depth` counts evaluated code.
pub(super) fn read(toks: &[Tok], table: &'static Table, fx: &mut Effects, depth: usize) {
    if depth > MAX_EVAL_DEPTH {
        fx.opaque
            .push("it evaluates code nested too deeply to read".into());
        return;
    }
    let mut r = Reader {
        toks,
        close: brackets(toks),
        table,
        aliases: HashMap::new(),
        binding: vec![false; toks.len()],
        fx,
        depth,
    };
    r.bindings();
    r.scan();
}

/// Matches brackets: `close[i]` is the index of the bracket closing the one at `i` (or the
/// end when it is not closed); other tokens point at themselves.
pub(super) fn brackets(toks: &[Tok]) -> Vec<usize> {
    let mut close: Vec<usize> = (0..toks.len()).collect();
    let mut stack: Vec<(usize, &str)> = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Punct(p @ ("(" | "[" | "{")) => stack.push((i, p)),
            Tok::Punct(p @ (")" | "]" | "}")) => {
                let want = match *p {
                    ")" => "(",
                    "]" => "[",
                    _ => "{",
                };
                // Unbalanced closers close what is open up to their match.
                while let Some((at, open)) = stack.pop() {
                    close[at] = i;
                    if open == want {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    for (at, _) in stack {
        close[at] = toks.len().saturating_sub(1);
    }
    close
}

impl Reader<'_> {
    fn tok(&self, i: usize) -> Option<&Tok> {
        self.toks.get(i)
    }

    fn is(&self, i: usize, p: &str) -> bool {
        matches!(self.tok(i), Some(Tok::Punct(q)) if *q == p)
    }

    fn ident(&self, i: usize) -> Option<&str> {
        match self.tok(i) {
            Some(Tok::Ident(n)) => Some(n),
            _ => None,
        }
    }

    /// Names the code binds to modules and functions, and the tokens that only bind.
    fn bindings(&mut self) {
        let n = self.toks.len();
        let mut i = 0;
        while i < n {
            match (self.table.syntax, self.ident(i)) {
                (Syntax::Python, Some("import")) if self.statement_start(i) => {
                    i = self.python_import(i, None);
                    continue;
                }
                (Syntax::Python, Some("from")) if self.statement_start(i) => {
                    let (module, at) = self.dotted(i + 1);
                    if self.ident(at) == Some("import") {
                        self.binding[i..at.min(n)].fill(true);
                        i = self.python_import(at, Some(module));
                        continue;
                    }
                }
                (Syntax::Js, Some("import")) if self.statement_start(i) && !self.is(i + 1, "(") => {
                    i = self.js_import(i);
                    continue;
                }
                _ => {}
            }
            // NAME = chain  (also `const NAME =`, `my $NAME =`): an alias when the chain is a
            // module or a function of one.
            if let Some(name) = self.ident(i).map(str::to_owned)
                && self.is(i + 1, "=")
                && !self.is(i + 2, "=")
            {
                let (segs, end) = self.chain(i + 2);
                if self.expression_end(end)
                    && let Some(canon) = self.canonical(&segs)
                    && self.table.is_module_or_call(&canon)
                {
                    self.aliases.insert(name, canon);
                    self.binding[i] = true;
                    // The chain itself is a reference, not something passed around.
                    self.binding[i + 2..end.min(n)].fill(true);
                }
            }
            // JS: const { a, b: c } = require("m")
            if self.table.syntax == Syntax::Js && self.is(i, "{") {
                let end = self.close[i];
                if self.is(end + 1, "=") {
                    let (segs, after) = self.chain(end + 2);
                    if self.expression_end(after)
                        && let Some(canon) = self.canonical(&segs)
                    {
                        self.destructure(i + 1, end, &canon);
                        self.binding[i..after.min(n)].fill(true);
                    }
                }
            }
            i += 1;
        }
    }

    fn statement_start(&self, i: usize) -> bool {
        i == 0 || matches!(self.tok(i - 1), Some(Tok::Newline | Tok::Punct(";" | ":")))
    }

    fn expression_end(&self, i: usize) -> bool {
        matches!(
            self.tok(i),
            None | Some(Tok::Newline | Tok::Punct(";" | ")" | "}" | ","))
        )
    }

    /// A dotted name from `i` (`os.path`): its text and where it ends.
    fn dotted(&self, mut i: usize) -> (String, usize) {
        let mut name = String::new();
        while let Some(part) = self.ident(i) {
            name.push_str(part);
            i += 1;
            if self.is(i, ".") && self.ident(i + 1).is_some() {
                name.push('.');
                i += 1;
            } else {
                break;
            }
        }
        (name, i)
    }

    /// `import a.b as c, d` or, after `from m`, `import x as y, *`: the aliases; returns where
    /// the statement ends.
    fn python_import(&mut self, start: usize, module: Option<String>) -> usize {
        let mut i = start + 1;
        let n = self.toks.len();
        if self.is(i, "(") {
            i += 1;
        }
        loop {
            if self.is(i, "*") {
                if let Some(m) = &module {
                    self.aliases.insert(format!("*{m}"), m.clone());
                }
                i += 1;
            } else {
                let (name, at) = self.dotted(i);
                if name.is_empty() {
                    break;
                }
                i = at;
                let full = match &module {
                    Some(m) => format!("{m}.{name}"),
                    None => name.clone(),
                };
                let local = if self.ident(i) == Some("as") {
                    let local = self.ident(i + 1).unwrap_or("").to_owned();
                    i += 2;
                    local
                } else if module.is_some() {
                    name.clone()
                } else {
                    // `import os.path` binds `os`.
                    name.split('.').next().unwrap_or("").to_owned()
                };
                let target = if module.is_none() && local == name.split('.').next().unwrap_or("") {
                    local.clone()
                } else {
                    full
                };
                self.aliases.insert(local, target);
            }
            if self.is(i, ",") {
                i += 1;
                continue;
            }
            break;
        }
        if self.is(i, ")") {
            i += 1;
        }
        self.binding[start..i.min(n)].fill(true);
        i
    }

    /// `import X from "m"`, `import * as X from "m"`, `import { a as b } from "m"`.
    fn js_import(&mut self, start: usize) -> usize {
        let n = self.toks.len();
        let mut end = start + 1;
        while end < n && !matches!(self.tok(end), Some(Tok::Str(_))) {
            if matches!(self.tok(end), Some(Tok::Newline | Tok::Punct(";"))) {
                break;
            }
            end += 1;
        }
        let Some(Tok::Str(m)) = self.tok(end) else {
            return start + 1;
        };
        let module = self.table.module_name(m);
        let mut i = start + 1;
        while i < end {
            if self.is(i, "*") && self.ident(i + 1) == Some("as") {
                if let Some(x) = self.ident(i + 2) {
                    self.aliases.insert(x.to_owned(), module.clone());
                }
                i += 3;
            } else if self.is(i, "{") {
                let close = self.close[i].min(end);
                self.destructure(i + 1, close, &module);
                i = close + 1;
            } else if let Some(x) = self.ident(i).filter(|x| *x != "from") {
                self.aliases.insert(x.to_owned(), module.clone());
                i += 1;
            } else {
                i += 1;
            }
        }
        self.binding[start..(end + 1).min(n)].fill(true);
        end + 1
    }

    /// `{ a, b: c, d as e }` between `from` and `to`, bound to members of `canon`.
    fn destructure(&mut self, from: usize, to: usize, canon: &str) {
        let mut i = from;
        while i < to {
            if let Some(member) = self.ident(i) {
                let local = if (self.is(i + 1, ":") || self.ident(i + 1) == Some("as"))
                    && self.ident(i + 2).is_some()
                {
                    i += 2;
                    self.ident(i).unwrap_or(member)
                } else {
                    member
                };
                self.aliases
                    .insert(local.to_owned(), format!("{canon}.{member}"));
            }
            i += 1;
        }
    }

    /// A postfix chain from `i`: `name(.name | (args) | [index])*`; its segments and where
    /// it ends. Empty when no chain starts at `i`.
    fn chain(&self, mut i: usize) -> (Vec<Seg>, usize) {
        let mut segs = Vec::new();
        match self.tok(i) {
            Some(Tok::Ident(n)) => segs.push(Seg::Name(n.clone())),
            Some(Tok::Str(s)) => segs.push(Seg::Lit(Val::Str(s.clone()))),
            Some(Tok::Punct(":")) if self.table.syntax == Syntax::Ruby => match self.tok(i + 1) {
                // A symbol.
                Some(Tok::Ident(n)) => {
                    segs.push(Seg::Lit(Val::Str(n.clone())));
                    i += 1;
                }
                _ => return (segs, i),
            },
            _ => return (segs, i),
        }
        i += 1;
        while segs.len() < MAX_CHAIN {
            match self.tok(i) {
                Some(Tok::Punct("." | "::" | "->")) => match self.tok(i + 1) {
                    Some(Tok::Ident(n)) => {
                        segs.push(Seg::Name(n.clone()));
                        i += 2;
                    }
                    Some(Tok::Punct("(")) => i += 1,
                    Some(Tok::Punct("[" | "{")) if self.table.syntax == Syntax::Perl => i += 1,
                    _ => break,
                },
                Some(Tok::Punct("(")) => {
                    let end = self.close[i];
                    segs.push(Seg::Args(self.split(i + 1, end)));
                    i = end + 1;
                }
                Some(Tok::Punct("[")) => {
                    let end = self.close[i];
                    segs.push(Seg::Index(i + 1, end));
                    i = end + 1;
                }
                // Perl's `$ENV{HOME}`, `$h->{k}` (after a bare name, `{` opens a block).
                Some(Tok::Punct("{"))
                    if self.table.syntax == Syntax::Perl
                        && (matches!(segs.last(), Some(Seg::Name(n)) if n.starts_with(['$', '@', '%']))
                            || matches!(segs.last(), Some(Seg::Index(..)))
                            || self.is(i.wrapping_sub(1), "->")) =>
                {
                    let end = self.close[i];
                    segs.push(Seg::Index(i + 1, end));
                    i = end + 1;
                }
                // Lua's `f "str"` and `f [[str]]`.
                Some(Tok::Str(_)) if self.table.syntax == Syntax::Lua => {
                    segs.push(Seg::Args(vec![(i, i + 1)]));
                    i += 1;
                }
                _ => break,
            }
        }
        (segs, i)
    }

    /// Splits `from..to` at its top-level commas (and Perl's `=>`).
    fn split(&self, from: usize, to: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut start = from;
        let mut i = from;
        while i < to {
            match self.tok(i) {
                Some(Tok::Punct("(" | "[" | "{")) => {
                    i = self.close[i].max(i) + 1;
                    continue;
                }
                Some(Tok::Punct(",")) | Some(Tok::Punct("=>"))
                    if self.table.syntax == Syntax::Perl || self.is(i, ",") =>
                {
                    if start < i {
                        out.push((start, i));
                    }
                    start = i + 1;
                }
                _ => {}
            }
            i += 1;
        }
        if start < to {
            out.push((start, to));
        }
        out
    }

    /// The dotted name a chain's callee stands for, through the aliases.
    fn canonical(&self, segs: &[Seg]) -> Option<String> {
        let mut out = String::new();
        let mut k = 0;
        while k < segs.len() {
            match &segs[k] {
                Seg::Name(n) => {
                    if k == 0 {
                        match self.aliases.get(n) {
                            Some(a) => out.push_str(a),
                            // `from os import *`: a bare name may be the module's.
                            None => match self.star_module(n) {
                                Some(m) => {
                                    out.push_str(&m);
                                    out.push('.');
                                    out.push_str(n);
                                }
                                None => out.push_str(n),
                            },
                        }
                    } else {
                        out.push('.');
                        out.push_str(n);
                    }
                }
                // `require("m")`, `__import__("m")`, `getattr(x, "n")`.
                Seg::Args(args) => {
                    let callee = out.clone();
                    match self.table.lookup(&callee, k > 1) {
                        Some(Effect::Loader(a)) => {
                            let Val::Str(m) = self.arg(args, a.into()) else {
                                return None;
                            };
                            out = self.table.module_name(&m);
                        }
                        Some(Effect::Getattr) => {
                            let (Some(&(s, e)), Val::Str(attr)) = (args.first(), self.arg(args, 1))
                            else {
                                return None;
                            };
                            let (inner, end) = self.chain(s);
                            if end != e {
                                return None;
                            }
                            out = format!("{}.{attr}", self.canonical(&inner)?);
                        }
                        _ => return None,
                    }
                }
                Seg::Index(s, e) => match self.value(*s, *e, 0) {
                    Val::Str(n) if !n.contains(ANY) && k > 0 => {
                        out.push('.');
                        out.push_str(&n);
                    }
                    _ => return None,
                },
                Seg::Lit(_) => return None,
            }
            k += 1;
        }
        Some(self.table.normalize(&out))
    }

    /// The module imported with `*` that `name` belongs to, as far as the table knows.
    fn star_module(&self, name: &str) -> Option<String> {
        self.aliases
            .iter()
            .filter(|(k, _)| k.starts_with('*'))
            .map(|(_, m)| m)
            .find(|m| self.table.lookup(&format!("{m}.{name}"), true).is_some())
            .cloned()
    }

    /// The value of argument `k` of a call.
    fn arg(&self, args: &[(usize, usize)], k: usize) -> Val {
        match args.get(k) {
            Some(&(s, e)) => self.value(s, e, 0),
            None => Val::Unknown,
        }
    }

    /// The value of the expression `from..to`.
    fn value(&self, from: usize, to: usize, depth: usize) -> Val {
        if from >= to || depth > MAX_EVAL_DEPTH {
            return Val::Unknown;
        }
        // `name=value` (Python keyword), `name: value` (Ruby, JS objects).
        if let Some(n) = self.ident(from)
            && to > from + 2
            && ((self.is(from + 1, "=") && self.table.syntax == Syntax::Python)
                || self.is(from + 1, ":"))
        {
            let _ = n;
            return Val::Kw;
        }
        // A list: `[…]`, or Perl's `(…)`.
        if (self.is(from, "[") || (self.is(from, "(") && self.table.syntax == Syntax::Perl))
            && self.close[from] + 1 == to
        {
            let items = self
                .split(from + 1, self.close[from])
                .into_iter()
                .map(|(s, e)| self.value(s, e, depth + 1))
                .collect();
            return Val::List(items);
        }
        // Perl's `qw(…)` and bare comma lists: several values.
        let parts = self.split(from, to);
        if parts.len() > 1 && self.table.syntax == Syntax::Perl {
            return Val::List(
                parts
                    .into_iter()
                    .map(|(s, e)| self.value(s, e, depth + 1))
                    .collect(),
            );
        }
        // Operands joined by the language's concatenation (or Python's `/` on paths).
        let mut vals = Vec::new();
        let mut i = from;
        let mut path_join = false;
        while i < to {
            let (v, end) = self.operand(i, to, depth);
            vals.push(v);
            i = end;
            if i >= to {
                break;
            }
            match self.tok(i) {
                Some(Tok::Punct(p)) if self.table.concat.contains(p) => i += 1,
                Some(Tok::Punct("/"))
                    if matches!(vals.last(), Some(Val::Path(_)))
                        || (self.table.syntax == Syntax::Python
                            && matches!(vals.last(), Some(Val::Str(_)))) =>
                {
                    path_join = true;
                    i += 1;
                }
                // Adjacent literals (Python's implicit concatenation).
                Some(Tok::Str(_)) => {}
                _ => return Val::Unknown,
            }
        }
        if vals.len() == 1 {
            return vals.pop().unwrap_or(Val::Unknown);
        }
        if path_join {
            let mut p = String::new();
            for v in &vals {
                p = join(&p, &v.shape());
            }
            return Val::Path(p);
        }
        if vals.iter().any(|v| matches!(v, Val::Str(_))) {
            Val::Str(vals.iter().map(Val::shape).collect())
        } else {
            Val::Unknown
        }
    }

    /// One operand from `i` (before `to`): its value and where it ends.
    fn operand(&self, i: usize, to: usize, depth: usize) -> (Val, usize) {
        match self.tok(i) {
            Some(Tok::Str(s)) => {
                let (shape, after) = self.interpolated(i, s);
                // A literal may be the start of a chain (`"x".join(…)`): then it is unknown.
                let (segs, end) = self.chain(after.saturating_sub(1));
                if segs.len() > 1 {
                    return (Val::Unknown, end.min(to).max(after));
                }
                (Val::Str(shape), after)
            }
            Some(Tok::Num) => (Val::Str(DIGITS.to_string()), i + 1),
            Some(Tok::Punct("(")) => {
                let end = self.close[i];
                (self.value(i + 1, end, depth + 1), end + 1)
            }
            Some(Tok::Ident(_)) | Some(Tok::Punct(":")) => {
                let (segs, end) = self.chain(i);
                if segs.is_empty() {
                    return (Val::Unknown, i + 1);
                }
                (self.chain_value(&segs, depth), end.max(i + 1))
            }
            _ => (Val::Unknown, i + 1),
        }
    }

    /// The shape of the literal `s` at `i` with its interpolations (the token after it) put in
    /// where their value is known (`${os.homedir()}/.ssh` is `~/.ssh`), and where it ends.
    fn interpolated(&self, i: usize, s: &str) -> (String, usize) {
        let Some(Tok::Interp(pieces)) = self.tok(i + 1) else {
            return (s.to_owned(), i + 1);
        };
        let mut shape = s.to_owned();
        for (at, code) in pieces.iter().rev() {
            if shape.get(*at..).is_none_or(|rest| !rest.starts_with(ANY))
                || self.depth >= MAX_EVAL_DEPTH
            {
                continue;
            }
            let toks = super::lex::lex(code, self.table.syntax).toks;
            let mut scratch = Effects::default();
            let sub = Reader {
                toks: &toks,
                close: brackets(&toks),
                table: self.table,
                aliases: self.aliases.clone(),
                binding: vec![false; toks.len()],
                fx: &mut scratch,
                depth: self.depth + 1,
            };
            if let Val::Str(v) | Val::Path(v) = sub.value(0, toks.len(), 1) {
                shape.replace_range(*at..*at + ANY.len_utf8(), &v);
            }
        }
        (shape, i + 2)
    }

    /// What a chain evaluates to, when the rules know: the home, an environment variable, a
    /// path join, a path object, a module.
    fn chain_value(&self, segs: &[Seg], depth: usize) -> Val {
        if depth > MAX_EVAL_DEPTH {
            return Val::Unknown;
        }
        if let [Seg::Lit(v)] = segs {
            return v.clone();
        }
        // The home and environment variables, written as subscripts.
        if let Some(env) = self.env_subscript(segs) {
            return env;
        }
        let last_args = segs.iter().rposition(|s| matches!(s, Seg::Args(_)));
        let Some(k) = last_args else {
            return match self.canonical(segs) {
                Some(c) if self.table.is_module_or_call(&c) => Val::Module,
                Some(c) if self.table.home_names.contains(&c.as_str()) => Val::Str("~".into()),
                _ => Val::Unknown,
            };
        };
        let Seg::Args(args) = &segs[k] else {
            return Val::Unknown;
        };
        // A method of a path object: `Path("x").joinpath("y")`, `.expanduser()`.
        if k >= 2
            && let Seg::Name(method) = &segs[k - 1]
            && let Val::Path(base) = self.chain_value(&segs[..k - 1], depth + 1)
        {
            return match method.as_str() {
                "joinpath" | "join" => {
                    let mut p = base;
                    for a in args {
                        p = join(&p, &self.value(a.0, a.1, depth + 1).shape());
                    }
                    Val::Path(p)
                }
                "expanduser" | "resolve" | "absolute" | "expand_path" => Val::Path(base),
                _ => Val::Unknown,
            };
        }
        let Some(callee) = self.canonical(&segs[..k]) else {
            return Val::Unknown;
        };
        let value = match self.table.lookup(&callee, k > 1) {
            Some(Effect::Home) => Val::Str("~".into()),
            Some(Effect::EnvGet(a)) => match self.value_at(args, a.into(), depth) {
                Val::Str(n) => env_value(&n),
                _ => Val::Unknown,
            },
            Some(Effect::Join) => {
                let mut p = String::new();
                for a in args {
                    p = join(&p, &self.value(a.0, a.1, depth + 1).shape());
                }
                Val::Str(p)
            }
            Some(Effect::PathCtor(a)) => match self.value_at(args, a.into(), depth) {
                Val::Str(s) | Val::Path(s) => Val::Path(s),
                _ if args.is_empty() => Val::Path(".".into()),
                _ => Val::Path(ANY.to_string()),
            },
            Some(Effect::Loader(a)) => match self.value_at(args, a.into(), depth) {
                Val::Str(_) => Val::Module,
                _ => Val::Unknown,
            },
            _ => Val::Unknown,
        };
        if k + 1 == segs.len() {
            value
        } else {
            Val::Unknown
        }
    }

    fn value_at(&self, args: &[(usize, usize)], k: usize, depth: usize) -> Val {
        match args.get(k) {
            Some(&(s, e)) => self.value(s, e, depth + 1),
            None => Val::Unknown,
        }
    }

    /// `os.environ["HOME"]`, `process.env.HOME`, `ENV["HOME"]`, `$ENV{HOME}`, `$_SERVER['HOME']`.
    fn env_subscript(&self, segs: &[Seg]) -> Option<Val> {
        let (base, key) = match segs {
            [.., Seg::Index(s, e)] => {
                let base = &segs[..segs.len() - 1];
                let key = match (self.ident(*s), *e == s + 1) {
                    (Some(n), true) if self.table.syntax == Syntax::Perl => Val::Str(n.to_owned()),
                    _ => self.value(*s, *e, 1),
                };
                (base, key)
            }
            [.., Seg::Name(n)] => (&segs[..segs.len() - 1], Val::Str(n.clone())),
            _ => return None,
        };
        let canon = self.canonical(base)?;
        if !self.table.env_maps.contains(&canon.as_str()) {
            return None;
        }
        Some(match key {
            Val::Str(n) => env_value(&n),
            _ => Val::Unknown,
        })
    }

    /// Walks every token: each chain's calls and references, each concatenation's value.
    fn scan(&mut self) {
        let n = self.toks.len();
        let mut concat_until = 0;
        let mut i = 0;
        while i < n {
            match &self.toks[i] {
                Tok::Computed => {
                    self.fx
                        .opaque
                        .push("its code is only known at run time".into());
                }
                Tok::Cmd(s) => {
                    let (shape, _) = self.interpolated(i, s);
                    self.fx.shell.push(shape);
                }
                Tok::Code(code) => {
                    let code = code.clone();
                    super::read_code(self.table, &code, self.fx, self.depth + 1);
                }
                Tok::Interp(pieces) => {
                    // The code inside a string runs when the string is made.
                    for (_, code) in pieces.clone() {
                        super::read_code(self.table, &code, self.fx, self.depth + 1);
                    }
                }
                Tok::Str(s) => {
                    let (shape, _) = self.interpolated(i, s);
                    self.fx.named.push(shape);
                }
                Tok::Punct("(") => {
                    // A parenthesised value: a path the code may name (`(home / ".ssh")`).
                    if let Val::Str(v) | Val::Path(v) = self.value(i + 1, self.close[i], 0) {
                        self.fx.named.push(v);
                    }
                }
                _ => {}
            }
            // A concatenation: its value is a path the code may name.
            let starts_operand = match self.tok(i) {
                Some(Tok::Str(_) | Tok::Num | Tok::Punct("(")) => true,
                Some(Tok::Ident(_)) => {
                    i == 0 || !matches!(self.tok(i - 1), Some(Tok::Punct("." | "::" | "->")))
                }
                _ => false,
            };
            if i >= concat_until && starts_operand {
                let (_, end) = self.operand(i, n, 0);
                if end < n
                    && matches!(self.tok(end), Some(Tok::Punct(p)) if self.table.concat.contains(p))
                {
                    let mut stop = end;
                    while stop < n
                        && !matches!(
                            self.tok(stop),
                            Some(Tok::Newline | Tok::Punct(";" | "," | ")" | "]" | "}" | "="))
                        )
                    {
                        stop = self.close[stop].max(stop) + 1;
                    }
                    if let Val::Str(s) = self.value(i, stop.min(n), 0) {
                        self.fx.named.push(s);
                    }
                    concat_until = stop;
                }
            }
            let chain_start = matches!(self.tok(i), Some(Tok::Ident(_)))
                || (self.table.syntax == Syntax::Ruby && self.is(i, ":"));
            let after_member =
                i > 0 && matches!(self.tok(i - 1), Some(Tok::Punct("." | "::" | "->")));
            if chain_start && !after_member && !self.binding[i] {
                let (segs, end) = self.chain(i);
                if segs.len() >= MAX_CHAIN {
                    self.fx
                        .opaque
                        .push("a chain of calls too long to read".into());
                }
                self.calls(&segs, end);
            }
            i += 1;
        }
    }

    /// The calls a chain makes, and the dangerous functions it names without calling.
    fn calls(&mut self, segs: &[Seg], end: usize) {
        for k in 0..segs.len() {
            let called = matches!(segs.get(k + 1), Some(Seg::Args(_)));
            if let Seg::Args(args) = &segs[k] {
                // Each argument's value is a path the code may name (`open(os.path.join(…))`).
                for &(s, e) in args {
                    match self.value(s, e, 0) {
                        Val::Str(v) | Val::Path(v) => self.fx.named.push(v),
                        Val::List(items) => self.fx.named.extend(items.iter().flat_map(flatten)),
                        _ => {}
                    }
                }
                self.call(&segs[..k], args);
                continue;
            }
            if matches!(segs[k], Seg::Index(..)) && called && self.table.syntax != Syntax::Perl {
                // `x[name](…)`: which function runs only the run knows.
                if self.canonical(&segs[..=k]).is_none() {
                    self.fx
                        .opaque
                        .push("it calls a function it looks up at run time".into());
                }
                continue;
            }
            if called || k + 1 != segs.len() || !matches!(segs[k], Seg::Name(_)) {
                continue;
            }
            // A reference to a function that runs or deletes, not called here: it is passed
            // around (`map(os.system, cmds)`).
            let Some(canon) = self.canonical(&segs[..=k]) else {
                continue;
            };
            let has_receiver = k > 0;
            if let Some(e) = self.table.lookup(&canon, has_receiver)
                && e.acts()
                && k + 1 == segs.len()
            {
                // Paren-less calls (Perl, Ruby): `system "cmd"`, `unlink $f`.
                if self.table.paren_less && self.paren_less_call(&segs[..=k], end, e) {
                    continue;
                }
                if self.table.syntax == Syntax::Ruby {
                    // Ruby calls a method named alone: `FileUtils.rm_rf` is a call.
                    self.effect(e, &[], None);
                    continue;
                }
                self.fx.opaque.push(format!(
                    "it refers to {canon} without calling it, so what it runs is only known at run time"
                ));
            }
        }
    }

    /// `system "rm", "-rf", "/"`: a call without parentheses, its arguments up to the end of
    /// the statement.
    fn paren_less_call(&mut self, segs: &[Seg], end: usize, e: Effect) -> bool {
        let n = self.toks.len();
        let starts_arg = match self.tok(end) {
            Some(Tok::Str(_) | Tok::Cmd(_) | Tok::Num | Tok::Computed) => true,
            Some(Tok::Ident(x)) => !matches!(
                x.as_str(),
                "if" | "unless"
                    | "and"
                    | "or"
                    | "not"
                    | "while"
                    | "until"
                    | "for"
                    | "foreach"
                    | "do"
                    | "then"
                    | "end"
                    | "x"
                    | "eq"
                    | "ne"
                    | "lt"
                    | "gt"
                    | "le"
                    | "ge"
            ),
            Some(Tok::Punct("[" | "{" | ":" | "\\" | "-" | "<")) => true,
            _ => false,
        };
        if !starts_arg {
            return false;
        }
        // `eval { … }` is a block, not a string.
        if self.is(end, "{") && matches!(e, Effect::Eval(_) | Effect::EvalIfStr(_)) {
            return true;
        }
        // `system { "sh" } …` / `exec { $x } …`: the program is picked apart from its name.
        if self.is(end, "{") && matches!(e, Effect::System(_)) {
            self.fx
                .opaque
                .push("it runs a program it names apart from its arguments".into());
            return true;
        }
        let mut stop = end;
        while stop < n {
            if stop - end > MAX_PAREN_LESS {
                self.fx
                    .opaque
                    .push("a call with too many arguments to read".into());
                break;
            }
            match self.tok(stop) {
                Some(Tok::Punct(";" | ")" | "}" | "]" | "||" | "&&")) | None => break,
                Some(Tok::Newline) if self.table.syntax != Syntax::Perl => break,
                Some(Tok::Ident(w))
                    if matches!(
                        w.as_str(),
                        "or" | "and" | "if" | "unless" | "while" | "until" | "do"
                    ) =>
                {
                    break;
                }
                Some(Tok::Punct("(" | "[" | "{")) => stop = self.close[stop] + 1,
                _ => stop += 1,
            }
        }
        let args = self.split(end, stop.min(n));
        self.call(segs, &args);
        true
    }

    /// One call: `segs(args)`.
    fn call(&mut self, segs: &[Seg], args: &[(usize, usize)]) {
        if segs.is_empty() {
            return;
        }
        // Ruby's `x.send(:system, …)`, `method(:system).call(…)`.
        if let Some((target, shift)) = self.sent(segs, args) {
            match target {
                Some(name) => {
                    if let Some(e) = self.table.lookup(&name, false) {
                        self.effect(e, &args[shift..], None);
                    }
                }
                None => self
                    .fx
                    .opaque
                    .push("it calls a method it names at run time".into()),
            }
            return;
        }
        // A method of a path object: `Path("/x").unlink()`.
        let receiver_path = match segs {
            [base @ .., Seg::Name(_)] if !base.is_empty() => match self.chain_value(base, 0) {
                Val::Path(p) => Some(p),
                _ => None,
            },
            _ => None,
        };
        if let (Some(p), [.., Seg::Name(m)]) = (&receiver_path, segs)
            && let Some(e) = self.table.path_method(m)
        {
            self.effect(e, args, Some(p.clone()));
            return;
        }
        let Some(callee) = self.canonical(segs) else {
            // `f(x).execSync(…)`: what the receiver is only the run knows, but a method known
            // by its name is still that method.
            if let [.., Seg::Name(m)] = segs
                && let Some(e) = self.table.lookup(m, true).filter(|_| segs.len() > 1)
            {
                self.effect(e, args, None);
            }
            return;
        };
        if self.table.syntax == Syntax::Php && callee.starts_with('$') && !callee.contains('.') {
            self.fx
                .opaque
                .push("it calls a function named by a variable".into());
            return;
        }
        let has_receiver = segs.len() > 1;
        if let Some(e) = self.table.lookup(&callee, has_receiver) {
            self.effect(e, args, None);
            return;
        }
        // A method on something the rules cannot name (`p.unlink()` on an unknown `p`).
        if has_receiver
            && let [.., Seg::Name(m)] = segs
            && let Some(e) = self.table.unknown_receiver_method(m)
        {
            self.effect(e, args, Some(ANY.to_string()));
        }
    }

    /// For `recv.send(:name, …)` / `method(:name).call(…)`: the method named (`None`: only
    /// known at run time) and how many leading arguments name it.
    fn sent(&self, segs: &[Seg], args: &[(usize, usize)]) -> Option<(Option<String>, usize)> {
        if self.table.syntax != Syntax::Ruby {
            return None;
        }
        match segs {
            [.., Seg::Name(m)] if matches!(m.as_str(), "send" | "public_send" | "__send__") => {
                Some((self.symbol(args.first().copied()), 1))
            }
            [.., Seg::Name(method), Seg::Args(inner), Seg::Name(call)]
                if method == "method" && matches!(call.as_str(), "call" | "()") =>
            {
                Some((self.symbol(inner.first().copied()), 0))
            }
            _ => None,
        }
    }

    fn symbol(&self, range: Option<(usize, usize)>) -> Option<String> {
        let (s, e) = range?;
        if self.is(s, ":") && e == s + 2 {
            return self.ident(s + 1).map(str::to_owned);
        }
        match self.value(s, e, 0) {
            Val::Str(n) if !n.contains(ANY) => Some(n),
            _ => None,
        }
    }

    /// What a call the table knows does, with its arguments' values.
    fn effect(&mut self, e: Effect, args: &[(usize, usize)], receiver: Option<String>) {
        let vals: Vec<Val> = args
            .iter()
            .map(|&(s, e)| self.value(s, e, 0))
            .filter(|v| !matches!(v, Val::Kw))
            .collect();
        // Ruby and PHP may give an environment hash first (`system({"A"=>"1"}, "cmd")`).
        let get = |k: usize| vals.get(k).cloned().unwrap_or(Val::Unknown);
        let fx = &mut *self.fx;
        match e {
            Effect::Shell(k) => shell_or_argv(fx, get(k.into())),
            Effect::System(k) => {
                let rest: Vec<Val> = vals.iter().skip(k.into()).cloned().collect();
                match rest.as_slice() {
                    [] => {}
                    [one] => shell_or_argv(fx, one.clone()),
                    many => fx.argv.push(many.iter().flat_map(flatten).collect()),
                }
            }
            Effect::ExecL(prog, arg0) => {
                let mut argv = vec![get(prog.into()).shape()];
                argv.extend(vals.iter().skip(usize::from(arg0) + 1).flat_map(flatten));
                fx.argv.push(argv);
            }
            Effect::ExecV(prog, list) => {
                let mut argv = vec![get(prog.into()).shape()];
                match get(list.into()) {
                    Val::List(items) => argv.extend(items.iter().skip(1).flat_map(flatten)),
                    _ => argv.push(ANY.to_string()),
                }
                fx.argv.push(argv);
            }
            Effect::Spawn(prog) => {
                let mut argv = vec![get(prog.into()).shape()];
                match vals.get(usize::from(prog) + 1) {
                    Some(Val::List(items)) => argv.extend(items.iter().flat_map(flatten)),
                    Some(Val::Str(s)) => argv.push(s.clone()),
                    Some(_) => argv.push(ANY.to_string()),
                    None => {}
                }
                fx.argv.push(argv);
            }
            Effect::ArgvList(k) => match get(k.into()) {
                Val::List(items) => fx.argv.push(items.iter().flat_map(flatten).collect()),
                _ => fx.opaque.push("it runs a program named at run time".into()),
            },
            Effect::Delete(k) => {
                let target = receiver.map(Val::Path).unwrap_or_else(|| get(k.into()));
                fx.deletes.extend(flatten(&target));
            }
            Effect::DeleteFrom(k) => {
                for v in vals.iter().skip(k.into()) {
                    fx.deletes.extend(flatten(v));
                }
                if vals.len() <= usize::from(k) {
                    // Perl's `unlink` alone deletes `$_`.
                    fx.deletes.push(ANY.to_string());
                }
            }
            Effect::Write(k) => {
                let target = receiver.map(Val::Path).unwrap_or_else(|| get(k.into()));
                fx.writes.extend(flatten(&target));
            }
            Effect::WriteFrom(k) => {
                if let Some(p) = receiver {
                    fx.writes.push(p);
                }
                for v in vals.iter().skip(k.into()) {
                    fx.writes.extend(flatten(v));
                }
            }
            Effect::Open(path, mode) => {
                // On a path object the mode is the first argument.
                let (target, at) = match receiver {
                    Some(p) => (Val::Path(p), usize::from(mode.saturating_sub(1))),
                    None => (get(path.into()), usize::from(mode)),
                };
                let writes = match vals.get(at) {
                    Some(Val::Str(m)) => m.contains(['w', 'a', 'x', '+', '>', ANY]),
                    // A mode only known at run time may write.
                    Some(_) => true,
                    None => false,
                };
                if writes {
                    fx.writes.extend(flatten(&target));
                }
                // Ruby's and Perl's `open("|cmd")`.
                if let Val::Str(s) = &target
                    && (s.trim_start().starts_with('|') || s.trim_end().ends_with('|'))
                    && matches!(self.table.syntax, Syntax::Ruby | Syntax::Perl)
                {
                    fx.shell.push(s.trim().trim_matches('|').trim().to_owned());
                }
            }
            Effect::PerlOpen => perl_open(fx, &vals),
            Effect::Eval(k) => match get(k.into()) {
                Val::Str(code) if !code.contains(ANY) => {
                    let table = self.table;
                    let depth = self.depth + 1;
                    super::read_code(table, &code, self.fx, depth);
                }
                _ => fx.opaque.push("it evaluates code built at run time".into()),
            },
            Effect::EvalLast => match vals.last() {
                Some(Val::Str(code)) if !code.contains(ANY) => {
                    let (table, code, depth) = (self.table, code.clone(), self.depth + 1);
                    super::read_code(table, &code, self.fx, depth);
                }
                _ => fx.opaque.push("it evaluates code built at run time".into()),
            },
            Effect::EvalIfStr(k) => match get(k.into()) {
                Val::Str(code) if !code.contains(ANY) => {
                    let (table, depth) = (self.table, self.depth + 1);
                    super::read_code(table, &code, self.fx, depth);
                }
                Val::Str(_) => fx.opaque.push("it evaluates code built at run time".into()),
                _ => {}
            },
            Effect::Opaque(why) => fx.opaque.push(why.into()),
            Effect::Loader(k) => match get(k.into()) {
                Val::Str(m) if !m.contains(ANY) => {}
                _ => fx.opaque.push("it loads a module named at run time".into()),
            },
            Effect::Getattr => match get(1) {
                Val::Str(n) if !n.contains(ANY) => {}
                _ => fx
                    .opaque
                    .push("it looks up an attribute named at run time".into()),
            },
            Effect::Home | Effect::EnvGet(_) | Effect::Join | Effect::PathCtor(_) => {}
        }
    }
}

/// The shapes a value stands for as arguments (a list's items, or itself).
fn flatten(v: &Val) -> Vec<String> {
    match v {
        Val::List(items) => items.iter().flat_map(flatten).collect(),
        Val::Kw => Vec::new(),
        v => vec![v.shape()],
    }
}

/// A string runs through a shell (`os.system("…")`); a list is an argv
/// (`subprocess.run([...])`); anything else is only known at run time.
fn shell_or_argv(fx: &mut Effects, v: Val) {
    match v {
        Val::Str(s) => fx.shell.push(s),
        Val::List(items) => fx.argv.push(items.iter().flat_map(flatten).collect()),
        _ => fx.opaque.push("it runs a command built at run time".into()),
    }
}

/// Perl's `open(FH, MODE, PATH, …)` and `open(FH, EXPR)`.
fn perl_open(fx: &mut Effects, vals: &[Val]) {
    match vals {
        [_, Val::Str(mode), rest @ ..] if vals.len() >= 3 => {
            let mode = mode.trim();
            if mode.contains('|') {
                // `open(F, "-|", "cmd", args…)`: a command, or a program and its arguments.
                match rest {
                    [one] => shell_or_argv(fx, one.clone()),
                    many => fx.argv.push(many.iter().flat_map(flatten).collect()),
                }
            } else if mode.contains(['>', '+']) {
                fx.writes.extend(rest.iter().take(1).flat_map(flatten));
            }
        }
        [_, Val::Str(expr)] => {
            let e = expr.trim();
            if e.starts_with('|') || e.ends_with('|') {
                fx.shell.push(e.trim_matches('|').trim().to_owned());
            } else if let Some(p) = e.strip_prefix("+<").or_else(|| e.strip_prefix("+>")) {
                fx.writes.push(p.trim().to_owned());
            } else if let Some(p) = e.strip_prefix(">>").or_else(|| e.strip_prefix('>')) {
                fx.writes.push(p.trim().to_owned());
            }
        }
        [_, Val::Str(_), ..] | [] | [_] => {}
        _ => fx
            .opaque
            .push("it opens a file or command named at run time".into()),
    }
}

/// `a` joined with `b` as a path join does (an absolute `b` replaces `a`).
fn join(a: &str, b: &str) -> String {
    if a.is_empty() || b.starts_with('/') {
        return b.to_owned();
    }
    format!("{}/{b}", a.trim_end_matches('/'))
}

/// The value of an environment variable, when the rules know what it stands for.
fn env_value(name: &str) -> Val {
    match name {
        "HOME" => Val::Str("~".into()),
        n if crate::shell::SECRET_ROOTS.contains(&n) => Val::Str(crate::shell::root_shape(n)),
        _ => Val::Unknown,
    }
}
