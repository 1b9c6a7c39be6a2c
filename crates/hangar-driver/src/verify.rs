//! The job's check (S22): a `verify` command run in the workspace when a turn completes, its
//! failure fed back to the agent as the next message, at most `max_verify_rounds` times.
//!
//! * Codex: the driver runs the check itself when a turn settles (never after an interrupt that
//!   brought no message), as the agent's uid under the uid split (never as hangar's user), in a
//!   process group of its own that is killed at the time limit.
//! * Claude Code: the same check as a Stop hook, in the turn's own settings file loaded with
//!   `--setting-sources ''` (so the agent's and the repo's settings cannot add or remove hooks).
//!   The hook runs as the CLI's child, so as the agent. Exit 2 with the output makes Claude
//!   continue in the same turn. The rounds left are kept by the driver in a file the hook reads
//!   and only hangar's user can write; the hook prints one `hangar-verify: …` marker line, which
//!   the driver reads from the CLI's `hook_response` events to write `hangar.verify` lines.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hangar_protocol::runlog::VerifyOutcome;

use crate::args::{Agent, Verify};

/// The most output fed back or logged, from the end.
pub const TAIL_BYTES: usize = 4000;

/// One run of the check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckRun {
    /// `None` when it was killed (time limit or signal).
    pub exit_code: Option<i32>,
    pub ms: u64,
    pub tail: String,
    pub timed_out: bool,
}

impl CheckRun {
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// The last `max` bytes of `out`, cut at a character boundary.
pub fn tail(out: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(out);
    if text.len() <= max {
        return text.into_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// Runs the check in `cwd` (`sh -c CMD`, stdout and stderr together) as the agent when given,
/// with `env`, killing its whole process group at the time limit.
pub fn run_check(
    v: &Verify,
    cwd: &Path,
    agent: Option<&Agent>,
    env: &[(OsString, OsString)],
    hide: &[PathBuf],
) -> CheckRun {
    let started = Instant::now();
    let sh: [OsString; 2] = ["-c".into(), format!("exec 2>&1; {}", v.command).into()];
    let (program, args) = match hangar_protocol::hide::wrap(hide, &"/bin/sh".into(), &sh) {
        Ok(w) => w,
        Err(e) => {
            return CheckRun {
                exit_code: None,
                ms: 0,
                tail: format!("could not start the check: {e}"),
                timed_out: false,
            };
        }
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, val)| (k, val)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    if let Some(a) = agent {
        cmd.uid(a.uid).gid(a.gid);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return CheckRun {
                exit_code: None,
                ms: 0,
                tail: format!("could not start the check: {e}"),
                timed_out: false,
            };
        }
    };
    let mut out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut buf);
        }
        buf
    });
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if started.elapsed() >= v.timeout => {
                timed_out = true;
                kill_group(child.id());
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break None,
        }
    };
    // Whatever the check left behind in its group goes too, so the reader sees EOF.
    kill_group(child.id());
    let bytes = reader.join().unwrap_or_default();
    let mut text = tail(&bytes, TAIL_BYTES);
    if timed_out {
        text.push_str(&format!(
            "\n[hangar: the check was stopped after {} s]",
            v.timeout.as_secs()
        ));
    }
    CheckRun {
        exit_code: status.and_then(|s| s.code()).filter(|_| !timed_out),
        ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        tail: text,
        timed_out,
    }
}

fn kill_group(pid: u32) {
    if let Ok(p) = i32::try_from(pid) {
        // SAFETY: kill(2) on a process group we created; integers only.
        unsafe {
            libc::kill(-p, libc::SIGKILL);
        }
    }
}

/// The message that sends a failed check back to the agent.
pub fn feedback(command: &str, run: &CheckRun) -> String {
    let how = match run.exit_code {
        Some(c) => format!("exit code {c}"),
        None if run.timed_out => "it ran out of time".to_owned(),
        None => "it was killed".to_owned(),
    };
    format!(
        "The job's check `{command}` failed ({how}). Its output:\n{}\nPlease fix this.",
        run.tail
    )
}

/// The Claude Code Stop hook: a folder only hangar's user can write, with the hook script, the
/// rounds-left file and the turn's settings file.
#[derive(Debug)]
pub struct StopHook {
    pub dir: PathBuf,
    pub settings: PathBuf,
    rounds_left: PathBuf,
}

impl StopHook {
    /// The hook as the manifest names it (`Stop: <script>`), with its script's digest.
    pub fn digest(&self) -> io::Result<hangar_protocol::runlog::HookDigest> {
        let script = self.dir.join("stop-hook.sh");
        hangar_protocol::runlog::HookDigest::of_file(format!("Stop: {}", script.display()), &script)
    }

    /// Writes the hook for `v` into a fresh folder under `parent`.
    pub fn write(parent: &Path, run: &str, v: &Verify) -> io::Result<StopHook> {
        let dir = parent.join(format!("hangar-{run}-verify"));
        let _ = fs::remove_dir_all(&dir);
        fs::DirBuilder::new().mode(0o755).create(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        let rounds_left = dir.join("rounds_left");
        fs::write(&rounds_left, v.max_rounds.to_string())?;
        fs::set_permissions(&rounds_left, fs::Permissions::from_mode(0o644))?;
        let check = dir.join("check.sh");
        fs::write(&check, v.command.as_bytes())?;
        fs::set_permissions(&check, fs::Permissions::from_mode(0o644))?;
        let hook = dir.join("stop-hook.sh");
        fs::write(
            &hook,
            hook_script(&check, &rounds_left, v.timeout, TAIL_BYTES),
        )?;
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o755))?;
        // The hook's own limit is Claude Code's: a little more than the check's.
        let timeout = v.timeout.as_secs() + 30;
        let settings = dir.join("settings.json");
        let cmd = format!("/bin/sh {}", hook.display());
        let body = serde_json::json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": cmd, "timeout": timeout}]}]}});
        fs::write(&settings, body.to_string())?;
        fs::set_permissions(&settings, fs::Permissions::from_mode(0o644))?;
        Ok(StopHook {
            dir,
            settings,
            rounds_left,
        })
    }

    /// Records that one round of feedback went out.
    pub fn set_rounds_left(&self, n: u32) {
        if let Err(e) = fs::write(&self.rounds_left, n.to_string()) {
            crate::diag(&format!("cannot update the verify rounds: {e}"));
        }
    }

    pub fn remove(&self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The hook: runs the check (time-limited); on failure with rounds left, prints the output on
/// stderr and exits 2 (Claude continues); otherwise exits 0. Its one stdout line tells the driver
/// what happened: `hangar-verify: passed|feedback|failed exit=N`.
fn hook_script(check: &Path, rounds_left: &Path, timeout: Duration, tail: usize) -> String {
    format!(
        r#"#!/bin/sh
# hangar's Stop hook: the job's check. Written by the driver; the agent cannot change it.
cat >/dev/null
out=$(timeout -k 5 {secs} /bin/sh {check} 2>&1)
code=$?
if [ "$code" -eq 0 ]; then
  echo "hangar-verify: passed exit=0"
  exit 0
fi
left=$(cat {left} 2>/dev/null || echo 0)
if [ "$left" -gt 0 ] 2>/dev/null; then
  echo "hangar-verify: feedback exit=$code"
  printf 'The job'"'"'s check failed (exit code %s). Its output:\n%s\nPlease fix this.\n' "$code" "$(printf '%s' "$out" | tail -c {tail})" >&2
  exit 2
fi
echo "hangar-verify: failed exit=$code"
exit 0
"#,
        secs = timeout.as_secs(),
        check = check.display(),
        left = rounds_left.display(),
    )
}

/// What a `hook_response` line of the Stop hook says: (outcome, exit code, output tail). A word
/// the hook never prints counts as `failed`, as the turn's check state always took it.
pub fn parse_hook_response(v: &serde_json::Value) -> Option<(VerifyOutcome, Option<i32>, String)> {
    if v.get("type")?.as_str()? != "system" || v.get("subtype")?.as_str()? != "hook_response" {
        return None;
    }
    let stdout = v
        .get("stdout")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let marker = stdout
        .lines()
        .find_map(|l| l.strip_prefix("hangar-verify: "))?;
    let mut parts = marker.split_whitespace();
    let outcome = parts.next()?.parse().unwrap_or(VerifyOutcome::Failed);
    let exit = parts
        .next()
        .and_then(|e| e.strip_prefix("exit="))
        .and_then(|n| n.parse().ok());
    let stderr = v
        .get("stderr")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    Some((outcome, exit, tail(stderr.as_bytes(), TAIL_BYTES)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(cmd: &str, secs: u64) -> Verify {
        Verify {
            command: cmd.into(),
            max_rounds: 2,
            timeout: Duration::from_secs(secs),
        }
    }

    #[test]
    fn a_check_reports_exit_and_output() {
        let dir = tempfile::tempdir().unwrap();
        let ok = run_check(&v("echo fine", 10), dir.path(), None, &[], &[]);
        assert!(ok.passed());
        assert_eq!(ok.tail, "fine\n");
        let bad = run_check(
            &v("echo broken >&2; exit 3", 10),
            dir.path(),
            None,
            &[],
            &[],
        );
        assert_eq!(bad.exit_code, Some(3));
        assert_eq!(bad.tail, "broken\n");
        assert!(feedback("make test", &bad).contains("exit code 3"));
    }

    #[test]
    fn a_slow_check_is_stopped_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let r = run_check(&v("sleep 30 & sleep 30", 1), dir.path(), None, &[], &[]);
        assert!(r.timed_out && r.exit_code.is_none());
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn tails_are_capped() {
        assert_eq!(tail(b"abcdef", 3), "…def");
        assert_eq!(tail("ééé".as_bytes(), 3), "…é");
    }

    #[test]
    fn the_stop_hook_feeds_back_until_rounds_run_out() {
        let parent = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let hook = StopHook::write(parent.path(), "r1", &v("echo nope; exit 4", 10)).unwrap();
        let run = || {
            let out = Command::new("/bin/sh")
                .arg(hook.dir.join("stop-hook.sh"))
                .current_dir(work.path())
                .stdin(Stdio::null())
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let (code, out, err) = run();
        assert_eq!(code, Some(2));
        assert_eq!(out.trim(), "hangar-verify: feedback exit=4");
        assert!(err.contains("nope"), "{err}");
        hook.set_rounds_left(0);
        let (code, out, _) = run();
        assert_eq!(
            (code, out.trim()),
            (Some(0), "hangar-verify: failed exit=4")
        );
        let settings: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&hook.settings).unwrap()).unwrap();
        assert!(
            settings["hooks"]["Stop"][0]["hooks"][0]["command"]
                .as_str()
                .unwrap()
                .ends_with("stop-hook.sh")
        );
        let json = serde_json::json!({"type":"system","subtype":"hook_response","stdout":out,"stderr":"x","exit_code":0});
        assert_eq!(
            parse_hook_response(&json),
            Some((VerifyOutcome::Failed, Some(4), "x".into()))
        );
    }
}
