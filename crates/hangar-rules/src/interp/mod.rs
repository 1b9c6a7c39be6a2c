//! Code given inline to an interpreter, read for what it does: `python3 -c`, `perl -e`,
//! `node -e`, `ruby -e`, `php -r`, `lua -e`, `awk` programs, `sed` scripts, `vim -c`/`ex`
//! commands, `gdb -ex`, `make -f /dev/stdin` and `make --eval`. Each reader finds the shell
//! commands and programs the code runs, the paths it deletes and writes, every string it
//! spells (a path it may read), and what it cannot read ([`Effects::opaque`]: a command or
//! code built at run time, a function looked up by a computed name). The shell walk
//! (`shell/code.rs`) checks each of them with the same rules as a command line.
//!
//! The readers are lexers and small grammars, not the languages' parsers: what they do not
//! recognise is not a call. They fail closed where it matters: code only known at run time,
//! a spawning function passed around rather than called, a computed callee.

mod awk;
mod calls;
mod gdb;
mod lex;
mod make;
mod sed;
mod tables;
mod vim;

use crate::shell::Arg;
use lex::Syntax;
use tables::Table;

/// What a piece of code does, as far as it can be read. Strings are shapes (see
/// [`crate::paths::ANY`]).
#[derive(Debug, Default)]
pub struct Effects {
    /// Command lines it hands to a shell.
    pub shell: Vec<String>,
    /// Programs it runs with their arguments.
    pub argv: Vec<Vec<String>>,
    /// Paths it deletes.
    pub deletes: Vec<String>,
    /// Paths it writes, creates, moves or changes the mode of.
    pub writes: Vec<String>,
    /// Every string it spells (a path it may read).
    pub named: Vec<String>,
    /// Why parts of it cannot be read (the rules deny it).
    pub opaque: Vec<String>,
    /// It writes the files it is given on its command line (vim's `:w`).
    pub writes_operands: bool,
}

/// The interpreters whose inline code is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Python,
    Perl,
    Ruby,
    Node,
    Php,
    Lua,
    Awk,
    Sed,
    Vim,
    Gdb,
    Make,
}

impl Lang {
    /// The language of the command `name` (without its folder).
    pub fn of(name: &str) -> Option<Lang> {
        let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        Some(match base {
            "python" | "pypy" => Lang::Python,
            "perl" => Lang::Perl,
            "ruby" | "jruby" | "truffleruby" => Lang::Ruby,
            "node" | "nodejs" | "bun" | "deno" => Lang::Node,
            "php" => Lang::Php,
            "lua" | "luajit" => Lang::Lua,
            "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk" => Lang::Awk,
            "sed" | "gsed" => Lang::Sed,
            "vim" | "vi" | "nvim" | "ex" | "view" | "vimdiff" | "gvim" | "rvim" | "rview"
            | "evim" | "nvi" | "vim.basic" | "vim.tiny" | "ed" | "red" => Lang::Vim,
            "gdb" | "gdb-multiarch" => Lang::Gdb,
            "make" | "gmake" => Lang::Make,
            _ => return None,
        })
    }

    /// Whether it runs a script file given as an operand (`python3 x.py`).
    pub fn runs_scripts(self) -> bool {
        matches!(
            self,
            Lang::Python | Lang::Perl | Lang::Ruby | Lang::Node | Lang::Php | Lang::Lua | Lang::Awk
        )
    }
}

/// Where an interpreter's code comes from on its command line.
#[derive(Debug, Default)]
pub struct Code {
    /// Code given in its arguments (`-c CODE`, `-e CODE`…, one per piece).
    pub inline: Vec<Arg>,
    /// It reads code from stdin (`python3 -`, `python3` alone, `ex`, `make -f -`).
    pub stdin: bool,
    /// The argument naming a script file (`python3 x.py`, `sed -f x.sed`, `make -f F`).
    pub file: Option<usize>,
    /// `gdb --args PROG ARGS`: where the program it runs starts.
    pub program: Option<usize>,
    /// The files it edits (vim's operands), written when the code writes them.
    pub operands: Vec<usize>,
}

/// Finds the code of `lang` among `args`.
pub fn code_of(lang: Lang, name: &str, args: &[Arg]) -> Code {
    match lang {
        Lang::Python => scripting(args, "c", "m", "WXQ", &[], true),
        Lang::Perl => scripting(args, "eE", "", "IMmxdDC", &[], true),
        Lang::Ruby => scripting(args, "e", "", "rICEFWx", &[], true),
        Lang::Php => scripting(args, "r", "", "cdzf", &[], true),
        Lang::Lua => scripting(args, "e", "", "l", &[], true),
        Lang::Node => {
            if name == "deno" {
                // `deno eval CODE`, `deno run -` (stdin), `deno run F`.
                let rest: Vec<&Arg> = args
                    .iter()
                    .filter(|a| a.lit().is_none_or(|s| !s.starts_with('-')))
                    .collect();
                let mut c = Code::default();
                match rest.first().and_then(|a| a.lit()) {
                    Some("eval") => c.inline.extend(rest.get(1).map(|a| (*a).clone())),
                    Some("run") => match rest.get(1) {
                        Some(a) if a.lit() == Some("-") => c.stdin = true,
                        Some(a) => c.file = args.iter().position(|x| std::ptr::eq(x, *a)),
                        None => {}
                    },
                    _ => {}
                }
                return c;
            }
            node(args)
        }
        Lang::Awk => awk::code_of(args),
        Lang::Sed => sed::code_of(args),
        Lang::Vim => vim::code_of(name, args),
        Lang::Gdb => gdb::code_of(args),
        Lang::Make => make::code_of(args),
    }
}

/// Python-, Perl-, Ruby-, PHP- and Lua-like options: `code_flags` take the code (attached or
/// next; repeated ones add lines), `stop_flags` end the options without a script (`-m mod`),
/// `value_flags` take a value; the first operand is the script (`-` is stdin), and with no
/// code and no script the code is read from stdin.
fn scripting(
    args: &[Arg],
    code_flags: &str,
    stop_flags: &str,
    value_flags: &str,
    long_values: &[&str],
    stdin_default: bool,
) -> Code {
    let mut c = Code::default();
    let mut i = 0;
    while i < args.len() {
        let Some(s) = args[i].lit() else {
            c.file = Some(i);
            return c;
        };
        if s == "--" {
            i += 1;
            break;
        }
        if s == "-" {
            c.stdin = true;
            return c;
        }
        if let Some(long) = s.strip_prefix("--") {
            if long_values
                .iter()
                .any(|l| l.trim_start_matches('-') == long)
            {
                i += 1;
            }
            i += 1;
            continue;
        }
        if !(s.starts_with('-') && s.len() > 1) {
            break;
        }
        let mut took_next = false;
        let chars: Vec<(usize, char)> = s.char_indices().skip(1).collect();
        let mut k = 0;
        while k < chars.len() {
            let (at, ch) = chars[k];
            let attached = &s[at + ch.len_utf8()..];
            if code_flags.contains(ch) {
                if attached.is_empty() {
                    took_next = true;
                    match args.get(i + 1) {
                        Some(a) => c.inline.push(a.clone()),
                        None => c.inline.push(Arg::Lit(String::new())),
                    }
                } else {
                    c.inline.push(Arg::Lit(attached.to_owned()));
                }
                break;
            }
            if stop_flags.contains(ch) {
                // `python3 -m code`/`pdb`/`IPython` read code from stdin.
                let module = if attached.is_empty() {
                    args.get(i + 1).and_then(Arg::lit)
                } else {
                    Some(attached)
                };
                c.stdin = matches!(
                    module,
                    Some("code" | "pdb" | "IPython" | "ptpython" | "bpython" | "idlelib")
                );
                return c;
            }
            if value_flags.contains(ch) {
                took_next = attached.is_empty();
                break;
            }
            // Perl's and Ruby's `-i[ext]` takes the rest; `-0[digits]`, `-l[digits]` digits.
            if ch == 'i' && code_flags != "c" {
                break;
            }
            k += 1;
            if matches!(ch, '0' | 'l') && code_flags != "c" {
                while k < chars.len() && chars[k].1.is_ascii_hexdigit() && chars[k].1 != 'e' {
                    k += 1;
                }
            }
        }
        i += if took_next { 2 } else { 1 };
    }
    if c.inline.is_empty() {
        match args.get(i) {
            Some(a) if a.lit() == Some("-") => c.stdin = true,
            Some(_) => c.file = Some(i),
            None => c.stdin = stdin_default,
        }
    }
    c
}

/// node's options: `-e`/`--eval`, `-p`/`--print` (also `-pe`), `-r`/`--require` and other
/// options with values, the script, `-` for stdin.
fn node(args: &[Arg]) -> Code {
    let mut c = Code::default();
    let mut i = 0;
    while i < args.len() {
        let Some(s) = args[i].lit() else {
            c.file = Some(i);
            return c;
        };
        match s {
            "-e" | "--eval" | "-p" | "--print" | "-pe" | "-ep" => {
                c.inline.extend(args.get(i + 1).cloned());
                return c;
            }
            "-r"
            | "--require"
            | "--import"
            | "--loader"
            | "--experimental-loader"
            | "--input-type"
            | "--conditions"
            | "-C"
            | "--env-file"
            | "--title" => i += 2,
            "-" => {
                c.stdin = true;
                return c;
            }
            "--" => {
                if args.get(i + 1).is_some() {
                    c.file = Some(i + 1);
                }
                return c;
            }
            _ => {
                for p in ["--eval=", "--print="] {
                    if let Some(code) = s.strip_prefix(p) {
                        c.inline.push(Arg::Lit(code.to_owned()));
                        return c;
                    }
                }
                if s.starts_with('-') {
                    i += 1;
                } else {
                    c.file = Some(i);
                    return c;
                }
            }
        }
    }
    c.stdin = true;
    c
}

/// The table of a scripting language.
fn table(lang: Lang) -> Option<&'static Table> {
    Some(match lang {
        Lang::Python => &tables::PYTHON,
        Lang::Perl => &tables::PERL,
        Lang::Ruby => &tables::RUBY,
        Lang::Node => &tables::JS,
        Lang::Php => &tables::PHP,
        Lang::Lua => &tables::LUA,
        _ => return None,
    })
}

/// What `code` in `lang` does.
pub fn read(lang: Lang, code: &str) -> Effects {
    let mut fx = Effects::default();
    match lang {
        Lang::Awk => awk::read(code, &mut fx),
        Lang::Sed => sed::read(code, &mut fx),
        Lang::Vim => vim::read(code, &mut fx, 0),
        Lang::Gdb => gdb::read(code, &mut fx),
        Lang::Make => make::read(code, &mut fx),
        _ => {
            if let Some(t) = table(lang) {
                read_code(t, code, &mut fx, 0);
            }
        }
    }
    fx
}

/// Reads code of a scripting language (also code found inside other code: `exec("…")`).
fn read_code(table: &'static Table, code: &str, fx: &mut Effects, depth: usize) {
    let lexed = lex::lex(code, table.syntax);
    if lexed.unclosed {
        // The interpreter refuses it; nothing of it runs. What was read is still checked.
    }
    calls::read(&lexed.toks, table, fx, depth);
}

/// Reads Python code (vim's `:py3`, gdb's `python`).
fn read_python(code: &str, fx: &mut Effects, depth: usize) {
    read_code(&tables::PYTHON, code, fx, depth);
}

/// Reads code of a language vim or gdb embed by its command name.
fn read_embedded(syntax: Syntax, code: &str, fx: &mut Effects, depth: usize) {
    let t = match syntax {
        Syntax::Python => &tables::PYTHON,
        Syntax::Perl => &tables::PERL,
        Syntax::Ruby => &tables::RUBY,
        Syntax::Lua => &tables::LUA,
        Syntax::Js => &tables::JS,
        Syntax::Php => &tables::PHP,
        Syntax::Awk => {
            awk::read(code, fx);
            return;
        }
    };
    read_code(t, code, fx, depth);
}

#[cfg(test)]
mod tests;
