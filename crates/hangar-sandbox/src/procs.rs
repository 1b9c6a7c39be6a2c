//! Finding the processes still inside a local sandbox: every process of a bubblewrap sandbox
//! has the sandbox's folders mounted in its own mount namespace, so its `/proc/<pid>/mountinfo`
//! names them (by device and path within that device, which is how the kernel reports a bind
//! mount's source). Processes of the host's namespace never do, so this finds exactly the
//! sandbox's, however they forked, daemonized or renamed themselves.

use std::path::{Path, PathBuf};

/// A host path as a bind mount's source appears in mountinfo: the device (`major:minor`) and the
/// path within that file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSource {
    pub dev: String,
    pub root: PathBuf,
}

/// Where `path` lives, from this process's own mount table (the mount whose point is the longest
/// prefix of `path`).
pub fn source_of(path: &Path) -> Option<MountSource> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(usize, MountSource)> = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 5 {
            continue;
        }
        let point = PathBuf::from(unescape(f[4]));
        if let Ok(rest) = path.strip_prefix(&point) {
            let depth = point.components().count();
            if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
                best = Some((
                    depth,
                    MountSource {
                        dev: f[2].to_owned(),
                        root: PathBuf::from(unescape(f[3])).join(rest),
                    },
                ));
            }
        }
    }
    best.map(|(_, s)| s)
}

/// The pids (not this process) whose mount namespace has something of `src` mounted.
pub fn holding(src: &MountSource) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path().join("mountinfo")) else {
            continue;
        };
        let hit = text.lines().any(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            f.len() > 4 && f[2] == src.dev && Path::new(&unescape(f[3])).starts_with(&src.root)
        });
        if hit {
            out.push(pid);
        }
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn a_path_has_a_source() {
        let s = source_of(Path::new("/proc/self")).unwrap();
        assert!(!s.dev.is_empty());
    }
}
