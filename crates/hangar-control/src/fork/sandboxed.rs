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
//! * Once the source sandbox is removed (`hangar sb rm`). Its agent home went with it, but at
//!   each turn's end the control plane keeps the harness's conversation files the run log names
//!   (read as the agent, at most [`MAX_CONVERSATION_BYTES`] each) in
//!   `$HANGAR_HOME/kept/<run>/home/`, at their paths under the agent's home, and the fork takes
//!   them from the newest of the source session's runs that has them. With a copying
//!   environment the repository the step is built on went too: `sb rm` first keeps it as a
//!   bundle taken out of the sandbox as the agent (`$HANGAR_HOME/kept/sandboxes/<id>/`,
//!   [`ControlPlane::keep_repository`]); the fork rebuilds on that, else on the repository the
//!   sandbox was made from (`--repo`, named in the audit record of its creation) if it is still
//!   on this machine. Whichever it is, the rebuilt tree must hash to the recorded id.
//!
//! Refused, audited, saying why: a conversation file that is not there (nor kept), and a removed
//! sandbox whose repository objects are in none of those places.

use std::path::{Path, PathBuf};

use hangar_sandbox::layout::AGENT_HOME;
use hangar_sandbox::{ExecRequest, Provider, Sandbox, Who};
use hangar_store::Harness;
use serde_json::Value;

use super::rebuild::Taken;
use crate::error::ControlError;
use crate::plane::ControlPlane;
use crate::sandboxes::with_provider;

/// The largest conversation file a fork carries from one sandbox to another.
const MAX_CONVERSATION_BYTES: u64 = 256 << 20;

/// At most this many of a run's harness sessions (or threads) have their files kept.
const MAX_KEPT_CONVERSATIONS: usize = 8;

/// A conversation's files: their paths under the agent's home, and their bytes.
pub(super) type ConversationFiles = Vec<(PathBuf, Vec<u8>)>;

/// Where the files of a run's harness conversation are kept once its turn has ended.
fn kept_home(home: &Path, run: &str) -> PathBuf {
    crate::trees::kept_dir(home, run).join("home")
}

/// Where a removed sandbox's repository is kept (`repo.bundle`, or `repo.plain` / `repo.unborn`
/// for a workspace with no repository or nothing committed, or `repo.missing` saying why it
/// could not be kept).
pub(crate) fn kept_repository_dir(home: &Path, sandbox: &str) -> PathBuf {
    home.join("kept").join("sandboxes").join(sandbox)
}

/// A path under the agent's home that names only folders and a file below it.
fn plain_relative(rel: &Path) -> bool {
    rel.components().count() > 0
        && rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Writes `bytes` as `path` (hangar's user's only), through a temporary file renamed into place.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, path)
}

/// The harness's conversation ids a run log names: Claude Code's session ids, Codex's thread
/// ids (plain ones only, at most [`MAX_KEPT_CONVERSATIONS`]).
fn conversation_ids(log: &Path, harness: Harness) -> Vec<String> {
    use std::io::BufRead;
    let mut ids: Vec<String> = Vec::new();
    let Ok(f) = std::fs::File::open(log) else {
        return ids;
    };
    for line in std::io::BufReader::new(f)
        .split(b'\n')
        .map_while(Result::ok)
    {
        let Ok(v) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        let id = match harness {
            Harness::Claude => s("session_id")
                .filter(|_| matches!(s("type"), Some("system" | "user" | "assistant" | "result"))),
            Harness::Codex => s("thread_id").filter(|_| s("type") == Some("thread.started")),
        };
        if let Some(id) = id
            && plain_id(id)
            && !ids.iter().any(|i| i == id)
        {
            ids.push(id.to_owned());
            if ids.len() >= MAX_KEPT_CONVERSATIONS {
                break;
            }
        }
    }
    ids
}

/// Whether `name` is the file of conversation `id` for `harness`, found at `rel` under the
/// agent's home.
fn names_conversation(harness: Harness, rel: &Path, id: &str) -> bool {
    let Some(name) = rel.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let parts: Vec<&str> = rel
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .collect();
    match harness {
        Harness::Claude => {
            parts.len() == 4
                && parts[0] == ".claude"
                && parts[1] == "projects"
                && name == format!("{id}.jsonl")
        }
        Harness::Codex => {
            parts.len() >= 3
                && parts[0] == ".codex"
                && matches!(parts[1], "sessions" | "archived_sessions")
                && name.starts_with("rollout-")
                && name.ends_with(&format!("-{id}.jsonl"))
        }
    }
}

/// The files of conversation `parent` kept with the newest of `runs` (newest first) that has
/// them.
fn kept_conversation(
    home: &Path,
    runs: &[String],
    harness: Harness,
    parent: &str,
) -> Result<Option<(String, ConversationFiles)>, ControlError> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                walk(root, &e.path(), out);
            } else if t.is_file()
                && let Ok(rel) = e.path().strip_prefix(root)
            {
                out.push(rel.to_owned());
            }
        }
    }
    for run in runs {
        let root = kept_home(home, run);
        let mut found = Vec::new();
        walk(&root, &root, &mut found);
        found.retain(|rel| names_conversation(harness, rel, parent));
        found.sort();
        if found.is_empty() {
            continue;
        }
        let mut files = Vec::new();
        for rel in found {
            let path = root.join(&rel);
            let bytes = std::fs::read(&path).map_err(|e| {
                ControlError::Internal(format!("cannot read {}: {e}", path.display()))
            })?;
            files.push((rel, bytes));
        }
        return Ok(Some((run.clone(), files)));
    }
    Ok(None)
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
    /// Reads the harness's conversation `parent` from `from`'s agent home, as the agent: its
    /// files at their paths under the agent's home. Refused when `from` does not have it.
    pub(super) async fn read_conversation(
        &self,
        from: &Sandbox,
        harness: Harness,
        parent: &str,
    ) -> Result<ConversationFiles, ControlError> {
        if !plain_id(parent) {
            return Err(ControlError::Refused(format!(
                "the fork is refused: the run log names the harness's conversation {parent:?}, which is not an id hangar can look up"
            )));
        }
        let home_from = agent_home(from);
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
        let mut out = Vec::new();
        for file in &files {
            let rel = file
                .strip_prefix(&home_from)
                .map_err(|e| ControlError::Internal(format!("{}: {e}", file.display())))?;
            if !plain_relative(rel) {
                continue;
            }
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
            out.push((rel.to_owned(), bytes.stdout));
        }
        Ok(out)
    }

    /// The files of conversation `parent` for a fork of a run in `row` (its provider's sandbox
    /// `sb`): read from the sandbox's agent home while it is live (and has them), else the
    /// copies kept at the end of the source session's turns (`runs`: their run ids, newest
    /// first).
    pub(super) async fn conversation_files(
        &self,
        (row, sb): (&hangar_store::Sandbox, &Sandbox),
        harness: Harness,
        parent: &str,
        runs: Vec<String>,
    ) -> Result<ConversationFiles, ControlError> {
        let live = if row.state == "live" {
            match self.read_conversation(sb, harness, parent).await {
                Ok(files) => return Ok(files),
                // Not (or no longer) there: the copy kept at a turn's end, if there is one.
                Err(ControlError::Refused(why)) if plain_id(parent) => Some(why),
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        if !plain_id(parent) {
            return Err(ControlError::Refused(format!(
                "the fork is refused: the run log names the harness's conversation {parent:?}, which is not an id hangar can look up"
            )));
        }
        let home = self.tools.home.clone();
        let p = parent.to_owned();
        let kept =
            tokio::task::spawn_blocking(move || kept_conversation(&home, &runs, harness, &p))
                .await
                .map_err(|e| ControlError::Internal(format!("a blocking task failed: {e}")))??;
        match (kept, live) {
            (Some((_, files)), _) => Ok(files),
            (None, Some(why)) => Err(ControlError::Refused(why)),
            (None, None) => Err(ControlError::Refused(format!(
                "the fork is refused: sandbox {} was removed (`hangar sb rm`), and with it its agent home, which held the harness's conversation {parent}; no copy of it was kept at the end of the session's turns ($HANGAR_HOME/kept/RUN/home/), so the step cannot be forked with its conversation",
                sb.id
            ))),
        }
    }

    /// Writes a conversation's files into `to`'s agent home, owned by its agent.
    pub(super) async fn write_conversation(
        &self,
        to: &Sandbox,
        files: ConversationFiles,
    ) -> Result<(), ControlError> {
        let home_to = agent_home(to);
        let owner = to
            .agent
            .as_ref()
            .map(|a| format!("{}:{}", a.uid, a.gid))
            .unwrap_or_default();
        for (rel, bytes) in files {
            if !plain_relative(&rel) {
                continue;
            }
            let dest = home_to.join(&rel);
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
                p, to, bytes, &dest, &owner, 0o600
            )
            .await
            .map_err(ControlError::from))?;
        }
        Ok(())
    }

    /// At a turn's end in `sb`: keeps the files of the harness conversations its run log names,
    /// read from the agent's home as the agent, in `$HANGAR_HOME/kept/<run>/home/`, so that the
    /// run's steps fork with their conversation once the sandbox is removed. Best effort: what
    /// cannot be read is not kept (the fork says so if it needs it).
    pub(crate) async fn keep_conversation(&self, run_id: &str, sb: &Sandbox) {
        let Ok(run) = self.store.run(run_id).await else {
            return;
        };
        let Ok(turn) = self.store.turn(&run.turn_id).await else {
            return;
        };
        let Ok(session) = self.store.session(&turn.session_id).await else {
            return;
        };
        let harness = session.harness;
        let log = self.run_log_path(&run);
        let Ok(ids) = tokio::task::spawn_blocking(move || conversation_ids(&log, harness)).await
        else {
            return;
        };
        for id in ids {
            let files = match self.read_conversation(sb, harness, &id).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(run = %run_id, conversation = %id, error = %e, "cannot keep the harness's conversation");
                    continue;
                }
            };
            let root = kept_home(&self.tools.home, run_id);
            let written = tokio::task::spawn_blocking(move || {
                files
                    .iter()
                    .try_for_each(|(rel, bytes)| write_private(&root.join(rel), bytes))
            })
            .await;
            if !matches!(written, Ok(Ok(()))) {
                tracing::warn!(run = %run_id, conversation = %id, "cannot write the kept copy of the harness's conversation");
            }
        }
    }

    /// Before `sb` is removed: keeps the repository of its workspace (a copy of the one it was
    /// made from, which the agent worked in) as a bundle taken out of it as the agent, for forks
    /// of its runs' steps. Nothing for a sandbox working in place (the folder stays) or one that
    /// never ran a turn. What went wrong is kept instead, for the fork to say.
    pub(crate) async fn keep_repository(&self, sb: &Sandbox) -> Result<(), String> {
        if sb.env.in_place {
            return Ok(());
        }
        let ran = match self.store.sessions(Some(&sb.id)).await {
            Ok(s) => !s.is_empty(),
            Err(e) => return Err(e.to_string()),
        };
        if !ran {
            return Ok(());
        }
        let limit = std::time::Duration::from_secs(120);
        let (name, bytes, why) = match self.take_repository(sb, limit).await {
            Ok(Taken::Bundle(b)) => ("repo.bundle", b, None),
            Ok(Taken::Plain) => ("repo.plain", Vec::new(), None),
            Ok(Taken::Unborn) => ("repo.unborn", Vec::new(), None),
            Err(e) => {
                let why = e.to_string();
                ("repo.missing", why.clone().into_bytes(), Some(why))
            }
        };
        let dir = kept_repository_dir(&self.tools.home, &sb.id);
        tokio::task::spawn_blocking(move || {
            for old in ["repo.bundle", "repo.plain", "repo.unborn", "repo.missing"] {
                let _ = std::fs::remove_file(dir.join(old));
            }
            write_private(&dir.join(name), &bytes)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        why.map_or(Ok(()), Err)
    }
}

/// What a removed sandbox's repository became when it was removed: taken out of it, or why not
/// (`None`: nothing was kept, e.g. a sandbox removed before hangar kept repositories).
pub(super) fn kept_repository(home: &Path, sandbox: &str) -> Option<Result<Taken, String>> {
    let dir = kept_repository_dir(home, sandbox);
    if let Ok(b) = std::fs::read(dir.join("repo.bundle")) {
        return Some(Ok(Taken::Bundle(b)));
    }
    if dir.join("repo.plain").is_file() {
        return Some(Ok(Taken::Plain));
    }
    if dir.join("repo.unborn").is_file() {
        return Some(Ok(Taken::Unborn));
    }
    std::fs::read_to_string(dir.join("repo.missing"))
        .ok()
        .map(Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_conversations_are_found_by_harness_and_id_newest_run_first() {
        #![allow(clippy::unwrap_used, reason = "tests")]
        let home = tempfile::tempdir().unwrap();
        let put = |run: &str, rel: &str, text: &str| {
            write_private(&kept_home(home.path(), run).join(rel), text.as_bytes()).unwrap();
        };
        put("r1", ".claude/projects/-workspace/s1.jsonl", "old");
        put("r2", ".claude/projects/-workspace/s1.jsonl", "new");
        put("r2", ".claude/projects/-workspace/s2.jsonl", "other");
        put("r2", ".claude/s1.jsonl", "not a project's");
        put(
            "r1",
            ".codex/sessions/2026/11/30/rollout-2026-t1.jsonl",
            "thread",
        );
        let runs = ["r2".to_owned(), "r1".to_owned()];
        let (run, files) = kept_conversation(home.path(), &runs, Harness::Claude, "s1")
            .unwrap()
            .unwrap();
        assert_eq!(run, "r2");
        assert_eq!(
            files,
            vec![(
                PathBuf::from(".claude/projects/-workspace/s1.jsonl"),
                b"new".to_vec()
            )]
        );
        let (run, files) = kept_conversation(home.path(), &runs, Harness::Codex, "t1")
            .unwrap()
            .unwrap();
        assert_eq!((run.as_str(), files.len()), ("r1", 1));
        assert!(
            kept_conversation(home.path(), &runs, Harness::Claude, "t1")
                .unwrap()
                .is_none()
        );
        assert!(
            kept_conversation(home.path(), &runs, Harness::Codex, "s1")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_run_logs_conversation_ids_are_its_harness_sessions() {
        #![allow(clippy::unwrap_used, reason = "tests")]
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        std::fs::write(
            &log,
            concat!(
                "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s1\"}\n",
                "{\"type\":\"assistant\",\"session_id\":\"s1\"}\n",
                "{\"type\":\"hangar.tree\",\"session_id\":\"x\"}\n",
                "{\"type\":\"assistant\",\"session_id\":\"../etc\"}\n",
                "not json\n",
                "{\"type\":\"result\",\"session_id\":\"s2\"}\n",
                "{\"type\":\"thread.started\",\"thread_id\":\"t1\"}\n",
            ),
        )
        .unwrap();
        assert_eq!(conversation_ids(&log, Harness::Claude), ["s1", "s2"]);
        assert_eq!(conversation_ids(&log, Harness::Codex), ["t1"]);
    }

    #[test]
    fn only_plain_ids_name_files() {
        assert!(plain_id("0b7c1e4e-35f4-4d0c-9d1e-7a2f0c1b2d3e"));
        assert!(plain_id("thr_01"));
        for bad in ["", "a/b", "..", "a b", "*", &"x".repeat(129)] {
            assert!(!plain_id(bad), "{bad}");
        }
    }
}
