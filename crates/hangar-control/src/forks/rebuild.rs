//! A step's tree rebuilt into a new folder from hangar's store (the turn's pack, or its object
//! store while it runs, and the repository's objects), then hashed again.
//!
//! For a work tree in a repository the folder becomes a clone of it (`--no-hardlinks`: nothing
//! of the source is shared or touched) whose HEAD is the source's, whose index is the step's
//! tree, and whose files are that tree's (untracked-but-not-ignored files included, as they are
//! in the tree; now tracked, so that every file of the tree is in the fork's tree too). The
//! objects the step needs beyond the clone's are packed into it. A plain folder gets the files
//! only. git does the work in a scratch repository with no system or user config, no hooks and
//! no templates; `.gitattributes` conversions are switched off for the checkout (`info/
//! attributes`), since the tree's ids are of the content as it was on disk.
//!
//! Non-goals: submodules' own work trees (a gitlink becomes an empty folder, as a checkout
//! without `--recurse-submodules` leaves it).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::ControlError;
use crate::sandboxes::take::Taken;
use crate::steps::trees::{RunFiles, Scratch};

/// What the rebuild made.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rebuilt {
    /// The commit the fork's HEAD is on (none for a plain folder or an unborn branch).
    pub head: Option<String>,
    /// Whether the folder is a git repository (a clone of the source's).
    pub repository: bool,
    /// The tree id of the folder's work tree, hashed again (hangar-treehash).
    pub rehashed: String,
}

/// Why a rebuild failed: the store could not produce the tree (the fork is refused), or
/// something on hangar's side broke.
#[derive(Debug)]
pub(crate) enum Failed {
    Store(String),
    Internal(String),
}

impl From<Failed> for ControlError {
    fn from(f: Failed) -> ControlError {
        match f {
            Failed::Store(m) => ControlError::Refused(m),
            Failed::Internal(m) => ControlError::Internal(m),
        }
    }
}

/// Refuses a workspace whose repository is not a plain `.git` folder of its own.
fn own_repository(source: &Path) -> Result<(), Failed> {
    let git = source.join(".git");
    let meta = match std::fs::symlink_metadata(&git) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Failed::Internal(format!("{}: {e}", git.display()))),
    };
    let refuse = |why: &str| {
        Err(Failed::Store(format!(
            "the fork is refused: the sandbox's repository {} {why}; a fork takes only a repository of the workspace's own (a plain .git folder), since its agent could otherwise point it at another repository of this machine",
            git.display()
        )))
    };
    if !meta.is_dir() {
        return refuse("is not a folder (a link, or a gitdir: file)");
    }
    for (inner, why) in [
        ("commondir", "shares a common folder (commondir)"),
        (
            "objects/info/alternates",
            "borrows objects from elsewhere (alternates)",
        ),
        (
            "objects/info/http-alternates",
            "borrows objects from elsewhere (alternates)",
        ),
    ] {
        if std::fs::symlink_metadata(git.join(inner)).is_ok() {
            return refuse(why);
        }
    }
    for inner in ["objects", "refs", "packed-refs", "HEAD", "config"] {
        if std::fs::symlink_metadata(git.join(inner)).is_ok_and(|m| m.file_type().is_symlink()) {
            return refuse(&format!("has a link for {inner}"));
        }
    }
    Ok(())
}

/// Rebuilds `tree` into `dest` (an empty folder), the objects read from the run's files (its
/// kept pack, or its control folder's) and the work tree `source`'s repository.
///
/// `untrusted`: `source` is a sandbox's workspace, which its agent controls (under the uid
/// split, an agent that must not reach what hangar's user can read). Its repository is then
/// taken only as a plain `.git` folder of its own (no link, no `gitdir:` file, no alternates,
/// no shared common dir), and cloned through git's transport (only what its refs reach), so
/// that the agent cannot point the clone at another repository on this machine.
pub(crate) fn rebuild(
    run: &RunFiles,
    source: &Path,
    tree: &str,
    dest: &Path,
    untrusted: bool,
) -> Result<Rebuilt, Failed> {
    if tree.len() != 40 || !tree.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Failed::Store(format!("{tree:?} is not a tree id")));
    }
    if untrusted {
        own_repository(source)?;
    }
    let scratch = Scratch::new().map_err(|e| Failed::Internal(e.to_string()))?;
    let turn_objects = turn_objects(run, &scratch.0)?;
    let layout = hangar_treehash::RepoLayout::discover(source);
    // A scratch repository that reads every object there is: the turn's, the source's and
    // (once cloned) the fork's.
    let work = scratch.0.join("work");
    git(None, &["init", "-q", "--template=", &path_str(&work)?], &[])
        .map_err(|e| Failed::Internal(format!("git init: {}", text(&e))))?;
    let scratch_git = work.join(".git");
    let mut alternates = turn_objects;
    let head = if layout.gitdir.is_some() {
        // The clone's other side (upload-pack, which git holds safe to run in a repository it
        // does not trust) gets none of the `-c` settings, so a repository of another owner
        // (the agent's, in a sandbox) is allowed through a global config of hangar's own.
        let global = scratch.0.join("gitconfig");
        let (src, src_git) = (path_str(source)?, path_str(&source.join(".git"))?);
        if src.contains(['\n', '"', '\\']) {
            return Err(Failed::Store(format!(
                "the repository's path {src:?} cannot be named in git's config"
            )));
        }
        std::fs::write(
            &global,
            format!("[safe]\n\tdirectory = \"{src}\"\n\tdirectory = \"{src_git}\"\n"),
        )
        .map_err(|e| Failed::Internal(format!("{}: {e}", global.display())))?;
        // An agent's repository goes through git's transport: only what its refs reach.
        let local = if untrusted {
            "--no-local"
        } else {
            "--no-hardlinks"
        };
        git(
            None,
            &[
                "clone",
                "-q",
                "--no-checkout",
                local,
                "--template=",
                "--",
                &src,
                &path_str(dest)?,
            ],
            &[("GIT_CONFIG_GLOBAL", global.into_os_string())],
        )
        .map_err(|e| {
            Failed::Store(format!(
                "cannot clone the repository of {}: {}",
                source.display(),
                text(&e)
            ))
        })?;
        alternates.push(dest.join(".git/objects"));
        let head = git(
            Some(dest),
            &["rev-parse", "-q", "--verify", "HEAD^{commit}"],
            &[],
        )
        .ok()
        .map(|o| String::from_utf8_lossy(&o).trim().to_owned())
        .filter(|h| !h.is_empty());
        write_alternates(&scratch_git, &alternates)?;
        pack_missing(&scratch_git, tree, head.as_deref(), dest)?;
        head
    } else {
        if let Some(objects) = layout.objects_dir() {
            alternates.push(objects);
        }
        write_alternates(&scratch_git, &alternates)?;
        None
    };
    // Index and files: in the fork's own repository (which must now hold every object), or
    // through the scratch repository with a scratch index for a plain folder.
    let (git_dir, env): (PathBuf, Vec<(&str, OsString)>) = if layout.gitdir.is_some() {
        (dest.join(".git"), Vec::new())
    } else {
        (
            scratch_git.clone(),
            vec![
                ("GIT_INDEX_FILE", scratch.0.join("index").into_os_string()),
                ("GIT_WORK_TREE", dest.as_os_str().to_owned()),
            ],
        )
    };
    let at = |args: &[&str]| {
        let mut a = vec!["--git-dir".to_owned(), path_str(&git_dir)?];
        if env.is_empty() {
            a.extend(["--work-tree".to_owned(), path_str(dest)?]);
        }
        a.extend(args.iter().map(|s| (*s).to_owned()));
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        git(None, &refs, &env)
            .map_err(|e| Failed::Store(format!("cannot rebuild tree {tree}: {}", text(&e))))
    };
    at(&["read-tree", tree])?;
    let attributes = git_dir.join("info/attributes");
    let info_made = !git_dir.join("info").exists();
    std::fs::create_dir_all(git_dir.join("info"))
        .and_then(|()| {
            std::fs::write(
                &attributes,
                "* -text -eol -ident -filter -working-tree-encoding\n",
            )
        })
        .map_err(|e| Failed::Internal(format!("{}: {e}", attributes.display())))?;
    let checkout = at(&["checkout-index", "-a", "-f", "-u", "-q"]);
    let _ = std::fs::remove_file(&attributes);
    if info_made {
        let _ = std::fs::remove_dir(git_dir.join("info"));
    }
    checkout?;
    let rehashed = hangar_treehash::tree_id(dest)
        .map_err(|e| Failed::Internal(format!("cannot hash {}: {e}", dest.display())))?;
    Ok(Rebuilt {
        head,
        repository: layout.gitdir.is_some(),
        rehashed,
    })
}

/// A work tree in a scratch folder whose repository (if any) is what `taken` holds: the
/// source a step's tree is rebuilt on when the sandbox's own workspace is not on this machine
/// (or is gone). Its HEAD is the bundle's (a branch that points where HEAD does, or detached).
/// The bundle is the agent's: git reads it as a fetch (the objects checked as they come in);
/// whatever it holds, the rebuilt tree must hash to the recorded id.
pub(crate) fn base_from(taken: &Taken) -> Result<(Scratch, PathBuf), Failed> {
    let scratch = Scratch::new().map_err(|e| Failed::Internal(e.to_string()))?;
    let base = scratch.0.join("base");
    std::fs::create_dir(&base).map_err(|e| Failed::Internal(format!("{}: {e}", base.display())))?;
    let bundle = match taken {
        Taken::Plain => return Ok((scratch, base)),
        Taken::Unborn => {
            git(None, &["init", "-q", "--template=", &path_str(&base)?], &[])
                .map_err(|e| Failed::Internal(format!("git init: {}", text(&e))))?;
            return Ok((scratch, base));
        }
        Taken::Bundle(b) => b,
    };
    let bundle_s = path_str(bundle)?;
    let unreadable = |e: Vec<u8>| {
        Failed::Store(format!(
            "the repository's objects taken from the sandbox are not a bundle git can read: {}",
            text(&e)
        ))
    };
    let heads = git(None, &["bundle", "list-heads", &bundle_s], &[]).map_err(unreadable)?;
    let heads: Vec<(String, String)> = String::from_utf8_lossy(&heads)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, name)| (id.to_owned(), name.to_owned()))
        .collect();
    git(None, &["init", "-q", "--template=", &path_str(&base)?], &[])
        .map_err(|e| Failed::Internal(format!("git init: {}", text(&e))))?;
    let head = heads.iter().find(|(_, n)| n == "HEAD").map(|(id, _)| id);
    let mut args = vec![
        "-c",
        "transfer.fsckObjects=true",
        "fetch",
        "-q",
        "--no-tags",
        "--update-head-ok",
        &bundle_s,
        "+refs/*:refs/*",
    ];
    if head.is_some() {
        args.push("+HEAD:refs/hangar-fork/head");
    }
    git(Some(&base), &args, &[]).map_err(unreadable)?;
    if let Some(head) = head {
        let branch = heads
            .iter()
            .find(|(id, n)| id == head && n.starts_with("refs/heads/"))
            .map(|(_, n)| n.clone());
        let set = match &branch {
            Some(b) => git(Some(&base), &["symbolic-ref", "HEAD", b], &[]),
            None => git(
                Some(&base),
                &["update-ref", "--no-deref", "HEAD", head],
                &[],
            ),
        };
        set.map_err(|e| Failed::Internal(format!("the base's HEAD: {}", text(&e))))?;
    }
    Ok((scratch, base))
}

/// The run's own objects as alternates: its object store while the turn runs, and a copy of
/// its pack (`trees.pack` + `.idx`, the kept one once the turn has ended) in the scratch folder.
fn turn_objects(run: &RunFiles, scratch: &Path) -> Result<Vec<PathBuf>, Failed> {
    let mut dirs: Vec<PathBuf> = run.store.iter().cloned().collect();
    if let Some((pack, idx)) = &run.pack {
        let objects = scratch.join("turn-objects");
        let packs = objects.join("pack");
        std::fs::create_dir_all(&packs)
            .map_err(|e| Failed::Internal(format!("{}: {e}", packs.display())))?;
        for (from, to) in [(pack, "pack-turn.pack"), (idx, "pack-turn.idx")] {
            std::fs::copy(from, packs.join(to)).map_err(|e| {
                Failed::Store(format!(
                    "cannot read the turn's objects {}: {e}",
                    from.display()
                ))
            })?;
        }
        dirs.push(objects);
    }
    Ok(dirs)
}

fn write_alternates(git_dir: &Path, dirs: &[PathBuf]) -> Result<(), Failed> {
    let list: String = dirs.iter().map(|p| format!("{}\n", p.display())).collect();
    let file = git_dir.join("objects/info/alternates");
    std::fs::create_dir_all(git_dir.join("objects/info"))
        .and_then(|()| std::fs::write(&file, list))
        .map_err(|e| Failed::Internal(format!("{}: {e}", file.display())))
}

/// Packs into the fork's repository the objects of `tree` that its HEAD does not have.
fn pack_missing(
    scratch_git: &Path,
    tree: &str,
    head: Option<&str>,
    dest: &Path,
) -> Result<(), Failed> {
    let dir = path_str(scratch_git)?;
    let mut args = vec!["--git-dir", &dir, "rev-list", "--objects", tree];
    if let Some(h) = head {
        args.extend(["--not", h]);
    }
    let list = git(None, &args, &[]).map_err(|e| {
        Failed::Store(format!(
            "the objects of tree {tree} are not all in hangar's store (the turn's pack and the repository): {}",
            text(&e)
        ))
    })?;
    if list.is_empty() {
        return Ok(());
    }
    // Written beside the scratch repository, then copied: git renames its temporary pack into
    // place, which fails across file systems (the scratch's temporary folder and the fork's
    // folder under $HANGAR_HOME need not share one: "Invalid cross-device link").
    let out = scratch_git.join("hangar-fork-packs");
    std::fs::create_dir_all(&out)
        .map_err(|e| Failed::Internal(format!("{}: {e}", out.display())))?;
    let base = path_str(&out.join("pack"))?;
    let made =
        git_with_input(&["--git-dir", &dir, "pack-objects", "-q", &base], &list).map_err(|e| {
            Failed::Store(format!(
                "cannot copy the objects of tree {tree} into the fork: {}",
                text(&e)
            ))
        })?;
    let hash = text(&made);
    let packs = dest.join(".git/objects/pack");
    for ext in ["pack", "idx"] {
        let name = format!("pack-{hash}.{ext}");
        std::fs::copy(out.join(&name), packs.join(&name))
            .map_err(|e| Failed::Internal(format!("{}: {e}", packs.join(&name).display())))?;
    }
    Ok(())
}

fn path_str(p: &Path) -> Result<String, Failed> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Failed::Internal(format!("{} is not UTF-8", p.display())))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim().to_owned()
}

/// git with hangar's settings only: no system or user config, no hooks, no fsmonitor, any
/// owner's repository readable. Its stdout, or its stderr as the error.
fn git(dir: Option<&Path>, args: &[&str], env: &[(&str, OsString)]) -> Result<Vec<u8>, Vec<u8>> {
    let mut c = base_command(dir);
    c.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    let out = c
        .output()
        .map_err(|e| format!("cannot run git: {e}").into_bytes())?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(out.stderr)
    }
}

fn git_with_input(args: &[&str], input: &[u8]) -> Result<Vec<u8>, Vec<u8>> {
    let mut c = base_command(None);
    c.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .map_err(|e| format!("cannot run git: {e}").into_bytes())?;
    let fed = child
        .stdin
        .take()
        .map(|mut s| s.write_all(input))
        .transpose();
    let out = child
        .wait_with_output()
        .map_err(|e| format!("git: {e}").into_bytes())?;
    match (fed, out.status.success()) {
        (Ok(_), true) => Ok(out.stdout),
        (Err(e), true) => Err(format!("git's input: {e}").into_bytes()),
        (_, false) => Err(out.stderr),
    }
}

fn base_command(dir: Option<&Path>) -> Command {
    let mut c = Command::new("git");
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "safe.directory=*",
            "-c",
            "core.autocrlf=false",
        ])
        .stdin(Stdio::null());
    if let Some(d) = dir {
        c.arg("-C").arg(d);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use hangar_treehash::{Options, RepoLayout, Store, TreeHasher};

    fn sh(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@e"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    }

    /// What the driver does: hash the work tree into the turn's store, then pack it.
    fn hash_like_the_driver(work: &Path, ctl: &Path) -> String {
        let alternates: Vec<PathBuf> = RepoLayout::discover(work)
            .objects_dir()
            .into_iter()
            .collect();
        let store = Store::open(&ctl.join("tree"), &alternates).unwrap();
        let opts = Options {
            watch: false,
            ..Options::default()
        };
        let mut h = TreeHasher::with_options(work, store, opts).unwrap();
        let tree = h.hash().unwrap().to_hex();
        let store = h.into_store();
        store.export_pack(&ctl.join("trees.pack")).unwrap();
        store.destroy().unwrap();
        tree
    }

    #[test]
    fn a_repositorys_step_comes_back_as_a_clone_with_its_files() {
        let t = tempfile::tempdir().unwrap();
        let (work, ctl, dest) = (
            t.path().join("w"),
            t.path().join("ctl"),
            t.path().join("fork"),
        );
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&ctl).unwrap();
        sh(&work, &["init", "-q"]);
        std::fs::write(work.join("a.txt"), "a\n").unwrap();
        std::fs::write(work.join(".gitignore"), "*.log\n").unwrap();
        std::fs::write(work.join(".gitattributes"), "*.txt text eol=crlf\n").unwrap();
        sh(&work, &["add", "-A"]);
        sh(&work, &["commit", "-qm", "one"]);
        let head = sh(&work, &["rev-parse", "HEAD"]);
        // The agent's work: an edit, a new untracked file, an executable, an ignored file.
        std::fs::write(work.join("a.txt"), "a\nb\n").unwrap();
        std::fs::create_dir(work.join("sub")).unwrap();
        std::fs::write(work.join("sub/new.sh"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            work.join("sub/new.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(work.join("noise.log"), "x\n").unwrap();
        let tree = hash_like_the_driver(&work, &ctl);
        let status_before = sh(&work, &["status", "--porcelain"]);

        let r = rebuild(
            &crate::steps::trees::run_files(t.path(), "run-t", &ctl),
            &work,
            &tree,
            &dest,
            false,
        )
        .unwrap();
        assert_eq!(
            r,
            Rebuilt {
                head: Some(head),
                repository: true,
                rehashed: tree.clone()
            }
        );
        assert_eq!(
            std::fs::read(dest.join("a.txt")).unwrap(),
            b"a\nb\n",
            "no eol conversion"
        );
        let mode = std::fs::metadata(dest.join("sub/new.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
        assert!(!dest.join("noise.log").exists());
        assert!(!dest.join(".git/info/attributes").exists());
        assert_eq!(
            sh(&dest, &["write-tree"]),
            tree,
            "the index is the step's tree"
        );
        sh(&dest, &["fsck", "--no-dangling"]);
        assert_eq!(
            sh(&work, &["status", "--porcelain"]),
            status_before,
            "the source is untouched"
        );
    }

    #[test]
    fn a_plain_folders_step_comes_back_as_files_and_a_missing_object_refuses() {
        let t = tempfile::tempdir().unwrap();
        let (work, ctl, dest) = (
            t.path().join("w"),
            t.path().join("ctl"),
            t.path().join("fork"),
        );
        std::fs::create_dir_all(work.join("d")).unwrap();
        std::fs::create_dir_all(&ctl).unwrap();
        std::fs::write(work.join("d/x.txt"), "x\n").unwrap();
        std::os::unix::fs::symlink("d/x.txt", work.join("link")).unwrap();
        let tree = hash_like_the_driver(&work, &ctl);
        std::fs::create_dir(&dest).unwrap();
        let r = rebuild(
            &crate::steps::trees::run_files(t.path(), "run-t", &ctl),
            &work,
            &tree,
            &dest,
            false,
        )
        .unwrap();
        assert_eq!(
            (r.repository, r.head, r.rehashed.as_str()),
            (false, None, tree.as_str())
        );
        assert!(!dest.join(".git").exists());
        assert_eq!(
            std::fs::read_link(dest.join("link")).unwrap(),
            Path::new("d/x.txt")
        );

        let other = t.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let missing = "0123456789012345678901234567890123456789";
        match rebuild(
            &crate::steps::trees::run_files(t.path(), "run-t", &ctl),
            &work,
            missing,
            &other,
            false,
        ) {
            Err(Failed::Store(m)) => assert!(m.contains(missing), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    /// A sandbox's repository is its agent's: a fork takes it only as a plain `.git` folder of
    /// its own, cloned through git's transport, never a link or a pointer to another repository
    /// of this machine (whose objects the clone would copy into the agent's new sandbox).
    #[test]
    fn an_agents_repository_pointing_elsewhere_is_refused_and_its_own_is_cloned() {
        let t = tempfile::tempdir().unwrap();
        let (work, ctl, secret) = (t.path().join("w"), t.path().join("ctl"), t.path().join("s"));
        for d in [&work, &ctl, &secret] {
            std::fs::create_dir_all(d).unwrap();
        }
        sh(&secret, &["init", "-q"]);
        std::fs::write(secret.join("secret.txt"), "not the agent's\n").unwrap();
        sh(&secret, &["add", "-A"]);
        sh(&secret, &["commit", "-qm", "secret"]);
        sh(&work, &["init", "-q"]);
        std::fs::write(work.join("a.txt"), "a\n").unwrap();
        sh(&work, &["add", "-A"]);
        sh(&work, &["commit", "-qm", "one"]);
        let tree = hash_like_the_driver(&work, &ctl);
        let files = crate::steps::trees::run_files(t.path(), "run-t", &ctl);

        // Its own repository: cloned (through git's transport) and rebuilt.
        let dest = t.path().join("f0");
        std::fs::create_dir(&dest).unwrap();
        let r = rebuild(&files, &work, &tree, &dest, true).unwrap();
        assert_eq!(r.rehashed, tree);
        assert!(r.repository);

        // Alternates into another repository.
        let alt = work.join(".git/objects/info/alternates");
        std::fs::write(&alt, format!("{}\n", secret.join(".git/objects").display())).unwrap();
        let dest = t.path().join("f1");
        std::fs::create_dir(&dest).unwrap();
        match rebuild(&files, &work, &tree, &dest, true) {
            Err(Failed::Store(m)) => assert!(m.contains("alternates"), "{m}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(&alt).unwrap();

        // .git a link to, or a gitdir: file naming, another repository.
        std::fs::rename(work.join(".git"), t.path().join("real-git")).unwrap();
        std::os::unix::fs::symlink(secret.join(".git"), work.join(".git")).unwrap();
        let dest = t.path().join("f2");
        std::fs::create_dir(&dest).unwrap();
        match rebuild(&files, &work, &tree, &dest, true) {
            Err(Failed::Store(m)) => assert!(m.contains("not a folder"), "{m}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(work.join(".git")).unwrap();
        std::fs::write(
            work.join(".git"),
            format!("gitdir: {}\n", secret.join(".git").display()),
        )
        .unwrap();
        match rebuild(&files, &work, &tree, &dest, true) {
            Err(Failed::Store(m)) => assert!(m.contains("not a folder"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(!dest.join("secret.txt").exists());
        assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0, "nothing made");
    }
}
