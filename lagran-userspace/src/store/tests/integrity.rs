//! The store's own integrity guarantees, on both backends.

use super::*;

on_both_backends!(one_hostname_one_node, names_collide_in_the_writing_transaction, the_write_probe_writes);

/// Two writes racing for one hostname: exactly one gets through (the check
/// in the writing transaction, behind it the unique index).
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
        // The check in the transaction tells it; the unique index would too.
        assert!(
            matches!(&lost, StoreError::NameTaken { field: "hostname", .. })
                || matches!(&lost, StoreError::Conflict { what: "node hostname", .. }),
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
    assert!(matches!(taken, Err(StoreError::NameTaken { field: "hostname", .. })), "{taken:?}");
    let name_taken = store.create_node(&Node { hostname: None, ..full_node("a-01") }, None).await;
    assert!(matches!(name_taken, Err(StoreError::Conflict { what: "node", .. })), "{name_taken:?}");
    // Nodes without a hostname are many.
    store.create_node(&Node { hostname: None, ..full_node("d-01") }, None).await.unwrap();
}

/// A node's hostname and a scheduled name, a zone apex or an NS host of the
/// same name, written at once: the check runs in each write's transaction
/// behind the names lock, so exactly one of each racing pair is stored.
async fn names_collide_in_the_writing_transaction(store: Store) {
    store.upsert_zone(&zone(EDGE, &[])).await.unwrap();
    store.create_node(&Node { hostname: None, ..full_node("a-01") }, None).await.unwrap();
    let set = |h: Option<String>| NodePatch { hostname: Some(h), ..Default::default() };
    for round in 0..10 {
        let name = format!("race-{round}.{EDGE}");
        let (patch, record) = (set(Some(name.clone())), domain(&name, EDGE));
        let (node, dom) = tokio::join!(store.update_node("a-01", &patch), store.upsert_domain(&record));
        let domain_stored = store.get_domain(&name).await.unwrap().is_some();
        let hostname_stored = store.get_node("a-01").await.unwrap().unwrap().hostname.is_some();
        assert!(domain_stored != hostname_stored, "round {round}: one owner: {node:?} / {dom:?}");
        let lost = if domain_stored { node.map(|_| ()).unwrap_err() } else { dom.unwrap_err() };
        assert!(matches!(lost, StoreError::NameTaken { .. }), "round {round}: {lost:?}");
        store.update_node("a-01", &set(None)).await.unwrap();
        store.delete_domain(&name).await.unwrap();
    }
    // Every side of the check: a new node, a zone apex, an NS host.
    store.update_node("a-01", &set(Some("ns1.elsewhere.test".into()))).await.unwrap();
    let ns = store.upsert_zone(&zone("other.test", &[("ns1.elsewhere.test", None)])).await;
    assert!(matches!(ns, Err(StoreError::NameTaken { field: "ns_hosts", .. })), "{ns:?}");
    store.update_node("a-01", &set(Some("other.test".into()))).await.unwrap();
    let apex = store.upsert_zone(&zone("other.test", &[])).await;
    assert!(matches!(apex, Err(StoreError::NameTaken { field: "name", .. })), "{apex:?}");
    let on_apex = store.create_node(&Node { hostname: Some(EDGE.into()), ..full_node("b-01") }, None).await;
    assert!(matches!(on_apex, Err(StoreError::NameTaken { field: "hostname", .. })), "{on_apex:?}");
    assert!(store.get_node("b-01").await.unwrap().is_none(), "nothing is stored");
}

async fn the_write_probe_writes(store: Store) {
    store.probe_write(1).await.unwrap();
    store.probe_write(2).await.unwrap();
    let row = sqlx::query("SELECT written_at_ms FROM store_write_probe").fetch_all(store.pool()).await.unwrap();
    assert_eq!(row.len(), 1, "one row, rewritten");
    assert_eq!(row[0].try_get::<i64, _>("written_at_ms").unwrap(), 2);
}
