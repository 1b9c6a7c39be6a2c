//! `hangar-conformance`: runs the conformance suite against one harness CLI and prints which
//! capabilities hold; `table` prints several runs side by side. `scripts/conformance` installs
//! the versions asked for from the npm registry and calls this.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hangar_conformance::{Found, Harness, Tools, run_suite};
use hangar_control::conformance::{CAPABILITIES, SuiteResult, harness_version};

const USAGE: &str = "usage:
  hangar-conformance run --harness claude|codex --bin PATH [--driver PATH] [--tower-hook PATH]
                         [--json FILE] [--record] [--person EMAIL]
      Runs the suite against the CLI at PATH (its version is read from its npm package) and
      prints each capability as it is checked. Exit 0 when the suite passed, 1 when not.
      --record stores the result in hangar's store (HANGAR_DATABASE_URL, else
      $HANGAR_HOME/hangar.db), where the control plane looks before it lets the version run.
  hangar-conformance table FILE...
      Prints the results written by --json side by side: one column per version.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("table") => table(&args[1..]),
        _ => Err(USAGE.into()),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "hangar-conformance: {e}");
            ExitCode::from(2)
        }
    }
}

fn say(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let mut harness = None;
    let mut bin = None;
    let mut driver = None;
    let mut hook = None;
    let mut json_out = None;
    let mut record = false;
    let mut person = "conformance@hangar".to_owned();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--harness" => {
                harness = Some(match value()?.as_str() {
                    "claude" => Harness::Claude,
                    "codex" => Harness::Codex,
                    other => return Err(format!("--harness {other}: claude or codex")),
                })
            }
            "--bin" => bin = Some(PathBuf::from(value()?)),
            "--driver" => driver = Some(PathBuf::from(value()?)),
            "--tower-hook" => hook = Some(PathBuf::from(value()?)),
            "--json" => json_out = Some(PathBuf::from(value()?)),
            "--person" => person = value()?,
            "--record" => record = true,
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let harness = harness.ok_or(format!("--harness is needed\n{USAGE}"))?;
    let bin = bin.ok_or(format!("--bin is needed\n{USAGE}"))?;
    if !bin.is_file() {
        return Err(format!("no {} CLI at {}", harness.as_str(), bin.display()));
    }
    // Absolute paths: the driver starts the CLI from the scenario's work folder.
    let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    let tools = Tools {
        driver: absolute(found(
            driver,
            hangar_protocol::env::HANGAR_DRIVER_BIN,
            "hangar-driver",
        )?),
        tower_hook: absolute(found(
            hook,
            hangar_protocol::env::HANGAR_TOWER_HOOK_BIN,
            "hangar-tower-hook",
        )?),
        bin: absolute(bin),
    };
    let version = harness_version(&tools.bin);
    say(&format!(
        "conformance suite for {} {version} ({})",
        harness.as_str(),
        tools.bin.display()
    ));
    let result = run_suite(harness, &version, &tools, |name, f| {
        let mark = match f {
            Found::Holds => "ok  ",
            Found::Fails(_) => "FAIL",
            Found::NotApplicable(_) => "n/a ",
        };
        say(&format!("  {mark} {name:<18} {}", f.as_text()));
    });
    let held = result
        .capabilities
        .values()
        .filter(|v| v.as_str() == "holds")
        .count();
    say(&format!(
        "{} {version}: suite {} ({held} of {} capabilities hold)",
        harness.as_str(),
        if result.passed { "passed" } else { "FAILED" },
        result.capabilities.len()
    ));
    if let Some(path) = json_out {
        let text = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?;
        std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if record {
        record_result(&result, &person)?;
        say("recorded in hangar's store: the control plane now knows this version's result");
    }
    Ok(if result.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A hangar binary: the flag, else the variable, else beside this program, else target/debug.
fn found(flag: Option<PathBuf>, var: &str, name: &str) -> Result<PathBuf, String> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)));
    let p = flag
        .or_else(|| hangar_protocol::env::var_os(var).map(PathBuf::from))
        .or(beside)
        .unwrap_or_else(|| Path::new("target/debug").join(name));
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "no {name} at {}: build it (cargo build -p {}) or set {var}",
            p.display(),
            if name == "hangar-driver" {
                "hangar-driver"
            } else {
                "hangar-hook"
            }
        ))
    }
}

fn record_result(r: &SuiteResult, person: &str) -> Result<(), String> {
    let url = match hangar_protocol::env::var(hangar_protocol::env::HANGAR_DATABASE_URL) {
        Some(u) => u,
        None => {
            let home = hangar_protocol::env::var_os(hangar_protocol::env::HANGAR_HOME)
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".hangar")))
                .ok_or("set HANGAR_HOME or HANGAR_DATABASE_URL to record")?;
            std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
            format!("sqlite://{}", home.join("hangar.db").display())
        }
    };
    let harness: hangar_store::Harness = r.harness.parse().map_err(|e| format!("{e}"))?;
    let caps = serde_json::to_value(&r.capabilities).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let store = hangar_store::Store::open(&url)
            .await
            .map_err(|e| format!("cannot open the store at {url}: {e}"))?;
        store
            .record_harness_check(harness, &r.version, r.suite, r.passed, &caps, person)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<(), String>(())
    })
}

fn table(files: &[String]) -> Result<ExitCode, String> {
    if files.is_empty() {
        return Err(format!("give the files that run --json wrote\n{USAGE}"));
    }
    let mut runs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
        let r: SuiteResult = serde_json::from_str(&text).map_err(|e| format!("{f}: {e}"))?;
        runs.push(r);
    }
    let heads: Vec<String> = runs
        .iter()
        .map(|r| format!("{} {}", r.harness, r.version))
        .collect();
    let width = heads.iter().map(String::len).max().unwrap_or(8).max(8);
    let mut line = format!("{:<18}", "capability");
    for h in &heads {
        line.push_str(&format!(" | {h:<width$}"));
    }
    say(&line);
    say(&"-".repeat(line.len()));
    for &cap in CAPABILITIES {
        let mut line = format!("{cap:<18}");
        for r in &runs {
            let v = r.capabilities.get(cap).map_or("-", |v| {
                if v == "holds" {
                    "holds"
                } else if v.starts_with("n/a") {
                    "n/a"
                } else {
                    "FAILS"
                }
            });
            line.push_str(&format!(" | {v:<width$}"));
        }
        say(&line);
    }
    let mut line = format!("{:<18}", "suite");
    for r in &runs {
        let v = if r.passed { "passed" } else { "FAILED" };
        line.push_str(&format!(" | {v:<width$}"));
    }
    say(&line);
    // The reasons behind every failure, below the table.
    for r in &runs {
        for (cap, v) in &r.capabilities {
            if v.starts_with("fails") {
                say(&format!("{} {} {cap}: {v}", r.harness, r.version));
            }
        }
    }
    Ok(if runs.iter().all(|r| r.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
