//! `hangar harness check` and `hangar harness list`: the harness CLI versions this installation
//! lets run turns. `check` runs the conformance suite (hangar-conformance, linked in with its
//! scripted model servers, so no checkout is needed) against the Claude Code and Codex found on
//! PATH or named, with this installation's driver and Tower hook, and records each result in the
//! store; a version whose suite passed then runs without `--unverified-harness`. `list` shows
//! the pinned versions' built-in results, the recorded ones, and what PATH has now.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hangar_conformance::{Found, Harness, Tools, run_suite};
use hangar_control::conformance::{SuiteResult, builtin, harness_version};
use serde_json::json;

use crate::exit::CliError;
use crate::{find, progress};

/// What `hangar harness check` was asked.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The Claude Code executable to check (default: `claude` on PATH, or HANGAR_CLAUDE_BIN).
    #[arg(long, value_name = "PATH")]
    pub claude: Option<PathBuf>,
    /// The Codex executable to check (default: `codex` on PATH, or HANGAR_CODEX_BIN).
    #[arg(long, value_name = "PATH")]
    pub codex: Option<PathBuf>,
    /// Who the record names (default: this machine's user).
    #[arg(long, value_name = "EMAIL")]
    pub person: Option<String>,
    /// Run the suite and print the result without recording it.
    #[arg(long)]
    pub no_record: bool,
    /// One JSON object per harness checked (its result), nothing else on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The CLIs to check: the ones named, else every one found.
fn chosen(a: &CheckArgs) -> Result<Vec<(Harness, PathBuf)>, CliError> {
    if a.claude.is_some() || a.codex.is_some() {
        return Ok([
            (Harness::Claude, a.claude.clone()),
            (Harness::Codex, a.codex.clone()),
        ]
        .into_iter()
        .filter_map(|(h, p)| p.map(|p| (h, p)))
        .collect());
    }
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (h, f) in [
        (
            Harness::Claude,
            find::claude as fn() -> Result<PathBuf, CliError>,
        ),
        (Harness::Codex, find::codex),
    ] {
        match f() {
            Ok(p) => found.push((h, p)),
            Err(e) => missing.push(e.to_string()),
        }
    }
    if found.is_empty() {
        return Err(CliError::Failed(format!(
            "no harness CLI to check: {}",
            missing.join("; ")
        )));
    }
    for m in missing {
        progress::note(&format!("skipped: {m}"));
    }
    Ok(found)
}

/// The driver and the Tower hook this installation runs turns with.
fn our_tools(bin: &Path) -> Result<Tools, CliError> {
    let driver =
        std::path::absolute(find::driver()?).map_err(|e| CliError::Failed(e.to_string()))?;
    let tower_hook = hangar_protocol::env::var_os(hangar_protocol::env::HANGAR_TOWER_HOOK_BIN)
        .map(PathBuf::from)
        .unwrap_or_else(|| driver.with_file_name("hangar-tower-hook"));
    if !tower_hook.is_file() {
        return Err(CliError::Failed(format!(
            "no Tower hook at {} (it belongs beside hangar-driver; or set {})",
            tower_hook.display(),
            hangar_protocol::env::HANGAR_TOWER_HOOK_BIN
        )));
    }
    let bin = std::path::absolute(bin).map_err(|e| CliError::Failed(e.to_string()))?;
    if !bin.is_file() {
        return Err(CliError::Failed(format!(
            "no executable at {}",
            bin.display()
        )));
    }
    Ok(Tools {
        bin,
        driver,
        tower_hook,
    })
}

/// `hangar harness check`.
pub fn check(home: &Path, a: &CheckArgs) -> Result<ExitCode, CliError> {
    let mut results = Vec::new();
    for (harness, bin) in chosen(a)? {
        let tools = our_tools(&bin)?;
        let version = harness_version(&tools.bin);
        if !a.json {
            progress::say(&format!(
                "checking {} {version} ({}): {} scenarios with the scripted model",
                harness.as_str(),
                tools.bin.display(),
                hangar_control::conformance::CAPABILITIES.len()
            ));
        }
        let json = a.json;
        let result = run_suite(harness, &version, &tools, |name, f| {
            if !json {
                let mark = match f {
                    Found::Holds => "ok  ",
                    Found::Fails(_) => "FAIL",
                    Found::NotApplicable(_) => "n/a ",
                };
                progress::say(&format!("  {mark} {name:<18} {}", f.as_text()));
            }
        });
        if !json {
            progress::say(&format!(
                "{} {version}: suite {}",
                harness.as_str(),
                if result.passed { "passed" } else { "FAILED" }
            ));
        }
        results.push(result);
    }
    let recordable: Vec<&SuiteResult> = results.iter().filter(|r| r.version != "unknown").collect();
    if recordable.len() < results.len() {
        progress::note(
            "a CLI whose version cannot be read (not an npm install) has nothing to record; it runs with a warning",
        );
    }
    if !a.no_record && !recordable.is_empty() {
        let person = a.person.clone().unwrap_or_else(crate::local::local_person);
        let owned: Vec<SuiteResult> = recordable.into_iter().cloned().collect();
        crate::people::on_store(home, |store| async move {
            for r in &owned {
                let harness: hangar_store::Harness = r
                    .harness
                    .parse()
                    .map_err(|e| CliError::Failed(format!("{e}")))?;
                let caps = serde_json::to_value(&r.capabilities)
                    .map_err(|e| CliError::Failed(e.to_string()))?;
                store
                    .record_harness_check(harness, &r.version, r.suite, r.passed, &caps, &person)
                    .await
                    .map_err(|e| CliError::Failed(e.to_string()))?;
            }
            Ok(ExitCode::SUCCESS)
        })?;
        if !a.json {
            progress::say(
                "recorded: a version whose suite passed now runs turns here without --unverified-harness",
            );
        }
    }
    if a.json {
        for r in &results {
            progress::say(&json!(r).to_string());
        }
    }
    Ok(if results.iter().all(|r| r.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One row of `hangar harness list`.
struct Row {
    harness: String,
    version: String,
    suite: i64,
    passed: bool,
    source: String,
    /// Capabilities that hold, of those that apply; the failing ones by name.
    holds: String,
    on_path: bool,
}

/// `hangar harness list`.
pub fn list(home: &Path, json: bool) -> Result<ExitCode, CliError> {
    let mut rows: Vec<Row> = builtin()
        .into_iter()
        .map(|r| Row {
            holds: summary(r.capabilities.values().map(String::as_str), &r.capabilities),
            harness: r.harness,
            version: r.version,
            suite: r.suite,
            passed: r.passed,
            source: "built-in".into(),
            on_path: false,
        })
        .collect();
    let recorded = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let into = std::rc::Rc::clone(&recorded);
    crate::people::on_store(home, |store| async move {
        *into.borrow_mut() = store
            .harness_checks()
            .await
            .map_err(|e| CliError::Failed(e.to_string()))?;
        Ok(ExitCode::SUCCESS)
    })?;
    for c in recorded.take() {
        let caps: std::collections::BTreeMap<String, String> =
            serde_json::from_value(c.capabilities.clone()).unwrap_or_default();
        rows.push(Row {
            holds: summary(caps.values().map(String::as_str), &caps),
            harness: c.harness.as_str().into(),
            version: c.version,
            suite: c.suite,
            passed: c.passed,
            source: format!("recorded by {}", c.person),
            on_path: false,
        });
    }
    for (h, f) in [
        ("claude", find::claude as fn() -> Result<PathBuf, CliError>),
        ("codex", find::codex),
    ] {
        let Ok(bin) = f() else { continue };
        let version = harness_version(&bin);
        match rows
            .iter_mut()
            .find(|r| r.harness == h && r.version == version)
        {
            Some(r) => r.on_path = true,
            None => rows.push(Row {
                harness: h.into(),
                version,
                suite: 0,
                passed: false,
                source: "not checked: `hangar harness check`".into(),
                holds: String::new(),
                on_path: true,
            }),
        }
    }
    let current = hangar_control::conformance::SUITE;
    if json {
        for r in &rows {
            progress::say(
                &json!({"harness": r.harness, "version": r.version, "suite": r.suite,
                        "passed": r.passed, "runs_turns": r.passed && r.suite == current,
                        "source": r.source, "capabilities": r.holds, "on_path": r.on_path})
                .to_string(),
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Vec::new();
    for r in &rows {
        let runs = if r.passed && r.suite == current {
            "yes"
        } else if r.suite == 0 {
            "no (unchecked)"
        } else if r.suite != current {
            "no (older suite)"
        } else {
            "no (failed)"
        };
        table.push(vec![
            r.harness.clone(),
            r.version.clone(),
            runs.into(),
            if r.suite == 0 {
                "-".into()
            } else {
                r.suite.to_string()
            },
            r.holds.clone(),
            r.source.clone(),
            if r.on_path {
                "yes".into()
            } else {
                String::new()
            },
        ]);
    }
    progress::say(&progress::table(
        &[
            "HARNESS",
            "VERSION",
            "RUNS TURNS",
            "SUITE",
            "CAPABILITIES",
            "SOURCE",
            "ON PATH",
        ],
        table,
    ));
    Ok(ExitCode::SUCCESS)
}

/// `7 of 7 hold` (n/a ones left out), or the failing ones by name.
fn summary<'a>(
    values: impl Iterator<Item = &'a str>,
    caps: &std::collections::BTreeMap<String, String>,
) -> String {
    let values: Vec<&str> = values.collect();
    let applies = values.iter().filter(|v| !v.starts_with("n/a")).count();
    let holds = values.iter().filter(|v| **v == "holds").count();
    let failing: Vec<&str> = caps
        .iter()
        .filter(|(_, v)| v.starts_with("fails"))
        .map(|(k, _)| k.as_str())
        .collect();
    if failing.is_empty() {
        format!("{holds} of {applies} hold")
    } else {
        format!("fails: {}", failing.join(", "))
    }
}
