//! The conformance suite per harness CLI version (#9 item 5): the same scenarios run against any
//! Claude Code or Codex binary, with hangar's real driver and the scripted model (the only part
//! replaced), and say which capabilities hold for that version:
//!
//! | capability | what must happen |
//! | --- | --- |
//! | `approval_allow` | under `ask` the tool call waits for a person; approved, it runs |
//! | `approval_deny` | denied, it does not run and the model hears the reason |
//! | `steer` | a message sent while the model streams reaches the model in the same turn |
//! | `interrupt` | an interrupt ends the turn with status 130 |
//! | `resume` | the next turn resumes the conversation: the model sees the first turn |
//! | `verify` | the job's check fails once, its output goes back to the model, then it passes |
//! | `hook_fail_closed` | Claude Code: the Tower hook failing (Tower answers 500, or hangs up) blocks the tool call; Codex has no such hook, so hangar refuses turns that require it (`n/a`) |
//! | `repo_settings` | repository settings cannot loosen governance: with hostile `.claude/settings.json`, `.claude/settings.local.json`, `.mcp.json`, `.codex/config.toml`, `.codex/hooks.json`, `.codex/rules/`, `AGENTS.md` in the work folder and hostile `~/.claude/settings.json`, `~/.claude.json`, `~/.codex/config.toml` (and `CLAUDE_CONFIG_DIR`, `CODEX_HOME`) in the home, under `ask` the call still waits for the person, no hostile hook, notify, helper or MCP command ran, and a second scripted model they name gets no request |
//!
//! The suite passes when no capability fails. The control plane refuses a version whose suite has
//! not passed (see `hangar_control::conformance`); `--record` stores this run's result for it.
//!
//! Safety: every command the scripted model asks for writes inside the scenario's own temp
//! folder; HOME is a temp folder too.

mod rig;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hangar_control::conformance::{CAPABILITIES, SUITE, SuiteResult};
use hangar_protocol::Kind;
use hangar_protocol::command::body;
use hangar_testkit::{
    FakeAnthropic, FakeOpenAi, Script, Step, TOWER_KEY, TowerDouble, TowerFault, hostile,
};
use serde_json::json;

use rig::{Check, Rig, text};

/// The two harnesses: hangar's shared word.
pub use hangar_protocol::Harness;

/// What the suite runs: the CLI under test, the driver, the Tower hook.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The harness CLI (`claude` or `codex`) under test.
    pub bin: PathBuf,
    pub driver: PathBuf,
    pub tower_hook: PathBuf,
}

/// What one scenario found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    Holds,
    Fails(String),
    NotApplicable(String),
}

impl Found {
    pub fn as_text(&self) -> String {
        match self {
            Found::Holds => "holds".into(),
            Found::Fails(why) => format!("fails: {why}"),
            Found::NotApplicable(why) => format!("n/a: {why}"),
        }
    }
}

/// Runs every scenario for `harness` at `version`, calling `progress` as each one ends.
pub fn run_suite(
    harness: Harness,
    version: &str,
    tools: &Tools,
    mut progress: impl FnMut(&str, &Found),
) -> SuiteResult {
    let mut capabilities = BTreeMap::new();
    let mut passed = true;
    for &name in CAPABILITIES {
        let found = match run_one(name, harness, tools) {
            Ok(f) => f,
            Err(why) => Found::Fails(why),
        };
        progress(name, &found);
        passed &= !matches!(found, Found::Fails(_));
        capabilities.insert(name.to_owned(), found.as_text());
    }
    SuiteResult {
        harness: harness.as_str().into(),
        version: version.into(),
        suite: SUITE,
        passed,
        capabilities,
    }
}

fn run_one(name: &str, h: Harness, t: &Tools) -> Check<Found> {
    match name {
        "approval_allow" => approval(h, t, true),
        "approval_deny" => approval(h, t, false),
        "steer" => steer(h, t),
        "interrupt" => interrupt(h, t),
        "resume" => resume(h, t),
        "verify" => verify(h, t),
        "hook_fail_closed" => hook_fail_closed(h, t),
        "repo_settings" => repo_settings(h, t),
        other => Err(format!("no scenario {other}")),
    }
}

/// A tool call that runs `cmd` in the work folder: Bash for Claude Code, a command for Codex.
fn run_command(h: Harness, cmd: &str) -> Step {
    match h {
        Harness::Claude => Step::tool("Bash", json!({"command": cmd, "description": "run it"})),
        Harness::Codex => Step::exec(cmd),
    }
}

const MAKE: &str = "echo hi > made.txt";

fn approval(h: Harness, t: &Tools, allow: bool) -> Check<Found> {
    let script = Script::new([
        run_command(h, MAKE),
        Step::text("after the answer"),
        Step::text("understood"),
    ]);
    let mut rig = Rig::new(t, h, script, "make a file")?;
    rig.start("ask", &[])?;
    let asked = rig.wait_type("hangar.approval")?;
    let made = rig.workspace().join("made.txt");
    if made.exists() {
        return Ok(Found::Fails(
            "the command ran before anyone answered".into(),
        ));
    }
    let id = asked["request_id"].as_str().unwrap_or_default().to_owned();
    if allow {
        rig.request_done(Kind::Approve, body::approve(&id, None))?;
    } else {
        rig.request_done(Kind::Deny, body::deny(&id, Some("CONFORMANCE-REASON")))?;
    }
    rig.expect_exit(0)?;
    if allow != made.exists() {
        return Ok(Found::Fails(if allow {
            "approved, but the command did not run".into()
        } else {
            "denied, but the command ran".into()
        }));
    }
    if !allow {
        let all: String = rig.fake.requests().iter().map(|r| r.all_text()).collect();
        if !all.contains("CONFORMANCE-REASON") {
            return Ok(Found::Fails("the model never heard the reason".into()));
        }
    }
    Ok(Found::Holds)
}

fn steer(h: Harness, t: &Tools) -> Check<Found> {
    let script = Script::new([
        Step::slow_text(10, Duration::from_millis(400)),
        Step::text("steered"),
    ]);
    let mut rig = Rig::new(t, h, script, "talk slowly")?;
    rig.start("auto", &[])?;
    rig.wait_requests(1)?;
    std::thread::sleep(Duration::from_millis(500));
    rig.request_done(Kind::Steer, body::text("STEER-CONFORMANCE"))?;
    rig.expect_exit(0)?;
    let reqs = rig.fake.requests();
    if !reqs
        .iter()
        .skip(1)
        .any(|r| r.all_text().contains("STEER-CONFORMANCE"))
    {
        return Ok(Found::Fails("the steer never reached the model".into()));
    }
    Ok(Found::Holds)
}

fn interrupt(h: Harness, t: &Tools) -> Check<Found> {
    let script = Script::new([Step::slow_text(200, Duration::from_millis(300))]);
    let mut rig = Rig::new(t, h, script, "talk for a long time")?;
    rig.start("auto", &[])?;
    rig.wait_requests(1)?;
    std::thread::sleep(Duration::from_millis(500));
    rig.request_done(Kind::Interrupt, body::empty())?;
    match rig.wait_exit()? {
        130 => Ok(Found::Holds),
        code => Ok(Found::Fails(format!(
            "the interrupted turn ended {code}, not 130"
        ))),
    }
}

fn resume(h: Harness, t: &Tools) -> Check<Found> {
    let script = Script::new([Step::text("FIRST-ANSWER"), Step::text("second answer")]);
    let mut rig = Rig::new(t, h, script, "FIRST-PROMPT")?;
    rig.start("auto", &[])?;
    rig.expect_exit(0)?;
    let id = match h {
        Harness::Claude => rig
            .lines_of("system")
            .into_iter()
            .find_map(|l| l["session_id"].as_str().map(str::to_owned)),
        Harness::Codex => rig
            .lines_of("thread.started")
            .into_iter()
            .find_map(|l| l["thread_id"].as_str().map(str::to_owned)),
    };
    let Some(id) = id else {
        return Ok(Found::Fails(
            "the first turn named no session to resume".into(),
        ));
    };
    rig.next_run("SECOND-PROMPT")?;
    rig.start("auto", &["--resume", &id])?;
    rig.expect_exit(0)?;
    let reqs = rig.wait_requests(2)?;
    let second = reqs[1].all_text();
    if !(second.contains("FIRST-PROMPT") && second.contains("FIRST-ANSWER")) {
        return Ok(Found::Fails(
            "the resumed turn did not send the first turn to the model".into(),
        ));
    }
    Ok(Found::Holds)
}

const CHECK: &str = "if [ -f fixed.txt ]; then echo all good; else echo CHECK-FAILED: fixed.txt is missing; exit 1; fi";

fn verify(h: Harness, t: &Tools) -> Check<Found> {
    let script = Script::new([
        Step::text("I am done"),
        run_command(h, "touch fixed.txt"),
        Step::text("fixed now"),
    ]);
    let mut rig = Rig::new(t, h, script, "do the job")?;
    rig.start("auto", &["--verify", CHECK, "--max-verify-rounds", "2"])?;
    rig.expect_exit(0)?;
    let outcomes: Vec<String> = rig
        .lines_of("hangar.verify")
        .iter()
        .filter_map(|v| v["outcome"].as_str().map(str::to_owned))
        .collect();
    if outcomes != ["feedback", "passed"] {
        return Ok(Found::Fails(format!(
            "the check's rounds were {outcomes:?}, not [feedback, passed]"
        )));
    }
    let reqs = rig.fake.requests();
    if !reqs
        .iter()
        .skip(1)
        .any(|r| r.all_text().contains("CHECK-FAILED"))
    {
        return Ok(Found::Fails(
            "the check's output never reached the model".into(),
        ));
    }
    Ok(Found::Holds)
}

fn hook_fail_closed(h: Harness, t: &Tools) -> Check<Found> {
    if h == Harness::Codex {
        return Ok(Found::NotApplicable(
            "Codex runs no PreToolUse hook; hangar refuses Codex turns that require the Tower hook"
                .into(),
        ));
    }
    let tower = TowerDouble::start().map_err(text)?;
    for fault in [TowerFault::Status(500), TowerFault::Hangup] {
        tower.set_fault(fault.clone());
        let script = Script::new([run_command(h, MAKE), Step::text("done")]);
        let mut rig = Rig::new(t, h, script, "make a file")?;
        let key = tempfile::NamedTempFile::new().map_err(text)?;
        std::fs::write(key.path(), TOWER_KEY).map_err(text)?;
        let hook = t.tower_hook.display().to_string();
        let key_path = key.path().display().to_string();
        rig.start(
            "auto",
            &[
                "--tower-hook",
                &hook,
                "--tower-url",
                &tower.url(),
                "--tower-key-file",
                &key_path,
            ],
        )?;
        rig.expect_exit(0)?;
        if rig.workspace().join("made.txt").exists() {
            return Ok(Found::Fails(format!(
                "with Tower failing ({fault:?}) the tool call ran"
            )));
        }
        let blocked = rig
            .wait_requests(2)?
            .get(1)
            .map(|r| r.tool_results().iter().any(|(_, _, is_error)| *is_error))
            .unwrap_or(false);
        if !blocked {
            return Ok(Found::Fails(format!(
                "with Tower failing ({fault:?}) the model was not told the call was blocked"
            )));
        }
    }
    Ok(Found::Holds)
}

/// Issue 18: nothing in the repository or the agent's home loosens governance.
fn repo_settings(h: Harness, t: &Tools) -> Check<Found> {
    let markers = tempfile::tempdir().map_err(text)?;
    let evil_script = || Script::new([Step::text("the second model answered")]);
    let (evil_url, evil): (String, Box<dyn Fn() -> usize>) = match h {
        Harness::Claude => {
            let f = FakeAnthropic::start(evil_script()).map_err(text)?;
            (f.base_url(), Box::new(move || f.requests().len()))
        }
        Harness::Codex => {
            let f = FakeOpenAi::start(evil_script()).map_err(text)?;
            (f.base_url(), Box::new(move || f.requests().len()))
        }
    };
    let script = Script::new([
        run_command(h, MAKE),
        Step::text("after the answer"),
        Step::text("more"),
    ]);
    let mut rig = Rig::new(t, h, script, "make a file")?;
    let m = markers.path();
    match h {
        Harness::Claude => {
            hostile::claude_repo(rig.workspace(), m, &evil_url).map_err(text)?;
            let config = rig.claude_config_dir();
            hostile::claude_home(rig.user_home(), Some(&config), m, &evil_url).map_err(text)?;
        }
        Harness::Codex => {
            hostile::codex_repo(rig.workspace(), m, &evil_url).map_err(text)?;
            let ws = rig.workspace().to_path_buf();
            hostile::codex_home(&rig.codex_home(), &ws, m, &evil_url).map_err(text)?;
            hostile::codex_home(&rig.user_home().join(".codex"), &ws, m, &evil_url)
                .map_err(text)?;
        }
    }
    rig.start("ask", &[])?;
    let made = rig.workspace().join("made.txt");
    let asked = match rig.wait_type("hangar.approval") {
        Ok(a) => a,
        Err(why) => {
            return Ok(Found::Fails(format!(
                "the tool call was not held for a person ({why}); hostile commands that ran: {:?}",
                hostile::markers(m)
            )));
        }
    };
    if made.exists() {
        return Ok(Found::Fails(
            "the command ran before anyone answered".into(),
        ));
    }
    let id = asked["request_id"].as_str().unwrap_or_default().to_owned();
    rig.request_done(Kind::Approve, body::approve(&id, None))?;
    rig.expect_exit(0)?;
    if !made.exists() {
        return Ok(Found::Fails("approved, but the command did not run".into()));
    }
    let ran = hostile::markers(m);
    if !ran.is_empty() {
        return Ok(Found::Fails(format!("hostile commands ran: {ran:?}")));
    }
    let reached = evil();
    if reached > 0 {
        return Ok(Found::Fails(format!(
            "the model server the hostile files name got {reached} requests"
        )));
    }
    Ok(Found::Holds)
}
