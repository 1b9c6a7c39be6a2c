//! `hangar env apply | list | show` and `hangar sb ...`, through the API (in-process when no
//! server answers: these commands need no run watcher).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use serde_json::Value;

use crate::api::{Api, ApiError, seg};
use crate::exit::CliError;
use crate::{local, progress, serve};

#[derive(Debug, Subcommand)]
pub enum EnvCmd {
    /// Create or replace an environment from a YAML file (`-` reads stdin); prints
    /// `environment: NAME` and whether it was created or replaced.
    Apply {
        file: PathBuf,
        /// For a docker environment: pull its image onto the server's machine now, unless it is
        /// there, printing the pull's progress (`pull: …`), rather than when its first sandbox
        /// is made. The registry login is the environment's credential DOCKER_REGISTRY_AUTH.
        #[arg(long)]
        pull: bool,
    },
    /// List the environments.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Print an environment as YAML.
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

/// Runs `f` against the server, or the API in-process over `$HANGAR_HOME` (made if missing).
use hangar_cloud::e2b::terminal;

fn with_api<F, Fut>(home: &Path, f: F) -> Result<ExitCode, CliError>
where
    F: FnOnce(Api) -> Fut,
    Fut: Future<Output = Result<ExitCode, CliError>>,
{
    let rt = serve::runtime()?;
    let result = rt.block_on(async {
        let conn = local::connect_admin(home).await?;
        let r = f(conn.api.clone()).await;
        conn.close().await;
        r
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

fn not_found(what: &'static str, id: &str) -> impl FnOnce(ApiError) -> CliError {
    let id = id.to_owned();
    move |e| match e.status() {
        Some(404) => CliError::Failed(format!("no {what} {id}")),
        _ => e.into_cli(),
    }
}

/// Reads a YAML file (or stdin) into JSON; the error names the file and the line.
fn read_yaml(file: &Path) -> Result<Value, CliError> {
    let text = if file == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| CliError::Failed(format!("cannot read stdin: {e}")))?;
        s
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| CliError::Failed(format!("cannot read {}: {e}", file.display())))?
    };
    serde_yaml::from_str(&text)
        .map_err(|e| CliError::Usage(format!("{}: not valid YAML: {e}", file.display())))
}

fn yaml(v: &Value) -> String {
    serde_yaml::to_string(v).unwrap_or_else(|_| v.to_string())
}

pub fn env(home: &Path, cmd: EnvCmd) -> Result<ExitCode, CliError> {
    match cmd {
        EnvCmd::Apply { file, pull } => {
            let spec = hangar_api::EnvironmentSpec(read_yaml(&file)?);
            with_api(home, |api| async move {
                let r: hangar_api::EnvironmentApplied = api
                    .post_as("/v1/environments", &spec)
                    .await
                    .map_err(|e| match e {
                        // The server's message names the key and what is allowed.
                        ApiError::Status {
                            status: 400,
                            message,
                        } => CliError::Usage(format!("{}: {message}", file.display())),
                        e => e.into_cli(),
                    })?;
                progress::say(&format!("environment: {}", r.environment.name));
                progress::say(if r.created {
                    "created"
                } else {
                    "replaced (sandboxes made before keep the old spec)"
                });
                if pull {
                    pull_image(&api, &r.environment).await?;
                }
                Ok(ExitCode::SUCCESS)
            })
        }
        EnvCmd::List { json } => with_api(home, |api| async move {
            let r = api
                .get("/v1/environments")
                .await
                .map_err(|e| e.into_cli())?;
            // `--json` prints the server's objects as they came; the lines read the typed fields.
            let raw = r["environments"].as_array().cloned().unwrap_or_default();
            let r: hangar_api::Environments =
                api.typed("/v1/environments", r).map_err(|e| e.into_cli())?;
            for (e, raw) in r.environments.iter().zip(&raw) {
                if json {
                    progress::say(&raw.to_string());
                    continue;
                }
                // The spec is the person's own document, passed on as written.
                let s = &e.spec.0;
                let egress = match &s["egress"] {
                    Value::String(x) => x.clone(),
                    Value::Object(m) if m.contains_key("allowlist") => "allowlist".into(),
                    _ => "?".into(),
                };
                let mut line = format!(
                    "{}  {}  egress {}  uid_split {}",
                    e.name,
                    s["provider"].as_str().unwrap_or("?"),
                    egress,
                    s["uid_split"]
                );
                if let Some(i) = s["image"].as_str() {
                    line.push_str(&format!("  image {i}"));
                }
                if let Some(why) = &e.invalid {
                    line.push_str(&format!("  INVALID: {why}"));
                }
                progress::say(&line);
            }
            Ok(ExitCode::SUCCESS)
        }),
        EnvCmd::Show { name, json } => with_api(home, |api| async move {
            let path = format!("/v1/environments/{}", seg(&name));
            let r = api
                .get(&path)
                .await
                .map_err(not_found("environment", &name))?;
            if json {
                progress::say(&r["environment"].to_string());
            } else {
                let r: hangar_api::EnvironmentOne =
                    api.typed(&path, r).map_err(|e| e.into_cli())?;
                progress::say(yaml(&r.environment.spec.0).trim_end());
                if let Some(why) = &r.environment.invalid {
                    progress::note(why);
                }
            }
            Ok(ExitCode::SUCCESS)
        }),
    }
}

/// How long `sb create` waits for its sandbox: as long as a provider may need.
const CREATE_LIMIT: Duration = Duration::from_secs(3600);

/// `sb create`: the image pulled first where the person may (a docker environment, an admin),
/// its progress shown; then the sandbox made (the repository copied, the sandbox started), a
/// line every 10 s saying it still is, for as long as the provider needs. The progress goes to
/// stderr: stdout starts with `sandbox: ID`, as scripts read it.
async fn create_with_progress(
    api: &Api,
    body: &hangar_api::CreateSandbox,
) -> Result<hangar_api::SandboxOne, CliError> {
    let env: Option<hangar_api::EnvironmentOne> = api
        .get_as(&format!("/v1/environments/{}", seg(&body.env)))
        .await
        .ok();
    let docker = env
        .as_ref()
        .is_some_and(|e| e.environment.spec.0["provider"] == "docker");
    if docker {
        progress::note(&format!("[1/2] the image of environment {}", body.env));
        pull_named(api, &body.env, true).await?;
    }
    progress::note(&format!(
        "[{}] making the sandbox: copying {} and starting it",
        if docker { "2/2" } else { "1/1" },
        body.repo.display()
    ));
    let started = std::time::Instant::now();
    let making = api.post_waiting::<hangar_api::SandboxOne>("/v1/sandboxes", body, CREATE_LIMIT);
    tokio::pin!(making);
    loop {
        tokio::select! {
            r = &mut making => return r.map_err(|e| e.into_cli()),
            () = tokio::time::sleep(Duration::from_secs(10)) => progress::note(&format!(
                "still making the sandbox ({} s)",
                started.elapsed().as_secs()
            )),
        }
    }
}

/// `env apply --pull`: the environment's image pulled by the server, its progress printed as
/// it comes (`pull: …`), then `image: IMAGE (pulled)` or `(already here)`.
async fn pull_image(api: &Api, env: &hangar_api::Environment) -> Result<(), CliError> {
    let provider = env.spec.0["provider"].as_str().unwrap_or("?");
    if provider != "docker" {
        progress::note(&format!(
            "--pull: environment {} is for provider {provider}: only a docker environment's image is pulled",
            env.name
        ));
        return Ok(());
    }
    pull_named(api, &env.name, false).await
}

/// The image of docker environment `name` pulled by the server, its progress printed. For `sb
/// create` (`for_create`) the progress goes to stderr, and a person who may not pull ahead (not
/// an admin) is told the server pulls it as it makes the sandbox, which is no error.
async fn pull_named(api: &Api, name: &str, for_create: bool) -> Result<(), CliError> {
    let say = |line: &str| {
        if for_create {
            progress::note(line);
        } else {
            progress::say(line);
        }
    };
    let path = format!("/v1/environments/{}/pull", seg(name));
    let mut body = match api.post_stream(&path, &hangar_api::Empty {}).await {
        Ok(b) => b,
        Err(e) if for_create && e.status() == Some(403) => {
            say("the server pulls the image as it makes the sandbox, if it is missing");
            return Ok(());
        }
        Err(e) => return Err(e.into_cli()),
    };
    let odd = |what: &str, e: serde_json::Error| {
        CliError::Failed(format!(
            "the server's {what} event does not read ({e}): are the server and this CLI the same version?"
        ))
    };
    // The server sends a keepalive every 10 s however long a layer takes.
    const QUIET: Duration = Duration::from_secs(60);
    let mut buf = Vec::new();
    loop {
        while let Some((kind, data)) = crate::relay::take_event(&mut buf) {
            match kind.as_deref() {
                Some("progress") => {
                    let p: hangar_api::PullProgress =
                        serde_json::from_str(&data).map_err(|e| odd("progress", e))?;
                    say(&format!("pull: {}", p.line));
                }
                Some("done") => {
                    let d: hangar_api::PullDone =
                        serde_json::from_str(&data).map_err(|e| odd("done", e))?;
                    let how = if d.pulled { "pulled" } else { "already here" };
                    say(&format!("image: {} ({how})", d.image));
                    return Ok(());
                }
                Some("failed") => {
                    let f: hangar_api::PullFailed =
                        serde_json::from_str(&data).map_err(|e| odd("failed", e))?;
                    return Err(CliError::Failed(f.message));
                }
                // Keepalives (comments) and kinds this client does not know.
                _ => {}
            }
        }
        let broke = |why: String| {
            CliError::Failed(format!(
                "the pull's progress broke off: {why} (the server may still be pulling; `hangar env apply --pull` again says when the image is there)"
            ))
        };
        match tokio::time::timeout(QUIET, body.chunk()).await {
            Ok(Ok(Some(c))) => buf.extend_from_slice(&c),
            Ok(Ok(None)) => return Err(broke("the stream ended without an answer".into())),
            Ok(Err(e)) => return Err(broke(e)),
            Err(_) => {
                return Err(broke(format!(
                    "nothing came for {} s, not even a keepalive",
                    QUIET.as_secs()
                )));
            }
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum SbCmd {
    /// Make a sandbox of an environment holding a copy of a repository; prints `sandbox: ID`
    /// first.
    Create {
        #[arg(long)]
        env: String,
        #[arg(long)]
        repo: PathBuf,
        /// The person it is for (default: the token's; another person only for an admin).
        #[arg(long)]
        person: Option<String>,
    },
    /// List the sandboxes.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Removed ones too.
        #[arg(long)]
        all: bool,
    },
    /// Run a command to its end inside (as the agent, or `--as hangar`); exits with its status.
    Exec {
        sb: String,
        /// agent | hangar
        #[arg(long = "as", default_value = "agent")]
        who: String,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Put this terminal into the tmux session of a turn running in the sandbox (the newest
    /// one, or `--run RUN`); detach with tmux's prefix then `d`.
    Attach {
        sb: String,
        #[arg(long)]
        run: Option<String>,
    },
    /// Destroy a sandbox, leaving nothing behind.
    Rm {
        sb: String,
        /// Keep its runs' control folders (their logs).
        #[arg(long)]
        keep_logs: bool,
        /// Even while a turn runs in it.
        #[arg(long)]
        force: bool,
    },
}

/// A closed word of the API as it is spelled on the wire.
fn word(w: &impl serde::Serialize) -> String {
    match serde_json::to_value(w) {
        Ok(Value::String(s)) => s,
        _ => "?".to_owned(),
    }
}

fn say_sandbox(sb: &hangar_api::Sandbox) {
    let split = match sb.capabilities.as_ref() {
        Some(c) if c.uid_split => "on".to_owned(),
        Some(c) => match &c.uid_split_off {
            Some(why) => format!("off ({why})"),
            None => "off".to_owned(),
        },
        None => "?".to_owned(),
    };
    progress::say(&format!("environment: {}", sb.environment));
    progress::say(&format!("provider: {}", word(&sb.provider)));
    progress::say(&format!("person: {}", sb.person));
    progress::say(&format!(
        "workspace: {} (on this machine: {})",
        sb.workspace.as_deref().unwrap_or("?"),
        sb.host_workspace
    ));
    progress::say(&format!("uid split: {split}"));
}

/// What a sandbox without the uid split cannot promise, said when it is made.
fn no_split_warning(sb: &hangar_api::Sandbox) -> Option<String> {
    if sb.capabilities.as_ref().is_none_or(|c| c.uid_split) {
        return None;
    }
    let key = if sb.provider == hangar_api::Provider::Local {
        "the run key is handed to the driver where no other process of the sandbox sees it"
    } else {
        "an agent process left running can read the run key in the moment between its writing and the driver taking it"
    };
    Some(format!(
        "warning: without the uid split the agent runs as the driver's own user: it can stop the driver, write into the run's control folder (its turns are recorded untrusted) and, where the kernel lets a process trace its own user's (Yama ptrace_scope 0), trace the driver before it makes itself non-dumpable; {key}; under policy governed it can read Tower's credential in the run's control folder; the Tower hook is refused here"
    ))
}

/// `hangar sb list [--all] [--json]`: a table, newest first, ids cut to the prefixes that name
/// them (issue 21); `--json` the API's objects, one per line.
async fn list(api: crate::api::Api, json: bool, all: bool) -> Result<ExitCode, CliError> {
    let r = api.get("/v1/sandboxes").await.map_err(|e| e.into_cli())?;
    let raw = r["sandboxes"].as_array().cloned().unwrap_or_default();
    let r: hangar_api::Sandboxes = api.typed("/v1/sandboxes", r).map_err(|e| e.into_cli())?;
    let mut shown: Vec<(&hangar_api::Sandbox, &serde_json::Value)> = r
        .sandboxes
        .iter()
        .zip(&raw)
        .filter(|(sb, _)| all || sb.state == hangar_api::SandboxState::Live)
        .collect();
    if json {
        for (_, raw) in &shown {
            progress::say(&raw.to_string());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if shown.is_empty() {
        progress::say(if all {
            "no sandboxes"
        } else {
            "no live sandboxes (--all lists removed ones too)"
        });
        return Ok(ExitCode::SUCCESS);
    }
    // A table, newest first, ids cut to the prefixes that name them (issue 21).
    shown.sort_by_key(|s| std::cmp::Reverse(s.0.created_at));
    let ids: Vec<&str> = shown.iter().map(|(sb, _)| sb.id.as_str()).collect();
    let short = progress::short_ids(&ids);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let rows = shown
        .iter()
        .zip(short)
        .map(|((sb, _), id)| {
            vec![
                id,
                sb.environment.clone(),
                word(&sb.provider),
                sb.person.clone(),
                word(&sb.state),
                progress::short_tail(&sb.host_workspace, 50),
                progress::age(now.saturating_sub(sb.created_at)),
            ]
        })
        .collect();
    progress::say(&progress::table(
        &[
            "SANDBOX",
            "ENVIRONMENT",
            "PROVIDER",
            "PERSON",
            "STATE",
            "FOLDER",
            "AGE",
        ],
        rows,
    ));
    Ok(ExitCode::SUCCESS)
}

pub fn sb(home: &Path, cmd: SbCmd) -> Result<ExitCode, CliError> {
    match cmd {
        SbCmd::Create { env, repo, person } => {
            let repo = std::path::absolute(&repo)
                .map_err(|e| CliError::Usage(format!("--repo {}: {e}", repo.display())))?;
            let body = hangar_api::CreateSandbox { env, repo, person };
            with_api(home, |api| async move {
                let r = create_with_progress(&api, &body).await?;
                let sb = &r.sandbox;
                progress::say(&format!("sandbox: {}", sb.id));
                say_sandbox(sb);
                if let Some(w) = no_split_warning(sb) {
                    progress::say(&w);
                }
                if let Some(w) = &sb.egress_warning {
                    progress::say(w);
                }
                Ok(ExitCode::SUCCESS)
            })
        }
        SbCmd::List { json, all } => with_api(home, |api| list(api, json, all)),
        SbCmd::Exec { sb, who, cmd } => {
            let who = match who.as_str() {
                "agent" => hangar_api::ExecAs::Agent,
                "hangar" => hangar_api::ExecAs::Hangar,
                _ => return Err(CliError::Usage(format!("--as {who}: one of agent, hangar"))),
            };
            let body = hangar_api::ExecRequest {
                argv: cmd,
                who,
                stdin: None,
            };
            with_api(home, |api| async move {
                let r: hangar_api::ExecOutput = api
                    .post_as(&format!("/v1/sandboxes/{}/exec", seg(&sb)), &body)
                    .await
                    .map_err(not_found("sandbox", &sb))?;
                use std::io::Write;
                let _ = std::io::stdout().write_all(r.stdout.as_bytes());
                let _ = std::io::stdout().flush();
                let _ = std::io::stderr().write_all(r.stderr.as_bytes());
                let status = r.status;
                Ok(ExitCode::from(
                    u8::try_from(status.clamp(0, 255)).unwrap_or(1),
                ))
            })
        }
        SbCmd::Attach { sb, run } => {
            let path = format!("/v1/sandboxes/{}/attach", seg(&sb));
            let (cols, rows) = terminal::window_size().unwrap_or((80, 24));
            let body = hangar_api::AttachRequest {
                run,
                cols: Some(cols),
                rows: Some(rows),
                term: Some(terminal::terminal_type()),
            };
            let mut argv: Vec<String> = Vec::new();
            let mut relayed: Option<i32> = None;
            let (slot, relayed_slot) = (&mut argv, &mut relayed);
            with_api(home, |api| async move {
                let r: hangar_api::AttachAnswer = api
                    .post_as(&path, &body)
                    .await
                    .map_err(not_found("sandbox", &sb))?;
                progress::note(&format!(
                    "attaching to run {} in sandbox {sb} (detach: Ctrl-b d)",
                    r.run
                ));
                if let Some(attach) = r.attach.as_deref() {
                    // An e2b sandbox: the server relays the terminal (envd's token stays there).
                    let keepalive =
                        Duration::from_secs(r.keepalive_secs.unwrap_or(15).clamp(1, 3600));
                    let status = crate::relay::attach(api, attach, &sb, keepalive)
                        .await
                        .map_err(|e| CliError::Failed(e.to_string()))?;
                    *relayed_slot = Some(status);
                    return Ok(ExitCode::SUCCESS);
                }
                *slot = r.argv;
                Ok(ExitCode::SUCCESS)
            })?;
            if let Some(status) = relayed {
                return Ok(ExitCode::from(
                    u8::try_from(status.clamp(0, 255)).unwrap_or(1),
                ));
            }
            let Some((prog, args)) = argv.split_first() else {
                return Err(CliError::Failed("the server gave no attach command".into()));
            };
            // From inside a tmux of the person's own, attaching nests: allowed on purpose.
            let status = std::process::Command::new(prog)
                .args(args)
                .env_remove("TMUX")
                .status()
                .map_err(|e| CliError::Failed(format!("{prog}: {e}")))?;
            Ok(ExitCode::from(
                u8::try_from(status.code().unwrap_or(1).clamp(0, 255)).unwrap_or(1),
            ))
        }
        SbCmd::Rm {
            sb,
            keep_logs,
            force,
        } => with_api(home, |api| async move {
            let path = format!(
                "/v1/sandboxes/{}?keep_logs={keep_logs}&force={force}",
                seg(&sb)
            );
            let _removed: hangar_api::SandboxOne = api
                .delete_as(&path)
                .await
                .map_err(not_found("sandbox", &sb))?;
            progress::say(&format!("removed: {sb}"));
            Ok(ExitCode::SUCCESS)
        }),
    }
}
