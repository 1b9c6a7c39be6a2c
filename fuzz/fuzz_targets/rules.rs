//! The deny-risky rules on arbitrary command text (`Rules::check_command`, the shell reading
//! of `hangar_rules::shell`): never a panic, and what cannot be read is denied.
//!
//! Checked: a command the shell grammar itself refuses (brush-parser, as the rules use it) is
//! denied; whenever the shell reading reports a failure (unparsable, computed at run time,
//! nested too deep) the verdict is deny; a denial names a rule and a reason; the same text as
//! Claude Code's Bash input and as Codex's argv, and as a path for the edit and read tools,
//! is checked without a panic.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use hangar_rules::{Context, Rules, Scope, shell};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

static RULES: LazyLock<Rules> = LazyLock::new(Rules::default_set);

fn ctx() -> Context {
    Context {
        workspace: "/work/ws".into(),
        home: Some("/home/agent".into()),
        protected: vec!["/run/hangar/ctl".into()],
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
    let command = String::from_utf8_lossy(data);
    let ctx = ctx();
    let v = RULES.check_command(&command, &ctx);
    if !v.allowed() {
        assert!(
            v.rule
                .as_deref()
                .is_some_and(|r| r.starts_with("deny-risky/"))
        );
        assert!(!v.reason.is_empty());
    }
    let (_, failures) = shell::read(&command, &ctx.workspace, ctx.home.as_deref());
    if !failures.is_empty() {
        assert!(
            !v.allowed(),
            "allowed although unreadable ({failures:?}): {command:?}"
        );
    }
    if v.allowed() {
        assert!(
            !shell_refuses(&command),
            "allowed although the shell cannot parse it: {command:?}"
        );
    }
    // The same text as the harnesses send it.
    let bash = RULES.check_tool("Bash", &json!({ "command": command }), &ctx);
    assert_eq!(bash, v);
    let argv: Vec<&str> = command.split(' ').collect();
    let _ = RULES.check_tool("exec_command", &json!({ "command": argv }), &ctx);
    let _ = RULES.check_path(Scope::Edit, &command, &ctx);
    let _ = RULES.check_path(Scope::Read, &command, &ctx);
    let _ = shell::read(&command, Path::new("/"), None);
});
