//! Short ids (issue 21): any unique prefix of a run, session, turn or sandbox id names it, the
//! way `docker` and `gh` take one, and the shortest unique prefix of an id for hints.
//!
//! hangar's ids are `KIND-` and 24 hex digits ([`crate::new_id`]); a prefix is given with or
//! without its `KIND-` (`run-3fa9`, `3fa9`). Only lowercase letters, digits and `-` are looked
//! up, so a prefix never carries a `LIKE` wildcard. Approval request ids are the harness's own
//! and are matched within their run ([`Store::approval_by_prefix`]).

use crate::db::{Store, read_db};
use crate::error::StoreError;

/// Permission requests this process recorded, by (run, request id): an answer names its request
/// whole nearly always, and the answer route's check for a prefix then needs no read (under
/// `scripts/load` that read, behind the pool's other readers, was the largest part of an
/// answer's p99). Only "this whole id exists" is taken from here; anything else is read.
/// Forgotten all at once past [`KNOWN_REQUESTS_MAX`].
#[derive(Debug, Default)]
pub(crate) struct KnownRequests(std::collections::HashSet<(String, String)>);

/// Permission requests kept at most in [`KnownRequests`].
const KNOWN_REQUESTS_MAX: usize = 100_000;

/// What an id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    Run,
    Session,
    Turn,
    Sandbox,
}

impl IdKind {
    /// Every kind, in the order a bare prefix is tried.
    pub const ALL: [IdKind; 4] = [IdKind::Run, IdKind::Session, IdKind::Turn, IdKind::Sandbox];

    /// The `KIND-` its ids start with.
    pub fn prefix(self) -> &'static str {
        match self {
            IdKind::Run => "run-",
            IdKind::Session => "ses-",
            IdKind::Turn => "turn-",
            IdKind::Sandbox => "sb-",
        }
    }

    /// The word for it (`run`, `session`, ...).
    pub fn word(self) -> &'static str {
        match self {
            IdKind::Run => "run",
            IdKind::Session => "session",
            IdKind::Turn => "turn",
            IdKind::Sandbox => "sandbox",
        }
    }

    fn table(self) -> &'static str {
        match self {
            IdKind::Run => "runs",
            IdKind::Session => "sessions",
            IdKind::Turn => "turns",
            IdKind::Sandbox => "sandboxes",
        }
    }

    /// Whether `id` has the whole shape of this kind's ids (nothing to look up).
    pub fn is_whole(self, id: &str) -> bool {
        id.strip_prefix(self.prefix())
            .is_some_and(|hex| hex.len() == 24 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
    }
}

/// Hex digits after `KIND-` a hint shows at the least: short enough to type, long enough to
/// stay unique as a team's ids grow (git shows seven).
pub const MIN_SHORT_HEX: usize = 6;

/// What a prefix names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Nothing.
    None,
    /// One id.
    One(String),
    /// More than one (the count looked at stops at two).
    Many,
}

/// Only `[a-z0-9-]`, lower-cased; `None` for anything else (looked up as given by no one).
fn clean(prefix: &str) -> Option<String> {
    let p = prefix.to_ascii_lowercase();
    (!p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')).then_some(p)
}

impl Store {
    /// The ids of `kind` that start with `prefix` (given with or without `KIND-`).
    pub async fn resolve_prefix(&self, kind: IdKind, prefix: &str) -> Result<Resolved, StoreError> {
        let Some(p) = clean(prefix) else {
            return Ok(Resolved::None);
        };
        let p = if p.starts_with(kind.prefix()) {
            p
        } else {
            format!("{}{p}", kind.prefix())
        };
        let ids = self.ids_like(kind, &p, 2).await?;
        Ok(match ids.as_slice() {
            [] => Resolved::None,
            [one] => Resolved::One(one.clone()),
            _ => Resolved::Many,
        })
    }

    /// The shortest prefix of `id` (at least `KIND-` and [`MIN_SHORT_HEX`] digits) no other id
    /// of its kind starts with; `id` itself when it is not of `kind`'s shape.
    pub async fn short_id(&self, kind: IdKind, id: &str) -> Result<String, StoreError> {
        if !kind.is_whole(id) {
            return Ok(id.to_owned());
        }
        let least = kind.prefix().len() + MIN_SHORT_HEX;
        let others = self.ids_like(kind, &id[..least], 64).await?;
        Ok(
            hangar_protocol::short_id::shortest_unique(
                id,
                others.iter().map(String::as_str),
                least,
            )
            .to_owned(),
        )
    }

    /// A run's permission request named by a prefix of its id: the request itself when the
    /// prefix is a whole id of it, else the one request that starts with it.
    pub async fn approval_by_prefix(
        &self,
        run_id: &str,
        prefix: &str,
    ) -> Result<Resolved, StoreError> {
        if self.known_request(run_id, prefix) {
            return Ok(Resolved::One(prefix.to_owned()));
        }
        // The whole id first, then up to two that start with it (`substr`, not `LIKE`: an id
        // may hold `_` or `%`).
        let ids: Vec<String> = read_db!(self, pool => {
            sqlx::query_scalar(
                "SELECT request_id FROM approvals WHERE run_id = $1 \
                 AND substr(request_id, 1, length($2)) = $2 \
                 ORDER BY request_id = $2 DESC, request_id LIMIT 2",
            )
            .bind(run_id)
            .bind(prefix)
            .fetch_all(pool)
            .await?
        });
        Ok(match ids.as_slice() {
            [] => Resolved::None,
            [one] => Resolved::One(one.clone()),
            [first, _] if first == prefix => Resolved::One(first.clone()),
            _ => Resolved::Many,
        })
    }

    /// Whether this process recorded permission request `request_id` of run `run_id`.
    fn known_request(&self, run_id: &str, request_id: &str) -> bool {
        self.requests
            .lock()
            .is_ok_and(|k| k.0.contains(&(run_id.to_owned(), request_id.to_owned())))
    }

    /// Notes permission requests of run `run_id` just recorded.
    pub(crate) fn note_requests<'a>(&self, run_id: &str, ids: impl IntoIterator<Item = &'a str>) {
        // Most slices record none: no lock taken for them.
        let mut ids = ids.into_iter().peekable();
        if ids.peek().is_none() {
            return;
        }
        let Ok(mut k) = self.requests.lock() else {
            return;
        };
        for id in ids {
            if k.0.len() >= KNOWN_REQUESTS_MAX {
                k.0.clear();
            }
            k.0.insert((run_id.to_owned(), id.to_owned()));
        }
    }

    async fn ids_like(
        &self,
        kind: IdKind,
        prefix: &str,
        limit: i64,
    ) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT id FROM {} WHERE id LIKE $1 ORDER BY id LIMIT $2",
            kind.table()
        );
        let pattern = format!("{prefix}%");
        let ids = read_db!(self, pool => {
            let q = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql)).bind(pattern).bind(limit);
            q.fetch_all(pool).await?
        });
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_prefixes_are_looked_up() {
        assert_eq!(clean("Run-3FA").as_deref(), Some("run-3fa"));
        assert_eq!(clean("3f%"), None);
        assert_eq!(clean("3f_"), None);
        assert_eq!(clean(""), None);
        assert!(IdKind::Run.is_whole(&format!("run-{}", "a".repeat(24))));
        assert!(!IdKind::Run.is_whole("run-abc"));
        assert!(!IdKind::Session.is_whole(&format!("run-{}", "a".repeat(24))));
    }
}
