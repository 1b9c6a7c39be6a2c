//! The run-log parser's output, pinned. Every seed of the `runlog` fuzz target (real Claude Code
//! and Codex logs, hand-made odd lines) is parsed as a log, and every distinct line of them is
//! also parsed in thousands of mutated forms (each value replaced by every JSON type, removed,
//! wrapped in an array; each key of each object given twice, first or last; blanks around the
//! line), each from the parser's context just before that line. The events and the context
//! after each line are hashed per seed file and per source line, and compared with
//! `golden/parse.txt`, recorded from the parser that built a `serde_json::Value` tree of every
//! line (before the typed reader of the fields the events need): the typed reader must give
//! exactly what it gave, on every shape a line can take. Each line is also checked against
//! `parse_line_via_value` (the same lines read through a `Value`, the path of lines the direct
//! read refuses).
//!
//! `HANGAR_WRITE_GOLDEN=1 cargo test -p hangar-events --test parse_golden` rewrites the file
//! (only to record a deliberate change of the parser's output).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use hangar_events::{ParseContext, parse_line, parse_line_via_value};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn seeds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/runlog")
}

fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/parse.txt")
}

/// Lines no seed has: top-level values that are not objects, blanks, broken JSON, deep nesting.
fn extra_lines() -> Vec<String> {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let deep_obj = format!(
        r#"{{"type":"assistant","message":{{"content":[{{"type":"tool_use","id":"a","name":"b","input":{}1{}}}]}}}}"#,
        "[".repeat(130),
        "]".repeat(130)
    );
    [
        "",
        "   ",
        "[]",
        r#"["assistant",{"content":"x"}]"#,
        r#""type""#,
        "5",
        "null",
        "{}",
        r#"{"type":5}"#,
        r#"{"type":null}"#,
        r#"{"type":"assistant""#,
        r#"{"type":"assistant"} trailing"#,
        r#"{"type":"assistant",}"#,
        r#" {"type":"thread.started","thread_id":"t"}"#,
        "\t{\"type\":\"thread.started\",\"thread_id\":\"t\"}\r",
        r#"{"type":"user","message":{"content":"caf\u00e9 \ud83d\ude00 \"q\" \\ \n"}}"#,
        r#"{"type":"user","message":{"content":"\ud800"}}"#,
        r#"{"type":"result","usage":5,"total_cost_usd":1e400}"#,
        r#"{"type":"result","usage":null,"total_cost_usd":-0}"#,
        r#"{"type":"result","usage":{"input_tokens":-0,"output_tokens":1.0}}"#,
        r#"{"type":"result","usage":{"input_tokens":18446744073709551615,"cache_read_input_tokens":1}}"#,
        r#"{"type":"item.completed","item":{"id":"i","type":"command_execution","exit_code":-0,"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"i","type":"command_execution","exit_code":9223372036854775808,"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"i","type":"command_execution","exit_code":1e2,"status":"completed"}}"#,
        r#"{"type":"hangar.tree","tree":"t","ms":1,"tool_use_id":"x","tool_use_id":"y"}"#,
        r#"{"type":"hangar.tree","tree":"t","ms":1.5}"#,
        r#"{"type":"hangar.command","seq":1,"kind":"prompt","outcome":"done","name":"n","extra":[1]}"#,
        &deep,
        &deep_obj,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// One step of a path into a JSON value.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every path to a value in `v` (not the root), depth-first, at most `max` of them.
fn paths(v: &Value, max: usize) -> Vec<Vec<Step>> {
    fn walk(v: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>, max: usize) {
        if out.len() >= max || at.len() >= 6 {
            return;
        }
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    at.push(Step::Key(k.clone()));
                    out.push(at.clone());
                    walk(x, at, out, max);
                    at.pop();
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate().take(4) {
                    at.push(Step::Index(i));
                    out.push(at.clone());
                    walk(x, at, out, max);
                    at.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out, max);
    out.truncate(max);
    out
}

fn get_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match s {
            Step::Key(k) => cur.as_object_mut()?.get_mut(k)?,
            Step::Index(i) => cur.as_array_mut()?.get_mut(*i)?,
        };
    }
    Some(cur)
}

/// `v` with the value at `path` removed from its object or array.
fn removed(v: &Value, path: &[Step]) -> Option<Value> {
    let (last, parent) = path.split_last()?;
    let mut out = v.clone();
    let p = get_mut(&mut out, parent)?;
    match (last, p) {
        (Step::Key(k), Value::Object(o)) => {
            o.remove(k);
        }
        (Step::Index(i), Value::Array(a)) if *i < a.len() => {
            a.remove(*i);
        }
        _ => return None,
    }
    Some(out)
}

fn replaced(v: &Value, path: &[Step], with: Value) -> Option<Value> {
    let mut out = v.clone();
    *get_mut(&mut out, path)? = with;
    Some(out)
}

const MARK: &str = "\u{1}hangar-golden-mark\u{1}";

/// The text of `v` with the object at `path` (the root when empty) written with key `key` given
/// twice: once as `dup` and once as its own value, `dup` first or last.
fn duplicated(v: &Value, path: &[Step], key: &str, dup: &Value, dup_last: bool) -> Option<String> {
    let obj = {
        let mut c = v.clone();
        get_mut(&mut c, path)?.as_object()?.clone()
    };
    let mut inner: Vec<String> = obj
        .iter()
        .map(|(k, x)| format!("{}:{}", json!(k), x))
        .collect();
    let extra = format!("{}:{}", json!(key), dup);
    if dup_last {
        inner.push(extra);
    } else {
        inner.insert(0, extra);
    }
    let text = format!("{{{}}}", inner.join(","));
    if path.is_empty() {
        return Some(text);
    }
    let marked = replaced(v, path, Value::String(MARK.to_owned()))?;
    let whole = marked.to_string();
    let token = json!(MARK).to_string();
    Some(whole.replacen(&token, &text, 1))
}

/// Every mutation of one line (deduplicated, in a fixed order).
fn mutations(line: &str) -> Vec<String> {
    let mut out = vec![
        format!(" {line}"),
        format!("{line} "),
        format!("\t{line}\t"),
    ];
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return out;
    };
    let values = [
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(""),
        json!("x"),
        json!([]),
        json!({}),
        json!(["a", {"type": "text", "text": "t"}, 1, null]),
        json!({"type": "text", "text": "t", "message": "m", "content": "c"}),
    ];
    for path in paths(&v, 24) {
        let mut at = v.clone();
        let original = get_mut(&mut at, &path).map(|x| x.clone());
        for with in &values {
            out.extend(replaced(&v, &path, with.clone()).map(|x| x.to_string()));
        }
        if let Some(o) = original {
            out.extend(replaced(&v, &path, json!([o])).map(|x| x.to_string()));
        }
        out.extend(removed(&v, &path).map(|x| x.to_string()));
    }
    // Duplicate keys in the line's objects (the root included).
    let mut objects: Vec<Vec<Step>> = vec![Vec::new()];
    objects.extend(paths(&v, 24).into_iter().filter(|p| {
        let mut c = v.clone();
        get_mut(&mut c, p).is_some_and(|x| x.is_object())
    }));
    for path in objects.iter().take(6) {
        let mut c = v.clone();
        let keys: Vec<String> = get_mut(&mut c, path)
            .and_then(|x| x.as_object())
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        for key in keys.iter().take(8) {
            for dup in [Value::Null, json!("dup"), json!({"type": "dup"})] {
                for last in [false, true] {
                    out.extend(duplicated(&v, path, key, &dup, last));
                }
            }
        }
    }
    let mut seen = HashSet::new();
    out.retain(|l| !l.contains('\n') && seen.insert(l.clone()));
    out
}

/// Hashes what one line gives: its events' JSON and the context after it. The direct read
/// must give what reading the line through a `Value` gives.
fn feed(h: &mut Sha256, n: &mut u64, line: &str, ctx: &mut ParseContext) {
    let mut via_value = ctx.clone();
    let want = parse_line_via_value(line, &mut via_value);
    let events = parse_line(line, ctx);
    assert_eq!(events, want, "the direct read differs on {line}");
    assert_eq!(
        *ctx, via_value,
        "the direct read's context differs on {line}"
    );
    for e in events {
        h.update(serde_json::to_string(&e).unwrap().as_bytes());
        h.update(b"\n");
        *n += 1;
    }
    h.update(serde_json::to_string(ctx).unwrap().as_bytes());
    h.update(b"\n\n");
}

/// The digests: `log NAME`, one per seed file parsed as a log, and `mut NAME:LINE`, one per
/// distinct source line's mutations, each `events sha256`.
fn digests() -> BTreeMap<String, String> {
    let mut files: Vec<(String, String)> = fs::read_dir(seeds_dir())
        .expect("fuzz/seeds/runlog")
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let text = String::from_utf8_lossy(&fs::read(e.path()).unwrap()).into_owned();
            (name, text)
        })
        .collect();
    files.sort();
    files.push(("(extra lines)".to_owned(), extra_lines().join("\n")));
    assert!(files.len() > 50, "the runlog seeds are missing");
    let mut out = BTreeMap::new();
    let mut done = HashSet::new();
    for (name, text) in &files {
        let mut ctx = ParseContext::new();
        let (mut h, mut n) = (Sha256::new(), 0);
        for (i, line) in text.split('\n').enumerate() {
            if done.insert(line.to_owned()) {
                let (mut hm, mut nm) = (Sha256::new(), 0);
                for m in mutations(line) {
                    feed(&mut hm, &mut nm, &m, &mut ctx.clone());
                }
                out.insert(
                    format!("mut {name}:{}", i + 1),
                    format!("{nm} {}", hex::encode(hm.finalize())),
                );
            }
            feed(&mut h, &mut n, line, &mut ctx);
        }
        out.insert(
            format!("log {name}"),
            format!("{n} {}", hex::encode(h.finalize())),
        );
    }
    out
}

#[test]
fn the_parser_gives_what_it_gave_on_every_seed_and_mutation() {
    let got = digests();
    let text: String = got.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    if std::env::var_os("HANGAR_WRITE_GOLDEN").is_some() {
        fs::create_dir_all(golden_path().parent().unwrap()).unwrap();
        fs::write(golden_path(), &text).unwrap();
        return;
    }
    let want = fs::read_to_string(golden_path()).expect("tests/golden/parse.txt");
    let want: BTreeMap<&str, String> = want
        .lines()
        .filter_map(|l| {
            let (rest, sha) = l.rsplit_once(' ')?;
            let (k, n) = rest.rsplit_once(' ')?;
            Some((k, format!("{n} {sha}")))
        })
        .collect();
    let mut bad = Vec::new();
    for (k, v) in &got {
        match want.get(k.as_str()) {
            Some(w) if w == v => {}
            other => bad.push(format!("{k}: now {v}, recorded {other:?}")),
        }
    }
    assert_eq!(want.len(), got.len(), "the set of digests changed");
    assert!(
        bad.is_empty(),
        "{} of {} digests differ (the events of these seeds or of these lines' mutations changed):\n{}",
        bad.len(),
        got.len(),
        bad.join("\n")
    );
    // Enough shapes were tried for the pin to mean something.
    let total: u64 = got
        .iter()
        .filter(|(k, _)| k.starts_with("mut "))
        .map(|(_, v)| v.split(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(total > 10_000, "only {total} events from the mutations");
}
