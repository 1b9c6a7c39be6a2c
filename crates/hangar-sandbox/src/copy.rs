//! The workspace: a copy of the repository folder as it is, `.git` included, so uncommitted
//! changes, untracked and ignored files come along (a clone would lose them). Regular files
//! (mode and modification time kept), folders and symbolic links (copied as links, never
//! followed) are copied; sockets, fifos and device files are left out. Under the uid split every
//! copied entry belongs to the agent.

use std::fs::{self, File, FileTimes};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown};
use std::path::Path;

/// Copies the folder `src` to `dst` (which must not exist), owned by `owner` when given, leaving
/// out `skip` (hangar's home, when it is inside the repository).
pub fn copy_tree(
    src: &Path,
    dst: &Path,
    owner: Option<(u32, u32)>,
    skip: Option<&Path>,
) -> io::Result<()> {
    let meta = fs::metadata(src)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", src.display())))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a folder", src.display()),
        ));
    }
    copy_dir(src, dst, &meta, owner, skip)
}

fn copy_dir(
    src: &Path,
    dst: &Path,
    meta: &fs::Metadata,
    owner: Option<(u32, u32)>,
    skip: Option<&Path>,
) -> io::Result<()> {
    let ctx = |e: io::Error, p: &Path| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    fs::create_dir(dst).map_err(|e| ctx(e, dst))?;
    // Writable while its entries are made; the source's mode is set once they are in.
    fs::set_permissions(dst, fs::Permissions::from_mode(0o700)).map_err(|e| ctx(e, dst))?;
    for entry in fs::read_dir(src).map_err(|e| ctx(e, src))? {
        let entry = entry.map_err(|e| ctx(e, src))?;
        let from = entry.path();
        if skip.is_some_and(|s| s == from) {
            continue;
        }
        let to = dst.join(entry.file_name());
        let m = fs::symlink_metadata(&from).map_err(|e| ctx(e, &from))?;
        let ft = m.file_type();
        if ft.is_dir() {
            copy_dir(&from, &to, &m, owner, skip)?;
        } else if ft.is_file() {
            copy_file(&from, &to, &m, owner)?;
        } else if ft.is_symlink() {
            let target = fs::read_link(&from).map_err(|e| ctx(e, &from))?;
            std::os::unix::fs::symlink(&target, &to).map_err(|e| ctx(e, &to))?;
            if let Some((uid, gid)) = owner {
                lchown(&to, Some(uid), Some(gid)).map_err(|e| ctx(e, &to))?;
            }
        }
    }
    if let Some((uid, gid)) = owner {
        lchown(dst, Some(uid), Some(gid)).map_err(|e| ctx(e, dst))?;
    }
    fs::set_permissions(dst, fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(|e| ctx(e, dst))?;
    // A folder's times last: adding its entries changed them.
    File::open(dst)
        .and_then(|f| f.set_times(times(meta)))
        .map_err(|e| ctx(e, dst))?;
    Ok(())
}

/// One file: made writable by us, filled (`io::copy` uses copy_file_range), then its times,
/// owner and mode, in that order (chown clears set-uid/set-gid bits).
fn copy_file(
    from: &Path,
    to: &Path,
    m: &fs::Metadata,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let ctx = |e: io::Error, p: &Path| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let mut src = File::open(from).map_err(|e| ctx(e, from))?;
    let mut dst = File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(|e| ctx(e, to))?;
    io::copy(&mut src, &mut dst).map_err(|e| ctx(e, from))?;
    dst.set_times(times(m)).map_err(|e| ctx(e, to))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&dst, Some(uid), Some(gid)).map_err(|e| ctx(e, to))?;
    }
    dst.set_permissions(fs::Permissions::from_mode(m.mode() & 0o7777))
        .map_err(|e| ctx(e, to))
}

/// Removes `path` and everything under it, also where a folder's mode forbids removing its
/// entries (a read-only folder in a repository). Symbolic links are removed, never followed.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            make_writable(path);
            std::fs::remove_dir_all(path)
        }
        Err(e) => Err(e),
    }
}

/// Removes one entry of a folder: a folder with everything in it, or a file or link.
pub fn remove_entry(p: &Path) -> io::Result<()> {
    let is_dir = fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if is_dir {
        remove_tree(p)
    } else {
        fs::remove_file(p)
    }
}

fn make_writable(dir: &Path) {
    let Ok(m) = fs::symlink_metadata(dir) else {
        return;
    };
    if !m.is_dir() {
        return;
    }
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode((m.mode() & 0o7777) | 0o700));
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            make_writable(&e.path());
        }
    }
}

fn times(m: &fs::Metadata) -> FileTimes {
    let mut t = FileTimes::new();
    if let Ok(a) = m.accessed() {
        t = t.set_accessed(a);
    }
    if let Ok(w) = m.modified() {
        t = t.set_modified(w);
    }
    t
}

/// Removes a sandbox's folder on the host (all but `ctl/`, the runs' logs, when `keep_logs`),
/// for every provider's `destroy`.
pub async fn remove_host_dir(host: &Path, keep_logs: bool) -> Result<(), crate::SandboxError> {
    let host = host.to_owned();
    if !host.exists() {
        return Ok(());
    }
    tokio::task::spawn_blocking(move || -> Result<(), crate::SandboxError> {
        if keep_logs {
            for e in std::fs::read_dir(&host)
                .map_err(|e| crate::failed(host.display(), e))?
                .flatten()
            {
                if e.file_name() != "ctl" {
                    remove_entry(&e.path()).map_err(|e| crate::failed(host.display(), e))?;
                }
            }
            Ok(())
        } else {
            remove_tree(&host).map_err(|e| crate::failed(host.display(), e))
        }
    })
    .await
    .map_err(|e| crate::failed("removing the sandbox", e))?
}

/// The folder `root` as a tar (links kept as links, modes kept), leaving out `skip`.
pub fn tar_tree(root: &Path, skip: Option<&Path>) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.mode(tar::HeaderMode::Complete);
    fn walk(
        b: &mut tar::Builder<Vec<u8>>,
        root: &Path,
        dir: &Path,
        skip: Option<&Path>,
    ) -> std::io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            if skip.is_some_and(|s| s == path) {
                continue;
            }
            let rel = path.strip_prefix(root).map_err(std::io::Error::other)?;
            let ft = e.file_type()?;
            b.append_path_with_name(&path, rel)?;
            if ft.is_dir() {
                walk(b, root, &path, skip)?;
            }
        }
        Ok(())
    }
    walk(&mut b, root, root, skip)?;
    b.into_inner()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn copies_files_links_modes_and_times_as_they_are() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::create_dir_all(src.join(".git/objects")).unwrap();
        fs::write(src.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(src.join("run.sh"), "#!/bin/sh\n").unwrap();
        fs::create_dir(src.join("skipped")).unwrap();
        fs::set_permissions(src.join("run.sh"), fs::Permissions::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink("run.sh", src.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", src.join("outside")).unwrap();
        fs::create_dir(src.join("ro")).unwrap();
        fs::write(src.join("ro/f"), "x").unwrap();
        fs::set_permissions(src.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options()
            .write(true)
            .open(src.join("run.sh"))
            .unwrap()
            .set_modified(old)
            .unwrap();

        let dst = t.path().join("dst");
        copy_tree(&src, &dst, None, Some(&src.join("skipped"))).unwrap();
        assert!(!dst.join("skipped").exists());
        assert_eq!(
            fs::read_to_string(dst.join(".git/HEAD")).unwrap(),
            "ref: refs/heads/main\n"
        );
        let m = fs::metadata(dst.join("run.sh")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o751);
        assert_eq!(m.modified().unwrap(), old);
        assert_eq!(
            fs::read_link(dst.join("link")).unwrap(),
            Path::new("run.sh")
        );
        assert_eq!(
            fs::read_link(dst.join("outside")).unwrap(),
            Path::new("/etc/hostname")
        );
        assert_eq!(fs::metadata(dst.join("ro")).unwrap().mode() & 0o777, 0o555);
        assert_eq!(fs::read_to_string(dst.join("ro/f")).unwrap(), "x");
        remove_tree(&dst).unwrap();
        assert!(!dst.exists());
        remove_tree(&src).unwrap();
    }

    #[test]
    fn refuses_what_is_not_a_folder() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("f"), "").unwrap();
        assert!(copy_tree(&t.path().join("f"), &t.path().join("d"), None, None).is_err());
        assert!(copy_tree(&t.path().join("none"), &t.path().join("d"), None, None).is_err());
    }
}
