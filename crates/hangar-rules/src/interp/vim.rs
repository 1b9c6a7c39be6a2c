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
    let mut s = line.trim_start().trim_start_matches(':').trim_start();
    s = skip_range(s);
    // Modifiers.
    loop {
        let word: String = s.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
        let after = &s[word.len()..];
        let after = after.strip_prefix('!').unwrap_or(after);
        let modifier = matches!(
            word.as_str(),
            "sil"
                | "sile"
                | "silen"
                | "silent"
                | "uns"
                | "unsilent"
                | "noa"
                | "noautocmd"
                | "keepa"
                | "keepalt"
                | "keepj"
                | "keepjumps"
                | "keepm"
                | "keepmarks"
                | "kee"
                | "lockm"
                | "lockmarks"
                | "vert"
                | "vertical"
                | "to"
                | "topleft"
                | "bo"
                | "botright"
                | "abo"
                | "aboveleft"
                | "bel"
                | "belowright"
                | "tab"
                | "conf"
                | "confirm"
                | "verb"
                | "verbose"
                | "sandbox"
                | "san"
                | "bro"
                | "browse"
                | "hid"
                | "hide"
                | "leg"
                | "legacy"
                | "vim9"
                | "vim9cmd"
                | "filt"
                | "filter"
        );
        if !modifier || word.is_empty() {
            break;
        }
        s = skip_range(after.trim_start());
    }
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
    let is = |full: &str, min: usize| word.len() >= min && full.starts_with(word.as_str());
    let (arg, tail) = split_bar(args);
    if word.is_empty() {
        return tail;
    }
    if is("edit", 1) && args.starts_with('!') {
        fx.shell.push(bang_command(&args[1..]));
        return "";
    }
    if is("read", 1) {
        match args.strip_prefix('!') {
            Some(cmd) => {
                fx.shell.push(bang_command(cmd));
                return "";
            }
            None => fx.named.push(arg.trim().to_owned()),
        }
    } else if [
        "write",
        "wq",
        "xit",
        "exit",
        "update",
        "saveas",
        "wall",
        "wnext",
        "wNext",
        "wprevious",
    ]
    .iter()
    .zip([1, 2, 1, 3, 2, 3, 2, 2, 2, 2])
    .any(|(f, m)| is(f, m))
        || word == "x"
    {
        if !bang && let Some(cmd) = args.strip_prefix('!') {
            fx.shell.push(bang_command(cmd));
            return "";
        }
        let file = arg
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
    } else if is("shell", 2) || is("terminal", 3) || word == "sh" {
        fx.opaque.push("it starts a shell".into());
    } else if ["python", "python3", "pythonx", "lua", "perl", "ruby"]
        .iter()
        .zip([2, 3, 3, 3, 2, 3])
        .any(|(f, m)| is(f, m))
        || matches!(word.as_str(), "py3" | "pyx" | "pe")
    {
        embedded(&word, args, fx, depth);
        return "";
    } else if is("source", 2) || is("runtime", 2) {
        let f = arg.trim();
        if f.starts_with("/dev/") || f.starts_with("/proc/") {
            fx.opaque
                .push("it sources commands another command writes at run time".into());
        } else {
            fx.named.push(f.to_owned());
        }
    } else if is("execute", 3) {
        match vim_string(arg) {
            Some(cmd) => read(&cmd, fx, depth + 1),
            None => fx
                .opaque
                .push("it executes a command built at run time".into()),
        }
    } else if is("normal", 4) {
        if args.contains([':', '!', 'Q']) || args.contains("gQ") {
            fx.opaque
                .push("it types keys that may run any command".into());
        }
        return "";
    } else if is("global", 1) || is("vglobal", 1) {
        // :g/re/cmd: the command after the pattern.
        let mut chars = args.chars();
        if let Some(d) = chars.next() {
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
        return "";
    } else if is("autocmd", 2) {
        // :au EVENT PAT [++once] [++nested] CMD
        let words: Vec<&str> = args.split_whitespace().collect();
        let skip = 2 + words
            .iter()
            .skip(2)
            .take_while(|w| w.starts_with("++"))
            .count();
        if words.len() > skip {
            read(&words[skip..].join(" "), fx, depth + 1);
        }
        return "";
    } else if is("command", 3) {
        // :command [-opts] NAME CMD
        let words: Vec<&str> = args.split_whitespace().collect();
        let skip = words.iter().take_while(|w| w.starts_with('-')).count() + 1;
        if words.len() > skip {
            read(&words[skip..].join(" "), fx, depth + 1);
        }
        return "";
    } else if is("set", 2) || is("setlocal", 4) || is("setglobal", 4) {
        let runs = arg.split_whitespace().any(|o| {
            let name = o.split(['=', '+', '^', '-']).next().unwrap_or("");
            matches!(
                name,
                "shell"
                    | "sh"
                    | "shellcmdflag"
                    | "shcf"
                    | "makeprg"
                    | "mp"
                    | "grepprg"
                    | "gp"
                    | "keywordprg"
                    | "kp"
                    | "equalprg"
                    | "ep"
                    | "formatprg"
                    | "fp"
                    | "diffexpr"
                    | "dex"
                    | "patchexpr"
                    | "pex"
                    | "shellpipe"
                    | "sp"
                    | "shellredir"
                    | "srr"
                    | "shellquote"
                    | "shq"
                    | "shellxquote"
                    | "sxq"
            ) && o.contains('=')
        });
        if runs {
            fx.opaque
                .push("it sets the program vim runs commands with".into());
        }
    } else if is("redir", 3) || is("mksession", 3) || is("mkvimrc", 3) || is("mkexrc", 2) {
        let f = arg.trim().trim_start_matches(['>', '!', ' ']).trim();
        if !f.starts_with('@') && !f.starts_with("=>") && !f.eq_ignore_ascii_case("END") {
            fx.writes.push(if f.is_empty() {
                ".".to_owned()
            } else {
                f.to_owned()
            });
        }
    } else if is("make", 3) || is("grep", 2) || is("lmake", 2) {
        let mut argv = vec![
            if word.contains("grep") {
                "grep"
            } else {
                "make"
            }
            .to_owned(),
        ];
        argv.extend(arg.split_whitespace().map(str::to_owned));
        fx.argv.push(argv);
    } else if is("call", 3)
        || is("let", 3)
        || is("echo", 2)
        || is("if", 2)
        || is("elseif", 5)
        || is("while", 2)
        || is("for", 3)
        || is("return", 3)
        || is("eval", 2)
        || is("unlet", 3)
    {
        expression(arg, fx, depth);
    } else if is("edit", 1)
        || is("split", 2)
        || is("vsplit", 2)
        || is("new", 3)
        || is("vnew", 3)
        || is("tabedit", 4)
        || is("badd", 3)
        || is("argadd", 4)
        || is("view", 3)
        || is("find", 3)
        || is("luafile", 4)
        || is("pyfile", 3)
        || is("py3file", 4)
    {
        fx.named.push(arg.trim().to_owned());
    }
    tail
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
