//! A turn inside a sandbox (S1, S2, S17): the driver copied in for the turn, the run's control
//! folder where the sandbox sees it, and the run script started in a tmux session named after
//! the run, so `hangar sb attach` can watch it live.
//!
//! The control folder is made where every run's is (`<home>/runs/<run>.ctl`, so the mailbox,
//! the watcher and `hangar log` work as for any run), then moved under the sandbox's
//! `<host_dir>/ctl/`, which the sandbox sees at `ctl_inside`, and the old path becomes a link to
//! it. Under the uid split it belongs to hangar's user and the agent cannot enter it.
//!
//! The tmux window runs the run script: the driver in the background, its stderr kept in the
//! control folder, and the run log followed on the terminal until the driver ends, which ends the
//! window and the session. Whether the session is still there is how the watcher tells that the
//! driver is alive (its pid is in the sandbox's namespace, not ours).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use hangar_protocol::env::HARNESS_ENV_ALLOW;
use hangar_sandbox::layout::HANGAR_LIB;
use hangar_sandbox::{ExecRequest, Provider, Sandbox, Who};

use crate::error::ControlError;
use crate::launch::Tools;
use crate::plane::ControlPlane;
use crate::sandboxes::with_provider;

/// Where the driver is copied to inside.
pub(crate) fn driver_inside() -> PathBuf {
    Path::new(HANGAR_LIB).join("hangar-driver")
}

/// The harness's variables a sandbox gets from the control plane's environment: the allow-list
/// without what names this machine's own paths and user (the sandbox has its own).
const HOST_ONLY: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
];

/// The variables the run script starts with.
fn turn_env(tools: &Tools) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = HARNESS_ENV_ALLOW
        .iter()
        .filter(|n| !HOST_ONLY.contains(n))
        .filter_map(|n| std::env::var(n).ok().map(|v| ((*n).to_owned(), v)))
        .collect();
    for (k, v) in &tools.env {
        if HOST_ONLY.contains(&k.as_str()) {
            continue;
        }
        env.retain(|(n, _)| n != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// Single-quoted for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The run script: the driver with its argv, stderr kept, the run log on the terminal.
fn run_script(run_id: &str, ctl_inside: &Path, argv: &[String]) -> String {
    let ctl = sh_quote(&ctl_inside.display().to_string());
    let cmd: Vec<String> = argv.iter().map(|a| sh_quote(a)).collect();
    format!(
        "#!/bin/sh\n\
         # hangar's run script for run {run_id}: the driver, copied into the sandbox for this turn,\n\
         # with its stderr kept in the control folder; the run log is followed on this terminal\n\
         # (`hangar sb attach`) until the driver ends, which ends this tmux session.\n\
         ctl={ctl}\n\
         {} 2>>\"$ctl/driver.stderr\" </dev/null &\n\
         driver=$!\n\
         echo \"hangar: run {run_id}, driver pid $driver\"\n\
         tail -n +1 -F --pid=\"$driver\" \"$ctl/run.log\" 2>/dev/null\n\
         wait \"$driver\"\n\
         status=$?\n\
         echo \"hangar: the driver ended ($status)\"\n\
         exit $status\n",
        cmd.join(" ")
    )
}

impl ControlPlane {
    /// Moves the run's control folder under the sandbox and links the old path to it; the folder
    /// as the sandbox sees it.
    pub(crate) async fn ctl_into_sandbox(
        &self,
        sb: &Sandbox,
        ctl: &Path,
    ) -> Result<PathBuf, ControlError> {
        let name = ctl
            .file_name()
            .ok_or_else(|| ControlError::Internal(format!("{}: no name", ctl.display())))?
            .to_owned();
        let dest = sb.ctl_host().join(&name);
        let inside = sb.inside_ctl(&dest).ok_or_else(|| {
            ControlError::Internal(format!("{} is not under the sandbox's ctl", dest.display()))
        })?;
        let (from, to) = (ctl.to_owned(), dest.clone());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            std::fs::rename(&from, &to)?;
            std::os::unix::fs::symlink(&to, &from)
        })
        .await
        .map_err(|e| ControlError::Internal(e.to_string()))?
        .map_err(|e| {
            ControlError::Launch(format!(
                "cannot move the control folder {} into sandbox {} ({}): {e}",
                ctl.display(),
                sb.id,
                dest.display()
            ))
        })?;
        Ok(inside)
    }

    /// Copies the driver in, writes the run script and starts it in tmux session `run_id`.
    /// `args` is the driver's argv as the sandbox sees it.
    pub(crate) async fn start_in_sandbox(
        &self,
        sb: &Sandbox,
        run_id: &str,
        ctl_host: &Path,
        ctl_inside: &Path,
        args: &[OsString],
    ) -> Result<(), ControlError> {
        let driver = driver_inside();
        with_provider!(self, sb.env.provider, |p| {
            p.copy_in(sb, &self.tools.driver, &driver, Who::Hangar, 0o755)
                .await
                .map_err(|e| ControlError::Launch(format!("cannot copy the driver in: {e}")))
        })?;
        let argv: Vec<String> = std::iter::once(driver.display().to_string())
            .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect();
        let script = run_script(run_id, ctl_inside, &argv);
        let path = ctl_host.join("run.sh");
        let text = script.into_bytes();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o700)
                .open(&path)
                .and_then(|mut f| f.write_all(&text))
        })
        .await
        .map_err(|e| ControlError::Internal(e.to_string()))?
        .map_err(|e| ControlError::Launch(format!("cannot write the run script: {e}")))?;
        let req = ExecRequest {
            argv: vec![
                "/bin/sh".into(),
                ctl_inside.join("run.sh").display().to_string(),
            ],
            env: turn_env(&self.tools),
            cwd: Some(sb.workspace.clone()),
            stdin: None,
        };
        with_provider!(self, sb.env.provider, |p| {
            p.start_tmux(sb, run_id, Who::Hangar, &req)
                .await
                .map_err(|e| {
                    ControlError::Launch(format!("cannot start the run's tmux session: {e}"))
                })
        })
    }

    /// Whether a sandboxed run's tmux session is still there (`None`: not a sandboxed run, or
    /// its sandbox cannot be asked).
    pub(crate) async fn sandbox_run_alive(&self, run_id: &str) -> Option<bool> {
        let run = self.store.run(run_id).await.ok()?;
        let turn = self.store.turn(&run.turn_id).await.ok()?;
        let session = self.store.session(&turn.session_id).await.ok()?;
        let row = self.store.sandbox(&session.sandbox_id).await.ok()?;
        let sb = crate::sandboxes::handle_of(&row).ok()??;
        if row.state != "live" {
            return Some(false);
        }
        with_provider!(self, sb.env.provider, |p| {
            p.tmux_alive(&sb, run_id).await.map_err(ControlError::from)
        })
        .ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_run_script_quotes_every_argument() {
        let s = run_script(
            "run-1",
            Path::new("/run/hangar/run-1.ctl"),
            &[
                "/var/lib/hangar/hangar-driver".into(),
                "it's".into(),
                "$HOME".into(),
            ],
        );
        assert!(
            s.contains(r"'/var/lib/hangar/hangar-driver' 'it'\''s' '$HOME' 2>>"),
            "{s}"
        );
        assert!(s.contains("ctl='/run/hangar/run-1.ctl'"));
    }

    #[test]
    fn host_paths_stay_out_of_the_sandbox() {
        let tools = Tools {
            home: "/h".into(),
            driver: "/d".into(),
            claude: "/c".into(),
            codex: "/x".into(),
            env: vec![
                ("HOME".into(), "/root".into()),
                ("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:1".into()),
                ("HANGAR_TREE_SLOW_MS".into(), "5".into()),
            ],
        };
        let env = turn_env(&tools);
        assert!(env.iter().all(|(k, _)| k != "HOME" && k != "PATH"));
        assert!(env.contains(&("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:1".into())));
        assert!(env.contains(&("HANGAR_TREE_SLOW_MS".into(), "5".into())));
    }
}
