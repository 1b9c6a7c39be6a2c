//! `hangar run`: one turn of an agent in a local folder, through the driver.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use clap::Args;
use hangar_protocol::client::{Delivery, Mailbox};
use hangar_protocol::command::body;
use hangar_protocol::{ControlDir, Kind};

use crate::exit::CliError;
use crate::logs::Tail;
use crate::{find, progress};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The folder the agent works in (default: the current folder).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The coding agent.
    #[arg(long, default_value = "claude", value_parser = ["claude", "codex"])]
    harness: String,
    /// The model the agent uses (passed to the harness).
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// A Codex configuration override, passed to Codex as its own `-c KEY=VALUE` (repeatable),
    /// e.g. to name a model provider and its base_url.
    #[arg(long = "codex-config", value_name = "KEY=VALUE")]
    codex_config: Vec<String>,
    /// The job's check: a shell command run in the folder when the agent is done; its failure
    /// goes back to the agent.
    #[arg(long, value_name = "CMD")]
    verify: Option<String>,
    /// How many times a failed check goes back to the agent.
    #[arg(long, default_value_t = 3, requires = "verify")]
    max_verify_rounds: u32,
    /// Give up on a model server that has not answered for this long (Codex retries forever).
    #[arg(long, value_name = "SECS")]
    model_timeout: Option<u32>,
    /// `ask`: a person answers each permission request; `auto`: none are asked.
    #[arg(long, default_value = "ask", value_parser = ["ask", "auto"])]
    policy: String,
    /// Print the run log's lines as written instead of progress.
    #[arg(long)]
    json: bool,
    /// What the agent should do.
    prompt: String,
}

fn new_run_id() -> Result<String, CliError> {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).map_err(|e| CliError::Failed(format!("OS random source: {e}")))?;
    Ok(format!("run-{}", hex::encode(b)))
}

pub fn run(home: &Path, a: RunArgs) -> Result<ExitCode, CliError> {
    let dir = match a.dir {
        Some(d) => d,
        None => {
            std::env::current_dir().map_err(|e| CliError::Failed(format!("current folder: {e}")))?
        }
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| CliError::Usage(format!("--dir {}: {e}", dir.display())))?;
    if !dir.is_dir() {
        return Err(CliError::Usage(format!(
            "--dir {} is not a folder",
            dir.display()
        )));
    }
    let driver = find::driver()?;
    let (bin_flag, bin) = match a.harness.as_str() {
        "codex" => ("--codex-bin", find::codex()?),
        _ => ("--claude-bin", find::claude()?),
    };
    if a.harness != "codex" && !a.codex_config.is_empty() {
        return Err(CliError::Usage(
            "--codex-config is for --harness codex".into(),
        ));
    }
    let run = new_run_id()?;
    let mailbox = Mailbox::create(home, &run)?;
    // The prompt is the run's first command: it waits in in/ for the driver.
    match mailbox.send(Kind::Prompt, body::text(&a.prompt))? {
        Delivery::Landed(_) => {}
        Delivery::TurnEnded(_) => {
            return Err(CliError::Failed("the new run's in/ is missing".into()));
        }
    }
    progress::say(&format!("run: {run}"));
    let ctl: &ControlDir = mailbox.ctl();
    let mut cmd = Command::new(&driver);
    cmd.arg("--ctl")
        .arg(ctl.root())
        .args([
            "--run",
            &run,
            "--harness",
            &a.harness,
            "--policy",
            &a.policy,
        ])
        .arg("--cwd")
        .arg(&dir)
        .arg(bin_flag)
        .arg(&bin);
    if let Some(m) = &a.model {
        cmd.args(["--model", m]);
    }
    for kv in &a.codex_config {
        cmd.args(["--codex-config", kv]);
    }
    if let Some(v) = &a.verify {
        cmd.args([
            "--verify",
            v,
            "--max-verify-rounds",
            &a.max_verify_rounds.to_string(),
        ]);
    }
    if let Some(t) = a.model_timeout {
        cmd.args(["--model-timeout", &t.to_string()]);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        // Its own process group: Ctrl-C reaches `hangar run`, which turns it into an interrupt.
        .process_group(0)
        .spawn()
        .map_err(|e| {
            CliError::Failed(format!("cannot start the driver {}: {e}", driver.display()))
        })?;
    let mut tail = Tail::new(ctl.run_log());
    let mut printer = progress::Printer::new(&run, a.json);
    catch_ctrl_c();
    let mut interrupts_seen = 0;
    let status = loop {
        let presses = CTRL_C.load(Ordering::Relaxed);
        if presses > interrupts_seen {
            interrupts_seen = presses;
            if presses == 1 {
                progress::say(
                    "interrupting the turn (Ctrl-C again leaves it running in the background)",
                );
                crate::send::interrupt_quietly(&mailbox);
            } else {
                progress::say(&format!(
                    "the turn goes on without this terminal: hangar log {run} --follow"
                ));
                return Ok(ExitCode::from(130));
            }
        }
        let done = child
            .try_wait()
            .map_err(|e| CliError::Failed(format!("waiting for the driver: {e}")))?;
        for line in tail.read_lines() {
            printer.line(&line);
        }
        if let Some(st) = done {
            for line in tail.read_lines() {
                printer.line(&line);
            }
            break st;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = std::io::stdout().flush();
    let code = status.code().unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// Ctrl-C presses seen by `hangar run`.
static CTRL_C: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_ctrl_c(_: libc::c_int) {
    CTRL_C.fetch_add(1, Ordering::Relaxed);
}

fn catch_ctrl_c() {
    // SAFETY: the handler only touches an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_ctrl_c as *const () as libc::sighandler_t);
    }
}
