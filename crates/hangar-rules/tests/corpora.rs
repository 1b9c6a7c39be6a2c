//! The two corpora (`corpus/risky.txt` must all be denied, `corpus/ordinary.txt` must all be
//! allowed) and every rule's own examples. The commands are data: they are parsed, never run.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::path::Path;

use hangar_rules::{Context, Rules};
use serde_json::json;

fn ctx() -> Context {
    Context {
        workspace: "/work/ws".into(),
        home: Some("/home/agent".into()),
        protected: vec!["/run/hangar/ctl".into()],
    }
}

/// One command per line; blank lines and `#` lines skipped; lines between two `---` lines are
/// one command.
fn commands(file: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in text.lines() {
        if line == "---" {
            match block.take() {
                Some(lines) => out.push(lines.join("\n")),
                None => block = Some(Vec::new()),
            }
            continue;
        }
        if let Some(lines) = block.as_mut() {
            lines.push(line);
            continue;
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        out.push(line.to_owned());
    }
    assert!(block.is_none(), "{file}: a `---` block is not closed");
    out
}

#[test]
fn every_risky_command_is_denied() {
    let rules = Rules::default_set();
    let cmds = commands("risky.txt");
    assert!(
        cmds.len() > 300,
        "the risky corpus shrank to {}",
        cmds.len()
    );
    let missed: Vec<&String> = cmds
        .iter()
        .filter(|c| rules.check_command(c, &ctx()).allowed())
        .collect();
    assert!(
        missed.is_empty(),
        "allowed {} risky commands:\n{missed:#?}",
        missed.len()
    );
}

#[test]
fn every_ordinary_command_is_allowed() {
    let rules = Rules::default_set();
    let cmds = commands("ordinary.txt");
    assert!(
        cmds.len() > 200,
        "the ordinary corpus shrank to {}",
        cmds.len()
    );
    let denied: Vec<(String, String)> = cmds
        .iter()
        .filter_map(|c| {
            let v = rules.check_command(c, &ctx());
            (!v.allowed()).then(|| (c.clone(), format!("{:?}: {}", v.rule, v.reason)))
        })
        .collect();
    assert!(
        denied.is_empty(),
        "denied {} ordinary commands:\n{denied:#?}",
        denied.len()
    );
}

/// Each rule denies its deny examples by itself, and the whole set allows its allow examples.
#[test]
fn every_rule_has_examples_that_hold() {
    let all = Rules::default_set();
    let ids: Vec<String> = all.rules().iter().map(|r| r.id.clone()).collect();
    let mut wrong = Vec::new();
    for r in all.rules() {
        let ex = &r.examples;
        assert!(
            !(ex.deny.is_empty() && ex.deny_paths.is_empty()),
            "rule {} has no example it denies",
            r.id
        );
        assert!(
            !(ex.allow.is_empty() && ex.allow_paths.is_empty()),
            "rule {} has no close neighbour it allows",
            r.id
        );
        let others: Vec<String> = ids
            .iter()
            .filter(|i| **i != r.id)
            .map(|i| format!("{i:?}"))
            .collect();
        let alone = Rules::configure(&format!("disable = [{}]", others.join(", ")))
            .unwrap_or_else(|e| panic!("{e}"));
        let want = format!("deny-risky/{}", r.id);
        for c in &ex.deny {
            let v = alone.check_command(c, &ctx());
            if v.rule.as_deref() != Some(want.as_str()) {
                wrong.push(format!(
                    "{}: {c:?} should be denied by it, got {:?}",
                    r.id, v.rule
                ));
            }
        }
        for p in &ex.deny_paths {
            let v = alone.check_tool("Write", &json!({"file_path": p}), &ctx());
            if v.rule.as_deref() != Some(want.as_str()) {
                wrong.push(format!(
                    "{}: editing {p:?} should be denied by it, got {:?}",
                    r.id, v.rule
                ));
            }
        }
        for c in &ex.allow {
            let v = all.check_command(c, &ctx());
            if !v.allowed() {
                wrong.push(format!(
                    "{}: {c:?} should be allowed, denied by {:?}",
                    r.id, v.rule
                ));
            }
        }
        for p in &ex.allow_paths {
            let v = all.check_tool("Write", &json!({"file_path": p}), &ctx());
            if !v.allowed() {
                wrong.push(format!(
                    "{}: editing {p:?} should be allowed, denied by {:?}",
                    r.id, v.rule
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn edits_and_reads_are_checked_by_path() {
    let rules = Rules::default_set();
    let deny = [
        ("Write", json!({"file_path": "/etc/passwd"})),
        ("Edit", json!({"file_path": "../other/x.rs"})),
        (
            "MultiEdit",
            json!({"file_path": "/work/ws/.git/hooks/pre-commit"}),
        ),
        (
            "NotebookEdit",
            json!({"notebook_path": "/home/agent/n.ipynb"}),
        ),
        ("Write", json!({"file_path": "/var/lib/hangar/tower_hook"})),
        ("Read", json!({"file_path": "/home/agent/.ssh/id_ed25519"})),
        ("Read", json!({"file_path": "/run/hangar/ctl/key"})),
        (
            "fileChange",
            json!({"changes": [{"path": "src/ok.rs"}, {"path": "/etc/hosts"}]}),
        ),
        ("Write", json!({})),
    ];
    for (tool, input) in deny {
        assert!(
            !rules.check_tool(tool, &input, &ctx()).allowed(),
            "{tool} {input}"
        );
    }
    let allow = [
        ("Write", json!({"file_path": "/work/ws/src/main.rs"})),
        ("Edit", json!({"file_path": "src/lib.rs"})),
        ("Read", json!({"file_path": "/usr/include/stdio.h"})),
        (
            "fileChange",
            json!({"changes": {"src/a.rs": {}, "docs/b.md": {}}}),
        ),
        ("WebSearch", json!({"query": "rm -rf /"})),
    ];
    for (tool, input) in allow {
        assert!(
            rules.check_tool(tool, &input, &ctx()).allowed(),
            "{tool} {input}"
        );
    }
}

#[test]
fn symlinks_out_of_the_workspace_are_followed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ws = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(&outside).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap_or_else(|e| panic!("{e}"));
    let c = Context {
        workspace: ws.clone(),
        home: Some(dir.path().join("home")),
        protected: Vec::new(),
    };
    let rules = Rules::default_set();
    let v = rules.check_command("rm -rf link/x", &c);
    assert_eq!(
        v.rule.as_deref(),
        Some("deny-risky/destroy-outside-workspace"),
        "{v:?}"
    );
    assert!(rules.check_command("rm -rf x", &c).allowed());
    let v = rules.check_tool("Write", &json!({"file_path": ws.join("link/y")}), &c);
    assert_eq!(
        v.rule.as_deref(),
        Some("deny-risky/edit-outside-workspace"),
        "{v:?}"
    );
}
