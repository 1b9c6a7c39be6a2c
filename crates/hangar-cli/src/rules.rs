//! `hangar rules check`: asks the deny-risky rules (hangar-rules) about one tool call, as the
//! driver and the Tower hook do, and prints their answer as one JSON object.

use std::path::PathBuf;
use std::process::ExitCode;

use hangar_rules::{Context, Rules};
use serde_json::json;

use crate::exit::CliError;

/// Exit status when the rules deny the call.
pub const DENIED: u8 = 3;

/// `hangar rules check --tool Bash --command CMD` or `--tool Write --path PATH`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The tool: Bash, or an edit (Write, Edit, MultiEdit, NotebookEdit) or read (Read) tool.
    #[arg(long)]
    tool: String,
    /// The shell command (for Bash).
    #[arg(long)]
    command: Option<String>,
    /// The file the tool touches (for edit and read tools).
    #[arg(long)]
    path: Option<String>,
    /// The workspace the call runs in (default: the current folder).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// An environment's rules file (TOML: `disable = [ids]`, `[[rule]]` tables) on top of the
    /// default set.
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
}

/// Prints `{"decision","rule","reason"}`; exit 0 on allow, 3 on deny.
pub fn check(a: &CheckArgs) -> Result<ExitCode, CliError> {
    let rules = match &a.rules {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| CliError::Failed(format!("cannot read {}: {e}", f.display())))?;
            Rules::configure(&text).map_err(|e| CliError::Usage(format!("{}: {e}", f.display())))?
        }
        None => Rules::default_set(),
    };
    let workspace = match &a.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir()
            .map_err(|e| CliError::Failed(format!("cannot read the current folder: {e}")))?,
    };
    let ctx = Context::new(workspace);
    let input = match (a.tool.as_str(), &a.command, &a.path) {
        ("Bash", Some(c), None) => json!({"command": c}),
        ("Bash", _, _) => {
            return Err(CliError::Usage(
                "--tool Bash takes --command CMD (and no --path)".into(),
            ));
        }
        (_, None, Some(p)) => json!({"file_path": p}),
        (t, _, _) => {
            return Err(CliError::Usage(format!(
                "--tool {t} takes --path PATH (and no --command)"
            )));
        }
    };
    let v = rules.check_tool(&a.tool, &input, &ctx);
    crate::progress::say(
        &json!({"decision": v.decision, "rule": v.rule, "reason": v.reason}).to_string(),
    );
    Ok(if v.allowed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(DENIED)
    })
}
