#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "benchmark binary"
)]

//! Rules check throughput (`cargo bench -p hangar-rules`): every command of both corpora
//! (`corpus/risky.txt`, `corpus/ordinary.txt`), checked over and over for about two seconds,
//! printed as commands per second beside its baselines measured in the same run: brush-parser's
//! parse alone (the floor: the rules cannot be faster than reading the command) and the whole
//! walk without the rule matching (`shell::read`). The rounds are interleaved, so load from
//! elsewhere hits all three alike.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use hangar_rules::{Context, Rules, shell};

fn corpus(file: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(file);
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in text.lines() {
        if line == "---" {
            match block.take() {
                Some(b) => out.push(b.join("\n")),
                None => block = Some(Vec::new()),
            }
        } else if let Some(b) = block.as_mut() {
            b.push(line);
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            out.push(line.to_owned());
        }
    }
    out
}

fn main() {
    let mut cmds = corpus("risky.txt");
    cmds.extend(corpus("ordinary.txt"));
    let rules = Rules::default_set();
    let ctx = Context {
        workspace: "/work/ws".into(),
        home: Some("/home/agent".into()),
        protected: vec!["/run/hangar/ctl".into()],
    };
    let opts = brush_parser::ParserOptions::default();
    let mut t = [Duration::ZERO; 3];
    let mut n = 0u64;
    let start = Instant::now();
    // `HANGAR_BENCH_QUICK=1` (scripts/bench --quick): one second instead of six.
    let quick = std::env::var("HANGAR_BENCH_QUICK").is_ok_and(|v| v == "1");
    let length = Duration::from_secs(if quick { 1 } else { 6 });
    while start.elapsed() < length {
        let a = Instant::now();
        for c in &cmds {
            let mut p = brush_parser::Parser::new(std::io::Cursor::new(c.as_bytes()), &opts);
            black_box(p.parse_program().is_ok());
        }
        let b = Instant::now();
        for c in &cmds {
            black_box(shell::read(c, &ctx.workspace, ctx.home.as_deref()));
        }
        let d = Instant::now();
        for c in &cmds {
            black_box(rules.check_command(c, &ctx));
        }
        let e = Instant::now();
        t[0] += b - a;
        t[1] += d - b;
        t[2] += e - d;
        n += cmds.len() as u64;
    }
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "rules check over both corpora ({} commands, {n} checks each):",
        cmds.len()
    );
    println!(
        "  rules check (parse + walk + {} rules) {:>10.0} commands/s  ({:.1} us each)",
        rules.rules().len(),
        rate(t[2]),
        t[2].as_secs_f64() * 1e6 / n as f64
    );
    println!(
        "  baseline: walk only (shell::read)     {:>10.0} commands/s  ({:.1} us each)",
        rate(t[1]),
        t[1].as_secs_f64() * 1e6 / n as f64
    );
    println!(
        "  baseline: brush-parser parse alone    {:>10.0} commands/s  ({:.1} us each)",
        rate(t[0]),
        t[0].as_secs_f64() * 1e6 / n as f64
    );
    // For scripts/bench's table: figure, value, unit, baseline, its value, target, met.
    println!(
        "hangar-bench\trules: check, both corpora\t{:.0}\tcommands/s\tbrush-parser parse alone\t{:.0}\t-\t-",
        rate(t[2]),
        rate(t[0])
    );
}
