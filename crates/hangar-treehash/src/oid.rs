//! SHA-1 object ids and git's object hashing.

use sha1::Digest;
use std::fmt;

/// A git object id (SHA-1, 20 bytes); shown as 40 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; 20]);

/// The id of the empty tree, what `git write-tree` gives for an empty index.
pub const EMPTY_TREE: ObjectId = ObjectId([
    0x4b, 0x82, 0x5d, 0xc6, 0x42, 0xcb, 0x6e, 0xb9, 0xa0, 0x60, 0xe5, 0x4b, 0xf8, 0xd6, 0x92, 0x88,
    0xfb, 0xee, 0x49, 0x04,
]);

/// The id of the empty blob.
pub const EMPTY_BLOB: ObjectId = ObjectId([
    0xe6, 0x9d, 0xe2, 0x9b, 0xb2, 0xd1, 0xd6, 0x43, 0x4b, 0x8b, 0x29, 0xae, 0x77, 0x5a, 0xd8, 0xc2,
    0xe4, 0x8c, 0x53, 0x91,
]);

impl ObjectId {
    /// The 40 hex digits.
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(40);
        for b in self.0 {
            s.push(DIGITS[usize::from(b >> 4)] as char);
            s.push(DIGITS[usize::from(b & 15)] as char);
        }
        s
    }

    /// Parses 40 hex digits (either case).
    pub fn from_hex(hex: &[u8]) -> Option<ObjectId> {
        if hex.len() != 40 {
            return None;
        }
        let mut out = [0u8; 20];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            let hi = hex_val(pair[0])?;
            let lo = hex_val(pair[1])?;
            out[i] = (hi << 4) | lo;
        }
        Some(ObjectId(out))
    }

    /// The raw 20 bytes.
    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// The id git gives an object of `kind` with `data` as its content.
    pub fn for_object(kind: Kind, data: &[u8]) -> ObjectId {
        let mut h = Hasher::new(kind, data.len() as u64);
        h.update(data);
        h.finish()
    }

    /// `xx/yyyy…`: the object's path under an objects directory.
    pub(crate) fn loose_path(&self) -> String {
        let hex = self.to_hex();
        format!("{}/{}", &hex[..2], &hex[2..])
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.to_hex())
    }
}

/// The kinds of git object this crate makes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// File content or a symlink's target.
    Blob,
    /// A directory listing.
    Tree,
    /// A commit (only ever read, never made).
    Commit,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Blob => "blob",
            Kind::Tree => "tree",
            Kind::Commit => "commit",
        }
    }

    /// The type number in a pack.
    pub(crate) fn pack_type(self) -> u8 {
        match self {
            Kind::Commit => 1,
            Kind::Tree => 2,
            Kind::Blob => 3,
        }
    }

    pub(crate) fn from_name(name: &[u8]) -> Option<Kind> {
        match name {
            b"blob" => Some(Kind::Blob),
            b"tree" => Some(Kind::Tree),
            b"commit" => Some(Kind::Commit),
            _ => None,
        }
    }
}

/// Incremental hashing of one object: `<kind> <size>\0` then the content.
pub(crate) struct Hasher(sha1::Sha1);

impl Hasher {
    pub(crate) fn new(kind: Kind, size: u64) -> Hasher {
        let mut h = sha1::Sha1::new();
        h.update(header(kind, size));
        Hasher(h)
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub(crate) fn finish(self) -> ObjectId {
        ObjectId(self.0.finalize().into())
    }
}

/// The object header git hashes and stores before the content.
pub(crate) fn header(kind: Kind, size: u64) -> Vec<u8> {
    format!("{} {}\0", kind.name(), size).into_bytes()
}

/// Plain SHA-1 of bytes (pack and index trailers).
pub(crate) fn sha1_of(data: &[u8]) -> [u8; 20] {
    sha1::Sha1::digest(data).into()
}

/// A running plain SHA-1 (for pack files).
pub(crate) struct RawSha1(sha1::Sha1);

impl RawSha1 {
    pub(crate) fn new() -> RawSha1 {
        RawSha1(sha1::Sha1::new())
    }
    pub(crate) fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }
    pub(crate) fn finish(self) -> [u8; 20] {
        self.0.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_ids() {
        assert_eq!(ObjectId::for_object(Kind::Tree, b""), EMPTY_TREE);
        assert_eq!(ObjectId::for_object(Kind::Blob, b""), EMPTY_BLOB);
        assert_eq!(
            ObjectId::for_object(Kind::Blob, b"hello\n").to_hex(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert_eq!(
            ObjectId::from_hex(EMPTY_TREE.to_hex().as_bytes()),
            Some(EMPTY_TREE)
        );
    }
}
