//! The vault: a master key in a file and the authenticated cipher that seals run keys and
//! credentials before they reach the database, so the database alone reveals no key.
//!
//! - The master key is 32 bytes from the OS CSPRNG, stored as 64 hex digits and a newline in a
//!   file of mode 0600 ([`Vault::open_or_create`]); a key file that its group or others can
//!   read is refused. Which file (`$HANGAR_HOME/master.key`, `HANGAR_MASTER_KEY_FILE`) is the
//!   caller's choice.
//! - Sealing is XChaCha20-Poly1305 (RustCrypto) with a fresh random 24-byte nonce per value.
//!   A sealed value is `0x01 || nonce (24) || ciphertext || tag (16)`.
//! - The associated data is `hangar-vault-v1:PURPOSE:ROW` (e.g. `run-key:RUN_ID`,
//!   `credential:NAME`), so a sealed value copied into another row, or used for another
//!   purpose, does not open.
//! - [`crate::Store::with_vault`] seals a constant (`key-check:vault`) at first use and opens it
//!   at every later start, so a wrong master key is caught at startup
//!   ([`VaultError::WrongMasterKey`]) instead of at the first secret.
//!
//! Non-goals: no key rotation yet, no OS keyrings or KMS, no protection against someone who can
//! read both the key file and the database.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

const FORMAT_V1: u8 = 1;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const KEY_LEN: usize = 32;

/// What the vault can fail with.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The key file could not be read or written.
    #[error("master key file {}: {what}: {source}", path.display())]
    Io {
        /// The key file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The key file can be read by its group or by others.
    #[error(
        "master key file {} has mode {mode:04o}: its group or others can read it; run `chmod 600 {}` (and treat the key as exposed if others could read it)",
        path.display(), path.display()
    )]
    KeyFileExposed {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file does not hold a key.
    #[error(
        "master key file {} does not hold a master key (64 hex digits): {why}; restore it from your backup",
        path.display()
    )]
    BadKeyFile {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
    /// The master key is not the one the database was sealed with.
    #[error(
        "the master key in {} is not the one this database's secrets were sealed with; point HANGAR_MASTER_KEY_FILE at the right key file (or restore it from backup): without it the run keys and credentials in this database cannot be read",
        key_file.display()
    )]
    WrongMasterKey {
        /// The key file in use.
        key_file: PathBuf,
    },
    /// A sealed value did not open.
    #[error(
        "the sealed {purpose} of {row:?} does not open: it was altered, copied from another row, or sealed under another master key"
    )]
    CannotOpen {
        /// What the value is (`run-key`, `credential`, ...).
        purpose: String,
        /// Its row.
        row: String,
    },
    /// The OS random source failed.
    #[error("the operating system's random source failed: {0}")]
    Random(String),
}

/// Bytes that must not be printed: `Debug` and `Display` show `[redacted]`, and the memory is
/// wiped when dropped.
#[derive(Clone)]
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    /// Wraps bytes.
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(Zeroizing::new(bytes))
    }

    /// The bytes themselves.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for Secret {
    fn from(b: &[u8]) -> Secret {
        Secret::new(b.to_vec())
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret::new(s.as_bytes().to_vec())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The master key, ready to seal and open. `Debug` shows the key file, never the key.
pub struct Vault {
    cipher: XChaCha20Poly1305,
    path: PathBuf,
}

impl fmt::Debug for Vault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vault")
            .field("key_file", &self.path)
            .finish()
    }
}

fn random<const N: usize>() -> Result<[u8; N], VaultError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| VaultError::Random(e.to_string()))?;
    Ok(b)
}

fn associated_data(purpose: &str, row: &str) -> Vec<u8> {
    format!("hangar-vault-v1:{purpose}:{row}").into_bytes()
}

impl Vault {
    /// Opens the master key in `path`, creating it (mode 0600, its folder 0700 if missing)
    /// when the file does not exist. Two processes creating it at once end up with the same
    /// key: the file appears whole, by a hard link that never replaces an existing file.
    pub fn open_or_create(path: &Path) -> Result<Vault, VaultError> {
        let io = |what| {
            move |source| VaultError::Io {
                path: path.to_owned(),
                what,
                source,
            }
        };
        if !path.exists() {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(io("creating its folder"))?;
            }
            let key = Zeroizing::new(random::<KEY_LEN>()?);
            let text = Zeroizing::new(format!("{}\n", hex::encode(*key)));
            let tmp = path.with_extension(format!("tmp-{}", hex::encode(random::<6>()?)));
            let written = (|| {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&tmp)?;
                f.write_all(text.as_bytes())?;
                f.sync_all()?;
                match std::fs::hard_link(&tmp, path) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
                    _ => Ok(()),
                }
            })();
            let _ = std::fs::remove_file(&tmp);
            written.map_err(io("creating it"))?;
        }
        Vault::open(path)
    }

    /// Opens an existing master key file.
    pub fn open(path: &Path) -> Result<Vault, VaultError> {
        let io = |what| {
            move |source| VaultError::Io {
                path: path.to_owned(),
                what,
                source,
            }
        };
        let meta = std::fs::metadata(path).map_err(io("reading it"))?;
        let bad = |why| VaultError::BadKeyFile {
            path: path.to_owned(),
            why,
        };
        if !meta.is_file() {
            return Err(bad("it is not a regular file"));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(VaultError::KeyFileExposed {
                path: path.to_owned(),
                mode,
            });
        }
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(io("reading it"))?);
        let raw = Zeroizing::new(hex::decode(text.trim()).map_err(|_| bad("it is not hex"))?);
        let key: [u8; KEY_LEN] = raw
            .as_slice()
            .try_into()
            .map_err(|_| bad("it does not hold 32 bytes"))?;
        let key = Zeroizing::new(key);
        Ok(Vault {
            cipher: XChaCha20Poly1305::new(&Key::from(*key)),
            path: path.to_owned(),
        })
    }

    /// The key file this vault was opened from.
    pub fn key_file(&self) -> &Path {
        &self.path
    }

    /// Seals `plaintext` for `purpose` (e.g. `credential`) in `row` (e.g. its name).
    pub fn seal(&self, purpose: &str, row: &str, plaintext: &[u8]) -> Result<Vec<u8>, VaultError> {
        let nonce = random::<NONCE_LEN>()?;
        let aad = associated_data(purpose, row);
        let ct = self
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .map_err(|_| VaultError::CannotOpen {
                purpose: purpose.to_owned(),
                row: row.to_owned(),
            })?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + ct.len());
        out.push(FORMAT_V1);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Opens a value sealed by [`Vault::seal`] with the same `purpose` and `row`.
    pub fn unseal(&self, purpose: &str, row: &str, sealed: &[u8]) -> Result<Secret, VaultError> {
        let fail = || VaultError::CannotOpen {
            purpose: purpose.to_owned(),
            row: row.to_owned(),
        };
        let Some((&FORMAT_V1, rest)) = sealed.split_first() else {
            return Err(fail());
        };
        if rest.len() < NONCE_LEN + TAG_LEN {
            return Err(fail());
        }
        let (nonce, ct) = rest.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| fail())?;
        let aad = associated_data(purpose, row);
        let pt = self
            .cipher
            .decrypt(&XNonce::from(nonce), Payload { msg: ct, aad: &aad })
            .map_err(|_| fail())?;
        Ok(Secret::new(pt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_a_private_key_file_and_reopens_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home/master.key");
        let v = Vault::open_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim().len(), 64);
        let sealed = v.seal("credential", "gh", b"tok").unwrap();
        let again = Vault::open_or_create(&path).unwrap();
        assert_eq!(
            again.unseal("credential", "gh", &sealed).unwrap().expose(),
            b"tok"
        );
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }

    #[test]
    fn sealed_values_are_bound_to_purpose_and_row() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vault::open_or_create(&dir.path().join("k")).unwrap();
        let a = v.seal("run-key", "run-1", b"secret").unwrap();
        let b = v.seal("run-key", "run-1", b"secret").unwrap();
        assert_ne!(a, b, "fresh nonce each time");
        assert_eq!(a.len(), 1 + NONCE_LEN + 6 + TAG_LEN);
        assert!(v.unseal("run-key", "run-2", &a).is_err());
        assert!(v.unseal("credential", "run-1", &a).is_err());
        let mut flipped = a.clone();
        flipped[30] ^= 1;
        let err = v.unseal("run-key", "run-1", &flipped).unwrap_err();
        assert!(err.to_string().contains("does not open"), "{err}");
        assert!(v.unseal("run-key", "run-1", &a[..10]).is_err());
    }

    #[test]
    fn exposed_or_broken_key_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        Vault::open_or_create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Vault::open_or_create(&path).unwrap_err();
        assert!(matches!(
            err,
            VaultError::KeyFileExposed { mode: 0o644, .. }
        ));
        assert!(err.to_string().contains("chmod 600"), "{err}");
        std::fs::write(&path, "not a key\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = Vault::open(&path).unwrap_err();
        assert!(matches!(err, VaultError::BadKeyFile { .. }), "{err}");
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::from("hunter2");
        assert_eq!(format!("{s}"), "[redacted]");
        assert_eq!(format!("{s:?}"), "Secret([redacted])");
        let dir = tempfile::tempdir().unwrap();
        let v = Vault::open_or_create(&dir.path().join("k")).unwrap();
        let text = std::fs::read_to_string(v.key_file()).unwrap();
        assert!(!format!("{v:?}").contains(text.trim()));
    }
}
