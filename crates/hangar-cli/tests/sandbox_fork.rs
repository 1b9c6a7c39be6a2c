//! Forks of runs in a sandbox, end to end through `hangar serve`: a real Claude Code turn (the
//! scripted model) makes two steps in a local (bubblewrap) or a Docker sandbox with the uid
//! split; `hangar fork RUN --step 1` makes a new sandbox of the same environment whose work tree
//! is exactly step 1's, with the harness's conversation carried from the source sandbox's agent
//! home; the fork's next turn runs in the new sandbox and sends the model only the conversation
//! up to that step; the source sandbox is left as it was. A tampered kept pack refuses the fork.
//! Once the source sandbox is removed (`hangar sb rm`) the fork still has exactly the step's files
//! and the conversation up to it, from what hangar kept (the conversation at the turn's end, the
//! repository at `sb rm`); with neither that repository nor the one the sandbox was made from,
//! or without the kept conversation, it is refused saying what is missing. A `hangar run` in
//! place forks into a new folder, never into the person's own.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::forks::{blob_id, files, git, repo, swap_in_idx};
use common::{Server, docker_image, is_root};
use hangar_testkit::{Script, Step};
use serde_json::{Value, json};

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// Two steps in the sandbox's work tree, then the answer the fork's turn gets.
fn two_steps() -> Script {
    Script::new([
        Step::tool(
            "Write",
            json!({"file_path": "/workspace/notes.txt", "content": "one\n"}),
        ),
        bash("printf 'two\\n' >> notes.txt && printf 'b\\n' > b.txt && rm gone.txt")
            .expect_tool_result(),
        Step::text("done with both").expect_tool_result(),
        bash("echo forked > fork.txt").expect_user_text("what now"),
        Step::text("answer in the fork").expect_tool_result(),
        // A fork made after the source sandbox was removed.
        bash("echo forked > fork.txt").expect_user_text("what now"),
        Step::text("answer in the fork").expect_tool_result(),
    ])
}

fn step1_files() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("a.txt".to_owned(), "a\n".to_owned()),
        ("gone.txt".to_owned(), "bye\n".to_owned()),
        ("notes.txt".to_owned(), "one\n".to_owned()),
    ])
}

fn step3_files() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("a.txt".to_owned(), "a\n".to_owned()),
        ("b.txt".to_owned(), "b\n".to_owned()),
        ("notes.txt".to_owned(), "one\ntwo\n".to_owned()),
    ])
}

fn tree_of(s: &Server, dir: &Path) -> String {
    s.ok(&["tree", dir.to_str().unwrap()]).trim().to_owned()
}

async fn steps(s: &Server, run: &str) -> Vec<Value> {
    let (status, v) = s.call("GET", &format!("/v1/runs/{run}/steps"), None).await;
    assert_eq!(status, 200, "{v}");
    v["steps"].as_array().unwrap().clone()
}

async fn sandbox(s: &Server, id: &str) -> Value {
    let (status, v) = s.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{v}");
    v["sandbox"].clone()
}

/// What `hangar fork` printed: (session, sandbox, dir, the other lines).
fn forked(out: &str) -> (String, String, PathBuf, Vec<String>) {
    let lines: Vec<&str> = out.lines().collect();
    let field = |i: usize, k: &str| {
        lines
            .get(i)
            .and_then(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("line {i} is not {k}: {out}"))
            .to_owned()
    };
    (
        field(0, "fork: "),
        field(1, "sandbox: "),
        PathBuf::from(field(2, "dir: ")),
        lines[3..].iter().map(|l| (*l).to_owned()).collect(),
    )
}

/// The harness's conversation files in a sandbox's agent home, with their digests (as the
/// agent sees them).
fn conversation_digests(s: &Server, sb: &str) -> String {
    s.ok(&[
        "sb",
        "exec",
        sb,
        "--",
        "sh",
        "-c",
        "cd ~/.claude/projects && find . -type f -name '*.jsonl' | sort | xargs sha256sum",
    ])
}

/// `hangar send SESSION TEXT`, waited for; the turn.
async fn send_and_wait(s: &Server, session: &str, text: &str) -> Value {
    let out = s.ok(&["send", session, text]);
    let turn = out
        .lines()
        .find_map(|l| l.strip_prefix("turn: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    t
}

/// The fork's first turn: the model is sent the conversation up to the Write's result only,
/// and the turn runs in the fork's sandbox (its Bash writes there).
async fn the_forks_turn_resumes_the_cut(s: &Server, fork: &str, sb: &str, dir: &Path) {
    let before = s.fake.requests().len();
    let t = send_and_wait(s, fork, "what now").await;
    let argv = t["manifest"]["argv"].to_string();
    assert!(
        argv.contains("--fork-session") && argv.contains("--resume-session-at"),
        "{argv}"
    );
    let requests = s.fake.requests();
    assert_eq!(requests.len(), before + 2, "the Bash, then the answer");
    let sent = &requests[before];
    let calls: Vec<String> = sent.tool_calls().into_iter().map(|c| c.1).collect();
    assert_eq!(calls, ["Write"], "{:?}", sent.messages());
    let said = sent.all_text();
    assert!(
        said.contains("write notes") && said.contains("what now"),
        "{said}"
    );
    assert!(!said.contains("done with both"), "{said}");
    let (_, v) = s.call("GET", &format!("/v1/sessions/{fork}"), None).await;
    assert_eq!(v["session"]["sandbox_id"], sb, "{v}");
    assert_eq!(
        std::fs::read_to_string(dir.join("fork.txt")).unwrap(),
        "forked\n"
    );
}

/// `env_yaml`: an environment named `fk` with the uid split.
async fn fork_in_a_sandbox(env_yaml: &str) {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let s = Server::start(two_steps());
    let work = repo();
    let env = s.home.path().join("fk.yaml");
    std::fs::write(&env, env_yaml).unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let source_sb = s.create_sandbox("fk", work.path());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": source_sb, "policy": "auto", "prompt": "write notes"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    let steps = steps(&s, &run).await;
    assert_eq!(steps.len(), 4, "start, Write, Bash, end: {steps:?}");
    let tree1 = steps[1]["tree"].as_str().unwrap().to_owned();
    let source = sandbox(&s, &source_sb).await;
    let source_ws = PathBuf::from(source["host_workspace"].as_str().unwrap());
    assert_eq!(files(&source_ws), step3_files());
    let source_conversation = conversation_digests(&s, &source_sb);
    assert!(
        source_conversation.contains(".jsonl"),
        "{source_conversation}"
    );

    // Fork at step 1: after the Write, before the Bash.
    let out = s.ok(&["fork", &run, "--step", "1"]);
    let (fork, sb, dir, rest) = forked(&out);
    assert_ne!(sb, source_sb);
    assert_eq!(
        rest[0],
        format!("tree: {tree1} (step 1 of run {run})"),
        "trusted under the uid split: {out}"
    );
    assert!(rest[1].starts_with("conversation: session "), "{out}");
    let made = sandbox(&s, &sb).await;
    assert_eq!(made["environment"], "fk");
    assert_eq!(made["provider"], source["provider"]);
    assert_eq!(made["state"], "live");
    assert_eq!(made["capabilities"]["uid_split"], true, "{made}");
    assert_eq!(
        PathBuf::from(made["host_workspace"].as_str().unwrap()),
        dir,
        "dir: is the new sandbox's work tree"
    );

    // Exactly step 1's files, hashed again; the source sandbox as it was.
    assert_eq!(files(&dir), step1_files());
    assert_eq!(tree_of(&s, &dir), tree1);
    assert_eq!(
        git(&dir, &["rev-parse", "HEAD"]),
        git(work.path(), &["rev-parse", "HEAD"])
    );
    assert_eq!(files(&source_ws), step3_files());
    assert_eq!(conversation_digests(&s, &source_sb), source_conversation);
    // The agent of the new sandbox owns its copy of the conversation.
    let owned = s.ok(&[
        "sb",
        "exec",
        &sb,
        "--",
        "sh",
        "-c",
        "find ~/.claude -not -user \"$(id -u)\" | wc -l",
    ]);
    assert_eq!(owned.trim(), "0", "files the agent does not own: {owned}");
    assert!(
        !std::fs::read_dir(s.home.path().join("hangar/forks"))
            .map(|d| d.count())
            .is_ok_and(|n| n > 0),
        "no staging folder is left"
    );

    the_forks_turn_resumes_the_cut(&s, &fork, &sb, &dir).await;
    assert_eq!(files(&source_ws), step3_files());
    assert_eq!(conversation_digests(&s, &source_sb), source_conversation);

    // A kept pack whose index names one blob's content with another's id: the rebuilt tree is
    // not step 2's, so the fork is refused (audited), and no sandbox is made.
    let listed = s.ok(&["sb", "list", "--json"]);
    let idx = s.home.path().join(format!("hangar/kept/{run}/trees.idx"));
    let good = std::fs::read(&idx).unwrap();
    swap_in_idx(&idx, &blob_id("one\n"), &blob_id("one\ntwo\n"));
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("hashes to") && why.contains(steps[2]["tree"].as_str().unwrap()),
        "{why}"
    );
    assert_eq!(
        s.ok(&["sb", "list", "--json"]),
        listed,
        "a sandbox was made"
    );
    std::fs::write(&idx, good).unwrap();

    // --dir is for folders of this machine; this fork's work tree is its sandbox's.
    let (status, body) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/fork"),
            Some(json!({"step": 1, "dir": s.home.path().join("elsewhere")})),
        )
        .await;
    assert_eq!(status, 400, "{body}");

    // The source sandbox removed: its agent home and its workspace went with it, but the
    // conversation was kept at the turn's end and the repository at `sb rm`. With the
    // repository it was made from moved away, the fork is rebuilt on the kept one: exactly step
    // 1's files on the source's commit, and its first turn resumes the conversation cut there.
    let head = git(work.path(), &["rev-parse", "HEAD"]);
    s.ok(&["sb", "rm", &source_sb]);
    assert!(!source_ws.exists(), "sb rm left the workspace");
    let away = s.home.path().join("repo-moved-away");
    std::fs::rename(work.path(), &away).unwrap();
    let out = s.ok(&["fork", &run, "--step", "1"]);
    let (fork2, sb2, dir2, rest) = forked(&out);
    assert_eq!(
        rest[0],
        format!("tree: {tree1} (step 1 of run {run})"),
        "{out}"
    );
    assert_eq!(files(&dir2), step1_files());
    assert_eq!(tree_of(&s, &dir2), tree1);
    assert_eq!(git(&dir2, &["rev-parse", "HEAD"]), head);
    the_forks_turn_resumes_the_cut(&s, &fork2, &sb2, &dir2).await;

    // The kept repository gone too: nothing holds the objects the step is built on, and the
    // refusal says what is missing (audited).
    let kept = s
        .home
        .path()
        .join(format!("hangar/kept/sandboxes/{source_sb}"));
    let bundle = std::fs::read(kept.join("repo.bundle")).unwrap();
    std::fs::remove_file(kept.join("repo.bundle")).unwrap();
    let (status, body) = s
        .call(
            "POST",
            &format!("/v1/runs/{run}/fork"),
            Some(json!({"step": 1})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let why = body["error"]["message"].as_str().unwrap();
    assert!(
        why.contains(&format!(
            "no copy of sandbox {source_sb}'s repository was kept when it was removed"
        )) && why.contains(&format!(
            "the repository sandbox {source_sb} was made from ({}) is no longer there",
            work.path().display()
        )),
        "{why}"
    );
    // The repository it was made from back in place: the fork is rebuilt on it.
    std::fs::rename(&away, work.path()).unwrap();
    let out = s.ok(&["fork", &run, "--step", "2"]);
    let (_, _, dir3, _) = forked(&out);
    assert_eq!(tree_of(&s, &dir3), steps[2]["tree"].as_str().unwrap());
    // The kept conversation gone: refused, saying so.
    std::fs::write(kept.join("repo.bundle"), bundle).unwrap();
    // One copy per session (replaced at each turn's end), none per run.
    assert!(
        !s.home
            .path()
            .join(format!("hangar/kept/{run}/home"))
            .exists()
    );
    let session = started["session"]["id"].as_str().unwrap();
    std::fs::remove_dir_all(
        s.home
            .path()
            .join(format!("hangar/kept/conversations/{session}/home")),
    )
    .unwrap();
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("no copy of it was kept") && why.contains(&source_sb),
        "{why}"
    );
    let (_, audit) = s.call("GET", "/v1/audit?limit=500", None).await;
    let refusals = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "fork.refused")
        .count();
    assert_eq!(refusals, 3, "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_run_in_a_local_sandbox_is_a_new_sandbox_at_the_step() {
    fork_in_a_sandbox("name: fk\nprovider: local\nnetwork: host\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_run_in_a_docker_sandbox_is_a_new_sandbox_at_the_step() {
    fork_in_a_sandbox(&format!(
        "name: fk\nprovider: docker\nimage: {}\nnetwork: host\n",
        docker_image()
    ))
    .await;
}

/// `hangar run` works on the person's folder itself (the built-in `in-place` environment): its
/// fork is a new folder with a sandbox of its own working in place there, and the person's
/// folder is not touched, by the fork nor by the fork's turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_an_in_place_run_never_touches_the_persons_folder() {
    let s = Server::start(two_steps());
    let work = repo();
    let out = s
        .hangar()
        .args(["run", "--policy", "auto", "--dir"])
        .arg(work.path())
        .arg("write notes")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let run = said
        .lines()
        .find_map(|l| l.strip_prefix("run: "))
        .unwrap_or_else(|| panic!("{said}"))
        .to_owned();
    let source_sb = said
        .lines()
        .find_map(|l| l.strip_prefix("sandbox: "))
        .unwrap_or_else(|| panic!("{said}"))
        .to_owned();
    assert_eq!(sandbox(&s, &source_sb).await["environment"], "in-place");
    assert_eq!(files(work.path()), step3_files());
    let status_before = git(work.path(), &["status", "--porcelain"]);
    let steps = steps(&s, &run).await;
    let tree1 = steps[1]["tree"].as_str().unwrap().to_owned();

    let out = s
        .hangar()
        .args(["fork", &run, "--step", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (fork, sb, dir, rest) = forked(&String::from_utf8_lossy(&out.stdout));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("warning: step 1's tree is untrusted"),
        "no uid split in place: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rest[0],
        format!("tree: {tree1} (step 1 of run {run}, untrusted)")
    );
    assert_eq!(dir, s.home.path().join("hangar/forks").join(&sb));
    let made = sandbox(&s, &sb).await;
    assert_eq!(made["environment"], "in-place");
    assert_eq!(made["host_workspace"], dir.display().to_string());
    assert_eq!(files(&dir), step1_files());
    assert_eq!(tree_of(&s, &dir), tree1);

    the_forks_turn_resumes_the_cut(&s, &fork, &sb, &dir).await;
    assert_eq!(files(work.path()), step3_files(), "the person's folder");
    assert_eq!(git(work.path(), &["status", "--porcelain"]), status_before);

    // A folder of the person's choosing works too, and one with files in it is refused.
    let chosen = s.home.path().join("my-fork");
    let out = s.ok(&[
        "fork",
        &run,
        "--step",
        "2",
        "--dir",
        chosen.to_str().unwrap(),
    ]);
    let (_, _, dir2, _) = forked(&out);
    assert_eq!(dir2, chosen);
    assert_eq!(tree_of(&s, &chosen), steps[2]["tree"].as_str().unwrap());
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "1", "--dir"])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(files(work.path()), step3_files());
}
