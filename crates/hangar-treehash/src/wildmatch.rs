//! Glob matching as git's ignore rules use it (git's "wildmatch" semantics): `*`, `?`, `[...]`
//! classes (with `!`/`^` negation, ranges and `[:alpha:]`-style names), backslash escapes and `**`.
//! With `pathname`, `*`, `?` and classes never match `/`, and `**` between slashes (or at either
//! end) matches any number of directories. The early-abort results of git's matcher are kept,
//! since they decide some corner cases.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    Match,
    NoMatch,
    AbortAll,
    AbortToStarStar,
}

/// Whether `pattern` matches all of `text`.
pub(crate) fn wildmatch(pattern: &[u8], text: &[u8], pathname: bool) -> bool {
    matches(pattern, text, pathname) == Outcome::Match
}

fn at(s: &[u8], i: usize) -> u8 {
    s.get(i).copied().unwrap_or(0)
}

fn is_glob_special(c: u8) -> bool {
    matches!(c, b'*' | b'?' | b'[' | b'\\')
}

fn matches(p: &[u8], text: &[u8], pathname: bool) -> Outcome {
    let mut pi = 0usize;
    let mut ti = 0usize;
    loop {
        let p_ch = at(p, pi);
        if p_ch == 0 {
            break;
        }
        let t_ch = at(text, ti);
        if t_ch == 0 && p_ch != b'*' {
            return Outcome::AbortAll;
        }
        let step = match p_ch {
            b'\\' => {
                pi += 1;
                if t_ch == at(p, pi) {
                    Step::Next
                } else {
                    Step::Done(Outcome::NoMatch)
                }
            }
            b'?' if pathname && t_ch == b'/' => Step::Done(Outcome::NoMatch),
            b'?' => Step::Next,
            b'*' => star(p, &mut pi, text, &mut ti, pathname),
            b'[' => class(p, &mut pi, t_ch, pathname),
            _ if t_ch != p_ch => Step::Done(Outcome::NoMatch),
            _ => Step::Next,
        };
        if let Step::Done(outcome) = step {
            return outcome;
        }
        pi += 1;
        ti += 1;
    }
    if ti < text.len() {
        Outcome::NoMatch
    } else {
        Outcome::Match
    }
}

/// What one element of the pattern decided.
enum Step {
    /// It matched: on to the next character of both.
    Next,
    /// The match is decided.
    Done(Outcome),
}

/// A `*` or `**` at `p[*pi]`: tries the rest of the pattern at each place the star may stop
/// (`Step::Next` for a `*/` that took the rest of a path component, leaving both at the `/`).
fn star(p: &[u8], pi: &mut usize, text: &[u8], ti: &mut usize, pathname: bool) -> Step {
    *pi += 1;
    let match_slash = if at(p, *pi) == b'*' {
        // Two or more stars: `**`.
        let at_boundary = *pi < 2 || p[*pi - 2] == b'/';
        *pi += 1;
        while at(p, *pi) == b'*' {
            *pi += 1;
        }
        if !pathname {
            true
        } else if at_boundary
            && (at(p, *pi) == 0
                || at(p, *pi) == b'/'
                || (at(p, *pi) == b'\\' && at(p, *pi + 1) == b'/'))
        {
            // `**/` may match no directory at all.
            if at(p, *pi) == b'/'
                && matches(&p[*pi + 1..], &text[*ti..], pathname) == Outcome::Match
            {
                return Step::Done(Outcome::Match);
            }
            true
        } else {
            false
        }
    } else {
        !pathname
    };
    if at(p, *pi) == 0 {
        // A trailing star: `**` matches the rest; `*` only if no slash is left.
        if !match_slash && text[*ti..].contains(&b'/') {
            return Step::Done(Outcome::NoMatch);
        }
        return Step::Done(Outcome::Match);
    } else if !match_slash && at(p, *pi) == b'/' {
        // `*/`: the star takes the rest of this path component.
        return match text[*ti..].iter().position(|&c| c == b'/') {
            None => Step::Done(Outcome::NoMatch),
            Some(off) => {
                *ti += off;
                Step::Next
            }
        };
    }
    Step::Done(star_stops(p, *pi, text, *ti, pathname, match_slash))
}

/// The rest of the pattern (`p[pi..]`, after a star) tried at each place of `text` from `ti`
/// on where the star may stop.
fn star_stops(
    p: &[u8],
    pi: usize,
    text: &[u8],
    mut ti: usize,
    pathname: bool,
    match_slash: bool,
) -> Outcome {
    let mut t_ch = at(text, ti);
    loop {
        if t_ch == 0 {
            break;
        }
        let next = at(p, pi);
        if !is_glob_special(next) {
            // Skip ahead to the next place the following literal occurs.
            loop {
                t_ch = at(text, ti);
                if t_ch == 0 || (!match_slash && t_ch == b'/') || t_ch == next {
                    break;
                }
                ti += 1;
            }
            if t_ch != next {
                return Outcome::NoMatch;
            }
        }
        let m = matches(&p[pi..], &text[ti..], pathname);
        if m != Outcome::NoMatch {
            if !match_slash || m != Outcome::AbortToStarStar {
                return m;
            }
        } else if !match_slash && t_ch == b'/' {
            return Outcome::AbortToStarStar;
        }
        ti += 1;
        t_ch = at(text, ti);
    }
    Outcome::AbortAll
}

/// A `[...]` class at `p[*pi]` against `t_ch`; leaves `*pi` at its `]`.
fn class(p: &[u8], pi: &mut usize, t_ch: u8, pathname: bool) -> Step {
    *pi += 1;
    let mut p_ch = at(p, *pi);
    if p_ch == b'^' {
        p_ch = b'!';
    }
    let negated = p_ch == b'!';
    if negated {
        *pi += 1;
        p_ch = at(p, *pi);
    }
    let mut prev_ch = 0u8;
    let mut matched = false;
    loop {
        if p_ch == 0 {
            return Step::Done(Outcome::AbortAll);
        }
        let member = if p_ch == b'\\' {
            escaped_member(p, pi, t_ch)
        } else if p_ch == b'-' && prev_ch != 0 && at(p, *pi + 1) != 0 && at(p, *pi + 1) != b']' {
            range_member(p, pi, prev_ch, t_ch)
        } else if p_ch == b'[' && at(p, *pi + 1) == b':' {
            named_member(p, pi, t_ch)
        } else {
            Ok((p_ch, t_ch == p_ch))
        };
        match member {
            Err(outcome) => return Step::Done(outcome),
            Ok((ch, hit)) => {
                matched |= hit;
                prev_ch = ch;
            }
        }
        *pi += 1;
        p_ch = at(p, *pi);
        if p_ch == b']' {
            break;
        }
    }
    if matched == negated || (pathname && t_ch == b'/') {
        return Step::Done(Outcome::NoMatch);
    }
    Step::Next
}

/// A class member: the character it leaves as the start of a following range (0: none), and
/// whether `t_ch` is in it; or the outcome a malformed class gives.
type Member = Result<(u8, bool), Outcome>;

/// `\c` in a class: `c` itself.
fn escaped_member(p: &[u8], pi: &mut usize, t_ch: u8) -> Member {
    *pi += 1;
    let p_ch = at(p, *pi);
    if p_ch == 0 {
        return Err(Outcome::AbortAll);
    }
    Ok((p_ch, t_ch == p_ch))
}

/// `a-z` in a class (`*pi` at the `-`, `prev_ch` the `a`).
fn range_member(p: &[u8], pi: &mut usize, prev_ch: u8, t_ch: u8) -> Member {
    *pi += 1;
    let mut p_ch = at(p, *pi);
    if p_ch == b'\\' {
        *pi += 1;
        p_ch = at(p, *pi);
        if p_ch == 0 {
            return Err(Outcome::AbortAll);
        }
    }
    Ok((0, t_ch <= p_ch && t_ch >= prev_ch))
}

/// `[:name:]` in a class, or a plain `[` if what follows is not one.
fn named_member(p: &[u8], pi: &mut usize, t_ch: u8) -> Member {
    *pi += 2;
    let start = *pi;
    while at(p, *pi) != 0 && at(p, *pi) != b']' {
        *pi += 1;
    }
    if at(p, *pi) == 0 {
        return Err(Outcome::AbortAll);
    }
    if *pi == start || p[*pi - 1] != b':' {
        // Not a `[:name:]`: the `[` is an ordinary member.
        *pi = start - 2;
        return Ok((b'[', t_ch == b'['));
    }
    match class_contains(&p[start..*pi - 1], t_ch) {
        Some(hit) => Ok((0, hit)),
        None => Err(Outcome::AbortAll),
    }
}

/// `[:name:]` classes, ASCII only (git's own character table).
fn class_contains(name: &[u8], c: u8) -> Option<bool> {
    let alpha = c.is_ascii_alphabetic();
    let digit = c.is_ascii_digit();
    Some(match name {
        b"alnum" => alpha || digit,
        b"alpha" => alpha,
        b"blank" => c == b' ' || c == b'\t',
        b"cntrl" => c < 0x20 || c == 0x7f,
        b"digit" => digit,
        b"graph" => (0x21..=0x7e).contains(&c),
        b"lower" => c.is_ascii_lowercase(),
        b"print" => (0x20..=0x7e).contains(&c),
        b"punct" => (0x21..=0x7e).contains(&c) && !alpha && !digit,
        b"space" => matches!(c, b' ' | b'\t' | b'\n' | b'\r'),
        b"upper" => c.is_ascii_uppercase(),
        b"xdigit" => c.is_ascii_hexdigit(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::wildmatch;

    #[test]
    fn basics() {
        let cases: &[(&str, &str, bool, bool)] = &[
            ("foo", "foo", true, true),
            ("foo", "bar", true, false),
            ("*", "foo/bar", true, false),
            ("*", "foo/bar", false, true),
            ("**", "foo/bar", true, true),
            ("**/foo", "foo", true, true),
            ("**/foo", "a/b/foo", true, true),
            ("a/**/b", "a/b", true, true),
            ("a/**/b", "a/x/y/b", true, true),
            ("a/**", "a/x/y", true, true),
            ("a**b", "axb", true, true),
            ("a**b", "a/b", true, false),
            ("*.c", "x.c", true, true),
            ("*.c", "d/x.c", true, false),
            ("?", "/", true, false),
            ("[a-c]x", "bx", true, true),
            ("[!a-c]x", "bx", true, false),
            ("[^a-c]x", "dx", true, true),
            ("[]]", "]", true, true),
            ("[[:digit:]]", "5", true, true),
            ("[[:digit:]]", "a", true, false),
            ("[[:bogus:]]", "a", true, false),
            ("[a", "a", true, false),
            ("\\*", "*", true, true),
            ("\\*", "a", true, false),
            ("foo\\", "foo", true, false),
            ("*/b", "a/b", true, true),
            ("*/b", "a/c/b", true, false),
        ];
        for &(p, t, pathname, want) in cases {
            assert_eq!(
                wildmatch(p.as_bytes(), t.as_bytes(), pathname),
                want,
                "{p} vs {t}"
            );
        }
    }
}
