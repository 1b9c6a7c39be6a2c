//! The driver's answer to a command, written to `acks/<command file name>.ack`.
//!
//! # Wire form
//! ```json
//! {"v":1,"run":"r-…","name":"000003-9f0c1a2b.cmd","seq":3,"nonce":"9f0c…","status":"refused",
//!  "reason":"replay: sequence number 3 is not above 7, the last one taken","created_ms":…,"mac":"…"}
//! ```
//! | field | meaning |
//! |---|---|
//! | `name` | the command's file name in `in/` (binds the ack to the file the client wrote) |
//! | `seq`, `nonce` | the command's, or `0` / `""` when the file could not be read as a command |
//! | `status` | `done` (carried out), `refused` (nothing was executed; `reason` says why), `ended` ("the turn has ended": the harness had exited or the turn was over before the command could be passed on) |
//! | `reason` | empty for `done` |
//!
//! # Canonical encoding
//! ```text
//! "hangar.ack.v1" 0x00
//! u32 v | str run | str name | u64 seq | str nonce | str status | str reason | i64 created_ms
//! ```
//! The client ignores an ack whose MAC does not verify, or whose `run`, `name`, `seq` or `nonce`
//! are not those of the command it sent.

use serde::{Deserialize, Serialize};

use crate::FORMAT_VERSION;
use crate::key::RunKey;
use crate::seal::Canon;

const DOMAIN: &str = "hangar.ack.v1";

crate::words::words!(
    /// The outcome a driver reports for a command.
    AckStatus ("ack status", "done, refused, ended") {
        Done = "done",
        Refused = "refused",
        Ended = "ended",
    }
);

/// A signed answer (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub v: u32,
    pub run: String,
    pub name: String,
    pub seq: u64,
    pub nonce: String,
    pub status: AckStatus,
    pub reason: String,
    pub created_ms: i64,
    pub mac: String,
}

impl Ack {
    /// Builds and seals an ack.
    pub fn seal(
        key: &RunKey,
        run: &str,
        name: &str,
        seq: u64,
        nonce: &str,
        status: AckStatus,
        reason: &str,
    ) -> Ack {
        let mut a = Ack {
            v: FORMAT_VERSION,
            run: run.to_owned(),
            name: name.to_owned(),
            seq,
            nonce: nonce.to_owned(),
            status,
            reason: reason.to_owned(),
            created_ms: crate::now_ms(),
            mac: String::new(),
        };
        a.mac = a.canon().mac_hex(key);
        a
    }

    fn canon(&self) -> Canon {
        Canon::new(DOMAIN)
            .u32(self.v)
            .str(&self.run)
            .str(&self.name)
            .u64(self.seq)
            .str(&self.nonce)
            .str(self.status.as_str())
            .str(&self.reason)
            .i64(self.created_ms)
    }

    /// Whether the MAC verifies under `key` (constant-time compare).
    pub fn mac_ok(&self, key: &RunKey) -> bool {
        self.canon().verify_hex(key, &self.mac)
    }

    /// Seals the ack as its fields stand. For `fuzz/` only (built with `--cfg fuzzing`).
    #[cfg(fuzzing)]
    pub fn reseal(&mut self, key: &RunKey) {
        self.mac = self.canon().mac_hex(key);
    }

    /// The file bytes (one JSON line).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// Parses ack file bytes and checks that it is authentic and answers the given command.
    /// Any mismatch gives `None`: the caller treats the file as if it were not there.
    pub fn parse_verified(
        bytes: &[u8],
        key: &RunKey,
        run: &str,
        name: &str,
        seq: u64,
        nonce: &str,
    ) -> Option<Ack> {
        let a: Ack = serde_json::from_slice(bytes).ok()?;
        let matches = a.v == FORMAT_VERSION
            && a.run == run
            && a.name == name
            && a.seq == seq
            && a.nonce == nonce;
        (matches && a.mac_ok(key)).then_some(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_authentic_matching_ack_is_accepted() {
        let k = RunKey::from_bytes([1; 32]);
        let a = Ack::seal(&k, "r", "1.cmd", 1, "aa", AckStatus::Done, "");
        let b = a.to_bytes();
        assert!(Ack::parse_verified(&b, &k, "r", "1.cmd", 1, "aa").is_some());
        assert!(
            Ack::parse_verified(&b, &RunKey::from_bytes([2; 32]), "r", "1.cmd", 1, "aa").is_none()
        );
        assert!(Ack::parse_verified(&b, &k, "r", "2.cmd", 1, "aa").is_none());
        assert!(Ack::parse_verified(&b, &k, "r", "1.cmd", 2, "aa").is_none());
        assert!(Ack::parse_verified(&b[..b.len() / 2], &k, "r", "1.cmd", 1, "aa").is_none());
        let mut forged = a.clone();
        forged.status = AckStatus::Refused;
        assert!(Ack::parse_verified(&forged.to_bytes(), &k, "r", "1.cmd", 1, "aa").is_none());
    }
}
