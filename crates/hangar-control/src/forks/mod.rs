//! Forks (S31): a new sandbox whose work tree is exactly a step's tree, and a new session whose
//! conversation is the source's up to that step.
//!
//! The tree is rebuilt from hangar's store into a new folder (`rebuild`), hashed again and
//! compared with the recorded id: a mismatch refuses the fork (audited), an untrusted step
//! (recorded without the uid split) forks with a warning. Where the conversation ends is read
//! from the run logs (`cut`); a harness that cannot cut exactly at the step (Codex inside a
//! turn) forks at the nearest turn before it, and the fork's record and the capability flag
//! say so. The fork's first turn starts the harness with `--fork PARENT --fork-at CUT` (see
//! [`Steps::fork_point`]); later turns resume the fork's own session.
//!
//! A run in a provider's sandbox forks into a new sandbox of the same environment, with the
//! harness's conversation carried across from the source sandbox's agent home, or once it was
//! removed from the copies kept at its turns' ends, the step rebuilt on the repository kept when
//! it was removed or the one it was made from (`sandboxed`);
//! a run in an in-place sandbox (`hangar run`'s default) forks into a new folder, never into the
//! person's own. A kubernetes or e2b sandbox's repository is taken out of it for the rebuild,
//! and the new sandbox's work tree is hashed again inside it (`remote`).
//!
//! The [`Forks`] service makes forks with the sandboxes, steps and runs services; the records
//! it leaves are read through the steps ([`crate::steps::forks`]).

mod cut;
pub(crate) mod rebuild;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hangar_store::{NewFork, NewSandbox, Sandbox, Session, Store, new_id};
use serde_json::json;

use crate::blocking::blocking;
use crate::error::ControlError;
use crate::launch::Tools;
use crate::runs::{Runs, Started};
use crate::sandboxes::Sandboxes;
use crate::steps::Steps;
use crate::steps::forks::{Conversation, ForkRecord, fork_capability};

/// The forks service (see the module's page): it owns no state of its own; it works the
/// services below it.
#[derive(Debug)]
pub struct Forks {
    pub(crate) store: Store,
    pub(crate) tools: Arc<Tools>,
    pub(crate) runs: Arc<Runs>,
    pub(crate) sandboxes: Arc<Sandboxes>,
    pub(crate) steps: Arc<Steps>,
}

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

/// What a fork made.
#[derive(Clone, Debug)]
pub struct Forked {
    pub record: ForkRecord,
    pub session: Session,
    pub sandbox: Sandbox,
    /// The first turn, when the request had a prompt.
    pub started: Option<Started>,
}

/// What a fork starts from.
struct Source {
    step: crate::steps::trees::Step,
    run: hangar_store::Run,
    turn: hangar_store::Turn,
    session: Session,
    sandbox: Sandbox,
    /// The provider's sandbox it ran in (none: a plain folder).
    sandboxed: Option<hangar_sandbox::Sandbox>,
    /// The run logs of the session's earlier turns, oldest first.
    earlier: Vec<PathBuf>,
    /// The session's runs up to this one, newest first.
    runs: Vec<String>,
}

/// Where the step is rebuilt: the folder asked for, else under hangar's home (a staging folder
/// when a sandbox copies it).
fn fork_dir(
    home: &Path,
    req: &ForkRequest,
    src: &Source,
    copying: bool,
    sandbox_id: &str,
) -> Result<PathBuf, ControlError> {
    Ok(match &req.dir {
        Some(_) if copying => {
            return Err(ControlError::Invalid(format!(
                "run {} ran in a sandbox of environment {}, which holds a copy of the repository: the fork is a new sandbox of it, whose work tree is its own workspace (shown as dir:); --dir is for forks whose work tree is a folder of this machine",
                src.run.id, src.sandbox.environment
            )));
        }
        Some(d) if d.is_absolute() => d.clone(),
        Some(d) => {
            return Err(ControlError::Invalid(format!(
                "the fork's folder must be an absolute path, not {}",
                d.display()
            )));
        }
        None if copying => home.join("forks").join(format!(".{sandbox_id}.staging")),
        None => home.join("forks").join(sandbox_id),
    })
}

/// Rebuilds step `n`'s `tree` into `dir` on each base in turn until one reproduces it; a
/// refusal names what each base gave (and `missing`, the bases there were not). Whatever a
/// failure leaves in `dir` is removed.
fn rebuild_on_bases(
    files: &crate::steps::trees::RunFiles,
    bases: &[(String, PathBuf, bool)],
    missing: Vec<String>,
    tree: &str,
    n: usize,
    (d, created): (&Path, bool),
) -> Result<rebuild::Rebuilt, ControlError> {
    let single = bases.len() == 1 && missing.is_empty();
    let mut failures = missing;
    for (what, base, untrusted) in bases {
        match rebuild::rebuild(files, base, tree, d, *untrusted) {
            Ok(r) if r.rehashed == tree => return Ok(r),
            Ok(r) if single => {
                clean(d, created);
                return Err(ControlError::Refused(format!(
                    "the fork is refused: step {n}'s tree was rebuilt from hangar's store (the turn's objects and the repository's), but it hashes to {}, not to the recorded {tree}; the store does not reproduce the step",
                    r.rehashed
                )));
            }
            Ok(r) => failures.push(format!(
                "rebuilt on {what}, it hashes to {}, not to the recorded {tree}",
                r.rehashed
            )),
            Err(rebuild::Failed::Store(m)) if !single => {
                failures.push(format!("{what}: {m}"));
            }
            Err(e) => {
                clean(d, created);
                return Err(e.into());
            }
        }
        clean(d, false);
    }
    clean(d, created);
    Err(ControlError::Refused(format!(
        "the fork is refused: step {n}'s tree {tree} cannot be rebuilt: {}",
        failures.join("; ")
    )))
}

impl Forks {
    /// Forks `req.run` at `req.step`: the step's tree rebuilt (and checked) into a new sandbox
    /// or folder, the harness's conversation up to the step carried into it, a session whose
    /// first turn starts with `req.prompt` when there is one.
    pub async fn fork(&self, req: ForkRequest) -> Result<Forked, ControlError> {
        let src = self.fork_source(&req).await?;
        let sandbox_id = new_id("sb")?;
        let copying = self.fork_copies(&src).await?;
        let dir = fork_dir(&self.tools.home, &req, &src, copying, &sandbox_id)?;
        let (bases, scratches, missing) = match self.rebuild_bases(&src, copying, &sandbox_id).await
        {
            Ok(b) => b,
            Err(ControlError::Refused(why)) => {
                return Err(self.refused(&req, &src.step.tree, why).await);
            }
            Err(e) => return Err(e),
        };
        self.steps.restore_kept(&src.run).await;
        let files = crate::steps::trees::run_files(
            &self.tools.home,
            &src.run.id,
            Path::new(&src.run.ctl_path),
        );
        let (harness, earlier, tree, n) = (
            src.session.harness,
            src.earlier.clone(),
            src.step.tree.clone(),
            req.step,
        );
        let d = dir.clone();
        let made = blocking(move || -> Result<_, ControlError> {
            let conversation = cut::find(harness, &earlier, &files.log, n, &tree)?;
            let created = prepare(&d)?;
            let rebuilt = rebuild_on_bases(&files, &bases, missing, &tree, n, (&d, created))?;
            Ok((conversation, rebuilt, created))
        })
        .await?;
        blocking(move || drop(scratches)).await?;
        let (conversation, rebuilt, created) = match made {
            Ok(m) => m,
            Err(ControlError::Refused(why)) => {
                return Err(self.refused(&req, &src.step.tree, why).await);
            }
            Err(e) => return Err(e),
        };
        let sandbox = self
            .fork_into(
                &req,
                &src,
                &conversation,
                (&sandbox_id, &dir, created, copying),
            )
            .await?;
        let record = self
            .record_fork(&req, &src, &sandbox, rebuilt, conversation)
            .await?;
        let started = match req.prompt.as_deref() {
            Some(p) if !p.trim().is_empty() => Some(
                self.runs
                    .start_turn(&record.session, &[p.to_owned()], &req.person)
                    .await?,
            ),
            _ => None,
        };
        Ok(Forked {
            session: self.store.session(&record.session).await?,
            record,
            sandbox,
            started,
        })
    }

    /// What changed from step `from` to step `to` of run `run_id` ([`Steps::diff`]). A run in a
    /// sandbox whose work tree is not on this machine (mirrored: kubernetes, e2b, docker
    /// `stream`; or removed) has its repository's objects elsewhere: when the diff needs them,
    /// they come from where a fork's base would (the repository taken out of the live sandbox,
    /// the one kept when it was removed, the one it was made from).
    pub async fn diff(
        &self,
        run_id: &str,
        from: usize,
        to: usize,
    ) -> Result<crate::TreeDiff, ControlError> {
        let first = self.steps.diff(run_id, from, to).await;
        let Err(first_error) = first else {
            return first;
        };
        let Ok(src) = self
            .fork_source(&ForkRequest {
                run: run_id.to_owned(),
                step: from,
                dir: None,
                prompt: None,
                person: String::new(),
            })
            .await
        else {
            return Err(first_error);
        };
        let removed = src.sandbox.state != "live";
        let elsewhere = src
            .sandboxed
            .as_ref()
            .is_some_and(|sb| crate::sandboxes::is_remote(sb) || removed);
        if !elsewhere {
            return Err(first_error);
        }
        // Taking a repository out of a sandbox is heavy work for a read: a few at a time.
        static TAKING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
        let _turn = TAKING
            .acquire()
            .await
            .map_err(|e| ControlError::Internal(e.to_string()))?;
        let copying = self.fork_copies(&src).await?;
        let scratch_id = new_id("diff")?;
        let (bases, scratches, _) = self.rebuild_bases(&src, copying, &scratch_id).await?;
        let dirs = bases.into_iter().map(|(_, dir, _)| dir).collect();
        let diff = self.steps.diff_on(run_id, from, to, dirs).await;
        blocking(move || drop(scratches)).await?;
        diff
    }

    /// The run forked, its step, its session and sandbox, and the session's earlier runs.
    async fn fork_source(&self, req: &ForkRequest) -> Result<Source, ControlError> {
        let steps = self.steps.steps(&req.run).await?;
        let step = steps.get(req.step).cloned().ok_or_else(|| {
            ControlError::Invalid(format!(
                "run {} has {} steps (0 to {}); there is no step {}",
                req.run,
                steps.len(),
                steps.len().saturating_sub(1),
                req.step
            ))
        })?;
        let run = self.store.run(&req.run).await?;
        let turn = self.store.turn(&run.turn_id).await?;
        let session = self.store.session(&turn.session_id).await?;
        let sandbox = self.store.sandbox(&session.sandbox_id).await?;
        let sandboxed = crate::sandboxes::handle_of(&sandbox)?;
        let mut earlier = Vec::new();
        // The session's runs up to this one, newest first (where kept conversations are looked
        // for).
        let mut runs = vec![run.id.clone()];
        for t in self.store.turns(&session.id).await? {
            if t.index >= turn.index {
                break;
            }
            if let Some(r) = &t.run_id {
                let r = self.store.run(r).await?;
                // Brought back from the database if another replica kept it.
                earlier.push(self.steps.run_log(&r).await);
                runs.insert(1, r.id.clone());
            }
        }
        Ok(Source {
            step,
            run,
            turn,
            session,
            sandbox,
            sandboxed,
            earlier,
            runs,
        })
    }

    /// Whether the source ran in a sandbox whose environment copies the repository: then the
    /// step is rebuilt into a staging folder, which the new sandbox copies. Otherwise (a plain
    /// folder, or a sandbox working in place) into the fork's own folder.
    async fn fork_copies(&self, src: &Source) -> Result<bool, ControlError> {
        if src.sandboxed.is_none() {
            return Ok(false);
        }
        let env = self
            .store
            .environment(&src.sandbox.environment)
            .await
            .map_err(|e| match e {
                hangar_store::StoreError::NotFound { .. } => ControlError::NotFound(format!(
                    "run {} ran in a sandbox of environment {}, which is gone; the fork is a sandbox of the same environment (`hangar env apply` makes it again)",
                    src.run.id, src.sandbox.environment
                )),
                e => e.into(),
            })?;
        Ok(!crate::sandboxes::envs::spec_of(&env)?.in_place)
    }

    /// The fork's sandbox (or, for a plain folder, its row), with the harness's conversation up
    /// to the step carried in: from the source sandbox's agent home, or the copies kept at its
    /// turns' ends once it was removed. A refusal is audited; a failure removes the folder.
    async fn fork_into(
        &self,
        req: &ForkRequest,
        src: &Source,
        conversation: &Conversation,
        (sandbox_id, dir, created, copying): (&str, &Path, bool, bool),
    ) -> Result<Sandbox, ControlError> {
        let Some(sb) = &src.sandboxed else {
            return Ok(self
                .store
                .create_sandbox(&NewSandbox {
                    id: sandbox_id.to_owned(),
                    environment: src.sandbox.environment.clone(),
                    kind: src.sandbox.kind.clone(),
                    workdir: dir.display().to_string(),
                    person: req.person.clone(),
                    handle: None,
                })
                .await?);
        };
        let carried = match conversation.parent.as_deref() {
            Some(parent) => {
                self.sandboxes
                    .conversation_files(
                        (&src.sandbox, sb),
                        src.session.harness,
                        parent,
                        (&src.session.id, src.runs.clone()),
                    )
                    .await
            }
            None => Ok(crate::sandboxes::keep::ConversationFiles::default()),
        };
        let made = match carried {
            Ok(carried) => {
                self.fork_sandbox(
                    req,
                    (sandbox_id, &src.sandbox.environment),
                    carried,
                    (dir, created, copying),
                    &src.step.tree,
                )
                .await
            }
            Err(e) => {
                let d = dir.to_owned();
                blocking(move || clean(&d, created)).await?;
                Err(e)
            }
        };
        match made {
            Ok(row) => Ok(row),
            Err(ControlError::Refused(why)) => Err(self.refused(req, &src.step.tree, why).await),
            Err(e) => Err(e),
        }
    }

    /// The fork's session (the source's harness, policy and options) and its record, stored
    /// and audited.
    async fn record_fork(
        &self,
        req: &ForkRequest,
        src: &Source,
        sandbox: &Sandbox,
        rebuilt: rebuild::Rebuilt,
        conversation: Conversation,
    ) -> Result<ForkRecord, ControlError> {
        let mut warnings = Vec::new();
        if !src.step.trusted {
            warnings.push(format!(
                "step {}'s tree is untrusted: it was recorded where the agent could write hangar's files (no uid split), so it says what the driver saw, not what a separate user checked",
                req.step
            ));
        }
        if let Some(why) = &conversation.why {
            warnings.push(why.clone());
        }
        let session = self
            .store
            .create_session(
                &new_id("ses")?,
                &sandbox.id,
                src.session.harness,
                src.session.policy,
            )
            .await?;
        self.store
            .set_session_options(&session.id, &src.session.options)
            .await?;
        let record = ForkRecord {
            session: session.id.clone(),
            sandbox: sandbox.id.clone(),
            dir: sandbox.workdir.clone(),
            run: src.run.id.clone(),
            turn: src.turn.id.clone(),
            source_session: src.session.id.clone(),
            step: req.step as u64,
            tree: src.step.tree.clone(),
            trusted: src.step.trusted,
            head: rebuilt.head,
            repository: rebuilt.repository,
            conversation,
            capability: fork_capability(src.session.harness),
            warnings,
        };
        let value = serde_json::to_value(&record)
            .map_err(|e| ControlError::Internal(format!("the fork's record: {e}")))?;
        self.store
            .create_fork(&NewFork {
                session_id: session.id.clone(),
                run_id: src.run.id.clone(),
                step: i64::try_from(req.step).unwrap_or(i64::MAX),
                tree: src.step.tree.clone(),
                record: value.clone(),
                person: req.person.clone(),
            })
            .await?;
        self.store
            .audit()
            .append(&req.person, "fork.created", &value)
            .await?;
        Ok(record)
    }

    /// What the step is rebuilt on: the source's work tree; for a kubernetes or e2b sandbox
    /// (its workspace is not on this machine) its repository taken out of it; for a removed
    /// sandbox that held a copy, the repository kept when it was removed, else the one it was
    /// made from. Each in turn until one reproduces the step. With them, the scratch folders to
    /// remove afterwards and the bases there were not (why each is missing).
    async fn rebuild_bases(
        &self,
        src: &Source,
        copying: bool,
        sandbox_id: &str,
    ) -> Result<
        (
            Vec<(String, PathBuf, bool)>,
            Vec<crate::steps::trees::Scratch>,
            Vec<String>,
        ),
        ControlError,
    > {
        let mut bases: Vec<(String, PathBuf, bool)> = Vec::new();
        let mut scratches = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        let removed = src.sandbox.state != "live";
        match &src.sandboxed {
            Some(sb) if removed && copying => {
                self.sandboxes.restore_repository(&sb.id).await;
                let (home, id) = (self.tools.home.clone(), sb.id.clone());
                let kept =
                    blocking(move || crate::sandboxes::keep::kept_repository(&home, &id)).await?;
                let what = format!("the repository kept when sandbox {} was removed", sb.id);
                match kept {
                    Some(Ok(taken)) => match blocking(move || rebuild::base_from(&taken)).await? {
                        Ok((scratch, base)) => {
                            scratches.push(scratch);
                            bases.push((what, base, true));
                        }
                        Err(rebuild::Failed::Store(why)) => missing.push(format!("{what}: {why}")),
                        Err(e) => return Err(e.into()),
                    },
                    Some(Err(why)) => missing.push(format!(
                        "sandbox {}'s repository could not be kept when it was removed ({why})",
                        sb.id
                    )),
                    None => missing.push(format!(
                        "no copy of sandbox {}'s repository was kept when it was removed",
                        sb.id
                    )),
                }
                match self.sandbox_origin(&sb.id).await? {
                    Some(origin) if origin.is_dir() => bases.push((
                        format!(
                            "the repository sandbox {} was made from ({})",
                            sb.id,
                            origin.display()
                        ),
                        origin,
                        true,
                    )),
                    Some(origin) => missing.push(format!(
                        "the repository sandbox {} was made from ({}) is no longer there",
                        sb.id,
                        origin.display()
                    )),
                    None => missing.push(format!(
                        "the audit log does not name the repository sandbox {} was made from",
                        sb.id
                    )),
                }
            }
            Some(sb) if crate::sandboxes::is_remote(sb) => {
                let bundle = self
                    .tools
                    .home
                    .join("tmp")
                    .join(format!("{sandbox_id}.bundle"));
                let taken = self
                    .sandboxes
                    .take_repository(sb, crate::sandboxes::take::INSIDE_TIMEOUT, &bundle)
                    .await;
                let based = match taken {
                    Ok(taken) => blocking(move || rebuild::base_from(&taken)).await,
                    Err(e) => Err(e),
                };
                let b = bundle.clone();
                blocking(move || std::fs::remove_file(b)).await?.ok();
                match based? {
                    Ok((scratch, base)) => {
                        scratches.push(scratch);
                        bases.push((format!("the repository of sandbox {}", sb.id), base, true));
                    }
                    Err(rebuild::Failed::Store(why)) => {
                        return Err(ControlError::Refused(format!("the fork is refused: {why}")));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            _ => bases.push((
                format!("the work tree {}", src.sandbox.workdir),
                PathBuf::from(&src.sandbox.workdir),
                copying,
            )),
        }
        Ok((bases, scratches, missing))
    }

    /// Records a refused fork in the audit log; the error to return (the audit's own failure
    /// if it failed).
    async fn refused(&self, req: &ForkRequest, tree: &str, why: String) -> ControlError {
        match self
            .store
            .audit()
            .append(
                &req.person,
                "fork.refused",
                &json!({"run": req.run, "step": req.step, "tree": tree, "why": why}),
            )
            .await
        {
            Ok(_) => ControlError::Refused(why),
            Err(e) => e.into(),
        }
    }

    /// The fork's sandbox of environment `env`: its work tree the rebuilt folder `dir` (copied
    /// when `copying`, then hashed again there; worked on in place otherwise), and the harness's
    /// conversation `files` written into its agent home. Whatever a failure leaves is removed.
    async fn fork_sandbox(
        &self,
        req: &ForkRequest,
        (id, env): (&str, &str),
        files: crate::sandboxes::keep::ConversationFiles,
        (dir, created, copying): (&Path, bool, bool),
        tree: &str,
    ) -> Result<hangar_store::Sandbox, ControlError> {
        let made = self.sandboxes.make_sandbox(id, env, dir, &req.person).await;
        if copying || made.is_err() {
            let (d, c) = (dir.to_owned(), created || copying);
            blocking(move || clean(&d, c)).await?;
        }
        let (row, sb) = made?;
        let checked = async {
            if copying {
                let again = if crate::sandboxes::is_remote(&sb) {
                    self.sandboxes.tree_inside(&sb).await?
                } else {
                    let ws = PathBuf::from(&row.workdir);
                    blocking(move || hangar_treehash::tree_id(&ws)).await?.map_err(|e| {
                        ControlError::Internal(format!("cannot hash {}: {e}", row.workdir))
                    })?
                };
                if again != tree {
                    return Err(ControlError::Refused(format!(
                        "the fork is refused: step {}'s tree was rebuilt and copied into sandbox {}, but its workspace hashes to {again}, not to the recorded {tree}",
                        req.step, sb.id
                    )));
                }
            }
            if !files.is_empty() {
                self.sandboxes.write_conversation(&sb, &files).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = checked {
            let _ = self
                .sandboxes
                .remove_sandbox(&sb.id, false, true, &req.person)
                .await;
            if !copying {
                let d = dir.to_owned();
                blocking(move || clean(&d, created)).await?;
            }
            return Err(e);
        }
        Ok(row)
    }

    /// The repository a sandbox was made from (`--repo`), as the audit record of its creation
    /// names it.
    async fn sandbox_origin(&self, sandbox: &str) -> Result<Option<PathBuf>, ControlError> {
        let audit = self.store.audit();
        let mut after = 0;
        loop {
            let page = audit.records(after, 500).await?;
            let Some(last) = page.last() else {
                return Ok(None);
            };
            after = last.seq;
            for r in page.iter().filter(|r| r.action == "sandbox.created") {
                let Ok(d) = serde_json::from_str::<serde_json::Value>(&r.detail) else {
                    continue;
                };
                if d.get("sandbox").and_then(serde_json::Value::as_str) == Some(sandbox) {
                    return Ok(d
                        .get("repo")
                        .and_then(serde_json::Value::as_str)
                        .map(PathBuf::from));
                }
            }
        }
    }
}

/// Makes `dir` ready for the fork: it must not exist (it is created) or be an empty folder.
/// Whether it was created.
fn prepare(dir: &Path) -> Result<bool, ControlError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ControlError::Invalid(format!(
                    "{} is not empty: give a new folder (or an empty one) for the fork",
                    dir.display()
                )));
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| {
                ControlError::Invalid(format!("cannot create {}: {e}", dir.display()))
            })?;
            Ok(true)
        }
        Err(e) => Err(ControlError::Invalid(format!(
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
