//! The tree id `git add -A && git write-tree` would give for a work tree, computed without
//! running git and without writing anything into the repository.
//!
//! * [`tree_id`]: one-shot, writes no objects.
//! * [`TreeHasher`]: step after step, incremental (a stat cache seeded from the repository's
//!   index, and an inotify watch where available), storing blobs and trees in a [`Store`] —
//!   the turn's own object directory, with the repository's objects read as alternates —
//!   which hands everything it made to the control plane as one pack ([`Store::export_pack`]).
//!
//! What git would do that this crate does not: anything that runs or converts content on the
//! way in — clean/process filters, `core.autocrlf`, `.gitattributes` `text`/`eol`/`ident`/
//! `working-tree-encoding`. Content is hashed as it is on disk, so where git would have converted
//! a file the ids differ ([`TreeHasher::divergences`] says when the repository's settings make
//! that possible).

mod config;
mod error;
mod hasher;
mod ignore;
mod index;
mod oid;
mod repo;
mod store;
mod sys;
mod tracked;
mod watch;
mod wildmatch;

pub use error::{Error, Result};
pub use hasher::{Options, ScanStats, TreeHasher, UserConfig};
pub use oid::{EMPTY_BLOB, EMPTY_TREE, Kind, ObjectId};
pub use repo::RepoLayout;
pub use store::{PackInfo, Store};

/// The tree id (40 hex digits) `git add -A && git write-tree` would give for `dir` (a
/// repository's work tree, or a plain folder: then as a fresh `git init` would), reading the
/// user's git settings from the environment. Writes nothing anywhere.
pub fn tree_id(dir: &std::path::Path) -> Result<String> {
    let opts = Options {
        watch: false,
        ..Options::default()
    };
    let mut h = TreeHasher::with_options(dir, Store::hash_only(), opts)?;
    Ok(h.hash()?.to_hex())
}
