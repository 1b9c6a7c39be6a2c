//! The repository's index seen as what `git add -A` needs: which paths are tracked (they stay
//! even if an ignore rule matches them), which entries git leaves alone (`skip-worktree`,
//! `assume-unchanged`, sparse directories), and the stat data that can seed the stat cache.

use crate::index::{IndexEntry, MODE_TREE};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

#[derive(Debug, Default)]
pub(crate) struct Tracked {
    pub entries: Vec<IndexEntry>,
    by_path: HashMap<Box<[u8]>, u32>,
    /// Directory (`""` for the top) → names of tracked children (files and directories).
    dirs: HashMap<Box<[u8]>, Vec<Box<[u8]>>>,
    /// Directory → entries git keeps as they are in the index.
    keep: HashMap<Box<[u8]>, Vec<u32>>,
    /// Directories with kept entries somewhere below them.
    keep_dirs: HashSet<Box<[u8]>>,
    /// Changes whenever anything that decides the tree (other than file content) changes.
    pub signature: u64,
    /// The index file's mtime (ns): entries modified at or after it are "racily clean".
    pub index_mtime_ns: i128,
}

/// What the index says about one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TrackedInfo {
    /// The path is an entry (any stage).
    pub entry: Option<u32>,
    /// Some entry lies below the path (it is a directory in the index).
    pub is_dir: bool,
}

impl Tracked {
    pub(crate) fn new(mut raw: Vec<IndexEntry>, index_mtime_ns: i128) -> Tracked {
        // One entry per path: stage 0 if there is one (there is none while a path is conflicted).
        raw.sort_by(|a, b| a.path.cmp(&b.path).then(a.stage.cmp(&b.stage)));
        raw.dedup_by(|later, first| later.path == first.path);
        let mut t = Tracked {
            index_mtime_ns,
            ..Tracked::default()
        };
        let mut sig = std::collections::hash_map::DefaultHasher::new();
        for (i, e) in raw.iter().enumerate() {
            let i = i as u32;
            t.by_path.insert(e.path.clone(), i);
            let keep = e.stage == 0 && (e.skip_worktree || e.assume_valid || e.mode == MODE_TREE);
            e.path.hash(&mut sig);
            (e.mode == crate::index::MODE_GITLINK, keep, e.stage == 0).hash(&mut sig);
            if keep || e.mode == crate::index::MODE_GITLINK {
                (e.mode, e.oid).hash(&mut sig);
            }
            // Register the path in its parent directories.
            let path = &e.path[..];
            let mut start = 0;
            loop {
                let rest = &path[start..];
                let (dir, name) = match rest.iter().position(|&b| b == b'/') {
                    Some(n) => (&path[..start.saturating_sub(1)], &path[start..start + n]),
                    None => (&path[..start.saturating_sub(1)], rest),
                };
                let children = t.dirs.entry(dir.into()).or_default();
                if children.last().map(|l| &l[..]) != Some(name) {
                    children.push(name.into());
                }
                match rest.iter().position(|&b| b == b'/') {
                    Some(n) => start += n + 1,
                    None => break,
                }
            }
            if keep {
                let parent = path
                    .iter()
                    .rposition(|&b| b == b'/')
                    .map_or(&path[..0], |p| &path[..p]);
                t.keep.entry(parent.into()).or_default().push(i);
                let mut d = parent;
                loop {
                    if !t.keep_dirs.insert(d.into()) {
                        break;
                    }
                    match d.iter().rposition(|&b| b == b'/') {
                        Some(p) => d = &d[..p],
                        None if !d.is_empty() => d = &d[..0],
                        None => break,
                    }
                }
            }
        }
        for children in t.dirs.values_mut() {
            children.sort_unstable();
            children.dedup();
        }
        t.signature = sig.finish();
        t.entries = raw;
        t
    }

    pub(crate) fn info(&self, path: &[u8]) -> TrackedInfo {
        TrackedInfo {
            entry: self.by_path.get(path).copied(),
            is_dir: self.dirs.contains_key(path),
        }
    }

    pub(crate) fn entry(&self, i: u32) -> Option<&IndexEntry> {
        self.entries.get(i as usize)
    }

    /// Whether git leaves entry `i` as it is in the index.
    pub(crate) fn is_kept(&self, i: u32) -> bool {
        self.entry(i).is_some_and(|e| {
            e.stage == 0 && (e.skip_worktree || e.assume_valid || e.mode == MODE_TREE)
        })
    }

    /// Names of tracked children of `dir`.
    pub(crate) fn children(&self, dir: &[u8]) -> &[Box<[u8]>] {
        self.dirs.get(dir).map_or(&[], |v| &v[..])
    }

    /// Whether git keeps any entry as it is in the index (skip-worktree, assume-unchanged,
    /// sparse directories).
    pub(crate) fn any_kept(&self) -> bool {
        !self.keep.is_empty()
    }

    pub(crate) fn kept_in(&self, dir: &[u8]) -> &[u32] {
        self.keep.get(dir).map_or(&[], |v| &v[..])
    }

    pub(crate) fn has_kept_below(&self, dir: &[u8]) -> bool {
        self.keep_dirs.contains(dir)
    }
}
