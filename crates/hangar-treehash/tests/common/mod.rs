//! Helpers shared by the integration tests: a sandboxed real `git`, git's own tree id for a
//! work tree, and a fingerprint of a `.git` directory.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use hangar_treehash::{Options, UserConfig};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary world: `home` for git's user config, `root` for repositories.
pub struct World {
    pub tmp: tempfile::TempDir,
    pub home: PathBuf,
}

impl World {
    pub fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        World { tmp, home }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `git` as the tests run it: no system config, this world's HOME, fixed identities and
    /// dates, no line-ending conversion, the executable bit honoured.
    pub fn git(&self, dir: &Path) -> Command {
        let mut c = Command::new("git");
        c.current_dir(dir);
        for (k, _) in std::env::vars_os() {
            if let Some(k) = k.to_str()
                && (k.starts_with("GIT_") || k == "XDG_CONFIG_HOME")
            {
                c.env_remove(k);
            }
        }
        c.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &self.home)
            .env("GIT_AUTHOR_NAME", "Test")
            .env("GIT_AUTHOR_EMAIL", "test@example.com")
            .env("GIT_COMMITTER_NAME", "Test")
            .env("GIT_COMMITTER_EMAIL", "test@example.com")
            .env("GIT_AUTHOR_DATE", "1700000000 +0000")
            .env("GIT_COMMITTER_DATE", "1700000000 +0000")
            .args([
                "-c",
                "core.autocrlf=false",
                "-c",
                "core.fileMode=true",
                "-c",
                "init.defaultBranch=main",
            ])
            .args([
                "-c",
                "protocol.file.allow=always",
                "-c",
                "advice.addEmbeddedRepo=false",
            ]);
        c
    }

    pub fn run(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.git(dir).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn try_run(&self, dir: &Path, args: &[&str]) -> Output {
        self.git(dir).args(args).output().unwrap()
    }

    /// The options our hasher needs to see the same user config as [`World::git`].
    pub fn options(&self, watch: bool) -> Options {
        Options {
            user: UserConfig {
                home: Some(self.home.clone()),
                ..UserConfig::none()
            },
            watch,
            threads: 2,
        }
    }

    /// git's answer: `git add -A && git write-tree` on a copy of the repository's index, with
    /// objects going to a scratch directory (the repository itself is not written).
    pub fn git_tree(&self, repo: &Path) -> String {
        self.git_tree_with(repo, &[]).expect("git add -A")
    }

    /// [`World::git_tree`] with extra `-c` settings; `None` if `git add -A` fails.
    pub fn git_tree_with(&self, repo: &Path, extra: &[&str]) -> Option<String> {
        let scratch = self.path("git-scratch");
        std::fs::create_dir_all(scratch.join("objects")).unwrap();
        let index = scratch.join("index");
        let _ = std::fs::remove_file(&index);
        let (real, objects) = if repo.join(".git").exists() {
            let real = PathBuf::from(self.run(
                repo,
                &["rev-parse", "--path-format=absolute", "--git-path", "index"],
            ));
            let objects = PathBuf::from(self.run(
                repo,
                &[
                    "rev-parse",
                    "--path-format=absolute",
                    "--git-path",
                    "objects",
                ],
            ));
            (real, objects)
        } else {
            (repo.join(".git/index"), repo.join(".git/objects"))
        };
        if real.exists() {
            // Keep the index's mtime: git judges "racily clean" entries by it (at one-second
            // granularity), so a copy with a new mtime would make git trust stale stat data.
            std::fs::copy(&real, &index).unwrap();
            let mtime = std::fs::metadata(&real).unwrap().modified().unwrap();
            std::fs::File::options()
                .write(true)
                .open(&index)
                .unwrap()
                .set_modified(mtime)
                .unwrap();
        }
        let env = |c: &mut Command| {
            c.env("GIT_INDEX_FILE", &index)
                .env("GIT_OBJECT_DIRECTORY", scratch.join("objects"))
                .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", &objects);
        };
        let mut add = self.git(repo);
        add.args(extra).args(["add", "-A"]);
        env(&mut add);
        let out = add.output().unwrap();
        if !out.status.success() {
            return None;
        }
        let mut wt = self.git(repo);
        wt.args(extra).arg("write-tree");
        env(&mut wt);
        let out = wt.output().unwrap();
        assert!(
            out.status.success(),
            "git write-tree: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// `git ls-tree -r` of a tree, reading objects from `objects` (then the repository's).
    pub fn ls_tree(&self, repo: &Path, objects: &Path, tree: &str) -> String {
        let out = self
            .git(repo)
            .env("GIT_OBJECT_DIRECTORY", objects)
            .env(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                repo.join(".git").join("objects"),
            )
            .args(["ls-tree", "-r", "-t", "--full-tree", tree])
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// Every file under `dir` with its size, mtime, mode and content: equal fingerprints mean
/// nothing was written, touched or freshened.
pub fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (u64, i64, i64, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let content = if m.is_file() {
                std::fs::read(&p).unwrap_or_default()
            } else {
                Vec::new()
            };
            out.insert(
                p.clone(),
                (m.len(), m.mtime(), m.mtime_nsec(), m.mode(), content),
            );
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// A small deterministic RNG (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
