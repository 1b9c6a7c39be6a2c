//! The driver's check of command files (`hangar_protocol::Verifier`): size, JSON, MAC,
//! version, run id, sequence, nonce, kind, body.
//!
//! Each input is up to 16 command files, one per line. Each line is checked twice by one
//! verifier, as a hostile writer of `in/` would send it:
//! 1. as written: it must never be taken unless its MAC verifies under the run key;
//! 2. when it reads as a command, sealed again with the run key (so the checks after the MAC
//!    are reached with any field values): the verdict must be the one a model of the checks
//!    gives (order of the checks, the sequence and nonce used up only by an authentic command),
//!    and a sealed command must never fail its MAC (the canonical encoding must survive the
//!    round trip through the file).
#![no_main]

use std::collections::HashSet;

use hangar_protocol::{
    Command, FORMAT_VERSION, Kind, MAX_COMMAND_BYTES, Refusal, RunKey, Verifier,
};
use libfuzzer_sys::fuzz_target;

const RUN: &str = "r-fuzz";
const KEY: [u8; 32] = [7; 32];

struct Model {
    last_seq: u64,
    nonces: HashSet<String>,
}

fuzz_target!(|data: &[u8]| {
    let key = RunKey::from_bytes(KEY);
    let mut v = Verifier::new(RUN, RunKey::from_bytes(KEY));
    let mut m = Model {
        last_seq: 0,
        nonces: HashSet::new(),
    };
    for line in data.split(|b| *b == b'\n').take(16) {
        // 1. As written.
        match v.check(line) {
            Ok(ok) => {
                assert!(ok.command.mac_ok(&key), "taken without a valid MAC");
                assert_eq!(ok.command.run, RUN);
                assert_eq!(ok.command.v, FORMAT_VERSION);
                assert!(ok.command.seq > m.last_seq, "sequence went backwards");
                assert!(m.nonces.insert(ok.command.nonce.clone()), "nonce reused");
                m.last_seq = ok.command.seq;
                assert_eq!(Kind::parse(&ok.command.kind), Some(ok.kind));
            }
            Err(rej) => {
                if let Some(c) = &rej.command {
                    if !c.mac_ok(&key) {
                        assert_eq!(rej.refusal, Refusal::BadMac);
                    } else if c.v == FORMAT_VERSION
                        && c.run == RUN
                        && c.seq > m.last_seq
                        && !m.nonces.contains(&c.nonce)
                    {
                        // Authentic and fresh: refused for its kind or body, number used up.
                        m.last_seq = c.seq;
                        m.nonces.insert(c.nonce.clone());
                    }
                }
            }
        }
        // 2. Sealed again with the key.
        let Ok(mut cmd) = serde_json::from_slice::<Command>(line) else {
            continue;
        };
        cmd.reseal(&key);
        let bytes = cmd.to_bytes();
        let got = v.check(&bytes);
        let expected: Option<Refusal> = if bytes.len() as u64 > MAX_COMMAND_BYTES {
            Some(Refusal::TooLarge)
        } else if cmd.v != FORMAT_VERSION {
            Some(Refusal::BadVersion(cmd.v))
        } else if cmd.run != RUN {
            Some(Refusal::WrongRun {
                got: cmd.run.clone(),
            })
        } else if cmd.seq <= m.last_seq {
            Some(Refusal::Replay {
                seq: cmd.seq,
                last: m.last_seq,
            })
        } else if m.nonces.contains(&cmd.nonce) {
            Some(Refusal::NonceReuse)
        } else {
            m.last_seq = cmd.seq;
            m.nonces.insert(cmd.nonce.clone());
            match Kind::parse(&cmd.kind) {
                None => Some(Refusal::UnknownKind(cmd.kind.clone())),
                // The body's check is the verifier's own; its verdict is compared below.
                Some(_) => None,
            }
        };
        match (got, expected) {
            (Ok(ok), None) => {
                assert_eq!(
                    ok.command, cmd,
                    "the command changed on its way through the file"
                );
                assert_eq!(Some(ok.kind), Kind::parse(&cmd.kind));
                if ok.kind.is_message() {
                    assert!(ok.command.text().is_some_and(|t| !t.is_empty()));
                }
                if matches!(ok.kind, Kind::Approve | Kind::Deny) {
                    assert!(ok.command.request_id().is_some_and(|t| !t.is_empty()));
                }
                // The same file again is a replay.
                let again = v.check(&bytes).map(|_| ()).map_err(|r| r.refusal);
                assert!(
                    matches!(again, Err(Refusal::Replay { .. })),
                    "a replayed command was not refused as a replay: {again:?}"
                );
            }
            (Err(rej), None) => {
                assert!(
                    matches!(rej.refusal, Refusal::BadBody { .. }),
                    "sealed {cmd:?}\nexpected ok or bad body, got {:?}",
                    rej.refusal
                );
            }
            (Ok(ok), Some(r)) => panic!("took {:?}, expected {r:?}", ok.command),
            (Err(rej), Some(r)) => assert_eq!(rej.refusal, r, "sealed {cmd:?}"),
        }
    }
});
