//! HMAC-SHA256 over a canonical byte encoding.
//!
//! The canonical encoding is a domain tag followed by fields, each either a big-endian integer of
//! fixed width or a byte string prefixed by its length as a big-endian `u32`. JSON is never
//! signed as written: the body is signed in its canonical form (see [`canonical_json`]), so two
//! writers that format JSON differently still agree on the MAC.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::key::RunKey;

type HmacSha256 = Hmac<Sha256>;

/// Accumulates the canonical encoding of one message.
pub(crate) struct Canon {
    bytes: Vec<u8>,
}

impl Canon {
    /// Starts an encoding with a domain tag (e.g. `hangar.command.v1`) and a NUL byte, so a
    /// command can never be mistaken for an ack or the other way round.
    pub(crate) fn new(domain: &str) -> Canon {
        let mut bytes = Vec::with_capacity(256);
        bytes.extend_from_slice(domain.as_bytes());
        bytes.push(0);
        Canon { bytes }
    }

    pub(crate) fn u32(mut self, v: u32) -> Canon {
        self.bytes.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn u64(mut self, v: u64) -> Canon {
        self.bytes.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn i64(mut self, v: i64) -> Canon {
        self.bytes.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A length-prefixed byte string. Fields longer than `u32::MAX` cannot occur (commands are
    /// capped at 1 MiB); the length saturates rather than wrapping.
    pub(crate) fn bytes(mut self, v: &[u8]) -> Canon {
        let len = u32::try_from(v.len()).unwrap_or(u32::MAX);
        self.bytes.extend_from_slice(&len.to_be_bytes());
        self.bytes.extend_from_slice(v);
        self
    }

    pub(crate) fn str(self, v: &str) -> Canon {
        self.bytes(v.as_bytes())
    }

    /// The HMAC-SHA256 of the encoding, as 64 lowercase hex digits.
    pub(crate) fn mac_hex(&self, key: &RunKey) -> String {
        hex::encode(mac(key, &self.bytes))
    }

    /// Checks a hex MAC in constant time (through `hmac`'s `verify_slice`).
    pub(crate) fn verify_hex(&self, key: &RunKey, mac_hex: &str) -> bool {
        let Ok(tag) = hex::decode(mac_hex) else {
            return false;
        };
        match HmacSha256::new_from_slice(key.expose()) {
            Ok(mut m) => {
                m.update(&self.bytes);
                m.verify_slice(&tag).is_ok()
            }
            Err(_) => false,
        }
    }

    #[cfg(test)]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

fn mac(key: &RunKey, data: &[u8]) -> [u8; 32] {
    match HmacSha256::new_from_slice(key.expose()) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().into()
        }
        // HMAC takes keys of any length; a 32-byte key cannot be refused.
        Err(_) => [0u8; 32],
    }
}

/// The canonical form of a JSON value: compact (no whitespace), object keys sorted by their
/// UTF-8 bytes, strings escaped as `serde_json` escapes them, numbers as `serde_json` prints them
/// after parsing. This crate's `serde_json` has no `preserve_order`, so `Value` objects are
/// `BTreeMap`s and print sorted.
pub(crate) fn canonical_json(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{ "b": 1, "a": {"d": [1, 2], "c": "x"} }"#).unwrap();
        assert_eq!(
            canonical_json(&a),
            br#"{"a":{"c":"x","d":[1,2]},"b":1}"#.to_vec()
        );
        assert_eq!(
            canonical_json(&json!({"b":1,"a":{"c":"x","d":[1,2]}})),
            canonical_json(&a)
        );
    }

    #[test]
    fn encoding_is_length_prefixed_so_fields_cannot_slide() {
        let k = RunKey::from_bytes([7; 32]);
        let one = Canon::new("t").str("ab").str("c");
        let two = Canon::new("t").str("a").str("bc");
        assert_ne!(one.as_bytes(), two.as_bytes());
        assert_ne!(one.mac_hex(&k), two.mac_hex(&k));
        assert_eq!(one.as_bytes(), b"t\0\0\0\0\x02ab\0\0\0\x01c");
    }

    #[test]
    fn verify_accepts_only_the_right_mac_and_key() {
        let k = RunKey::from_bytes([7; 32]);
        let c = Canon::new("t").u64(3).i64(-1).u32(9);
        let m = c.mac_hex(&k);
        assert!(c.verify_hex(&k, &m));
        assert!(!c.verify_hex(&RunKey::from_bytes([8; 32]), &m));
        assert!(!c.verify_hex(&k, &m[..62]));
        assert!(!c.verify_hex(&k, "not hex"));
        let mut flipped = m.into_bytes();
        flipped[0] = if flipped[0] == b'0' { b'1' } else { b'0' };
        assert!(!c.verify_hex(&k, std::str::from_utf8(&flipped).unwrap()));
    }
}
