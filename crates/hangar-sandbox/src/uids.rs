//! Each sandbox's agent gets a uid of its own (gid the same number) from
//! [`AGENT_UID_FIRST`]..=[`AGENT_UID_LAST`], so two sandboxes' agents are never the same user on
//! the host (a container's uids are the host's). A uid is claimed by creating the symbolic link
//! `<home>/sandboxes/.uids/<uid>` -> `<sandbox id>` (creation is atomic: two creates cannot claim
//! the same uid) and released when the sandbox is destroyed. Replicas that share no home claim
//! it in their database instead and hand it over (`CreateRequest::agent_uid`).

use std::io;
use std::path::{Path, PathBuf};

use crate::SandboxError;
use crate::layout::{AGENT_UID_FIRST, AGENT_UID_LAST};

fn dir(home: &Path) -> PathBuf {
    home.join("sandboxes").join(".uids")
}

/// Claims the first free uid for sandbox `id`.
pub fn claim(home: &Path, id: &str) -> Result<u32, SandboxError> {
    let d = dir(home);
    std::fs::create_dir_all(&d)
        .map_err(|e| SandboxError::Failed(format!("cannot make {}: {e}", d.display())))?;
    for uid in AGENT_UID_FIRST..=AGENT_UID_LAST {
        match std::os::unix::fs::symlink(id, d.join(uid.to_string())) {
            Ok(()) => return Ok(uid),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(SandboxError::Failed(format!(
                    "cannot claim an agent uid in {}: {e}",
                    d.display()
                )));
            }
        }
    }
    Err(SandboxError::Unavailable(format!(
        "every agent uid ({AGENT_UID_FIRST}-{AGENT_UID_LAST}) is taken by a sandbox; remove some (hangar sb rm)"
    )))
}

/// The uids claimed in `home`'s own pool.
pub fn held(home: &Path) -> Vec<u32> {
    std::fs::read_dir(dir(home))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Gives `uid` back if `id` holds it.
pub fn release(home: &Path, id: &str, uid: u32) {
    let link = dir(home).join(uid.to_string());
    if std::fs::read_link(&link).is_ok_and(|t| t == Path::new(id)) {
        let _ = std::fs::remove_file(link);
    }
}

/// Makes a new sandbox's folder on the host (`<home>/sandboxes/<id>`; refused if it is there
/// already) and, with the uid split, claims the agent's uid for it (the folder goes again when
/// none is free).
pub(crate) fn new_host_dir(
    req: &crate::CreateRequest,
    uid_split: bool,
) -> Result<(PathBuf, Option<crate::AgentUser>), SandboxError> {
    let parent = req.home.join("sandboxes");
    std::fs::create_dir_all(&parent).map_err(|e| crate::failed(parent.display(), e))?;
    let host_dir = crate::layout::host_dir(&req.home, &req.id);
    std::fs::create_dir(&host_dir).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            SandboxError::Failed(format!(
                "sandbox {} exists already ({})",
                req.id,
                host_dir.display()
            ))
        } else {
            crate::failed(host_dir.display(), e)
        }
    })?;
    if !uid_split {
        return Ok((host_dir, None));
    }
    let claimed = match req.agent_uid {
        Some(uid) if (AGENT_UID_FIRST..=AGENT_UID_LAST).contains(&uid) => Ok(uid),
        Some(uid) => Err(SandboxError::Invalid(format!(
            "agent uid {uid} is not one of hangar's ({AGENT_UID_FIRST}-{AGENT_UID_LAST})"
        ))),
        None => claim(&req.home, &req.id),
    };
    match claimed {
        Ok(uid) => Ok((
            host_dir,
            Some(crate::AgentUser {
                uid,
                gid: uid,
                home: PathBuf::from(crate::layout::AGENT_HOME),
            }),
        )),
        Err(e) => {
            let _ = std::fs::remove_dir(&host_dir);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn uids_are_claimed_once_and_given_back() {
        let t = tempfile::tempdir().unwrap();
        let a = claim(t.path(), "a").unwrap();
        let b = claim(t.path(), "b").unwrap();
        assert_eq!((a, b), (AGENT_UID_FIRST, AGENT_UID_FIRST + 1));
        release(t.path(), "b", a); // not b's: kept
        assert_eq!(claim(t.path(), "c").unwrap(), AGENT_UID_FIRST + 2);
        release(t.path(), "a", a);
        assert_eq!(claim(t.path(), "d").unwrap(), AGENT_UID_FIRST);
    }
}
