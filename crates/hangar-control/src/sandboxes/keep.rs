//! Forks of runs in a provider's sandbox (local, in place or with a copy, docker, kubernetes and
//! e2b): a new sandbox of the source's environment, and the harness's conversation carried from
//! the source sandbox's agent home into the new one's.
//!
//! * The work tree. An environment that copies the repository (`workspace: copy`, the default)
//!   gets the step's tree rebuilt into a staging folder, which the new sandbox copies as any
//!   sandbox copies its repository; the copy is hashed again in the sandbox's workspace (inside
//!   the sandbox by the driver for kubernetes and e2b, whose repository the step is rebuilt on
//!   is taken out of the source sandbox first: `take.rs`). An
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
//!   (read as the agent, with one link each, piece by piece within a time limit, at most
//!   [`MAX_CONVERSATION_BYTES`] each and [`MAX_KEPT_BYTES`] a run; one file per Claude Code
//!   session, a few per Codex thread) in `$HANGAR_HOME/kept/conversations/<session>/home/`, at
//!   their paths under the agent's home: one copy per session, replaced at each turn's end (the
//!   harnesses only append to these files, and a fork cuts them at its step by message uuid or
//!   turn id, so the newest copy serves every earlier step). Nothing removes a session, so
//!   nothing removes these copies yet. (Copies kept per run, `$HANGAR_HOME/kept/<run>/home/`,
//!   are still read.) With a copying
//!   environment the repository the step is built on went too: `sb rm` first keeps it as a
//!   bundle taken out of the sandbox as the agent (`$HANGAR_HOME/kept/sandboxes/<id>/`,
//!   [`Sandboxes::keep_repository`]); the fork rebuilds on that, else on the repository the
//!   sandbox was made from (`--repo`, named in the audit record of its creation) if it is still
//!   on this machine. Whichever it is, the rebuilt tree must hash to the recorded id.
//!
//! On PostgreSQL both are kept in the database too (`kept_files`, by the session's and the
//! sandbox's id), so a replica that shares no disk with the one that kept them forks the steps:
//! it brings them back into its own `kept/` (a cache) first, and a conversation whose copy there
//! is shorter than the database's (a later turn's, kept by another replica) is brought back
//! again. Retention forgets both copies of a session's conversation.
//!
//! Refused, audited, saying why: a conversation file that is not there (nor kept), and a removed
//! sandbox whose repository objects are in none of those places.

use std::path::{Path, PathBuf};

use hangar_sandbox::layout::AGENT_HOME;
use hangar_sandbox::{ExecRequest, Output, Provider, Sandbox, Who};
use hangar_store::Harness;
use serde_json::Value;

use hangar_protocol::atomic::Staged;

use super::Sandboxes;
use super::take::Taken;
use crate::blocking::blocking;
use crate::error::ControlError;
use crate::sandboxes::with_provider;

/// The largest conversation file a fork carries from one sandbox to another.
const MAX_CONVERSATION_BYTES: u64 = 256 << 20;

/// At most this many of a run's harness sessions (or threads) have their files kept.
const MAX_KEPT_CONVERSATIONS: usize = 8;

/// At most this many bytes of conversation files are kept at a run's end.
const MAX_KEPT_BYTES: u64 = 512 << 20;

/// A Codex thread has at most this many files (its rollout, and an archived copy); a thread with
/// more is not carried (one agent-made name is as good as another).
const MAX_CODEX_FILES: usize = 4;

/// How long one command inside the sandbox may take while a conversation is read (a file the
/// agent swapped for a FIFO must not hold the turn's end).
const EXEC_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A conversation file is read in pieces of this many MiB, each written to disk as it comes.
const CHUNK_MIB: u64 = 8;

/// A conversation's files on this machine: their paths under the agent's home and where they
/// are here (a staging folder of hangar's, removed when this is dropped, or the kept copies).
#[derive(Debug, Default)]
pub(crate) struct ConversationFiles {
    files: Vec<(PathBuf, PathBuf)>,
    staging: Option<PathBuf>,
}

impl ConversationFiles {
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

impl Drop for ConversationFiles {
    fn drop(&mut self) {
        if let Some(dir) = self.staging.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Where the files of a session's harness conversations are kept (one copy of each, replaced
/// at each of its turns' ends: the files are append-only, and a fork of an earlier run cuts
/// them at its step by message uuid or turn id).
pub(crate) fn kept_conversations(home: &Path, session: &str) -> PathBuf {
    home.join("kept")
        .join("conversations")
        .join(session)
        .join("home")
}

/// What a removed sandbox's repository is kept as (one of them).
const KEPT_REPOSITORY: [&str; 4] = ["repo.bundle", "repo.plain", "repo.unborn", "repo.missing"];

/// A kept conversation file's name in the database starts with this, its path under the agent's
/// home after it.
const STORED_HOME: &str = "home/";

/// The name in the database of the kept conversation file at `rel` under the agent's home.
fn stored_name(rel: &Path) -> Option<String> {
    (plain_relative(rel))
        .then(|| rel.to_str())
        .flatten()
        .map(|r| format!("{STORED_HOME}{r}"))
}

/// Where the files of a run's harness conversation were kept before they were kept per session.
fn kept_home(home: &Path, run: &str) -> PathBuf {
    crate::steps::trees::kept_dir(home, run).join("home")
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
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    hangar_protocol::atomic::write_atomic(path, bytes, 0o600)
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

/// The files of conversation `parent` kept for session `session`, else (copies kept before
/// they were kept per session) with the newest of `runs` (newest first) that has them.
fn kept_conversation(
    home: &Path,
    session: &str,
    runs: &[String],
    harness: Harness,
    parent: &str,
) -> Option<ConversationFiles> {
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
    let roots = std::iter::once(kept_conversations(home, session))
        .chain(runs.iter().map(|run| kept_home(home, run)));
    for root in roots {
        let mut found = Vec::new();
        walk(&root, &root, &mut found);
        found.retain(|rel| names_conversation(harness, rel, parent));
        found.sort();
        if found.is_empty() {
            continue;
        }
        let files = found
            .into_iter()
            .map(|rel| {
                let path = root.join(&rel);
                (rel, path)
            })
            .collect();
        return Some(ConversationFiles {
            files,
            staging: None,
        });
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

/// The shell text that lists the files of conversation `$1` under the agent's home `$2`: plain
/// files with one link (a file the agent linked under many names is not carried), at most 16
/// lines of them.
fn finder(harness: Harness) -> &'static str {
    match harness {
        // ~/.claude/projects/<the work tree's path, escaped>/<session>.jsonl
        Harness::Claude => {
            r#"d="$2/.claude/projects"; [ -d "$d" ] || exit 0; find "$d" -mindepth 2 -maxdepth 2 -type f -links 1 -name "$1.jsonl" | head -n 16"#
        }
        // ~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl (and archived ones)
        Harness::Codex => {
            r#"for d in "$2/.codex/sessions" "$2/.codex/archived_sessions"; do [ -d "$d" ] && find "$d" -type f -links 1 -name "rollout-*-$1.jsonl"; done | head -n 16; exit 0"#
        }
    }
}

/// The shell text that prints at most `$3` MiB of file `$1` from MiB `$2` on: a plain file only,
/// and within [`EXEC_LIMIT`] (a FIFO swapped in after the check must not block it).
const READ_PIECE: &str = r#"f=$1
[ -f "$f" ] && [ ! -L "$f" ] || { echo "$f is not a plain file" >&2; exit 3; }
if command -v timeout >/dev/null 2>&1; then
  exec timeout 30 dd if="$f" bs=1048576 skip="$2" count="$3" 2>/dev/null
fi
exec dd if="$f" bs=1048576 skip="$2" count="$3" 2>/dev/null"#;

/// Makes `dir` and its parents, hangar's user's only.
async fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = tokio::fs::DirBuilder::new();
    b.recursive(true).mode(0o700);
    b.create(dir).await
}

impl Sandboxes {
    /// Runs `req` as the agent in `sb`, within [`EXEC_LIMIT`].
    pub(crate) async fn exec_bounded(
        &self,
        sb: &Sandbox,
        req: &ExecRequest,
    ) -> Result<Output, ControlError> {
        let run = async {
            with_provider!(self, sb.env.provider, |p| p
                .exec(sb, Who::Agent, req)
                .await
                .map_err(ControlError::from))
        };
        tokio::time::timeout(EXEC_LIMIT, run)
            .await
            .unwrap_or_else(|_| {
                Err(ControlError::Refused(format!(
                    "`{}` in sandbox {} did not end within {} s",
                    req.argv.first().map_or("", String::as_str),
                    sb.id,
                    EXEC_LIMIT.as_secs()
                )))
            })
    }

    /// Copies file `file` of `from` (read as the agent, `piece_mib` MiB at a time, each within
    /// [`EXEC_LIMIT`]) to `dest` on this machine, through a temporary file renamed into place;
    /// at most `cap` bytes, else refused. Its size.
    pub(crate) async fn copy_out(
        &self,
        from: &Sandbox,
        file: &Path,
        dest: &Path,
        (cap, piece_mib): (u64, u64),
    ) -> Result<u64, ControlError> {
        let io = |e: std::io::Error| ControlError::Internal(format!("{}: {e}", dest.display()));
        if let Some(dir) = dest.parent() {
            private_dir(dir).await.map_err(io)?;
        }
        // Staged beside `dest` (a reader never sees part of it), each piece written off the
        // async threads; dropped on a failure, the staged file goes.
        let d = dest.to_owned();
        let mut out = blocking(move || Staged::create(&d, 0o600))
            .await?
            .map_err(io)?;
        let mut total = 0u64;
        for piece in 0.. {
            let mut read = ExecRequest::new(["sh", "-c", READ_PIECE, "sh"]);
            read.argv.push(file.display().to_string());
            read.argv.push((piece * piece_mib).to_string());
            read.argv.push(piece_mib.to_string());
            read.cwd = Some(PathBuf::from("/"));
            let got = self.exec_bounded(from, &read).await?;
            if !got.success() {
                return Err(ControlError::Refused(format!(
                    "{} in sandbox {} cannot be read (status {}): {}",
                    file.display(),
                    from.id,
                    got.status,
                    String::from_utf8_lossy(&got.stderr).trim()
                )));
            }
            let n = got.stdout.len() as u64;
            total += n;
            if total > cap {
                return Err(ControlError::Refused(format!(
                    "{} in sandbox {} is larger than {} MiB",
                    file.display(),
                    from.id,
                    cap >> 20
                )));
            }
            out = blocking(move || out.write_all(&got.stdout).map(|()| out))
                .await?
                .map_err(io)?;
            if n < piece_mib << 20 {
                break;
            }
        }
        blocking(move || out.commit()).await?.map_err(io)?;
        Ok(total)
    }

    /// Copies the harness's conversation `parent` out of `from`'s agent home, as the agent, into
    /// `into` on this machine, at the files' paths under the agent's home (each replacing what
    /// was there); at most `budget` bytes in all. Refused when `from` does not have it, or has
    /// more files of it than the harness makes. The files copied and their sizes.
    pub(crate) async fn read_conversation(
        &self,
        from: &Sandbox,
        harness: Harness,
        parent: &str,
        into: &Path,
        budget: u64,
    ) -> Result<Vec<(PathBuf, u64)>, ControlError> {
        if !plain_id(parent) {
            return Err(ControlError::Refused(format!(
                "the fork is refused: the run log names the harness's conversation {parent:?}, which is not an id hangar can look up"
            )));
        }
        let home_from = agent_home(from);
        let mut find = ExecRequest::new(["sh", "-c", finder(harness), "sh", parent]);
        find.argv.push(home_from.display().to_string());
        find.cwd = Some(PathBuf::from("/"));
        let found = self.exec_bounded(from, &find).await?;
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
                "the fork is refused: the harness's conversation {parent} is not in sandbox {}'s agent home ({place}, a plain file with one link){}, so it cannot be carried into the fork",
                from.id,
                if found.success() {
                    String::new()
                } else {
                    format!(": {}", String::from_utf8_lossy(&found.stderr).trim())
                }
            )));
        }
        let most = match harness {
            Harness::Claude => 1,
            Harness::Codex => MAX_CODEX_FILES,
        };
        if files.len() > most {
            return Err(ControlError::Refused(format!(
                "the fork is refused: sandbox {}'s agent home has {} files named as the harness's conversation {parent} (at most {most} expected), so none is carried",
                from.id,
                if files.len() >= 16 {
                    "16 or more".to_owned()
                } else {
                    files.len().to_string()
                }
            )));
        }
        let mut out = Vec::new();
        let mut left = budget;
        for file in &files {
            let rel = file
                .strip_prefix(&home_from)
                .map_err(|e| ControlError::Internal(format!("{}: {e}", file.display())))?;
            if !plain_relative(rel) {
                continue;
            }
            let cap = left.min(MAX_CONVERSATION_BYTES);
            let n = self
                .copy_out(from, file, &into.join(rel), (cap, CHUNK_MIB))
                .await
                .map_err(|e| match e {
                    ControlError::Refused(why) => ControlError::Refused(format!(
                        "the fork is refused: the harness's conversation {why}"
                    )),
                    e => e,
                })?;
            left = left.saturating_sub(n);
            out.push((rel.to_owned(), n));
        }
        Ok(out)
    }

    /// The files of conversation `parent` for a fork of a run in `row` (its provider's sandbox
    /// `sb`): read from the sandbox's agent home while it is live (and has them), into a staging
    /// folder under `$HANGAR_HOME`, else the copies kept at the end of the source session's
    /// turns (`session`, and `runs`: its run ids, newest first, for copies kept per run).
    pub(crate) async fn conversation_files(
        &self,
        (row, sb): (&hangar_store::Sandbox, &Sandbox),
        harness: Harness,
        parent: &str,
        (session, runs): (&str, Vec<String>),
    ) -> Result<ConversationFiles, ControlError> {
        let live = if row.state == "live" {
            let staging = self
                .tools
                .home
                .join("tmp")
                .join(hangar_store::new_id("conv")?);
            let mut carried = ConversationFiles {
                files: Vec::new(),
                staging: Some(staging.clone()),
            };
            match self
                .read_conversation(sb, harness, parent, &staging, MAX_KEPT_BYTES)
                .await
            {
                Ok(files) => {
                    carried.files = files
                        .into_iter()
                        .map(|(rel, _)| {
                            let at = staging.join(&rel);
                            (rel, at)
                        })
                        .collect();
                    return Ok(carried);
                }
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
        self.restore_conversation(session, harness, parent).await;
        let home = self.tools.home.clone();
        let (s, p) = (session.to_owned(), parent.to_owned());
        let kept =
            tokio::task::spawn_blocking(move || kept_conversation(&home, &s, &runs, harness, &p))
                .await
                .map_err(|e| ControlError::Internal(format!("a blocking task failed: {e}")))?;
        match (kept, live) {
            (Some(files), _) => Ok(files),
            (None, Some(why)) => Err(ControlError::Refused(why)),
            (None, None) => Err(ControlError::Refused(format!(
                "the fork is refused: sandbox {} was removed (`hangar sb rm`), and with it its agent home, which held the harness's conversation {parent}; no copy of it was kept at the end of the session's turns ($HANGAR_HOME/kept/conversations/{session}/home/), so the step cannot be forked with its conversation",
                sb.id
            ))),
        }
    }

    /// Writes a conversation's files into `to`'s agent home, owned by its agent (one file in
    /// memory at a time).
    pub(crate) async fn write_conversation(
        &self,
        to: &Sandbox,
        files: &ConversationFiles,
    ) -> Result<(), ControlError> {
        let home_to = agent_home(to);
        let owner = to
            .agent
            .as_ref()
            .map(|a| format!("{}:{}", a.uid, a.gid))
            .unwrap_or_default();
        for (rel, here) in &files.files {
            if !plain_relative(rel) {
                continue;
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
            let bytes = tokio::fs::read(here)
                .await
                .map_err(|e| ControlError::Internal(format!("{}: {e}", here.display())))?;
            with_provider!(self, to.env.provider, |p| hangar_sandbox::inside::install(
                p, to, bytes, &dest, &owner, 0o600
            )
            .await
            .map_err(ControlError::from))?;
        }
        Ok(())
    }

    /// At a turn's end in `sb`: keeps the files of the harness conversations its run log names,
    /// copied out of the agent's home as the agent, in
    /// `$HANGAR_HOME/kept/conversations/<session>/home/` (one copy per session, replaced at
    /// each turn's end; at most [`MAX_KEPT_BYTES`] a run), so that the session's steps fork with
    /// their conversation once the sandbox is removed. Best effort: what cannot be read is not
    /// kept (the fork says so if it needs it). Bounded in time: every command inside is.
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
        let log = crate::steps::trees::run_log_path(&self.tools.home, &run);
        let Ok(ids) = tokio::task::spawn_blocking(move || conversation_ids(&log, harness)).await
        else {
            return;
        };
        let root = kept_conversations(&self.tools.home, &session.id);
        let mut budget = MAX_KEPT_BYTES;
        for id in ids {
            match self
                .read_conversation(sb, harness, &id, &root, budget)
                .await
            {
                Ok(files) => {
                    let n: u64 = files.iter().map(|(_, n)| n).sum();
                    budget = budget.saturating_sub(n);
                    self.store_conversation(&session.id, &root, &files).await;
                }
                Err(e) => {
                    tracing::warn!(run = %run_id, conversation = %id, error = %e, "cannot keep the harness's conversation");
                }
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
        let dir = kept_repository_dir(&self.tools.home, &sb.id);
        let d = dir.clone();
        tokio::task::spawn_blocking(move || {
            for old in KEPT_REPOSITORY {
                let _ = std::fs::remove_file(d.join(old));
            }
        })
        .await
        .map_err(|e| e.to_string())?;
        let (name, why) = match self
            .take_repository(sb, limit, &dir.join("repo.bundle"))
            .await
        {
            Ok(Taken::Bundle(_)) => ("repo.bundle", None),
            Ok(Taken::Plain) => ("repo.plain", None),
            Ok(Taken::Unborn) => ("repo.unborn", None),
            Err(e) => ("repo.missing", Some(e.to_string())),
        };
        if name != "repo.bundle" {
            let bytes = why.clone().unwrap_or_default().into_bytes();
            let d = dir.clone();
            tokio::task::spawn_blocking(move || write_private(&d.join(name), &bytes))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        }
        // Any replica may fork the sandbox's runs: what was kept goes into the database too,
        // replacing what an earlier removal kept there.
        if self.store.backend() == hangar_store::Backend::Postgres {
            let _ = self.store.forget_kept(&sb.id).await;
            if let Err(e) = self
                .store
                .put_kept_file(&sb.id, name, &dir.join(name))
                .await
            {
                tracing::warn!(sandbox = %sb.id, error = %e, "cannot keep the sandbox's repository in the database");
            }
        }
        why.map_or(Ok(()), Err)
    }

    /// On PostgreSQL, stores the files of a session's conversation just kept under `root` (the
    /// session's kept agent home): any replica forks its steps once the sandbox is gone, and
    /// this replica's `kept/` is a cache it can lose (issue 24).
    async fn store_conversation(&self, session: &str, root: &Path, files: &[(PathBuf, u64)]) {
        if self.store.backend() != hangar_store::Backend::Postgres {
            return;
        }
        for (rel, _) in files {
            let Some(name) = stored_name(rel) else {
                continue;
            };
            if let Err(e) = self
                .store
                .put_kept_file(session, &name, &root.join(rel))
                .await
            {
                tracing::warn!(session = %session, file = %rel.display(), error = %e, "cannot keep the harness's conversation in the database");
            }
        }
    }

    /// On PostgreSQL, brings the files of conversation `parent` kept for `session` back into
    /// this replica's `kept/` when it lacks them or holds a shorter copy (another replica kept
    /// a later turn's copy: the harnesses only append to these files).
    async fn restore_conversation(&self, session: &str, harness: Harness, parent: &str) {
        if self.store.backend() != hangar_store::Backend::Postgres || !plain_id(parent) {
            return;
        }
        let Ok(kept) = self.store.kept_file_sizes(session).await else {
            return;
        };
        let root = kept_conversations(&self.tools.home, session);
        for (name, size) in kept {
            let Some(rel) = name.strip_prefix(STORED_HOME).map(Path::new) else {
                continue;
            };
            if !plain_relative(rel) || !names_conversation(harness, rel, parent) {
                continue;
            }
            let here = root.join(rel);
            // The harnesses only append: a copy here as long or longer is as new or newer (one
            // this replica kept and could not store).
            let current = tokio::fs::symlink_metadata(&here)
                .await
                .is_ok_and(|m| m.is_file() && i64::try_from(m.len()).is_ok_and(|n| n >= size));
            if current {
                continue;
            }
            if let Some(dir) = here.parent()
                && let Err(e) = private_dir(dir).await
            {
                tracing::warn!(session = %session, error = %e, "cannot make the kept conversation's folder");
                return;
            }
            if let Err(e) = self.store.get_kept_file(session, &name, &here).await {
                tracing::warn!(session = %session, file = %name, error = %e, "cannot bring the kept conversation back from the database");
            }
        }
    }

    /// On PostgreSQL, brings what was kept of removed sandbox `sandbox`'s repository back into
    /// this replica's `kept/` when it holds none of it.
    pub(crate) async fn restore_repository(&self, sandbox: &str) {
        if self.store.backend() != hangar_store::Backend::Postgres {
            return;
        }
        let dir = kept_repository_dir(&self.tools.home, sandbox);
        let d = dir.clone();
        let have = blocking(move || KEPT_REPOSITORY.iter().any(|n| d.join(n).is_file()))
            .await
            .unwrap_or(true);
        if have {
            return;
        }
        let Ok(names) = self.store.kept_file_names(sandbox).await else {
            return;
        };
        for name in names {
            if !KEPT_REPOSITORY.contains(&name.as_str()) {
                continue;
            }
            if let Err(e) = private_dir(&dir).await {
                tracing::warn!(sandbox = %sandbox, error = %e, "cannot make the kept repository's folder");
                return;
            }
            if let Err(e) = self
                .store
                .get_kept_file(sandbox, &name, &dir.join(&name))
                .await
            {
                tracing::warn!(sandbox = %sandbox, file = %name, error = %e, "cannot bring the kept repository back from the database");
            }
        }
    }
}

/// What a removed sandbox's repository became when it was removed: taken out of it, or why not
/// (`None`: nothing was kept, e.g. a sandbox removed before hangar kept repositories).
pub(crate) fn kept_repository(home: &Path, sandbox: &str) -> Option<Result<Taken, String>> {
    let dir = kept_repository_dir(home, sandbox);
    let bundle = dir.join("repo.bundle");
    if bundle.is_file() {
        return Some(Ok(Taken::Bundle(bundle)));
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
    fn kept_conversations_are_found_by_session_then_newest_run_first() {
        #![allow(clippy::unwrap_used, reason = "tests")]
        let home = tempfile::tempdir().unwrap();
        let put = |root: PathBuf, rel: &str, text: &str| {
            write_private(&root.join(rel), text.as_bytes()).unwrap();
        };
        let run = |r: &str| kept_home(home.path(), r);
        put(run("r1"), ".claude/projects/-workspace/s1.jsonl", "old");
        put(run("r2"), ".claude/projects/-workspace/s1.jsonl", "new");
        put(run("r2"), ".claude/projects/-workspace/s2.jsonl", "other");
        put(run("r2"), ".claude/s1.jsonl", "not a project's");
        put(
            run("r1"),
            ".codex/sessions/2026/11/30/rollout-2026-t1.jsonl",
            "thread",
        );
        put(
            kept_conversations(home.path(), "ses1"),
            ".claude/projects/-workspace/s2.jsonl",
            "kept for the session",
        );
        let runs = ["r2".to_owned(), "r1".to_owned()];
        let found = |h, id| {
            kept_conversation(home.path(), "ses1", &runs, h, id).map(|f| {
                f.files
                    .iter()
                    .map(|(rel, at)| (rel.clone(), std::fs::read_to_string(at).unwrap()))
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            found(Harness::Claude, "s1").unwrap(),
            vec![(
                PathBuf::from(".claude/projects/-workspace/s1.jsonl"),
                "new".to_owned()
            )]
        );
        assert_eq!(
            found(Harness::Claude, "s2").unwrap(),
            vec![(
                PathBuf::from(".claude/projects/-workspace/s2.jsonl"),
                "kept for the session".to_owned()
            )]
        );
        assert_eq!(found(Harness::Codex, "t1").unwrap().len(), 1);
        assert!(found(Harness::Claude, "t1").is_none());
        assert!(found(Harness::Codex, "s1").is_none());
    }

    /// Runs a shell text of this file on this machine, as it runs inside a sandbox.
    fn sh(script: &str, args: &[&str]) -> std::process::Output {
        #![allow(clippy::unwrap_used, reason = "tests")]
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .output()
            .unwrap()
    }

    #[test]
    fn the_finder_skips_hard_linked_files_and_lists_at_most_16() {
        #![allow(clippy::unwrap_used, reason = "tests")]
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let projects = h.join(".claude/projects");
        std::fs::create_dir_all(projects.join("-workspace")).unwrap();
        std::fs::write(projects.join("-workspace/s1.jsonl"), "one").unwrap();
        for i in 0..40 {
            let d = projects.join(format!("-x{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::hard_link(projects.join("-workspace/s1.jsonl"), d.join("s1.jsonl")).unwrap();
        }
        std::fs::create_dir_all(projects.join("-plain")).unwrap();
        std::fs::write(projects.join("-plain/s2.jsonl"), "two").unwrap();
        let hs = h.display().to_string();
        let out = sh(finder(Harness::Claude), &["s1", &hs]);
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "");
        let out = sh(finder(Harness::Claude), &["s2", &hs]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            projects.join("-plain/s2.jsonl").display().to_string()
        );
        let sessions = h.join(".codex/sessions/2026/11/30");
        std::fs::create_dir_all(&sessions).unwrap();
        for i in 0..40 {
            std::fs::write(sessions.join(format!("rollout-{i}-t1.jsonl")), "x").unwrap();
        }
        let out = sh(finder(Harness::Codex), &["t1", &hs]);
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 16);
    }

    #[test]
    fn a_piece_is_read_from_plain_files_only_and_never_blocks_on_a_fifo() {
        #![allow(clippy::unwrap_used, reason = "tests")]
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s1.jsonl");
        let bytes: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i % 251) as u8).collect();
        std::fs::write(&file, &bytes).unwrap();
        let f = file.display().to_string();
        let out = sh(READ_PIECE, &[&f, "1", "1"]);
        assert!(out.status.success());
        assert_eq!(out.stdout, bytes[1 << 20..2 << 20]);
        let out = sh(READ_PIECE, &[&f, "2", "8"]);
        assert_eq!(out.stdout, bytes[2 << 20..]);
        let fifo = dir.path().join("fifo.jsonl");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let started = std::time::Instant::now();
        let out = sh(READ_PIECE, &[&fifo.display().to_string(), "0", "8"]);
        assert!(!out.status.success());
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not a plain file"));
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
