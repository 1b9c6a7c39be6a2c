//! The fail-closed matrix (issue #9 item 3, and #7's fault matrix in a sandbox): every way the
//! Tower hook can fail, under both `HANGAR_GOVERNANCE_HOOK_AUTH=key` and `passport`, each as a
//! real turn through `hangar serve` with `HANGAR_GOVERNANCE_HOOK=required`: the real Claude Code
//! in a Docker sandbox with the uid split, the real static hook installed by hangar, the Tower
//! double and the scripted model. In each cell the model asks for one Bash call; the cell reads
//! `blocked` only when the call did not run (its file is not in the workspace) and the turn
//! showed an error for it, whose text is the reason in the table and must name the fault.
//!
//! One row runs with no fault first, in each mode, and must read `ran`: the same detection
//! sees a call that was let through, so the matrix can fail. Tower's own answers follow in the
//! same sandboxes (#7's tests in a Docker sandbox): deny, wait then a signed allow or a refusal,
//! wait past the limit, an allow of a risky command (the deny-risky rules still deny it), and a
//! deny while the agent's `~/.claude/settings.json` and the repo's `.claude/` turn hooks off.
//!
//! `scripts/fail-closed-matrix` runs this test alone and shows the table; `scripts/test` runs it
//! with the rest.
//!
//! Safety: the only command the model asks for is `echo N > cell-N.txt` in the sandbox's
//! workspace; the faults made inside the sandbox (the key file or the hook removed or made
//! not executable) are argv commands run through `hangar sb exec` on hangar's own files there.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests"
)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Server, docker_image, hook_bin, is_root, until};
use hangar_testkit::{
    PassportFault, Script, Step, TOWER_KEY, TowerAnswer, TowerDouble, TowerFault,
};
use serde_json::{Value, json};

/// The deadline of one call to Tower (`HANGAR_GOVERNANCE_HOOK_CALL_SECONDS`).
const CALL_SECONDS: u64 = 2;
/// How long a `wait` may take (`HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS`).
const WAIT_SECONDS: u64 = 1;
/// Tower's reason when it denies.
const FREEZE: &str = "deploy freeze until Monday";
/// The risky command of the row where Tower allows one (inside the container; the rules deny it
/// before it could run).
const RISKY: &str = "rm -rf /tmp/hangar-matrix-sentinel";
/// How long the model takes to ask for the tool call in cells whose fault is made after the
/// turn started (the fault must be in place before the call).
const GATE: Duration = Duration::from_secs(8);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Key,
    Passport,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Key => "key",
            Mode::Passport => "passport",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// No fault: the call must run (the control row).
    None,
    Down,
    Slow,
    Status(u16),
    Garbage,
    WrongShape,
    Truncated,
    Huge,
    KeyMissing,
    PassportExpired,
    HookNotExecutable,
    HookMissing,
    /// Tower slower than Claude Code's own hook timeout.
    PastCliTimeout,
    // Tower's answers.
    Deny,
    WaitAllow,
    WaitDeny,
    WaitPast,
    RiskyAllowed,
    HooksOffInSettings,
}

/// Tower's answers, after the control row and before the faults.
const ANSWERS: [Fault; 6] = [
    Fault::Deny,
    Fault::WaitAllow,
    Fault::WaitDeny,
    Fault::WaitPast,
    Fault::RiskyAllowed,
    Fault::HooksOffInSettings,
];

/// Every row in the order it runs: the control row, Tower's answers, the faults.
fn rows() -> impl Iterator<Item = Fault> {
    std::iter::once(Fault::None).chain(ANSWERS).chain(FAULTS)
}

/// The rows, in the order they run (Tower down last: the double is gone after it).
const FAULTS: [Fault; 14] = [
    Fault::Slow,
    Fault::Status(500),
    Fault::Status(401),
    Fault::Status(403),
    Fault::Garbage,
    Fault::WrongShape,
    Fault::Truncated,
    Fault::Huge,
    Fault::PastCliTimeout,
    Fault::PassportExpired,
    Fault::KeyMissing,
    Fault::HookNotExecutable,
    Fault::HookMissing,
    Fault::Down,
];

impl Fault {
    fn name(self) -> String {
        match self {
            Fault::None => "none (Tower allows)".into(),
            Fault::Down => "Tower down".into(),
            Fault::Slow => format!("slow past the deadline ({}s)", CALL_SECONDS + 2),
            Fault::Status(s) => format!("{s}"),
            Fault::Garbage => "garbage".into(),
            Fault::WrongShape => "wrong shape".into(),
            Fault::Truncated => "truncated body".into(),
            Fault::Huge => "huge body (2 MiB)".into(),
            Fault::KeyMissing => "key file missing".into(),
            Fault::PassportExpired => "passport expired".into(),
            Fault::HookNotExecutable => "hook not executable".into(),
            Fault::HookMissing => "hook binary missing".into(),
            Fault::PastCliTimeout => format!(
                "CLI hook timeout ({}s) < Tower's delay ({}s)",
                cli_timeout(),
                cli_timeout() + 5
            ),
            Fault::Deny => "Tower denies".into(),
            Fault::WaitAllow => "wait, then a person signs allow".into(),
            Fault::WaitDeny => "wait, then a person refuses".into(),
            Fault::WaitPast => format!("wait past the limit ({WAIT_SECONDS}s)"),
            Fault::RiskyAllowed => "Tower allows a risky command".into(),
            Fault::HooksOffInSettings => {
                "Tower denies; the agent's and the repo's settings turn hooks off".into()
            }
        }
    }

    /// Whether the call must be blocked (every fault, and every answer but a signed allow).
    fn blocks(self) -> bool {
        !matches!(self, Fault::None | Fault::WaitAllow)
    }

    /// The command the model asks for in row `n`: it writes the row's file, so a call that ran
    /// shows.
    fn command(self, n: usize) -> String {
        match self {
            Fault::RiskyAllowed => format!("{RISKY}; echo {n} > cell-{n}.txt"),
            _ => format!("echo {n} > cell-{n}.txt"),
        }
    }

    /// What the reason the turn showed must contain.
    fn wants(self) -> &'static str {
        match self {
            Fault::None | Fault::WaitAllow => "",
            Fault::Deny | Fault::HooksOffInSettings => "Tower denied this call: deploy freeze",
            Fault::WaitDeny => "refused Tower's approval",
            Fault::WaitPast => "no one signed",
            Fault::RiskyAllowed => "deny-risky/destroy-outside-workspace",
            Fault::Down => "unreachable",
            Fault::Slow | Fault::PastCliTimeout => "did not answer in time",
            Fault::Status(500) => "Tower failed (500)",
            Fault::Status(401) => "refused the key or passport (401)",
            Fault::Status(403) => "(403)",
            Fault::Status(_) => "Tower",
            Fault::Garbage => "not JSON",
            Fault::WrongShape => "no decision",
            Fault::Truncated => "cut short",
            Fault::Huge => "larger than",
            Fault::KeyMissing => "key file",
            // Tower refuses an expired passport: the run's own, or (key) the vault credential.
            Fault::PassportExpired => "(401)",
            Fault::HookNotExecutable => "ermission denied",
            Fault::HookMissing => "not found",
        }
    }

    /// Made after the turn started (and before the tool call), rather than before it.
    fn after_start(self) -> bool {
        matches!(
            self,
            Fault::Down | Fault::KeyMissing | Fault::HookNotExecutable | Fault::HookMissing
        )
    }
}

/// The hook timeout the driver writes in Claude Code's settings for these limits.
fn cli_timeout() -> u64 {
    hangar_hook::settings_timeout(CALL_SECONDS, WAIT_SECONDS)
}

struct Cell {
    fault: Fault,
    mode: Mode,
    /// The call's file is in the workspace.
    ran: bool,
    blocked: bool,
    reason: String,
}

/// One mode's server, sandbox and Tower.
struct Rig {
    mode: Mode,
    s: Server,
    tower: Option<TowerDouble>,
    sb: String,
    ws: PathBuf,
    _repo: tempfile::TempDir,
}

fn script() -> Script {
    Script::new(rows().enumerate().flat_map(|(n, f)| {
        let mut call = Step::tool(
            "Bash",
            json!({"command": f.command(n), "description": "write the cell's file"}),
        );
        if f.after_start() || f == Fault::PassportExpired {
            call = call.delay(GATE);
        }
        [call, Step::text(format!("cell {n} done"))]
    }))
}

async fn rig(mode: Mode) -> Rig {
    let tower = TowerDouble::start().unwrap();
    let mut env = vec![
        ("HANGAR_GOVERNANCE_HOOK".to_owned(), "required".to_owned()),
        ("HANGAR_GOVERNANCE_URL".to_owned(), tower.url()),
        (
            "HANGAR_GOVERNANCE_HOOK_CALL_SECONDS".to_owned(),
            CALL_SECONDS.to_string(),
        ),
        (
            "HANGAR_GOVERNANCE_HOOK_WAIT_SECONDS".to_owned(),
            WAIT_SECONDS.to_string(),
        ),
        (
            "HANGAR_TOWER_HOOK_BIN".to_owned(),
            hook_bin().display().to_string(),
        ),
    ];
    let s = match mode {
        Mode::Key => {
            env.push((
                "HANGAR_GOVERNANCE_HOOK_CREDENTIAL".to_owned(),
                "tower".to_owned(),
            ));
            Server::start_with(script(), env, Some(("tower", TOWER_KEY)))
        }
        Mode::Passport => {
            env.push((
                "HANGAR_GOVERNANCE_HOOK_AUTH".to_owned(),
                "passport".to_owned(),
            ));
            Server::start_with(script(), env, None)
        }
    };
    if mode == Mode::Passport {
        // Tower trusts the keys this hangar publishes; its issuer is HANGAR_URL's default.
        let keys: Value = reqwest::get(format!("{}/.well-known/jwks.json", s.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        tower.trust_keys("http://127.0.0.1:7700", keys);
    }
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "the repo\n").unwrap();
    let env_file = s.home.path().join("matrix.yaml");
    std::fs::write(
        &env_file,
        format!(
            "name: matrix\nprovider: docker\nimage: {}\nnetwork: host\n",
            docker_image()
        ),
    )
    .unwrap();
    s.ok(&["env", "apply", env_file.to_str().unwrap()]);
    let sb = s.create_sandbox("matrix", repo.path());
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    let ws = PathBuf::from(v["sandbox"]["host_workspace"].as_str().unwrap());
    Rig {
        mode,
        s,
        tower: Some(tower),
        sb,
        ws,
        _repo: repo,
    }
}

impl Rig {
    fn tower(&self) -> &TowerDouble {
        self.tower.as_ref().expect("the Tower double is still up")
    }

    /// `hangar sb exec SB -- ARGV` inside the sandbox, as the agent.
    fn exec_as_agent(&self, argv: &[&str]) {
        let mut args = vec!["sb", "exec", &self.sb, "--"];
        args.extend_from_slice(argv);
        self.s.ok(&args);
    }

    /// `hangar sb exec SB --as hangar -- ARGV` inside the sandbox.
    fn exec_as_hangar(&self, argv: &[&str]) {
        let mut args = vec!["sb", "exec", &self.sb, "--as", "hangar", "--"];
        args.extend_from_slice(argv);
        self.s.ok(&args);
    }

    /// Sets Tower up for `fault` before the turn starts.
    fn before(&self, fault: Fault) {
        let t = self.tower();
        match fault {
            Fault::Slow => t.set_delay(Duration::from_secs(CALL_SECONDS + 2)),
            Fault::PastCliTimeout => t.set_delay(Duration::from_secs(cli_timeout() + 5)),
            Fault::Status(code) => t.set_fault(TowerFault::Status(code)),
            Fault::Garbage => t.set_fault(TowerFault::Garbage),
            Fault::WrongShape => t.set_fault(TowerFault::WrongShape),
            Fault::Truncated => t.set_fault(TowerFault::Truncated),
            Fault::Huge => t.set_fault(TowerFault::Huge(2 << 20)),
            Fault::Deny => t.set_answer(TowerAnswer::Deny(FREEZE.into())),
            Fault::HooksOffInSettings => {
                t.set_answer(TowerAnswer::Deny(FREEZE.into()));
                // The repo's .claude/ and the agent's own settings turn every hook off and add
                // one that allows everything.
                let off = json!({"disableAllHooks": true, "hooks": {"PreToolUse": [{"matcher": "*",
                    "hooks": [{"type": "command", "command": "exit 0"}]}]}})
                .to_string();
                std::fs::create_dir_all(self.ws.join(".claude")).unwrap();
                std::fs::write(self.ws.join(".claude/settings.json"), &off).unwrap();
                std::fs::write(self.ws.join(".claude/settings.local.json"), &off).unwrap();
                self.exec_as_agent(&["mkdir", "-p", "/home/agent/.claude"]);
                self.exec_as_agent(&[
                    "cp",
                    "/workspace/.claude/settings.json",
                    "/home/agent/.claude/settings.json",
                ]);
            }
            Fault::WaitAllow | Fault::WaitDeny => t.set_answer(TowerAnswer::Wait {
                reason: "a person signs".into(),
                sign: Some((Duration::from_millis(300), fault == Fault::WaitAllow)),
            }),
            Fault::WaitPast => t.set_answer(TowerAnswer::Wait {
                reason: "nobody will sign".into(),
                sign: None,
            }),
            Fault::PassportExpired => match self.mode {
                // The vault credential is a passport Tower issued, expired by now.
                Mode::Key => {
                    t.set_passport_fault(PassportFault::Expired);
                    let expired = t.mint_passport("ada@example.com", None, "hangar");
                    t.set_passport_fault(PassportFault::None);
                    self.set_credential(&expired);
                }
                // The run's passport lives 3 s and cannot be renewed (set once it is issued).
                Mode::Passport => t.set_passport_seconds(3),
            },
            _ => {}
        }
    }

    /// Makes `fault` once the turn has started (`run`: the turn's run).
    fn after(&mut self, fault: Fault, run: &str) {
        match fault {
            Fault::KeyMissing => {
                let key = format!("/var/lib/hangar/{run}.tower-key");
                self.exec_as_hangar(&["rm", "-f", &key]);
            }
            Fault::HookNotExecutable => {
                self.exec_as_hangar(&["chmod", "0644", "/var/lib/hangar/tower_hook"]);
            }
            Fault::HookMissing => self.exec_as_hangar(&["rm", "-f", "/var/lib/hangar/tower_hook"]),
            Fault::Down => {
                let url = self.tower().url();
                drop(self.tower.take());
                let addr = url.trim_start_matches("http://").to_owned();
                let gone = Instant::now() + Duration::from_secs(3);
                while std::net::TcpStream::connect(&addr).is_ok() {
                    assert!(Instant::now() < gone, "the Tower double still answers");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            _ => {}
        }
    }

    /// Undoes what [`Rig::before`] set.
    fn reset(&self, fault: Fault) {
        if fault == Fault::HooksOffInSettings {
            std::fs::remove_dir_all(self.ws.join(".claude")).unwrap();
            self.exec_as_agent(&["rm", "-f", "/home/agent/.claude/settings.json"]);
        }
        if let Some(t) = &self.tower {
            t.set_answer(TowerAnswer::Allow("allowed by the Tower double".into()));
            t.set_fault(TowerFault::None);
            t.set_delay(Duration::ZERO);
            t.set_passport_fault(PassportFault::None);
            t.set_passport_seconds(900);
        }
        if self.mode == Mode::Key {
            self.set_credential(TOWER_KEY);
        }
    }

    fn set_credential(&self, value: &str) {
        use std::io::Write;
        let mut c = self
            .s
            .hangar()
            .args(["credential", "set", "tower"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(value.as_bytes()).unwrap();
        assert!(c.wait().unwrap().success());
    }

    /// Runs row `n` (its own session in the sandbox) and reads what the turn showed.
    async fn cell(&mut self, n: usize, fault: Fault) -> Cell {
        self.before(fault);
        let asked = self.s.fake.requests().len();
        let (status, started) = self
            .s
            .call(
                "POST",
                "/v1/sessions",
                Some(json!({"sandbox": self.sb, "policy": "auto", "prompt": format!("cell {n}")})),
            )
            .await;
        assert_eq!(status, 201, "{}: {started}", fault.name());
        let run = started["run"]["id"].as_str().unwrap().to_owned();
        let turn = started["turn"]["id"].as_str().unwrap().to_owned();
        if fault == Fault::PassportExpired && self.mode == Mode::Passport {
            // The 3 s passport was issued at the turn's start: no renewal from now on.
            self.tower()
                .set_passport_fault(PassportFault::ExchangeRefused);
        }
        if fault.after_start() {
            // The fault must be in place before the model's answer (held back GATE) arrives.
            let fake = &self.s.fake;
            let asked_at = until("the model to be asked", async || {
                (fake.requests().len() > asked).then(Instant::now)
            })
            .await;
            self.after(fault, &run);
            let took = asked_at.elapsed();
            assert!(
                took + Duration::from_secs(1) < GATE,
                "{}: the fault took {took:?} to make, too close to the tool call",
                fault.name()
            );
        }
        let t = self.s.turn_ended(&turn).await;
        self.reset(fault);
        let (_, ev) = self
            .s
            .call("GET", &format!("/v1/runs/{run}/events?limit=1000"), None)
            .await;
        let mut results = Vec::new();
        tool_results(&ev, &mut results);
        let file = self.ws.join(format!("cell-{n}.txt"));
        let ran = file.exists();
        let (blocked, reason) = match results.as_slice() {
            [(output, is_error)] => (*is_error && !ran, one_line(output)),
            [] => (
                false,
                format!(
                    "no tool result (turn status {}: {})",
                    t["status"], t["reason"]
                ),
            ),
            more => (false, format!("{} tool results: {more:?}", more.len())),
        };
        Cell {
            fault,
            mode: self.mode,
            ran,
            blocked,
            reason,
        }
    }
}

/// Every `tool_result` event's (output, is_error) in an events answer.
fn tool_results(v: &Value, out: &mut Vec<(String, bool)>) {
    match v {
        Value::Object(m) => {
            if m.get("kind").and_then(Value::as_str) == Some("tool_result")
                && !m.contains_key("payload")
            {
                out.push((
                    m.get("output")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    m.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                ));
                return;
            }
            m.values().for_each(|x| tool_results(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| tool_results(x, out)),
        _ => {}
    }
}

/// The reason as one line: Claude Code's prefix and the hook's command line dropped.
fn one_line(output: &str) -> String {
    let text = output.split_whitespace().collect::<Vec<_>>().join(" ");
    // "PreToolUse:Bash hook error: [<the hook's command>]: <what the hook said>"
    let said = text
        .rsplit_once("|| exit 2]: ")
        .map_or(text.as_str(), |(_, r)| r);
    said.chars().take(150).collect()
}

/// All the rows of one mode, in [`rows`] order.
async fn mode_rows(mode: Mode) -> Vec<Cell> {
    let mut r = rig(mode).await;
    let mut cells = Vec::new();
    for (n, f) in rows().enumerate() {
        cells.push(r.cell(n, f).await);
    }
    r.s.ok(&["sb", "rm", "--force", &r.sb]);
    cells
}

fn table(rows: &[&Cell]) -> String {
    let width = rows
        .iter()
        .map(|c| c.fault.name().len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = format!(
        "{:<width$}  {:<8}  {:<7}  reason the turn showed\n",
        "fault", "mode", "result"
    );
    for c in rows {
        out.push_str(&format!(
            "{:<width$}  {:<8}  {:<7}  {}\n",
            c.fault.name(),
            c.mode.name(),
            match (c.blocked, c.ran) {
                (true, _) => "blocked",
                (false, true) => "ran",
                (false, false) => "failed",
            },
            c.reason
        ));
    }
    out
}

fn docker_off() -> bool {
    std::env::var("HANGAR_TEST_DOCKER").is_ok_and(|v| v == "0")
}

/// One mode's rows on a thread (and a runtime) of its own.
fn spawn_mode(mode: Mode) -> std::thread::JoinHandle<Vec<Cell>> {
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(mode_rows(mode))
    })
}

/// The cells that did not go as their row says: run or blocked, and for the reason it names.
fn wrong(cells: &[&Cell]) -> Vec<String> {
    cells
        .iter()
        .filter(|c| {
            let as_it_should = if c.fault.blocks() {
                c.blocked
            } else {
                c.ran && !c.blocked
            };
            !as_it_should || !c.reason.contains(c.fault.wants())
        })
        .map(|c| format!("{} / {}: {}", c.fault.name(), c.mode.name(), c.reason))
        .collect()
}

#[test]
fn every_fault_blocks_the_tool_call_in_both_auth_modes() {
    if docker_off() {
        println!("skipped: HANGAR_TEST_DOCKER=0 (the matrix runs in a Docker sandbox)");
        return;
    }
    assert!(is_root(), "the uid split needs root (CI runs as root)");
    let started = Instant::now();
    // The two modes side by side: each has its own server, sandbox, model and Tower.
    let key = spawn_mode(Mode::Key);
    let passport = spawn_mode(Mode::Passport);
    let key = key.join().unwrap();
    let passport = passport.join().unwrap();
    let pairs: Vec<&Cell> = key
        .iter()
        .zip(&passport)
        .flat_map(|(k, p)| [k, p])
        .collect();
    let (faults, others): (Vec<&Cell>, Vec<&Cell>) =
        pairs.into_iter().partition(|c| FAULTS.contains(&c.fault));
    println!(
        "\nThe fail-closed matrix (real Claude Code, Docker sandbox with the uid split, the real Tower hook, the Tower double; hook call deadline {CALL_SECONDS}s, Claude Code's hook timeout {}s):\n",
        cli_timeout()
    );
    print!("{}", table(&faults));
    println!(
        "\nThe control rows and Tower's answers, in the same sandboxes (the call runs only where a person signed, or nothing is wrong):\n{}",
        table(&others)
    );
    let blocked = faults.iter().filter(|c| c.blocked).count();
    println!(
        "{blocked} of {} fault cells blocked; {} rows in {:.0} s",
        faults.len(),
        faults.len() + others.len(),
        started.elapsed().as_secs_f64()
    );
    let mut wrong_cells = wrong(&others);
    wrong_cells.extend(wrong(&faults));
    assert!(
        wrong_cells.is_empty(),
        "cells that did not go as their row says (blocked for its reason, or run):\n{}",
        wrong_cells.join("\n")
    );
}
