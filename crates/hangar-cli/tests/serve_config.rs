//! `hangar serve --config FILE` (and `HANGAR_CONFIG`): the file's settings take effect, a
//! variable set in the environment and a flag win over the file, and a key the file does not
//! know stops the server before it starts, naming the key.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

struct Serving {
    child: Child,
    url: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `hangar ARGS` with nothing of the test's environment but PATH, HOME and `vars`.
fn hangar(home: &Path, args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(vars.iter().copied())
        .args(args);
    if let Some(d) = std::env::var_os("HANGAR_DRIVER_BIN") {
        c.env("HANGAR_DRIVER_BIN", d);
    }
    c
}

fn serve(home: &Path, args: &[&str], vars: &[(&str, &str)]) -> Serving {
    let mut child = hangar(home, args, vars)
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
        .unwrap_or_else(|| panic!("hangar serve said {line:?}"))
        .to_owned();
    Serving { child, url }
}

/// The status line of `GET path`.
fn get(url: &str, path: &str) -> String {
    let addr = url.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines().next().unwrap_or_default().to_owned()
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_files_settings_take_effect_and_the_environment_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let (state, db_dir, other_dir) = (
        dir.path().join("state"),
        dir.path().join("db"),
        dir.path().join("other"),
    );
    for d in [&db_dir, &other_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    let port = free_port();
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:{port}\"\nhome = \"{}\"\ndatabase_url = \"sqlite://{}/from-file.db\"\nlog = \"warn\"\n",
            state.display(),
            db_dir.display()
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();

    // The file alone: its address, its home (the master key made there), its database.
    {
        let s = serve(dir.path(), &["serve", "--config", f], &[]);
        assert_eq!(s.url, format!("http://127.0.0.1:{port}"));
        assert!(get(&s.url, "/v1/health").contains("200"));
        assert!(state.join("master.key").is_file(), "home not from the file");
        assert!(
            db_dir.join("from-file.db").is_file(),
            "database not from the file"
        );
    }
    std::fs::remove_file(db_dir.join("from-file.db")).unwrap();

    // Named by HANGAR_CONFIG; the environment's database and the flag's address win.
    let env_db = format!("sqlite://{}/from-env.db", other_dir.display());
    let s = serve(
        dir.path(),
        &["serve", "--listen", "127.0.0.1:0"],
        &[("HANGAR_CONFIG", f), ("HANGAR_DATABASE_URL", &env_db)],
    );
    assert_ne!(
        s.url,
        format!("http://127.0.0.1:{port}"),
        "the flag lost to the file"
    );
    assert!(get(&s.url, "/v1/health").contains("200"));
    assert!(
        other_dir.join("from-env.db").is_file(),
        "the environment lost to the file"
    );
    assert!(
        !db_dir.join("from-file.db").exists(),
        "the file's database was opened though the environment named another"
    );
}

#[test]
fn a_key_the_file_does_not_know_stops_the_server_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\ndatabse_url = \"sqlite:///tmp/x.db\"\n",
    )
    .unwrap();
    let out = hangar(
        dir.path(),
        &["serve", "--config", file.to_str().unwrap()],
        &[],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown setting `databse_url`"), "{err}");
    assert!(
        err.contains(file.to_str().unwrap()),
        "the file is not named: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "it listened: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );

    let missing = dir.path().join("nope.toml");
    let out = hangar(
        dir.path(),
        &["serve", "--config", missing.to_str().unwrap()],
        &[],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot read the configuration file"), "{err}");
}

#[test]
fn serve_help_lists_the_files_settings_and_their_variables() {
    let dir = tempfile::tempdir().unwrap();
    let out = hangar(dir.path(), &["serve", "--help"], &[])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "--config",
        "database_url",
        "HANGAR_DATABASE_URL",
        "oidc.issuer",
        "HANGAR_CONFIG",
    ] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
}

/// An admin on the server's machine runs `hangar person add` with the service's
/// `HANGAR_CONFIG`: the command works on the store the file names, not on a default home.
#[test]
fn hangar_config_points_the_server_machines_commands_at_the_files_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("service-home");
    let file = dir.path().join("config.toml");
    std::fs::write(&file, format!("home = {:?}\n", store.to_str().unwrap())).unwrap();
    let out = hangar(
        dir.path(),
        &["person", "add", "ada@example.com"],
        &[("HANGAR_CONFIG", file.to_str().unwrap())],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        store.join("hangar.db").is_file(),
        "the file's home has no store"
    );
    let listed = hangar(
        dir.path(),
        &["person", "list", "--json"],
        &[("HANGAR_HOME", store.to_str().unwrap())],
    )
    .output()
    .unwrap();
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("ada@example.com"),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
}
