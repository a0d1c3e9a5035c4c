//! The key keeper on a real (SQLite) store: keys made and kept in the
//! database, the same for every keeper with the key file, a wrong or missing
//! key file refused with nothing changed, a key directory imported once, a
//! rollover asked for by hand run on the timers.

use std::path::Path;

use super::keeper::{KeyKeeper, ZonesView};
use super::key_store::KeyDirectory;
use crate::model::{DnssecAlgorithm, KeyRole, KeyState, NsHost, Zone, ZoneDnssec};
use crate::store::Store;

const ZONE: &str = "edge.lagran.net";

fn zone() -> Zone {
    let mut z = Zone::new(ZONE);
    z.ns_hosts = vec![NsHost { name: format!("ns1.{ZONE}"), ipv4: Some([192, 0, 2, 53].into()), ipv6: None }];
    z.ns_ttl = 60;
    z.soa_minimum = 60;
    z.dnssec = Some(ZoneDnssec { propagation_secs: 5, ..ZoneDnssec::default() });
    z
}

async fn store(dir: &Path) -> Store {
    Store::connect(&crate::testkit::temp_sqlite_url(dir)).await.unwrap()
}

fn keeper(store: &Store, key_file: &Path, import: Option<&Path>) -> KeyKeeper {
    KeyKeeper::new(store.clone(), key_file.to_path_buf(), import.map(KeyDirectory::new), 100)
}

fn tags(keys: &[crate::store::dnssec_keys::StoredKey]) -> Vec<(KeyRole, u16, KeyState)> {
    keys.iter().map(|k| (k.role, k.tag, k.state)).collect()
}

#[tokio::test]
async fn keys_live_in_the_database_and_open_only_with_the_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let key_file = dir.path().join("dnssec.key");
    let zones = [zone()];
    let view = ZonesView { zones: &zones, domains: &[], default_ttl: 30 };
    let first = keeper(&store, &key_file, None).prepare(&view, 1_000, true).await.unwrap();
    assert!(key_file.exists(), "made with the first keys");
    let stored = store.list_dnssec_keys().await.unwrap();
    assert_eq!(stored.len(), 2);
    assert!(stored.iter().all(|k| k.state == KeyState::Active));
    let set = &first.zones[ZONE];
    assert_eq!(set.ksks.len(), 1);
    assert_eq!(set.served.len(), 2);

    // Another control process with the same file signs with the same keys.
    let standby = keeper(&store, &key_file, None).prepare(&view, 2_000, false).await.unwrap();
    assert_eq!(standby.zones[ZONE].zsk.tag(), set.zsk.tag());

    // A wrong key file: a clear error, and the database keeps its keys.
    let wrong = dir.path().join("wrong.key");
    std::fs::write(&wrong, [9u8; 32]).unwrap();
    let err = keeper(&store, &wrong, None).prepare(&view, 3_000, true).await.unwrap_err().to_string();
    assert!(err.contains("not the key file"), "{err}");
    // A missing one is not made afresh while the database holds keys.
    let missing = dir.path().join("missing.key");
    let err = keeper(&store, &missing, None).prepare(&view, 3_000, true).await.unwrap_err().to_string();
    assert!(err.contains("is missing"), "{err}");
    assert!(!missing.exists());
    assert_eq!(tags(&store.list_dnssec_keys().await.unwrap()), tags(&stored), "nothing lost or changed");
}

#[tokio::test]
async fn a_key_directory_is_imported_once_with_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let old = KeyDirectory::new(dir.path().join("keys"));
    let made = old.load_or_create(ZONE, DnssecAlgorithm::Ecdsap256sha256).unwrap();
    let store = store(dir.path()).await;
    let key_file = dir.path().join("dnssec.key");
    let zones = [zone()];
    let view = ZonesView { zones: &zones, domains: &[], default_ttl: 30 };
    let keeper = keeper(&store, &key_file, Some(old.path()));
    let snapshot = keeper.prepare(&view, 1_000, true).await.unwrap();
    assert_eq!(snapshot.zones[ZONE].ksks[0].tag(), made.ksk.tag(), "the parent's DS still matches");
    assert_eq!(snapshot.zones[ZONE].zsk.tag(), made.zsk.tag());
    keeper.prepare(&view, 2_000, true).await.unwrap();
    assert_eq!(store.list_dnssec_keys().await.unwrap().len(), 2, "imported once");
}

#[tokio::test]
async fn a_zsk_rollover_asked_for_runs_on_the_timers() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let zones = [zone()];
    let view = ZonesView { zones: &zones, domains: &[], default_ttl: 30 };
    let keeper = keeper(&store, &dir.path().join("dnssec.key"), None);
    let old = keeper.prepare(&view, 0, true).await.unwrap().zones[ZONE].zsk.tag();
    let asked = keeper.generate(ZONE, KeyRole::Zsk, DnssecAlgorithm::Ecdsap256sha256, KeyState::Generated, 10).await;
    let new = asked.unwrap().tag;
    // Published at once, not signing yet.
    let s = keeper.prepare(&view, 1_000, true).await.unwrap();
    assert_eq!(s.zones[ZONE].zsk.tag(), old);
    assert_eq!(s.zones[ZONE].served.len(), 3);
    // After the DNSKEY TTL (60 s) and the propagation delay (5 s): the new one signs.
    let s = keeper.prepare(&view, 66_000, true).await.unwrap();
    assert_eq!(s.zones[ZONE].zsk.tag(), new);
    assert_eq!(s.zones[ZONE].served.len(), 3, "the old one stays published, retired");
    // After the largest TTL (60 s) and the propagation delay: the old one leaves.
    let s = keeper.prepare(&view, 66_000 + 65_000, true).await.unwrap();
    assert_eq!(s.zones[ZONE].served.len(), 2);
    assert!(s.zones[ZONE].served.iter().all(|k| k.tag() != old));
}

#[tokio::test]
async fn turning_signing_off_withdraws_then_serves_unsigned() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path()).await;
    let keeper = keeper(&store, &dir.path().join("dnssec.key"), None);
    let zones = [zone()];
    keeper.prepare(&ZonesView { zones: &zones, domains: &[], default_ttl: 30 }, 0, true).await.unwrap();
    let off = [Zone { dnssec: None, ..zone() }];
    let view = ZonesView { zones: &off, domains: &[], default_ttl: 30 };
    let s = keeper.prepare(&view, 1_000, true).await.unwrap();
    assert!(matches!(s.zones[ZONE].child, super::keeper::ChildKeys::Delete), "still signed, with DELETE");
    // The delete wait (100 s) later the zone has no keys left to sign with.
    let s = keeper.prepare(&view, 101_000, true).await.unwrap();
    assert!(s.zones.is_empty());
    assert!(store.list_dnssec_keys().await.unwrap().is_empty());
}
