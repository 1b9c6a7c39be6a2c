//! Forks of runs in a provider's sandbox (local, in place or with a copy, docker, kubernetes and
//! e2b): a new sandbox of the source's environment, and the harness's conversation carried from
//! the source sandbox's agent home into the new one's.
//!
//! * The work tree. An environment that copies the repository (`workspace: copy`, the default)
//!   gets the step's tree rebuilt into a staging folder, which the new sandbox copies as any
//!   sandbox copies its repository; the copy is hashed again in the sandbox's workspace (inside
//!   the sandbox by the driver for kubernetes and e2b, whose repository the step is rebuilt on
//!   is taken out of the source sandbox first: `remote.rs`). An
//!   environment that works in place (`in-place`, what `hangar run` uses) never touches the
//!   source's folder (the person's own): the fork's work tree is a new folder (`--dir`, or
//!   `$HANGAR_HOME/forks/<sandbox>`), and the new sandbox works in place on it.
//! * The conversation. Claude Code keeps a session as `~/.claude/projects/<cwd>/<id>.jsonl`,
//!   Codex a thread as `~/.codex/sessions/…/rollout-…-<id>.jsonl`, both in the agent's home
//!   inside the sandbox. Both sandboxes have the work tree at `/workspace`, so the file goes to
//!   the same path in the new sandbox, read and written as the agent (a link the agent planted
//!   resolves with the agent's rights, never hangar's); the fork's first turn then cuts it as a
//!   plain folder's fork does (`--fork PARENT --fork-at CUT`).
//!
//! Refused, audited, saying why: a source sandbox that was removed (its agent home, and with
//! a copying environment the repository the step is built on, went with it; hangar keeps
//! neither), and a conversation file that is not there.

use std::path::{Path, PathBuf};

use hangar_sandbox::layout::AGENT_HOME;
use hangar_sandbox::{ExecRequest, Provider, Sandbox, Who};
use hangar_store::Harness;

use crate::error::ControlError;
use crate::plane::ControlPlane;
use crate::sandboxes::with_provider;

/// The largest conversation file a fork carries from one sandbox to another.
const MAX_CONVERSATION_BYTES: u64 = 256 << 20;

/// Why a run in `sb` (its row `row`) cannot be forked, if it cannot.
pub(super) fn refusal(run: &str, row: &hangar_store::Sandbox, sb: &Sandbox) -> Option<String> {
    if row.state != "live" {
        let repo = if sb.env.in_place {
            String::new()
        } else {
            ", and so did its copy of the repository, whose objects the step's tree is built on"
                .to_owned()
        };
        return Some(format!(
            "the fork is refused: run {run} ran in sandbox {} (environment {}), which was removed (`hangar sb rm`): the harness's conversation was in its agent home, which went with it{repo}; hangar keeps the run's log and the turn's own objects, not these, so the step cannot be forked",
            sb.id, row.environment
        ));
    }
    None
}

/// Whether a harness's session or thread id can name a file (it comes from the run log).
fn plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The agent's home inside `sb`.
fn agent_home(sb: &Sandbox) -> PathBuf {
    sb.agent
        .as_ref()
        .map_or_else(|| PathBuf::from(AGENT_HOME), |a| a.home.clone())
}

/// The shell text that lists the files of conversation `$1` under the agent's home `$2`.
fn finder(harness: Harness) -> &'static str {
    match harness {
        // ~/.claude/projects/<the work tree's path, escaped>/<session>.jsonl
        Harness::Claude => {
            r#"d="$2/.claude/projects"; [ -d "$d" ] || exit 0; find "$d" -mindepth 2 -maxdepth 2 -type f -name "$1.jsonl""#
        }
        // ~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl (and archived ones)
        Harness::Codex => {
            r#"for d in "$2/.codex/sessions" "$2/.codex/archived_sessions"; do [ -d "$d" ] && find "$d" -type f -name "rollout-*-$1.jsonl"; done; exit 0"#
        }
    }
}

impl ControlPlane {
    /// Copies the harness's conversation `parent` from `from`'s agent home into `to`'s, at the
    /// same paths; how many files. Refused when `from` does not have it.
    pub(super) async fn carry_conversation(
        &self,
        from: &Sandbox,
        to: &Sandbox,
        harness: Harness,
        parent: &str,
    ) -> Result<usize, ControlError> {
        if !plain_id(parent) {
            return Err(ControlError::Refused(format!(
                "the fork is refused: the run log names the harness's conversation {parent:?}, which is not an id hangar can look up"
            )));
        }
        let (home_from, home_to) = (agent_home(from), agent_home(to));
        let mut find = ExecRequest::new(["sh", "-c", finder(harness), "sh", parent]);
        find.argv.push(home_from.display().to_string());
        find.cwd = Some(PathBuf::from("/"));
        let found = with_provider!(self, from.env.provider, |p| p
            .exec(from, Who::Agent, &find)
            .await
            .map_err(ControlError::from))?;
        let listed = String::from_utf8_lossy(&found.stdout).into_owned();
        let files: Vec<&Path> = listed
            .lines()
            .map(Path::new)
            .filter(|p| p.starts_with(&home_from) && !p.components().any(|c| c.as_os_str() == ".."))
            .collect();
        if !found.success() || files.is_empty() {
            let place = match harness {
                Harness::Claude => {
                    format!("{}/.claude/projects/*/{parent}.jsonl", home_from.display())
                }
                Harness::Codex => format!(
                    "{}/.codex/sessions/**/rollout-*-{parent}.jsonl",
                    home_from.display()
                ),
            };
            return Err(ControlError::Refused(format!(
                "the fork is refused: the harness's conversation {parent} is not in sandbox {}'s agent home ({place}{}), so it cannot be carried into the fork",
                from.id,
                if found.success() {
                    String::new()
                } else {
                    format!(": {}", String::from_utf8_lossy(&found.stderr).trim())
                }
            )));
        }
        let owner = to
            .agent
            .as_ref()
            .map(|a| format!("{}:{}", a.uid, a.gid))
            .unwrap_or_default();
        for file in &files {
            let rel = file
                .strip_prefix(&home_from)
                .map_err(|e| ControlError::Internal(format!("{}: {e}", file.display())))?;
            // At most MAX_CONVERSATION_BYTES (and one more, to see it is larger): the file is
            // the agent's, and it is held in memory on its way to the new sandbox.
            let mut read = ExecRequest::new(["head", "-c"]);
            read.argv.push((MAX_CONVERSATION_BYTES + 1).to_string());
            read.argv.push("--".into());
            read.argv.push(file.display().to_string());
            read.cwd = Some(PathBuf::from("/"));
            let bytes = with_provider!(self, from.env.provider, |p| p
                .exec(from, Who::Agent, &read)
                .await
                .map_err(ControlError::from))?;
            if !bytes.success() {
                return Err(ControlError::Refused(format!(
                    "the fork is refused: the harness's conversation {} in sandbox {} cannot be read: {}",
                    file.display(),
                    from.id,
                    String::from_utf8_lossy(&bytes.stderr).trim()
                )));
            }
            if bytes.stdout.len() as u64 > MAX_CONVERSATION_BYTES {
                return Err(ControlError::Refused(format!(
                    "the fork is refused: the harness's conversation {} in sandbox {} is larger than {} MiB",
                    file.display(),
                    from.id,
                    MAX_CONVERSATION_BYTES >> 20
                )));
            }
            let dest = home_to.join(rel);
            // Its folders made by the agent, so that the harness can write beside it.
            if let Some(dir) = dest.parent() {
                let mut mkdir = ExecRequest::new(["mkdir", "-p", "--"]);
                mkdir.argv.push(dir.display().to_string());
                mkdir.cwd = Some(PathBuf::from("/"));
                let made = with_provider!(self, to.env.provider, |p| p
                    .exec(to, Who::Agent, &mkdir)
                    .await
                    .map_err(ControlError::from))?;
                if !made.success() {
                    return Err(ControlError::Internal(format!(
                        "cannot make {} in sandbox {}: {}",
                        dir.display(),
                        to.id,
                        String::from_utf8_lossy(&made.stderr).trim()
                    )));
                }
            }
            with_provider!(self, to.env.provider, |p| hangar_sandbox::inside::install(
                p,
                to,
                bytes.stdout,
                &dest,
                &owner,
                0o600
            )
            .await
            .map_err(ControlError::from))?;
        }
        Ok(files.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_name_files() {
        assert!(plain_id("0b7c1e4e-35f4-4d0c-9d1e-7a2f0c1b2d3e"));
        assert!(plain_id("thr_01"));
        for bad in ["", "a/b", "..", "a b", "*", &"x".repeat(129)] {
            assert!(!plain_id(bad), "{bad}");
        }
    }
}
