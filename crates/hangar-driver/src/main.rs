//! `hangar-driver`: runs one turn of a harness inside the sandbox.
//!
//! Order of start-up matters (S13, S15): the process makes itself non-dumpable first, then reads
//! and deletes the run key, and only then starts the harness, with a clean environment (see
//! `hangar_protocol::env`), as the agent's uid under the uid split. The key is never in any
//! child's argv or environment.
//!
//! Exit status (S20): 0 the turn succeeded; 1 the harness reported an error or went away without
//! finishing; 2 the driver could not start the turn (bad arguments, no key, no harness);
//! 130 an interrupt ended the turn and no new message came after it.

mod args;
mod harness;
mod inbox;
mod relay;
mod runlog;
mod secure;
mod turn;

use std::sync::mpsc;

use hangar_protocol::runlog::HangarLine;
use hangar_protocol::{ControlDir, Verifier};

use crate::runlog::RunLog;

/// Exit status when the driver cannot start the turn.
const EXIT_SETUP: i32 = 2;

/// The driver's diagnostics go to its stderr (the turn's terminal); the run log has the record.
#[expect(clippy::print_stderr, reason = "the driver's own diagnostics channel")]
pub(crate) fn diag(msg: &str) {
    eprintln!("hangar-driver: {msg}");
}

fn main() {
    let code = match start() {
        Ok(code) => code,
        Err(msg) => {
            diag(&msg);
            EXIT_SETUP
        }
    };
    std::process::exit(code);
}

fn start() -> Result<i32, String> {
    secure::make_non_dumpable().map_err(|e| format!("cannot make the driver non-dumpable: {e}"))?;
    let s = args::parse(std::env::args_os().skip(1).collect())?;
    if s.agent.is_some() {
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("the uid split (--agent-uid) needs the driver to start as root".into());
        }
    }
    let ctl = ControlDir::at(s.ctl.clone());
    let key = secure::take_key(&ctl.key())?;
    let log = RunLog::open(&ctl.run_log())
        .map_err(|e| format!("cannot open the run log {}: {e}", ctl.run_log().display()))?;
    let inbox = inbox::Inbox::new(ctl, Verifier::new(&s.run, key));
    let (tx, rx) = mpsc::channel();
    inbox.start_doorbell(tx.clone());
    let (harness, stdout) = match harness::spawn(&s) {
        Ok(h) => h,
        Err(e) => {
            log.hangar(&HangarLine::Error {
                message: e.to_string(),
            });
            return Err(e.to_string());
        }
    };
    log.hangar(&HangarLine::Started {
        run: s.run.clone(),
        harness: if s.raw.is_some() { "raw" } else { "claude" }.into(),
        policy: s.policy.as_str().into(),
        driver_pid: std::process::id(),
        harness_pid: harness.child.id(),
        uid_split: s.agent.is_some(),
        agent_uid: s.agent.as_ref().map(|a| a.uid),
        driver_version: env!("CARGO_PKG_VERSION").into(),
    });
    let relay_log = log.clone();
    std::thread::spawn(move || {
        if let Err(e) = relay::relay(stdout, &relay_log, &tx) {
            diag(&format!("reading the harness's output failed: {e}"));
        }
    });
    Ok(turn::Turn::new(&s, log, inbox, harness).run(&rx))
}
