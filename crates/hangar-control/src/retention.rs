//! Retention: what hangar keeps of a run that ended long ago. Runs whose turn ended more than a
//! configurable age ago lose their bulk: the run log and tree pack kept under
//! `$HANGAR_HOME/kept/RUN`, a control folder still under hangar's home, and their events; the
//! kept conversations of a session all of whose runs are that old go too. What was done and by
//! whom stays: the run's row (marked `pruned_at`), its turn, commands, approvals, and the audit
//! log, whose hash chain is never touched (a prune appends its own record). A live run is never
//! pruned, whatever its age, and nothing outside hangar's home is removed: what goes is named by
//! the run's id under the home, and a link is removed, never followed.
//!
//! `hangar prune --older-than AGE` runs it once; `hangar serve` with `retention_days`
//! (`HANGAR_RETENTION_DAYS`) runs it once a day.

use std::path::Path;
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
        // By the run's id under the home, never by a path read from the database or resolved
        // through a link: a sandbox's control folder is the agent's to write, and a link it
        // planted there must not point the removal anywhere else.
        let dirs = vec![
            crate::steps::trees::kept_dir(home, &run.run_id),
            hangar_mailbox::ctl::ControlDir::for_run(home, &run.run_id)
                .root()
                .to_path_buf(),
        ];
        let (sized, dirs) =
            blocking(move || (dirs.iter().map(|d| size_of(d)).sum::<u64>(), dirs)).await;
        out.bytes += sized;
        out.runs += 1;
        if dry_run {
            continue;
        }
        // Marked first: a reader that finds the files gone finds the run marked.
        out.events += store.prune_run(&run.run_id).await?;
        blocking(move || dirs.iter().for_each(|d| remove(d))).await;
    }
    for session in store.sessions_quiet_since(cutoff).await? {
        let kept = crate::sandboxes::keep::kept_conversations(home, &session);
        let dir = kept.parent().map(Path::to_path_buf).unwrap_or(kept);
        // What another replica kept is in the database (PostgreSQL), perhaps not in this home.
        let stored = store.kept_file_sizes(&session).await?;
        if !dir.exists() && stored.is_empty() {
            continue;
        }
        let (sized, dir) = blocking(move || (size_of(&dir), dir)).await;
        let stored_bytes: i64 = stored.iter().map(|(_, n)| n).sum();
        out.bytes += sized.max(u64::try_from(stored_bytes).unwrap_or(0));
        out.conversations += 1;
        if !dry_run {
            store.forget_kept(&session).await?;
            blocking(move || remove(&dir)).await;
        }
    }
    if !dry_run {
        // The records of relayed terminals that ended that long ago.
        store.prune_attaches(cutoff).await?;
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

/// Runs file work off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Removes `path`: a link is removed itself, never followed (a sandbox run's control folder
/// under `runs/` is a link into the sandbox's folder, which the sandbox's removal takes);
/// a folder with everything in it (`remove_dir_all` follows no link inside).
fn remove(path: &Path) {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    if let Err(e) = removed
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "retention: cannot remove");
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
