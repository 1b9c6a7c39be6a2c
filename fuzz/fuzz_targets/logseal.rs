//! The run log's seal scanner (`hangar_protocol::logseal::scan`), which reads bytes the agent
//! may have written. The input is both a log as it is (scanned: nothing panics, pieces are in
//! order and within the file) and, read as operations (each byte: hangar writes, sealed, or the
//! agent appends bytes), a log built the way it happens: the scan must give back exactly
//! hangar's writes, in order, and a scan resumed from where one stopped must give the same.
#![no_main]

use std::io::Write;

use hangar_protocol::RunKey;
use hangar_protocol::logseal::{Order, Piece, SealKey, Sealer, scan, seal_line};
use libfuzzer_sys::fuzz_target;

const RUN: &str = "run-fuzz";

fn pieces_in_order(pieces: &[Piece], len: u64) {
    let mut at = 0;
    for p in pieces {
        let (start, n) = match p {
            Piece::Sealed { at, len, .. } | Piece::Unsealed { at, len } => (*at, *len),
        };
        assert!(
            start >= at && start + n <= len,
            "a piece out of order or past the end"
        );
        at = start + n;
    }
}

fuzz_target!(|data: &[u8]| {
    let key = SealKey::derive(&RunKey::from_bytes([5; 32]));
    let mut raw = tempfile::NamedTempFile::new().expect("a temp file");
    raw.write_all(data).expect("write");
    let s = scan(raw.as_file(), 0, u64::MAX, 1 << 16, &key, RUN, Order::Any).expect("scan");
    pieces_in_order(&s.pieces, data.len() as u64);

    let mut sealer = Sealer::new(key.clone(), RUN, 0);
    let (mut log, mut hangar) = (Vec::new(), Vec::new());
    for (i, op) in data.iter().enumerate() {
        let n = usize::from(op >> 1);
        if op & 1 == 0 {
            let content = format!("{{\"i\":{i},\"p\":\"{}\"}}\n", "p".repeat(n)).into_bytes();
            log.extend_from_slice(&content);
            log.extend_from_slice(&sealer.seal(&[&content]));
            sealer.written();
            hangar.push(content);
        } else if n % 3 == 0 {
            log.extend_from_slice(&data[i..(i + n).min(data.len())]);
        } else if n % 3 == 1 {
            log.extend_from_slice(&seal_line(
                &SealKey::from_bytes([n as u8; 32]),
                RUN,
                1,
                &[b"x\n"],
            ));
        } else {
            log.extend_from_slice(&vec![b'a'; n]);
        }
    }
    let mut built = tempfile::NamedTempFile::new().expect("a temp file");
    built.write_all(&log).expect("write");
    let f = built.as_file();
    let whole = scan(f, 0, u64::MAX, 1 << 20, &key, RUN, Order::After(0)).expect("scan");
    pieces_in_order(&whole.pieces, log.len() as u64);
    let got: Vec<Vec<u8>> = whole
        .pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Sealed { bytes, .. } => bytes.clone(),
            Piece::Unsealed { .. } => None,
        })
        .collect();
    assert_eq!(got, hangar, "hangar's writes were not given back exactly");
    let (mut from, mut order, mut resumed) = (0, Order::After(0), Vec::new());
    loop {
        let s = scan(f, from, 1 + from % 97, 1 << 20, &key, RUN, order).expect("scan");
        resumed.extend(s.pieces);
        if let Some(n) = s.last {
            order = Order::After(n);
        }
        if s.resolved == from {
            break;
        }
        from = s.resolved;
    }
    assert_eq!(resumed, whole.pieces, "a resumed scan differs");
});
