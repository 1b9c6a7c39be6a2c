#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::Write;

use super::*;

const RUN: &str = "run-seal";

fn key() -> SealKey {
    SealKey::derive(&RunKey::from_bytes([7; 32]))
}

/// A log written as the driver writes it: each write its content and seal, `forged` bytes of
/// someone else's appended in between.
struct Log {
    file: File,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    sealer: Sealer,
}

impl Log {
    fn new() -> Log {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        Log {
            file: open_for_append(&path).unwrap(),
            _dir: dir,
            path,
            sealer: Sealer::new(key(), RUN, 0),
        }
    }

    fn hangar(&mut self, content: &str) {
        let mut b = content.as_bytes().to_vec();
        b.extend_from_slice(&self.sealer.seal(&[content.as_bytes()]));
        self.file.write_all(&b).unwrap();
        self.sealer.written();
    }

    fn agent(&mut self, bytes: &str) {
        self.file.write_all(bytes.as_bytes()).unwrap();
    }

    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.path).unwrap()
    }

    fn scan(&self, from: u64, order: Order) -> Scan {
        scan(&self.file, from, u64::MAX, 1 << 20, &key(), RUN, order).unwrap()
    }
}

fn text(p: &Piece) -> String {
    match p {
        Piece::Sealed { bytes, .. } => String::from_utf8(bytes.clone().unwrap()).unwrap(),
        Piece::Unsealed { at, len } => format!("unsealed {at}+{len}"),
    }
}

#[test]
fn the_seal_line_is_compact_and_parses_back() {
    let line = seal_line(&key(), RUN, 3, &[b"a\n", b"bc\n"]);
    let s = String::from_utf8(line.clone()).unwrap();
    assert!(
        s.starts_with("{\"type\":\"hangar.seal\",\"n\":3,\"len\":5,\"mac\":\""),
        "{s}"
    );
    assert!(s.ends_with("\"}\n"));
    let seal = Seal::parse(&line[..line.len() - 1]).unwrap();
    assert_eq!((seal.n, seal.len), (3, 5));
    // Only the exact form hangar writes is a seal.
    let text = String::from_utf8(line[..line.len() - 1].to_vec()).unwrap();
    assert!(Seal::parse(text.replace("\"n\":3", "\"n\":03").as_bytes()).is_none());
    assert!(Seal::parse(text.replace(",\"len\"", ", \"len\"").as_bytes()).is_none());
    assert!(
        Seal::parse(
            text.replace("\"n\":3", "\"n\":99999999999999999999")
                .as_bytes()
        )
        .is_none()
    );
    assert!(Seal::parse(&text.as_bytes()[..text.len() - 4]).is_none());
    // The parts are one content: split differently, the same MAC.
    assert_eq!(line, seal_line(&key(), RUN, 3, &[b"a\nbc\n"]));
    // Run, number and key are all in it.
    assert_ne!(line, seal_line(&key(), "run-other", 3, &[b"a\nbc\n"]));
    assert_ne!(line, seal_line(&key(), RUN, 4, &[b"a\nbc\n"]));
    assert_ne!(
        line,
        seal_line(&SealKey::from_bytes([1; 32]), RUN, 3, &[b"a\nbc\n"])
    );
    assert!(Seal::parse(b"{\"type\":\"assistant\"}").is_none());
    assert_eq!(format!("{:?}", key()), "SealKey([redacted])");
    assert_eq!(
        SealKey::from_file_text(&key().to_file_text()).unwrap(),
        key()
    );
}

#[test]
fn bytes_between_sealed_writes_are_unsealed_whatever_they_say() {
    let mut log = Log::new();
    log.hangar("{\"type\":\"hangar.started\"}\n");
    log.agent("{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"FORGED\"}]}}\n");
    // A forged seal: right shape, wrong key.
    let forged_seal = seal_line(&SealKey::from_bytes([9; 32]), RUN, 2, &[b"x\n"]);
    log.agent("x\n");
    log.agent(std::str::from_utf8(&forged_seal).unwrap());
    log.hangar("{\"type\":\"result\"}\n{\"type\":\"hangar.turn_end\"}\n");
    let s = log.scan(0, Order::After(0));
    let texts: Vec<String> = s.pieces.iter().map(text).collect();
    let first_len = "{\"type\":\"hangar.started\"}\n".len() as u64;
    let seal_len = seal_line(&key(), RUN, 1, &[b"{\"type\":\"hangar.started\"}\n"]).len() as u64;
    assert_eq!(texts[0], "{\"type\":\"hangar.started\"}\n");
    assert!(
        texts[1].starts_with(&format!("unsealed {}+", first_len + seal_len)),
        "{texts:?}"
    );
    assert_eq!(
        texts[2],
        "{\"type\":\"result\"}\n{\"type\":\"hangar.turn_end\"}\n"
    );
    assert_eq!(texts.len(), 3);
    assert_eq!(s.resolved, log.bytes().len() as u64);
    assert_eq!(s.last, Some(2));
}

#[test]
fn a_partial_line_glued_before_a_write_does_not_hide_it() {
    let mut log = Log::new();
    // No newline: the driver's next line reads as the end of this one to a line reader.
    let glued = "{\"type\":\"assistant\",\"text\":\"";
    log.agent(glued);
    log.hangar("{\"type\":\"hangar.approval\"}\n");
    let s = log.scan(0, Order::After(0));
    let g = glued.len() as u64;
    assert_eq!(
        s.pieces,
        vec![
            Piece::Unsealed { at: 0, len: g },
            Piece::Sealed {
                at: g,
                len: 27,
                n: 1,
                bytes: Some(b"{\"type\":\"hangar.approval\"}\n".to_vec())
            }
        ]
    );
}

#[test]
fn a_changed_byte_a_replayed_or_reordered_write_is_not_taken_in_order() {
    let mut log = Log::new();
    log.hangar("one\n");
    log.hangar("two\n");
    let all = log.bytes();
    // The first write and its seal again: a replay.
    log.agent(std::str::from_utf8(&all[..all.len() / 2]).unwrap());
    log.hangar("three\n");
    let s = log.scan(0, Order::After(0));
    let texts: Vec<String> = s.pieces.iter().map(text).collect();
    assert_eq!(texts[..2], ["one\n", "two\n"]);
    assert!(texts[2].starts_with("unsealed"), "{texts:?}");
    assert_eq!(texts[3], "three\n");
    // From an offset with any order the replay is taken: the bytes are hangar's all the same.
    let any = log.scan(0, Order::Any);
    assert_eq!(
        any.pieces.iter().map(text).collect::<Vec<_>>(),
        ["one\n", "two\n", "one\n", "three\n"]
    );

    // One byte changed in a sealed write: that write and every later one are not taken.
    let mut log = Log::new();
    log.hangar("one\n");
    log.hangar("two\n");
    log.hangar("three\n");
    let at = log.bytes().windows(4).position(|w| w == b"one\n").unwrap();
    // (Not through the log's own O_APPEND handle: Linux appends a pwrite made through one.)
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log.path)
        .unwrap()
        .write_all_at(b"ONE", at as u64)
        .unwrap();
    let s = log.scan(0, Order::After(0));
    assert!(s.pieces.is_empty(), "{:?}", s.pieces);
    assert_eq!(s.resolved, 0);
}

#[test]
fn a_scan_stops_before_bytes_no_seal_has_covered_yet() {
    let mut log = Log::new();
    log.hangar("one\n");
    let after_one = log.bytes().len() as u64;
    // The driver's next write is under way (or someone else's line): not decided yet.
    log.agent("{\"type\":\"assistant\"}\n");
    let s = log.scan(0, Order::After(0));
    assert_eq!(s.resolved, after_one);
    assert_eq!(s.last, Some(1));
    log.hangar("two\n");
    let s = log.scan(after_one, Order::After(1));
    assert_eq!(
        s.pieces.iter().map(text).collect::<Vec<_>>(),
        [format!("unsealed {after_one}+21"), "two\n".into()]
    );
    // A scan that wants little stops at the first seal.
    let s = scan(&log.file, 0, 1, 1 << 20, &key(), RUN, Order::After(0)).unwrap();
    assert_eq!(s.resolved, after_one);
    // A write over `keep` is checked and not kept.
    let s = scan(&log.file, 0, u64::MAX, 2, &key(), RUN, Order::After(0)).unwrap();
    assert!(matches!(
        s.pieces[0],
        Piece::Sealed {
            bytes: None,
            len: 4,
            ..
        }
    ));
}

#[test]
fn appended_lines_continue_the_logs_seals_and_the_writer_follows_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    assert_eq!(last_seal(&path, &key(), RUN).unwrap(), 0);
    append_sealed(&path, &key(), RUN, b"{\"type\":\"hangar.warning\"}\n").unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"junk\n")
        .unwrap();
    append_sealed(
        &path,
        &key(),
        RUN,
        b"{\"type\":\"hangar.warning\",\"n\":2}\n",
    )
    .unwrap();
    assert_eq!(last_seal(&path, &key(), RUN).unwrap(), 2);
    assert_eq!(
        last_seal(&path, &SealKey::from_bytes([3; 32]), RUN).unwrap(),
        0
    );
    // Never through a link.
    let link = dir.path().join("link.log");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(append_sealed(&link, &key(), RUN, b"x\n").is_err());
}

/// Builds a log from `ops` (each byte: the low bit says who writes, the rest how much) the way
/// it happens: hangar's writes sealed, an agent's bytes appended between them (whole or partial
/// lines, seal-shaped lines among them). Returns the log and hangar's writes.
fn interleaved(ops: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let sealer = Sealer::new(key(), RUN, 0);
    let mut sealer = sealer;
    let (mut log, mut hangar) = (Vec::new(), Vec::new());
    for (i, op) in ops.iter().enumerate() {
        let n = usize::from(op >> 1);
        if op & 1 == 0 {
            let content: Vec<u8> = format!(
                "{{\"type\":\"x\",\"i\":{i},\"pad\":\"{}\"}}\n",
                "p".repeat(n)
            )
            .into_bytes();
            log.extend_from_slice(&content);
            log.extend_from_slice(&sealer.seal(&[&content]));
            sealer.written();
            hangar.push(content);
        } else {
            match n % 4 {
                0 => log.extend_from_slice("a".repeat(n).as_bytes()),
                1 => log.extend_from_slice(format!("{{\"forged\":{n}}}\n").as_bytes()),
                2 => log.extend_from_slice(&seal_line(
                    &SealKey::from_bytes([n as u8; 32]),
                    RUN,
                    1,
                    &[b"x\n"],
                )),
                _ => log.extend_from_slice(
                    b"{\"type\":\"hangar.seal\",\"n\":1,\"len\":3,\"mac\":\"zz\"}\n",
                ),
            }
        }
    }
    (log, hangar)
}

/// However hangar's writes and an agent's bytes interleave, a scan from the start gives back
/// exactly hangar's writes, in order, every other byte before the last one reported as not
/// sealed; and scans resumed from where earlier ones stopped, with small budgets, give the
/// same pieces.
#[test]
fn random_interleavings_give_back_exactly_hangars_writes() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..200 {
        let ops: Vec<u8> = (0..(round % 17 + 1))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x & 0xff) as u8
            })
            .collect();
        let (bytes, hangar) = interleaved(&ops);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        std::fs::write(&path, &bytes).unwrap();
        let f = File::open(&path).unwrap();
        let whole = scan(&f, 0, u64::MAX, 1 << 20, &key(), RUN, Order::After(0)).unwrap();
        let got: Vec<Vec<u8>> = whole
            .pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Sealed { bytes, .. } => bytes.clone(),
                Piece::Unsealed { .. } => None,
            })
            .collect();
        assert_eq!(got, hangar, "ops {ops:?}");
        // Keeping little in memory (sealed writes checked from the file) decides the same.
        let small = scan(&f, 0, u64::MAX, 40, &key(), RUN, Order::After(0)).unwrap();
        let shape = |p: &Piece| match p {
            Piece::Sealed { at, len, n, .. } => (*at, *len, *n),
            Piece::Unsealed { at, len } => (*at, *len, 0),
        };
        assert_eq!(
            small.pieces.iter().map(shape).collect::<Vec<_>>(),
            whole.pieces.iter().map(shape).collect::<Vec<_>>(),
            "ops {ops:?}"
        );
        // Every byte up to `resolved` is in one piece or a seal line, in order.
        let mut at = 0;
        for p in &whole.pieces {
            let (start, len) = match p {
                Piece::Sealed { at, len, .. } | Piece::Unsealed { at, len } => (*at, *len),
            };
            assert!(start >= at, "ops {ops:?}");
            at = start + len;
        }
        let mut resumed = Vec::new();
        let (mut from, mut order) = (0, Order::After(0));
        loop {
            let s = scan(&f, from, 1 + (from % 50), 1 << 20, &key(), RUN, order).unwrap();
            resumed.extend(s.pieces);
            if let Some(n) = s.last {
                order = Order::After(n);
            }
            if s.resolved == from {
                break;
            }
            from = s.resolved;
        }
        assert_eq!(resumed, whole.pieces, "ops {ops:?}");
    }
}
