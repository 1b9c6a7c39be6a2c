//! Relayed terminals (issue 24): each attach's owner, its envd PTY process, and the replica
//! that relays it under a lease, so that another replica can take it over when that one stops.
//! And the agent uids sandboxes hold, claimed here by replicas that share no home.

use crate::Store;
use crate::db::{read_db, write_db};
use crate::error::StoreError;

/// A relayed attach as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachRecord {
    pub id: String,
    /// The id of the API token that opened it.
    pub owner: String,
    pub person: String,
    pub sandbox: String,
    pub run: String,
    /// envd's pid of its PTY process.
    pub pid: i64,
    /// The replica that relays it.
    pub replica: String,
    pub lease_until: i64,
    pub opened_at: i64,
    pub ended_at: Option<i64>,
}

const COLS: &str =
    "id, owner, person, sandbox, run, pid, replica, lease_until, opened_at, ended_at";

impl Store {
    /// Records attach `a` (relayed by `a.replica` until `a.lease_until`).
    pub async fn record_attach(&self, a: &AttachRecord) -> Result<(), StoreError> {
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO attaches (id, owner, person, sandbox, run, pid, replica, lease_until, opened_at, ended_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(&a.id)
            .bind(&a.owner)
            .bind(&a.person)
            .bind(&a.sandbox)
            .bind(&a.run)
            .bind(a.pid)
            .bind(&a.replica)
            .bind(a.lease_until)
            .bind(a.opened_at)
            .bind(a.ended_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Attach `id` as recorded, if it is.
    pub async fn attach_record(&self, id: &str) -> Result<Option<AttachRecord>, StoreError> {
        let sql = format!("SELECT {COLS} FROM attaches WHERE id = $1");
        type Row = (
            String,
            String,
            String,
            String,
            String,
            i64,
            String,
            i64,
            i64,
            Option<i64>,
        );
        let row = read_db!(self, pool => {
            sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(
            |(id, owner, person, sandbox, run, pid, replica, lease_until, opened_at, ended_at)| {
                AttachRecord {
                    id,
                    owner,
                    person,
                    sandbox,
                    run,
                    pid,
                    replica,
                    lease_until,
                    opened_at,
                    ended_at,
                }
            },
        ))
    }

    /// The attaches not ended whose lease ran out before `before`: no replica relays them and
    /// their client has not asked for them since.
    pub async fn stale_attaches(&self, before: i64) -> Result<Vec<String>, StoreError> {
        let ids = read_db!(self, pool => {
            sqlx::query_scalar::<_, String>(
                "SELECT id FROM attaches WHERE ended_at IS NULL AND lease_until < $1 ORDER BY id",
            )
            .bind(before)
            .fetch_all(pool)
            .await?
        });
        Ok(ids)
    }

    /// Renews `replica`'s lease on live attach `id` until `until`; false if it is not the
    /// replica's (any more) or has ended.
    pub async fn renew_attach(
        &self,
        id: &str,
        replica: &str,
        until: i64,
    ) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query(
                "UPDATE attaches SET lease_until = $3 WHERE id = $1 AND replica = $2 AND ended_at IS NULL",
            )
            .bind(id)
            .bind(replica)
            .bind(until)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Takes live attach `id` over for `replica` (leased until `until`) if its lease ran out
    /// before `now`: exactly one of several replicas asking at once gets it.
    pub async fn take_attach_over(
        &self,
        id: &str,
        replica: &str,
        now: i64,
        until: i64,
    ) -> Result<bool, StoreError> {
        let n = write_db!(self, pool => {
            sqlx::query(
                "UPDATE attaches SET replica = $2, lease_until = $4 \
                 WHERE id = $1 AND ended_at IS NULL AND lease_until < $3",
            )
            .bind(id)
            .bind(replica)
            .bind(now)
            .bind(until)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Marks attach `id` ended at `now`, if `replica` holds it (a replica that lost it to
    /// another ends nothing of the other's).
    pub async fn end_attach_record(
        &self,
        id: &str,
        replica: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        write_db!(self, pool => {
            sqlx::query(
                "UPDATE attaches SET ended_at = $3 WHERE id = $1 AND replica = $2 AND ended_at IS NULL",
            )
            .bind(id)
            .bind(replica)
            .bind(now)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Forgets the attaches that ended before `before`; how many.
    pub async fn prune_attaches(&self, before: i64) -> Result<u64, StoreError> {
        Ok(write_db!(self, pool => {
            sqlx::query("DELETE FROM attaches WHERE ended_at IS NOT NULL AND ended_at < $1")
                .bind(before)
                .execute(pool)
                .await?
                .rows_affected()
        }))
    }

    /// The address replica `id` gave (`HANGAR_ADVERTISE_URL`), if it gave one.
    pub async fn replica_url(&self, id: &str) -> Result<Option<String>, StoreError> {
        let url = read_db!(self, pool => {
            sqlx::query_scalar::<_, String>("SELECT url FROM replicas WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(url)
    }
}

impl Store {
    /// Claims the lowest free agent uid in `first..=last` for sandbox `sandbox`, none of
    /// `also_taken` (held without a row here: sandboxes made before uids were claimed here);
    /// `None` when every one is taken. Two claims at once never get the same uid (the uid is the key: the
    /// one that loses tries the next).
    pub async fn claim_agent_uid(
        &self,
        sandbox: &str,
        (first, last): (u32, u32),
        also_taken: &std::collections::HashSet<u32>,
    ) -> Result<Option<u32>, StoreError> {
        for _ in 0..64 {
            let taken: Vec<i64> = read_db!(self, pool => {
                sqlx::query_scalar("SELECT uid FROM agent_uids WHERE uid >= $1 AND uid <= $2 ORDER BY uid")
                    .bind(i64::from(first))
                    .bind(i64::from(last))
                    .fetch_all(pool)
                    .await?
            });
            let taken: std::collections::HashSet<i64> = taken.into_iter().collect();
            let Some(uid) =
                (first..=last).find(|u| !taken.contains(&i64::from(*u)) && !also_taken.contains(u))
            else {
                return Ok(None);
            };
            let n = write_db!(self, pool => {
                sqlx::query(
                    "INSERT INTO agent_uids (uid, sandbox, claimed_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (uid) DO NOTHING",
                )
                .bind(i64::from(uid))
                .bind(sandbox)
                .bind(crate::now_ms())
                .execute(pool)
                .await?
                .rows_affected()
            });
            if n == 1 {
                return Ok(Some(uid));
            }
        }
        Err(StoreError::Invalid(
            "could not claim an agent uid: others kept taking the free ones first".into(),
        ))
    }

    /// Gives back the agent uid sandbox `sandbox` holds, if it holds one.
    pub async fn release_agent_uid(&self, sandbox: &str) -> Result<(), StoreError> {
        write_db!(self, pool => {
            sqlx::query("DELETE FROM agent_uids WHERE sandbox = $1")
                .bind(sandbox)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}
