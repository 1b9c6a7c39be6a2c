//! Conformance results per harness version: recorded, read back, replaced by a newer run.

use hangar_store::*;
use serde_json::json;

use crate::common::*;

crate::common::suite!(a_version_result_is_recorded_and_a_newer_run_replaces_it);

async fn a_version_result_is_recorded_and_a_newer_run_replaces_it(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    assert_eq!(
        store
            .harness_check(Harness::Claude, "2.1.328")
            .await
            .unwrap(),
        None
    );
    let failing = json!({"steer": "fails: the steer never reached the model"});
    let first = store
        .record_harness_check(Harness::Claude, "2.1.328", 1, false, &failing, "ada")
        .await
        .unwrap();
    assert_eq!(
        (first.passed, first.suite, first.capabilities.clone()),
        (false, 1, failing)
    );
    let holding = json!({"steer": "holds", "interrupt": "holds"});
    let second = store
        .record_harness_check(Harness::Claude, "2.1.328", 2, true, &holding, "bob")
        .await
        .unwrap();
    assert_eq!(
        (second.passed, second.suite, second.person.as_str()),
        (true, 2, "bob")
    );
    assert_eq!(second.capabilities, holding);
    // Per harness: Codex of the same version string is another row.
    assert_eq!(
        store
            .harness_check(Harness::Codex, "2.1.328")
            .await
            .unwrap(),
        None
    );
    store
        .record_harness_check(Harness::Codex, "0.169.0", 2, true, &json!({}), "ada")
        .await
        .unwrap();
    let all = store.harness_checks().await.unwrap();
    assert_eq!(
        all.iter()
            .map(|c| (c.harness, c.version.as_str()))
            .collect::<Vec<_>>(),
        [(Harness::Claude, "2.1.328"), (Harness::Codex, "0.169.0")]
    );
}
