//! Reading a run's log: `hangar log` and `hangar approvals`, through the server when one
//! answers at `HANGAR_URL`, else from the run's files under `$HANGAR_HOME` (the log is the
//! truth; with no server running, nothing keeps the store's copy of it current).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use hangar_mailbox::ctl::{self, ControlDir};
use hangar_protocol::runlog::HangarLine;
use serde_json::{Value, json};

use crate::api::{self, Api, ApiError, seg};
use crate::exit::CliError;
use crate::follow::{LogFollower, POLL, Polled};
use crate::{progress, serve};

/// Follows a growing file by byte offset, yielding complete lines only.
#[derive(Debug)]
pub struct Tail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl Tail {
    pub fn new(path: PathBuf) -> Tail {
        Tail {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The complete lines written since the last call.
    pub fn read_lines(&mut self) -> Vec<String> {
        let Ok(mut f) = File::open(&self.path) else {
            return Vec::new();
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        let Ok(n) = f.read_to_end(&mut buf) else {
            return Vec::new();
        };
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf);
        let Some(last_nl) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(last_nl + 1);
        let whole = std::mem::replace(&mut self.partial, rest);
        String::from_utf8_lossy(&whole)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn run_log(home: &Path, run: &str) -> Result<PathBuf, CliError> {
    let path = ControlDir::for_run(home, run).run_log();
    if !ControlDir::for_run(home, run).root().exists() {
        if let Some(at) = pruned_at(home, run) {
            return Err(CliError::Failed(format!(
                "run {run}'s log was pruned by retention (at {at} ms since the epoch); its record, commands, approvals and audit records remain"
            )));
        }
        return Err(CliError::Failed(format!(
            "no run {run} under {} (and no hangar server answers at {}; is HANGAR_HOME or HANGAR_URL right?)",
            home.display(),
            api::url_from_env()
        )));
    }
    Ok(path)
}

/// A run named by a prefix of its id (`run-3fa9`, `3fa9`), made whole through the server or
/// this machine's store (`GET /v1/ids/{prefix}`), since a run's files are named by the whole
/// id; a whole id as it is.
pub(crate) fn whole_run(home: &Path, run: &str) -> Result<String, CliError> {
    let hex = run.strip_prefix("run-").unwrap_or("");
    if hex.len() == 24 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(run.to_owned());
    }
    let prefix = run.to_owned();
    let mut found = None;
    let slot = &mut found;
    let r = crate::sessions::with_api(home, true, |api| async move {
        let path = format!("/v1/ids/{}", seg(&prefix));
        match api.get_as::<hangar_api::IdInfo>(&path).await {
            Ok(info) if info.kind == "run" => *slot = Some(info.id),
            Ok(info) => {
                return Err(CliError::Usage(format!(
                    "{prefix:?} names {} {}, not a run",
                    info.kind, info.id
                )));
            }
            Err(e) if e.status() == Some(404) => {}
            Err(e) => return Err(e.into_cli()),
        }
        Ok(ExitCode::SUCCESS)
    });
    match r {
        Ok(_) => Ok(found.unwrap_or_else(|| run.to_owned())),
        // No server and no store here: the id is taken as given (and found or not by its files).
        Err(CliError::Failed(_)) => Ok(run.to_owned()),
        Err(e) => Err(e),
    }
}

fn check_run_id(run: &str) -> Result<(), CliError> {
    if ctl::valid_run_id(run) {
        Ok(())
    } else {
        Err(CliError::Usage(format!("{run:?} is not a run id")))
    }
}

/// Whether the run log at `path` holds the turn's end.
pub fn log_has_ended(path: &Path) -> bool {
    Tail::new(path.to_owned())
        .read_lines()
        .iter()
        .any(|l| matches!(HangarLine::parse(l), Some(HangarLine::TurnEnd { .. })))
}

/// The server at `HANGAR_URL`, if one answers; `None` when nothing listens there.
async fn server(home: &Path) -> Result<Option<Api>, CliError> {
    let api = Api::from_env(home)?;
    match api.health().await {
        Ok(()) => Ok(Some(api)),
        Err(ApiError::NoServer(_)) => Ok(None),
        Err(e) => Err(e.into_cli()),
    }
}

/// `hangar log RUN [--follow] [--json]`: through the server when one answers (following it
/// through a restart), else from the run log file itself; shown as `hangar run` shows a turn
/// (`progress::Printer`), or the raw lines with `--json`.
pub fn log(home: &Path, run: &str, follow: bool, json: bool) -> Result<ExitCode, CliError> {
    check_run_id(run)?;
    let run = &whole_run(home, run)?;
    let rt = serve::runtime()?;
    let printer = progress::Printer::new(run, json);
    let result = rt.block_on(async {
        match server(home).await? {
            Some(api) => log_from_server(api, run, follow, printer).await,
            None => log_from_file(home, run, follow, printer).await,
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn log_from_server(
    api: Api,
    run: &str,
    follow: bool,
    mut printer: progress::Printer,
) -> Result<ExitCode, CliError> {
    let mut f = LogFollower::new(api, run);
    let mut told = false;
    loop {
        match f.poll().await? {
            Polled::Lines(lines) => {
                let quiet = lines.is_empty();
                if printer.raw() && !told && !f.verified && !lines.is_empty() {
                    // Raw lines cannot be marked, so say it once here (the printer marks text).
                    told = true;
                    progress::note(&format!(
                        "this run's log is not verified, so what it says the assistant wrote is not known to be the model's: {}",
                        f.why.as_deref().unwrap_or("the server did not say it was")
                    ));
                }
                printer.verified(f.verified, f.why.as_deref());
                for line in &lines {
                    printer.line(line);
                }
                if f.turn_over() || (!follow && quiet) {
                    return Ok(ExitCode::SUCCESS);
                }
                if quiet {
                    tokio::time::sleep(POLL).await;
                }
            }
            Polled::Lost(_) if !follow => {
                return Err(CliError::Failed(format!(
                    "lost the server at {} while reading the log",
                    f.api.base()
                )));
            }
            Polled::Lost(_) => tokio::time::sleep(f.backoff()).await,
        }
    }
}

async fn log_from_file(
    home: &Path,
    run: &str,
    follow: bool,
    mut printer: progress::Printer,
) -> Result<ExitCode, CliError> {
    let mut tail = Tail::new(run_log(home, run)?);
    // Without the server nothing checks the log's seals (the key is in its vault).
    progress::note(
        "no server answers: the run log is shown as the file holds it, its seals not checked, so lines the agent may have appended are not told apart (start hangar serve to see it checked)",
    );
    loop {
        let mut ended = false;
        for line in tail.read_lines() {
            ended |= matches!(HangarLine::parse(&line), Some(HangarLine::TurnEnd { .. }));
            printer.line(&line);
        }
        if !follow || ended {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The permission requests asked and not yet answered, in the order they were asked.
pub fn pending_approvals(lines: &[String]) -> Vec<Value> {
    let mut pending: BTreeMap<usize, (String, Value)> = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        match HangarLine::parse(line) {
            Some(HangarLine::Approval {
                request_id,
                tool_name,
                input,
                tool_use_id,
            }) => {
                let v = json!({"request_id": request_id, "tool_name": tool_name, "input": input, "tool_use_id": tool_use_id});
                pending.insert(i, (request_id, v));
            }
            Some(HangarLine::ApprovalAnswered { request_id, .. }) => {
                pending.retain(|_, (id, _)| *id != request_id)
            }
            Some(HangarLine::TurnEnd { .. }) => pending.clear(),
            _ => {}
        }
    }
    pending.into_values().map(|(_, v)| v).collect()
}

/// The pending requests as the server keeps them (none once the run has ended).
async fn approvals_from_server(api: &Api, run: &str) -> Result<Vec<Value>, CliError> {
    let not_found = |e: ApiError| match e.status() {
        Some(404) => CliError::Failed(format!("no run {run} at {}", api.base())),
        _ => e.into_cli(),
    };
    let r: hangar_api::Run = api
        .get_as(&format!("/v1/runs/{}", seg(run)))
        .await
        .map_err(not_found)?;
    if r.state != hangar_api::RunState::Live {
        return Ok(Vec::new());
    }
    let a: hangar_api::Approvals = api
        .get_as(&format!("/v1/runs/{}/approvals", seg(run)))
        .await
        .map_err(not_found)?;
    Ok(a.approvals
        .into_iter()
        .map(|p| json!({"request_id": p.request_id, "tool_name": p.tool_name, "input": p.input}))
        .collect())
}

/// `hangar approvals [--json]`: the requests waiting for an answer in every live run this
/// person may answer, oldest first, as a table (run, session, person, tool, how long it has
/// waited, request id, command) or one JSON object per line (from the server, or this
/// machine's store).
pub fn approvals_everywhere(home: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    crate::sessions::with_api(home, true, |api| async move {
        let all: hangar_api::PendingApprovals = api
            .get_as("/v1/approvals")
            .await
            .map_err(|e| e.into_cli())?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let run_of = |id: &str| all.runs.iter().find(|r| r.run_id == id);
        // Ids cut to the prefixes that name them (every command takes them back).
        let short = |ids: Vec<&str>| -> std::collections::HashMap<String, String> {
            let cut = progress::short_ids(&ids);
            ids.into_iter().map(str::to_owned).zip(cut).collect()
        };
        let runs = short(all.approvals.iter().map(|p| p.run_id.as_str()).collect());
        let sessions = short(all.runs.iter().map(|r| r.session_id.as_str()).collect());
        let requests = short(
            all.approvals
                .iter()
                .map(|p| p.request_id.as_str())
                .collect(),
        );
        let mut rows = Vec::new();
        for p in &all.approvals {
            let r = run_of(&p.run_id);
            let waited = now.saturating_sub(p.requested_at);
            if json_out {
                progress::say(
                    &json!({
                        "run_id": p.run_id, "request_id": p.request_id, "tool_name": p.tool_name,
                        "input": p.input, "session_id": r.map(|r| &r.session_id),
                        "turn_id": r.map(|r| &r.turn_id), "person": r.map(|r| &r.person),
                        "environment": r.map(|r| &r.environment),
                        "requested_at": p.requested_at, "waiting_ms": waited,
                    })
                    .to_string(),
                );
            } else {
                let command = match p.input.get("command").and_then(Value::as_str) {
                    Some(c) => c.to_owned(),
                    None => p.input.to_string(),
                };
                rows.push(vec![
                    runs[&p.run_id].clone(),
                    r.map_or_else(|| "?".into(), |r| sessions[&r.session_id].clone()),
                    r.map_or_else(|| "?".into(), |r| r.person.clone()),
                    p.tool_name.clone(),
                    progress::age(waited),
                    requests[&p.request_id].clone(),
                    progress::short(&command, 60),
                ]);
            }
        }
        if !rows.is_empty() {
            progress::say(&progress::table(
                &[
                    "RUN", "SESSION", "PERSON", "TOOL", "WAITING", "REQUEST", "COMMAND",
                ],
                rows,
            ));
        }
        if all.approvals.is_empty() && !json_out {
            progress::say(&format!(
                "no permission requests are waiting ({} live runs)",
                all.live_runs
            ));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `hangar approvals RUN [--json]`: from the server when one answers, else from the run log.
pub fn approvals(home: &Path, run: &str, json_out: bool) -> Result<ExitCode, CliError> {
    check_run_id(run)?;
    let run = &whole_run(home, run)?;
    let rt = serve::runtime()?;
    let pending = rt.block_on(async {
        match server(home).await? {
            Some(api) => approvals_from_server(&api, run).await,
            None => Ok(pending_approvals(
                &Tail::new(run_log(home, run)?).read_lines(),
            )),
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    let pending = pending?;
    for p in &pending {
        if json_out {
            progress::say(&p.to_string());
        } else {
            progress::say(&format!(
                "{}  {}  {}",
                p["request_id"].as_str().unwrap_or_default(),
                p["tool_name"].as_str().unwrap_or_default(),
                progress::short(&p["input"].to_string(), 160)
            ));
        }
    }
    if pending.is_empty() && !json_out {
        progress::say("no permission requests are waiting");
    }
    Ok(ExitCode::SUCCESS)
}

/// When this machine's store says run `run` was pruned (only asked once its files are missing).
fn pruned_at(home: &Path, run: &str) -> Option<i64> {
    let settings = crate::serve::Plane::from_env(home);
    if let Some(db) = settings.database.strip_prefix("sqlite://")
        && !Path::new(db).exists()
    {
        return None;
    }
    // On a thread of its own: a caller may be inside a runtime already.
    let (db, run) = (settings.database, run.to_owned());
    std::thread::spawn(move || {
        crate::serve::runtime().ok()?.block_on(async {
            let store = hangar_store::Store::open(&db).await.ok()?;
            let at = store.run_pruned_at(&run).await.ok().flatten();
            store.close().await;
            at
        })
    })
    .join()
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answered_and_ended_requests_are_not_pending() {
        let lines: Vec<String> = [
            r#"{"type":"hangar.approval","request_id":"a","tool_name":"Bash","input":{"command":"ls"}}"#,
            r#"{"type":"hangar.approval","request_id":"b","tool_name":"Write","input":{}}"#,
            r#"{"type":"hangar.approval_answered","request_id":"a","decision":"allow","by":"command","seq":2}"#,
        ]
        .map(String::from)
        .to_vec();
        let p = pending_approvals(&lines);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0]["request_id"], "b");
        let mut ended = lines.clone();
        ended.push(
            r#"{"type":"hangar.turn_end","status":0,"reason":"result","handed_back":[]}"#.into(),
        );
        assert!(pending_approvals(&ended).is_empty());
    }

    #[test]
    fn tail_yields_only_complete_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "one\ntw").unwrap();
        let mut t = Tail::new(p.clone());
        assert_eq!(t.read_lines(), vec!["one"]);
        std::fs::write(&p, "one\ntwo\n").unwrap();
        assert_eq!(t.read_lines(), vec!["two"]);
        assert!(t.read_lines().is_empty());
    }
}
