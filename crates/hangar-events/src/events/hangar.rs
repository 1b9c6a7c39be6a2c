//! hangar's own `hangar.*` lines, read through `hangar_protocol::runlog::HangarLine` (the types
//! the driver writes them with) plus `hangar.tree`, which this crate reads ahead of the driver.
//! A known line whose fields do not fit is a warning; an unknown `hangar.*` type is ignored
//! (a newer driver may write lines this reader does not know yet).

use hangar_protocol::runlog::HangarLine;
use serde::Deserialize;
use serde_json::Value;

use super::codex::approval_tool;
use super::{EventKind, ParseContext, warning};

/// `{"type":"hangar.tree","tool_use_id"|"phase":…,"tree":<sha>,"ms":…,"skipped"?,"trusted"?}`
#[derive(Deserialize)]
struct TreeLine {
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    phase: Option<String>,
    tree: String,
    ms: u64,
    #[serde(default)]
    skipped: Option<Value>,
    #[serde(default)]
    trusted: Option<bool>,
}

const KNOWN: &[&str] = &[
    "hangar.started",
    "hangar.command",
    "hangar.refused",
    "hangar.approval",
    "hangar.approval_answered",
    "hangar.turn_end",
    "hangar.verify",
    "hangar.warning",
    "hangar.error",
    "hangar.rules_denied",
    "hangar.interrupted",
];

pub(super) fn parse(ty: &str, v: &Value, ctx: &mut ParseContext) -> Vec<EventKind> {
    if ty == "hangar.tree" {
        return match TreeLine::deserialize(v) {
            Ok(t) => vec![tree(t, ctx)],
            Err(e) => vec![malformed(ty, &e)],
        };
    }
    if !KNOWN.contains(&ty) {
        return Vec::new();
    }
    match HangarLine::deserialize(v) {
        Ok(line) => vec![event(line, ctx)],
        Err(e) => vec![malformed(ty, &e)],
    }
}

/// [`parse`] straight from the line's text (no `Value` of it), for a line whose `type` (given
/// once) is `ty`; `None` when the line does not fit, and [`parse`] must say why.
pub(super) fn parse_text(ty: &str, line: &str, ctx: &mut ParseContext) -> Option<Vec<EventKind>> {
    if ty == "hangar.tree" {
        return serde_json::from_str::<TreeLine>(line)
            .ok()
            .map(|t| vec![tree(t, ctx)]);
    }
    if !KNOWN.contains(&ty) {
        return Some(Vec::new());
    }
    serde_json::from_str::<HangarLine>(line)
        .ok()
        .map(|l| vec![event(l, ctx)])
}

fn tree(t: TreeLine, ctx: &ParseContext) -> EventKind {
    EventKind::Tree {
        tool_use_id: t.tool_use_id,
        phase: t.phase,
        tree: t.tree,
        ms: t.ms,
        skipped: t.skipped.filter(|s| !s.is_null()),
        trusted: ctx.trees_trusted() && t.trusted != Some(false),
    }
}

fn malformed(ty: &str, e: &serde_json::Error) -> EventKind {
    warning(format!("malformed {ty} line: {e}"))
}

/// `hangar.started`: a new harness process, whose per-process state starts over.
fn started(line: HangarLine, ctx: &mut ParseContext) -> EventKind {
    let HangarLine::Started {
        harness,
        policy,
        uid_split,
        argv,
        hooks,
        ..
    } = line
    else {
        return warning("not a hangar.started line".into());
    };
    ctx.harness = Some(harness.clone());
    ctx.uid_split = Some(uid_split);
    ctx.codex_open.clear();
    ctx.codex_last_text.clear();
    ctx.claude_cost = None;
    EventKind::Started {
        harness,
        policy,
        uid_split,
        argv,
        hooks: hooks
            .into_iter()
            .map(|h| crate::manifest::Hook {
                name: h.name,
                digest: h.digest,
            })
            .collect(),
    }
}

fn event(line: HangarLine, ctx: &mut ParseContext) -> EventKind {
    match line {
        // Read by `parse` through the more lenient `TreeLine`; the same here.
        HangarLine::Tree {
            tool_use_id,
            phase,
            tree,
            ms,
            skipped,
            trusted,
        } => EventKind::Tree {
            tool_use_id,
            phase: phase.map(|p| p.to_string()),
            tree,
            ms,
            skipped: skipped.map(Value::String),
            trusted: ctx.trees_trusted() && trusted != Some(false),
        },
        line @ HangarLine::Started { .. } => started(line, ctx),
        HangarLine::Command {
            seq,
            kind,
            outcome,
            person,
            text,
            ..
        } => EventKind::CommandAcked {
            seq,
            command: kind,
            outcome: outcome.to_string(),
            person,
            text,
        },
        HangarLine::Refused {
            seq,
            kind,
            code,
            reason,
            person,
            ..
        } => EventKind::CommandRefused {
            seq,
            command: kind,
            code,
            reason,
            person,
        },
        HangarLine::Approval {
            request_id,
            tool_name,
            input,
            tool_use_id,
        } => {
            let tool_use_id = resolve_tool_use_id(&tool_name, tool_use_id, ctx);
            EventKind::ApprovalRequested {
                request_id,
                tool_name,
                input,
                tool_use_id,
            }
        }
        HangarLine::ApprovalAnswered {
            request_id,
            decision,
            by,
            seq,
            person,
            note,
            updated_input,
        } => EventKind::ApprovalAnswered {
            request_id,
            decision: decision.to_string(),
            by,
            seq,
            person,
            note,
            updated_input,
        },
        HangarLine::TurnEnd {
            status,
            reason,
            handed_back,
            verify,
            verify_rounds,
        } => EventKind::TurnEnd {
            status,
            reason,
            verify,
            verify_rounds,
            handed_back,
        },
        HangarLine::Verify {
            round,
            exit_code,
            ms,
            outcome,
            output_tail,
        } => EventKind::Verify {
            round,
            exit_code,
            outcome: outcome.to_string(),
            output_tail,
            ms,
        },
        HangarLine::Warning { message } => EventKind::Warning { message },
        HangarLine::RulesDenied {
            request_id,
            tool_name,
            tool_use_id,
            rule,
            reason,
        } => EventKind::RulesDenied {
            request_id,
            tool_name,
            tool_use_id,
            rule,
            reason,
        },
        HangarLine::Error { message } => EventKind::Error { message },
        HangarLine::Interrupted {
            seq,
            person,
            answering,
            queued,
            approvals,
        } => EventKind::Interrupted {
            seq,
            person,
            answering,
            queued,
            approvals,
        },
    }
}

/// For Codex, the driver's approval line names the app-server's item id, which the exec lines
/// do not show: pair the request with the first open item of that tool not yet asked about.
/// Claude Code's `tool_use_id` is the `tool_use` block's id already.
fn resolve_tool_use_id(
    tool_name: &str,
    given: Option<String>,
    ctx: &mut ParseContext,
) -> Option<String> {
    if ctx.harness.as_deref() != Some("codex") {
        return given;
    }
    let name = approval_tool(tool_name);
    match ctx
        .codex_open
        .iter_mut()
        .find(|o| !o.asked && o.name == name)
    {
        Some(open) => {
            open.asked = true;
            Some(open.id.clone())
        }
        None => given,
    }
}
