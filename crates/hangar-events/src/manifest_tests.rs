//! The manifest digest: sensitive to every field, blind to the order of sets, pinned.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use pretty_assertions::assert_eq;

use super::*;

fn fixed() -> Manifest {
    Manifest {
        harness: "claude".into(),
        harness_version: "2.1.328".into(),
        argv: vec![
            "claude".into(),
            "-p".into(),
            "--input-format".into(),
            "stream-json".into(),
        ],
        env_names: vec!["PATH".into(), "ANTHROPIC_API_KEY".into(), "HOME".into()],
        policy_requested: "ask".into(),
        policy_effective: "ask".into(),
        hooks: vec![Hook {
            name: "Stop: /tmp/hangar-run-verify/stop-hook.sh".into(),
            digest: "ab".repeat(32),
        }],
        driver_digest: "cd".repeat(32),
        harness_check: String::new(),
        rules: None,
        harness_digest: String::new(),
    }
}

/// Pinned (computed independently from the documented encoding, in Python, when written): a
/// change here means every recorded `harness_digest` changes meaning.
const FIXED_DIGEST: &str = "b215cb766a9c56ae4f214221a4dcfcd5fd8587e5dcf68ceaae8552063ed8d5fa";

#[test]
fn the_digest_of_a_fixed_manifest_is_pinned() {
    assert_eq!(harness_digest(&fixed()), FIXED_DIGEST);
}

/// [`fixed`] with a rules record (`hangar.manifest.v2`).
fn fixed_v2() -> Manifest {
    Manifest {
        rules: Some(RulesRecord {
            disabled: vec!["signal-processes".into(), "network-fetch-exec".into()],
            added: vec!["no-cows".into()],
            digest: "ef".repeat(32),
        }),
        ..fixed()
    }
}

/// Pinned like [`FIXED_DIGEST`] (Python, from the documented `v2` encoding).
const FIXED_V2_DIGEST: &str = "c8353af54cc03cb9b6a79f36c8e8ffe6d6e1d8aa3e26f0bc6f71708243868071";

#[test]
fn the_digest_of_a_fixed_manifest_with_rules_is_pinned() {
    assert_eq!(harness_digest(&fixed_v2()), FIXED_V2_DIGEST);
    let bytes = canonical_bytes(&fixed_v2());
    assert!(bytes.starts_with(b"hangar.manifest.v2\0"));
    // v2 is v1's fields under its own tag, then the harness check (always), then the rules.
    let v1 = canonical_bytes(&fixed());
    assert_eq!(bytes[19..v1.len()], v1[19..]);
    assert_eq!(
        bytes[v1.len()..v1.len() + 8],
        [0u8; 8],
        "an empty harness check"
    );
}

/// A manifest stored before rules were recorded (no `rules` key) still reads and checks.
#[test]
fn a_manifest_recorded_without_rules_still_checks() {
    let stored = serde_json::json!({
        "harness": "claude", "harness_version": "2.1.328",
        "argv": ["claude", "-p", "--input-format", "stream-json"],
        "env_names": ["PATH", "ANTHROPIC_API_KEY", "HOME"],
        "policy_requested": "ask", "policy_effective": "ask",
        "hooks": [{"name": "Stop: /tmp/hangar-run-verify/stop-hook.sh", "digest": "ab".repeat(32)}],
        "driver_digest": "cd".repeat(32),
        "harness_digest": FIXED_DIGEST,
    });
    let m: Manifest = serde_json::from_value(stored.clone()).unwrap();
    assert_eq!(m.rules, None);
    assert!(m.digest_matches());
    assert_eq!(
        serde_json::to_value(&m).unwrap(),
        stored,
        "written back as it was"
    );
    let v2 = fixed_v2().sealed();
    let back: Manifest = serde_json::from_value(serde_json::to_value(&v2).unwrap()).unwrap();
    assert!(back.digest_matches());
    assert_eq!(back, v2);
}

#[test]
fn the_encoding_is_as_documented() {
    let m = Manifest {
        harness: "h".into(),
        harness_version: "v".into(),
        argv: vec!["b".into(), "a".into()],
        env_names: vec!["Y".into(), "X".into(), "Y".into()],
        policy_requested: "ask".into(),
        policy_effective: "auto".into(),
        hooks: vec![
            Hook {
                name: "n2".into(),
                digest: "d2".into(),
            },
            Hook {
                name: "n1".into(),
                digest: "d1".into(),
            },
        ],
        driver_digest: "dd".into(),
        harness_check: String::new(),
        rules: None,
        harness_digest: "ignored".into(),
    };
    let mut want = b"hangar.manifest.v1\0".to_vec();
    let s = |w: &mut Vec<u8>, x: &str| {
        w.extend_from_slice(&(x.len() as u64).to_be_bytes());
        w.extend_from_slice(x.as_bytes());
    };
    let n = |w: &mut Vec<u8>, k: u64| w.extend_from_slice(&k.to_be_bytes());
    s(&mut want, "h");
    s(&mut want, "v");
    n(&mut want, 2);
    s(&mut want, "b");
    s(&mut want, "a");
    n(&mut want, 2);
    s(&mut want, "X");
    s(&mut want, "Y");
    s(&mut want, "ask");
    s(&mut want, "auto");
    n(&mut want, 2);
    for x in ["n1", "d1", "n2", "d2"] {
        s(&mut want, x);
    }
    s(&mut want, "dd");
    assert_eq!(canonical_bytes(&m), want);
}

/// A change to a manifest.
type Edit = Box<dyn Fn(&mut Manifest)>;

#[test]
fn every_field_changes_the_digest() {
    let base = harness_digest(&fixed());
    let edits: Vec<(&str, Edit)> = vec![
        ("harness", Box::new(|m| m.harness = "codex".into())),
        (
            "version",
            Box::new(|m| m.harness_version = "2.1.329".into()),
        ),
        ("argv item", Box::new(|m| m.argv[1] = "-q".into())),
        ("argv order", Box::new(|m| m.argv.swap(1, 2))),
        ("argv added", Box::new(|m| m.argv.push("--verbose".into()))),
        ("argv empty item", Box::new(|m| m.argv.push(String::new()))),
        ("env added", Box::new(|m| m.env_names.push("TERM".into()))),
        (
            "env removed",
            Box::new(|m| {
                m.env_names.pop();
            }),
        ),
        (
            "policy asked",
            Box::new(|m| m.policy_requested = "auto".into()),
        ),
        (
            "policy in effect",
            Box::new(|m| m.policy_effective = "auto".into()),
        ),
        (
            "hook digest",
            Box::new(|m| m.hooks[0].digest = "ef".repeat(32)),
        ),
        (
            "hook name",
            Box::new(|m| m.hooks[0].name = "Stop: other".into()),
        ),
        ("hook removed", Box::new(|m| m.hooks.clear())),
        ("driver", Box::new(|m| m.driver_digest = "00".repeat(32))),
        (
            "harness check",
            Box::new(|m| m.harness_check = "unverified".into()),
        ),
        (
            "rules recorded",
            Box::new(|m| m.rules = Some(RulesRecord::default())),
        ),
        // Moving bytes between neighbouring fields must not collide.
        (
            "slide",
            Box::new(|m| {
                m.argv[0] = "claude-".into();
                m.argv[1] = "p".into();
            }),
        ),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (what, edit) in edits {
        let mut m = fixed();
        edit(&mut m);
        let d = harness_digest(&m);
        assert_ne!(d, base, "{what}");
        assert!(seen.insert(d), "{what} collides with another edit");
    }
    let base = harness_digest(&fixed_v2());
    let rules = |f: fn(&mut RulesRecord)| -> Edit {
        Box::new(move |m: &mut Manifest| f(m.rules.as_mut().unwrap()))
    };
    let edits: Vec<(&str, Edit)> = vec![
        (
            "disabled added",
            rules(|r| r.disabled.push("privilege".into())),
        ),
        ("disabled removed", rules(|r| r.disabled.clear())),
        ("added added", rules(|r| r.added.push("no-make".into()))),
        ("added removed", rules(|r| r.added.clear())),
        ("digest", rules(|r| r.digest = "00".repeat(32))),
        (
            "harness check",
            Box::new(|m| m.harness_check = "unverified".into()),
        ),
        (
            "an id moved from added to disabled",
            rules(|r| {
                let a = r.added.pop().unwrap();
                r.disabled.push(a);
            }),
        ),
        ("rules gone", Box::new(|m| m.rules = None)),
        ("driver", Box::new(|m| m.driver_digest = "00".repeat(32))),
    ];
    for (what, edit) in edits {
        let mut m = fixed_v2();
        edit(&mut m);
        let d = harness_digest(&m);
        assert_ne!(d, base, "{what}");
        assert!(seen.insert(d), "{what} collides with another edit");
    }
    let mut m = fixed_v2();
    let r = m.rules.as_mut().unwrap();
    r.disabled.reverse();
    r.disabled.push("signal-processes".into());
    assert_eq!(harness_digest(&m), base, "the ids are sets");
}

#[test]
fn set_order_and_the_digest_field_do_not_change_it() {
    let base = harness_digest(&fixed());
    let mut m = fixed();
    m.env_names.reverse();
    m.env_names.push("HOME".into());
    assert_eq!(harness_digest(&m), base, "env names are a set");
    let mut m = fixed();
    m.hooks.insert(
        0,
        Hook {
            name: "A: first".into(),
            digest: "00".into(),
        },
    );
    let mut n = m.clone();
    n.hooks.reverse();
    assert_eq!(harness_digest(&m), harness_digest(&n), "hooks are a set");
    let mut m = fixed();
    m.harness_digest = "anything".into();
    assert_eq!(harness_digest(&m), base);
}

#[test]
fn sealed_manifests_check_and_round_trip() {
    let m = fixed().sealed();
    assert_eq!(m.harness_digest, FIXED_DIGEST);
    assert!(m.digest_matches());
    let back: Manifest = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
    let mut tampered = m;
    tampered.policy_effective = "auto".into();
    assert!(!tampered.digest_matches());
}

#[test]
fn file_digest_streams_sha256() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(
        file_digest(&empty).unwrap(),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let abc = dir.path().join("abc");
    std::fs::write(&abc, b"abc").unwrap();
    assert_eq!(
        file_digest(&abc).unwrap(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // Bigger than one read buffer: the same as hashing it at once.
    let big = dir.path().join("big");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&big, &data).unwrap();
    assert_eq!(
        file_digest(&big).unwrap(),
        hex::encode(Sha256::digest(&data))
    );
    assert!(matches!(
        file_digest(&dir.path().join("missing")),
        Err(CoreError::Io { .. })
    ));
}

#[test]
fn the_harness_check_is_appended_only_when_there_is_one() {
    // Empty (manifests from before the field): the bytes, and so the pinned digest, are unchanged.
    let before = canonical_bytes(&fixed());
    let mut m = fixed();
    m.harness_check = "passed:built-in".into();
    let after = canonical_bytes(&m);
    let mut want = before.clone();
    want.extend_from_slice(&15u64.to_be_bytes());
    want.extend_from_slice(b"passed:built-in");
    assert_eq!(after, want);
    // And a sealed manifest with it still verifies after a round trip through JSON.
    let sealed = m.sealed();
    let back: Manifest = serde_json::from_value(serde_json::to_value(&sealed).unwrap()).unwrap();
    assert!(back.digest_matches());
    assert_eq!(back.harness_check, "passed:built-in");
}
