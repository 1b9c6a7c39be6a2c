//! What `scripts/fuzz rules` found, each kept as the input that showed it. The commands are
//! data: they are parsed, never run.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use hangar_rules::shell::{
    MAX_BACKTRACKING, MAX_NESTING, READ_DEADLINE, backtracking, nesting_bound,
};
use hangar_rules::{Context, Rules};

fn ctx() -> Context {
    Context {
        workspace: "/work/ws".into(),
        home: Some("/home/agent".into()),
        protected: vec!["/run/hangar/ctl".into()],
    }
}

fn nested(open: &str, inner: &str, close: &str, n: usize) -> String {
    format!("{}{inner}{}", open.repeat(n), close.repeat(n))
}

/// A few kilobytes of nesting overflowed the stack inside brush-parser (or the walk over its
/// tree): a SIGSEGV that killed the driver's turn or the Tower hook. Now what fits in
/// [`MAX_NESTING`] is read on a thread with room for it, and more is denied as unreadable.
#[test]
fn deep_nesting_is_read_or_denied_never_a_crash() {
    let rules = Rules::default_set();
    let shapes: [(&str, &str, &str, &str); 7] = [
        ("", "{ ", "ls; ", "}; "),
        ("", "if true; then ", "ls; ", "fi; "),
        ("", "while true; do ", "ls", "; done"),
        ("", "case x in x) ", "ls", " ;; esac"),
        ("[[ ", "( ", "a ]]", " )"),
        ("echo ", "${a:-", "x", "}"),
        ("", "cat <(", "ls", ")"),
    ];
    for (lead, open, inner, close) in shapes {
        let nested = |n| format!("{lead}{}", nested(open, inner, close, n));
        // Read on the caller's stack (a test thread's 2 MiB, in a debug build).
        let v = rules.check_command(&nested(60), &ctx());
        assert!(!v.reason.contains("brackets"), "{}", v.reason);
        // Deeper than the 8 MiB main thread held before, within what is read.
        let cmd = nested(3000);
        let v = rules.check_command(&cmd, &ctx());
        if !v.allowed() {
            assert!(
                !v.reason
                    .contains("brackets, `!` and compound-command keywords"),
                "{open:?} x3000 was refused as too deep: {}",
                v.reason
            );
        }
        // Past the limit: denied, not read.
        let cmd = nested(MAX_NESTING + 1);
        if cmd.len() <= hangar_rules::shell::MAX_COMMAND_BYTES {
            let v = rules.check_command(&cmd, &ctx());
            assert!(!v.allowed(), "{open:?} x{} was allowed", MAX_NESTING + 1);
            assert_eq!(v.rule.as_deref(), Some(hangar_rules::UNPARSABLE));
        }
    }
    // Nesting made inside a script the command runs counts too (`sh -c` with ANSI-C escapes
    // makes its braces without writing one).
    let inner = "\\x7b ".repeat(MAX_NESTING + 1);
    let v = rules.check_command(&format!("sh -c $'{inner}'"), &ctx());
    assert!(!v.allowed());
}

#[test]
fn the_nesting_bound_counts_what_can_nest() {
    assert_eq!(nesting_bound("ls -la"), 0);
    assert_eq!(nesting_bound("if [ -f x ]; then (cd a && { b; }); fi"), 4);
    assert_eq!(nesting_bound("echo '(((' \"{\""), 4);
    // A backslash-newline joins a keyword, as the shell does.
    assert_eq!(nesting_bound("i\\\nf true; then :; fi"), 1);
    assert_eq!(
        nesting_bound("elif while until for select case function coproc"),
        8
    );
    assert_eq!(nesting_bound("iffy fortune casey"), 0);
}

/// `ls | ls | …` took time and memory quadratic in its length (20 kB: 10 s, 1 GB) while the
/// driver's turn waited. Past a budget of command names copied between stages it is denied.
#[test]
fn very_long_pipelines_are_denied_not_slow() {
    let rules = Rules::default_set();
    let cmd = format!("ls {}", "| ls ".repeat(5000));
    let v = rules.check_command(&cmd, &ctx());
    assert!(!v.allowed());
    assert!(v.reason.contains("pipelines"), "{}", v.reason);
    // An ordinary pipeline is still read.
    let v = rules.check_command("cat a | grep b | sort | uniq -c | sort -rn | head", &ctx());
    assert!(v.allowed(), "{}", v.reason);
    // A deep nest of one-stage pipelines stays linear.
    let cmd = nested("while true; do ", "ls", "; done", 3000);
    let t = std::time::Instant::now();
    let _ = rules.check_command(&cmd, &ctx());
    assert!(t.elapsed().as_secs() < 30, "took {:?}", t.elapsed());
}

/// brush-parser reads some shapes again at every level they nest: 97 bytes of unclosed `(`
/// (the fuzzer's input, kept as it was) did not finish in the fuzzer's 14 s, and nested `case`
/// items without `;;` doubled with each level (18 levels: 3 s). The driver's turn and the hook
/// waited for the verdict. Now they are counted before the parse and denied at once.
#[test]
fn shapes_the_parser_reads_again_at_every_level_are_denied_at_once() {
    let rules = Rules::default_set();
    let found = "time (((((((((((ime rm\0\0\0\0(((((((((((((((((((((((((((((((ime rm \
                 -((((((((((((((((((((((((((((rf /";
    let shapes = [
        found.to_owned(),
        format!("{}ls", "(".repeat(70)),
        nested("case x in x) ", "ls", "; esac", 30),
        nested("case x in (x) ", "ls", "", 30),
        nested("( case x in x) ", "ls", "", 30),
        nested("for (( ", "ls", "", 30),
        // Inside a script the command runs.
        format!("bash -c '{}ls'", "(".repeat(40)),
        format!("eval '{}ls'", "(".repeat(40)),
    ];
    for cmd in shapes {
        let t = std::time::Instant::now();
        let v = rules.check_command(&cmd, &ctx());
        let took = t.elapsed();
        assert!(!v.allowed(), "allowed: {cmd:?}");
        assert_eq!(v.rule.as_deref(), Some(hangar_rules::UNPARSABLE), "{cmd:?}");
        // Denied by the count, not by the deadline behind it.
        assert!(v.reason.contains("unclosed"), "{cmd:?}: {}", v.reason);
        assert!(took < READ_DEADLINE / 4, "{cmd:?} took {took:?}");
    }
    // Below the limit the same shapes are still read (the valid one is allowed).
    let cmd = nested("case x in x) ", "ls", "; esac", MAX_BACKTRACKING);
    let v = rules.check_command(&cmd, &ctx());
    assert!(v.allowed(), "{cmd}: {}", v.reason);
    // Deep nesting that is read once stays readable.
    for cmd in [
        nested("( ", "ls", " )", 200),
        nested("case x in x) ", "ls", " ;; esac", 200),
        nested("case x in (x) ", "ls", " ;; esac", 200),
    ] {
        let v = rules.check_command(&cmd, &ctx());
        assert!(v.allowed(), "{}: {}", &cmd[..40], v.reason);
    }
}

#[test]
fn backtracking_counts_unclosed_parentheses_and_case_chains_without_double_semicolons() {
    let count = |s: &str| backtracking(&brush_parser::tokenize_str(s).unwrap());
    assert_eq!(count("ls -la | grep x"), 0);
    assert_eq!(count("((((x"), 4);
    assert_eq!(count("(a) (b) ((c))"), 0);
    assert_eq!(count("f() { (ls); }; a=(1 2)"), 0);
    assert_eq!(count("case a in a) ls; esac"), 1);
    assert_eq!(count("case a in a) ls\n esac"), 1);
    assert_eq!(count("case a in a) ls;; esac"), 0);
    assert_eq!(count("case a in a) ls;;\n\n esac"), 0);
    assert_eq!(
        count("case a in a) case b in b) ls; esac ;; c) case d in d) ls;; esac\n esac"),
        2
    );
    // Never closed: each level counts.
    assert_eq!(count("case a in a) case b in b) ls;;"), 2);
    // `esac` as an argument closes nothing.
    assert_eq!(count("case a in a) ls esac"), 1);
    // Only where a command's name stands.
    assert_eq!(count("echo case case > case"), 0);
    assert_eq!(count("if case a in a) ls; esac; then :; fi"), 1);
}

/// brush-parser `unwrap`s numbers it reads into fixed-size integers: a file descriptor
/// number before a redirection (`99999999999999999999>x`) or a directory stack index after `~`
/// (`~+99999999999999999999`) that does not fit panicked inside the parser, which ends the
/// driver's turn (its release build aborts on a panic). Now they are denied as unreadable first.
#[test]
fn numbers_too_large_for_the_parser_are_denied_not_a_crash() {
    let rules = Rules::default_set();
    let found =
        "e7777777|7777777777777777777777777777select 77777777777777777<(7777777\"[\"rgs rm -rf";
    for cmd in [
        found,
        "ls 99999999999999999999>x",
        "ls 2147483648<x",
        "ls ~99999999999999999999999/",
        "ls ~-99999999999999999999999/",
        "ls ~+99999999999999999999999",
        "echo \"$(cat ~+99999999999999999999999)\"",
        "bash -c 'ls 99999999999999999999>x'",
    ] {
        let v = rules.check_command(cmd, &ctx());
        assert!(!v.allowed(), "allowed: {cmd:?}");
        assert_eq!(v.rule.as_deref(), Some(hangar_rules::UNPARSABLE), "{cmd:?}");
        assert!(v.reason.contains("too large"), "{cmd:?}: {}", v.reason);
    }
    // Numbers that fit are read as before.
    for cmd in ["ls 2>/dev/null", "ls 2147483647>x", "ls ~+1/x ~-2/y ~3"] {
        let v = rules.check_command(cmd, &ctx());
        assert!(!v.reason.contains("too large"), "{cmd:?}: {}", v.reason);
    }
    // Brace expansion reads a sequence's bounds as i64 (brush-parser `unwrap`s them): one
    // that does not fit is a sequence no shell expands in memory either, denied.
    let v = rules.check_command("echo {1..99999999999999999999}", &ctx());
    assert_eq!(v.rule.as_deref(), Some(hangar_rules::UNPARSABLE), "{v:?}");
}

/// brush-parser's tokenizer looped without end, allocating (24 GB in a minute, then the
/// machine's memory was gone), on a here-document operator with no tag inside `$(…)` followed
/// by an even number of blanks (`$(cat <<  `): the fuzzer's input is kept as it was. Such a
/// command is denied before it is tokenized.
#[test]
fn a_here_document_with_no_tag_is_denied_before_the_tokenizer_sees_it() {
    use hangar_rules::shell::here_document_without_tag;
    let rules = Rules::default_set();
    let found = "uwatch v \u{ff}\u{ff}&tch v A pubvix=$(r\u{ad} -rf             \u{ff}       t  \
                 \u{a1} <<      ";
    for cmd in [
        found,
        "echo $(cat <<  ",
        "x $(<<      ",
        "echo ${x:-$(cat <<-  ",
        "echo \"$(cat <<\t ",
        "cat <<\necho hi",
        // Inside a script the command runs: found when that script is read.
        "bash -c 'echo $(cat <<  '",
    ] {
        assert!(
            here_document_without_tag(cmd) || cmd.starts_with("bash -c"),
            "{cmd:?}"
        );
        let v = rules.check_command(cmd, &ctx());
        assert!(!v.allowed(), "allowed: {cmd:?}");
        // The outer command of `bash -c '… $(cat <<  '` leaves its `$(` open too: the screen
        // for that (below) may see it first.
        assert!(
            v.reason.contains("no tag") || v.reason.contains("never closed"),
            "{cmd:?}: {}",
            v.reason
        );
    }
    // Here-documents and here-strings with tags are read as before.
    for cmd in [
        "git commit -m \"$(cat <<'EOF'\nfix: a thing\n\nmore\nEOF\n)\"",
        "cat <<-EOF > out.txt\n\tx\n\tEOF",
        "grep x <<< \"$(ls)\"",
        "cat <<<  ",
        "echo '<<' x",
    ] {
        assert!(!here_document_without_tag(cmd), "{cmd:?}");
        let v = rules.check_command(cmd, &ctx());
        assert!(!v.reason.contains("no tag"), "{cmd:?}: {}", v.reason);
    }
    let v = rules.check_command(
        "git commit -m \"$(cat <<'EOF'\nfix: a thing\nEOF\n)\"",
        &ctx(),
    );
    assert!(v.allowed(), "{}", v.reason);
}

/// The readers of options cut a word after a character they had not looked at yet: a multi-byte
/// one in an option cluster (`sed -e '1e' -e 'rm -r\u{fffd}…'`, `vim -N\u{fffd}c`) panicked on a
/// char boundary (found by `scripts/fuzz rules`, kept as the fuzzer wrote it).
#[test]
fn multi_byte_characters_in_option_clusters_are_read() {
    let rules = Rules::default_set();
    let found = "sed -e '1e' -e 'rm -r\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}' -r\u{fffd}\u{a2}f /' f";
    for cmd in [
        found,
        "sed -\u{e9}e 's/a/b/' f",
        "vim -\u{e9}c '!id' f",
        "env -\u{e9}S'rm -rf /'",
        "perl -\u{e9}e 'print 1'",
        "awk -\u{e9} '{print}'",
    ] {
        let _ = rules.check_command(cmd, &ctx());
    }
    let v = rules.check_command(found, &ctx());
    assert!(!v.allowed(), "{v:?}");
}

/// The same loop of brush-parser's tokenizer with a tag: a here-document inside a `$(` that is
/// never closed, with blanks and a tag after `<<` and no line after it (`$(<<  a `). The
/// fuzzer's input is kept as it was, with the shapes reduced from it. Each is denied before the
/// tokenizer sees it; a closed `$((1 << 4))` is still read.
#[test]
fn a_here_document_in_an_unclosed_substitution_is_denied_before_the_tokenizer_sees_it() {
    use hangar_rules::shell::here_document_in_unclosed_substitution;
    let rules = Rules::default_set();
    let found = "uwatch v \u{fffd}\u{fffd}&tch v \u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}A\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}pubvix=$(r\u{fffd} -rf             \u{fffd}\u{fffd}\u{fffd}       t                      \u{fffd} <<   \u{e}\u{e}\u{e}\u{e}\u{e}\u{e}\u{e}\u{e}\u{e}\u{e}\u{e}\u{e}\u{e}\u{e}   ";
    for cmd in [
        found,
        "$(<<  a ",
        "$(<<  \u{e} ",
        "x $(<<  a b ",
        "$(<<-  a ",
        "$(<<\t\ta ",
    ] {
        assert!(here_document_in_unclosed_substitution(cmd), "{cmd:?}");
        let t = std::time::Instant::now();
        let v = rules.check_command(cmd, &ctx());
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "{cmd:?}");
        assert_eq!(v.rule.as_deref(), Some(hangar_rules::UNPARSABLE), "{cmd:?}");
    }
    for cmd in [
        "echo $((1 << 4))",
        "cat <<EOF\nx\nEOF",
        "(cat <<EOF\nx\nEOF\n)",
    ] {
        assert!(!here_document_in_unclosed_substitution(cmd), "{cmd:?}");
    }
}
