//! Claude Code in its structured mode: `claude -p --input-format stream-json --output-format
//! stream-json --verbose`, user messages and control messages on stdin (see docs/protocol.md).
//!
//! The turn is settled when a `result` covers every message passed on: each message carries a
//! `uuid`, and each `result` lists the messages it covered in `user_message_uuids` (a message sent
//! while the model streams is queued by the CLI and covered by a later `result`).

use std::ffi::OsString;

use serde_json::{Value, json};

use crate::adapter::{Adapter, Answer, SendError, Signal};
use crate::args::{Policy, Settings};
use crate::harness::Harness;
use crate::relay::HarnessEvent;
use crate::runlog::RunLog;

/// The turn's own settings as Claude Code takes them: `settings` (always; see
/// `claude_settings.rs`) loaded alone, `mcp` the only MCP servers, `hook_events` when the file
/// holds hooks of hangar's (the Stop hook, the Tower hook) whose responses the driver reads.
#[derive(Clone, Copy, Debug)]
pub struct TurnFiles<'a> {
    pub settings: &'a std::path::Path,
    pub mcp: Option<&'a std::path::Path>,
    pub hook_events: bool,
}

/// The Claude Code argv for the settings (without the program). Every turn, under every policy,
/// loads only hangar's own settings file (`--setting-sources ''`: no user, project or local
/// settings) and only hangar's MCP servers (`--strict-mcp-config`: no `.mcp.json`, no
/// `~/.claude.json` servers).
pub fn args(s: &Settings, files: TurnFiles<'_>) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        // Text as the model streams it (`stream_event` lines), so a person watches it being
        // written (issue 21); the whole message still comes as its `assistant` line.
        "--include-partial-messages",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    match s.policy {
        Policy::Ask | Policy::Governed => {
            a.extend(["--permission-prompt-tool", "stdio"].map(OsString::from))
        }
        Policy::Auto => a.push("--dangerously-skip-permissions".into()),
    }
    a.extend([
        OsString::from("--settings"),
        files.settings.into(),
        "--setting-sources".into(),
        "".into(),
        "--strict-mcp-config".into(),
    ]);
    if let Some(mcp) = files.mcp {
        a.extend([OsString::from("--mcp-config"), mcp.into()]);
    }
    if files.hook_events {
        a.push("--include-hook-events".into());
    }
    if let Some(m) = &s.model {
        a.extend([OsString::from("--model"), m.into()]);
    }
    if let Some(r) = &s.resume {
        a.extend([OsString::from("--resume"), r.into()]);
    }
    if let Some(r) = &s.fork {
        a.extend([
            OsString::from("--resume"),
            r.into(),
            OsString::from("--fork-session"),
        ]);
        // Print mode only (we are in it): the history up to and including this entry.
        if let Some(at) = &s.fork_at {
            a.extend([OsString::from("--resume-session-at"), at.into()]);
        }
    }
    if let Some(id) = &s.session_id {
        a.extend([OsString::from("--session-id"), id.into()]);
    }
    a
}

/// The id of the PreToolUse hook callback the driver registers for the deny-risky rules.
pub const RULES_HOOK: &str = "hangar_rules";

/// Why the rules' hook asks (shown where Claude Code shows a hook's reason).
const ASK_REASON: &str = "hangar: the deny-risky rules allow this call; a person or Tower decides";

/// Claude Code's side of the turn.
#[derive(Debug, Default)]
pub struct Claude {
    /// uuids of messages passed on that no `result` has covered yet.
    outstanding: Vec<String>,
    /// The id each message was passed on with, by uuid.
    ids: Vec<(String, String)>,
    /// uuids of messages the model has had (`command_lifecycle` `started` or later).
    started: std::collections::HashSet<String>,
    /// Register the deny-risky rules as a PreToolUse hook callback in `initialize`.
    rules_hook: bool,
    /// When the rules allow a call, answer the hook with an explicit `ask` (policies `ask` and
    /// `governed`): Claude Code then sends `can_use_tool` whatever another hook said, since
    /// its hooks' `ask` wins over `allow`. Under `auto` the answer is "no opinion".
    ask_when_allowed: bool,
}

impl Claude {
    /// An adapter that registers the rules' PreToolUse hook (every real Claude Code turn).
    pub fn with_rules_hook(policy: Policy) -> Claude {
        Claude {
            rules_hook: true,
            ask_when_allowed: policy != Policy::Auto,
            ..Claude::default()
        }
    }
}

impl Adapter for Claude {
    fn start(&mut self, h: &mut Harness, _log: &RunLog) -> Result<(), SendError> {
        // Claude Code prints nothing before its first input; `initialize` registers the rules'
        // PreToolUse hook (protocol notes 7.5): every tool call, under every permission mode
        // (even --dangerously-skip-permissions), is checked by the driver before it runs.
        if self.rules_hook {
            let init = json!({"type": "control_request", "request_id": "hangar-initialize",
                "request": {"subtype": "initialize", "hooks": {"PreToolUse": [
                    {"matcher": null, "hookCallbackIds": [RULES_HOOK]}]}}});
            h.send(&init).map_err(|_| SendError::Gone)?;
        }
        Ok(())
    }

    fn answer_hook(
        &mut self,
        h: &mut Harness,
        request_id: &str,
        deny: Option<&str>,
    ) -> Result<(), SendError> {
        let response = match deny {
            Some(reason) => json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": reason}}),
            None if self.ask_when_allowed => {
                json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "ask", "permissionDecisionReason": ASK_REASON}})
            }
            None => json!({}),
        };
        let msg = json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}});
        h.send(&msg).map_err(|_| SendError::Gone)
    }

    fn message(&mut self, h: &mut Harness, text: &str, id: &str) -> Result<(), SendError> {
        let uuid = message_uuid(id);
        h.send(&user_message(text, &uuid))
            .map_err(|_| SendError::Gone)?;
        self.ids.push((uuid.clone(), id.to_owned()));
        self.outstanding.push(uuid);
        Ok(())
    }

    fn interrupt(&mut self, h: &mut Harness, seq: u64) -> Result<(), SendError> {
        let msg = json!({"type": "control_request", "request_id": format!("hangar-interrupt-{seq}"), "request": {"subtype": "interrupt"}});
        h.send(&msg).map_err(|_| SendError::Gone)
    }

    fn answer(
        &mut self,
        h: &mut Harness,
        request_id: &str,
        original_input: &Value,
        a: &Answer,
    ) -> Result<(), SendError> {
        let response = if a.allow {
            json!({"behavior": "allow", "updatedInput": a.updated_input.as_ref().unwrap_or(original_input)})
        } else {
            json!({"behavior": "deny", "message": a.message})
        };
        let msg = json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}});
        h.send(&msg).map_err(|_| SendError::Gone)
    }

    fn on_event(&mut self, h: &mut Harness, _log: &RunLog, ev: HarnessEvent) -> Vec<Signal> {
        match ev {
            HarnessEvent::Result { is_error, uuids } => {
                match uuids {
                    Some(u) => self.outstanding.retain(|x| !u.contains(x)),
                    None => self.outstanding.clear(),
                }
                if self.outstanding.is_empty() {
                    vec![Signal::Settled { is_error }]
                } else {
                    Vec::new()
                }
            }
            HarnessEvent::CanUseTool {
                request_id,
                tool_name,
                input,
                tool_use_id,
            } => {
                vec![Signal::Ask {
                    request_id,
                    tool_name,
                    input,
                    tool_use_id,
                }]
            }
            HarnessEvent::HookCallback {
                request_id,
                callback_id,
                input,
            } => {
                if callback_id != RULES_HOOK {
                    // Not ours: answer "no opinion" so the CLI never waits on it.
                    let msg = json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": {}}});
                    let _ = h.send(&msg);
                    return Vec::new();
                }
                let field = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_owned);
                vec![Signal::PreToolUse {
                    request_id,
                    tool_name: field("tool_name").unwrap_or_default(),
                    tool_use_id: field("tool_use_id"),
                    input: input.get("tool_input").cloned().unwrap_or(Value::Null),
                }]
            }
            HarnessEvent::Cancel { request_id } => vec![Signal::Withdrawn { request_id }],
            HarnessEvent::HookResponse(v) => match crate::verify::parse_hook_response(&v) {
                Some((outcome, exit_code, tail)) => vec![Signal::Verified {
                    outcome,
                    exit_code,
                    tail,
                }],
                None => Vec::new(),
            },
            HarnessEvent::ToolResults(ids) => vec![Signal::ToolsDone { ids }],
            HarnessEvent::Lifecycle { uuid, state } => {
                if state != "queued" {
                    self.started.insert(uuid);
                }
                Vec::new()
            }
            HarnessEvent::Rpc(_) | HarnessEvent::Eof => Vec::new(),
        }
    }

    fn busy(&self) -> bool {
        !self.outstanding.is_empty()
    }

    fn answering(&self) -> Vec<String> {
        self.ids
            .iter()
            .filter(|(uuid, _)| self.outstanding.contains(uuid) && self.started.contains(uuid))
            .map(|(_, id)| id.clone())
            .collect()
    }

    fn never_started(&self) -> Vec<String> {
        self.ids
            .iter()
            .filter(|(uuid, _)| self.outstanding.contains(uuid) && !self.started.contains(uuid))
            .map(|(_, id)| id.clone())
            .collect()
    }
}

/// A user message (`prompt` / `steer`). The `uuid` makes Claude Code report the message's
/// lifecycle and list it in `user_message_uuids` of the `result` that covers it.
fn user_message(text: &str, uuid: &str) -> Value {
    json!({"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": null, "session_id": "", "uuid": uuid})
}

/// A UUID-shaped id for a command, derived from its nonce (unique per run).
pub fn message_uuid(nonce_hex: &str) -> String {
    let h: String = nonce_hex
        .chars()
        .filter(char::is_ascii_hexdigit)
        .chain(std::iter::repeat('0'))
        .take(32)
        .collect();
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A harness killed with messages queued hands back those the model never had (found by
    /// `scripts/chaos`: a steer acked `done` into a dying Claude Code was lost).
    #[test]
    fn messages_the_model_never_had_are_the_ones_handed_back() {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut h = Harness { stdin: None, child };
        h.stdin = h.child.stdin.take();
        let log = RunLog::open(
            &std::env::temp_dir().join(format!("hangar-claude-test-{}.log", std::process::id())),
        )
        .unwrap();
        let mut c = Claude::default();
        let ids = [
            "00112233445566778899aabbccddeeff",
            "ffeeddccbbaa99887766554433221100",
            "0123456789abcdef0123456789abcdef",
        ];
        for (i, id) in ids.iter().enumerate() {
            c.message(&mut h, &format!("message {i}"), id).unwrap();
        }
        assert_eq!(c.never_started(), ids.to_vec());
        for state in ["queued", "started"] {
            c.on_event(
                &mut h,
                &log,
                HarnessEvent::Lifecycle {
                    uuid: message_uuid(ids[0]),
                    state: state.into(),
                },
            );
        }
        c.on_event(
            &mut h,
            &log,
            HarnessEvent::Lifecycle {
                uuid: message_uuid(ids[1]),
                state: "queued".into(),
            },
        );
        assert_eq!(c.never_started(), ids[1..].to_vec());
        // Covered by a result: done, not handed back.
        c.on_event(
            &mut h,
            &log,
            HarnessEvent::Result {
                is_error: false,
                uuids: Some(vec![message_uuid(ids[2])]),
            },
        );
        assert_eq!(c.never_started(), vec![ids[1].to_owned()]);
        let _ = h.child.kill();
        let _ = h.child.wait();
    }

    #[test]
    fn uuid_shape() {
        let u = message_uuid("00112233445566778899aabbccddeeff");
        assert_eq!(u, "00112233-4455-4677-8899-aabbccddeeff");
        assert_eq!(message_uuid("").len(), 36);
    }

    #[test]
    fn a_fork_cut_at_a_message_resumes_up_to_it() {
        let s = crate::args::parse(
            [
                "--ctl",
                "/c",
                "--run",
                "r1",
                "--cwd",
                "/w",
                "--fork",
                "sid",
                "--fork-at",
                "m-9",
            ]
            .map(std::ffi::OsString::from)
            .to_vec(),
        )
        .unwrap();
        let files = TurnFiles {
            settings: std::path::Path::new("/t/settings.json"),
            mcp: None,
            hook_events: false,
        };
        let a: Vec<String> = args(&s, files)
            .iter()
            .map(|x| x.to_string_lossy().into_owned())
            .collect();
        let at = a.iter().position(|x| x == "--resume").unwrap();
        assert_eq!(
            a[at..at + 5],
            [
                "--resume",
                "sid",
                "--fork-session",
                "--resume-session-at",
                "m-9"
            ]
        );
    }
}
