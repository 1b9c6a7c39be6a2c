//! An ended run's kept files in the database (issue 24): chunked, read back whole, replaced
//! whole, gone with the run's pruning.
use crate::common::*;

crate::common::suite!(kept_files_come_back_whole_and_go_with_the_run);

async fn kept_files_come_back_whole_and_go_with_the_run(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let dir = tempfile::tempdir().unwrap();
    // Two whole chunks and a piece, every byte telling its place.
    let big: Vec<u8> = (0..(2 * hangar_store::KEPT_CHUNK + 12_345))
        .map(|i| (i % 251) as u8)
        .collect();
    std::fs::write(dir.path().join("log"), &big).unwrap();
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    store
        .put_kept_file("run-1", "run.log", &dir.path().join("log"))
        .await
        .unwrap();
    store
        .put_kept_file("run-1", "trees.idx", &dir.path().join("empty"))
        .await
        .unwrap();
    assert_eq!(
        store.kept_file_names("run-1").await.unwrap(),
        ["run.log", "trees.idx"]
    );
    assert_eq!(
        store.kept_file_sizes("run-1").await.unwrap(),
        [
            ("run.log".to_owned(), big.len() as i64),
            ("trees.idx".to_owned(), 0)
        ]
    );
    let back = dir.path().join("back");
    assert!(
        store
            .get_kept_file("run-1", "run.log", &back)
            .await
            .unwrap()
    );
    assert!(
        std::fs::read(&back).unwrap() == big,
        "the log came back changed"
    );
    assert!(
        store
            .get_kept_file("run-1", "trees.idx", &back)
            .await
            .unwrap()
    );
    assert_eq!(std::fs::read(&back).unwrap(), b"");
    assert!(
        !store
            .get_kept_file("run-1", "trees.pack", &back)
            .await
            .unwrap()
    );
    // Replaced whole: no chunk of the longer file is left behind.
    std::fs::write(dir.path().join("short"), b"short").unwrap();
    store
        .put_kept_file("run-1", "run.log", &dir.path().join("short"))
        .await
        .unwrap();
    assert!(
        store
            .get_kept_file("run-1", "run.log", &back)
            .await
            .unwrap()
    );
    assert_eq!(std::fs::read(&back).unwrap(), b"short");
    store.end_run("run-1").await.unwrap();
    store.prune_run("run-1").await.unwrap();
    assert!(store.kept_file_names("run-1").await.unwrap().is_empty());
    // A session's files (its harness conversations) go when they are forgotten, and only its.
    store
        .put_kept_file("ses-1", "home/a.jsonl", &dir.path().join("short"))
        .await
        .unwrap();
    store
        .put_kept_file("sb-1", "repo.plain", &dir.path().join("empty"))
        .await
        .unwrap();
    assert_eq!(store.forget_kept("ses-1").await.unwrap(), 1);
    assert!(store.kept_file_names("ses-1").await.unwrap().is_empty());
    assert_eq!(store.kept_file_names("sb-1").await.unwrap(), ["repo.plain"]);
    db.cleanup().await;
}
