//! The person's seat in a real terminal (issue 21): `hangar run`, `hangar log --follow`,
//! `hangar approvals` and `hangar sessions` in tmux panes of 160 x 48 (the real driver, the real
//! Claude Code, the scripted model), read off the screen as a person sees them: nothing wraps
//! mid-id, tables are aligned under their headers, the hint's short ids answer the request, the
//! state is coloured on a terminal and not with `NO_COLOR`. Each screen is kept under
//! `target/screenshots/terminal/` (or `$HANGAR_SCREENSHOTS_DIR/terminal`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hangar_testkit::Terminal;
use hangar_testkit::{FakeAnthropic, Script, Step, claude_bin, claude_env, workspace_root};
use serde_json::json;

const COLS: u16 = 160;
const ROWS: u16 = 48;

fn driver_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HANGAR_DRIVER_BIN").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    workspace_root().join("target/debug/hangar-driver")
}

fn keep(name: &str, screen: &str) {
    let dir = std::env::var_os("HANGAR_SCREENSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/screenshots"))
        .join("terminal");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.txt")), screen).unwrap();
}

struct Seat {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    fake: FakeAnthropic,
    url: String,
}

impl Seat {
    fn new(script: Script) -> Seat {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        drop(l);
        Seat {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            fake: FakeAnthropic::start(script).unwrap(),
            url,
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".into(), self.home.path().display().to_string()),
            (
                "HANGAR_HOME".into(),
                self.home.path().join("hangar").display().to_string(),
            ),
            ("HANGAR_URL".into(), self.url.clone()),
            (
                "HANGAR_DRIVER_BIN".into(),
                driver_bin().display().to_string(),
            ),
            (
                "HANGAR_CLAUDE_BIN".into(),
                claude_bin().unwrap().display().to_string(),
            ),
            ("TERM".into(), "xterm-256color".into()),
        ];
        v.extend(claude_env(
            &self.fake.base_url(),
            &self.home.path().join("claude-config"),
        ));
        v
    }

    /// `hangar ARGS` in a terminal of its own (its screen stays after it exits, with its exit
    /// status as the last line).
    fn terminal(&self, name: &str, args: &[&str], extra_env: &[(&str, &str)]) -> Terminal {
        let dir = self.home.path().join(format!("tty-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut argv = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            "\"$@\"; echo \"[exit $?]\"; sleep 3600".to_owned(),
            "sh".to_owned(),
            "env".to_owned(),
            "-i".to_owned(),
        ];
        for (k, v) in self.env() {
            argv.push(format!("{k}={v}"));
        }
        for (k, v) in extra_env {
            argv.push(format!("{k}={v}"));
        }
        argv.push(env!("CARGO_BIN_EXE_hangar").to_owned());
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        Terminal::start(&dir, &argv, COLS, ROWS).unwrap()
    }

    fn hangar(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_hangar"))
            .env_clear()
            .envs(self.env())
            .args(args)
            .output()
            .unwrap()
    }
}

fn until_screen(term: &Terminal, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let screen = term.screen();
        if ok(&screen) {
            return screen;
        }
        assert!(
            Instant::now() < deadline,
            "the terminal never showed {what}:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(150));
    }
}

fn bash(cmd: &str) -> Step {
    Step::tool("Bash", json!({"command": cmd, "description": "run it"}))
}

/// The screen's lines, without the blank ones tmux pads it with.
fn lines(screen: &str) -> Vec<&str> {
    screen.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn run_follow_approvals_and_sessions_read_well_in_a_terminal() {
    // Three runs wait at once (the closing note's capture): `hangar run`'s, then two sessions
    // started through the server it serves.
    let seat = Seat::new(Script::new([
        bash("echo hi > made.txt"),
        bash("echo b > b.txt"),
        bash("echo c > c.txt"),
        Step::text("made it"),
        Step::text("made it"),
        Step::text("made it"),
    ]));
    let work = seat.work.path().display().to_string();
    let run_term = seat.terminal(
        "run",
        &["run", "--dir", &work, "--policy", "ask", "make a file"],
        &[],
    );
    // The hint fits the terminal on one line each, with ids cut to prefixes that name them.
    let screen = until_screen(&run_term, "the answer hint", |s| {
        s.contains("answer: hangar approve")
    });
    keep("run-waiting", &screen);
    let run = screen
        .lines()
        .find_map(|l| l.strip_prefix("run: "))
        .unwrap()
        .trim()
        .to_owned();
    let hint = screen
        .lines()
        .find(|l| l.contains("answer: hangar approve"))
        .unwrap();
    assert!(hint.len() < usize::from(COLS), "the hint wraps: {hint:?}");
    let words: Vec<&str> = hint.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "approve").unwrap();
    let (short_run, short_req) = (words[at + 1], words[at + 2]);
    assert!(
        run.starts_with(short_run) && short_run.len() < run.len(),
        "{short_run} / {run}"
    );

    // A second terminal follows the run, readably (not stream-json).
    let follow = seat.terminal("follow", &["log", short_run, "--follow"], &[]);
    let shown = until_screen(&follow, "the waiting request", |s| {
        s.contains("approval waiting:")
    });
    assert!(
        !shown.lines().any(|l| l.trim_start().starts_with('{')),
        "raw lines:\n{shown}"
    );

    // Two more sessions, each waiting on its own request.
    let pending = |seat: &Seat| -> usize {
        let out = seat.hangar(&["approvals", "--json"]);
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    for (i, prompt) in ["make b", "make c"].iter().enumerate() {
        let out = seat.hangar(&[
            "session", "start", "--dir", &work, "--policy", "ask", prompt,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while pending(&seat) < i + 2 {
            assert!(
                Instant::now() < deadline,
                "the request of {prompt:?} never waited"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // Every pending request, as a table under its header: three runs, oldest first.
    let approvals = seat.terminal("approvals", &["approvals"], &[]);
    let table = until_screen(&approvals, "the table", |s| s.contains("[exit 0]"));
    keep("approvals", &table);
    let rows = lines(&table);
    assert_eq!(rows.len(), 5, "a header, three rows, the exit:\n{table}");
    assert!(
        rows[0].starts_with("RUN") && rows[0].contains("WAITING"),
        "{table}"
    );
    assert!(
        rows[1].starts_with(short_run) && rows[1].contains(short_req),
        "{table}"
    );
    for r in &rows[1..4] {
        assert_eq!(rows[0].find("TOOL"), r.find("Bash"), "{table}");
    }
    let others: Vec<String> = rows[2..4].iter().map(|r| (*r).to_owned()).collect();

    // The sessions, with the waiting one coloured on a terminal, and not under NO_COLOR.
    let sessions = seat.terminal("sessions", &["sessions"], &[]);
    let list = until_screen(&sessions, "the list", |s| s.contains("[exit 0]"));
    keep("sessions", &list);
    let rows = lines(&list);
    assert!(
        rows[0].starts_with("SESSION") && rows[0].contains("STATE"),
        "{list}"
    );
    assert_eq!(rows[0].find("STATE"), rows[1].find("waiting"), "{list}");
    // Three waiting sessions, the newest first.
    assert!(
        rows[1].contains("make c") && rows[3].contains("make a file"),
        "{list}"
    );
    assert!(rows[1..4].iter().all(|r| r.contains(" waiting ")), "{list}");
    assert!(
        sessions
            .screen_styled()
            .contains("\u{1b}[1m\u{1b}[33mwaiting")
            || sessions.screen_styled().contains("\u{1b}[1;33mwaiting"),
        "not coloured:\n{:?}",
        sessions.screen_styled()
    );
    let plain = seat.terminal("plain", &["sessions"], &[("NO_COLOR", "1")]);
    until_screen(&plain, "the list", |s| s.contains("[exit 0]"));
    assert!(
        !plain.screen_styled().contains("\u{1b}[3"),
        "coloured under NO_COLOR:\n{:?}",
        plain.screen_styled()
    );

    // The hint's short ids answer the request.
    let out = seat.hangar(&["approve", short_run, short_req]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = until_screen(&run_term, "the turn's end", |s| s.contains("[exit 0]"));
    keep("run-ended", &done);
    assert!(done.contains("turn ended"), "{done}");
    let followed = until_screen(&follow, "the end, followed", |s| s.contains("[exit 0]"));
    keep("log-follow", &followed);
    assert!(followed.contains("result: success made it"), "{followed}");
    assert!(Path::new(&seat.work.path().join("made.txt")).exists());
    // The other two, answered by the prefixes the table printed.
    for r in &others {
        let cells: Vec<&str> = r.split_whitespace().collect();
        let out = seat.hangar(&["approve", cells[0], cells[5]]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
