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
    Apply { file: PathBuf },
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
        EnvCmd::Apply { file } => {
            let spec = read_yaml(&file)?;
            with_api(home, |api| async move {
                let r = api
                    .post("/v1/environments", &spec)
                    .await
                    .map_err(|e| match e {
                        // The server's message names the key and what is allowed.
                        ApiError::Status {
                            status: 400,
                            message,
                        } => CliError::Usage(format!("{}: {message}", file.display())),
                        e => e.into_cli(),
                    })?;
                let env = &r["environment"];
                progress::say(&format!(
                    "environment: {}",
                    env["name"].as_str().unwrap_or("?")
                ));
                progress::say(if r["created"].as_bool() == Some(true) {
                    "created"
                } else {
                    "replaced (sandboxes made before keep the old spec)"
                });
                Ok(ExitCode::SUCCESS)
            })
        }
        EnvCmd::List { json } => with_api(home, |api| async move {
            let r = api
                .get("/v1/environments")
                .await
                .map_err(|e| e.into_cli())?;
            for e in r["environments"].as_array().cloned().unwrap_or_default() {
                if json {
                    progress::say(&e.to_string());
                    continue;
                }
                let s = &e["spec"];
                let egress = match &s["egress"] {
                    Value::String(x) => x.clone(),
                    Value::Object(m) if m.contains_key("allowlist") => "allowlist".into(),
                    _ => "?".into(),
                };
                let mut line = format!(
                    "{}  {}  egress {}  uid_split {}",
                    e["name"].as_str().unwrap_or("?"),
                    s["provider"].as_str().unwrap_or("?"),
                    egress,
                    s["uid_split"]
                );
                if let Some(i) = s["image"].as_str() {
                    line.push_str(&format!("  image {i}"));
                }
                if let Some(why) = e["invalid"].as_str() {
                    line.push_str(&format!("  INVALID: {why}"));
                }
                progress::say(&line);
            }
            Ok(ExitCode::SUCCESS)
        }),
        EnvCmd::Show { name, json } => with_api(home, |api| async move {
            let r = api
                .get(&format!("/v1/environments/{}", seg(&name)))
                .await
                .map_err(not_found("environment", &name))?;
            let env = &r["environment"];
            if json {
                progress::say(&env.to_string());
            } else {
                progress::say(yaml(&env["spec"]).trim_end());
                if let Some(why) = env["invalid"].as_str() {
                    progress::note(why);
                }
            }
            Ok(ExitCode::SUCCESS)
        }),
    }
}
