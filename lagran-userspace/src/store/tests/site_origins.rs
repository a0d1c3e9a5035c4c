//! A site's several origins and their settings, on both backends.

use super::*;

on_both_backends!(site_origins_round_trip);

async fn site_origins_round_trip(store: Store) {
    let site: Site = serde_json::from_str(
        r#"{"host": "ha.example.com", "origins": ["https://o1.example.net", "http://10.0.0.9:8080"],
            "origin_host": "www.example.com", "origin_weights": [3, 1], "origin_health_path": "/healthz",
            "origin_ca_pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}"#,
    )
    .unwrap();
    let stored = store.upsert_site(&site).await.unwrap().site;
    assert_eq!(stored.origin, "https://o1.example.net", "`origin` holds the first, for readers of one origin");
    assert_eq!(stored.origin_urls().collect::<Vec<_>>(), ["https://o1.example.net", "http://10.0.0.9:8080"]);
    assert_eq!(Site { origin: String::new(), ..stored.clone() }, site, "every key round-trips");
    assert_eq!(store.get_site(&site.host).await.unwrap().map(|s| s.site), Some(stored.clone()));
    assert_eq!(stored.validate(), Ok(()), "what the store returns passes the shared rules");

    // Back to one origin: the list and the weights go.
    let single = Site {
        origin: "http://10.0.0.9:8080".into(),
        origins: Vec::new(),
        origin_weights: Vec::new(),
        origin_ca_pem: None,
        ..site.clone()
    };
    let stored = store.upsert_site(&single).await.unwrap().site;
    assert_eq!(stored, single);
    let json = serde_json::to_value(&stored).unwrap();
    assert!(json.get("origins").is_none() && json.get("origin_weights").is_none(), "{json}");

    assert_invalid(store.upsert_site(&Site { origin_weights: vec![1], ..site.clone() }).await, "origin_weights");
    let mismatched = Site { origin: "http://other".into(), ..site.clone() };
    assert_invalid(store.upsert_site(&mismatched).await, "origins");
    assert_invalid(store.upsert_site(&Site { origin_host: Some("a b".into()), ..site.clone() }).await, "origin_host");
    assert_eq!(
        store.get_site(&site.host).await.unwrap().map(|s| s.site),
        Some(stored),
        "a refused write changed nothing"
    );
}
