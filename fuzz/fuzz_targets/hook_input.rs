//! The Tower hook's reading of Claude Code's hook input (the agent chooses the tool call in it)
//! and the deny-risky rules it then applies, as after Tower allowed the call: no network, no key
//! file (`hangar_hook::fuzz_after_allow`).
//!
//! Checked: nothing panics; the hook exits 0 (no decision) or 2 (blocked), with a reason when
//! it blocks and none when it does not; input that is not a JSON object is blocked; a Bash call
//! is never let through when its command is one the shell grammar itself refuses, and the hook
//! agrees with the rules the driver applies to the same call.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use hangar_hook::{Args, BLOCK, fuzz_after_allow};
use hangar_rules::{Context, Rules};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const WS: &str = "/work/ws";
const KEY_FILE: &str = "/run/hangar/ctl/tower.key";

static RULES: LazyLock<Rules> = LazyLock::new(Rules::default_set);

fn args(workspace: bool) -> Args {
    Args {
        url: "http://127.0.0.1:9".into(),
        key_file: PathBuf::from(KEY_FILE),
        workspace: workspace.then(|| PathBuf::from(WS)),
        ..Args::default()
    }
}

/// Whether brush-parser, as the rules call it, refuses the text. Deep text is parsed on a
/// thread with a large stack, as the rules do.
fn shell_refuses(command: &str) -> bool {
    let parse = || {
        let options = brush_parser::ParserOptions::default();
        let mut p = brush_parser::Parser::new(std::io::Cursor::new(command.as_bytes()), &options);
        p.parse_program().is_err()
    };
    if hangar_rules::shell::nesting_bound(command) <= 64 {
        return parse();
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(1 << 30)
            .spawn_scoped(s, parse)
            .expect("a thread for the parse")
            .join()
            .expect("the parse")
    })
}

fuzz_target!(|data: &[u8]| {
    // As the driver writes it (`--workspace`), and without (the hook falls back to `cwd`).
    for with_ws in [true, false] {
        let out = fuzz_after_allow(&args(with_ws), data);
        assert!(out.code == 0 || out.code == BLOCK, "exit {}", out.code);
        assert_eq!(out.code == 0, out.message.is_empty(), "{out:?}");
        let call: Option<Value> = serde_json::from_slice(data).ok().filter(Value::is_object);
        let Some(call) = call else {
            assert_eq!(
                out.code, BLOCK,
                "input that is not a JSON object was let through"
            );
            continue;
        };
        let tool = call
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let input = call.get("tool_input").cloned().unwrap_or(Value::Null);
        if tool == "Bash" {
            if let Some(c) = input.get("command").and_then(Value::as_str) {
                if out.code == 0 {
                    assert!(
                        !shell_refuses(c),
                        "an unparsable command was let through: {c:?}"
                    );
                }
            }
        }
        if with_ws {
            let mut ctx = Context::new(WS);
            ctx.protected.push(KEY_FILE.into());
            let v = RULES.check_tool(tool, &input, &ctx);
            assert_eq!(
                v.allowed(),
                out.code == 0,
                "the hook and the rules disagree: {out:?}"
            );
        }
    }
});
