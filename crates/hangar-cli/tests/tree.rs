//! `hangar tree DIR` prints what `git add -A && git write-tree` gives, and writes nothing.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "-c",
            "core.autocrlf=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn hangar_tree_matches_git_write_tree_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q"]);
    std::fs::write(d.join("a.txt"), "a\n").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/b.sh"), "#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("a.txt", d.join("link")).unwrap();
    std::fs::write(d.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(d.join("noise.log"), "ignored\n").unwrap();
    git(d, &["add", "-A"]);
    git(d, &["commit", "-qm", "one"]);
    // A tracked file the ignore rules match, and an untracked one.
    std::fs::write(d.join("kept.log"), "tracked\n").unwrap();
    git(d, &["add", "-f", "kept.log"]);
    std::fs::write(d.join("new.txt"), "new\n").unwrap();
    let before = git(d, &["status", "--porcelain"]);
    let ours = Command::new(env!("CARGO_BIN_EXE_hangar"))
        .arg("tree")
        .arg(d)
        .output()
        .unwrap();
    assert!(ours.status.success());
    let ours = String::from_utf8(ours.stdout).unwrap().trim().to_owned();
    assert_eq!(
        git(d, &["status", "--porcelain"]),
        before,
        "hangar tree changed nothing git sees"
    );
    git(d, &["add", "-A"]);
    assert_eq!(ours, git(d, &["write-tree"]));
}
