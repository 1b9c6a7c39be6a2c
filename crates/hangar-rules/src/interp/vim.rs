//! Ex commands given to vim, vi, nvim or ex (`-c CMD`, `+CMD`, `--cmd CMD`, a script it
//! sources from stdin, ex mode reading stdin): `:!cmd`, `:r !cmd`, `:w !cmd`, `:w FILE`,
//! `:py3`/`:lua`/`:perl`/`:ruby` code, `:call system(…)`, `:exe "…"`, `:g/re/cmd`, `:au`,
//! `:shell`, `:terminal`, `:set shell=…`.

use super::lex::Syntax;
use super::{Code, Effects};
use crate::paths::ANY;
use crate::shell::Arg;

/// How deep `:exe`, `:g`, `:au` and `:command` nest before the rest is not read.
const MAX_DEPTH: usize = 8;
/// The most calls of one function an expression is read for.
const MAX_CALLS: usize = 64;

/// vim's options: commands, the script it sources, ex mode, the files it edits.
pub(super) fn code_of(name: &str, args: &[Arg]) -> Code {
    let mut c = Code::default();
    let mut ex_mode = matches!(name, "ex" | "ed" | "red");
    for a in args {
        if let Some(s) = a.lit()
            && s.starts_with('-')
            && !s.starts_with("--")
            && s[1..].chars().all(|ch| matches!(ch, 'e' | 'E' | 's'))
            && s.contains(['e', 'E'])
        {
            ex_mode = true;
        }
    }
    let mut i = 0;
    let mut options = true;
    while i < args.len() {
        let a = &args[i];
        let s = a.lit().unwrap_or("");
        match s {
            "--" if options => options = false,
            "--cmd" if options => {
                c.inline.extend(args.get(i + 1).cloned());
                i += 1;
            }
            "--startuptime" | "--log" | "--listen" | "--servername" | "--server" if options => {
                i += 1
            }
            "--remote-send" | "--remote-expr" if options => {
                c.inline.push(Arg::Computed(ANY.to_string()));
                i += 1;
            }
            _ if options && s.starts_with('+') && s.len() > 1 => {
                let rest = &s[1..];
                if !(rest.chars().all(|ch| ch.is_ascii_digit()) || rest.starts_with('/')) {
                    c.inline.push(Arg::Lit(rest.to_owned()));
                }
            }
            _ if options && s.starts_with("--") => {}
            _ if options && s.starts_with('-') && s.len() > 1 => {
                // A cluster (`-es`, `-Nc CMD`): options that take a value take the rest of the
                // word or the next one.
                for (at, ch) in s.char_indices().skip(1) {
                    let rest = &s[at + ch.len_utf8()..];
                    let value = |i: &mut usize| -> Option<Arg> {
                        if rest.is_empty() {
                            *i += 1;
                            args.get(*i).cloned()
                        } else {
                            Some(Arg::Lit(rest.to_owned()))
                        }
                    };
                    match ch {
                        'c' => {
                            c.inline.extend(value(&mut i));
                            break;
                        }
                        'S' | 'u' | 'U' => {
                            let v = value(&mut i);
                            if !matches!(v.as_ref().and_then(Arg::lit), Some("NONE" | "NORC")) {
                                c.file = Some(i);
                            }
                            break;
                        }
                        's' if !ex_mode => {
                            // Keystrokes from a file: they may type any command.
                            let _ = value(&mut i);
                            c.file = Some(i);
                            break;
                        }
                        'T' | 't' | 'q' | 'i' | 'w' | 'W' | 'r' => {
                            let _ = value(&mut i);
                            break;
                        }
                        _ => {}
                    }
                }
            }
            _ => c.operands.push(i),
        }
        i += 1;
    }
    if ex_mode {
        c.stdin = true;
    }
    c
}

/// What ex commands do (one or more lines).
pub(super) fn read(code: &str, fx: &mut Effects, depth: usize) {
    if depth > MAX_DEPTH {
        fx.opaque
            .push("its commands nest too deeply to read".into());
        return;
    }
    let lines: Vec<&str> = code.lines().collect();
    let mut k = 0;
    while k < lines.len() {
        let mut line: &str = lines[k];
        k += 1;
        // A `:py3 << EOF` block: the lines up to the marker are code.
        if let Some((cmd, marker)) = heredoc(line) {
            let mut body = String::new();
            while k < lines.len() && lines[k].trim() != marker {
                body.push_str(lines[k]);
                body.push('\n');
                k += 1;
            }
            k += 1;
            embedded(&cmd, &body, fx, depth);
            continue;
        }
        while !line.trim().is_empty() {
            line = command(line, fx, depth);
        }
    }
}

/// `py3 << EOF`, `lua <<EOF`: the language command and the marker.
fn heredoc(line: &str) -> Option<(String, String)> {
    let (cmd, rest) = line.trim().trim_start_matches(':').split_once("<<")?;
    let cmd = cmd.trim();
    if !matches!(
        cmd,
        "py" | "python"
            | "py3"
            | "python3"
            | "pyx"
            | "pythonx"
            | "lua"
            | "perl"
            | "pe"
            | "ruby"
            | "rub"
    ) {
        return None;
    }
    let marker = rest.trim().trim_start_matches("trim").trim();
    Some((
        cmd.to_owned(),
        if marker.is_empty() {
            ".".to_owned()
        } else {
            marker.to_owned()
        },
    ))
}

/// Code in a language vim embeds.
fn embedded(cmd: &str, code: &str, fx: &mut Effects, depth: usize) {
    let syntax = match cmd {
        "lua" => Syntax::Lua,
        "perl" | "pe" => Syntax::Perl,
        "ruby" | "rub" => Syntax::Ruby,
        _ => Syntax::Python,
    };
    super::read_embedded(syntax, code, fx, depth + 1);
}

/// Reads one command from the start of `line`; returns what follows a `|` after it.
fn command<'a>(line: &'a str, fx: &mut Effects, depth: usize) -> &'a str {
    let s = skip_modifiers(skip_range(
        line.trim_start().trim_start_matches(':').trim_start(),
    ));
    if let Some(rest) = s.strip_prefix('!') {
        fx.shell.push(bang_command(rest));
        return "";
    }
    let word: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let mut rest = &s[word.len()..];
    let bang = rest.starts_with('!');
    if bang {
        rest = &rest[1..];
    }
    let args = rest.trim_start();
    let (arg, tail) = split_bar(args);
    if word.is_empty() {
        return tail;
    }
    let cmd = Cmd {
        word,
        bang,
        args,
        arg,
    };
    match run(&cmd, fx, depth) {
        Line::Bar => tail,
        Line::Whole => "",
    }
}

/// Command modifiers (`:silent`, `:keepalt`, `:vertical`, …), which run the command after them.
const MODIFIERS: &[&str] = &[
    "sil",
    "sile",
    "silen",
    "silent",
    "uns",
    "unsilent",
    "noa",
    "noautocmd",
    "keepa",
    "keepalt",
    "keepj",
    "keepjumps",
    "keepm",
    "keepmarks",
    "kee",
    "lockm",
    "lockmarks",
    "vert",
    "vertical",
    "to",
    "topleft",
    "bo",
    "botright",
    "abo",
    "aboveleft",
    "bel",
    "belowright",
    "tab",
    "conf",
    "confirm",
    "verb",
    "verbose",
    "sandbox",
    "san",
    "bro",
    "browse",
    "hid",
    "hide",
    "leg",
    "legacy",
    "vim9",
    "vim9cmd",
    "filt",
    "filter",
];

/// The command after its modifiers (each may have a `!` and a range after it).
fn skip_modifiers(mut s: &str) -> &str {
    loop {
        let word: String = s.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
        let after = &s[word.len()..];
        let after = after.strip_prefix('!').unwrap_or(after);
        if word.is_empty() || !MODIFIERS.contains(&word.as_str()) {
            return s;
        }
        s = skip_range(after.trim_start());
    }
}

/// One ex command: its name as typed, its `!`, and what follows.
struct Cmd<'a> {
    word: String,
    bang: bool,
    /// Everything after the name (and its `!`), a `|` and what follows it included.
    args: &'a str,
    /// The argument up to an unquoted `|`.
    arg: &'a str,
}

impl Cmd<'_> {
    /// Whether the name abbreviates `full` (at least `min` letters of it).
    fn is(&self, full: &str, min: usize) -> bool {
        self.word.len() >= min && full.starts_with(self.word.as_str())
    }

    /// Whether the name abbreviates any of `names` (each with its shortest abbreviation).
    fn is_any(&self, names: &[(&str, usize)]) -> bool {
        names.iter().any(|&(full, min)| self.is(full, min))
    }
}

/// Whether a command took the rest of its line or ended at a `|`.
enum Line {
    /// A `|` ends it: the next command follows.
    Bar,
    /// The rest of the line is its own (`:!`, code, `:normal`, `:g`, `:au`, `:command`).
    Whole,
}

/// The commands that write the buffer, with their shortest abbreviations.
const WRITES: &[(&str, usize)] = &[
    ("write", 1),
    ("wq", 2),
    ("xit", 1),
    ("exit", 3),
    ("update", 2),
    ("saveas", 3),
    ("wall", 2),
    ("wnext", 2),
    ("wNext", 2),
    ("wprevious", 2),
];

/// The commands that run code of an embedded language given on their line.
const LANGUAGES: &[(&str, usize)] = &[
    ("python", 2),
    ("python3", 3),
    ("pythonx", 3),
    ("lua", 3),
    ("perl", 2),
    ("ruby", 3),
];

/// The commands whose argument is an expression.
const EXPRESSIONS: &[(&str, usize)] = &[
    ("call", 3),
    ("let", 3),
    ("echo", 2),
    ("if", 2),
    ("elseif", 5),
    ("while", 2),
    ("for", 3),
    ("return", 3),
    ("eval", 2),
    ("unlet", 3),
];

/// The commands that open, add or source the file they name.
const OPENS: &[(&str, usize)] = &[
    ("edit", 1),
    ("split", 2),
    ("vsplit", 2),
    ("new", 3),
    ("vnew", 3),
    ("tabedit", 4),
    ("badd", 3),
    ("argadd", 4),
    ("view", 3),
    ("find", 3),
    ("luafile", 4),
    ("pyfile", 3),
    ("py3file", 4),
];

/// What one command does, by its name (the first that matches, in vim's order of
/// abbreviations).
fn run(c: &Cmd<'_>, fx: &mut Effects, depth: usize) -> Line {
    if c.is("edit", 1) && c.args.starts_with('!') {
        fx.shell.push(bang_command(&c.args[1..]));
        Line::Whole
    } else if c.is("read", 1) {
        read_file(c, fx)
    } else if c.is_any(WRITES) || c.word == "x" {
        write_file(c, fx)
    } else if c.is("shell", 2) || c.is("terminal", 3) || c.word == "sh" {
        fx.opaque.push("it starts a shell".into());
        Line::Bar
    } else if c.is_any(LANGUAGES) || matches!(c.word.as_str(), "py3" | "pyx" | "pe") {
        embedded(&c.word, c.args, fx, depth);
        Line::Whole
    } else if c.is("source", 2) || c.is("runtime", 2) {
        source(c, fx);
        Line::Bar
    } else if c.is("execute", 3) {
        match vim_string(c.arg) {
            Some(cmd) => read(&cmd, fx, depth + 1),
            None => fx
                .opaque
                .push("it executes a command built at run time".into()),
        }
        Line::Bar
    } else if c.is("normal", 4) {
        if c.args.contains([':', '!', 'Q']) || c.args.contains("gQ") {
            fx.opaque
                .push("it types keys that may run any command".into());
        }
        Line::Whole
    } else if c.is("global", 1) || c.is("vglobal", 1) {
        global(c.args, fx, depth);
        Line::Whole
    } else if c.is("autocmd", 2) {
        autocmd(c.args, fx, depth);
        Line::Whole
    } else if c.is("command", 3) {
        user_command(c.args, fx, depth);
        Line::Whole
    } else if c.is("set", 2) || c.is("setlocal", 4) || c.is("setglobal", 4) {
        set(c.arg, fx);
        Line::Bar
    } else if c.is("redir", 3) || c.is("mksession", 3) || c.is("mkvimrc", 3) || c.is("mkexrc", 2) {
        redirect(c.arg, fx);
        Line::Bar
    } else if c.is("make", 3) || c.is("grep", 2) || c.is("lmake", 2) {
        make(c, fx);
        Line::Bar
    } else if c.is_any(EXPRESSIONS) {
        expression(c.arg, fx, depth);
        Line::Bar
    } else if c.is_any(OPENS) {
        fx.named.push(c.arg.trim().to_owned());
        Line::Bar
    } else {
        Line::Bar
    }
}

/// `:r FILE` reads a file; `:r !cmd` runs a command.
fn read_file(c: &Cmd<'_>, fx: &mut Effects) -> Line {
    match c.args.strip_prefix('!') {
        Some(cmd) => {
            fx.shell.push(bang_command(cmd));
            Line::Whole
        }
        None => {
            fx.named.push(c.arg.trim().to_owned());
            Line::Bar
        }
    }
}

/// `:w FILE` writes a file (the buffer's own without one); `:w !cmd` gives it to a command.
fn write_file(c: &Cmd<'_>, fx: &mut Effects) -> Line {
    if !c.bang
        && let Some(cmd) = c.args.strip_prefix('!')
    {
        fx.shell.push(bang_command(cmd));
        return Line::Whole;
    }
    let file = c
        .arg
        .split_whitespace()
        .filter(|w| !w.starts_with("++"))
        .collect::<Vec<_>>()
        .join(" ");
    let file = file.trim_start_matches(">>").trim();
    if file.is_empty() {
        fx.writes_operands = true;
    } else {
        fx.writes.push(file.to_owned());
    }
    Line::Bar
}

/// `:source FILE`, `:runtime FILE`: the commands in the file.
fn source(c: &Cmd<'_>, fx: &mut Effects) {
    let f = c.arg.trim();
    if f.starts_with("/dev/") || f.starts_with("/proc/") {
        fx.opaque
            .push("it sources commands another command writes at run time".into());
    } else {
        fx.named.push(f.to_owned());
    }
}

/// `:g/re/cmd`: the command after the pattern.
fn global(args: &str, fx: &mut Effects, depth: usize) {
    let mut chars = args.chars();
    let Some(d) = chars.next() else {
        return;
    };
    let body = chars.as_str();
    let mut esc = false;
    let mut end = body.len();
    for (k, ch) in body.char_indices() {
        if esc {
            esc = false;
        } else if ch == '\\' {
            esc = true;
        } else if ch == d {
            end = k + ch.len_utf8();
            break;
        }
    }
    read(&body[end.min(body.len())..], fx, depth + 1);
}

/// `:au EVENT PAT [++once] [++nested] CMD`: the command.
fn autocmd(args: &str, fx: &mut Effects, depth: usize) {
    let words: Vec<&str> = args.split_whitespace().collect();
    let skip = 2 + words
        .iter()
        .skip(2)
        .take_while(|w| w.starts_with("++"))
        .count();
    if words.len() > skip {
        read(&words[skip..].join(" "), fx, depth + 1);
    }
}

/// `:command [-opts] NAME CMD`: the command it defines.
fn user_command(args: &str, fx: &mut Effects, depth: usize) {
    let words: Vec<&str> = args.split_whitespace().collect();
    let skip = words.iter().take_while(|w| w.starts_with('-')).count() + 1;
    if words.len() > skip {
        read(&words[skip..].join(" "), fx, depth + 1);
    }
}

/// The options that name a program vim runs (or an expression it evaluates to run one).
const PROGRAM_OPTIONS: &[&str] = &[
    "shell",
    "sh",
    "shellcmdflag",
    "shcf",
    "makeprg",
    "mp",
    "grepprg",
    "gp",
    "keywordprg",
    "kp",
    "equalprg",
    "ep",
    "formatprg",
    "fp",
    "diffexpr",
    "dex",
    "patchexpr",
    "pex",
    "shellpipe",
    "sp",
    "shellredir",
    "srr",
    "shellquote",
    "shq",
    "shellxquote",
    "sxq",
];

/// `:set OPTION=VALUE …`: whether one sets a program vim runs.
fn set(arg: &str, fx: &mut Effects) {
    let runs = arg.split_whitespace().any(|o| {
        let name = o.split(['=', '+', '^', '-']).next().unwrap_or("");
        PROGRAM_OPTIONS.contains(&name) && o.contains('=')
    });
    if runs {
        fx.opaque
            .push("it sets the program vim runs commands with".into());
    }
}

/// `:redir > FILE`, `:mksession FILE`, …: the file written (not a register or a variable).
fn redirect(arg: &str, fx: &mut Effects) {
    let f = arg.trim().trim_start_matches(['>', '!', ' ']).trim();
    if !f.starts_with('@') && !f.starts_with("=>") && !f.eq_ignore_ascii_case("END") {
        fx.writes.push(if f.is_empty() {
            ".".to_owned()
        } else {
            f.to_owned()
        });
    }
}

/// `:make ARGS`, `:grep ARGS`: the program run with them.
fn make(c: &Cmd<'_>, fx: &mut Effects) {
    let mut argv = vec![
        if c.word.contains("grep") {
            "grep"
        } else {
            "make"
        }
        .to_owned(),
    ];
    argv.extend(c.arg.split_whitespace().map(str::to_owned));
    fx.argv.push(argv);
}

/// A range before a command: `%`, `.`, `$`, numbers, marks, patterns, offsets.
fn skip_range(mut s: &str) -> &str {
    loop {
        let t = s.trim_start();
        let Some(c) = t.chars().next() else { return t };
        match c {
            '%' | '.' | '$' | ',' | ';' | '+' | '-' | '*' => s = &t[1..],
            '\'' => s = t.get(2..).unwrap_or(""),
            '0'..='9' => s = t.trim_start_matches(|c: char| c.is_ascii_digit()),
            '/' | '?' => {
                let body = &t[1..];
                let end = body.find(c).map_or(body.len(), |e| e + 1);
                s = &body[end..];
            }
            _ => return t,
        }
    }
}

/// The argument of a command up to an unquoted `|`, and what follows it.
fn split_bar(s: &str) -> (&str, &str) {
    let mut quote: Option<char> = None;
    let mut esc = false;
    for (k, c) in s.char_indices() {
        if esc {
            esc = false;
            continue;
        }
        match (quote, c) {
            (_, '\\') => esc = true,
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '|') => return (&s[..k], &s[k + 1..]),
            _ => {}
        }
    }
    (s, "")
}

/// A `:!` command as the shell will get it: vim puts file names in place of `%` and `#`,
/// and the last command in place of `!`, unless escaped.
fn bang_command(cmd: &str) -> String {
    let mut out = String::with_capacity(cmd.len());
    let mut chars = cmd.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some('%' | '#' | '!')) => {
                out.extend(chars.next());
            }
            '%' | '#' | '!' => out.push(ANY),
            c => out.push(c),
        }
    }
    out
}

/// A vimscript string expression that is literal: `"…"`, `'…'`, joined with `.` or `..`.
fn vim_string(expr: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = expr.trim();
    loop {
        let q = rest.chars().next()?;
        if q != '"' && q != '\'' {
            return None;
        }
        let body = &rest[1..];
        let mut end = None;
        let mut esc = false;
        for (k, c) in body.char_indices() {
            if esc {
                esc = false;
                continue;
            }
            if c == '\\' && q == '"' {
                esc = true;
                continue;
            }
            if c == q {
                if q == '\'' && body[k + 1..].starts_with('\'') {
                    continue;
                }
                end = Some(k);
                break;
            }
        }
        let end = end?;
        let text = &body[..end];
        if q == '"' {
            out.push_str(&text.replace("\\\"", "\"").replace("\\\\", "\\"));
        } else {
            out.push_str(&text.replace("''", "'"));
        }
        rest = body[end + 1..].trim_start();
        if rest.is_empty() {
            return Some(out);
        }
        rest = rest
            .strip_prefix("..")
            .or_else(|| rest.strip_prefix('.'))?
            .trim_start();
    }
}

/// A vimscript expression: the functions it calls that run, delete or write.
fn expression(expr: &str, fx: &mut Effects, depth: usize) {
    let calls: [(&str, u8); 14] = [
        ("system", 0),
        ("systemlist", 0),
        ("job_start", 1),
        ("jobstart", 1),
        ("term_start", 1),
        ("termopen", 1),
        ("execute", 2),
        ("delete", 3),
        ("writefile", 4),
        ("rename", 5),
        ("mkdir", 6),
        ("setfperm", 6),
        ("libcall", 7),
        ("libcallnr", 7),
    ];
    let opaque = [
        "feedkeys", "py3eval", "pyeval", "pyxeval", "luaeval", "rubyeval", "perleval", "eval",
        "function", "funcref", "call",
    ];
    let bytes = expr;
    for (name, kind) in calls {
        let mut from = 0;
        let mut seen = 0usize;
        while let Some(at) = bytes[from..].find(name) {
            seen += 1;
            if seen > MAX_CALLS {
                fx.opaque
                    .push("an expression with too many calls to read".into());
                break;
            }
            let start = from + at;
            from = start + name.len();
            let before = bytes[..start].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '#')
            {
                continue;
            }
            let after = bytes[from..].trim_start();
            let Some(inner) = after.strip_prefix('(') else {
                continue;
            };
            let end = matching_paren(inner);
            let args = &inner[..end];
            let first = first_arg(args).trim();
            let value = vim_string(first);
            match kind {
                0 | 1 => match (value, first.starts_with('[')) {
                    (Some(cmd), _) => fx.shell.push(cmd),
                    (None, true) => {
                        let items: Option<Vec<String>> = first
                            .trim_matches(['[', ']'])
                            .split(',')
                            .map(|w| vim_string(w.trim()))
                            .collect();
                        match items {
                            Some(argv) if !argv.is_empty() => fx.argv.push(argv),
                            _ => fx.opaque.push("it runs a command built at run time".into()),
                        }
                    }
                    (None, false) => fx.opaque.push("it runs a command built at run time".into()),
                },
                2 => match value {
                    Some(cmd) => read(&cmd, fx, depth + 1),
                    None => fx
                        .opaque
                        .push("it executes a command built at run time".into()),
                },
                3 => fx.deletes.push(value.unwrap_or_else(|| ANY.to_string())),
                4 => {
                    let file = args.split(',').nth(1).map(str::trim).and_then(vim_string);
                    fx.writes.push(file.unwrap_or_else(|| ANY.to_string()));
                }
                5 => {
                    for a in args.split(',').take(2) {
                        fx.writes
                            .push(vim_string(a.trim()).unwrap_or_else(|| ANY.to_string()));
                    }
                }
                6 => fx.writes.push(value.unwrap_or_else(|| ANY.to_string())),
                _ => fx.opaque.push("it calls into native code".into()),
            }
        }
    }
    for name in opaque {
        let mut from = 0;
        while let Some(at) = expr[from..].find(name) {
            let start = from + at;
            from = start + name.len();
            let before = expr[..start].chars().next_back();
            let word_start = !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if word_start && expr[from..].trim_start().starts_with('(') {
                fx.opaque.push(format!(
                    "it calls {name}(), which runs what is built at run time"
                ));
            }
        }
    }
}

/// The first of comma-separated arguments, brackets and quotes kept whole.
fn first_arg(args: &str) -> &str {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (k, c) in args.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth = depth.saturating_sub(1),
            (None, ',') if depth == 0 => return &args[..k],
            _ => {}
        }
    }
    args
}

/// The length of the text up to the `)` closing an already opened `(`.
fn matching_paren(s: &str) -> usize {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (k, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') if depth == 0 => return k,
            (None, ')') => depth -= 1,
            _ => {}
        }
    }
    s.len()
}
