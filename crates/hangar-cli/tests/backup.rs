//! `hangar backup FILE` and `hangar restore FILE` (issue 23, item 6): a copy taken while
//! `hangar serve` runs comes back in another home and its audit log verifies there; a copy
//! whose audit log was changed is refused and the store in place is untouched; a restore over a
//! store keeps the one it replaces; nothing is overwritten; on PostgreSQL pg_dump is named.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn hangar(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hangar"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HANGAR_HOME", home.join("hangar"))
        // No server of anyone else's is taken for this home's.
        .env("HANGAR_URL", "http://127.0.0.1:9")
        .args(args);
    if let Some(d) = std::env::var_os("HANGAR_DRIVER_BIN") {
        c.env("HANGAR_DRIVER_BIN", d);
    }
    c
}

fn ok(home: &Path, args: &[&str]) -> String {
    let out = hangar(home, args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sqlite3(db: &Path, sql: &str) {
    let out = Command::new("sqlite3").arg(db).arg(sql).output().unwrap();
    assert!(out.status.success(), "sqlite3 {sql}: {}", text(&out));
}

#[test]
fn a_backup_taken_while_serving_comes_back_elsewhere_and_verifies() {
    let a = tempfile::tempdir().unwrap();
    ok(a.path(), &["person", "add", "--admin", "ada@example.com"]);
    ok(
        a.path(),
        &["token", "create", "--person", "ada@example.com"],
    );
    let mut child = hangar(a.path(), &["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening: "), "{line}");
    let serving = Serving(child);
    // Written while it serves, then copied while it serves.
    ok(a.path(), &["person", "add", "bob@example.com"]);
    let copy = a.path().join("copy.db");
    let said = ok(a.path(), &["backup", copy.to_str().unwrap()]);
    assert!(said.contains("master key"), "{said}");
    // Sealed secrets, token hashes, prompts: the copy is its owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&copy), 0o600);
    let again = hangar(a.path(), &["backup", copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("never overwrites"));
    // Not over a store in use, whatever address its server listens on.
    let busy = hangar(a.path(), &["restore", copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(2), "{}", text(&busy));
    assert!(
        text(&busy).contains("is using the store"),
        "{}",
        text(&busy)
    );
    drop(serving);

    // Another home, with the key kept apart from the copy.
    let b = tempfile::tempdir().unwrap();
    let no_key = hangar(b.path(), &["restore", copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(no_key.status.code(), Some(2), "{}", text(&no_key));
    assert!(text(&no_key).contains("no master key"));
    std::fs::create_dir_all(b.path().join("hangar")).unwrap();
    std::fs::copy(
        a.path().join("hangar/master.key"),
        b.path().join("hangar/master.key"),
    )
    .unwrap();
    // A copy that went through a careless hand comes back as its owner's alone.
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let said = ok(b.path(), &["restore", copy.to_str().unwrap()]);
    assert!(said.contains("audit log intact"), "{said}");
    assert_eq!(mode(&b.path().join("hangar/hangar.db")), 0o600);
    assert!(ok(b.path(), &["audit", "verify"]).contains("audit log intact"));
    let people = ok(b.path(), &["person", "list"]);
    assert!(
        people.contains("ada@example.com") && people.contains("bob@example.com"),
        "{people}"
    );

    // A copy whose audit log was changed is refused; the store in place stays.
    let forged = a.path().join("forged.db");
    std::fs::copy(&copy, &forged).unwrap();
    sqlite3(
        &forged,
        "UPDATE audit_log SET action = 'person.removed' WHERE seq = (SELECT MIN(seq) FROM audit_log)",
    );
    let refused = hangar(b.path(), &["restore", forged.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("audit log is broken"),
        "{}",
        text(&refused)
    );
    assert!(ok(b.path(), &["person", "list"]).contains("bob@example.com"));

    // Over a store: the one it replaces is kept beside it.
    ok(b.path(), &["restore", copy.to_str().unwrap()]);
    let kept = std::fs::read_dir(b.path().join("hangar"))
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("hangar.db.before-restore-")
        });
    assert!(kept, "the replaced store is gone");
}

#[test]
fn on_postgresql_the_backup_names_pg_dump() {
    let Ok(pg) = std::env::var("HANGAR_TEST_DATABASE_URL") else {
        panic!(
            "HANGAR_TEST_DATABASE_URL is not set: url=$(scripts/start-postgres) && export \"$url\""
        );
    };
    let a = tempfile::tempdir().unwrap();
    let out = hangar(a.path(), &["backup", a.path().join("x").to_str().unwrap()])
        .env("HANGAR_DATABASE_URL", pg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("pg_dump"), "{}", text(&out));
}
