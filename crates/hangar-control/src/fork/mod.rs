//! Forks (S31): a new sandbox whose work tree is exactly a step's tree, and a new session whose
//! conversation is the source's up to that step.
//!
//! The tree is rebuilt from hangar's store into a new folder (`rebuild`), hashed again and
//! compared with the recorded id: a mismatch refuses the fork (audited), an untrusted step
//! (recorded without the uid split) forks with a warning. Where the conversation ends is read
//! from the run logs (`cut`); a harness that cannot cut exactly at the step (Codex inside a
//! turn) forks at the nearest turn before it, and the fork's record and the capability flag
//! say so. The fork's first turn starts the harness with `--fork PARENT --fork-at CUT` (see
//! [`ControlPlane::fork_point`]); later turns resume the fork's own session.
//!
//! Non-goals (yet): forks of runs in a provider's sandbox. They are refused, audited, with the
//! reason: the harness's conversation lives in that sandbox's agent home, and a fork made as a
//! plain folder would run the agent unconfined without it; such a fork needs a new sandbox of
//! the same environment with the conversation copied across.

mod cut;
mod rebuild;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hangar_store::{Fork, NewFork, NewSandbox, Sandbox, Session, new_id};
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use cut::{Conversation, ForkCapability, fork_capability};

use crate::error::ControlError;
use crate::plane::{ControlPlane, Started};

/// A request to fork a run at a step.
#[derive(Clone, Debug)]
pub struct ForkRequest {
    pub run: String,
    pub step: usize,
    /// The new sandbox's folder (must not exist, or be empty); default
    /// `$HANGAR_HOME/forks/<sandbox id>`.
    pub dir: Option<PathBuf>,
    /// Starts the fork's first turn with this message.
    pub prompt: Option<String>,
    pub person: String,
}

/// The fork's record (kept with the fork, returned by the API).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkRecord {
    pub session: String,
    pub sandbox: String,
    pub dir: String,
    /// Where it came from.
    pub run: String,
    pub turn: String,
    pub source_session: String,
    pub step: usize,
    /// The step's tree: recorded by the driver, and what the fork's work tree hashes to.
    pub tree: String,
    pub trusted: bool,
    /// The commit the fork's checkout is on (none for a plain folder or an unborn branch).
    pub head: Option<String>,
    /// Whether the fork's folder is a clone of the source's repository.
    pub repository: bool,
    pub conversation: Conversation,
    pub capability: ForkCapability,
    pub warnings: Vec<String>,
}

/// What a fork made.
#[derive(Clone, Debug)]
pub struct Forked {
    pub record: ForkRecord,
    pub session: Session,
    pub sandbox: Sandbox,
    /// The first turn, when the request had a prompt.
    pub started: Option<Started>,
}

impl ControlPlane {
    /// Forks `req.run` at `req.step`.
    pub async fn fork(self: &Arc<Self>, req: ForkRequest) -> Result<Forked, ControlError> {
        let steps = self.steps(&req.run).await?;
        let step = steps.get(req.step).cloned().ok_or_else(|| {
            ControlError::BadRequest(format!(
                "run {} has {} steps (0 to {}); there is no step {}",
                req.run,
                steps.len(),
                steps.len().saturating_sub(1),
                req.step
            ))
        })?;
        let run = self.store.run(&req.run).await?;
        let turn = self.store.turn(&run.turn_id).await?;
        let source = self.store.session(&turn.session_id).await?;
        let source_sandbox = self.store.sandbox(&source.sandbox_id).await?;
        if let Some(sb) = crate::sandboxes::handle_of(&source_sandbox)? {
            // The harness's conversation (Claude Code's session file, Codex's rollout) is in
            // the sandbox's agent home, and the source ran confined: a fork made as a plain
            // folder on this machine would lose the one and drop the other. Refused until a
            // fork makes a sandbox of its own (S31 for sandboxed runs).
            let why = format!(
                "the fork is refused: run {} ran in {} sandbox {} (environment {}), and a fork of a sandboxed run is not made yet: it would have to be a new sandbox of the same environment holding the step's tree and a copy of the harness's conversation from the sandbox's agent home, while a fork today is a plain folder on this machine, where the agent would run unconfined and the conversation cannot be found",
                run.id,
                sb.env.provider.as_str(),
                sb.id,
                source_sandbox.environment
            );
            self.store
                .audit()
                .append(
                    &req.person,
                    "fork.refused",
                    &json!({"run": req.run, "step": req.step, "tree": step.tree, "why": why}),
                )
                .await?;
            return Err(ControlError::Refused(why));
        }
        let mut earlier = Vec::new();
        for t in self.store.turns(&source.id).await? {
            if t.index >= turn.index {
                break;
            }
            if let Some(r) = &t.run_id {
                let r = self.store.run(r).await?;
                earlier.push(self.run_log_path(&r));
            }
        }
        let sandbox_id = new_id("sb")?;
        let dir = match &req.dir {
            Some(d) if d.is_absolute() => d.clone(),
            Some(d) => {
                return Err(ControlError::BadRequest(format!(
                    "the fork's folder must be an absolute path, not {}",
                    d.display()
                )));
            }
            None => self.tools.home.join("forks").join(&sandbox_id),
        };
        let harness = source.harness;
        let files = crate::trees::run_files(&self.tools.home, &run.id, Path::new(&run.ctl_path));
        let (log, tree, n) = (files.log.clone(), step.tree.clone(), req.step);
        let workdir = PathBuf::from(&source_sandbox.workdir);
        let d = dir.clone();
        let made = blocking(move || -> Result<_, ControlError> {
            let conversation = cut::find(harness, &earlier, &log, n, &tree)?;
            let created = prepare(&d)?;
            match rebuild::rebuild(&files, &workdir, &tree, &d) {
                Ok(r) if r.rehashed == tree => Ok((conversation, r)),
                Ok(r) => {
                    clean(&d, created);
                    Err(ControlError::Refused(format!(
                        "the fork is refused: step {n}'s tree was rebuilt from hangar's store (the turn's objects and the repository's), but it hashes to {}, not to the recorded {tree}; the store does not reproduce the step",
                        r.rehashed
                    )))
                }
                Err(e) => {
                    clean(&d, created);
                    Err(e.into())
                }
            }
        })
        .await?;
        let (conversation, rebuilt) = match made {
            Ok(m) => m,
            Err(e) => {
                if let ControlError::Refused(why) = &e {
                    self.store
                        .audit()
                        .append(
                            &req.person,
                            "fork.refused",
                            &json!({"run": req.run, "step": req.step, "tree": step.tree, "why": why}),
                        )
                        .await?;
                }
                return Err(e);
            }
        };
        let mut warnings = Vec::new();
        if !step.trusted {
            warnings.push(format!(
                "step {}'s tree is untrusted: it was recorded where the agent could write hangar's files (no uid split), so it says what the driver saw, not what a separate user checked",
                req.step
            ));
        }
        if let Some(why) = &conversation.why {
            warnings.push(why.clone());
        }
        let sandbox = self
            .store
            .create_sandbox(&NewSandbox {
                id: sandbox_id,
                environment: source_sandbox.environment.clone(),
                kind: source_sandbox.kind.clone(),
                workdir: dir.display().to_string(),
                person: req.person.clone(),
                // A fork is a plain folder for now, even of a provider's sandbox.
                handle: None,
            })
            .await?;
        let session = self
            .store
            .create_session(&new_id("ses")?, &sandbox.id, source.harness, source.policy)
            .await?;
        self.store
            .set_session_options(&session.id, &source.options)
            .await?;
        let record = ForkRecord {
            session: session.id.clone(),
            sandbox: sandbox.id.clone(),
            dir: sandbox.workdir.clone(),
            run: run.id.clone(),
            turn: turn.id.clone(),
            source_session: source.id.clone(),
            step: req.step,
            tree: step.tree.clone(),
            trusted: step.trusted,
            head: rebuilt.head,
            repository: rebuilt.repository,
            conversation,
            capability: fork_capability(source.harness),
            warnings,
        };
        let value = serde_json::to_value(&record)
            .map_err(|e| ControlError::Internal(format!("the fork's record: {e}")))?;
        self.store
            .create_fork(&NewFork {
                session_id: session.id.clone(),
                run_id: run.id.clone(),
                step: i64::try_from(req.step).unwrap_or(i64::MAX),
                tree: step.tree.clone(),
                record: value.clone(),
                person: req.person.clone(),
            })
            .await?;
        self.store
            .audit()
            .append(&req.person, "fork.created", &value)
            .await?;
        let started = match req.prompt.as_deref() {
            Some(p) if !p.trim().is_empty() => Some(
                self.start_turn(&session.id, &[p.to_owned()], &req.person)
                    .await?,
            ),
            _ => None,
        };
        Ok(Forked {
            record,
            session: self.store.session(&session.id).await?,
            sandbox,
            started,
        })
    }

    /// The forks made from a run's steps.
    pub async fn forks_of_run(&self, run_id: &str) -> Result<Vec<ForkRecord>, ControlError> {
        self.store.run(run_id).await?;
        Ok(self
            .store
            .forks_of_run(run_id)
            .await?
            .iter()
            .filter_map(record_of)
            .collect())
    }

    /// The fork a session was made as, if it was.
    pub async fn fork_of(&self, session_id: &str) -> Result<Option<ForkRecord>, ControlError> {
        Ok(self
            .store
            .fork(session_id)
            .await?
            .as_ref()
            .and_then(record_of))
    }

    /// Where a forked session's first turn forks the harness's conversation from: (parent, last
    /// entry kept). None once the session has its own harness session (later turns resume it),
    /// and for a session that is no fork or whose fork starts a new conversation.
    pub(crate) async fn fork_point(
        &self,
        session: &Session,
    ) -> Result<Option<(String, Option<String>)>, ControlError> {
        if session.harness_session_id.is_some() {
            return Ok(None);
        }
        Ok(self.fork_of(&session.id).await?.and_then(|r| {
            r.conversation
                .parent
                .map(|parent| (parent, r.conversation.at))
        }))
    }
}

fn record_of(f: &Fork) -> Option<ForkRecord> {
    serde_json::from_value(f.record.clone()).ok()
}

/// Makes `dir` ready for the fork: it must not exist (it is created) or be an empty folder.
/// Whether it was created.
fn prepare(dir: &Path) -> Result<bool, ControlError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ControlError::BadRequest(format!(
                    "{} is not empty: give a new folder (or an empty one) for the fork",
                    dir.display()
                )));
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| {
                ControlError::BadRequest(format!("cannot create {}: {e}", dir.display()))
            })?;
            Ok(true)
        }
        Err(e) => Err(ControlError::BadRequest(format!(
            "{} cannot be used for the fork: {e}",
            dir.display()
        ))),
    }
}

/// Removes what a failed fork put in `dir` (the folder too, if the fork created it; it was
/// empty or absent before).
fn clean(dir: &Path, created: bool) {
    if created {
        let _ = std::fs::remove_dir_all(dir);
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = if e.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ControlError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ControlError::Internal(format!("a blocking task failed: {e}")))
}
