//! A session's conversation, from its progress events, in one shape for both harnesses (for
//! `hangar transcript`).
//!
//! [`conversation`] keeps what was said and done: the messages a person sent (and, when the
//! harness echoes them, their text), the assistant's text, each tool call together with its
//! permission request, the answer to it and the tool's result, the job's check, and failures.
//! Bookkeeping (usage, acks of approve/deny commands, trees, warnings, turn ends) is left out.
//!
//! A prompt's or steer's text is not in the run log (the driver logs the command, not its body;
//! Claude Code and Codex do not echo it): a [`Entry::Sent`] marks where it went in, and the
//! control plane fills in the text from its own record of command `seq`.
//!
//! Non-goals: rendering (the CLI's job), summarising, reading files.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::{EventKind, ProgressEvent};

/// What the control plane recorded of a command it sent: its text (a message's), who sent it,
/// and when (ms since the epoch).
#[derive(Clone, Debug, PartialEq)]
pub struct SentRecord {
    pub text: Option<String>,
    pub by: String,
    pub at: i64,
}

/// Fills in the text, the sender and the time of each [`Entry::Sent`] of one run's
/// conversation from `sent(seq)` (the run's record of command `seq`).
pub fn fill_sent(entries: &mut [Entry], sent: impl Fn(u64) -> Option<SentRecord>) {
    for e in entries {
        if let Entry::Sent {
            seq, text, by, at, ..
        } = e
            && let Some(r) = sent(*seq)
        {
            *text = r.text;
            *by = Some(r.by);
            *at = Some(r.at);
        }
    }
}

/// A permission request attached to a tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub request_id: String,
    /// `allow` | `deny` | `cancelled`; `None` while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Who decided: the person who answered, or `policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The person's words with a deny.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The input the tool ran with, when the person changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
}

/// A tool's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub output: String,
    pub is_error: bool,
}

/// One entry of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A person's `prompt`, `steer` or `interrupt` (command `seq`) reached the harness. `text`
    /// and `by` (the message and who sent it) are not in the run log: [`fill_sent`] adds them
    /// from the control plane's record of the run's commands.
    Sent {
        seq: u64,
        command: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// When it was sent (ms since the epoch).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<i64>,
    },
    /// A message as the harness echoed it.
    User { text: String },
    /// The assistant's text; `unverified` when the run's log could have been written by the
    /// agent (the text is not known to be the model's).
    Assistant {
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unverified: bool,
    },
    /// A tool call, with its permission request (when one was asked) and its result (when one
    /// came; an interrupted call has none).
    Tool {
        tool_use_id: String,
        name: String,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<Approval>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<ToolOutput>,
    },
    /// A permission request that names no tool call seen before it.
    Approval {
        tool_name: String,
        input: Value,
        approval: Approval,
    },
    /// A tool result whose call was not seen.
    ToolResult {
        tool_use_id: String,
        result: ToolOutput,
    },
    /// The job's check ran; with outcome `feedback` its output went to the agent as the next
    /// message.
    Verify {
        round: u32,
        outcome: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        output_tail: String,
    },
    /// A harness turn ended in error (`status` e.g. `error_during_execution`, `interrupted`);
    /// `unverified` as for [`Entry::Assistant`].
    Failed {
        status: String,
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unverified: bool,
    },
    /// An error from the harness or the driver.
    Error { message: String },
}

/// Where an approval request lives in the entries.
enum ApprovalAt {
    Tool(usize),
    Orphan(usize),
}

/// The conversation of a session from its events (in log order).
pub fn conversation(events: &[ProgressEvent]) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut approvals: Vec<(String, ApprovalAt)> = Vec::new();
    for ev in events {
        match &ev.kind {
            EventKind::CommandAcked {
                seq,
                command,
                outcome,
                person,
                text,
            } if outcome == "done"
                && matches!(command.as_str(), "prompt" | "steer" | "interrupt") =>
            {
                out.push(Entry::Sent {
                    seq: *seq,
                    command: command.clone(),
                    text: text.clone(),
                    by: person.clone(),
                    at: None,
                });
            }
            EventKind::UserMessage { text } => out.push(Entry::User { text: text.clone() }),
            EventKind::AssistantText { text, unverified } => {
                out.push(Entry::Assistant {
                    text: text.clone(),
                    unverified: *unverified,
                });
            }
            EventKind::ToolCall {
                tool_use_id,
                name,
                input,
            } => out.push(Entry::Tool {
                tool_use_id: tool_use_id.clone(),
                name: name.clone(),
                input: input.clone(),
                approval: None,
                result: None,
            }),
            EventKind::ToolResult {
                tool_use_id,
                output,
                is_error,
            } => {
                let result = ToolOutput {
                    output: output.clone(),
                    is_error: *is_error,
                };
                match find_tool(&out, tool_use_id, |_, r| r.is_none()) {
                    Some(i) => {
                        if let Entry::Tool { result: r, .. } = &mut out[i] {
                            *r = Some(result);
                        }
                    }
                    None => out.push(Entry::ToolResult {
                        tool_use_id: tool_use_id.clone(),
                        result,
                    }),
                }
            }
            EventKind::ApprovalRequested {
                request_id,
                tool_name,
                input,
                tool_use_id,
            } => {
                let approval = Approval {
                    request_id: request_id.clone(),
                    decision: None,
                    by: None,
                    note: None,
                    updated_input: None,
                };
                let tool = tool_use_id
                    .as_deref()
                    .and_then(|id| find_tool(&out, id, |a, _| a.is_none()));
                match tool {
                    Some(i) => {
                        if let Entry::Tool { approval: a, .. } = &mut out[i] {
                            *a = Some(approval);
                        }
                        approvals.push((request_id.clone(), ApprovalAt::Tool(i)));
                    }
                    None => {
                        approvals.push((request_id.clone(), ApprovalAt::Orphan(out.len())));
                        out.push(Entry::Approval {
                            tool_name: tool_name.clone(),
                            input: input.clone(),
                            approval,
                        });
                    }
                }
            }
            EventKind::ApprovalAnswered { .. } => answer(&mut out, &approvals, &ev.kind),
            EventKind::Verify {
                round,
                exit_code,
                outcome,
                output_tail,
                ..
            } => out.push(Entry::Verify {
                round: *round,
                outcome: outcome.clone(),
                exit_code: *exit_code,
                output_tail: output_tail.clone(),
            }),
            EventKind::Result {
                is_error: true,
                text,
                status,
                unverified,
            } => out.push(Entry::Failed {
                status: status.clone(),
                text: text.clone(),
                unverified: *unverified,
            }),
            EventKind::Error { message } => out.push(Entry::Error {
                message: message.clone(),
            }),
            _ => {}
        }
    }
    out
}

/// The latest tool entry with this id whose approval and result pass `pred`.
fn find_tool(
    out: &[Entry],
    id: &str,
    pred: impl Fn(&Option<Approval>, &Option<ToolOutput>) -> bool,
) -> Option<usize> {
    out.iter().rposition(|e| {
        matches!(e, Entry::Tool { tool_use_id, approval, result, .. }
            if tool_use_id == id && pred(approval, result))
    })
}

/// Records an answer on the approval it answers (wherever in `out` that is).
fn answer(out: &mut [Entry], approvals: &[(String, ApprovalAt)], kind: &EventKind) {
    let EventKind::ApprovalAnswered {
        request_id,
        decision,
        by,
        person,
        note,
        updated_input,
        ..
    } = kind
    else {
        return;
    };
    let at = approvals.iter().rev().find(|(r, _)| r == request_id);
    let slot = match at {
        Some((_, ApprovalAt::Tool(i))) => match out.get_mut(*i) {
            Some(Entry::Tool { approval, .. }) => approval.as_mut(),
            _ => None,
        },
        Some((_, ApprovalAt::Orphan(i))) => match out.get_mut(*i) {
            Some(Entry::Approval { approval, .. }) => Some(approval),
            _ => None,
        },
        None => None,
    };
    if let Some(a) = slot {
        a.decision = Some(decision.clone());
        a.by = Some(person.clone().unwrap_or_else(|| by.clone()));
        a.note.clone_from(note);
        a.updated_input.clone_from(updated_input);
    }
}

#[cfg(test)]
#[path = "transcript_tests.rs"]
mod tests;
