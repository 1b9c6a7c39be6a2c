//! hangar's own lines in the run log.
//!
//! The run log is the harness's stdout, line for line and unchanged, with two additions:
//!
//! 1. Each Claude Code `result` line also carries [`PROCESS_USAGE_FIELD`]
//!    (`"hangar_process_usage"`): the token totals of the harness process so far, summed over
//!    the `usage` of every `result` it printed (`input_tokens`, `output_tokens`,
//!    `cache_creation_input_tokens`, `cache_read_input_tokens`). `total_cost_usd` is already
//!    cumulative; this makes the tokens so too. The field is appended as the line's last member;
//!    every other byte of the line is as the harness wrote it.
//! 2. hangar's own lines, one JSON object each, `"type":"hangar.<what>"`, documented on each
//!    variant of [`HangarLine`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The member added to each `result` line (see the module docs).
pub const PROCESS_USAGE_FIELD: &str = "hangar_process_usage";

/// Token totals of one harness process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl ProcessUsage {
    /// Adds one `result`'s `usage` object.
    pub fn add(&mut self, usage: &Value) {
        let get = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
        self.input_tokens += get("input_tokens");
        self.output_tokens += get("output_tokens");
        self.cache_creation_input_tokens += get("cache_creation_input_tokens");
        self.cache_read_input_tokens += get("cache_read_input_tokens");
    }
}

/// A hook the harness runs with: what it is (its event and script, e.g.
/// `Stop: /tmp/hangar-<run>-verify/stop-hook.sh`) and the SHA-256 of its script (lowercase hex).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookDigest {
    pub name: String,
    pub digest: String,
}

impl HookDigest {
    /// The digest of the script at `path`, named `name`.
    pub fn of_file(name: impl Into<String>, path: &std::path::Path) -> std::io::Result<HookDigest> {
        use sha2::Digest;
        let bytes = std::fs::read(path)?;
        Ok(HookDigest {
            name: name.into(),
            digest: hex::encode(sha2::Sha256::digest(&bytes)),
        })
    }
}

crate::words::words!(
    /// A `hangar.tree` line's moment in the turn.
    TreePhase ("tree phase", "start, end") { Start = "start", End = "end" }
);

crate::words::words!(
    /// How the driver answered a command that passed every check.
    CommandOutcome ("command outcome", "done, ended") { Done = "done", Ended = "ended" }
);

crate::words::words!(
    /// How a permission request was answered (`cancelled`: the harness withdrew it).
    ApprovalDecision ("approval decision", "allow, deny, cancelled") {
        Allow = "allow",
        Deny = "deny",
        Cancelled = "cancelled",
    }
);

crate::words::words!(
    /// What one run of the job's check found.
    VerifyOutcome ("check outcome", "passed, feedback, failed") {
        Passed = "passed",
        Feedback = "feedback",
        Failed = "failed",
    }
);

/// One line of hangar's own in the run log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum HangarLine {
    /// The driver started the harness. `uid_split` says whether the harness runs as a uid of its
    /// own (`agent_uid`) while the driver stays hangar's user.
    #[serde(rename = "hangar.started")]
    Started {
        run: String,
        harness: String,
        policy: String,
        driver_pid: u32,
        harness_pid: u32,
        uid_split: bool,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        agent_uid: Option<u32>,
        driver_version: String,
        /// The harness's argv, program first, as the driver started it (for the turn's
        /// manifest). Absent in logs of drivers before it was added.
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        argv: Vec<String>,
        /// The hooks the harness runs with (e.g. the job's Stop hook), each with the SHA-256 of
        /// its script, as the driver wrote them.
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        hooks: Vec<HookDigest>,
    },
    /// The work tree's git tree id (what `git add -A && git write-tree` would give) after tool
    /// call `tool_use_id`, or at the turn's `phase` (`start` | `end`), taken in `ms`. After a
    /// tool it is written only when the tree changed. `skipped: "slow"`: this hash took over the
    /// limit and no more are taken this turn. `trusted: false` when the agent shares the driver's
    /// uid (it could have changed what was hashed); absent under the uid split.
    #[serde(rename = "hangar.tree")]
    Tree {
        #[serde(skip_serializing_if = "Option::is_none", default)]
        tool_use_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        phase: Option<TreePhase>,
        tree: String,
        ms: u64,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        skipped: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        trusted: Option<bool>,
    },
    /// A command passed every check and was carried out (`outcome: "done"`) or arrived after the
    /// harness had gone and was answered `"ended"`.
    /// `person` is who sent it (the command's sealed `by`), when it names one.
    #[serde(rename = "hangar.command")]
    Command {
        name: String,
        seq: u64,
        kind: String,
        outcome: CommandOutcome,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        person: Option<String>,
        /// A prompt's or steer's words, as the person sent them (issue 21: people's words are
        /// kept in the record, sealed with it).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        text: Option<String>,
    },
    /// A command was refused; nothing was executed. `code` is machine-readable (e.g. `bad_mac`,
    /// `replay`, `nonce_reuse`, `wrong_run`, `unknown_kind`, `not_json`, `too_large`,
    /// `unknown_request`, `already_answered`), `reason` says it in words.
    #[serde(rename = "hangar.refused")]
    Refused {
        name: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        seq: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        kind: Option<String>,
        code: String,
        reason: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        person: Option<String>,
    },
    /// The harness asks whether a tool may run; a person answers with `approve` or `deny`.
    #[serde(rename = "hangar.approval")]
    Approval {
        request_id: String,
        tool_name: String,
        input: Value,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        tool_use_id: Option<String>,
    },
    /// A permission request was answered. `decision` is `allow`, `deny` or `cancelled` (the
    /// harness withdrew it, e.g. after an interrupt); `by` is `command` (with its `seq`) or
    /// `policy` (e.g. `auto`). An answer by command names its `person` (the command's sealed
    /// `by`) and, with a deny, the person's `note`; an allow whose input the person changed
    /// carries the input the tool ran with (`updated_input`).
    #[serde(rename = "hangar.approval_answered")]
    ApprovalAnswered {
        request_id: String,
        decision: ApprovalDecision,
        by: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        seq: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        person: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        note: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        updated_input: Option<Value>,
    },
    /// An interrupt was carried out: command `seq` (0: Ctrl-C in the turn's terminal) from
    /// `person`. What it stopped: `answering`, the messages (by `seq`) whose answer was under
    /// way, and `approvals`, the permission requests still waiting (the harness withdraws them).
    /// `queued` are the messages the model had not begun: they still run after the interrupt
    /// (Claude Code keeps them; the driver passes Codex's on as a new turn), so a turn whose
    /// queued message then ran ends by that message's result, not as interrupted.
    #[serde(rename = "hangar.interrupted")]
    Interrupted {
        seq: u64,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        person: Option<String>,
        #[serde(default)]
        answering: Vec<u64>,
        #[serde(default)]
        queued: Vec<u64>,
        #[serde(default)]
        approvals: Vec<String>,
    },
    /// The turn is over and the driver is exiting with `status` (0 success, 1 harness error,
    /// harness gone without a result, or the job's check failed; 130 interrupted with no new
    /// message). `reason` is `result` or `harness_exited`. `handed_back` lists the sequence
    /// numbers of the messages answered `ended`, which the control plane starts the next turn
    /// with. `verify` is the job's check's final state when the turn had one: `passed`,
    /// `failed` (after `verify_rounds` rounds of feedback) or `not_run`.
    #[serde(rename = "hangar.turn_end")]
    TurnEnd {
        status: i32,
        reason: String,
        handed_back: Vec<u64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        verify: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        verify_rounds: Option<u32>,
    },
    /// One run of the job's check (S22). `round` counts from 1; `outcome` is `passed`,
    /// `feedback` (failed; the output went back to the agent as the next message) or `failed`
    /// (failed with no rounds left); `output_tail` is the last few KiB of its output.
    #[serde(rename = "hangar.verify")]
    Verify {
        round: u32,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        exit_code: Option<i32>,
        ms: u64,
        outcome: VerifyOutcome,
        output_tail: String,
    },
    /// hangar's deny-risky rules refused a tool call before anyone was asked (under every
    /// policy). `request_id` is the harness's permission request or hook callback; `rule` is
    /// `deny-risky/<id>`, `reason` what the agent was told.
    #[serde(rename = "hangar.rules_denied")]
    RulesDenied {
        request_id: String,
        tool_name: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        tool_use_id: Option<String>,
        rule: String,
        reason: String,
    },
    /// Something the person should know that does not stop the turn.
    #[serde(rename = "hangar.warning")]
    Warning { message: String },
    /// Something that stops the turn.
    #[serde(rename = "hangar.error")]
    Error { message: String },
}

impl HangarLine {
    /// The line as written to the run log (no trailing newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses a run-log line that is one of hangar's; `None` for harness lines.
    pub fn parse(line: &str) -> Option<HangarLine> {
        if !line.contains("\"hangar.") {
            return None;
        }
        serde_json::from_str(line).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_carry_their_type_tag_and_parse_back() {
        let l = HangarLine::Approval {
            request_id: "r1".into(),
            tool_name: "Bash".into(),
            input: json!({"command": "ls"}),
            tool_use_id: Some("toolu_1".into()),
        };
        let s = l.to_json();
        assert!(s.starts_with(r#"{"type":"hangar.approval","#), "{s}");
        assert_eq!(HangarLine::parse(&s), Some(l));
        assert_eq!(HangarLine::parse(r#"{"type":"result"}"#), None);
    }

    /// The closed words print exactly as the strings they replaced (the seals cover the bytes),
    /// and a word outside the set is not one of hangar's lines.
    #[test]
    fn closed_words_keep_their_wire_form() {
        let lines = [
            r#"{"type":"hangar.command","name":"0000000001-ab.cmd","seq":1,"kind":"prompt","outcome":"done"}"#,
            r#"{"type":"hangar.command","name":"0000000002-ab.cmd","seq":2,"kind":"steer","outcome":"ended"}"#,
            r#"{"type":"hangar.approval_answered","request_id":"r","decision":"cancelled","by":"policy"}"#,
            r#"{"type":"hangar.tree","phase":"start","tree":"t","ms":1}"#,
            r#"{"type":"hangar.verify","round":1,"exit_code":1,"ms":2,"outcome":"feedback","output_tail":"x"}"#,
        ];
        for l in lines {
            let h = HangarLine::parse(l).unwrap();
            assert_eq!(h.to_json(), l);
        }
        assert_eq!(
            HangarLine::parse(&lines[0].replace("\"done\"", "\"maybe\"")),
            None
        );
    }

    #[test]
    fn usage_sums() {
        let mut u = ProcessUsage::default();
        u.add(&json!({"input_tokens": 11, "output_tokens": 7, "cache_read_input_tokens": 2}));
        u.add(&json!({"input_tokens": 1, "output_tokens": 1}));
        assert_eq!(
            u,
            ProcessUsage {
                input_tokens: 12,
                output_tokens: 8,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 2
            }
        );
    }
}
