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

use crate::api::seg;
use crate::exit::CliError;
use crate::progress;
use crate::sessions::{not_found, with_api};
use clap::Args;

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The run whose step to fork (`hangar diff RUN` lists its steps).
    run: String,
    /// The step (0 is the run's first tree).
    #[arg(long)]
    step: u64,
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
    let dir = match &a.dir {
        Some(d) => Some(
            std::path::absolute(d)
                .map_err(|e| CliError::Usage(format!("--dir {}: {e}", d.display())))?,
        ),
        None => None,
    };
    let body = hangar_api::ForkRequest {
        step: a.step,
        dir,
        prompt: a.prompt.clone(),
    };
    let (run, json_out) = (a.run.clone(), a.json);
    // Without a first turn nothing needs watching: the store alone will do.
    with_api(home, a.prompt.is_none(), |api| async move {
        let path = format!("/v1/runs/{}/fork", seg(&run));
        let r = api
            .post(&path, &body)
            .await
            .map_err(not_found("run", &run))?;
        if json_out {
            progress::say(&r.to_string());
            return Ok(ExitCode::SUCCESS);
        }
        let r: hangar_api::Forked = api.typed(&path, r).map_err(|e| e.into_cli())?;
        for line in lines(&r) {
            progress::say(&line);
        }
        for w in &r.fork.warnings {
            progress::note(&format!("warning: {w}"));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The stable lines of a fork's answer.
fn lines(r: &hangar_api::Forked) -> Vec<String> {
    let f = &r.fork;
    let c = &f.conversation;
    let conversation = match (&c.parent, c.exact) {
        (None, true) => "a new conversation (nothing was said before this step)".to_owned(),
        (None, false) => "a new conversation (not exact: see the warning)".to_owned(),
        (Some(p), exact) => format!(
            "{} {p} up to {}{}",
            if f.capability.cut == hangar_api::Cut::Turn {
                "thread"
            } else {
                "session"
            },
            c.at.as_deref().unwrap_or("its end"),
            if exact {
                ""
            } else {
                " (not exact: see the warning)"
            }
        ),
    };
    let mut out = vec![
        format!("fork: {}", r.session.id),
        format!("sandbox: {}", r.sandbox.id),
        format!("dir: {}", f.dir),
        format!(
            "tree: {} (step {} of run {}{})",
            f.tree,
            f.step,
            f.run,
            if f.trusted { "" } else { ", untrusted" }
        ),
        format!("conversation: {conversation}"),
    ];
    if let (Some(turn), Some(run)) = (&r.turn, &r.run) {
        out.push(format!("turn: {}", turn.summary.id));
        out.push(format!("run: {}", run.id));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_start_with_the_fork_and_its_sandbox() {
        let r: hangar_api::Forked = serde_json::from_value(json!({
            "fork": {"session": "ses-2", "sandbox": "sb-2", "dir": "/f", "run": "run-1",
                     "turn": "turn-1", "source_session": "ses-1", "step": 2, "tree": "abc",
                     "trusted": false, "head": null, "repository": false,
                     "conversation": {"parent": "s1", "at": "u9", "exact": true},
                     "capability": {"harness": "claude", "cut": "message",
                                    "exact_at_every_step": true, "how": "resume"},
                     "warnings": []},
            "session": {"id": "ses-2", "sandbox_id": "sb-2", "harness": "claude",
                        "policy": "ask", "harness_session_id": null, "options": {},
                        "turn_count": 0, "created_at": 1},
            "sandbox": {"id": "sb-2", "environment": "in-place", "kind": "local",
                        "workdir": "/f", "person": "a@example.com"},
        }))
        .unwrap();
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
