//! Events: exactly-once commits against the run's log cursor, and paging.

use hangar_store::*;
use serde_json::json;

use crate::common::*;

crate::common::suite!(
    floats_read_back_exactly,
    a_large_slice_keeps_its_order,
    the_watch_state_is_committed_with_its_cursor,
    commit_events_is_exactly_once,
    a_slice_commits_its_effects_with_it,
    a_slice_records_the_drivers_answers_nobody_recorded,
    a_slice_of_many_effects_ends_as_applying_them_one_by_one,
    replicas_claim_a_run_one_at_a_time,
    concurrent_committers_one_wins,
    events_page_by_session_and_run,
    an_event_names_a_session_and_a_run_that_exist,
    making_the_events_table_again_keeps_ids_and_their_sequence,
    another_replicas_events_are_heard,
);

/// Costs must read back bit for bit, or stored events would differ from a rebuild of the log.
async fn floats_read_back_exactly(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let costs = [0.00036799999999999995_f64, 0.1 + 0.2, 1e-17, 1.0 / 3.0];
    let events: Vec<NewEvent> = costs
        .iter()
        .map(|c| NewEvent {
            kind: "usage".into(),
            payload: json!({"cost_usd": c}),
        })
        .collect();
    store.commit_events("run-1", 0, 10, &events).await.unwrap();
    let back = store
        .events_after(EventScope::Run("run-1"), 0, 10)
        .await
        .unwrap();
    let got: Vec<f64> = back
        .iter()
        .map(|e| e.payload["cost_usd"].as_f64().unwrap())
        .collect();
    assert_eq!(
        got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
        costs.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
    );
}

/// One commit of more events than one multi-row INSERT holds (on PostgreSQL, a `COPY`): ids
/// ascend in the slice's order and every payload (NUL characters made U+FFFD, escapes and
/// characters beyond ASCII kept) reads back where it was, under its run and its session.
async fn a_large_slice_keeps_its_order(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let events: Vec<NewEvent> = (0..1234)
        .map(|i| NewEvent {
            kind: if i % 3 == 0 {
                "tool_call"
            } else {
                "assistant_text"
            }
            .into(),
            payload: json!({"i": i, "text": format!("line {i}\u{0}\t\\ \"q\"\n\u{e9}\u{1F600}"), "nested": {"a": [i, "x"]}}),
        })
        .collect();
    let ids = store.commit_events("run-1", 0, 99, &events).await.unwrap();
    assert_eq!(ids.len(), events.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids ascend");
    let mut back = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .events_after(EventScope::Run("run-1"), after, MAX_PAGE)
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = last.id;
        back.extend(page);
    }
    assert_eq!(back.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    let session = store
        .events_after(EventScope::Session(&turn.session_id), 0, MAX_PAGE)
        .await
        .unwrap();
    assert_eq!(
        session.iter().map(|e| e.id).collect::<Vec<_>>(),
        ids[..MAX_PAGE as usize]
    );
    for (i, (e, want)) in back.iter().zip(&events).enumerate() {
        assert_eq!(e.kind, want.kind);
        assert_eq!(e.payload["i"], json!(i));
        assert_eq!(
            e.payload["text"],
            json!(format!("line {i}\u{FFFD}\t\\ \"q\"\n\u{e9}\u{1F600}"))
        );
        assert_eq!(e.payload["nested"]["a"][0], json!(i));
    }
}

async fn the_watch_state_is_committed_with_its_cursor(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    assert_eq!(store.run("run-1").await.unwrap().watch_state, None);
    let state = json!({"offset": 120, "harness": "codex", "items": {"call_1": "item_0"}});
    store
        .commit_events_with_state("run-1", 0, 120, &[ev("assistant", 1)], Some(&state))
        .await
        .unwrap();
    let run = store.run("run-1").await.unwrap();
    assert_eq!(
        (run.log_cursor, run.watch_state),
        (120, Some(state.clone()))
    );
    // A losing committer writes no state either.
    let other = json!({"offset": 999});
    assert!(
        store
            .commit_events_with_state("run-1", 0, 130, &[] as &[NewEvent], Some(&other))
            .await
            .is_err()
    );
    assert_eq!(
        store.run("run-1").await.unwrap().watch_state,
        Some(state.clone())
    );
    // Without a state, the last one stays.
    store
        .commit_events("run-1", 120, 121, &[] as &[NewEvent])
        .await
        .unwrap();
    assert_eq!(store.run("run-1").await.unwrap().watch_state, Some(state));
}

async fn commit_events_is_exactly_once(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let ids = store
        .commit_events("run-1", 0, 120, &[ev("assistant", 1), ev("tool_use", 2)])
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    assert!(ids[0] < ids[1]);
    // The same slice again (a watcher that did not see its own commit): nothing written.
    let again = store
        .commit_events("run-1", 0, 120, &[ev("assistant", 1), ev("tool_use", 2)])
        .await
        .unwrap_err();
    match again {
        StoreError::CursorMoved {
            expected, found, ..
        } => assert_eq!((expected, found), (0, 120)),
        other => panic!("expected CursorMoved, got {other:?}"),
    }
    assert_eq!(store.run("run-1").await.unwrap().log_cursor, 120);
    // A slice with no events (blank lines) still moves the cursor.
    assert!(
        store
            .commit_events("run-1", 120, 121, &[] as &[NewEvent])
            .await
            .unwrap()
            .is_empty()
    );
    store
        .commit_events("run-1", 121, 200, &[ev("result", 3)])
        .await
        .unwrap();
    let all = store
        .events_after(EventScope::Run("run-1"), 0, 100)
        .await
        .unwrap();
    let kinds: Vec<&str> = all.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["assistant", "tool_use", "result"]);
    assert_eq!(all[0].session_id, "ses-1");
    assert_eq!(all[2].payload, json!({"n": 3, "text": "line 3"}));
    // After a restart the watcher finds the cursor with the live run.
    store.close().await;
    let reopened = db.open_with_vault().await;
    assert_eq!(reopened.live_runs().await.unwrap()[0].log_cursor, 200);
    assert!(matches!(
        reopened
            .commit_events("run-9", 0, 1, &[] as &[NewEvent])
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        reopened
            .commit_events("run-1", 200, 100, &[] as &[NewEvent])
            .await,
        Err(StoreError::Invalid(_))
    ));
    db.cleanup().await;
}

/// Permission requests, answers without a person and the harness's session id are stored in
/// the transaction that commits their slice, in order, and not at all by a losing committer.
async fn a_slice_commits_its_effects_with_it(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let input = json!({"command": "ls\u{0}"});
    let effects = [
        SliceEffect::HarnessSession("claude-abc"),
        SliceEffect::ApprovalRequested {
            request_id: "req-1",
            tool_name: "Bash",
            input: &input,
        },
        SliceEffect::ApprovalRequested {
            request_id: "req-2",
            tool_name: "Edit",
            input: &input,
        },
        // Asked and settled by the policy within one slice: in order.
        SliceEffect::ApprovalSettled {
            request_id: "req-2",
            decision: Decision::Deny,
            by: "policy",
            note: Some("deny"),
        },
        // Never asked: nothing to settle.
        SliceEffect::ApprovalSettled {
            request_id: "req-9",
            decision: Decision::Allow,
            by: "policy",
            note: None,
        },
    ];
    store
        .commit_slice("run-1", 0, 50, &[ev("session", 1)], None, &effects)
        .await
        .unwrap();
    let pending = store.pending_approvals("run-1").await.unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|a| a.request_id.as_str())
            .collect::<Vec<_>>(),
        ["req-1"]
    );
    assert_eq!(pending[0].input, json!({"command": "ls\u{FFFD}"}));
    let settled = store.approval("run-1", "req-2").await.unwrap();
    assert_eq!(
        (
            settled.decision,
            settled.answered_by.as_deref(),
            settled.note.as_deref()
        ),
        (Some(Decision::Deny), Some("policy"), Some("deny"))
    );
    assert!(store.approval("run-1", "req-9").await.is_err());
    assert_eq!(
        store
            .session("ses-1")
            .await
            .unwrap()
            .harness_session_id
            .as_deref(),
        Some("claude-abc")
    );

    // A person answers first: a later answer without a person does not replace it, and a
    // request seen again changes nothing.
    store
        .answer_approval("run-1", "req-1", Decision::Allow, "ann@example.com", None)
        .await
        .unwrap();
    let again = [
        SliceEffect::ApprovalRequested {
            request_id: "req-1",
            tool_name: "Other",
            input: &json!({}),
        },
        SliceEffect::ApprovalSettled {
            request_id: "req-1",
            decision: Decision::Deny,
            by: "harness",
            note: Some("cancelled"),
        },
    ];
    store
        .commit_slice("run-1", 50, 60, &[] as &[NewEvent], None, &again)
        .await
        .unwrap();
    let first = store.approval("run-1", "req-1").await.unwrap();
    assert_eq!(
        (
            first.tool_name.as_str(),
            first.decision,
            first.answered_by.as_deref()
        ),
        ("Bash", Some(Decision::Allow), Some("ann@example.com"))
    );

    // A losing committer (the cursor moved) records none of its effects.
    let late = [
        SliceEffect::ApprovalRequested {
            request_id: "req-3",
            tool_name: "Bash",
            input: &input,
        },
        SliceEffect::HarnessSession("claude-late"),
    ];
    assert!(matches!(
        store
            .commit_slice("run-1", 0, 70, &[ev("x", 2)], None, &late)
            .await,
        Err(StoreError::CursorMoved { .. })
    ));
    assert!(store.approval("run-1", "req-3").await.is_err());
    assert_eq!(
        store
            .session("ses-1")
            .await
            .unwrap()
            .harness_session_id
            .as_deref(),
        Some("claude-abc")
    );
    db.cleanup().await;
}

/// The driver's answers in the log (commands acked or refused, approvals answered by a
/// command) are recorded with their slice when no sender recorded them (a prompt's ack, which
/// nobody waits for; a control plane killed between delivering a command and recording its
/// answer), and never replace an answer already recorded.
async fn a_slice_records_the_drivers_answers_nobody_recorded(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    for (seq, kind) in [(1, "prompt"), (2, "approve"), (3, "steer"), (4, "deny")] {
        store
            .record_command("run-1", seq, kind, &json!({"text": "x"}), "ann@example.com")
            .await
            .unwrap();
    }
    store
        .record_ack("run-1", 3, AckStatus::Ended, Some("the turn has ended"))
        .await
        .unwrap();
    let input = json!({});
    let asked = [
        SliceEffect::ApprovalRequested {
            request_id: "req-1",
            tool_name: "Bash",
            input: &input,
        },
        SliceEffect::ApprovalRequested {
            request_id: "req-2",
            tool_name: "Bash",
            input: &input,
        },
    ];
    store
        .commit_slice("run-1", 0, 10, &[ev("a", 1)], None, &asked)
        .await
        .unwrap();
    store
        .answer_approval("run-1", "req-2", Decision::Deny, "bob@example.com", None)
        .await
        .unwrap();
    let effects = [
        SliceEffect::CommandAnswered {
            sent: None,
            seq: 1,
            status: AckStatus::Done,
            reason: None,
        },
        SliceEffect::ApprovalAnsweredByCommand {
            updated_input: None,
            note: None,
            person: None,
            request_id: "req-1",
            decision: Decision::Allow,
            seq: 2,
        },
        SliceEffect::CommandAnswered {
            sent: None,
            seq: 2,
            status: AckStatus::Done,
            reason: None,
        },
        // Recorded already by its sender: the first answer stands.
        SliceEffect::CommandAnswered {
            sent: None,
            seq: 3,
            status: AckStatus::Done,
            reason: None,
        },
        SliceEffect::ApprovalAnsweredByCommand {
            updated_input: None,
            note: None,
            person: None,
            request_id: "req-2",
            decision: Decision::Allow,
            seq: 4,
        },
        SliceEffect::CommandAnswered {
            sent: None,
            seq: 4,
            status: AckStatus::Refused,
            reason: Some("already answered"),
        },
        // A command the store never heard of: nothing to record.
        SliceEffect::CommandAnswered {
            sent: None,
            seq: 9,
            status: AckStatus::Done,
            reason: None,
        },
    ];
    store
        .commit_slice("run-1", 10, 20, &[ev("b", 2)], None, &effects)
        .await
        .unwrap();
    let acks: Vec<_> = store
        .commands("run-1")
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.seq, c.ack, c.ack_reason))
        .collect();
    assert_eq!(
        acks,
        [
            (1, Some(AckStatus::Done), None),
            (2, Some(AckStatus::Done), None),
            (3, Some(AckStatus::Ended), Some("the turn has ended".into())),
            (4, Some(AckStatus::Refused), Some("already answered".into())),
        ]
    );
    let a = store.approval("run-1", "req-1").await.unwrap();
    assert_eq!(
        (a.decision, a.answered_by.as_deref()),
        (Some(Decision::Allow), Some("ann@example.com"))
    );
    let b = store.approval("run-1", "req-2").await.unwrap();
    assert_eq!(
        (b.decision, b.answered_by.as_deref()),
        (Some(Decision::Deny), Some("bob@example.com"))
    );
    assert!(store.pending_approvals("run-1").await.unwrap().is_empty());
    db.cleanup().await;
}

/// A slice's effects are applied as a few multi-row statements: the store ends as it would
/// applying them one at a time, in order. Two runs with the same commands and approvals
/// before; one gets the effects as one slice, the other one slice per effect. Covered: chunks
/// of every size, repeated requests and answers (the first stands), answers to requests
/// recorded before (undecided or answered by a person), to commands acked before or never
/// sent, and an answer seen before its request in the same slice (it finds nothing to answer).
async fn a_slice_of_many_effects_ends_as_applying_them_one_by_one(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    let inputs: Vec<serde_json::Value> = (0..100)
        .map(|i| json!({"command": format!("echo {i}"), "nul": "a\u{0}b"}))
        .collect();
    let mut effects = Vec::new();
    for i in 0..100usize {
        let req: &'static str = Box::leak(format!("req-{i}").into_boxed_str());
        let seq = i as i64 + 1;
        let requested = SliceEffect::ApprovalRequested {
            request_id: req,
            tool_name: if i % 2 == 0 { "Bash" } else { "Edit" },
            input: &inputs[i],
        };
        match i % 7 {
            // Asked, then answered by a command, which is acked.
            0..=2 => effects.extend([
                requested,
                SliceEffect::CommandAnswered {
                    sent: None,
                    seq,
                    status: AckStatus::Done,
                    reason: None,
                },
                SliceEffect::ApprovalAnsweredByCommand {
                    updated_input: None,
                    note: None,
                    person: None,
                    request_id: req,
                    decision: if i % 3 == 0 {
                        Decision::Allow
                    } else {
                        Decision::Deny
                    },
                    seq,
                },
            ]),
            // Asked twice, settled by the policy, then answered again (too late).
            3 => effects.extend([
                requested,
                SliceEffect::ApprovalRequested {
                    request_id: req,
                    tool_name: "Other",
                    input: &inputs[0],
                },
                SliceEffect::ApprovalSettled {
                    request_id: req,
                    decision: Decision::Deny,
                    by: "policy",
                    note: Some("deny"),
                },
                SliceEffect::ApprovalAnsweredByCommand {
                    updated_input: None,
                    note: None,
                    person: None,
                    request_id: req,
                    decision: Decision::Allow,
                    seq,
                },
            ]),
            // Recorded before the slice (undecided, or answered by a person): only answered.
            4 => effects.push(SliceEffect::ApprovalSettled {
                request_id: req,
                decision: Decision::Allow,
                by: "harness",
                note: None,
            }),
            // A command answered twice (the first stands), one never sent.
            5 => effects.extend([
                SliceEffect::CommandAnswered {
                    sent: None,
                    seq,
                    status: AckStatus::Refused,
                    reason: Some("no"),
                },
                SliceEffect::CommandAnswered {
                    sent: None,
                    seq,
                    status: AckStatus::Done,
                    reason: None,
                },
                SliceEffect::CommandAnswered {
                    sent: None,
                    seq: seq + 1000,
                    status: AckStatus::Done,
                    reason: None,
                },
                SliceEffect::HarnessSession(req),
            ]),
            // Just asked.
            _ => effects.push(requested),
        }
    }
    // A person's answers and the answers to commands that name their sender (each audited
    // when it changes something): commands recorded before the slice (seq 1-100) or not yet
    // (seq 201+: the ack makes the row), one acked before (8: not again), answers too late.
    let updated = json!({"command": "echo changed"});
    // Commands recorded before that no other effect of the slice names; the first is acked.
    let free: Vec<i64> = (1..=100).filter(|s| matches!((s - 1) % 7, 4 | 6)).collect();
    for (k, input) in inputs.iter().enumerate().take(40) {
        let req: &'static str = Box::leak(format!("preq-{k}").into_boxed_str());
        let person: &'static str = Box::leak(format!("q{k}@example.com").into_boxed_str());
        let seq = match k {
            5 => free[0],
            k if k % 2 == 0 => 201 + k as i64,
            k => free[k / 2 + 1],
        };
        effects.extend([
            SliceEffect::ApprovalRequested {
                request_id: req,
                tool_name: "Bash",
                input,
            },
            SliceEffect::ApprovalAnsweredByCommand {
                request_id: req,
                decision: if k % 3 == 0 {
                    Decision::Deny
                } else {
                    Decision::Allow
                },
                seq,
                person: Some(person),
                note: (k % 3 == 0).then_some("not that"),
                updated_input: (k % 4 == 1).then_some(&updated),
            },
            SliceEffect::CommandAnswered {
                seq,
                status: AckStatus::Done,
                reason: None,
                sent: Some(SentBy {
                    kind: "approve",
                    person,
                }),
            },
        ]);
        if k % 5 == 0 {
            effects.push(SliceEffect::ApprovalAnsweredByCommand {
                request_id: req,
                decision: Decision::Allow,
                seq: 400,
                person: Some("late@example.com"),
                note: None,
                updated_input: None,
            });
        }
    }
    // An answer that reads its command's sender before the command's row is made, in order
    // (answered by `command`, then the row): grouped, the row would come first.
    let late_sender = [
        SliceEffect::ApprovalRequested {
            request_id: "req-sender",
            tool_name: "Bash",
            input: &inputs[2],
        },
        SliceEffect::ApprovalAnsweredByCommand {
            request_id: "req-sender",
            decision: Decision::Allow,
            seq: 300,
            person: None,
            note: None,
            updated_input: None,
        },
        SliceEffect::CommandAnswered {
            seq: 300,
            status: AckStatus::Done,
            reason: None,
            sent: Some(SentBy {
                kind: "approve",
                person: "sender@example.com",
            }),
        },
    ];
    // An answer before its request (in a slice of its own below too: that order matters).
    let early = [
        SliceEffect::ApprovalSettled {
            request_id: "req-early",
            decision: Decision::Allow,
            by: "policy",
            note: None,
        },
        SliceEffect::ApprovalRequested {
            request_id: "req-early",
            tool_name: "Bash",
            input: &inputs[1],
        },
        SliceEffect::HarnessSession("last"),
    ];
    store
        .create_session("ses-2", "sb-1", Harness::Claude, Policy::Ask)
        .await
        .unwrap();
    store
        .create_turn("turn-2", "ses-2", "fix it")
        .await
        .unwrap();
    for (run, turn) in [("run-batch", turn.id.as_str()), ("run-single", "turn-2")] {
        seed_run(&store, turn, run).await;
        for seq in 1..=100 {
            store
                .record_command(
                    run,
                    seq,
                    "approve",
                    &json!({}),
                    &format!("p{seq}@example.com"),
                )
                .await
                .unwrap();
        }
        store
            .record_ack(run, 8, AckStatus::Ended, Some("the turn has ended"))
            .await
            .unwrap();
        store
            .record_ack(run, free[0], AckStatus::Done, None)
            .await
            .unwrap();
        let before: Vec<SliceEffect> = (0..100)
            .filter(|i| i % 7 == 4)
            .map(|i| SliceEffect::ApprovalRequested {
                request_id: Box::leak(format!("req-{i}").into_boxed_str()),
                tool_name: "Bash",
                input: &inputs[i],
            })
            .collect();
        store
            .commit_slice(run, 0, 1, &[] as &[NewEvent], None, &before)
            .await
            .unwrap();
        store
            .answer_approval(run, "req-11", Decision::Deny, "ann@example.com", None)
            .await
            .unwrap();
    }
    store
        .commit_slice("run-batch", 1, 2, &[ev("a", 1)], None, &effects)
        .await
        .unwrap();
    store
        .commit_slice("run-batch", 2, 3, &[ev("b", 2)], None, &early)
        .await
        .unwrap();
    store
        .commit_slice("run-batch", 3, 4, &[ev("c", 3)], None, &late_sender)
        .await
        .unwrap();
    for (cursor, e) in (1..).zip(effects.iter().chain(&early).chain(&late_sender)) {
        store
            .commit_slice(
                "run-single",
                cursor,
                cursor + 1,
                &[] as &[NewEvent],
                None,
                &[*e],
            )
            .await
            .unwrap();
    }
    let state = |run: &'static str| {
        let store = store.clone();
        async move {
            let mut approvals = Vec::new();
            for id in (0..100)
                .map(|i| format!("req-{i}"))
                .chain((0..40).map(|k| format!("preq-{k}")))
                .chain(["req-early".into(), "req-sender".into()])
            {
                approvals.push(store.approval(run, &id).await.ok().map(|a| {
                    (
                        a.request_id,
                        a.tool_name,
                        a.input,
                        a.decision,
                        a.answered_by,
                        a.note,
                        a.answered_at.is_some(),
                    )
                }));
            }
            let commands: Vec<_> = store
                .commands(run)
                .await
                .unwrap()
                .into_iter()
                .map(|c| (c.seq, c.ack, c.ack_reason, c.sent_by))
                .collect();
            // The audit records of the run, in order, with the run's name taken out.
            let audit: Vec<_> = store
                .audit()
                .records(0, 10_000)
                .await
                .unwrap()
                .into_iter()
                .filter(|r| r.detail.contains(&format!("\"{run}\"")))
                .map(|r| (r.actor, r.action, r.detail.replace(run, "RUN")))
                .collect();
            (approvals, commands, audit)
        }
    };
    let (batch, single) = (state("run-batch").await, state("run-single").await);
    for (b, s) in batch.0.iter().zip(&single.0) {
        assert_eq!(b, s, "one slice, then one slice per effect");
    }
    for (b, s) in batch.1.iter().zip(&single.1) {
        assert_eq!(b, s, "one slice, then one slice per effect");
    }
    for (b, s) in batch.2.iter().zip(&single.2) {
        assert_eq!(b, s, "audit records: one slice, then one slice per effect");
    }
    assert_eq!(batch, single);
    store.audit().verify().await.unwrap();
    // The comparison compares something: every kind of outcome is there.
    let audited = |action: &str| batch.2.iter().filter(|r| r.1 == action).count();
    // 40 commands but the one acked before, and command 300; 40 answers (the late ones
    // answer nothing).
    assert_eq!(
        (audited("command.acked"), audited("approval.answered")),
        (40, 40)
    );
    assert!(batch.2.iter().any(|r| r.2.contains("updated_input")));
    let sender = batch.0.iter().flatten().find(|a| a.0 == "req-sender");
    assert_eq!(sender.and_then(|a| a.4.as_deref()), Some("command"));
    let decided = |by: &str| {
        batch
            .0
            .iter()
            .flatten()
            .filter(|a| a.4.as_deref() == Some(by))
            .count()
    };
    assert_eq!(decided("p1@example.com"), 1);
    assert_eq!(decided("policy"), 14);
    assert_eq!(decided("harness"), 13);
    assert_eq!(decided("ann@example.com"), 1);
    // Just asked, and the request after its answer.
    assert_eq!(
        batch.0.iter().flatten().filter(|a| a.3.is_none()).count(),
        15
    );
    // Never asked.
    assert_eq!(batch.0.iter().filter(|a| a.is_none()).count(), 14);
    assert_eq!(
        batch.1[5],
        (
            6,
            Some(AckStatus::Refused),
            Some("no".into()),
            "p6@example.com".into()
        )
    );
    assert_eq!(
        batch.1[7],
        (
            8,
            Some(AckStatus::Ended),
            Some("the turn has ended".into()),
            "p8@example.com".into()
        )
    );
    for session in ["ses-1", "ses-2"] {
        assert_eq!(
            store
                .session(session)
                .await
                .unwrap()
                .harness_session_id
                .as_deref(),
            Some("last")
        );
    }
    db.cleanup().await;
}

/// Replicas sharing a database watch a live run one at a time: a claim holds until its lease
/// runs out, its holder renews it, another replica takes an expired one over (the first then
/// cannot renew), two claiming at once get it once, and an ended run is no one's.
async fn replicas_claim_a_run_one_at_a_time(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let ids = |rs: Vec<Run>| rs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.unclaimed_live_runs(1000).await.unwrap()),
        ["run-1"]
    );
    assert!(store.claim_run("run-1", "a", 1000, 6000).await.unwrap());
    assert!(!store.claim_run("run-1", "b", 2000, 7000).await.unwrap());
    assert!(store.unclaimed_live_runs(2000).await.unwrap().is_empty());
    assert!(
        store.claim_run("run-1", "a", 5000, 10000).await.unwrap(),
        "renewed"
    );
    assert!(!store.claim_run("run-1", "b", 9000, 14000).await.unwrap());
    assert_eq!(
        ids(store.unclaimed_live_runs(10001).await.unwrap()),
        ["run-1"]
    );
    // Two replicas find it expired at once: one gets it.
    let other = db.open_with_vault().await;
    let (x, y) = tokio::join!(
        store.claim_run("run-1", "b", 10001, 15000),
        other.claim_run("run-1", "c", 10001, 15000)
    );
    assert_eq!([x.unwrap(), y.unwrap()].iter().filter(|h| **h).count(), 1);
    assert!(
        !store.claim_run("run-1", "a", 10002, 15002).await.unwrap(),
        "a lost it"
    );
    store.end_run("run-1").await.unwrap();
    assert!(!store.claim_run("run-1", "b", 99_000, 99_999).await.unwrap());
    assert!(store.unclaimed_live_runs(99_000).await.unwrap().is_empty());
    // A run made with its claim (its replica is placing it) is no one else's until it runs out.
    let turn2 = store
        .create_turn("turn-2", "ses-1", "placed")
        .await
        .unwrap();
    store
        .create_run(
            &NewRun {
                id: "run-2".into(),
                turn_id: turn2.id.clone(),
                ctl_path: "/home/h/runs/run-2.ctl".into(),
                driver_pid: None,
                lease: Some(("a".into(), 200_000)),
            },
            &secret(&[7u8; 32]),
        )
        .await
        .unwrap();
    assert!(store.unclaimed_live_runs(199_999).await.unwrap().is_empty());
    assert!(
        !store
            .claim_run("run-2", "b", 199_999, 205_000)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_run("run-2", "a", 199_999, 205_000)
            .await
            .unwrap()
    );
    db.cleanup().await;
}

async fn concurrent_committers_one_wins(kind: Kind) {
    let db = TestDb::new(kind).await;
    let a = db.open_with_vault().await;
    let (_, turn) = seed(&a).await;
    seed_run(&a, &turn.id, "run-1").await;
    // A second store on the same database: another replica.
    let b = db.open_with_vault().await;
    let mut cursor = 0;
    for round in 0..10 {
        let next = cursor + 10;
        let evs = vec![ev("line", round), ev("line", round)];
        let (ra, rb) = tokio::join!(
            a.commit_events("run-1", cursor, next, &evs),
            b.commit_events("run-1", cursor, next, &evs)
        );
        let wins = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {ra:?} {rb:?}");
        for r in [ra, rb] {
            if let Err(e) = r {
                assert!(matches!(e, StoreError::CursorMoved { .. }), "{e:?}");
            }
        }
        cursor = next;
    }
    let all = a
        .events_after(EventScope::Run("run-1"), 0, 1000)
        .await
        .unwrap();
    assert_eq!(all.len(), 20, "each slice's events exactly once");
    assert_eq!(a.run("run-1").await.unwrap().log_cursor, 100);
    db.cleanup().await;
}

async fn events_page_by_session_and_run(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let evs: Vec<NewEvent> = (0..25).map(|n| ev("line", n)).collect();
    store.commit_events("run-1", 0, 25, &evs).await.unwrap();
    let t2 = store.create_turn("turn-2", "ses-1", "more").await.unwrap();
    seed_run(&store, &t2.id, "run-2").await;
    store.commit_events("run-2", 0, 5, &evs[..5]).await.unwrap();
    let queued = store
        .append_event("ses-1", None, &ev("turn.queued", 99))
        .await
        .unwrap();

    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .events_after(EventScope::Run("run-1"), after, 10)
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 10);
        after = page.last().unwrap().id;
        seen.extend(page);
    }
    assert_eq!(seen.len(), 25);
    assert!(seen.windows(2).all(|w| w[0].id < w[1].id));
    let ns: Vec<i64> = seen
        .iter()
        .map(|e| e.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, (0..25).collect::<Vec<_>>());

    let session = store
        .events_after(EventScope::Session("ses-1"), 0, 1000)
        .await
        .unwrap();
    assert_eq!(session.len(), 31);
    assert_eq!(session.last().unwrap().id, queued);
    assert_eq!(session.last().unwrap().run_id, None);
    let tail = store
        .events_after(EventScope::Session("ses-1"), session[29].id, 1000)
        .await
        .unwrap();
    assert_eq!(tail.len(), 1);
    db.cleanup().await;
}

/// The events table keeps no foreign keys (migration 13): an event that names no session, or
/// a run that is not there, is refused by the store, and nothing is stored.
async fn an_event_names_a_session_and_a_run_that_exist(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let err = store
        .append_event("ses-nope", None, &ev("turn.queued", 1))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::NotFound { what: "session", key } if key == "ses-nope"),
        "{err:?}"
    );
    let err = store
        .append_event("ses-1", Some("run-nope"), &ev("turn.queued", 2))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::NotFound { what: "run", key } if key == "run-nope"),
        "{err:?}"
    );
    store
        .append_event("ses-1", Some("run-1"), &ev("turn.queued", 3))
        .await
        .unwrap();
    let all = store
        .events_after(EventScope::Session("ses-1"), 0, 1000)
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].payload["n"], 3);
    db.cleanup().await;
}

/// Migration 13 makes the events table again on SQLite: every event keeps its id, and the next
/// id is above every id ever handed out, even the newest event's that was removed since (a
/// live stream that saw it must never see a new event under it). Applied twice (as the
/// upgrade tests do), it changes nothing more.
async fn making_the_events_table_again_keeps_ids_and_their_sequence(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let evs: Vec<NewEvent> = (0..5).map(|n| ev("line", n)).collect();
    let ids = store.commit_events("run-1", 0, 5, &evs).await.unwrap();
    store.close().await;
    db.exec(&format!(
        "DELETE FROM events WHERE id = {}; DELETE FROM schema_version WHERE version >= 13",
        ids[4]
    ))
    .await;
    let store = db.open_with_vault().await;
    assert_eq!(store.schema_version().await.unwrap(), KNOWN_SCHEMA_VERSION);
    let kept = store
        .events_after(EventScope::Run("run-1"), 0, 1000)
        .await
        .unwrap();
    assert_eq!(
        kept.iter().map(|e| e.id).collect::<Vec<_>>(),
        ids[..4],
        "the events keep their ids"
    );
    assert_eq!(kept[3].payload["n"], 3);
    let next = store
        .append_event("ses-1", Some("run-1"), &ev("turn.queued", 9))
        .await
        .unwrap();
    assert!(
        next > ids[4],
        "a new event got id {next}, not above {}",
        ids[4]
    );
    db.cleanup().await;
}

/// Replicas sharing PostgreSQL hear each other's stored events (LISTEN/NOTIFY): a commit of
/// one store is a notice to a listener of another, naming the run, the session and the newest
/// id; a store does not hear its own, nor another schema's. On SQLite there is nothing to
/// listen to.
async fn another_replicas_events_are_heard(kind: Kind) {
    let db = TestDb::new(kind).await;
    let a = db.open_with_vault().await;
    let b = db.open_with_vault().await;
    let Some(mut heard_by_b) = b.event_notices().await.unwrap() else {
        assert_eq!(kind, Kind::Sqlite, "PostgreSQL gave no listener");
        db.cleanup().await;
        return;
    };
    let mut heard_by_a = a.event_notices().await.unwrap().unwrap();
    // Another hangar in another schema of the same database: its notices are not B's.
    let other = TestDb::new(kind).await;
    let c = other.open_with_vault().await;
    let (_, t) = seed(&c).await;
    seed_run(&c, &t.id, "run-1").await;
    let five: Vec<NewEvent> = (0..5).map(|n| ev("line", n)).collect();
    c.commit_events("run-1", 0, 5, &five).await.unwrap();
    let (_, turn) = seed(&a).await;
    seed_run(&a, &turn.id, "run-1").await;
    let evs: Vec<NewEvent> = (0..3).map(|n| ev("line", n)).collect();
    let ids = a.commit_events("run-1", 0, 3, &evs).await.unwrap();
    assert_eq!(
        next_notice(&mut heard_by_b).await,
        Notice::Stored {
            run: Some("run-1".into()),
            session: "ses-1".into(),
            newest: ids[2],
        }
    );
    let queued = b
        .append_event("ses-1", None, &ev("turn.queued", 9))
        .await
        .unwrap();
    // A hears B's event, and not its own commit before it.
    assert_eq!(
        next_notice(&mut heard_by_a).await,
        Notice::Stored {
            run: None,
            session: "ses-1".into(),
            newest: queued,
        }
    );
    other.cleanup().await;
    db.cleanup().await;
}

async fn next_notice(n: &mut Notices) -> Notice {
    tokio::time::timeout(std::time::Duration::from_secs(5), n.next())
        .await
        .expect("no notice within 5 s")
        .unwrap()
}
