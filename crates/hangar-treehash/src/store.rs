//! The turn's own object store: a directory of the run's control folder laid out as a git object
//! directory, with the repository's object directories read as alternates (read only: nothing
//! there is written, touched or freshened). Objects made during a step are held in memory and
//! written when the step ends ([`Store::flush`]) as one pack with its `.idx` under `pack/`: two
//! files a step, however many objects it made, since creating a file is the costly part on a
//! disk file system (about 1 ms each on ext4 here, against microseconds for the bytes). Large
//! blobs are streamed to loose objects instead. At the end of a turn [`Store::export_pack`] hands
//! every object made here to the control plane as one pack.

use crate::error::{Error, Result, io_err};
use crate::oid::{Hasher, Kind, ObjectId, RawSha1, header};
use flate2::Compression;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// Blobs at least this big are streamed: hashed and written in one pass with zlib "stored"
/// blocks (no compression), so a 200 MB file costs little more than reading it once. The pack
/// made by [`Store::export_pack`] compresses them.
pub(crate) const STREAM_THRESHOLD: u64 = 1 << 20;

/// Objects held in memory are written out (as one pack) once their compressed bytes reach this,
/// even before the step ends, so a step that adds thousands of files keeps memory bounded.
const PENDING_LIMIT: usize = 8 << 20;

/// Where objects go: a git object directory (packs, and loose objects for large blobs), or
/// nowhere (ids only).
#[derive(Debug)]
pub struct Store {
    dir: Option<PathBuf>,
    alternates: Vec<Alternate>,
    opened_at: SystemTime,
    state: Mutex<StoreState>,
    tmp_counter: AtomicU64,
    spares: Spares,
}

/// Empty files made ahead in `pack/`, off the step's path, for the next [`Store::flush`] to fill
/// and rename: creating a file (an inode) is what costs on a disk file system, writing a few
/// kilobytes and renaming do not.
#[derive(Debug, Default)]
struct Spares {
    ready: std::sync::Arc<Mutex<Vec<PathBuf>>>,
    maker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// How many spare files are kept ready (a flush takes two).
const SPARES: usize = 4;

#[derive(Debug, Default)]
struct StoreState {
    /// Ids known to be readable: in this store, or in an alternate from before the store opened.
    known: HashSet<ObjectId>,
    /// Objects written into this store, in the order they were made.
    created: Vec<ObjectId>,
    created_set: HashSet<ObjectId>,
    fanout_dirs: Vec<bool>,
    /// Objects made since the last [`Store::flush`], compressed as a pack entry's data.
    pending: Vec<PendingObject>,
    pending_at: HashMap<ObjectId, usize>,
    pending_bytes: usize,
    /// The packs this store wrote (`<dir>/pack/`), and where each of their objects is (which
    /// pack, at what offset): one lookup however many steps the turn had.
    packs: Vec<PathBuf>,
    packed: HashMap<ObjectId, (usize, u64)>,
    pack_dir_made: bool,
}

/// An object waiting for the next pack: its zlib-compressed content (no header).
#[derive(Debug)]
struct PendingObject {
    id: ObjectId,
    kind: Kind,
    size: u64,
    zdata: Vec<u8>,
}

/// A read-only object directory, with its packs as they were when the store opened.
#[derive(Debug)]
struct Alternate {
    dir: PathBuf,
    packs: Vec<PackIndex>,
}

/// What [`Store::export_pack`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackInfo {
    /// The pack file.
    pub pack: PathBuf,
    /// Its index (`.idx` beside it).
    pub idx: PathBuf,
    /// The pack's checksum (the name git would give it: `pack-<checksum>.pack`).
    pub checksum: String,
    /// How many objects it holds.
    pub objects: usize,
}

/// How far before [`Store::open`] an alternate's loose object must be to count as there at the
/// open (see there).
const OPEN_MARGIN: std::time::Duration = std::time::Duration::from_millis(50);

impl Store {
    /// Opens (creating it if needed) a store in `dir`, reading `alternates` (object
    /// directories, e.g. the repository's `.git/objects`) for objects that need not be written.
    /// An object counts as present in an alternate only if it was there when the store opened
    /// (a loose object older than this call, or one in a pack that existed then), so the
    /// objects handed over at the end of the turn plus the repository as it was at the start
    /// always hold every tree the turn produced. Objects already in `dir` (from an earlier open
    /// in the same turn) count as made this turn.
    pub fn open(dir: &Path, alternates: &[PathBuf]) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        // File times come from the kernel's coarse clock, which runs up to a tick (1-10 ms)
        // behind `SystemTime::now()`: an object written just after this call can carry an
        // earlier time. Counting the last 50 ms as "after the open" exports a few objects twice
        // at worst, and never leaves a new one out.
        let opened_at = SystemTime::now()
            .checked_sub(OPEN_MARGIN)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut alts = Vec::new();
        let mut seen = HashSet::new();
        for a in alternates {
            collect_alternates(a, 0, &mut seen, &mut alts);
        }
        let mut state = StoreState {
            fanout_dirs: vec![false; 256],
            ..StoreState::default()
        };
        // Objects left by an earlier open of the same store.
        for fan in 0..256usize {
            let sub = dir.join(format!("{fan:02x}"));
            let Ok(rd) = std::fs::read_dir(&sub) else {
                continue;
            };
            state.fanout_dirs[fan] = true;
            for e in rd.flatten() {
                let name = e.file_name();
                let mut hex = format!("{fan:02x}").into_bytes();
                hex.extend_from_slice(name.as_bytes());
                if let Some(id) = ObjectId::from_hex(&hex)
                    && state.created_set.insert(id)
                {
                    state.created.push(id);
                    state.known.insert(id);
                }
            }
        }
        // Packs written by an earlier open (an `.idx` is renamed into place last, so one that
        // loads names a complete pack).
        if let Ok(rd) = std::fs::read_dir(dir.join("pack")) {
            state.pack_dir_made = true;
            let mut names: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "idx")
                        && p.file_name()
                            .is_some_and(|n| n.as_bytes().starts_with(b"pack-"))
                })
                .collect();
            names.sort();
            for p in names {
                if let Some(idx) = PackIndex::load(&p) {
                    let pack_no = state.packs.len();
                    for i in 0..idx.count {
                        let (Some(name), Some(off)) = (idx.name_at(i), idx.offset_at(i)) else {
                            continue;
                        };
                        let Ok(id) = <[u8; 20]>::try_from(name).map(ObjectId) else {
                            continue;
                        };
                        state.packed.entry(id).or_insert((pack_no, off));
                        if state.created_set.insert(id) {
                            state.created.push(id);
                            state.known.insert(id);
                        }
                    }
                    state.packs.push(idx.pack);
                }
            }
        }
        // So that `GIT_OBJECT_DIRECTORY=<dir> git cat-file …` can read the whole picture.
        let info = dir.join("info");
        std::fs::create_dir_all(&info).map_err(io_err("create", &info))?;
        let mut list = Vec::new();
        for a in &alts {
            list.extend_from_slice(a.dir.as_os_str().as_bytes());
            list.push(b'\n');
        }
        let alt_file = info.join("alternates");
        std::fs::write(&alt_file, list).map_err(io_err("write", &alt_file))?;
        Ok(Store {
            dir: Some(dir.to_path_buf()),
            alternates: alts,
            opened_at,
            state: Mutex::new(state),
            tmp_counter: AtomicU64::new(0),
            spares: Spares::default(),
        })
    }

    /// A store that writes nothing: only ids are computed.
    pub fn hash_only() -> Store {
        Store {
            dir: None,
            alternates: Vec::new(),
            opened_at: SystemTime::now(),
            state: Mutex::new(StoreState {
                fanout_dirs: vec![false; 256],
                ..StoreState::default()
            }),
            tmp_counter: AtomicU64::new(0),
            spares: Spares::default(),
        }
    }

    /// Reads objects from `alternates`, writes nothing.
    pub(crate) fn read_only(alternates: &[PathBuf]) -> Store {
        let mut alts = Vec::new();
        let mut seen = HashSet::new();
        for a in alternates {
            collect_alternates(a, 0, &mut seen, &mut alts);
        }
        Store {
            alternates: alts,
            ..Store::hash_only()
        }
    }

    /// The store's directory (`None` for [`Store::hash_only`]).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Every object written into this store so far (this turn), in the order made.
    pub fn created(&self) -> Vec<ObjectId> {
        self.lock().created.clone()
    }

    /// Deletes the store's directory (at the end of the turn, after [`Store::export_pack`]).
    pub fn destroy(self) -> Result<()> {
        self.wait_spares();
        if let Some(dir) = &self.dir {
            match std::fs::remove_dir_all(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove", dir)(e)),
            }
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StoreState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `id` is readable from this store or its alternates (as they were at open).
    pub fn contains(&self, id: &ObjectId) -> bool {
        if self.lock().known.contains(id) {
            return true;
        }
        let Some(dir) = &self.dir else {
            return false;
        };
        let rel = id.loose_path();
        let present = self
            .alternates
            .iter()
            .any(|a| a.packs.iter().any(|p| p.contains(id)))
            || dir.join(&rel).exists()
            || self.alternates.iter().any(|a| {
                std::fs::symlink_metadata(a.dir.join(&rel))
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .is_some_and(|t| t < self.opened_at)
            });
        if present {
            self.lock().known.insert(*id);
        }
        present
    }

    /// Whether a tree may name `id` without storing it: it is here or in an alternate as it
    /// was at open (always, for a hash-only store).
    pub(crate) fn available(&self, id: &ObjectId) -> bool {
        self.dir.is_none() || self.contains(id)
    }

    /// Copies an object the repository gained after the store opened (a loose object in an
    /// alternate) into this store, so the turn's pack holds it. Objects only in a pack made
    /// during the turn are not copied (packs are not read).
    pub(crate) fn adopt(&self, id: &ObjectId) -> Result<()> {
        if self.available(id) {
            return Ok(());
        }
        let rel = id.loose_path();
        for a in &self.alternates {
            if let Some((kind, data)) = read_loose_file(&a.dir.join(&rel))
                && ObjectId::for_object(kind, &data) == *id
            {
                self.put(kind, &data)?;
                return Ok(());
            }
        }
        Ok(())
    }

    /// Stores an object held in memory and returns its id. It is held in memory until the next
    /// [`Store::flush`] (which [`crate::TreeHasher`] calls at the end of every step), or until
    /// the objects held reach a few megabytes; reads here see it at once.
    pub fn put(&self, kind: Kind, data: &[u8]) -> Result<ObjectId> {
        let id = ObjectId::for_object(kind, data);
        if self.dir.is_none() || self.contains(&id) {
            return Ok(id);
        }
        let mut enc = flate2::write::ZlibEncoder::new(
            Vec::with_capacity(data.len() / 2 + 64),
            Compression::fast(),
        );
        let zdata = enc
            .write_all(data)
            .and_then(|()| enc.finish())
            .map_err(|e| Error::Io {
                op: "compress",
                path: PathBuf::from(id.to_hex()),
                source: e,
            })?;
        let full = {
            let mut st = self.lock();
            if !st.created_set.insert(id) {
                return Ok(id);
            }
            st.created.push(id);
            st.known.insert(id);
            let at = st.pending.len();
            st.pending_at.insert(id, at);
            st.pending_bytes += zdata.len();
            st.pending.push(PendingObject {
                id,
                kind,
                size: data.len() as u64,
                zdata,
            });
            st.pending_bytes >= PENDING_LIMIT
        };
        if full {
            self.flush()?;
        }
        Ok(id)
    }

    /// Writes the objects held in memory as one pack (`pack/pack-<checksum>.pack`) and its
    /// index, the index last (renamed into place), so git and a later [`Store::open`] see the
    /// pack whole or not at all. Does nothing when nothing is held. On failure the objects stay
    /// held, and the next flush tries again.
    pub fn flush(&self) -> Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let (batch, pack_dir_made) = {
            let mut st = self.lock();
            if st.pending.is_empty() {
                return Ok(());
            }
            st.pending_at.clear();
            st.pending_bytes = 0;
            (std::mem::take(&mut st.pending), st.pack_dir_made)
        };
        let pack_dir = dir.join("pack");
        let written = (|| -> Result<(PathBuf, Vec<IdxEntry>)> {
            if !pack_dir_made {
                match std::fs::create_dir(&pack_dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_err("create", &pack_dir)(e)),
                }
            }
            let total: usize = batch.iter().map(|o| o.zdata.len() + 16).sum();
            let mut pack = Vec::with_capacity(12 + total + 20);
            pack.extend_from_slice(b"PACK");
            pack.extend_from_slice(&2u32.to_be_bytes());
            pack.extend_from_slice(&u32::try_from(batch.len()).unwrap_or(u32::MAX).to_be_bytes());
            let mut entries = Vec::with_capacity(batch.len());
            for o in &batch {
                let start = pack.len();
                pack_entry_header(&mut pack, o.kind, o.size);
                pack.extend_from_slice(&o.zdata);
                let crc = crc32fast::hash(&pack[start..]);
                entries.push((o.id, crc, start as u64));
            }
            let checksum = crate::oid::sha1_of(&pack);
            pack.extend_from_slice(&checksum);
            let name = format!("pack-{}", ObjectId(checksum).to_hex());
            let pack_path = pack_dir.join(format!("{name}.pack"));
            self.write_new(&pack_dir, &pack_path, &pack)?;
            let idx = build_idx(&entries, &checksum);
            let idx_path = pack_dir.join(format!("{name}.idx"));
            self.write_new(&pack_dir, &idx_path, &idx)?;
            self.make_spares(&pack_dir);
            Ok((pack_path, entries))
        })();
        let mut st = self.lock();
        st.pack_dir_made = true;
        match written {
            Ok((pack_path, entries)) => {
                let pack_no = st.packs.len();
                st.packs.push(pack_path);
                for (id, _, off) in entries {
                    st.packed.insert(id, (pack_no, off));
                }
                Ok(())
            }
            Err(e) => {
                // Held again (before anything made since), for the next flush.
                let mut again = batch;
                again.append(&mut st.pending);
                st.pending_at = again.iter().enumerate().map(|(i, o)| (o.id, i)).collect();
                st.pending_bytes = again.iter().map(|o| o.zdata.len()).sum();
                st.pending = again;
                Err(e)
            }
        }
    }

    /// Stores a blob of exactly `size` bytes read from `reader` in one pass (hashing and writing
    /// together). Fails with `UnexpectedEof`/`InvalidData` if the reader gives fewer or more.
    pub(crate) fn put_blob_stream(
        &self,
        size: u64,
        reader: &mut dyn Read,
    ) -> std::io::Result<ObjectId> {
        let mut hasher = Hasher::new(Kind::Blob, size);
        let mut buf = vec![0u8; 1 << 20];
        let Some(_) = &self.dir else {
            let mut left = size;
            while left > 0 {
                let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                reader.read_exact(&mut buf[..want])?;
                hasher.update(&buf[..want]);
                left -= want as u64;
            }
            ensure_eof(reader)?;
            return Ok(hasher.finish());
        };
        let tmp = self.temp_path().map_err(std::io::Error::other)?;
        let result = (|| {
            let mut out = StoredZlib::new(BufWriter::with_capacity(1 << 20, File::create(&tmp)?));
            out.write(&header(Kind::Blob, size))?;
            let mut left = size;
            while left > 0 {
                let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                reader.read_exact(&mut buf[..want])?;
                hasher.update(&buf[..want]);
                out.write(&buf[..want])?;
                left -= want as u64;
            }
            ensure_eof(reader)?;
            out.finish()?.flush()?;
            Ok(hasher.finish())
        })();
        match result {
            Ok(id) => {
                if self.contains(&id) {
                    let _ = std::fs::remove_file(&tmp);
                } else {
                    self.install(&tmp, id).map_err(std::io::Error::other)?;
                }
                Ok(id)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    fn temp_path(&self) -> Result<PathBuf> {
        let Some(dir) = &self.dir else {
            return Err(Error::Unsupported("writing into a hash-only store".into()));
        };
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        Ok(dir.join(format!("tmp_obj_{}_{n}", std::process::id())))
    }

    /// Moves a finished temporary object file to its place.
    fn install(&self, tmp: &Path, id: ObjectId) -> Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let fan = usize::from(id.0[0]);
        let need_dir = !self.lock().fanout_dirs[fan];
        let sub = dir.join(format!("{:02x}", id.0[0]));
        if need_dir {
            match std::fs::create_dir(&sub) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("create", &sub)(e)),
            }
        }
        let dest = dir.join(id.loose_path());
        std::fs::rename(tmp, &dest).map_err(io_err("rename", &dest))?;
        let mut st = self.lock();
        st.fanout_dirs[fan] = true;
        st.known.insert(id);
        if st.created_set.insert(id) {
            st.created.push(id);
        }
        Ok(())
    }

    /// Reads an object from this store or, read only, from its alternates (loose or packed).
    pub(crate) fn read_any(&self, id: &ObjectId) -> Option<(Kind, Vec<u8>)> {
        self.read_any_depth(id, 0)
    }

    fn read_any_depth(&self, id: &ObjectId, depth: usize) -> Option<(Kind, Vec<u8>)> {
        if depth > 64 {
            return None;
        }
        if self.dir.is_some()
            && let Ok(found) = self.read_object(id)
        {
            return Some(found);
        }
        let rel = id.loose_path();
        for a in &self.alternates {
            if let Some(found) = read_loose_file(&a.dir.join(&rel)) {
                return Some(found);
            }
            for p in &a.packs {
                if let Some(off) = p.offset(id) {
                    let base = |b: &ObjectId| self.read_any_depth(b, depth + 1);
                    if let Some(found) = read_packed(&p.pack, off, &base, 0) {
                        return Some(found);
                    }
                }
            }
        }
        None
    }

    /// Writes `data` as the new file `dest` in `pack_dir`: into a spare file renamed into place
    /// (made ahead by [`Store::make_spares`]), or a temporary file made now; `dest` appears whole
    /// or not at all.
    fn write_new(&self, pack_dir: &Path, dest: &Path, data: &[u8]) -> Result<()> {
        let spare = self
            .spares
            .ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let tmp = match spare {
            Some(p) => {
                let filled = std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(&p)
                    .and_then(|mut f| f.write_all(data));
                if filled.is_err() {
                    let _ = std::fs::remove_file(&p);
                    None
                } else {
                    Some(p)
                }
            }
            None => None,
        };
        let tmp = match tmp {
            Some(p) => p,
            None => {
                let p = pack_dir.join(format!(
                    "tmp_pack_{}_{}",
                    std::process::id(),
                    self.tmp_counter.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::write(&p, data).map_err(io_err("write", &p))?;
                p
            }
        };
        if let Err(e) = std::fs::rename(&tmp, dest) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err("rename", dest)(e));
        }
        Ok(())
    }

    /// Tops up the spare files on a thread of its own, unless the last top-up is still going.
    fn make_spares(&self, pack_dir: &Path) {
        let mut maker = self.spares.maker.lock().unwrap_or_else(|p| p.into_inner());
        if maker.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        if let Some(h) = maker.take() {
            let _ = h.join();
        }
        let ready = std::sync::Arc::clone(&self.spares.ready);
        let have = ready.lock().unwrap_or_else(|p| p.into_inner()).len();
        if have >= SPARES {
            return;
        }
        let dir = pack_dir.to_path_buf();
        let first = self
            .tmp_counter
            .fetch_add((SPARES - have) as u64, Ordering::Relaxed);
        let pid = std::process::id();
        let made = std::thread::Builder::new()
            .name("treehash-spares".into())
            .spawn(move || {
                for n in first..first + (SPARES - have) as u64 {
                    let p = dir.join(format!("tmp_spare_{pid}_{n}"));
                    if std::fs::File::create_new(&p).is_err() {
                        return;
                    }
                    ready.lock().unwrap_or_else(|p| p.into_inner()).push(p);
                }
            });
        // No thread: the next flush makes its files itself.
        *maker = made.ok();
    }

    /// Waits for a spare-making thread to finish (before the directory is removed).
    fn wait_spares(&self) {
        let h = self
            .spares
            .maker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// Reads an object written into this store (held in memory, in one of its packs, or loose).
    pub fn read_object(&self, id: &ObjectId) -> Result<(Kind, Vec<u8>)> {
        if let Some(found) = self.read_own_packed(id)? {
            return Ok(found);
        }
        let mut r = self.open_loose(id)?;
        let mut data = Vec::new();
        r.reader
            .read_to_end(&mut data)
            .map_err(|e| corrupt(id, &e.to_string()))?;
        if data.len() as u64 != r.size {
            return Err(corrupt(id, "size does not match its header"));
        }
        Ok((r.kind, data))
    }

    /// An object of this store that is held in memory or packed (`None` if neither).
    fn read_own_packed(&self, id: &ObjectId) -> Result<Option<(Kind, Vec<u8>)>> {
        let (pack, offset) = {
            let st = self.lock();
            if let Some(&i) = st.pending_at.get(id) {
                let o = &st.pending[i];
                let mut data = Vec::with_capacity(usize::try_from(o.size).unwrap_or(0));
                flate2::read::ZlibDecoder::new(&o.zdata[..])
                    .read_to_end(&mut data)
                    .map_err(|e| corrupt(id, &e.to_string()))?;
                return Ok(Some((o.kind, data)));
            }
            match st.packed.get(id) {
                Some(&(pack_no, off)) => match st.packs.get(pack_no) {
                    Some(p) => (p.clone(), off),
                    None => return Ok(None),
                },
                None => return Ok(None),
            }
        };
        let found = read_packed(&pack, offset, &|_| None, 0)
            .ok_or_else(|| corrupt(id, "unreadable in the store's pack"))?;
        if ObjectId::for_object(found.0, &found.1) != *id {
            return Err(corrupt(id, "content does not match its id"));
        }
        Ok(Some(found))
    }

    fn open_loose(&self, id: &ObjectId) -> Result<LooseReader> {
        let Some(dir) = &self.dir else {
            return Err(Error::Unsupported("reading from a hash-only store".into()));
        };
        let path = dir.join(id.loose_path());
        let file = File::open(&path).map_err(io_err("open", &path))?;
        let mut reader =
            flate2::read::ZlibDecoder::new(std::io::BufReader::with_capacity(1 << 20, file));
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            reader
                .read_exact(&mut byte)
                .map_err(|e| corrupt(id, &e.to_string()))?;
            if byte[0] == 0 {
                break;
            }
            head.push(byte[0]);
            if head.len() > 32 {
                return Err(corrupt(id, "bad header"));
            }
        }
        let sp = head
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| corrupt(id, "bad header"))?;
        let kind = Kind::from_name(&head[..sp]).ok_or_else(|| corrupt(id, "unknown type"))?;
        let size: u64 = std::str::from_utf8(&head[sp + 1..])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| corrupt(id, "bad size"))?;
        Ok(LooseReader { kind, size, reader })
    }

    /// Writes every object made this turn into one pack at `pack_path`, with its version 2
    /// index beside it (`.idx`), as `git index-pack` would. Objects are compressed (zlib level 1).
    pub fn export_pack(&self, pack_path: &Path) -> Result<PackInfo> {
        self.flush()?;
        let mut ids = self.created();
        ids.sort();
        let file = File::create(pack_path).map_err(io_err("create", pack_path))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut sha = RawSha1::new();
        let mut offset: u64 = 0;
        let werr = |e: std::io::Error| io_err("write", pack_path)(e);
        let mut head = Vec::with_capacity(12);
        head.extend_from_slice(b"PACK");
        head.extend_from_slice(&2u32.to_be_bytes());
        head.extend_from_slice(&u32::try_from(ids.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.write_all(&head).map_err(werr)?;
        sha.update(&head);
        offset += head.len() as u64;
        let mut entries: Vec<IdxEntry> = Vec::with_capacity(ids.len());
        for id in &ids {
            let mut obj = match self.read_own_packed(id)? {
                Some((kind, data)) => ObjectReader {
                    kind,
                    size: data.len() as u64,
                    reader: Box::new(std::io::Cursor::new(data)),
                },
                None => {
                    let l = self.open_loose(id)?;
                    ObjectReader {
                        kind: l.kind,
                        size: l.size,
                        reader: Box::new(l.reader),
                    }
                }
            };
            let start = offset;
            let mut crc = crc32fast::Hasher::new();
            let mut tee = Tee {
                out: &mut out,
                sha: &mut sha,
                crc: &mut crc,
                written: &mut offset,
            };
            let mut h = Vec::with_capacity(10);
            pack_entry_header(&mut h, obj.kind, obj.size);
            tee.write_all(&h).map_err(werr)?;
            let mut enc = flate2::write::ZlibEncoder::new(tee, Compression::fast());
            let copied = std::io::copy(&mut obj.reader, &mut enc)
                .map_err(|e| corrupt(id, &e.to_string()))?;
            if copied != obj.size {
                return Err(corrupt(id, "size does not match its header"));
            }
            enc.finish().map_err(werr)?;
            entries.push((*id, crc.finalize(), start));
        }
        let checksum = sha.finish();
        out.write_all(&checksum).map_err(werr)?;
        out.flush().map_err(werr)?;
        drop(out);
        let idx_path = pack_path.with_extension("idx");
        let idx = build_idx(&entries, &checksum);
        std::fs::write(&idx_path, idx).map_err(io_err("write", &idx_path))?;
        Ok(PackInfo {
            pack: pack_path.to_path_buf(),
            idx: idx_path,
            checksum: ObjectId(checksum).to_hex(),
            objects: ids.len(),
        })
    }
}

fn read_loose_file(path: &Path) -> Option<(Kind, Vec<u8>)> {
    let file = File::open(path).ok()?;
    let mut data = Vec::new();
    flate2::read::ZlibDecoder::new(std::io::BufReader::new(file))
        .read_to_end(&mut data)
        .ok()?;
    let nul = data.iter().position(|&b| b == 0)?;
    let sp = data[..nul].iter().position(|&b| b == b' ')?;
    let kind = Kind::from_name(&data[..sp])?;
    let size: usize = std::str::from_utf8(&data[sp + 1..nul]).ok()?.parse().ok()?;
    let body = data.split_off(nul + 1);
    (body.len() == size).then_some((kind, body))
}

fn ensure_eof(reader: &mut dyn Read) -> std::io::Result<()> {
    let mut one = [0u8; 1];
    match reader.read(&mut one)? {
        0 => Ok(()),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "file grew while read",
        )),
    }
}

fn corrupt(id: &ObjectId, reason: &str) -> Error {
    Error::CorruptObject {
        id: id.to_hex(),
        reason: reason.to_string(),
    }
}

struct LooseReader {
    kind: Kind,
    size: u64,
    reader: flate2::read::ZlibDecoder<std::io::BufReader<File>>,
}

/// An object's content to copy into the turn's pack.
struct ObjectReader {
    kind: Kind,
    size: u64,
    reader: Box<dyn Read>,
}

/// A pack entry's header: the type and the size, 4 bits then 7 bits at a time.
fn pack_entry_header(out: &mut Vec<u8>, kind: Kind, mut size: u64) {
    let mut c = (kind.pack_type() << 4) | (size & 15) as u8;
    size >>= 4;
    while size > 0 {
        out.push(c | 0x80);
        c = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(c);
}

struct Tee<'a> {
    out: &'a mut BufWriter<File>,
    sha: &'a mut RawSha1,
    crc: &'a mut crc32fast::Hasher,
    written: &'a mut u64,
}

impl Write for Tee<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write_all(buf)?;
        self.sha.update(buf);
        self.crc.update(buf);
        *self.written += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// An object's line in a pack index: its id, the CRC-32 of its entry, its offset in the pack.
type IdxEntry = (ObjectId, u32, u64);

/// A pack index, version 2.
fn build_idx(entries: &[IdxEntry], pack_checksum: &[u8; 20]) -> Vec<u8> {
    let mut sorted: Vec<&IdxEntry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.0);
    let mut idx = Vec::with_capacity(8 + 1024 + sorted.len() * 28 + 40);
    idx.extend_from_slice(&[0xff, b't', b'O', b'c']);
    idx.extend_from_slice(&2u32.to_be_bytes());
    let mut fan = [0u32; 256];
    for e in &sorted {
        fan[usize::from(e.0.0[0])] += 1;
    }
    let mut total = 0u32;
    for f in fan {
        total += f;
        idx.extend_from_slice(&total.to_be_bytes());
    }
    for e in &sorted {
        idx.extend_from_slice(&e.0.0);
    }
    for e in &sorted {
        idx.extend_from_slice(&e.1.to_be_bytes());
    }
    let mut large = Vec::new();
    for e in &sorted {
        if e.2 < 0x8000_0000 {
            idx.extend_from_slice(&(e.2 as u32).to_be_bytes());
        } else {
            let n = u32::try_from(large.len()).unwrap_or(0) | 0x8000_0000;
            idx.extend_from_slice(&n.to_be_bytes());
            large.push(e.2);
        }
    }
    for off in large {
        idx.extend_from_slice(&off.to_be_bytes());
    }
    idx.extend_from_slice(pack_checksum);
    let sum = crate::oid::sha1_of(&idx);
    idx.extend_from_slice(&sum);
    idx
}

/// A zlib stream made of "stored" (uncompressed) deflate blocks: valid for git, and as fast as
/// copying.
struct StoredZlib<W: Write> {
    out: W,
    adler: adler2::Adler32,
    block: Vec<u8>,
}

impl<W: Write> StoredZlib<W> {
    fn new(mut out: W) -> StoredZlib<W> {
        // CMF/FLG: deflate, 32K window, no dictionary, "fastest" level; (0x78 0x01) % 31 == 0.
        let _ = out.write_all(&[0x78, 0x01]);
        StoredZlib {
            out,
            adler: adler2::Adler32::new(),
            block: Vec::with_capacity(0xffff),
        }
    }

    fn write(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        self.adler.write_slice(data);
        while !data.is_empty() {
            let room = 0xffff - self.block.len();
            let take = room.min(data.len());
            self.block.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.block.len() == 0xffff {
                self.flush_block(false)?;
            }
        }
        Ok(())
    }

    fn flush_block(&mut self, last: bool) -> std::io::Result<()> {
        let len = self.block.len() as u16;
        self.out.write_all(&[u8::from(last)])?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&(!len).to_le_bytes())?;
        self.out.write_all(&self.block)?;
        self.block.clear();
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<W> {
        self.flush_block(true)?;
        let sum = self.adler.checksum();
        self.out.write_all(&sum.to_be_bytes())?;
        Ok(self.out)
    }
}

fn collect_alternates(
    dir: &Path,
    depth: usize,
    seen: &mut HashSet<PathBuf>,
    out: &mut Vec<Alternate>,
) {
    let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if depth > 5 || !canon.is_dir() || !seen.insert(canon.clone()) {
        return;
    }
    let mut packs = Vec::new();
    if let Ok(rd) = std::fs::read_dir(canon.join("pack")) {
        let mut names: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "idx"))
            .collect();
        names.sort();
        for p in names {
            if let Some(idx) = PackIndex::load(&p) {
                packs.push(idx);
            }
        }
    }
    out.push(Alternate {
        dir: canon.clone(),
        packs,
    });
    if let Ok(list) = std::fs::read(canon.join("info").join("alternates")) {
        for line in list.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            let p = PathBuf::from(std::ffi::OsStr::from_bytes(line));
            let p = if p.is_relative() { canon.join(p) } else { p };
            collect_alternates(&p, depth + 1, seen, out);
        }
    }
}

/// A pack's `.idx` (version 1 or 2), held in memory for lookups.
#[derive(Debug)]
struct PackIndex {
    data: Vec<u8>,
    pack: PathBuf,
    v2: bool,
    count: usize,
}

impl PackIndex {
    fn load(path: &Path) -> Option<PackIndex> {
        PackIndex::from_bytes(std::fs::read(path).ok()?, path.with_extension("pack"))
    }

    fn from_bytes(data: Vec<u8>, pack: PathBuf) -> Option<PackIndex> {
        let v2 = data.get(..4) == Some(&[0xff, b't', b'O', b'c'][..]);
        let fan_at = if v2 { 8 } else { 0 };
        let count = fanout(&data, fan_at, 255)? as usize;
        let need = if v2 {
            8 + 1024 + count * 28
        } else {
            1024 + count * 24
        };
        if data.len() < need {
            return None;
        }
        Some(PackIndex {
            data,
            pack,
            v2,
            count,
        })
    }

    fn name_at(&self, i: usize) -> Option<&[u8]> {
        let at = if self.v2 {
            8 + 1024 + i * 20
        } else {
            1024 + i * 24 + 4
        };
        self.data.get(at..at + 20)
    }

    /// The position of `id` in the sorted list.
    fn position(&self, id: &ObjectId) -> Option<usize> {
        let fan_at = if self.v2 { 8 } else { 0 };
        let first = usize::from(id.0[0]);
        let mut hi = fanout(&self.data, fan_at, first)? as usize;
        let mut lo = if first == 0 {
            0
        } else {
            fanout(&self.data, fan_at, first - 1)? as usize
        };
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.name_at(mid)?.cmp(&id.0[..]) {
                std::cmp::Ordering::Equal => return Some(mid),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    fn contains(&self, id: &ObjectId) -> bool {
        self.position(id).is_some()
    }

    /// Where object `id` starts in the pack.
    fn offset(&self, id: &ObjectId) -> Option<u64> {
        self.offset_at(self.position(id)?)
    }

    /// Where the object at position `i` of the sorted list starts in the pack.
    fn offset_at(&self, i: usize) -> Option<u64> {
        let be32 = |at: usize| -> Option<u32> {
            let s = self.data.get(at..at + 4)?;
            Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        };
        if !self.v2 {
            return be32(1024 + i * 24).map(u64::from);
        }
        let off_at = 8 + 1024 + self.count * 24;
        let small = be32(off_at + i * 4)?;
        if small & 0x8000_0000 == 0 {
            return Some(u64::from(small));
        }
        let large_at = off_at + self.count * 4 + (small & 0x7fff_ffff) as usize * 8;
        let s = self.data.get(large_at..large_at + 8)?;
        Some(u64::from_be_bytes(s.try_into().ok()?))
    }
}

/// Finds a delta's base object by id.
type BaseFinder<'a> = dyn Fn(&ObjectId) -> Option<(Kind, Vec<u8>)> + 'a;

/// Reads an object from a pack (resolving deltas), read only.
fn read_packed(
    pack: &Path,
    offset: u64,
    find_base: &BaseFinder<'_>,
    depth: usize,
) -> Option<(Kind, Vec<u8>)> {
    use std::io::{Seek, SeekFrom};
    if depth > 64 {
        return None;
    }
    let mut f = std::io::BufReader::new(File::open(pack).ok()?);
    f.seek(SeekFrom::Start(offset)).ok()?;
    let mut byte = [0u8; 1];
    f.read_exact(&mut byte).ok()?;
    let kind = (byte[0] >> 4) & 7;
    let mut size = u64::from(byte[0] & 15);
    let mut shift = 4;
    while byte[0] & 0x80 != 0 {
        f.read_exact(&mut byte).ok()?;
        size |= u64::from(byte[0] & 0x7f) << shift;
        shift += 7;
    }
    let base = match kind {
        6 => {
            // OFS_DELTA: the base is this many bytes before.
            f.read_exact(&mut byte).ok()?;
            let mut back = u64::from(byte[0] & 0x7f);
            while byte[0] & 0x80 != 0 {
                f.read_exact(&mut byte).ok()?;
                back = ((back + 1) << 7) | u64::from(byte[0] & 0x7f);
            }
            Some(read_packed(
                pack,
                offset.checked_sub(back)?,
                find_base,
                depth + 1,
            )?)
        }
        7 => {
            let mut id = [0u8; 20];
            f.read_exact(&mut id).ok()?;
            Some(find_base(&ObjectId(id))?)
        }
        _ => None,
    };
    let mut data = Vec::with_capacity(usize::try_from(size).ok()?);
    flate2::read::ZlibDecoder::new(f)
        .read_to_end(&mut data)
        .ok()?;
    if data.len() as u64 != size {
        return None;
    }
    match base {
        Some((base_kind, base_data)) => Some((base_kind, apply_delta(&base_data, &data)?)),
        None => {
            let k = match kind {
                1 => Kind::Commit,
                2 => Kind::Tree,
                3 => Kind::Blob,
                _ => return None,
            };
            Some((k, data))
        }
    }
}

fn apply_delta(base: &[u8], delta: &[u8]) -> Option<Vec<u8>> {
    let mut i = 0;
    let mut varint = || -> Option<usize> {
        let mut v = 0usize;
        let mut shift = 0;
        loop {
            let b = *delta.get(i)?;
            i += 1;
            v |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
    };
    let src = varint()?;
    let dst = varint()?;
    if src != base.len() {
        return None;
    }
    let mut out = Vec::with_capacity(dst);
    while i < delta.len() {
        let op = delta[i];
        i += 1;
        if op & 0x80 != 0 {
            let mut off = 0usize;
            let mut len = 0usize;
            for k in 0..4 {
                if op & (1 << k) != 0 {
                    off |= usize::from(*delta.get(i)?) << (8 * k);
                    i += 1;
                }
            }
            for k in 0..3 {
                if op & (0x10 << k) != 0 {
                    len |= usize::from(*delta.get(i)?) << (8 * k);
                    i += 1;
                }
            }
            if len == 0 {
                len = 0x10000;
            }
            out.extend_from_slice(base.get(off..off.checked_add(len)?)?);
        } else if op != 0 {
            let n = usize::from(op);
            out.extend_from_slice(delta.get(i..i + n)?);
            i += n;
        } else {
            return None;
        }
    }
    (out.len() == dst).then_some(out)
}

fn fanout(data: &[u8], fan_at: usize, i: usize) -> Option<u32> {
    let at = fan_at + 4 * i;
    let s = data.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}
