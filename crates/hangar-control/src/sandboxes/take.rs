//! What a fork needs from a sandbox whose files this machine cannot see (kubernetes and e2b):
//! the repository its step's tree is built on, and the new sandbox's work tree hashed again
//! where it is.
//!
//! * The repository. A pod's workspace holds the repository the agent worked in; its objects
//!   come out as one `git bundle create --all`, run inside as the agent (the pod is the
//!   agent's: nothing it says is trusted, and git there runs with no more than the agent's
//!   rights), at most [`MAX_BUNDLE_BYTES`], written to a temporary file there (git's status
//!   and errors are its own), then copied out piece by piece to a file under `$HANGAR_HOME`
//!   (never held whole in memory). On this machine the bundle becomes a scratch
//!   repository (`forks::rebuild::base_from`), which the step's tree is rebuilt on as a docker
//!   sandbox's workspace is (a `--no-local` clone, then the turn's own objects); whatever the
//!   bundle held, the rebuilt tree must hash to the recorded id.
//! * The check inside. The new sandbox copies the rebuilt folder as any sandbox copies its
//!   repository (a tar unpacked in the pod); the driver, copied in as for a turn, hashes the
//!   pod's workspace (`hangar-driver --tree-of`), and that id must be the recorded one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hangar_sandbox::{ExecRequest, Provider, Sandbox, Who};

use super::Sandboxes;
use crate::error::ControlError;
use crate::sandboxes::with_provider;

/// What a sandbox's workspace held of a repository, as taken out of it (see `fork/remote.rs`).
#[derive(Debug)]
pub(crate) enum Taken {
    /// No repository: a plain folder.
    Plain,
    /// A repository with no refs (nothing committed).
    Unborn,
    /// `git bundle create --all`'s file, on this machine (under `$HANGAR_HOME`).
    Bundle(PathBuf),
}

/// The largest repository bundle taken out of a sandbox (written to disk piece by piece on its
/// way, never held whole in memory).
pub(crate) const MAX_BUNDLE_BYTES: u64 = 1 << 30;

/// A bundle is copied out of the sandbox in pieces of this many MiB.
const BUNDLE_PIECE_MIB: u64 = 32;

/// How long taking the bundle for a fork, or hashing the work tree inside, may take.
pub(crate) const INSIDE_TIMEOUT: Duration = Duration::from_secs(600);

/// Writes the workspace `$1`'s repository as a bundle into a new temporary file inside and
/// prints its path. Exit 3: no repository; 4: no workspace; 5: a repository with nothing to
/// bundle; 6: no git in the sandbox; 7: git failed (its stderr is the command's).
pub(crate) const BUNDLE: &str = r#"cd "$1" 2>/dev/null || exit 4
[ -e .git ] || exit 3
command -v git >/dev/null 2>&1 || { echo "git is not installed in the sandbox" >&2; exit 6; }
g() { git -c core.fsmonitor=false -c core.hooksPath=/dev/null -c safe.directory='*' "$@"; }
refs=$(g for-each-ref --count=1) || exit 7
if [ -z "$refs" ]; then g rev-parse -q --verify HEAD >/dev/null 2>&1 || exit 5; fi
t=$(mktemp "${TMPDIR:-/tmp}/hangar-bundle.XXXXXX") || exit 7
g bundle create "$t" --all 2>"$t.err" || { cat "$t.err" >&2; rm -f "$t" "$t.err"; exit 7; }
rm -f "$t.err"
echo "$t""#;

impl Sandboxes {
    /// The repository in `sb`'s workspace, read as the agent, waiting at most `limit` for git
    /// there; a bundle is copied to `dest` (on this machine, replacing what is there).
    pub(crate) async fn take_repository(
        &self,
        sb: &Sandbox,
        limit: Duration,
        dest: &Path,
    ) -> Result<Taken, ControlError> {
        let mut req = ExecRequest::new(["sh", "-c", BUNDLE, "bundle"]);
        req.argv.push(sb.workspace.display().to_string());
        req.cwd = Some(PathBuf::from("/"));
        let out = tokio::time::timeout(limit, async {
            with_provider!(self, sb.env.provider, |p| p
                .exec(sb, Who::Agent, &req)
                .await
                .map_err(ControlError::from))
        })
        .await
        .map_err(|_| {
            ControlError::Refused(format!(
                "the fork is refused: sandbox {} did not hand over its repository in {} s",
                sb.id,
                limit.as_secs()
            ))
        })??;
        let inside = match out.status {
            0 => PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
            3 => return Ok(Taken::Plain),
            5 => return Ok(Taken::Unborn),
            s => {
                let what = match s {
                    4 => "has no workspace",
                    6 => "has no git",
                    7 => "has a repository git cannot bundle",
                    _ => "cannot be read",
                };
                return Err(ControlError::Refused(format!(
                    "the fork is refused: the repository in sandbox {}'s workspace {} {what} (exit {s}): {}",
                    sb.id,
                    sb.workspace.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        };
        if !inside.is_absolute() || inside.components().any(|c| c.as_os_str() == "..") {
            return Err(ControlError::Refused(format!(
                "the fork is refused: sandbox {} named its repository's bundle {}",
                sb.id,
                inside.display()
            )));
        }
        let copied = self
            .copy_out(sb, &inside, dest, (MAX_BUNDLE_BYTES, BUNDLE_PIECE_MIB))
            .await;
        let mut rm = ExecRequest::new(["rm", "-f", "--"]);
        rm.argv.push(inside.display().to_string());
        rm.cwd = Some(PathBuf::from("/"));
        let _ = self.exec_bounded(sb, &rm).await;
        match copied {
            Ok(_) => Ok(Taken::Bundle(dest.to_owned())),
            Err(ControlError::Refused(why)) => Err(ControlError::Refused(format!(
                "the fork is refused: sandbox {}'s repository as a bundle: {why}",
                sb.id
            ))),
            Err(e) => Err(e),
        }
    }

    /// The tree id of `sb`'s workspace, hashed inside by the driver.
    pub(crate) async fn tree_inside(&self, sb: &Sandbox) -> Result<String, ControlError> {
        let driver = super::driver_inside();
        with_provider!(self, sb.env.provider, |p| p
            .copy_in(sb, &self.tools.driver, &driver, Who::Hangar, 0o755)
            .await
            .map_err(|e| ControlError::Internal(format!(
                "cannot copy the driver into sandbox {}: {e}",
                sb.id
            ))))?;
        let mut req = ExecRequest::new([driver.display().to_string(), "--tree-of".into()]);
        req.argv.push(sb.workspace.display().to_string());
        req.cwd = Some(PathBuf::from("/"));
        let out = tokio::time::timeout(INSIDE_TIMEOUT, async {
            with_provider!(self, sb.env.provider, |p| p
                .exec(sb, Who::Hangar, &req)
                .await
                .map_err(ControlError::from))
        })
        .await
        .map_err(|_| {
            ControlError::Internal(format!(
                "sandbox {} did not hash its workspace in {} s",
                sb.id,
                INSIDE_TIMEOUT.as_secs()
            ))
        })??;
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.success() || id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ControlError::Internal(format!(
                "the driver could not hash sandbox {}'s workspace {} (exit {}): {}",
                sb.id,
                sb.workspace.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::BUNDLE;
    use std::path::Path;

    fn bundle(dir: &Path, path: Option<&str>) -> std::process::Output {
        let mut c = std::process::Command::new("/bin/sh");
        c.args(["-c", BUNDLE, "bundle"]).arg(dir);
        if let Some(p) = path {
            c.env("PATH", p);
        }
        c.output().unwrap()
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(ok.status.success(), "{ok:?}");
    }

    /// No git, a repository git cannot read, and git's own failure each say so: none reads as
    /// "nothing committed".
    #[test]
    fn the_bundle_script_tells_no_git_and_git_failures_from_an_unborn_repository() {
        let t = tempfile::tempdir().unwrap();
        let w = t.path().join("w");
        std::fs::create_dir(&w).unwrap();
        assert_eq!(bundle(&w, None).status.code(), Some(3));
        git(&w, &["init", "-q"]);
        assert_eq!(bundle(&w, None).status.code(), Some(5));
        let empty = t.path().join("empty-path");
        std::fs::create_dir(&empty).unwrap();
        let out = bundle(&w, Some(&empty.display().to_string()));
        assert_eq!(out.status.code(), Some(6));
        assert!(String::from_utf8_lossy(&out.stderr).contains("git is not installed"));
        std::fs::write(w.join("a"), "a").unwrap();
        git(&w, &["add", "a"]);
        git(&w, &["commit", "-q", "-m", "a"]);
        let out = bundle(&w, None);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let file = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        git(&w, &["bundle", "verify", "-q", &file]);
        std::fs::remove_file(&file).unwrap();
        // A corrupt repository: git's error, not "unborn".
        std::fs::write(w.join(".git/HEAD"), "garbage").unwrap();
        let out = bundle(&w, None);
        assert_eq!(out.status.code(), Some(7), "{out:?}");
        assert!(!out.stderr.is_empty());
    }
}
