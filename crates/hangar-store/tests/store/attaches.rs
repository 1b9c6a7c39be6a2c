//! Relayed attaches under a lease (issue 24): only the holder renews one; another replica takes
//! it over only once the lease has run out, and only one of several at once; an ended one is
//! taken by no one.
use crate::common::*;
use hangar_store::AttachRecord;

crate::common::suite!(
    an_attach_is_taken_over_once_its_lease_has_run_out,
    agent_uids_are_claimed_once_and_given_back
);

async fn an_attach_is_taken_over_once_its_lease_has_run_out(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    let a = AttachRecord {
        id: "att-1".into(),
        owner: "tok-1".into(),
        person: "ada@example.com".into(),
        sandbox: "sb-1".into(),
        run: "run-1".into(),
        pid: 7,
        replica: "replica-a".into(),
        lease_until: 1_000,
        opened_at: 500,
        ended_at: None,
    };
    store.record_attach(&a).await.unwrap();
    assert_eq!(store.attach_record("att-1").await.unwrap(), Some(a.clone()));
    assert_eq!(store.attach_record("att-2").await.unwrap(), None);
    // Only its holder renews it.
    assert!(
        !store
            .renew_attach("att-1", "replica-b", 5_000)
            .await
            .unwrap()
    );
    assert!(
        store
            .renew_attach("att-1", "replica-a", 2_000)
            .await
            .unwrap()
    );
    assert!(store.stale_attaches(2_000).await.unwrap().is_empty());
    assert_eq!(store.stale_attaches(2_001).await.unwrap(), ["att-1"]);
    // Not while the lease holds.
    assert!(
        !store
            .take_attach_over("att-1", "replica-b", 1_999, 9_000)
            .await
            .unwrap()
    );
    // Once it ran out: one replica gets it, the next one asking does not.
    assert!(
        store
            .take_attach_over("att-1", "replica-b", 2_001, 9_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .take_attach_over("att-1", "replica-c", 2_002, 9_000)
            .await
            .unwrap()
    );
    let now = store.attach_record("att-1").await.unwrap().unwrap();
    assert_eq!(
        (now.replica.as_str(), now.lease_until),
        ("replica-b", 9_000)
    );
    assert!(
        !store
            .renew_attach("att-1", "replica-a", 10_000)
            .await
            .unwrap()
    );
    // Ended: no one renews or takes it.
    // Only by its holder.
    store
        .end_attach_record("att-1", "replica-a", 3_000)
        .await
        .unwrap();
    assert_eq!(
        store
            .attach_record("att-1")
            .await
            .unwrap()
            .unwrap()
            .ended_at,
        None
    );
    store
        .end_attach_record("att-1", "replica-b", 3_000)
        .await
        .unwrap();
    assert!(
        !store
            .renew_attach("att-1", "replica-b", 10_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .take_attach_over("att-1", "replica-c", 99_000, 100_000)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .attach_record("att-1")
            .await
            .unwrap()
            .unwrap()
            .ended_at,
        Some(3_000)
    );
    // Forgotten once it ended before the cutoff.
    assert_eq!(store.prune_attaches(3_000).await.unwrap(), 0);
    assert_eq!(store.prune_attaches(3_001).await.unwrap(), 1);
    assert_eq!(store.attach_record("att-1").await.unwrap(), None);
    db.cleanup().await;
}

async fn agent_uids_are_claimed_once_and_given_back(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    let none = std::collections::HashSet::new();
    let claim = |sb: &'static str, last: u32, also: std::collections::HashSet<u32>| {
        let store = store.clone();
        async move { store.claim_agent_uid(sb, (100, last), &also).await.unwrap() }
    };
    // One held without a row (a sandbox made before uids were claimed here) is skipped.
    assert_eq!(claim("sb-a", 102, [100].into()).await, Some(101));
    store.release_agent_uid("sb-a").await.unwrap();
    assert_eq!(claim("sb-a", 102, none.clone()).await, Some(100));
    assert_eq!(claim("sb-b", 102, none.clone()).await, Some(101));
    // Two at once: never the same one.
    let (c, d) = tokio::join!(
        claim("sb-c", 103, none.clone()),
        claim("sb-d", 103, none.clone())
    );
    let (c, d) = (c.unwrap(), d.unwrap());
    assert!(
        c != d && [102, 103].contains(&c) && [102, 103].contains(&d),
        "{c} {d}"
    );
    assert_eq!(claim("sb-e", 103, none.clone()).await, None);
    store.release_agent_uid("sb-a").await.unwrap();
    assert_eq!(claim("sb-e", 103, none).await, Some(100));
    db.cleanup().await;
}
