//! The client's reading of the driver's signed ack (`Ack::parse_verified`).
//!
//! 1. The bytes as written into `acks/` (by anyone who can write there): an ack is only taken
//!    when it is authentic and answers the command that was sent.
//! 2. When they read as an ack, sealed again with the run key: the ack must then be taken, as
//!    it was sealed, for exactly its own command and under exactly its key.
#![no_main]

use hangar_protocol::{Ack, FORMAT_VERSION, RunKey};
use libfuzzer_sys::fuzz_target;

const KEY: [u8; 32] = [7; 32];

fuzz_target!(|data: &[u8]| {
    let key = RunKey::from_bytes(KEY);
    // 1. As written, for the command the seeds answer.
    let (run, name, seq, nonce) = ("r-fuzz", "000001-00000000.cmd", 1, "00".repeat(16));
    if let Some(a) = Ack::parse_verified(data, &key, run, name, seq, &nonce) {
        assert!(a.mac_ok(&key));
        assert_eq!(
            (
                a.v,
                a.run.as_str(),
                a.name.as_str(),
                a.seq,
                a.nonce.as_str()
            ),
            (FORMAT_VERSION, run, name, seq, nonce.as_str())
        );
    }
    // 2. Sealed again.
    let Ok(mut a) = serde_json::from_slice::<Ack>(data) else {
        return;
    };
    a.reseal(&key);
    let bytes = a.to_bytes();
    let got = Ack::parse_verified(&bytes, &key, &a.run, &a.name, a.seq, &a.nonce);
    if a.v == FORMAT_VERSION {
        assert_eq!(
            got.as_ref(),
            Some(&a),
            "a sealed ack was not taken as sealed"
        );
    } else {
        assert_eq!(got, None, "an ack of format {} was taken", a.v);
    }
    let other = RunKey::from_bytes([8; 32]);
    assert_eq!(
        Ack::parse_verified(&bytes, &other, &a.run, &a.name, a.seq, &a.nonce),
        None,
        "taken under another key"
    );
    let next = a.seq.wrapping_add(1);
    assert_eq!(
        Ack::parse_verified(&bytes, &key, &a.run, &a.name, next, &a.nonce),
        None,
        "taken for another command"
    );
    let other_name = format!("{}x", a.name);
    assert_eq!(
        Ack::parse_verified(&bytes, &key, &a.run, &other_name, a.seq, &a.nonce),
        None,
        "taken for another file"
    );
});
