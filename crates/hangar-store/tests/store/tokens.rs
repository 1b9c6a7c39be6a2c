//! API tokens and people: only hashes stored, authentication, revocation, expiry, roles,
//! removal, and the audit of each change.

use hangar_store::*;

use crate::common::*;

crate::common::suite!(
    tokens_store_only_hashes,
    people_have_roles_and_removal_ends_their_tokens,
    tokens_expire_and_mark_their_use_once_a_minute,
    an_upgraded_database_keeps_its_tokens_working_for_ninety_days,
    emails_compare_without_case_everywhere_a_person_is_looked_up,
    upgrading_lower_cases_emails_and_keeps_old_secrets_open,
    upgrading_refuses_two_people_who_differ_only_by_case,
    viewers_are_a_role,
    a_revoked_token_is_refused_at_once_here_and_within_a_second_elsewhere,
);

fn detail(r: &AuditRecord) -> serde_json::Value {
    serde_json::from_str(&r.detail).unwrap()
}

fn new_token(person: &str) -> NewToken<'_> {
    NewToken {
        person,
        name: "",
        lifetime_ms: DEFAULT_LIFETIME_MS,
        actor: "root@localhost",
    }
}

async fn tokens_store_only_hashes(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    // A token is for a person of the team only.
    let refused = store
        .create_token(new_token("ada@example.com"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("person add"), "{refused}");
    store
        .add_person("ada@example.com", Role::Member, "root@localhost")
        .await
        .unwrap();
    store
        .add_person("bob@example.com", Role::Admin, "root@localhost")
        .await
        .unwrap();
    let made = store
        .create_token(new_token("ada@example.com"))
        .await
        .unwrap();
    assert!(
        made.token.starts_with("hgr_") && made.token.len() == 68,
        "{}",
        made.token.len()
    );
    assert!(!format!("{made:?}").contains(&made.token));
    let rec = store
        .token_by_hash(&hash_token(&made.token))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (rec.id.as_str(), rec.person.as_str()),
        (made.id.as_str(), "ada@example.com")
    );
    let dump = db.dump().await;
    assert!(
        !contains(&dump, made.token.as_bytes()),
        "the token is in the database"
    );
    assert!(!contains(&dump, &made.token.as_bytes()[4..]));
    assert!(contains(&dump, hash_token(&made.token).as_bytes()));

    let who = store.authenticate(&made.token).await.unwrap().unwrap();
    assert_eq!(
        who,
        Person {
            email: "ada@example.com".into(),
            token_id: made.id.clone(),
            role: Role::Member,
        }
    );
    let mut wrong = made.token.clone();
    wrong.replace_range(10..11, if &made.token[10..11] == "0" { "1" } else { "0" });
    assert_eq!(store.authenticate(&wrong).await.unwrap(), None);
    assert_eq!(store.authenticate("Bearer nonsense").await.unwrap(), None);
    assert!(store.create_token(new_token("not-an-email")).await.is_err());
    for lifetime_ms in [0, -1, MAX_LIFETIME_MS + 1] {
        let e = store
            .create_token(NewToken {
                lifetime_ms,
                ..new_token("ada@example.com")
            })
            .await
            .unwrap_err();
        assert!(e.to_string().contains("365 days"), "{e}");
    }

    let other = store
        .create_token(new_token("bob@example.com"))
        .await
        .unwrap();
    assert_eq!(
        store
            .authenticate(&other.token)
            .await
            .unwrap()
            .unwrap()
            .role,
        Role::Admin
    );
    assert!(
        store
            .revoke_token(&made.id, "bob@example.com")
            .await
            .unwrap()
    );
    assert!(
        !store
            .revoke_token(&made.id, "bob@example.com")
            .await
            .unwrap()
    );
    assert_eq!(store.authenticate(&made.token).await.unwrap(), None);
    assert!(store.authenticate(&other.token).await.unwrap().is_some());
    let records = store.audit().records(0, 100).await.unwrap();
    let revoked = records
        .iter()
        .find(|r| r.action == "token.revoked")
        .unwrap();
    assert_eq!(revoked.actor, "bob@example.com");
    assert_eq!(detail(revoked)["id"], made.id.as_str());
    assert_eq!(detail(revoked)["person"], "ada@example.com");
    let created = records
        .iter()
        .filter(|r| r.action == "token.created")
        .count();
    assert_eq!(created, 2);
    assert_eq!(
        store.tokens(Some("ada@example.com")).await.unwrap().len(),
        1
    );
    assert_eq!(store.tokens(None).await.unwrap().len(), 2);
    db.cleanup().await;
}

async fn people_have_roles_and_removal_ends_their_tokens(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let ada = store
        .add_person("ada@example.com", Role::Admin, "root@localhost")
        .await
        .unwrap();
    assert_eq!(ada.role, Role::Admin);
    store
        .add_person("bob@example.com", Role::Member, "ada@example.com")
        .await
        .unwrap();
    for bad in ["bob", "@example.com", "bob@", "a b@example.com", "a@b@c"] {
        assert!(
            store
                .add_person(bad, Role::Member, "ada@example.com")
                .await
                .is_err(),
            "{bad}"
        );
    }
    let again = store
        .add_person("bob@example.com", Role::Admin, "ada@example.com")
        .await
        .unwrap_err();
    assert!(again.to_string().contains("already"), "{again}");
    let emails: Vec<_> = store
        .people()
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.email, p.role))
        .collect();
    assert_eq!(
        emails,
        [
            ("ada@example.com".to_owned(), Role::Admin),
            ("bob@example.com".to_owned(), Role::Member)
        ]
    );

    let bobs = store
        .create_token(new_token("bob@example.com"))
        .await
        .unwrap();
    assert!(store.authenticate(&bobs.token).await.unwrap().is_some());
    // bob's model key goes with him; ada's stays.
    let (bob, ada) = (
        SecretOwner::Person("bob@example.com".into()),
        SecretOwner::Person("ada@example.com".into()),
    );
    for owner in [&bob, &ada] {
        store
            .set_secret(owner, "ANTHROPIC_API_KEY", &Secret::new(b"k".to_vec()))
            .await
            .unwrap();
    }
    assert!(
        store
            .remove_person("bob@example.com", "ada@example.com")
            .await
            .unwrap()
    );
    assert_eq!(
        store.secret_names(&bob).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        store.secret_names(&ada).await.unwrap(),
        ["ANTHROPIC_API_KEY"]
    );
    assert!(
        !store
            .remove_person("bob@example.com", "ada@example.com")
            .await
            .unwrap()
    );
    assert_eq!(store.authenticate(&bobs.token).await.unwrap(), None);
    assert_eq!(store.people().await.unwrap().len(), 1);
    assert!(
        store
            .person("bob@example.com")
            .await
            .unwrap()
            .unwrap()
            .removed_at
            .is_some()
    );
    assert!(
        store
            .create_token(new_token("bob@example.com"))
            .await
            .is_err()
    );
    // Added again: a member again, and none of the old tokens comes back.
    let back = store
        .add_person("bob@example.com", Role::Member, "ada@example.com")
        .await
        .unwrap();
    assert_eq!(back.removed_at, None);
    assert_eq!(store.authenticate(&bobs.token).await.unwrap(), None);
    assert!(
        store.tokens(Some("bob@example.com")).await.unwrap()[0]
            .revoked_at
            .is_some()
    );

    // A token speaks only for a person who is in, even one whose revocation did not happen
    // (written by another path): the person's removal alone refuses it, once the token kept
    // from its last lookup is no longer believed.
    let fresh = store
        .create_token(new_token("bob@example.com"))
        .await
        .unwrap();
    assert!(store.authenticate(&fresh.token).await.unwrap().is_some());
    db.exec("UPDATE people SET removed_at = 1 WHERE email = 'bob@example.com'")
        .await;
    std::thread::sleep(KEPT_FOR);
    assert_eq!(store.authenticate(&fresh.token).await.unwrap(), None);

    let records = store.audit().records(0, 100).await.unwrap();
    let actions: Vec<_> = records
        .iter()
        .filter(|r| r.action.starts_with("person."))
        .map(|r| {
            (
                r.actor.as_str(),
                r.action.as_str(),
                detail(r)["email"].clone(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("root@localhost", "person.added", "ada@example.com".into()),
            ("ada@example.com", "person.added", "bob@example.com".into()),
            (
                "ada@example.com",
                "person.removed",
                "bob@example.com".into()
            ),
            ("ada@example.com", "person.added", "bob@example.com".into()),
        ]
    );
    let removed = records
        .iter()
        .find(|r| r.action == "person.removed")
        .unwrap();
    assert_eq!(detail(removed)["tokens_revoked"], 1);
    db.cleanup().await;
}

async fn tokens_expire_and_mark_their_use_once_a_minute(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    store
        .add_person("ada@example.com", Role::Member, "root@localhost")
        .await
        .unwrap();
    let short = store
        .create_token(NewToken {
            name: "ci",
            lifetime_ms: 300,
            ..new_token("ada@example.com")
        })
        .await
        .unwrap();
    assert!(store.authenticate(&short.token).await.unwrap().is_some());
    let rec = store.token(&short.id).await.unwrap().unwrap();
    assert_eq!(rec.name, "ci");
    assert_eq!(rec.expires_at, Some(short.expires_at));
    assert_eq!(rec.expires_at, Some(rec.created_at + 300));
    let first_use = rec.last_used_at.unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(
        store.authenticate(&short.token).await.unwrap(),
        None,
        "an expired token still works"
    );

    let long = store
        .create_token(new_token("ada@example.com"))
        .await
        .unwrap();
    let rec = store.token(&long.id).await.unwrap().unwrap();
    assert_eq!(rec.expires_at, Some(rec.created_at + DEFAULT_LIFETIME_MS));
    assert_eq!(rec.last_used_at, None);
    store.authenticate(&long.token).await.unwrap().unwrap();
    let used = store.token(&long.id).await.unwrap().unwrap().last_used_at;
    assert!(used.is_some());
    std::thread::sleep(std::time::Duration::from_millis(20));
    store.authenticate(&long.token).await.unwrap().unwrap();
    assert_eq!(
        store.token(&long.id).await.unwrap().unwrap().last_used_at,
        used,
        "last_used_at written again within a minute"
    );
    assert!(first_use >= short.expires_at - 300);
    db.cleanup().await;
}

async fn an_upgraded_database_keeps_its_tokens_working_for_ninety_days(kind: Kind) {
    let db = TestDb::new(kind).await;
    db.open().await.close().await;
    // Back to the schema before people and token lives (6), with tokens made then (the later
    // migrations undone too: they are applied again on top).
    db.exec(
        "DROP TABLE oidc_flows; \
         DROP TABLE owned_secrets; \
         DROP TABLE people; \
         ALTER TABLE api_tokens DROP COLUMN name; \
         ALTER TABLE api_tokens DROP COLUMN expires_at; \
         ALTER TABLE api_tokens DROP COLUMN last_used_at; \
         ALTER TABLE turns DROP COLUMN blocked; \
         ALTER TABLE turns DROP COLUMN interrupted; \
         ALTER TABLE runs DROP COLUMN pruned_at; \
         DELETE FROM schema_version WHERE version >= 7",
    )
    .await;
    let ada = format!("hgr_{}", "a1".repeat(32));
    let local = format!("hgr_{}", "b2".repeat(32));
    db.exec(&format!(
        "INSERT INTO api_tokens (id, person, token_hash, created_at) VALUES \
         ('tok-ada', 'ada@example.com', '{}', 1000), ('tok-ada2', 'ada@example.com', 'x', 2000), \
         ('tok-local', 'me@localhost', '{}', 3000)",
        hash_token(&ada),
        hash_token(&local)
    ))
    .await;
    let store = db.open().await;
    assert_eq!(store.schema_version().await.unwrap(), KNOWN_SCHEMA_VERSION);
    let who = store.authenticate(&ada).await.unwrap().unwrap();
    assert_eq!(
        (who.email.as_str(), who.role),
        ("ada@example.com", Role::Member)
    );
    let me = store.authenticate(&local).await.unwrap().unwrap();
    assert_eq!(me.role, Role::Admin, "the local user is the admin");
    let people = store.people().await.unwrap();
    assert_eq!(people.len(), 2, "{people:?}");
    assert_eq!(people[0].created_at, 1000);
    let rec = store.token("tok-ada").await.unwrap().unwrap();
    let left = rec.expires_at.unwrap() - now_ms();
    assert!(
        (DEFAULT_LIFETIME_MS - 60_000..=DEFAULT_LIFETIME_MS).contains(&left),
        "an old token lives {left} ms more, not 90 days"
    );
    assert_eq!(rec.name, "");
    db.cleanup().await;
}

async fn emails_compare_without_case_everywhere_a_person_is_looked_up(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open_with_vault().await;
    let added = store
        .add_person("Alice@Example.COM", Role::Member, "root@localhost")
        .await
        .unwrap();
    assert_eq!(added.email, "alice@example.com", "stored lower-cased");
    let again = store
        .add_person("ALICE@example.com", Role::Admin, "root@localhost")
        .await
        .unwrap_err();
    assert!(again.to_string().contains("already a person"), "{again}");
    assert_eq!(
        store
            .person("aLiCe@EXAMPLE.com")
            .await
            .unwrap()
            .unwrap()
            .email,
        "alice@example.com"
    );
    let made = store
        .create_token(new_token("ALICE@EXAMPLE.COM"))
        .await
        .unwrap();
    let who = store.authenticate(&made.token).await.unwrap().unwrap();
    assert_eq!(who.email, "alice@example.com");
    assert_eq!(
        store.tokens(Some("Alice@example.com")).await.unwrap().len(),
        1
    );
    let owner = SecretOwner::Person("Alice@Example.com".into());
    store
        .set_secret(&owner, "KEY", &Secret::new(b"v".to_vec()))
        .await
        .unwrap();
    let lower = SecretOwner::Person("alice@example.com".into());
    assert_eq!(store.secret_names(&lower).await.unwrap(), vec!["KEY"]);
    assert_eq!(store.secrets_of(&lower).await.unwrap()[0].1.expose(), b"v");
    assert!(
        store
            .remove_person("ALICE@example.com", "root@localhost")
            .await
            .unwrap()
    );
    assert!(store.authenticate(&made.token).await.unwrap().is_none());
    db.cleanup().await;
}

/// Back to schema 8 (before lower-cased emails), with rows written then.
async fn at_schema_8(db: &TestDb) {
    db.open().await.close().await;
    let people = match db.kind {
        Kind::Sqlite => {
            "CREATE TABLE people8 (id TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE, \
             role TEXT NOT NULL CHECK (role IN ('admin', 'member')), created_at INTEGER NOT NULL, \
             removed_at INTEGER); DROP TABLE people; ALTER TABLE people8 RENAME TO people;"
        }
        Kind::Postgres => {
            "ALTER TABLE people DROP CONSTRAINT people_role_check; \
             ALTER TABLE people ADD CONSTRAINT people_role_check CHECK (role IN ('admin', 'member'));"
        }
    };
    db.exec(&format!(
        "DROP TABLE oidc_flows; {people} ALTER TABLE owned_secrets DROP COLUMN sealed_owner; \
         ALTER TABLE turns DROP COLUMN blocked; \
         ALTER TABLE turns DROP COLUMN interrupted; ALTER TABLE runs DROP COLUMN pruned_at; \
         DELETE FROM schema_version WHERE version >= 9"
    ))
    .await;
}

async fn upgrading_lower_cases_emails_and_keeps_old_secrets_open(kind: Kind) {
    let db = TestDb::new(kind).await;
    at_schema_8(&db).await;
    let ada = format!("hgr_{}", "a1".repeat(32));
    db.exec(&format!(
        "INSERT INTO people (id, email, role, created_at) VALUES ('person-1', 'Ada@Example.com', 'member', 1); \
         INSERT INTO api_tokens (id, person, token_hash, created_at, name, expires_at) VALUES \
         ('tok-ada', 'Ada@Example.com', '{}', 1, '', {})",
        hash_token(&ada),
        now_ms() + 60_000
    ))
    .await;
    // A secret sealed for the owner as written then (what schema 8's hangar did).
    {
        let vault = Vault::open_or_create(&db.key_path()).unwrap();
        let sealed = vault
            .seal("secret", "person:Ada@Example.com:KEY", b"old value")
            .unwrap();
        let hex = hex::encode(sealed);
        let blob = match kind {
            Kind::Sqlite => format!("X'{hex}'"),
            Kind::Postgres => format!("'\\x{hex}'::bytea"),
        };
        db.exec(&format!(
            "INSERT INTO owned_secrets (owner_kind, owner, name, sealed, created_at, updated_at) \
             VALUES ('person', 'Ada@Example.com', 'KEY', {blob}, 1, 1)"
        ))
        .await;
    }
    let store = db.open_with_vault().await;
    assert_eq!(store.schema_version().await.unwrap(), KNOWN_SCHEMA_VERSION);
    let who = store.authenticate(&ada).await.unwrap().unwrap();
    assert_eq!(
        who.email, "ada@example.com",
        "the token's person, lower-cased"
    );
    let people = store.people().await.unwrap();
    assert_eq!(people[0].email, "ada@example.com");
    let ada_owner = SecretOwner::Person("ADA@example.com".into());
    let got = store.secrets_of(&ada_owner).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.expose(), b"old value", "the old seal still opens");
    // A new value replaces it, sealed for the lower-cased owner.
    store
        .set_secret(&ada_owner, "KEY", &Secret::new(b"new".to_vec()))
        .await
        .unwrap();
    assert_eq!(
        store.secrets_of(&ada_owner).await.unwrap()[0].1.expose(),
        b"new"
    );
    db.cleanup().await;
}

async fn upgrading_refuses_two_people_who_differ_only_by_case(kind: Kind) {
    let db = TestDb::new(kind).await;
    at_schema_8(&db).await;
    db.exec(
        "INSERT INTO people (id, email, role, created_at) VALUES \
         ('person-1', 'Ada@Example.com', 'member', 1), ('person-2', 'ada@example.com', 'admin', 2)",
    )
    .await;
    let err = Store::open(&db.url).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("migration 9")
            && msg.contains("Ada@Example.com")
            && msg.contains("ada@example.com")
            && msg.contains("DELETE FROM people"),
        "{msg}"
    );
    // Nothing of it was applied: the database is at 8, both rows as they were.
    db.exec("DELETE FROM people WHERE id = 'person-1'").await;
    let store = db.open().await;
    assert_eq!(store.schema_version().await.unwrap(), KNOWN_SCHEMA_VERSION);
    assert_eq!(store.people().await.unwrap()[0].role, Role::Admin);
    db.cleanup().await;
}

async fn viewers_are_a_role(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    store
        .add_person("vera@example.com", Role::Viewer, "root@localhost")
        .await
        .unwrap();
    let made = store
        .create_token(new_token("vera@example.com"))
        .await
        .unwrap();
    let who = store.authenticate(&made.token).await.unwrap().unwrap();
    assert_eq!(who.role, Role::Viewer);
    db.cleanup().await;
}

/// Tokens are kept in memory after a lookup; a revocation or a removal through the same store
/// is seen by the very next request, one through another replica (another `Store` on the same
/// database) within `KEPT_FOR`.
async fn a_revoked_token_is_refused_at_once_here_and_within_a_second_elsewhere(kind: Kind) {
    let db = TestDb::new(kind).await;
    let here = db.open().await;
    let there = db.open().await;
    for email in ["ada@example.com", "bob@example.com"] {
        here.add_person(email, Role::Member, "root@localhost")
            .await
            .unwrap();
    }
    let ada = here
        .create_token(new_token("ada@example.com"))
        .await
        .unwrap();
    let bob = here
        .create_token(new_token("bob@example.com"))
        .await
        .unwrap();
    for store in [&here, &there] {
        for t in [&ada, &bob] {
            assert!(store.authenticate(&t.token).await.unwrap().is_some());
        }
    }
    // Revoked and removed here: refused here by the next request.
    assert!(here.revoke_token(&ada.id, "root@localhost").await.unwrap());
    assert_eq!(here.authenticate(&ada.token).await.unwrap(), None);
    assert!(
        here.remove_person("bob@example.com", "root@localhost")
            .await
            .unwrap()
    );
    assert_eq!(here.authenticate(&bob.token).await.unwrap(), None);
    // The other replica learns it from the database once its kept lookup is old.
    std::thread::sleep(KEPT_FOR);
    assert_eq!(there.authenticate(&ada.token).await.unwrap(), None);
    assert_eq!(there.authenticate(&bob.token).await.unwrap(), None);
    db.cleanup().await;
}
