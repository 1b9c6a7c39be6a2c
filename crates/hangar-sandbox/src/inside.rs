//! File operations done inside a sandbox, the same way for every provider: as hangar's user,
//! through the sandbox's own commands, so that a path (or a symbolic link the agent planted in
//! it) resolves in the sandbox, never on the host.

use std::path::{Path, PathBuf};

use crate::{ExecRequest, Provider, Sandbox, SandboxError, Who};

/// [`Provider::copy_in`] for providers that can feed a command's stdin.
pub async fn copy_in<P: Provider>(
    p: &P,
    sb: &Sandbox,
    src: &Path,
    dest: &Path,
    who: Who,
    mode: u32,
) -> Result<(), SandboxError> {
    let bytes = tokio::fs::read(src)
        .await
        .map_err(|e| SandboxError::Failed(format!("{}: {e}", src.display())))?;
    let owner = match (who, sb.agent.as_ref()) {
        (Who::Agent, Some(a)) => format!("{}:{}", a.uid, a.gid),
        _ => String::new(),
    };
    install(p, sb, bytes, dest, &owner, mode).await
}

/// [`Provider::read_file`]: `cat` as hangar's user.
pub async fn read<P: Provider>(p: &P, sb: &Sandbox, path: &Path) -> Result<Vec<u8>, SandboxError> {
    let mut req = ExecRequest::new(["cat", "--"]);
    req.argv.push(path.to_string_lossy().into_owned());
    req.cwd = Some(PathBuf::from("/"));
    let out = p.exec(sb, Who::Hangar, &req).await?;
    if !out.success() {
        return Err(SandboxError::Failed(format!(
            "cannot read {} in sandbox {}: {}",
            path.display(),
            sb.id,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Writes `bytes` to `dest` inside as hangar's user, through a temporary file in the same folder
/// renamed into place, then owned by `owner` (`uid:gid`, or hangar's) with `mode`. Done inside
/// so that a symbolic link the agent planted resolves in the sandbox, never on the host.
pub async fn install<P: Provider>(
    p: &P,
    sb: &Sandbox,
    bytes: Vec<u8>,
    dest: &Path,
    owner: &str,
    mode: u32,
) -> Result<(), SandboxError> {
    if !dest.is_absolute() || dest.file_name().is_none() {
        return Err(SandboxError::Invalid(format!(
            "copy in: {} is not an absolute file path",
            dest.display()
        )));
    }
    const SCRIPT: &str = r#"set -e
dest=$1 owner=$2 mode=$3
dir=$(dirname -- "$dest")
if [ ! -d "$dir" ]; then
  mkdir -p -- "$dir"
  if [ -n "$owner" ]; then chown -- "$owner" "$dir"; fi
fi
tmp=$(mktemp -- "$dir/.hangar-copy.XXXXXX")
trap 'rm -f -- "$tmp"' EXIT
cat > "$tmp"
if [ -n "$owner" ]; then chown -- "$owner" "$tmp"; fi
chmod -- "$mode" "$tmp"
mv -f -- "$tmp" "$dest"
trap - EXIT
"#;
    let mut req = ExecRequest::new(["sh", "-c", SCRIPT, "sh"]);
    req.argv.push(dest.to_string_lossy().into_owned());
    req.argv.push(owner.to_owned());
    req.argv.push(format!("{:o}", mode & 0o7777));
    req.cwd = Some(PathBuf::from("/"));
    req.stdin = Some(bytes);
    let out = p.exec(sb, Who::Hangar, &req).await?;
    if !out.success() {
        return Err(SandboxError::Failed(format!(
            "cannot copy into {} in sandbox {}: {}",
            dest.display(),
            sb.id,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
