//! Issue 20, Deliver 6: "in every case the agent can read nothing of `$HANGAR_HOME` (vault key,
//! database, tokens, other runs' control folders)", checked from inside a tool call. A real
//! Claude Code turn (scripted model) runs a Bash call that tries to read the vault's master key,
//! the database, the server's token file, another run's control folder (its key and run log)
//! and mailbox (a command dropped into `in/`), and to list the home; each try prints one line,
//! `READ`/`WROTE`/`LISTED` when it worked, `EMPTY` for a folder that lists as empty (hangar's home
//! covered by an empty mount), `DENIED` with the system's error when it did not.
//! It runs in each way a turn is placed: a local sandbox with the uid split, a Docker sandbox
//! (the real dockerd), and a plain folder (allowed by the server's setting, run as its user).
//! The tries and their errors are printed for the record.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{Server, docker_image, is_root};
use hangar_testkit::{Script, Step};
use serde_json::json;

/// The scripted model: to a prompt `RUN <command>` a Bash call of that command, then a closing
/// text; to any other prompt a text.
fn model() -> Script {
    Script::new([]).responder(|r| {
        if r.last_user_has_tool_result() {
            return Step::text("that is what I got");
        }
        let text = r.last_user_text().unwrap_or_default();
        match text.split_once("RUN ") {
            Some((_, cmd)) => Step::tool(
                "Bash",
                json!({"command": cmd.trim(), "description": "look around"}),
            ),
            None => Step::text("hello"),
        }
    })
}

/// A run's control folder under `home` (`runs/<run>.ctl`, with its mailbox `in/`).
fn a_control_folder(home: &Path) -> Option<PathBuf> {
    std::fs::read_dir(home.join("runs"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "ctl") && p.join("in").is_dir())
}

/// The probe: one line per try. `head -c` reads bytes; what it read is not printed, only that
/// it could.
fn probe_command(home: &Path, ctl: &Path) -> String {
    let q = |p: &Path| format!("'{}'", p.display());
    let mut c = String::new();
    for f in [
        home.join("master.key"),
        home.join("hangar.db"),
        home.join("token"),
        ctl.join("key"),
        ctl.join("run.log"),
    ] {
        c.push_str(&format!(
            "if e=$(head -c 16 {f} 2>&1 >/dev/null); then echo \"READ {f}\"; else echo \"DENIED read {f}: $e\"; fi; ",
            f = q(&f)
        ));
    }
    for d in [home.to_owned(), ctl.to_owned()] {
        c.push_str(&format!(
            "if e=$(ls -A {d} 2>&1); then if [ -n \"$e\" ]; then echo \"LISTED {d}: $(echo $e)\"; else echo \"EMPTY {d}\"; fi; else echo \"DENIED list {d}: $e\"; fi; ",
            d = q(&d)
        ));
    }
    let cmd = ctl.join("in").join("99.json");
    c.push_str(&format!(
        "if e=$( (echo '{{}}' > {f}) 2>&1); then echo \"WROTE {f}\"; else echo \"DENIED write {f}: $e\"; fi; echo probe-done",
        f = q(&cmd)
    ));
    c
}

/// Starts a session with `body` plus the probe prompt, waits for its turn, and returns the
/// probe's output as the model got it.
async fn probe(s: &Server, what: &str, mut body: serde_json::Value) -> String {
    let home = s.home.path().join("hangar").canonicalize().unwrap();
    let ctl = a_control_folder(&home)
        .unwrap_or_else(|| panic!("no run's control folder under {}", home.display()));
    for f in [
        home.join("master.key"),
        home.join("hangar.db"),
        home.join("token"),
        ctl.join("run.log"),
    ] {
        assert!(f.exists(), "{} is not there to be read", f.display());
    }
    let before = s.fake.requests().len();
    body["policy"] = json!("auto");
    body["prompt"] = json!(format!("RUN {}", probe_command(&home, &ctl)));
    let (status, started) = s.call("POST", "/v1/sessions", Some(body)).await;
    assert_eq!(status, 201, "{what}: {started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{what}: {t}");
    let requests = s.fake.requests();
    let out: String = requests[before..]
        .iter()
        .flat_map(|r| r.tool_results())
        .map(|(_, text, _)| text)
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("--- {what}: the agent's tries ---\n{out}\n---");
    assert!(
        out.contains("probe-done"),
        "{what}: the probe did not run: {out}"
    );
    let key = std::fs::read_to_string(home.join("master.key")).unwrap();
    for r in &requests[before..] {
        assert!(
            !r.all_text().contains(key.trim()),
            "{what}: the vault's master key reached the model"
        );
    }
    out
}

fn assert_read_nothing(what: &str, out: &str) {
    for line in out.lines() {
        assert!(
            !(line.starts_with("READ ")
                || line.starts_with("LISTED ")
                || line.starts_with("WROTE ")),
            "{what}: the agent could: {line}\n{out}"
        );
    }
    assert!(
        out.lines()
            .filter(|l| l.starts_with("DENIED ") || l.starts_with("EMPTY "))
            .count()
            >= 8,
        "{what}: {out}"
    );
}

/// A server with another run live: a first turn (in a plain folder) whose tool call waits for
/// the gate file the test writes when it is done, so that run's control folder and mailbox are
/// there for the probe to go after. (server, the repo, the gate.)
async fn server_with_a_run() -> (Server, tempfile::TempDir, PathBuf) {
    server_with_a_run_and(Vec::new()).await
}

/// [`server_with_a_run`] with more variables for the server.
async fn server_with_a_run_and(
    mut env: Vec<(String, String)>,
) -> (Server, tempfile::TempDir, PathBuf) {
    env.push(("HANGAR_UNSANDBOXED_FOLDERS".to_owned(), "allow".to_owned()));
    let s = Server::start_with(model(), env, None);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let gate = s.home.path().join("gate");
    let wait = format!(
        "RUN while [ ! -e '{}' ]; do sleep 0.2; done",
        gate.display()
    );
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"dir": repo.path(), "no_sandbox": true, "policy": "auto", "prompt": wait})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let home = s.home.path().join("hangar");
    common::until("the first run's tool call", async || {
        (a_control_folder(&home).is_some() && !s.fake.requests().is_empty()).then_some(())
    })
    .await;
    (s, repo, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_local_sandbox_the_agent_reads_nothing_of_hangars_home() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let (s, repo, gate) = server_with_a_run().await;
    let sb = s.sandbox_of("name: probe\nprovider: local\nnetwork: host\n", repo.path());
    let out = probe(&s, "local sandbox", json!({"sandbox": sb})).await;
    std::fs::write(&gate, "").unwrap();
    assert_read_nothing("local sandbox", &out);
    s.ok(&["sb", "rm", &sb]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_docker_sandbox_the_agent_reads_nothing_of_hangars_home() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let (s, repo, gate) = server_with_a_run().await;
    let yaml = format!(
        "name: probe\nprovider: docker\nimage: {}\nnetwork: host\n",
        docker_image()
    );
    let sb = s.sandbox_of(&yaml, repo.path());
    let out = probe(&s, "docker sandbox", json!({"sandbox": sb})).await;
    std::fs::write(&gate, "").unwrap();
    assert_read_nothing("docker sandbox", &out);
    s.ok(&["sb", "rm", &sb]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_plain_folder_the_agent_reads_nothing_of_hangars_home() {
    let (s, repo, gate) = server_with_a_run().await;
    let out = probe(
        &s,
        "plain folder",
        json!({"dir": repo.path(), "no_sandbox": true}),
    )
    .await;
    std::fs::write(&gate, "").unwrap();
    assert_read_nothing("plain folder", &out);
}

/// A one-shot turn (`HANGAR_LIVE_TURNS=false`: no driver, the harness once in its plain mode)
/// in a plain folder runs as hangar's user too: the control plane starts it out of sight of
/// hangar's home as the driver does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_plain_folder_a_one_shot_turn_reads_nothing_of_hangars_home() {
    let (s, repo, gate) =
        server_with_a_run_and(vec![("HANGAR_LIVE_TURNS".to_owned(), "false".to_owned())]).await;
    let out = probe(
        &s,
        "one-shot turn in a plain folder",
        json!({"dir": repo.path(), "no_sandbox": true}),
    )
    .await;
    std::fs::write(&gate, "").unwrap();
    assert_read_nothing("one-shot turn in a plain folder", &out);
}
