//! Paths as a command would reach them: relative ones against the directory the command runs
//! in, `~` against the home, `..` folded away, symlinks followed where the path exists.

use std::path::{Component, Path, PathBuf};

/// In a path's *shape* (a path with parts only known at run time): any text.
pub const ANY: char = '\0';
/// In a path's shape: a number only known at run time (`$$`, `$PPID`, `$!`): one or more digits.
pub const DIGITS: char = '\u{1}';
/// In a path: anything below the folder before it (what `find DIR -exec … {}` and `grep -r
/// … DIR` reach); the path stays inside that folder.
pub const BELOW: char = '\u{4}';
/// In a path's shape: what an unquoted glob (`*`, `?`, `[…]`) matches, within one component.
pub const GLOB: char = '\u{5}';
/// The longest path the kernel opens (`PATH_MAX`); a shape with more known bytes names nothing.
pub const PATH_MAX: usize = 4096;

/// The directory a command runs in, when known (a `cd` to a computed place makes it unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cwd {
    Known(PathBuf),
    /// Known in part: an absolute shape (`cd /proc/$X`).
    Shape(String),
    Unknown,
}

/// `text` as an absolute, lexically normalised path; `None` when it is relative to an unknown
/// directory or names another user's home (`~user`).
pub fn resolve(text: &str, cwd: &Cwd, home: Option<&Path>) -> Option<PathBuf> {
    let expanded: PathBuf = if text == "~" {
        home?.to_path_buf()
    } else if let Some(rest) = text.strip_prefix("~/") {
        home?.join(rest)
    } else if text.starts_with('~') {
        return None;
    } else if text.starts_with('/') {
        PathBuf::from(text)
    } else {
        match cwd {
            Cwd::Known(d) => d.join(text),
            Cwd::Shape(_) | Cwd::Unknown => return None,
        }
    };
    Some(normalize(&expanded))
}

/// Folds `.` and `..` without touching the disk. A `.*` component counts as `..` (older shells
/// expand it to `..` too).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => {
                if n == ".*" {
                    out.pop();
                } else {
                    out.push(n);
                }
            }
        }
    }
    out
}

/// The path with symlinks followed as far as it exists (the rest appended), so a link inside
/// the workspace that points out of it is seen for what it is. `p` is absolute and normalised.
/// Walked from the root with one `lstat` per component (a link is resolved where it stands),
/// not by asking `realpath` of ever shorter prefixes: rules check many paths per command.
pub fn canonical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    let mut comps = p.components().peekable();
    while let Some(c) = comps.next() {
        let Component::Normal(name) = c else { continue };
        let next = out.join(name);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(&next) {
                Ok(resolved) => out = resolved,
                // A dangling link: what follows is only known once it exists.
                Err(_) => {
                    out = next;
                    for rest in comps.by_ref() {
                        out.push(rest);
                    }
                    return normalize(&out);
                }
            },
            Ok(_) => out = next,
            Err(_) => {
                out = next;
                for rest in comps.by_ref() {
                    out.push(rest);
                }
                return normalize(&out);
            }
        }
    }
    normalize(&out)
}

/// Whether `p` is `dir` or under it.
pub fn within(p: &Path, dir: &Path) -> bool {
    p.starts_with(dir)
}

/// Shell-style pattern match: `*` and `?` within one path component, `**` across components,
/// `[...]` character classes. A pattern ending in `/**` also matches the directory itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    if let Some(dir) = pattern.strip_suffix("/**")
        && glob(dir, text)
    {
        return true;
    }
    matches(pattern.as_bytes(), text.as_bytes(), true)
}

/// Shell-style pattern match on plain text (an argument): `*` matches `/` too.
pub fn glob_text(pattern: &str, text: &str) -> bool {
    matches(pattern.as_bytes(), text.as_bytes(), false)
}

fn matches(p: &[u8], t: &[u8], path: bool) -> bool {
    match p.first() {
        None => t.is_empty(),
        Some(b'*') if p.get(1) == Some(&b'*') => {
            let rest = &p[2..];
            (0..=t.len()).any(|i| matches(rest, &t[i..], path))
        }
        Some(b'*') => {
            let rest = &p[1..];
            for i in 0..=t.len() {
                if matches(rest, &t[i..], path) {
                    return true;
                }
                if path && t.get(i) == Some(&b'/') {
                    break;
                }
            }
            false
        }
        Some(b'?') => {
            t.first().is_some_and(|&c| !path || c != b'/') && matches(&p[1..], &t[1..], path)
        }
        Some(b'[') => {
            let Some(end) = p.iter().skip(1).position(|&c| c == b']').map(|e| e + 1) else {
                return t.first() == Some(&b'[') && matches(&p[1..], &t[1..], path);
            };
            let Some(&c) = t.first() else {
                return false;
            };
            let class = &p[1..end];
            let (negate, class) = match class.first() {
                Some(b'!' | b'^') => (true, &class[1..]),
                _ => (false, class),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negate && matches(&p[end + 1..], &t[1..], path)
        }
        Some(&c) => t.first() == Some(&c) && matches(&p[1..], &t[1..], path),
    }
}

/// A path with its unquoted glob characters (`*`, `?`, `[…]`) made [`GLOB`] marks, for
/// matching rules' patterns against what the glob may expand to.
pub fn glob_to_shape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' => out.push(GLOB),
            '[' => {
                let rest: String = chars.clone().collect();
                match rest.find(']') {
                    Some(end) if end > 0 && !rest[..end].contains('/') => {
                        for _ in rest[..=end].chars() {
                            chars.next();
                        }
                        out.push(GLOB);
                    }
                    _ => out.push('['),
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether `p` is one of the files that take writes without keeping them (`/dev/null`, the
/// terminal, the standard streams), or lies in a scratch folder (`/tmp`, `/var/tmp`,
/// `/dev/shm`, as written and with symlinks followed).
pub fn scratch(p: &Path) -> bool {
    const SINKS: &[&str] = &[
        "/dev/null",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/tty",
        "/dev/zero",
    ];
    if SINKS.iter().any(|s| p == Path::new(s))
        || p.starts_with("/dev/fd")
        || p.starts_with("/proc/self/fd")
    {
        return true;
    }
    const SCRATCH: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];
    let under = |q: &Path| SCRATCH.iter().any(|d| q.starts_with(d));
    under(p) && {
        let c: PathBuf = canonical(p);
        under(&c)
    }
}

/// Whether a path's shape (text with [`ANY`] and [`DIGITS`] marks for the parts only known at
/// run time) may name a path the pattern matches, as [`glob`] matches a known one. An [`ANY`] in
/// the last component may stand for several components (`/proc/$X` may be `/proc/1/environ`);
/// elsewhere it stands for part of one component (`/proc/$X/status` stays in `/proc/*/`).
pub fn glob_shape(pattern: &str, shape: &str) -> bool {
    if !shape.contains([ANY, DIGITS, BELOW, GLOB]) {
        return glob(pattern, shape);
    }
    // BELOW is always last: any text, across components.
    let shape = &shape.replace(BELOW, &ANY.to_string());
    if let Some(dir) = pattern.strip_suffix("/**")
        && glob_shape(dir, shape)
    {
        return true;
    }
    // Runs of marks stand for the same as the widest of them (ANY ⊇ GLOB ⊇ DIGITS); more
    // known bytes than PATH_MAX name nothing.
    let width = |c: u8| match c {
        c if c == ANY as u8 => 3,
        c if c == GLOB as u8 => 2,
        c if c == DIGITS as u8 => 1,
        _ => 0,
    };
    let mut t: Vec<u8> = Vec::with_capacity(shape.len());
    let mut known = 0usize;
    for c in shape.bytes() {
        let mark = width(c) > 0;
        match t.last_mut() {
            Some(last) if mark && width(*last) > 0 => {
                if width(c) > width(*last) {
                    *last = c;
                }
            }
            _ => t.push(c),
        }
        if !mark {
            known += 1;
        }
    }
    if known > PATH_MAX {
        return false;
    }
    ShapeMatch::new(pattern.as_bytes(), &t).run()
}

/// [`glob_shape`]'s table: whether `pattern[pi..]` may match `text[ti..]`, filled from the ends.
struct ShapeMatch<'a> {
    p: &'a [u8],
    t: &'a [u8],
    /// For each text position: whether no `/` follows it (an ANY there may hold a `/`).
    last_component: Vec<bool>,
}

impl<'a> ShapeMatch<'a> {
    fn new(p: &'a [u8], t: &'a [u8]) -> ShapeMatch<'a> {
        let mut last_component = vec![true; t.len() + 1];
        for i in (0..t.len()).rev() {
            last_component[i] = last_component[i + 1] && t[i] != b'/';
        }
        ShapeMatch {
            p,
            t,
            last_component,
        }
    }

    /// The length of the pattern element at `pi` (a `[...]` class is one element).
    fn element(&self, pi: usize) -> usize {
        if self.p[pi] == b'['
            && let Some(end) = self.p[pi + 1..].iter().position(|&c| c == b']')
        {
            return end + 2;
        }
        if self.p[pi] == b'*' && self.p.get(pi + 1) == Some(&b'*') {
            return 2;
        }
        1
    }

    /// Whether the element at `pi` (not a `*`) matches the byte `c`.
    fn one(&self, pi: usize, len: usize, c: u8) -> bool {
        match self.p[pi] {
            b'?' => c != b'/',
            b'[' if len > 1 => {
                let class = &self.p[pi + 1..pi + len - 1];
                let (negate, class) = match class.first() {
                    Some(b'!' | b'^') => (true, &class[1..]),
                    _ => (false, class),
                };
                let mut hit = false;
                let mut i = 0;
                while i < class.len() {
                    if i + 2 < class.len() && class[i + 1] == b'-' {
                        hit |= class[i] <= c && c <= class[i + 2];
                        i += 3;
                    } else {
                        hit |= class[i] == c;
                        i += 1;
                    }
                }
                hit != negate
            }
            l => l == c,
        }
    }

    fn run(&self) -> bool {
        let (pl, tl) = (self.p.len(), self.t.len());
        let w = tl + 1;
        // at[pi * w + ti]: pattern[pi..] may match text[ti..].
        let mut at = vec![false; (pl + 1) * w];
        // The empty pattern matches what is left only if it is all ANY (each may be empty).
        at[pl * w + tl] = true;
        for ti in (0..tl).rev() {
            at[pl * w + ti] = self.t[ti] == ANY as u8 && at[pl * w + ti + 1];
        }
        for pi in (0..pl).rev() {
            let len = self.element(pi);
            let next = (pi + len).min(pl);
            for ti in (0..=tl).rev() {
                let here = |ti: usize| pi * w + ti;
                let c = self.t.get(ti).copied();
                let star = self.p[pi] == b'*';
                let double = star && len == 2;
                let hit = match c {
                    None => star && at[next * w + ti],
                    Some(m) if m == ANY as u8 || m == GLOB as u8 => {
                        // The mark stands for nothing, is swallowed by a `*`, or spells this
                        // element and goes on (a glob never spells a `/`).
                        let spans = m == ANY as u8 && self.last_component[ti + 1];
                        at[here(ti + 1)]
                            || (star && at[next * w + ti])
                            || (!star && (self.p[pi] != b'/' || spans) && at[next * w + ti])
                    }
                    Some(m) if m == DIGITS as u8 => {
                        if star {
                            at[next * w + ti] || at[here(ti + 1)]
                        } else {
                            let digit = (b'0'..=b'9').any(|d| self.one(pi, len, d));
                            digit && (at[next * w + ti] || at[next * w + ti + 1])
                        }
                    }
                    Some(b) => {
                        if double {
                            at[next * w + ti] || at[here(ti + 1)]
                        } else if star {
                            at[next * w + ti] || (b != b'/' && at[here(ti + 1)])
                        } else {
                            self.one(pi, len, b) && at[next * w + ti + 1]
                        }
                    }
                };
                at[here(ti)] = hit;
            }
            // Positions inside a `[...]` class are never started from.
        }
        at[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves() {
        let w = Cwd::Known("/w/a".into());
        let h = Some(Path::new("/home/u"));
        assert_eq!(resolve("../../etc", &w, h), Some("/etc".into()));
        assert_eq!(resolve("~/.ssh", &w, h), Some("/home/u/.ssh".into()));
        assert_eq!(resolve("~root", &w, h), None);
        assert_eq!(resolve("x", &Cwd::Unknown, h), None);
        assert_eq!(resolve("/x/./y/", &Cwd::Unknown, h), Some("/x/y".into()));
        assert_eq!(resolve(".*", &w, h), Some("/w".into()));
    }

    #[test]
    fn globs() {
        assert!(glob("/home/u/.ssh/**", "/home/u/.ssh"));
        assert!(glob("/home/u/.ssh/**", "/home/u/.ssh/a/b"));
        assert!(!glob("/home/u/.ssh/**", "/home/u/.sshx"));
        assert!(glob("/proc/*/mem", "/proc/12/mem"));
        assert!(!glob("/proc/*/mem", "/proc/1/2/mem"));
        assert!(glob_text("of=[/~]*", "of=/dev/sda"));
        assert!(glob_text("-*f*", "-rf"));
        assert!(!glob("[!x]", "x"));
    }

    #[test]
    fn globs_shapes() {
        let any = |s: &str| s.replace('@', "\0").replace('#', "\u{1}");
        // A number in the middle: one component of digits.
        assert!(glob_shape("/proc/*/environ", &any("/proc/#/environ")));
        assert!(glob_shape("/proc/[0-9]*/cmdline", &any("/proc/#/cmdline")));
        assert!(!glob_shape("/proc/[a-z]*/cmdline", &any("/proc/#/cmdline")));
        assert!(!glob_shape("/proc/*/fd/**", &any("/proc/#/status")));
        // Any text in the middle: part of one component.
        assert!(glob_shape("/proc/*/environ", &any("/proc/@/environ")));
        assert!(glob_shape("/proc/*/environ", &any("/proc/x@/environ")));
        assert!(!glob_shape("/proc/*/fd/**", &any("/proc/@/status")));
        assert!(glob_shape("/etc/shadow", &any("/e@/shadow")));
        assert!(!glob_shape("/etc/shadow", &any("/x@/shadow")));
        // Any text at the end: anything below.
        assert!(glob_shape("/proc/*/environ", &any("/proc/@")));
        assert!(glob_shape("/home/a/.ssh/**", &any("/home/a/@")));
        assert!(glob_shape("/home/a/.ssh/**", &any("/home/a/.s@")));
        assert!(!glob_shape("/home/a/.ssh/**", &any("/home/b/@")));
        assert!(glob_shape("/home/a/.ssh/**", &any("/home/a/.ssh")));
        assert!(!glob_shape("/a/b", &any("/a/b/@x")));
        assert!(glob_shape("/a/b", &any("/a/@@@b")));
        // Too long to name a file.
        assert!(!glob_shape("/**", &format!("/{}\0", "a".repeat(5000))));
    }
}
