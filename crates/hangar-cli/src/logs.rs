//! Reading a run's log: `hangar log`, `hangar approvals`, and the tail behind `hangar run`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use hangar_protocol::ctl::{self, ControlDir};
use hangar_protocol::runlog::HangarLine;
use serde_json::{Value, json};

use crate::exit::CliError;
use crate::progress;

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
    if !ctl::valid_run_id(run) {
        return Err(CliError::Usage(format!("{run:?} is not a run id")));
    }
    let path = ControlDir::for_run(home, run).run_log();
    if !ControlDir::for_run(home, run).root().exists() {
        return Err(CliError::Failed(format!(
            "no run {run} under {} (is HANGAR_HOME right?)",
            home.display()
        )));
    }
    Ok(path)
}

/// `hangar log RUN [--follow]`.
pub fn log(home: &Path, run: &str, follow: bool) -> Result<ExitCode, CliError> {
    let mut tail = Tail::new(run_log(home, run)?);
    loop {
        let mut ended = false;
        for line in tail.read_lines() {
            ended |= matches!(HangarLine::parse(&line), Some(HangarLine::TurnEnd { .. }));
            progress::say(&line);
        }
        if !follow || ended {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(100));
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

/// `hangar approvals RUN [--json]`.
pub fn approvals(home: &Path, run: &str, json_out: bool) -> Result<ExitCode, CliError> {
    let lines = Tail::new(run_log(home, run)?).read_lines();
    let pending = pending_approvals(&lines);
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
