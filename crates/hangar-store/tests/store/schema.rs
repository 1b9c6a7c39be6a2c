//! Migrations and the refusal of a newer database.

use hangar_store::*;
use serde_json::json;

use crate::common::*;

crate::common::suite!(
    migrations_apply_once_and_reopen,
    a_newer_database_is_refused,
);

async fn migrations_apply_once_and_reopen(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    assert_eq!(store.schema_version().await.unwrap(), KNOWN_SCHEMA_VERSION);
    store
        .create_environment("kept", &json!({"a": [1, 2]}))
        .await
        .unwrap();
    store.close().await;
    let again = db.open().await;
    assert_eq!(again.schema_version().await.unwrap(), KNOWN_SCHEMA_VERSION);
    assert_eq!(
        again.environment("kept").await.unwrap().spec,
        json!({"a": [1, 2]})
    );
    // Two stores opening at once (two replicas starting) both succeed.
    let (a, b) = tokio::join!(Store::open(&db.url), Store::open(&db.url));
    a.unwrap();
    b.unwrap();
    db.cleanup().await;
}

async fn a_newer_database_is_refused(kind: Kind) {
    let db = TestDb::new(kind).await;
    db.open().await.close().await;
    let newer = KNOWN_SCHEMA_VERSION + 1;
    db.exec(&format!(
        "INSERT INTO schema_version (version, name, checksum, applied_at) \
         VALUES ({newer}, 'from_the_future', 'x', 0)"
    ))
    .await;
    let err = Store::open(&db.url).await.unwrap_err();
    match &err {
        StoreError::TooNew { found, known, .. } => {
            assert_eq!((*found, *known), (newer, KNOWN_SCHEMA_VERSION));
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("newer hangar") && msg.contains("upgrade hangar"),
        "{msg}"
    );
    db.cleanup().await;
}
