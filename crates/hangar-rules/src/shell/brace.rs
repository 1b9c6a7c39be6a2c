//! Brace expansion, the first expansion the shell makes: `{rm,-rf,/}` is the three words
//! `rm -rf /`, `/{etc,usr}` two paths, `{1..3}` three numbers. Read with brush-parser's own
//! grammar and bounded in size: an expansion to more than [`MAX_BRACE_WORDS`] words is denied.

use brush_parser::word::{self, BraceExpressionMember, BraceExpressionOrText};

/// The most words one word may expand into; more is denied as unreadable (`{1..99999999}`
/// would take the reading's memory).
pub const MAX_BRACE_WORDS: usize = 1024;

/// The words `raw` expands into (each still to be expanded as a word: quotes, variables), or
/// `None` when it has no brace expression.
pub(super) fn expand(raw: &str) -> Result<Option<Vec<String>>, String> {
    if !(raw.contains('{') && raw.contains('}') && (raw.contains(',') || raw.contains(".."))) {
        return Ok(None);
    }
    // brush-parser `unwrap`s a sequence's bounds into an i64.
    if raw
        .split(|c: char| !c.is_ascii_digit())
        .any(|run| !run.is_empty() && run.parse::<i64>().is_err())
    {
        return Err(format!(
            "the word {raw:?} holds a number too large for a brace expansion"
        ));
    }
    let pieces = match word::parse_brace_expansions(raw, &super::options()) {
        Ok(Some(p)) => p,
        // Not a brace expression after all (the shell leaves the word as it is).
        Ok(None) | Err(_) => return Ok(None),
    };
    if !pieces
        .iter()
        .any(|p| matches!(p, BraceExpressionOrText::Expr(_)))
    {
        return Ok(None);
    }
    words(&pieces)
        .map(Some)
        .ok_or_else(|| format!("the word {raw:?} expands to more than {MAX_BRACE_WORDS} words"))
}

/// The words a sequence of pieces expands into (each piece's words after the last's).
fn words(pieces: &[BraceExpressionOrText]) -> Option<Vec<String>> {
    let mut out = vec![String::new()];
    for p in pieces {
        let alternatives = match p {
            BraceExpressionOrText::Text(t) => vec![t.clone()],
            BraceExpressionOrText::Expr(members) => {
                let mut all = Vec::new();
                for m in members {
                    all.extend(member(m)?);
                    if all.len() > MAX_BRACE_WORDS {
                        return None;
                    }
                }
                all
            }
        };
        if out.len().saturating_mul(alternatives.len()) > MAX_BRACE_WORDS {
            return None;
        }
        out = out
            .iter()
            .flat_map(|prefix| alternatives.iter().map(move |a| format!("{prefix}{a}")))
            .collect();
    }
    Some(out)
}

fn member(m: &BraceExpressionMember) -> Option<Vec<String>> {
    match m {
        BraceExpressionMember::Child(pieces) => words(pieces),
        BraceExpressionMember::NumberSequence {
            start,
            end,
            increment,
        } => sequence(i128::from(*start), i128::from(*end), *increment)
            .map(|ns| ns.into_iter().map(|n| n.to_string()).collect()),
        BraceExpressionMember::CharSequence {
            start,
            end,
            increment,
        } => sequence(u32::from(*start).into(), u32::from(*end).into(), *increment).map(|ns| {
            ns.into_iter()
                .filter_map(|n| u32::try_from(n).ok().and_then(char::from_u32))
                .map(String::from)
                .collect()
        }),
    }
}

/// `start..end` by `increment` (its size; 0 counts as 1), as bash counts it, bounded.
fn sequence(start: i128, end: i128, increment: i64) -> Option<Vec<i128>> {
    let step = i128::from(increment).abs().max(1);
    let count = (end - start).abs() / step + 1;
    if count > MAX_BRACE_WORDS as i128 {
        return None;
    }
    let dir = if end >= start { step } else { -step };
    Some((0..count).map(|k| start + k * dir).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(raw: &str) -> Vec<String> {
        expand(raw)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| vec![raw.to_owned()])
    }

    #[test]
    fn expands_like_bash() {
        assert_eq!(ex("{rm,-rf,/}"), ["rm", "-rf", "/"]);
        assert_eq!(ex("/{etc,usr}"), ["/etc", "/usr"]);
        assert_eq!(ex("a{b,c}d{1..2}"), ["abd1", "abd2", "acd1", "acd2"]);
        assert_eq!(ex("{3..1}"), ["3", "2", "1"]);
        assert_eq!(ex("{a..e..2}"), ["a", "c", "e"]);
        assert_eq!(ex("x{,.bak}"), ["x", "x.bak"]);
        assert_eq!(ex("{a,{b,c}}"), ["a", "b", "c"]);
        // Not brace expressions.
        assert_eq!(ex("{}"), ["{}"]);
        assert_eq!(ex("'{a,b}'"), ["'{a,b}'"]);
        assert_eq!(ex("${a,b}"), ["${a,b}"]);
        assert_eq!(ex("HEAD@{1}"), ["HEAD@{1}"]);
        // Too large: denied, never built.
        assert!(expand("{1..99999999}").is_err());
        assert!(expand("{a..z}{a..z}{a..z}").is_err());
        assert!(expand("{1..99999999999999999999}").is_err());
    }
}
