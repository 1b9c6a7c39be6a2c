//! A real Claude Code turn inside a local (bubblewrap) sandbox with the uid split, through
//! `hangar serve`: the driver is copied in and started in a tmux session named after the run;
//! `hangar sb attach` (in a terminal of the test's own tmux) shows the live run; the tool call
//! waits for a person, is approved, and runs as the agent's uid in the sandbox's copy of the
//! repository; the agent cannot enter the control folder; `sb rm` leaves nothing behind.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Server, docker_image, hook_bin, is_root, until};
use hangar_testkit::{Script, Step, Terminal};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_turn_in_a_local_sandbox_with_the_uid_split() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let s = Server::start(Script::new([
        Step::tool(
            "Bash",
            json!({"command": "echo made > made.txt && id -u > uid.txt", "description": "make"}),
        ),
        Step::text("made it"),
    ]));
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let env = s.home.path().join("loc.yaml");
    // The scripted model listens on the host's loopback.
    std::fs::write(&env, "name: loc\nprovider: local\nnetwork: host\n").unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "loc",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    assert!(out.contains("uid split: on"), "{out}");

    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let approval = until("the approval", async || {
        let (_, a) = s
            .call("GET", &format!("/v1/runs/{run}/approvals"), None)
            .await;
        a["approvals"].as_array().and_then(|v| v.first().cloned())
    })
    .await;

    // A person's terminal, attached to the run's tmux session, shows the live run.
    let mut attach = s.hangar();
    attach.args(["sb", "attach", &sb]);
    let argv: Vec<String> = std::iter::once("env".to_owned())
        .chain(
            attach
                .get_envs()
                .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v?.to_str()?))),
        )
        .chain(std::iter::once(
            attach.get_program().to_string_lossy().into_owned(),
        ))
        .chain(attach.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect();
    let term = Terminal::start(s.home.path(), &argv, 200, 50).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let screen = loop {
        let screen = term.screen();
        // The harness's own stream, as the driver relays it into the run log: Claude Code's
        // partial messages, then the tool call (its first line has scrolled away by then).
        if screen.contains("\"type\":\"stream_event\"") && screen.contains("tool_use") {
            break screen;
        }
        assert!(
            Instant::now() < deadline,
            "the attached terminal shows: {screen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        screen.contains("tool_use"),
        "the harness's stream: {screen}"
    );

    // The agent cannot enter the control folder.
    let out = s
        .hangar()
        .args([
            "sb",
            "exec",
            &sb,
            "--",
            "sh",
            "-c",
            "ls /run/hangar; cat /run/hangar/*/run.log",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the agent read the control folder");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));

    let (status, r) = s
        .call(
            "POST",
            &format!(
                "/v1/runs/{run}/approvals/{}",
                approval["request_id"].as_str().unwrap()
            ),
            Some(json!({"decision": "allow"})),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let t = until("the turn to end", async || {
        let (_, t) = s.call("GET", &format!("/v1/turns/{turn}"), None).await;
        (t["state"] == "ended").then_some(t)
    })
    .await;
    assert_eq!(t["status"], 0, "{t}");

    // The file is in the sandbox's copy, made by the agent's uid, not in the repo.
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "made\n"
    );
    let uid: u32 = std::fs::read_to_string(ws.join("uid.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(uid, 0, "the harness ran as root");
    assert!(!repo.path().join("made.txt").exists());
    // The turn's session ended with the driver: no tmux session is left for the run.
    let out = s
        .hangar()
        .args(["sb", "attach", &sb, "--run", &run])
        .output()
        .unwrap();
    assert!(!out.status.success());

    // `sb rm` leaves nothing: no folder, no process with the sandbox's folder in its mounts.
    let host_dir = ws.parent().unwrap().to_owned();
    s.ok(&["sb", "rm", &sb]);
    assert!(!host_dir.exists(), "{} is left", host_dir.display());
    let needle = host_dir.display().to_string();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(m) = std::fs::read_to_string(p.path().join("mountinfo")) {
            assert!(
                !m.contains(&needle),
                "process {:?} still mounts it",
                p.file_name()
            );
        }
    }
    let list = s.ok(&["sb", "list"]);
    assert!(!list.contains(&sb[..9]), "{list}");
}

/// A real Claude Code turn in a sandbox whose egress is an allowlist naming only the
/// scripted model's host (`model.test`, which the proxy's test-only name map sends to the model
/// on the host's loopback): Claude Code reaches the model through hangar's egress proxy (the
/// sandbox has no other way out), the tool call runs as the agent, the proxy records the
/// model's host, the proxy is back after `hangar serve` is killed and started again, and `sb rm`
/// leaves no proxy, namespace or folder behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_turn_in_a_local_sandbox_reaches_the_model_through_the_egress_allowlist() {
    claude_through_the_allowlist("provider: local\n").await;
}

/// The same in a Docker sandbox (`--network none`, the proxy in the container's namespace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_turn_in_a_docker_sandbox_reaches_the_model_through_the_egress_allowlist() {
    claude_through_the_allowlist(&format!("provider: docker\nimage: {}\n", docker_image())).await;
}

async fn claude_through_the_allowlist(provider: &str) {
    assert!(
        is_root(),
        "the sandbox's network namespace needs root (CI runs as root)"
    );
    let script = Script::new([
        Step::tool(
            "Bash",
            json!({"command": "echo made > made.txt", "description": "make"}),
        ),
        Step::text("made it"),
    ]);
    let fake = hangar_testkit::FakeAnthropic::start(script).unwrap();
    let model = fake.base_url();
    let port = model
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let mut s = Server::start_with(
        Script::new([Step::text("never asked")]),
        vec![
            (
                "ANTHROPIC_BASE_URL".to_owned(),
                format!("http://model.test:{port}"),
            ),
            (
                "HANGAR_EGRESS_TEST_RESOLVE".to_owned(),
                format!("model.test=127.0.0.1:{port}"),
            ),
        ],
        None,
    );
    s.fake = fake;
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let env = s.home.path().join("fenced.yaml");
    std::fs::write(
        &env,
        format!("name: fenced\n{provider}egress: {{allowlist: [model.test]}}\n"),
    )
    .unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "fenced",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    // Nothing else is reachable from inside, by name or by address.
    let out = s
        .hangar()
        .args(["sb", "exec", &sb, "--", "bash", "-c"])
        .arg(format!(
            "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null || echo direct-failed; perl -MHTTP::Tiny -e 'print HTTP::Tiny->new(timeout => 5)->get(\"http://elsewhere.test/\")->{{content}}'"
        ))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("direct-failed")
            && text.contains(
                "elsewhere.test is not on environment fenced's egress allowlist (model.test)"
            ),
        "{text}"
    );

    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let t = until("the turn to end", async || {
        let (_, t) = s.call("GET", &format!("/v1/turns/{turn}"), None).await;
        (t["state"] == "ended").then_some(t)
    })
    .await;
    assert_eq!(t["status"], 0, "{t}");
    assert!(
        s.fake.requests().len() >= 2,
        "the model was not asked twice"
    );
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "made\n"
    );
    let host_dir = ws.parent().unwrap().to_owned();
    let log = std::fs::read_to_string(host_dir.join("ctl/egress.log")).unwrap();
    assert!(
        log.lines().any(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["host"] == "model.test" && v["allowed"] == true
        }),
        "{log}"
    );
    assert!(log.contains("elsewhere.test"), "{log}");

    let model_allowed = |log: &str| {
        log.lines()
            .filter(|l| l.contains("\"host\":\"model.test\"") && l.contains("\"allowed\":true"))
            .count()
    };
    let before = model_allowed(&log);
    // The proxy lives in `hangar serve`: killed and started again, the server opens it again at
    // the sandbox's next command.
    s.restart();
    let out = s
        .hangar()
        .args(["sb", "exec", &sb, "--", "bash", "-c"])
        .arg(format!(
            "perl -MHTTP::Tiny -e 'print HTTP::Tiny->new(timeout => 10)->get(\"http://model.test:{port}/\")->{{status}}'"
        ))
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    // The scripted model's own answer to a GET, not HTTP::Tiny's 599 (no connection) or the
    // proxy's 403/502.
    assert!(
        !status.is_empty() && !["599", "403", "502"].contains(&status.as_str()),
        "after a restart: {status} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(host_dir.join("ctl/egress.log")).unwrap();
    assert_eq!(model_allowed(&log), before + 1, "{log}");

    s.ok(&["sb", "rm", &sb]);
    assert!(!host_dir.exists(), "{} is left", host_dir.display());
    let needle = host_dir.display().to_string();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(m) = std::fs::read_to_string(p.path().join("mountinfo")) {
            assert!(
                !m.contains(&needle),
                "process {:?} still mounts it",
                p.file_name()
            );
        }
    }
}

/// The agent's side of the uid split, probed by a real tool call: `tests/fixtures/probe.sh`
/// (copied into the repository) tries each thing and writes one line per try.
async fn the_agent_cannot_reach_hangar(env_yaml: &str) {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let s = Server::start(Script::new([
        Step::tool(
            "Bash",
            json!({"command": "sh probe.sh", "description": "probe"}),
        ),
        Step::text("probed"),
    ]));
    let repo = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/probe.sh"),
        repo.path().join("probe.sh"),
    )
    .unwrap();
    let env = s.home.path().join("env.yaml");
    std::fs::write(&env, env_yaml).unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "probe",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("sandbox: ")
        .unwrap()
        .to_owned();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "probe"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let t = until("the turn to end", async || {
        let (_, t) = s.call("GET", &format!("/v1/turns/{turn}"), None).await;
        (t["state"] == "ended").then_some(t)
    })
    .await;
    assert_eq!(t["status"], 0, "{t}");
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    let probe = std::fs::read_to_string(ws.join("probe.txt")).unwrap();
    assert!(
        probe.contains("done: yes"),
        "the probe did not finish: {probe}"
    );
    assert!(probe.contains("driver-found: yes"), "{probe}");
    let uid: u32 = probe
        .lines()
        .next()
        .unwrap()
        .strip_prefix("uid: ")
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(uid, 0, "{probe}");
    for line in probe.lines().skip(1) {
        assert!(
            !line.ends_with("ALLOWED"),
            "the agent could: {line}\n{probe}"
        );
    }
    for name in [
        "read-run-key",
        "write-command",
        "replace-driver",
        "read-driver-environ",
        "read-driver-mem",
    ] {
        assert!(
            probe.contains(&format!("{name}: denied")),
            "{name}: {probe}"
        );
    }
    s.ok(&["sb", "rm", &sb]);
    assert_nothing_left(&sb, &ws);
}

/// After `sb rm`: no folder, no container, no process holding the sandbox's folder.
fn assert_nothing_left(sb: &str, host_workspace: &Path) {
    let host_dir = host_workspace.parent().unwrap();
    assert!(!host_dir.exists(), "{} is left", host_dir.display());
    let needle = host_dir.display().to_string();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(m) = std::fs::read_to_string(p.path().join("mountinfo")) {
            assert!(
                !m.contains(&needle),
                "process {:?} still mounts it",
                p.file_name()
            );
        }
    }
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label=dev.hangar.sandbox={sb}"),
        ])
        .output();
    if let Ok(out) = out {
        assert!(
            String::from_utf8_lossy(&out.stdout).trim().is_empty(),
            "a container of {sb} is left"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_local_sandbox_the_agent_cannot_reach_hangar() {
    the_agent_cannot_reach_hangar("name: probe\nprovider: local\nnetwork: host\n").await;
}

/// `HANGAR_GOVERNANCE_HOOK=required` in a local sandbox with the uid split: hangar installs the
/// Tower hook at each turn start (T16) and the real Claude Code runs it before the tool call,
/// with the run's key file (T15, gone when the run ends); no person is asked under `ask` and Tower
/// sees exactly one call (T7). A hook changed between turns is audited `governance.hook_tampered`
/// and warned about on the next turn, which gets hangar's hook again (T17). A sandbox without the
/// uid split refuses the turn (T9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_hook_is_installed_checked_and_run_in_a_local_sandbox() {
    tower_hook_in("provider: local\nnetwork: host\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_hook_is_installed_checked_and_run_in_a_docker_sandbox() {
    tower_hook_in(&format!(
        "provider: docker\nimage: {}\nnetwork: host\n",
        docker_image()
    ))
    .await;
}

/// `provider` is the environment's YAML without its name.
async fn tower_hook_in(provider: &str) {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let tower = hangar_testkit::TowerDouble::start().unwrap();
    let extra = vec![
        ("HANGAR_GOVERNANCE_HOOK".to_owned(), "required".to_owned()),
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
    let s = Server::start_with(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "echo one > one.txt", "description": "one"}),
            ),
            Step::text("one done"),
            Step::tool(
                "Bash",
                json!({"command": "echo two > two.txt", "description": "two"}),
            ),
            Step::text("two done"),
        ]),
        extra,
        Some(("tower", hangar_testkit::TOWER_KEY)),
    );
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let env = s.home.path().join("gov.yaml");
    std::fs::write(&env, format!("name: gov\n{provider}")).unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "gov",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("sandbox: ")
        .unwrap()
        .to_owned();

    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "one"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let session = started["session"]["id"].as_str().unwrap().to_owned();
    let run1 = started["run"]["id"].as_str().unwrap().to_owned();
    let t1 = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t1["status"], 0, "{t1}");
    let calls = tower.calls();
    assert_eq!(calls.len(), 1, "one call, one approval: {calls:?}");
    assert_eq!(calls[0].target, "/hooks/claude-code");
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some(format!("Bearer {}", hangar_testkit::TOWER_KEY).as_str())
    );
    let (_, approvals) = s
        .call("GET", &format!("/v1/runs/{run1}/approvals"), None)
        .await;
    assert_eq!(approvals["approvals"], json!([]), "no person was asked");
    let hooks = t1["manifest"]["hooks"].to_string();
    assert!(hooks.contains("hangar:tower_hook"), "{t1}");
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("one.txt")).unwrap(),
        "one\n"
    );
    // The run's key file is gone once the run ended (T15).
    let out = s
        .hangar()
        .args([
            "sb",
            "exec",
            &sb,
            "--as",
            "hangar",
            "--",
            "ls",
            "/var/lib/hangar",
        ])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listing.contains("tower_hook"), "{listing}");
    assert!(
        !listing.contains(".tower-key"),
        "the key file stayed: {listing}"
    );

    // Someone changes the hook between turns: audited, warned, installed again.
    s.ok(&[
        "sb",
        "exec",
        &sb,
        "--as",
        "hangar",
        "--",
        "sh",
        "-c",
        "echo changed >> /var/lib/hangar/tower_hook",
    ]);
    let out = s.ok(&["send", &session, "two"]);
    let run2 = out
        .lines()
        .find_map(|l| l.strip_prefix("run: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    let (_, r2) = s.call("GET", &format!("/v1/runs/{run2}"), None).await;
    let t2 = s.turn_ended(r2["turn_id"].as_str().unwrap()).await;
    assert_eq!(t2["status"], 0, "{t2}");
    assert_eq!(
        std::fs::read_to_string(ws.join("two.txt")).unwrap(),
        "two\n"
    );
    assert_eq!(tower.calls().len(), 2);
    let audit = s.ok(&["audit"]);
    assert!(audit.contains("governance.hook_tampered"), "{audit}");
    let (_, ev) = s
        .call("GET", &format!("/v1/runs/{run2}/events?limit=500"), None)
        .await;
    assert!(
        ev.to_string()
            .contains("was changed since hangar installed it"),
        "the turn carries the warning: {ev}"
    );

    // Without the uid split the hook could be removed: the turn is refused, saying why.
    std::fs::write(&env, format!("name: nosplit\n{provider}uid_split: false\n")).unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "nosplit",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb2 = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("sandbox: ")
        .unwrap()
        .to_owned();
    let (status, body) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb2, "policy": "ask", "prompt": "x"})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("has no uid split"), "{body}");
    assert_eq!(tower.calls().len(), 2);
    s.ok(&["sb", "rm", &sb]);
    s.ok(&["sb", "rm", &sb2]);
}

/// `HANGAR_GOVERNANCE_HOOK_AUTH=passport` with the Tower hook in a sandbox (T11-T15): the hook's
/// key file inside holds the sandbox's own passport, which the real hook shows Tower; with
/// short-lived passports the refresh loop swaps the file inside the sandbox while the turn runs
/// (the second call shows a renewed one), and the file is gone once the run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_hook_in_a_sandbox_shows_the_sandboxs_renewed_passport() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let tower = hangar_testkit::TowerDouble::start().unwrap();
    tower.set_passport_seconds(9);
    let extra = vec![
        ("HANGAR_GOVERNANCE_HOOK".to_owned(), "required".to_owned()),
        ("HANGAR_GOVERNANCE_URL".to_owned(), tower.url()),
        (
            "HANGAR_GOVERNANCE_HOOK_AUTH".to_owned(),
            "passport".to_owned(),
        ),
        (
            "HANGAR_TOWER_HOOK_BIN".to_owned(),
            hook_bin().display().to_string(),
        ),
    ];
    let s = Server::start_with(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "sleep 7 && echo one > one.txt", "description": "one"}),
            ),
            Step::tool(
                "Bash",
                json!({"command": "echo two > two.txt", "description": "two"}),
            ),
            Step::text("done"),
        ]),
        extra,
        None,
    );
    // Tower trusts the keys this hangar publishes; its issuer is HANGAR_URL's default (the server
    // was started without one).
    let keys: Value = reqwest::get(format!("{}/.well-known/jwks.json", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    tower.trust_keys("http://127.0.0.1:7700", keys);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let env = s.home.path().join("gov.yaml");
    std::fs::write(&env, "name: gov\nprovider: local\nnetwork: host\n").unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "gov",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("sandbox: ")
        .unwrap()
        .to_owned();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "slowly"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    let calls = tower.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let issued: Vec<String> = tower
        .exchanges()
        .into_iter()
        .filter_map(|e| e.passport)
        .collect();
    assert!(issued.len() >= 2, "renewed during the turn");
    let bearers: Vec<String> = calls
        .iter()
        .map(|c| {
            assert_eq!(c.target, "/hooks/claude-code");
            c.authorization
                .as_deref()
                .and_then(|a| a.strip_prefix("Bearer "))
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(bearers.iter().all(|b| issued.contains(b)), "{bearers:?}");
    assert_ne!(
        bearers[0], bearers[1],
        "the second call showed a renewed passport"
    );
    let audit = s.ok(&["audit"]);
    assert!(audit.contains("governance.passport_issued"), "{audit}");
    assert!(audit.contains("governance.passport_renewed"), "{audit}");
    let out = s
        .hangar()
        .args([
            "sb",
            "exec",
            &sb,
            "--as",
            "hangar",
            "--",
            "ls",
            "-a",
            "/var/lib/hangar",
        ])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listing.contains("tower_hook"), "{listing}");
    assert!(
        !listing.contains("tower-key"),
        "a key file stayed: {listing}"
    );
    s.ok(&["sb", "rm", &sb]);
}

/// The same probe in a Docker sandbox with the uid split (host networking: the scripted model
/// listens on this machine's loopback): the Foundation's Claude Code turn, run in a container
/// whose driver was copied in for the turn and whose Claude Code is hangar's pinned copy, bound
/// read-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_docker_sandbox_the_agent_cannot_reach_hangar() {
    the_agent_cannot_reach_hangar(&format!(
        "name: probe\nprovider: docker\nimage: {}\nnetwork: host\n",
        docker_image()
    ))
    .await;
}

/// An environment's rules reach the driver of each turn in its sandboxes: a rule it adds denies
/// the agent's command under `auto`, and the agent is told which rule and why; the turn's
/// manifest records the rule added and the one turned off, in its `harness_digest`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_adds_a_deny_rule_for_its_sandboxes() {
    let s = Server::start(Script::new([
        Step::tool(
            "Bash",
            json!({"command": "cowsay moo > cow.txt", "description": "moo"}),
        ),
        Step::text("no cows then"),
    ]));
    let repo = tempfile::tempdir().unwrap();
    let env = s.home.path().join("rules.yaml");
    std::fs::write(
        &env,
        "name: strict\nprovider: local\nnetwork: host\ngovernance:\n  rules:\n    disable: [signal-processes]\n    add:\n      - {id: no-cows, reason: this team does not moo, commands: [cowsay]}\n",
    )
    .unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "strict",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("sandbox: ")
        .unwrap()
        .to_owned();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "moo"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    let (_, ev) = s
        .call("GET", &format!("/v1/runs/{run}/events?limit=500"), None)
        .await;
    let ev = ev.to_string();
    assert!(ev.contains("no-cows"), "the rule is named: {ev}");
    assert!(ev.contains("this team does not moo"), "{ev}");
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    assert!(!ws.join("cow.txt").exists(), "the command ran");
    let m: hangar_events::Manifest = serde_json::from_value(t["manifest"].clone()).unwrap();
    assert!(m.digest_matches(), "{m:?}");
    let rules = m.rules.clone().unwrap();
    assert_eq!(rules.added, ["no-cows"]);
    assert_eq!(rules.disabled, ["signal-processes"]);
    // The rules are part of what the digest covers: the same turn with the default set
    // would have another one.
    let mut plain = m.clone();
    plain.rules.as_mut().unwrap().added.clear();
    assert_ne!(plain.sealed().harness_digest, m.harness_digest);
    s.ok(&["sb", "rm", &sb]);
}

/// A one-shot turn (S29, S30) in a local sandbox with the uid split: no driver is copied in;
/// `claude -p` runs once as the agent's uid in the sandbox's copy, and the turn records the
/// start and end trees of that copy, untrusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_turn_in_a_local_sandbox_runs_as_the_agent() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let s = Server::start_with(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "echo made > made.txt && id -u > uid.txt", "description": "make"}),
            ),
            Step::text("made it").expect_tool_result(),
        ]),
        vec![("HANGAR_LIVE_TURNS".into(), "false".into())],
        None,
    );
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let env = s.home.path().join("loc.yaml");
    std::fs::write(&env, "name: loc\nprovider: local\nnetwork: host\n").unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "loc",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    let sb = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    let tree = |dir: &Path| {
        let out = s.hangar().arg("tree").arg(dir).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let start = tree(&ws);
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "made\n"
    );
    let uid: u32 = std::fs::read_to_string(ws.join("uid.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(uid, 0, "the harness ran as root");
    let g = &t["git_trees"];
    assert_eq!(g["start"]["tree"], json!(start), "{g}");
    assert_eq!(g["end"]["tree"], json!(tree(&ws)), "{g}");
    assert_ne!(g["start"]["tree"], g["end"]["tree"]);
    assert_eq!(g["trusted"], false, "{g}");
    let argv = t["manifest"]["argv"].to_string();
    assert!(
        argv.contains("\"-p\"") && !argv.contains("hangar-driver"),
        "{argv}"
    );
    s.ok(&["sb", "rm", &sb]);
}

/// `hangar serve` is killed (SIGKILL) while a sandboxed run with a short-lived passport (9 s) is
/// in its first tool call, and started again: it re-attaches, resumes the run's refresh loop
/// from the hook's key file inside the sandbox, and renews it there, so the second call (after
/// the first passport has expired, which Tower would refuse) shows Tower a renewed one. Once
/// the run has ended the key file is gone and nothing is renewed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_renews_the_passport_inside_a_running_sandbox() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let tower = hangar_testkit::TowerDouble::start().unwrap();
    tower.set_passport_seconds(9);
    let extra = vec![
        ("HANGAR_GOVERNANCE_HOOK".to_owned(), "required".to_owned()),
        ("HANGAR_GOVERNANCE_URL".to_owned(), tower.url()),
        (
            "HANGAR_GOVERNANCE_HOOK_AUTH".to_owned(),
            "passport".to_owned(),
        ),
        (
            "HANGAR_TOWER_HOOK_BIN".to_owned(),
            hook_bin().display().to_string(),
        ),
    ];
    let mut s = Server::start_with(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "sleep 12 && echo one > one.txt", "description": "one"}),
            ),
            Step::tool(
                "Bash",
                json!({"command": "echo two > two.txt", "description": "two"}),
            ),
            Step::text("done"),
        ]),
        extra,
        None,
    );
    let keys: Value = reqwest::get(format!("{}/.well-known/jwks.json", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    tower.trust_keys("http://127.0.0.1:7700", keys);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let env = s.home.path().join("gov.yaml");
    std::fs::write(&env, "name: gov\nprovider: local\nnetwork: host\n").unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let sb = s.create_sandbox("gov", repo.path());
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "slowly"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let first = tower.exchanges()[0].passport.clone().unwrap();
    // Killed about when the first renewal is due (a third into 9 s): whatever the old server
    // renewed expires before the second call, 12 s on, so that call passes only with a
    // passport the restarted server renewed inside the sandbox.
    s.restart();
    let t = s.turn_ended(started["turn"]["id"].as_str().unwrap()).await;
    assert_eq!(t["status"], 0, "{t}");
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    assert!(ws.join("two.txt").exists(), "the second call was refused");
    let issued: Vec<String> = tower
        .exchanges()
        .into_iter()
        .filter_map(|e| e.passport)
        .collect();
    assert!(issued.len() >= 2, "renewed after the restart: {issued:?}");
    let calls = tower.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let bearer = |i: usize| {
        calls[i]
            .authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .unwrap()
            .to_owned()
    };
    assert!(issued.contains(&bearer(0)) && issued.contains(&bearer(1)));
    assert_ne!(
        bearer(1),
        first,
        "the second call showed the expired passport"
    );
    let audit = s.ok(&["audit"]);
    assert!(audit.contains("governance.passport_renewed"), "{audit}");
    // Ended: the key file is gone inside, and no passport is asked for again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after_end = tower.exchanges().len();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        tower.exchanges().len(),
        after_end,
        "renewed after the run ended"
    );
    let out = s
        .hangar()
        .args([
            "sb",
            "exec",
            &sb,
            "--as",
            "hangar",
            "--",
            "ls",
            "-a",
            "/var/lib/hangar",
        ])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !listing.contains("tower-key"),
        "a key file stayed: {listing}"
    );
    s.ok(&["sb", "rm", &sb]);
}

/// A copy of hangar's pinned Claude Code package (hard links where the file system allows,
/// no symbolic links) and of the driver, in `dir`; the copied `claude` and driver.
fn tools_copy(dir: &Path) -> (PathBuf, PathBuf) {
    let real = hangar_testkit::claude_bin()
        .unwrap()
        .canonicalize()
        .unwrap();
    let modules = real
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .unwrap()
        .to_owned();
    let scope = modules.join("@anthropic-ai");
    let dest = dir.join("npm/node_modules");
    std::fs::create_dir_all(&dest).unwrap();
    let linked = Command::new("cp")
        .arg("-al")
        .arg(&scope)
        .arg(&dest)
        .status()
        .unwrap()
        .success();
    if !linked {
        assert!(
            Command::new("cp")
                .arg("-a")
                .arg(&scope)
                .arg(&dest)
                .status()
                .unwrap()
                .success()
        );
    }
    let claude = dest.join(real.strip_prefix(&modules).unwrap());
    assert!(claude.is_file(), "{}", claude.display());
    let driver = dir.join("bin/hangar-driver");
    std::fs::create_dir_all(driver.parent().unwrap()).unwrap();
    std::fs::copy(common::driver_bin(), &driver).unwrap();
    (claude, driver)
}

/// A sandbox of a new local environment (`extra` in its YAML); its id.
fn local_sandbox(s: &Server, name: &str, extra: &str, repo: &Path) -> String {
    let env = s.home.path().join(format!("{name}.yaml"));
    std::fs::write(
        &env,
        format!("name: {name}\nprovider: local\nnetwork: host\n{extra}"),
    )
    .unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        name,
        "--repo",
        repo.to_str().unwrap(),
    ]);
    out.lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned()
}

/// A checkout under /tmp (a clone there running `.ci/run`): hangar's pinned Claude Code and
/// the driver live under /tmp, which a local sandbox has its own of. The harness's install
/// folder is bound in read-only at its own path, so turns run to their end, with the uid split
/// and without it; the agent cannot change what is bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_runs_in_a_local_sandbox_when_hangars_tools_live_under_tmp() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let tools = tempfile::Builder::new()
        .prefix("hangar-tools-")
        .tempdir_in("/tmp")
        .unwrap();
    let (claude, driver) = tools_copy(tools.path());
    let s = Server::start_with(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "id -u > uid.txt", "description": "who"}),
            ),
            Step::text("done").expect_tool_result(),
            Step::tool(
                "Bash",
                json!({"command": "id -u > uid.txt", "description": "who"}),
            ),
            Step::text("done again").expect_tool_result(),
        ]),
        vec![
            ("HANGAR_CLAUDE_BIN".into(), claude.display().to_string()),
            ("HANGAR_DRIVER_BIN".into(), driver.display().to_string()),
        ],
        None,
    );
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    for (name, extra, split) in [
        ("split", "", true),
        ("nosplit", "uid_split: false\n", false),
    ] {
        let sb = local_sandbox(&s, name, extra, repo.path());
        let (status, started) = s
            .call(
                "POST",
                "/v1/sessions",
                Some(json!({"sandbox": sb, "policy": "auto", "prompt": "who are you"})),
            )
            .await;
        assert_eq!(status, 201, "{name}: {started}");
        let turn = started["turn"]["id"].as_str().unwrap().to_owned();
        let t = s.turn_ended(&turn).await;
        assert_eq!(t["status"], 0, "{name}: {t}");
        let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
        let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
        let uid: u32 = std::fs::read_to_string(ws.join("uid.txt"))
            .unwrap_or_else(|e| panic!("{name}: the tool call did not run: {e}"))
            .trim()
            .parse()
            .unwrap();
        assert_eq!(uid != 0, split, "{name}: uid {uid}");
        // The harness's folder is read-only inside, even to hangar's user there.
        let out = s
            .hangar()
            .args(["sb", "exec", &sb, "--as", "hangar", "--"])
            .args([
                "sh",
                "-c",
                &format!(
                    "test -x '{}' && touch '{}/planted'",
                    claude.display(),
                    claude.parent().unwrap().display()
                ),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("Read-only file system"),
            "{name}: {err}"
        );
        s.ok(&["sb", "rm", &sb]);
    }
}

/// Where the agent cannot run the harness CLI (its copy in a folder closed to the agent's
/// uid), the turn is refused before it starts, naming the path and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_harness_the_agent_cannot_run_is_refused_before_it_starts() {
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    // A folder of root's, 0700: the agent's uid cannot enter it.
    let tools = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        tools.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let (claude, _) = tools_copy(tools.path());
    let s = Server::start_with(
        Script::new([Step::text("never")]),
        vec![("HANGAR_CLAUDE_BIN".into(), claude.display().to_string())],
        None,
    );
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let sb = local_sandbox(&s, "closed", "", repo.path());
    let (status, answer) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "hi"})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let text = answer["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        text.contains(&format!("the harness CLI {}", claude.display()))
            && text.contains(&format!(
                "{} is the last folder of its path it can see",
                tools.path().display()
            )),
        "{answer}"
    );
    assert!(s.fake.requests().is_empty());
    s.ok(&["sb", "rm", &sb]);
}

/// Looks for the run key everywhere an agent's process could, until `/workspace/.stop`.
const KEY_WATCH: &str = r#"touch /workspace/.watching
n=0
while [ ! -e /workspace/.stop ]; do
  for f in /run/hangar/*/key /run/hangar/*/staging/.key /dev/shm/* /tmp/*key*; do
    [ -f "$f" ] && { echo "found $f"; cat "$f"; }
  done
  n=$((n+1))
done 2>/dev/null
echo "looked $n times"
ls /run/hangar
"#;

/// Without the uid split the agent is the driver's own user and can read the run's control
/// folder, so the run key must never be there: a process of the agent's (`sb exec`) that looks
/// for it through the whole start of a turn, and the turn's own tool call after the driver
/// started, find nothing, though they see the run's control folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_uid_split_the_agent_never_finds_the_run_key() {
    let s = Server::start(Script::new([
        Step::tool(
            "Bash",
            // The search is a script the rules do not read (they deny reading hangar's own
            // files on the command line): what keeps the key away must be where it is.
            json!({"command": "sh /workspace/look.sh > found.txt 2>&1; true", "description": "look"}),
        ),
        Step::text("looked").expect_tool_result(),
    ]));
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    std::fs::write(
        repo.path().join("look.sh"),
        "for f in /run/hangar/*/key /dev/shm/*; do echo \"== $f\"; cat \"$f\"; done\nls /run/hangar\n",
    )
    .unwrap();
    let env = s.home.path().join("same.yaml");
    std::fs::write(
        &env,
        "name: same\nprovider: local\nnetwork: host\nuid_split: false\n",
    )
    .unwrap();
    s.ok(&["env", "apply", env.to_str().unwrap()]);
    let out = s.ok(&[
        "sb",
        "create",
        "--env",
        "same",
        "--repo",
        repo.path().to_str().unwrap(),
    ]);
    assert!(
        out.contains("uid split: off")
            && out.contains("warning: without the uid split")
            && out.contains("under policy governed it can read Tower's credential"),
        "{out}"
    );
    let sb = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox: "))
        .unwrap()
        .to_owned();
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    let watcher = s
        .hangar()
        .args(["sb", "exec", &sb, "--", "sh", "-c", KEY_WATCH])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    until("the watcher to look", async || {
        ws.join(".watching").exists().then_some(())
    })
    .await;
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "look for the key"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    std::fs::write(ws.join(".stop"), "").unwrap();
    let watched = watcher.wait_with_output().unwrap();
    let seen = String::from_utf8_lossy(&watched.stdout).into_owned();
    let looked: u64 = seen
        .split("looked ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{seen}"));
    assert!(
        looked > 20,
        "the watcher looked only {looked} times: {seen}"
    );
    // It saw the run's control folder: the key would have been in reach there.
    assert!(seen.contains(&format!("{run}.ctl")), "{seen}");
    let found = std::fs::read_to_string(ws.join("found.txt")).unwrap();
    assert!(found.contains(&format!("{run}.ctl")), "{found}");
    let hexkey = |text: &str| {
        text.lines()
            .any(|l| l.len() == 64 && l.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    assert!(
        !seen.contains("found ") && !hexkey(&seen),
        "the agent's process found the run key: {seen}"
    );
    assert!(!hexkey(&found), "the tool call found the run key: {found}");
    s.ok(&["sb", "rm", &sb]);
}

/// A sandbox made before `sudo: true` with an egress allowlist was refused (its stored spec,
/// written here into the database as an older hangar left it) starts no turn: the turn is
/// refused with what `env apply` says of that environment now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_made_before_sudo_with_an_allowlist_was_refused_starts_no_turn() {
    let s = Server::start(Script::new([Step::text("never")]));
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let sb = local_sandbox(&s, "older", "", repo.path());
    let db = s.home.path().join("hangar/hangar.db");
    let out = Command::new("sqlite3")
        .arg(&db)
        .arg(format!(
            "UPDATE sandboxes SET handle = json_set(handle, '$.env.sudo', json('true'), '$.env.egress', json('{{\"mode\":\"allowlist\",\"hosts\":[\"github.com\"]}}')) WHERE id = '{sb}'"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, answer) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "hi"})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let text = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("sudo: true gives the agent root in the sandbox")
            && text.contains("the turn is refused"),
        "{answer}"
    );
    assert!(s.fake.requests().is_empty());
    s.ok(&["sb", "rm", &sb]);
}

/// A run key left in a local sandbox's folder (hangar stopped between handing it over and the
/// run's tmux window taking it) is removed when the sandbox's next turn starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_key_left_in_a_local_sandboxs_folder_goes_at_its_next_turn() {
    let s = Server::start(Script::new([Step::text("done")]));
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let sb = local_sandbox(&s, "leftover", "", repo.path());
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    let host_dir = ws.parent().unwrap().to_owned();
    let left = host_dir.join("run_from_before.key");
    std::fs::write(&left, "0123").unwrap();
    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "auto", "prompt": "hi"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let t = s.turn_ended(&turn).await;
    assert_eq!(t["status"], 0, "{t}");
    assert!(!left.exists(), "{} is left", left.display());
    let keys: Vec<_> = std::fs::read_dir(&host_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".key"))
        .map(|e| e.path())
        .collect();
    assert!(keys.is_empty(), "{keys:?}");
    s.ok(&["sb", "rm", &sb]);
}

/// How many execs dockerd holds for container `name` (finished ones stay listed for minutes).
fn exec_count(name: &str) -> usize {
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{len .ExecIDs}}", name])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `HANGAR_DOCKER_MIRROR=stream` (issue 24, item 2): a real Claude Code turn in a docker sandbox
/// that sees no folder of this machine: the workspace was sent in, the run's control folder here
/// is a mirror of the one inside, carried over one long-lived exec (no exec made while the run
/// waits for its approval); the approval answered here reaches the driver, the tool runs as the
/// agent in the container's own workspace, and the turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_turn_in_a_streamed_docker_sandbox_with_an_approval() {
    if std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0") {
        eprintln!("HANGAR_TEST_DOCKER=0: skipped");
        return;
    }
    let s = Server::start_with(
        Script::new([
            Step::tool(
                "Bash",
                json!({"command": "echo made > made.txt && id -u > uid.txt", "description": "make"}),
            ),
            Step::text("made it"),
        ]),
        vec![("HANGAR_DOCKER_MIRROR".into(), "stream".into())],
        None,
    );
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let sb = s.sandbox_of(
        &format!(
            "name: streamed\nprovider: docker\nimage: {}\nnetwork: host\n",
            hangar_testkit::claude_image().unwrap()
        ),
        repo.path(),
    );
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let container = format!("hangar-{}", v["sandbox"]["id"].as_str().unwrap());
    // Nothing of this machine is mounted in the container.
    let mounts = s.ok(&["sb", "exec", &sb, "--", "cat", "/proc/self/mountinfo"]);
    let home = s.home.path().display().to_string();
    assert!(!mounts.contains(&home), "{mounts}");
    assert!(!mounts.contains(" /workspace "), "{mounts}");

    let (status, started) = s
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({"sandbox": sb, "policy": "ask", "prompt": "make a file"})),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let approval = until("the approval", async || {
        let (_, a) = s
            .call("GET", &format!("/v1/runs/{run}/approvals"), None)
            .await;
        a["approvals"].as_array().and_then(|v| v.first().cloned())
    })
    .await;
    // The run's control folder here is the mirror: a folder of its own, not a link into the
    // sandbox's.
    let ctl = s.home.path().join(format!("hangar/runs/{run}.ctl"));
    let meta = std::fs::symlink_metadata(&ctl).unwrap();
    assert!(meta.is_dir(), "{} is not a folder", ctl.display());
    // Waiting, the run costs no exec (a poll would make one every 150 ms).
    let before = exec_count(&container);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let made = exec_count(&container) - before;
    assert!(made <= 1, "{made} execs in 1.5 s while the run waited");

    let (status, r) = s
        .call(
            "POST",
            &format!(
                "/v1/runs/{run}/approvals/{}",
                approval["request_id"].as_str().unwrap()
            ),
            Some(json!({"decision": "allow"})),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let t = until("the turn to end", async || {
        let (_, t) = s.call("GET", &format!("/v1/turns/{turn}"), None).await;
        (t["state"] == "ended").then_some(t)
    })
    .await;
    assert_eq!(t["status"], 0, "{t}");
    let out = s.ok(&["sb", "exec", &sb, "--", "sh", "-c", "cat made.txt uid.txt"]);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("made"), "{out}");
    let uid: u32 = lines.next().unwrap().parse().unwrap();
    assert_ne!(uid, 0, "the harness ran as root");
    assert!(!repo.path().join("made.txt").exists());
    // The run log came over the stream whole: the tool's result and the turn's end are events.
    let log = std::fs::read_to_string(ctl.join("run.log")).unwrap();
    assert!(log.contains("made it"), "{log}");
    s.ok(&["sb", "rm", &sb]);
}
