//! The suite itself: the pinned versions pass and give exactly the built-in table the control
//! plane trusts; a CLI that does not behave (it runs tool calls without asking) fails it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use hangar_conformance::{Harness, Tools, run_suite};
use hangar_control::conformance::{SUITE, builtin, harness_version};
use hangar_testkit::{CLAUDE_CODE_VERSION, CODEX_VERSION, claude_bin, codex_bin, workspace_root};

fn built(var: &str, name: &str) -> PathBuf {
    let p = std::env::var_os(var).filter(|v| !v.is_empty()).map_or_else(
        || workspace_root().join("target/debug").join(name),
        PathBuf::from,
    );
    assert!(
        p.exists(),
        "no {name} at {}: cargo build -p hangar-driver -p hangar-hook",
        p.display()
    );
    std::path::absolute(&p).unwrap()
}

fn tools(bin: PathBuf) -> Tools {
    Tools {
        bin: std::path::absolute(bin).unwrap(),
        driver: built("HANGAR_DRIVER_BIN", "hangar-driver"),
        tower_hook: built("HANGAR_TOWER_HOOK_BIN", "hangar-tower-hook"),
    }
}

#[test]
fn the_pinned_versions_pass_and_give_the_built_in_table() {
    for (harness, bin, pinned) in [
        (Harness::Claude, claude_bin().unwrap(), CLAUDE_CODE_VERSION),
        (Harness::Codex, codex_bin().unwrap(), CODEX_VERSION),
    ] {
        let version = harness_version(&bin);
        assert_eq!(version, pinned, "the installed CLI is the pinned one");
        let got = run_suite(harness, &version, &tools(bin), |_, _| {});
        assert!(got.passed, "{got:#?}");
        let want = builtin()
            .into_iter()
            .find(|r| r.harness == harness.as_str() && r.version == version)
            .unwrap_or_else(|| panic!("no built-in result for {} {version}", harness.as_str()));
        assert_eq!(
            got, want,
            "the suite's run differs from crates/hangar-control/src/conformance/pinned.json: \
             update it from `scripts/conformance` if the change is meant"
        );
        assert_eq!(got.suite, SUITE);
    }
}

#[test]
fn a_cli_that_runs_tool_calls_without_asking_fails_the_approval_capabilities() {
    // Claude Code with permission prompts switched off behind the driver's back: under `ask` the
    // command runs before anyone answers.
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("claude");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec '{}' \"$@\" --dangerously-skip-permissions\n",
            claude_bin().unwrap().canonicalize().unwrap().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let got = run_suite(Harness::Claude, "wrapped", &tools(wrapper), |_, _| {});
    assert!(!got.passed, "{got:#?}");
    assert!(
        got.capabilities["approval_allow"].starts_with("fails:"),
        "{got:#?}"
    );
    assert!(
        got.capabilities["approval_deny"].starts_with("fails:"),
        "{got:#?}"
    );
}
