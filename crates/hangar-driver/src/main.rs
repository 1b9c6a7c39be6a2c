//! `hangar-driver`: runs one turn of a harness (Claude Code or Codex) inside the sandbox.
//!
//! Order of start-up matters (S13, S15): the process makes itself non-dumpable first, then reads
//! and deletes the run key, and only then starts the harness, with a clean environment (see
//! `hangar_protocol::env`), as the agent's uid under the uid split. The key is never in any
//! child's argv or environment.
//!
//! Exit status (S20): 0 the turn succeeded; 1 the harness reported an error or went away without
//! finishing; 2 the driver could not start the turn (bad arguments, no key, no harness);
//! 130 an interrupt ended the turn and no new message came after it.

mod adapter;
mod args;
mod claude;
mod claude_settings;
mod codex;
mod harness;
mod mirror;
mod relay;
mod runlog;
mod secrets;
mod secure;
mod signals;
mod tower;
mod trees;
mod turn;
mod verify;

use std::ffi::OsString;
use std::sync::mpsc;

use hangar_mailbox::ControlDir;
use hangar_protocol::Verifier;
use hangar_protocol::runlog::{HangarLine, HookDigest, VerifyOutcome};

use crate::adapter::Adapter;
use crate::args::{HarnessKind, Settings};
use crate::runlog::RunLog;
use crate::turn::{Outcome, Turn};

/// Exit status when the driver cannot start the turn.
const EXIT_SETUP: i32 = 2;

/// The driver's diagnostics go to its stderr (the turn's terminal); the run log has the record.
#[expect(clippy::print_stderr, reason = "the driver's own diagnostics channel")]
pub(crate) fn diag(msg: &str) {
    eprintln!("hangar-driver: {msg}");
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        Some(a) if a == TREE_OF => std::process::exit(tree_of(args.collect())),
        Some(a) if a == mirror::MIRROR => std::process::exit(mirror::run(args.collect())),
        _ => {}
    }
    let code = match start() {
        Ok(code) => code,
        Err(msg) => {
            diag(&msg);
            EXIT_SETUP
        }
    };
    std::process::exit(code);
}

/// `hangar-driver --tree-of DIR`: prints the tree id of DIR's work tree as hangar computes it
/// (what `hangar tree DIR` prints), for the control plane to check a sandbox's work tree from
/// inside (a fork's, in a sandbox whose files this machine cannot see). Writes nothing.
const TREE_OF: &str = "--tree-of";

fn tree_of(args: Vec<OsString>) -> i32 {
    use std::io::Write;
    let [dir] = args.as_slice() else {
        diag("--tree-of takes one folder");
        return EXIT_SETUP;
    };
    match hangar_treehash::tree_id(std::path::Path::new(dir)) {
        Ok(id) => match writeln!(std::io::stdout(), "{id}") {
            Ok(()) => 0,
            Err(e) => {
                diag(&format!("cannot write the tree id: {e}"));
                EXIT_SETUP
            }
        },
        Err(e) => {
            diag(&format!("cannot hash {}: {e}", dir.to_string_lossy()));
            EXIT_SETUP
        }
    }
}

/// The harness's program, its arguments and its adapter.
type HarnessCommand = (OsString, Vec<OsString>, Box<dyn Adapter>);

/// The harness's program, its arguments and its adapter. `claude` is the turn's own Claude Code
/// settings (every real Claude Code turn has them).
fn harness_for(
    s: &Settings,
    claude: Option<claude::TurnFiles<'_>>,
) -> Result<HarnessCommand, String> {
    if let Some(argv) = &s.raw {
        return Ok((
            argv[0].clone(),
            argv[1..].to_vec(),
            Box::new(claude::Claude::default()),
        ));
    }
    Ok(match s.harness {
        HarnessKind::Claude => (
            s.claude_bin.clone().into_os_string(),
            claude::args(
                s,
                claude.ok_or("the turn's Claude Code settings were not written")?,
            ),
            Box::new(claude::Claude::with_rules_hook(s.policy)),
        ),
        HarnessKind::Codex => (
            s.codex_bin.clone().into_os_string(),
            codex::args(s),
            Box::new(codex::Codex::new(s)),
        ),
    })
}

/// Where the agent keeps its Codex state between turns: its `CODEX_HOME`, else `~/.codex` in
/// the harness's `HOME`.
fn agent_codex_home(s: &Settings) -> Result<std::path::PathBuf, String> {
    let env = harness::harness_env(s);
    let get = |k: &str| {
        env.iter()
            .find(|(name, v)| name == k && !v.is_empty())
            .map(|(_, v)| std::path::PathBuf::from(v))
    };
    get("CODEX_HOME")
        .or_else(|| get("HOME").map(|h| h.join(".codex")))
        .ok_or_else(|| {
            "neither CODEX_HOME nor HOME is set: no Codex home to keep threads in".into()
        })
}

/// The deny-risky rules for this turn (the default set, changed by `--rules FILE`) and where
/// they are checked: the workspace, the agent's home, the control folder as hangar's own.
fn rules_for(s: &args::Settings) -> Result<(hangar_rules::Rules, hangar_rules::Context), String> {
    let rules = match &s.rules_file {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read the rules file {}: {e}", f.display()))?;
            hangar_rules::Rules::configure(&text)
                .map_err(|e| format!("the rules file {}: {e}", f.display()))?
        }
        None => hangar_rules::Rules::default_set(),
    };
    let mut ctx = hangar_rules::Context::new(&s.cwd);
    let home = harness::harness_env(s)
        .into_iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| std::path::PathBuf::from(v));
    ctx.home = home.map(|h| hangar_rules::paths::normalize(&h));
    ctx.protected = vec![s.ctl.clone()];
    Ok((rules, ctx))
}

fn start() -> Result<i32, String> {
    secure::make_non_dumpable().map_err(|e| format!("cannot make the driver non-dumpable: {e}"))?;
    let mut s = args::parse(std::env::args_os().skip(1).collect())?;
    if s.agent.is_some() {
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("the uid split (--agent-uid) needs the driver to start as root".into());
        }
    }
    let rules = rules_for(&s)?;
    signals::install();
    let ctl = ControlDir::at(s.ctl.clone());
    // Held to the driver's end: a remote sandbox's mirror stream goes by it (`mirror.rs`).
    mirror::hold_lock(ctl.root());
    let key = secure::take_key(s.key_file.as_deref().unwrap_or(&ctl.key()))?;
    let seal_key = hangar_protocol::logseal::SealKey::derive(&key);
    let log = RunLog::open_sealed(&ctl.run_log(), seal_key, &s.run)
        .map_err(|e| format!("cannot open the run log {}: {e}", ctl.run_log().display()))?;
    let inbox = match hangar_mailbox::Inbox::with_doorbell(ctl, Verifier::new(&s.run, key)) {
        Ok(i) => i,
        Err(message) => return Err(logged(&log, message)),
    };
    let (tx, rx) = mpsc::channel();
    let bell = tx.clone();
    inbox.start_doorbell(move || bell.send(turn::Event::Wake).is_ok());
    let taken = match s.secrets_file.as_deref().map(secrets::take).transpose() {
        Ok(t) => t,
        Err(message) => return Err(logged(&log, message)),
    };
    let mut files = TurnFiles::write(&s, &log)?;
    s.codex_home = files.codex_home.as_ref().map(|h| h.dir.clone());
    if let Some(mut taken) = taken {
        files.secrets_dir = secrets::place(
            &mut taken,
            &std::env::temp_dir(),
            &s.run,
            s.codex_home.as_deref(),
            s.agent.as_ref(),
        )
        .map_err(|m| logged(&log, m))?;
        s.secret_env = taken.env;
    }
    let settings_file = files
        .tower_settings
        .as_ref()
        .map(|t| t.settings.clone())
        .or_else(|| files.claude_turn.as_ref().map(|t| t.settings.clone()));
    let claude_files = settings_file.as_deref().map(|f| claude::TurnFiles {
        settings: f,
        mcp: files.claude_turn.as_ref().and_then(|t| t.mcp.as_deref()),
        hook_events: files.stop_hook.is_some() || files.tower_settings.is_some(),
    });
    let (program, argv, adapter) = harness_for(&s, claude_files)?;
    let (harness, stdout) = match harness::spawn(&program, &argv, &s) {
        Ok(h) => h,
        Err(e) => return Err(logged(&log, e.to_string())),
    };
    log.hangar(&HangarLine::Started {
        run: s.run.clone(),
        harness: if s.raw.is_some() {
            "raw"
        } else {
            s.harness.as_str()
        }
        .into(),
        policy: s.policy.as_str().into(),
        driver_pid: std::process::id(),
        harness_pid: harness.child.id(),
        uid_split: s.agent.is_some(),
        agent_uid: s.agent.as_ref().map(|a| a.uid),
        driver_version: env!("CARGO_PKG_VERSION").into(),
        argv: std::iter::once(&program)
            .chain(&argv)
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        hooks: files.hooks.clone(),
    });
    let relay_log = log.clone();
    let tower_tx = tx.clone();
    let codex = s.harness == HarnessKind::Codex && s.raw.is_none();
    std::thread::spawn(move || {
        let r = if codex {
            relay::relay_rpc(stdout, &relay_log, &tx)
        } else {
            relay::relay(stdout, &relay_log, &tx)
        };
        if let Err(e) = r {
            diag(&format!("reading the harness's output failed: {e}"));
        }
    });
    let mut turn = Turn::new(s.policy, log.clone(), inbox, harness, adapter, rules);
    if s.raw.is_none() {
        let ctl = ControlDir::at(s.ctl.clone());
        turn.trees = Some((
            trees::Trees::start(&s.cwd, ctl.tree_store(), log, s.agent.is_some()),
            ctl.trees_pack(),
        ));
    }
    files.hand_to(&mut turn, &s, tower_tx);
    if let Err(message) = turn.start() {
        turn.log.hangar(&HangarLine::Error { message });
        return Ok(turn.harness_gone(&rx));
    }
    Ok(drive(&mut turn, &s, &rx))
}

/// Writes `message` to the run log as an error; the message.
fn logged(log: &RunLog, message: String) -> String {
    log.hangar(&HangarLine::Error {
        message: message.clone(),
    });
    message
}

/// The files a turn writes for its harness besides the prompt (the job's Stop hook, Claude
/// Code's own settings, Codex's home, the Tower hook's settings), with the digests of the hooks
/// they run and what to warn of.
struct TurnFiles {
    stop_hook: Option<verify::StopHook>,
    claude_turn: Option<claude_settings::TurnSettings>,
    codex_home: Option<codex::CodexHome>,
    tower_settings: Option<tower::HookSettings>,
    /// The folder of the turn's credential files (secrets.rs).
    secrets_dir: Option<std::path::PathBuf>,
    hooks: Vec<HookDigest>,
    early_warnings: Vec<String>,
}

impl TurnFiles {
    fn write(s: &Settings, log: &RunLog) -> Result<TurnFiles, String> {
        // Claude Code's check is a Stop hook in the turn's own settings file (see verify.rs).
        let stop_hook = match (&s.verify, s.harness, &s.raw) {
            (Some(v), HarnessKind::Claude, None) => Some(
                verify::StopHook::write(&std::env::temp_dir(), &s.run, v)
                    .map_err(|e| format!("cannot write the job's Stop hook: {e}"))?,
            ),
            _ => None,
        };
        let mut files = TurnFiles {
            hooks: stop_hook.iter().filter_map(|h| h.digest().ok()).collect(),
            stop_hook,
            claude_turn: None,
            codex_home: None,
            tower_settings: None,
            secrets_dir: None,
            early_warnings: Vec::new(),
        };
        files.claude_turn = files.claude_settings(s, log)?;
        // Codex: the turn's own CODEX_HOME (see codex/home.rs).
        files.codex_home = match (s.harness, &s.raw) {
            (HarnessKind::Codex, None) => Some(
                codex::CodexHome::prepare(
                    &std::env::temp_dir(),
                    &s.run,
                    &agent_codex_home(s)?,
                    s.agent.as_ref(),
                )
                .map_err(|e| format!("cannot make the turn's Codex home: {e}"))?,
            ),
            _ => None,
        };
        files.tower_settings = files.tower_hook(s, log)?;
        Ok(files)
    }

    /// Claude Code: the turn's own settings, on every turn (see claude_settings.rs), with the
    /// environment's reviewed settings when it has them.
    fn claude_settings(
        &mut self,
        s: &Settings,
        log: &RunLog,
    ) -> Result<Option<claude_settings::TurnSettings>, String> {
        let (HarnessKind::Claude, None) = (s.harness, &s.raw) else {
            return Ok(None);
        };
        let reviewed = match &s.claude_settings {
            Some(f) => {
                Some(claude_settings::Reviewed::load(f).map_err(|message| logged(log, message))?)
            }
            None => None,
        };
        self.hooks.extend(reviewed.iter().map(|r| r.digest.clone()));
        claude_settings::TurnSettings::write(
            &std::env::temp_dir(),
            &s.run,
            reviewed.as_ref(),
            self.stop_hook.as_ref().map(|h| h.settings.as_path()),
        )
        .map(Some)
        .map_err(|e| format!("cannot write the turn's Claude Code settings: {e}"))
    }

    /// The Tower hook: the turn's own settings run it before every tool call (see tower.rs).
    /// T16: the hook in the sandbox must be the one hangar installed, or no turn.
    fn tower_hook(
        &mut self,
        s: &Settings,
        log: &RunLog,
    ) -> Result<Option<tower::HookSettings>, String> {
        let (Some(hook), Some(t), HarnessKind::Claude, None) =
            (&s.tower_hook, &s.tower, s.harness, &s.raw)
        else {
            return Ok(None);
        };
        let digest = HookDigest::of_file(tower::HOOK_NAME, hook);
        if let Some(want) = &s.tower_hook_digest {
            let found = match &digest {
                Ok(d) => d.digest.clone(),
                Err(e) => format!("unreadable ({e})"),
            };
            if *want != found {
                return Err(logged(
                    log,
                    format!(
                        "the Tower hook {} is not the one hangar installed (SHA-256 {found}, expected {want}); the turn is refused",
                        hook.display()
                    ),
                ));
            }
        }
        match digest {
            Ok(d) => self.hooks.push(d),
            Err(e) => self.early_warnings.push(format!(
                "the Tower hook {} cannot be read ({e}); every tool call will be blocked",
                hook.display()
            )),
        }
        tower::write_hook_settings(
            &std::env::temp_dir(),
            &s.run,
            hook,
            t,
            &s.cwd,
            s.rules_file.as_deref(),
            self.claude_turn.as_ref().map(|t| t.settings.as_path()),
        )
        .map(Some)
        .map_err(|e| format!("cannot write the turn's Tower hook settings: {e}"))
    }

    /// Gives the turn what it keeps of these files (to remove at its end, to check with), and
    /// how it is governed.
    fn hand_to(self, turn: &mut Turn, s: &Settings, tower_tx: mpsc::Sender<turn::Event>) {
        turn.verify_configured = s.verify.is_some() && s.raw.is_none();
        for message in self.early_warnings {
            turn.log.hangar(&HangarLine::Warning { message });
        }
        turn.hook_on = self.tower_settings.is_some();
        if turn.hook_on && s.policy != args::Policy::Auto {
            turn.log.hangar(&HangarLine::Warning {
                message: format!(
                    "the Tower hook asks Tower before every tool call, so the driver answers permission requests from the deny-risky rules only and never asks Tower as well (the turn's policy stays {})",
                    s.policy.as_str()
                ),
            });
        }
        turn.tower_settings = self.tower_settings;
        turn.remove_at_end.extend(self.claude_turn.map(|t| t.dir));
        turn.remove_at_end.extend(self.codex_home.map(|h| h.dir));
        turn.remove_at_end.extend(self.secrets_dir);
        if let (args::Policy::Governed, Some(t), false) = (s.policy, &s.tower, turn.hook_on) {
            turn.governed = Some(tower::Governed {
                tower: t.clone(),
                tx: tower_tx,
                harness: if s.harness == HarnessKind::Codex {
                    "codex"
                } else {
                    "claude-code"
                },
                run: s.run.clone(),
            });
        }
        turn.stop_hook = self.stop_hook.zip(s.verify.as_ref().map(|v| v.max_rounds));
    }
}

/// Runs the started turn to its end: each time it settles, Codex's check (between turns of the
/// thread, S22) and what waits in the inbox; the exit status.
fn drive(turn: &mut Turn, s: &Settings, rx: &mpsc::Receiver<turn::Event>) -> i32 {
    let mut own = 0u32;
    loop {
        match turn.run_until_settled(rx) {
            Outcome::Gone => return turn.harness_gone(rx),
            Outcome::Settled {
                is_error,
                interrupted,
            } => {
                if let (Some(v), HarnessKind::Codex, None, false, false) =
                    (&s.verify, s.harness, &s.raw, is_error, interrupted)
                {
                    let run = verify::run_check(
                        v,
                        &s.cwd,
                        s.agent.as_ref(),
                        &harness::harness_env(s),
                        &s.hide,
                    );
                    let rounds = turn.verify_rounds.unwrap_or(0);
                    let outcome = if run.passed() {
                        VerifyOutcome::Passed
                    } else if rounds < v.max_rounds {
                        VerifyOutcome::Feedback
                    } else {
                        VerifyOutcome::Failed
                    };
                    turn.record_check(outcome, run.exit_code, run.ms, run.tail.clone());
                    if outcome == VerifyOutcome::Feedback {
                        own += 1;
                        if turn.own_message(
                            &verify::feedback(&v.command, &run),
                            &format!("verify-{own}"),
                        ) {
                            continue;
                        }
                    }
                }
                if turn.close_and_drain() {
                    continue;
                }
                return turn.finish(rx);
            }
        }
    }
}
