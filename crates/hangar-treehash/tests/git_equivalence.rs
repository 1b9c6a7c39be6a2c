//! The property test: random work trees and random edit sequences, compared with the real `git`
//! (`git add -A && git write-tree` on a copy of the index) at every step, for three hashers at
//! once — incremental with the inotify watch, incremental with full stat walks, and a fresh
//! one-shot — while checking that hashing never writes, touches or freshens anything in `.git`.
//!
//! `HANGAR_TREEHASH_SEEDS` (default 10) and `HANGAR_TREEHASH_STEPS` (default 30) make it longer;
//! every tenth seed waits past the racy window now and then, so that cached verdicts (and the
//! full walk's kept directories) are trusted when the next edits come.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod common;

use common::{Rng, World, fingerprint};
use hangar_treehash::{Store, TreeHasher};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const NAMES: &[&str] = &[
    "a", "b", "c.txt", "d.log", "e.o", "build", "src", "lib", "a-b", "a.b", "ab", "x y", "#h",
    "!e", "[k]", "Foo", "deep", "z",
];

const PATTERNS: &[&str] = &[
    "*.txt",
    "*.o",
    "build/",
    "/a",
    "a",
    "b*",
    "**/c.txt",
    "src/**",
    "!c.txt",
    "!*.log",
    "*.log",
    "?b",
    "[ab]*",
    "\\#h",
    "\\!e",
    "x\\ y",
    "a-*/",
    "!a-b",
    "lib/a",
    "**/build/**",
    "src/**/b",
    "d.log ",
    "# c",
    "",
    "deep/",
    "!deep/",
    "*",
    "!*/",
    "!src/",
    "a/**",
    "Foo/",
    "/src/a",
    "[!a]*.txt",
    "*.[ot]*",
    "z/",
    "!z",
    "lib/",
    "*/a",
    "**/deep",
    "a.b\r",
];

#[derive(Default)]
struct Listing {
    files: Vec<String>,
    links: Vec<String>,
    dirs: Vec<String>,
    nested: Vec<String>,
}

/// Everything in the work tree (nothing under any `.git`), relative paths.
fn list(repo: &Path) -> Listing {
    let mut l = Listing::default();
    let mut stack = vec![String::new()];
    while let Some(d) = stack.pop() {
        let abs = if d.is_empty() {
            repo.to_path_buf()
        } else {
            repo.join(&d)
        };
        let Ok(rd) = std::fs::read_dir(&abs) else {
            continue;
        };
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for n in names {
            if n == ".git" {
                if !d.is_empty() {
                    l.nested.push(d.clone());
                }
                continue;
            }
            let rel = if d.is_empty() {
                n.clone()
            } else {
                format!("{d}/{n}")
            };
            let m = std::fs::symlink_metadata(repo.join(&rel)).unwrap();
            if m.file_type().is_symlink() {
                l.links.push(rel);
            } else if m.is_dir() {
                l.dirs.push(rel.clone());
                stack.push(rel);
            } else if m.is_file() {
                l.files.push(rel);
            }
        }
    }
    l
}

fn content(rng: &mut Rng) -> Vec<u8> {
    let len = rng.below(40);
    (0..len).map(|_| *rng.pick(b"abc\n \t")).collect()
}

fn random_dir(rng: &mut Rng, l: &Listing) -> String {
    if l.dirs.is_empty() || rng.chance(30) {
        String::new()
    } else {
        rng.pick(&l.dirs).clone()
    }
}

fn new_path(rng: &mut Rng, l: &Listing) -> String {
    let mut d = random_dir(rng, l);
    for _ in 0..rng.below(3) {
        if rng.chance(40) {
            d = if d.is_empty() {
                rng.pick(NAMES).to_string()
            } else {
                format!("{d}/{}", rng.pick(NAMES))
            };
        }
    }
    let n = rng.pick(NAMES);
    if d.is_empty() {
        n.to_string()
    } else {
        format!("{d}/{n}")
    }
}

fn write_file(repo: &Path, rel: &str, data: &[u8]) -> bool {
    let p = repo.join(rel);
    if let Some(parent) = p.parent()
        && std::fs::create_dir_all(parent).is_err()
    {
        return false;
    }
    if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
        return false;
    }
    let _ = std::fs::remove_file(&p);
    std::fs::write(&p, data).is_ok()
}

fn patterns(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(4) {
        out.extend_from_slice(rng.pick(PATTERNS).as_bytes());
        out.push(b'\n');
    }
    out
}

/// One random edit; returns a description for the failure log.
fn edit(w: &World, repo: &Path, rng: &mut Rng) -> String {
    let l = list(repo);
    let any_file = |rng: &mut Rng| -> Option<String> {
        if l.files.is_empty() {
            None
        } else {
            Some(rng.pick(&l.files).clone())
        }
    };
    match rng.below(100) {
        0..=24 => {
            let rel = if !l.files.is_empty() && rng.chance(40) {
                any_file(rng).unwrap()
            } else {
                new_path(rng, &l)
            };
            let data = content(rng);
            let ok = write_file(repo, &rel, &data);
            if ok && rng.chance(20) {
                let _ = std::fs::set_permissions(
                    repo.join(&rel),
                    std::fs::Permissions::from_mode(0o755),
                );
            }
            format!("write {rel} ({} bytes) {ok}", data.len())
        }
        25..=32 => {
            let pool: Vec<&String> = l.files.iter().chain(&l.links).collect();
            if pool.is_empty() {
                return "noop".into();
            }
            let rel = (*rng.pick(&pool)).clone();
            let _ = std::fs::remove_file(repo.join(&rel));
            format!("rm {rel}")
        }
        33..=36 => {
            if l.dirs.is_empty() {
                return "noop".into();
            }
            let rel = rng.pick(&l.dirs).clone();
            let _ = std::fs::remove_dir_all(repo.join(&rel));
            format!("rm -r {rel}")
        }
        37..=44 => {
            let pool: Vec<&String> = l.files.iter().chain(&l.links).chain(&l.dirs).collect();
            if pool.is_empty() {
                return "noop".into();
            }
            let from = (*rng.pick(&pool)).clone();
            let to = new_path(rng, &l);
            if to.starts_with(&format!("{from}/")) || to == from {
                return "noop".into();
            }
            if let Some(parent) = repo.join(&to).parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let ok = std::fs::rename(repo.join(&from), repo.join(&to)).is_ok();
            format!("mv {from} {to} {ok}")
        }
        45..=50 => {
            let Some(rel) = any_file(rng) else {
                return "noop".into();
            };
            let p = repo.join(&rel);
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            let new = if mode & 0o100 != 0 { 0o644 } else { 0o755 };
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(new));
            format!("chmod {new:o} {rel}")
        }
        51..=56 => {
            let rel = new_path(rng, &l);
            let target = match rng.below(4) {
                0 if !l.files.is_empty() => rng.pick(&l.files).clone(),
                1 if !l.dirs.is_empty() => rng.pick(&l.dirs).clone(),
                2 => "../outside".to_string(),
                _ => format!("nowhere-{}", rng.below(5)),
            };
            let p = repo.join(&rel);
            if let Some(parent) = p.parent()
                && std::fs::create_dir_all(parent).is_err()
            {
                return "noop".into();
            }
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                return "noop".into();
            }
            let _ = std::fs::remove_file(&p);
            let ok = std::os::unix::fs::symlink(&target, &p).is_ok();
            format!("ln -s {target} {rel} {ok}")
        }
        57..=64 => {
            let d = random_dir(rng, &l);
            let rel = if d.is_empty() {
                ".gitignore".to_string()
            } else {
                format!("{d}/.gitignore")
            };
            let pats = patterns(rng);
            let ok = write_file(repo, &rel, &pats);
            format!("{rel} = {:?} {ok}", String::from_utf8_lossy(&pats))
        }
        65..=67 => {
            let pats = patterns(rng);
            let p = repo.join(".git/info/exclude");
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &pats).unwrap();
            format!("info/exclude = {:?}", String::from_utf8_lossy(&pats))
        }
        68..=70 => {
            let pats = patterns(rng);
            if rng.chance(50) {
                let p = w.home.join(".config/git/ignore");
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, &pats).unwrap();
                format!(
                    "~/.config/git/ignore = {:?}",
                    String::from_utf8_lossy(&pats)
                )
            } else {
                let p = w.home.join("my-excludes");
                std::fs::write(&p, &pats).unwrap();
                w.run(repo, &["config", "core.excludesFile", "~/my-excludes"]);
                format!(
                    "core.excludesFile ~/my-excludes = {:?}",
                    String::from_utf8_lossy(&pats)
                )
            }
        }
        71..=76 => {
            let pool: Vec<&String> = l.files.iter().chain(&l.links).collect();
            match rng.below(4) {
                0 | 1 if !pool.is_empty() => {
                    let rel = (*rng.pick(&pool)).clone();
                    let out = w.try_run(repo, &["add", "-f", "--", &rel]);
                    format!("git add -f {rel} {}", out.status.success())
                }
                2 => {
                    let out = w.try_run(repo, &["ls-files", "-z"]);
                    let tracked: Vec<String> = String::from_utf8_lossy(&out.stdout)
                        .split('\0')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect();
                    if tracked.is_empty() {
                        return "noop".into();
                    }
                    let rel = rng.pick(&tracked).clone();
                    let out = w.try_run(repo, &["rm", "-q", "--cached", "--", &rel]);
                    format!("git rm --cached {rel} {}", out.status.success())
                }
                _ => {
                    let out = w.try_run(repo, &["commit", "-q", "--allow-empty", "-m", "step"]);
                    format!("git commit {}", out.status.success())
                }
            }
        }
        77..=80 => {
            if !l.nested.is_empty() && rng.chance(50) {
                let n = rng.pick(&l.nested).clone();
                let sub = repo.join(&n);
                if rng.chance(25) {
                    let _ = std::fs::remove_dir_all(sub.join(".git"));
                    return format!("unrepo {n}");
                }
                std::fs::write(sub.join(format!("f{}", rng.below(1000))), content(rng)).unwrap();
                w.run(&sub, &["add", "-A", "-f"]);
                let out = w.try_run(&sub, &["commit", "-q", "--allow-empty", "-m", "more"]);
                return format!("commit in nested {n} {}", out.status.success());
            }
            let rel = new_path(rng, &l);
            let p = repo.join(&rel);
            if p.exists() || std::fs::create_dir_all(&p).is_err() {
                return "noop".into();
            }
            w.run(&p, &["init", "-q"]);
            std::fs::write(p.join("inner"), content(rng)).unwrap();
            w.run(&p, &["add", "-A", "-f"]);
            w.run(&p, &["commit", "-q", "--allow-empty", "-m", "nested"]);
            format!("nested repo {rel}")
        }
        81..=83 => {
            let rel = new_path(rng, &l);
            let ok = std::fs::create_dir_all(repo.join(&rel)).is_ok();
            format!("mkdir {rel} {ok}")
        }
        84..=87 => {
            if rng.chance(50) {
                let Some(rel) = any_file(rng) else {
                    return "noop".into();
                };
                let _ = std::fs::remove_file(repo.join(&rel));
                std::fs::create_dir_all(repo.join(&rel)).unwrap();
                std::fs::write(repo.join(&rel).join(rng.pick(NAMES)), content(rng)).unwrap();
                format!("file to dir {rel}")
            } else {
                if l.dirs.is_empty() {
                    return "noop".into();
                }
                let rel = rng.pick(&l.dirs).clone();
                let _ = std::fs::remove_dir_all(repo.join(&rel));
                let _ = std::fs::write(repo.join(&rel), content(rng));
                format!("dir to file {rel}")
            }
        }
        88..=91 => {
            let Some(rel) = any_file(rng) else {
                return "noop".into();
            };
            let p = repo.join(&rel);
            let old = std::fs::read(&p).unwrap_or_default();
            if rng.chance(50) || old.is_empty() {
                // Same bytes again: new mtime, same content.
                std::fs::write(&p, &old).unwrap();
                format!("touch {rel}")
            } else {
                // Same size, other content, at once: the racy case.
                let new: Vec<u8> = old
                    .iter()
                    .map(|b| if *b == b'a' { b'b' } else { b'a' })
                    .collect();
                std::fs::write(&p, &new).unwrap();
                format!("same-size rewrite {rel}")
            }
        }
        92..=95 => {
            let out = w.try_run(repo, &["ls-files", "-z"]);
            let tracked: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .split('\0')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if tracked.is_empty() {
                return "noop".into();
            }
            let rel = rng.pick(&tracked).clone();
            let flag = *rng.pick(&[
                "--assume-unchanged",
                "--skip-worktree",
                "--no-assume-unchanged",
                "--no-skip-worktree",
            ]);
            let out = w.try_run(repo, &["update-index", flag, "--", &rel]);
            if rng.chance(50) {
                let _ = write_file(repo, &rel, &content(rng));
            }
            format!("update-index {flag} {rel} {}", out.status.success())
        }
        _ => {
            let out = w.try_run(repo, &["add", "-A"]);
            let out2 = w.try_run(repo, &["commit", "-q", "-m", "all"]);
            format!(
                "git add -A && commit {} {}",
                out.status.success(),
                out2.status.success()
            )
        }
    }
}

fn run_seed(seed: u64, steps: usize) {
    let w = World::new();
    let repo = w.path("repo");
    std::fs::create_dir_all(&repo).unwrap();
    w.run(&repo, &["init", "-q"]);
    let mut rng = Rng::new(seed);
    let mut log = Vec::new();
    for _ in 0..12 {
        log.push(edit(&w, &repo, &mut rng));
    }
    w.try_run(&repo, &["add", "-A"]);
    w.try_run(&repo, &["commit", "-q", "-m", "initial"]);
    let objects = repo.join(".git/objects");
    let store_w = w.path("store-watch");
    let store_f = w.path("store-full");
    let mut watched = TreeHasher::with_options(
        &repo,
        Store::open(&store_w, std::slice::from_ref(&objects)).unwrap(),
        w.options(true),
    )
    .unwrap();
    let mut full = TreeHasher::with_options(
        &repo,
        Store::open(&store_f, std::slice::from_ref(&objects)).unwrap(),
        w.options(false),
    )
    .unwrap();
    assert!(watched.watching(), "inotify is available on this machine");
    let mut last = String::new();
    for step in 0..steps {
        let edits = if step == 0 { 0 } else { 1 + rng.below(3) };
        if seed % 10 == 9 && step % 10 == 1 {
            // Past the racy window: the full-walk hasher's kept directories are trusted, so
            // the edits that follow are seen through them.
            std::thread::sleep(std::time::Duration::from_millis(2100));
        }
        log.push(format!("--- step {step}"));
        for _ in 0..edits {
            log.push(edit(&w, &repo, &mut rng));
        }
        let before = fingerprint(&repo.join(".git"));
        let a = watched.hash().unwrap().to_hex();
        let b = full.hash().unwrap().to_hex();
        let mut fresh =
            TreeHasher::with_options(&repo, Store::hash_only(), w.options(false)).unwrap();
        let c = fresh.hash().unwrap().to_hex();
        let after = fingerprint(&repo.join(".git"));
        assert!(
            before == after,
            "seed {seed} step {step}: hashing changed something in .git"
        );
        let g = w.git_tree(&repo);
        if a != g || b != g || c != g {
            eprintln!("seed {seed} step {step}: git {g}, watch {a}, full {b}, fresh {c}");
            for (i, l) in log.iter().enumerate() {
                eprintln!("  {i}: {l}");
            }
            eprintln!(
                "--- git:\n{}",
                w.ls_tree(&repo, &w.path("git-scratch/objects"), &g)
            );
            eprintln!("--- full:\n{}", w.ls_tree(&repo, &store_f, &b));
            if a != b {
                eprintln!("--- watch:\n{}", w.ls_tree(&repo, &store_w, &a));
            }
            eprintln!("kept for inspection: {}", w.tmp.path().display());
            std::mem::forget(w);
            panic!("seed {seed} step {step}: tree ids differ");
        }
        last = g;
    }
    // Every object of the last tree is readable from the store plus the repository, and the
    // turn's pack is a valid pack.
    let listing = w.ls_tree(&repo, &store_f, &last);
    assert!(!listing.contains("fatal"), "seed {seed}: {listing}");
    let blobs: Vec<&str> = listing
        .lines()
        .filter(|l| l.contains(" blob "))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let mut check = w.git(&repo);
    check
        .env("GIT_OBJECT_DIRECTORY", &store_f)
        .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", &objects)
        .args(["cat-file", "--batch-check"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = check.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for b in &blobs {
            writeln!(stdin, "{b}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("missing"),
        "seed {seed}: missing blobs"
    );
    let store = full.into_store();
    let pack = w.path("turn.pack");
    let info = store.export_pack(&pack).unwrap();
    assert_eq!(info.objects, store.created().len());
    let v = w.try_run(&repo, &["verify-pack", info.idx.to_str().unwrap()]);
    assert!(
        v.status.success(),
        "verify-pack: {}",
        String::from_utf8_lossy(&v.stderr)
    );
    let _: PathBuf = info.pack;
}

#[test]
fn random_edit_sequences_match_git_at_every_step() {
    let seeds: u64 = std::env::var("HANGAR_TREEHASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let steps: usize = std::env::var("HANGAR_TREEHASH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let first: u64 = std::env::var("HANGAR_TREEHASH_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let t = std::time::Instant::now();
    for seed in first..first + seeds {
        run_seed(seed, steps);
    }
    eprintln!(
        "{seeds} seeds x {steps} steps compared with git in {:?}",
        t.elapsed()
    );
}
