//! The turn's trees (S23, S25-S27): the real Claude Code and Codex under the driver, in a git
//! repository, against the scripted model. The tree lines' ids are git's own (`git add -A &&
//! git write-tree` in a copy of the repository at that moment), written at start and end and
//! after each file-changing tool only when the tree changed, `trusted: false` without the uid
//! split; the turn's objects come back as one pack that, with the repository as it was at the
//! start, holds every tree; nothing is written into the repository's objects.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{LONG, Rig};
use hangar_testkit::{Script, Step};
use serde_json::{Value, json};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A repository with history, an ignore rule and a tracked file that the rule matches.
fn seed_repo(dir: &Path) {
    git(dir, &["init", "-q"]);
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "build/\n*.log\n").unwrap();
    std::fs::write(dir.join("kept.log"), "tracked though ignored\n").unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["add", "-f", "kept.log"]);
    git(dir, &["commit", "-qm", "start"]);
}

/// git's tree id for `dir` as it is now, computed in a copy (nothing written into `dir`).
fn git_tree(dir: &Path) -> String {
    let copy = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", dir.display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    git(copy.path(), &["add", "-A"]);
    git(copy.path(), &["write-tree"])
}

/// Every file under `.git/objects`.
fn objects(repo: &Path) -> BTreeSet<PathBuf> {
    fingerprint(&repo.join(".git/objects"))
        .into_keys()
        .collect()
}

/// Every file and folder under `dir` with its mode, size, modification time and content: what
/// a write, a touch or a "freshening" would change.
fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (u32, u64, i64, i64, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    fn walk(d: &Path, out: &mut BTreeMap<PathBuf, (u32, u64, i64, i64, Vec<u8>)>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let body = if m.is_file() {
                std::fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            out.insert(
                p.clone(),
                (m.mode(), m.len(), m.mtime(), m.mtime_nsec(), body),
            );
            if m.is_dir() {
                walk(&p, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// The pack the turn left, with the start's repository, holds every tree: each lists in full.
fn assert_pack_rebuilds(rig: &Rig, start_clone: &Path, trees: &[String]) {
    let ctl = rig.ctl();
    assert!(!ctl.join("tree").exists(), "the turn's store is deleted");
    let packs = start_clone.join("objects/pack");
    std::fs::create_dir_all(&packs).unwrap();
    std::fs::copy(ctl.join("trees.pack"), packs.join("pack-turn.pack")).unwrap();
    std::fs::copy(ctl.join("trees.idx"), packs.join("pack-turn.idx")).unwrap();
    for t in trees {
        git(start_clone, &["ls-tree", "-r", t]);
    }
}

fn tree_lines(rig: &Rig) -> Vec<Value> {
    rig.lines_of("hangar.tree")
}

#[test]
fn a_claude_turn_records_git_trees_at_start_end_and_after_file_changes() {
    // The work folder is made first: Read and Edit take absolute paths.
    let folder = tempfile::tempdir().unwrap();
    let a_txt = folder.path().join("a.txt");
    let mut rig = Rig::new(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "echo new > b.txt && mkdir -p build && echo x > build/out", "description": "make b"}),
            ),
            Step::tool(
                "Bash",
                json!({"command": "cat a.txt", "description": "read a"}),
            ),
            Step::tool("Read", json!({"file_path": a_txt})),
            Step::tool(
                "Edit",
                json!({"file_path": a_txt, "old_string": "a", "new_string": "edited"}),
            ),
            Step::text("done"),
        ]),
        "change things",
    );
    rig.work = folder;
    let work = rig.work.path().to_owned();
    seed_repo(&work);
    let git_before = fingerprint(&work.join(".git"));
    let start_tree = git_tree(&work);
    let start_clone = tempfile::tempdir().unwrap();
    git(
        start_clone.path(),
        &["clone", "-q", "--bare", work.to_str().unwrap(), "start.git"],
    );
    let start_clone = start_clone.path().join("start.git");
    let objects_before = objects(&work);
    rig.start("auto");
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());

    let lines = tree_lines(&rig);
    let phases: Vec<Option<&str>> = lines.iter().map(|l| l["phase"].as_str()).collect();
    assert_eq!(phases.first(), Some(&Some("start")), "{lines:#?}");
    assert_eq!(phases.last(), Some(&Some("end")), "{lines:#?}");
    assert_eq!(lines[0]["tree"], start_tree.as_str());
    // The Bash call that wrote b.txt changed the tree; the one that only read did not.
    let calls: Vec<(String, String)> = rig
        .lines_of("assistant")
        .iter()
        .flat_map(|l| {
            l["message"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|b| b["type"] == "tool_use")
        .map(|b| {
            (
                b["id"].as_str().unwrap().to_owned(),
                b["input"]["command"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    let after: Vec<&Value> = lines
        .iter()
        .filter(|l| l["tool_use_id"].is_string())
        .collect();
    // The writing Bash call and the Edit changed the tree; the reading Bash and Read did not.
    assert_eq!(after.len(), 2, "only the writing calls: {lines:#?}");
    assert_eq!(after[0]["tool_use_id"], calls[0].0.as_str());
    assert_eq!(after[1]["tool_use_id"], calls[3].0.as_str());
    assert_eq!(std::fs::read_to_string(&a_txt).unwrap(), "edited\n");
    let end_tree = git_tree(&work);
    assert_ne!(end_tree, start_tree);
    assert_eq!(
        after[1]["tree"],
        end_tree.as_str(),
        "git's id after the Edit"
    );
    // After the Bash call: the end state with a.txt as it was before the Edit.
    std::fs::write(&a_txt, "a\n").unwrap();
    assert_eq!(
        after[0]["tree"],
        git_tree(&work).as_str(),
        "git's id after the Bash call"
    );
    std::fs::write(&a_txt, "edited\n").unwrap();
    assert_eq!(lines.last().unwrap()["tree"], end_tree.as_str());
    // Without the uid split the agent could have changed what was hashed.
    assert!(lines.iter().all(|l| l["trusted"] == false), "{lines:#?}");
    assert!(
        lines
            .iter()
            .all(|l| l["ms"].is_u64() && l["skipped"].is_null())
    );
    // Order: the tree line comes after the tool's result line.
    let log = rig.log_lines();
    let result_at = log
        .iter()
        .position(|l| l["type"] == "user" && l.to_string().contains(&calls[0].0))
        .unwrap();
    let tree_at = log
        .iter()
        .position(|l| l["type"] == "hangar.tree" && l["tool_use_id"] == calls[0].0.as_str())
        .unwrap();
    assert!(result_at < tree_at);
    let end_at = log
        .iter()
        .position(|l| l["type"] == "hangar.turn_end")
        .unwrap();
    assert!(tree_at < end_at);

    assert_eq!(
        objects(&work),
        objects_before,
        "nothing written into the repo's objects"
    );
    assert!(
        fingerprint(&work.join(".git")) == git_before,
        "nothing in the agent's .git written, touched or freshened"
    );
    let ids: Vec<String> = lines
        .iter()
        .map(|l| l["tree"].as_str().unwrap().to_owned())
        .collect();
    assert_pack_rebuilds(&rig, &start_clone, &ids);
}

#[test]
fn a_codex_turn_records_trees_after_its_command_and_its_patch() {
    let patch = "*** Begin Patch\n*** Add File: notes.txt\n+some notes\n*** End Patch";
    let mut rig = Rig::codex(
        Script::new([
            Step::exec("echo hi > made.txt"),
            Step::patch(patch),
            Step::text("made them"),
        ]),
        "make files",
    );
    let work = rig.work.path().to_owned();
    seed_repo(&work);
    let start_tree = git_tree(&work);
    let cmd = rig.codex_command("auto", &[]);
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let lines = tree_lines(&rig);
    assert_eq!(lines.first().unwrap()["phase"], "start", "{lines:#?}");
    assert_eq!(lines.first().unwrap()["tree"], start_tree.as_str());
    assert_eq!(lines.last().unwrap()["phase"], "end");
    assert_eq!(lines.last().unwrap()["tree"], git_tree(&work).as_str());
    // The ids name the items of the run log's own lines.
    let completed: Vec<(String, String)> = rig
        .lines_of("item.completed")
        .iter()
        .filter(|l| {
            matches!(
                l["item"]["type"].as_str(),
                Some("command_execution" | "file_change")
            )
        })
        .map(|l| {
            (
                l["item"]["id"].as_str().unwrap().to_owned(),
                l["item"]["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(completed.len(), 2, "{completed:?}");
    let after: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["tool_use_id"].as_str())
        .collect();
    assert_eq!(
        after,
        completed
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        "{lines:#?}"
    );
}

#[test]
fn a_slow_hash_is_recorded_as_skipped_and_ends_hashing_for_the_turn() {
    let mut rig = Rig::new(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "echo new > b.txt", "description": "make b"}),
            ),
            Step::text("done"),
        ]),
        "change things",
    );
    seed_repo(rig.work.path());
    // Every hash counts as slow (over 0 ms): the start's is the turn's only one.
    let mut cmd = rig.driver_command("auto", &[]);
    cmd.env("HANGAR_TREE_SLOW_MS", "0");
    rig.start_with(cmd);
    assert_eq!(rig.wait_exit(LONG), 0, "log:\n{}", rig.log_text());
    let lines = tree_lines(&rig);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(
        (lines[0]["phase"].as_str(), lines[0]["skipped"].as_str()),
        (Some("start"), Some("slow"))
    );
    assert!(rig.work.path().join("b.txt").exists(), "the turn went on");
}

/// `hangar-driver --tree-of DIR` (how the control plane checks a fork's work tree inside a
/// sandbox it cannot see) prints git's id for the folder, writes nothing into it, and fails on
/// a folder that is not there.
#[test]
fn tree_of_prints_gits_id_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    seed_repo(dir.path());
    std::fs::write(dir.path().join("new.txt"), "untracked\n").unwrap();
    let before = fingerprint(&dir.path().join(".git"));
    let out = Command::new(common::driver_bin())
        .arg("--tree-of")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        git_tree(dir.path())
    );
    assert_eq!(fingerprint(&dir.path().join(".git")), before);
    let out = Command::new(common::driver_bin())
        .arg("--tree-of")
        .arg(dir.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}
