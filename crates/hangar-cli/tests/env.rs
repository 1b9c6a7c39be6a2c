//! `hangar env apply | list | show` against a fresh `$HANGAR_HOME` with no server (the API is
//! served in-process and the store made on first use), and the validation errors a person sees.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::process::{Command, Output};

fn hangar(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hangar"))
        .args(args)
        .env("HANGAR_HOME", home)
        // Nothing listens here: every command serves the API itself.
        .env("HANGAR_URL", "http://127.0.0.1:9")
        .env_remove("HANGAR_TOKEN")
        .env_remove("HANGAR_DATABASE_URL")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn apply_list_show_and_replace() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("dev.yaml");
    std::fs::write(
        &file,
        "name: dev\nprovider: docker\nimage: hangar-base:bookworm\nnetwork: host\nresources: {memory: 1g, pids: 256}\n",
    )
    .unwrap();
    let out = hangar(home.path(), &["env", "apply", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("environment: dev"));
    assert_eq!(lines.next(), Some("created"));

    let out = hangar(home.path(), &["env", "show", "dev", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let spec = &v["spec"];
    assert_eq!(spec["provider"], "docker");
    assert_eq!(spec["egress"], "open", "network: host means open egress");
    assert_eq!(spec["uid_split"], true, "the default");
    assert_eq!(spec["resources"]["memory"], 1u64 << 30);

    // Replacing keeps one environment, with the new spec.
    std::fs::write(&file, "name: dev\nprovider: local\n").unwrap();
    let out = hangar(home.path(), &["env", "apply", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("replaced"));
    let out = hangar(home.path(), &["env", "list"]);
    let list = text(&out.stdout);
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(list.starts_with("dev  local  egress none"), "{list}");
    let out = hangar(home.path(), &["env", "show", "dev"]);
    assert!(text(&out.stdout).contains("provider: local"));

    // The audit log has both.
    let out = hangar(home.path(), &["audit"]);
    let audit = text(&out.stdout);
    assert!(
        audit.contains("environment.created") && audit.contains("environment.replaced"),
        "{audit}"
    );

    let out = hangar(home.path(), &["env", "show", "nope"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(text(&out.stderr).contains("no environment nope"));
}

#[test]
fn invalid_environments_are_refused_naming_the_key() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("bad.yaml");
    for (yaml, expect) in [
        (
            "name: dev\nprovider: docker\nimagee: x\n",
            "imagee: unknown key; allowed: name, provider, image",
        ),
        (
            "name: dev\nprovider: docker\n",
            "image: required for provider docker",
        ),
        (
            "name: dev\nprovider: local\nimage: x\n",
            "image: the local provider",
        ),
        (
            "name: dev\nprovider: docker\nimage: i\nnetwork: host\negress: none\n",
            "network: host shares the host's network",
        ),
        (
            "name: dev\nprovider: kubernetes\nimage: i\nuid_split: true\n",
            "uid_split: provider kubernetes runs one uid",
        ),
        (
            "name: dev\nprovider: docker\nimage: i\nresources: {memory: lots}\n",
            "resources.memory:",
        ),
        (
            "name: dev\nprovider: docker\nimage: i\nsudo: true\negress: {allowlist: [github.com]}\n",
            "sudo: true gives the agent root in the sandbox, and root can take the egress proxy's port",
        ),
        ("name: dev\nprovider: [local\n", "not valid YAML"),
        (
            "name: dev\nprovider: local\ngovernance: {rules: {add: [{id: no-cows, reason: moo}]}}\n",
            "governance.rules: rule \"no-cows\" has no condition",
        ),
        (
            "name: dev\nprovider: local\ngovernance: {rules: {disable: [no-such-rule]}}\n",
            "governance.rules:",
        ),
    ] {
        std::fs::write(&file, yaml).unwrap();
        let out = hangar(home.path(), &["env", "apply", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(expect), "{yaml}: {err}");
        assert!(err.contains("bad.yaml"), "names the file: {err}");
    }
    let out = hangar(home.path(), &["env", "list"]);
    assert_eq!(text(&out.stdout), "", "nothing was stored");
}

/// With no server, a command calls the API's router in its own process: it binds no port and
/// connects to none but the one it tried first (issue 19, Deliver 6). Seen by strace.
#[test]
fn with_no_server_a_command_calls_the_api_in_process_and_binds_no_port() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("dev.yaml");
    std::fs::write(&file, "name: dev\nprovider: local\n").unwrap();
    let trace = home.path().join("trace");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=bind,listen", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_hangar"))
        .args(["env", "apply", file.to_str().unwrap()])
        .env("HANGAR_HOME", home.path())
        .env("HANGAR_URL", "http://127.0.0.1:9")
        .env_remove("HANGAR_TOKEN")
        .env_remove("HANGAR_DATABASE_URL")
        .output()
        .expect("strace is installed (scripts/install-tools)");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().next(), Some("environment: dev"));
    let calls = std::fs::read_to_string(&trace).unwrap();
    let inet: Vec<&str> = calls
        .lines()
        .filter(|l| l.contains("AF_INET") || l.contains("listen("))
        .collect();
    assert!(inet.is_empty(), "the command bound or listened: {inet:#?}");
    // And it did its work: the environment is stored.
    let out = hangar(home.path(), &["env", "list"]);
    assert!(
        text(&out.stdout).starts_with("dev  local"),
        "{}",
        text(&out.stdout)
    );
}
