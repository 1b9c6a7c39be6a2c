//! Where a session started with a folder runs (issue 18): in a sandbox, never as the server's own
//! user unless the server says so.
//!
//! A session asked for with only a folder (`POST /v1/sessions` `{dir}`, the web page's form)
//! runs in the in-place local sandbox `hangar run` uses ([`crate::IN_PLACE_ENV`]): bubblewrap on
//! the folder itself, hangar's home hidden. Before this, such a session ran the driver and the
//! agent as the server's user, and the agent read `$HANGAR_HOME/master.key` and the database.
//! A plain folder (no sandbox) is only for a request that asks for it (`no_sandbox`) on a server
//! that allows it ([`HANGAR_UNSANDBOXED_FOLDERS`]`=allow`, `hangar serve
//! --unsandboxed-folders`), and even then hangar's home, a folder above it or one inside it is
//! refused, as it is for every session and sandbox made from a folder.

use std::path::{Path, PathBuf};

use hangar_protocol::env::HANGAR_UNSANDBOXED_FOLDERS;

use crate::error::ControlError;
use crate::launch::Tools;

/// The value of [`HANGAR_UNSANDBOXED_FOLDERS`] that allows plain folders.
pub const ALLOW: &str = "allow";

/// Whether this control plane runs sessions in plain folders when asked (`Ok(())`), or why not:
/// the setting is unset (forbidden, saying what to set) or says something else than `allow`.
pub(crate) fn unsandboxed_allowed(tools: &Tools) -> Result<(), ControlError> {
    match crate::launch::setting(tools, HANGAR_UNSANDBOXED_FOLDERS).as_deref() {
        Some(ALLOW) => Ok(()),
        None => Err(ControlError::NotAllowed(format!(
            "this server runs no session unsandboxed: a plain folder would run the driver and the agent as the server's own user, who can read hangar's vault; leave no_sandbox out (the session then runs in the in-place local sandbox, or name an environment), or start the server with {HANGAR_UNSANDBOXED_FOLDERS}={ALLOW} (`hangar serve --unsandboxed-folders`) to allow it"
        ))),
        Some(other) => Err(ControlError::NotAllowed(format!(
            "{HANGAR_UNSANDBOXED_FOLDERS}={other:?} is not {ALLOW:?}, so this server runs no session unsandboxed; set it to {ALLOW:?} to allow plain folders, or unset it"
        ))),
    }
}

/// `dir`, resolved, if it is a folder that neither is hangar's home (`home`), nor holds it, nor
/// lies inside it: an agent working in any of them could read the vault's master key, the
/// database or other runs' control folders (a copy would carry them into the sandbox).
pub(crate) fn outside_home(home: &Path, dir: &Path) -> Result<PathBuf, ControlError> {
    let resolved = dir
        .canonicalize()
        .map_err(|e| ControlError::Invalid(format!("{}: {e}", dir.display())))?;
    if !resolved.is_dir() {
        return Err(ControlError::Invalid(format!(
            "{} is not a folder",
            resolved.display()
        )));
    }
    // A home that does not exist yet cannot be under the folder any more than its path says.
    let home = home.canonicalize().unwrap_or_else(|_| home.to_owned());
    let why = if resolved == home {
        Some("is hangar's home")
    } else if home.starts_with(&resolved) {
        Some("holds hangar's home")
    } else if resolved.starts_with(&home) {
        Some("is inside hangar's home")
    } else {
        None
    };
    match why {
        Some(why) => Err(ControlError::Invalid(format!(
            "{} {why} ({}), where the vault's master key, the database and every run's control folder live; an agent working there could read them, so it is refused: work in another folder (or move HANGAR_HOME out of it)",
            resolved.display(),
            home.display()
        ))),
        None => Ok(resolved),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn hangars_home_its_parents_and_its_insides_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("a/hangar");
        let inside = home.join("sandboxes/sb-1");
        let beside = root.path().join("a/repo");
        for d in [&inside, &beside] {
            std::fs::create_dir_all(d).unwrap();
        }
        for (dir, why) in [
            (home.clone(), "is hangar's home"),
            (root.path().join("a"), "holds hangar's home"),
            (root.path().to_owned(), "holds hangar's home"),
            (PathBuf::from("/"), "holds hangar's home"),
            (inside.clone(), "is inside hangar's home"),
            // The same through `..` and a link.
            (inside.join("../.."), "is hangar's home"),
        ] {
            let e = outside_home(&home, &dir).unwrap_err().to_string();
            assert!(e.contains(why), "{}: {e}", dir.display());
        }
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&home, &link).unwrap();
        let e = outside_home(&home, &link).unwrap_err().to_string();
        assert!(e.contains("is hangar's home"), "{e}");
        assert_eq!(
            outside_home(&home, &beside).unwrap(),
            beside.canonicalize().unwrap()
        );
        // A sibling whose name starts like the home's is not inside it.
        let sibling = root.path().join("a/hangar-work");
        std::fs::create_dir_all(&sibling).unwrap();
        assert!(outside_home(&home, &sibling).is_ok());
    }

    #[test]
    fn plain_folders_need_the_setting_to_say_allow() {
        let tools = |v: &str| Tools {
            home: "/h".into(),
            driver: "/d".into(),
            claude: "/c".into(),
            codex: "/x".into(),
            env: vec![(HANGAR_UNSANDBOXED_FOLDERS.into(), v.into())],
        };
        assert!(unsandboxed_allowed(&tools("allow")).is_ok());
        let e = unsandboxed_allowed(&tools("yes")).unwrap_err().to_string();
        assert!(e.contains("is not \"allow\""), "{e}");
        if hangar_protocol::env::var_os(HANGAR_UNSANDBOXED_FOLDERS).is_none() {
            let e = unsandboxed_allowed(&tools("")).unwrap_err().to_string();
            assert!(e.contains("HANGAR_UNSANDBOXED_FOLDERS=allow"), "{e}");
        }
    }
}
