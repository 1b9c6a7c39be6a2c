//! Retention: what hangar keeps of a run that ended long ago. Runs whose turn ended more than a
//! configurable age ago lose their bulk: the run log and tree pack kept under
//! `$HANGAR_HOME/kept/RUN`, a control folder still under hangar's home, and their events; the
//! kept conversations of a session all of whose runs are that old go too. What was done and by
//! whom stays: the run's row (marked `pruned_at`), its turn, commands, approvals, and the audit
//! log, whose hash chain is never touched (a prune appends its own record). A live run is never
//! pruned, whatever its age, and nothing outside hangar's home is removed.
//!
//! `hangar prune --older-than AGE` runs it once; `hangar serve` with `retention_days`
//! (`HANGAR_RETENTION_DAYS`) runs it once a day.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hangar_store::Store;
use serde_json::json;

use crate::error::ControlError;

/// What a prune removed (or, dry, would remove).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub runs: usize,
    pub events: u64,
    pub conversations: usize,
    /// Bytes of files removed.
    pub bytes: u64,
}

/// Prunes what ended more than `older_than` ago; with `dry_run`, only counts it (events not
/// counted). `actor` names who asked, in the audit record.
pub async fn prune(
    store: &Store,
    home: &Path,
    older_than: Duration,
    dry_run: bool,
    actor: &str,
) -> Result<Pruned, ControlError> {
    let age_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    let cutoff = hangar_store::now_ms().saturating_sub(age_ms);
    let mut out = Pruned::default();
    for run in store.prunable_runs(cutoff).await? {
        let mut dirs = vec![crate::steps::trees::kept_dir(home, &run.run_id)];
        dirs.extend(inside(home, Path::new(&run.ctl_path)));
        out.bytes += dirs.iter().map(|d| size_of(d)).sum::<u64>();
        out.runs += 1;
        if dry_run {
            continue;
        }
        // Marked first: a reader that finds the files gone finds the run marked.
        out.events += store.prune_run(&run.run_id).await?;
        for d in dirs {
            remove(&d);
        }
    }
    for session in store.sessions_quiet_since(cutoff).await? {
        let kept = crate::sandboxes::keep::kept_conversations(home, &session);
        let dir = kept.parent().map(Path::to_path_buf).unwrap_or(kept);
        if !dir.exists() {
            continue;
        }
        out.bytes += size_of(&dir);
        out.conversations += 1;
        if !dry_run {
            remove(&dir);
        }
    }
    if !dry_run && (out.runs > 0 || out.conversations > 0) {
        store
            .audit()
            .append(
                actor,
                "retention.pruned",
                &json!({"older_than_secs": older_than.as_secs(), "runs": out.runs, "events": out.events, "conversations": out.conversations, "bytes": out.bytes}),
            )
            .await?;
    }
    Ok(out)
}

/// `path` when it is a folder strictly inside hangar's home (a control folder elsewhere, e.g.
/// a sandbox's, is its provider's to remove).
fn inside(home: &Path, path: &Path) -> Option<PathBuf> {
    let home = home.canonicalize().ok()?;
    let p = path.canonicalize().ok()?;
    (p != home && p.starts_with(&home) && p.is_dir()).then_some(p)
}

fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "retention: cannot remove");
    }
}

/// The bytes of the files under `dir` (links not followed).
fn size_of(dir: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| size_of(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}
