//! Paths as a command would reach them: relative ones against the directory the command runs
//! in, `~` against the home, `..` folded away, symlinks followed where the path exists.

use std::path::{Component, Path, PathBuf};

/// The directory a command runs in, when known (a `cd` to a computed place makes it unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cwd {
    Known(PathBuf),
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
            Cwd::Unknown => return None,
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
/// the workspace that points out of it is seen for what it is.
pub fn canonical(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(&existing) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return normalize(&out);
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
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
}
