//! `hangar run`: one turn of an agent in a local folder, through the control plane's API — the
//! server at `HANGAR_URL`, or, when none answers, one this process serves for the turn's
//! duration — with progress from the run's log as it is written.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use crate::api::{Api, ApiError, seg};
use crate::exit::CliError;
use crate::follow::{LogFollower, POLL, Polled};
use crate::local::{Local, Mode, NoLocal};
use crate::{api, progress, serve};

/// How a turn runs (`hangar run`, `hangar session start`).
#[derive(Debug, Args)]
pub struct TurnArgs {
    /// The folder the agent works in (default: the current folder); with `--env`, the
    /// repository the new sandbox holds a copy of.
    #[arg(long, value_name = "DIR", conflicts_with = "sb")]
    dir: Option<PathBuf>,
    /// Run in this sandbox (`hangar sb create`).
    #[arg(long, value_name = "SB", conflicts_with = "env")]
    sb: Option<String>,
    /// Make a sandbox of this environment (a copy of `--dir`) and run there.
    #[arg(long, value_name = "ENV")]
    env: Option<String>,
    /// The coding agent (default: HANGAR_HARNESS, the config file's `run.harness`, else
    /// claude).
    #[arg(long, value_parser = ["claude", "codex"])]
    harness: Option<String>,
    /// The model the agent uses (passed to the harness; default: HANGAR_MODEL, `run.model`).
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
    /// Run the harness even if its version has not passed hangar's conformance suite
    /// (`hangar harness check`); each turn warns and its manifest records it.
    #[arg(long)]
    unverified_harness: bool,
    /// `ask`: a person answers each permission request; `auto`: none are asked; `governed`:
    /// Tower answers each (the server needs HANGAR_GOVERNANCE_URL and
    /// HANGAR_GOVERNANCE_HOOK_CREDENTIAL). Default: HANGAR_POLICY (`run.policy`), else the
    /// environment's `governance.policy`, else `ask`; an environment's policy is the floor (a
    /// weaker one is refused).
    #[arg(long, value_parser = ["ask", "auto", "governed"])]
    policy: Option<String>,
    /// What the agent should do.
    prompt: String,
}

impl TurnArgs {
    /// The body of `POST /v1/sessions`, after the checks that need no server.
    pub fn session_body(&self) -> Result<hangar_api::StartSession, CliError> {
        let options = self.options()?;
        // clap allows only the words; the API's types name them.
        let harness = self
            .harness()
            .parse()
            .map_err(|e: hangar_protocol::UnknownWord| {
                CliError::Usage(format!(
                    "--harness (or {}): {e}",
                    hangar_protocol::env::HANGAR_HARNESS
                ))
            })?;
        let policy = match self
            .policy
            .clone()
            .or_else(|| hangar_protocol::env::var(hangar_protocol::env::HANGAR_POLICY))
        {
            Some(p) => Some(p.parse().map_err(|e: hangar_protocol::UnknownWord| {
                CliError::Usage(format!(
                    "--policy (or {}): {e}",
                    hangar_protocol::env::HANGAR_POLICY
                ))
            })?),
            // None lets the server pick the environment's.
            None => None,
        };
        let mut body = hangar_api::StartSession {
            dir: None,
            sandbox: None,
            env: None,
            no_sandbox: false,
            harness,
            policy,
            prompt: self.prompt.clone(),
            options,
        };
        if let Some(sb) = &self.sb {
            body.sandbox = Some(sb.clone());
            return Ok(body);
        }
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => std::env::current_dir()
                .map_err(|e| CliError::Failed(format!("current folder: {e}")))?,
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
        body.dir = Some(dir);
        body.env = self.env.clone();
        Ok(body)
    }

    /// `--harness`, else `HANGAR_HARNESS`, else `claude`.
    pub fn harness(&self) -> String {
        self.harness
            .clone()
            .or_else(|| hangar_protocol::env::var(hangar_protocol::env::HANGAR_HARNESS))
            .unwrap_or_else(|| "claude".into())
    }

    fn options(&self) -> Result<hangar_api::TurnOptions, CliError> {
        if self.harness() != "codex" && !self.codex_config.is_empty() {
            return Err(CliError::Usage(
                "--codex-config is for --harness codex".into(),
            ));
        }
        Ok(hangar_api::TurnOptions {
            model: self
                .model
                .clone()
                .or_else(|| hangar_protocol::env::var(hangar_protocol::env::HANGAR_MODEL)),
            codex_config: self.codex_config.clone(),
            verify: self.verify.clone(),
            // Only with a check: without one there is nothing to send the agent back for.
            max_verify_rounds: self.verify.as_ref().map(|_| self.max_verify_rounds),
            model_timeout: self.model_timeout,
            unverified_harness: self.unverified_harness,
        })
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    turn: TurnArgs,
    /// Run the agent on this machine directly, as the server's own user, not in a local
    /// sandbox on the folder (the default without --sb or --env: bubblewrap, the folder itself
    /// at /workspace, the rest of the system read-only). The server `hangar run` starts for
    /// itself allows it; a `hangar serve` only with --unsandboxed-folders
    /// (HANGAR_UNSANDBOXED_FOLDERS=allow).
    #[arg(long, conflicts_with_all = ["sb", "env"])]
    no_sandbox: bool,
    /// Print the run log's lines as written instead of progress.
    #[arg(long)]
    json: bool,
}

/// How long the server may stay away before `hangar run` serves its run itself.
const TAKEOVER_AFTER: Duration = Duration::from_secs(5);

pub fn run(home: &Path, a: RunArgs) -> Result<ExitCode, CliError> {
    let mut body = a.turn.session_body()?;
    if a.no_sandbox {
        body.no_sandbox = true;
    } else if a.turn.sb.is_none() && a.turn.env.is_none() {
        // The embedded default: a local sandbox on the folder itself.
        body.env = Some(hangar_control::IN_PLACE_ENV.to_owned());
    }
    let unsandboxed = a.no_sandbox;
    let rt = serve::runtime()?;
    let result = rt.block_on(async {
        let api = Api::from_env(home)?;
        let mut local = match api.health().await {
            Ok(()) => None,
            Err(ApiError::NoServer(_)) => {
                let prefer = api::listen_addr(api.base());
                let mode = Mode::Embedded {
                    prefer,
                    unsandboxed,
                };
                match Local::start(home, mode).await {
                    Ok(l) => Some(l),
                    Err(NoLocal::Failed(e)) => return Err(e),
                    Err(NoLocal::Nothing(m)) => return Err(CliError::Failed(m)),
                }
            }
            Err(e) => return Err(e.into_cli()),
        };
        let api = match &local {
            Some(l) => l.api()?,
            None => api,
        };
        let r = drive(home, &api, &mut local, &body, a.json).await;
        if let Some(l) = local {
            l.stop().await;
        }
        r
    });
    let _ = std::io::stdout().flush();
    rt.shutdown_timeout(Duration::from_secs(2));
    result
}

/// Starts the session and follows its first turn to its end; the turn's status.
async fn drive(
    home: &Path,
    api: &Api,
    local: &mut Option<Local>,
    body: &hangar_api::StartSession,
    json_out: bool,
) -> Result<ExitCode, CliError> {
    let started = api.post("/v1/sessions", body).await;
    let started = started.and_then(|v| api.typed::<hangar_api::Started>("/v1/sessions", v));
    let started = started.map_err(|e| match e {
        ApiError::Status { status: 404, .. } => CliError::Failed(format!(
            "{} does not serve /v1/sessions: is HANGAR_URL a hangar server?",
            api.base()
        )),
        ApiError::Status {
            status: 403,
            message,
            ..
        } if body.no_sandbox => CliError::Failed(format!(
            "--no-sandbox is refused by the server at {}: {message}",
            api.base()
        )),
        e => e.into_cli(),
    })?;
    let (run, turn, session) = (started.run.id, started.turn.summary.id, started.session.id);
    progress::say(&format!("run: {run}"));
    if !json_out {
        progress::say(&format!(
            "session: {session} (the next turn: hangar send {session} TEXT)"
        ));
        // A sandbox of a provider's (the built-in in-place one, or --sb/--env); a plain folder
        // (--no-sandbox) is not one.
        if body.env.is_some() || body.sandbox.is_some() {
            progress::say(&format!("sandbox: {}", started.session.sandbox_id));
        }
    }
    catch_ctrl_c();
    let mut printer = progress::Printer::new(&run, json_out);
    let mut prompter = crate::prompt::Prompter::for_terminal(&run, json_out);
    let mut follower = LogFollower::new(api.clone(), &run);
    let mut interrupts_seen = 0;
    let mut takeover_tried: Option<std::time::Instant> = None;
    while !follower.ended {
        let presses = CTRL_C.load(Ordering::Relaxed);
        if presses > interrupts_seen {
            interrupts_seen = presses;
            if presses == 1 {
                progress::say(
                    "interrupting the turn (Ctrl-C again leaves it running in the background)",
                );
                let (api, run) = (follower.api.clone(), run.clone());
                tokio::spawn(async move { interrupt_quietly(&api, &run).await });
            } else {
                progress::say(&format!(
                    "the turn goes on without this terminal: hangar log {run} --follow"
                ));
                return Ok(ExitCode::from(130));
            }
        }
        match follower.poll().await? {
            Polled::Lines(lines) => {
                let quiet = lines.is_empty();
                printer.verified(follower.verified, follower.why.as_deref());
                for line in lines {
                    printer.line(&line);
                    if let Some(p) = &mut prompter {
                        p.saw(&line);
                    }
                }
                if let Some(p) = &mut prompter {
                    p.step(&follower.api).await;
                }
                if quiet && !follower.ended {
                    tokio::time::sleep(POLL).await;
                }
            }
            Polled::Lost(for_how_long) => {
                if local.is_none()
                    && for_how_long >= TAKEOVER_AFTER
                    && takeover_tried.is_none_or(|t| t.elapsed() > Duration::from_secs(30))
                {
                    takeover_tried = Some(std::time::Instant::now());
                    let mode = Mode::Takeover {
                        run: run.clone(),
                        unsandboxed: body.no_sandbox,
                    };
                    if let Ok(l) = Local::start(home, mode).await {
                        progress::note(&format!(
                            "the server stays away; serving this run from here ({}) until it ends",
                            l.url
                        ));
                        follower.switch(l.api()?);
                        *local = Some(l);
                        continue;
                    }
                }
                tokio::time::sleep(follower.backoff()).await;
            }
        }
    }
    let api = follower.api.clone();
    let path = format!("/v1/turns/{}", seg(&turn));
    // The log says the turn ended; the store says so once the run's watcher has read that far,
    // which under load comes a moment later (an exit status read before it was 1, silently).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let t: hangar_api::Turn = loop {
        let t: hangar_api::Turn = api
            .typed(&path, until_ok(&api, &path).await?)
            .map_err(|e| e.into_cli())?;
        let settled = !matches!(
            t.summary.state,
            hangar_api::TurnState::Queued | hangar_api::TurnState::Running
        );
        if settled || std::time::Instant::now() > deadline {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if matches!(
        t.summary.state,
        hangar_api::TurnState::Queued | hangar_api::TurnState::Running
    ) {
        progress::note(&format!(
            "the run's log ended, but the server has not recorded the turn's end after 60 s: hangar turn show {turn}"
        ));
    }
    if !follower.handed_back.is_empty() {
        next_turn_note(&api, &session, &turn, local.is_some()).await;
    }
    let code = match (t.summary.state, t.summary.status) {
        (hangar_api::TurnState::Ended, Some(s)) => u8::try_from(s).unwrap_or(1),
        _ => 1,
    };
    Ok(ExitCode::from(code))
}

/// A GET that waits out a server that is away.
async fn until_ok(api: &Api, path: &str) -> Result<Value, CliError> {
    let mut wait = Duration::from_millis(250);
    loop {
        match api.get(path).await {
            Ok(v) => return Ok(v),
            Err(e) if e.transient() => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e.into_cli()),
        }
    }
}

/// Messages the driver handed back start the session's next turn: say which, once it is there.
async fn next_turn_note(api: &Api, session: &str, turn: &str, serving_here: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let path = format!("/v1/sessions/{}", seg(session));
        if let Ok(s) = api.get_as::<hangar_api::SessionTurns>(&path).await {
            let after = s
                .turns
                .iter()
                .map(|t| &t.summary)
                .skip_while(|t| t.id != turn)
                .nth(1)
                .filter(|t| t.state != hangar_api::TurnState::Queued);
            if let Some(next) = after {
                let run = next.run_id.as_deref().unwrap_or("?");
                let where_ = if serving_here {
                    "; it goes on when this command ends, and the next server (`hangar serve`) records it"
                } else {
                    ""
                };
                progress::note(&format!(
                    "the messages the turn did not take started the next turn {} (run {run}): hangar log {run} --follow{where_}",
                    next.id
                ));
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `hangar run`'s Ctrl-C: send an interrupt and say what came of it, without failing the run.
async fn interrupt_quietly(api: &Api, run: &str) {
    match api
        .post(
            &format!("/v1/runs/{}/interrupt", seg(run)),
            &hangar_api::Empty {},
        )
        .await
    {
        Ok(_) => {}
        Err(e) => match e.into_cli() {
            CliError::Refused(reason) => progress::say(&format!("interrupt refused: {reason}")),
            CliError::Ended(_) => progress::say("the turn had already ended"),
            e => progress::say(&format!("could not interrupt: {e}")),
        },
    }
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
