//! The vault through the store: run keys and credentials, the key check, moved ciphertexts.

use hangar_store::*;

use crate::common::*;

crate::common::suite!(
    secrets_round_trip_and_never_reach_the_database,
    a_wrong_master_key_is_refused,
    a_moved_ciphertext_does_not_open,
    a_sandbox_handles_token_is_sealed_in_the_database,
    owned_secrets_are_kept_apart_by_owner,
    a_sign_in_flow_is_sealed_taken_once_and_expires,
);

/// A sign-in flow in progress: its state is sealed (never in the database as written), found
/// by the flow id only (its hash is the key), taken at most once, never after its expiry, and
/// only as the kind it was begun as.
async fn a_sign_in_flow_is_sealed_taken_once_and_expires(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let state = Secret::new(b"pkce-verifier-and-nonce-0123456789".to_vec());
    let later = now_ms() + 60_000;
    store
        .put_sign_in_flow("flow-a", FlowKind::Web, &state, later)
        .await
        .unwrap();
    let raw = db.dump().await;
    assert!(
        !raw.windows(state.expose().len())
            .any(|w| w == state.expose()),
        "the flow's state is sealed"
    );
    assert!(
        !raw.windows(6).any(|w| w == b"flow-a"),
        "the flow id is not stored, its hash is"
    );
    assert!(
        store
            .take_sign_in_flow("flow-a", FlowKind::Device)
            .await
            .unwrap()
            .is_none(),
        "a web flow is not a device flow"
    );
    let peek = store.sign_in_flow("flow-a", FlowKind::Web).await.unwrap();
    assert_eq!(peek.unwrap().expose(), state.expose(), "reading leaves it");
    let got = store
        .take_sign_in_flow("flow-a", FlowKind::Web)
        .await
        .unwrap();
    assert_eq!(got.unwrap().expose(), state.expose());
    assert!(
        store
            .take_sign_in_flow("flow-a", FlowKind::Web)
            .await
            .unwrap()
            .is_none(),
        "taken once"
    );
    // An expired flow is not handed out, and the next flow's start forgets it.
    store
        .put_sign_in_flow("flow-old", FlowKind::Device, &state, now_ms() - 1)
        .await
        .unwrap();
    assert!(
        store
            .sign_in_flow("flow-old", FlowKind::Device)
            .await
            .unwrap()
            .is_none()
    );
    // Beginning a flow forgets the expired ones: the same id again is a new row, not a
    // conflict with the expired one.
    store
        .put_sign_in_flow("flow-old", FlowKind::Device, &state, later)
        .await
        .unwrap();
    assert!(
        store
            .sign_in_flow("flow-old", FlowKind::Device)
            .await
            .unwrap()
            .is_some()
    );
    db.cleanup().await;
}

/// A person's, an environment's and the server's secrets of the same name are three secrets;
/// one person's sealed value copied into another's row does not open (issue 20).
async fn owned_secrets_are_kept_apart_by_owner(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let alice = SecretOwner::Person("alice@example.com".into());
    let bob = SecretOwner::Person("bob@example.com".into());
    let env = SecretOwner::Environment("default".into());
    let name = "ANTHROPIC_API_KEY";
    for (owner, value) in [
        (&alice, "sk-alice-7f3a"),
        (&bob, "sk-bob-19c2"),
        (&env, "sk-env-55d0"),
        (&SecretOwner::Server, "sk-server-0b1e"),
    ] {
        store
            .set_secret(owner, name, &Secret::from(value))
            .await
            .unwrap();
    }
    store
        .set_secret(&alice, "OTHER", &Secret::from("x"))
        .await
        .unwrap();
    let open = |v: Vec<(String, Secret)>| -> Vec<(String, Vec<u8>)> {
        v.into_iter()
            .map(|(n, s)| (n, s.expose().to_vec()))
            .collect()
    };
    assert_eq!(
        open(store.secrets_of(&alice).await.unwrap()),
        vec![
            (name.to_owned(), b"sk-alice-7f3a".to_vec()),
            ("OTHER".to_owned(), b"x".to_vec())
        ]
    );
    assert_eq!(
        open(store.secrets_of(&env).await.unwrap()),
        vec![(name.to_owned(), b"sk-env-55d0".to_vec())]
    );
    assert!(
        store
            .secrets_of(&SecretOwner::Server)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.credential(name).await.unwrap().expose(),
        b"sk-server-0b1e"
    );
    assert_eq!(
        store.credential_names().await.unwrap(),
        vec![name.to_owned()]
    );
    assert_eq!(
        store.secret_names(&bob).await.unwrap(),
        vec![name.to_owned()]
    );
    let dump = db.dump().await;
    assert!(!contains(&dump, b"sk-alice-7f3a") && !contains(&dump, b"sk-bob-19c2"));
    // bob's row given alice's sealed value does not open as bob's.
    db.exec(
        "UPDATE owned_secrets SET sealed = (SELECT sealed FROM owned_secrets \
         WHERE owner = 'alice@example.com' AND name = 'ANTHROPIC_API_KEY') \
         WHERE owner = 'bob@example.com'",
    )
    .await;
    assert!(matches!(
        store.secrets_of(&bob).await,
        Err(StoreError::Vault(VaultError::CannotOpen { .. }))
    ));
    assert!(store.remove_secret(&alice, "OTHER").await.unwrap());
    assert!(!store.remove_secret(&alice, "OTHER").await.unwrap());
    assert_eq!(
        store.secret_names(&alice).await.unwrap(),
        vec![name.to_owned()]
    );
    db.cleanup().await;
}

/// An e2b sandbox's handle carries envd's access token (root in the sandbox): the database holds
/// it sealed, bound to the sandbox; the store gives it back in the clear.
async fn a_sandbox_handles_token_is_sealed_in_the_database(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    seed(&store).await;
    let token = "envd-RootTokenForTheSandbox-7f3a";
    let handle =
        serde_json::json!({"sandbox": "e2b-1", "url": "http://127.0.0.1:1", "token": token});
    for id in ["sb-e2b", "sb-e2b-2"] {
        let made = store
            .create_sandbox(&NewSandbox {
                id: id.into(),
                environment: "default".into(),
                kind: "e2b".into(),
                workdir: "/w".into(),
                person: "ada@example.com".into(),
                handle: Some(handle.clone()),
            })
            .await
            .unwrap();
        assert_eq!(made.handle.as_ref(), Some(&handle));
    }
    assert_eq!(
        store.sandbox("sb-e2b").await.unwrap().handle,
        Some(handle.clone())
    );
    let listed = store.sandboxes(None).await.unwrap();
    assert!(
        listed
            .iter()
            .filter(|s| s.kind == "e2b")
            .all(|s| s.handle == Some(handle.clone()))
    );
    let dump = db.dump().await;
    assert!(contains(&dump, b"e2b-1"), "the rest of the handle is there");
    assert!(
        !contains(&dump, token.as_bytes()),
        "the database holds envd's token"
    );

    // Without the vault a sandbox whose handle holds a sealed token cannot be read.
    let plain = db.open().await;
    let first = plain.sandbox("sb-e2b").await;
    assert!(
        matches!(first, Err(StoreError::NoVault)),
        "without the vault a sealed token cannot be read: {first:?}"
    );
}

async fn secrets_round_trip_and_never_reach_the_database(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    let run_key: Vec<u8> = (0u8..32)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect();
    let run = NewRun {
        id: "run-1".into(),
        turn_id: turn.id.clone(),
        ctl_path: "/h/runs/run-1.ctl".into(),
        driver_pid: Some(77),
        lease: None,
    };
    store.create_run(&run, &secret(&run_key)).await.unwrap();
    let credential = "ghp_TopSecretCredentialValue42";
    store
        .set_credential("GITHUB_TOKEN", &Secret::from(credential))
        .await
        .unwrap();
    store
        .set_credential("OTHER", &Secret::from("x"))
        .await
        .unwrap();
    assert_eq!(store.run_key("run-1").await.unwrap().expose(), &run_key[..]);
    assert_eq!(
        store.credential("GITHUB_TOKEN").await.unwrap().expose(),
        credential.as_bytes()
    );
    assert_eq!(
        store.credential_names().await.unwrap(),
        ["GITHUB_TOKEN", "OTHER"]
    );
    assert!(
        store
            .set_credential("bad name", &Secret::from("x"))
            .await
            .is_err()
    );

    let dump = db.dump().await;
    let key_hex = std::fs::read_to_string(db.key_path()).unwrap();
    let key_raw = hex::decode(key_hex.trim()).unwrap();
    assert!(contains(&dump, b"GITHUB_TOKEN"), "the dump holds the names");
    for (what, needle) in [
        ("credential", credential.as_bytes().to_vec()),
        ("run key", run_key.clone()),
        ("run key hex", hex::encode(&run_key).into_bytes()),
        ("master key", key_raw.clone()),
        ("master key hex", key_hex.trim().as_bytes().to_vec()),
    ] {
        assert!(!contains(&dump, &needle), "the database holds the {what}");
    }

    assert!(store.destroy_run_key("run-1").await.unwrap());
    assert!(!store.run("run-1").await.unwrap().has_key);
    assert!(matches!(
        store.run_key("run-1").await,
        Err(StoreError::NotFound { .. })
    ));
    store.put_run_key("run-1", &secret(b"fresh")).await.unwrap();
    assert_eq!(store.run_key("run-1").await.unwrap().expose(), b"fresh");
    assert!(store.remove_credential("OTHER").await.unwrap());
    assert!(!store.remove_credential("OTHER").await.unwrap());
    assert!(matches!(
        store.credential("OTHER").await,
        Err(StoreError::NotFound { .. })
    ));
    let plain = db.open().await;
    assert!(matches!(
        plain.credential("GITHUB_TOKEN").await,
        Err(StoreError::NoVault)
    ));
    db.cleanup().await;
}

async fn a_wrong_master_key_is_refused(kind: Kind) {
    let db = TestDb::new(kind).await;
    db.open_with_vault().await;
    let other = db.dir.path().join("other.key");
    let wrong = Vault::open_or_create(&other).unwrap();
    let err = db.open().await.with_vault(wrong).await.unwrap_err();
    match &err {
        StoreError::Vault(VaultError::WrongMasterKey { key_file }) => assert_eq!(key_file, &other),
        e => panic!("expected WrongMasterKey, got {e:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&other.display().to_string()), "{msg}");
    assert!(msg.contains("HANGAR_MASTER_KEY_FILE"), "{msg}");
    // The right key still works.
    db.open_with_vault().await;
    db.cleanup().await;
}

async fn a_moved_ciphertext_does_not_open(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let (_, turn) = seed(&store).await;
    seed_run(&store, &turn.id, "run-1").await;
    let t2 = store.create_turn("turn-2", "ses-1", "p").await.unwrap();
    seed_run(&store, &t2.id, "run-2").await;
    store
        .put_run_key("run-2", &secret(b"key two"))
        .await
        .unwrap();
    store
        .set_credential("A", &Secret::from("value a"))
        .await
        .unwrap();
    store
        .set_credential("B", &Secret::from("value b"))
        .await
        .unwrap();
    db.exec(
        "UPDATE runs SET run_key = (SELECT run_key FROM runs WHERE id = 'run-1') \
         WHERE id = 'run-2'",
    )
    .await;
    db.exec(
        "UPDATE credentials SET sealed = (SELECT sealed FROM credentials WHERE name = 'A') \
         WHERE name = 'B'",
    )
    .await;
    let err = store.run_key("run-2").await.unwrap_err();
    assert!(
        matches!(err, StoreError::Vault(VaultError::CannotOpen { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("does not open"), "{err}");
    assert!(matches!(
        store.credential("B").await,
        Err(StoreError::Vault(VaultError::CannotOpen { .. }))
    ));
    assert_eq!(store.run_key("run-1").await.unwrap().expose(), &[7u8; 32]);
    assert_eq!(store.credential("A").await.unwrap().expose(), b"value a");
    db.cleanup().await;
}
