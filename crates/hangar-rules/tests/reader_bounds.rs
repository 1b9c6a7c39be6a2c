//! The readers of interpreter code and the new wrappers stay linear on shapes that would make
//! a naive reader quadratic or recurse without end: each is read (or denied) in time, never a
//! crash. The commands are data: they are parsed, never run.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::time::{Duration, Instant};

use hangar_rules::{Context, Rules};

fn ctx() -> Context {
    Context {
        workspace: "/work/ws".into(),
        home: Some("/home/agent".into()),
        protected: vec!["/run/hangar/ctl".into()],
    }
}

/// About 100 kB of `unit` inside `before … after`.
fn big(before: &str, unit: &str, after: &str) -> String {
    format!("{before}{}{after}", unit.repeat(100_000 / unit.len()))
}

#[test]
fn long_inputs_to_the_readers_are_read_in_time() {
    let rules = Rules::default_set();
    let cases = [
        big("python3 -c 'x", ".a", "'"),
        big("python3 -c '", "f(", "'"),
        big("python3 -c 'x=", "\"a\"+", "\"b\"'"),
        big("python3 -c 'f", "()", "'"),
        big("perl -e '", "unlink ", "'"),
        big("perl -e '", "<<A", "\nA\n'"),
        big("node -e '`", "${`", "'"),
        big("ruby -e '", "system ", "'"),
        big("awk '{", "print ", "}'"),
        big("awk '{", "a | getline ", "}'"),
        big("vim -c '", "echo|", "'"),
        big("vim -c 'call ", "system(", "'"),
        big("make --eval '", "$(a ", "'"),
        big("sed '", "s/a/b/;", "' f"),
        big("gdb -batch -ex '", "p 1\n", "'"),
        big("echo ", "{a,b}", ""),
        big("git ", "-c color.ui=always ", "log"),
        big("xargs ", "-n1 ", "sh -c x"),
    ];
    for cmd in &cases {
        let t = Instant::now();
        let _ = rules.check_command(cmd, &ctx());
        let took = t.elapsed();
        assert!(
            took < Duration::from_secs(20),
            "{}…: {took:?}",
            &cmd[..cmd.len().min(40)]
        );
    }
}
