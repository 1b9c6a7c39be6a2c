//! The deadline behind every read (`shell::read_within`): a command that takes too long to read
//! is denied as unreadable while its thread runs on, and while too many such threads run no
//! command is read at all. Its own test binary: the count of late reads is process-wide.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::path::Path;
use std::time::{Duration, Instant};

use hangar_rules::shell::{
    Failure, MAX_COMMAND_BYTES, MAX_STILL_READING, read, read_within, still_reading,
};

#[test]
fn a_read_past_its_deadline_is_denied_and_late_reads_are_bounded() {
    let ws = Path::new("/work/ws");
    // Ordinary commands, as many as fit: hundreds of milliseconds to read even in a release
    // build, never within a millisecond.
    let unit = "cd src && grep -rn 'foo bar' . | sort | uniq -c > /tmp/out.txt; ";
    let big = unit.repeat(MAX_COMMAND_BYTES / unit.len());
    let (_, failures) = read(&big, ws, None);
    assert!(failures.is_empty(), "{failures:?}");

    for late in 1..=MAX_STILL_READING {
        let t = Instant::now();
        let (out, failures) = read_within(&big, ws, None, Duration::from_millis(1));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(out.is_empty());
        match failures.as_slice() {
            [Failure::Unparsable(why)] => assert!(why.contains("took longer"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(still_reading(), late);
    }
    // While they run, nothing is read: denied at once.
    let (_, failures) = read("ls", ws, None);
    match failures.as_slice() {
        [Failure::Unparsable(why)] => assert!(why.contains("still being read"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Once they end, commands are read again.
    let t = Instant::now();
    while still_reading() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the late reads never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (out, failures) = read("ls", ws, None);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(out.len(), 1);
}
