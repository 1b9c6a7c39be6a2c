//! Sessions through the API: `session start`, `send`, `sessions`, `turn show`, `transcript`,
//! `audit` (the list).
//!
//! `session start` and `send` start turns, which a server must watch: they need one at
//! `HANGAR_URL` (`hangar serve`; `hangar run` brings its own for its turn). The others only read
//! what is stored, so with no server they read `$HANGAR_HOME`'s store in-process (as of the last
//! time a server watched its runs).

use std::future::Future;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

use crate::api::{Api, ApiError, seg};
use crate::exit::CliError;
use crate::local::{self, Conn};
use crate::run::TurnArgs;
use crate::{progress, serve};

/// Runs `f` on a runtime with a client: the server's, or one served in-process if `read_only`.
pub(crate) fn with_api<F, Fut>(home: &Path, read_only: bool, f: F) -> Result<ExitCode, CliError>
where
    F: FnOnce(Api) -> Fut,
    Fut: Future<Output = Result<ExitCode, CliError>>,
{
    let rt = serve::runtime()?;
    let result = rt.block_on(async {
        let conn = if read_only {
            local::connect(home)
                .await?
                .ok_or_else(|| CliError::Failed(local::nothing_here(home)))?
        } else {
            let api = Api::from_env(home)?;
            match api.health().await {
                Ok(()) => Conn { api, local: None },
                Err(ApiError::NoServer(why)) => {
                    return Err(CliError::Failed(format!(
                        "{why}: start one (`hangar serve`), or use `hangar run`, which serves for its own turn"
                    )));
                }
                Err(e) => return Err(e.into_cli()),
            }
        };
        let r = f(conn.api.clone()).await;
        conn.close().await;
        r
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// `404` as "no such THING".
pub(crate) fn not_found(what: &'static str, id: &str) -> impl FnOnce(ApiError) -> CliError {
    let id = id.to_owned();
    move |e| match e.status() {
        Some(404) => CliError::Failed(format!("no {what} {id}")),
        _ => e.into_cli(),
    }
}

/// `hangar session start [--dir D] [--harness H] [--policy P] … PROMPT`.
pub fn start(home: &Path, a: &TurnArgs) -> Result<ExitCode, CliError> {
    let body = a.session_body()?;
    with_api(home, false, |api| async move {
        let s: hangar_api::Started = api
            .post_as("/v1/sessions", &body)
            .await
            .map_err(|e| e.into_cli())?;
        progress::say(&format!("session: {}", s.session.id));
        progress::say(&format!("turn: {}", s.turn.summary.id));
        progress::say(&format!("run: {}", s.run.id));
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar send SESSION TEXT`: steers the running turn, or starts the next one.
pub fn send(home: &Path, session: &str, text: &str) -> Result<ExitCode, CliError> {
    let body = hangar_api::Text {
        text: text.to_owned(),
    };
    with_api(home, false, |api| async move {
        let r: hangar_api::CommandReply = api
            .post_as(&format!("/v1/sessions/{}/messages", seg(session)), &body)
            .await
            .map_err(not_found("session", session))?;
        match r.outcome {
            hangar_api::Outcome::NextTurn => {
                progress::say(&format!("turn: {}", r.turn.as_deref().unwrap_or("?")));
                progress::say(&format!("run: {}", r.run));
            }
            hangar_api::Outcome::Done => {
                progress::say(&format!("done: steered the running turn (run {})", r.run))
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar sessions [--json]`: the sessions this person may read, those waiting for an answer
/// first, then the newest, as a table (session, phase, requests waiting, person, harness,
/// folder, last prompt, age, tokens, cost), or the board's rows as JSON, one per line.
pub fn list(home: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    with_api(home, true, |api| async move {
        let path = "/v1/board?limit=1000";
        let r = api.get(path).await.map_err(|e| e.into_cli())?;
        // `--json` prints the server's objects as they came; the table reads the typed fields.
        let raw = r["sessions"].as_array().cloned().unwrap_or_default();
        let board: hangar_api::Board = api.typed(path, r).map_err(|e| e.into_cli())?;
        if json_out {
            for row in &raw {
                progress::say(&row.to_string());
            }
            return Ok(ExitCode::SUCCESS);
        }
        if board.sessions.is_empty() {
            progress::say("no sessions");
            return Ok(ExitCode::SUCCESS);
        }
        progress::say(&session_table(
            &board.sessions,
            now_ms(),
            progress::colour(),
        ));
        Ok(ExitCode::SUCCESS)
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The board's rows as `hangar sessions` prints them (their order kept: waiting first, then
/// the newest); the phase coloured when `colour`.
fn session_table(rows: &[hangar_api::BoardRow], now: i64, colour: bool) -> String {
    let ids: Vec<&str> = rows.iter().map(|r| r.session.id.as_str()).collect();
    let short = progress::short_ids(&ids);
    let phases: Vec<String> = rows
        .iter()
        .map(|r| r.phase.map_or_else(|| "new".to_owned(), |p| p.to_string()))
        .collect();
    let cells = rows
        .iter()
        .zip(&short)
        .zip(&phases)
        .map(|((r, id), phase)| {
            let folder = r.sandbox.as_ref().map_or_else(
                || "?".to_owned(),
                |sb| match sb.environment.as_str() {
                    "" | "local" => sb.workdir.clone(),
                    env => format!("{} ({env})", sb.workdir),
                },
            );
            let prompt = r.turns.last().map_or("", |t| t.prompt.as_str());
            let tokens = r.usage.input_tokens.max(0) as u64 + r.usage.output_tokens.max(0) as u64;
            vec![
                id.clone(),
                phase.clone(),
                if r.waiting > 0 {
                    r.waiting.to_string()
                } else {
                    String::new()
                },
                r.person.clone().unwrap_or_else(|| "?".into()),
                word(&r.session.harness),
                progress::short_tail(&folder, 40),
                progress::short(prompt, 50),
                progress::age(now.saturating_sub(r.session.created_at)),
                progress::thousands(tokens),
                r.cost_usd.map_or_else(String::new, progress::money),
            ]
        })
        .collect();
    let table = progress::table(
        &[
            "SESSION", "STATE", "WAITING", "PERSON", "HARNESS", "FOLDER", "PROMPT", "AGE",
            "TOKENS", "COST",
        ],
        cells,
    );
    if !colour {
        return table;
    }
    // Colour after the layout, so the widths are the words' own.
    let mut lines: Vec<String> = table.lines().map(str::to_owned).collect();
    for (line, (id, phase)) in lines.iter_mut().skip(1).zip(short.iter().zip(&phases)) {
        if let Some(at) = line[id.len()..].find(phase.as_str()) {
            let at = id.len() + at;
            line.replace_range(at..at + phase.len(), &progress::paint_phase(phase, true));
        }
    }
    lines.join("\n")
}

/// `hangar turn show TURN`: the turn as JSON, with its manifest.
pub fn turn_show(home: &Path, turn: &str) -> Result<ExitCode, CliError> {
    with_api(home, true, |api| async move {
        let path = format!("/v1/turns/{}", seg(turn));
        let t = api.get(&path).await.map_err(not_found("turn", turn))?;
        // Printed as it came (every field, even one this CLI does not know), once it reads as
        // the API's turn.
        api.typed::<hangar_api::Turn>(&path, t.clone())
            .map_err(|e| e.into_cli())?;
        let pretty = serde_json::to_string_pretty(&t)
            .map_err(|e| CliError::Failed(format!("cannot show the turn: {e}")))?;
        progress::say(&pretty);
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar diff RUN`: the run's steps (the trees the driver recorded); with `--from N --to M`,
/// the files that changed between two steps with their lines added and deleted (`--patch`: and
/// git's patch; `--json`: the API's answer).
pub fn diff(
    home: &Path,
    run: &str,
    from: Option<usize>,
    to: Option<usize>,
    patch: bool,
    json_out: bool,
) -> Result<ExitCode, CliError> {
    let (from, to) = match (from, to) {
        (Some(f), Some(t)) => (f, t),
        (None, None) => return steps(home, run, json_out),
        _ => {
            return Err(CliError::Usage(
                "give both --from N and --to M (or neither, to list the run's steps)".into(),
            ));
        }
    };
    with_api(home, true, |api| async move {
        let path = format!("/v1/runs/{}/diff?from={from}&to={to}", seg(run));
        let d = api.get(&path).await.map_err(not_found("run", run))?;
        if json_out {
            progress::say(&d.to_string());
            return Ok(ExitCode::SUCCESS);
        }
        let d: hangar_api::Diff = api.typed(&path, d).map_err(|e| e.into_cli())?;
        let files = &d.files;
        let (mut added, mut deleted) = (0u64, 0u64);
        for f in files {
            added += f.added.unwrap_or(0);
            deleted += f.deleted.unwrap_or(0);
            let counts = match (f.added, f.deleted) {
                (Some(a), Some(d)) => format!("+{a} -{d}"),
                _ => "binary".to_owned(),
            };
            progress::say(&format!("{counts}\t{}", f.path));
        }
        progress::say(&format!(
            "step {from} -> step {to}: {} files changed, {added} insertions(+), {deleted} deletions(-)",
            files.len()
        ));
        if patch {
            progress::say(d.patch.trim_end());
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn steps(home: &Path, run: &str, json_out: bool) -> Result<ExitCode, CliError> {
    with_api(home, true, |api| async move {
        let path = format!("/v1/runs/{}/steps", seg(run));
        let s = api.get(&path).await.map_err(not_found("run", run))?;
        // `--json` prints the server's objects as they came; the lines read the typed fields.
        let raw = s["steps"].as_array().cloned().unwrap_or_default();
        let s: hangar_api::Steps = api.typed(&path, s).map_err(|e| e.into_cli())?;
        for (st, raw) in s.steps.iter().zip(&raw) {
            if json_out {
                progress::say(&raw.to_string());
                continue;
            }
            let what = match (st.phase, st.tool_use_id.as_deref()) {
                (Some(p), _) => word(&p),
                (None, Some(t)) => format!("after {t}"),
                _ => "?".to_owned(),
            };
            let mut line = format!("step {}\t{}\t{what}", st.step, st.tree);
            if !st.trusted {
                line.push_str("\tuntrusted");
            }
            // What the driver did not hash, when it says so in words.
            if let Some(why) = st.skipped.as_ref().and_then(Value::as_str) {
                line.push_str(&format!("\tskipped: {why}"));
            }
            progress::say(&line);
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar transcript SESSION [--json]`: the conversation, one line per entry.
pub fn transcript(home: &Path, session: &str, json_out: bool) -> Result<ExitCode, CliError> {
    with_api(home, true, |api| async move {
        let s: hangar_api::SessionTurns = api
            .get_as(&format!("/v1/sessions/{}", seg(session)))
            .await
            .map_err(not_found("session", session))?;
        let t: hangar_api::Transcript = api
            .get_as(&format!("/v1/sessions/{}/transcript", seg(session)))
            .await
            .map_err(not_found("session", session))?;
        let entries = t.entries;
        let prompts: Vec<String> = s.turns.into_iter().map(|t| t.summary.prompt).collect();
        if json_out {
            for e in &entries {
                progress::say(&e.to_string());
            }
        } else {
            for line in render(&entries, &prompts) {
                progress::say(&line);
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `text` on one line.
fn flat(text: &str) -> String {
    text.split('\n')
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join(" ⏎ ")
}

/// The conversation's entries as lines. What a person sent comes with its text (from the
/// server's record of the commands); without one, a turn's first prompt is the turn's prompt
/// (`prompts`, in turn order) and other messages show as their command and number.
fn render(entries: &[Value], prompts: &[String]) -> Vec<String> {
    let mut turn = 0usize;
    let mut out = Vec::new();
    for e in entries {
        let first_prompt = e["command"] == "prompt" && e["seq"] == 1;
        let line = match e["kind"].as_str().unwrap_or_default() {
            "sent" if e["text"].is_string() => {
                turn += usize::from(first_prompt);
                let text = flat(e["text"].as_str().unwrap_or_default());
                // Who sent it and when, as the server recorded it (issue 21).
                match (e["by"].as_str(), e["at"].as_i64(), e["command"].as_str()) {
                    (Some(by), Some(at), command) => {
                        format!("{by} ({}, {}): {text}", command.unwrap_or("?"), time(at))
                    }
                    (_, _, Some("prompt")) => format!("you: {text}"),
                    (_, _, other) => format!("you ({}): {text}", other.unwrap_or("?")),
                }
            }
            "sent" if first_prompt => {
                let p = prompts.get(turn).map_or("(prompt)", String::as_str);
                turn += 1;
                format!("you: {}", flat(p))
            }
            "sent" => format!(
                "you: ({} #{})",
                e["command"].as_str().unwrap_or("?"),
                e["seq"]
            ),
            "user" => format!("user: {}", flat(e["text"].as_str().unwrap_or_default())),
            "assistant" => format!(
                "assistant{}: {}",
                if e["unverified"] == true {
                    format!(" {}", progress::UNVERIFIED)
                } else {
                    String::new()
                },
                flat(e["text"].as_str().unwrap_or_default())
            ),
            "tool" => {
                let mut l = format!(
                    "tool: {} {}",
                    e["name"].as_str().unwrap_or("?"),
                    progress::short(&e["input"].to_string(), 300)
                );
                if let Some(d) = e["approval"]["decision"].as_str() {
                    l.push_str(&answered(d, &e["approval"]));
                } else if e["approval"].is_object() {
                    l.push_str(" [waiting for approval]");
                }
                if e["result"].is_object() {
                    l.push_str(&result(&e["result"]));
                }
                l
            }
            "approval" => format!(
                "approval: {} {} [{}]",
                e["tool_name"].as_str().unwrap_or("?"),
                progress::short(&e["input"].to_string(), 300),
                e["approval"]["decision"].as_str().unwrap_or("waiting")
            ),
            "tool_result" => format!("tool result:{}", result(&e["result"])),
            "verify" => format!(
                "check round {}: {} (exit {})",
                e["round"],
                e["outcome"].as_str().unwrap_or("?"),
                e["exit_code"]
                    .as_i64()
                    .map_or("none".to_owned(), |c| c.to_string())
            ),
            "failed" => format!(
                "failed ({}): {}",
                e["status"].as_str().unwrap_or("?"),
                flat(e["text"].as_str().unwrap_or_default())
            ),
            "error" => format!("error: {}", flat(e["message"].as_str().unwrap_or_default())),
            _ => e.to_string(),
        };
        out.push(line);
    }
    out
}

/// An approval's answer in a transcript line: who, and their words or their edit.
fn answered(decision: &str, a: &Value) -> String {
    let mut s = format!(" [{decision} by {}", a["by"].as_str().unwrap_or("?"));
    if let Some(n) = a["note"].as_str().filter(|n| !n.is_empty()) {
        s.push_str(&format!(": {}", flat(n)));
    }
    if a["updated_input"].is_object() {
        s.push_str(&format!(
            ", input changed to {}",
            progress::short(&a["updated_input"].to_string(), 200)
        ));
    }
    s.push(']');
    s
}

fn result(r: &Value) -> String {
    format!(
        " → {}{}",
        if r["is_error"] == true {
            "(error) "
        } else {
            ""
        },
        progress::short(r["output"].as_str().unwrap_or_default(), 300)
    )
}

/// `hangar audit [--json]`: every record of the audit log, oldest first.
pub fn audit(home: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    with_api(home, true, |api| async move {
        let mut after = 0i64;
        loop {
            let path = format!("/v1/audit?after={after}&limit=500");
            let page = api.get(&path).await.map_err(|e| e.into_cli())?;
            let raw = page["records"].as_array().cloned().unwrap_or_default();
            let page: hangar_api::AuditRecords =
                api.typed(&path, page).map_err(|e| e.into_cli())?;
            let Some(last) = page.records.last() else {
                break;
            };
            let next = last.seq;
            for (r, raw) in page.records.iter().zip(&raw) {
                if json_out {
                    progress::say(&raw.to_string());
                } else {
                    progress::say(&format!(
                        "{}  {}  {}  {}  {}",
                        r.seq,
                        time(r.at),
                        r.actor,
                        r.action,
                        r.detail
                    ));
                }
            }
            if next <= after {
                break;
            }
            after = next;
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// A closed word of the API as it is spelled on the wire.
fn word(w: &impl serde::Serialize) -> String {
    match serde_json::to_value(w) {
        Ok(Value::String(s)) => s,
        _ => "?".to_owned(),
    }
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub(crate) fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn board_row(id: &str, phase: &str, waiting: i64, prompt: &str) -> hangar_api::BoardRow {
        serde_json::from_value(json!({
            "id": id, "sandbox_id": "sb-1", "harness": "claude", "policy": "ask",
            "harness_session_id": null, "options": {}, "turn_count": 1, "created_at": 1_000,
            "person": "ada@example.com",
            "sandbox": {"id": "sb-1", "environment": "team", "kind": "docker",
                        "workdir": "/work/app", "person": "ada@example.com"},
            "state": "running", "phase": phase, "waiting": waiting,
            "usage": {"input_tokens": 12_000, "output_tokens": 345, "cached_input_tokens": 0},
            "cost_usd": 0.000_319_999_999_999_999_97, "fork": null,
            "turns": [{"id": "turn-1", "session_id": id, "index": 0, "run_id": null,
                       "state": "running", "phase": phase, "phase_detail": null,
                       "waiting": waiting, "status": null, "reason": null, "prompt": prompt,
                       "verify_state": null,
                       "usage": {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0},
                       "cost_usd": null, "created_at": 1_000, "started_at": null,
                       "ended_at": null, "git_trees": null}]
        }))
        .unwrap()
    }

    #[test]
    fn the_sessions_table_has_a_header_aligned_columns_and_short_ids() {
        let rows = vec![
            board_row(
                "ses-3fa9c2d100000000000000aa",
                "waiting",
                2,
                "fix the build",
            ),
            board_row(
                "ses-3fa9c2d200000000000000bb",
                "succeeded",
                0,
                "add a test\nplease",
            ),
        ];
        let t = session_table(&rows, 1_000 + 125_000, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("SESSION"), "{t}");
        for col in [
            "STATE", "WAITING", "PERSON", "FOLDER", "PROMPT", "AGE", "TOKENS", "COST",
        ] {
            assert!(lines[0].contains(col), "{col} missing: {t}");
        }
        // Ids cut to where they differ, rows in the board's order (waiting first).
        assert!(lines[1].starts_with("ses-3fa9c2d1 "), "{t}");
        assert!(lines[2].starts_with("ses-3fa9c2d2 "), "{t}");
        // Every column starts at the same place on each line.
        let at = |l: &str, w: &str| l.find(w).unwrap();
        assert_eq!(at(lines[0], "STATE"), at(lines[1], "waiting"));
        assert_eq!(at(lines[0], "STATE"), at(lines[2], "succeeded"));
        assert_eq!(at(lines[0], "PROMPT"), at(lines[2], "add a test please"));
        assert!(lines[1].contains("/work/app (team)"), "{t}");
        assert!(
            lines[1].contains("2m 05s") && lines[1].contains("12,345"),
            "{t}"
        );
        assert!(lines[1].contains("$0.0003"), "{t}");
        assert!(!t.contains('\x1b'), "colour without a terminal: {t:?}");
        let c = session_table(&rows, 1_000, true);
        assert!(c.contains("\x1b[1;33mwaiting\x1b[0m"), "{c:?}");
        assert!(c.contains("\x1b[32msucceeded\x1b[0m"), "{c:?}");
    }

    #[test]
    fn short_ids_are_unique_among_their_list() {
        let a = format!("run-3fa9c2{}", "0".repeat(18));
        let b = format!("run-3fa9c2d{}", "1".repeat(17));
        let c = format!("run-77{}", "2".repeat(22));
        let s = progress::short_ids(&[&a, &b, &c]);
        assert_eq!(s, ["run-3fa9c20", "run-3fa9c2d", "run-772222"]);
        assert_eq!(progress::short_ids(&["toolu_01"]), ["toolu_01"]);
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        assert_eq!(time(1_709_210_096_000), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn a_transcript_is_one_line_per_entry() {
        let entries = vec![
            json!({"kind": "sent", "seq": 1, "command": "prompt"}),
            json!({"kind": "tool", "tool_use_id": "t1", "name": "Bash", "input": {"command": "ls"},
                   "approval": {"request_id": "q", "decision": "allow", "by": "command"},
                   "result": {"output": "a\nb", "is_error": false}}),
            json!({"kind": "assistant", "text": "two\nlines"}),
            json!({"kind": "sent", "seq": 2, "command": "steer"}),
            json!({"kind": "sent", "seq": 3, "command": "steer", "text": "use tabs", "by": "a@b.c"}),
            json!({"kind": "sent", "seq": 4, "command": "steer", "text": "no, spaces", "by": "a@b.c", "at": 1_709_210_096_000_i64}),
            json!({"kind": "tool", "tool_use_id": "t2", "name": "Bash", "input": {"command": "rm x"},
                   "approval": {"request_id": "r", "decision": "deny", "by": "a@b.c", "note": "keep x"}}),
            json!({"kind": "tool", "tool_use_id": "t3", "name": "Bash", "input": {"command": "ls /"},
                   "approval": {"request_id": "s", "decision": "allow", "by": "a@b.c", "updated_input": {"command": "ls"}}}),
            json!({"kind": "sent", "seq": 1, "command": "prompt"}),
            json!({"kind": "sent", "seq": 1, "command": "prompt", "text": "third", "by": "a@b.c"}),
        ];
        let lines = render(&entries, &["make it".into(), "again".into()]);
        assert_eq!(
            lines,
            vec![
                "you: make it",
                r#"tool: Bash {"command":"ls"} [allow by command] → a b"#,
                "assistant: two ⏎ lines",
                "you: (steer #2)",
                "you (steer): use tabs",
                "a@b.c (steer, 2024-02-29T12:34:56Z): no, spaces",
                r#"tool: Bash {"command":"rm x"} [deny by a@b.c: keep x]"#,
                r#"tool: Bash {"command":"ls /"} [allow by a@b.c, input changed to {"command":"ls"}]"#,
                "you: again",
                "you: third",
            ]
        );
    }
}
