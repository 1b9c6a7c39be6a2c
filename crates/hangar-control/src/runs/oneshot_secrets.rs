//! A one-shot turn's credentials (issue 20, Deliver 5): with no driver to take the turn's
//! secrets file, the control plane hands the person's and the environment's credentials
//! (`turn_secrets.rs`) to the harness itself, the way the driver would: variables in the
//! harness's environment, and the file forms written for the agent alone: mode 0600 in a folder
//! of mode 0700 the agent owns, inside the sandbox (written there by the sandbox's own commands,
//! `hangar_sandbox::inside`), or in the temp folder here for a plain folder (never under
//! hangar's home, which the harness cannot see).
//!
//! Codex's `auth.json` (a ChatGPT sign-in) goes in a Codex home kept per session
//! (`hangar-<session>-codex`, the turn's `CODEX_HOME`), so the next one-shot turn finds its
//! thread there to resume; the file itself is removed when the turn ends, as the per-run folder
//! of the other files is.

use std::path::{Path, PathBuf};

use hangar_sandbox::{ExecRequest, Provider, Sandbox, Who};
use serde_json::Value;

use crate::error::ControlError;
use crate::runs::Runs;
use crate::sandboxes::with_provider;

/// Where the per-run and per-session folders go inside a sandbox (its own `/tmp`).
const SANDBOX_TMP: &str = "/tmp";

/// The credentials as placed: the variables for the harness and what to remove at the end.
#[derive(Default)]
pub(crate) struct Placed {
    pub env: Vec<(String, String)>,
    remove: Vec<PathBuf>,
}

/// One file form: the variable that names it (`None`: Codex's `auth.json`), its file name, its
/// content.
struct FileForm {
    var: Option<String>,
    file: String,
    content: String,
}

/// The variables and file forms of `turn_secrets::for_turn`'s value.
fn parts(secrets: &Value) -> (Vec<(String, String)>, Vec<FileForm>) {
    let env = secrets
        .get("env")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    let files = secrets
        .get("files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| {
            Some(FileForm {
                var: f.get("var").and_then(Value::as_str).map(str::to_owned),
                file: f.get("file").and_then(Value::as_str)?.to_owned(),
                content: f.get("content").and_then(Value::as_str)?.to_owned(),
            })
        })
        // A plain file name only (turn_secrets' names are hangar's own; this keeps it so).
        .filter(|f| !f.file.contains('/') && !f.file.starts_with('.'))
        .collect();
    (env, files)
}

/// Where each file form goes under `base`, and the variable that then names it.
fn destinations(
    base: &Path,
    run: &str,
    session: &str,
    codex: bool,
    files: &[FileForm],
) -> Vec<(PathBuf, Option<(String, String)>)> {
    let run_dir = base.join(format!("hangar-{run}-credentials"));
    let codex_home = base.join(format!("hangar-{session}-codex"));
    files
        .iter()
        .filter_map(|f| match &f.var {
            Some(var) => {
                let path = run_dir.join(&f.file);
                let shown = path.display().to_string();
                Some((path, Some((var.clone(), shown))))
            }
            // `auth.json` is for Codex only.
            None if codex => Some((
                codex_home.join(&f.file),
                Some(("CODEX_HOME".to_owned(), codex_home.display().to_string())),
            )),
            None => None,
        })
        .collect()
}

/// Sets the variable that names a placed file (replacing one of the same name).
fn set(env: &mut Vec<(String, String)>, var: Option<(String, String)>) {
    if let Some((k, v)) = var {
        env.retain(|(name, _)| *name != k);
        env.push((k, v));
    }
}

/// Places `secrets` here, as hangar's user (a plain folder).
pub(crate) fn here(
    secrets: &Value,
    run: &str,
    session: &str,
    codex: bool,
) -> Result<Placed, String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let (mut env, files) = parts(secrets);
    let mut placed = Placed::default();
    let base = std::env::temp_dir();
    for (f, (path, var)) in files
        .iter()
        .zip(destinations(&base, run, session, codex, &files))
    {
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(dir)
                .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
            if f.var.is_some() && !placed.remove.iter().any(|p| p == dir) {
                placed.remove.push(dir.to_owned());
            }
        }
        let _ = std::fs::remove_file(&path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut w| w.write_all(f.content.as_bytes()))
            .map_err(|e| format!("cannot write the turn's credential {}: {e}", path.display()))?;
        if f.var.is_none() {
            placed.remove.push(path.clone());
        }
        set(&mut env, var);
    }
    placed.env = env;
    Ok(placed)
}

/// Removes what [`here`] placed.
fn remove_here(placed: &Placed) {
    for p in &placed.remove {
        let _ = if p.is_dir() {
            std::fs::remove_dir_all(p)
        } else {
            std::fs::remove_file(p)
        };
    }
}

impl Runs {
    /// Places `secrets` inside `sb`, for its agent.
    pub(crate) async fn place_one_shot_secrets(
        &self,
        sb: &Sandbox,
        secrets: &Value,
        run: &str,
        session: &str,
        codex: bool,
    ) -> Result<Placed, String> {
        let (mut env, files) = parts(secrets);
        let mut placed = Placed::default();
        let dests = destinations(Path::new(SANDBOX_TMP), run, session, codex, &files);
        let mut dirs: Vec<PathBuf> = Vec::new();
        for (f, (path, _)) in files.iter().zip(&dests) {
            let dir = path.parent().unwrap_or(Path::new(SANDBOX_TMP)).to_owned();
            if !dirs.contains(&dir) {
                // The per-run folder goes with the turn; the session's Codex home stays.
                if f.var.is_some() {
                    placed.remove.push(dir.clone());
                }
                dirs.push(dir);
            }
        }
        if !dirs.is_empty() {
            // Made by the agent itself, so the folders are the agent's, mode 0700.
            let mut mkdir = ExecRequest::new(["mkdir", "-p", "-m", "700", "--"]);
            mkdir
                .argv
                .extend(dirs.iter().map(|d| d.display().to_string()));
            let made = with_provider!(self.sandboxes, sb.env.provider, |p| p
                .exec(sb, Who::Agent, &mkdir)
                .await
                .map_err(ControlError::from));
            match made {
                Ok(out) if out.success() => {}
                Ok(out) => {
                    return Err(format!(
                        "cannot make the credentials' folders in the sandbox: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                Err(e) => {
                    return Err(format!(
                        "cannot make the credentials' folders in the sandbox: {e}"
                    ));
                }
            }
        }
        for (f, (path, var)) in files.iter().zip(dests) {
            let copied = with_provider!(self.sandboxes, sb.env.provider, |p| {
                hangar_sandbox::inside::install(
                    p,
                    sb,
                    f.content.as_bytes().to_vec(),
                    &path,
                    &agent_owner(sb),
                    0o600,
                )
                .await
                .map_err(ControlError::from)
            });
            copied.map_err(|e| {
                format!(
                    "cannot write the turn's credential {} in the sandbox: {e}",
                    path.display()
                )
            })?;
            if f.var.is_none() {
                placed.remove.push(path.clone());
            }
            set(&mut env, var);
        }
        placed.env = env;
        Ok(placed)
    }

    /// Removes what [`here`] (`sb` none) or [`Runs::place_one_shot_secrets`] placed (as
    /// hangar's user inside).
    pub(crate) async fn remove_one_shot_secrets(&self, sb: Option<&Sandbox>, placed: &Placed) {
        let Some(sb) = sb else {
            return remove_here(placed);
        };
        if placed.remove.is_empty() {
            return;
        }
        let mut rm = ExecRequest::new(["rm", "-rf", "--"]);
        rm.argv
            .extend(placed.remove.iter().map(|p| p.display().to_string()));
        let out = with_provider!(self.sandboxes, sb.env.provider, |p| p
            .exec(sb, Who::Hangar, &rm)
            .await
            .map_err(ControlError::from));
        if !out.as_ref().is_ok_and(|o| o.success()) {
            tracing::warn!(sandbox = %sb.id, "cannot remove a one-shot turn's credentials in the sandbox");
        }
    }
}

/// `uid:gid` of the sandbox's agent under the uid split, else empty (the sandbox's user).
fn agent_owner(sb: &Sandbox) -> String {
    sb.agent
        .as_ref()
        .map(|a| format!("{}:{}", a.uid, a.gid))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use serde_json::json;

    fn secrets() -> Value {
        json!({
            "env": {"ANTHROPIC_API_KEY": "k"},
            "files": [
                {"secret": "GOOGLE_APPLICATION_CREDENTIALS", "var": "GOOGLE_APPLICATION_CREDENTIALS", "file": "google-credentials.json", "content": "{}"},
                {"secret": "CODEX_AUTH_JSON", "var": null, "file": "auth.json", "content": "{\"tokens\":{}}"},
                {"secret": "X", "var": "X", "file": "../escape", "content": "no"}
            ]
        })
    }

    #[test]
    fn files_are_the_agents_alone_and_leave_with_the_turn() {
        use std::os::unix::fs::PermissionsExt;
        let run = format!("run-test-{}", std::process::id());
        let session = format!("ses-test-{}", std::process::id());
        let placed = here(&secrets(), &run, &session, true).unwrap();
        let get = |k: &str| {
            placed
                .env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| PathBuf::from(v))
                .unwrap()
        };
        let key = get("GOOGLE_APPLICATION_CREDENTIALS");
        let codex_home = get("CODEX_HOME");
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "{}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(key.parent().unwrap()), 0o700);
        assert_eq!(mode(&codex_home), 0o700);
        assert_eq!(mode(&codex_home.join("auth.json")), 0o600);
        assert!(
            !placed.env.iter().any(|(k, _)| k == "X"),
            "{:?}",
            placed.env
        );
        remove_here(&placed);
        assert!(!key.exists() && !key.parent().unwrap().exists());
        // The session's Codex home stays (its threads), without the sign-in.
        assert!(codex_home.is_dir() && !codex_home.join("auth.json").exists());
        std::fs::remove_dir_all(codex_home).unwrap();
    }

    #[test]
    fn auth_json_is_for_codex_only() {
        let (_, files) = parts(&secrets());
        let d = destinations(Path::new("/tmp"), "r", "s", false, &files);
        assert_eq!(d.len(), 1, "{d:?}");
    }
}
