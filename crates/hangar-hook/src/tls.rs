//! HTTPS for the Tower client (issue 20, Deliver 7): rustls with ring's primitives (the same pair
//! `hangar serve` uses), blocking, std sockets only, so the hook stays a small static binary.
//!
//! Trust is the system's roots (`rustls-native-certs`: `SSL_CERT_FILE`, `SSL_CERT_DIR`, else the
//! distribution's bundle) plus the PEM certificates of `HANGAR_CA_FILE` (or the hook's
//! `--ca-file`), as the CLI does. A certificate that does not chain to one of them, or that does
//! not name Tower's host, ends the handshake: the caller fails closed on it.
//!
//! Plain `http://` is spoken only to a loopback host ([`plain_http_allowed`]): there the bytes
//! never leave the machine's kernel, so no key or passport can be read off a network, and a
//! Tower beside hangar (or behind a TLS-terminating proxy on the same machine, or the tests'
//! double) needs no certificate. Anything else in clear is refused before a connection is made.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::client::Fault;

/// Whether `host` (lower-case, no brackets) may be spoken to in clear: `localhost` or a
/// loopback address (127.0.0.0/8, ::1).
pub fn plain_http_allowed(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The client settings: the system's roots plus those of `ca_file`. Failing to read `ca_file`
/// is a fault (a named CA that cannot be used must not silently fall back to the system's).
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, Fault> {
    let mut roots = rustls::RootCertStore::empty();
    // A system bundle with an odd certificate still yields the rest; an empty one is fine when
    // a CA file is given.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(file) = ca_file {
        let shown = file.display();
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
            .map_err(|e| {
                Fault(format!(
                    "the CA file {shown} (HANGAR_CA_FILE) cannot be read: {e}"
                ))
            })?
            .collect::<Result<_, _>>()
            .map_err(|e| {
                Fault(format!(
                    "the CA file {shown} (HANGAR_CA_FILE) is not PEM certificates: {e}"
                ))
            })?;
        if certs.is_empty() {
            return Err(Fault(format!(
                "the CA file {shown} (HANGAR_CA_FILE) has no certificate in it"
            )));
        }
        for c in certs {
            roots.add(c).map_err(|e| {
                Fault(format!(
                    "the CA file {shown} (HANGAR_CA_FILE) holds a certificate rustls cannot use: {e}"
                ))
            })?;
        }
    }
    if roots.is_empty() {
        return Err(Fault(
            "no CA certificate to check Tower's certificate with: the system has no root store and HANGAR_CA_FILE is not set".into(),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Fault(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A connection to Tower (or through a proxy's tunnel to it): in clear to loopback, else TLS.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conn::Plain(_) => "Conn::Plain",
            Conn::Tls(_) => "Conn::Tls",
        })
    }
}

impl Conn {
    /// TLS over `tcp` to `host` (the name the certificate must carry). The handshake happens on
    /// the first read or write, within the socket's timeouts.
    pub fn tls(
        config: Arc<rustls::ClientConfig>,
        host: &str,
        tcp: TcpStream,
    ) -> Result<Conn, Fault> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            Fault(format!(
                "Tower's host {host:?} is not a TLS server name: {e}"
            ))
        })?;
        let c =
            rustls::ClientConnection::new(config, name).map_err(|e| Fault(format!("TLS: {e}")))?;
        Ok(Conn::Tls(Box::new(rustls::StreamOwned::new(c, tcp))))
    }

    /// The socket underneath (for timeouts).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &s.sock,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => match s.read(buf) {
                // A server that closes after its answer without close_notify: the answer's
                // length (checked by the caller) says whether it is whole.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
                r => r,
            },
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_may_be_spoken_to_in_clear() {
        for h in ["127.0.0.1", "127.8.9.1", "::1", "localhost"] {
            assert!(plain_http_allowed(h), "{h}");
        }
        for h in [
            "tower.example.com",
            "localhost.example.com",
            "tower.localhost",
            "0.0.0.0",
            "::",
        ] {
            assert!(!plain_http_allowed(h), "{h}");
        }
    }
}
