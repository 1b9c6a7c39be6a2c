//! `hangar serve` over HTTPS (issue 20, Deliver 7): a certificate signed by a private CA made
//! here with the real openssl, the CLI trusting it through `HANGAR_CA_FILE`; without that CA the
//! CLI refuses the server (and never falls back to its own store), and nothing answers in clear.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A CA, and a certificate it signed for 127.0.0.1 with its key: (ca.pem, cert.pem, key.pem).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let made = hangar_testkit::TestCa::make(dir, "IP:127.0.0.1").unwrap();
    (made.ca, made.cert, made.key)
}

fn hangar(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HANGAR_HOME", home.join("hangar"));
    c
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `hangar serve` with TLS on a free port of 127.0.0.1; its URL.
fn serve_tls(home: &Path, cert: &Path, key: &Path) -> (Serve, String) {
    let mut child = hangar(home)
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening: ")
        .unwrap_or_else(|| panic!("not the listening line: {line:?}"))
        .to_owned();
    (Serve(child), url)
}

#[test]
fn the_cli_reaches_an_https_server_through_its_ca_and_refuses_it_without() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (_serve, url) = serve_tls(&home, &cert, &key);
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    // Trusting the CA, `hangar sessions` goes to the server (its list is empty).
    let out = hangar(&home)
        .env("HANGAR_URL", &url)
        .env("HANGAR_CA_FILE", &ca)
        .args(["sessions", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Without the CA the server's certificate is not trusted: the CLI says so and fails; it
    // does not take the server for absent and answer from the store on this machine instead.
    let out = hangar(&home)
        .env("HANGAR_URL", &url)
        .args(["sessions", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "answered without trusting the server: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        err.contains("certificate") && err.contains("HANGAR_CA_FILE"),
        "{err}"
    );

    // Nothing answers in clear on the TLS port.
    let plain = url.replacen("https://", "http://", 1);
    let out = hangar(&home)
        .env("HANGAR_URL", &plain)
        .args(["sessions", "--json"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "answered in clear: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_wrong_certificate_or_key_is_refused_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // The CA's certificate with the leaf's key: not a pair.
    let out = hangar(&home)
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&ca)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("do not make a pair"), "{err}");
    // A key file given as the certificate.
    let out = hangar(&home)
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&key)
        .arg("--tls-key")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert"));
}
