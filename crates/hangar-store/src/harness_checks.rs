//! The conformance suite's results per harness CLI version (`hangar-conformance --record`): the
//! capability flags that held and whether the suite passed. The control plane reads them before a
//! turn starts (a version whose suite has not passed is refused unless the turn overrides it).
//!
//! Non-goals: running the suite (hangar-conformance), the meaning of the flags (the control
//! plane's); one row per (harness, version), the newest run replacing the one before.

use serde_json::Value;
use sqlx::types::Json;

use crate::db::{Cols, read_db, write_db};
use crate::error::StoreError;
use crate::{Harness, Store, now_ms};

/// One version's result.
#[derive(Debug, Clone, PartialEq)]
pub struct HarnessCheck {
    pub harness: Harness,
    /// The CLI's version, as its npm package gives it.
    pub version: String,
    /// The suite's own version: a result of an older suite is not a pass for a newer one.
    pub suite: i64,
    pub passed: bool,
    /// Capability name -> what the suite found (JSON object).
    pub capabilities: Value,
    /// Who recorded it.
    pub person: String,
    pub ran_at: i64,
}

fn check_from(r: &impl Cols) -> Result<HarnessCheck, StoreError> {
    let harness = r.text("harness")?;
    Ok(HarnessCheck {
        harness: harness.parse()?,
        version: r.text("version")?,
        suite: r.int("suite")?,
        passed: r.int("passed")? == 1,
        capabilities: r.json("capabilities")?,
        person: r.text("person")?,
        ran_at: r.int("ran_at")?,
    })
}

impl Store {
    /// Records a version's result, replacing an earlier one of the same version.
    pub async fn record_harness_check(
        &self,
        harness: Harness,
        version: &str,
        suite: i64,
        passed: bool,
        capabilities: &Value,
        person: &str,
    ) -> Result<HarnessCheck, StoreError> {
        write_db!(self, pool => {
            sqlx::query(
                "INSERT INTO harness_checks (harness, version, suite, passed, capabilities, person, ran_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (harness, version) DO UPDATE SET suite = excluded.suite, \
                 passed = excluded.passed, capabilities = excluded.capabilities, \
                 person = excluded.person, ran_at = excluded.ran_at",
            )
            .bind(harness.as_str())
            .bind(version)
            .bind(suite)
            .bind(i64::from(passed))
            .bind(Json(capabilities))
            .bind(crate::people::normal_email(person))
            .bind(now_ms())
            .execute(pool)
            .await?;
        });
        self.harness_check(harness, version)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: "harness check",
                key: format!("{} {version}", harness.as_str()),
            })
    }

    /// A version's recorded result, if the suite was run for it here.
    pub async fn harness_check(
        &self,
        harness: Harness,
        version: &str,
    ) -> Result<Option<HarnessCheck>, StoreError> {
        let sql = "SELECT * FROM harness_checks WHERE harness = $1 AND version = $2";
        read_db!(self, pool => {
            let row = sqlx::query(sql)
                .bind(harness.as_str())
                .bind(version)
                .fetch_optional(pool)
                .await?;
            row.as_ref().map(check_from).transpose()
        })
    }

    /// Every recorded result, by harness then version.
    pub async fn harness_checks(&self) -> Result<Vec<HarnessCheck>, StoreError> {
        let sql = "SELECT * FROM harness_checks ORDER BY harness, version";
        read_db!(self, pool => {
            let rows = sqlx::query(sql).fetch_all(pool).await?;
            rows.iter().map(check_from).collect()
        })
    }
}
