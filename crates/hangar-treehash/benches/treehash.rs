//! `cargo bench -p hangar-treehash` (or `scripts/bench-trees` for the real repositories): per
//! step, the seed's method (`git add -A && git write-tree` with a scratch index seeded from the
//! repository's and an object directory of its own with the repository's objects as
//! alternates) beside this crate's hasher, with the inotify watch and with full stat walks, over
//! the same simulated agent steps (1-3 files changed, added or deleted each), every step's three
//! ids compared. Prints p50, p90 and max per step, the cold first hash (a new scratch index / a
//! new hasher; the page cache is warm), the CPU time per step (p50: user + system of all our
//! threads, or of the git commands; less sensitive than wall time to other load on the
//! machine), the heap each hasher holds, then a 200 MB untracked file (pseudo-random, so zlib
//! cannot shrink it) by both methods. Beside the stat walk, its floor on this machine in the same
//! run: only the system calls a walk without a watch cannot avoid (an `fstat` of every held
//! directory, an `fstatat` of every other entry, on the same threads), with no model behind them.
//!
//! Repositories: `HANGAR_TREEHASH_BENCH_REPOS=name=PATH,...` (committed repositories, cloned
//! into a scratch folder first; `scripts/bench-trees` fetches three real ones from package
//! registries), else generated ones of `HANGAR_TREEHASH_BENCH_SIZES` files (265,4847,38570).
//! `HANGAR_TREEHASH_BENCH_STEPS` (50) steps.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use hangar_treehash::{Options, Store, TreeHasher, UserConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Counts the heap in use, so each hasher's share can be read off.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: as the caller promised for `l`.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as the caller promised for `p` and `l`.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as the caller promised.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
            let now = LIVE.fetch_add(new, Ordering::Relaxed) + new;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn mb(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn git(home: &Path, dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.com")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.com")
        .args(["-c", "core.autocrlf=false", "-c", "core.fileMode=true"]);
    c
}

fn run(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        c,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository of `n` files, ~10 per directory, three levels deep, committed.
fn make_repo(root: &Path, home: &Path, n: usize) {
    std::fs::create_dir_all(root).unwrap();
    run(git(home, root).args(["init", "-q"]));
    std::fs::write(root.join(".gitignore"), "*.o\ntarget/\n").unwrap();
    let mut rng = Rng(n as u64);
    for i in 0..n {
        let d = i / 10;
        let rel = PathBuf::from(format!(
            "m{}/s{}/d{}/f{i}.txt",
            d / 100,
            (d / 10) % 10,
            d % 10
        ));
        let p = root.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let len = 100 + rng.below(2000);
        let body: String = (0..len)
            .map(|j| (b'a' + ((i + j) % 26) as u8) as char)
            .collect();
        std::fs::write(&p, body).unwrap();
    }
    run(git(home, root).args(["add", "-A"]));
    run(git(home, root).args(["commit", "-qm", "init"]));
}

/// The tracked files (regular files only: edits append to them).
fn tracked(home: &Path, root: &Path) -> Vec<PathBuf> {
    run(git(home, root).args(["ls-files", "-s"]))
        .lines()
        .filter(|l| l.starts_with("100"))
        .filter_map(|l| l.split_once('\t').map(|(_, p)| PathBuf::from(p)))
        .collect()
}

/// One simulated agent step: 1-3 changes, most of them edits, some new files, some deletions.
fn step_edit(root: &Path, files: &mut Vec<PathBuf>, rng: &mut Rng, step: usize) {
    for k in 0..1 + rng.below(3) {
        let roll = rng.below(20);
        let i = rng.below(files.len());
        if roll < 2 && files.len() > 10 {
            let f = files.swap_remove(i);
            let _ = std::fs::remove_file(root.join(f));
        } else if roll < 5 {
            let dir = files[i].parent().map(Path::to_path_buf).unwrap_or_default();
            let rel = dir.join(format!("hangar-bench-{step}-{k}.txt"));
            std::fs::write(root.join(&rel), format!("new in step {step}\n")).unwrap();
            files.push(rel);
        } else {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(root.join(&files[i]))
                .unwrap();
            writeln!(f, "step {step} change {k} {}", rng.next()).unwrap();
        }
    }
}

/// p50, p90 and max.
fn spread(v: &[Duration]) -> (Duration, Duration, Duration) {
    let mut s = v.to_vec();
    s.sort();
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9), *s.last().unwrap())
}

/// The seed's method: `git add -A && git write-tree` on a scratch index and object directory.
struct GitMethod<'a> {
    home: &'a Path,
    root: &'a Path,
    scratch: PathBuf,
}

impl GitMethod<'_> {
    fn new<'a>(home: &'a Path, root: &'a Path, scratch: PathBuf) -> GitMethod<'a> {
        std::fs::create_dir_all(scratch.join("objects")).unwrap();
        std::fs::copy(root.join(".git/index"), scratch.join("index")).unwrap();
        GitMethod {
            home,
            root,
            scratch,
        }
    }

    fn tree(&self) -> String {
        let env = |c: &mut Command| {
            c.env("GIT_INDEX_FILE", self.scratch.join("index"))
                .env("GIT_OBJECT_DIRECTORY", self.scratch.join("objects"))
                .env(
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                    self.root.join(".git/objects"),
                );
        };
        let mut add = git(self.home, self.root);
        add.args(["add", "-A"]);
        env(&mut add);
        run(&mut add);
        let mut wt = git(self.home, self.root);
        wt.arg("write-tree");
        env(&mut wt);
        run(&mut wt)
    }
}

/// The floor of a full stat walk on this machine: every directory of the work tree (but `.git`)
/// held open (`O_PATH`), and per step one `fstat` of each and one `fstatat` of each other entry
/// it held when the benchmark started, over the same number of threads as the hasher, in chunks taken
/// as threads become free. No model, no comparison, no tree: only the system calls a walk
/// without a watch cannot avoid.
struct StatFloor {
    dirs: Vec<(std::os::fd::OwnedFd, Vec<std::ffi::CString>)>,
    threads: usize,
}

impl StatFloor {
    fn new(root: &Path, threads: usize) -> StatFloor {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        let mut dirs = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            let c = std::ffi::CString::new(d.as_os_str().as_bytes()).unwrap();
            // SAFETY: a valid C string; the descriptor is owned from here on.
            let fd = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            assert!(fd >= 0, "open {}", d.display());
            // SAFETY: just opened, not owned elsewhere.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            let mut names = Vec::new();
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if d == root && e.file_name() == ".git" {
                    continue;
                }
                // A directory is stat'ed through its own descriptor (as the hasher's walk does
                // for the directories it holds), not by name as well.
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                } else {
                    names.push(std::ffi::CString::new(e.file_name().as_bytes()).unwrap());
                }
            }
            dirs.push((fd, names));
        }
        StatFloor { dirs, threads }
    }

    /// System calls per pass.
    fn calls(&self) -> usize {
        self.dirs.iter().map(|(_, n)| n.len() + 1).sum()
    }

    fn pass(&self) {
        use std::os::fd::AsRawFd;
        let next = AtomicUsize::new(0);
        let chunk = self.dirs.len().div_ceil(self.threads * 16).max(1);
        let work = || {
            // SAFETY: plain old data, filled by the calls below.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) * chunk;
                let Some(dirs) = self.dirs.get(i..(i + chunk).min(self.dirs.len())) else {
                    break;
                };
                for (fd, names) in dirs {
                    // SAFETY: a descriptor we hold and a buffer of the right type.
                    unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
                    for n in names {
                        // SAFETY: as above, and a valid C string.
                        unsafe {
                            libc::fstatat(
                                fd.as_raw_fd(),
                                n.as_ptr(),
                                &mut st,
                                libc::AT_SYMLINK_NOFOLLOW,
                            )
                        };
                    }
                }
            }
        };
        std::thread::scope(|s| {
            for _ in 1..self.threads {
                s.spawn(work);
            }
            work();
        });
    }
}

fn opts(home: &Path, watch: bool) -> Options {
    Options {
        user: UserConfig {
            home: Some(home.to_path_buf()),
            ..UserConfig::none()
        },
        watch,
        threads: 2,
    }
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

/// CPU time (user + system) used so far by this process's threads (`RUSAGE_SELF`) or by its
/// waited-for children (`RUSAGE_CHILDREN`: the git commands).
fn cpu(who: libc::c_int) -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct when it returns 0.
    assert_eq!(unsafe { libc::getrusage(who, ru.as_mut_ptr()) }, 0);
    // SAFETY: filled above.
    let ru = unsafe { ru.assume_init() };
    let d = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    d(ru.ru_utime) + d(ru.ru_stime)
}

/// [`time`], with the CPU time it took: ours (this process) plus the git commands it ran.
fn time_cpu<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration) {
    let (s, c) = (cpu(libc::RUSAGE_SELF), cpu(libc::RUSAGE_CHILDREN));
    let (v, t) = time(f);
    let used = cpu(libc::RUSAGE_SELF) - s + (cpu(libc::RUSAGE_CHILDREN) - c);
    (v, t, used)
}

fn row(
    label: &str,
    cold: Duration,
    times: &[Duration],
    cpus: &[Duration],
    git: Option<(Duration, Duration)>,
    extra: &str,
) {
    let (p50, p90, max) = spread(times);
    let cpu50 = spread(cpus).0;
    let speed =
        |g: Duration, ours: Duration| format!("{:.1}x", g.as_secs_f64() / ours.as_secs_f64());
    let (vs, vs_cpu) = git.map_or((String::new(), String::new()), |(g, gc)| {
        (speed(g, p50), speed(gc, cpu50))
    });
    println!(
        "  {label:<16} {p50:>9.2?} {p90:>9.2?} {max:>9.2?} {cold:>10.1?} {vs:>7} {cpu50:>9.2?} {vs_cpu:>7}  {extra}"
    );
}

fn bench_repo(tmp: &Path, home: &Path, name: &str, root: &Path, steps: usize) {
    let mut files = tracked(home, root);
    println!(
        "\n{name}: {} tracked files ({}), {steps} steps",
        files.len(),
        root.display()
    );
    println!(
        "  {:<16} {:>9} {:>9} {:>9} {:>10} {:>7} {:>9} {:>7}  heap held",
        "method", "p50", "p90", "max", "cold first", "vs git", "cpu p50", "vs git"
    );
    let git_m = GitMethod::new(home, root, tmp.join(format!("scratch-{name}")));
    let (first_git, git_cold) = time(|| git_m.tree());
    let alternates = [root.join(".git/objects")];
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let mut walk = TreeHasher::with_options(
        root,
        Store::open(&tmp.join(format!("store-{name}-walk")), &alternates).unwrap(),
        opts(home, false),
    )
    .unwrap();
    let (first_walk, walk_cold) = time(|| walk.hash().unwrap().to_hex());
    let walk_heap = LIVE.load(Ordering::Relaxed) - before;
    let walk_peak = PEAK.load(Ordering::Relaxed) - before;
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let mut watch = TreeHasher::with_options(
        root,
        Store::open(&tmp.join(format!("store-{name}-watch")), &alternates).unwrap(),
        opts(home, true),
    )
    .unwrap();
    let (first_watch, watch_cold) = time(|| watch.hash().unwrap().to_hex());
    let watch_heap = LIVE.load(Ordering::Relaxed) - before;
    let watch_peak = PEAK.load(Ordering::Relaxed) - before;
    assert_eq!(first_walk, first_git, "{name}: first hash (stat walk)");
    assert_eq!(first_watch, first_git, "{name}: first hash (watch)");
    assert!(watch.watching(), "{name}: the inotify watch is off");
    let floor = StatFloor::new(root, opts(home, false).threads);
    // Past the racy window, as a turn's steps are.
    std::thread::sleep(Duration::from_millis(2100));
    let mut rng = Rng(7);
    let (mut tg, mut tw, mut tn) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cg, mut cw, mut cn) = (Vec::new(), Vec::new(), Vec::new());
    let (mut tf, mut cf) = (Vec::new(), Vec::new());
    for step in 0..steps {
        step_edit(root, &mut files, &mut rng, step);
        // The floor first, so that it never finds the page cache warmer than the walk did.
        let ((), t, c) = time_cpu(|| floor.pass());
        tf.push(t);
        cf.push(c);
        // The three in a rotating order, so none is always the first to see the changes.
        let mut ids = [String::new(), String::new(), String::new()];
        for k in 0..3 {
            match (step + k) % 3 {
                0 => {
                    let (id, t, c) = time_cpu(|| git_m.tree());
                    tg.push(t);
                    cg.push(c);
                    ids[0] = id;
                }
                1 => {
                    let (id, t, c) = time_cpu(|| walk.hash().unwrap().to_hex());
                    tn.push(t);
                    cn.push(c);
                    ids[1] = id;
                }
                _ => {
                    let (id, t, c) = time_cpu(|| watch.hash().unwrap().to_hex());
                    tw.push(t);
                    cw.push(c);
                    ids[2] = id;
                }
            }
        }
        assert_eq!(ids[1], ids[0], "{name} step {step}: stat walk vs git");
        assert_eq!(ids[2], ids[0], "{name} step {step}: watch vs git");
    }
    let g = spread(&tg).0;
    let git = Some((g, spread(&cg).0));
    row("git add+write", git_cold, &tg, &cg, None, "");
    row(
        "ours, watch",
        watch_cold,
        &tw,
        &cw,
        git,
        &format!("{:.1} MB (peak {:.1} MB)", mb(watch_heap), mb(watch_peak)),
    );
    row(
        "ours, stat walk",
        walk_cold,
        &tn,
        &cn,
        git,
        &format!("{:.1} MB (peak {:.1} MB)", mb(walk_heap), mb(walk_peak)),
    );
    row(
        "lstat floor",
        Duration::ZERO,
        &tf,
        &cf,
        None,
        &format!("{} calls a pass, {} threads", floor.calls(), floor.threads),
    );
    println!(
        "  every step's ids equal: {steps} x 3; the stat walk held {} directories open (of {} in the work tree); its p50 is {:.2} ms above the lstat floor's (only the system calls: an fstat of every directory and an fstatat of every other entry)",
        walk.last_stats().held_dirs,
        count_dirs(root),
        (spread(&tn).0.as_secs_f64() - spread(&tf).0.as_secs_f64()) * 1e3
    );
    // For scripts/bench's table: figure, value, unit, baseline, its value, target, met.
    let gc = spread(&cg).0;
    for (how, times, cpus) in [("inotify watch", &tw, &cw), ("stat walk", &tn, &cn)] {
        println!(
            "hangar-bench\ttreehash: {name}, {} files, step p50, {how}\t{:.3}\tms\tgit add -A && write-tree, p50\t{:.3}\t-\t-",
            files.len(),
            spread(times).0.as_secs_f64() * 1e3,
            g.as_secs_f64() * 1e3
        );
        println!(
            "hangar-bench\ttreehash: {name}, {} files, step CPU p50, {how}\t{:.3}\tms\tgit add -A && write-tree, CPU p50\t{:.3}\t-\t-",
            files.len(),
            spread(cpus).0.as_secs_f64() * 1e3,
            gc.as_secs_f64() * 1e3
        );
    }
    println!(
        "hangar-bench\ttreehash: {name}, {} files, step p50, stat walk beside its floor\t{:.3}\tms\tbare fstatat of every entry, same threads, p50\t{:.3}\t-\t-",
        files.len(),
        spread(&tn).0.as_secs_f64() * 1e3,
        spread(&tf).0.as_secs_f64() * 1e3
    );
    drop(walk);
    drop(watch);
}

/// Directories in the work tree outside `.git` (for the stat walk's line).
fn count_dirs(root: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        n += 1;
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() && e.file_name() != ".git" {
                stack.push(e.path());
            }
        }
    }
    n
}

/// A 200 MB untracked file that no ignore rule covers, pseudo-random (incompressible).
fn big_file(tmp: &Path, home: &Path, root: &Path) {
    let git_m = GitMethod::new(home, root, tmp.join("scratch-big"));
    git_m.tree();
    let mut h = TreeHasher::with_options(
        root,
        Store::open(&tmp.join("store-big"), &[root.join(".git/objects")]).unwrap(),
        opts(home, true),
    )
    .unwrap();
    h.hash().unwrap();
    let mut rng = Rng(200);
    let mut block = vec![0u8; 1 << 20];
    let path = root.join("big.bin");
    let mut f = std::fs::File::create(&path).unwrap();
    for _ in 0..200 {
        for c in block.chunks_mut(8) {
            c.copy_from_slice(&rng.next().to_le_bytes());
        }
        std::io::Write::write_all(&mut f, &block).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let (ours, t_ours) = time(|| h.hash().unwrap().to_hex());
    let (theirs, t_git) = time(|| git_m.tree());
    assert_eq!(ours, theirs, "the 200 MB file's tree");
    println!(
        "\n200 MB untracked file (pseudo-random): git add -A && write-tree {t_git:.2?}, ours {t_ours:.2?} (hashed and stored; target < 1.5 s, cut-off 2 s)"
    );
    std::fs::remove_file(&path).unwrap();
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let steps: usize = std::env::var("HANGAR_TREEHASH_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let mut repos: Vec<(String, PathBuf)> = Vec::new();
    let t = Instant::now();
    match std::env::var("HANGAR_TREEHASH_BENCH_REPOS") {
        Ok(list) => {
            for item in list.split(',').filter(|s| !s.is_empty()) {
                let (name, path) = item.split_once('=').expect("name=PATH");
                let root = tmp.path().join(name);
                run(git(&home, tmp.path())
                    .args(["clone", "-q", "--no-hardlinks"])
                    .arg(path)
                    .arg(&root));
                repos.push((name.to_owned(), root));
            }
        }
        Err(_) => {
            let sizes: Vec<usize> = std::env::var("HANGAR_TREEHASH_BENCH_SIZES")
                .ok()
                .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
                .unwrap_or_else(|| vec![265, 4847, 38570]);
            for n in sizes {
                let root = tmp.path().join(format!("generated-{n}"));
                make_repo(&root, &home, n);
                repos.push((format!("generated-{n}"), root));
            }
        }
    }
    println!(
        "hangar-treehash: per step, the seed's git method beside ours (setup {:.1?}); load average {} at the start",
        t.elapsed(),
        loadavg()
    );
    for (name, root) in &repos {
        bench_repo(tmp.path(), &home, name, root, steps);
    }
    if let Some((_, root)) = repos.first() {
        big_file(tmp.path(), &home, root);
    }
    println!("load average at the end: {}", loadavg());
}
