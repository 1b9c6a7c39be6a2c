//! Where a work tree's repository keeps things, and reading nested repositories' `HEAD`
//! (for gitlinks). Everything here only reads.

use crate::oid::ObjectId;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the repository of a work tree keeps its files. `gitdir` is `None` for a plain folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoLayout {
    /// The work tree (its top).
    pub workdir: PathBuf,
    /// The repository directory: `<workdir>/.git`, or where a `.git` file points.
    pub gitdir: Option<PathBuf>,
    /// The shared repository directory (differs from `gitdir` for a linked worktree).
    pub commondir: Option<PathBuf>,
}

impl RepoLayout {
    /// Finds the repository of `workdir` (its own `.git` only: parents are not searched).
    pub fn discover(workdir: &Path) -> RepoLayout {
        let dotgit = workdir.join(".git");
        let gitdir = resolve_dotgit(&dotgit).filter(|g| is_git_directory(g));
        let commondir = gitdir.as_deref().map(common_dir);
        RepoLayout {
            workdir: workdir.to_path_buf(),
            gitdir,
            commondir,
        }
    }

    /// The repository's object directory, to pass to [`crate::Store::open`] as an alternate.
    pub fn objects_dir(&self) -> Option<PathBuf> {
        self.commondir.as_ref().map(|c| c.join("objects"))
    }

    pub(crate) fn index_path(&self) -> Option<PathBuf> {
        self.gitdir.as_ref().map(|g| g.join("index"))
    }

    pub(crate) fn info_exclude(&self) -> Option<PathBuf> {
        self.commondir
            .as_ref()
            .map(|c| c.join("info").join("exclude"))
    }

    pub(crate) fn config_path(&self) -> Option<PathBuf> {
        self.commondir.as_ref().map(|c| c.join("config"))
    }

    pub(crate) fn worktree_config_path(&self) -> Option<PathBuf> {
        self.gitdir.as_ref().map(|g| g.join("config.worktree"))
    }
}

/// `path` is a `.git` directory or a `gitdir:` file: the repository directory it names.
fn resolve_dotgit(path: &Path) -> Option<PathBuf> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_dir() {
        return Some(path.to_path_buf());
    }
    if !meta.is_file() {
        return None;
    }
    read_gitfile(path)
}

/// Reads a `gitdir: <path>` file; a relative path is relative to the file's directory.
fn read_gitfile(path: &Path) -> Option<PathBuf> {
    let data = std::fs::read(path).ok()?;
    let rest = data.strip_prefix(b"gitdir: ")?;
    let end = rest
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .unwrap_or(rest.len());
    let target = PathBuf::from(OsStr::from_bytes(&rest[..end]));
    if target.as_os_str().is_empty() {
        return None;
    }
    Some(if target.is_relative() {
        path.parent().map_or(target.clone(), |d| d.join(&target))
    } else {
        target
    })
}

/// `<gitdir>/commondir` if present (linked worktrees), else `gitdir`.
fn common_dir(gitdir: &Path) -> PathBuf {
    if let Ok(data) = std::fs::read(gitdir.join("commondir")) {
        let end = data
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .unwrap_or(data.len());
        let p = PathBuf::from(OsStr::from_bytes(&data[..end]));
        if !p.as_os_str().is_empty() {
            return if p.is_relative() { gitdir.join(p) } else { p };
        }
    }
    gitdir.to_path_buf()
}

/// git's `is_git_directory`: a valid `HEAD`, and `objects/` and `refs/` in the common dir.
fn is_git_directory(dir: &Path) -> bool {
    if !valid_head(&dir.join("HEAD")) {
        return false;
    }
    let common = common_dir(dir);
    common.join("objects").is_dir() && common.join("refs").is_dir()
}

/// git's `validate_headref`: a `refs/…` symlink, `ref: refs/…`, or an object id.
fn valid_head(path: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if meta.file_type().is_symlink() {
        return std::fs::read_link(path)
            .is_ok_and(|t| t.as_os_str().as_bytes().starts_with(b"refs/"));
    }
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    let data = &data[..data.len().min(255)];
    if let Some(rest) = data.strip_prefix(b"ref:") {
        let rest = trim_start(rest);
        if rest.starts_with(b"refs/") {
            return true;
        }
    }
    data.len() >= 40 && ObjectId::from_hex(&data[..40]).is_some()
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
    &s[n..]
}

fn trim(s: &[u8]) -> &[u8] {
    let s = trim_start(s);
    let n = s
        .iter()
        .rev()
        .take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
    &s[..s.len() - n]
}

/// What git finds in a directory of the work tree when it looks for a nested repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nested {
    /// Not a repository: an ordinary directory.
    No,
    /// A repository whose `HEAD` names this commit.
    Head(ObjectId),
    /// A repository whose `HEAD` cannot be resolved (no commit yet, or refs this crate does not read).
    Unborn,
}

/// git's `is_nonbare_repository_dir` on `dir`, and its `HEAD` if it is one.
pub(crate) fn nested_repo(dir: &Path) -> Nested {
    let dotgit = dir.join(".git");
    let Ok(meta) = std::fs::metadata(&dotgit) else {
        return Nested::No;
    };
    let gitdir = if meta.is_dir() {
        if !is_git_directory(&dotgit) {
            return Nested::No;
        }
        dotgit
    } else if meta.is_file() {
        // An unreadable `.git` file also makes git treat the directory as a repository.
        match std::fs::read(&dotgit) {
            Err(_) => return Nested::Unborn,
            Ok(_) => match read_gitfile(&dotgit) {
                Some(g) if is_git_directory(&g) => g,
                _ => return Nested::No,
            },
        }
    } else {
        return Nested::No;
    };
    match resolve_head(&gitdir) {
        Some(id) => Nested::Head(id),
        None => Nested::Unborn,
    }
}

/// Resolves `HEAD` of the repository at `gitdir` to a commit id, following symbolic refs
/// through loose refs and `packed-refs`.
pub(crate) fn resolve_head(gitdir: &Path) -> Option<ObjectId> {
    let common = common_dir(gitdir);
    let mut name: Vec<u8> = b"HEAD".to_vec();
    for _ in 0..6 {
        let per_worktree = name == b"HEAD"
            || name.starts_with(b"refs/worktree/")
            || name.starts_with(b"refs/bisect/")
            || name.starts_with(b"refs/rewritten/");
        let base = if per_worktree { gitdir } else { &common };
        let path = base.join(OsStr::from_bytes(&name));
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if meta.file_type().is_symlink() && name == b"HEAD" {
                let target = std::fs::read_link(&path).ok()?;
                name = target.as_os_str().as_bytes().to_vec();
                continue;
            }
            if meta.is_file() {
                let data = std::fs::read(&path).ok()?;
                let data = trim(&data);
                if let Some(rest) = data.strip_prefix(b"ref:") {
                    name = trim(rest).to_vec();
                    continue;
                }
                return ObjectId::from_hex(data.get(..40)?);
            }
        }
        if name == b"HEAD" {
            return None;
        }
        return packed_ref(&common, &name);
    }
    None
}

fn packed_ref(common: &Path, name: &[u8]) -> Option<ObjectId> {
    let data = std::fs::read(common.join("packed-refs")).ok()?;
    for line in data.split(|&b| b == b'\n') {
        if line.starts_with(b"#") || line.starts_with(b"^") || line.len() < 42 {
            continue;
        }
        if &line[41..] == name {
            return ObjectId::from_hex(&line[..40]);
        }
    }
    None
}
