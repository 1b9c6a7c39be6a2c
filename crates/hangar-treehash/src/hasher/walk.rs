//! The full walk's first phase: an `lstat` of every entry of every directory in the model,
//! spread over threads, before the model is reconciled with what it found.
//!
//! Without a watch, each walked directory is kept open (`O_PATH`, within a per-process budget:
//! [`DirFd`]) between steps, so its entries are stat'ed relative to it and neither its path nor
//! its own name is resolved again. A kept descriptor stands for the directory at its path only
//! while that can be proved: it was opened through its parent's descriptor when the parent had
//! a stat `S`, and the parent's stat is still `S`, and `S` was older than the racy window then
//! (a directory's entries cannot change without its mtime and ctime changing, and a change after
//! `S` was taken gets a later mtime). By induction from the top (whose descriptor is checked
//! against the `lstat` of its path), every trusted descriptor is the directory at its path. A
//! descriptor that cannot be trusted is opened again through its parent; if that fails, the
//! directories below it are stat'ed by path. A mount or unmount anywhere (which changes what a
//! path leads to without changing any stat) drops every descriptor. Files are always stat'ed
//! (a file's content can change without its directory's stat changing).

use super::{Entry, Node, State};
use crate::error::{Error, Result};
use crate::sys::{DirFd, StatKey, fstat, fstatat, lstat_names, lstat_names_at};
use std::ffi::{CString, OsStr};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, mpsc};

/// Below this many entries the stat walk stays on one thread.
const PARALLEL_STAT_MIN: usize = 3000;

/// Jobs are handed to threads in chunks of about this many system calls (a thread that the
/// scheduler holds back takes fewer chunks).
const CHUNK_CALLS: usize = 1000;

type Fresh = Option<Option<StatKey>>;

/// Where a directory's entries are stat'ed from.
enum From<'a> {
    /// Its kept descriptor; its own `fstat` goes to the slot.
    Fd(RawFd, &'a mut Option<StatKey>),
    Path(PathBuf),
}

struct Job<'a> {
    from: From<'a>,
    names: &'a [CString],
    fresh: &'a mut [Fresh],
    /// The stats the model holds, for a settled directory (else empty), and whether each
    /// entry stat'ed here matched (`Node::fresh_same`).
    expect: &'a [Option<StatKey>],
    same: &'a mut bool,
}

impl Job<'_> {
    fn run(&mut self) {
        let cmp = self.expect.len() == self.fresh.len();
        let mut same = cmp;
        match &mut self.from {
            From::Fd(fd, own) => {
                **own = fstat(*fd);
                if cmp {
                    for ((name, f), want) in self
                        .names
                        .iter()
                        .zip(self.fresh.iter_mut())
                        .zip(self.expect)
                    {
                        if f.is_none() {
                            let s = fstatat(*fd, name);
                            same &= s.is_some() && s == *want;
                            *f = Some(s);
                        }
                    }
                } else {
                    lstat_names_at(*fd, self.names, self.fresh);
                }
            }
            From::Path(p) => {
                lstat_names(p, self.names, self.fresh);
                if cmp {
                    same = self
                        .fresh
                        .iter()
                        .zip(self.expect)
                        .all(|(f, want)| want.is_some() && *f == Some(*want));
                }
            }
        }
        *self.same = same;
    }

    fn calls(&self) -> usize {
        let own = usize::from(matches!(self.from, From::Fd(..)));
        own + self.fresh.iter().filter(|f| f.is_none()).count()
    }
}

/// Whether entry `e` of a directory is a walked directory with a kept descriptor (its stat is
/// its descriptor's, not looked up by name).
fn fd_child(e: &Entry) -> bool {
    matches!(e.state, State::Dir(_))
        && e.sub
            .as_deref()
            .is_some_and(|s| s.dir_fd.is_some() && s.mode.is_some())
}

/// What the walk needs besides the model.
pub(super) struct Walk<'a> {
    pub root: &'a Path,
    pub root_stat: StatKey,
    /// Keep directory descriptors between steps.
    pub fds: bool,
    pub threads: usize,
    pub step: u64,
    /// Whether a stat is past the racy window.
    pub racy: super::Racy,
    /// Nothing changes the model between steps (no watch marks it): a subtree that the last
    /// step's reconcile passed over (`Node::passed_step`) is as that step's walk collected it.
    pub untouched_since_collected: bool,
}

/// Fills each walked directory's `fresh` with its entries' stats, then marks the subtrees found
/// unchanged (`mark_same`). Returns the number of calls and of directories whose kept
/// descriptor was trusted.
pub(super) fn stat_walk(root: &mut Node, w: &Walk<'_>) -> Result<(usize, usize)> {
    let mut abs = w.root.as_os_str().as_bytes().to_vec();
    let mut calls = {
        let (tx, rx) = mpsc::channel::<Vec<Job<'_>>>();
        let rx = Mutex::new(rx);
        let (calls, ok) = std::thread::scope(|scope| {
            let mut sink = Sink {
                chunk: Vec::new(),
                chunk_calls: 0,
                held_back: Vec::new(),
                calls: 0,
                tx: Some(tx),
                threads: w.threads,
                helpers: Vec::new(),
                scope,
                rx: &rx,
            };
            collect(root, &mut abs, w, true, false, &mut sink);
            sink.finish()
        });
        if !ok {
            return Err(Error::Worker);
        }
        calls
    };
    let mut held = 0;
    let mut marked = false;
    if w.fds {
        let (c, m) = settle_root(root, w, &mut held);
        calls += c;
        marked = m;
    }
    if !marked {
        mark_same(root, w.step);
    }
    Ok((calls, held))
}

/// Gathers each walked directory's job; a directory is stat'ed through its descriptor only if
/// its parent was (`parent_held`), since only then is the descriptor checked (`settle`).
///
/// `untouched`: the model of `node`'s subtree is exactly as the last step's walk collected it
/// (see `Walk::untouched_since_collected`): its `expect` and `subdirs` from then still hold, and
/// only its subdirectories' entries are looked at, not every entry.
fn collect<'a>(
    node: &'a mut Node,
    abs: &mut Vec<u8>,
    w: &Walk<'_>,
    parent_held: bool,
    untouched: bool,
    out: &mut Sink<'a, '_, '_>,
) {
    let step = w.step;
    let untouched = w.untouched_since_collected
        && (untouched || node.passed_step.saturating_add(1) == step)
        && node.settled
        && node.fresh_step.saturating_add(1) == step
        && node.expect.len() == node.names.len()
        && node.fresh.len() == node.names.len();
    let Node {
        names,
        fresh,
        fresh_step,
        entries,
        mode,
        dir_fd,
        fd_stat,
        settled,
        expect,
        fresh_same,
        subdirs,
        ..
    } = node;
    if mode.is_none() {
        return;
    }
    *fresh_step = step;
    fresh.clear();
    fresh.resize(names.len(), None);
    *fresh_same = false;
    // Untouched: `expect` and `subdirs` still hold, and only the subdirectories (whose indices
    // ascend: `subdirs` is pushed in order) are stepped to. Else both are gathered afresh.
    let listed = if untouched {
        std::mem::take(subdirs)
    } else {
        expect.clear();
        subdirs.clear();
        Vec::new()
    };
    let mut want = listed.iter().copied().peekable();
    let mut compare = *settled && !untouched;
    if !parent_held {
        *dir_fd = None;
    }
    let held = dir_fd.as_ref().map(DirFd::raw);
    for (i, ((name, e), f)) in names
        .iter()
        .zip(entries.iter_mut())
        .zip(fresh.iter_mut())
        .enumerate()
    {
        if untouched {
            match want.peek() {
                None => break,
                Some(&next) if next != i => continue,
                Some(_) => {}
            }
            want.next();
        }
        if held.is_some() && fd_child(e) {
            // Its stat is its own descriptor's (`settle`); not looked up by name here.
            *f = Some(None);
        }
        if compare {
            compare = !e.restat;
            expect.push(e.stat);
        }
        if let (State::Dir(_), Some(sub)) = (e.state, e.sub.as_deref_mut()) {
            if !untouched {
                subdirs.push(i);
            }
            let len = abs.len();
            abs.push(b'/');
            abs.extend_from_slice(name.as_bytes());
            collect(sub, abs, w, held.is_some(), untouched, out);
            abs.truncate(len);
        }
    }
    if untouched {
        *subdirs = listed;
    } else if !compare {
        expect.clear();
    }
    let from = match held {
        Some(fd) => From::Fd(fd, fd_stat),
        None => From::Path(PathBuf::from(OsStr::from_bytes(abs))),
    };
    out.push(Job {
        from,
        names: &names[..],
        fresh: &mut fresh[..],
        expect: &expect[..],
        same: fresh_same,
    });
}

type Chunk<'a> = Vec<Job<'a>>;

/// Where `collect` puts the jobs: in chunks of about [`CHUNK_CALLS`] system calls, which other
/// threads start on while the rest is still being collected (collecting costs a few percent of
/// a large tree's walk, no longer added to it). Below [`PARALLEL_STAT_MIN`] calls in all, no
/// thread is started and the caller's thread runs everything.
struct Sink<'a, 's, 'e> {
    chunk: Chunk<'a>,
    chunk_calls: usize,
    /// Full chunks not sent yet (no helper started yet).
    held_back: Vec<Chunk<'a>>,
    calls: usize,
    tx: Option<mpsc::Sender<Chunk<'a>>>,
    threads: usize,
    helpers: Vec<std::thread::ScopedJoinHandle<'s, bool>>,
    scope: &'s std::thread::Scope<'s, 'e>,
    rx: &'e Mutex<mpsc::Receiver<Chunk<'a>>>,
}

impl<'a> Sink<'a, '_, '_> {
    fn push(&mut self, job: Job<'a>) {
        let n = job.calls();
        self.calls += n;
        self.chunk_calls += n;
        self.chunk.push(job);
        if self.chunk_calls < CHUNK_CALLS {
            return;
        }
        self.chunk_calls = 0;
        let full = std::mem::take(&mut self.chunk);
        if self.helpers.is_empty() {
            self.held_back.push(full);
            if self.threads > 1 && self.calls >= PARALLEL_STAT_MIN {
                for _ in 1..self.threads {
                    let rx = self.rx;
                    self.helpers.push(self.scope.spawn(move || drain(rx)));
                }
                for c in std::mem::take(&mut self.held_back) {
                    self.send(c);
                }
            }
        } else {
            self.send(full);
        }
    }

    fn send(&mut self, chunk: Chunk<'a>) {
        if let Some(tx) = &self.tx
            && let Err(mpsc::SendError(mut back)) = tx.send(chunk)
        {
            // Every helper is gone (it panicked): run it here; the join reports the failure.
            back.iter_mut().for_each(Job::run);
        }
    }

    /// Runs what is left (on this thread too) and waits for the helpers: the calls made, and
    /// whether every helper finished.
    fn finish(mut self) -> (usize, bool) {
        let last = std::mem::take(&mut self.chunk);
        let mut here = std::mem::take(&mut self.held_back);
        here.push(last);
        if self.helpers.is_empty() {
            here.iter_mut().flatten().for_each(Job::run);
            return (self.calls, true);
        }
        for c in here {
            self.send(c);
        }
        self.tx = None;
        let mine = drain(self.rx);
        let ok = self.helpers.into_iter().all(|h| h.join().unwrap_or(false));
        (self.calls, ok && mine)
    }
}

/// Runs chunks from the channel until it is empty and closed.
fn drain(rx: &Mutex<mpsc::Receiver<Chunk<'_>>>) -> bool {
    loop {
        let next = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return false,
        };
        match next {
            Ok(mut chunk) => chunk.iter_mut().for_each(Job::run),
            Err(mpsc::RecvError) => return true,
        }
    }
}

fn ident(s: Option<StatKey>) -> Option<(u64, u64)> {
    s.map(|s| (s.ino, s.dev))
}

/// Checks the top's descriptor against the `lstat` of its path (holding the descriptor, an
/// equal inode and device is the same directory), opening it if needed, then settles the rest.
/// Returns the calls made and whether the tree was also marked (`settle`).
fn settle_root(root: &mut Node, w: &Walk<'_>, held: &mut usize) -> (usize, bool) {
    if root.mode.is_none() {
        return (0, false);
    }
    let want = Some((w.root_stat.ino, w.root_stat.dev));
    if root.dir_fd.is_some() {
        if ident(root.fd_stat) == want {
            *held += 1;
            return (settle(root, w, held).0, true);
        }
        // Another directory stands at the top: nothing found through the old one holds.
        drop_fds(root);
        forget_fresh(root);
        return (0, false);
    }
    let Ok(path) = CString::new(w.root.as_os_str().as_bytes()) else {
        return (0, false);
    };
    let Some(fd) = DirFd::open(None, &path) else {
        return (0, false);
    };
    let s = fstat(fd.raw());
    if ident(s) != want {
        return (1, false);
    }
    root.dir_fd = Some(fd);
    root.fd_stat = s;
    // The stats this step were taken by path, which is as good; below, descriptors are gained.
    (1 + settle(root, w, held).0, true)
}

/// Whether entry `e`, a walked subdirectory stat'ed as `fresh` this step, is as the model holds
/// it (`mark_same`).
fn entry_same(e: &Entry, fresh: Option<&Fresh>) -> bool {
    !e.restat && e.stat.is_some() && fresh == Some(&Some(e.stat))
}

/// Whether `node` itself (not its subdirectories) qualifies for `mark_same`.
fn own_same(node: &Node, step: u64) -> bool {
    node.settled
        && node.mode.is_some()
        && node.fresh_step == step
        && node.fresh_same
        && node.fresh.len() == node.entries.len()
}

/// `node` holds a descriptor that is the directory at its path, and its `fresh` is right except
/// for the slots of its children with descriptors: checks each such child's descriptor (opening
/// it again through `node`'s if it cannot be trusted), fills its slot, and recurses; opens
/// descriptors for walked children that have none. On the way back up it marks the subtree as
/// `mark_same` would (one pass over the model instead of two). Returns the extra calls made and
/// whether `node` was marked.
fn settle(node: &mut Node, w: &Walk<'_>, held: &mut usize) -> (usize, bool) {
    let (Some(fd), Some(here)) = (node.dir_fd.as_ref().map(DirFd::raw), node.fd_stat) else {
        return (0, mark_same(node, w.step));
    };
    let bound = (here, w.racy.clean(&here));
    let mut calls = 0;
    let mut same = own_same(node, w.step);
    let Node {
        names,
        fresh,
        entries,
        subdirs,
        ..
    } = node;
    // Only the walked subdirectories (`collect` listed them), not every entry.
    for &i in subdirs.iter() {
        let (Some(name), Some(e), Some(f)) = (names.get(i), entries.get_mut(i), fresh.get_mut(i))
        else {
            same = false;
            continue;
        };
        if !matches!(e.state, State::Dir(_)) {
            same = false;
            continue;
        }
        let placeholder = fd_child(e);
        let Some(sub) = e.sub.as_deref_mut() else {
            same = false;
            continue;
        };
        if sub.mode.is_none() {
            same = false;
            continue;
        }
        if placeholder && sub.fd_bound == Some((here, true)) && sub.fd_stat.is_some() {
            // Its parent is unchanged since it was opened: still the directory of that name.
            *f = Some(sub.fd_stat);
            *held += 1;
            let (c, sub_same) = settle(sub, w, held);
            calls += c;
            same &= sub_same && entry_same(e, Some(f));
            continue;
        }
        // Opened (again) through this directory.
        let before = ident(sub.fd_stat).filter(|_| placeholder);
        let had = sub.dir_fd.take().is_some();
        calls += 1;
        let reopened = DirFd::open(Some(fd), name).and_then(|d| {
            calls += 1;
            fstat(d.raw()).map(|s| (d, s))
        });
        match reopened {
            Some((d, s)) => {
                sub.dir_fd = Some(d);
                sub.fd_bound = Some(bound);
                sub.fd_stat = Some(s);
                if placeholder {
                    *f = Some(Some(s));
                }
                if had && before != ident(Some(s)) {
                    // Another directory: what was stat'ed through the old descriptor is void.
                    calls += restat(sub);
                }
                let (c, sub_same) = settle(sub, w, held);
                calls += c;
                same &= sub_same && entry_same(e, Some(f));
            }
            None => {
                sub.fd_bound = None;
                if placeholder {
                    calls += 1;
                    *f = Some(fstatat(fd, name));
                }
                if had {
                    // Not a directory any more, or cannot be opened: below it, by path.
                    drop_fds(sub);
                    forget_fresh(sub);
                }
                let sub_same = mark_same(sub, w.step);
                same &= sub_same && entry_same(e, Some(f));
            }
        }
    }
    if same {
        node.same_step = w.step;
    }
    (calls, same)
}

/// Stats `node`'s entries again through its (new) descriptor.
fn restat(node: &mut Node) -> usize {
    let Some(fd) = node.dir_fd.as_ref().map(DirFd::raw) else {
        return 0;
    };
    let Node {
        fresh,
        entries,
        names,
        ..
    } = node;
    for (f, e) in fresh.iter_mut().zip(entries.iter()) {
        *f = fd_child(e).then_some(None);
    }
    let n = fresh.iter().filter(|f| f.is_none()).count();
    lstat_names_at(fd, names, fresh);
    node.fresh_same = false;
    n
}

/// Closes the descriptors of `node` and everything below it.
pub(super) fn drop_fds(node: &mut Node) {
    let had = node.dir_fd.take().is_some();
    node.fd_bound = None;
    node.fd_stat = None;
    if !had && !node.entries.iter().any(|e| e.sub.is_some()) {
        return;
    }
    for e in &mut node.entries {
        if let Some(sub) = e.sub.as_deref_mut() {
            drop_fds(sub);
        }
    }
}

/// Makes the next reconcile stat `node`'s subtree by path.
fn forget_fresh(node: &mut Node) {
    node.fresh_step = 0;
    for e in &mut node.entries {
        if let Some(sub) = e.sub.as_deref_mut() {
            forget_fresh(sub);
        }
    }
}

/// After the stat walk of `step`, bottom-up: marks (`Node::same_step`) each settled directory
/// whose entries, and whose subdirectories' entries all the way down, stat'ed exactly as the
/// model holds them, so reconcile passes over the subtree. The jobs compared what they stat'ed
/// (`Node::fresh_same`); a subdirectory's own stat (from its descriptor, `settle`) is compared
/// here. Returns whether `node` was marked.
fn mark_same(node: &mut Node, step: u64) -> bool {
    let mut same = own_same(node, step);
    let Node {
        fresh,
        entries,
        subdirs,
        ..
    } = node;
    for &i in subdirs.iter() {
        let (Some(f), Some(e)) = (fresh.get(i), entries.get_mut(i)) else {
            same = false;
            continue;
        };
        let sub_same = match (e.state, e.sub.as_deref_mut()) {
            (State::Dir(_), Some(sub)) => mark_same(sub, step),
            _ => false,
        };
        same &= sub_same && entry_same(e, Some(f));
    }
    if same {
        node.same_step = step;
    }
    same
}
