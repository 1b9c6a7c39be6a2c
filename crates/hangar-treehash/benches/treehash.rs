//! `cargo bench -p hangar-treehash`: per-step time of this crate's hasher (with the inotify watch,
//! and with full stat walks) against git's own method (`git add -A && git write-tree` on a
//! scratch index kept between steps), on generated repositories of about 265, 4,847 and 38,570
//! files, 1–3 files changed per step; every step's id is checked against git's. Then a 200 MB
//! untracked file. `HANGAR_TREEHASH_BENCH_SIZES=265,4847` picks sizes, `…_STEPS=30` steps.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use hangar_treehash::{Options, Store, TreeHasher, UserConfig};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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
fn make_repo(root: &Path, home: &Path, n: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(root).unwrap();
    run(git(home, root).args(["init", "-q"]));
    std::fs::write(root.join(".gitignore"), "*.o\ntarget/\n").unwrap();
    let mut files = Vec::with_capacity(n);
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
        files.push(rel);
    }
    run(git(home, root).args(["add", "-A"]));
    run(git(home, root).args(["commit", "-qm", "init"]));
    files
}

fn p50(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn edit(root: &Path, files: &[PathBuf], rng: &mut Rng, step: usize) {
    for k in 0..1 + rng.below(3) {
        let f = &files[rng.below(files.len())];
        std::fs::write(
            root.join(f),
            format!("step {step} change {k} {}\n", rng.next()),
        )
        .unwrap();
    }
}

fn bench_size(tmp: &Path, home: &Path, n: usize, steps: usize) {
    let root = tmp.join(format!("repo-{n}"));
    let t = Instant::now();
    let files = make_repo(&root, home, n);
    let setup = t.elapsed();
    // git's method, with its scratch index kept between steps.
    let scratch = tmp.join(format!("scratch-{n}"));
    std::fs::create_dir_all(scratch.join("objects")).unwrap();
    let index = scratch.join("index");
    std::fs::copy(root.join(".git/index"), &index).unwrap();
    let git_step = |c: &mut Command| {
        c.env("GIT_INDEX_FILE", &index)
            .env("GIT_OBJECT_DIRECTORY", scratch.join("objects"))
            .env(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                root.join(".git/objects"),
            );
    };
    let git_tree = || {
        let mut add = git(home, &root);
        add.args(["add", "-A"]);
        git_step(&mut add);
        run(&mut add);
        let mut wt = git(home, &root);
        wt.arg("write-tree");
        git_step(&mut wt);
        run(&mut wt)
    };
    git_tree();
    let opts = |watch| Options {
        user: UserConfig {
            home: Some(home.to_path_buf()),
            ..UserConfig::none()
        },
        watch,
        threads: 2,
    };
    let mut rng = Rng(7);
    let mut git_times = Vec::new();
    let mut results = Vec::new();
    for watch in [true, false] {
        let store = Store::open(
            &tmp.join(format!("store-{n}-{watch}")),
            &[root.join(".git/objects")],
        )
        .unwrap();
        let mut h = TreeHasher::with_options(&root, store, opts(watch)).unwrap();
        let t = Instant::now();
        h.hash().unwrap();
        let first = t.elapsed();
        // Past the racy window, as a turn's steps are.
        std::thread::sleep(Duration::from_millis(2100));
        h.hash().unwrap();
        let mut times = Vec::new();
        for step in 0..steps {
            edit(&root, &files, &mut rng, step);
            let t = Instant::now();
            let ours = h.hash().unwrap().to_hex();
            times.push(t.elapsed());
            let t = Instant::now();
            let theirs = git_tree();
            git_times.push(t.elapsed());
            assert_eq!(ours, theirs, "n={n} watch={watch} step {step}");
        }
        results.push((watch, first, p50(&mut times), *times.iter().max().unwrap()));
    }
    let g = p50(&mut git_times);
    println!("{n:>6} files (setup {setup:.1?}): git add -A && write-tree p50 {g:>9.2?}");
    for (watch, first, p, max) in results {
        println!(
            "        ours, {:<10} p50 {p:>9.2?} (max {max:>9.2?}, first hash {first:>8.1?})  {:>5.1}x faster",
            if watch { "watch" } else { "stat walk" },
            g.as_secs_f64() / p.as_secs_f64()
        );
    }
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let sizes: Vec<usize> = std::env::var("HANGAR_TREEHASH_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![265, 4847, 38570]);
    let steps: usize = std::env::var("HANGAR_TREEHASH_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    println!("hangar-treehash: per-step p50, {steps} steps of 1-3 changed files");
    for n in sizes {
        bench_size(tmp.path(), &home, n, steps);
    }
    // A 200 MB untracked file.
    let root = tmp.path().join("repo-big");
    make_repo(&root, &home, 10);
    let store = Store::open(&tmp.path().join("store-big"), &[root.join(".git/objects")]).unwrap();
    let mut h = TreeHasher::with_options(
        &root,
        store,
        Options {
            watch: true,
            ..Options::default()
        },
    )
    .unwrap();
    h.hash().unwrap();
    let mut block = vec![0u8; 1 << 20];
    let mut f = std::fs::File::create(root.join("big.bin")).unwrap();
    for i in 0..200u32 {
        block[..4].copy_from_slice(&i.to_le_bytes());
        std::io::Write::write_all(&mut f, &block).unwrap();
    }
    drop(f);
    let t = Instant::now();
    h.hash().unwrap();
    println!(
        "200 MB untracked file: hashed and stored in {:.2?}",
        t.elapsed()
    );
    let t = Instant::now();
    let info = h
        .store()
        .export_pack(&tmp.path().join("turn.pack"))
        .unwrap();
    println!(
        "turn's pack: {} objects, exported in {:.2?}",
        info.objects,
        t.elapsed()
    );
}
