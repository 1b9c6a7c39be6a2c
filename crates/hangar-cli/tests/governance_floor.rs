//! Issue 18, item 6 of what to deliver, for the control plane, through a real `hangar serve` and
//! `hangar run`: an environment's `governance.policy` is the floor of its sessions; an
//! environment cannot loosen a global hook requirement (T1); the Tower hook reads the
//! environment's rules from a file the agent's uid can read and cannot change; `hangar run
//! --policy governed` asks Tower. Deliver 1: an environment's reviewed Claude Code settings reach
//! Claude Code and its manifest, and settings that could loosen governance are refused.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Server, hook_bin, is_root};
use hangar_testkit::{Script, Step, TOWER_KEY, TowerAnswer, TowerDouble};
use serde_json::{Value, json};

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// Applies `yaml` as environment `name`.
fn apply(s: &Server, name: &str, yaml: &str) {
    let f = s.home.path().join(format!("{name}.yaml"));
    std::fs::write(&f, format!("name: {name}\n{yaml}")).unwrap();
    s.ok(&["env", "apply", f.to_str().unwrap()]);
}

/// A server that reaches `tower` for policy `governed` and the hook (`more` added).
fn with_tower(script: Script, tower: &TowerDouble, more: &[(&str, &str)]) -> Server {
    let mut env = vec![
        ("HANGAR_GOVERNANCE_URL".to_owned(), tower.url()),
        (
            "HANGAR_GOVERNANCE_HOOK_CREDENTIAL".to_owned(),
            "tower".to_owned(),
        ),
        (
            "HANGAR_TOWER_HOOK_BIN".to_owned(),
            hook_bin().display().to_string(),
        ),
    ];
    env.extend(more.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    Server::start_with(script, env, Some(("tower", TOWER_KEY)))
}

fn repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    repo
}

/// A sandbox's workspace on this machine.
async fn workspace(s: &Server, sb: &str) -> PathBuf {
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environments_policy_is_the_floor_of_its_sessions() {
    let s = Server::start(Script::new([Step::text("under the floor")]));
    let repo = repo();
    apply(
        &s,
        "floor",
        "provider: local\nnetwork: host\nuid_split: false\ngovernance: {policy: ask}\n",
    );
    let weaker = "policy auto is refused: environment floor's governance.policy is ask";

    // Through the API: a sandbox made from the environment, or one it made before.
    let (status, answer) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"env": "floor", "dir": repo.path(), "policy": "auto", "prompt": "x"})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains(weaker), "{answer}");
    let (_, sandboxes) = s.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(
        sandboxes["sandboxes"],
        json!([]),
        "refused before a sandbox was made"
    );
    let sb = s.create_sandbox("floor", repo.path());
    let (status, answer) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "x"})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains(weaker), "{answer}");

    // Through `hangar run --env`: the usage error names the floor.
    let out = s
        .hangar()
        .args(["run", "--env", "floor", "--policy", "auto", "--dir"])
        .arg(repo.path())
        .arg("x")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(weaker), "{err}");
    assert!(
        s.fake.requests().is_empty(),
        "a turn ran under a weaker policy"
    );

    // Asking for none gives the floor.
    let out = s
        .hangar()
        .args(["run", "--env", "floor", "--dir"])
        .arg(repo.path())
        .arg("hello")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (_, sessions) = s.call("GET", "/v1/sessions", None).await;
    let policies: Vec<&Value> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["policy"])
        .collect();
    assert_eq!(policies, [&json!("ask")], "{sessions}");
}

/// T1: `HANGAR_GOVERNANCE_HOOK=required` for every turn, and an environment saying `hook: off`.
/// In a local sandbox with the uid split the turn still runs with the Tower hook (Tower is asked,
/// the manifest names the hook, even under `auto`); where the hook could not hold (no uid split)
/// the turn is refused, not run without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_cannot_loosen_a_global_hook_requirement() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let tower = TowerDouble::start().unwrap();
    let s = with_tower(
        Script::new([bash("echo one > one.txt"), Step::text("one done")]),
        &tower,
        &[("HANGAR_GOVERNANCE_HOOK", "required")],
    );
    let repo = repo();
    apply(
        &s,
        "loose",
        "provider: local\nnetwork: host\ngovernance: {hook: off}\n",
    );
    let sb = s.create_sandbox("loose", repo.path());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "one"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    let calls = tower.calls();
    assert_eq!(calls.len(), 1, "the hook asked Tower: {calls:?}");
    assert_eq!(calls[0].target, "/hooks/claude-code");
    assert_eq!(t["manifest"]["policy_effective"], "tower_hook", "{t}");
    assert!(
        t["manifest"]["hooks"]
            .to_string()
            .contains("hangar:tower_hook"),
        "{t}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace(&s, &sb).await.join("one.txt")).unwrap(),
        "one\n"
    );

    apply(
        &s,
        "loose-nosplit",
        "provider: local\nnetwork: host\nuid_split: false\ngovernance: {hook: off}\n",
    );
    let sb2 = s.create_sandbox("loose-nosplit", repo.path());
    let (status, answer) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb2, "policy": "auto", "prompt": "x"})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("has no uid split"), "{answer}");
    assert_eq!(tower.calls().len(), 1);
    assert_eq!(
        s.fake.requests().len(),
        2,
        "only the first turn reached the model"
    );
}

/// An environment's `governance.rules` with the Tower hook, under the uid split: the hook runs
/// as the agent, so the rules it reads are beside it in `/var/lib/hangar`, readable by the
/// agent's uid and not changeable by it (before, they were in the root-only control folder and
/// every call was blocked); gone when the run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_hook_reads_the_environments_rules_where_the_agent_can_read_them() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let tower = TowerDouble::start().unwrap();
    tower.set_answer(TowerAnswer::Wait {
        reason: "a person decides".into(),
        sign: None,
    });
    let s = with_tower(
        Script::new([bash("echo one > one.txt"), Step::text("one done")]),
        &tower,
        &[],
    );
    let repo = repo();
    apply(
        &s,
        "ruled",
        "provider: local\nnetwork: host\ngovernance:\n  hook: required\n  rules:\n    add:\n      - {id: no-cows, reason: this team does not moo, commands: [cowsay]}\n",
    );
    let sb = s.create_sandbox("ruled", repo.path());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "one"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let rules = format!("/var/lib/hangar/{run}.rules.toml");

    // While the hook waits on Tower: the agent reads the rules file and cannot change it.
    tower.wait_for_calls(1, Duration::from_secs(90)).unwrap();
    let as_agent = |script: &str| {
        s.hangar()
            .args(["sb", "exec", &sb, "--as", "agent", "--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let read = as_agent(&format!("cat {rules}"));
    assert!(read.status.success(), "{read:?}");
    assert!(String::from_utf8_lossy(&read.stdout).contains("no-cows"));
    for change in [
        format!("echo '[[rule]]' >> {rules}"),
        format!("rm -f {rules}"),
        format!("mv {rules} {rules}.old"),
    ] {
        let out = as_agent(&change);
        assert!(!out.status.success(), "the agent could {change}: {out:?}");
    }
    let again = as_agent(&format!("cat {rules}"));
    assert_eq!(again.stdout, read.stdout, "the rules file changed");

    // Signed: the hook checks the rules it read, and the call runs.
    let ids = tower.approvals();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert!(tower.sign(&ids[0], true, "ada@example.com"));
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    assert_eq!(
        std::fs::read_to_string(workspace(&s, &sb).await.join("one.txt")).unwrap(),
        "one\n",
        "the call the rules allow ran"
    );
    let rec = t["manifest"]["rules"]["added"].to_string();
    assert!(rec.contains("no-cows"), "{t}");
    let left = s.ok(&[
        "sb",
        "exec",
        &sb,
        "--as",
        "hangar",
        "--",
        "ls",
        "/var/lib/hangar",
    ]);
    assert!(
        !left.contains(".rules.toml"),
        "the rules file stayed: {left}"
    );
}

/// `hangar run --policy governed` (the README's command): each tool call the rules allow goes to
/// Tower, whose answer is final; no person is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hangar_run_policy_governed_asks_tower() {
    let tower = TowerDouble::start().unwrap();
    let s = with_tower(
        Script::new([bash("echo made > made.txt"), Step::text("made it")]),
        &tower,
        &[],
    );
    let work = repo();
    let out = s
        .hangar()
        .args(["run", "--policy", "governed", "--dir"])
        .arg(work.path())
        .arg("make a file")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("made.txt")).unwrap(),
        "made\n"
    );
    let calls = tower.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].target, "/approvals");
    let (_, sessions) = s.call("GET", "/v1/sessions", None).await;
    assert_eq!(sessions["sessions"][0]["policy"], "governed", "{sessions}");
}

/// Deliver 1's reviewed settings: an environment's `governance.claude_settings` reach the real
/// Claude Code (here a `permissions.deny` that stops the call) and the turn's manifest records
/// them with their digest; settings that could loosen governance (a hook, `env`, an allow) are
/// refused when the environment is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environments_reviewed_claude_settings_are_installed_and_cannot_loosen() {
    let s = Server::start(Script::new([
        bash("echo made > made.txt"),
        Step::text("was it made?").expect_tool_result(),
    ]));
    for (bad, says) in [
        (
            "{hooks: {PreToolUse: [{hooks: [{type: command, command: 'echo allow'}]}]}}",
            "\"hooks\"",
        ),
        (
            "{env: {ANTHROPIC_BASE_URL: 'http://127.0.0.1:9'}}",
            "\"env\"",
        ),
        ("{permissions: {allow: [Bash]}}", "permissions.allow"),
    ] {
        let f = s.home.path().join("loose.yaml");
        std::fs::write(
            &f,
            format!("name: loose\nprovider: local\nuid_split: false\ngovernance: {{claude_settings: {bad}}}\n"),
        )
        .unwrap();
        let out = s
            .hangar()
            .args(["env", "apply", f.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} was applied");
        assert!(
            err.contains("governance.claude_settings") && err.contains(says),
            "{bad}: {err}"
        );
    }
    let (_, envs) = s.call("GET", "/v1/environments", None).await;
    assert!(
        !envs.to_string().contains("\"loose\""),
        "a refused environment was kept: {envs}"
    );

    apply(
        &s,
        "reviewed",
        "provider: local\nnetwork: host\nuid_split: false\ngovernance: {claude_settings: {permissions: {deny: ['Bash(echo:*)']}}}\n",
    );
    let repo = repo();
    let sb = s.create_sandbox("reviewed", repo.path());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "make it"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    assert!(
        !workspace(&s, &sb).await.join("made.txt").exists(),
        "the environment's permissions.deny did not reach Claude Code"
    );
    let results: Vec<(String, String, bool)> = s
        .fake
        .requests()
        .iter()
        .flat_map(|r| r.tool_results())
        .collect();
    assert!(
        results
            .iter()
            .any(|(_, text, error)| *error && text.contains("denied")),
        "{results:?}"
    );
    let hooks = t["manifest"]["hooks"].as_array().unwrap();
    let reviewed = hooks
        .iter()
        .find(|h| {
            h["name"].as_str().is_some_and(|n| {
                n.starts_with("claude_settings: ") && n.ends_with("claude-settings.json")
            })
        })
        .unwrap_or_else(|| panic!("the reviewed settings are not in the manifest: {t}"));
    assert_eq!(reviewed["digest"].as_str().unwrap().len(), 64, "{reviewed}");
}
