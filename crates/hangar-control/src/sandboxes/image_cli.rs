//! A Docker image's own harness CLI (#5: "the harness CLI comes from the image when it has one,
//! its version checked and recorded, else it is bound read-only from hangar's pinned copy").
//!
//! The CLI is looked up on the image's system PATH only (`/usr/local/bin`, `/usr/bin`, …): under
//! the uid split the agent cannot write there, so a program it planted in its home is never
//! taken for the image's. Its version is read from its npm package (`package.json` above the
//! resolved executable; for Codex's native executable without its Node.js launcher, the
//! `codex-package.json` beside it), as for hangar's own copy; the conformance check then
//! applies to that version. Nothing of the CLI is run to learn it.
//!
//! Non-goals: images whose CLI is not an npm install (no version to read: the turn runs with
//! `harness_check: unknown-version`, warned and audited like any such CLI).

use std::path::PathBuf;

use hangar_sandbox::{ExecRequest, Provider, Sandbox, Who};
use hangar_store::Harness;

use crate::error::ControlError;
use crate::sandboxes::Sandboxes;
use crate::sandboxes::with_provider;

/// Finds the CLI on the system PATH, prints its resolved path, then the first `package.json`
/// (or `codex-package.json`: Codex's native package, installed without its Node.js launcher,
/// says its version there) at most six folders above it. Exit 3: not there.
const PROBE: &str = r#"p=$(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin command -v "$1") || exit 3
r=$(readlink -f "$p") || exit 3
printf '%s\n' "$r"
d=$(dirname "$r"); n=0
while [ "$d" != / ] && [ "$n" -lt 6 ]; do
  if [ -f "$d/package.json" ]; then cat "$d/package.json"; exit 0; fi
  if [ -f "$d/codex-package.json" ]; then cat "$d/codex-package.json"; exit 0; fi
  d=$(dirname "$d"); n=$((n+1))
done
exit 0"#;

/// The image's CLI for `harness`: its path inside and its version (`unknown` without an npm
/// package); `None` when the image has none.
pub(crate) async fn find(
    plane: &Sandboxes,
    sb: &Sandbox,
    harness: Harness,
) -> Result<Option<(PathBuf, String)>, ControlError> {
    let name = harness.as_str();
    let req = ExecRequest::new(["sh", "-c", PROBE, "probe", name]);
    let out = with_provider!(plane, sb.env.provider, |p| p
        .exec(sb, Who::Hangar, &req)
        .await
        .map_err(ControlError::from))?;
    if out.status == 3 {
        return Ok(None);
    }
    if !out.success() {
        return Err(ControlError::Launch(format!(
            "cannot look for the image's own {name}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (path, package) = text.split_once('\n').unwrap_or((&text, ""));
    let version = serde_json::from_str::<serde_json::Value>(package)
        .ok()
        .and_then(|v| v.get("version")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    Ok(Some((PathBuf::from(path.trim()), version)))
}
