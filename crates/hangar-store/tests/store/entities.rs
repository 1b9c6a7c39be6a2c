//! Round trips of environments, sandboxes, sessions, turns, runs, commands and approvals.

use hangar_store::*;
use serde_json::json;

use crate::common::*;

crate::common::suite!(
    environments_sandboxes_sessions_round_trip,
    turns_are_numbered_and_move_through_states,
    runs_commands_and_acks,
    approvals_pending_and_answered_once,
    a_command_its_ack_and_an_answer_commit_with_their_audit_records,
    environments_are_replaced_and_sandboxes_removed,
    an_ack_racing_the_watchers_slice_on_another_replica_commits_both,
    a_request_id_is_named_whole_or_by_a_unique_prefix,
);

/// Two replicas on one database: one's sender records that it sent an approval command (the
/// command and its `command.sent` record, off its reply's path), the other's watcher commits
/// the log slice that carries the same command's answer (run cursor, events, the command's ack
/// and the approval, with their audit records) at the same time. Both must commit, whichever
/// comes first: the slice takes the audit chain's head after its rows, as the sender does, or
/// PostgreSQL reports `deadlock detected`.
async fn an_ack_racing_the_watchers_slice_on_another_replica_commits_both(kind: Kind) {
    let db = TestDb::new(kind).await;
    let sender = db.open_with_vault().await;
    let watcher = db.open_with_vault().await;
    let (_, turn) = seed(&sender).await;
    seed_run(&sender, &turn.id, "run-1").await;
    let (head, _) = sender.audit().head().await.unwrap();
    let rounds = 60;
    for seq in 1..=rounds {
        let request = format!("req-{seq}");
        sender
            .upsert_approval_requested("run-1", &request, "Bash", &json!({"command": "ls"}))
            .await
            .unwrap();
        let effects = [
            SliceEffect::ApprovalAnsweredByCommand {
                updated_input: None,
                request_id: &request,
                decision: Decision::Allow,
                seq,
                person: Some("ada@example.com"),
                note: None,
            },
            SliceEffect::CommandAnswered {
                seq,
                status: AckStatus::Done,
                reason: None,
                sent: Some(SentBy {
                    kind: "approve",
                    person: "ada@example.com",
                }),
            },
        ];
        let body = json!({"request_id": request, "by": "ada@example.com"});
        let events = [ev("approval", seq)];
        let (slice, sent) = tokio::join!(
            watcher.commit_slice("run-1", (seq - 1) * 10, seq * 10, &events, None, &effects),
            sender.record_command_sent("run-1", seq, "approve", &body, "ada@example.com"),
        );
        slice.unwrap_or_else(|e| panic!("round {seq}: the watcher's slice failed: {e}"));
        sent.unwrap_or_else(|e| panic!("round {seq}: the sender's record failed: {e}"));
        let a = sender.approval("run-1", &request).await.unwrap();
        assert_eq!(a.decision, Some(Decision::Allow), "round {seq}");
        assert_eq!(a.answered_by.as_deref(), Some("ada@example.com"));
        let c = sender.command("run-1", seq).await.unwrap();
        assert_eq!(
            (c.ack, &c.body),
            (Some(AckStatus::Done), &body),
            "round {seq}"
        );
    }
    assert_eq!(sender.run("run-1").await.unwrap().log_cursor, rounds * 10);
    // Each round audited once each: sent, acked, answered.
    let records = sender.audit().records(head, 1000).await.unwrap();
    for action in ["command.sent", "command.acked", "approval.answered"] {
        let n = records.iter().filter(|r| r.action == action).count();
        assert_eq!(n, usize::try_from(rounds).unwrap(), "{action}");
    }
    db.cleanup().await;
}

async fn environments_are_replaced_and_sandboxes_removed(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    assert!(
        store
            .put_environment("dev", &json!({"provider": "local"}))
            .await
            .unwrap()
    );
    let first = store.environment("dev").await.unwrap();
    assert_eq!(first.updated_at, None);
    let newer = json!({"provider": "docker", "image": "i"});
    assert!(
        !store.put_environment("dev", &newer).await.unwrap(),
        "replaced, not new"
    );
    let env = store.environment("dev").await.unwrap();
    assert_eq!((env.spec, env.created_at), (newer, first.created_at));
    assert!(env.updated_at.is_some());

    let handle = json!({"id": "sb-9", "container": "abc"});
    let sb = store
        .create_sandbox(&NewSandbox {
            id: "sb-9".into(),
            environment: "dev".into(),
            kind: "docker".into(),
            workdir: "/workspace".into(),
            person: "ada@example.com".into(),
            handle: Some(handle.clone()),
        })
        .await
        .unwrap();
    assert_eq!(
        (sb.handle, sb.state.as_str(), sb.removed_at),
        (Some(handle), "live", None)
    );
    assert!(store.mark_sandbox_removed("sb-9").await.unwrap());
    assert!(!store.mark_sandbox_removed("sb-9").await.unwrap(), "once");
    let gone = store.sandbox("sb-9").await.unwrap();
    assert_eq!(gone.state, "removed");
    assert!(gone.removed_at.is_some());
    let missing = store.mark_sandbox_removed("sb-nope").await;
    assert!(
        matches!(missing, Err(StoreError::NotFound { .. })),
        "{missing:?}"
    );
}

async fn environments_sandboxes_sessions_round_trip(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    let (session, _) = seed(&store).await;
    let env = store.environment("default").await.unwrap();
    assert_eq!(env.spec, json!({"image": "local"}));
    assert_eq!(store.environments().await.unwrap(), vec![env]);
    let dup = store.create_environment("default", &json!({})).await;
    assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");

    let sb = store.sandbox("sb-1").await.unwrap();
    assert_eq!(
        (sb.workdir.as_str(), sb.person.as_str()),
        ("/work/repo", "ada@example.com")
    );
    assert_eq!(
        store
            .sandboxes(Some("ada@example.com"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .sandboxes(Some("bob@example.com"))
            .await
            .unwrap()
            .is_empty()
    );
    let orphan = store
        .create_sandbox(&NewSandbox {
            id: "sb-2".into(),
            environment: "missing".into(),
            kind: "local".into(),
            workdir: "/x".into(),
            person: "ada@example.com".into(),
            handle: None,
        })
        .await;
    assert!(matches!(orphan, Err(StoreError::Conflict(_))), "{orphan:?}");

    assert_eq!(session.harness, Harness::Claude);
    assert_eq!(session.policy, Policy::Ask);
    assert_eq!(session.harness_session_id, None);
    store
        .set_harness_session_id("ses-1", "claude-abc")
        .await
        .unwrap();
    let s = store.session("ses-1").await.unwrap();
    assert_eq!(s.harness_session_id.as_deref(), Some("claude-abc"));
    assert_eq!(s.turn_count, 1);
    assert_eq!(s.options, json!({}), "options start empty");
    let opts = json!({"model": "m", "codex_config": ["a=1"], "verify": "make test"});
    store.set_session_options("ses-1", &opts).await.unwrap();
    assert_eq!(store.session("ses-1").await.unwrap().options, opts);
    store
        .create_session("ses-2", "sb-1", Harness::Codex, Policy::Governed)
        .await
        .unwrap();
    let all = store.sessions(Some("sb-1")).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].harness, Harness::Codex);
    assert!(matches!(
        store.session("nope").await,
        Err(StoreError::NotFound {
            what: "session",
            ..
        })
    ));
    db.cleanup().await;
}

async fn turns_are_numbered_and_move_through_states(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    let (_, first) = seed(&store).await;
    assert_eq!((first.index, first.state), (0, TurnState::Queued));
    // Concurrent turns in one session get distinct, consecutive indexes.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            s.create_turn(&format!("turn-c{i}"), "ses-1", "p")
                .await
                .unwrap()
                .index
        }));
    }
    let mut idx = Vec::new();
    for t in tasks {
        idx.push(t.await.unwrap());
    }
    idx.sort();
    assert_eq!(idx, vec![1, 2, 3, 4, 5, 6]);

    let t = store
        .update_turn_state("turn-1", &TurnUpdate::to(TurnState::Running))
        .await
        .unwrap();
    assert!(t.started_at.is_some() && t.ended_at.is_none());
    let mut end = TurnUpdate::to(TurnState::Ended);
    end.status = Some(0);
    end.manifest = Some(json!({"files": ["a.rs"]}));
    end.verify_state = Some("passed".into());
    end.usage = Some(Usage {
        input: 10,
        output: 20,
        cached: 5,
    });
    end.cost_usd = Some(0.25);
    let t = store.update_turn_state("turn-1", &end).await.unwrap();
    assert_eq!(t.state, TurnState::Ended);
    assert_eq!(t.status, Some(0));
    assert_eq!(t.manifest, Some(json!({"files": ["a.rs"]})));
    assert_eq!(
        t.usage,
        Usage {
            input: 10,
            output: 20,
            cached: 5
        }
    );
    assert_eq!(t.cost_usd, Some(0.25));
    assert!(t.ended_at.is_some());
    let again = store
        .update_turn_state("turn-1", &TurnUpdate::to(TurnState::Running))
        .await;
    assert!(
        matches!(again, Err(StoreError::BadTransition { .. })),
        "{again:?}"
    );

    let mut refuse = TurnUpdate::to(TurnState::Refused);
    refuse.reason = Some("policy: no network".into());
    let r = store.update_turn_state("turn-c0", &refuse).await.unwrap();
    assert_eq!(r.reason.as_deref(), Some("policy: no network"));
    let turns = store.turns("ses-1").await.unwrap();
    assert_eq!(turns.len(), 7);
    assert!(turns.windows(2).all(|w| w[0].index < w[1].index));
    db.cleanup().await;
}

async fn runs_commands_and_acks(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    let run = seed_run(&store, &turn.id, "run-1").await;
    assert_eq!(
        (run.state, run.log_cursor, run.has_key),
        (RunState::Live, 0, true)
    );
    assert_eq!(
        store.turn("turn-1").await.unwrap().run_id.as_deref(),
        Some("run-1")
    );
    // Whose the run is, in one read: its sandbox's person and environment.
    assert_eq!(
        store.run_owner("run-1").await.unwrap(),
        ("ada@example.com".to_owned(), "default".to_owned())
    );
    assert!(matches!(
        store.run_owner("run-nope").await,
        Err(StoreError::NotFound { what: "run", .. })
    ));
    // Its sandbox, in one read: the one its turn's session runs in.
    let session = store.session(&turn.session_id).await.unwrap();
    let sb = store.sandbox_of_run("run-1").await.unwrap();
    assert_eq!(sb, store.sandbox(&session.sandbox_id).await.unwrap());
    assert!(matches!(
        store.sandbox_of_run("run-nope").await,
        Err(StoreError::NotFound { what: "run", .. })
    ));
    let second = NewRun {
        id: "run-2".into(),
        turn_id: turn.id.clone(),
        ctl_path: "/x".into(),
        driver_pid: None,
        lease: None,
    };
    let dup = store.create_run(&second, &secret(b"k")).await;
    assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");
    assert!(matches!(
        store.run("run-2").await,
        Err(StoreError::NotFound { .. })
    ));

    store.set_driver_pid("run-1", 4242).await.unwrap();
    let live = store.live_runs().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (live[0].id.as_str(), live[0].driver_pid),
        ("run-1", Some(4242))
    );

    let c = store
        .record_command(
            "run-1",
            1,
            "steer",
            &json!({"text": "also docs"}),
            "ada@example.com",
        )
        .await
        .unwrap();
    assert_eq!((c.ack, c.acked_at), (None, None));
    assert!(
        store
            .record_ack("run-1", 1, AckStatus::Done, None)
            .await
            .unwrap()
    );
    assert!(
        !store
            .record_ack("run-1", 1, AckStatus::Refused, Some("late"))
            .await
            .unwrap()
    );
    store
        .record_command("run-1", 2, "interrupt", &json!({}), "hangar")
        .await
        .unwrap();
    store
        .record_ack("run-1", 2, AckStatus::Ended, Some("the turn has ended"))
        .await
        .unwrap();
    let cmds = store.commands("run-1").await.unwrap();
    assert_eq!(cmds.len(), 2);
    assert_eq!(cmds[0].ack, Some(AckStatus::Done));
    assert_eq!(cmds[0].body, json!({"text": "also docs"}));
    assert_eq!(cmds[1].ack_reason.as_deref(), Some("the turn has ended"));
    assert!(matches!(
        store.record_ack("run-1", 9, AckStatus::Done, None).await,
        Err(StoreError::NotFound { .. })
    ));

    assert!(store.end_run("run-1").await.unwrap());
    assert!(!store.end_run("run-1").await.unwrap());
    assert!(store.live_runs().await.unwrap().is_empty());
    db.cleanup().await;
}

async fn approvals_pending_and_answered_once(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let input = json!({"command": "rm -rf build", "nul": "a\u{0}b"});
    assert!(
        store
            .upsert_approval_requested("run-1", "req-1", "Bash", &input)
            .await
            .unwrap()
    );
    assert!(
        !store
            .upsert_approval_requested("run-1", "req-1", "Bash", &input)
            .await
            .unwrap()
    );
    store
        .upsert_approval_requested("run-1", "req-2", "Edit", &json!({"file": "a"}))
        .await
        .unwrap();
    let pending = store.pending_approvals("run-1").await.unwrap();
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0].input["nul"], json!("a\u{FFFD}b"));
    let a = store
        .answer_approval(
            "run-1",
            "req-1",
            Decision::Deny,
            "ada@example.com",
            Some("too broad"),
        )
        .await
        .unwrap();
    assert_eq!(a.decision, Some(Decision::Deny));
    assert_eq!(a.answered_by.as_deref(), Some("ada@example.com"));
    let twice = store
        .answer_approval("run-1", "req-1", Decision::Allow, "bob@example.com", None)
        .await
        .unwrap_err();
    assert!(twice.to_string().contains("ada@example.com"), "{twice}");
    let pending = store.pending_approvals("run-1").await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].request_id, "req-2");
    assert_eq!(store.approvals("run-1", false).await.unwrap().len(), 2);
    db.cleanup().await;
}

/// A person's answer has one writer, the run's watcher, from the driver's log lines (which
/// name the command's sealed sender and a deny's note): it records the command's ack and the
/// approval with their audit records once, whether the sender recorded the command before or
/// after, however often the same lines are read (a restarted watcher); a later answer to the
/// same request changes nothing; the sender's record fills in only what it knows.
async fn a_command_its_ack_and_an_answer_commit_with_their_audit_records(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    for r in ["req-1", "req-2"] {
        store
            .upsert_approval_requested("run-1", r, "Bash", &json!({"command": "ls"}))
            .await
            .unwrap();
    }
    let (head, _) = store.audit().head().await.unwrap();
    let sent = |kind, person| Some(SentBy { kind, person });

    // Command 1: the sender's record first, then the watcher's.
    let body = json!({"request_id": "req-1", "by": "ada@example.com"});
    store
        .record_command_sent("run-1", 1, "deny", &body, "ada@example.com")
        .await
        .unwrap();
    let c = store.command("run-1", 1).await.unwrap();
    assert_eq!((c.kind.as_str(), &c.body, c.ack), ("deny", &body, None));
    let first = [
        SliceEffect::ApprovalAnsweredByCommand {
            updated_input: None,
            request_id: "req-1",
            decision: Decision::Deny,
            seq: 1,
            person: Some("ada@example.com"),
            note: Some("too broad"),
        },
        SliceEffect::CommandAnswered {
            seq: 1,
            status: AckStatus::Done,
            reason: None,
            sent: sent("deny", "ada@example.com"),
        },
    ];
    store
        .commit_slice("run-1", 0, 10, &[ev("a", 1)], None, &first)
        .await
        .unwrap();
    // The same lines again (a watcher restarted before its cursor moved on): nothing new.
    store
        .commit_slice("run-1", 10, 20, &[ev("a", 1)], None, &first)
        .await
        .unwrap();
    let a = store.approval("run-1", "req-1").await.unwrap();
    assert_eq!(a.decision, Some(Decision::Deny));
    assert_eq!(a.answered_by.as_deref(), Some("ada@example.com"));
    assert_eq!(a.note.as_deref(), Some("too broad"));
    assert_eq!(
        store.command("run-1", 1).await.unwrap().ack,
        Some(AckStatus::Done)
    );

    // Command 2: the watcher first (the sender's record was late, or lost with its process):
    // the command's row is made from the log; the sender's record fills in the body.
    let second = [
        SliceEffect::ApprovalAnsweredByCommand {
            updated_input: None,
            request_id: "req-2",
            decision: Decision::Allow,
            seq: 2,
            person: Some("bob@example.com"),
            note: None,
        },
        SliceEffect::CommandAnswered {
            seq: 2,
            status: AckStatus::Done,
            reason: None,
            sent: sent("approve", "bob@example.com"),
        },
    ];
    store
        .commit_slice("run-1", 20, 30, &[ev("b", 2)], None, &second)
        .await
        .unwrap();
    let c = store.command("run-1", 2).await.unwrap();
    assert_eq!(
        (c.kind.as_str(), c.sent_by.as_str(), c.ack),
        ("approve", "bob@example.com", Some(AckStatus::Done))
    );
    let body2 = json!({"request_id": "req-2", "by": "bob@example.com"});
    store
        .record_command_sent("run-1", 2, "approve", &body2, "bob@example.com")
        .await
        .unwrap();
    let c = store.command("run-1", 2).await.unwrap();
    assert_eq!((&c.body, c.ack), (&body2, Some(AckStatus::Done)));
    assert_eq!(
        store
            .approval("run-1", "req-2")
            .await
            .unwrap()
            .answered_by
            .as_deref(),
        Some("bob@example.com")
    );

    // Command 3 answers req-1 again (the driver refuses that; a forged line would say done):
    // the first answer stands, and no `approval.answered` record is written for it.
    let third = [
        SliceEffect::ApprovalAnsweredByCommand {
            updated_input: None,
            request_id: "req-1",
            decision: Decision::Allow,
            seq: 3,
            person: Some("bob@example.com"),
            note: None,
        },
        SliceEffect::CommandAnswered {
            seq: 3,
            status: AckStatus::Refused,
            reason: Some("already answered"),
            sent: sent("approve", "bob@example.com"),
        },
    ];
    store
        .commit_slice("run-1", 30, 40, &[ev("c", 3)], None, &third)
        .await
        .unwrap();
    let a = store.approval("run-1", "req-1").await.unwrap();
    assert_eq!(
        (a.decision, a.answered_by.as_deref()),
        (Some(Decision::Deny), Some("ada@example.com"))
    );

    let records = store.audit().records(head, 100).await.unwrap();
    let got: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| (r.actor.as_str(), r.action.as_str(), r.detail.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "ada@example.com",
                "command.sent",
                r#"{"kind":"deny","run":"run-1","seq":1}"#
            ),
            (
                "ada@example.com",
                "approval.answered",
                r#"{"decision":"deny","note":"too broad","request_id":"req-1","run":"run-1"}"#
            ),
            (
                "ada@example.com",
                "command.acked",
                r#"{"reason":null,"run":"run-1","seq":1,"status":"done"}"#
            ),
            (
                "bob@example.com",
                "approval.answered",
                r#"{"decision":"allow","request_id":"req-2","run":"run-1"}"#
            ),
            (
                "bob@example.com",
                "command.acked",
                r#"{"reason":null,"run":"run-1","seq":2,"status":"done"}"#
            ),
            (
                "bob@example.com",
                "command.sent",
                r#"{"kind":"approve","run":"run-1","seq":2}"#
            ),
            (
                "bob@example.com",
                "command.acked",
                r#"{"reason":"already answered","run":"run-1","seq":3,"status":"refused"}"#
            ),
        ]
    );
    let (end, _) = store.audit().head().await.unwrap();
    assert_eq!(
        store.audit().verify().await.unwrap(),
        u64::try_from(end).unwrap()
    );
    db.cleanup().await;
}

/// A permission request is named by its whole id or a unique prefix within its run, on a
/// replica that recorded it (from memory) and on one that did not (read), the same way; `_`
/// and `%` in an id are letters, not wildcards.
async fn a_request_id_is_named_whole_or_by_a_unique_prefix(kind: Kind) {
    let db = TestDb::new(kind).await;
    let here = db.open_with_vault().await;
    let elsewhere = db.open_with_vault().await;
    let (_, turn) = seed(&here).await;
    seed_run(&here, &turn.id, "run-1").await;
    let second = here.create_turn("turn-2", "ses-1", "again").await.unwrap();
    seed_run(&here, &second.id, "run-2").await;
    for id in ["toolu_01", "toolu_012", "toolu_02", "a%b", "axb"] {
        here.upsert_approval_requested("run-1", id, "Bash", &json!({"command": "ls"}))
            .await
            .unwrap();
    }
    here.upsert_approval_requested("run-2", "zzz-other", "Bash", &json!({}))
        .await
        .unwrap();
    let one = |s: &str| Resolved::One(s.to_owned());
    for store in [&here, &elsewhere] {
        let by = |p: &'static str| store.approval_by_prefix("run-1", p);
        // Whole, though it is also the start of another.
        assert_eq!(by("toolu_01").await.unwrap(), one("toolu_01"));
        assert_eq!(by("toolu_012").await.unwrap(), one("toolu_012"));
        assert_eq!(by("toolu_02").await.unwrap(), one("toolu_02"));
        assert_eq!(by("toolu_0").await.unwrap(), Resolved::Many);
        assert_eq!(by("toolu_01_").await.unwrap(), Resolved::None);
        // `_` and `%` match themselves only.
        assert_eq!(by("toolu%").await.unwrap(), Resolved::None);
        assert_eq!(by("a%").await.unwrap(), one("a%b"));
        assert_eq!(by("a_").await.unwrap(), Resolved::None);
        // Another run's request is not this run's.
        assert_eq!(by("zzz").await.unwrap(), Resolved::None);
        assert_eq!(
            store.approval_by_prefix("run-2", "zzz").await.unwrap(),
            one("zzz-other")
        );
    }
    db.cleanup().await;
}
