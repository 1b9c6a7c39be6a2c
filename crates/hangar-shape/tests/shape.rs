//! The workspace's shape, checked (issue 19): no function of non-test code over 150 lines, no
//! import circle between hangar-control's modules. The first tests show the checks can fail.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};

use hangar_shape::{
    Function, Literal, REGISTRY_HOSTS, SourceFile, circles, crate_roots, env_reads, functions,
    literals, module_files, module_graph, registry_mentions,
};

/// Longer than this and a function no longer fits in a reader's head (or on two screens).
/// Test doubles and test drivers (hangar-testkit, hangar-fakecloud, hangar-chaos) are held to it
/// too: they are read as often as the code they test.
const MAX_LINES: usize = 150;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every non-test source file of the workspace's crates, but those of the crates in `skip`.
fn source_files(skip: &[&str]) -> Vec<SourceFile> {
    let ws = workspace();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(ws.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .filter(|p| !skip.iter().any(|t| p.ends_with(t)))
        .collect();
    dirs.sort();
    let mut all = Vec::new();
    for d in dirs {
        for root in crate_roots(&d) {
            all.extend(module_files(&root).unwrap());
        }
    }
    all
}

fn workspace_functions() -> Vec<Function> {
    let all = functions(&source_files(&[]), &workspace());
    assert!(all.len() > 1000, "found only {} functions", all.len());
    all
}

#[test]
fn no_function_of_non_test_code_is_over_150_lines() {
    let long: Vec<String> = workspace_functions()
        .into_iter()
        .filter(|f| f.lines > MAX_LINES)
        .map(|f| {
            format!(
                "{}:{} {} is {} lines (at most {MAX_LINES}): split it into named steps",
                f.file.display(),
                f.line,
                f.name,
                f.lines
            )
        })
        .collect();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// Test support, which reads the test suite's own variables (`HANGAR_TEST_*`, the binaries to
/// test): the one-list rule is for what hangar itself reads.
const TEST_SUPPORT: &[&str] = &[
    "hangar-testkit",
    "hangar-chaos",
    "hangar-fakecloud",
    "hangar-shape",
];

fn hangar_variable(s: &str) -> bool {
    s.len() > "HANGAR_".len()
        && s.starts_with("HANGAR_")
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn named_variables() -> Vec<Literal> {
    literals(&source_files(TEST_SUPPORT), &workspace(), &hangar_variable)
}

/// Every `HANGAR_*` variable hangar reads is named once, in `hangar-protocol/src/env.rs`, with
/// what it means; everything else uses those names.
#[test]
fn hangar_variables_are_named_in_one_place() {
    let all = named_variables();
    let listed = all
        .iter()
        .filter(|l| l.file == Path::new("crates/hangar-protocol/src/env.rs"))
        .count();
    assert!(listed > 10, "env.rs names only {listed} variables");
    let elsewhere: Vec<String> = all
        .iter()
        .filter(|l| l.file != Path::new("crates/hangar-protocol/src/env.rs"))
        .map(|l| {
            format!(
                "{}:{} \"{}\": name it in hangar-protocol/src/env.rs and use that",
                l.file.display(),
                l.line,
                l.text
            )
        })
        .collect();
    assert!(elsewhere.is_empty(), "{}", elsewhere.join("\n"));
}

/// hangar's settings are read once: a `HANGAR_*` variable is read only through
/// `hangar_protocol::env::var` (a snapshot of the environment taken on first use), never with
/// `std::env::var` on its own, so no two parts of a process see it differently.
#[test]
fn hangar_variables_are_read_through_the_settings_snapshot() {
    let reads = env_reads(&source_files(TEST_SUPPORT), &workspace());
    assert!(
        reads.iter().any(|r| r.text == "PATH"),
        "found none of the direct reads of PATH: {reads:?}"
    );
    let direct: Vec<String> = reads
        .iter()
        .filter(|r| r.file != Path::new("crates/hangar-protocol/src/env.rs"))
        .filter(|r| r.text.starts_with("HANGAR_") || r.text.ends_with("_VAR"))
        .map(|r| {
            format!(
                "{}:{} reads {} directly: use hangar_protocol::env::var",
                r.file.display(),
                r.line,
                r.text
            )
        })
        .collect();
    assert!(direct.is_empty(), "{}", direct.join("\n"));
}

#[test]
fn a_direct_read_of_a_hangar_variable_is_found_and_test_code_is_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "src/lib.rs",
        "use hangar_protocol::env::HANGAR_X;\npub fn a() { let _ = std::env::var(HANGAR_X); let _ = hangar_protocol::env::var(HANGAR_X); let _ = std::env::var_os(\"PATH\"); }\n#[cfg(test)]\nmod t { fn b() { let _ = std::env::var(super::HANGAR_X); } }\n",
    );
    let files = module_files(&root.join("src/lib.rs")).unwrap();
    let found: Vec<(String, usize)> = env_reads(&files, root)
        .into_iter()
        .map(|r| (r.text, r.line))
        .collect();
    assert_eq!(found, vec![("HANGAR_X".to_string(), 2), ("PATH".into(), 2)]);
}

#[test]
fn hangar_control_modules_import_each_other_in_no_circle() {
    let files = module_files(&workspace().join("crates/hangar-control/src/lib.rs")).unwrap();
    let graph = module_graph(&files);
    assert!(graph.len() > 5, "read only {graph:?}");
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "modules of hangar-control that import each other in a circle: {found:?}\nthe graph: {graph:#?}"
    );
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn a_circle_through_use_paths_and_reexports_is_found_and_test_code_is_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "src/lib.rs",
        "mod a;\nmod b;\nmod c;\npub use c::Thing;\n#[cfg(test)]\nmod tests;\n",
    );
    // a -> b through a `use`; b -> c through the root's re-export, named inside a macro call;
    // c -> a from a submodule of c through `super::super::`.
    write(root, "src/a.rs", "use crate::b::f;\npub fn g() { f() }\n");
    write(
        root,
        "src/b.rs",
        "pub fn f() { let _ = format!(\"{:?}\", crate::Thing); }\n",
    );
    write(
        root,
        "src/c/mod.rs",
        "mod inner;\n#[derive(Debug)]\npub struct Thing;\n",
    );
    write(
        root,
        "src/c/inner.rs",
        "pub fn h() { super::super::a::g() }\n",
    );
    // Test code importing everything is no edge, and is not even read.
    write(root, "src/tests.rs", "this is not rust {{{");
    let files = module_files(&root.join("src/lib.rs")).unwrap();
    let graph = module_graph(&files);
    assert_eq!(
        circles(&graph),
        vec![vec!["a".to_string(), "b".into(), "c".into()]],
        "{graph:#?}"
    );
    // Without c's use of a there is no circle.
    write(root, "src/c/inner.rs", "pub fn h() {}\n");
    let files = module_files(&root.join("src/lib.rs")).unwrap();
    assert!(circles(&module_graph(&files)).is_empty());
}

#[test]
fn a_functions_length_runs_from_fn_to_its_closing_brace_and_skips_tests() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let body = "    let _ = 1;\n".repeat(160);
    write(
        root,
        "src/lib.rs",
        &format!(
            "/// doc\npub fn long() {{\n{body}}}\nstruct S;\nimpl S {{\n    fn short(&self) {{}}\n}}\n#[cfg(test)]\nmod t {{\n    fn also_long() {{\n{body}}}\n}}\n"
        ),
    );
    let files = module_files(&root.join("src/lib.rs")).unwrap();
    let found: Vec<(String, usize)> = functions(&files, root)
        .into_iter()
        .map(|f| (f.name, f.lines))
        .collect();
    assert_eq!(
        found,
        vec![("long".to_string(), 162), ("S::short".into(), 1)]
    );
}

/// No package registry's host name in the code, scripts, fixtures or docs (issue 23): the
/// scripts use the mirror the machine's package manager is configured with, the examples
/// `example.com`-style names.
#[test]
fn no_package_registry_is_named() {
    let found = registry_mentions(&workspace()).unwrap();
    let lines: Vec<String> = found
        .iter()
        .map(|m| format!("{}:{} names {}", m.file.display(), m.line, m.host))
        .collect();
    assert!(lines.is_empty(), "{}", lines.join("\n"));
}

#[test]
fn a_registry_named_anywhere_is_found_but_in_lock_files_and_build_output() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (npm, deb) = (
        format!("{}{}", REGISTRY_HOSTS[0].0, REGISTRY_HOSTS[0].1),
        format!("{}{}", REGISTRY_HOSTS[6].0, REGISTRY_HOSTS[6].1),
    );
    write(
        root,
        "README.md",
        &format!("intro\nnpm install --registry https://{npm}/\n"),
    );
    write(
        root,
        "scripts/x",
        &format!("mirror=http://{}/debian\n", deb.to_uppercase()),
    );
    write(root, "Cargo.lock", &format!("source = \"{npm}\"\n"));
    write(root, "target/debug/log.txt", &format!("{npm}\n"));
    write(root, ".tools/npm/package.json", &format!("{npm}\n"));
    write(root, "fuzz/corpus/env/1", &format!("{npm}\n"));
    std::fs::write(root.join("blob.bin"), [0xff, 0xfe, 0x00]).unwrap();
    let found: Vec<(String, usize, String)> = registry_mentions(root)
        .unwrap()
        .into_iter()
        .map(|m| (m.file.display().to_string(), m.line, m.host))
        .collect();
    assert_eq!(
        found,
        [
            ("README.md".to_owned(), 2, npm.clone()),
            ("scripts/x".to_owned(), 1, deb.clone()),
        ]
    );
}
