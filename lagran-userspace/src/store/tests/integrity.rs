//! The store's own integrity guarantees, on both backends.

use super::*;

on_both_backends!(one_hostname_one_node, the_write_probe_writes);

/// Two writes racing for one hostname: the unique index lets exactly one through.
async fn one_hostname_one_node(store: Store) {
    for name in ["a-01", "b-01"] {
        store.create_node(&Node { hostname: None, ..full_node(name) }, None).await.unwrap();
    }
    for round in 0..10 {
        let hostname = format!("edge-{round}.lagran.net");
        // Names are stored normalised (lowercase, no trailing dot): one spelling per name.
        let spellings = [hostname.clone(), hostname.clone()];
        let patch = |h: &str| NodePatch { hostname: Some(Some(h.to_string())), ..Default::default() };
        let (pa, pb) = (patch(&spellings[0]), patch(&spellings[1]));
        let (a, b) = tokio::join!(store.update_node("a-01", &pa), store.update_node("b-01", &pb));
        let lost = match (a, b) {
            (Ok(_), Err(e)) | (Err(e), Ok(_)) => e,
            (a, b) => panic!("round {round}: exactly one of two racing writes holds the hostname: {a:?} / {b:?}"),
        };
        assert!(
            matches!(&lost, StoreError::Conflict { what: "node hostname", .. }),
            "the loser is told the hostname is taken: {lost:?}"
        );
        let clear = NodePatch { hostname: Some(None), ..Default::default() };
        store.update_node("a-01", &clear).await.unwrap();
        store.update_node("b-01", &clear).await.unwrap();
    }
    // Creating a node with a taken hostname is refused too, naming the hostname, not the node.
    store
        .update_node("a-01", &NodePatch { hostname: Some(Some("x.lagran.net".into())), ..Default::default() })
        .await
        .unwrap();
    let taken = store.create_node(&Node { hostname: Some("x.lagran.net".into()), ..full_node("c-01") }, None).await;
    assert!(matches!(taken, Err(StoreError::Conflict { what: "node hostname", .. })), "{taken:?}");
    let name_taken = store.create_node(&Node { hostname: None, ..full_node("a-01") }, None).await;
    assert!(matches!(name_taken, Err(StoreError::Conflict { what: "node", .. })), "{name_taken:?}");
    // Nodes without a hostname are many.
    store.create_node(&Node { hostname: None, ..full_node("d-01") }, None).await.unwrap();
}

async fn the_write_probe_writes(store: Store) {
    store.probe_write(1).await.unwrap();
    store.probe_write(2).await.unwrap();
    let row = sqlx::query("SELECT written_at_ms FROM store_write_probe").fetch_all(store.pool()).await.unwrap();
    assert_eq!(row.len(), 1, "one row, rewritten");
    assert_eq!(row[0].try_get::<i64, _>("written_at_ms").unwrap(), 2);
}
