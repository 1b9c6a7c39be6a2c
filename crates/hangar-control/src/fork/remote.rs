//! What a fork needs from a sandbox whose files this machine cannot see (kubernetes and e2b):
//! the repository its step's tree is built on, and the new sandbox's work tree hashed again
//! where it is.
//!
//! * The repository. A pod's workspace holds the repository the agent worked in; its objects
//!   come out as one `git bundle create - --all`, run inside as the agent (the pod is the
//!   agent's: nothing it says is trusted, and git there runs with no more than the agent's
//!   rights), at most [`MAX_BUNDLE_BYTES`]. On this machine the bundle becomes a scratch
//!   repository (`rebuild::base_from`), which the step's tree is rebuilt on as a docker
//!   sandbox's workspace is (a `--no-local` clone, then the turn's own objects); whatever the
//!   bundle held, the rebuilt tree must hash to the recorded id.
//! * The check inside. The new sandbox copies the rebuilt folder as any sandbox copies its
//!   repository (a tar unpacked in the pod); the driver, copied in as for a turn, hashes the
//!   pod's workspace (`hangar-driver --tree-of`), and that id must be the recorded one.

use std::path::PathBuf;
use std::time::Duration;

use hangar_sandbox::{ExecRequest, Provider, Sandbox, Who};

use super::rebuild::Taken;
use crate::error::ControlError;
use crate::plane::ControlPlane;
use crate::sandboxes::with_provider;

/// The largest repository bundle taken out of a sandbox (it is held in memory on its way).
pub(super) const MAX_BUNDLE_BYTES: u64 = 1 << 30;

/// How long taking the bundle for a fork, or hashing the work tree inside, may take.
pub(super) const INSIDE_TIMEOUT: Duration = Duration::from_secs(600);

/// Prints the workspace `$1`'s repository as a bundle (at most `$2` bytes). Exit 3: no
/// repository; 4: no workspace; 5: a repository with nothing to bundle.
const BUNDLE: &str = r#"cd "$1" 2>/dev/null || exit 4
[ -e .git ] || exit 3
g() { git -c core.fsmonitor=false -c core.hooksPath=/dev/null -c safe.directory='*' "$@"; }
[ -n "$(g for-each-ref --count=1 2>/dev/null)" ] || g rev-parse -q --verify HEAD >/dev/null 2>&1 || exit 5
g bundle create - --all 2>/dev/null | head -c "$2""#;

impl ControlPlane {
    /// The repository in `sb`'s workspace, read as the agent, waiting at most `limit`.
    pub(crate) async fn take_repository(
        &self,
        sb: &Sandbox,
        limit: Duration,
    ) -> Result<Taken, ControlError> {
        let mut req = ExecRequest::new(["sh", "-c", BUNDLE, "bundle"]);
        req.argv.push(sb.workspace.display().to_string());
        req.argv.push((MAX_BUNDLE_BYTES + 1).to_string());
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
        match out.status {
            0 if out.stdout.len() as u64 > MAX_BUNDLE_BYTES => Err(ControlError::Refused(format!(
                "the fork is refused: the repository in sandbox {} is larger than {} MiB as a bundle, more than hangar takes out of a sandbox",
                sb.id,
                MAX_BUNDLE_BYTES >> 20
            ))),
            0 => Ok(Taken::Bundle(out.stdout)),
            3 => Ok(Taken::Plain),
            5 => Ok(Taken::Unborn),
            s => Err(ControlError::Refused(format!(
                "the fork is refused: the repository in sandbox {}'s workspace {} cannot be read (exit {s}): {}",
                sb.id,
                sb.workspace.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    }

    /// The tree id of `sb`'s workspace, hashed inside by the driver.
    pub(super) async fn tree_inside(&self, sb: &Sandbox) -> Result<String, ControlError> {
        let driver = crate::sandbox_turn::driver_inside();
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
