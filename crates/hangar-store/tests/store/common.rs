//! The store suite's fixture: a fresh database of either backend per test (a temp folder for
//! SQLite; a random schema, dropped at the end, for PostgreSQL), raw SQL for tampering, and a
//! raw dump to search for secrets.

use std::path::PathBuf;

use hangar_store::{Harness, Policy};
use hangar_store::{NewEvent, NewRun, NewSandbox, Run, Secret, Session, Store, Turn, Vault};
use serde_json::json;
use sqlx::{Connection, Row};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

pub struct TestDb {
    pub kind: Kind,
    pub url: String,
    pub dir: tempfile::TempDir,
    schema: Option<(String, String)>,
}

fn pg_base_url() -> String {
    std::env::var("HANGAR_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "HANGAR_TEST_DATABASE_URL is not set: the PostgreSQL half of the store suite never \
             skips. Start the test database with `export \"$(scripts/start-postgres)\"` (from \
             the repository root, as root) and run the tests again."
        )
    })
}

impl TestDb {
    pub async fn new(kind: Kind) -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        match kind {
            Kind::Sqlite => TestDb {
                kind,
                url: format!("sqlite://{}/store.db", dir.path().display()),
                dir,
                schema: None,
            },
            Kind::Postgres => {
                let base = pg_base_url();
                let schema = hangar_store::new_id("t").unwrap().replace('-', "_");
                let mut admin = sqlx::PgConnection::connect(&base)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("cannot reach {base}: {e}; run scripts/start-postgres")
                    });
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                let sep = if base.contains('?') { '&' } else { '?' };
                TestDb {
                    kind,
                    url: format!("{base}{sep}options=-c%20search_path%3D{schema}"),
                    dir,
                    schema: Some((base, schema)),
                }
            }
        }
    }

    pub async fn open(&self) -> Store {
        Store::open(&self.url).await.unwrap()
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.path().join("home/master.key")
    }

    pub async fn open_with_vault(&self) -> Store {
        let vault = Vault::open_or_create(&self.key_path()).unwrap();
        self.open().await.with_vault(vault).await.unwrap()
    }

    /// Runs raw SQL on its own connection, bypassing the store.
    pub async fn exec(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self.kind {
            Kind::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
                c.close().await.unwrap();
            }
            Kind::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
                c.close().await.unwrap();
            }
        }
    }

    /// Everything the database holds, as bytes: the SQLite file and its WAL; on PostgreSQL
    /// every row of every table in the test's schema, as text (bytea shows as hex).
    pub async fn dump(&self) -> Vec<u8> {
        match self.kind {
            Kind::Sqlite => {
                let mut out = Vec::new();
                for name in ["store.db", "store.db-wal"] {
                    if let Ok(b) = std::fs::read(self.dir.path().join(name)) {
                        out.extend(b);
                    }
                }
                assert!(out.len() > 4096, "the SQLite file was read");
                out
            }
            Kind::Postgres => {
                let (_, schema) = self.schema.as_ref().unwrap();
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                let tables: Vec<String> = sqlx::query_scalar(
                    "SELECT table_name::text FROM information_schema.tables \
                     WHERE table_schema = $1",
                )
                .bind(schema)
                .fetch_all(&mut c)
                .await
                .unwrap();
                assert!(tables.len() >= 10, "{tables:?}");
                let mut out = Vec::new();
                for t in tables {
                    let sql = format!("SELECT t::text FROM {schema}.{t} t");
                    for row in sqlx::query(sqlx::AssertSqlSafe(sql))
                        .fetch_all(&mut c)
                        .await
                        .unwrap()
                    {
                        let text: String = row.get(0);
                        out.extend(text.into_bytes());
                        out.push(b'\n');
                    }
                }
                out
            }
        }
    }

    /// Drops the PostgreSQL schema (a failed test leaves its schema behind: harmless).
    pub async fn cleanup(self) {
        if let Some((base, schema)) = &self.schema {
            let mut c = sqlx::PgConnection::connect(base).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                .execute(&mut c)
                .await
                .unwrap();
        }
    }
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

pub fn secret(bytes: &[u8]) -> Secret {
    Secret::from(bytes)
}

/// Writes the suite's tests: `suite!(a, b)` makes `sqlite::a`, `postgres::a`, ... each
/// calling `a(Kind::...)` of the module it is used in.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(crate::common::Kind::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(crate::common::Kind::Postgres).await
                }
            )*
        }
    };
}

pub(crate) use suite;

pub async fn seed(store: &Store) -> (Session, Turn) {
    store
        .create_environment("default", &json!({"image": "local"}))
        .await
        .unwrap();
    store
        .create_sandbox(&NewSandbox {
            id: "sb-1".into(),
            environment: "default".into(),
            kind: "local".into(),
            workdir: "/work/repo".into(),
            person: "ada@example.com".into(),
            handle: None,
        })
        .await
        .unwrap();
    let session = store
        .create_session("ses-1", "sb-1", Harness::Claude, Policy::Ask)
        .await
        .unwrap();
    let turn = store
        .create_turn("turn-1", "ses-1", "fix it")
        .await
        .unwrap();
    (session, turn)
}

pub async fn seed_run(store: &Store, turn_id: &str, run_id: &str) -> Run {
    let key = secret(&[7u8; 32]);
    let run = NewRun {
        id: run_id.into(),
        turn_id: turn_id.into(),
        ctl_path: format!("/home/h/runs/{run_id}.ctl"),
        driver_pid: None,
        lease: None,
    };
    store.create_run(&run, &key).await.unwrap()
}

pub fn ev(kind: &str, n: i64) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        payload: json!({"n": n, "text": format!("line {n}")}),
    }
}
