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
