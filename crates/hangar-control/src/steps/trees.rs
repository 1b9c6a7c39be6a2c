//! A run's steps (its `tree` events, in order) and the diff between two of them (S31's `hangar
//! diff`).
//!
//! The trees' objects are where the driver left them: in `<ctl>/tree/` while the turn runs,
//! in `<ctl>/trees.pack` after, and the rest in the repository's own objects (alternates). When
//! the turn ends the control plane keeps the pack and the run log in its own store
//! (`$HANGAR_HOME/kept/<run>/`, [`keep_run`]), so that a step can still be diffed and forked
//! once the run's control folder is gone (a sandbox removed, a control folder cleaned up). The
//! diff is git's own (`git diff`), run in a scratch bare repository of hangar's that only
//! *reads* those objects: nothing of the agent's repository (its config, hooks, attributes) is
//! used, and nothing is written into it.
//!
//! Non-goals: rename detection. Forks (a step's tree rebuilt into a new sandbox) are `fork/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use hangar_store::EventScope;
use serde::Serialize;
use serde_json::Value;

use crate::error::ControlError;
use crate::steps::Steps;

/// Where a run's files are read from: the control plane's kept copies once the turn has ended
/// (`$HANGAR_HOME/kept/<run>/`), else the run's control folder.
#[derive(Clone, Debug)]
pub(crate) struct RunFiles {
    /// The turn's object store while the turn runs (`<ctl>/tree/`), if it is there.
    pub store: Option<PathBuf>,
    /// The turn's objects as one pack and its index, once the turn has ended.
    pub pack: Option<(PathBuf, PathBuf)>,
    /// The run log.
    pub log: PathBuf,
}

/// The folder where the control plane keeps what a run leaves (its pack and its run log) once
/// its turn has ended.
pub(crate) fn kept_dir(home: &Path, run_id: &str) -> PathBuf {
    home.join("kept").join(run_id)
}

/// The run's files: its kept copies where they are, else its control folder's.
pub(crate) fn run_files(home: &Path, run_id: &str, ctl: &Path) -> RunFiles {
    let kept = kept_dir(home, run_id);
    let ctl = hangar_mailbox::ctl::ControlDir::at(ctl.to_owned());
    let store = Some(ctl.tree_store()).filter(|p| p.is_dir());
    let pack_at = |dir: &Path| {
        let (pack, idx) = (dir.join("trees.pack"), dir.join("trees.idx"));
        (pack.is_file() && idx.is_file()).then_some((pack, idx))
    };
    let pack = pack_at(&kept).or_else(|| pack_at(ctl.root()));
    let kept_log = kept.join("run.log");
    let log = if kept_log.is_file() {
        kept_log
    } else {
        ctl.run_log()
    };
    RunFiles { store, pack, log }
}

/// Copies the ended run's pack (with its index) and its run log from its control folder into
/// the control plane's store (`$HANGAR_HOME/kept/<run>/`, hangar's user's only). Each file is
/// written under a temporary name and renamed, so a reader never sees half of one. Files the
/// run does not have (a turn that never hashed, a driver that died) are skipped.
pub(crate) fn keep_run(home: &Path, run_id: &str, ctl: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = kept_dir(home, run_id);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    for name in ["trees.pack", "trees.idx", "run.log"] {
        let from = ctl.join(name);
        if !from.is_file() {
            continue;
        }
        hangar_protocol::atomic::copy_atomic(&from, &dir.join(name), 0o600)?;
    }
    Ok(())
}

/// Where the run's log is read from: the control plane's kept copy (under hangar's home
/// `home`) once the turn has ended and was kept, else the run's control folder.
pub fn run_log_path(home: &Path, run: &hangar_store::Run) -> PathBuf {
    run_files(home, &run.id, Path::new(&run.ctl_path)).log
}

/// The kept files the database holds too (issue 24; not the seal key, which is the run's
/// secret: a replica that lacks it reads the log as the vault allows).
const KEPT_IN_STORE: [&str; 3] = ["trees.pack", "trees.idx", "run.log"];

impl Steps {
    /// [`run_log_path`] under this control plane's home.
    pub fn run_log_path(&self, run: &hangar_store::Run) -> PathBuf {
        run_log_path(&self.tools.home, run)
    }

    /// [`Steps::run_log_path`], the kept files first brought back from the database when this
    /// replica's home lacks them ([`Steps::restore_kept`]).
    pub async fn run_log(&self, run: &hangar_store::Run) -> PathBuf {
        self.restore_kept(run).await;
        self.run_log_path(run)
    }

    /// On PostgreSQL, stores what [`keep_run`] kept of an ended run in the database too, so that
    /// any replica can read its steps and its log once this one's home is gone.
    pub(crate) async fn store_kept(&self, run_id: &str) {
        if self.store.backend() != hangar_store::Backend::Postgres {
            return;
        }
        let dir = kept_dir(&self.tools.home, run_id);
        for name in KEPT_IN_STORE {
            let path = dir.join(name);
            if !path.is_file() {
                continue;
            }
            if let Err(e) = self.store.put_kept_file(run_id, name, &path).await {
                tracing::warn!(run = %run_id, file = name, error = %e, "cannot keep the run's file in the database");
            }
        }
    }

    /// Brings an ended run's kept files back from the database into this replica's home when it
    /// lacks them (another replica kept them, or this one lost its home: `$HANGAR_HOME/kept/` is
    /// a cache). A live run's files are in its control folder; nothing is done for it.
    pub(crate) async fn restore_kept(&self, run: &hangar_store::Run) {
        restore_kept(&self.store, &self.tools.home, run).await;
    }
}

/// [`Steps::restore_kept`] with the store and home given.
pub(crate) async fn restore_kept(
    store: &hangar_store::Store,
    home: &Path,
    run: &hangar_store::Run,
) {
    if store.backend() != hangar_store::Backend::Postgres
        || run.state == hangar_store::RunState::Live
    {
        return;
    }
    let dir = kept_dir(home, &run.id);
    let seal_key = dir.join(crate::steps::logtrust::SEAL_KEY_FILE);
    if KEPT_IN_STORE.iter().all(|n| dir.join(n).is_file()) && seal_key.is_file() {
        return;
    }
    let Ok(names) = store.kept_file_names(&run.id).await else {
        return;
    };
    let missing: Vec<String> = names
        .into_iter()
        .filter(|n| KEPT_IN_STORE.contains(&n.as_str()) && !dir.join(n).is_file())
        .collect();
    {
        use std::os::unix::fs::DirBuilderExt;
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
        {
            tracing::warn!(run = %run.id, error = %e, "cannot make the run's kept folder");
            return;
        }
    }
    for name in missing {
        if let Err(e) = store.get_kept_file(&run.id, &name, &dir.join(&name)).await {
            tracing::warn!(run = %run.id, file = %name, error = %e, "cannot bring the run's kept file back from the database");
        }
    }
    if !seal_key.is_file()
        && let Ok(Some(key)) = store
            .kept_secret(&run.id, crate::steps::logtrust::SEAL_KEY_FILE)
            .await
        && let Err(e) = hangar_protocol::atomic::write_atomic(&seal_key, key.expose(), 0o600)
    {
        tracing::warn!(run = %run.id, error = %e, "cannot bring the run's seal key back from the database");
    }
}

/// One step of a run: a tree the driver recorded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// 0 for the first tree of the run (its start), then one more per tree.
    pub step: usize,
    pub tree: String,
    /// The tool call the tree followed, or none for a phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// `start` | `end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    pub trusted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Value>,
    /// The stored event's id.
    pub event_id: i64,
}

/// One file changed between two steps; `added`/`deleted` lines are `None` for binary files.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FileChange {
    pub path: String,
    pub added: Option<u64>,
    pub deleted: Option<u64>,
}

/// What changed from one step to another.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TreeDiff {
    pub from: Step,
    pub to: Step,
    pub files: Vec<FileChange>,
    /// `git diff`'s patch.
    pub patch: String,
}

impl Steps {
    /// The run's steps, in order.
    pub async fn steps(&self, run_id: &str) -> Result<Vec<Step>, ControlError> {
        self.store.run(run_id).await?;
        let mut steps = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .store
                .events_after(EventScope::Run(run_id), after, hangar_store::MAX_PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for e in page.into_iter().filter(|e| e.kind == "tree") {
                let p = &e.payload;
                let s = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
                let Some(tree) = s("tree") else { continue };
                steps.push(Step {
                    step: steps.len(),
                    tree,
                    tool_use_id: s("tool_use_id"),
                    phase: s("phase"),
                    trusted: p.get("trusted").and_then(Value::as_bool).unwrap_or(false),
                    skipped: p.get("skipped").cloned().filter(|v| !v.is_null()),
                    event_id: e.id,
                });
            }
        }
        Ok(steps)
    }

    /// What changed from step `from` to step `to` of the run.
    pub async fn diff(
        &self,
        run_id: &str,
        from: usize,
        to: usize,
    ) -> Result<TreeDiff, ControlError> {
        self.diff_on(run_id, from, to, Vec::new()).await
    }

    /// [`Steps::diff`], with the objects of the repositories `bases` too (a mirrored sandbox's
    /// repository is not on this machine: see `Forks::diff`).
    pub(crate) async fn diff_on(
        &self,
        run_id: &str,
        from: usize,
        to: usize,
        bases: Vec<PathBuf>,
    ) -> Result<TreeDiff, ControlError> {
        let steps = self.steps(run_id).await?;
        let pick = |n: usize| {
            steps.get(n).cloned().ok_or_else(|| {
                ControlError::Invalid(format!(
                    "run {run_id} has {} steps (0 to {}); there is no step {n}",
                    steps.len(),
                    steps.len().saturating_sub(1)
                ))
            })
        };
        let (a, b) = (pick(from)?, pick(to)?);
        let run = self.store.run(run_id).await?;
        let turn = self.store.turn(&run.turn_id).await?;
        let session = self.store.session(&turn.session_id).await?;
        let sandbox = self.store.sandbox(&session.sandbox_id).await?;
        self.restore_kept(&run).await;
        let files = run_files(&self.tools.home, &run.id, Path::new(&run.ctl_path));
        let workdir = PathBuf::from(&sandbox.workdir);
        let (ta, tb) = (a.tree.clone(), b.tree.clone());
        let (files, patch) =
            tokio::task::spawn_blocking(move || git_diff(&files, &workdir, &bases, &ta, &tb))
                .await
                .map_err(|e| ControlError::Internal(format!("the diff's thread: {e}")))??;
        Ok(TreeDiff {
            from: a,
            to: b,
            files,
            patch,
        })
    }
}

/// `git diff` of two trees, in a scratch bare repository whose objects are the run's (its store
/// or its pack) and the work tree's repository's.
fn git_diff(
    run: &RunFiles,
    workdir: &Path,
    bases: &[PathBuf],
    a: &str,
    b: &str,
) -> Result<(Vec<FileChange>, String), ControlError> {
    let scratch = Scratch::new()?;
    let git_dir = scratch.0.join("diff.git");
    run_git(
        &git_dir,
        &["init", "--bare", "-q", &git_dir.display().to_string()],
        false,
    )?;
    let objects = git_dir.join("objects");
    let mut alternates: Vec<PathBuf> = run.store.iter().cloned().collect();
    if let Some((pack, idx)) = &run.pack {
        let packs = objects.join("pack");
        let copy = |from: &Path, to: &str| {
            std::fs::copy(from, packs.join(to))
                .map_err(|e| ControlError::Internal(format!("cannot read {}: {e}", from.display())))
        };
        copy(pack, "pack-turn.pack")?;
        copy(idx, "pack-turn.idx")?;
    }
    for dir in std::iter::once(workdir).chain(bases.iter().map(PathBuf::as_path)) {
        if let Some(repo) = hangar_treehash::RepoLayout::discover(dir).objects_dir() {
            alternates.push(repo);
        }
    }
    let list: String = alternates
        .iter()
        .map(|p| format!("{}\n", p.display()))
        .collect();
    std::fs::write(objects.join("info/alternates"), list)
        .map_err(|e| ControlError::Internal(format!("scratch repository: {e}")))?;
    let numstat = run_git(
        &git_dir,
        &["diff", "--numstat", "-z", "--no-renames", a, b],
        true,
    )?;
    let patch = run_git(
        &git_dir,
        &["diff", "--no-renames", "--no-color", a, b],
        true,
    )?;
    Ok((parse_numstat(&numstat), patch))
}

/// `git diff --numstat -z`: `ADDED\tDELETED\tPATH\0` per file, `-` counts for binary files.
fn parse_numstat(out: &str) -> Vec<FileChange> {
    out.split('\0')
        .filter(|r| !r.is_empty())
        .filter_map(|r| {
            let mut f = r.splitn(3, '\t');
            let (added, deleted, path) = (f.next()?, f.next()?, f.next()?);
            Some(FileChange {
                path: path.to_owned(),
                added: added.parse().ok(),
                deleted: deleted.parse().ok(),
            })
        })
        .collect()
}

fn run_git(git_dir: &Path, args: &[&str], with_dir: bool) -> Result<String, ControlError> {
    let mut c = Command::new("git");
    // Only hangar's scratch repository: no system or user config, no hooks, no pager.
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PAGER", "cat");
    if with_dir {
        c.arg("--git-dir").arg(git_dir);
    }
    let out = c
        .args(args)
        .output()
        .map_err(|e| ControlError::Internal(format!("cannot run git (is it installed?): {e}")))?;
    if !out.status.success() {
        return Err(ControlError::Internal(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A scratch folder, removed when dropped.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new() -> Result<Scratch, ControlError> {
        let id = hangar_store::new_id("diff")
            .map_err(|e| ControlError::Internal(format!("scratch folder: {e}")))?;
        let dir = std::env::temp_dir().join(format!("hangar-{id}"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| ControlError::Internal(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numstat_reads_counts_binaries_and_odd_paths() {
        let got = parse_numstat(concat!(
            "3\t1\ta.txt\0",
            "-\t-\timg.png\0",
            "1\t0\twith\ttab\0"
        ));
        assert_eq!(
            got,
            vec![
                FileChange {
                    path: "a.txt".into(),
                    added: Some(3),
                    deleted: Some(1)
                },
                FileChange {
                    path: "img.png".into(),
                    added: None,
                    deleted: None
                },
                FileChange {
                    path: "with\ttab".into(),
                    added: Some(1),
                    deleted: Some(0)
                },
            ]
        );
    }
}
