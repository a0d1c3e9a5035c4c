//! The NSEC3 chain and its proofs: hashes against RFC 5155 Appendix A, the
//! chain's order, empty non-terminals and bitmaps, and every negative answer
//! of an NSEC3 zone checked against the hashes it must match or cover, its
//! records verified with the zone's keys; switching the denial replaces the
//! chain whole.

use std::collections::BTreeSet;

use data_encoding::BASE32_DNSSEC;
use hickory_proto::dnssec::Nsec3HashAlgorithm;
use hickory_proto::dnssec::rdata::{NSEC3, NSEC3PARAM};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{Name, Record, RecordType};

use super::denial::ZoneNames;
use super::nsec3::nsec3_chain;
use super::tests::{NOW_SECS, ask, keys, signed_with, verify_all};
use super::{KeySnapshot, TableSigner};
use crate::model::{Denial, DnssecAlgorithm, Nsec3Salt};
use crate::route_table::RouteTable;
use crate::zone_signatures::nsec3::{hashed_label, nsec3_hash};

const ZONE: &str = "edge.lagran.net";

fn n(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

/// RFC 5155 Appendix A's parameters: salt aabbccdd, 12 iterations.
fn appendix_a() -> NSEC3PARAM {
    NSEC3PARAM::new(Nsec3HashAlgorithm::SHA1, false, 12, vec![0xaa, 0xbb, 0xcc, 0xdd])
}

#[test]
fn hashes_are_those_of_rfc_5155_appendix_a() {
    for (name, hash) in [
        ("example.", "0p9mhaveqvm6t7vbl5lop2u3t2rp3tom"),
        ("a.example.", "35mthgpgcu1qg68fab165klnsnk3dpvl"),
        ("ns1.example.", "2t7b4g4vsa5smi47k61mv5bv1a22bojr"),
        ("*.w.example.", "r53bq7cc2uvmubfu5ocmm6pers9tk9en"),
        ("x.y.w.EXAMPLE.", "2vptu5timamqttgl4luu9kg21e0aor3s"),
    ] {
        assert_eq!(hashed_label(&nsec3_hash(&appendix_a(), &n(name)).unwrap()), hash, "{name}");
    }
}

fn nsec3_of(r: &Record) -> &NSEC3 {
    r.data().as_dnssec().and_then(|d| d.as_nsec3()).unwrap_or_else(|| panic!("{r} is not NSEC3"))
}

fn owner_hash(r: &Record) -> Vec<u8> {
    BASE32_DNSSEC.decode(r.name().iter().next().unwrap()).unwrap()
}

#[test]
fn the_chain_is_in_hash_order_with_empty_non_terminals_and_the_types_of_each_name() {
    let mut names = ZoneNames::default();
    names.add(&n("example."), [RecordType::SOA, RecordType::NS]);
    names.add(&n("x.y.w.example."), [RecordType::A]);
    names.add_variant(&n("a.example."), [RecordType::A].into());
    names.add_variant(&n("a.example."), [RecordType::A, RecordType::AAAA].into());
    let chain = nsec3_chain(&names, &n("example."), &appendix_a(), 300).unwrap();
    // example, x.y.w, a twice (two type sets), and the empty non-terminals y.w and w.
    assert_eq!(chain.len(), 6, "{chain:?}");
    let owners: Vec<Vec<u8>> = chain.iter().map(owner_hash).collect();
    assert!(owners.windows(2).all(|w| w[0] <= w[1]), "in hash order");
    let distinct: Vec<&Vec<u8>> = owners.iter().collect::<BTreeSet<_>>().into_iter().collect();
    assert_eq!(distinct.len(), 5);
    for record in &chain {
        let i = distinct.iter().position(|h| **h == owner_hash(record)).unwrap();
        let next = distinct[(i + 1) % distinct.len()];
        assert_eq!(
            nsec3_of(record).next_hashed_owner_name(),
            next.as_slice(),
            "each names the next hash, the last the first"
        );
        assert_eq!((nsec3_of(record).iterations(), nsec3_of(record).salt()), (12, &[0xaa, 0xbb, 0xcc, 0xdd][..]));
        assert!(!nsec3_of(record).opt_out());
        assert_eq!(record.ttl(), 300);
    }
    let at = |name: &str| -> Vec<BTreeSet<RecordType>> {
        let label = hashed_label(&nsec3_hash(&appendix_a(), &n(name)).unwrap());
        assert!(chain.iter().any(|r| r.name() == &n(&format!("{label}.example."))), "{name} has its NSEC3");
        chain
            .iter()
            .filter(|r| r.name().iter().next().unwrap() == label.as_bytes())
            .map(|r| nsec3_of(r).type_bit_maps().collect())
            .collect()
    };
    let rrsig = RecordType::RRSIG;
    assert_eq!(at("x.y.w.example."), vec![BTreeSet::from([RecordType::A, rrsig])]);
    assert_eq!(at("y.w.example."), vec![BTreeSet::new()], "an empty non-terminal has no types");
    assert_eq!(at("w.example."), vec![BTreeSet::new()]);
    let a = at("a.example.");
    assert!(
        a.contains(&BTreeSet::from([RecordType::A, rrsig]))
            && a.contains(&BTreeSet::from([RecordType::A, RecordType::AAAA, rrsig]))
    );
    assert_eq!(at("example."), vec![BTreeSet::from([RecordType::NS, RecordType::SOA, rrsig])]);
}

fn nsec3_keys(iterations: u16, salt: &[u8]) -> KeySnapshot {
    let mut keys = keys(DnssecAlgorithm::Ecdsap256sha256, 1, None);
    let policy = &mut keys.zones.get_mut(ZONE).unwrap().policy;
    policy.denial = Denial::Nsec3;
    policy.nsec3_iterations = iterations;
    policy.nsec3_salt = Nsec3Salt(salt.to_vec());
    keys
}

fn proof(m: &Message) -> Vec<&Record> {
    m.name_servers().iter().filter(|r| r.record_type() == RecordType::NSEC3).collect()
}

fn hash_in(table: &RouteTable, name: &str) -> Vec<u8> {
    let param = table.signatures[ZONE].nsec3().unwrap().param_record().data().as_dnssec().unwrap();
    nsec3_hash(param.as_nsec3param().unwrap(), &n(name)).unwrap()
}

fn matches(r: &Record, hash: &[u8]) -> bool {
    owner_hash(r) == hash
}

/// RFC 5155 §8.3: the owner hash sorts before `hash` and the next hash after
/// it, around the end of the chain for the last record.
fn covers(r: &Record, hash: &[u8]) -> bool {
    let (owner, next) = (owner_hash(r), nsec3_of(r).next_hashed_owner_name().to_vec());
    if owner < next {
        owner.as_slice() < hash && hash < next.as_slice()
    } else {
        hash > owner.as_slice() || hash < next.as_slice()
    }
}

/// An NXDOMAIN for `qname` with the closest encloser proof for `encloser`
/// and `next_closer`, and the wildcard at the encloser covered.
fn assert_nxdomain(table: &RouteTable, qname: &str, encloser: &str, next_closer: &str) {
    let (_, m) = ask(table, qname, RecordType::A, true, "192.0.2.1");
    assert_eq!(m.response_code(), ResponseCode::NXDomain, "{qname}");
    let proof = proof(&m);
    let (ce, nc, wild) =
        (hash_in(table, encloser), hash_in(table, next_closer), hash_in(table, &format!("*.{encloser}")));
    assert!(proof.iter().any(|r| matches(r, &ce)), "{qname}: the NSEC3 matching {encloser}: {proof:?}");
    assert!(proof.iter().any(|r| covers(r, &nc)), "{qname}: the NSEC3 covering {next_closer}");
    assert!(proof.iter().any(|r| covers(r, &wild)), "{qname}: the NSEC3 covering *.{encloser}");
    assert!(proof.len() <= 3);
    assert_eq!(verify_all(table, m.name_servers()), 1 + proof.len(), "{qname}: SOA and every NSEC3 signed");
}

/// A NODATA for `qtype` at `qname`: one NSEC3 matching it, without the type
/// or CNAME; returns its types.
fn assert_nodata(table: &RouteTable, qname: &str, qtype: RecordType, source: &str) -> Vec<RecordType> {
    let (_, m) = ask(table, qname, qtype, true, source);
    assert_eq!((m.response_code(), m.answers().len()), (ResponseCode::NoError, 0), "{qname} {qtype}");
    let proof = proof(&m);
    assert_eq!(proof.len(), 1, "{qname} {qtype}: {proof:?}");
    assert!(matches(proof[0], &hash_in(table, qname)));
    let types: Vec<RecordType> = nsec3_of(proof[0]).type_bit_maps().collect();
    assert!(!types.contains(&qtype) && !types.contains(&RecordType::CNAME), "{qname} {qtype}: {types:?}");
    assert_eq!(verify_all(table, m.name_servers()), 2);
    types
}

#[test]
fn negative_answers_of_an_nsec3_zone_carry_signed_closest_encloser_and_nodata_proofs() {
    for (iterations, salt) in [(0, &[][..]), (7, &[0xab, 0xcd][..])] {
        let table = signed_with(&nsec3_keys(iterations, salt));
        assert!(table.signatures[ZONE].nsec().is_empty(), "no NSEC records with NSEC3");
        // Under the CNAME-mode name, under the apex, and under an empty non-terminal.
        assert_nxdomain(&table, "x.cdn.edge.lagran.net.", "cdn.edge.lagran.net.", "x.cdn.edge.lagran.net.");
        assert_nxdomain(&table, "nope.edge.lagran.net.", "edge.lagran.net.", "nope.edge.lagran.net.");
        assert_nxdomain(&table, "a.b.nodes.edge.lagran.net.", "nodes.edge.lagran.net.", "b.nodes.edge.lagran.net.");
        // A type not served, AAAA where this client's answer has none, an
        // empty non-terminal, a node hostname.
        let apex = assert_nodata(&table, "edge.lagran.net.", RecordType::TXT, "192.0.2.1");
        assert!(apex.contains(&RecordType::NSEC3PARAM) && apex.contains(&RecordType::DNSKEY), "{apex:?}");
        let v4 = assert_nodata(&table, "edge.lagran.net.", RecordType::AAAA, "10.1.2.3");
        assert!(v4.contains(&RecordType::A), "{v4:?}");
        assert_eq!(assert_nodata(&table, "nodes.edge.lagran.net.", RecordType::A, "192.0.2.1"), []);
        assert_nodata(&table, "gz-01.nodes.edge.lagran.net.", RecordType::MX, "192.0.2.1");
        // The apex serves the NSEC3PARAM, signed.
        let (_, m) = ask(&table, "edge.lagran.net.", RecordType::NSEC3PARAM, true, "192.0.2.1");
        let param: Vec<&NSEC3PARAM> =
            m.answers().iter().filter_map(|r| r.data().as_dnssec()?.as_nsec3param()).collect();
        assert_eq!(param.len(), 1, "{m:?}");
        assert_eq!((param[0].iterations(), param[0].salt(), param[0].flags()), (iterations, salt, 0));
        assert_eq!(verify_all(&table, m.answers()), 1);
    }
}

#[test]
fn switching_the_denial_replaces_the_chain_and_survives_the_wire() {
    let nsec = keys(DnssecAlgorithm::Ecdsap256sha256, 1, None);
    let mut nsec3 = nsec.clone();
    nsec3.zones.get_mut(ZONE).unwrap().policy.denial = Denial::Nsec3;
    let table = signed_with(&nsec);
    let mut signer = TableSigner::new();
    let before = signer.sign(&table, &nsec, NOW_SECS).unwrap();
    let after = signer.sign(&table, &nsec3, NOW_SECS).unwrap();
    let rrsig_types = |s: &crate::zone_signatures::ZoneSignatures| -> BTreeSet<String> {
        s.rrsigs().keys().map(|k| k.split(' ').nth(1).unwrap().to_string()).collect()
    };
    assert!(rrsig_types(&before[ZONE]).contains("47") && !rrsig_types(&before[ZONE]).contains("50"));
    assert!(rrsig_types(&after[ZONE]).contains("50") && rrsig_types(&after[ZONE]).contains("51"));
    assert!(!rrsig_types(&after[ZONE]).contains("47"), "no NSEC signature left over");
    assert!(after[ZONE].nsec().is_empty() && before[ZONE].nsec3().is_none());
    // A new salt hashes every name anew.
    let mut salted = nsec3.clone();
    salted.zones.get_mut(ZONE).unwrap().policy.nsec3_salt = Nsec3Salt(vec![1]);
    let resalted = signer.sign(&table, &salted, NOW_SECS).unwrap();
    let owners = |s: &crate::zone_signatures::ZoneSignatures| -> BTreeSet<Name> {
        s.nsec3().unwrap().records().iter().map(|r| r.name().clone()).collect()
    };
    assert!(owners(&resalted[ZONE]).is_disjoint(&owners(&after[ZONE])));

    let table = table.with_signatures(after);
    let json = serde_json::to_vec(&table).unwrap();
    let back: RouteTable = serde_json::from_slice(&json).unwrap();
    assert_eq!(back.signatures, table.signatures, "the chain travels in the table");
    assert_nxdomain(&back, "nope.edge.lagran.net.", "edge.lagran.net.", "nope.edge.lagran.net.");
}
