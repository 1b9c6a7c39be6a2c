//! Reading git's index file (versions 2, 3 and 4), read-only. Only the entries matter here: which
//! paths are tracked, their flags, and the stat data that can seed the stat cache. Extensions are
//! skipped, except that a split index (`link`) is refused, since its entries live elsewhere.

use crate::error::{Error, Result};
use crate::oid::ObjectId;
use std::path::Path;

pub(crate) const MODE_GITLINK: u32 = 0o160000;
pub(crate) const MODE_SYMLINK: u32 = 0o120000;
pub(crate) const MODE_TREE: u32 = 0o040000;

/// Stat data git records for an entry (all truncated to 32 bits, as git does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct IndexStat {
    pub ctime_s: u32,
    pub ctime_ns: u32,
    pub mtime_s: u32,
    pub mtime_ns: u32,
    pub ino: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct IndexEntry {
    pub path: Box<[u8]>,
    pub mode: u32,
    pub oid: ObjectId,
    pub stat: IndexStat,
    pub stage: u8,
    /// `git update-index --assume-unchanged`.
    pub assume_valid: bool,
    pub skip_worktree: bool,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at + 2)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// Reads the index at `path`; `Ok(None)` if there is none.
pub(crate) fn read_index(path: &Path) -> Result<Option<Vec<IndexEntry>>> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Io {
                op: "read",
                path: path.to_path_buf(),
                source: e,
            });
        }
    };
    let bad = |reason: &str| Error::Index {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    parse_index(&data).map(Some).map_err(|r| bad(&r))
}

pub(crate) fn parse_index(data: &[u8]) -> std::result::Result<Vec<IndexEntry>, String> {
    if data.len() < 12 + 20 || &data[..4] != b"DIRC" {
        return Err("not an index file".into());
    }
    let version = be32(data, 4).ok_or("short header")?;
    if !(2..=4).contains(&version) {
        return Err(format!("index version {version}"));
    }
    let count = be32(data, 8).ok_or("short header")? as usize;
    let end = data.len() - 20;
    let mut entries = Vec::with_capacity(count);
    let mut at = 12usize;
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let field = |i: usize| be32(data, at + 4 * i).ok_or_else(|| "truncated entry".to_string());
        let stat = IndexStat {
            ctime_s: field(0)?,
            ctime_ns: field(1)?,
            mtime_s: field(2)?,
            mtime_ns: field(3)?,
            ino: field(5)?,
            uid: field(7)?,
            gid: field(8)?,
            size: field(9)?,
        };
        let mode = field(6)?;
        let oid_bytes: [u8; 20] = data
            .get(at + 40..at + 60)
            .and_then(|s| s.try_into().ok())
            .ok_or("truncated entry")?;
        let flags = be16(data, at + 60).ok_or("truncated entry")?;
        let mut p = at + 62;
        let mut skip_worktree = false;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return Err("extended flags in a version 2 index".into());
            }
            let ext = be16(data, p).ok_or("truncated entry")?;
            skip_worktree = ext & 0x4000 != 0;
            p += 2;
        }
        let path: Vec<u8>;
        if version == 4 {
            let (strip, used) = read_varint(&data[p.min(end)..end]).ok_or("bad path prefix")?;
            p += used;
            if strip > prev.len() {
                return Err("bad path prefix".into());
            }
            let nul = data[p.min(end)..end]
                .iter()
                .position(|&b| b == 0)
                .ok_or("unterminated path")?;
            let mut name = prev[..prev.len() - strip].to_vec();
            name.extend_from_slice(&data[p..p + nul]);
            p += nul + 1;
            path = name;
            at = p;
        } else {
            let nul = data[p.min(end)..end]
                .iter()
                .position(|&b| b == 0)
                .ok_or("unterminated path")?;
            path = data[p..p + nul].to_vec();
            // Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
            let len = (p - at) + nul;
            at += (len + 8) & !7;
        }
        if at > end {
            return Err("entries run past the end".into());
        }
        prev.clone_from(&path);
        entries.push(IndexEntry {
            path: path.into_boxed_slice(),
            mode,
            oid: ObjectId(oid_bytes),
            stat,
            stage: ((flags >> 12) & 3) as u8,
            assume_valid: flags & 0x8000 != 0,
            skip_worktree,
        });
    }
    // Extensions: refuse a split index, skip the rest.
    while at + 8 <= end {
        let sig = &data[at..at + 4];
        let size = be32(data, at + 4).ok_or("truncated extension")? as usize;
        if sig == b"link" {
            return Err("split index (core.splitIndex) is not supported".into());
        }
        at += 8 + size;
    }
    Ok(entries)
}

/// git's offset varint (as in index v4 and pack OFS_DELTA).
fn read_varint(b: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    let mut c = *b.get(i)?;
    i += 1;
    let mut val = usize::from(c & 127);
    while c & 128 != 0 {
        val = val.checked_add(1)?;
        c = *b.get(i)?;
        i += 1;
        val = val.checked_mul(128)?.checked_add(usize::from(c & 127))?;
    }
    Some((val, i))
}
