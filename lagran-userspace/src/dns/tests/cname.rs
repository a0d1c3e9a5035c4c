//! Names in CNAME mode (answered with a CNAME to the chosen node's hostname)
//! and node hostnames (answered with the node's own address).

use super::*;
use crate::route_table::NodeHost;

const CDN: &str = "cdn.edge.lagran.net";
const GZ_HOST: &str = "gz-01.edge.lagran.net";

fn with_host(mut a: Answer, host: Option<&str>) -> Answer {
    a.hostname = host.map(str::to_string);
    a
}

/// `cdn.edge.lagran.net` in CNAME mode: 58.60.0.0/15 → gz-01 (hostname in the
/// zone), 1.2.3.0/24 → hk-01 (hostname in nobody's zone), the rest → kr-01
/// (no hostname: answered as in address mode).
fn cname_table() -> RouteTable {
    let cdn = ScheduledName {
        ecs: true,
        name: CDN.into(),
        id: 3,
        answers: std::sync::Arc::new(vec![
            with_host(ans(20, &["203.0.113.21"], &[], Some("gz-01")), Some(GZ_HOST)),
            with_host(ans(20, &["203.0.113.22"], &[], Some("hk-01")), Some("hk-01.nodes.example.org")),
            ans(20, &["203.0.113.23"], &[], Some("kr-01")),
        ]),
        v4: PrefixMapV4::from_ranges([r4("1.2.3.0", "1.2.3.255", 1), r4("58.60.0.0", "58.61.255.255", 0)], 2),
        v6: PrefixMapV6::uniform(2),
    };
    let hosts = vec![
        NodeHost { name: GZ_HOST.into(), node: "gz-01".into(), ipv4: Some(v4("203.0.113.21")), ipv6: None },
        NodeHost {
            name: "sz-02.pop.edge.lagran.net".into(),
            node: "sz-02".into(),
            ipv4: Some(v4("203.0.113.24")),
            ipv6: Some(v6("2001:db8:24::1")),
        },
    ];
    RouteTable::new(7, NOW - 1000, vec![ZoneRoutes { zone: zone(), names: vec![apex(), pool(), cdn] }])
        .with_node_hosts(hosts)
}

fn ask_cname(m: &Message, src: &str) -> (Reply, Message) {
    ask_with(m, src, &cname_table(), &settings())
}

fn cname_of(m: &Message) -> Vec<String> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::CNAME(c) => Some(format!("{}->{}", r.name().to_lowercase(), c.0.to_lowercase())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_answers_the_cname_then_the_hostnames_address_with_the_partition_scope() {
    let (r, m) = ask_cname(&ecs(msg("CDN.edge.lagran.net.", RecordType::A), "58.60.0.0", 24), "9.9.9.9");
    assert_eq!(m.response_code(), ResponseCode::NoError, "{m}");
    assert!(m.authoritative(), "{m}");
    assert_eq!(cname_of(&m), vec![format!("cdn.edge.lagran.net.->{GZ_HOST}.")], "the CNAME comes first: {m}");
    assert_eq!(m.answers()[0].record_type(), RecordType::CNAME, "{m}");
    assert_eq!(m.answers()[0].ttl(), 20, "the route's TTL: {m}");
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.21")], "then the target's A (RFC 1034 §4.3.2): {m}");
    assert_eq!(m.answers()[1].name().to_lowercase().to_ascii(), format!("{GZ_HOST}."), "{m}");
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 15, "ECS scope as for A: the matched block");
    assert_eq!(r.outcome, Outcome::Answered);
    assert!(r.scheduled);
    assert_eq!(r.client.unwrap().node.as_deref(), Some("gz-01"));
}

#[test]
fn qtype_cname_is_answered_by_the_cname_alone() {
    let (_, m) = ask_cname(&ecs(msg(CDN, RecordType::CNAME), "58.60.0.0", 24), "9.9.9.9");
    assert_eq!(m.response_code(), ResponseCode::NoError, "{m}");
    assert_eq!(cname_of(&m), vec![format!("cdn.edge.lagran.net.->{GZ_HOST}.")], "{m}");
    assert_eq!(m.answers().len(), 1, "no chase when QTYPE is CNAME: {m}");
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 15, "a tailored answer: {m}");
}

#[test]
fn a_type_the_target_lacks_gets_the_cname_and_the_targets_soa() {
    for t in [RecordType::AAAA, RecordType::TXT] {
        let (_, m) = ask_cname(&msg(CDN, t), "58.60.1.1");
        assert_eq!(m.response_code(), ResponseCode::NoError, "{t}: {m}");
        assert_eq!(cname_of(&m).len(), 1, "{t}: the CNAME answers every type: {m}");
        assert_eq!(m.answers().len(), 1, "{t}: gz-01 has no such record: {m}");
        assert_eq!(m.name_servers().len(), 1, "{t}: RFC 2308 §3 SOA: {m}");
        assert_eq!(m.name_servers()[0].record_type(), RecordType::SOA, "{m}");
    }
}

#[test]
fn a_target_outside_the_served_zones_ends_the_answer() {
    let (_, m) = ask_cname(&ecs(msg(CDN, RecordType::A), "1.2.3.0", 24), "9.9.9.9");
    assert_eq!(m.response_code(), ResponseCode::NoError, "{m}");
    assert_eq!(cname_of(&m), vec!["cdn.edge.lagran.net.->hk-01.nodes.example.org.".to_string()], "{m}");
    assert_eq!(m.answers().len(), 1, "nothing to add for another server's name: {m}");
    assert!(m.name_servers().is_empty(), "{m}");
}

#[test]
fn a_node_without_hostname_is_answered_as_in_address_mode() {
    let (r, m) = ask_cname(&msg(CDN, RecordType::A), "9.9.9.9");
    assert!(cname_of(&m).is_empty(), "{m}");
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.23")], "kr-01's address: {m}");
    assert_eq!(r.outcome, Outcome::Answered);
    let (_, m) = ask_cname(&msg(CDN, RecordType::CNAME), "9.9.9.9");
    assert!(m.answers().is_empty(), "no CNAME for this client: NODATA: {m}");
    assert_soa_authority(&m, zone().ns_ttl.min(zone().soa_minimum));
}

#[test]
fn a_stale_table_with_a_fallback_answers_the_fallback_not_the_cname() {
    let m = msg(CDN, RecordType::A);
    let (r, m) = ask_confirmed(&m, "58.60.1.1", &cname_table(), &with_fallback(), 1);
    assert_eq!(r.outcome, Outcome::Fallback, "{m}");
    assert_eq!(a_addrs(&m), vec![v4("198.51.100.1")], "{m}");
    assert!(cname_of(&m).is_empty(), "{m}");
}

#[test]
fn node_hostnames_answer_their_addresses_for_everyone() {
    let (r, m) = ask_cname(&ecs(msg(GZ_HOST, RecordType::A), "58.60.0.0", 24), "9.9.9.9");
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.21")], "{m}");
    assert!(m.authoritative());
    assert_eq!(m.answers()[0].ttl(), settings().served_ttl(settings().ttl), "{m}");
    assert_eq!(ecs_of(&m).unwrap().scope_prefix(), 0, "the same for every client: {m}");
    assert_eq!(r.outcome, Outcome::Answered);
    let (_, m) = ask_cname(&msg("sz-02.pop.edge.lagran.net", RecordType::AAAA), "9.9.9.9");
    assert_eq!(aaaa_addrs(&m), vec![v6("2001:db8:24::1")], "{m}");
    // Existing name, no such record: NODATA + SOA.
    for (name, t) in [(GZ_HOST, RecordType::AAAA), (GZ_HOST, RecordType::TXT)] {
        let (r, m) = ask_cname(&msg(name, t), "9.9.9.9");
        assert_eq!(r.outcome, Outcome::NoData, "{name} {t}: {m}");
        assert_soa_authority(&m, zone().ns_ttl.min(zone().soa_minimum));
    }
    // RFC 8020 §2: the parent of a node hostname exists; other names still do not.
    let (r, _) = ask_cname(&msg("pop.edge.lagran.net", RecordType::A), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::NoData, "an empty non-terminal");
    let (r, _) = ask_cname(&msg("gz-09.edge.lagran.net", RecordType::A), "9.9.9.9");
    assert_eq!(r.outcome, Outcome::NxDomain, "NXDOMAIN rules are unchanged");
}

#[test]
fn node_hosts_survive_the_wire_and_a_republish() {
    let t = cname_table();
    let back: RouteTable = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
    assert_eq!(back.hosts, t.hosts);
    assert!(back.serves_same_as(&t));
    let (_, m) = ask_with(&msg(GZ_HOST, RecordType::A), "9.9.9.9", &back.republished(8, NOW), &settings());
    assert_eq!(a_addrs(&m), vec![v4("203.0.113.21")], "{m}");
    let moved = t.clone().with_node_hosts(vec![]);
    assert!(!moved.serves_same_as(&t), "a node hostname gone changes what is served");
}
