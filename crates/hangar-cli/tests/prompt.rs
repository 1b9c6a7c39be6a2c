//! `hangar run`'s inline approval prompt (issue 23, item 7), on a real terminal: `hangar run`
//! runs in tmux, the test reads the screen and types. The prompt shows the whole command; `y`
//! allows the waiting request (the tool runs); `n` and a reason deny it (the tool does not run,
//! the model hears the reason). Without a terminal there is no prompt (the other `hangar run`
//! tests read stdout from a pipe).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env};
use serde_json::json;

struct Tmux {
    socket: String,
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-J", "-t", "run", "-S", "-200"])
    }

    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.screen().contains(what) {
            assert!(
                Instant::now() < deadline,
                "{what:?} never showed:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn type_line(&self, text: &str) {
        if !text.is_empty() {
            self.cmd(&["send-keys", "-t", "run", "-l", text]);
        }
        self.cmd(&["send-keys", "-t", "run", "Enter"]);
    }
}

/// `hangar run --policy ask` on a Bash call, in tmux; the terminal and where its exit status
/// will be written.
fn run_in_tmux(home: &Path, work: &Path, fake: &FakeAnthropic) -> (Tmux, std::path::PathBuf) {
    let exit = home.join("exit");
    let mut script = String::from("#!/bin/sh\n");
    let vars = claude_env(&fake.base_url(), &home.join("claude-config"))
        .into_iter()
        .chain([
            ("HOME".to_owned(), home.display().to_string()),
            (
                "HANGAR_HOME".to_owned(),
                home.join("hangar").display().to_string(),
            ),
            (
                "HANGAR_DRIVER_BIN".to_owned(),
                common::driver_bin().display().to_string(),
            ),
            (
                "HANGAR_CLAUDE_BIN".to_owned(),
                claude_bin().unwrap().display().to_string(),
            ),
            (
                "HANGAR_URL".to_owned(),
                format!("http://127.0.0.1:{}", free_port()),
            ),
        ]);
    for (k, v) in vars {
        script.push_str(&format!("export {k}='{v}'\n"));
    }
    script.push_str(&format!(
        "'{}' run --no-sandbox --policy ask --dir '{}' 'make the file'\necho \"EXIT=$?\" > '{}'\nsleep 600\n",
        env!("CARGO_BIN_EXE_hangar"),
        work.display(),
        exit.display()
    ));
    let file = home.join("run.sh");
    std::fs::write(&file, script).unwrap();
    let t = Tmux {
        socket: format!("hangar-prompt-{}-{}", std::process::id(), free_port()),
    };
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "run",
        "-x",
        "200",
        "-y",
        "50",
        "sh",
        file.to_str().unwrap(),
    ]);
    (t, exit)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn exit_status(exit: &Path, t: &Tmux) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(s) = std::fs::read_to_string(exit) {
            return s.trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "hangar run did not end:\n{}",
            t.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "do it"}))
}

#[test]
fn y_at_the_prompt_allows_the_request() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // Long: what the prompt shows is the whole command, not the progress line's first 200
    // characters (an agent could hide the part that matters past them).
    let long = format!("echo made > made.txt # {} END-OF-COMMAND", "x".repeat(300));
    let fake = FakeAnthropic::start(Script::new([bash(&long), Step::text("made it")])).unwrap();
    let (t, exit) = run_in_tmux(home.path(), work.path(), &fake);
    t.wait_for("allow it?");
    assert!(t.screen().contains("END-OF-COMMAND"), "{}", t.screen());
    assert!(
        !work.path().join("made.txt").exists(),
        "it ran before the answer"
    );
    t.type_line("y");
    assert_eq!(exit_status(&exit, &t), "EXIT=0", "{}", t.screen());
    assert!(work.path().join("made.txt").exists(), "{}", t.screen());
}

#[test]
fn n_and_a_reason_at_the_prompt_deny_the_request() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let fake = FakeAnthropic::start(Script::new([
        bash("echo made > made.txt"),
        Step::text("understood"),
    ]))
    .unwrap();
    let (t, exit) = run_in_tmux(home.path(), work.path(), &fake);
    t.wait_for("allow it?");
    t.type_line("n");
    t.wait_for("reason (Enter for none)");
    t.type_line("not on a friday");
    assert_eq!(exit_status(&exit, &t), "EXIT=0", "{}", t.screen());
    assert!(
        !work.path().join("made.txt").exists(),
        "the denied tool ran"
    );
    let all: String = fake.requests().iter().map(|r| r.all_text()).collect();
    assert!(
        all.contains("not on a friday"),
        "the model did not hear the reason"
    );
}
