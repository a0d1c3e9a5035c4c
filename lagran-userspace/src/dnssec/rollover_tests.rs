//! Rollovers: the timeline the planner gives a ZSK, a KSK and a zone whose
//! signing is turned off, and the tables signed in the middle of them.

use hickory_proto::rr::RecordType;

use super::keeper::ChildKeys;
use super::rollover::{Step, Timing, due, events};
use super::tests::keys;
use crate::model::{DnssecAlgorithm, KeyRole, KeyState};
use crate::store::dnssec_keys::StoredKey;

const T: Timing = Timing {
    dnskey_ttl: 60,
    max_ttl: 300,
    propagation: 10,
    ds_wait: 1000,
    zsk_lifetime: 86_400,
    ksk_lifetime: 0,
    delete_wait: 500,
};

fn key(id: &str, role: KeyRole, state: KeyState, at_ms: i64) -> StoredKey {
    let base = StoredKey {
        id: id.into(),
        zone: "edge.lagran.net".into(),
        role,
        algorithm: 13,
        tag: 1,
        state: KeyState::Generated,
        dnskey: String::new(),
        ds: String::new(),
        sealed: String::new(),
        created_at_ms: at_ms,
        published_at_ms: None,
        active_at_ms: None,
        retired_at_ms: None,
        withdrawing_at_ms: None,
        removed_at_ms: None,
    };
    base.moved(state, at_ms)
}

#[test]
fn a_new_zone_gets_both_keys_at_once() {
    let e = due(events(&[], true, &T), 0);
    let steps: Vec<Step> = e.into_iter().flat_map(|e| e.steps).collect();
    assert_eq!(
        steps,
        [
            Step::Generate { role: KeyRole::Ksk, state: KeyState::Active },
            Step::Generate { role: KeyRole::Zsk, state: KeyState::Active }
        ]
    );
}

#[test]
fn a_zsk_rolls_by_pre_publication() {
    let ksk = key("k", KeyRole::Ksk, KeyState::Active, 0);
    let old = key("z1", KeyRole::Zsk, KeyState::Active, 0);
    // Nothing before the lifetime ends (the KSK's lifetime is 0: never).
    let coming = events(&[ksk.clone(), old.clone()], true, &T);
    assert_eq!(coming.len(), 1);
    assert_eq!(coming[0].at_ms, 86_400_000);
    assert_eq!(coming[0].steps, [Step::Generate { role: KeyRole::Zsk, state: KeyState::Published }]);
    assert!(due(coming, 86_399_999).is_empty());

    // Published at P: active after the DNSKEY TTL and the propagation delay, the old one retired.
    let p = 86_400_000;
    let new = key("z2", KeyRole::Zsk, KeyState::Published, p);
    let coming = events(&[ksk.clone(), old.clone(), new.clone()], true, &T);
    assert_eq!(coming[0].at_ms, p + 70_000);
    assert_eq!(
        coming[0].steps,
        [Step::Move { id: "z2".into(), to: KeyState::Active }, Step::Move { id: "z1".into(), to: KeyState::Retired }]
    );
    // Retired at R: removed once its signatures left every cache (max TTL + propagation).
    let r = p + 70_000;
    let keys = [ksk, old.moved(KeyState::Retired, r), new.moved(KeyState::Active, r)];
    let coming = events(&keys, true, &T);
    assert_eq!(coming[0].at_ms, r + 310_000);
    assert_eq!(coming[0].steps, [Step::Move { id: "z1".into(), to: KeyState::Removed }]);
    // Then the new ZSK's own lifetime runs.
    assert_eq!(coming[1].at_ms, r + 86_400_000);
}

#[test]
fn a_ksk_rolls_by_double_signature_after_the_ds_wait() {
    let old = key("k1", KeyRole::Ksk, KeyState::Active, 0);
    let zsk = key("z", KeyRole::Zsk, KeyState::Active, 0);
    let asked = key("k2", KeyRole::Ksk, KeyState::Generated, 5);
    let now = due(events(&[old.clone(), zsk.clone(), asked.clone()], true, &T), 5);
    assert_eq!(now[0].steps, [Step::Move { id: "k2".into(), to: KeyState::Published }], "a rollover by hand");
    let new = asked.moved(KeyState::Published, 10);
    let coming = events(&[old, zsk, new], true, &T);
    let roll = coming.iter().find(|e| e.steps.iter().any(|s| matches!(s, Step::Move { id, .. } if id == "k2")));
    let roll = roll.expect("the new KSK's event");
    assert_eq!(roll.at_ms, 10 + 70_000 + 1_000_000, "Ipub plus the parent's DS wait");
    assert_eq!(
        roll.steps,
        [Step::Move { id: "k2".into(), to: KeyState::Active }, Step::Move { id: "k1".into(), to: KeyState::Removed }]
    );
}

#[test]
fn signing_off_withdraws_then_removes_and_on_again_resumes() {
    let ksk = key("k", KeyRole::Ksk, KeyState::Active, 0);
    let zsk = key("z", KeyRole::Zsk, KeyState::Active, 0);
    let now = due(events(&[ksk.clone(), zsk.clone()], false, &T), 7);
    assert_eq!(now.len(), 1);
    assert_eq!(
        now[0].steps,
        [
            Step::Move { id: "k".into(), to: KeyState::Withdrawing },
            Step::Move { id: "z".into(), to: KeyState::Withdrawing }
        ]
    );
    let out = [ksk.moved(KeyState::Withdrawing, 7), zsk.moved(KeyState::Withdrawing, 7)];
    let coming = events(&out, false, &T);
    assert_eq!(coming.len(), 1);
    assert_eq!(coming[0].at_ms, 7 + 500_000, "the DELETE records stay for the delete wait");
    assert!(coming[0].steps.iter().all(|s| matches!(s, Step::Move { to: KeyState::Removed, .. })));
    let back = due(events(&out, true, &T), 8);
    assert!(back[0].steps.iter().all(|s| matches!(s, Step::Move { to: KeyState::Active, .. })), "{back:?}");
}

#[test]
fn during_a_ksk_roll_both_ksks_sign_the_dnskey_rrset_and_the_cds_lists_both() {
    let snapshot = keys(DnssecAlgorithm::Ecdsap256sha256, 2, None);
    let table = super::tests::signed_with(&snapshot);
    let (_, m) = super::tests::ask(&table, "edge.lagran.net.", RecordType::DNSKEY, true, "192.0.2.1");
    let dnskeys = m.answers().iter().filter(|r| r.record_type() == RecordType::DNSKEY).count();
    assert_eq!(dnskeys, 3, "two KSKs and the ZSK");
    assert_eq!(super::tests::verify_all(&table, m.answers()), 2, "one RRSIG per KSK, each verifying");
    let (_, m) = super::tests::ask(&table, "edge.lagran.net.", RecordType::CDS, true, "192.0.2.1");
    let cds: Vec<u16> = m.answers().iter().filter_map(|r| Some(r.data().as_dnssec()?.as_cds()?.key_tag())).collect();
    let ksks: Vec<u16> = snapshot.zones["edge.lagran.net"].ksks.iter().map(|k| k.tag()).collect();
    assert_eq!(cds.len(), 2);
    assert!(ksks.iter().all(|t| cds.contains(t)), "{cds:?} {ksks:?}");
    assert_eq!(super::tests::verify_all(&table, m.answers()), 2);
}

#[test]
fn a_zone_being_withdrawn_publishes_signed_cds_and_cdnskey_delete_records() {
    let snapshot = keys(DnssecAlgorithm::Ecdsap256sha256, 1, Some(ChildKeys::Delete));
    let table = super::tests::signed_with(&snapshot);
    for (rtype, text) in [(RecordType::CDS, "0 0 0 00"), (RecordType::CDNSKEY, "0 3 0 AA==")] {
        let (_, m) = super::tests::ask(&table, "edge.lagran.net.", rtype, true, "192.0.2.1");
        let records: Vec<String> =
            m.answers().iter().filter(|r| r.record_type() == rtype).map(|r| r.data().to_string()).collect();
        assert_eq!(records, [text], "RFC 8078 §4");
        assert_eq!(super::tests::verify_all(&table, m.answers()), 1, "signed by the KSK");
    }
    // The zone stays signed meanwhile: a name still proves with its signature.
    let (_, m) = super::tests::ask(&table, "edge.lagran.net.", RecordType::A, true, "192.0.2.1");
    assert!(super::tests::verify_all(&table, m.answers()) >= 1);
}

#[test]
fn the_served_tables_earliest_signature_expiry_is_exported_per_zone() {
    let table = super::tests::signed_with(&keys(DnssecAlgorithm::Ecdsap256sha256, 1, None));
    let mut out = String::new();
    let now = i64::from(super::tests::NOW_SECS) + 86_400;
    crate::signature_expiry::render_prometheus(&table, now, &mut out);
    let left = i64::from(crate::model::DEFAULT_VALIDITY_SECS) - 86_400;
    assert!(
        out.contains(&format!("lagran_dnssec_oldest_signature_expiry_seconds{{zone=\"edge.lagran.net\"}} {left}\n")),
        "{out}"
    );
}
