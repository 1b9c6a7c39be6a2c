//! Named cases, each compared with the real `git`: tracked-but-ignored files, submodules and
//! nested repositories, linked worktrees, plain folders, index versions, incrementality, the
//! repository left untouched, the turn's pack rebuilding every step, and the one known
//! difference (content conversions git would apply) pinned.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod common;

use common::{World, fingerprint};
use hangar_treehash::{Store, TreeHasher};
use std::path::{Path, PathBuf};

fn write(p: &Path, data: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

fn new_repo(w: &World, name: &str) -> PathBuf {
    let repo = w.path(name);
    std::fs::create_dir_all(&repo).unwrap();
    w.run(&repo, &["init", "-q"]);
    repo
}

fn hasher(w: &World, repo: &Path, watch: bool) -> TreeHasher {
    TreeHasher::with_options(repo, Store::hash_only(), w.options(watch)).unwrap()
}

fn ours(w: &World, repo: &Path) -> String {
    hasher(w, repo, false).hash().unwrap().to_hex()
}

#[test]
fn tracked_files_matched_by_ignore_rules_stay() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    write(&repo.join("keep.log"), "tracked\n");
    write(&repo.join("build/out.o"), "tracked object\n");
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    write(&repo.join(".gitignore"), "*.log\nbuild/\n");
    write(&repo.join("keep.log"), "tracked, changed\n");
    write(&repo.join("new.log"), "untracked, ignored\n");
    write(&repo.join("build/new.o"), "untracked in an ignored dir\n");
    write(&repo.join("build/out.o"), "tracked object, changed\n");
    let g = w.git_tree(&repo);
    assert_eq!(ours(&w, &repo), g);
    let listing = w.ls_tree(&repo, &w.path("git-scratch/objects"), &g);
    assert!(
        listing.contains("\tkeep.log\n") && listing.contains("\tbuild/out.o\n"),
        "{listing}"
    );
    assert!(
        !listing.contains("new.log") && !listing.contains("new.o"),
        "{listing}"
    );
}

#[test]
fn submodules_and_nested_repositories_are_gitlinks() {
    let w = World::new();
    let sub_src = new_repo(&w, "sub-src");
    write(&sub_src.join("s"), "sub\n");
    w.run(&sub_src, &["add", "-A"]);
    w.run(&sub_src, &["commit", "-qm", "sub"]);
    let repo = new_repo(&w, "r");
    write(&repo.join("top"), "top\n");
    w.run(
        &repo,
        &["submodule", "add", "-q", sub_src.to_str().unwrap(), "sub"],
    );
    w.run(&repo, &["commit", "-qm", "with submodule"]);
    let mut h = hasher(&w, &repo, true);
    assert_eq!(h.hash().unwrap().to_hex(), w.git_tree(&repo));

    // The submodule's HEAD moves: the gitlink follows it.
    let sub = repo.join("sub");
    write(&sub.join("more"), "more\n");
    w.run(&sub, &["add", "-A"]);
    w.run(&sub, &["commit", "-qm", "more"]);
    assert_eq!(h.hash().unwrap().to_hex(), w.git_tree(&repo));

    // An untracked nested repository with a commit becomes a gitlink too.
    let nested = repo.join("nested");
    std::fs::create_dir_all(&nested).unwrap();
    w.run(&nested, &["init", "-q"]);
    write(&nested.join("n"), "n\n");
    w.run(&nested, &["add", "-A"]);
    w.run(&nested, &["commit", "-qm", "n"]);
    let g = w.git_tree(&repo);
    assert_eq!(h.hash().unwrap().to_hex(), g);
    let listing = w.ls_tree(&repo, &w.path("git-scratch/objects"), &g);
    assert!(
        listing.contains("160000 commit") && listing.contains("\tnested\n"),
        "{listing}"
    );

    // The submodule's repository cannot be read (not checked out): the index's id stands.
    std::fs::remove_file(sub.join(".git")).unwrap();
    assert_eq!(h.hash().unwrap().to_hex(), w.git_tree(&repo));
    assert_eq!(ours(&w, &repo), w.git_tree(&repo));

    // Gone from the work tree: gone from the tree.
    std::fs::remove_dir_all(&sub).unwrap();
    assert_eq!(h.hash().unwrap().to_hex(), w.git_tree(&repo));

    // A nested repository without a commit: `git add -A` fails on it; it is left out here.
    let unborn = repo.join("unborn");
    std::fs::create_dir_all(&unborn).unwrap();
    w.run(&unborn, &["init", "-q"]);
    write(&unborn.join("u"), "u\n");
    assert!(
        w.git_tree_with(&repo, &[]).is_none(),
        "git refuses a repository without a commit"
    );
    let with = h.hash().unwrap().to_hex();
    std::fs::remove_dir_all(&unborn).unwrap();
    assert_eq!(with, w.git_tree(&repo));
    assert_eq!(h.hash().unwrap().to_hex(), with);
}

#[test]
fn linked_worktree_through_a_gitdir_file() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    write(&repo.join("a"), "a\n");
    write(&repo.join(".gitignore"), "*.tmp\n");
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    write(&repo.join(".git/info/exclude"), "excluded-everywhere\n");
    let wt = w.path("wt");
    w.run(&repo, &["worktree", "add", "-q", wt.to_str().unwrap()]);
    assert!(wt.join(".git").is_file());
    write(&wt.join("b"), "b\n");
    write(&wt.join("x.tmp"), "ignored\n");
    write(
        &wt.join("excluded-everywhere"),
        "ignored by the common info/exclude\n",
    );
    std::fs::remove_file(wt.join("a")).unwrap();
    assert_eq!(ours(&w, &wt), w.git_tree(&wt));
}

#[test]
fn plain_folder_hashes_like_a_fresh_git_init() {
    let w = World::new();
    let dir = w.path("plain");
    write(&dir.join("a.txt"), "a\n");
    write(&dir.join("sub/b.txt"), "b\n");
    write(&dir.join("sub/.gitignore"), "*.o\n");
    write(&dir.join("sub/x.o"), "ignored\n");
    write(&dir.join("empty-dir/.keep-nothing/.gitignore"), "*\n");
    std::fs::create_dir_all(dir.join("really-empty")).unwrap();
    write(&w.home.join(".config/git/ignore"), "*.secret\n");
    write(&dir.join("k.secret"), "ignored by the global ignore file\n");
    let id = ours(&w, &dir);
    // git's answer, in a copy.
    let copy = w.path("copy");
    let out = std::process::Command::new("cp")
        .args(["-a"])
        .arg(&dir)
        .arg(&copy)
        .output()
        .unwrap();
    assert!(out.status.success());
    w.run(&copy, &["init", "-q"]);
    assert_eq!(id, w.git_tree(&copy));
    assert_eq!(hangar_treehash::tree_id(&dir).unwrap().len(), 40);
}

#[test]
fn index_versions_2_3_4_and_the_stat_seed() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    for i in 0..50 {
        write(&repo.join(format!("d{}/f{i}", i % 5)), &format!("{i}\n"));
    }
    write(&repo.join("d0/exec"), "#!/bin/sh\n");
    std::os::unix::fs::symlink("d1/f1", repo.join("link")).unwrap();
    let mut perm = std::fs::metadata(repo.join("d0/exec"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(repo.join("d0/exec"), perm).unwrap();
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    // Let the files age past the racy window so the index's stat data can be trusted.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    w.run(&repo, &["update-index", "--really-refresh"]);
    for (version, extra) in [("2", None), ("3", Some("d2/f2")), ("4", Some("d3/f3"))] {
        if let Some(p) = extra {
            w.run(&repo, &["update-index", "--skip-worktree", p]);
        }
        w.run(&repo, &["update-index", "--index-version", version]);
        let mut h = hasher(&w, &repo, false);
        let id = h.hash().unwrap().to_hex();
        assert_eq!(id, w.git_tree(&repo), "index version {version}");
        assert_eq!(
            h.last_stats().files_hashed,
            0,
            "v{version}: every file seeded from the index"
        );
    }
    // A skip-worktree file changed on disk stays as the index has it, as with git.
    write(&repo.join("d2/f2"), "changed\n");
    std::fs::remove_file(repo.join("d3/f3")).unwrap();
    assert_eq!(ours(&w, &repo), w.git_tree(&repo));
}

#[test]
fn a_step_rereads_only_what_changed() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    for i in 0..200 {
        write(&repo.join(format!("d{}/f{i}", i % 10)), &format!("{i}\n"));
    }
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    for watch in [true, false] {
        let mut h = hasher(&w, &repo, watch);
        h.hash().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2100));
        h.hash().unwrap();
        write(&repo.join("d3/f3"), "changed\n");
        write(&repo.join("d4/new"), "new\n");
        let id = h.hash().unwrap().to_hex();
        assert_eq!(id, w.git_tree(&repo));
        let s = h.last_stats().clone();
        assert_eq!(s.files_hashed, 2, "{s:?}");
        assert_eq!(s.full_walk, !watch, "{s:?}");
        if watch {
            assert!(s.stats < 10, "the watch looked at what changed only: {s:?}");
        } else {
            assert!(s.stats >= 200, "{s:?}");
        }
        std::fs::remove_file(repo.join("d4/new")).unwrap();
        write(&repo.join("d3/f3"), "3\n");
    }
}

#[test]
fn hashing_writes_nothing_into_the_repository() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    for i in 0..20 {
        write(&repo.join(format!("f{i}")), &format!("{i}\n"));
    }
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "one"]);
    w.run(&repo, &["gc", "-q"]);
    write(&repo.join("loose"), "a loose object\n");
    w.run(&repo, &["add", "loose"]);
    // Make the repository's objects old, so that a freshening would show.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for (p, _) in fingerprint(&repo.join(".git/objects")) {
        if p.is_file() {
            let f = std::fs::File::options()
                .write(true)
                .open(&p)
                .or_else(|_| std::fs::File::open(&p))
                .unwrap();
            let _ = f.set_modified(old);
        }
    }
    write(&repo.join("f1"), "changed\n");
    write(&repo.join("new"), "new\n");
    write(&repo.join("f2"), "0\n"); // same content as f0: its blob is in the pack already
    let before = fingerprint(&repo.join(".git"));
    let store_dir = w.path("ctl/tree");
    let store = Store::open(&store_dir, &[repo.join(".git/objects")]).unwrap();
    let mut h = TreeHasher::with_options(&repo, store, w.options(true)).unwrap();
    let id = h.hash().unwrap().to_hex();
    h.hash_full().unwrap();
    assert_eq!(
        fingerprint(&repo.join(".git")),
        before,
        "nothing in .git written, touched or freshened"
    );
    assert_eq!(id, w.git_tree(&repo));
    // Only what the repository lacks went into the store: the two new blobs and the trees.
    let store = h.into_store();
    let created = store.created();
    let blobs = created
        .iter()
        .filter(|id| matches!(store.read_object(id), Ok((hangar_treehash::Kind::Blob, _))))
        .count();
    assert_eq!(blobs, 2, "{created:?}");
    store.destroy().unwrap();
    assert!(!store_dir.exists());
}

#[test]
fn the_turns_pack_plus_the_repository_at_the_start_rebuild_every_step() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    write(&repo.join("a"), "a\n");
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "one"]);
    // The control plane's copy of the repository as the turn starts.
    let start = w.path("start.git");
    w.run(
        w.tmp.path(),
        &[
            "clone",
            "-q",
            "--bare",
            repo.to_str().unwrap(),
            start.to_str().unwrap(),
        ],
    );
    let store = Store::open(&w.path("ctl/tree"), &[repo.join(".git/objects")]).unwrap();
    let mut h = TreeHasher::with_options(&repo, store, w.options(true)).unwrap();
    let mut steps = vec![h.hash().unwrap().to_hex()];
    write(&repo.join("b/c"), "c\n");
    steps.push(h.hash().unwrap().to_hex());
    // The agent commits during the turn: those objects are in the repository only now, so the
    // store keeps its own copies (even when they come within a clock tick of the store's open).
    write(&repo.join("d"), "d\n");
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "by the agent"]);
    steps.push(h.hash().unwrap().to_hex());
    write(&repo.join("a"), "a2\n");
    steps.push(h.hash().unwrap().to_hex());
    let store = h.into_store();
    let info = store.export_pack(&w.path("turn.pack")).unwrap();
    let pack_dir = start.join("objects/pack");
    std::fs::copy(
        &info.pack,
        pack_dir.join(format!("pack-{}.pack", info.checksum)),
    )
    .unwrap();
    std::fs::copy(
        &info.idx,
        pack_dir.join(format!("pack-{}.idx", info.checksum)),
    )
    .unwrap();
    for (i, tree) in steps.iter().enumerate() {
        let out = w.run(&start, &["rev-list", "--objects", "--missing=print", tree]);
        assert!(!out.lines().any(|l| l.starts_with('?')), "step {i}: {out}");
    }
    let fsck = w.try_run(&start, &["fsck", "--no-dangling"]);
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// The one known difference, pinned: nothing of the repository's configuration runs or converts
/// content. Where git would apply a clean filter or `core.autocrlf`, its tree differs from ours;
/// ours is the content as it is on disk (and equals git's with the conversion switched off).
#[test]
fn clean_filters_and_autocrlf_are_not_applied() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    let marker = w.path("filter-ran");
    write(&repo.join(".gitattributes"), "*.up filter=upper\n");
    write(&repo.join("x.up"), "lower case\n");
    write(&repo.join("crlf.txt"), "one\r\ntwo\r\n");
    let filter = format!("touch {} && tr a-z A-Z", marker.display());
    w.run(&repo, &["config", "filter.upper.clean", &filter]);
    w.run(&repo, &["config", "core.autocrlf", "true"]);
    let mut h = hasher(&w, &repo, false);
    let id = h.hash().unwrap().to_hex();
    assert!(!marker.exists(), "the clean filter must not run");
    let notes = h.divergences();
    assert!(
        notes.iter().any(|n| n.contains("filter.upper.clean")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("core.autocrlf")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains(".gitattributes")),
        "{notes:?}"
    );
    let with_conversions = w
        .git_tree_with(&repo, &["-c", "core.autocrlf=true"])
        .unwrap();
    assert!(marker.exists(), "git ran the filter");
    assert_ne!(id, with_conversions, "git converts, we do not");
    let without = w
        .git_tree_with(
            &repo,
            &["-c", "filter.upper.clean=cat", "-c", "core.autocrlf=false"],
        )
        .unwrap();
    assert_eq!(id, without, "ours is the unconverted content");
    // A repository without such settings reports nothing.
    let plain = new_repo(&w, "plain");
    write(&plain.join("f"), "f\n");
    let mut h = hasher(&w, &plain, false);
    h.hash().unwrap();
    assert!(h.divergences().is_empty(), "{:?}", h.divergences());
}

#[test]
fn core_filemode_false_keeps_the_index_modes() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    write(&repo.join("script"), "#!/bin/sh\n");
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    w.run(&repo, &["config", "core.fileMode", "false"]);
    let mut perm = std::fs::metadata(repo.join("script"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(repo.join("script"), perm).unwrap();
    write(&repo.join("new"), "new\n");
    std::fs::set_permissions(
        repo.join("new"),
        std::fs::metadata(repo.join("script"))
            .unwrap()
            .permissions(),
    )
    .unwrap();
    let g = w
        .git_tree_with(&repo, &["-c", "core.fileMode=false"])
        .unwrap();
    assert_eq!(ours(&w, &repo), g);
}

/// Without a watch, each directory is kept open between steps and trusted while its parent's
/// stat is unchanged and past the racy window: every way of making a path lead elsewhere must
/// still be seen, also for changes made within the timestamps' granularity.
#[test]
fn kept_directories_follow_every_replacement() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    for d in ["a/x", "a/y", "b/x/deep", "c", "e/f/g"] {
        for i in 0..3 {
            write(&repo.join(format!("{d}/f{i}")), &format!("{d} {i}\n"));
        }
    }
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    let dirs = 11; // the top, a, a/x, a/y, b, b/x, b/x/deep, c, e, e/f, e/f/g
    let mut h = hasher(&w, &repo, false);
    let check = |h: &mut TreeHasher, what: &str| {
        let id = h.hash().unwrap().to_hex();
        assert_eq!(id, w.git_tree(&repo), "{what}: {:?}", h.last_stats());
    };
    let settle = || std::thread::sleep(std::time::Duration::from_millis(2100));
    check(&mut h, "first");
    settle();
    check(&mut h, "walked by path");
    assert_eq!(h.last_stats().held_dirs, 0, "{:?}", h.last_stats());
    check(&mut h, "descriptors opened");
    check(&mut h, "descriptors trusted");
    assert_eq!(h.last_stats().held_dirs, dirs, "{:?}", h.last_stats());
    let mv = |from: &str, to: &str| std::fs::rename(repo.join(from), repo.join(to)).unwrap();
    let rmdir = |d: &str| std::fs::remove_dir_all(repo.join(d)).unwrap();
    // Round 1, in parents that were past the racy window: a file edited in a trusted directory
    // (same size), two directories swapped, a directory replaced by a file, a directory moved
    // away and another made in its place with the same names and sizes.
    write(&repo.join("b/x/deep/f0"), "b/x/deep 9\n");
    mv("a/x", "a/t");
    mv("a/y", "a/x");
    mv("a/t", "a/y");
    rmdir("c");
    write(&repo.join("c"), "now a file\n");
    mv("e/f", "moved");
    write(&repo.join("e/f/g/f0"), "e/f/g 7\n");
    write(&repo.join("e/f/g/f1"), "e/f/g 8\n");
    write(&repo.join("e/f/g/f2"), "e/f/g 9\n");
    check(&mut h, "round 1");
    // Round 2, at once (within the racy window of round 1's changes): the swapped directories
    // swapped back, the file replaced by a directory, a directory removed and made again.
    mv("a/x", "a/t");
    mv("a/y", "a/x");
    mv("a/t", "a/y");
    std::fs::remove_file(repo.join("c")).unwrap();
    write(&repo.join("c/f0"), "c 5\n");
    rmdir("e/f/g");
    write(&repo.join("e/f/g/f0"), "e/f/g 6\n");
    check(&mut h, "round 2");
    // Round 3, past the racy window again: changes inside the directories opened anew.
    settle();
    check(&mut h, "settled");
    write(&repo.join("a/x/f1"), "a/x 11\n");
    write(&repo.join("e/f/g/f0"), "e/f/g 5\n");
    mv("moved/g", "b/x/g");
    check(&mut h, "round 3");
    // A directory changed twice within one step's time, and a file rewritten with the same
    // size right after it was hashed: both seen.
    for i in 0..5 {
        mv("a/x", "a/t");
        mv("a/y", "a/x");
        mv("a/t", "a/y");
        write(&repo.join("b/x/deep/f1"), &format!("b/x/deep {i}\n"));
        check(&mut h, &format!("quick {i}"));
    }
    settle();
    check(&mut h, "last");
    assert!(h.last_stats().held_dirs > 0, "{:?}", h.last_stats());
}

/// Without a watch, a full walk passes over every subtree it finds exactly as the last step
/// settled it (`dirs_skipped`). Each change here is deep inside such a subtree and leaves its
/// directories looking alike (same names, same sizes, an mtime put back): the step must still
/// see it, as git does.
#[test]
fn a_change_deep_in_a_passed_over_subtree_is_never_missed() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    let deep = "a/b/c/d/e";
    for i in 0..20 {
        write(
            &repo.join(format!("{deep}/f{i}.txt")),
            &format!("file {i:02}\n"),
        );
        write(
            &repo.join(format!("x/y{}/z{i}.txt", i % 4)),
            &format!("{i}\n"),
        );
    }
    write(&repo.join(format!("{deep}/script.sh")), "echo hi\n");
    write(&repo.join("a/b/c/d/sub/leaf.txt"), "leaf\n");
    write(&repo.join("a/b/untracked.log"), "log\n");
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["reset", "-q", "--", "a/b/untracked.log"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    let mut h = hasher(&w, &repo, false);
    // Past the racy window, then two steps: the first settles the model, the second passes
    // over everything below the top.
    let settle = |h: &mut TreeHasher, what: &str| {
        std::thread::sleep(std::time::Duration::from_millis(2100));
        for _ in 0..2 {
            assert_eq!(
                h.hash().unwrap().to_hex(),
                w.git_tree(&repo),
                "{what}, settled"
            );
        }
        let s = h.last_stats().clone();
        assert!(
            s.full_walk && s.dirs_skipped >= 2,
            "{what}: nothing skipped: {s:?}"
        );
    };
    for _ in 0..3 {
        h.hash().unwrap();
    }
    settle(&mut h, "start");
    let f = |rel: &str| repo.join(format!("{deep}/{rel}"));
    let check = |h: &mut TreeHasher, what: &str| {
        assert_eq!(h.hash().unwrap().to_hex(), w.git_tree(&repo), "{what}");
    };

    // Same size, content changed, mtime put back to what it was.
    let old = std::fs::metadata(f("f3.txt")).unwrap().modified().unwrap();
    write(&f("f3.txt"), "file XX\n");
    let file = std::fs::File::options()
        .write(true)
        .open(f("f3.txt"))
        .unwrap();
    file.set_modified(old).unwrap();
    drop(file);
    check(&mut h, "same size, same mtime");
    settle(&mut h, "same size, same mtime");

    // A file replaced by a directory.
    std::fs::remove_file(f("f4.txt")).unwrap();
    write(&f("f4.txt/inner"), "now a directory\n");
    check(&mut h, "file to directory");
    settle(&mut h, "file to directory");

    // Racy git: written, hashed and written again within the same second, same size.
    write(&f("f5.txt"), "racy  1\n");
    check(&mut h, "racy, first write");
    write(&f("f5.txt"), "racy  2\n");
    check(&mut h, "racy, second write");
    settle(&mut h, "racy");

    // The executable bit.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(f("script.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    check(&mut h, "mode change");
    settle(&mut h, "mode change");

    // A directory replaced by another one with the same names and sizes.
    let away = w.path("away");
    std::fs::rename(repo.join("a/b/c/d/sub"), &away).unwrap();
    write(&repo.join("a/b/c/d/sub/leaf.txt"), "LEAF\n");
    check(&mut h, "directory replaced");
    settle(&mut h, "directory replaced");

    // A symlink in place of a file.
    std::fs::remove_file(f("f6.txt")).unwrap();
    std::os::unix::fs::symlink("f7.txt", f("f6.txt")).unwrap();
    check(&mut h, "file to symlink");
    settle(&mut h, "file to symlink");

    // Ignore rules above a passed-over subtree: a new `.gitignore` and `.git/info/exclude`.
    write(&repo.join("a/.gitignore"), "*.log\nf1*.txt\n");
    check(&mut h, "new .gitignore above");
    settle(&mut h, "new .gitignore above");
    write(&repo.join(format!("{deep}/new.txt")), "new\n");
    write(&repo.join(".git/info/exclude"), "new.txt\n");
    check(&mut h, "info/exclude");
    settle(&mut h, "info/exclude");
    std::fs::remove_file(repo.join("a/.gitignore")).unwrap();
    check(&mut h, ".gitignore removed");
    settle(&mut h, ".gitignore removed");
}

/// On a local file system the racy window is short (100 ms): a file changed just before a step
/// is read again at the next steps, and once it is older than the window it is trusted by its
/// stat, so an agent's steps a fraction of a second apart do not re-read the last two seconds'
/// files. A same-size rewrite with its mtime put back is still seen (its ctime moved).
#[test]
fn on_a_local_file_system_a_file_is_trusted_once_past_a_short_racy_window() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    for i in 0..50 {
        write(&repo.join(format!("d{}/f{i}", i % 5)), &format!("{i:03}\n"));
    }
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    for watch in [false, true] {
        let mut h = hasher(&w, &repo, watch);
        h.hash().unwrap();
        let f = repo.join("d1/f1");
        let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
        write(&f, if watch { "abc\n" } else { "xyz\n" });
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(
            h.hash().unwrap().to_hex(),
            w.git_tree(&repo),
            "watch {watch}"
        );
        assert_eq!(h.last_stats().files_hashed, 1, "watch {watch}");
        // Well past 100 ms (and well inside 2 s): read once more at most, then trusted.
        std::thread::sleep(std::time::Duration::from_millis(300));
        h.hash().unwrap();
        assert_eq!(
            h.hash().unwrap().to_hex(),
            w.git_tree(&repo),
            "watch {watch}"
        );
        let s = h.last_stats().clone();
        assert_eq!(s.files_hashed, 0, "watch {watch}: read again: {s:?}");
    }
}

/// A tree big enough that the full walk's stats run on several threads, which start while the
/// walk's jobs are still being collected: every change, in the first directory collected, the
/// last, or in between, is seen at the next step, and every entry is stat'ed exactly once.
#[test]
fn a_walk_spread_over_threads_sees_every_change() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    let dirs = 500;
    for i in 0..dirs * 10 {
        let d = i / 10;
        write(
            &repo.join(format!("t{}/u{}/f{i}.txt", d / 25, d % 25)),
            &format!("file {i}\n"),
        );
    }
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    let mut h = hasher(&w, &repo, false);
    for _ in 0..3 {
        h.hash().unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let entries = dirs * 10 + dirs + dirs / 25;
    let changes: [&dyn Fn(usize); 4] = [
        &|k| write(&repo.join("t0/u0/f0.txt"), &format!("first {k}\n")),
        &|k| write(&repo.join("t19/u24/f4999.txt"), &format!("last {k}\n")),
        &|k| write(&repo.join(format!("t9/u{}/new{k}.txt", k % 25)), "new\n"),
        &|k| {
            let _ = std::fs::remove_file(repo.join(format!(
                "t{}/u3/f{}.txt",
                k % 20,
                (k % 20) * 250 + 30
            )));
        },
    ];
    for k in 0..12 {
        changes[k % 4](k);
        let want = w.git_tree(&repo);
        assert_eq!(h.hash().unwrap().to_hex(), want, "change {k}");
        let s = h.last_stats().clone();
        assert!(s.full_walk, "{s:?}");
        assert!(
            s.stats >= entries && s.stats < entries + 50,
            "change {k}: {} stat calls for about {entries} entries: {s:?}",
            s.stats
        );
        // The next step with nothing changed gives the same id.
        assert_eq!(h.hash().unwrap().to_hex(), want, "change {k}, again");
    }
}

/// The files directly in a store's directory tree, by kind: `.pack`, `.idx`, loose objects.
fn store_files(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>, usize) {
    let (mut packs, mut idxs, mut loose) = (Vec::new(), Vec::new(), 0);
    for e in std::fs::read_dir(dir.join("pack"))
        .into_iter()
        .flatten()
        .flatten()
    {
        match e.path().extension().and_then(|x| x.to_str()) {
            Some("pack") => packs.push(e.path()),
            Some("idx") => idxs.push(e.path()),
            _ => {}
        }
    }
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            loose += std::fs::read_dir(e.path()).unwrap().count();
        }
    }
    packs.sort();
    idxs.sort();
    (packs, idxs, loose)
}

/// A step's new objects reach the disk as one pack and its index (creating a file costs about a
/// millisecond on a disk file system, and a step makes a blob per changed file and a tree per
/// directory above it), not one file each; a step that makes nothing writes nothing. git reads
/// the store as an object directory, and a store opened again in the same turn finds them.
#[test]
fn a_step_writes_its_new_objects_as_one_pack() {
    let w = World::new();
    let repo = new_repo(&w, "r");
    write(&repo.join("a/b/c.txt"), "c\n");
    w.run(&repo, &["add", "-A"]);
    w.run(&repo, &["commit", "-qm", "init"]);
    // Objects written within 50 ms of the store's open count as new (`Store::open`).
    std::thread::sleep(std::time::Duration::from_millis(200));
    let store_dir = w.path("ctl/tree");
    let store = Store::open(&store_dir, &[repo.join(".git/objects")]).unwrap();
    let mut h = TreeHasher::with_options(&repo, store, w.options(false)).unwrap();
    h.hash().unwrap();
    assert_eq!(
        store_files(&store_dir),
        (vec![], vec![], 0),
        "start: nothing new"
    );
    let mut steps = Vec::new();
    for k in 0..3 {
        for i in 0..4 {
            write(
                &repo.join(format!("a/b/n{k}_{i}.txt")),
                &format!("{k} {i}\n"),
            );
            write(
                &repo.join(format!("x{i}/y/n{k}.txt")),
                &format!("x {k} {i}\n"),
            );
        }
        let id = h.hash().unwrap().to_hex();
        assert_eq!(id, w.git_tree(&repo), "step {k}");
        let (packs, idxs, loose) = store_files(&store_dir);
        assert_eq!(
            (packs.len(), idxs.len(), loose),
            (k + 1, k + 1, 0),
            "step {k}"
        );
        // Nothing changed: no new file.
        assert_eq!(h.hash().unwrap().to_hex(), id);
        assert_eq!(store_files(&store_dir).0.len(), k + 1, "step {k}, again");
        steps.push(id);
    }
    let (_, idxs, _) = store_files(&store_dir);
    for idx in &idxs {
        let v = w.try_run(&repo, &["verify-pack", idx.to_str().unwrap()]);
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    }
    for (k, id) in steps.iter().enumerate() {
        let listing = w.ls_tree(&repo, &store_dir, id);
        assert!(
            listing.contains(&format!("\ta/b/n{k}_3.txt"))
                && listing.contains(&format!("\tx3/y/n{k}.txt")),
            "step {k}: {listing}"
        );
    }
    let store = h.into_store();
    let mut made = store.created();
    made.sort();
    // 8 blobs and 7 trees a step (the top, a, a/b, x0..x3 ... and their y's: 1 + 2 + 8).
    assert_eq!(made.len(), 3 * (8 + 11), "{made:?}");
    drop(store);
    let again = Store::open(&store_dir, &[repo.join(".git/objects")]).unwrap();
    let mut found = again.created();
    found.sort();
    assert_eq!(found, made, "reopened");
    for id in &found {
        again.read_object(id).unwrap();
    }
    // Spare files made ahead for the next pack go with the store.
    again.destroy().unwrap();
    assert!(!store_dir.exists());
}
