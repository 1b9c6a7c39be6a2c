//! Code that commands run besides their arguments, checked as the shell's own: interpreters'
//! inline code ([`crate::interp`]), the commands `tar` and `rsync` run, git's `rebase -x`,
//! `submodule foreach`, `bisect run`, `difftool -x`, `grep -O`, `send-email --*-cmd`.

use super::follow::Script;
use super::{Arg, Call, Failure, Invocation, Walker, facts, is_shell};
use crate::interp::{self, Effects, Lang};
use crate::paths::{ANY, DIGITS};

impl Walker {
    /// Follows the code `name ARGS` runs, when it is one of the commands this module reads.
    pub(super) fn code(&mut self, name: &str, args: &[Arg], call: &Call, at: usize) {
        match name {
            "tar" | "gtar" | "bsdtar" | "rsync" => return self.archive_commands(name, args),
            "git" => return self.git_commands(args),
            _ => {}
        }
        let Some(lang) = Lang::of(name) else { return };
        let code = interp::code_of(lang, name, args);
        let mut texts: Vec<String> = code.inline.iter().map(|a| a.shape().to_owned()).collect();
        let mut fx = Effects::default();
        let mut from_stdin = code.stdin && texts.is_empty();
        if let Some(f) = code.file {
            match args.get(f).map(|a| self.script_of(a)) {
                Some(Script::Stdin) => from_stdin = true,
                Some(Script::Literal(t)) => texts.push(t.to_owned()),
                Some(Script::Unknown) => fx
                    .opaque
                    .push("it reads its code from another command at run time".into()),
                Some(Script::File) | None => {}
            }
        }
        if from_stdin {
            match (&call.stdin_script, call.stdin_piped) {
                (Some(s), false) => texts.push(s.clone()),
                (_, true) => fx
                    .opaque
                    .push("it reads its code from another command at run time".into()),
                (None, false) if self.code_stdin => fx
                    .opaque
                    .push("it reads its code from a program's output".into()),
                (None, false) => {}
            }
        }
        if let Some(p) = code.program
            && p < args.len()
        {
            self.invoke(Call {
                argv: args[p..].to_vec(),
                redirects: Vec::new(),
                writes: Vec::new(),
                env: Vec::new(),
                fed_by: Vec::new(),
                stdin_script: None,
                stdin_piped: true,
                extra: None,
            });
        }
        for t in &texts {
            let e = interp::read(lang, t);
            fx.shell.extend(e.shell);
            fx.argv.extend(e.argv);
            fx.deletes.extend(e.deletes);
            fx.writes.extend(e.writes);
            fx.named.extend(e.named);
            fx.opaque.extend(e.opaque);
            fx.writes_operands |= e.writes_operands;
        }
        if fx.writes_operands {
            for &k in &code.operands {
                if let Some(a) = args.get(k) {
                    fx.writes.push(a.shape().to_owned());
                }
            }
        }
        self.apply(at, fx);
    }

    /// Checks what code does as the command line's own: its shell commands and programs are
    /// walked (their stdin is the code's to write), its deletes are `rm`s, its writes and the
    /// paths it names are the command's; what cannot be read marks the command.
    fn apply(&mut self, at: usize, fx: Effects) {
        let mut opaque = !fx.opaque.is_empty();
        let saved = self.code_stdin;
        self.code_stdin = true;
        for s in &fx.shell {
            if s.contains(ANY) {
                opaque = true;
            } else {
                self.run_string(s, "code");
            }
        }
        for argv in fx.argv {
            match argv.first() {
                None => continue,
                Some(p) if p.contains(ANY) || p.is_empty() => {
                    opaque = true;
                    continue;
                }
                Some(_) => {}
            }
            let argv = argv.into_iter().map(shape_arg).collect();
            self.invoke(Call {
                argv,
                redirects: Vec::new(),
                writes: Vec::new(),
                env: Vec::new(),
                fed_by: Vec::new(),
                stdin_script: None,
                stdin_piped: true,
                extra: None,
            });
        }
        self.code_stdin = saved;
        for d in fx.deletes {
            let arg = shape_arg(d);
            let p = self.path_of(&arg);
            self.out.push(Invocation {
                name: "rm".into(),
                args: vec![Arg::Lit("-rf".into()), arg],
                operands: vec![p.clone()],
                wholes: vec![p],
                redirects: Vec::new(),
                fed_by: Vec::new(),
                feeds: Vec::new(),
                recursive: false,
                writes: Vec::new(),
                facts: Vec::new(),
            });
        }
        let writes: Vec<_> = fx
            .writes
            .into_iter()
            .map(|w| self.path_of(&shape_arg(w)))
            .collect();
        // The strings that may name a file (a `/`, a leading `.` or `~`, a part only known at
        // run time), each once; past a bound the code is too large to check string by string.
        let mut named: Vec<String> = fx
            .named
            .into_iter()
            .filter(|n| {
                !n.is_empty()
                    && n.len() <= 4096
                    && (n.contains(['/', ANY, DIGITS]) || n.starts_with(['.', '~']))
            })
            .collect();
        named.sort_unstable();
        named.dedup();
        if named.len() > MAX_NAMED {
            opaque = true;
            named.truncate(MAX_NAMED);
        }
        let named: Vec<_> = named
            .into_iter()
            .map(|n| self.path_of(&shape_arg(n)))
            .collect();
        if let Some(inv) = self.out.get_mut(at) {
            inv.writes.extend(writes);
            inv.operands.extend(named);
            if opaque {
                inv.facts.push(facts::INLINE_CODE);
            }
        }
    }

    /// The commands git runs for `rebase -x`, `submodule foreach`, `bisect run`,
    /// `difftool -x`, `grep -O`, `send-email --*-cmd`.
    fn git_commands(&mut self, args: &[Arg]) {
        let mut i = 0;
        while i < args.len() {
            match args[i].lit() {
                Some("-c" | "-C" | "--git-dir" | "--work-tree" | "--namespace") => i += 2,
                Some(s) if s.starts_with('-') => i += 1,
                _ => break,
            }
        }
        let Some(sub) = args.get(i).and_then(Arg::lit) else {
            return;
        };
        let rest = &args[i + 1..];
        let value_of = |names: &[&str]| -> Vec<Arg> {
            let mut out = Vec::new();
            for (k, a) in rest.iter().enumerate() {
                let Some(s) = a.lit() else { continue };
                for n in names {
                    if s == *n {
                        out.extend(rest.get(k + 1).cloned());
                    } else if let Some(v) = s.strip_prefix(n).and_then(|r| r.strip_prefix('=')) {
                        out.push(Arg::Lit(v.to_owned()));
                    } else if n.len() == 2
                        && !n.starts_with("--")
                        && let Some(v) = s.strip_prefix(n).filter(|v| !v.is_empty())
                    {
                        out.push(Arg::Lit(v.to_owned()));
                    }
                }
            }
            out
        };
        let commands: Vec<Arg> = match sub {
            "rebase" => value_of(&["-x", "--exec"]),
            "difftool" => value_of(&["-x", "--extcmd"]),
            "grep" => value_of(&["-O", "--open-files-in-pager"]),
            "send-email" => value_of(&["--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"]),
            "submodule" => {
                let words: Vec<&Arg> = rest
                    .iter()
                    .skip_while(|a| a.lit() != Some("foreach"))
                    .skip(1)
                    .skip_while(|a| a.lit().is_some_and(|s| s.starts_with('-')))
                    .collect();
                if words.is_empty() {
                    Vec::new()
                } else {
                    let text: Option<Vec<&str>> = words.iter().map(|a| a.lit()).collect();
                    vec![match text {
                        Some(t) => Arg::Lit(t.join(" ")),
                        None => Arg::Computed(ANY.to_string()),
                    }]
                }
            }
            "bisect" if rest.first().and_then(Arg::lit) == Some("run") && rest.len() > 1 => {
                self.invoke(Call {
                    argv: rest[1..].to_vec(),
                    redirects: Vec::new(),
                    writes: Vec::new(),
                    env: Vec::new(),
                    fed_by: Vec::new(),
                    stdin_script: None,
                    stdin_piped: false,
                    extra: None,
                });
                Vec::new()
            }
            _ => Vec::new(),
        };
        for c in commands {
            match c {
                Arg::Lit(s) => self.run_string(&s, "git"),
                Arg::Computed(_) => self.failures.push(Failure::Computed(
                    "git runs a command computed at run time".into(),
                )),
            }
        }
    }
}

/// The most distinct path-like strings of one piece of code that are checked.
const MAX_NAMED: usize = 1024;

/// An argument from a shape: literal when nothing in it is only known at run time.
fn shape_arg(s: String) -> Arg {
    if s.contains([ANY, DIGITS]) {
        Arg::Computed(s)
    } else {
        Arg::Lit(s)
    }
}

/// The script a shell, `source` or an interpreter runs from a file (`sh x.sh`, `python3
/// x.py`), if it is given one.
pub(super) fn script_operand<'a>(name: &str, args: &'a [Arg]) -> Option<&'a Arg> {
    if name == "source" || name == "." {
        return args.first();
    }
    if is_shell(name) {
        let mut i = 0;
        while i < args.len() {
            match args[i].lit() {
                Some("--") => return args.get(i + 1),
                Some("-o" | "+o" | "-O" | "+O") => i += 2,
                Some(s) if s.starts_with("--") => i += 1,
                Some(s) if (s.starts_with('-') || s.starts_with('+')) && s.len() > 1 => {
                    if s[1..].contains('c') {
                        return None;
                    }
                    i += 1;
                }
                _ => return args.get(i),
            }
        }
        return None;
    }
    let lang = Lang::of(name)?;
    interp::code_of(lang, name, args)
        .file
        .and_then(|k| args.get(k))
}
