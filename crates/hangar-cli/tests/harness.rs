//! `hangar harness check` and `hangar harness list` (issue 23, item 4): a Claude Code version
//! hangar has never seen is refused, and the refusal names the command; the command runs the
//! conformance suite built into `hangar` (its scripted model inside) against that CLI and
//! records the result; from then on the version runs turns, and the list shows it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env};
use serde_json::{Value, json};

/// The pinned Claude Code behind a package that says it is version `v` (as a CLI installed from
/// the npm registry at another version would).
fn claude_of_version(dir: &Path, v: &str) -> PathBuf {
    std::fs::write(dir.join("package.json"), json!({"version": v}).to_string()).unwrap();
    let bin = dir.join("claude");
    let real = claude_bin().unwrap().canonicalize().unwrap();
    std::fs::write(
        &bin,
        format!("#!/bin/sh\nexec '{}' \"$@\"\n", real.display()),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

struct Env {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
    claude: PathBuf,
    _pkg: tempfile::TempDir,
}

impl Env {
    fn hangar(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        drop(l);
        let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HANGAR_HOME", self.home.path().join("hangar"))
            .env("HANGAR_URL", url)
            .env("HANGAR_DRIVER_BIN", common::driver_bin())
            .env("HANGAR_TOWER_HOOK_BIN", common::hook_bin())
            .env("HANGAR_CLAUDE_BIN", &self.claude)
            .envs(claude_env(
                &self.fake.base_url(),
                &self.home.path().join("claude-config"),
            ))
            .args(args);
        c
    }

    fn run(&self) -> Output {
        let dir = self.work.path().to_str().unwrap().to_owned();
        self.hangar(&[
            "run",
            "--dir",
            &dir,
            "--no-sandbox",
            "--policy",
            "auto",
            "hi",
        ])
    }
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_version_checked_with_hangar_harness_check_runs_turns_and_is_listed() {
    let pkg = tempfile::tempdir().unwrap();
    let version = "2.1.328-hangar-check";
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        work: tempfile::tempdir().unwrap(),
        fake: FakeAnthropic::start(Script::new([Step::text("ran after its check")])).unwrap(),
        claude: claude_of_version(pkg.path(), version),
        _pkg: pkg,
    };

    let refused = env.run();
    let (_, err) = text(&refused);
    assert!(!refused.status.success(), "an unchecked version ran: {err}");
    assert!(
        err.contains(&format!("claude {version} has not passed"))
            && err.contains("hangar harness check --claude PATH"),
        "{err}"
    );
    assert!(
        env.fake.requests().is_empty(),
        "the harness reached the model"
    );

    let listed = |env: &Env| -> Value {
        let o = env.hangar(&["harness", "list", "--json"]);
        assert!(o.status.success(), "{:?}", text(&o));
        let (out, _) = text(&o);
        out.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|r| r["version"] == version)
            .unwrap_or_else(|| panic!("{version} is not listed: {out}"))
    };
    let before = listed(&env);
    assert_eq!(before["runs_turns"], false, "{before}");
    assert_eq!(before["on_path"], true, "{before}");

    let checked = env.hangar(&["harness", "check", "--claude", env.claude.to_str().unwrap()]);
    let (out, err) = text(&checked);
    assert!(checked.status.success(), "{out}{err}");
    for want in [
        "ok   approval_allow",
        "ok   hook_fail_closed",
        &format!("claude {version}: suite passed"),
        "recorded",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }

    let after = listed(&env);
    assert_eq!(after["runs_turns"], true, "{after}");
    assert!(
        after["source"].as_str().unwrap().starts_with("recorded by"),
        "{after}"
    );

    let ran = env.run();
    let (out, err) = text(&ran);
    assert!(ran.status.success(), "{out}{err}");
    assert!(out.contains("ran after its check"), "{out}");
}

/// The operator's list of harness versions (`harness_versions`, `HANGAR_HARNESS_VERSIONS`):
/// a version off it is refused even when it passed the suite and even with
/// `--unverified-harness`; on it, it runs.
#[test]
fn a_version_off_the_servers_list_is_refused_even_unverified() {
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        work: tempfile::tempdir().unwrap(),
        fake: FakeAnthropic::start(Script::new([Step::text("on the list")])).unwrap(),
        claude: claude_bin().unwrap(),
        _pkg: tempfile::tempdir().unwrap(),
    };
    let dir = env.work.path().to_str().unwrap().to_owned();
    let run = |list: &str, extra: &[&str]| {
        let mut args = vec!["run", "--dir", &dir, "--no-sandbox", "--policy", "auto"];
        args.extend_from_slice(extra);
        args.push("hi");
        let mut c = env.command(&args);
        c.env("HANGAR_HARNESS_VERSIONS", list);
        c.output().unwrap()
    };
    for extra in [&[][..], &["--unverified-harness"][..]] {
        let refused = run("codex, claude 2.1.1", extra);
        let (_, err) = text(&refused);
        assert!(!refused.status.success(), "{extra:?} ran off the list");
        assert!(
            err.contains("is not among the harness versions this server allows"),
            "{err}"
        );
    }
    assert!(env.fake.requests().is_empty());
    let ran = run(
        &format!("claude {}", hangar_testkit::CLAUDE_CODE_VERSION),
        &[],
    );
    let (out, err) = text(&ran);
    assert!(ran.status.success(), "{out}{err}");
}
