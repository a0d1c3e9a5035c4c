//! Tests of [`super::answer()`] with real wire bytes (built by hickory-proto,
//! or by hand for malformed input).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query as HQuery, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::answer::{AnswerContext, DropReason, MAX_ANSWERS, Outcome, Reply, Transport, answer, scheduled_ttl};
use super::settings::DnsSettings;
use crate::model::{NsHost, Zone};
use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
use crate::route_table::{Answer, AnswerState, RouteTable, ScheduledName, ZoneRoutes};

const NOW: i64 = 1_700_000_000_000;
const ZONE: &str = "edge.lagran.net";

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn zone() -> Zone {
    let mut z = Zone::new(ZONE);
    z.ns_hosts = vec![
        NsHost { name: "ns1.edge.lagran.net".into(), ipv4: Some(v4("192.0.2.53")), ipv6: Some(v6("2001:db8::53")) },
        NsHost { name: "ns2.edge.lagran.net".into(), ipv4: Some(v4("198.51.100.53")), ipv6: None },
        NsHost { name: "ns3.dns.edge.lagran.net".into(), ipv4: Some(v4("192.0.2.54")), ipv6: None },
        NsHost { name: "ns.other.example".into(), ipv4: Some(v4("192.0.2.99")), ipv6: None },
    ];
    z
}

fn ans(ttl: u32, a: &[&str], aaaa: &[&str], node: Option<&str>) -> Answer {
    Answer {
        ttl,
        ipv4: a.iter().map(|s| v4(s)).collect(),
        ipv6: aaaa.iter().map(|s| v6(s)).collect(),
        node: node.map(str::to_string),
        reason: String::new(),
        state: if a.is_empty() && aaaa.is_empty() { AnswerState::Empty } else { AnswerState::Steady },
        ..Answer::default()
    }
}

fn r4(a: &str, b: &str, v: u32) -> (u32, u32, u32) {
    (u32::from(v4(a)), u32::from(v4(b)), v)
}

/// The apex: default answer 0 everywhere except
/// 1.2.3.0/24 → 1 (3 addresses, TTL 20), 2.0.0.0/8 → 2 (TTL 3600, no IPv6),
/// 3.0.0.0/25 → 3 (TTL 1), 4.4.0.0/16 → 4 (empty); 2400:cb00::/32 → 1.
fn apex() -> ScheduledName {
    ScheduledName {
        ecs: true,
        name: ZONE.into(),
        id: 1,
        answers: std::sync::Arc::new(vec![
            ans(30, &["203.0.113.10"], &["2001:db8:a::10"], Some("default-01")),
            ans(20, &["203.0.113.1", "203.0.113.2", "203.0.113.3"], &["2001:db8:a::1"], Some("gz-01")),
            ans(3600, &["203.0.113.4"], &[], Some("long-01")),
            ans(1, &["203.0.113.5"], &[], Some("short-01")),
            ans(10, &[], &[], None),
        ]),
        v4: PrefixMapV4::from_ranges(
            [
                r4("1.2.3.0", "1.2.3.255", 1),
                r4("2.0.0.0", "2.255.255.255", 2),
                r4("3.0.0.0", "3.0.0.127", 3),
                r4("4.4.0.0", "4.4.255.255", 4),
            ],
            0,
        ),
        v6: PrefixMapV6::from_ranges(
            [(u128::from(v6("2400:cb00::")), u128::from(v6("2400:cb00:ffff:ffff:ffff:ffff:ffff:ffff")), 1)],
            0,
        ),
    }
}

fn pool() -> ScheduledName {
    ScheduledName {
        ecs: true,
        name: format!("pool-a.{ZONE}"),
        id: 2,
        answers: std::sync::Arc::new(vec![ans(30, &["203.0.113.77"], &[], Some("pool-01"))]),
        v4: PrefixMapV4::uniform(0),
        v6: PrefixMapV6::uniform(0),
    }
}

fn table_at(version: u64, generated_at_ms: i64) -> RouteTable {
    RouteTable::new(version, generated_at_ms, vec![ZoneRoutes { zone: zone(), names: vec![apex(), pool()] }])
}

fn table() -> RouteTable {
    table_at(7, NOW - 1000)
}

fn settings() -> DnsSettings {
    DnsSettings::default()
}

fn with_fallback() -> DnsSettings {
    DnsSettings { fallback_ip: Some(v4("198.51.100.1")), ..DnsSettings::default() }
}

// ---- query builders -------------------------------------------------------

fn msg(name: &str, rtype: RecordType) -> Message {
    let mut m = Message::new();
    m.set_id(0xbeef).set_message_type(MessageType::Query).set_op_code(OpCode::Query).set_recursion_desired(true);
    m.add_query(HQuery::query(Name::from_ascii(name).unwrap(), rtype));
    m
}

fn edns(mut m: Message, payload: u16) -> Message {
    let mut e = Edns::new();
    e.set_max_payload(payload);
    m.set_edns(e);
    m
}

fn ecs(m: Message, addr: &str, source: u8) -> Message {
    let mut m = edns(m, 1232);
    m.extensions_mut().as_mut().unwrap().options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(
        ip(addr),
        source,
        0,
    )));
    m
}

/// A query built by hand: ID 0x1234, RD, one question.
fn raw_query(name: &str, qtype: u16, qclass: u16) -> Vec<u8> {
    let mut v = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    push_name(&mut v, name);
    v.extend_from_slice(&qtype.to_be_bytes());
    v.extend_from_slice(&qclass.to_be_bytes());
    v
}

fn push_name(v: &mut Vec<u8>, name: &str) {
    for l in name.split('.').filter(|l| !l.is_empty()) {
        v.push(l.len() as u8);
        v.extend_from_slice(l.as_bytes());
    }
    v.push(0);
}

fn bump(v: &mut [u8], at: usize) {
    let n = u16::from_be_bytes([v[at], v[at + 1]]) + 1;
    v[at..at + 2].copy_from_slice(&n.to_be_bytes());
}

/// Appends an OPT record (owner root) to the additional section.
fn add_opt(mut v: Vec<u8>, payload: u16, ttl: u32, rdata: &[u8]) -> Vec<u8> {
    bump(&mut v, 10);
    v.push(0);
    v.extend_from_slice(&41u16.to_be_bytes());
    v.extend_from_slice(&payload.to_be_bytes());
    v.extend_from_slice(&ttl.to_be_bytes());
    v.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    v.extend_from_slice(rdata);
    v
}

fn ecs_option(data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 8];
    v.extend_from_slice(&(data.len() as u16).to_be_bytes());
    v.extend_from_slice(data);
    v
}

// ---- running ----------------------------------------------------------------

fn run_with(bytes: &[u8], src: &str, t: Transport, table: &RouteTable, s: &DnsSettings) -> Reply {
    answer(bytes, &AnswerContext::new(table, s, ip(src), t, NOW))
}

/// Like [`ask_with`], the table last confirmed by the control plane at `confirmed_at_ms`.
fn ask_confirmed(
    m: &Message,
    src: &str,
    table: &RouteTable,
    s: &DnsSettings,
    confirmed_at_ms: i64,
) -> (Reply, Message) {
    let bytes = m.to_vec().unwrap();
    let r = answer(&bytes, &AnswerContext::new(table, s, ip(src), Transport::Udp, NOW).confirmed_at(confirmed_at_ms));
    let parsed = parse(&r);
    (r, parsed)
}

fn parse(r: &Reply) -> Message {
    Message::from_vec(r.bytes.as_ref().expect("a response")).expect("hickory parses the response")
}

fn ask_with(m: &Message, src: &str, table: &RouteTable, s: &DnsSettings) -> (Reply, Message) {
    let r = run_with(&m.to_vec().unwrap(), src, Transport::Udp, table, s);
    let resp = parse(&r);
    (r, resp)
}

fn ask(m: &Message, src: &str) -> (Reply, Message) {
    ask_with(m, src, &table(), &settings())
}

fn ask_raw(bytes: &[u8]) -> (Reply, Message) {
    let r = run_with(bytes, "9.9.9.9", Transport::Udp, &table(), &settings());
    let resp = parse(&r);
    (r, resp)
}

fn a_addrs(m: &Message) -> Vec<Ipv4Addr> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

fn aaaa_addrs(m: &Message) -> Vec<Ipv6Addr> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::AAAA(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

fn ecs_of(m: &Message) -> Option<ClientSubnet> {
    match m.extensions().as_ref()?.option(EdnsCode::Subnet)? {
        EdnsOption::Subnet(cs) => Some(*cs),
        _ => None,
    }
}

fn txt_of(m: &Message) -> String {
    match m.answers()[0].data() {
        RData::TXT(t) => t.txt_data().iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect(),
        other => panic!("not TXT: {other:?}"),
    }
}

fn assert_soa_authority(m: &Message, ttl: u32) {
    assert!(m.answers().is_empty(), "{m}");
    assert_eq!(m.name_servers().len(), 1, "{m}");
    let soa = &m.name_servers()[0];
    assert_eq!(soa.record_type(), RecordType::SOA);
    assert_eq!(soa.ttl(), ttl);
    assert_eq!(soa.name().to_lowercase(), Name::from_ascii("edge.lagran.net.").unwrap());
}

/// Flags every response carries: QR=1, RA=0, AD=0, ID copied.
fn assert_common(m: &Message, id: u16) {
    assert_eq!(m.id(), id);
    assert_eq!(m.message_type(), MessageType::Response);
    assert!(!m.recursion_available());
    assert!(!m.authentic_data());
}

// ---- scheduled A/AAAA ---------------------------------------------------------

#[test]
fn a_without_ecs_uses_the_source_address() {
    let (r, m) = ask(&msg("edge.lagran.net.", RecordType::A), "1.2.3.4");
    assert_eq!(r.outcome, Outcome::Answered);
    assert!(r.scheduled && !r.truncated && !r.stale);
    assert_common(&m, 0xbeef);
    assert!(m.authoritative());
    assert!(m.recursion_desired());
    assert!(!m.truncated());
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.1"), v4("203.0.113.2"), v4("203.0.113.3")]);
    assert!(m.answers().iter().all(|rr| rr.ttl() == 20 && rr.dns_class() == DNSClass::IN));
    assert!(m.extensions().is_none(), "no OPT without OPT in the query");
    assert!(m.name_servers().is_empty() && m.additionals().is_empty());
    let c = r.client.unwrap();
    assert_eq!(c.address, ip("1.2.3.4"));
    assert_eq!(c.ecs, None);
    assert_eq!(c.name, ZONE);
    assert_eq!(c.node.as_deref(), Some("gz-01"));
    // Every answer owner is a compression pointer to the question (offset 12).
    let bytes = r.bytes.unwrap();
    let qend = 12 + 17 + 4;
    assert_eq!(&bytes[qend..qend + 2], &[0xc0, 0x0c]);
    assert_eq!(bytes.len(), qend + 3 * 16);
}

#[test]
fn header_bits_are_copied() {
    let mut m = msg("pool-a.edge.lagran.net.", RecordType::A);
    m.set_recursion_desired(false).set_checking_disabled(true).set_id(7);
    let (_, resp) = ask(&m, "8.8.8.8");
    assert_common(&resp, 7);
    assert!(!resp.recursion_desired());
    assert!(resp.checking_disabled());
    assert_eq!(a_addrs(&resp), vec![v4("203.0.113.77")]);
}

#[test]
fn ecs_address_and_scope() {
    // SOURCE /24 inside 1.2.3.0/24: that answer, SCOPE 24, fields echoed.
    let (r, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::A), "1.2.3.0", 24), "9.9.9.9");
    assert_eq!(a_addrs(&m).len(), 3);
    let cs = ecs_of(&m).unwrap();
    assert_eq!((cs.addr(), cs.source_prefix(), cs.scope_prefix()), (ip("1.2.3.0"), 24, 24));
    assert_eq!(r.client.as_ref().unwrap().ecs, Some((ip("1.2.3.0"), 24, 24)));
    assert_eq!(r.client.as_ref().unwrap().address, ip("9.9.9.9"));
    let e = m.extensions().as_ref().unwrap();
    assert_eq!(e.max_payload(), 1232);
    assert_eq!(e.version(), 0);
    assert!(!e.flags().dnssec_ok);

    // SOURCE /16 inside 2.0.0.0/8: SCOPE 8 (wider than the source).
    let (_, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::A), "2.1.0.0", 16), "9.9.9.9");
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.4")]);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 8);

    // SOURCE /24 inside 3.0.0.0/25: SCOPE 25 (narrower than the source).
    let (_, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::A), "3.0.0.0", 24), "9.9.9.9");
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.5")]);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 25);

    // The default partition: SCOPE = the matched block.
    let (_, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::A), "5.0.0.0", 8), "1.2.3.4");
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.10")]);
    let (_, want) = apex().answer_for(ip("5.0.0.0"));
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), want);

    // SOURCE 0: the packet's source address decides, SCOPE 0.
    let (r, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::A), "0.0.0.0", 0), "1.2.3.4");
    assert_eq!(a_addrs(&m).len(), 3);
    let cs = ecs_of(&m).unwrap();
    assert_eq!((cs.source_prefix(), cs.scope_prefix()), (0, 0));
    assert_eq!(r.client.unwrap().ecs, Some((ip("0.0.0.0"), 0, 0)));

    // IPv6 ECS; an IPv4-mapped IPv6 ECS looks up the IPv4 map (scope + 96).
    let (_, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::A), "2400:cb00:1::", 48), "9.9.9.9");
    assert_eq!(a_addrs(&m).len(), 3);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 32);
    let (_, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::A), "::ffff:1.2.3.0", 120), "9.9.9.9");
    assert_eq!(a_addrs(&m).len(), 3);
    let cs = ecs_of(&m).unwrap();
    assert_eq!((cs.source_prefix(), cs.scope_prefix()), (120, 120));
}

#[test]
fn do_bit_is_copied() {
    let mut m = ecs(msg("edge.lagran.net.", RecordType::A), "1.2.3.0", 24);
    m.extensions_mut().as_mut().unwrap().set_dnssec_ok(true);
    let (_, resp) = ask(&m, "9.9.9.9");
    assert!(resp.extensions().as_ref().unwrap().flags().dnssec_ok);
}

/// The exact octets the XDP fast path must produce for the same query.
#[test]
fn exact_response_layout_for_the_fast_path() {
    let q = add_opt(raw_query(ZONE, 1, 1), 4096, 0, &ecs_option(&[0, 1, 24, 0, 1, 2, 3]));
    let r = run_with(&q, "9.9.9.9", Transport::Udp, &table(), &settings());
    let mut want = vec![0x12, 0x34, 0x85, 0x00, 0, 1, 0, 3, 0, 0, 0, 1];
    push_name(&mut want, ZONE);
    want.extend_from_slice(&[0, 1, 0, 1]);
    for last in [1u8, 2, 3] {
        want.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 20, 0, 4, 203, 0, 113, last]);
    }
    want.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 11]);
    want.extend_from_slice(&[0, 8, 0, 7, 0, 1, 24, 24, 1, 2, 3]);
    assert_eq!(r.bytes.unwrap(), want);

    // Without OPT: no additional record at all; DO copied into the OPT TTL.
    let r = run_with(&raw_query(ZONE, 1, 1), "3.0.0.9", Transport::Udp, &table(), &settings());
    let mut want = vec![0x12, 0x34, 0x85, 0x00, 0, 1, 0, 1, 0, 0, 0, 0];
    push_name(&mut want, ZONE);
    want.extend_from_slice(&[0, 1, 0, 1, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 203, 0, 113, 5]);
    assert_eq!(r.bytes.unwrap(), want);

    let q = add_opt(raw_query(ZONE, 1, 1), 1232, 0x8000, &[]);
    let r = run_with(&q, "3.0.0.9", Transport::Udp, &table(), &settings());
    let b = r.bytes.unwrap();
    assert_eq!(&b[b.len() - 11..], &[0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0]);
}

#[test]
fn ttl_is_capped_and_floored() {
    let q = |addr: &str| ecs(msg("edge.lagran.net.", RecordType::A), addr, 24);
    // route TTL 3600 > DNS_TTL 30
    let (_, m) = ask(&q("2.0.0.0"), "9.9.9.9");
    assert_eq!(m.answers()[0].ttl(), 30);
    // route TTL 1 < floor 5
    let (_, m) = ask(&q("3.0.0.0"), "9.9.9.9");
    assert_eq!(m.answers()[0].ttl(), 5);
    // DNS_TTL below the floor: the floor wins
    let s = DnsSettings { ttl: 3, ..settings() };
    let (_, m) = ask_with(&q("1.2.3.0"), "9.9.9.9", &table(), &s);
    assert!(m.answers().iter().all(|r| r.ttl() == 5));
    // DNS_TTL above the route TTL: the route TTL
    let s = DnsSettings { ttl: 100, ..settings() };
    let (_, m) = ask_with(&q("1.2.3.0"), "9.9.9.9", &table(), &s);
    assert!(m.answers().iter().all(|r| r.ttl() == 20));
    assert_eq!(scheduled_ttl(3600, &settings()), 30);
    assert_eq!(scheduled_ttl(0, &settings()), 5);
}

#[test]
fn answers_are_capped_at_four() {
    let mut t = table();
    std::sync::Arc::make_mut(&mut t.zones[0].names[1].answers)[0].ipv4 =
        (1..=6).map(|i| Ipv4Addr::new(203, 0, 113, i)).collect();
    let (_, m) = ask_with(&msg("pool-a.edge.lagran.net.", RecordType::A), "8.8.8.8", &t, &settings());
    assert_eq!(a_addrs(&m).len(), MAX_ANSWERS);
    assert_eq!(a_addrs(&m)[0], v4("203.0.113.1"));
}

#[test]
fn aaaa_answers() {
    let (r, m) = ask(&msg("edge.lagran.net.", RecordType::AAAA), "2400:cb00::1");
    assert_eq!(r.outcome, Outcome::Answered);
    assert_eq!(aaaa_addrs(&m), vec![v6("2001:db8:a::1")]);
    assert_eq!(m.answers()[0].ttl(), 20);
    // An IPv4 client asking AAAA gets its partition's IPv6 address.
    let (_, m) = ask(&msg("edge.lagran.net.", RecordType::AAAA), "1.2.3.4");
    assert_eq!(aaaa_addrs(&m), vec![v6("2001:db8:a::1")]);
    // IPv6 ECS, scope of the matched /32.
    let (_, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::AAAA), "2400:cb00:1::", 48), "9.9.9.9");
    assert_eq!(aaaa_addrs(&m), vec![v6("2001:db8:a::1")]);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 32);
    // A partition without IPv6 nodes: NODATA + SOA, still tailored (scope 8).
    let (r, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::AAAA), "2.0.0.0", 8), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::NoData);
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(m.authoritative());
    assert_soa_authority(&m, 60);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 8);
}

#[test]
fn canary_split_is_per_subnet() {
    use crate::route_table::Canary;
    let mut t = table();
    // Everyone in the default partition takes the canary (answer 2).
    std::sync::Arc::make_mut(&mut t.zones[0].names[0].answers)[0].canary = Some(Canary { percent: 100, answer: 2 });
    let (r, m) = ask_with(&ecs(msg("edge.lagran.net.", RecordType::A), "5.6.7.0", 24), "9.9.9.9", &t, &settings());
    assert_eq!(r.outcome, Outcome::Answered);
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.4")]);
    let (_, want) = t.zones[0].names[0].answer_for(ip("5.6.7.0"));
    assert!(want >= 24, "a canary answer is never scoped wider than the split subnet");
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), want);
}

#[test]
fn inconsistent_tables_do_not_panic() {
    let q = msg("edge.lagran.net.", RecordType::A);
    // A canary pointing past the answers.
    let mut t = table();
    std::sync::Arc::make_mut(&mut t.zones[0].names[0].answers)[0].canary =
        Some(crate::route_table::Canary { percent: 50, answer: 99 });
    let (r, _) = ask_with(&q, "8.8.8.8", &t, &settings());
    assert_eq!(r.outcome, Outcome::ServFail);
    // No answers at all (the prefix maps point at index 0).
    let mut t = table();
    std::sync::Arc::make_mut(&mut t.zones[0].names[0].answers).clear();
    let (r, m) = ask_with(&q, "8.8.8.8", &t, &with_fallback());
    assert_eq!(r.outcome, Outcome::Fallback);
    assert_eq!(a_addrs(&m), vec![v4("198.51.100.1")]);
    // A zone config with an unusable SOA name: SERVFAIL, not a panic.
    let mut t = table();
    t.zones[0].zone.soa_rname = "bad..name".into();
    let (r, _) = ask_with(&msg("nope.edge.lagran.net.", RecordType::A), "8.8.8.8", &t, &settings());
    assert_eq!(r.outcome, Outcome::ServFail);
}

// ---- zone data ------------------------------------------------------------------

#[test]
fn apex_soa() {
    let (r, m) = ask(&ecs(msg("edge.lagran.net.", RecordType::SOA), "1.2.3.0", 24), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::Answered);
    assert!(!r.scheduled);
    assert!(m.authoritative());
    assert_eq!(m.answers().len(), 1);
    let rr = &m.answers()[0];
    assert_eq!(rr.ttl(), 3600);
    let RData::SOA(soa) = rr.data() else { panic!("{rr:?}") };
    assert_eq!(soa.mname(), &Name::from_ascii("ns1.edge.lagran.net.").unwrap());
    assert_eq!(soa.rname(), &Name::from_ascii("hostmaster.edge.lagran.net.").unwrap());
    let z = zone();
    assert_eq!(
        (soa.serial(), soa.refresh(), soa.retry(), soa.expire(), soa.minimum()),
        (z.soa_serial, z.soa_refresh as i32, z.soa_retry as i32, z.soa_expire as i32, z.soa_minimum)
    );
    // Not tailored: scope 0.
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 0);
}

#[test]
fn apex_ns_with_glue() {
    let (r, m) = ask(&edns(msg("edge.lagran.net.", RecordType::NS), 1232), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::Answered);
    let targets: Vec<String> = m
        .answers()
        .iter()
        .map(|rr| match rr.data() {
            RData::NS(ns) => ns.0.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        targets,
        ["ns1.edge.lagran.net.", "ns2.edge.lagran.net.", "ns3.dns.edge.lagran.net.", "ns.other.example."]
    );
    assert!(m.answers().iter().all(|rr| rr.ttl() == 3600));
    // Glue of the in-zone hosts only, A then AAAA per host; the OPT is separate.
    let glue: Vec<(String, String)> =
        m.additionals().iter().map(|rr| (rr.name().to_string(), rr.data().to_string())).collect();
    assert_eq!(
        glue,
        [
            ("ns1.edge.lagran.net.".to_string(), "192.0.2.53".to_string()),
            ("ns1.edge.lagran.net.".to_string(), "2001:db8::53".to_string()),
            ("ns2.edge.lagran.net.".to_string(), "198.51.100.53".to_string()),
            ("ns3.dns.edge.lagran.net.".to_string(), "192.0.2.54".to_string()),
        ]
    );
    assert!(m.extensions().is_some());
    // The OPT record is the last record of the message.
    let b = r.bytes.unwrap();
    assert_eq!(&b[b.len() - 11..b.len() - 8], &[0, 0, 41]);
}

#[test]
fn apex_without_scheduling_still_has_soa_and_ns() {
    let t = RouteTable::new(3, NOW, vec![ZoneRoutes { zone: zone(), names: vec![pool()] }]);
    let (_, m) = ask_with(&msg("edge.lagran.net.", RecordType::SOA), "9.9.9.9", &t, &settings());
    assert_eq!(m.answers()[0].record_type(), RecordType::SOA);
    let (_, m) = ask_with(&msg("edge.lagran.net.", RecordType::NS), "9.9.9.9", &t, &settings());
    assert_eq!(m.answers().len(), 4);
    let (r, m) = ask_with(&msg("edge.lagran.net.", RecordType::A), "9.9.9.9", &t, &settings());
    assert_eq!(r.outcome, Outcome::NoData);
    assert_soa_authority(&m, 60);
}

#[test]
fn ns_host_glue() {
    let (r, m) = ask(&msg("ns1.edge.lagran.net.", RecordType::A), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::Answered);
    assert!(m.authoritative());
    assert_eq!(a_addrs(&m), vec![v4("192.0.2.53")]);
    assert_eq!(m.answers()[0].ttl(), 3600);
    let (_, m) = ask(&msg("NS1.edge.lagran.net.", RecordType::AAAA), "9.9.9.9");
    assert_eq!(aaaa_addrs(&m), vec![v6("2001:db8::53")]);
    let (r, m) = ask(&msg("ns2.edge.lagran.net.", RecordType::AAAA), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::NoData);
    assert_soa_authority(&m, 60);
    let (r, m) = ask(&msg("ns1.edge.lagran.net.", RecordType::MX), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::NoData);
    assert_soa_authority(&m, 60);
    let (_, m) = ask(&msg("ns3.dns.edge.lagran.net.", RecordType::A), "9.9.9.9");
    assert_eq!(a_addrs(&m), vec![v4("192.0.2.54")]);
}

#[test]
fn refused_cases() {
    let cases: Vec<Message> = vec![
        msg("edge.lagran.net.", RecordType::ANY),
        msg("edge.lagran.net.", RecordType::AXFR),
        {
            let mut m = Message::new();
            m.set_id(0xbeef).set_recursion_desired(true);
            let mut q = HQuery::query(Name::from_ascii("edge.lagran.net.").unwrap(), RecordType::A);
            q.set_query_class(DNSClass::CH);
            m.add_query(q);
            m
        },
        msg("example.com.", RecordType::A),
        msg("lagran.net.", RecordType::A),
        msg("ns.other.example.", RecordType::A),
        msg(".", RecordType::NS),
    ];
    for m in cases {
        let m = ecs(m, "1.2.3.0", 24);
        let (r, resp) = ask(&m, "9.9.9.9");
        assert_eq!(r.outcome, Outcome::Refused, "{m}");
        assert_eq!(resp.response_code(), ResponseCode::Refused);
        assert!(!resp.authoritative(), "REFUSED has AA=0");
        assert_common(&resp, 0xbeef);
        assert_eq!(resp.queries(), m.queries(), "question echoed");
        assert!(resp.answers().is_empty() && resp.name_servers().is_empty() && resp.additionals().is_empty());
        let cs = ecs_of(&resp).expect("ECS echoed");
        assert_eq!((cs.source_prefix(), cs.scope_prefix()), (24, 0));
    }
}

#[test]
fn nxdomain_with_soa() {
    let (r, m) = ask(&ecs(msg("nope.edge.lagran.net.", RecordType::A), "1.2.3.0", 24), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::NxDomain);
    assert!(!r.scheduled);
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    assert!(m.authoritative());
    // TTL = min(SOA TTL 3600, MINIMUM 60)
    assert_soa_authority(&m, 60);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 0);
    assert_eq!(r.client.unwrap().ecs, Some((ip("1.2.3.0"), 24, 0)));
    // below an NS host name
    let (r, _) = ask(&msg("foo.ns1.edge.lagran.net.", RecordType::A), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::NxDomain);
    // SOA TTL lower than MINIMUM: the SOA TTL
    let mut t = table();
    t.zones[0].zone.ns_ttl = 30;
    let (_, m) = ask_with(&msg("nope.edge.lagran.net.", RecordType::A), "9.9.9.9", &t, &settings());
    assert_soa_authority(&m, 30);
}

#[test]
fn nodata_with_soa() {
    for (name, t) in [
        ("edge.lagran.net.", RecordType::TXT),
        ("edge.lagran.net.", RecordType::MX),
        ("pool-a.edge.lagran.net.", RecordType::SOA),
        ("pool-a.edge.lagran.net.", RecordType::NS),
        ("dns.edge.lagran.net.", RecordType::A), // empty non-terminal above ns3
        ("whoami.edge.lagran.net.", RecordType::A),
        ("_version.edge.lagran.net.", RecordType::AAAA),
    ] {
        let (r, m) = ask(&msg(name, t), "9.9.9.9");
        assert_eq!(r.outcome, Outcome::NoData, "{name} {t}");
        assert_eq!(m.response_code(), ResponseCode::NoError);
        assert!(m.authoritative());
        assert_soa_authority(&m, 60);
    }
}

#[test]
fn question_case_is_preserved_and_compressed() {
    let (r, m) = ask(&msg("EDGE.Lagran.NET.", RecordType::A), "1.2.3.4");
    assert_eq!(r.client.as_ref().unwrap().name, ZONE);
    let b = r.bytes.as_ref().unwrap();
    assert_eq!(&b[12..29], b"\x04EDGE\x06Lagran\x03NET\x00");
    assert_eq!(&b[33..35], &[0xc0, 0x0c]);
    assert_eq!(a_addrs(&m).len(), 3);
    // The SOA owner takes the question's spelling, so it compresses too.
    let (r, m) = ask(&msg("NoPe.EDGE.lagran.net.", RecordType::A), "1.2.3.4");
    assert_eq!(m.name_servers()[0].name().to_string(), "EDGE.lagran.net.");
    let b = r.bytes.unwrap();
    let qend = 12 + 22 + 4;
    assert_eq!(&b[qend..qend + 2], &[0xc0, 12 + 5]);
}

// ---- TXT --------------------------------------------------------------------------

#[test]
fn whoami() {
    let (r, m) = ask(&ecs(msg("whoami.edge.lagran.net.", RecordType::TXT), "1.2.3.0", 24), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::Answered);
    assert_eq!(txt_of(&m), "client=9.9.9.9 ecs=1.2.3.0/24");
    assert_eq!(m.answers()[0].ttl(), 0);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 0);
    let (_, m) = ask(&msg("WhoAmI.edge.lagran.net.", RecordType::TXT), "2001:db8::7");
    assert_eq!(txt_of(&m), "client=2001:db8::7 ecs=none");
    let (_, m) = ask(&ecs(msg("whoami.edge.lagran.net.", RecordType::TXT), "2400:cb00::", 32), "9.9.9.9");
    assert_eq!(txt_of(&m), "client=9.9.9.9 ecs=2400:cb00::/32");
}

#[test]
fn version_txt() {
    let (r, m) = ask(&msg("_version.edge.lagran.net.", RecordType::TXT), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::Answered);
    assert_eq!(txt_of(&m), format!("version=7 generated_at={} age_ms=1000 confirmed_ms_ago=0", NOW - 1000));
    assert_eq!(m.answers()[0].ttl(), 0);
}

#[test]
fn version_txt_says_when_the_table_was_last_confirmed() {
    let q = msg("_version.edge.lagran.net.", RecordType::TXT);
    let (_, m) = ask_confirmed(&q, "9.9.9.9", &table(), &settings(), NOW - 2_500);
    assert_eq!(txt_of(&m), format!("version=7 generated_at={} age_ms=1000 confirmed_ms_ago=2500", NOW - 1000));
    let (_, m) = ask_confirmed(&q, "9.9.9.9", &table(), &settings(), 0);
    assert!(txt_of(&m).ends_with(" confirmed_ms_ago=-1"), "never confirmed: {}", txt_of(&m));
}

// ---- fallback, no table, stale -------------------------------------------------------

#[test]
fn empty_answer_uses_fallback_or_servfail() {
    let q = ecs(msg("edge.lagran.net.", RecordType::A), "4.4.0.0", 16);
    let (r, m) = ask_with(&q, "9.9.9.9", &table(), &with_fallback());
    assert_eq!(r.outcome, Outcome::Fallback);
    assert!(r.scheduled);
    assert!(m.authoritative());
    assert_eq!(a_addrs(&m), vec![v4("198.51.100.1")]);
    assert_eq!(m.answers()[0].ttl(), 10);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 16);

    let (r, m) = ask(&q, "9.9.9.9");
    assert_eq!(r.outcome, Outcome::ServFail);
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    assert!(!m.authoritative());
    assert!(m.answers().is_empty() && m.name_servers().is_empty());
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 0);
    assert_eq!(m.queries(), q.queries());

    // AAAA with no IPv6 anywhere in the partition: NODATA
    let (r, _) = ask_with(&msg("edge.lagran.net.", RecordType::AAAA), "4.4.1.1", &table(), &with_fallback());
    assert_eq!(r.outcome, Outcome::NoData);
}

#[test]
fn no_table_uses_fallback_or_servfail() {
    let empty = RouteTable::default();
    let a = msg("edge.lagran.net.", RecordType::A);
    let (r, m) = ask_with(&a, "1.2.3.4", &empty, &with_fallback());
    assert_eq!(r.outcome, Outcome::Fallback);
    assert_eq!(a_addrs(&m), vec![v4("198.51.100.1")]);
    assert_eq!(m.answers()[0].ttl(), 30);
    assert!(m.authoritative());
    let (r, m) = ask_with(&a, "1.2.3.4", &empty, &settings());
    assert_eq!(r.outcome, Outcome::ServFail);
    assert!(!m.authoritative());
    let (r, _) = ask_with(&msg("edge.lagran.net.", RecordType::AAAA), "1.2.3.4", &empty, &with_fallback());
    assert_eq!(r.outcome, Outcome::ServFail);
    // A version-0 table that knows its zones: zone data answered, scheduled names not.
    let v0 = table_at(0, NOW);
    let (r, m) = ask_with(&a, "1.2.3.4", &v0, &with_fallback());
    assert_eq!(r.outcome, Outcome::Fallback);
    assert_eq!(a_addrs(&m), vec![v4("198.51.100.1")]);
    let (r, _) = ask_with(&a, "1.2.3.4", &v0, &settings());
    assert_eq!(r.outcome, Outcome::ServFail);
    let (r, _) = ask_with(&msg("edge.lagran.net.", RecordType::SOA), "1.2.3.4", &v0, &settings());
    assert_eq!(r.outcome, Outcome::Answered);
    let (r, _) = ask_with(&msg("example.com.", RecordType::A), "1.2.3.4", &v0, &settings());
    assert_eq!(r.outcome, Outcome::Refused);
}

#[test]
fn an_old_but_confirmed_table_is_not_stale() {
    // A quiet, healthy cluster (or a held rollback): the table is a day old,
    // but the control plane confirmed it a second ago.
    let old = table_at(7, NOW - 86_400_000);
    let q = ecs(msg("edge.lagran.net.", RecordType::A), "1.2.3.0", 24);
    let (r, m) = ask_confirmed(&q, "9.9.9.9", &old, &with_fallback(), NOW - 1_000);
    assert_eq!(r.outcome, Outcome::Answered);
    assert!(!r.stale);
    assert_eq!(a_addrs(&m).len(), 3);
}

#[test]
fn stale_table() {
    // Fresh table, but the control plane stopped confirming it 600.001 s ago.
    let stale = table_at(7, NOW - 1_000);
    let confirmed = NOW - 600_001;
    let ask_with = |q: &Message, src: &str, t: &RouteTable, s: &DnsSettings| ask_confirmed(q, src, t, s, confirmed);
    let q = ecs(msg("edge.lagran.net.", RecordType::A), "1.2.3.0", 24);
    // With a fallback: the fallback, for everyone (scope 0).
    let (r, m) = ask_with(&q, "9.9.9.9", &stale, &with_fallback());
    assert_eq!(r.outcome, Outcome::Fallback);
    assert!(!r.stale);
    assert_eq!(a_addrs(&m), vec![v4("198.51.100.1")]);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 0);
    let (r, m) = ask_with(&msg("edge.lagran.net.", RecordType::AAAA), "1.2.3.4", &stale, &with_fallback());
    assert_eq!(r.outcome, Outcome::Fallback);
    assert!(aaaa_addrs(&m).is_empty());
    assert_soa_authority(&m, 60);
    // Without: the stale answer, flagged for the stale_served counter.
    let (r, m) = ask_with(&q, "9.9.9.9", &stale, &settings());
    assert_eq!(r.outcome, Outcome::Answered);
    assert!(r.stale);
    assert_eq!(a_addrs(&m).len(), 3);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 24);
    // Confirmed exactly stale_secs ago is not stale yet.
    let (r, m) = ask_confirmed(&q, "9.9.9.9", &stale, &with_fallback(), NOW - 600_000);
    assert_eq!(r.outcome, Outcome::Answered);
    assert!(!r.stale);
    assert_eq!(a_addrs(&m).len(), 3);
}

// ---- EDNS ---------------------------------------------------------------------------

#[test]
fn badvers() {
    let q = add_opt(raw_query(ZONE, 1, 1), 1232, 1 << 16, &ecs_option(&[0, 1, 24, 0, 1, 2, 3]));
    let (r, m) = ask_raw(&q);
    assert_eq!(r.outcome, Outcome::BadVers);
    // 16 is both BADVERS and BADSIG; hickory names it BADSIG.
    assert_eq!(u16::from(m.response_code()), 16);
    assert!(!m.authoritative());
    let e = m.extensions().as_ref().expect("OPT");
    assert_eq!(e.version(), 0);
    assert_eq!(e.rcode_high(), 1);
    assert!(ecs_of(&m).is_none());
    assert_eq!(m.queries().len(), 1);
    assert!(m.answers().is_empty());
    let b = r.bytes.unwrap();
    assert_eq!(b[3] & 0x0f, 0, "header RCODE holds the low 4 bits of 16");
}

#[test]
fn malformed_ecs_is_formerr() {
    let cases: [&[u8]; 11] = [
        &[0, 1, 33, 0, 1, 2, 3, 4, 5], // source longer than IPv4
        &[0, 1, 24, 0, 1, 2, 3, 4],    // address longer than the source
        &[0, 1, 24, 0, 1, 2],          // address shorter than the source
        &[0, 1, 0, 0, 1],              // source 0 with an address
        &[0, 1, 23, 0, 1, 2, 3],       // bit beyond /23
        &[0, 3, 0, 0],                 // unknown family
        &[0, 0, 0, 0],                 // family 0
        &[0, 1, 24, 24, 1, 2, 3],      // scope set in a query
        &[0, 1, 24],                   // shorter than the fixed part
        &[0, 2, 129, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], // source longer than IPv6
        &[0, 2, 8, 0, 0x24, 0],        // IPv6 address too long
    ];
    for data in cases {
        let q = add_opt(raw_query(ZONE, 1, 1), 1232, 0, &ecs_option(data));
        let (r, m) = ask_raw(&q);
        assert_eq!(r.outcome, Outcome::FormErr, "{data:?}");
        assert_eq!(m.response_code(), ResponseCode::FormErr);
        assert!(!m.authoritative());
        assert!(m.extensions().is_some(), "the OPT is kept");
        assert!(ecs_of(&m).is_none(), "a malformed ECS is not echoed");
        assert!(m.answers().is_empty());
        assert_eq!(m.queries().len(), 1);
    }
    // Two ECS options.
    let mut two = ecs_option(&[0, 1, 0, 0]);
    two.extend(ecs_option(&[0, 1, 0, 0]));
    let (r, _) = ask_raw(&add_opt(raw_query(ZONE, 1, 1), 1232, 0, &two));
    assert_eq!(r.outcome, Outcome::FormErr);
    // An option running past the OPT RDATA.
    let (r, _) = ask_raw(&add_opt(raw_query(ZONE, 1, 1), 1232, 0, &[0, 10, 0, 9, 1, 2]));
    assert_eq!(r.outcome, Outcome::FormErr);
    // Other options are skipped, ECS still found.
    let mut opts = vec![0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
    opts.extend(ecs_option(&[0, 1, 24, 0, 1, 2, 3]));
    let (r, m) = ask_raw(&add_opt(raw_query(ZONE, 1, 1), 1232, 0, &opts));
    assert_eq!(r.outcome, Outcome::Answered);
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 24);
}

#[test]
fn opt_placement_errors_are_formerr() {
    // Two OPT records.
    let q = add_opt(add_opt(raw_query(ZONE, 1, 1), 1232, 0, &[]), 1232, 0, &[]);
    let (r, m) = ask_raw(&q);
    assert_eq!(r.outcome, Outcome::FormErr);
    assert!(m.extensions().is_none());
    assert_eq!(m.queries().len(), 1);
    // OPT in the answer section.
    let mut q = add_opt(raw_query(ZONE, 1, 1), 1232, 0, &[]);
    q[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    assert_eq!(ask_raw(&q).0.outcome, Outcome::FormErr);
    // OPT with a non-root owner.
    let mut q = raw_query(ZONE, 1, 1);
    bump(&mut q, 10);
    q.extend_from_slice(&[0xc0, 0x0c, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(ask_raw(&q).0.outcome, Outcome::FormErr);
    // RDLENGTH past the end.
    let mut q = add_opt(raw_query(ZONE, 1, 1), 1232, 0, &[]);
    let n = q.len();
    q[n - 1] = 5;
    assert_eq!(ask_raw(&q).0.outcome, Outcome::FormErr);
}

#[test]
fn other_additional_records_are_skipped() {
    // An A record in the additional section whose owner points to the question.
    let mut q = raw_query(ZONE, 1, 1);
    bump(&mut q, 10);
    q.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 1, 2, 3, 4]);
    let q = add_opt(q, 1232, 0, &[]);
    let (r, _) = ask_raw(&q);
    assert_eq!(r.outcome, Outcome::Answered);
    // A compression pointer pointing at itself.
    let mut q = raw_query(ZONE, 1, 1);
    bump(&mut q, 10);
    let at = q.len();
    q.extend_from_slice(&[0xc0 | (at >> 8) as u8, at as u8, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(ask_raw(&q).0.outcome, Outcome::FormErr);
    // Pointer chains: a short one is fine, one longer than any real name is not.
    assert_eq!(ask_raw(&chain_query(10)).0.outcome, Outcome::Answered);
    assert_eq!(ask_raw(&chain_query(200)).0.outcome, Outcome::FormErr);
}

/// A query whose second additional record's owner is a chain of `n + 1`
/// compression pointers ending at a root label inside the first record's RDATA.
fn chain_query(n: usize) -> Vec<u8> {
    let mut q = raw_query(ZONE, 1, 1);
    q[10..12].copy_from_slice(&[0, 2]);
    q.extend_from_slice(&[0, 0, 10, 0, 1, 0, 0, 0, 0]); // root, NULL, IN, TTL 0
    q.extend_from_slice(&((1 + 2 * n) as u16).to_be_bytes());
    let mut prev = q.len();
    q.push(0);
    for _ in 0..n {
        let at = q.len();
        q.extend_from_slice(&[0xc0 | (prev >> 8) as u8, prev as u8]);
        prev = at;
    }
    q.extend_from_slice(&[0xc0 | (prev >> 8) as u8, prev as u8, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    q
}

// ---- size -----------------------------------------------------------------------------

fn big_zone_table() -> RouteTable {
    let mut z = zone();
    z.ns_hosts = (0..12)
        .map(|i| NsHost {
            name: format!("ns{i}.edge.lagran.net"),
            ipv4: Some(Ipv4Addr::new(192, 0, 2, i)),
            ipv6: Some(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16)),
        })
        .collect();
    RouteTable::new(1, NOW, vec![ZoneRoutes { zone: z, names: vec![apex()] }])
}

#[test]
fn truncation_to_the_clients_size() {
    let t = big_zone_table();
    let s = settings();
    let full_len = {
        let r = run_with(&msg(ZONE, RecordType::NS).to_vec().unwrap(), "9.9.9.9", Transport::Tcp, &t, &s);
        r.bytes.unwrap().len()
    };
    assert!(full_len > 512 && full_len < 1200, "{full_len}");

    // No OPT: 512.
    let (r, m) = ask_with(&msg(ZONE, RecordType::NS), "9.9.9.9", &t, &s);
    assert!(r.truncated && m.truncated());
    assert_eq!(r.outcome, Outcome::Answered);
    assert!(m.answers().is_empty() && m.additionals().is_empty() && m.name_servers().is_empty());
    assert_eq!(m.queries().len(), 1);
    assert!(r.bytes.unwrap().len() <= 512);

    // OPT 4096: min(4096, 1232) is enough.
    let (r, m) = ask_with(&edns(msg(ZONE, RecordType::NS), 4096), "9.9.9.9", &t, &s);
    assert!(!r.truncated && !m.truncated());
    assert_eq!(m.answers().len(), 12);
    assert_eq!(m.additionals().len(), 24);

    // OPT 512, and OPT below 512 (treated as 512): truncated, OPT kept.
    for size in [512u16, 100] {
        let q = add_opt(msg(ZONE, RecordType::NS).to_vec().unwrap(), size, 0, &ecs_option(&[0, 1, 24, 0, 1, 2, 3]));
        let r = run_with(&q, "9.9.9.9", Transport::Udp, &t, &s);
        let m = parse(&r);
        assert!(r.truncated && m.truncated(), "{size}");
        assert!(m.answers().is_empty());
        assert_eq!(m.extensions().as_ref().unwrap().max_payload(), 1232);
        assert_eq!(ecs_of(&m).unwrap().source_prefix(), 24);
    }

    // Our own limit wins over a larger client size.
    let small = DnsSettings { max_udp_payload: 600, ..settings() };
    let (r, m) = ask_with(&edns(msg(ZONE, RecordType::NS), 4096), "9.9.9.9", &t, &small);
    assert!(r.truncated);
    assert_eq!(m.extensions().as_ref().unwrap().max_payload(), 600);

    // TCP: never truncated.
    let r = run_with(&msg(ZONE, RecordType::NS).to_vec().unwrap(), "9.9.9.9", Transport::Tcp, &t, &s);
    assert!(!r.truncated);
    assert_eq!(parse(&r).answers().len(), 12);
}

// ---- malformed input --------------------------------------------------------------------

#[test]
fn responses_and_short_packets_are_dropped() {
    let mut q = raw_query(ZONE, 1, 1);
    q[2] |= 0x80;
    let r = run_with(&q, "9.9.9.9", Transport::Udp, &table(), &settings());
    assert_eq!(
        r,
        Reply {
            bytes: None,
            outcome: Outcome::Dropped,
            client: None,
            truncated: false,
            stale: false,
            scheduled: false,
            dropped: Some(DropReason::Response),
            cookie: None,
        }
    );
    // Shorter than a header and the smallest question (the root name, QTYPE, QCLASS).
    for n in 0..17 {
        let r = run_with(&raw_query(ZONE, 1, 1)[..n], "9.9.9.9", Transport::Udp, &table(), &settings());
        assert_eq!((r.outcome, r.dropped), (Outcome::Dropped, Some(DropReason::Short)), "{n} octets are dropped");
        assert!(r.bytes.is_none());
    }
    // 17 octets: a root question parses, so it is answered (REFUSED: outside every zone).
    let r = run_with(&raw_query(".", 1, 1), "9.9.9.9", Transport::Udp, &table(), &settings());
    assert_eq!(r.outcome, Outcome::Refused, "a 17-octet root query is answered");
}

#[test]
fn junk_is_dropped_not_reflected() {
    // QDCOUNT=0, even with records after the header.
    let mut q = add_opt(raw_query(ZONE, 1, 1), 1232, 0, &[]);
    q[5] = 0;
    let r = run_with(&q, "9.9.9.9", Transport::Udp, &table(), &settings());
    assert_eq!((r.outcome, r.dropped, r.bytes), (Outcome::Dropped, Some(DropReason::NoQuestion), None));
    // Random-looking junk: a header, then no parsable name.
    let mut junk = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    junk.extend_from_slice(&[0x7f; 20]);
    let r = run_with(&junk, "9.9.9.9", Transport::Udp, &table(), &settings());
    assert_eq!((r.outcome, r.dropped, r.bytes), (Outcome::Dropped, Some(DropReason::BadQuestion), None));
    // An unparsable question is dropped whatever the opcode.
    junk[2] = 4 << 3;
    assert_eq!(run_with(&junk, "9.9.9.9", Transport::Tcp, &table(), &settings()).outcome, Outcome::Dropped);
}

#[test]
fn other_opcodes_are_notimp() {
    for opcode in [OpCode::Notify, OpCode::Update, OpCode::Status] {
        let mut m = msg("edge.lagran.net.", RecordType::SOA);
        m.set_op_code(opcode);
        let (r, resp) = ask(&m, "9.9.9.9");
        assert_eq!(r.outcome, Outcome::NotImp);
        assert_eq!(resp.response_code(), ResponseCode::NotImp);
        assert_eq!(resp.op_code(), opcode);
        assert!(!resp.authoritative());
        assert_eq!(resp.queries(), m.queries());
    }
    let mut q = raw_query(ZONE, 1, 1);
    q[2] |= 15 << 3;
    let (r, _) = ask_raw(&q);
    assert_eq!(r.outcome, Outcome::NotImp);
    assert_eq!(r.bytes.unwrap()[2] & 0x78, 15 << 3);
}

#[test]
fn question_count_must_be_one() {
    let mut q = raw_query(ZONE, 1, 1);
    q[5] = 0;
    let r = run_with(&q, "9.9.9.9", Transport::Udp, &table(), &settings());
    assert_eq!(r.dropped, Some(DropReason::NoQuestion), "QDCOUNT=0 has no question to parse: dropped");

    let mut q = raw_query(ZONE, 1, 1);
    q[5] = 2;
    q.extend_from_slice(&[0xc0, 0x0c, 0, 28, 0, 1]);
    let (r, m) = ask_raw(&add_opt(q, 1232, 0, &[]));
    assert_eq!(r.outcome, Outcome::FormErr);
    assert!(m.queries().is_empty());
    assert!(m.extensions().is_some());
}

#[test]
fn unreadable_questions_are_dropped() {
    let dropped = |q: &[u8]| {
        let r = run_with(q, "9.9.9.9", Transport::Udp, &table(), &settings());
        assert_eq!((r.outcome, r.bytes.is_none()), (Outcome::Dropped, true), "{q:?} is dropped");
        r.dropped
    };
    // Truncated in the middle of the name / before QCLASS.
    let full = raw_query(ZONE, 1, 1);
    for n in [17, 20, full.len() - 1] {
        assert_eq!(dropped(&full[..n]), Some(DropReason::BadQuestion));
    }
    // A 256-octet name is rejected, a 255-octet one is read (and refused).
    let label = "a".repeat(63);
    let too_long = format!("{label}.{label}.{label}.{}", "b".repeat(63)); // 4*64 + 1 = 257
    dropped(&raw_query(&too_long, 1, 1));
    let max = format!("{label}.{label}.{label}.{}", "b".repeat(61)); // 3*64 + 62 + 1 = 255
    let (r, _) = ask_raw(&raw_query(&max, 1, 1));
    assert_eq!(r.outcome, Outcome::Refused);
    // A label type other than a length or a pointer.
    let mut q = raw_query(ZONE, 1, 1);
    q[12] = 0x45;
    dropped(&q);
    // A pointer forward from the question.
    let mut q = raw_query(ZONE, 1, 1);
    q[12] = 0xc0;
    q[13] = 0x20;
    dropped(&q);
}

#[test]
fn huge_record_counts_cost_nothing() {
    let mut q = raw_query(ZONE, 1, 1);
    q[6..12].copy_from_slice(&[0xff; 6]);
    let start = std::time::Instant::now();
    let (r, m) = ask_raw(&q);
    assert_eq!(r.outcome, Outcome::FormErr);
    assert_eq!(m.queries().len(), 1);
    let mut q = vec![0u8; 17];
    q[4..12].copy_from_slice(&[0xff; 8]);
    q[14] = 1; // root question, QTYPE 1, QCLASS 0; then 65 534 missing questions
    assert_eq!(ask_raw(&q).0.outcome, Outcome::FormErr);
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

/// Every response we send is a well-formed DNS response to that query.
fn check_reply(query: &[u8], r: &Reply) {
    let Some(b) = &r.bytes else {
        assert_eq!(r.outcome, Outcome::Dropped);
        return;
    };
    assert!(b.len() >= 12 && b.len() <= 512, "UDP reply of {} octets", b.len());
    // Junk is never answered: a reply means the header and a question parsed.
    assert!(query.len() >= 17 && query[2] & 0x80 == 0 && query[4..6] != [0, 0], "junk answered: {query:02x?}");
    assert_eq!(&b[..2], &query[..2], "ID copied");
    assert_ne!(b[2] & 0x80, 0, "QR set");
    assert_eq!(b[3] & 0x80, 0, "RA clear");
    if let Err(e) = Message::from_vec(b) {
        panic!("unparseable response {e}: query {query:02x?} response {b:02x?}");
    }
}

#[test]
fn random_garbage_never_panics() {
    let t = table();
    let s = with_fallback();
    let mut rng = StdRng::seed_from_u64(0x1a9_2a4);
    let mut answered = 0;
    for i in 0..5000 {
        let len = rng.gen_range(0..600);
        let mut q: Vec<u8> = (0..len).map(|_| rng.r#gen()).collect();
        if i % 2 == 0 && q.len() > 5 {
            // Make more of them look like queries: QR=0, small counts.
            q[2] &= 0x7f;
            q[4] = 0;
            q[5] = rng.gen_range(0..3);
        }
        let r = run_with(&q, "9.9.9.9", Transport::Udp, &t, &s);
        check_reply(&q, &r);
        if r.bytes.is_some() {
            answered += 1;
        }
    }
    // Random bytes rarely hold a parsable question, and only those are answered.
    assert!(answered < 250, "{answered} of 5000 random packets answered");
}

#[test]
fn mutated_queries_never_panic() {
    let t = table();
    let s = with_fallback();
    let seeds: Vec<Vec<u8>> = vec![
        ecs(msg("edge.lagran.net.", RecordType::A), "1.2.3.0", 24).to_vec().unwrap(),
        ecs(msg("edge.lagran.net.", RecordType::AAAA), "2400:cb00::", 32).to_vec().unwrap(),
        edns(msg("edge.lagran.net.", RecordType::NS), 4096).to_vec().unwrap(),
        msg("whoami.edge.lagran.net.", RecordType::TXT).to_vec().unwrap(),
        msg("nope.edge.lagran.net.", RecordType::A).to_vec().unwrap(),
        add_opt(raw_query(ZONE, 1, 1), 1232, 0, &ecs_option(&[0, 2, 56, 0, 0x24, 0, 0xcb, 0, 0, 0, 0])),
    ];
    let mut rng = StdRng::seed_from_u64(7);
    let mut outcomes = std::collections::HashSet::new();
    for _ in 0..6000 {
        let mut q = seeds[rng.gen_range(0..seeds.len())].clone();
        for _ in 0..rng.gen_range(1..4) {
            match rng.gen_range(0..5) {
                0 => {
                    let i = rng.gen_range(0..q.len());
                    q[i] ^= 1 << rng.gen_range(0..8);
                }
                1 => {
                    let i = rng.gen_range(0..q.len());
                    q[i] = rng.r#gen();
                }
                2 => {
                    let n = rng.gen_range(0..=q.len());
                    q.truncate(n);
                }
                3 => {
                    let i = rng.gen_range(0..=q.len());
                    q.insert(i, rng.r#gen());
                }
                _ => {
                    if q.len() >= 12 {
                        let i = 4 + 2 * rng.gen_range(0..4);
                        q[i] = 0;
                        q[i + 1] = rng.gen_range(0..4);
                    }
                }
            }
            if q.is_empty() {
                break;
            }
        }
        let r = run_with(&q, "9.9.9.9", Transport::Udp, &t, &s);
        check_reply(&q, &r);
        outcomes.insert(r.outcome);
    }
    for o in [Outcome::Answered, Outcome::FormErr, Outcome::Dropped, Outcome::NxDomain, Outcome::Refused] {
        assert!(outcomes.contains(&o), "{o} never seen: {outcomes:?}");
    }
}

#[test]
fn replies_to_well_formed_queries_are_parseable() {
    // The record types we never serve, for every kind of name.
    let names = [
        "edge.lagran.net.",
        "pool-a.edge.lagran.net.",
        "ns1.edge.lagran.net.",
        "whoami.edge.lagran.net.",
        "x.edge.lagran.net.",
    ];
    for name in names {
        for t in [
            RecordType::A,
            RecordType::AAAA,
            RecordType::NS,
            RecordType::SOA,
            RecordType::TXT,
            RecordType::MX,
            RecordType::CAA,
        ] {
            let m = ecs(msg(name, t), "1.2.3.0", 24);
            let (r, resp) = ask(&m, "9.9.9.9");
            assert_ne!(r.outcome, Outcome::FormErr, "{name} {t}");
            assert_eq!(resp.queries(), m.queries());
        }
    }
}

#[test]
fn a_name_with_ecs_off_answers_for_the_resolver_with_scope_0() {
    // ECS is sent only for the names the operator turned it on for.
    let mut name = apex();
    name.ecs = false;
    let t = RouteTable::new(7, NOW - 1000, vec![ZoneRoutes { zone: zone(), names: vec![name, pool()] }]);
    let q = ecs(msg("edge.lagran.net.", RecordType::A), "1.2.3.0", 24);
    let (_, m) = ask_with(&q, "2.2.2.2", &t, &settings());
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.4")], "the resolver's address (2.0.0.0/8) decides, not the ECS");
    let cs = ecs_of(&m).expect("ECS still echoed");
    assert_eq!((cs.source_prefix(), cs.scope_prefix()), (24, 0), "not used for the answer: SCOPE 0");
    let (_, m) = ask(&q, "2.2.2.2");
    assert_eq!(a_addrs(&m).len(), 3, "with ECS on, the ECS address decides");
}

mod cname;
mod unlocated;

// ---- server cookies (RFC 7873, RFC 9018) --------------------------------------

fn cookie_check() -> super::cookie::CookieCheck {
    super::cookie::CookieCheck { current: [0x5a; 16], previous: None, now: (NOW / 1000) as u32 }
}

fn ask_cookie(bytes: &[u8], src: &str) -> Reply {
    let (table, settings, check) = (table(), settings(), cookie_check());
    answer(bytes, &AnswerContext::new(&table, &settings, ip(src), Transport::Udp, NOW).with_cookies(Some(&check)))
}

/// The COOKIE option's data in a response.
fn cookie_of(bytes: &[u8]) -> Option<Vec<u8>> {
    let m = Message::from_vec(bytes).unwrap();
    match m.extensions().as_ref()?.option(EdnsCode::Cookie)? {
        EdnsOption::Unknown(_, data) => Some(data.clone()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_client_cookie_gets_our_server_cookie_and_a_valid_one_is_echoed() {
    let client = [1u8, 2, 3, 4, 5, 6, 7, 8];
    let mut rdata = vec![0, 10, 0, 8];
    rdata.extend_from_slice(&client);
    let q = add_opt(raw_query(&format!("nope.{ZONE}"), 1, 1), 1232, 0, &rdata);
    let r = ask_cookie(&q, "192.0.2.1");
    assert_eq!(r.outcome, Outcome::NxDomain);
    let cookie = cookie_of(r.bytes.as_ref().unwrap()).expect("a COOKIE option");
    let want = super::cookie::server_cookie(&[0x5a; 16], &client, (NOW / 1000) as u32, ip("192.0.2.1"));
    assert_eq!(cookie, [client.as_slice(), &want].concat());
    assert!(!r.cookie.unwrap().valid);

    // The cookie sent back is valid and echoed; from another address it is not.
    let mut rdata = vec![0, 10, 0, 24];
    rdata.extend_from_slice(&cookie);
    let q = add_opt(raw_query(ZONE, 1, 1), 1232, 0, &rdata);
    let r = ask_cookie(&q, "192.0.2.1");
    assert!(r.cookie.unwrap().valid);
    assert_eq!(cookie_of(r.bytes.as_ref().unwrap()).unwrap(), cookie);
    assert!(!ask_cookie(&q, "192.0.2.2").cookie.unwrap().valid);

    // With ECS too: the ECS option first, then the COOKIE.
    let mut rdata = ecs_option(&[0, 1, 24, 0, 10, 1, 2]);
    rdata.extend_from_slice(&[0, 10, 0, 8]);
    rdata.extend_from_slice(&client);
    let q = add_opt(raw_query(ZONE, 1, 1), 1232, 0, &rdata);
    let r = ask_cookie(&q, "192.0.2.1");
    let m = parse(&r);
    assert_eq!(m.response_code(), ResponseCode::NoError);
    let opt = m.extensions().as_ref().unwrap();
    assert!(opt.option(EdnsCode::Subnet).is_some());
    assert_eq!(cookie_of(r.bytes.as_ref().unwrap()).unwrap().len(), 24);
    let bytes = r.bytes.unwrap();
    assert_eq!(&bytes[bytes.len() - 28..bytes.len() - 24], &[0, 10, 0, 24], "the COOKIE option ends the OPT");

    // Without cookie support (`answer`), the option is ignored as before.
    assert!(cookie_of(ask_raw(&q).0.bytes.as_ref().unwrap()).is_none());
}

#[test]
fn malformed_cookies_get_formerr() {
    for len in [0usize, 7, 9, 15, 41] {
        let mut rdata = vec![0, 10, 0, len as u8];
        rdata.extend(std::iter::repeat_n(7u8, len));
        let q = add_opt(raw_query(ZONE, 1, 1), 1232, 0, &rdata);
        let r = ask_cookie(&q, "192.0.2.1");
        assert_eq!(r.outcome, Outcome::FormErr, "a COOKIE of {len} octets");
        assert!(cookie_of(r.bytes.as_ref().unwrap()).is_none());
    }
    for len in [8usize, 16, 40] {
        let mut rdata = vec![0, 10, 0, len as u8];
        rdata.extend(std::iter::repeat_n(7u8, len));
        let q = add_opt(raw_query(ZONE, 1, 1), 1232, 0, &rdata);
        assert_eq!(ask_cookie(&q, "192.0.2.1").outcome, Outcome::Answered, "a COOKIE of {len} octets");
    }
}

#[test]
fn a_cookie_only_query_gets_a_server_cookie_and_other_questionless_ones_nothing() {
    // RFC 7873 §5.4: QDCOUNT 0, an OPT with a COOKIE.
    let header = vec![0x12, 0x34, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0];
    let client = [9u8, 8, 7, 6, 5, 4, 3, 2];
    let with = |cookie: &[u8]| {
        let mut rdata = vec![0, 10, 0, cookie.len() as u8];
        rdata.extend_from_slice(cookie);
        add_opt(header.clone(), 1232, 0, &rdata)
    };
    let r = ask_cookie(&with(&client), "192.0.2.1");
    assert_eq!(r.outcome, Outcome::NoData, "just a client cookie: NOERROR");
    let m = parse(&r);
    assert_eq!(
        (m.id(), m.response_code(), m.queries().len(), m.answers().len()),
        (0x1234, ResponseCode::NoError, 0, 0)
    );
    let cookie = cookie_of(r.bytes.as_ref().unwrap()).expect("a COOKIE option");
    let want = super::cookie::server_cookie(&[0x5a; 16], &client, (NOW / 1000) as u32, ip("192.0.2.1"));
    assert_eq!(cookie, [client.as_slice(), &want].concat());

    // The cookie just issued is valid: NOERROR, echoed, and the query is exempt from RRL.
    let r = ask_cookie(&with(&cookie), "192.0.2.1");
    assert_eq!(parse(&r).response_code(), ResponseCode::NoError);
    assert!(r.cookie.unwrap().valid);
    // From another address it is not: BADCOOKIE with a fresh cookie for that address.
    let r = ask_cookie(&with(&cookie), "192.0.2.2");
    assert_eq!(r.outcome, Outcome::BadCookie);
    assert_eq!(u16::from(parse(&r).response_code()), super::answer::wire::RCODE_BADCOOKIE);
    let fresh = cookie_of(r.bytes.as_ref().unwrap()).unwrap();
    let want = super::cookie::server_cookie(&[0x5a; 16], &client, (NOW / 1000) as u32, ip("192.0.2.2"));
    assert_eq!(fresh, [client.as_slice(), &want].concat());

    // Anything else without a question is junk: dropped, never reflected.
    let dropped = |bytes: &[u8], why: &str| {
        let r = ask_cookie(bytes, "192.0.2.1");
        assert_eq!((r.dropped, r.bytes.is_none()), (Some(DropReason::NoQuestion), true), "{why}");
    };
    dropped(&add_opt(header.clone(), 1232, 0, &[]), "an OPT without a COOKIE");
    dropped(&with(&[7; 5]), "a malformed COOKIE");
    dropped(&[header.clone(), vec![0; 11]].concat(), "no OPT");
    let mut notify = with(&client);
    notify[2] = 4 << 3;
    dropped(&notify, "another opcode");
    let r = run_with(&with(&client), "192.0.2.1", Transport::Udp, &table(), &settings());
    assert_eq!(r.dropped, Some(DropReason::NoQuestion), "server cookies off: dropped");
}
