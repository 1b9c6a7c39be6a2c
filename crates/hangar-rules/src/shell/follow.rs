//! Commands that run other commands: wrappers (`env`, `sudo`, `timeout`, `xargs`, `strace`,
//! `sg`, `parallel`, …), shells given a string or a script on stdin, `source`, `eval`, `trap`,
//! `find -exec`; interpreters go on to `code.rs`.

use super::opts::{self, Spec};
use super::{Arg, Call, Failure, Walker, is_shell, literal_lines};
use crate::paths::{ANY, BELOW};
use crate::quote_argv;

/// Where a shell, `source` or an interpreter reads its script from.
pub(super) enum Script<'a> {
    /// A file: its content is not part of the command.
    File,
    /// Standard input (`/dev/stdin`, `/dev/fd/0`, no script operand).
    Stdin,
    /// A process substitution that writes literal text (`bash <(echo 'ls')`).
    Literal(&'a str),
    /// Another file descriptor or a process substitution: only known at run time.
    Unknown,
}

impl Walker {
    /// Wrappers that run their arguments, shells that run a string, `eval`, `find -exec`;
    /// `at` is the command's own record (facts found while following are added to it).
    pub(super) fn follow(&mut self, name: &str, args: &[Arg], call: &Call, at: usize) {
        match name {
            "env" => self.env(args, call, at),
            "command" | "builtin" | "exec" | "nohup" | "setsid" | "time" | "sudo" | "doas"
            | "nice" | "stdbuf" | "ionice" | "busybox" | "chronic" | "unbuffer" | "catchsegv"
            | "torsocks" | "proxychains" | "proxychains4" | "fakeroot" | "pkexec" => {
                self.wrapper(name, args, call)
            }
            "timeout" => self.after_first(
                skip_options(args, &["-s", "--signal", "-k", "--kill-after"], false),
                call,
            ),
            "chrt" | "taskset" => self.after_first(skip_options(args, &[], false), call),
            "flock" => self.flock(args, call),
            "watch" => self.watch(args),
            "xargs" => self.xargs(args, call),
            "strace" | "ltrace" => self.trace(name, args, call),
            "sg" => self.sg(args),
            "parallel" => self.parallel(args, call),
            "ssh" | "scp" | "sftp" | "slogin" => self.ssh(name, args, call),
            "tmux" => self.tmux(args),
            "screen" => self.screen(args, call),
            "source" | "." => self.source(name, args, call),
            "find" => self.find_exec(args, call),
            "eval" => self.eval(args),
            "alias" => {
                for a in args {
                    if let Some((_, v)) = a.lit().and_then(|s| s.split_once('=')) {
                        self.run_string(v, "alias");
                    }
                }
            }
            "trap" => self.trap(args),
            "su" | "script" | "runuser" => {
                if let Some(s) = option_value(args, &["-c", "--command"]) {
                    self.run_string(s, name);
                }
            }
            "pwsh" | "powershell" => self.powershell(args, call, at),
            _ if is_shell(name) => self.shell(name, args, call),
            _ => match runner(name, args) {
                Some(Runner::Argv(k)) => self.invoke(inner(call, &args[k..])),
                Some(Runner::Words(k)) => self.run_words(args.get(k..k + 1).unwrap_or(&[]), name),
                None => self.code(name, args, call, at),
            },
        }
    }

    /// Wrappers that run the command after their options (`sudo`, `nice`, `nohup`, …).
    fn wrapper(&mut self, name: &str, args: &[Arg], call: &Call) {
        let value_opts: &[&str] = match name {
            "command" | "builtin" | "nohup" | "setsid" | "time" | "busybox" => &[],
            "exec" => &["-a"],
            "stdbuf" => &["-i", "-o", "-e"],
            _ => WRAPPER_VALUES,
        };
        let rest = skip_options(args, value_opts, false);
        if (name == "sudo" || name == "su") && rest.is_empty() {
            return;
        }
        self.invoke(inner(call, rest));
    }

    /// Wrappers whose first operand is theirs (`timeout DURATION`, `taskset MASK`): the
    /// command after it.
    fn after_first(&mut self, rest: &[Arg], call: &Call) {
        if rest.len() > 1 {
            self.invoke(inner(call, &rest[1..]));
        }
    }

    /// `flock -c STRING`, or `flock FILE COMMAND…`.
    fn flock(&mut self, args: &[Arg], call: &Call) {
        if let Some(s) = option_value(args, &["-c", "--command"]) {
            self.run_string(s, "flock -c");
            return;
        }
        let rest = skip_options(
            args,
            &["-w", "--timeout", "-E", "--conflict-exit-code"],
            false,
        );
        self.after_first(rest, call);
    }

    /// `watch COMMAND…`: its words, joined, run by a shell.
    fn watch(&mut self, args: &[Arg]) {
        let rest = skip_options(args, &["-n", "--interval", "-d", "-q", "--equexit"], false);
        let text: Option<Vec<&str>> = rest.iter().map(Arg::lit).collect();
        match text {
            Some(parts) if !parts.is_empty() => self.run_string(&parts.join(" "), "watch"),
            Some(_) => {}
            None => self.failures.push(Failure::Computed(
                "watch runs a command computed at run time".into(),
            )),
        }
    }

    /// `strace`/`ltrace [options] COMMAND…`.
    fn trace(&mut self, name: &str, args: &[Arg], call: &Call) {
        let spec = Spec {
            short: trace_values(name),
            long: TRACE_LONG,
            permute: false,
        };
        let p = opts::parse(args, &spec);
        self.invoke(inner(call, &args[p.rest..]));
    }

    /// `sg [-] GROUP [-c] COMMAND`: COMMAND is given to /bin/sh -c.
    fn sg(&mut self, args: &[Arg]) {
        let mut rest = args;
        if rest.first().and_then(Arg::lit) == Some("-") {
            rest = &rest[1..];
        }
        let rest = rest.get(1..).unwrap_or(&[]);
        let rest = match rest.first().and_then(Arg::lit) {
            Some("-c") => &rest[1..],
            _ => rest,
        };
        self.run_words(rest, "sg");
    }

    /// `screen [options] COMMAND…`; `screen -X` commands another session.
    fn screen(&mut self, args: &[Arg], call: &Call) {
        let spec = Spec {
            short: "cehpsStTX",
            long: &["-Logfile"],
            permute: false,
        };
        let p = opts::parse(args, &spec);
        if p.has(&["X"]) {
            self.failures.push(Failure::Computed(
                "screen -X sends commands to another screen session".into(),
            ));
            return;
        }
        if p.rest < args.len() {
            self.invoke(inner(call, &args[p.rest..]));
        }
    }

    /// `source FILE`, `. FILE`: a script read from stdin or written on the line is read.
    fn source(&mut self, name: &str, args: &[Arg], call: &Call) {
        match args.first().map(|a| self.script_of(a)) {
            Some(Script::Stdin) => self.read_stdin(name, call),
            Some(Script::Literal(text)) => {
                let text = text.to_owned();
                self.run_string(&text, name)
            }
            Some(Script::Unknown) => self.failures.push(Failure::Computed(format!(
                "{name} reads a script that another command writes at run time"
            ))),
            Some(Script::File) | None => {}
        }
    }

    /// `eval WORDS…`: the words, joined, run as a command line.
    fn eval(&mut self, args: &[Arg]) {
        let text: Option<Vec<&str>> = args.iter().map(Arg::lit).collect();
        match text {
            Some(parts) => self.run_string(&parts.join(" "), "eval"),
            None => self.failures.push(Failure::Computed(
                "eval runs a string computed at run time".into(),
            )),
        }
    }

    /// `trap STRING SIGNALS`: the string, run later.
    fn trap(&mut self, args: &[Arg]) {
        if let Some(Arg::Lit(s)) = args
            .iter()
            .find(|a| a.lit().is_none_or(|s| !s.starts_with('-')))
        {
            self.run_string(s, "trap");
        } else if let Some(Arg::Computed(_)) = args.first() {
            self.failures.push(Failure::Computed(
                "trap runs a string computed at run time".into(),
            ));
        }
    }

    /// PowerShell code is not read: given inline, it is denied.
    fn powershell(&mut self, args: &[Arg], call: &Call, at: usize) {
        let inline = args.iter().filter_map(Arg::lit).any(|a| {
            matches!(
                a.to_ascii_lowercase().as_str(),
                "-c" | "-command" | "-e" | "-ec" | "-encodedcommand" | "-encoded" | "-"
            )
        });
        if inline || (args.is_empty() && (call.stdin_script.is_some() || call.stdin_piped)) {
            self.out[at].facts.push(super::facts::INLINE_CODE);
        }
    }

    /// `sh -c STRING`, `bash -lc STRING`, a shell given a script it reads from stdin, a file
    /// descriptor or a process substitution, or a shell reading its script from stdin.
    pub(super) fn shell(&mut self, name: &str, args: &[Arg], call: &Call) {
        let mut wants_string = false;
        let mut i = 0;
        while i < args.len() {
            match &args[i] {
                Arg::Lit(s) if s == "--" => {
                    i += 1;
                    break;
                }
                Arg::Lit(s) if s == "-o" || s == "+o" || s == "-O" || s == "+O" => i += 2,
                Arg::Lit(s) if s.starts_with("--") => i += 1,
                Arg::Lit(s) if (s.starts_with('-') || s.starts_with('+')) && s.len() > 1 => {
                    if s[1..].contains('c') {
                        wants_string = true;
                    }
                    i += 1;
                }
                _ => break,
            }
        }
        // What xargs appends comes after the shell's own words (`xargs sh -c`: the script).
        let appended = call.extra.as_deref().unwrap_or(&[]);
        let operand = args.get(i).or_else(|| appended.first());
        if wants_string {
            match operand {
                Some(Arg::Lit(s)) => self.run_string(s, &format!("{name} -c")),
                Some(Arg::Computed(_)) => self.failures.push(Failure::Computed(format!(
                    "{name} -c runs a string computed at run time"
                ))),
                None => {}
            }
            return;
        }
        match operand.map(|a| self.script_of(a)) {
            None | Some(Script::Stdin) => self.read_stdin(name, call),
            Some(Script::Literal(text)) => {
                let text = text.to_owned();
                self.run_string(&text, name);
            }
            Some(Script::Unknown) => self.failures.push(Failure::Computed(format!(
                "{name} reads a script that another command writes at run time"
            ))),
            // A script file: its content is not part of the command.
            Some(Script::File) => {}
        }
    }

    /// A shell (or `source`) reading its script from stdin: the literal text fed to it, or
    /// denied when another command writes it at run time.
    pub(super) fn read_stdin(&mut self, name: &str, call: &Call) {
        match (&call.stdin_script, call.stdin_piped) {
            (Some(s), false) => {
                let s = s.clone();
                self.run_string(&s, &format!("{name} reading stdin"));
            }
            (_, true) => self.failures.push(Failure::Computed(format!(
                "{name} reads a script that another command writes at run time"
            ))),
            (None, false) if self.code_stdin => self.failures.push(Failure::Computed(format!(
                "{name} reads a script that the code running it writes at run time"
            ))),
            (None, false) => {}
        }
    }

    /// Where a script operand is read from.
    pub(super) fn script_of<'a>(&'a self, a: &'a Arg) -> Script<'a> {
        if let Some(lit) = self.psub_literal(a) {
            return match lit {
                Some(text) => Script::Literal(text),
                None => Script::Unknown,
            };
        }
        let Some(s) = a.lit() else {
            return Script::File;
        };
        match s {
            "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0" | "/proc/thread-self/fd/0" => {
                Script::Stdin
            }
            _ if s.starts_with("/dev/fd/")
                || (s.starts_with("/proc/") && s.contains("/fd/"))
                || s == "/dev/tty" =>
            {
                Script::Unknown
            }
            _ => Script::File,
        }
    }

    /// Words that a wrapper joins into one shell command (`sg g cmd args`, `watch cmd`).
    fn run_words(&mut self, words: &[Arg], how: &str) {
        let text: Option<Vec<&str>> = words.iter().map(Arg::lit).collect();
        match text {
            Some(parts) if !parts.is_empty() => self.run_string(&parts.join(" "), how),
            Some(_) => {}
            None => self.failures.push(Failure::Computed(format!(
                "{how} runs a command computed at run time"
            ))),
        }
    }

    /// `env [OPTIONS] [NAME=VALUE]... [COMMAND [ARG]...]`, including `-S STRING` (also
    /// attached, `-S"…"`, `--split-string=…`), whose words come before the remaining arguments.
    fn env(&mut self, args: &[Arg], call: &Call, at: usize) {
        let mut env = call.env.clone();
        let mut split: Option<Arg> = None;
        let mut i = 0;
        'args: while i < args.len() {
            let Arg::Lit(s) = &args[i] else { break };
            i += 1;
            if s == "--" {
                break;
            }
            if let Some(long) = s.strip_prefix("--") {
                let (k, v) = match long.split_once('=') {
                    Some((k, v)) => (k, Some(Arg::Lit(v.to_owned()))),
                    None => (long, None),
                };
                let takes = matches!(k, "split-string" | "unset" | "chdir");
                let v = match v {
                    Some(v) => Some(v),
                    None if takes => {
                        i += 1;
                        args.get(i - 1).cloned()
                    }
                    None => None,
                };
                if k == "split-string" {
                    split = Some(v.unwrap_or(Arg::Computed(ANY.to_string())));
                    break;
                }
                continue;
            }
            if s.len() > 1 && s.starts_with('-') {
                for (pos, c) in s.char_indices().skip(1) {
                    if matches!(c, 'S' | 'u' | 'C' | 'P') {
                        let attached = &s[pos + 1..];
                        let v = if attached.is_empty() {
                            i += 1;
                            args.get(i - 1).cloned()
                        } else {
                            Some(Arg::Lit(attached.to_owned()))
                        };
                        if c == 'S' {
                            split = Some(v.unwrap_or(Arg::Computed(ANY.to_string())));
                            break 'args;
                        }
                        break;
                    }
                }
                continue;
            }
            match s.split_once('=') {
                Some((n, v)) if !n.is_empty() => env.push((n.to_owned(), Arg::Lit(v.to_owned()))),
                _ => {
                    i -= 1;
                    break;
                }
            }
        }
        if env
            .iter()
            .any(|(n, v)| crate::git::env_runs_code(n, v.lit()))
        {
            self.out[at].facts.push(super::facts::GIT_RUNS_CODE);
        }
        let rest = args.get(i..).unwrap_or(&[]);
        match split {
            Some(Arg::Lit(text)) => {
                // The split words, then the rest, as one command line.
                let mut line = text;
                for a in rest {
                    line.push(' ');
                    match a {
                        Arg::Lit(s) => line.push_str(&quote_argv(&[s])),
                        Arg::Computed(_) => line.push_str("\"$HANGAR_COMPUTED\""),
                    }
                }
                self.run_string(&line, "env -S");
            }
            Some(Arg::Computed(_)) => self.failures.push(Failure::Computed(
                "env -S splits a string computed at run time".into(),
            )),
            None => self.invoke(Call {
                argv: rest.to_vec(),
                redirects: call.redirects.clone(),
                writes: call.writes.clone(),
                env,
                fed_by: call.fed_by.clone(),
                stdin_script: call.stdin_script.clone(),
                stdin_piped: call.stdin_piped,
                extra: call.extra.clone(),
            }),
        }
    }

    /// `xargs [OPTIONS] [COMMAND [ARG]...]`: COMMAND with what xargs reads appended (or put
    /// where `-I STRING` stands). Read from a literal `echo` or here-document, the words are
    /// known; from a `find`, they are under its roots; else only known at run time.
    fn xargs(&mut self, args: &[Arg], call: &Call) {
        let spec = Spec {
            short: "IinPLldEesa",
            long: &[
                "--max-args",
                "--max-procs",
                "--max-lines",
                "--delimiter",
                "--eof",
                "--max-chars",
                "--arg-file",
                "--replace",
                "--process-slot-var",
            ],
            permute: false,
        };
        let p = opts::parse(args, &spec);
        let mut command: Vec<Arg> = args[p.rest..].to_vec();
        if command.is_empty() {
            command = vec![Arg::Lit("echo".into())];
        }
        let replace: Option<String> = p
            .values(&["I", "--replace"])
            .next()
            .map(|r| r.lit().unwrap_or("{}").to_owned())
            .or_else(|| p.has(&["i"]).then(|| "{}".to_owned()));
        let from_file = p.has(&["a", "--arg-file"]);
        let nul = p.has(&["0", "--null"]);
        let delim = p.values(&["d", "--delimiter"]).next().and_then(Arg::lit);
        let literal = match (&call.stdin_script, call.stdin_piped, from_file) {
            (Some(text), false, false) => Some(xargs_words(text, nul, delim, replace.is_some())),
            _ => None,
        };
        let run = |w: &mut Walker, argv: Vec<Arg>, extra: Option<Vec<Arg>>| {
            w.invoke(Call {
                argv,
                redirects: call.redirects.clone(),
                writes: call.writes.clone(),
                env: call.env.clone(),
                fed_by: call.fed_by.clone(),
                stdin_script: None,
                stdin_piped: false,
                extra,
            });
        };
        if literal.as_ref().is_some_and(|l| l.len() > MAX_XARGS_RUNS) {
            self.failures.push(Failure::Unparsable(format!(
                "xargs is fed more than {MAX_XARGS_RUNS} lines to check one by one"
            )));
            return;
        }
        match (replace, literal) {
            (Some(r), Some(lines)) => {
                for line in lines.iter() {
                    let argv = command
                        .iter()
                        .map(|a| match a {
                            Arg::Lit(s) => Arg::Lit(s.replace(&r, line)),
                            c => c.clone(),
                        })
                        .collect();
                    run(self, argv, None);
                }
            }
            (Some(r), None) => {
                // Where the input goes only the run knows.
                let argv = command
                    .iter()
                    .map(|a| match a {
                        Arg::Lit(s) if s.contains(&r) => {
                            Arg::Computed(s.replace(&r, &ANY.to_string()))
                        }
                        c => c.clone(),
                    })
                    .collect();
                run(self, argv, None);
            }
            (None, Some(words)) => {
                let per = p
                    .values(&["n", "--max-args", "L", "l", "--max-lines"])
                    .next()
                    .and_then(Arg::lit)
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| *n > 0)
                    .unwrap_or(words.len().max(1));
                for chunk in words.chunks(per) {
                    let extra = chunk.iter().map(|w| Arg::Lit(w.clone())).collect();
                    run(self, command.clone(), Some(extra));
                }
                if words.is_empty() {
                    run(self, command, Some(Vec::new()));
                }
            }
            (None, None) => {
                let extra = self
                    .find_feeding(&call.fed_by)
                    .unwrap_or_else(|| vec![Arg::Computed(ANY.to_string())]);
                run(self, command, Some(extra));
            }
        }
    }

    /// `ssh [OPTIONS] HOST [COMMAND…]`: the command runs in a shell there (read here with its
    /// directory unknown), and `-o ProxyCommand=…`/`LocalCommand`/`KnownHostsCommand` run here.
    fn ssh(&mut self, name: &str, args: &[Arg], call: &Call) {
        let spec = Spec {
            short: "BbcDEeFIiJLlmOoPpQRSWw",
            long: &[],
            permute: false,
        };
        let p = opts::parse(args, &spec);
        for o in p.values(&["o"]) {
            match o {
                Arg::Lit(kv) => {
                    let (k, v) = kv
                        .split_once(['=', ' '])
                        .map_or((kv.as_str(), ""), |(k, v)| (k, v));
                    if matches!(
                        k.to_ascii_lowercase().as_str(),
                        "proxycommand" | "localcommand" | "knownhostscommand" | "match"
                    ) {
                        self.run_string(v.trim_start_matches('='), name);
                    }
                }
                Arg::Computed(_) => self.failures.push(Failure::Computed(format!(
                    "{name} -o sets an option computed at run time"
                ))),
            }
        }
        if p.values(&["F"]).any(|f| f.lit() != Some("/dev/null")) {
            self.failures.push(Failure::Computed(format!(
                "{name} -F reads a configuration that may run commands"
            )));
        }
        if name != "ssh" && name != "slogin" {
            return;
        }
        let command = args.get(p.rest + 1..).unwrap_or(&[]);
        let saved = std::mem::replace(&mut self.cwd, super::Cwd::Unknown);
        if command.is_empty() {
            // A login shell reading its commands from stdin.
            if call.stdin_script.is_some() || call.stdin_piped {
                self.read_stdin(name, call);
            }
        } else {
            self.run_words(command, name);
        }
        self.cwd = saved;
    }

    /// `tmux [OPTIONS] COMMAND [ARGS]` (several separated by `;`): the shell commands that
    /// `new-session`, `new-window`, `split-window`, `respawn-*`, `run-shell`, `if-shell`,
    /// `pipe-pane` and `display-popup` run; `send-keys` types into another program.
    fn tmux(&mut self, args: &[Arg]) {
        let global = Spec {
            short: "cfLST",
            long: &[],
            permute: false,
        };
        let g = opts::parse(args, &global);
        for c in g.values(&["c"]) {
            match c {
                Arg::Lit(s) => self.run_string(s, "tmux -c"),
                Arg::Computed(_) => self.failures.push(Failure::Computed(
                    "tmux -c runs a command computed at run time".into(),
                )),
            }
        }
        for cmd in args[g.rest..].split(|a| matches!(a.lit(), Some(";" | "\\;"))) {
            let Some(sub) = cmd.first().and_then(Arg::lit) else {
                continue;
            };
            let runs = matches!(
                sub,
                "new-session"
                    | "new"
                    | "new-window"
                    | "neww"
                    | "split-window"
                    | "splitw"
                    | "respawn-pane"
                    | "respawnp"
                    | "respawn-window"
                    | "respawnw"
                    | "run-shell"
                    | "run"
                    | "if-shell"
                    | "if"
                    | "pipe-pane"
                    | "pipep"
                    | "display-popup"
                    | "popup"
            );
            if matches!(
                sub,
                "send-keys"
                    | "send"
                    | "paste-buffer"
                    | "pasteb"
                    | "load-buffer"
                    | "loadb"
                    | "source-file"
                    | "source"
            ) {
                self.failures.push(Failure::Computed(format!(
                    "tmux {sub} feeds another program what it runs"
                )));
                continue;
            }
            if !runs {
                continue;
            }
            let p = opts::parse(
                &cmd[1..],
                &Spec {
                    short: "ceFhlnsStTwxy",
                    long: &[],
                    permute: false,
                },
            );
            let words = &cmd[1 + p.rest..];
            let words = if matches!(sub, "if-shell" | "if") {
                words.get(..1).unwrap_or(&[])
            } else {
                words
            };
            if !words.is_empty() {
                self.run_words(words, "tmux");
            }
        }
    }

    /// GNU parallel: `parallel [OPTIONS] COMMAND ::: ARGS`, each argument put where `{}` stands
    /// (or appended), the result run by a shell; with no `:::` the arguments are the lines it
    /// reads, and with no command each argument is a command.
    fn parallel(&mut self, args: &[Arg], call: &Call) {
        let spec = Spec {
            short: "adEIjJLlNnPSsCX",
            long: &[
                "--arg-file",
                "--delimiter",
                "--eof",
                "--jobs",
                "--max-args",
                "--max-lines",
                "--sshlogin",
                "--sshloginfile",
                "--colsep",
                "--joblog",
                "--results",
                "--res",
                "--tmpdir",
                "--workdir",
                "--wd",
                "--basefile",
                "--bf",
                "--return",
                "--env",
                "--halt",
                "--timeout",
                "--delay",
                "--memfree",
                "--load",
                "--nice",
                "--retries",
                "--tagstring",
                "--tag-string",
                "--rpl",
                "--limit",
                "--termseq",
                "--profile",
                "--max-chars",
                "--block",
                "--header",
                "--shebang",
                "--sqlmaster",
                "--sqlworker",
                "--sqlandworker",
                "--transferfile",
                "--tf",
                "--replace",
                "--extensionreplace",
                "--basenamereplace",
                "--dirnamereplace",
                "--seqreplace",
                "--ssh",
                "--filter",
                "--resume-failed",
            ],
            permute: false,
        };
        let p = opts::parse(args, &spec);
        let rest = &args[p.rest..];
        let sep = rest
            .iter()
            .position(|a| matches!(a.lit(), Some(":::" | "::::" | ":::+" | "::::+")));
        let template = &rest[..sep.unwrap_or(rest.len())];
        let mut inputs: Vec<Arg> = Vec::new();
        let mut from_files = p.has(&["a", "--arg-file"]);
        if let Some(at) = sep {
            let mut files = false;
            for a in &rest[at..] {
                match a.lit() {
                    Some(":::" | ":::+") => files = false,
                    Some("::::" | "::::+") => files = true,
                    _ if files => from_files = true,
                    _ => inputs.push(a.clone()),
                }
            }
        } else if let (Some(text), false) = (&call.stdin_script, call.stdin_piped) {
            inputs.extend(literal_lines(text).into_iter().map(Arg::Lit));
        } else {
            from_files = true;
        }
        if from_files {
            inputs.push(Arg::Computed(ANY.to_string()));
        }
        if inputs.len() > MAX_XARGS_RUNS {
            self.failures.push(Failure::Unparsable(format!(
                "parallel is given more than {MAX_XARGS_RUNS} arguments to check one by one"
            )));
            return;
        }
        let words: Option<Vec<&str>> = template.iter().map(Arg::lit).collect();
        let Some(words) = words else {
            self.failures.push(Failure::Computed(
                "parallel runs a command computed at run time".into(),
            ));
            return;
        };
        let template = words.join(" ");
        for input in &inputs {
            let value = match input {
                Arg::Lit(s) => quote_argv(&[s]),
                Arg::Computed(_) => "\"$HANGAR_COMPUTED\"".to_owned(),
            };
            let line = if template.is_empty() {
                match input {
                    Arg::Lit(s) => s.clone(),
                    Arg::Computed(_) => {
                        self.failures.push(Failure::Computed(
                            "parallel runs commands it reads at run time".into(),
                        ));
                        continue;
                    }
                }
            } else if template.contains('{') && template.contains('}') {
                replace_placeholders(&template, &value)
            } else {
                format!("{template} {value}")
            };
            self.run_string(&line, "parallel");
        }
    }

    pub(super) fn run_string(&mut self, text: &str, _how: &str) {
        let saved = self.cwd.clone();
        self.script(text);
        self.cwd = saved;
    }

    /// `find ROOTS... -exec CMD {} ;` runs CMD with `{}` standing for what find found (under
    /// the roots).
    pub(super) fn find_exec(&mut self, args: &[Arg], call: &Call) {
        let roots = find_roots(args);
        let mut i = 0;
        while i < args.len() {
            let is_exec = matches!(args[i].lit(), Some("-exec" | "-execdir" | "-ok" | "-okdir"));
            i += 1;
            if !is_exec {
                continue;
            }
            let start = i;
            while i < args.len() && !matches!(args[i].lit(), Some(";" | "+")) {
                i += 1;
            }
            let mut argv = Vec::new();
            for a in &args[start..i] {
                match a.lit() {
                    Some(s) if s.contains("{}") => {
                        // What find finds: each root, and anything below it.
                        let roots = if roots.is_empty() {
                            vec![Arg::Lit(".".into())]
                        } else {
                            roots.clone()
                        };
                        for r in &roots {
                            match r {
                                Arg::Lit(root) => {
                                    argv.push(Arg::Lit(s.replace("{}", root)));
                                    argv.push(Arg::Lit(s.replace("{}", &below(root))));
                                }
                                Arg::Computed(_) => argv.push(r.clone()),
                            }
                        }
                    }
                    _ => argv.push(a.clone()),
                }
            }
            self.invoke(Call {
                argv,
                redirects: Vec::new(),
                writes: Vec::new(),
                env: call.env.clone(),
                fed_by: call.fed_by.clone(),
                stdin_script: None,
                stdin_piped: false,
                extra: None,
            });
        }
    }

    /// When a `find` feeds this command (`find ... | xargs rm`), its roots.
    pub(super) fn find_feeding(&self, fed_by: &[String]) -> Option<Vec<Arg>> {
        if fed_by.len() != 1 || fed_by[0] != "find" {
            return None;
        }
        let f = self.out.iter().rev().find(|i| i.name == "find")?;
        let mut roots = find_roots(&f.args);
        if roots.is_empty() {
            roots.push(Arg::Lit(".".into()));
        }
        let below: Vec<Arg> = roots
            .iter()
            .filter_map(|r| r.lit().map(|root| Arg::Lit(below(root))))
            .collect();
        roots.extend(below);
        Some(roots)
    }
}

/// Where the command a runner runs starts: an argv, or one word that is a shell command.
pub(super) enum Runner {
    Argv(usize),
    Words(usize),
}

/// Tools that run a command given after a subcommand (`uv run CMD`, `poetry run CMD`,
/// `bundle exec CMD`, `npx CMD`, `nix develop -c CMD`, `nix-shell --run STR`): the
/// subcommand (empty: none), the short and long options that take a value, and how many
/// operands come before the command (`rustup run TOOLCHAIN CMD`).
const RUNNERS: &[(&str, &str, &str, &[&str], usize)] = &[
    (
        "uv",
        "run",
        "pw",
        &[
            "--with",
            "--with-editable",
            "--with-requirements",
            "--python",
            "--package",
            "--extra",
            "--group",
            "--env-file",
            "--directory",
            "--project",
            "--index",
            "--index-url",
            "--extra-index-url",
            "--from",
        ],
        0,
    ),
    ("poetry", "run", "CP", &["--directory", "--project"], 0),
    ("pipenv", "run", "", &[], 0),
    ("pdm", "run", "p", &["--project"], 0),
    ("rye", "run", "", &[], 0),
    ("hatch", "run", "e", &["--env"], 0),
    ("pixi", "run", "e", &["--environment", "--manifest-path"], 0),
    ("conda", "run", "np", &["--name", "--prefix", "--cwd"], 0),
    ("mamba", "run", "np", &["--name", "--prefix", "--cwd"], 0),
    (
        "micromamba",
        "run",
        "np",
        &["--name", "--prefix", "--cwd"],
        0,
    ),
    ("bundle", "exec", "", &["--gemfile"], 0),
    ("npm", "exec", "pw", &["--package", "--workspace"], 0),
    ("pnpm", "exec", "C", &["--dir", "--filter"], 0),
    ("pnpm", "dlx", "", &[], 0),
    ("yarn", "exec", "", &[], 0),
    ("yarn", "dlx", "p", &["--package"], 0),
    ("npx", "", "p", &["--package", "--call"], 0),
    ("bunx", "", "p", &["--package"], 0),
    ("rustup", "run", "", &[], 1),
    ("rbenv", "exec", "", &[], 0),
    ("pyenv", "exec", "", &[], 0),
    ("nodenv", "exec", "", &[], 0),
    ("asdf", "exec", "", &[], 0),
    ("direnv", "exec", "", &[], 1),
    ("devbox", "run", "", &[], 0),
    ("nix", "develop", "", &["--command"], 0),
];

/// The call a wrapper makes: `rest` as its words, with the wrapper's redirections, input and
/// environment.
fn inner(call: &Call, rest: &[Arg]) -> Call {
    Call {
        argv: rest.to_vec(),
        redirects: call.redirects.clone(),
        writes: call.writes.clone(),
        env: call.env.clone(),
        fed_by: call.fed_by.clone(),
        stdin_script: call.stdin_script.clone(),
        stdin_piped: call.stdin_piped,
        extra: call.extra.clone(),
    }
}

/// The options of `sudo`, `doas`, `nice`, `ionice`, … that take a value.
const WRAPPER_VALUES: &[&str] = &[
    "-a",
    "-u",
    "-g",
    "-n",
    "-p",
    "-c",
    "-t",
    "-h",
    "-U",
    "-C",
    "-D",
    "-r",
    "-i",
    "-o",
    "-e",
    "--adjustment",
    "--user",
    "--group",
    "--host",
    "--prompt",
    "--class",
    "--classdata",
    "--chdir",
    "--role",
    "--type",
];

/// The long options of `strace` and `ltrace` that take a value.
const TRACE_LONG: &[&str] = &[
    "--output",
    "--trace",
    "--user",
    "--env",
    "--string-limit",
    "--columns",
    "--trace-path",
    "--signal",
    "--status",
    "--pid",
    "--config",
    "--library",
    "--indent",
    "--align",
];

/// Where the command of a runner starts, if `name ARGS` is one.
pub(super) fn runner(name: &str, args: &[Arg]) -> Option<Runner> {
    // `nix-shell --run STR`/`--command STR`, `npm exec -c STR`, `nix develop -c CMD…`,
    // `mise exec TOOLS -- CMD`.
    let at = |opt: &[&str]| {
        args.iter()
            .position(|a| a.lit().is_some_and(|s| opt.contains(&s)))
    };
    match name {
        "nix-shell" => return at(&["--run", "--command"]).map(|k| Runner::Words(k + 1)),
        "mise" | "rtx" if matches!(args.first().and_then(Arg::lit), Some("exec" | "x")) => {
            return at(&["--"])
                .map(|k| Runner::Argv(k + 1))
                .filter(|r| match r {
                    Runner::Argv(k) | Runner::Words(k) => *k < args.len(),
                });
        }
        "npm" if args.first().and_then(Arg::lit) == Some("exec") => {
            if let Some(k) = at(&["-c", "--call"]) {
                return Some(Runner::Words(k + 1));
            }
        }
        "nix" if args.first().and_then(Arg::lit) == Some("develop") => {
            return at(&["-c", "--command"])
                .map(|k| k + 1)
                .filter(|k| *k < args.len())
                .map(Runner::Argv);
        }
        _ => {}
    }
    let (_, sub, short, long, skip) = RUNNERS.iter().find(|(n, s, ..)| {
        *n == name && (s.is_empty() || args.first().and_then(Arg::lit) == Some(*s))
    })?;
    let from = usize::from(!sub.is_empty());
    let p = opts::parse(
        &args[from..],
        &Spec {
            short,
            long,
            permute: false,
        },
    );
    let start = from + p.rest + skip;
    (start < args.len()).then_some(Runner::Argv(start))
}

/// What a tree walk reaches under `root`: a path [`BELOW`] it.
pub(super) fn below(root: &str) -> String {
    format!("{}/{BELOW}", root.trim_end_matches('/'))
}

/// Whether `name ARGS` reads the folders it is given with everything in them (`grep -r`,
/// `rg`, `tar -c`, `zip -r`, `cp -r`, `rsync -a`, `scp -r`, `diff -r`).
pub(super) fn reads_recursively(name: &str, args: &[Arg]) -> bool {
    let flag = |short: &[char], long: &[&str]| {
        args.iter().filter_map(Arg::lit).any(|s| {
            if let Some(l) = s.strip_prefix("--") {
                long.iter()
                    .any(|x| l == *x || l.starts_with(&format!("{x}=")))
            } else {
                s.len() > 1 && s.starts_with('-') && s[1..].chars().any(|c| short.contains(&c))
            }
        })
    };
    match name {
        "rg" | "ag" | "ack" | "ack-grep" | "ugrep" | "rgrep" => true,
        "grep" | "egrep" | "fgrep" => {
            flag(&['r', 'R'], &["recursive", "dereference-recursive"])
                || args
                    .iter()
                    .filter_map(Arg::lit)
                    .any(|s| s == "--directories=recurse")
        }
        "cp" | "scp" => flag(&['r', 'R', 'a'], &["recursive", "archive"]),
        "rsync" => flag(&['r', 'a'], &["recursive", "archive"]),
        "zip" | "diff" => flag(&['r', 'R'], &["recurse-paths", "recursive"]),
        "tar" | "gtar" | "bsdtar" => {
            let first = args.first().and_then(Arg::lit).unwrap_or("");
            (!first.starts_with('-') && first.contains(['c', 'r', 'u']))
                || flag(&['c', 'r', 'u'], &["create", "append", "update"])
        }
        _ => false,
    }
}

/// The arguments before the first option of `find` (its starting points).
pub(super) fn find_roots(args: &[Arg]) -> Vec<Arg> {
    let mut roots = Vec::new();
    for a in args {
        match a.lit() {
            Some(s) if s.starts_with('-') || s == "(" || s == "!" => {
                if matches!(s, "-H" | "-L" | "-P") {
                    continue;
                }
                break;
            }
            _ => roots.push(a.clone()),
        }
    }
    roots
}

/// Skips a wrapper's options (and `NAME=VALUE` words for env); returns the command that follows.
pub(super) fn skip_options<'a>(
    args: &'a [Arg],
    with_value: &[&str],
    assignments: bool,
) -> &'a [Arg] {
    let mut i = 0;
    while i < args.len() {
        match &args[i] {
            Arg::Lit(s) if s == "--" => return &args[i + 1..],
            Arg::Lit(s) if with_value.contains(&s.as_str()) => i += 2,
            Arg::Lit(s) if s.starts_with('-') && s.len() > 1 => i += 1,
            Arg::Lit(s) if assignments && s.contains('=') && !s.starts_with('=') => i += 1,
            _ => return &args[i..],
        }
    }
    &[]
}

/// The value of `-c VALUE`, `--command=VALUE` and the like.
pub(super) fn option_value<'a>(args: &'a [Arg], names: &[&str]) -> Option<&'a str> {
    for (i, a) in args.iter().enumerate() {
        let Some(s) = a.lit() else { continue };
        if names.contains(&s) {
            return args.get(i + 1).and_then(Arg::lit);
        }
        for n in names {
            if n.starts_with("--")
                && let Some(v) = s.strip_prefix(n).and_then(|r| r.strip_prefix('='))
            {
                return Some(v);
            }
        }
    }
    None
}

/// The short options of strace and ltrace that take a value.
pub(super) fn trace_values(name: &str) -> &'static str {
    if name == "ltrace" {
        "aAbDeFlnopsuxw"
    } else {
        "abeEIoOpPsSuUX"
    }
}

/// The most commands one `xargs` or `parallel` is read as running (one per input line or
/// argument); more is denied as unreadable.
const MAX_XARGS_RUNS: usize = 256;

/// The words xargs reads from `text`: lines with `-I` (leading blanks dropped), NUL- or
/// delimiter-separated with `-0`/`-d`, else blank-separated with xargs' quotes and
/// backslashes.
fn xargs_words(text: &str, nul: bool, delim: Option<&str>, lines: bool) -> Vec<String> {
    if lines {
        return text
            .lines()
            .map(|l| l.trim_start().to_owned())
            .filter(|l| !l.is_empty())
            .collect();
    }
    if nul || delim.is_some() {
        let d = match delim {
            Some("\\n") => '\n',
            Some("\\t") => '\t',
            Some(d) => d.chars().next().unwrap_or('\n'),
            None => '\0',
        };
        return text
            .split(d)
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect();
    }
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    cur.push(q);
                }
            }
            '\\' => {
                in_word = true;
                cur.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// A parallel command line with its replacement strings (`{}`, `{.}`, `{/}`, `{//}`, `{/.}`,
/// `{#}`, `{%}`, `{1}`, …) replaced by `value`.
fn replace_placeholders(template: &str, value: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close)
                if after[..close]
                    .chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '.' | '/' | '#' | '%')) =>
            {
                out.push_str(value);
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
