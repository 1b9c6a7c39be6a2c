//! The audit log: concurrent appends verify; edits, deletions and reorderings are found.

use hangar_store::*;
use serde_json::json;

use crate::common::*;

crate::common::suite!(
    audit_verifies_concurrent_appends,
    audit_detects_an_edited_record,
    audit_detects_a_deleted_record,
    audit_detects_swapped_records,
);

async fn appended(store: &Store, n: usize) {
    for i in 0..n {
        store
            .audit()
            .append(
                "ada@example.com",
                "command.sent",
                &json!({"seq": i, "kind": "steer"}),
            )
            .await
            .unwrap();
    }
    assert_eq!(store.audit().verify().await.unwrap(), n as u64);
}

fn broken_at(r: Result<u64, StoreError>) -> i64 {
    match r {
        Err(StoreError::Audit(AuditError::Broken { seq, why })) => {
            assert!(!why.is_empty());
            seq
        }
        other => panic!("expected a broken chain, got {other:?}"),
    }
}

async fn audit_verifies_concurrent_appends(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    assert_eq!(store.audit().verify().await.unwrap(), 0);
    let other = db.open().await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let s = if i % 2 == 0 {
            store.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            s.audit()
                .append(
                    "hangar",
                    "key.made",
                    &json!({"run": format!("run-{i}"), "z": 1, "a": 2}),
                )
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(store.audit().verify().await.unwrap(), 20);
    let recs = store.audit().records(0, 100).await.unwrap();
    assert_eq!(recs.len(), 20);
    assert!(
        recs[0].detail.starts_with("{\"a\":2,"),
        "{}",
        recs[0].detail
    );
    assert_eq!(recs[1].prev_hash, recs[0].hash);
    assert_eq!(
        store.audit().head().await.unwrap(),
        (20, recs[19].hash.clone())
    );
    db.cleanup().await;
}

async fn audit_detects_an_edited_record(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    appended(&store, 5).await;
    db.exec("UPDATE audit_log SET actor = 'mallory@example.com' WHERE seq = 3")
        .await;
    assert_eq!(broken_at(store.audit().verify().await), 3);
    db.exec("UPDATE audit_log SET actor = 'ada@example.com' WHERE seq = 3")
        .await;
    assert_eq!(store.audit().verify().await.unwrap(), 5);
    db.exec("UPDATE audit_log SET detail = '{\"kind\":\"steer\",\"seq\":9}' WHERE seq = 2")
        .await;
    assert_eq!(broken_at(store.audit().verify().await), 2);
    db.cleanup().await;
}

async fn audit_detects_a_deleted_record(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    appended(&store, 5).await;
    db.exec("DELETE FROM audit_log WHERE seq = 3").await;
    let err = store.audit().verify().await;
    assert_eq!(broken_at(err), 3);
    // Cutting the tail is caught by the head.
    let db2 = TestDb::new(kind).await;
    let store2 = db2.open().await;
    appended(&store2, 4).await;
    db2.exec("DELETE FROM audit_log WHERE seq = 4").await;
    assert_eq!(broken_at(store2.audit().verify().await), 4);
    // And appends go on from the head, never reusing a seq.
    db.cleanup().await;
    db2.cleanup().await;
}

async fn audit_detects_swapped_records(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    appended(&store, 5).await;
    db.exec(
        "UPDATE audit_log SET seq = 100 WHERE seq = 2; \
         UPDATE audit_log SET seq = 2 WHERE seq = 3; \
         UPDATE audit_log SET seq = 3 WHERE seq = 100;",
    )
    .await;
    assert_eq!(broken_at(store.audit().verify().await), 2);
    db.cleanup().await;
}
