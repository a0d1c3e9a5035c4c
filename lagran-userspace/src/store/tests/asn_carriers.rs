//! The API's ASN → carrier entries, on both backends.

use super::*;
use crate::store::asn_carriers::AsnCarrier;

on_both_backends!(asn_carriers_crud);

async fn asn_carriers_crud(store: Store) {
    assert!(store.list_asn_carriers().await.unwrap().is_empty());
    let dtag = AsnCarrier {
        asn: 3320,
        carrier: "Deutsche Telekom".into(),
        note: "ticket 7".into(),
        updated_by: "ops".into(),
        updated_at_ms: 0,
    };
    let stored = store.upsert_asn_carrier(&dtag).await.unwrap();
    assert!(stored.updated_at_ms > 0);
    assert_eq!(AsnCarrier { updated_at_ms: 0, ..stored }, dtag);
    // The largest ASN (32 bits) round-trips; an empty carrier is stored (it removes
    // the entry of the layers below when the data is merged).
    let top = AsnCarrier { asn: u32::MAX, carrier: String::new(), ..dtag.clone() };
    store.upsert_asn_carrier(&top).await.unwrap();
    let ct = AsnCarrier { asn: 4134, carrier: "电信".into(), ..dtag.clone() };
    store.upsert_asn_carrier(&ct).await.unwrap();
    let asns: Vec<u32> = store.list_asn_carriers().await.unwrap().iter().map(|e| e.asn).collect();
    assert_eq!(asns, [3320, 4134, u32::MAX]);

    let renamed = AsnCarrier { carrier: "Telekom".into(), ..dtag.clone() };
    store.upsert_asn_carrier(&renamed).await.unwrap();
    assert_eq!(store.get_asn_carrier(3320).await.unwrap().unwrap().carrier, "Telekom");
    let map = store.asn_carrier_map().await.unwrap();
    assert_eq!(map.get(&3320).map(String::as_str), Some("Telekom"));
    assert_eq!(map.get(&u32::MAX).map(String::as_str), Some(""));

    let bad = AsnCarrier { carrier: "a|b".into(), ..dtag.clone() };
    assert!(matches!(store.upsert_asn_carrier(&bad).await, Err(StoreError::Invalid { field: "carrier", .. })));
    assert_eq!(
        store.get_asn_carrier(3320).await.unwrap().unwrap().carrier,
        "Telekom",
        "a refused write changes nothing"
    );

    assert!(store.delete_asn_carrier(3320).await.unwrap());
    assert!(!store.delete_asn_carrier(3320).await.unwrap(), "already gone");
    assert!(store.get_asn_carrier(3320).await.unwrap().is_none());
    assert_eq!(store.list_asn_carriers().await.unwrap().len(), 2);
}
