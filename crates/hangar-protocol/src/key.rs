//! The per-run key: 32 bytes from the OS CSPRNG, never printed.

use std::fmt;
use std::io;
use std::path::Path;

/// Length of a run key in bytes.
pub const KEY_LEN: usize = 32;

/// A run's HMAC key. `Debug` and `Display` print `[redacted]`; the bytes leave this type only
/// through [`RunKey::expose`] and the key file.
#[derive(Clone, PartialEq, Eq)]
pub struct RunKey([u8; KEY_LEN]);

impl RunKey {
    /// A fresh key from the operating system's CSPRNG.
    pub fn generate() -> io::Result<RunKey> {
        let mut bytes = [0u8; KEY_LEN];
        getrandom::fill(&mut bytes)
            .map_err(|e| io::Error::other(format!("OS random source: {e}")))?;
        Ok(RunKey(bytes))
    }

    /// A key from raw bytes (tests and the vault).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> RunKey {
        RunKey(bytes)
    }

    /// The raw bytes, for sealing and for the vault.
    pub fn expose(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The key file's content: 64 lowercase hex digits and a newline.
    pub fn to_file_text(&self) -> String {
        let mut s = hex::encode(self.0);
        s.push('\n');
        s
    }

    /// Parses a key file's content (64 hex digits, surrounding whitespace ignored).
    pub fn from_file_text(text: &str) -> io::Result<RunKey> {
        let raw = hex::decode(text.trim())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "key file is not hex"))?;
        let bytes: [u8; KEY_LEN] = raw.try_into().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "key file does not hold 32 bytes",
            )
        })?;
        Ok(RunKey(bytes))
    }

    /// Reads a key file.
    pub fn read_file(path: &Path) -> io::Result<RunKey> {
        let text = std::fs::read_to_string(path)?;
        RunKey::from_file_text(&text)
    }
}

impl fmt::Debug for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunKey([redacted])")
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_bytes() {
        let k = RunKey::from_bytes([0xab; KEY_LEN]);
        assert_eq!(format!("{k:?}"), "RunKey([redacted])");
        assert_eq!(format!("{k}"), "[redacted]");
        assert!(!format!("{k:?}{k}").contains("ab"));
    }

    #[test]
    fn file_text_round_trips_and_rejects_short_keys() {
        let k = RunKey::generate().unwrap();
        assert_eq!(RunKey::from_file_text(&k.to_file_text()).unwrap(), k);
        assert!(RunKey::from_file_text("abcd").is_err());
        assert!(RunKey::from_file_text("zz").is_err());
    }

    #[test]
    fn generated_keys_differ() {
        assert_ne!(RunKey::generate().unwrap(), RunKey::generate().unwrap());
    }
}
