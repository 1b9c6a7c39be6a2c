//! What the fork tests share: the files of a folder, git in a folder, a blob's id, a repository
//! to start from, and a turn's pack index tampered with.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out).trim().to_owned()
}

pub fn blob_id(content: &str) -> String {
    let mut c = Command::new("git")
        .args(["hash-object", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin
        .take()
        .unwrap()
        .write_all(content.as_bytes())
        .unwrap();
    stdout(&c.wait_with_output().unwrap()).trim().to_owned()
}

/// Every file under `dir` but `.git`, with its content.
pub fn files(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == ".git" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The run's pack index with the entries (offset and CRC) of two objects swapped, its checksum
/// made right again: a pack that names one blob's content with the other's id, which only a
/// check of the rebuilt tree can notice.
pub fn swap_in_idx(idx: &Path, a: &str, b: &str) {
    let mut d = std::fs::read(idx).unwrap();
    assert_eq!(&d[..8], b"\xfftOc\x00\x00\x00\x02", "a version 2 index");
    let n = u32::from_be_bytes(d[8 + 255 * 4..8 + 256 * 4].try_into().unwrap()) as usize;
    let shas = 8 + 256 * 4;
    let find = |d: &[u8], hex: &str| {
        (0..n)
            .find(|i| {
                let s: String = d[shas + i * 20..shas + i * 20 + 20]
                    .iter()
                    .map(|x| format!("{x:02x}"))
                    .collect();
                s == hex
            })
            .unwrap_or_else(|| panic!("{hex} is not in the turn's pack"))
    };
    let (i, j) = (find(&d, a), find(&d, b));
    let (crcs, offsets) = (shas + n * 20, shas + n * 24);
    for table in [crcs, offsets] {
        for k in 0..4 {
            d.swap(table + i * 4 + k, table + j * 4 + k);
        }
    }
    let body = d.len() - 20;
    std::fs::write(idx, &d[..body]).unwrap();
    let sum = Command::new("sha1sum").arg(idx).output().unwrap();
    let hex = stdout(&sum);
    let sum: Vec<u8> = (0..20)
        .map(|k| u8::from_str_radix(&hex[k * 2..k * 2 + 2], 16).unwrap())
        .collect();
    d.truncate(body);
    d.extend(sum);
    std::fs::write(idx, d).unwrap();
}

/// A repository with two committed files: the agent's starting point.
pub fn repo() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("a.txt"), "a\n").unwrap();
    std::fs::write(work.path().join("gone.txt"), "bye\n").unwrap();
    git(work.path(), &["init", "-q"]);
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-qm", "start"]);
    work
}
