//! API tokens: only hashes stored, authentication, revocation.

use hangar_store::*;

use crate::common::*;

crate::common::suite!(tokens_store_only_hashes,);

async fn tokens_store_only_hashes(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    let made = store.create_token("ada@example.com").await.unwrap();
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
            token_id: made.id.clone()
        }
    );
    let mut wrong = made.token.clone();
    wrong.replace_range(10..11, if &made.token[10..11] == "0" { "1" } else { "0" });
    assert_eq!(store.authenticate(&wrong).await.unwrap(), None);
    assert_eq!(store.authenticate("Bearer nonsense").await.unwrap(), None);
    assert!(store.create_token("not-an-email").await.is_err());

    let other = store.create_token("bob@example.com").await.unwrap();
    assert!(store.revoke_token(&made.id).await.unwrap());
    assert!(!store.revoke_token(&made.id).await.unwrap());
    assert_eq!(store.authenticate(&made.token).await.unwrap(), None);
    assert!(store.authenticate(&other.token).await.unwrap().is_some());
    assert_eq!(
        store.tokens(Some("ada@example.com")).await.unwrap().len(),
        1
    );
    assert_eq!(store.tokens(None).await.unwrap().len(), 2);
    db.cleanup().await;
}
