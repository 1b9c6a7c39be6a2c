//! Governance: what makes every tool call of a run answer to Tower (T1-T18).
//!
//! The [`Governance`] service owns the control plane's passport signing key (from the vault,
//! made once) and the passports it keeps fresh for live runs ([`passport`]): minted, exchanged
//! at Tower, checked and swapped into the run's key file (inside its sandbox too) before they
//! run out. It writes a run's Tower key file, and sets the API's credentials ([`credentials`]).
//! The hook's own settings and paths are [`crate::tower`]'s; installing it is the runs'.
//!
//! It uses the sandboxes (to write key files inside them); the runs use it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hangar_store::Store;

use crate::blocking::blocking;
use crate::error::ControlError;
use crate::launch::{self, Tools};
use crate::sandboxes::Sandboxes;

pub mod credentials;
pub mod jwt;
pub mod passport;

/// The governance service (see the module's page).
#[derive(Debug)]
pub struct Governance {
    pub(crate) store: Store,
    pub(crate) tools: Arc<Tools>,
    pub(crate) sandboxes: Arc<Sandboxes>,
    pub(crate) keys: passport::Keys,
}

impl Governance {
    pub(crate) fn new(store: Store, tools: Arc<Tools>, sandboxes: Arc<Sandboxes>) -> Governance {
        Governance {
            store,
            tools,
            sandboxes,
            keys: passport::Keys::default(),
        }
    }

    /// Writes the coding agent's key in Tower (the vault credential) as `<ctl>/tower.key`
    /// (0600); Tower's address and the file.
    pub(crate) async fn tower_key(&self, ctl: &Path) -> Result<(String, PathBuf), ControlError> {
        let (url, cred) = launch::governance(&self.tools)?;
        let key = self.store.credential(&cred).await.map_err(|e| {
            ControlError::Invalid(format!(
                "policy governed: the credential {cred:?} (HANGAR_GOVERNANCE_HOOK_CREDENTIAL) cannot be read: {e}"
            ))
        })?;
        let file = ctl.join(crate::governance::passport::KEY_FILE);
        let bytes = key.expose().to_vec();
        let path = file.clone();
        blocking(move || crate::governance::passport::write_key_file(&path, &bytes))
            .await?
            .map_err(|e| ControlError::Internal(format!("cannot write {}: {e}", file.display())))?;
        Ok((url, file))
    }
}
