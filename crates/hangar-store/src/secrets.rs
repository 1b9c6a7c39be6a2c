//! The store's secrets, always through the vault: the key check at startup, run keys and
//! credentials. Only sealed bytes reach the database (see [`crate::vault`] for the format and
//! the associated data that binds each value to its row).
//!
//! Non-goals: auditing (the caller appends `credential.set`, `run-key.destroyed`, ... to the
//! audit log), key rotation.

use std::sync::Arc;

use crate::db::{read_db, write_db};
use crate::error::StoreError;
use crate::vault::{Secret, Vault, VaultError};
use crate::{Store, now_ms};

/// What the key-check value seals.
const KEY_CHECK: &[u8] = b"hangar vault key check v1";
pub(crate) const RUN_KEY: &str = "run-key";
const CREDENTIAL: &str = "credential";
/// The vault purpose of an owned secret; its row is `KIND:OWNER:NAME`, so a sealed value
/// copied to another person's or environment's row does not open.
const OWNED_SECRET: &str = "secret";

/// Who a secret belongs to (issue 20): the server (hangar's own and the admins' shared
/// credentials, the `credentials` table), a person or an environment (`owned_secrets`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SecretOwner {
    /// The server's own: only admins write them; never handed to a turn.
    Server,
    /// A person, by email: handed to that person's turns.
    Person(String),
    /// An environment, by name: handed to the turns in its sandboxes.
    Environment(String),
}

impl SecretOwner {
    /// `server`, `person` or `environment`.
    pub fn kind(&self) -> &'static str {
        match self {
            SecretOwner::Server => "server",
            SecretOwner::Person(_) => "person",
            SecretOwner::Environment(_) => "environment",
        }
    }

    /// The person's email or the environment's name; empty for the server.
    pub fn id(&self) -> &str {
        match self {
            SecretOwner::Server => "",
            SecretOwner::Person(p) | SecretOwner::Environment(p) => p,
        }
    }

    /// The id as stored: a person's email lower-cased (emails compare without case).
    fn stored_id(&self) -> String {
        match self {
            SecretOwner::Person(p) => crate::people::normal_email(p),
            other => other.id().to_owned(),
        }
    }
}

/// A credential name: 1 to 128 of `[A-Za-z0-9_.-]`.
fn check_credential_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "credential name {name:?}: use 1 to 128 letters, digits, '_', '.' or '-'"
        )))
    }
}

impl Store {
    /// Attaches the vault, after checking that its master key is the one this database's
    /// secrets are sealed with ([`VaultError::WrongMasterKey`] otherwise). The first vault
    /// attached to a database sets the key check.
    pub async fn with_vault(mut self, vault: Vault) -> Result<Store, StoreError> {
        let sql = "SELECT sealed FROM vault_check WHERE id = 1";
        let mut stored: Option<Vec<u8>> = read_db!(self, pool => {
            sqlx::query_scalar(sql).fetch_optional(pool).await?
        });
        if stored.is_none() {
            let sealed = vault.seal("key-check", "vault", KEY_CHECK)?;
            write_db!(self, pool => {
                sqlx::query(
                    "INSERT INTO vault_check (id, sealed, created_at) VALUES (1, $1, $2) \
                     ON CONFLICT (id) DO NOTHING",
                )
                .bind(&sealed)
                .bind(now_ms())
                .execute(pool)
                .await?;
            });
            // Another process may have set it first: check against what is stored.
            stored = read_db!(self, pool => sqlx::query_scalar(sql).fetch_optional(pool).await?);
        }
        let opened = stored.map(|s| vault.unseal("key-check", "vault", &s));
        match opened {
            Some(Ok(pt)) if pt.expose() == KEY_CHECK => {}
            _ => {
                return Err(VaultError::WrongMasterKey {
                    key_file: vault.key_file().to_owned(),
                }
                .into());
            }
        }
        self.vault = Some(Arc::new(vault));
        Ok(self)
    }

    pub(crate) fn vault(&self) -> Result<&Vault, StoreError> {
        self.vault.as_deref().ok_or(StoreError::NoVault)
    }

    /// Seals and stores a run's key (replacing any).
    pub async fn put_run_key(&self, run_id: &str, key: &Secret) -> Result<(), StoreError> {
        let sealed = self.vault()?.seal(RUN_KEY, run_id, key.expose())?;
        let n = write_db!(self, pool => {
            sqlx::query("UPDATE runs SET run_key = $2 WHERE id = $1")
                .bind(run_id)
                .bind(&sealed)
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 0 {
            return Err(StoreError::NotFound {
                what: "run",
                key: run_id.to_owned(),
            });
        }
        Ok(())
    }

    /// A run's key, opened. [`StoreError::NotFound`] if the run has none (destroyed).
    pub async fn run_key(&self, run_id: &str) -> Result<Secret, StoreError> {
        let vault = self.vault()?;
        let sql = "SELECT run_key FROM runs WHERE id = $1";
        let sealed: Option<Option<Vec<u8>>> = read_db!(self, pool => {
            sqlx::query_scalar(sql).bind(run_id).fetch_optional(pool).await?
        });
        match sealed {
            None => Err(StoreError::NotFound {
                what: "run",
                key: run_id.to_owned(),
            }),
            Some(None) => Err(StoreError::NotFound {
                what: "run key (destroyed) of run",
                key: run_id.to_owned(),
            }),
            Some(Some(s)) => Ok(vault.unseal(RUN_KEY, run_id, &s)?),
        }
    }

    /// Forgets a run's key; true if it had one.
    pub async fn destroy_run_key(&self, run_id: &str) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query("UPDATE runs SET run_key = NULL WHERE id = $1 AND run_key IS NOT NULL")
                .bind(run_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Seals and stores a credential, replacing one of the same name.
    pub async fn set_credential(&self, name: &str, value: &Secret) -> Result<(), StoreError> {
        check_credential_name(name)?;
        let sealed = self.vault()?.seal(CREDENTIAL, name, value.expose())?;
        let now = now_ms();
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO credentials (name, sealed, created_at, updated_at) \
                 VALUES ($1, $2, $3, $3) ON CONFLICT (name) DO UPDATE \
                 SET sealed = excluded.sealed, updated_at = excluded.updated_at",
            )
            .bind(name)
            .bind(&sealed)
            .bind(now)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// A credential, opened.
    pub async fn credential(&self, name: &str) -> Result<Secret, StoreError> {
        let vault = self.vault()?;
        let sql = "SELECT sealed FROM credentials WHERE name = $1";
        let sealed: Option<Vec<u8>> = read_db!(self, pool => {
            sqlx::query_scalar(sql).bind(name).fetch_optional(pool).await?
        });
        let sealed = sealed.ok_or_else(|| StoreError::NotFound {
            what: "credential",
            key: name.to_owned(),
        })?;
        Ok(vault.unseal(CREDENTIAL, name, &sealed)?)
    }

    /// The credentials' names, sorted (never their values).
    pub async fn credential_names(&self) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT name FROM credentials ORDER BY name";
        Ok(read_db!(self, pool => sqlx::query_scalar(sql).fetch_all(pool).await?))
    }

    /// Seals and stores a secret of `owner` (the server's: [`Store::set_credential`]),
    /// replacing one of the same name.
    pub async fn set_secret(
        &self,
        owner: &SecretOwner,
        name: &str,
        value: &Secret,
    ) -> Result<(), StoreError> {
        check_credential_name(name)?;
        if *owner == SecretOwner::Server {
            return self.set_credential(name, value).await;
        }
        let (kind, id) = (owner.kind(), owner.stored_id());
        let row = format!("{kind}:{id}:{name}");
        let sealed = self.vault()?.seal(OWNED_SECRET, &row, value.expose())?;
        let now = now_ms();
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO owned_secrets (owner_kind, owner, name, sealed, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (owner_kind, owner, name) DO UPDATE \
                 SET sealed = excluded.sealed, updated_at = excluded.updated_at, \
                 sealed_owner = NULL",
            )
            .bind(kind)
            .bind(&id)
            .bind(name)
            .bind(&sealed)
            .bind(now)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Every secret of `owner`, opened, sorted by name: what a turn of that person or
    /// environment is handed. The server's are never listed here (empty).
    pub async fn secrets_of(
        &self,
        owner: &SecretOwner,
    ) -> Result<Vec<(String, Secret)>, StoreError> {
        if *owner == SecretOwner::Server {
            return Ok(Vec::new());
        }
        let vault = self.vault()?;
        let (kind, id) = (owner.kind(), owner.stored_id());
        // A secret sealed before emails were lower-cased opens with the owner as written then.
        let sql = "SELECT name, sealed, sealed_owner FROM owned_secrets \
                   WHERE owner_kind = $1 AND owner = $2 ORDER BY name";
        let rows: Vec<(String, Vec<u8>, Option<String>)> = read_db!(self, pool => {
            sqlx::query_as(sql).bind(kind).bind(&id).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|(name, sealed, sealed_owner)| {
                let as_sealed = sealed_owner.as_deref().unwrap_or(&id);
                let row = format!("{kind}:{as_sealed}:{name}");
                Ok((name, vault.unseal(OWNED_SECRET, &row, &sealed)?))
            })
            .collect()
    }

    /// The names of `owner`'s secrets, sorted (never their values).
    pub async fn secret_names(&self, owner: &SecretOwner) -> Result<Vec<String>, StoreError> {
        if *owner == SecretOwner::Server {
            return self.credential_names().await;
        }
        let sql = "SELECT name FROM owned_secrets WHERE owner_kind = $1 AND owner = $2 \
                   ORDER BY name";
        Ok(read_db!(self, pool => {
            sqlx::query_scalar(sql)
                .bind(owner.kind())
                .bind(owner.stored_id())
                .fetch_all(pool)
                .await?
        }))
    }

    /// Removes a secret of `owner`; true if it existed.
    pub async fn remove_secret(&self, owner: &SecretOwner, name: &str) -> Result<bool, StoreError> {
        if *owner == SecretOwner::Server {
            return self.remove_credential(name).await;
        }
        let n = write_db!(self, pool => {
            sqlx::query(
                "DELETE FROM owned_secrets WHERE owner_kind = $1 AND owner = $2 AND name = $3",
            )
            .bind(owner.kind())
            .bind(owner.stored_id())
            .bind(name)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// Removes a credential; true if it existed.
    pub async fn remove_credential(&self, name: &str) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query("DELETE FROM credentials WHERE name = $1")
                .bind(name)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }
}
