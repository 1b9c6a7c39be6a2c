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
        let mut p_ch = at(p, pi);
        if p_ch == 0 {
            break;
        }
        let mut t_ch = at(text, ti);
        if t_ch == 0 && p_ch != b'*' {
            return Outcome::AbortAll;
        }
        match p_ch {
            b'\\' => {
                pi += 1;
                p_ch = at(p, pi);
                if t_ch != p_ch {
                    return Outcome::NoMatch;
                }
            }
            b'?' => {
                if pathname && t_ch == b'/' {
                    return Outcome::NoMatch;
                }
            }
            b'*' => {
                let match_slash;
                pi += 1;
                if at(p, pi) == b'*' {
                    // Two or more stars: `**`.
                    let at_boundary = pi < 2 || p[pi - 2] == b'/';
                    pi += 1;
                    while at(p, pi) == b'*' {
                        pi += 1;
                    }
                    if !pathname {
                        match_slash = true;
                    } else if at_boundary
                        && (at(p, pi) == 0
                            || at(p, pi) == b'/'
                            || (at(p, pi) == b'\\' && at(p, pi + 1) == b'/'))
                    {
                        // `**/` may match no directory at all.
                        if at(p, pi) == b'/'
                            && matches(&p[pi + 1..], &text[ti..], pathname) == Outcome::Match
                        {
                            return Outcome::Match;
                        }
                        match_slash = true;
                    } else {
                        match_slash = false;
                    }
                } else {
                    match_slash = !pathname;
                }
                if at(p, pi) == 0 {
                    // A trailing star: `**` matches the rest; `*` only if no slash is left.
                    if !match_slash && text[ti..].contains(&b'/') {
                        return Outcome::NoMatch;
                    }
                    return Outcome::Match;
                } else if !match_slash && at(p, pi) == b'/' {
                    // `*/`: the star takes the rest of this path component.
                    match text[ti..].iter().position(|&c| c == b'/') {
                        None => return Outcome::NoMatch,
                        Some(off) => ti += off,
                    }
                    pi += 1;
                    ti += 1;
                    continue;
                }
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
                return Outcome::AbortAll;
            }
            b'[' => {
                pi += 1;
                p_ch = at(p, pi);
                if p_ch == b'^' {
                    p_ch = b'!';
                }
                let negated = p_ch == b'!';
                if negated {
                    pi += 1;
                    p_ch = at(p, pi);
                }
                let mut prev_ch = 0u8;
                let mut matched = false;
                loop {
                    if p_ch == 0 {
                        return Outcome::AbortAll;
                    }
                    if p_ch == b'\\' {
                        pi += 1;
                        p_ch = at(p, pi);
                        if p_ch == 0 {
                            return Outcome::AbortAll;
                        }
                        if t_ch == p_ch {
                            matched = true;
                        }
                    } else if p_ch == b'-'
                        && prev_ch != 0
                        && at(p, pi + 1) != 0
                        && at(p, pi + 1) != b']'
                    {
                        pi += 1;
                        p_ch = at(p, pi);
                        if p_ch == b'\\' {
                            pi += 1;
                            p_ch = at(p, pi);
                            if p_ch == 0 {
                                return Outcome::AbortAll;
                            }
                        }
                        if t_ch <= p_ch && t_ch >= prev_ch {
                            matched = true;
                        }
                        p_ch = 0;
                    } else if p_ch == b'[' && at(p, pi + 1) == b':' {
                        pi += 2;
                        let start = pi;
                        while at(p, pi) != 0 && at(p, pi) != b']' {
                            pi += 1;
                        }
                        p_ch = at(p, pi);
                        if p_ch == 0 {
                            return Outcome::AbortAll;
                        }
                        if pi == start || p[pi - 1] != b':' {
                            // Not a `[:name:]`: the `[` is an ordinary member.
                            pi = start - 2;
                            p_ch = b'[';
                            if t_ch == p_ch {
                                matched = true;
                            }
                        } else {
                            match class_contains(&p[start..pi - 1], t_ch) {
                                Some(true) => matched = true,
                                Some(false) => {}
                                None => return Outcome::AbortAll,
                            }
                            p_ch = 0;
                        }
                    } else if t_ch == p_ch {
                        matched = true;
                    }
                    prev_ch = p_ch;
                    pi += 1;
                    p_ch = at(p, pi);
                    if p_ch == b']' {
                        break;
                    }
                }
                if matched == negated || (pathname && t_ch == b'/') {
                    return Outcome::NoMatch;
                }
            }
            _ => {
                if t_ch != p_ch {
                    return Outcome::NoMatch;
                }
            }
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
