//! What `hangar run` shows while a turn runs: one short line per thing a person cares about
//! (text, tool calls and results, approvals waiting, refusals, the result and its tokens).

use std::io::Write;

use hangar_protocol::runlog::{HangarLine, PROCESS_USAGE_FIELD};
use serde_json::Value;

/// How text that may not be the model's is marked.
pub const UNVERIFIED: &str = "(unverified)";

/// Writes one line to stdout (and flushes, so progress shows as it happens).
#[expect(clippy::print_stdout, reason = "the CLI's output")]
pub fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// Writes one line about the CLI itself (not the run) to stderr, so stdout stays the run's.
#[expect(clippy::print_stderr, reason = "the CLI's notes")]
pub fn note(line: &str) {
    eprintln!("hangar: {line}");
}

/// `s` cut to `max` characters, on one line.
pub fn short(s: &str, max: usize) -> String {
    let one: String = s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if one.chars().count() <= max {
        return one;
    }
    let mut cut: String = one.chars().take(max).collect();
    cut.push('…');
    cut
}

/// `s` cut to its last `max` characters (a path's end says most), on one line.
pub fn short_tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return short(s, max);
    }
    let tail: String = s.chars().skip(n - max).collect();
    format!("…{}", short(&tail, max))
}

/// Writes without a newline (and flushes): a streamed message's pieces.
#[expect(clippy::print_stdout, reason = "the CLI's output")]
fn put(text: &str) {
    print!("{text}");
    let _ = std::io::stdout().flush();
}

/// A piece of streamed text in a run-log line, and whether it is thinking: Claude Code's
/// `stream_event` `text_delta` / `thinking_delta` (not a subagent's), the driver's `item.delta`
/// for Codex.
fn delta(line: &str) -> Option<(String, bool)> {
    if !line.contains("\"stream_event\"") && !line.contains("\"item.delta\"") {
        return None;
    }
    let v: Value = serde_json::from_str(line).ok()?;
    match v["type"].as_str()? {
        "stream_event" if v["parent_tool_use_id"].is_null() => {
            let d = &v["event"]["delta"];
            match (v["event"]["type"].as_str()?, d["type"].as_str()?) {
                ("content_block_delta", "text_delta") => {
                    Some((d["text"].as_str()?.to_owned(), false))
                }
                ("content_block_delta", "thinking_delta") => {
                    Some((d["thinking"].as_str()?.to_owned(), true))
                }
                _ => None,
            }
        }
        "item.delta" => Some((v["delta"].as_str()?.to_owned(), v["kind"] == "reasoning")),
        _ => None,
    }
}

/// Rows under a header, each column aligned (comfy-table, no borders): what a person scans.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for r in rows {
        t.add_row(r);
    }
    t.lines()
        .map(|l| l.trim_end().trim_start().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// How long something has waited, as a person says it: `45s`, `3m 05s`, `2h 10m`, `3d 4h`.
pub fn age(ms: i64) -> String {
    let s = (ms.max(0) / 1000) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// A count with thousands separators: `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Dollars as a person reads them: cents from a cent up (`$1.25`, `$0.05`), four places below
/// (`$0.0003`), not the float's every digit (`$0.00031999999999999997`).
pub fn money(usd: f64) -> String {
    if !usd.is_finite() || usd <= 0.0 {
        return "$0.00".into();
    }
    if usd >= 0.01 {
        format!("${usd:.2}")
    } else if usd >= 0.00005 {
        format!("${usd:.4}")
    } else {
        "<$0.0001".into()
    }
}

/// The shortest prefix of each of `ids` that no other of them starts with: at least the id's
/// `KIND-` and six more characters (hangar's ids: `run-` and 24 hex digits), eight characters of
/// another id (a harness's request id), or the whole id when it is shorter. What lists and hints print; every command takes any unique prefix back.
pub fn short_ids(ids: &[&str]) -> Vec<String> {
    ids.iter()
        .map(|id| {
            let least = match id.split_once('-') {
                Some((kind, _)) if kind.bytes().all(|b| b.is_ascii_lowercase()) => kind.len() + 7,
                _ => 8,
            };
            hangar_protocol::short_id::shortest_unique(id, ids.iter().copied(), least).to_owned()
        })
        .collect()
}

/// Whether stdout is a terminal that takes colour (`NO_COLOR`, set to anything, says no:
/// no-color.org).
pub fn colour() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

/// A turn's phase word in its colour (SGR): yellow for `waiting`, green for `succeeded`, red for
/// what failed, dim for what is over without an outcome; as it is without colour.
pub fn paint_phase(word: &str, colour: bool) -> String {
    let sgr = match word {
        "waiting" => "1;33",
        "running" | "queued" => "36",
        "succeeded" => "32",
        "failed" | "blocked" | "verify_failed" | "refused" => "31",
        "interrupted" => "35",
        _ => return word.to_owned(),
    };
    if colour {
        format!("\x1b[{sgr}m{word}\x1b[0m")
    } else {
        word.to_owned()
    }
}

/// Turns run-log lines into progress lines.
#[derive(Debug)]
pub struct Printer {
    run: String,
    json: bool,
    /// The run's log could have been written by the agent: why (its text is marked).
    unverified: Option<String>,
    /// The person was told why, once.
    told: bool,
    /// A message being streamed is open on the terminal (no newline yet): `Some(thinking)`.
    open: Option<bool>,
    /// The text streamed of the current message, so its whole `assistant` line is not shown
    /// again.
    streamed: String,
    /// The kind of each command seen (`prompt`, `steer`, …) by its number, so a report that
    /// names messages by number says what they were.
    kinds: std::collections::HashMap<u64, String>,
}

impl Printer {
    pub fn new(run: &str, json: bool) -> Printer {
        Printer {
            run: run.to_owned(),
            json,
            unverified: None,
            told: false,
            open: None,
            streamed: String::new(),
            kinds: std::collections::HashMap::new(),
        }
    }

    /// What the server says of the run's log (`GET /v1/runs/{id}/log`'s `verified` and `why`):
    /// unless it is verified, the assistant's text and results are shown marked `(unverified)`.
    pub fn verified(&mut self, verified: bool, why: Option<&str>) {
        self.unverified = (!verified).then(|| {
            why.unwrap_or("the server did not say the log was verified")
                .to_owned()
        });
    }

    /// Whether the lines are printed as they are (`--json`).
    pub fn raw(&self) -> bool {
        self.json
    }

    pub fn line(&mut self, line: &str) {
        let out = self.render(line);
        if !out.is_empty() {
            put(&out);
        }
    }

    /// What [`Printer::line`] writes for `line`: whole lines, or a streamed message's pieces
    /// on one open line (closed by the next thing shown).
    fn render(&mut self, line: &str) -> String {
        if self.json {
            return format!("{line}\n");
        }
        let mut w = String::new();
        // Text as the model streams it: shown as it comes, on one open line.
        if let Some((piece, thinking)) = delta(line) {
            if self.open != Some(thinking) {
                if self.open.is_some() {
                    w.push('\n');
                }
                let what = if thinking { "thinking" } else { "assistant" };
                w.push_str(&format!("{}: ", self.said(what)));
                self.open = Some(thinking);
                if !thinking {
                    self.streamed.clear();
                }
            }
            if !thinking {
                self.streamed.push_str(&piece);
            }
            w.push_str(&piece);
            return w;
        }
        let mut outs = self.describe(line);
        if outs.is_empty() {
            return w;
        }
        if self.open.take().is_some() {
            w.push('\n');
        }
        // The whole message, already shown piece by piece, is not shown again.
        if !self.streamed.is_empty() {
            let whole = format!("{}: {}", self.said("assistant"), short(&self.streamed, 300));
            if let Some(i) = outs.iter().position(|o| *o == whole) {
                outs.remove(i);
                self.streamed.clear();
            }
        }
        for out in outs {
            if !self.told
                && let Some(why) = &self.unverified
                && out.contains(UNVERIFIED)
            {
                self.told = true;
                w.push_str(&format!(
                    "note: text marked {UNVERIFIED} is not known to be the model's: {why}\n"
                ));
            }
            w.push_str(&out);
            w.push('\n');
        }
        w
    }

    /// `what` marked when the run's log is unverified: `assistant` or `assistant (unverified)`.
    fn said(&self, what: &str) -> String {
        match self.unverified {
            Some(_) => format!("{what} {UNVERIFIED}"),
            None => what.to_owned(),
        }
    }

    fn describe(&mut self, line: &str) -> Vec<String> {
        if let Some(h) = HangarLine::parse(line) {
            return self.describe_hangar(h);
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return Vec::new();
        };
        match v["type"].as_str() {
            Some("assistant") => blocks(&v)
                .filter_map(|b| match b["type"].as_str() {
                    Some("text") => Some(format!(
                        "{}: {}",
                        self.said("assistant"),
                        short(b["text"].as_str().unwrap_or_default(), 300)
                    )),
                    Some("tool_use") => Some(format!(
                        "tool call: {} {}",
                        b["name"].as_str().unwrap_or("?"),
                        short(&b["input"].to_string(), 200)
                    )),
                    _ => None,
                })
                .collect(),
            Some("user") => blocks(&v)
                .filter(|b| b["type"] == "tool_result")
                .map(|b| {
                    let text = match &b["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let err = if b["is_error"] == true {
                        " (error)"
                    } else {
                        ""
                    };
                    format!("tool result{err}: {}", short(&text, 200))
                })
                .collect(),
            Some("item.started") if v["item"]["type"] == "command_execution" => {
                vec![format!(
                    "tool call: command {}",
                    short(v["item"]["command"].as_str().unwrap_or_default(), 200)
                )]
            }
            Some("item.completed") => describe_codex_item(&v["item"], &self.said("assistant")),
            Some("turn.completed") => vec![
                "result: completed".to_owned(),
                format!(
                    "tokens: input {} output {} (this turn; cached {})",
                    thousands(v["usage"]["input_tokens"].as_u64().unwrap_or(0)),
                    thousands(v["usage"]["output_tokens"].as_u64().unwrap_or(0)),
                    thousands(v["usage"]["cached_input_tokens"].as_u64().unwrap_or(0))
                ),
            ],
            Some("turn.failed") => vec![format!(
                "result: failed {}",
                short(v["error"]["message"].as_str().unwrap_or_default(), 300)
            )],
            Some("error") => vec![format!(
                "model error: {}",
                short(v["message"].as_str().unwrap_or_default(), 300)
            )],
            Some("result") => {
                let u = &v[PROCESS_USAGE_FIELD];
                // An answer an interrupt stopped: said so, not the CLI's diagnostic.
                let aborted = v["terminal_reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("aborted"));
                vec![
                    if aborted {
                        format!("{}: interrupted", self.said("result"))
                    } else {
                        format!(
                            "{}: {}{} {}",
                            self.said("result"),
                            v["subtype"].as_str().unwrap_or("?"),
                            if v["is_error"] == true {
                                " (error)"
                            } else {
                                ""
                            },
                            short(v["result"].as_str().unwrap_or_default(), 300)
                        )
                    },
                    format!(
                        "tokens: input {} output {} (this process); cost {}",
                        thousands(u["input_tokens"].as_u64().unwrap_or(0)),
                        thousands(u["output_tokens"].as_u64().unwrap_or(0)),
                        money(v["total_cost_usd"].as_f64().unwrap_or(0.0))
                    ),
                ]
            }
            _ => Vec::new(),
        }
    }

    fn describe_hangar(&mut self, h: HangarLine) -> Vec<String> {
        if let HangarLine::Command { seq, kind, .. } = &h {
            self.kinds.insert(*seq, kind.clone());
        }
        let run = &self.run;
        match h {
            HangarLine::Approval {
                request_id,
                tool_name,
                input,
                ..
            } => {
                // Short enough not to wrap: each id cut to a prefix that names it.
                let run = short_ids(&[run.as_str()]).remove(0);
                let req = short_ids(&[request_id.as_str()]).remove(0);
                vec![format!(
                    "approval waiting: {req} {tool_name} {}\n  answer: hangar approve {run} {req}   or: hangar deny {run} {req} --reason TEXT",
                    short(&input.to_string(), 200)
                )]
            }
            // Who answered and the words they gave (issue 21), the request by its short id.
            HangarLine::ApprovalAnswered {
                request_id,
                decision,
                by,
                person,
                note,
                updated_input,
                ..
            } => {
                let req = short_ids(&[request_id.as_str()]).remove(0);
                let who = match (person, by.as_str()) {
                    (Some(p), _) => format!(" by {p}"),
                    (None, "command") => String::new(),
                    (None, other) => format!(" by {other}"),
                };
                let words = note.filter(|n| !n.is_empty()).map(|n| format!(": {n}"));
                let edit = updated_input
                    .map(|u| format!(", with the input changed to {}", short(&u.to_string(), 200)));
                vec![format!(
                    "approval {req}: {decision}{who}{}{}",
                    words.unwrap_or_default(),
                    edit.unwrap_or_default()
                )]
            }
            // The command as the person knows it (its kind and number), not its file's name.
            HangarLine::Refused {
                name,
                seq,
                kind,
                reason,
                ..
            } => {
                let what = match (kind, seq) {
                    (Some(k), Some(n)) => format!("{k} #{n}"),
                    (Some(k), None) => k,
                    _ => format!("a command ({name})"),
                };
                vec![format!("command refused ({what}): {reason}")]
            }
            // A steer or a later prompt with its words and who sent it (issue 21).
            HangarLine::Command {
                kind,
                outcome,
                seq,
                person,
                text,
                ..
            } if kind != "prompt" || seq != 1 => {
                let words = text.map(|t| format!(" \"{}\"", short(&t, 120)));
                let from = person.map(|p| format!(" (from {p})"));
                vec![format!(
                    "{kind}: {outcome}{}{}",
                    words.unwrap_or_default(),
                    from.unwrap_or_default()
                )]
            }
            // What an interrupt stopped and what still runs (issue 21).
            HangarLine::Interrupted {
                seq,
                person,
                answering,
                queued,
                approvals,
            } => vec![hangar_events::interrupt::describe(
                seq,
                person.as_deref(),
                &answering,
                &queued,
                approvals.len(),
                |n| self.kinds.get(&n).cloned(),
            )],
            HangarLine::TurnEnd {
                status,
                verify,
                handed_back,
                ..
            } => {
                let word = match (status, verify.as_deref()) {
                    (130, _) => "interrupted",
                    (_, Some("failed")) => "verify failed",
                    (0, _) => "succeeded",
                    _ => "failed",
                };
                let mut out = format!("turn ended: status {status} ({word})");
                if !handed_back.is_empty() {
                    let names: Vec<String> = handed_back
                        .iter()
                        .map(|n| {
                            hangar_events::interrupt::named(
                                *n,
                                self.kinds.get(n).map(String::as_str),
                            )
                        })
                        .collect();
                    out.push_str(&format!(
                        "; not delivered, handed to the next turn: {}",
                        names.join(", ")
                    ));
                }
                vec![out]
            }
            HangarLine::Verify {
                round,
                outcome,
                exit_code,
                ..
            } => {
                vec![format!(
                    "check round {round}: {outcome} (exit {})",
                    exit_code.map_or("none".to_owned(), |c| c.to_string())
                )]
            }
            HangarLine::Warning { message } => vec![format!("warning: {message}")],
            HangarLine::RulesDenied {
                tool_name,
                rule,
                reason,
                ..
            } => vec![format!("denied {tool_name} ({rule}): {reason}")],
            HangarLine::Error { message } => vec![format!("error: {message}")],
            _ => Vec::new(),
        }
    }
}

/// A Codex item (as `codex exec --json` shows it) when it completes.
fn describe_codex_item(item: &Value, assistant: &str) -> Vec<String> {
    match item["type"].as_str() {
        Some("agent_message") => vec![format!(
            "{assistant}: {}",
            short(item["text"].as_str().unwrap_or_default(), 300)
        )],
        Some("command_execution") => vec![format!(
            "tool result ({}, exit {}): {}",
            item["status"].as_str().unwrap_or("?"),
            item["exit_code"],
            short(item["aggregated_output"].as_str().unwrap_or_default(), 200)
        )],
        Some("file_change") => {
            let paths: Vec<&str> = item["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["path"].as_str())
                .collect();
            vec![format!(
                "file change ({}): {}",
                item["status"].as_str().unwrap_or("?"),
                paths.join(", ")
            )]
        }
        _ => Vec::new(),
    }
}

fn blocks(v: &Value) -> impl Iterator<Item = &Value> {
    v["message"]["content"].as_array().into_iter().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_tables_read_as_people_write_them() {
        assert_eq!(age(-5), "0s");
        assert_eq!(age(45_999), "45s");
        assert_eq!(age(185_000), "3m 05s");
        assert_eq!(age(7_800_000), "2h 10m");
        assert_eq!(age(273_600_000), "3d 4h");
        assert_eq!(short_tail("/srv/work/app", 40), "/srv/work/app");
        assert_eq!(short_tail("/a/very/long/path/to/app", 8), "…h/to/app");
        let t = table(
            &["RUN", "TOOL"],
            vec![
                vec!["run-1".into(), "Bash".into()],
                vec!["run-22".into(), "Edit".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        let col = |l: &str, w: &str| l.find(w).unwrap();
        assert_eq!(col(lines[0], "TOOL"), col(lines[1], "Bash"), "{t}");
        assert_eq!(col(lines[1], "Bash"), col(lines[2], "Edit"), "{t}");
    }

    #[test]
    fn money_and_counts_read_as_people_write_them() {
        assert_eq!(money(0.000_319_999_999_999_999_97), "$0.0003");
        assert_eq!(money(0.05), "$0.05");
        assert_eq!(money(12.345), "$12.35");
        assert_eq!(money(0.0), "$0.00");
        assert_eq!(money(0.000_01), "<$0.0001");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn progress_names_tools_approvals_and_tokens() {
        let mut p = Printer::new("run-1", false);
        let tool = p.describe(r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash","input":{"command":"ls"}}]}}"#);
        assert_eq!(tool, vec![r#"tool call: Bash {"command":"ls"}"#]);
        let ap = p.describe(r#"{"type":"hangar.approval","request_id":"q1","tool_name":"Bash","input":{"command":"ls"}}"#);
        assert!(ap[0].starts_with("approval waiting: q1 Bash"), "{ap:?}");
        assert!(ap[0].contains("hangar approve run-1 q1"));
        let r = p.describe(r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","total_cost_usd":0.1,"hangar_process_usage":{"input_tokens":11,"output_tokens":7}}"#);
        assert_eq!(r[1], "tokens: input 11 output 7 (this process); cost $0.10");
        assert_eq!(short("abcdef", 3), "abc…");
    }

    /// An interrupt's report names messages by kind and number, as they were sent; messages
    /// handed back are named the same way.
    #[test]
    fn an_interrupt_says_what_it_stopped_and_what_still_runs() {
        let mut p = Printer::new("run-1", false);
        let mut shown = Vec::new();
        for l in [
            r#"{"type":"hangar.command","name":"1.cmd","seq":1,"kind":"prompt","outcome":"done","text":"go"}"#,
            r#"{"type":"hangar.command","name":"2.cmd","seq":2,"kind":"steer","outcome":"done","text":"and this"}"#,
            r#"{"type":"hangar.interrupted","seq":3,"person":"ada@example.com","answering":[1],"queued":[2],"approvals":["q1"]}"#,
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"terminal_reason":"aborted_streaming","errors":["[ede_diagnostic] x"]}"#,
            r#"{"type":"hangar.turn_end","status":0,"reason":"result","handed_back":[4]}"#,
        ] {
            shown.extend(p.describe(l));
        }
        assert_eq!(
            shown,
            [
                "steer: done \"and this\"",
                "interrupted by ada@example.com: stopped the answer to prompt #1; withdrew the \
                 waiting approval; steer #2 not yet begun, still runs",
                "result: interrupted",
                "tokens: input 0 output 0 (this process); cost $0.00",
                "turn ended: status 0 (succeeded); not delivered, handed to the next turn: \
                 message #4",
            ]
        );
    }

    #[test]
    fn streamed_text_shows_as_it_comes_and_its_whole_message_is_not_repeated() {
        let mut p = Printer::new("run-1", false);
        let piece = |t: &str| {
            format!(
                r#"{{"type":"stream_event","event":{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}},"parent_tool_use_id":null}}"#,
                serde_json::to_string(t).unwrap()
            )
        };
        let think = r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":"hmm"}},"parent_tool_use_id":null}"#;
        let sub = r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"sub"}},"parent_tool_use_id":"toolu_1"}"#;
        let stop = r#"{"type":"stream_event","event":{"type":"content_block_stop","index":0},"parent_tool_use_id":null}"#;
        let whole =
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"made it"}]}}"#;
        let mut shown = String::new();
        for l in [think, &piece("made"), &piece(" it"), sub, stop] {
            shown.push_str(&p.render(l));
        }
        // Open, piece by piece, with no newline yet; a subagent's piece is not the message's.
        assert_eq!(shown, "thinking: hmm\nassistant: made it");
        shown.push_str(&p.render(whole));
        shown.push_str(&p.render(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"made it"}"#,
        ));
        assert_eq!(
            shown.lines().take(3).collect::<Vec<_>>(),
            [
                "thinking: hmm",
                "assistant: made it",
                "result: success made it"
            ],
            "{shown}"
        );
        // Codex's pieces (the driver's `item.delta`), then its completed item.
        let mut p = Printer::new("run-1", false);
        let mut shown =
            p.render(r#"{"type":"item.delta","item_id":"m1","kind":"agent_message","delta":"yo"}"#);
        shown.push_str(
            &p.render(r#"{"type":"item.completed","item":{"type":"agent_message","text":"yo"}}"#),
        );
        assert_eq!(shown, "assistant: yo\n");
    }

    #[test]
    fn text_of_an_unverified_log_is_marked() {
        let mut p = Printer::new("run-1", false);
        let text = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#;
        assert_eq!(p.describe(text), vec!["assistant: hi"]);
        p.verified(false, Some("a plain folder"));
        assert_eq!(p.describe(text), vec!["assistant (unverified): hi"]);
        let codex = r#"{"type":"item.completed","item":{"type":"agent_message","text":"yo"}}"#;
        assert_eq!(p.describe(codex), vec!["assistant (unverified): yo"]);
        let r =
            p.describe(r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#);
        assert!(r[0].starts_with("result (unverified): success"), "{r:?}");
        p.verified(true, None);
        assert_eq!(p.describe(text), vec!["assistant: hi"]);
    }
}
