//! Files an ended run leaves (its tree pack and index, its run log, the log's seal key), kept in
//! the database in chunks of [`CHUNK`] bytes (issue 24: a replica's `$HANGAR_HOME/kept/` is a
//! cache of these, refilled from here when it lost them). A file is replaced whole, in one
//! transaction: a reader sees the old chunks or the new ones, never a mix. Names are the caller's;
//! this module does not interpret them.
//!
//! Files are kept by their owner's id (the `run_id` column): a run's, or a session's (the
//! harness's conversations kept at its turns' ends) or a sandbox's (its repository, kept when it
//! was removed). Ids carry their kind's prefix (`run-`, `ses-`, `sb-`), so owners never collide.

use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Store;
use crate::db::{in_tx, read_db, write_db};
use crate::error::StoreError;

/// The size of one stored chunk.
pub const CHUNK: usize = 1 << 20;

fn io(what: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::Invalid(format!("{}: {e}", what.display()))
}

impl Store {
    /// Stores file `path` as run `run_id`'s `name`, replacing what was kept under that name.
    pub async fn put_kept_file(
        &self,
        run_id: &str,
        name: &str,
        path: &Path,
    ) -> Result<(), StoreError> {
        let mut f = tokio::fs::File::open(path).await.map_err(io(path))?;
        in_tx!(self, tx => {
            sqlx::query("DELETE FROM kept_files WHERE run_id = $1 AND name = $2")
                .bind(run_id)
                .bind(name)
                .execute(&mut *tx)
                .await?;
            let mut seq: i64 = 0;
            loop {
                let mut buf = vec![0u8; CHUNK];
                let mut n = 0;
                while n < CHUNK {
                    let got = f.read(&mut buf[n..]).await.map_err(io(path))?;
                    if got == 0 {
                        break;
                    }
                    n += got;
                }
                if n == 0 && seq > 0 {
                    break;
                }
                buf.truncate(n);
                sqlx::query("INSERT INTO kept_files (run_id, name, seq, bytes) VALUES ($1, $2, $3, $4)")
                    .bind(run_id)
                    .bind(name)
                    .bind(seq)
                    .bind(buf)
                    .execute(&mut *tx)
                    .await?;
                seq += 1;
                if n < CHUNK {
                    break;
                }
            }
        });
        Ok(())
    }

    /// Removes everything kept for `owner`; how many chunks went.
    pub async fn forget_kept(&self, owner: &str) -> Result<u64, StoreError> {
        Ok(write_db!(self, pool => {
            sqlx::query("DELETE FROM kept_files WHERE run_id = $1")
                .bind(owner)
                .execute(pool)
                .await?
                .rows_affected()
        }))
    }

    /// The names kept for `owner`, each with its size in bytes.
    pub async fn kept_file_sizes(&self, owner: &str) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = read_db!(self, pool => {
            sqlx::query_as::<_, (String, i64)>(
                "SELECT name, CAST(SUM(LENGTH(bytes)) AS BIGINT) FROM kept_files \
                 WHERE run_id = $1 GROUP BY name ORDER BY name",
            )
            .bind(owner)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// The names kept for run `run_id`.
    pub async fn kept_file_names(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        let names = read_db!(self, pool => {
            sqlx::query_scalar::<_, String>(
                "SELECT DISTINCT name FROM kept_files WHERE run_id = $1 ORDER BY name",
            )
            .bind(run_id)
            .fetch_all(pool)
            .await?
        });
        Ok(names)
    }

    /// Writes run `run_id`'s kept `name` to `dest` (mode 0600, under a temporary name of its own
    /// renamed when whole, so concurrent readers never see or write half of one); false if
    /// nothing is kept under that name.
    pub async fn get_kept_file(
        &self,
        run_id: &str,
        name: &str,
        dest: &Path,
    ) -> Result<bool, StoreError> {
        let count: i64 = read_db!(self, pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM kept_files WHERE run_id = $1 AND name = $2")
                .bind(run_id)
                .bind(name)
                .fetch_one(pool)
                .await?
        });
        if count == 0 {
            return Ok(false);
        }
        // A name of its own: two readers may bring the same file back at once.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dest.with_file_name(format!(
            ".{}.{}-{n}.part",
            dest.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .await
            .map_err(io(&tmp))?;
        let written = async {
            // A chunk at a time: a run log can be hundreds of megabytes.
            for seq in 0..count {
                let bytes: Vec<u8> = read_db!(self, pool => {
                    sqlx::query_scalar(
                        "SELECT bytes FROM kept_files WHERE run_id = $1 AND name = $2 AND seq = $3",
                    )
                    .bind(run_id)
                    .bind(name)
                    .bind(seq)
                    .fetch_one(pool)
                    .await?
                });
                f.write_all(&bytes).await.map_err(io(&tmp))?;
            }
            f.sync_all().await.map_err(io(&tmp))?;
            tokio::fs::rename(&tmp, dest).await.map_err(io(dest))
        }
        .await;
        if written.is_err() {
            // Nothing half-written is left behind.
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        written.map(|()| true)
    }
}

/// The vault's purpose for a kept file that is a secret (a run log's seal key).
const KEPT_SECRET: &str = "kept_file";

impl Store {
    /// Stores `bytes`, sealed by the vault (bound to the run and the name), as run `run_id`'s
    /// kept `name`: for a kept file that is a secret (a run log's seal key).
    pub async fn put_kept_secret(
        &self,
        run_id: &str,
        name: &str,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let sealed = self
            .vault()?
            .seal(KEPT_SECRET, &format!("{run_id}/{name}"), bytes)?;
        in_tx!(self, tx => {
            sqlx::query("DELETE FROM kept_files WHERE run_id = $1 AND name = $2")
                .bind(run_id)
                .bind(name)
                .execute(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO kept_files (run_id, name, seq, bytes) VALUES ($1, $2, 0, $3)")
                .bind(run_id)
                .bind(name)
                .bind(sealed)
                .execute(&mut *tx)
                .await?;
        });
        Ok(())
    }

    /// Run `run_id`'s kept secret `name` ([`Store::put_kept_secret`]), opened.
    pub async fn kept_secret(
        &self,
        run_id: &str,
        name: &str,
    ) -> Result<Option<crate::Secret>, StoreError> {
        let sealed: Option<Vec<u8>> = read_db!(self, pool => {
            sqlx::query_scalar(
                "SELECT bytes FROM kept_files WHERE run_id = $1 AND name = $2 AND seq = 0",
            )
            .bind(run_id)
            .bind(name)
            .fetch_optional(pool)
            .await?
        });
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        Ok(Some(self.vault()?.unseal(
            KEPT_SECRET,
            &format!("{run_id}/{name}"),
            &sealed,
        )?))
    }
}
