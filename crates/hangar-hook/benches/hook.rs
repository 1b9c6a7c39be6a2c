#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "benchmark binary"
)]

//! Hook latency per tool call (`cargo bench -p hangar-hook`; target p50 < 5 ms): the hook
//! process from spawn to exit, 200 calls against a loopback Tower double answering allow (so
//! every call also runs the deny-risky rules), beside the cost of spawning `/bin/true` in the
//! same run, interleaved. The hook is `$HANGAR_TOWER_HOOK_BIN` if set (the static release
//! build), else the binary cargo built for this bench.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hangar_testkit::{TOWER_KEY, TowerDouble};

fn time(cmd: &mut Command, input: &[u8]) -> Duration {
    let t = Instant::now();
    let mut child = cmd.spawn().unwrap();
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(input);
    }
    let st = child.wait().unwrap();
    let d = t.elapsed();
    assert!(st.success(), "{cmd:?} failed: {st}");
    d
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

fn main() {
    let hook: PathBuf = std::env::var_os("HANGAR_TOWER_HOOK_BIN")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_hangar-tower-hook")),
            PathBuf::from,
        );
    let tower = TowerDouble::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, TOWER_KEY).unwrap();
    let input =
        serde_json::json!({"session_id": "s", "cwd": dir.path(), "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": "cargo test -p core && git status | head"},
        "tool_use_id": "toolu_1", "permission_mode": "default"})
        .to_string();
    // `HANGAR_BENCH_QUICK=1` (scripts/bench --quick): 50 calls instead of 200.
    let calls = if std::env::var("HANGAR_BENCH_QUICK").is_ok_and(|v| v == "1") {
        50
    } else {
        200
    };
    let (mut hooks, mut trues) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        let mut h = Command::new(&hook);
        h.arg("--url")
            .arg(tower.url())
            .arg("--key-file")
            .arg(&key)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        hooks.push(time(&mut h, input.as_bytes()));
        let mut t = Command::new("/bin/true");
        t.stdin(Stdio::null()).stdout(Stdio::null());
        trues.push(time(&mut t, b""));
    }
    assert_eq!(tower.calls().len(), calls);
    println!("hook latency, spawn to exit, {calls} calls against a loopback Tower double (allow):");
    println!("  {}", hook.display());
    let (hook50, true50) = (pct(&mut hooks, 0.5), pct(&mut trues, 0.5));
    println!(
        "  tower hook   p50 {hook50:6.2} ms   p99 {:6.2} ms   (target p50 < 5 ms)",
        pct(&mut hooks, 0.99)
    );
    println!(
        "  /bin/true    p50 {true50:6.2} ms   p99 {:6.2} ms   (baseline: spawning a process)",
        pct(&mut trues, 0.99)
    );
    // For scripts/bench's table: figure, value, unit, baseline, its value, target, met.
    println!(
        "hangar-bench\thook: tool call, spawn to exit, p50\t{hook50:.3}\tms\tspawning /bin/true, p50\t{true50:.3}\t< 5\t{}",
        if hook50 < 5.0 { "yes" } else { "no" }
    );
}
