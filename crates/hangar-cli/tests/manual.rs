//! What the package ships about hangar, generated from the command definition: completion
//! scripts (`hangar completions SHELL`) and man pages (`hangar man DIR`).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::process::Command;

fn hangar(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hangar"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn completions_know_the_commands_and_their_flags() {
    for (shell, marker) in [
        ("bash", "_hangar()"),
        ("zsh", "#compdef hangar"),
        ("fish", "complete -c hangar"),
    ] {
        let out = hangar(&["completions", shell]);
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{shell}: no {marker:?}");
        for word in ["approve", "sb", "unverified-harness"] {
            assert!(text.contains(word), "{shell} completion lacks {word}");
        }
    }
    let out = hangar(&["completions", "tcsh"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_pages_cover_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = hangar(&["man", dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in [
        "hangar.1",
        "hangar-run.1",
        "hangar-sb-create.1",
        "hangar-serve.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page))
            .unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".SH NAME"), "{page} has no NAME section");
    }
    let serve = std::fs::read_to_string(dir.path().join("hangar-serve.1")).unwrap();
    assert!(
        serve.contains("HANGAR_DATABASE_URL"),
        "hangar-serve.1 lacks its settings"
    );
    assert!(
        !dir.path().join("hangar-man.1").exists(),
        "the hidden command got a page"
    );
}

/// Every command's `--help` ends with the variables it reads.
#[test]
fn every_commands_help_lists_the_variables_it_reads() {
    let top = hangar(&["--help"]);
    let text = String::from_utf8_lossy(&top.stdout);
    let commands: Vec<String> = text
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() > 20, "{commands:?}");
    for c in &commands {
        let out = hangar(&[c, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("Environment:") && help.contains("HANGAR_URL"),
            "hangar {c} --help:\n{help}"
        );
    }
    let run = String::from_utf8_lossy(&hangar(&["run", "--help"]).stdout).into_owned();
    for want in ["HANGAR_HARNESS", "HANGAR_CLAUDE_BIN", "HANGAR_DRIVER_BIN"] {
        assert!(run.contains(want), "run --help lacks {want}");
    }
    let create = String::from_utf8_lossy(&hangar(&["sb", "create", "--help"]).stdout).into_owned();
    assert!(create.contains("DOCKER_HOST"), "{create}");
}

/// `$XDG_CONFIG_HOME/hangar/config.toml`: its `run.harness` is `hangar run`'s default (seen
/// here by `--codex-config`, which only a Codex turn takes), a variable set in the environment
/// wins over it, and a key it does not know stops the command naming the file and the key.
#[test]
fn the_clis_config_file_sets_defaults_the_environment_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("hangar");
    std::fs::create_dir_all(&conf).unwrap();
    let file = conf.join("config.toml");
    let run = |vars: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hangar"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .envs(vars.iter().copied())
            .args([
                "run",
                "--codex-config",
                "model=\"m\"",
                "--dir",
                "/nonexistent-dir",
                "hi",
            ])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--codex-config is for --harness codex"),
        "{err}"
    );

    std::fs::write(&file, "[run]\nharness = \"codex\"\n").unwrap();
    let (code, err) = run(&[]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("/nonexistent-dir"),
        "the file's harness was not used: {err}"
    );

    let (_, err) = run(&[("HANGAR_HARNESS", "claude")]);
    assert!(
        err.contains("--codex-config is for --harness codex"),
        "the variable did not win: {err}"
    );

    std::fs::write(&file, "[run]\nharnes = \"codex\"\n").unwrap();
    let (code, err) = run(&[]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains(file.to_str().unwrap()) && err.contains("`run.harnes`"),
        "{err}"
    );
}

/// `hangar credential list --json`: one object per credential, its name only, never its value.
#[test]
fn credential_list_has_json_lines_without_values() {
    let dir = tempfile::tempdir().unwrap();
    let hangar = |args: &[&str], stdin: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("HANGAR_HOME", dir.path().join("hangar"))
            .env("HANGAR_URL", "http://127.0.0.1:9")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = c.stdin.take().unwrap();
        std::io::Write::write_all(&mut input, stdin.unwrap_or("").as_bytes()).unwrap();
        drop(input);
        c.wait_with_output().unwrap()
    };
    let set = hangar(
        &[
            "credential",
            "set",
            "MY_TOKEN",
            "--person",
            "ada@example.com",
        ],
        Some("s3cret-value"),
    );
    assert!(set.status.success());
    let out = hangar(
        &[
            "credential",
            "list",
            "--person",
            "ada@example.com",
            "--json",
        ],
        None,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![serde_json::json!({"name": "MY_TOKEN"})],
        "{text}"
    );
    assert!(!text.contains("s3cret"));
}
