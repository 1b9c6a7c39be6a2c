//! Forks of runs in kubernetes and e2b sandboxes through `hangar serve`, verified only against
//! faked APIs (hangar-fakecloud: a fake Kubernetes API server and a fake E2B API on 127.0.0.1
//! whose pods and sandboxes are containers of the local dockerd; no cluster or E2B account is
//! reachable here). A real Claude Code turn (the scripted model) makes two steps in the pod's
//! workspace; `hangar fork RUN --step 1` makes a new sandbox of the same environment (a new pod)
//! whose workspace holds exactly step 1's files (compared with the tree the run recorded,
//! hashed by git inside the pod), on the source's commit, with Claude Code's conversation read
//! from the source pod's agent home; the fork's first turn runs in the new pod and sends the
//! model only the conversation up to that step. The source pod is left as it was; a kept pack
//! that does not reproduce the step refuses the fork, and no sandbox is made. Once both pods are
//! removed (`hangar sb rm`) and the repository the source was made from is moved away, the step
//! still forks, exactly, with its conversation: from what hangar kept (the conversation at the
//! turn's end, the pod's repository as a bundle at `sb rm`). A Codex run in a kubernetes sandbox
//! forks at its turn's end the same way, before and after its pod is removed, and the fork's
//! turn continues the thread (`thread/fork`) in the new pod.
//!
//! The pods use the host's network (`egress: open` on the fake) to reach the scripted model on
//! this machine's loopback. Their image is the test image with the pinned Claude Code added
//! (`scripts/build-image-claude`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

mod common;

use std::collections::BTreeMap;

use common::Server;
use common::forks::{blob_id, git, repo, swap_in_idx};
use hangar_fakecloud::FakeCloud;
use hangar_testkit::{
    CODEX_API_KEY, CODEX_API_KEY_ENV, FakeOpenAi, Script, Step, codex_bin, codex_offline_config,
};
use serde_json::{Value, json};

const E2B_KEY: &str = "e2b-key-for-the-fake";

fn skip() -> bool {
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!(
            "HANGAR_TEST_DOCKER=0: the faked API fork tests (their pods are containers) are skipped"
        );
        return true;
    }
    false
}

fn claude_image() -> String {
    hangar_testkit::claude_image().unwrap()
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// Two steps in the pod's workspace, then the answer the fork's turn gets.
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

fn server(fake: &FakeCloud, dir: &std::path::Path, script: Script) -> Server {
    let kubeconfig = dir.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig, "team-a").unwrap();
    Server::start_with(
        script,
        vec![
            ("KUBECONFIG".into(), kubeconfig.display().to_string()),
            ("HANGAR_E2B_API_KEY".into(), E2B_KEY.into()),
            ("HANGAR_E2B_URL".into(), fake.url()),
            ("HANGAR_E2B_ENVD_URL".into(), fake.envd_url()),
            ("HANGAR_E2B_TIMEOUT_SECS".into(), "3600".into()),
        ],
        None,
    )
}

/// `sh -c SCRIPT` in sandbox `sb`, as the agent; its stdout.
fn in_sb(s: &Server, sb: &str, script: &str) -> String {
    s.ok(&["sb", "exec", sb, "--", "sh", "-c", script])
}

/// Every file of the sandbox's workspace but `.git`, with its content.
fn files_in(s: &Server, sb: &str) -> BTreeMap<String, String> {
    let listed = in_sb(
        s,
        sb,
        "cd /workspace && find . -path ./.git -prune -o -type f -print | sort",
    );
    listed
        .lines()
        .map(|p| {
            let p = p.trim_start_matches("./").to_owned();
            let content = s.ok(&["sb", "exec", sb, "--", "cat", &format!("/workspace/{p}")]);
            (p, content)
        })
        .collect()
}

/// The workspace's tree as git computes it inside the sandbox (`git add -A && git write-tree`
/// with an index of its own, so the sandbox's is not touched).
fn git_tree_in(s: &Server, sb: &str) -> String {
    in_sb(
        s,
        sb,
        "cd /workspace && export GIT_INDEX_FILE=$(mktemp -u) && git add -A && git write-tree && rm -f \"$GIT_INDEX_FILE\"",
    )
    .trim()
    .to_owned()
}

fn conversation_digests(s: &Server, sb: &str) -> String {
    in_sb(
        s,
        sb,
        "cd ~/.claude/projects && find . -type f -name '*.jsonl' | sort | xargs sha256sum",
    )
}

async fn sandbox(s: &Server, id: &str) -> Value {
    let (status, v) = s.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{v}");
    v["sandbox"].clone()
}

/// (session, sandbox, the lines after `dir:`) of what `hangar fork` printed.
fn forked(out: &str) -> (String, String, Vec<String>) {
    let lines: Vec<&str> = out.lines().collect();
    let field = |i: usize, k: &str| {
        lines
            .get(i)
            .and_then(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("line {i} is not {k}: {out}"))
            .to_owned()
    };
    assert!(
        lines.get(2).is_some_and(|l| l.starts_with("dir: ")),
        "{out}"
    );
    (
        field(0, "fork: "),
        field(1, "sandbox: "),
        lines[3..].iter().map(|l| (*l).to_owned()).collect(),
    )
}

/// The module's comment, in a sandbox of environment `yaml` (named `cloud`).
async fn fork_in(fake: &FakeCloud, yaml: &str, provider: &str) {
    let dir = tempfile::tempdir().unwrap();
    let s = server(fake, dir.path(), two_steps());
    let env = s.home.path().join("cloud.yaml");
    std::fs::write(&env, yaml).unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let work = repo();
    let source_sb = s.create_sandbox("cloud", work.path());
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
    let (_, v) = s.call("GET", &format!("/v1/runs/{run}/steps"), None).await;
    let steps = v["steps"].as_array().unwrap().clone();
    assert_eq!(steps.len(), 4, "start, Write, Bash, end: {steps:?}");
    let tree1 = steps[1]["tree"].as_str().unwrap().to_owned();
    assert_eq!(files_in(&s, &source_sb), step3_files());
    let source_conversation = conversation_digests(&s, &source_sb);
    assert!(
        source_conversation.contains(".jsonl"),
        "{source_conversation}"
    );

    // Fork at step 1: after the Write, before the Bash.
    let out = s
        .hangar()
        .args(["fork", &run, "--step", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let (fork, sb, rest) = forked(&String::from_utf8_lossy(&out.stdout));
    assert_ne!(sb, source_sb);
    assert!(
        stderr.contains("warning: step 1's tree is untrusted"),
        "no uid split in a {provider} sandbox: {stderr}"
    );
    assert_eq!(
        rest[0],
        format!("tree: {tree1} (step 1 of run {run}, untrusted)")
    );
    assert!(rest[1].starts_with("conversation: session "), "{rest:?}");
    let made = sandbox(&s, &sb).await;
    assert_eq!(made["environment"], "cloud");
    assert_eq!(made["provider"], provider);
    assert_eq!(made["state"], "live");
    assert_eq!(fake.containers_of(&sb).await.len(), 1, "a pod of its own");

    // Exactly step 1's files, the recorded tree as git computes it in the new pod, on the
    // source's commit; the source pod as it was.
    assert_eq!(files_in(&s, &sb), step1_files());
    assert_eq!(git_tree_in(&s, &sb), tree1);
    assert_eq!(
        in_sb(&s, &sb, "git -C /workspace rev-parse HEAD").trim(),
        git(work.path(), &["rev-parse", "HEAD"])
    );
    assert_eq!(files_in(&s, &source_sb), step3_files());
    assert_eq!(conversation_digests(&s, &source_sb), source_conversation);
    assert!(
        !std::fs::read_dir(s.home.path().join("hangar/forks"))
            .map(|d| d.count())
            .is_ok_and(|n| n > 0),
        "no staging folder is left"
    );

    the_forks_turn_resumes_the_cut(&s, &fork, &sb).await;
    assert_eq!(files_in(&s, &source_sb), step3_files());

    // A kept pack whose index names one blob's content with another's id: the tree rebuilt on
    // the repository taken from the pod is not step 2's, so the fork is refused (audited), and
    // no sandbox is made.
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
    let (_, audit) = s.call("GET", "/v1/audit?limit=500", None).await;
    let actions: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["action"].as_str())
        .filter(|a| a.starts_with("fork."))
        .collect();
    assert_eq!(actions, ["fork.created", "fork.refused"], "{audit}");
    std::fs::write(&idx, good).unwrap();

    // Both pods removed, and the repository the source was made from moved away: the
    // conversation kept at the turn's end and the repository kept at `sb rm` (a bundle taken
    // out of the pod) still make step 1's fork, in a new pod.
    let head = git(work.path(), &["rev-parse", "HEAD"]);
    s.ok(&["sb", "rm", &sb]);
    s.ok(&["sb", "rm", &source_sb]);
    assert!(fake.containers_of(&source_sb).await.is_empty());
    let away = s.home.path().join("repo-moved-away");
    std::fs::rename(work.path(), &away).unwrap();
    let out = s.ok(&["fork", &run, "--step", "1"]);
    let (fork, sb, rest) = forked(&out);
    assert_eq!(
        rest[0],
        format!("tree: {tree1} (step 1 of run {run}, untrusted)")
    );
    assert_eq!(fake.containers_of(&sb).await.len(), 1, "a pod of its own");
    assert_eq!(files_in(&s, &sb), step1_files());
    assert_eq!(git_tree_in(&s, &sb), tree1);
    assert_eq!(
        in_sb(&s, &sb, "git -C /workspace rev-parse HEAD").trim(),
        head
    );
    the_forks_turn_resumes_the_cut(&s, &fork, &sb).await;
    std::fs::rename(&away, work.path()).unwrap();
    s.ok(&["sb", "rm", &sb]);
}

/// The fork's first turn: the model is sent the conversation up to the Write's result only, and
/// the turn runs in the fork's sandbox (its Bash writes there).
async fn the_forks_turn_resumes_the_cut(s: &Server, fork: &str, sb: &str) {
    let before = s.fake.requests().len();
    let out = s.ok(&["send", fork, "what now"]);
    let turn = out
        .lines()
        .find_map(|l| l.strip_prefix("turn: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
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
    assert_eq!(
        s.ok(&["sb", "exec", sb, "--", "cat", "/workspace/fork.txt"]),
        "forked\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_a_fork_of_a_kubernetes_run_is_a_new_pod_at_the_step() {
    if skip() {
        return;
    }
    let image = claude_image();
    let fake = FakeCloud::start(E2B_KEY).unwrap();
    fork_in(
        &fake,
        &format!("name: cloud\nprovider: kubernetes\nimage: {image}\negress: open\n"),
        "kubernetes",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_a_fork_of_an_e2b_run_is_a_new_sandbox_at_the_step() {
    if skip() {
        return;
    }
    let image = claude_image();
    let fake = FakeCloud::start(E2B_KEY).unwrap();
    fork_in(
        &fake,
        &format!("name: cloud\nprovider: e2b\nimage: {image}\negress: open\n"),
        "e2b",
    )
    .await;
}

fn codex_image() -> String {
    hangar_testkit::codex_image().unwrap()
}

/// A real Codex turn in a kubernetes sandbox (`codex app-server` in the pod, `--disable plugins`
/// and the fake model's provider) runs a command; its last step (the turn's end, where Codex's
/// thread is cut exactly) forks into a new pod whose workspace is that step's tree, and the
/// fork's first turn continues the thread there: the model is sent the earlier turn's prompt and
/// answer. The same once the source pod is removed, from what hangar kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faked_api_a_codex_fork_of_a_kubernetes_run_continues_the_thread() {
    if skip() {
        return;
    }
    let image = codex_image();
    let fake = FakeCloud::start(E2B_KEY).unwrap();
    let model = FakeOpenAi::start(Script::new([
        Step::exec("printf 'x\\n' > x.txt"),
        Step::text("made x").expect_tool_result(),
        Step::text("from the end").expect_user_text("after the end"),
        Step::text("from the end").expect_user_text("after the end"),
    ]))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig, "team-a").unwrap();
    let s = Server::start_with(
        Script::new([]),
        vec![
            ("KUBECONFIG".into(), kubeconfig.display().to_string()),
            (
                "HANGAR_CODEX_BIN".into(),
                codex_bin().unwrap().display().to_string(),
            ),
            (CODEX_API_KEY_ENV.into(), CODEX_API_KEY.into()),
        ],
        None,
    );
    let yaml = s.home.path().join("cloud.yaml");
    std::fs::write(
        &yaml,
        format!("name: cloud\nprovider: kubernetes\nimage: {image}\negress: open\n"),
    )
    .unwrap();
    s.ok(&["env", "apply", yaml.to_str().unwrap()]);
    let work = repo();
    let source_sb = s.create_sandbox("cloud", work.path());
    let config = codex_offline_config(&model.base_url());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(
                json!({"sandbox": source_sb, "harness": "codex", "policy": "auto",
                        "prompt": "make x", "options": {"codex_config": config}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    let (_, v) = s.call("GET", &format!("/v1/runs/{run}/steps"), None).await;
    let steps = v["steps"].as_array().unwrap().clone();
    let end = steps.len() - 1;
    let tree = steps[end]["tree"].as_str().unwrap().to_owned();
    let mut want = BTreeMap::from([
        ("a.txt".to_owned(), "a\n".to_owned()),
        ("gone.txt".to_owned(), "bye\n".to_owned()),
    ]);
    want.insert("x.txt".into(), "x\n".into());

    let fork_at_the_end = async |s: &Server| {
        let out = s.ok(&["fork", &run, "--step", &end.to_string(), "--json"]);
        let forked: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(forked["fork"]["conversation"]["exact"], true, "{forked}");
        let sb = forked["sandbox"]["id"].as_str().unwrap().to_owned();
        assert_eq!(files_in(s, &sb), want);
        assert_eq!(git_tree_in(s, &sb), tree);
        let before = model.requests().len();
        let out = s.ok(&[
            "send",
            forked["session"]["id"].as_str().unwrap(),
            "after the end",
        ]);
        let turn = out
            .lines()
            .find_map(|l| l.strip_prefix("turn: "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned();
        let t = s.turn_ended(&turn).await;
        assert_eq!(t["status"], 0, "{t}");
        let said = model.requests()[before].all_text();
        assert!(
            said.contains("make x") && said.contains("made x") && said.contains("after the end"),
            "{said}"
        );
        // Nothing of another fork's turn: each fork continues the source's thread, not each
        // other's.
        assert!(!said.contains("from the end"), "{said}");
        sb
    };
    let sb = fork_at_the_end(&s).await;
    assert_ne!(sb, source_sb);
    s.ok(&["sb", "rm", &sb]);
    s.ok(&["sb", "rm", &source_sb]);
    let sb = fork_at_the_end(&s).await;
    assert!(model.unexpected().is_empty(), "{:?}", model.unexpected());
    s.ok(&["sb", "rm", &sb]);
}
