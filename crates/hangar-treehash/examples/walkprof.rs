//! Profiling aid: `walkprof DIR STEPS` hashes DIR with full stat walks, appending to one file
//! between steps, and prints each step's time and stats.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use hangar_treehash::{Options, Store, TreeHasher, UserConfig};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap());
    let steps: usize = args.next().map_or(20, |s| s.parse().unwrap());
    let watch = args.next().as_deref() == Some("watch");
    let opts = Options {
        user: UserConfig::none(),
        watch,
        threads: 2,
    };
    let mut h = TreeHasher::with_options(&dir, Store::hash_only(), opts).unwrap();
    let t = Instant::now();
    let id = h.hash().unwrap();
    println!("cold {:?} {id} {:?}", t.elapsed(), h.last_stats());
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let file = dir.join("walkprof-edit.txt");
    let mut times = Vec::new();
    let mut cpus = Vec::new();
    for i in 0..steps {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .unwrap();
        writeln!(f, "step {i}").unwrap();
        drop(f);
        let t = Instant::now();
        let c = cpu();
        h.hash().unwrap();
        times.push(t.elapsed());
        cpus.push(cpu() - c);
    }
    println!("last {:?}", h.last_stats());
    times.sort();
    println!(
        "p50 {:?} min {:?} max {:?}",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
    cpus.sort_by(f64::total_cmp);
    println!(
        "cpu p50 {:.1} ms min {:.1} ms",
        cpus[cpus.len() / 2] * 1e3,
        cpus[0] * 1e3
    );
    let _ = std::fs::remove_file(&file);
}

fn cpu() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    // SAFETY: filled above.
    let ru = unsafe { ru.assume_init() };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}
