//! The turn's credentials (issue 20): the control plane writes its person's and its
//! environment's secrets in a file of the control folder (`--secrets-file`, hangar's user's,
//! mode 0600); the driver reads it, removes it, and hands them on the way each harness takes
//! them: variables in the harness's environment, and files (Codex's `auth.json` in the turn's
//! `CODEX_HOME`, a Vertex key named by `GOOGLE_APPLICATION_CREDENTIALS`) of mode 0600 owned by
//! the agent's uid, in a folder of mode 0700 the agent owns, so no other uid reads them.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::args::Agent;

/// What the file held.
#[derive(Default)]
pub struct Taken {
    /// Variables for the harness.
    pub env: Vec<(String, String)>,
    /// Files: (the variable that names it, if any; its file name; its content).
    pub files: Vec<(Option<String>, String, String)>,
}

/// Reads the secrets file and removes it (a later reader of the control folder finds none).
pub fn take(path: &Path) -> Result<Taken, String> {
    let text = fs::read(path)
        .map_err(|e| format!("cannot read the turn's credentials {}: {e}", path.display()))?;
    let _ = fs::remove_file(path);
    let v: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("the turn's credentials {}: {e}", path.display()))?;
    let mut t = Taken::default();
    if let Some(env) = v.get("env").and_then(Value::as_object) {
        for (k, val) in env {
            if let Some(val) = val.as_str() {
                t.env.push((k.clone(), val.to_owned()));
            }
        }
    }
    for f in v
        .get("files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(file), Some(content)) = (
            f.get("file").and_then(Value::as_str),
            f.get("content").and_then(Value::as_str),
        ) else {
            continue;
        };
        // A plain file name only: the file goes in a folder the driver chooses.
        if file.contains('/') || file.starts_with('.') {
            return Err(format!("the turn's credentials name the file {file:?}"));
        }
        let var = f.get("var").and_then(Value::as_str).map(str::to_owned);
        t.files.push((var, file.to_owned(), content.to_owned()));
    }
    Ok(t)
}

/// Writes `content` to `path` (replacing what is there, a link included) as a file of mode
/// 0600 owned by the agent under the uid split.
pub fn write_private(path: &Path, content: &[u8], agent: Option<&Agent>) -> std::io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(_) => fs::remove_file(path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    if let Some(a) = agent {
        std::os::unix::fs::fchown(&f, Some(a.uid), Some(a.gid))?;
    }
    f.write_all(content)
}

/// Places the files: `auth.json` in `codex_home` when there is one, the others in
/// `<parent>/hangar-<run>-credentials` (mode 0700, the agent's); the variables that name them
/// join `env`. The folder made, to remove when the turn ends.
pub fn place(
    t: &mut Taken,
    parent: &Path,
    run: &str,
    codex_home: Option<&Path>,
    agent: Option<&Agent>,
) -> Result<Option<PathBuf>, String> {
    let mut made = None;
    for (var, file, content) in std::mem::take(&mut t.files) {
        let path = match (&var, codex_home) {
            (None, Some(home)) => home.join(&file),
            (None, None) => continue,
            (Some(_), _) => {
                let dir = parent.join(format!("hangar-{run}-credentials"));
                if made.is_none() {
                    let _ = fs::remove_dir_all(&dir);
                    fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&dir)
                        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
                    if let Some(a) = agent {
                        std::os::unix::fs::chown(&dir, Some(a.uid), Some(a.gid)).map_err(|e| {
                            format!("cannot give {} to the agent: {e}", dir.display())
                        })?;
                    }
                    made = Some(dir.clone());
                }
                dir.join(&file)
            }
        };
        write_private(&path, content.as_bytes(), agent)
            .map_err(|e| format!("cannot write the turn's credential {}: {e}", path.display()))?;
        if let Some(var) = var {
            t.env.retain(|(k, _)| *k != var);
            t.env.push((var, path.display().to_string()));
        }
    }
    Ok(made)
}
