//! Where a fork's conversation ends, read from the run logs of the source session's runs (the
//! run log is the source of truth), up to the step's `hangar.tree` line.
//!
//! * Claude Code: every message line on its stdout carries the `uuid` it has in the session's
//!   file; `--resume SESSION --fork-session --resume-session-at UUID` (print mode) keeps the
//!   history up to and including that entry. A step after a tool is cut at the message that
//!   holds that tool's result (the tree line names the tool): the driver hashes on a thread of
//!   its own, so the tree line can come after the model's next message in the log. A phase's
//!   step (the turn's start or end) is cut at the last main-chain message before its line.
//! * Codex 0.169: `thread/fork` keeps whole turns (`lastTurnId`, inclusive) and there is no
//!   rollback inside a turn (`thread/revert` also works by turn). A step between turns (a
//!   turn's start or end) is cut exactly; a step inside a turn is not: the fork's conversation
//!   then ends before that turn, and the cut says so (`exact: false` with the reason).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use hangar_store::Harness;

use crate::steps::forks::Conversation;
use serde_json::Value;

use crate::error::ControlError;

/// Reads the logs of the runs before the step's run (in order), then the step's run up to its
/// `step`-th tree line, which must name `tree` (the stored step and the log must agree).
pub(crate) fn find(
    harness: Harness,
    earlier: &[PathBuf],
    log: &Path,
    step: usize,
    tree: &str,
) -> Result<Conversation, ControlError> {
    let mut scan = Scan::new(harness);
    for path in earlier {
        // A turn refused before its driver started has no log: nothing was said in it.
        if path.is_file() {
            for_lines(path, |v| {
                scan.line(v);
                true
            })?;
        }
    }
    let mut seen = 0usize;
    let mut found = None;
    let mut after_tool = None;
    for_lines(log, |v| {
        if v.get("type").and_then(Value::as_str) == Some("hangar.tree")
            && let Some(t) = v.get("tree").and_then(Value::as_str)
        {
            if seen == step {
                found = Some(t.to_owned());
                after_tool = v
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                return false;
            }
            seen += 1;
            return true;
        }
        scan.line(v);
        true
    })?;
    match found {
        Some(t) if t == tree => Ok(scan.finish(step, after_tool.as_deref())),
        Some(t) => Err(ControlError::Refused(format!(
            "the fork is refused: step {step} is stored as tree {tree}, but the run log's tree line says {t}; the stored events do not match the log (check them with `hangar events check RUN`)"
        ))),
        None => Err(ControlError::Refused(format!(
            "the fork is refused: step {step} (tree {tree}) is stored, but the run log {} has only {seen} tree lines",
            log.display()
        ))),
    }
}

/// Calls `f` with each JSON line of a file until it returns false; other lines are skipped.
fn for_lines(path: &Path, mut f: impl FnMut(&Value) -> bool) -> Result<(), ControlError> {
    let file = std::fs::File::open(path).map_err(|e| {
        ControlError::Internal(format!("cannot read the run log {}: {e}", path.display()))
    })?;
    for line in BufReader::new(file).split(b'\n') {
        let line = line.map_err(|e| {
            ControlError::Internal(format!("cannot read the run log {}: {e}", path.display()))
        })?;
        let Ok(v) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if !f(&v) {
            break;
        }
    }
    Ok(())
}

/// What the lines read so far say about the conversation.
#[derive(Debug)]
enum Scan {
    Claude {
        /// (session id, uuid) of the last main-chain message.
        last: Option<(String, String)>,
        /// (session id, uuid) of the main-chain message that holds each tool's result.
        results: HashMap<String, (String, String)>,
    },
    Codex {
        thread: Option<String>,
        /// (thread, turn id) of the last turn that ended.
        last: Option<(String, String)>,
        in_turn: bool,
        /// A turn ended whose id the log does not name (a driver from before turn ids).
        unnamed: bool,
    },
}

impl Scan {
    fn new(harness: Harness) -> Scan {
        match harness {
            Harness::Claude => Scan::Claude {
                last: None,
                results: HashMap::new(),
            },
            Harness::Codex => Scan::Codex {
                thread: None,
                last: None,
                in_turn: false,
                unnamed: false,
            },
        }
    }

    fn line(&mut self, v: &Value) {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        match self {
            Scan::Claude { last, results } => {
                let main_chain = v.get("parent_tool_use_id").is_none_or(Value::is_null)
                    && v.get("isReplay") != Some(&Value::Bool(true));
                if matches!(s("type"), Some("user" | "assistant"))
                    && main_chain
                    && let (Some(sid), Some(uuid)) = (s("session_id"), s("uuid"))
                {
                    let at = (sid.to_owned(), uuid.to_owned());
                    let blocks = v
                        .pointer("/message/content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten();
                    for b in blocks {
                        if b.get("type").and_then(Value::as_str) == Some("tool_result")
                            && let Some(id) = b.get("tool_use_id").and_then(Value::as_str)
                        {
                            results.insert(id.to_owned(), at.clone());
                        }
                    }
                    *last = Some(at);
                }
            }
            Scan::Codex {
                thread,
                last,
                in_turn,
                unnamed,
            } => match s("type") {
                Some("thread.started") => *thread = s("thread_id").map(str::to_owned),
                Some("turn.started") => *in_turn = true,
                Some("turn.completed" | "turn.failed") => {
                    *in_turn = false;
                    match (thread.clone(), s("turn_id")) {
                        (Some(t), Some(id)) => {
                            *last = Some((t, id.to_owned()));
                            *unnamed = false;
                        }
                        _ => *unnamed = true,
                    }
                }
                _ => {}
            },
        }
    }

    /// Where the conversation ends at `step`, whose tree line followed `after_tool`'s result
    /// (none: a phase's).
    fn finish(self, step: usize, after_tool: Option<&str>) -> Conversation {
        match self {
            Scan::Claude { mut last, results } => {
                if let Some(at) = after_tool.and_then(|id| results.get(id)) {
                    last = Some(at.clone());
                }
                Conversation {
                parent: last.as_ref().map(|(sid, _)| sid.clone()),
                at: last.map(|(_, uuid)| uuid),
                exact: true,
                why: None,
                }
            }
            Scan::Codex { unnamed: true, .. } => Conversation {
                parent: None,
                at: None,
                exact: false,
                why: Some(format!(
                    "the run log does not name Codex's turns (written by an older driver), so the thread cannot be cut at step {step}: the fork starts a new conversation"
                )),
            },
            Scan::Codex { last, in_turn, .. } => Conversation {
                parent: last.as_ref().map(|(t, _)| t.clone()),
                at: last.map(|(_, id)| id),
                exact: !in_turn,
                why: in_turn.then(|| {
                    format!(
                        "Codex forks a thread only between turns (thread/fork lastTurnId) and cannot roll back inside one: step {step} comes inside a turn, so the fork's conversation ends before that turn began"
                    )
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn log(lines: &[Value]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for l in lines {
            use std::io::Write;
            writeln!(f, "{l}").unwrap();
        }
        f
    }

    fn tree(t: &str) -> Value {
        json!({"type": "hangar.tree", "phase": "start", "tree": t, "ms": 1})
    }

    #[test]
    fn claude_cuts_at_the_last_main_chain_message_before_the_tree_line() {
        let first = log(&[
            tree("t0"),
            json!({"type": "assistant", "uuid": "a1", "session_id": "s1"}),
            json!({"type": "user", "uuid": "u1", "session_id": "s1"}),
            tree("t1"),
            json!({"type": "assistant", "uuid": "sub", "session_id": "s1", "parent_tool_use_id": "toolu_1"}),
            json!({"type": "assistant", "uuid": "a2", "session_id": "s1"}),
            tree("t2"),
            json!({"type": "user", "uuid": "u2", "session_id": "s1",
                   "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]}}),
            json!({"type": "assistant", "uuid": "a3", "session_id": "s1"}),
            json!({"type": "hangar.tree", "tool_use_id": "toolu_2", "tree": "t3", "ms": 1}),
        ]);
        let at = |step, t| find(Harness::Claude, &[], first.path(), step, t).unwrap();
        assert_eq!(
            at(0, "t0"),
            Conversation {
                parent: None,
                at: None,
                exact: true,
                why: None
            }
        );
        assert_eq!(at(1, "t1").at.as_deref(), Some("u1"));
        assert_eq!(
            at(3, "t3").at.as_deref(),
            Some("u2"),
            "a tree line after the model's next message: cut at the tool's result"
        );
        assert_eq!(
            at(2, "t2").at.as_deref(),
            Some("a2"),
            "subagents are skipped"
        );
        // The next run's start: the conversation so far, from the earlier log.
        let second = log(&[tree("t3")]);
        let c = find(
            Harness::Claude,
            &[first.path().to_owned()],
            second.path(),
            0,
            "t3",
        )
        .unwrap();
        assert_eq!(
            (c.parent.as_deref(), c.at.as_deref(), c.exact),
            (Some("s1"), Some("a3"), true)
        );
    }

    #[test]
    fn codex_is_exact_between_turns_only() {
        let l = log(&[
            tree("t0"),
            json!({"type": "thread.started", "thread_id": "th"}),
            json!({"type": "turn.started", "turn_id": "x1"}),
            tree("t1"),
            json!({"type": "turn.completed", "turn_id": "x1"}),
            tree("t2"),
        ]);
        let at = |step, t| find(Harness::Codex, &[], l.path(), step, t).unwrap();
        assert!(at(0, "t0").exact && at(0, "t0").parent.is_none());
        let inside = at(1, "t1");
        assert!(!inside.exact && inside.parent.is_none(), "{inside:?}");
        assert!(inside.why.unwrap().contains("inside a turn"));
        let end = at(2, "t2");
        assert_eq!(
            (end.parent.as_deref(), end.at.as_deref(), end.exact),
            (Some("th"), Some("x1"), true)
        );
    }

    #[test]
    fn a_step_the_log_does_not_have_or_names_otherwise_refuses() {
        let l = log(&[tree("t0")]);
        let e = find(Harness::Claude, &[], l.path(), 0, "tX").unwrap_err();
        assert!(e.to_string().contains("run log's tree line says t0"), "{e}");
        let e = find(Harness::Claude, &[], l.path(), 3, "t0").unwrap_err();
        assert!(e.to_string().contains("only 1 tree lines"), "{e}");
    }
}
