//! How a run's log is read (`hangar_events::LogMode`), decided from where the run runs, never
//! from the log itself (the agent may have written it), and the key its seals are checked with.
//!
//! | where the run runs | sealed | trusted | why |
//! |---|---|---|---|
//! | a sandbox with the uid split | yes | yes | the agent cannot write the control folder |
//! | a local sandbox without it (`hangar run`'s in-place sandbox) | yes | yes | the run key is handed to the driver alone (its own `/dev/shm`), the driver is non-dumpable and deletes it: the agent can append to the log but cannot seal |
//! | another sandbox without it (docker, kubernetes, e2b) | yes | no | the key waits in the control folder the agent shares (a process it left behind can read it before the driver does; e2b runs everything as root) |
//! | a plain folder | yes | no | the agent is hangar's own user: it can read the vault and the key |
//! | a one-shot turn | no | no | the harness's stdout is the log, with no driver to seal it |
//!
//! A sealed log shows and acts on only what a valid seal covers; an untrusted one marks the
//! assistant's text `unverified` wherever it is shown. The seal key is derived from the run key
//! (`hangar_protocol::logseal::SealKey`); when the turn ends it is kept with the run's log
//! (`kept/<run>/seal.key`), so the log can still be checked after the run key is destroyed.

use std::path::{Path, PathBuf};

use hangar_events::{LogMode, LogReader};
use hangar_protocol::RunKey;
use hangar_protocol::logseal::SealKey;
use hangar_store::{Run, Store};

use crate::error::ControlError;
use crate::steps::Steps;

/// The file the seal key of an ended run is kept in, beside its kept log.
pub(crate) const SEAL_KEY_FILE: &str = "seal.key";

fn kept_seal_key(home: &Path, run_id: &str) -> PathBuf {
    crate::steps::trees::kept_dir(home, run_id).join(SEAL_KEY_FILE)
}

/// The seal key of a run: from the vault while the run has its key, else the one kept with its
/// log (under hangar's home `home`) when its turn ended.
pub async fn seal_key(store: &Store, home: &Path, run_id: &str) -> Option<SealKey> {
    if let Ok(key) = store.run_key(run_id).await
        && let Ok(bytes) = <[u8; 32]>::try_from(key.expose())
    {
        return Some(SealKey::derive(&RunKey::from_bytes(bytes)));
    }
    let text = tokio::fs::read_to_string(kept_seal_key(home, run_id))
        .await
        .ok()?;
    SealKey::from_file_text(&text).ok()
}

/// A reader for the log of `run` with its seal key (none to be had: a reader without one, which
/// refuses to read a sealed log).
pub async fn log_reader(store: &Store, home: &Path, run: &Run) -> LogReader {
    match seal_key(store, home, &run.id).await {
        Some(key) => LogReader::new().sealed(key, &run.id),
        None => LogReader::new(),
    }
}

/// Every event of the log of `run`, read as its watcher read it (the mode it stored, the run's
/// seal key): what its stored events must equal.
pub async fn rebuild(store: &Store, home: &Path, run: &Run) -> Vec<hangar_events::ProgressEvent> {
    crate::steps::trees::restore_kept(store, home, run).await;
    let reader = log_reader(store, home, run).await;
    let mode = Steps::stored_log_mode(run);
    let log = crate::steps::trees::run_log_path(home, run);
    tokio::task::spawn_blocking(move || hangar_events::rebuild_with(&log, &reader, mode))
        .await
        .unwrap_or_default()
}

impl Steps {
    /// The seal key of a run (see [`seal_key`]).
    pub(crate) async fn seal_key(&self, run_id: &str) -> Option<SealKey> {
        seal_key(&self.store, &self.tools.home, run_id).await
    }

    /// A reader for the log of `run` with its seal key (see [`log_reader`]).
    pub async fn log_reader(&self, run: &Run) -> LogReader {
        log_reader(&self.store, &self.tools.home, run).await
    }

    /// The mode the run's log has been read with (what its watcher stored), if it has started.
    pub fn stored_log_mode(run: &Run) -> Option<LogMode> {
        run.watch_state
            .as_ref()
            .and_then(|v| v.get("log"))
            .and_then(|m| serde_json::from_value(m.clone()).ok())
    }

    /// Keeps the run's seal key with its kept log, before the run key is destroyed.
    pub(crate) async fn keep_seal_key(&self, run_id: &str) -> Result<(), ControlError> {
        let Some(key) = self.seal_key(run_id).await else {
            return Ok(());
        };
        let path = kept_seal_key(&self.tools.home, run_id);
        // Other replicas read the log too (issue 24): the key goes into the database, sealed by
        // the vault, beside the other kept files.
        if self.store.backend() == hangar_store::Backend::Postgres {
            self.store
                .put_kept_secret(run_id, SEAL_KEY_FILE, key.to_file_text().as_bytes())
                .await?;
        }
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            use std::os::unix::fs::DirBuilderExt;
            if let Some(dir) = path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
            hangar_protocol::atomic::write_atomic(&path, key.to_file_text().as_bytes(), 0o600)
        })
        .await
        .map_err(|e| ControlError::Internal(e.to_string()))?
        .map_err(|e| ControlError::Internal(format!("cannot keep the run's seal key: {e}")))
    }

    /// Appends one of the control plane's own lines to a run's log before its driver starts,
    /// sealed with the run's key so the log's reader takes it (the driver's seals go on from it).
    pub(crate) async fn append_own_line(
        &self,
        log: &Path,
        run_id: &str,
        line: String,
    ) -> std::io::Result<()> {
        let key = self.seal_key(run_id).await;
        let (log, run) = (log.to_owned(), run_id.to_owned());
        tokio::task::spawn_blocking(move || match key {
            Some(k) => hangar_protocol::logseal::append_sealed(&log, &k, &run, line.as_bytes()),
            None => {
                use std::io::Write;
                hangar_protocol::logseal::open_for_append(&log)?.write_all(line.as_bytes())
            }
        })
        .await
        .map_err(std::io::Error::other)?
    }
}
