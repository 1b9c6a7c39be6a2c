//! Sign-in flows in progress (`hangar serve --oidc-issuer`): what a flow must keep between its
//! start and its end (the PKCE verifier and nonce of a web sign-in, the device code of a device
//! sign-in), kept in the database so the end may come to any replica, or after a restart.
//!
//! The row's key is the SHA-256 of the flow id the client holds, and the value is sealed with
//! the vault key bound to that key and the flow's kind: the database alone neither names a
//! flow a client could finish nor reads its secrets. A flow is taken once ([`Store::take_sign_in_flow`]
//! deletes it in the same statement that reads it), so two finishes of one flow, on one
//! replica or two, get it at most once.

use sha2::{Digest, Sha256};

use crate::db::{in_tx, read_db, write_db};
use crate::error::StoreError;
use crate::vault::Secret;
use crate::{Store, now_ms};

/// The vault purpose of a flow's sealed state.
const SIGN_IN_FLOW: &str = "sign-in-flow";

/// Which flow a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowKind {
    /// The web page's authorization code flow with PKCE.
    Web,
    /// `hangar login`'s device flow.
    Device,
}

impl FlowKind {
    fn as_str(self) -> &'static str {
        match self {
            FlowKind::Web => "web",
            FlowKind::Device => "device",
        }
    }
}

fn key(flow: &str) -> String {
    hex::encode(Sha256::digest(flow.as_bytes()))
}

impl Store {
    /// Keeps a begun flow's state (sealed) until `expires_at` (ms); forgets expired flows.
    pub async fn put_sign_in_flow(
        &self,
        flow: &str,
        kind: FlowKind,
        state: &Secret,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        let id = key(flow);
        let sealed = self.vault()?.seal(
            SIGN_IN_FLOW,
            &format!("{}:{id}", kind.as_str()),
            state.expose(),
        )?;
        let now = now_ms();
        in_tx!(self, tx => {
            sqlx::query("DELETE FROM oidc_flows WHERE expires_at <= $1")
                .bind(now)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO oidc_flows (id, kind, sealed, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&id)
            .bind(kind.as_str())
            .bind(&sealed)
            .bind(now)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
        });
        Ok(())
    }

    /// Takes a flow out, opened: `None` when there is none of this kind (never begun, taken
    /// already, here or on another replica) or it expired. The row is gone either way.
    pub async fn take_sign_in_flow(
        &self,
        flow: &str,
        kind: FlowKind,
    ) -> Result<Option<Secret>, StoreError> {
        let id = key(flow);
        let row: Option<(Vec<u8>, i64)> = write_db!(self, pool => {
            sqlx::query_as(
                "DELETE FROM oidc_flows WHERE id = $1 AND kind = $2 RETURNING sealed, expires_at",
            )
            .bind(&id)
            .bind(kind.as_str())
            .fetch_optional(pool)
            .await?
        });
        self.open_flow(&id, kind, row)
    }

    /// A flow, opened, left in place (a device flow is polled many times, and taken once it
    /// is granted): `None` as for [`Store::take_sign_in_flow`].
    pub async fn sign_in_flow(
        &self,
        flow: &str,
        kind: FlowKind,
    ) -> Result<Option<Secret>, StoreError> {
        let id = key(flow);
        let sql = "SELECT sealed, expires_at FROM oidc_flows WHERE id = $1 AND kind = $2";
        let row: Option<(Vec<u8>, i64)> = read_db!(self, pool => {
            sqlx::query_as(sql).bind(&id).bind(kind.as_str()).fetch_optional(pool).await?
        });
        self.open_flow(&id, kind, row)
    }

    fn open_flow(
        &self,
        id: &str,
        kind: FlowKind,
        row: Option<(Vec<u8>, i64)>,
    ) -> Result<Option<Secret>, StoreError> {
        let Some((sealed, expires_at)) = row else {
            return Ok(None);
        };
        if expires_at <= now_ms() {
            return Ok(None);
        }
        let row = format!("{}:{id}", kind.as_str());
        Ok(Some(self.vault()?.unseal(SIGN_IN_FLOW, &row, &sealed)?))
    }
}
