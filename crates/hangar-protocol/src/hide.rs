//! Paths the harness and the job's check must not see (issue 20, Deliver 6), for a turn in a
//! plain folder, where they run as hangar's own user (no uid split, no sandbox):
//! `$HANGAR_HOME` (the vault's key, the database, tokens, every run's control folder) and the
//! master key file when it lies elsewhere. The driver's `--hide PATH` and the control plane's
//! one-shot turns (no driver) start the harness through [`wrap`] alike.
//!
//! The harness is started through bubblewrap (`bwrap`, which hangar's local sandboxes use
//! already) in a mount namespace of its own: the whole file system as it is, each hidden folder
//! covered by an empty tmpfs and each hidden file by `/dev/null`, and a PID namespace with its
//! own `/proc`, so `/proc/<pid>/root` of the driver or of `hangar serve` (same uid, so readable)
//! is no way round. The driver (or the control plane) stays outside and keeps the control folder. Without
//! bwrap the turn is refused (fails closed); the settings files the driver writes for the
//! harness are in the temp folder, never under a hidden path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The program and argv that run `program args` with `hide` out of sight (unchanged when
/// there is nothing to hide). Errors say why the turn cannot run.
pub fn wrap(
    hide: &[PathBuf],
    program: &OsString,
    args: &[OsString],
) -> Result<(OsString, Vec<OsString>), String> {
    if hide.is_empty() {
        return Ok((program.clone(), args.to_vec()));
    }
    let bwrap = find_bwrap().ok_or(
        "this turn must hide hangar's home from the agent (--hide), which needs bubblewrap (`bwrap`, Debian's bubblewrap package) on PATH; it is not there, so the turn is refused",
    )?;
    // `--die-with-parent`: the harness dies with the process the driver started (and with the
    // driver): killed, it must not leave an agent running on in a namespace of its own, where
    // the kill of the pid the run log names would not reach it (scripts/chaos kills both).
    let mut a: Vec<OsString> = [
        "--dev-bind",
        "/",
        "/",
        "--unshare-pid",
        "--die-with-parent",
        "--proc",
        "/proc",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    for p in hide {
        if p.is_dir() {
            a.extend(["--tmpfs".into(), p.clone().into_os_string()]);
        } else if p.exists() {
            a.extend([
                "--ro-bind".into(),
                "/dev/null".into(),
                p.clone().into_os_string(),
            ]);
        }
    }
    a.push("--".into());
    a.push(program.clone());
    a.extend(args.iter().cloned());
    Ok((bwrap.into_os_string(), a))
}

fn find_bwrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("bwrap"))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_hide_leaves_the_command_alone() {
        let (p, a) = wrap(&[], &"claude".into(), &["-p".into()]).unwrap();
        assert_eq!((p, a), ("claude".into(), vec![OsString::from("-p")]));
    }
}
