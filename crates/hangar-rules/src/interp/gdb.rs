//! gdb commands (`-ex CMD`, `-iex CMD`, a command file on stdin, or stdin itself):
//! `shell CMD`/`!CMD`, `pipe … | CMD`, `python …`, `call system("…")`, `compile code …`,
//! `set exec-wrapper …`, `target remote | CMD`, `run ARGS` (through a shell), `make`,
//! `attach PID`, `dump … FILE`; and the program `--args` names.

use super::lex::{self, Syntax};
use super::tables::{Effect, Table};
use super::{Code, Effects};
use crate::paths::ANY;
use crate::shell::Arg;

/// C calls an expression may make in the debugged program.
static C: Table = Table {
    syntax: Syntax::Js,
    concat: &[],
    paren_less: false,
    qualified: &[],
    builtins: &[
        ("system", Effect::Shell(0)),
        ("_shell", Effect::Shell(0)),
        ("popen", Effect::Shell(0)),
        ("execl", Effect::ExecL(0, 1)),
        ("execlp", Effect::ExecL(0, 1)),
        ("execle", Effect::ExecL(0, 1)),
        ("execv", Effect::ExecV(0, 1)),
        ("execvp", Effect::ExecV(0, 1)),
        ("execve", Effect::ExecV(0, 1)),
        ("unlink", Effect::Delete(0)),
        ("remove", Effect::Delete(0)),
        ("rmdir", Effect::Delete(0)),
        (
            "dlopen",
            Effect::Opaque("it loads native code into the program"),
        ),
        (
            "mprotect",
            Effect::Opaque("it changes the program's memory"),
        ),
    ],
    methods: &[],
    path_methods: &[],
    unknown_methods: &[],
    home_names: &[],
    env_maps: &[],
    modules: &[],
};

/// gdb's options.
pub(super) fn code_of(args: &[Arg]) -> Code {
    let mut c = Code::default();
    let mut batch = false;
    let mut i = 0;
    while i < args.len() {
        let s = args[i].lit().unwrap_or("");
        let (k, v) = match s.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v)),
            _ => (s, None),
        };
        let name = k.trim_start_matches('-');
        match name {
            "ex" | "eval-command" | "iex" | "init-eval-command" => match v {
                Some(v) => c.inline.push(Arg::Lit(v.to_owned())),
                None => {
                    i += 1;
                    c.inline.extend(args.get(i).cloned());
                }
            },
            "x" | "command" | "ix" | "init-command" => {
                if v.is_none() {
                    i += 1;
                    c.file = Some(i);
                } else {
                    c.inline.push(Arg::Computed(ANY.to_string()));
                }
            }
            "args" => {
                c.program = Some(i + 1);
                break;
            }
            "batch" => batch = true,
            "p" | "pid" | "s" | "symbols" | "e" | "exec" | "se" | "c" | "core" | "d"
            | "directory" | "cd" | "b" | "l" | "D" | "data-directory" | "i" | "interpreter"
            | "tty" | "t"
                if v.is_none() && s.starts_with('-') =>
            {
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    c.stdin = !batch && c.file.is_none();
    c
}

/// What gdb commands do, one per line.
pub(super) fn read(code: &str, fx: &mut Effects) {
    let lines: Vec<&str> = code.lines().collect();
    let mut k = 0;
    while k < lines.len() {
        let line = lines[k].trim();
        k += 1;
        if let Some(rest) = line.strip_prefix('!') {
            if rest.trim().is_empty() {
                fx.opaque.push("it starts a shell".into());
            }
            fx.shell.push(rest.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix('|') {
            pipe(rest, fx);
            continue;
        }
        let word: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        let rest = line[word.len()..].trim_start();
        let is = |full: &str, min: usize| word.len() >= min && full.starts_with(word.as_str());
        if is("shell", 2) {
            if rest.is_empty() {
                fx.opaque.push("it starts a shell".into());
            }
            fx.shell.push(rest.to_owned());
        } else if is("pipe", 4) {
            pipe(rest, fx);
        } else if is("python", 2) || is("python-interactive", 2) || word == "pi" {
            if rest.is_empty() && k >= lines.len() {
                fx.opaque.push("it reads Python code from its input".into());
            } else if rest.is_empty() {
                // The code follows up to `end`.
                let mut body = String::new();
                while k < lines.len() && lines[k].trim() != "end" {
                    body.push_str(lines[k]);
                    body.push('\n');
                    k += 1;
                }
                k += 1;
                super::read_python(&body, fx, 1);
            } else {
                super::read_python(rest, fx, 1);
            }
        } else if is("guile", 2) {
            fx.opaque.push("it runs Guile code".into());
        } else if is("source", 2) {
            if rest.starts_with("/dev/") || rest.starts_with("/proc/") {
                fx.opaque
                    .push("it sources commands another command writes at run time".into());
            } else {
                fx.named.push(rest.to_owned());
            }
        } else if is("call", 3)
            || is("print", 1)
            || is("output", 3)
            || is("inspect", 3)
            || is("printf", 6)
            || is("dprintf", 3)
            || (is("set", 3) && !rest.starts_with("exec-wrapper") && !rest.starts_with("logging"))
            || is("compile", 3)
            || is("expression", 4)
        {
            let expr = rest
                .trim_start_matches("code")
                .trim_start_matches("print")
                .trim_start_matches("var");
            let toks = lex::lex(expr, Syntax::Js).toks;
            super::calls::read(&toks, &C, fx, 1);
            if is("compile", 3) && rest.starts_with("file") {
                fx.opaque.push("it compiles a file into the program".into());
            }
        } else if is("set", 3) {
            if let Some(w) = rest.strip_prefix("exec-wrapper") {
                fx.shell.push(w.trim().to_owned());
            } else if let Some(l) = rest.strip_prefix("logging") {
                let l = l.trim();
                if let Some(f) = l.strip_prefix("file") {
                    fx.writes.push(f.trim().to_owned());
                }
            }
        } else if is("eval", 4) {
            fx.opaque.push("it builds a gdb command at run time".into());
        } else if is("target", 3) || is("tar", 3) {
            if let Some((_, cmd)) = rest.split_once('|') {
                fx.shell.push(cmd.trim().to_owned());
            }
        } else if is("run", 1) || is("start", 5) || is("starti", 6) {
            // The program starts through a shell that reads these arguments.
            if rest.contains([';', '|', '&', '$', '`', '<', '>', '(', ')', '\n']) {
                fx.shell.push(format!("true {rest}"));
            }
        } else if is("make", 4) {
            let mut argv = vec!["make".to_owned()];
            argv.extend(rest.split_whitespace().map(str::to_owned));
            fx.argv.push(argv);
        } else if is("attach", 2) {
            let mut argv = vec!["gdb".to_owned(), "-p".to_owned()];
            argv.push(rest.split_whitespace().next().unwrap_or("").to_owned());
            fx.argv.push(argv);
        } else if is("dump", 2) || is("append", 3) || is("generate-core-file", 3) || is("gcore", 5)
        {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let file = match words.iter().position(|w| matches!(*w, "memory" | "value")) {
                Some(at) => words.get(at + 1),
                None if word.starts_with('g') => words.first(),
                None => None,
            };
            fx.writes
                .push(file.map_or_else(|| ANY.to_string(), |f| (*f).to_owned()));
        } else if is("file", 3) || is("exec-file", 4) || is("symbol-file", 3) {
            fx.named.push(rest.to_owned());
        } else if is("edit", 2) {
            fx.opaque
                .push("it starts the editor the environment names".into());
        }
    }
}

/// `pipe [-d DELIM] COMMAND DELIM SHELL_COMMAND` (the delimiter is `|` by default).
fn pipe(rest: &str, fx: &mut Effects) {
    let (delim, rest) = match rest.trim_start().strip_prefix("-d") {
        Some(r) => {
            let r = r.trim_start();
            let d: String = r.chars().take_while(|c| !c.is_whitespace()).collect();
            let after = r[d.len()..].to_owned();
            (d, after)
        }
        None => ("|".to_owned(), rest.to_owned()),
    };
    match rest.split_once(delim.as_str()) {
        Some((_, cmd)) => fx.shell.push(cmd.trim().to_owned()),
        None => fx.opaque.push("its pipe command cannot be read".into()),
    }
}
