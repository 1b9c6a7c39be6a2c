//! The run log's seals: proof that bytes of a run log were written by hangar.
//!
//! Without the uid split the agent is the driver's own user and can append to its run log; a
//! line it wrote would otherwise read as the model's words or as one of hangar's own lines.
//! So every write hangar makes to a run log (the driver's, and the control plane's before the
//! driver starts) is followed, in the same `write`, by a seal line:
//!
//! ```text
//! {"type":"hangar.seal","n":7,"len":1234,"mac":"<64 hex digits>"}
//! ```
//!
//! covering the `len` bytes just before it (whole lines). `mac` is HMAC-SHA256 with the run's
//! [`SealKey`] over the encoding below, `n` counts the log's seals from 1. One `write` with
//! `O_APPEND` puts the content and its seal next to each other whatever else is appended
//! around them, so a reader needs no offsets from the writer: a valid seal at offset `p`
//! vouches for exactly `[p - len, p)`. Bytes no valid seal covers were not written by hangar
//! (or were changed after): the control plane neither shows nor acts on them.
//!
//! The key: [`SealKey::derive`] from the run key (which the driver reads and deletes before
//! the harness starts, and holds in a non-dumpable process). The seal key signs nothing but
//! seals, so the control plane can keep it with the ended run's log after the run key is
//! destroyed, and still check that log.
//!
//! # Encoding
//!
//! The domain tag `hangar.runlog.seal.v1` and a NUL byte, the run id (its length as a
//! big-endian `u32`, then its bytes), `n` and `len` as big-endian `u64`, then the `len` bytes.
//!
//! # Order
//!
//! A reader that starts at the log's beginning takes seals in order only ([`Order::After`]):
//! number `n + 1` after `n`, each covering bytes after the last one taken. A seal repeated,
//! out of order or after a missing one is not taken (an agent that copies the driver's bytes
//! around cannot replay or reorder them; one that destroys a seal stops everything after it
//! from being taken, which it could do anyway by killing the driver).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::key::{KEY_LEN, RunKey};

type HmacSha256 = Hmac<Sha256>;

/// The `type` of a seal line.
pub const SEAL_TYPE: &str = "hangar.seal";

/// How every seal line begins (as [`seal_line`] writes it).
pub const SEAL_PREFIX: &[u8] = b"{\"type\":\"hangar.seal\",";

/// The domain tag of a seal's MAC.
const DOMAIN: &str = "hangar.runlog.seal.v1";

/// The domain tag of the seal key's derivation from the run key.
const KEY_DOMAIN: &str = "hangar.runlog.seal-key.v1";

/// A line longer than this is never a seal (a seal line is about 110 bytes).
const SEAL_LINE_MAX: usize = 512;

/// Bytes read at a time while a sealed write is checked.
const CHUNK: usize = 64 << 10;

/// The key a run's log is sealed with. `Debug` prints `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey([u8; KEY_LEN]);

impl SealKey {
    /// The seal key of a run: HMAC-SHA256 with the run key over `hangar.runlog.seal-key.v1`.
    pub fn derive(run_key: &RunKey) -> SealKey {
        SealKey(hmac(run_key.expose(), &[KEY_DOMAIN.as_bytes()]))
    }

    /// A key from raw bytes (tests).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> SealKey {
        SealKey(bytes)
    }

    /// The key as kept in a file: 64 lowercase hex digits and a newline.
    pub fn to_file_text(&self) -> String {
        let mut s = hex::encode(self.0);
        s.push('\n');
        s
    }

    /// Parses [`SealKey::to_file_text`] (surrounding whitespace ignored).
    pub fn from_file_text(text: &str) -> io::Result<SealKey> {
        let raw = hex::decode(text.trim())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "seal key is not hex"))?;
        let bytes: [u8; KEY_LEN] = raw.try_into().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "seal key does not hold 32 bytes",
            )
        })?;
        Ok(SealKey(bytes))
    }
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealKey([redacted])")
    }
}

/// An HMAC-SHA256 keyed with 32 bytes. HMAC pads a key shorter than the hash's block with
/// zeros, so the key given as one zero-padded block is the same key, and cannot be refused.
fn keyed(key: &[u8; KEY_LEN]) -> HmacSha256 {
    let mut block = [0u8; 64];
    block[..KEY_LEN].copy_from_slice(key);
    <HmacSha256 as hmac::digest::KeyInit>::new(&block.into())
}

fn hmac(key: &[u8; KEY_LEN], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = keyed(key);
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// The MAC state after the encoding's fixed fields, ready for the content.
fn mac_start(key: &SealKey, run: &str, n: u64, len: u64) -> HmacSha256 {
    let mut m = keyed(&key.0);
    m.update(DOMAIN.as_bytes());
    m.update(&[0]);
    let run_len = u32::try_from(run.len()).unwrap_or(u32::MAX);
    m.update(&run_len.to_be_bytes());
    m.update(run.as_bytes());
    m.update(&n.to_be_bytes());
    m.update(&len.to_be_bytes());
    m
}

/// The seal line (with its newline) for content written as `parts`, number `n`.
pub fn seal_line(key: &SealKey, run: &str, n: u64, parts: &[&[u8]]) -> Vec<u8> {
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let mut m = mac_start(key, run, n, len);
    for p in parts {
        m.update(p);
    }
    let mac = hex::encode(m.finalize().into_bytes());
    format!("{{\"type\":\"{SEAL_TYPE}\",\"n\":{n},\"len\":{len},\"mac\":\"{mac}\"}}\n").into_bytes()
}

/// A seal line's fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seal {
    /// Its number: 1 for the log's first seal, then one more each.
    pub n: u64,
    /// How many bytes before the seal line it covers.
    pub len: u64,
    /// HMAC-SHA256 over the encoding in the module docs.
    pub mac: [u8; 32],
}

impl Seal {
    /// The seal a line (without its newline) holds, if it is a seal line exactly as
    /// [`seal_line`] writes it (hangar never writes one otherwise, so nothing else can be valid).
    pub fn parse(line: &[u8]) -> Option<Seal> {
        if line.len() > SEAL_LINE_MAX {
            return None;
        }
        let rest = line.strip_prefix(b"{\"type\":\"hangar.seal\",\"n\":")?;
        let (n, rest) = number(rest)?;
        let rest = rest.strip_prefix(b",\"len\":")?;
        let (len, rest) = number(rest)?;
        let hex_mac = rest.strip_prefix(b",\"mac\":\"")?.strip_suffix(b"\"}")?;
        let mut mac = [0u8; 32];
        hex::decode_to_slice(hex_mac, &mut mac).ok()?;
        Some(Seal { n, len, mac })
    }
}

/// A decimal `u64` at the start of `b` (no sign, no leading zero but for 0 itself), and what
/// follows it.
fn number(b: &[u8]) -> Option<(u64, &[u8])> {
    let end = b
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(b.len());
    let (digits, rest) = b.split_at(end);
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut n: u64 = 0;
    for d in digits {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some((n, rest))
}

/// The writer's side: the next seal number.
#[derive(Debug)]
pub struct Sealer {
    key: SealKey,
    run: String,
    next: u64,
}

impl Sealer {
    /// A sealer whose first seal follows number `last` (0 for a log with none).
    pub fn new(key: SealKey, run: &str, last: u64) -> Sealer {
        Sealer {
            key,
            run: run.to_owned(),
            next: last + 1,
        }
    }

    /// The seal line for the next write, made of `parts`; call [`Sealer::written`] once the
    /// content and the line are in the log (a write that failed is sealed again, same number).
    pub fn seal(&self, parts: &[&[u8]]) -> Vec<u8> {
        seal_line(&self.key, &self.run, self.next, parts)
    }

    /// The sealed write is in the log: the next seal takes the next number.
    pub fn written(&mut self) {
        self.next += 1;
    }
}

/// Which seal numbers a reader takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Only the number after this one (0: the log's first seal).
    After(u64),
    /// Any number (a reader starting at an offset it was given; the content a seal vouches for
    /// is hangar's whatever its number).
    Any,
}

impl Order {
    fn takes(self, n: u64) -> bool {
        match self {
            Order::After(last) => last.checked_add(1) == Some(n),
            Order::Any => n > 0,
        }
    }
}

/// A stretch of a run log, as the seals say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// `len` bytes at `at` that no valid seal covers: not written by hangar.
    Unsealed { at: u64, len: u64 },
    /// A write hangar sealed (seal number `n`), `len` bytes at `at`, whole lines; `bytes` are
    /// they (`None` when over the reader's limit: checked, not kept).
    Sealed {
        at: u64,
        len: u64,
        n: u64,
        bytes: Option<Vec<u8>>,
    },
}

/// What [`scan`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// The log from where the scan started to `resolved`, in order (the seal lines themselves
    /// are in no piece).
    pub pieces: Vec<Piece>,
    /// Just past the last seal line taken: where the next scan starts. Bytes after it are not
    /// decided yet (the driver's next seal may still cover them).
    pub resolved: u64,
    /// The number of the last seal taken, if any.
    pub last: Option<u64>,
    /// The scan read to the end of the file (nothing after `resolved` can be decided yet);
    /// `false` when it stopped because it had resolved what it wanted.
    pub at_end: bool,
}

/// Whether the `len` bytes of `file` at `at` carry `seal`, read again from the file (when they
/// were not kept in memory); they are returned when `keep` allows.
fn check_in_file(
    file: &File,
    at: u64,
    seal: &Seal,
    key: &SealKey,
    run: &str,
    keep: u64,
) -> io::Result<Option<Option<Vec<u8>>>> {
    let mut m = mac_start(key, run, seal.n, seal.len);
    let mut kept = (seal.len <= keep).then(|| Vec::with_capacity(seal.len as usize));
    let mut buf = vec![0u8; CHUNK.min(seal.len as usize).max(1)];
    let mut done = 0u64;
    while done < seal.len {
        let n = ((seal.len - done) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at + done)?;
        m.update(&buf[..n]);
        if let Some(k) = &mut kept {
            k.extend_from_slice(&buf[..n]);
        }
        done += n as u64;
    }
    Ok(m.verify_slice(&seal.mac).is_ok().then_some(kept))
}

/// Reads `file` from `from` (0, or where a previous scan resolved), taking valid seals in
/// `order`, until at least `want` bytes are resolved or no seal is left. Sealed writes up to
/// `keep` bytes come back with their bytes.
///
/// One pass: the bytes read since the last seal taken are kept (up to `keep`), so a seal's
/// content is checked from memory; only a stretch longer than that is read again.
pub fn scan(
    file: &File,
    from: u64,
    want: u64,
    keep: u64,
    key: &SealKey,
    run: &str,
    mut order: Order,
) -> io::Result<Scan> {
    let mut r = BufReader::with_capacity(CHUNK, file);
    r.seek(SeekFrom::Start(from))?;
    let cap = usize::try_from(keep).unwrap_or(usize::MAX);
    let mut pieces = Vec::new();
    let (mut pos, mut resolved, mut last, mut at_end) = (from, from, None, false);
    // The bytes of [resolved, pos) while they fit in `cap` (`whole`).
    let mut pending: Vec<u8> = Vec::new();
    let mut whole = true;
    // The current line's first bytes, enough to tell a seal line.
    let mut line: Vec<u8> = Vec::with_capacity(SEAL_LINE_MAX + 1);
    while resolved - from < want.max(1) {
        let at = pos;
        line.clear();
        let mut len: u64 = 0;
        let complete = loop {
            let chunk = r.fill_buf()?;
            if chunk.is_empty() {
                break false;
            }
            let (take, newline) = match chunk.iter().position(|&c| c == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            let used = take + usize::from(newline);
            if line.len() <= SEAL_LINE_MAX {
                let room = SEAL_LINE_MAX + 1 - line.len();
                line.extend_from_slice(&chunk[..take.min(room)]);
            }
            if whole && pending.len() + used <= cap {
                pending.extend_from_slice(&chunk[..used]);
            } else if whole {
                whole = false;
                pending = Vec::new();
            }
            len += take as u64;
            r.consume(used);
            if newline {
                break true;
            }
        };
        if !complete {
            at_end = true;
            break;
        }
        pos += len + 1;
        let Some(seal) = Seal::parse(&line) else {
            continue;
        };
        let Some(start) = at.checked_sub(seal.len) else {
            continue;
        };
        if start < resolved || !order.takes(seal.n) {
            continue;
        }
        let bytes = if whole {
            let content = &pending[(start - resolved) as usize..(at - resolved) as usize];
            let mut m = mac_start(key, run, seal.n, seal.len);
            m.update(content);
            m.verify_slice(&seal.mac)
                .is_ok()
                .then(|| (seal.len <= keep).then(|| content.to_vec()))
        } else {
            check_in_file(file, start, &seal, key, run, keep)?
        };
        let Some(bytes) = bytes else {
            continue;
        };
        if start > resolved {
            pieces.push(Piece::Unsealed {
                at: resolved,
                len: start - resolved,
            });
        }
        pieces.push(Piece::Sealed {
            at: start,
            len: seal.len,
            n: seal.n,
            bytes,
        });
        if let Order::After(_) = order {
            order = Order::After(seal.n);
        }
        last = Some(seal.n);
        resolved = pos;
        pending.clear();
        whole = true;
    }
    Ok(Scan {
        pieces,
        resolved,
        last,
        at_end,
    })
}

/// The number of the last seal of the log at `path`, taken in order from its start (0 when it
/// has none or is not there): where a writer that appends after others goes on from.
pub fn last_seal(path: &Path, key: &SealKey, run: &str) -> io::Result<u64> {
    match File::open(path) {
        Ok(f) => last_seal_of(&f, key, run),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

fn last_seal_of(file: &File, key: &SealKey, run: &str) -> io::Result<u64> {
    let s = scan(file, 0, u64::MAX, 0, key, run, Order::After(0))?;
    Ok(s.last.unwrap_or(0))
}

/// Opens a run log for appending (creating it, mode 0600), never through a symbolic link.
pub fn open_for_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Appends `content` (whole lines) and its seal to the run log at `path`, continuing the log's
/// seals: the control plane's own lines before the driver starts (the driver goes on from them).
pub fn append_sealed(path: &Path, key: &SealKey, run: &str, content: &[u8]) -> io::Result<()> {
    let mut f = open_for_append(path)?;
    let last = last_seal_of(&f, key, run)?;
    let mut bytes = content.to_vec();
    bytes.extend_from_slice(&seal_line(key, run, last + 1, &[content]));
    f.write_all(&bytes)
}

#[cfg(test)]
#[path = "logseal_tests.rs"]
mod tests;
