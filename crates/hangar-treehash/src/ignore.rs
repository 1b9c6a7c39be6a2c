//! Ignore rules as git reads them: `.gitignore` files, `.git/info/exclude` and `core.excludesFile`.
//!
//! Parsing follows git: an optional UTF-8 BOM, `#` comments, trailing spaces trimmed unless
//! escaped, `\r\n` line ends, `!` negation, a trailing `/` for directories only, patterns without
//! a slash matching the base name at any depth, others anchored at the file's own directory.

use crate::wildmatch::wildmatch;

const NEGATIVE: u8 = 1;
const MUST_BE_DIR: u8 = 2;
const NO_DIR: u8 = 4;
const ENDS_WITH: u8 = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    /// Without the leading `!` and the trailing `/`.
    text: Box<[u8]>,
    /// Length of the leading part without wildcards.
    no_wildcard_len: usize,
    flags: u8,
}

/// The patterns of one ignore file, with the directory they apply from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PatternList {
    /// The directory of the file relative to the work tree, without a trailing slash (`""` at
    /// the top and for `info/exclude` and `core.excludesFile`).
    base: Box<[u8]>,
    patterns: Vec<Pattern>,
}

impl PatternList {
    /// Parses the content of an ignore file whose rules apply from `base`.
    pub(crate) fn parse(content: &[u8], base: &[u8]) -> PatternList {
        let content = content.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(content);
        let mut patterns = Vec::new();
        for line in content.split(|&b| b == b'\n') {
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            let mut line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(nul) = line.iter().position(|&b| b == 0) {
                line = &line[..nul];
            }
            let line = trim_trailing_spaces(line);
            patterns.push(parse_pattern(line));
        }
        PatternList {
            base: base.into(),
            patterns,
        }
    }

    /// The verdict of the last pattern that matches `path` (relative to the work tree, `/`
    /// separated): `Some(true)` ignored, `Some(false)` re-included by a `!` pattern, `None` no
    /// pattern matches.
    pub(crate) fn verdict(&self, path: &[u8], is_dir: bool) -> Option<bool> {
        let base_start = path.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        let basename = &path[base_start..];
        for p in self.patterns.iter().rev() {
            if p.flags & MUST_BE_DIR != 0 && !is_dir {
                continue;
            }
            let hit = if p.flags & NO_DIR != 0 {
                match_basename(basename, p)
            } else {
                match_pathname(path, &self.base, p)
            };
            if hit {
                return Some(p.flags & NEGATIVE == 0);
            }
        }
        None
    }
}

fn trim_trailing_spaces(line: &[u8]) -> &[u8] {
    let mut last_space: Option<usize> = None;
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b' ' => {
                if last_space.is_none() {
                    last_space = Some(i);
                }
            }
            b'\\' => {
                i += 1;
                if i >= line.len() {
                    return line;
                }
                last_space = None;
            }
            _ => last_space = None,
        }
        i += 1;
    }
    match last_space {
        Some(at) => &line[..at],
        None => line,
    }
}

fn simple_length(s: &[u8]) -> usize {
    s.iter()
        .position(|&c| matches!(c, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(s.len())
}

fn parse_pattern(line: &[u8]) -> Pattern {
    let mut flags = 0u8;
    let mut s = line;
    if s.first() == Some(&b'!') {
        flags |= NEGATIVE;
        s = &s[1..];
    }
    let mut len = s.len();
    if len > 0 && s[len - 1] == b'/' {
        len -= 1;
        flags |= MUST_BE_DIR;
    }
    if !s[..len].contains(&b'/') {
        flags |= NO_DIR;
    }
    let no_wildcard_len = simple_length(s).min(len);
    if s.first() == Some(&b'*') && simple_length(&s[1..]) == s.len() - 1 {
        flags |= ENDS_WITH;
    }
    Pattern {
        text: s[..len].into(),
        no_wildcard_len,
        flags,
    }
}

fn match_basename(basename: &[u8], p: &Pattern) -> bool {
    let pat = &p.text[..];
    if p.no_wildcard_len == pat.len() {
        pat == basename
    } else if p.flags & ENDS_WITH != 0 {
        pat.len() - 1 <= basename.len() && basename.ends_with(&pat[1..])
    } else {
        wildmatch(pat, basename, false)
    }
}

fn match_pathname(path: &[u8], base: &[u8], p: &Pattern) -> bool {
    let mut pat = &p.text[..];
    let mut prefix = p.no_wildcard_len;
    if pat.first() == Some(&b'/') {
        pat = &pat[1..];
        prefix = prefix.saturating_sub(1);
    }
    let baselen = base.len();
    if path.len() < baselen + 1
        || (baselen > 0 && path[baselen] != b'/')
        || &path[..baselen] != base
    {
        return false;
    }
    let mut name = if baselen > 0 {
        &path[baselen + 1..]
    } else {
        path
    };
    if prefix > 0 {
        if prefix > name.len() || pat[..prefix] != name[..prefix] {
            return false;
        }
        pat = &pat[prefix..];
        name = &name[prefix..];
        if pat.is_empty() && name.is_empty() {
            return true;
        }
    }
    wildmatch(pat, name, true)
}

/// Whether `path` is ignored by the per-directory lists `dirs` (top first, deepest last) or,
/// failing those, by `globals` (`info/exclude` first, then `core.excludesFile`). The caller has
/// already established that no parent directory of `path` is ignored.
pub(crate) fn is_ignored(
    dirs: &[std::sync::Arc<PatternList>],
    globals: &[std::sync::Arc<PatternList>],
    path: &[u8],
    is_dir: bool,
) -> bool {
    for list in dirs.iter().rev().chain(globals.iter()) {
        if let Some(v) = list.verdict(path, is_dir) {
            return v;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignored(content: &str, base: &str, path: &str, is_dir: bool) -> Option<bool> {
        PatternList::parse(content.as_bytes(), base.as_bytes()).verdict(path.as_bytes(), is_dir)
    }

    #[test]
    fn rules() {
        assert_eq!(ignored("*.o\n", "", "a/b.o", false), Some(true));
        assert_eq!(
            ignored("*.o\n!keep.o\n", "", "a/keep.o", false),
            Some(false)
        );
        assert_eq!(ignored("build/\n", "", "build", false), None);
        assert_eq!(ignored("build/\n", "", "x/build", true), Some(true));
        assert_eq!(ignored("/top\n", "", "x/top", false), None);
        assert_eq!(ignored("/top\n", "", "top", false), Some(true));
        assert_eq!(ignored("a/b\n", "sub", "sub/a/b", false), Some(true));
        assert_eq!(ignored("a/b\n", "sub", "a/b", false), None);
        assert_eq!(ignored("**/x\n", "sub", "sub/p/q/x", false), Some(true));
        assert_eq!(ignored("x \n", "", "x", false), Some(true));
        assert_eq!(ignored("x\\ \n", "", "x ", false), Some(true));
        assert_eq!(ignored("\\#h\n", "", "#h", false), Some(true));
        assert_eq!(ignored("#h\n", "", "#h", false), None);
        assert_eq!(ignored("\\!e\n", "", "!e", false), Some(true));
        assert_eq!(ignored("\u{feff}bom\r\n", "", "bom", false), Some(true));
        assert_eq!(ignored("*.txt", "", "d/a.txt", false), Some(true));
    }
}
