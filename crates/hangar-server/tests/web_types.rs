//! The web page reads the API as its typedefs say: TypeScript's checker (`tsc`, pinned in
//! `scripts/install-tools`, which installs it from npm into `.tools/npm`; `HANGAR_TSC_BIN` names
//! another) reads `web/app.js`'s JSDoc types against the generated `web/api.d.ts`, so a field the
//! page reads that hangar-api renames or drops fails here, not in a person's browser.
//!
//! Without tsc these tests fail, saying what to run (CI runs `scripts/install-tools`, so they
//! never skip there unseen); `HANGAR_TEST_TSC=0` skips them, saying so, as `HANGAR_TEST_DOCKER=0`
//! does for the docker suites.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Strict, less what plain JavaScript cannot say without a rewrite: untyped parameters are
/// `any`, `null` is in every type, and a caught error is `any`. A property read on an API type
/// that the type does not have is still an error, which is what this check is for.
const FLAGS: &[&str] = &[
    "--noEmit",
    "--allowJs",
    "--checkJs",
    "--strict",
    "--noImplicitAny",
    "false",
    "--strictNullChecks",
    "false",
    "--useUnknownInCatchVariables",
    "false",
    "--target",
    "es2022",
    "--lib",
    "es2022,dom,dom.iterable",
    "--module",
    "esnext",
    "--moduleResolution",
    "bundler",
    "--pretty",
    "false",
];

fn web() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("web")
}

/// The pinned tsc, or `None` (said) when `HANGAR_TEST_TSC=0`.
fn tsc() -> Option<PathBuf> {
    if std::env::var("HANGAR_TEST_TSC").is_ok_and(|v| v == "0") {
        eprintln!("HANGAR_TEST_TSC=0: the web page's type check is skipped");
        return None;
    }
    let bin = std::env::var_os("HANGAR_TSC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/npm/node_modules/.bin/tsc")
        });
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-tools (installs the pinned TypeScript from npm into .tools/npm), set HANGAR_TSC_BIN, or set HANGAR_TEST_TSC=0 to skip this check",
        bin.display()
    );
    Some(bin)
}

/// Runs the check over `dir`'s `app.js` (and the `api.d.ts` it imports): passed, and what tsc said.
fn check(tsc: &Path, dir: &Path) -> (bool, String) {
    let out = Command::new(tsc)
        .args(FLAGS)
        .arg("app.js")
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tsc.display()));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn the_web_page_reads_the_api_as_its_typedefs_say() {
    let Some(tsc) = tsc() else { return };
    let (ok, said) = check(&tsc, &web());
    assert!(
        ok,
        "web/app.js does not type-check against web/api.d.ts:\n{said}"
    );
}

/// The check bites: the same page against typedefs where a field it reads (a board row's
/// `turns`) is renamed fails, naming the field.
#[test]
fn a_field_renamed_in_the_typedefs_fails_the_check() {
    let Some(tsc) = tsc() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(web().join("app.js"), dir.path().join("app.js")).unwrap();
    let types = std::fs::read_to_string(web().join("api.d.ts")).unwrap();
    let start = types
        .find("export interface BoardRow {")
        .expect("api.d.ts declares BoardRow");
    let end = start + types[start..].find("\n}\n").expect("BoardRow ends");
    let row = &types[start..end];
    let renamed = row.replace(
        "\n  turns: TurnSummary[];",
        "\n  turns_renamed: TurnSummary[];",
    );
    assert_ne!(
        row, renamed,
        "BoardRow has no `turns: TurnSummary[]` to rename"
    );
    let types = format!("{}{renamed}{}", &types[..start], &types[end..]);
    std::fs::write(dir.path().join("api.d.ts"), types).unwrap();

    let (ok, said) = check(&tsc, dir.path());
    assert!(!ok, "tsc passed a page that reads a renamed field:\n{said}");
    assert!(
        said.contains("Property 'turns' does not exist on type 'BoardRow'"),
        "tsc failed, but not on the renamed field:\n{said}"
    );
}
