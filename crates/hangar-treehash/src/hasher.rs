//! The incremental tree hasher: a model of the work tree (listings, stat data, blob ids, ignore
//! verdicts, tree ids per directory) kept between steps, so a step re-reads only what changed.
//!
//! A step: (1) re-read what changed among the repository's own files (index, config, exclude
//! files); (2) find what may have changed in the work tree — every entry's `lstat` (a full walk,
//! spread over threads), or only what the inotify watch reported; (3) walk the model top-down,
//! re-listing directories whose stat changed, re-deciding entries whose inputs changed, and
//! queueing files whose stat changed; (4) hash the queued files (in parallel); (5) rebuild the
//! trees of the directories that changed, bottom-up.

use crate::config::{Config, expand_path};
use crate::error::{Error, Result, io_err};
use crate::ignore::{PatternList, is_ignored};
use crate::index::{IndexEntry, MODE_GITLINK, MODE_SYMLINK, MODE_TREE, read_index};
use crate::oid::{EMPTY_BLOB, Kind, ObjectId};
use crate::repo::{Nested, RepoLayout, nested_repo};
use crate::store::{STREAM_THRESHOLD, Store};
use crate::sys::{DirFd, FileKind, Mounts, StatKey, list_dir, lstat, lstat_names, now_ns};
use crate::tracked::{Tracked, TrackedInfo};
use crate::watch::Watch;
use std::collections::{BTreeSet, HashMap};
use std::ffi::{CString, OsStr};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A file modified less than this long before it was read is read again at the next step even
/// if its stat data is unchanged (file system timestamps are coarse, and a network file system's
/// come from another machine's clock).
const RACY_WINDOW_NS: i128 = 2_000_000_000;

/// The racy window on a local file system of the work tree's own device ([`sys::local_fs`]):
/// its timestamps come from this kernel's clock, at most one tick (<= 10 ms) behind the time
/// read at the scan's start, so a write after a read can never carry a timestamp this far
/// before the read. Ten ticks of margin.
const LOCAL_RACY_WINDOW_NS: i128 = 100_000_000;

/// Whether a stat is old enough, at a scan's start, for what is read of it during the scan to
/// be trusted while the stat stays the same.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Racy {
    scan_start: i128,
    /// The work tree's device when its file system is local (then the short window applies to
    /// what is on it; anything on another device, a mount inside, keeps the long one).
    local_dev: Option<u64>,
}

impl Racy {
    pub(crate) fn clean(&self, key: &StatKey) -> bool {
        let window = if self.local_dev == Some(key.dev) {
            LOCAL_RACY_WINDOW_NS
        } else {
            RACY_WINDOW_NS
        };
        key.newest_ns() < self.scan_start - window
    }
}

mod walk;

/// From this many entries of a directory to stat outside the full walk, they are stat'ed
/// relative to the directory, in one go.
const BATCH_STAT_MIN: usize = 8;

/// Where the user's own git settings are read from (for `core.excludesFile` and the default
/// global ignore file `~/.config/git/ignore`). Only read; nothing is run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserConfig {
    /// `$HOME`: `~/.gitconfig`, `~/.config/git/…`, and `~/` in paths.
    pub home: Option<PathBuf>,
    /// `$XDG_CONFIG_HOME` (`<it>/git/config`, `<it>/git/ignore`).
    pub xdg_config_home: Option<PathBuf>,
    /// The system config (`/etc/gitconfig`), `None` for none (`GIT_CONFIG_NOSYSTEM`).
    pub system_config: Option<PathBuf>,
    /// Replaces the global config files (`GIT_CONFIG_GLOBAL`).
    pub global_config: Option<PathBuf>,
}

impl UserConfig {
    /// As git would find them from this process's environment (`HOME`, `XDG_CONFIG_HOME`,
    /// `GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_SYSTEM`, `GIT_CONFIG_GLOBAL`).
    pub fn from_env() -> UserConfig {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let nosystem = std::env::var_os("GIT_CONFIG_NOSYSTEM")
            .is_some_and(|v| !matches!(v.to_str(), Some("" | "0" | "false" | "no" | "off")));
        UserConfig {
            home: var("HOME"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            system_config: if nosystem {
                None
            } else {
                Some(var("GIT_CONFIG_SYSTEM").unwrap_or_else(|| PathBuf::from("/etc/gitconfig")))
            },
            global_config: var("GIT_CONFIG_GLOBAL"),
        }
    }

    /// No user settings at all.
    pub fn none() -> UserConfig {
        UserConfig::default()
    }

    fn xdg(&self, file: &str) -> Option<PathBuf> {
        match (&self.xdg_config_home, &self.home) {
            (Some(x), _) => Some(x.join("git").join(file)),
            (None, Some(h)) => Some(h.join(".config").join("git").join(file)),
            (None, None) => None,
        }
    }

    fn files(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        v.extend(self.system_config.clone());
        match &self.global_config {
            Some(g) => v.push(g.clone()),
            None => {
                v.extend(self.xdg("config"));
                v.extend(self.home.as_ref().map(|h| h.join(".gitconfig")));
            }
        }
        v
    }
}

/// How a [`TreeHasher`] works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Where the user's git settings come from.
    pub user: UserConfig,
    /// Keep an inotify watch of the work tree so that a step looks only at what changed
    /// (falls back to a full stat walk whenever the watch cannot vouch for everything).
    pub watch: bool,
    /// Threads for the stat walk and for hashing files.
    pub threads: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            user: UserConfig::from_env(),
            watch: true,
            threads: 2,
        }
    }
}

/// What the last step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// The step stat'ed every entry (no watch, or the watch could not vouch).
    pub full_walk: bool,
    /// `lstat` calls on work tree entries.
    pub stats: usize,
    /// Directories listed (`readdir`).
    pub dirs_listed: usize,
    /// Files and symlinks read and hashed.
    pub files_hashed: usize,
    /// Bytes of content hashed.
    pub bytes_hashed: u64,
    /// Tree objects computed.
    pub trees_built: usize,
    /// Directories under watch.
    pub watches: usize,
    /// Full walk without a watch: directories whose descriptor, kept from the last step, was
    /// still theirs (their entries stat'ed through it, their path not resolved).
    pub held_dirs: usize,
    /// Full walk: directories passed over because the walk found their subtree unchanged.
    pub dirs_skipped: usize,
    /// Wall time of the step.
    pub elapsed: Duration,
}

/// Computes, step after step, the tree id `git add -A && git write-tree` would give for a work
/// tree, storing the blobs and trees it makes in a [`Store`].
#[derive(Debug)]
pub struct TreeHasher {
    root: PathBuf,
    store: Store,
    opts: Options,
    repo: RepoState,
    tree: Node,
    counter: u64,
    watch: Option<Watch>,
    /// Directories holding a `.git` (nested repositories or would-be ones), re-checked at every
    /// step since changes inside them are not watched.
    candidates: BTreeSet<Vec<u8>>,
    need_full: bool,
    steps: u64,
    last: ScanStats,
    /// Watches the mounts inside the work tree while directory descriptors are kept (`walk`);
    /// `None` when none are.
    mounts: Option<Mounts>,
    /// The work tree's file system is a local one ([`sys::local_fs`]): the short racy window.
    local_fs: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirMode {
    /// Everything not ignored.
    Listed,
    /// The directory is ignored but holds tracked files: only those.
    TrackedOnly,
}

#[derive(Debug, Default)]
struct Node {
    /// The directory's stat when it was last listed, and whether that listing can be trusted
    /// for an unchanged stat (not taken within the racy window).
    listing: Option<(StatKey, bool)>,
    /// The step that last listed it.
    listed_step: u64,
    /// Inode and device of the directory this node describes.
    ident: Option<(u64, u64)>,
    /// Another directory replaced the one described: look at everything again.
    replaced: bool,
    names: Vec<CString>,
    /// Stat results of the full walk's first phase, parallel to `names`, and its step.
    fresh: Vec<Option<Option<StatKey>>>,
    fresh_step: u64,
    entries: Vec<Entry>,
    mode: Option<DirMode>,
    gitignore: Option<(IgnoreFrom, bool, Arc<PatternList>)>,
    own_ver: u64,
    inputs: (u64, u64),
    ver: u64,
    tree: Option<ObjectId>,
    dirty: bool,
    wd: Option<i32>,
    /// Watch: something at or below this directory changed.
    visit: bool,
    /// Watch: the listing of this directory changed.
    relist: bool,
    /// Without a watch: the directory held open between full walks (`walk`), the parent's stat
    /// when it was opened through the parent and whether that stat was past the racy window,
    /// and this step's `fstat` of it.
    dir_fd: Option<DirFd>,
    fd_bound: Option<(StatKey, bool)>,
    fd_stat: Option<StatKey>,
    /// Its last reconcile left nothing to redo while its stats and inputs stand: listing and
    /// `.gitignore` past the racy window, every blob's id cached past it, nothing pending, no
    /// nested repository, and the same for every directory below it.
    settled: bool,
    /// Full walk: the stats `fresh` was compared with (a copy of each entry's, made when the
    /// jobs were collected, for a settled node only), whether every entry the job stat'ed
    /// matched, and the indices of the walked subdirectories.
    expect: Vec<Option<StatKey>>,
    fresh_same: bool,
    subdirs: Vec<usize>,
    /// The step whose full walk found the subtree exactly as it was when `settled` was set
    /// (`walk::mark_same`): reconcile passes over it.
    same_step: u64,
    /// The step whose reconcile passed over this subtree (left it, and build left it, as that
    /// step's walk had collected it).
    passed_step: u64,
}

/// Where a directory's `.gitignore` patterns were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IgnoreFrom {
    File(StatKey),
    /// git reads a skip-worktree `.gitignore` it cannot open from the index.
    Index(ObjectId),
}

#[derive(Debug, Default)]
struct Entry {
    stat: Option<StatKey>,
    restat: bool,
    blob: Option<BlobCache>,
    ignored: Option<(u64, bool, bool)>,
    tracked: Option<(u64, TrackedInfo)>,
    state: State,
    sub: Option<Box<Node>>,
    out: Option<(u32, ObjectId)>,
    /// Listed in `TreeHasher::candidates`.
    candidate: bool,
    /// A kept index entry that stands if this directory adds nothing.
    fallback: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
struct BlobCache {
    key: StatKey,
    oid: ObjectId,
    clean: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    #[default]
    Absent,
    /// A file or symlink in the tree; `pending` while its content is queued for hashing.
    Blob {
        pending: bool,
    },
    Dir(DirMode),
    Gitlink(ObjectId),
    /// The index entry, as git leaves it.
    Keep(u32),
}

#[derive(Debug)]
struct Job {
    rel: Vec<u8>,
    symlink: bool,
}

/// The repository's own files, re-read when they change.
#[derive(Debug)]
struct RepoState {
    layout: RepoLayout,
    dotgit: Option<StatKey>,
    index: Option<(PathBuf, Option<StatKey>)>,
    tracked: Arc<Tracked>,
    configs: Vec<(PathBuf, Option<StatKey>)>,
    config: Config,
    file_mode: bool,
    symlinks: bool,
    excludes_file: Option<PathBuf>,
    info_exclude: IgnoreSource,
    user_exclude: IgnoreSource,
    globals: Vec<Arc<PatternList>>,
    epoch: u64,
    /// Reads the repository's objects (made when first needed).
    reader: std::sync::OnceLock<Store>,
}

#[derive(Debug, Default)]
struct IgnoreSource {
    path: Option<PathBuf>,
    key: Option<StatKey>,
    list: Option<Arc<PatternList>>,
}

impl IgnoreSource {
    /// Re-reads the file if its stat changed; true if its patterns changed.
    fn refresh(&mut self, path: Option<PathBuf>) -> bool {
        if path != self.path {
            self.path = path;
            self.key = None;
            let had = self.list.take().is_some();
            return self.reload() || had;
        }
        let key = self
            .path
            .as_deref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| StatKey::from_meta(&m));
        if key == self.key && key.is_some_and(|k| now_ns() - k.newest_ns() > RACY_WINDOW_NS) {
            return false;
        }
        self.reload()
    }

    fn reload(&mut self) -> bool {
        let Some(p) = &self.path else {
            return false;
        };
        // Followed if a symlink, as git does for these two files.
        let meta = std::fs::metadata(p).ok();
        self.key = meta.as_ref().map(StatKey::from_meta);
        let list = if meta.is_some_and(|m| m.is_file()) {
            std::fs::read(p)
                .ok()
                .map(|c| Arc::new(PatternList::parse(&c, b"")))
        } else {
            None
        };
        let changed = list != self.list;
        self.list = list;
        changed
    }
}

impl RepoState {
    fn new(root: &Path) -> RepoState {
        RepoState {
            layout: RepoLayout::discover(root),
            dotgit: None,
            index: None,
            tracked: Arc::new(Tracked::default()),
            configs: Vec::new(),
            config: Config::default(),
            file_mode: true,
            symlinks: true,
            excludes_file: None,
            info_exclude: IgnoreSource::default(),
            user_exclude: IgnoreSource::default(),
            globals: Vec::new(),
            epoch: 0,
            reader: std::sync::OnceLock::new(),
        }
    }

    /// Re-reads what changed. Returns true if anything that decides the tree changed.
    fn refresh(&mut self, root: &Path, user: &UserConfig, first: bool) -> Result<bool> {
        let mut changed = first;
        let dotgit = lstat(&root.join(".git")).ok();
        if first || dotgit != self.dotgit {
            self.dotgit = dotgit;
            let layout = RepoLayout::discover(root);
            if layout != self.layout || first {
                self.layout = layout;
                self.reader = std::sync::OnceLock::new();
                self.configs.clear();
                self.index = None;
                changed = true;
            }
        }
        // Config files (the repository's and the user's).
        let configs_changed = self.configs.is_empty()
            || self.configs.iter().any(|(p, k)| {
                lstat(p).ok() != *k || k.is_some_and(|k| now_ns() - k.newest_ns() <= RACY_WINDOW_NS)
            });
        if configs_changed {
            let mut config = Config::default();
            let mut read = Vec::new();
            let home = user.home.as_deref();
            for f in user.files() {
                config.add_file(&f, home, &mut read);
            }
            if let Some(c) = self.layout.config_path() {
                config.add_file(&c, home, &mut read);
                let wt = config.get_bool("extensions", "worktreeconfig") == Some(true);
                if let (true, Some(w)) = (wt, self.layout.worktree_config_path()) {
                    config.add_file(&w, home, &mut read);
                }
            }
            if let Some(Some(fmt)) = config.get("extensions", "objectformat")
                && !fmt.eq_ignore_ascii_case(b"sha1")
            {
                return Err(Error::Unsupported(format!(
                    "object format {}",
                    String::from_utf8_lossy(fmt)
                )));
            }
            let file_mode = config.get_bool("core", "filemode").unwrap_or(true);
            let symlinks = config.get_bool("core", "symlinks").unwrap_or(true);
            let excludes_file = match config.get("core", "excludesfile") {
                Some(Some(v)) => {
                    expand_path(v, home).map(|p| if p.is_relative() { root.join(p) } else { p })
                }
                _ => user.xdg("ignore"),
            };
            if file_mode != self.file_mode || symlinks != self.symlinks {
                changed = true;
            }
            self.file_mode = file_mode;
            self.symlinks = symlinks;
            self.excludes_file = excludes_file;
            self.config = config;
            self.configs = read
                .into_iter()
                .map(|p| {
                    let k = lstat(&p).ok();
                    (p, k)
                })
                .collect();
        }
        // Ignore files.
        let mut globals_changed = self.info_exclude.refresh(self.layout.info_exclude());
        globals_changed |= self.user_exclude.refresh(self.excludes_file.clone());
        if globals_changed || first {
            self.globals = [&self.info_exclude.list, &self.user_exclude.list]
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            changed = true;
        }
        // The index.
        let index_path = self.layout.index_path();
        let key = index_path.as_deref().and_then(|p| lstat(p).ok());
        let stale = match &self.index {
            None => true,
            Some((p, k)) => Some(p) != index_path.as_ref() || *k != key,
        };
        if stale {
            let (entries, mtime) = match &index_path {
                Some(p) => match read_index(p)? {
                    Some(e) => (
                        e,
                        key.map_or(0, |k| {
                            i128::from(k.mtime) * 1_000_000_000 + i128::from(k.mtime_ns)
                        }),
                    ),
                    None => (Vec::new(), 0),
                },
                None => (Vec::new(), 0),
            };
            let tracked = Tracked::new(entries, mtime);
            if tracked.signature != self.tracked.signature || first {
                changed = true;
            }
            self.tracked = Arc::new(tracked);
            self.index = index_path.map(|p| (p, key));
        }
        if changed {
            self.epoch += 1;
        }
        Ok(changed)
    }
}

/// Everything a step's walk needs besides the model.
struct Ctx<'a> {
    tracked: &'a Tracked,
    globals: &'a [Arc<PatternList>],
    file_mode: bool,
    symlinks: bool,
    epoch: u64,
    racy: Racy,
    counter: &'a mut u64,
    step: u64,
    jobs: Vec<Job>,
    stats: ScanStats,
    watch: Option<&'a mut Watch>,
    watch_failed: bool,
    unwatch: Vec<(i32, Vec<u8>)>,
    candidates: &'a mut BTreeSet<Vec<u8>>,
    store: &'a Store,
    reader: &'a std::sync::OnceLock<Store>,
    objects_dir: Option<PathBuf>,
}

impl Ctx<'_> {
    /// A blob's content from the repository's objects (read only).
    fn read_blob(&self, id: &ObjectId) -> Option<Vec<u8>> {
        let reader = self.reader.get_or_init(|| {
            let dirs: Vec<PathBuf> = self.objects_dir.iter().cloned().collect();
            Store::read_only(&dirs)
        });
        match self.store.read_any(id).or_else(|| reader.read_any(id)) {
            Some((Kind::Blob, data)) => Some(data),
            _ => None,
        }
    }

    fn next_ver(&mut self) -> u64 {
        *self.counter += 1;
        *self.counter
    }

    fn clean(&self, key: &StatKey) -> bool {
        self.racy.clean(key)
    }

    fn blob_mode(&self, stat: &StatKey, index_mode: Option<u32>) -> u32 {
        if stat.kind() == FileKind::Symlink {
            return MODE_SYMLINK;
        }
        if !self.symlinks && index_mode == Some(MODE_SYMLINK) {
            return MODE_SYMLINK;
        }
        if !self.file_mode {
            return index_mode
                .filter(|m| matches!(m, 0o100644 | 0o100755))
                .unwrap_or(0o100644);
        }
        if stat.owner_exec() {
            0o100755
        } else {
            0o100644
        }
    }

    fn watch_dir(&mut self, node: &mut Node, abs: &Path, rel: &[u8]) {
        if node.wd.is_some() {
            return;
        }
        if let Some(w) = self.watch.as_deref_mut() {
            match w.add(abs, rel) {
                Some(wd) => node.wd = Some(wd),
                None => self.watch_failed = true,
            }
        }
    }

    /// Forgets a subtree that left the model: its watches go.
    fn drop_subtree(&mut self, node: Box<Node>, rel: &[u8]) {
        let mut stack = vec![(node, rel.to_vec())];
        while let Some((n, r)) = stack.pop() {
            if let Some(wd) = n.wd {
                self.unwatch.push((wd, r.clone()));
            }
            let Node { names, entries, .. } = *n;
            for (name, e) in names.iter().zip(entries) {
                if let Some(sub) = e.sub {
                    stack.push((sub, join(&r, name.as_bytes())));
                }
            }
        }
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    if !dir.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn abs_join(abs: &Path, name: &CString) -> PathBuf {
    abs.join(OsStr::from_bytes(name.as_bytes()))
}

impl TreeHasher {
    /// A hasher for the work tree at `workdir` (the top of the repository, or a plain folder),
    /// storing what it makes in `store`. Nothing is read until the first [`TreeHasher::hash`].
    pub fn new(workdir: &Path, store: Store) -> Result<TreeHasher> {
        TreeHasher::with_options(workdir, store, Options::default())
    }

    /// [`TreeHasher::new`] with explicit [`Options`].
    pub fn with_options(workdir: &Path, store: Store, opts: Options) -> Result<TreeHasher> {
        let root = std::fs::canonicalize(workdir).map_err(io_err("open", workdir))?;
        let watch = if opts.watch { Watch::new() } else { None };
        let local_fs = crate::sys::local_fs(&root);
        Ok(TreeHasher {
            repo: RepoState::new(&root),
            root,
            store,
            opts,
            tree: Node::default(),
            counter: 0,
            watch,
            candidates: BTreeSet::new(),
            need_full: true,
            steps: 0,
            last: ScanStats::default(),
            mounts: None,
            local_fs,
        })
    }

    /// The tree id of the work tree now. Stats everything (or, with a watch, only what the
    /// watch reported), reads only files whose stat changed.
    pub fn hash(&mut self) -> Result<ObjectId> {
        self.step(false)
    }

    /// Like [`TreeHasher::hash`] but always a full stat walk, whatever the watch says.
    pub fn hash_full(&mut self) -> Result<ObjectId> {
        self.step(true)
    }

    /// What the last step did.
    pub fn last_stats(&self) -> &ScanStats {
        &self.last
    }

    /// The store objects go to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Gives the store back (to export its pack at the end of the turn).
    pub fn into_store(self) -> Store {
        self.store
    }

    /// Whether the inotify watch is in use.
    pub fn watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Where this hasher may differ from git, given the repository's settings as last read:
    /// content conversions git would apply when adding files (clean/process filters,
    /// `core.autocrlf`, `.gitattributes`), which are deliberately not applied. Empty if none apply.
    pub fn divergences(&self) -> Vec<String> {
        let mut out = Vec::new();
        let c = &self.repo.config;
        if let Some(v) = c.get("core", "autocrlf") {
            let v = v.map(|v| String::from_utf8_lossy(v).to_ascii_lowercase());
            if v.as_deref() != Some("false") {
                out.push(format!(
                    "core.autocrlf={} (line endings are not converted)",
                    v.unwrap_or_else(|| "true".into())
                ));
            }
        }
        for e in &c.entries {
            if e.section == "filter" && (e.key == "clean" || e.key == "process") {
                let name = String::from_utf8_lossy(e.subsection.as_deref().unwrap_or_default())
                    .into_owned();
                out.push(format!(
                    "filter.{name}.{} is configured (filters are not run)",
                    e.key
                ));
            }
        }
        if let Some(common) = &self.repo.layout.commondir
            && common.join("info").join("attributes").is_file()
        {
            out.push("info/attributes exists (attributes are not applied)".into());
        }
        if has_gitattributes(&self.tree) {
            out.push(
                ".gitattributes files exist (text/eol/ident/filter attributes are not applied)"
                    .into(),
            );
        }
        out.dedup();
        out
    }

    fn step(&mut self, force_full: bool) -> Result<ObjectId> {
        let r = self.step_inner(force_full);
        if r.is_err() {
            // Whatever the failed step left half done is redone by a full walk.
            self.need_full = true;
        }
        r
    }

    fn step_inner(&mut self, force_full: bool) -> Result<ObjectId> {
        let t0 = Instant::now();
        let scan_start = now_ns();
        let first = self.steps == 0;
        self.steps += 1;
        let step = self.steps;
        let meta_changed = self.repo.refresh(&self.root, &self.opts.user, first)?;
        let root_stat = lstat(&self.root).map_err(io_err("lstat", &self.root))?;
        let racy = Racy {
            scan_start,
            local_dev: self.local_fs.then_some(root_stat.dev),
        };
        if root_stat.kind() != FileKind::Dir {
            return Err(Error::Io {
                op: "open",
                path: self.root.clone(),
                source: std::io::Error::other("not a directory"),
            });
        }
        let mut full = force_full || self.need_full || meta_changed || self.watch.is_none();
        if self.take_events(full) {
            full = true;
        }
        let mut stats = ScanStats {
            full_walk: full,
            ..ScanStats::default()
        };
        if full {
            let (calls, held) = self.full_walk(root_stat, step, racy)?;
            stats.stats += calls;
            stats.held_dirs = held;
        }
        let tracked = Arc::clone(&self.repo.tracked);
        let globals = self.repo.globals.clone();
        let mut ctx = Ctx {
            tracked: &tracked,
            globals: &globals,
            file_mode: self.repo.file_mode,
            symlinks: self.repo.symlinks,
            epoch: self.repo.epoch,
            racy,
            counter: &mut self.counter,
            step,
            jobs: Vec::new(),
            stats,
            watch: self.watch.as_mut(),
            watch_failed: false,
            unwatch: Vec::new(),
            candidates: &mut self.candidates,
            store: &self.store,
            reader: &self.repo.reader,
            objects_dir: self.repo.layout.objects_dir(),
        };
        let root_ver_input = ctx.epoch;
        let mut stack = Vec::new();
        let root = self.root.clone();
        reconcile(
            &mut ctx,
            &mut self.tree,
            &mut Vec::new(),
            &root,
            Some(root_stat),
            DirMode::Listed,
            root_ver_input,
            full,
            &mut stack,
        )?;
        let jobs = std::mem::take(&mut ctx.jobs);
        let results = hash_jobs(&root, &jobs, &self.store, self.opts.threads)?;
        let vanished = count_hashed(&results, &mut ctx.stats);
        let id = build(&mut ctx, &mut self.tree, &mut Vec::new(), &results)?
            .unwrap_or(crate::oid::EMPTY_TREE);
        let watch_failed = ctx.watch_failed;
        let unwatch = std::mem::take(&mut ctx.unwatch);
        let mut stats = ctx.stats;
        self.settle_watch(unwatch, watch_failed, &mut stats);
        // The step's new objects go to disk as one pack before its id is given out.
        self.store.flush()?;
        self.need_full = vanished;
        stats.elapsed = t0.elapsed();
        self.last = stats;
        Ok(id)
    }

    /// Marks in the model what the watch saw since the last step (`full`: only the dropped
    /// watches, since everything is stat'ed anyway); whether the step must walk everything (the
    /// kernel's queue overflowed).
    fn take_events(&mut self, full: bool) -> bool {
        let Some(w) = self.watch.as_mut() else {
            return false;
        };
        let drained = w.drain();
        // A directory whose watch the kernel dropped was deleted: whatever stands at its
        // path now (possibly with the same inode number) is another directory.
        for (wd, rel) in &drained.dropped {
            if let Some(node) = find_node(&mut self.tree, rel)
                && node.wd == Some(*wd)
            {
                node.wd = None;
                node.replaced = true;
                node.listing = None;
            }
            if !rel.is_empty() {
                let (dir, name) = split_last(rel);
                mark(&mut self.tree, dir, name, true);
            }
        }
        if !(full || drained.overflow) {
            for ev in &drained.events {
                mark(&mut self.tree, &ev.dir, &ev.name, ev.listing);
            }
            let tree = &mut self.tree;
            self.candidates.retain(|c| {
                let (dir, name) = split_last(c);
                mark(tree, dir, name, false)
            });
        }
        drained.overflow
    }

    /// The full walk's first phase (`walk::stat_walk`), keeping directory descriptors where it
    /// can; the `lstat` calls it made and the directories it held.
    fn full_walk(&mut self, root_stat: StatKey, step: u64, racy: Racy) -> Result<(usize, usize)> {
        // Directory descriptors are kept only without a watch (with one, full walks are
        // rare), only while the mount table can be watched, and from the third step on (a
        // hasher asked for two trees, a turn's start and end, never pays for opening them).
        let fds = self.watch.is_none() && step > 2 && {
            if self.mounts.is_none() {
                self.mounts = Mounts::open(&self.root);
            }
            self.mounts.is_some()
        };
        if let Some(m) = &mut self.mounts
            && (!fds || m.changed())
        {
            walk::drop_fds(&mut self.tree);
        }
        if !fds {
            self.mounts = None;
        }
        let w = walk::Walk {
            root: &self.root,
            root_stat,
            fds,
            threads: self.opts.threads,
            step,
            racy,
            untouched_since_collected: self.watch.is_none(),
        };
        walk::stat_walk(&mut self.tree, &w)
    }

    /// After the step: removes the watches of directories gone, counts the rest, and gives up
    /// the watch if adding one failed.
    fn settle_watch(
        &mut self,
        unwatch: Vec<(i32, Vec<u8>)>,
        watch_failed: bool,
        stats: &mut ScanStats,
    ) {
        if let Some(w) = self.watch.as_mut() {
            for (wd, rel) in unwatch {
                w.remove(wd, &rel);
            }
            stats.watches = w.watches();
        }
        if watch_failed {
            // Out of inotify watches (or refused): full walks from now on.
            self.watch = None;
            clear_wds(&mut self.tree);
        }
    }
}

/// `dir/name` split at its last slash (a name at the top: an empty directory).
fn split_last(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(p) => (&rel[..p], &rel[p + 1..]),
        None => (&rel[..0], rel),
    }
}

/// Counts the files hashed into the step's stats; whether one vanished before it was read.
fn count_hashed(results: &HashResults, stats: &mut ScanStats) -> bool {
    let mut vanished = false;
    for (_, r) in results.values() {
        if r.is_none() {
            vanished = true;
        }
    }
    for (_, (n, r)) in results.iter() {
        if r.is_some() {
            stats.files_hashed += 1;
            stats.bytes_hashed += *n;
        }
    }
    vanished
}

fn has_gitattributes(node: &Node) -> bool {
    node.names.iter().zip(&node.entries).any(|(n, e)| {
        (n.as_bytes() == b".gitattributes" && matches!(e.state, State::Blob { .. }))
            || (matches!(e.state, State::Dir(_)) && e.sub.as_deref().is_some_and(has_gitattributes))
    })
}

fn clear_wds(node: &mut Node) {
    node.wd = None;
    for e in &mut node.entries {
        if let Some(s) = e.sub.as_deref_mut() {
            clear_wds(s);
        }
    }
}

/// Watch event: marks the path from the top down to `dir`/`name`. False if the model has no
/// such entry.
fn mark(root: &mut Node, dir: &[u8], name: &[u8], listing: bool) -> bool {
    let mut node = root;
    node.visit = true;
    if !dir.is_empty() {
        for comp in dir.split(|&b| b == b'/') {
            let Some(i) = find(&node.names, comp) else {
                node.relist = true;
                return false;
            };
            node.entries[i].restat = true;
            let Some(sub) = node.entries[i].sub.as_deref_mut() else {
                return false;
            };
            node = sub;
            node.visit = true;
        }
    }
    if listing {
        node.relist = true;
    }
    if name.is_empty() {
        node.relist = true;
        return true;
    }
    match find(&node.names, name) {
        Some(i) => {
            node.entries[i].restat = true;
            if let Some(sub) = node.entries[i].sub.as_deref_mut() {
                sub.visit = true;
            }
            true
        }
        None => {
            node.relist = true;
            false
        }
    }
}

/// The model's node for directory `rel`, if it has one.
fn find_node<'a>(root: &'a mut Node, rel: &[u8]) -> Option<&'a mut Node> {
    let mut node = root;
    if rel.is_empty() {
        return Some(node);
    }
    for comp in rel.split(|&b| b == b'/') {
        let i = find(&node.names, comp)?;
        node = node.entries[i].sub.as_deref_mut()?;
    }
    Some(node)
}

fn find(names: &[CString], name: &[u8]) -> Option<usize> {
    names.binary_search_by(|n| n.as_bytes().cmp(name)).ok()
}

/// Another directory now stands at this path (removed and made again, or moved over): nothing
/// known about the old one holds, and its watch is not this one's.
fn check_ident(ctx: &mut Ctx<'_>, node: &mut Node, rel: &[u8], stat: Option<StatKey>) {
    let Some(s) = stat else {
        return;
    };
    let ident = (s.ino, s.dev);
    if node.ident != Some(ident) {
        if node.ident.is_some() {
            node.replaced = true;
            node.listing = None;
            if let Some(wd) = node.wd.take() {
                ctx.unwatch.push((wd, rel.to_vec()));
            }
        }
        node.ident = Some(ident);
    }
}

/// Lists the directory again if it may have changed (once per step at most).
fn ensure_listing(
    ctx: &mut Ctx<'_>,
    node: &mut Node,
    abs: &Path,
    rel: &[u8],
    stat: Option<StatKey>,
    force: bool,
) {
    check_ident(ctx, node, rel, stat);
    if node.listed_step == ctx.step {
        return;
    }
    let stale = match node.listing {
        None => true,
        Some((k, clean)) => node.relist || (force && (Some(k) != stat || !clean)),
    };
    if !stale {
        return;
    }
    // Watch first, then list: a change after the listing is an event.
    ctx.watch_dir(node, abs, rel);
    let names = list_dir(abs).unwrap_or_default();
    ctx.stats.dirs_listed += 1;
    node.listing = stat.map(|s| (s, ctx.clean(&s)));
    node.listed_step = ctx.step;
    set_names(ctx, node, names, rel);
}

/// Brings `node` (the directory at `rel`) up to date: its listing, its `.gitignore`, each entry's
/// stat and verdict; queues files to hash. Sets `node.dirty` if its tree must be rebuilt.
#[allow(clippy::too_many_arguments)]
fn reconcile(
    ctx: &mut Ctx<'_>,
    node: &mut Node,
    rel: &mut Vec<u8>,
    abs: &Path,
    dir_stat: Option<StatKey>,
    mode: DirMode,
    parent_ver: u64,
    mut force: bool,
    stack: &mut Vec<Arc<PatternList>>,
) -> Result<()> {
    let mut redecide = node.mode != Some(mode);
    if node.mode != Some(mode) {
        force = true;
        node.dirty = true;
        node.mode = Some(mode);
    }
    check_ident(ctx, node, rel, dir_stat);
    if std::mem::take(&mut node.replaced) {
        force = true;
        redecide = true;
        node.dirty = true;
    }
    if !force && !node.visit && !node.relist {
        return Ok(());
    }
    // 1. The listing.
    match mode {
        DirMode::Listed => ensure_listing(ctx, node, abs, rel, dir_stat, force),
        DirMode::TrackedOnly => list_tracked(ctx, node, abs, rel),
    }
    // 2. Every entry's stat that may have changed.
    let stat_changed = stat_entries(ctx, node, abs, force);
    // 3. This directory's `.gitignore`.
    read_gitignore(ctx, node, abs, rel, mode);
    let inputs = (parent_ver, node.own_ver);
    if node.inputs != inputs || node.ver == 0 {
        node.inputs = inputs;
        node.ver = ctx.next_ver();
        force = true;
        redecide = true;
        node.dirty = true;
    }
    let pushed = match &node.gitignore {
        Some((_, _, l)) => {
            stack.push(Arc::clone(l));
            true
        }
        None => false,
    };
    // 4. Each entry's verdict.
    let how = Redo {
        mode,
        force,
        redecide,
    };
    let result = decide_entries(ctx, node, rel, abs, how, &stat_changed, stack);
    if pushed {
        stack.pop();
    }
    node.visit = false;
    node.relist = false;
    node.settled = result.is_ok()
        && mode == DirMode::Listed
        && !node.replaced
        && dir_stat.is_some()
        && node.listing == dir_stat.map(|s| (s, true))
        && node.gitignore.as_ref().is_none_or(|(_, clean, _)| *clean)
        && node.entries.iter().all(settled_entry);
    result
}

/// How [`reconcile`] looks at a directory's entries.
#[derive(Debug, Clone, Copy)]
struct Redo {
    /// How the directory is read.
    mode: DirMode,
    /// Stat and decide every entry, not only those marked.
    force: bool,
    /// What decides the entries' verdicts changed (the directory's mode or ignore rules).
    redecide: bool,
}

/// Step 1 of [`reconcile`] for an ignored directory holding tracked files: its names are the
/// index's, not a listing.
fn list_tracked(ctx: &mut Ctx<'_>, node: &mut Node, abs: &Path, rel: &[u8]) {
    ctx.watch_dir(node, abs, rel);
    node.listing = None;
    let want = ctx.tracked.children(rel);
    let same = want.len() == node.names.len()
        && want
            .iter()
            .zip(&node.names)
            .all(|(a, b)| &a[..] == b.as_bytes());
    if !same {
        let names = want
            .iter()
            .filter_map(|n| CString::new(n.to_vec()).ok())
            .collect();
        set_names(ctx, node, names, rel);
    }
}

/// Step 2 of [`reconcile`]: stats every entry that may have changed (many at once relative to
/// the directory, when the walk's first phase did not); whether each one's stat changed.
#[allow(clippy::needless_range_loop)]
fn stat_entries(ctx: &mut Ctx<'_>, node: &mut Node, abs: &Path, force: bool) -> Vec<bool> {
    let mut use_fresh = node.fresh_step == ctx.step;
    if !use_fresh {
        let need = if force {
            node.names.len()
        } else {
            node.entries
                .iter()
                .filter(|e| e.restat || e.stat.is_none())
                .count()
        };
        if need >= BATCH_STAT_MIN {
            node.fresh.clear();
            node.fresh.resize(node.names.len(), None);
            lstat_names(abs, &node.names, &mut node.fresh);
            node.fresh_step = ctx.step;
            ctx.stats.stats += node.names.len();
            use_fresh = true;
        }
    }
    let mut stat_changed = vec![false; node.names.len()];
    for i in 0..node.names.len() {
        let fresh = if use_fresh {
            node.fresh.get_mut(i).and_then(Option::take)
        } else {
            None
        };
        let e = &mut node.entries[i];
        if force || e.restat || e.stat.is_none() {
            let new = match fresh {
                Some(s) => s,
                None => {
                    ctx.stats.stats += 1;
                    lstat(&abs_join(abs, &node.names[i])).ok()
                }
            };
            stat_changed[i] = new != e.stat || new.is_none();
            e.stat = new;
        }
    }
    stat_changed
}

/// Step 3 of [`reconcile`]: reads the directory's `.gitignore` again if its source changed; a
/// new version of the directory's own inputs if its patterns did.
fn read_gitignore(ctx: &mut Ctx<'_>, node: &mut Node, abs: &Path, rel: &[u8], mode: DirMode) {
    match gitignore_source(ctx, node, rel, mode) {
        Some(src) => {
            let reuse = matches!(&node.gitignore, Some((k, clean, _)) if *k == src && *clean);
            if !reuse {
                let (content, clean) = match src {
                    IgnoreFrom::File(key) => (
                        std::fs::read(abs.join(".gitignore")).unwrap_or_default(),
                        ctx.clean(&key),
                    ),
                    IgnoreFrom::Index(id) => (ctx.read_blob(&id).unwrap_or_default(), true),
                };
                let list = Arc::new(PatternList::parse(&content, rel));
                let changed = node.gitignore.as_ref().is_none_or(|(_, _, l)| *l != list);
                node.gitignore = Some((src, clean, list));
                if changed {
                    node.own_ver = ctx.next_ver();
                }
            }
        }
        None => {
            if node.gitignore.take().is_some() {
                node.own_ver = ctx.next_ver();
            }
        }
    }
}

/// Where the directory's `.gitignore` patterns come from: the file (not followed if a symlink,
/// as git does), or, for a skip-worktree one git cannot open, the index.
fn gitignore_source(ctx: &Ctx<'_>, node: &Node, rel: &[u8], mode: DirMode) -> Option<IgnoreFrom> {
    let gi = if mode == DirMode::Listed {
        find(&node.names, b".gitignore")
            .and_then(|i| node.entries[i].stat.filter(|s| s.kind() == FileKind::File))
    } else {
        None
    };
    // git falls back to the index when it cannot open the file (missing, or a symlink it will
    // not follow); a directory of that name opens but reads nothing.
    let unopenable = match find(&node.names, b".gitignore") {
        None => true,
        Some(i) => node.entries[i]
            .stat
            .is_none_or(|s| s.kind() == FileKind::Symlink),
    };
    let from_index =
        if mode == DirMode::Listed && gi.is_none() && unopenable && ctx.tracked.any_kept() {
            let tracked = ctx.tracked;
            tracked
                .info(&join(rel, b".gitignore"))
                .entry
                .and_then(|i| tracked.entry(i))
                .filter(|ie| ie.stage == 0 && ie.skip_worktree)
                .map(|ie| ie.oid)
        } else {
            None
        };
    match (gi, from_index) {
        (Some(key), _) => Some(IgnoreFrom::File(key)),
        (None, Some(id)) => Some(IgnoreFrom::Index(id)),
        (None, None) => None,
    }
}

/// Step 4 of [`reconcile`]: decides each entry whose verdict may have changed, passing over
/// the rest; marks the node dirty when one changed. Stops at the first error.
#[allow(clippy::needless_range_loop)]
fn decide_entries(
    ctx: &mut Ctx<'_>,
    node: &mut Node,
    rel: &mut Vec<u8>,
    abs: &Path,
    how: Redo,
    stat_changed: &[bool],
    stack: &mut Vec<Arc<PatternList>>,
) -> Result<()> {
    let ver = node.ver;
    for i in 0..node.names.len() {
        let e = &mut node.entries[i];
        let unchanged = !how.redecide && !e.restat && !stat_changed[i] && !e.candidate;
        if unchanged && subtree_same(e, ctx.step, ver) {
            ctx.stats.dirs_skipped += 1;
            if let Some(sub) = e.sub.as_deref_mut() {
                sub.passed_step = ctx.step;
            }
            continue;
        }
        // Nothing that decides this entry changed: its verdict and id stand.
        if unchanged && verdict_stands(e) {
            continue;
        }
        if !(how.force || e.restat) {
            let descend = matches!(
                (e.state, e.sub.as_deref()),
                (State::Dir(_), Some(sub)) if sub.visit || sub.relist
            );
            if !descend {
                continue;
            }
        }
        let restat = std::mem::take(&mut e.restat);
        let name = node.names[i].as_bytes();
        let before = (e.state, e.out);
        let at = At {
            dir: abs,
            name,
            mode: how.mode,
            ver,
        };
        decide(ctx, e, rel, &at, how.force, restat, stack)?;
        if (e.state, e.out) != before || matches!(e.state, State::Blob { pending: true }) {
            node.dirty = true;
        }
        if let (State::Dir(_), Some(sub)) = (e.state, e.sub.as_deref())
            && sub.dirty
        {
            node.dirty = true;
        }
    }
    Ok(())
}

/// A directory whose whole subtree this step's walk found as its last reconcile settled it,
/// under the same verdicts above it: nothing in it to redo.
fn subtree_same(e: &Entry, step: u64, ver: u64) -> bool {
    let (State::Dir(m), Some(sub)) = (e.state, e.sub.as_deref()) else {
        return false;
    };
    sub.same_step == step
        && sub.mode == Some(m)
        && sub.inputs.0 == ver
        && !sub.dirty
        && !sub.replaced
        && sub.listing.is_some()
        && sub.listing == e.stat.map(|s| (s, true))
}

/// An entry whose stat did not change keeps its verdict and id (a directory is looked into).
fn verdict_stands(e: &Entry) -> bool {
    match e.state {
        State::Blob { pending: false } => e.blob.is_some_and(|b| b.clean && Some(b.key) == e.stat),
        State::Absent | State::Keep(_) => true,
        State::Blob { pending: true } | State::Dir(_) | State::Gitlink(_) => false,
    }
}

/// Whether a reconcile that finds `e`'s stat unchanged leaves it as it is (see `Node::settled`).
fn settled_entry(e: &Entry) -> bool {
    if e.restat || e.candidate {
        return false;
    }
    match e.state {
        State::Blob { pending: false } => e.blob.is_some_and(|b| b.clean && Some(b.key) == e.stat),
        State::Absent | State::Keep(_) => true,
        State::Dir(_) => e.sub.as_deref().is_some_and(|s| s.settled),
        State::Blob { pending: true } | State::Gitlink(_) => false,
    }
}

/// Replaces the directory's names, keeping what is known about names that stay.
fn set_names(ctx: &mut Ctx<'_>, node: &mut Node, names: Vec<CString>, rel: &[u8]) {
    if names == node.names {
        return;
    }
    node.dirty = true;
    let old_names = std::mem::take(&mut node.names);
    let old_entries = std::mem::take(&mut node.entries);
    let old_fresh = std::mem::take(&mut node.fresh);
    let mut old: HashMap<CString, (Entry, Option<Option<StatKey>>)> = old_names
        .into_iter()
        .zip(old_entries)
        .zip(old_fresh.into_iter().chain(std::iter::repeat(None)))
        .map(|((n, e), f)| (n, (e, f)))
        .collect();
    let mut entries = Vec::with_capacity(names.len());
    let mut fresh = Vec::with_capacity(names.len());
    for n in &names {
        match old.remove(n) {
            Some((e, f)) => {
                entries.push(e);
                fresh.push(f);
            }
            None => {
                entries.push(Entry {
                    restat: true,
                    ..Entry::default()
                });
                fresh.push(None);
            }
        }
    }
    for (n, (e, _)) in old {
        let p = join(rel, n.as_bytes());
        if e.candidate {
            ctx.candidates.remove(&p);
        }
        if let Some(sub) = e.sub {
            ctx.drop_subtree(sub, &p);
        }
    }
    node.names = names;
    node.entries = entries;
    node.fresh = fresh;
}

fn ignored_cached(
    e: &mut Entry,
    ver: u64,
    is_dir: bool,
    stack: &[Arc<PatternList>],
    globals: &[Arc<PatternList>],
    path: &[u8],
) -> bool {
    match e.ignored {
        Some((v, d, r)) if v == ver && d == is_dir => r,
        _ => {
            let r = is_ignored(stack, globals, path, is_dir);
            e.ignored = Some((ver, is_dir, r));
            r
        }
    }
}

/// Where an entry stands, for [`decide`]: its directory, its name, how the directory is read
/// and the version of the verdicts above it.
#[derive(Debug, Clone, Copy)]
struct At<'a> {
    dir: &'a Path,
    name: &'a [u8],
    mode: DirMode,
    ver: u64,
}

/// Decides what entry `at.name` of directory `rel` contributes, recursing into directories.
fn decide(
    ctx: &mut Ctx<'_>,
    e: &mut Entry,
    rel: &mut Vec<u8>,
    at: &At<'_>,
    force: bool,
    restat: bool,
    stack: &mut Vec<Arc<PatternList>>,
) -> Result<()> {
    if at.name == b".git" {
        e.state = State::Absent;
        e.out = None;
        return Ok(());
    }
    let path = join(rel, at.name);
    let info = tracked_info(ctx, e, &path);
    let tracked = ctx.tracked;
    let index_entry = info.entry.and_then(|i| tracked.entry(i));
    let (new_state, candidate) = verdict(ctx, e, at, &path, info, force || restat, stack);
    if candidate {
        ctx.candidates.insert(path.clone());
    } else if e.candidate {
        ctx.candidates.remove(&path);
    }
    e.candidate = candidate;
    drop_unwalked(ctx, e, new_state, candidate, &path);
    e.state = new_state;
    match new_state {
        State::Absent => e.out = None,
        State::Keep(i) => {
            e.out = tracked.entry(i).map(|ie| (ie.mode, ie.oid));
            if let Some(ie) = tracked.entry(i) {
                ctx.store.adopt(&ie.oid)?;
            }
        }
        State::Gitlink(id) => e.out = Some((MODE_GITLINK, id)),
        State::Blob { .. } => set_blob(ctx, e, index_entry, path),
        State::Dir(child_mode) => descend(ctx, e, rel, at, child_mode, force, stack)?,
    }
    Ok(())
}

/// What the index says of `path`, cached in the entry for the index's epoch.
fn tracked_info(ctx: &Ctx<'_>, e: &mut Entry, path: &[u8]) -> TrackedInfo {
    let epoch = ctx.epoch;
    match e.tracked {
        Some((ep, info)) if ep == epoch => info,
        _ => {
            let info = ctx.tracked.info(path);
            e.tracked = Some((epoch, info));
            info
        }
    }
}

/// What the entry at `path` is now (its content aside), and whether it is a nested repository
/// or a would-be one (re-checked at every step, since changes inside it are not watched).
fn verdict(
    ctx: &mut Ctx<'_>,
    e: &mut Entry,
    at: &At<'_>,
    path: &[u8],
    info: TrackedInfo,
    relist: bool,
    stack: &[Arc<PatternList>],
) -> (State, bool) {
    let kind = e.stat.map(|s| s.kind());
    let tracked = ctx.tracked;
    let index_entry = info.entry.and_then(|i| tracked.entry(i));
    let kept = info.entry.filter(|&i| tracked.is_kept(i));
    // A kept file whose path is now a directory: what `git add -A` adds inside it replaces the
    // file (git's file/directory conflict rule); if nothing is added, the file stays.
    let kept_may_yield = kept.is_some()
        && kind == Some(FileKind::Dir)
        && at.mode == DirMode::Listed
        && index_entry.is_some_and(|ie| ie.mode != MODE_TREE && ie.mode != MODE_GITLINK);
    e.fallback = if kept_may_yield { kept } else { None };
    let (state, candidate) = match (kept, kind) {
        (Some(i), _) if !kept_may_yield => (State::Keep(i), false),
        (_, Some(FileKind::File | FileKind::Symlink)) => {
            let include = info.entry.is_some()
                || (at.mode == DirMode::Listed
                    && !ignored_cached(e, at.ver, false, stack, ctx.globals, path));
            let state = if include {
                State::Blob { pending: false }
            } else {
                State::Absent
            };
            (state, false)
        }
        (_, Some(FileKind::Dir)) => match index_entry.filter(|ie| ie.mode == MODE_GITLINK) {
            Some(ie) if !kept_may_yield => (gitlink(at, ie), true),
            _ if !kept_may_yield && info.is_dir => {
                let child_mode = if at.mode == DirMode::TrackedOnly
                    || ignored_cached(e, at.ver, true, stack, ctx.globals, path)
                {
                    DirMode::TrackedOnly
                } else {
                    DirMode::Listed
                };
                (State::Dir(child_mode), false)
            }
            _ => untracked_dir(ctx, e, at, path, relist, stack),
        },
        _ => (State::Absent, false),
    };
    match (state, e.fallback) {
        (State::Absent, Some(i)) => (State::Keep(i), candidate),
        _ => (state, candidate),
    }
}

/// A submodule's directory: the commit its repository's HEAD names, or the index's.
fn gitlink(at: &At<'_>, ie: &IndexEntry) -> State {
    let head = match nested_repo(&at.dir.join(OsStr::from_bytes(at.name))) {
        Nested::Head(id) => Some(id),
        _ => None,
    };
    State::Gitlink(head.unwrap_or(ie.oid))
}

/// An untracked directory not ignored: listed, and a nested repository in it (a `.git`)
/// becomes a gitlink.
fn untracked_dir(
    ctx: &mut Ctx<'_>,
    e: &mut Entry,
    at: &At<'_>,
    path: &[u8],
    relist: bool,
    stack: &[Arc<PatternList>],
) -> (State, bool) {
    if at.mode != DirMode::Listed || ignored_cached(e, at.ver, true, stack, ctx.globals, path) {
        return (State::Absent, false);
    }
    let sub = e.sub.get_or_insert_with(Box::default);
    let sub_abs = at.dir.join(OsStr::from_bytes(at.name));
    ensure_listing(ctx, sub, &sub_abs, path, e.stat, relist);
    if find(&sub.names, b".git").is_none() {
        return (State::Dir(DirMode::Listed), false);
    }
    let state = match nested_repo(&sub_abs) {
        Nested::Head(id) => State::Gitlink(id),
        // git refuses to add it (`git add -A` fails): left out.
        Nested::Unborn => State::Absent,
        Nested::No => State::Dir(DirMode::Listed),
    };
    (state, true)
}

/// Drops a subtree that is no longer walked; a would-be nested repository keeps its node (for
/// its listing), but not what was below it.
fn drop_unwalked(ctx: &mut Ctx<'_>, e: &mut Entry, state: State, candidate: bool, path: &[u8]) {
    match state {
        State::Dir(_) => {}
        State::Gitlink(_) | State::Absent if candidate => {
            if let Some(sub) = e.sub.as_deref_mut()
                && sub.mode.is_some()
            {
                sub.mode = None;
                let names = std::mem::take(&mut sub.names);
                let entries = std::mem::take(&mut sub.entries);
                for (n, child) in names.iter().zip(entries) {
                    if let Some(s) = child.sub {
                        ctx.drop_subtree(s, &join(path, n.as_bytes()));
                    }
                }
                sub.entries = names.iter().map(|_| Entry::default()).collect();
                sub.names = names;
                sub.fresh.clear();
                sub.tree = None;
            }
        }
        _ => {
            if let Some(sub) = e.sub.take() {
                ctx.drop_subtree(sub, path);
            }
        }
    }
}

/// A file's or symlink's id: cached, or the index's where its stat vouches for it, else
/// queued for hashing (the entry pending).
fn set_blob(ctx: &mut Ctx<'_>, e: &mut Entry, index_entry: Option<&IndexEntry>, path: Vec<u8>) {
    let Some(stat) = e.stat else {
        e.state = State::Absent;
        e.out = None;
        return;
    };
    let tracked = ctx.tracked;
    let mode_bits = ctx.blob_mode(&stat, index_entry.map(|ie| ie.mode));
    let cached = e.blob.filter(|b| b.key == stat && b.clean).map(|b| b.oid);
    let seeded = index_entry.and_then(|ie| {
        let same_type = (stat.kind() == FileKind::Symlink) == (ie.mode == MODE_SYMLINK);
        let not_racy = i128::from(stat.mtime) * 1_000_000_000 + i128::from(stat.mtime_ns)
            < tracked.index_mtime_ns;
        let ok = ie.stage == 0
            && ie.mode != MODE_GITLINK
            && ie.mode != MODE_TREE
            && same_type
            && not_racy
            && stat.matches_index(&ie.stat)
            && (ie.stat.size != 0 || ie.oid == EMPTY_BLOB);
        // A blob the repository gained during the turn is read and stored instead.
        (ok && ctx.store.available(&ie.oid)).then_some(ie.oid)
    });
    match cached.or(seeded) {
        Some(id) => {
            if cached.is_none() {
                e.blob = Some(BlobCache {
                    key: stat,
                    oid: id,
                    clean: true,
                });
            }
            e.out = Some((mode_bits, id));
        }
        None => {
            e.blob = None;
            e.state = State::Blob { pending: true };
            e.out = Some((mode_bits, ObjectId([0; 20])));
            ctx.jobs.push(Job {
                rel: path,
                symlink: stat.kind() == FileKind::Symlink,
            });
        }
    }
}

/// Reconciles the directory of a directory entry, one level below `rel`.
fn descend(
    ctx: &mut Ctx<'_>,
    e: &mut Entry,
    rel: &mut Vec<u8>,
    at: &At<'_>,
    child_mode: DirMode,
    force: bool,
    stack: &mut Vec<Arc<PatternList>>,
) -> Result<()> {
    let sub = e.sub.get_or_insert_with(Box::default);
    let sub_abs = at.dir.join(OsStr::from_bytes(at.name));
    let len = rel.len();
    if !rel.is_empty() {
        rel.push(b'/');
    }
    rel.extend_from_slice(at.name);
    let r = reconcile(
        ctx, sub, rel, &sub_abs, e.stat, child_mode, at.ver, force, stack,
    );
    rel.truncate(len);
    r?;
    e.out = None;
    Ok(())
}

/// Path → (bytes hashed, id or `None` if the file vanished meanwhile).
type HashResults = HashMap<Vec<u8>, (u64, Option<ObjectId>)>;

/// Hashes the queued files.
fn hash_jobs(root: &Path, jobs: &[Job], store: &Store, threads: usize) -> Result<HashResults> {
    let run = |job: &Job| -> Result<(u64, Option<ObjectId>)> {
        let abs = root.join(OsStr::from_bytes(&job.rel));
        if job.symlink {
            return match std::fs::read_link(&abs) {
                Ok(t) => {
                    let bytes = t.as_os_str().as_bytes();
                    Ok((bytes.len() as u64, Some(store.put(Kind::Blob, bytes)?)))
                }
                Err(_) => Ok((0, None)),
            };
        }
        hash_file(&abs, store)
    };
    let mut out = HashMap::with_capacity(jobs.len());
    if threads <= 1 || jobs.len() < 8 {
        for j in jobs {
            out.insert(j.rel.clone(), run(j)?);
        }
        return Ok(out);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(j) = jobs.get(i) else {
                            break;
                        };
                        mine.push((i, run(j)));
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    for r in results {
        let r = r.map_err(|_| Error::Worker)?;
        for (i, res) in r {
            if let Some(j) = jobs.get(i) {
                out.insert(j.rel.clone(), res?);
            }
        }
    }
    Ok(out)
}

/// Reads and stores one file; `None` if it is gone or no longer a regular file.
fn hash_file(abs: &Path, store: &Store) -> Result<(u64, Option<ObjectId>)> {
    for _ in 0..3 {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(abs);
        let mut file = match file {
            Ok(f) => f,
            Err(e) if is_gone(&e) => return Ok((0, None)),
            Err(e) => return Err(io_err("open", abs)(e)),
        };
        let meta = file.metadata().map_err(io_err("fstat", abs))?;
        if !meta.is_file() {
            return Ok((0, None));
        }
        let size = meta.len();
        if size < STREAM_THRESHOLD {
            let mut buf = Vec::with_capacity(size as usize + 1);
            (&mut file)
                .take(size + 1)
                .read_to_end(&mut buf)
                .map_err(io_err("read", abs))?;
            if buf.len() as u64 != size {
                continue;
            }
            return Ok((size, Some(store.put(Kind::Blob, &buf)?)));
        }
        match store.put_blob_stream(size, &mut file) {
            Ok(id) => return Ok((size, Some(id))),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData
                ) =>
            {
                continue;
            }
            Err(e) => return Err(io_err("store", abs)(e)),
        }
    }
    Err(Error::Unstable(abs.to_path_buf()))
}

fn is_gone(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
    )
}

/// Rebuilds the trees of dirty directories, bottom-up; `None` for an empty directory.
fn build(
    ctx: &mut Ctx<'_>,
    node: &mut Node,
    rel: &mut Vec<u8>,
    results: &HashResults,
) -> Result<Option<ObjectId>> {
    if !node.dirty {
        return Ok(node.tree);
    }
    let mut items: Vec<(Vec<u8>, u32, ObjectId)> = Vec::with_capacity(node.names.len());
    for i in 0..node.names.len() {
        let name = node.names[i].as_bytes();
        let e = &mut node.entries[i];
        match e.state {
            State::Absent => {}
            State::Blob { pending } => {
                if pending {
                    let path = join(rel, name);
                    match results.get(&path).and_then(|r| r.1) {
                        Some(id) => {
                            if let Some(stat) = e.stat {
                                e.blob = Some(BlobCache {
                                    key: stat,
                                    oid: id,
                                    clean: ctx.clean(&stat),
                                });
                            }
                            if let Some(o) = e.out.as_mut() {
                                o.1 = id;
                            }
                            e.state = State::Blob { pending: false };
                        }
                        None => {
                            // Gone while we looked: left out now, looked at again next step.
                            e.state = State::Absent;
                            e.out = None;
                            e.stat = None;
                            e.blob = None;
                        }
                    }
                }
                if let Some((m, id)) = e.out {
                    items.push((name.to_vec(), m, id));
                }
            }
            State::Gitlink(id) => items.push((name.to_vec(), MODE_GITLINK, id)),
            State::Keep(ix) => {
                if let Some(ie) = ctx.tracked.entry(ix) {
                    items.push((name.to_vec(), ie.mode, ie.oid));
                }
            }
            State::Dir(_) => {
                if let Some(sub) = e.sub.as_deref_mut() {
                    let len = rel.len();
                    if !rel.is_empty() {
                        rel.push(b'/');
                    }
                    rel.extend_from_slice(name);
                    let r = build(ctx, sub, rel, results);
                    rel.truncate(len);
                    match (r?, e.fallback.and_then(|ix| ctx.tracked.entry(ix))) {
                        (Some(id), _) => items.push((name.to_vec(), MODE_TREE, id)),
                        (None, Some(ie)) => {
                            ctx.store.adopt(&ie.oid)?;
                            items.push((name.to_vec(), ie.mode, ie.oid));
                        }
                        (None, None) => {}
                    }
                }
            }
        }
    }
    // Entries git keeps from the index though they are not (or not as such) in the work tree.
    add_kept(ctx, rel, &mut items)?;
    let id = if items.is_empty() && !rel.is_empty() {
        None
    } else {
        Some(write_tree(ctx, items)?)
    };
    node.tree = id;
    node.dirty = false;
    Ok(id)
}

fn add_kept(
    ctx: &mut Ctx<'_>,
    rel: &[u8],
    items: &mut Vec<(Vec<u8>, u32, ObjectId)>,
) -> Result<()> {
    let tracked = ctx.tracked;
    for &ix in tracked.kept_in(rel) {
        if let Some(ie) = tracked.entry(ix) {
            let name = ie
                .path
                .rsplit(|&b| b == b'/')
                .next()
                .unwrap_or(&ie.path[..]);
            if !items.iter().any(|(n, _, _)| n == name) {
                ctx.store.adopt(&ie.oid)?;
                items.push((name.to_vec(), ie.mode, ie.oid));
            }
        }
    }
    for child in tracked.children(rel) {
        let path = join(rel, child);
        if tracked.has_kept_below(&path)
            && !items.iter().any(|(n, _, _)| n[..] == child[..])
            && let Some(id) = kept_tree(ctx, &path)?
        {
            items.push((child.to_vec(), MODE_TREE, id));
        }
    }
    Ok(())
}

/// The tree of a directory missing from the work tree that holds entries git keeps.
fn kept_tree(ctx: &mut Ctx<'_>, rel: &[u8]) -> Result<Option<ObjectId>> {
    let mut items = Vec::new();
    add_kept(ctx, rel, &mut items)?;
    if items.is_empty() {
        return Ok(None);
    }
    write_tree(ctx, items).map(Some)
}

fn write_tree(ctx: &mut Ctx<'_>, mut items: Vec<(Vec<u8>, u32, ObjectId)>) -> Result<ObjectId> {
    items.sort_by(|a, b| tree_order(&a.0, a.1, &b.0, b.1));
    let mut buf = Vec::with_capacity(items.len() * 48);
    for (name, mode, id) in &items {
        buf.extend_from_slice(format!("{mode:o}").as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(name);
        buf.push(0);
        buf.extend_from_slice(&id.0);
    }
    ctx.stats.trees_built += 1;
    ctx.store.put(Kind::Tree, &buf)
}

/// git's order of tree entries: by name, a directory's name read as if it ended in `/`.
fn tree_order(a: &[u8], am: u32, b: &[u8], bm: u32) -> std::cmp::Ordering {
    let n = a.len().min(b.len());
    match a[..n].cmp(&b[..n]) {
        std::cmp::Ordering::Equal => {}
        o => return o,
    }
    let next = |s: &[u8], m: u32| -> u8 {
        match s.get(n) {
            Some(&c) => c,
            None if m == MODE_TREE => b'/',
            None => 0,
        }
    };
    next(a, am).cmp(&next(b, bm))
}
