//! `GET /v1/runs/{id}/log?offset=N`: a run's log as the driver wrote it, complete lines only,
//! from a byte offset — what `hangar run` and `hangar log --follow` show, and resume from after
//! a restart of the server (the offset is the client's, so nothing is shown twice or skipped).
//! Read-only: the file is the run log the watchers read too.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hangar_control::ControlPlane;
use hangar_events::watcher::Order;
use hangar_store::RunState;
use serde::Deserialize;

use crate::auth::Authed;
use crate::error::ApiError;
use crate::extract::{Json, Path as UrlPath, Query};

/// How many bytes one answer reads at most (a longer line is read whole anyway).
const DEFAULT_MAX: u64 = 1 << 20;

#[derive(Deserialize)]
pub(crate) struct LogQuery {
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    max: Option<u64>,
}

/// `{lines, next_offset, ended, verified, why?}`: the complete lines from `offset`, where the
/// next read starts, whether the run had ended before this read and every complete line is in
/// this answer, and whether the run's log is one the agent could not have written (`why` says
/// why not; the assistant's text is then not known to be the model's).
///
/// A sealed log (`hangar_protocol::logseal`) gives only what hangar's seals cover: a stretch
/// no seal covers comes as one `hangar.warning` line saying so, and lines after the last seal
/// wait for the next one. Until the run's watcher has decided how its log is read, a live run
/// gives no lines yet.
pub(crate) async fn run_log(
    State(plane): State<Arc<ControlPlane>>,
    who: Authed,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    crate::routes::run_seen(&plane, &who, &id, "read the log of").await?;
    let run = plane.store().run(&id).await?;
    let ended = run.state != RunState::Live;
    let path = plane.steps().run_log(&run).await;
    // Only an ended run's log can have been pruned; asked only when the file is gone.
    if ended
        && !path.exists()
        && let Some(at) = plane.store().run_pruned_at(&id).await?
    {
        return Err(ApiError::NotFound(format!(
            "run {id}'s log was pruned by retention (at {at} ms since the epoch); its record, commands, approvals and audit records remain"
        )));
    }
    let max = q.max.unwrap_or(DEFAULT_MAX).clamp(4096, 16 << 20);
    let offset = q.offset;
    let mode = hangar_control::Steps::stored_log_mode(&run);
    let verified = mode.as_ref().is_some_and(|m| m.trusted);
    let why = match &mode {
        Some(m) => m.why.clone(),
        None if run.watch_state.is_none() && !ended => None,
        None => Some("the run's log was read before hangar sealed its logs".to_owned()),
    };
    // An offset past the log's end has no lines yet (and is not sought: past 2^63 the kernel
    // refuses the seek).
    let len = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
    let read = match mode {
        _ if offset > len => Ok(Ok(LogRead {
            lines: Vec::new(),
            next_offset: offset,
            at_end: true,
        })),
        Some(m) if m.sealed => {
            let reader = plane.steps().log_reader(&run).await;
            tokio::task::spawn_blocking(move || {
                reader
                    .read_sealed(&path, offset, max, Order::Any)
                    .map(|r| LogRead {
                        lines: r.lines.into_iter().map(|(_, l)| l).collect(),
                        next_offset: r.new_cursor,
                        at_end: r.at_end,
                    })
                    .map_err(|e| e.to_string())
            })
            .await
        }
        // Not decided yet: nothing to show until the watcher has started on it.
        None if run.watch_state.is_none() && !ended => Ok(Ok(LogRead {
            lines: Vec::new(),
            next_offset: offset,
            at_end: false,
        })),
        _ => {
            tokio::task::spawn_blocking(move || {
                complete_lines(&path, offset, max).map_err(|e| e.to_string())
            })
            .await
        }
    };
    let read = read
        .map_err(|e| ApiError::Internal(format!("reading the run log: {e}")))?
        .map_err(|e| ApiError::Internal(format!("reading the run log of {id}: {e}")))?;
    Ok(Json(hangar_api::LogPage {
        lines: read.lines,
        next_offset: read.next_offset,
        ended: ended && read.at_end,
        verified,
        why: why.filter(|_| !verified),
    })
    .into_response())
}

/// What one read of the log found.
#[derive(Debug, PartialEq)]
pub(crate) struct LogRead {
    pub lines: Vec<String>,
    pub next_offset: u64,
    /// No complete line is left after `next_offset`.
    pub at_end: bool,
}

/// The complete lines of `path` from byte `offset`, reading about `max` bytes (more when one
/// line is longer). A missing file has no lines yet.
pub(crate) fn complete_lines(path: &Path, offset: u64, max: u64) -> std::io::Result<LogRead> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LogRead {
                lines: Vec::new(),
                next_offset: offset,
                at_end: true,
            });
        }
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    let mut at_end = false;
    loop {
        let before = buf.len();
        let got = (&mut f).take(max).read_to_end(&mut buf)?;
        if (got as u64) < max {
            at_end = true;
        }
        if at_end || buf[before..].contains(&b'\n') {
            break;
        }
    }
    let whole = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    // Whatever follows the last newline is a partial line; with more unread bytes after the
    // buffer there may be complete lines left.
    let lines = String::from_utf8_lossy(&buf[..whole])
        .lines()
        .map(str::to_owned)
        .collect();
    Ok(LogRead {
        lines,
        next_offset: offset + whole as u64,
        at_end,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn complete_lines_only_from_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.log");
        std::fs::write(&p, "one\ntwo\nthr").unwrap();
        let r = complete_lines(&p, 0, 4096).unwrap();
        assert_eq!(r.lines, vec!["one", "two"]);
        assert_eq!(r.next_offset, 8);
        assert!(r.at_end);
        let r = complete_lines(&p, 4, 4096).unwrap();
        assert_eq!(r.lines, vec!["two"]);
        std::fs::write(&p, "one\ntwo\nthree\n").unwrap();
        let r = complete_lines(&p, 8, 4096).unwrap();
        assert_eq!((r.lines, r.next_offset), (vec!["three".to_owned()], 14));
        let r = complete_lines(&dir.path().join("none"), 3, 4096).unwrap();
        assert_eq!((r.lines.len(), r.next_offset), (0, 3));
    }

    #[test]
    fn a_line_longer_than_max_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.log");
        let long = "x".repeat(10_000);
        std::fs::write(&p, format!("{long}\nnext\n")).unwrap();
        let r = complete_lines(&p, 0, 4096).unwrap();
        assert_eq!(r.lines, vec![long.clone(), "next".to_owned()]);
        assert_eq!(r.next_offset as usize, long.len() + 6);
        let r2 = complete_lines(&p, 0, 1 << 20).unwrap();
        assert_eq!(r2.lines, r.lines);
        assert!(r2.at_end);
    }
}
