//! TLS for the test doubles: a private CA and a server certificate made with the real `openssl`
//! (Debian's package), as an operator would, and rustls server settings from them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::TestkitError;

/// A CA and a certificate it signed: PEM files in a folder of the test's.
#[derive(Clone, Debug)]
pub struct TestCa {
    /// The CA's certificate (what a client is told to trust).
    pub ca: PathBuf,
    /// The server's certificate, signed by the CA.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), TestkitError> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| TestkitError::io("running openssl (Debian's openssl package)", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestkitError::io(
            format!("openssl {args:?}"),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
        ))
    }
}

impl TestCa {
    /// Makes, in `dir`, a CA (`ca.pem`) and a server certificate (`cert.pem`, `key.pem`)
    /// whose subjectAltName is `san` (e.g. `IP:127.0.0.1` or `DNS:tower.test`).
    pub fn make(dir: &Path, san: &str) -> Result<TestCa, TestkitError> {
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=hangar test CA",
        ]);
        openssl(dir, &ca)?;
        let mut csr = vec!["req"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "key.pem",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=hangar test server",
        ]);
        openssl(dir, &csr)?;
        std::fs::write(
            dir.join("leaf.ext"),
            format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"),
        )
        .map_err(|e| TestkitError::io("writing leaf.ext", e))?;
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "cert.pem",
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
            ],
        )?;
        Ok(TestCa {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        })
    }
}

/// rustls server settings (ring) from a PEM certificate chain and its PEM key.
pub(crate) fn server_config(
    cert: &Path,
    key: &Path,
) -> Result<Arc<rustls::ServerConfig>, TestkitError> {
    let bad = |what: String| TestkitError::io(what, std::io::Error::other("bad TLS material"));
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(format!("{}: {e}", cert.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(format!("{}: {e}", cert.display())))?;
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| bad(format!("{}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| bad(format!("TLS certificate and key: {e}")))?;
    Ok(Arc::new(config))
}
