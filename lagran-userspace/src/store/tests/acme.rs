//! The ACME client's rows, on both backends.

use super::*;
use crate::store::acme::Challenge;

on_both_backends!(acme_accounts_and_challenges, the_acme_flag_round_trips, renewals_asked_until_done);

async fn the_acme_flag_round_trips(store: Store) {
    let site: Site =
        serde_json::from_str(r#"{"host": "shop.example.com", "origin": "http://o", "acme": true}"#).unwrap();
    assert!(store.upsert_site(&site).await.unwrap().site.acme);
    let off = store.upsert_site(&Site { acme: false, ..site.clone() }).await.unwrap();
    assert!(!off.site.acme, "a replace clears it");
    let wildcard = Site { host: "*.example.com".into(), ..site };
    assert_invalid(store.upsert_site(&wildcard).await, "acme");
}

async fn acme_accounts_and_challenges(store: Store) {
    let dir = "https://acme.test/dir";
    assert_eq!(store.acme_account(dir).await.unwrap(), None);
    store.put_acme_account(dir, r#"{"id":"1"}"#).await.unwrap();
    store.put_acme_account(dir, r#"{"id":"2"}"#).await.unwrap();
    assert_eq!(store.acme_account(dir).await.unwrap().as_deref(), Some(r#"{"id":"2"}"#), "replaced");
    assert_eq!(store.acme_account("https://other.test/dir").await.unwrap(), None, "one account per directory");

    let c = Challenge { token: "tok-1".into(), key_authorization: "tok-1.thumb".into(), domain: "a.test".into() };
    store.put_acme_challenge(&c).await.unwrap();
    assert_eq!(store.acme_challenge("tok-1").await.unwrap().as_deref(), Some("tok-1.thumb"));
    assert_eq!(store.acme_challenge("tok-2").await.unwrap(), None);
    store.delete_acme_challenge("tok-1").await.unwrap();
    assert_eq!(store.acme_challenge("tok-1").await.unwrap(), None);

    store.put_acme_challenge(&c).await.unwrap();
    assert_eq!(store.delete_acme_challenges_before(crate::clock::now_ms() - 60_000).await.unwrap(), 0);
    assert_eq!(store.delete_acme_challenges_before(crate::clock::now_ms() + 1).await.unwrap(), 1);
}

async fn renewals_asked_until_done(store: Store) {
    assert_eq!(store.acme_renewals().await.unwrap(), vec![]);
    let first = store.request_acme_renewal("a.test").await.unwrap();
    store.request_acme_renewal("b.test").await.unwrap();
    let asked = store.acme_renewals().await.unwrap();
    assert_eq!(asked.iter().map(|(d, _)| d.as_str()).collect::<Vec<_>>(), ["a.test", "b.test"]);
    assert_eq!(asked[0].1, first);
    store.clear_acme_renewal("a.test", first - 1).await.unwrap();
    assert_eq!(store.acme_renewals().await.unwrap().len(), 2, "a request newer than the order stays");
    store.clear_acme_renewal("a.test", first).await.unwrap();
    let left = store.acme_renewals().await.unwrap();
    assert_eq!(left.iter().map(|(d, _)| d.as_str()).collect::<Vec<_>>(), ["b.test"]);
}
