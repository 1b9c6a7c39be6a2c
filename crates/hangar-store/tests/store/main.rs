//! The store suite: every test is written once and runs on SQLite and on PostgreSQL
//! (`MODULE::sqlite::NAME` and `MODULE::postgres::NAME`), each on a fresh database. The
//! PostgreSQL half needs HANGAR_TEST_DATABASE_URL (`export "$(scripts/start-postgres)"`) and
//! fails, never skips, without it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

mod attaches;
mod audit;
mod entities;
mod events;
mod forks;
mod harness_checks;
mod kept;
mod schema;
mod secrets;
mod tokens;
