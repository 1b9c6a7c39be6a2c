//! `hangar fork RUN --step N [--dir D] [--prompt TEXT] [--json]`: a new sandbox with exactly the
//! step's tree and a new session whose conversation is the source's up to that step.
//!
//! A run in a sandbox forks into a new sandbox of the same environment, the harness's
//! conversation copied into it; a run in place (`hangar run`) into a new folder, never the
//! person's own. `dir:` is where the fork's work tree is on this machine.
//!
//! Prints, in this order (stable, one per line): `fork: SESSION`, `sandbox: ID`, `dir: PATH`,
//! `tree: TREE`, `conversation: …`; with `--prompt`, then `turn:` and `run:`. Warnings (an
//! untrusted tree, a conversation that could not be cut exactly) go to stderr as
//! `hangar: warning: …`. `--json` prints the API's answer instead.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use crate::api::seg;
use crate::exit::CliError;
use crate::progress;
use crate::sessions::{not_found, with_api};

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The run whose step to fork (`hangar diff RUN` lists its steps).
    run: String,
    /// The step (0 is the run's first tree).
    #[arg(long)]
    step: usize,
    /// The fork's work tree: must not exist, or be empty (default
    /// `$HANGAR_HOME/forks/<sandbox id>`). For a run in a plain folder or in place (`hangar
    /// run`); a run in a sandbox with a copy forks into a new sandbox of its environment, whose
    /// workspace is the work tree (printed as `dir:`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Start the fork's first turn with this message (needs a server watching: `hangar serve`).
    #[arg(long)]
    prompt: Option<String>,
    /// The API's answer (the fork's record, session and sandbox) as JSON.
    #[arg(long)]
    json: bool,
}

pub fn fork(home: &Path, a: &ForkArgs) -> Result<ExitCode, CliError> {
    let mut body = json!({"step": a.step});
    if let Some(d) = &a.dir {
        let d = std::path::absolute(d)
            .map_err(|e| CliError::Usage(format!("--dir {}: {e}", d.display())))?;
        body["dir"] = json!(d);
    }
    if let Some(p) = &a.prompt {
        body["prompt"] = json!(p);
    }
    let (run, json_out) = (a.run.clone(), a.json);
    // Without a first turn nothing needs watching: the store alone will do.
    with_api(home, a.prompt.is_none(), |api| async move {
        let r = api
            .post(&format!("/v1/runs/{}/fork", seg(&run)), &body)
            .await
            .map_err(not_found("run", &run))?;
        if json_out {
            progress::say(&r.to_string());
            return Ok(ExitCode::SUCCESS);
        }
        for line in lines(&r) {
            progress::say(&line);
        }
        for w in r["fork"]["warnings"].as_array().into_iter().flatten() {
            progress::note(&format!("warning: {}", w.as_str().unwrap_or_default()));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The stable lines of a fork's answer.
fn lines(r: &Value) -> Vec<String> {
    let f = &r["fork"];
    let s = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let c = &f["conversation"];
    let conversation = match (c["parent"].as_str(), c["exact"].as_bool()) {
        (None, Some(true)) => "a new conversation (nothing was said before this step)".to_owned(),
        (None, _) => "a new conversation (not exact: see the warning)".to_owned(),
        (Some(p), exact) => format!(
            "{} {p} up to {}{}",
            if f["capability"]["cut"] == "turn" {
                "thread"
            } else {
                "session"
            },
            c["at"].as_str().unwrap_or("its end"),
            if exact == Some(true) {
                ""
            } else {
                " (not exact: see the warning)"
            }
        ),
    };
    let mut out = vec![
        format!("fork: {}", s(&r["session"]["id"])),
        format!("sandbox: {}", s(&r["sandbox"]["id"])),
        format!("dir: {}", s(&f["dir"])),
        format!(
            "tree: {} (step {} of run {}{})",
            s(&f["tree"]),
            f["step"],
            s(&f["run"]),
            if f["trusted"] == true {
                ""
            } else {
                ", untrusted"
            }
        ),
        format!("conversation: {conversation}"),
    ];
    if r.get("turn").is_some() {
        out.push(format!("turn: {}", s(&r["turn"]["id"])));
        out.push(format!("run: {}", s(&r["run"]["id"])));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_start_with_the_fork_and_its_sandbox() {
        let r = json!({
            "fork": {"dir": "/f", "tree": "abc", "step": 2, "run": "run-1", "trusted": false,
                     "conversation": {"parent": "s1", "at": "u9", "exact": true},
                     "capability": {"cut": "message"}, "warnings": []},
            "session": {"id": "ses-2"}, "sandbox": {"id": "sb-2"},
        });
        assert_eq!(
            lines(&r),
            [
                "fork: ses-2",
                "sandbox: sb-2",
                "dir: /f",
                "tree: abc (step 2 of run run-1, untrusted)",
                "conversation: session s1 up to u9",
            ]
        );
    }
}
