//! sed scripts: the `e` command and the `e` flag of `s` run commands, `w`/`W` and the `w`
//! flag write files, `r`/`R` read them. GNU sed's `--sandbox` refuses all of them.

use super::{Code, Effects};
use crate::shell::Arg;

/// sed's options: `-e SCRIPT`, `--expression=SCRIPT`, `-f FILE`, `--file=FILE`, else the
/// first operand; `-i[SUFFIX]` takes the rest of its cluster.
pub(super) fn code_of(args: &[Arg]) -> Code {
    let mut c = Code::default();
    let mut i = 0;
    let mut sandbox = false;
    let mut given = false;
    let mut first_operand = None;
    let mut options = true;
    while i < args.len() {
        let a = &args[i];
        let Some(s) = a
            .lit()
            .filter(|s| options && s.len() > 1 && s.starts_with('-'))
        else {
            if options && a.lit() == Some("--") {
                options = false;
            } else if first_operand.is_none() {
                first_operand = Some(i);
            }
            i += 1;
            continue;
        };
        if let Some(long) = s.strip_prefix("--") {
            let (k, v) = match long.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (long, None),
            };
            match k {
                "sandbox" => sandbox = true,
                "expression" => {
                    given = true;
                    match v {
                        Some(v) => c.inline.push(Arg::Lit(v.to_owned())),
                        None => {
                            i += 1;
                            c.inline.extend(args.get(i).cloned());
                        }
                    }
                }
                "file" => {
                    given = true;
                    if v.is_none() {
                        i += 1;
                        c.file = Some(i);
                    }
                }
                "line-length" if v.is_none() => i += 1,
                _ => {}
            }
            i += 1;
            continue;
        }
        for (at, ch) in s.char_indices().skip(1) {
            let attached = &s[at + ch.len_utf8()..];
            match ch {
                'i' => break,
                'e' | 'f' | 'l' => {
                    let value = if attached.is_empty() {
                        i += 1;
                        args.get(i).cloned()
                    } else {
                        Some(Arg::Lit(attached.to_owned()))
                    };
                    if ch == 'e' {
                        given = true;
                        c.inline.extend(value);
                    } else if ch == 'f' {
                        given = true;
                        if attached.is_empty() {
                            c.file = Some(i);
                        }
                    }
                    break;
                }
                _ => {}
            }
        }
        i += 1;
    }
    if !given {
        c.inline
            .extend(first_operand.and_then(|k| args.get(k).cloned()));
    }
    if sandbox {
        return Code::default();
    }
    if let Some(f) = c.file
        && args.get(f).and_then(Arg::lit) == Some("-")
    {
        c.file = None;
        c.stdin = true;
    }
    c
}

/// What a sed script does.
pub(super) fn read(script: &str, fx: &mut Effects) {
    let c: Vec<char> = script.chars().collect();
    let mut i = 0;
    let n = c.len();
    let rest_of_line = |i: &mut usize| -> String {
        let start = *i;
        while *i < n && c[*i] != '\n' {
            *i += 1;
        }
        c[start..*i].iter().collect::<String>()
    };
    while i < n {
        // Separators and blanks.
        while i < n && (c[i].is_whitespace() || c[i] == ';') {
            i += 1;
        }
        if i >= n {
            break;
        }
        // Addresses: numbers, `$`, `/re/`, `\cREc`, `first~step`, `,addr2`, `+N`, `!`.
        loop {
            match c.get(i) {
                Some(d) if d.is_ascii_digit() || matches!(d, '$' | '~' | ',' | '+' | '!' | ' ') => {
                    i += 1
                }
                Some('/') => {
                    i = skip_delimited(&c, i + 1, '/');
                    while matches!(c.get(i), Some('I' | 'M')) {
                        i += 1;
                    }
                }
                Some('\\') if i + 1 < n => {
                    let d = c[i + 1];
                    i = skip_delimited(&c, i + 2, d);
                }
                _ => break,
            }
        }
        let Some(&cmd) = c.get(i) else { break };
        i += 1;
        match cmd {
            '#' | ':' => {
                let _ = rest_of_line(&mut i);
            }
            'a' | 'i' | 'c' => {
                // Text to the end of the line, and on while lines end in a backslash.
                loop {
                    let line = rest_of_line(&mut i);
                    if line.ends_with('\\') && i < n {
                        i += 1;
                        continue;
                    }
                    break;
                }
            }
            'b' | 't' | 'T' => {
                while i < n && !matches!(c[i], ';' | '\n' | '}') {
                    i += 1;
                }
            }
            'r' | 'R' => {
                let f = rest_of_line(&mut i);
                fx.named.push(f.trim_start().to_owned());
            }
            'w' | 'W' => {
                let f = rest_of_line(&mut i);
                fx.writes.push(f.trim_start().to_owned());
            }
            'e' => {
                let command = rest_of_line(&mut i);
                if command.trim().is_empty() {
                    fx.opaque
                        .push("its `e` command runs the text it reads as a command".into());
                } else {
                    fx.shell.push(command.trim_start().to_owned());
                }
            }
            's' | 'y' => {
                let Some(&d) = c.get(i) else { break };
                i = skip_delimited(&c, i + 1, d);
                i = skip_delimited(&c, i, d);
                if cmd == 'y' {
                    continue;
                }
                // Flags: g p i I m M e digits, `w FILE` to the end of the line.
                while let Some(&f) = c.get(i) {
                    match f {
                        'w' => {
                            i += 1;
                            let file = rest_of_line(&mut i);
                            fx.writes.push(file.trim_start().to_owned());
                            break;
                        }
                        'e' => {
                            fx.opaque
                                .push("its `s///e` runs the text it makes as a command".into());
                            i += 1;
                        }
                        f if f.is_ascii_alphanumeric() => i += 1,
                        _ => break,
                    }
                }
            }
            'q' | 'Q' | 'l' | 'L' => {
                while i < n && (c[i].is_ascii_digit() || c[i] == ' ') {
                    i += 1;
                }
            }
            'v' => {
                while i < n && !matches!(c[i], ';' | '\n') {
                    i += 1;
                }
            }
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            // sed refuses the script: nothing of it runs.
            _ => break,
        }
    }
}

/// Past the text up to an unescaped `d` starting at `i` (the opening one already skipped).
fn skip_delimited(c: &[char], mut i: usize, d: char) -> usize {
    while i < c.len() {
        if c[i] == '\\' {
            i += 2;
            continue;
        }
        if c[i] == d {
            return i + 1;
        }
        // A newline inside is an error to sed unless escaped.
        i += 1;
    }
    i
}
