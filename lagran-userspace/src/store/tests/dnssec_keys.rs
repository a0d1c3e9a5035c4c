//! The DNSSEC keys, on both backends.

use super::*;
use crate::model::{KeyRole, KeyState};
use crate::store::dnssec_keys::StoredKey;

on_both_backends!(dnssec_keys_states);

fn key(id: &str, zone: &str, role: KeyRole, created: i64) -> StoredKey {
    StoredKey {
        id: id.into(),
        zone: zone.into(),
        role,
        algorithm: 13,
        tag: 40_000 + created as u16,
        state: KeyState::Active,
        dnskey: "257 3 13 AAAA".into(),
        ds: "1 13 2 00".into(),
        sealed: "0badc0de".into(),
        created_at_ms: created,
        published_at_ms: Some(created),
        active_at_ms: Some(created),
        retired_at_ms: None,
        withdrawing_at_ms: None,
        removed_at_ms: None,
    }
}

async fn dnssec_keys_states(store: Store) {
    assert!(!store.any_dnssec_key().await.unwrap());
    let ksk = key("k1", "b.example", KeyRole::Ksk, 1);
    let zsk = key("z1", "b.example", KeyRole::Zsk, 2);
    let other = key("k2", "a.example", KeyRole::Ksk, 3);
    for k in [&ksk, &zsk, &other] {
        store.insert_dnssec_key(k).await.unwrap();
    }
    assert!(matches!(store.insert_dnssec_key(&ksk).await, Err(StoreError::Conflict { .. })));
    let listed = store.list_dnssec_keys().await.unwrap();
    assert_eq!(listed, vec![other.clone(), ksk.clone(), zsk.clone()], "by zone, then creation");

    // A roll's moves land together; one stale move fails them all.
    let retired = zsk.moved(KeyState::Retired, 10);
    let stale = ksk.moved(KeyState::Removed, 10);
    let err = store.move_dnssec_keys(&[(KeyState::Active, retired.clone()), (KeyState::Published, stale)]).await;
    assert!(matches!(err, Err(StoreError::Conflict { .. })), "{err:?}");
    assert_eq!(store.list_dnssec_keys().await.unwrap()[2].state, KeyState::Active, "nothing half-written");
    store.move_dnssec_keys(&[(KeyState::Active, retired.clone())]).await.unwrap();
    assert_eq!(store.list_dnssec_keys().await.unwrap()[2], retired);
    assert_eq!(retired.retired_at_ms, Some(10));

    // Removed keys leave the list but still count as stored.
    store.move_dnssec_keys(&[(KeyState::Retired, retired.moved(KeyState::Removed, 20))]).await.unwrap();
    assert_eq!(store.list_dnssec_keys().await.unwrap().len(), 2);
    assert!(store.any_dnssec_key().await.unwrap());
}
