//! Forks: recorded once per session, listed by the run they came from.

use hangar_store::*;
use serde_json::json;

use crate::common::*;

crate::common::suite!(a_fork_is_recorded_once_and_listed_by_run);

async fn a_fork_is_recorded_once_and_listed_by_run(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    store
        .create_session("ses-2", "sb-1", Harness::Claude, Policy::Ask)
        .await
        .unwrap();
    assert_eq!(store.fork("ses-2").await.unwrap(), None);
    let new = NewFork {
        session_id: "ses-2".into(),
        run_id: "run-1".into(),
        step: 2,
        tree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
        record: json!({"conversation": {"exact": true}}),
        person: "ada@example.com".into(),
    };
    let made = store.create_fork(&new).await.unwrap();
    assert_eq!(
        (made.step, made.record.clone(), made.person.as_str()),
        (
            2,
            json!({"conversation": {"exact": true}}),
            "ada@example.com"
        )
    );
    assert_eq!(store.fork("ses-2").await.unwrap(), Some(made.clone()));
    assert_eq!(store.forks_of_run("run-1").await.unwrap(), vec![made]);
    let again = store.create_fork(&new).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    let orphan = store
        .create_fork(&NewFork {
            session_id: "ses-9".into(),
            ..new
        })
        .await;
    assert!(matches!(orphan, Err(StoreError::Conflict(_))), "{orphan:?}");
}
