//! A signed zone in the fast path: a query with DO gets the answer and its
//! RRSIG from `lagran_rrsig`, byte for byte what userspace sends; a query
//! without DO gets the unsigned answer; what the program cannot send signed
//! is passed, each under its reason.

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

use lagran::dnssec::{KeySnapshot, TableSigner};
use lagran::model::ZoneDnssec;

use super::*;

/// A name of 227 octets in wire form: its longest signed answer could exceed 512 octets.
pub(super) const LONG: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.\
     bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.\
     ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc.ddddddddddddddddd.edge.lagran.net";

/// The fixture table with its zone signed (and [`LONG`] added), signed at `now` (Unix seconds).
pub(super) fn signed_table_at(now: u32) -> RouteTable {
    let mut t = table();
    let zone = &mut t.zones[0];
    zone.zone.dnssec = Some(ZoneDnssec::default());
    zone.names.push(ScheduledName {
        ecs: true,
        name: LONG.into(),
        id: 6,
        answers: std::sync::Arc::new(vec![answer(30, &["192.0.2.60"])]),
        v4: PrefixMapV4::uniform(0),
        v6: PrefixMapV6::uniform(0),
    });
    let t = RouteTable::new(8, now_ms(), t.zones);
    let keys = KeySnapshot::single(&t.zones[0].zone.name, ZoneDnssec::default()).expect("the test keys");
    let signatures = TableSigner::new().sign(&t, &keys, now).expect("signing the fixture table");
    t.with_signatures(signatures)
}

pub(super) fn signed_table() -> RouteTable {
    signed_table_at(COOKIE_NOW)
}

impl Fixture {
    /// The program with the signed fixture table synced.
    pub(super) fn signed() -> Fixture {
        let obj = lagran::xdp::object_bytes().expect("the XDP object");
        Fixture::with(LoadedXdp::load(&obj).expect("loading the XDP program"), signed_table())
    }
}

/// The answer section's types and the RRSIGs' (covered type, signer) of a response.
fn sections(m: &[u8]) -> (Vec<RecordType>, Vec<(RecordType, String)>) {
    let msg = Message::from_vec(m).expect("a DNS message");
    let types = msg.answers().iter().map(|r| r.record_type()).collect();
    let sigs = msg
        .answers()
        .iter()
        .filter_map(|r| r.data().as_dnssec()?.as_rrsig())
        .map(|s| (s.type_covered(), s.signer_name().to_ascii()))
        .collect();
    (types, sigs)
}

#[test]
fn do_queries_for_a_signed_zone_get_the_rrsig_from_the_kernel() {
    let fx = Fixture::signed();
    let a = |n: &str| Dns::a(n);
    let cases: Vec<(&str, Vec<u8>, Vec<RecordType>)> = vec![
        ("A, DO", Frame::new().from("10.1.2.3").build(&a("edge.lagran.net").opt(1232, 0, true, &[]).bytes()), {
            vec![RecordType::A, RecordType::A, RecordType::RRSIG]
        }),
        (
            "A, DO, ECS",
            Frame::new().build(&a("edge.lagran.net").opt(1232, 0, true, &ecs4("10.9.0.0/16")).bytes()),
            vec![RecordType::A, RecordType::A, RecordType::RRSIG],
        ),
        (
            "A, DO, ECS, client cookie, padding",
            Frame::new().build(
                &a("pool-a.edge.lagran.net")
                    .opt(4096, 0, true, &[ecs4("58.60.1.0/24"), cookie(), padding(9)].concat())
                    .bytes(),
            ),
            vec![RecordType::A; 4].into_iter().chain([RecordType::RRSIG]).collect(),
        ),
        (
            "A, DO, a valid server cookie",
            Frame::new()
                .build(&a("edge.lagran.net").opt(1232, 0, true, &cookie_valid(IpAddr::V4(RESOLVER), 10)).bytes()),
            vec![RecordType::A, RecordType::RRSIG],
        ),
        (
            "AAAA, DO, four records, over IPv6 with a cookie",
            Frame::new()
                .v6("2001:db8:3::9")
                .build(&a("dual.edge.lagran.net").qtype(28).opt(1232, 0, true, &cookie()).bytes()),
            vec![RecordType::AAAA; 4].into_iter().chain([RecordType::RRSIG]).collect(),
        ),
        (
            "A, DO, the client's size below 512",
            Frame::new().build(&a("canary.edge.lagran.net").opt(100, 0, true, &ecs4("100.1.2.0/24")).bytes()),
            vec![RecordType::A, RecordType::RRSIG],
        ),
    ];
    for (what, frame, want) in &cases {
        let m = fx.answered(frame);
        let (types, sigs) = sections(&m);
        assert_eq!(&types, want, "{what}");
        assert_eq!(sigs.len(), 1, "{what}: one RRSIG");
        assert_eq!(sigs[0], (want[0], "edge.lagran.net.".to_string()), "{what}: covers the RRset, signed by the zone");
    }
    // The canary split: both halves signed, each with its own answer's RRSIG.
    let mut seen = std::collections::BTreeSet::new();
    for third in 0..=255u8 {
        let subnet = format!("100.1.{third}.0/24");
        let f = Frame::new().build(&a("canary.edge.lagran.net").opt(1232, 0, true, &ecs4(&subnet)).bytes());
        let m = fx.answered(&f);
        seen.insert(Message::from_vec(&m).unwrap().answers()[0].data().as_a().map(|a| a.0));
    }
    assert_eq!(seen.len(), 2, "the canary and the primary answer both come signed from the kernel");
}

#[test]
fn without_do_a_signed_zone_is_answered_as_an_unsigned_one() {
    let fx = Fixture::signed();
    let unsigned = table();
    for d in [
        Dns::a("edge.lagran.net").opt(1232, 0, false, &ecs4("10.9.0.0/16")),
        Dns::a("dual.edge.lagran.net").qtype(28),
        Dns::a("pool-a.edge.lagran.net").opt(1232, 0, false, &cookie()),
    ] {
        let frame = Frame::new().build(&d.bytes());
        let m = fx.answered(&frame);
        let parsed = parse_frame(&frame).unwrap();
        let (settings, check) = (settings(), cookie_check());
        let ctx =
            AnswerContext::new(&unsigned, &settings, parsed.src, Transport::Udp, now_ms()).with_cookies(Some(&check));
        let plain = dns::answer(parsed.dns, &ctx).bytes.unwrap();
        assert_eq!(hex(&m), hex(&plain), "the same bytes as for the zone unsigned");
    }
}

#[test]
fn signed_answers_the_kernel_cannot_send_are_passed() {
    let mut fx = Fixture::signed();
    // Letter case: the RRSIG's signer is written whole, so any case is answered.
    let m = fx.answered(&Frame::new().build(&Dns::a("EDGE.Lagran.net").opt(1232, 0, true, &[]).bytes()));
    assert_eq!(sections(&m).1.len(), 1);
    // A long name whose answer, signed, might not fit 512 octets.
    assert_eq!(wire(LONG).len(), 227);
    fx.pass(&Frame::new().build(&Dns::a(LONG).opt(512, 0, true, &[]).bytes()), Counter::SignedTooLarge);
    fx.answered(&Frame::new().build(&Dns::a(LONG).opt(512, 0, false, &[]).bytes()));
    // An answer the table carries no signature for: userspace answers it.
    let mut t = signed_table();
    let names = &mut t.zones[0].names;
    std::sync::Arc::make_mut(&mut names[1].answers)[0].ipv4[0] = ip("198.51.100.99");
    let t = RouteTable::new(9, now_ms(), t.zones.clone()).with_signatures(t.signatures.clone());
    let stats = fx.writer.sync(&t, &settings()).unwrap();
    assert!(stats.rrsigs_removed >= 1, "the changed answer's RRSIG goes: {stats:?}");
    fx.table = t;
    let pool = Dns::a("pool-a.edge.lagran.net").opt(1232, 0, true, &[]);
    fx.pass(&Frame::new().build(&pool.bytes()), Counter::RrsigMissing);
    fx.answered(&Frame::new().build(&Dns::a("edge.lagran.net").opt(1232, 0, true, &[]).bytes()));
}

#[test]
fn signatures_made_anew_and_zones_signed_or_not_follow_the_table() {
    let mut fx = Fixture::new();
    let query = Frame::new().build(&Dns::a("edge.lagran.net").opt(1232, 0, true, &ecs4("10.9.0.0/16")).bytes());
    let rrsigs = |m: &[u8]| sections(m).1.len();
    assert_eq!(rrsigs(&fx.answered(&query)), 0, "unsigned zone: no RRSIG");
    // Signed: the names are marked after their RRSIGs are in.
    let t = signed_table();
    let s = fx.writer.sync(&t, &settings()).unwrap();
    assert!(s.rrsigs_written > 0 && s.names_upserted > 0, "{s:?}");
    fx.table = t;
    let first = fx.answered(&query);
    assert_eq!(rrsigs(&first), 1);
    // Signed again a day later: every entry replaced, the answers unchanged.
    let t = signed_table_at(COOKIE_NOW + 86_400);
    let s = fx.writer.sync(&t, &settings()).unwrap();
    assert_eq!((s.answers_written, s.routes_upserted), (0, 0), "{s:?}");
    assert!(s.rrsigs_written > 0 && s.rrsigs_removed == 0, "{s:?}");
    fx.table = t;
    let second = fx.answered(&query);
    assert_ne!(hex(&first), hex(&second), "the new signature is sent");
    // Unsigned again: unmarked, entries removed.
    let t = RouteTable::new(20, now_ms(), table().zones);
    let s = fx.writer.sync(&t, &settings()).unwrap();
    assert!(s.rrsigs_removed > 0, "{s:?}");
    assert!(fx.writer.maps().rrsigs().unwrap().is_empty(), "lagran_rrsig is empty");
    fx.table = t;
    assert_eq!(rrsigs(&fx.answered(&query)), 0);
}
