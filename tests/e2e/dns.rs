//! The DNS behaviour of a zone (scheduled answers, SOA/NS/glue, REFUSED,
//! NXDOMAIN, NODATA, EDNS and ECS, TC and TCP, whoami, _version, malformed
//! packets), behaviour by behaviour, through `dig` (and raw UDP where dig
//! cannot send the malformed packet we need).

use std::net::UdpSocket;
use std::time::Duration;

use serde_json::json;

use crate::support::{Daemon, Geo, Options, have_tool};

const ZONE: &str = "edge.lagran.net";

fn daemon(test: &str) -> Option<Daemon> {
    have_tool("dig", test).then(|| Daemon::start(Options::default()))
}

#[test]
fn shenzhen_ecs_gets_gz01_with_ttl_30_and_a_scope() {
    let Some(d) = daemon("shenzhen_ecs") else { return };
    let r = d.dig(&[ZONE, "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.status, "NOERROR", "{}", r.text);
    assert_eq!(
        r.answers("A"),
        vec!["203.0.113.21"],
        "the reference design's example: gz-01 for Shenzhen Telecom\n{}",
        r.text
    );
    assert_eq!(r.answer[0].ttl, 30, "TTL = min(SCHEDULE_TTL 30, DNS_TTL 30)");
    assert!(r.has_flag("qr") && r.has_flag("aa"), "authoritative answer expected: {:?}", r.flags);
    assert!(!r.has_flag("ra"), "an authoritative server does not offer recursion");
    assert_eq!(r.ecs.as_deref(), Some("58.60.0.0/24/14"), "ECS echoed with scope = the /14 partition\n{}", r.text);
}

#[test]
fn without_ecs_the_source_address_is_used_and_loopback_is_unknown() {
    let Some(d) = daemon("no_ecs") else { return };
    let r = d.dig(&[ZONE, "A"]);
    // 127.0.0.1 is never looked up: the unknown partition ranks by weight and load -> hk-01
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "{}", r.text);
    let r = d.dig(&[ZONE, "A", "+subnet=8.8.8.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "a US client gets hk-01\n{}", r.text);
    let r = d.dig(&[ZONE, "A", "+subnet=0.0.0.0/0"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "source prefix 0 -> the packet source\n{}", r.text);
    assert_eq!(r.ecs.as_deref(), Some("0.0.0.0/0/0"), "{}", r.text);
}

#[test]
fn private_ecs_addresses_fall_into_the_unknown_partition() {
    let Some(d) = daemon("private_ecs") else { return };
    for subnet in ["10.1.2.0/24", "100.64.1.0/24", "192.168.1.0/24"] {
        let r = d.dig(&[ZONE, "A", &format!("+subnet={subnet}")]);
        assert_eq!(r.answers("A"), vec!["203.0.113.22"], "{subnet}\n{}", r.text);
    }
}

#[test]
fn soa_ns_and_glue() {
    let Some(d) = daemon("soa_ns") else { return };
    let r = d.dig(&[ZONE, "SOA"]);
    assert_eq!(r.status, "NOERROR");
    let soa = r.answers("SOA");
    assert_eq!(soa.len(), 1, "{}", r.text);
    assert!(soa[0].starts_with("ns1.edge.lagran.net. hostmaster.edge.lagran.net."), "{}", soa[0]);

    let r = d.dig(&[ZONE, "NS"]);
    let mut ns = r.answers("NS");
    ns.sort();
    assert_eq!(ns, vec!["ns1.edge.lagran.net.", "ns2.edge.lagran.net."], "{}", r.text);
    let glue: Vec<String> = r.additional.iter().filter(|x| x.rtype == "A").map(|x| x.data.clone()).collect();
    assert!(glue.contains(&"198.51.100.53".to_string()) && glue.contains(&"198.51.100.54".to_string()), "{}", r.text);

    let r = d.dig(&["ns1.edge.lagran.net", "A"]);
    assert_eq!(r.answers("A"), vec!["198.51.100.53"], "an NS host name answers its glue\n{}", r.text);
}

#[test]
fn refused_cases() {
    let Some(d) = daemon("refused") else { return };
    let r = d.dig(&[ZONE, "ANY"]);
    assert_eq!(r.status, "REFUSED", "ANY is refused\n{}", r.text);
    let r = d.dig(&["-c", "CH", ZONE, "A"]);
    assert_eq!(r.status, "REFUSED", "class CH\n{}", r.text);
    let r = d.dig(&["example.com", "A"]);
    assert_eq!(r.status, "REFUSED", "out of zone\n{}", r.text);
    assert!(!r.has_flag("aa"), "no authority outside our zones");
}

#[test]
fn nxdomain_and_nodata_carry_the_soa() {
    let Some(d) = daemon("negative") else { return };
    let r = d.dig(&["nope.edge.lagran.net", "A"]);
    assert_eq!(r.status, "NXDOMAIN", "{}", r.text);
    assert_eq!(r.authority.len(), 1, "{}", r.text);
    assert_eq!(r.authority[0].rtype, "SOA");
    assert!(r.authority[0].ttl <= 60, "negative TTL is the SOA minimum\n{}", r.text);

    let r = d.dig(&[ZONE, "AAAA"]);
    assert_eq!(r.status, "NOERROR", "{}", r.text);
    assert!(r.answer.is_empty(), "no node has an IPv6 address: NODATA\n{}", r.text);
    assert_eq!(r.authority.first().map(|x| x.rtype.as_str()), Some("SOA"), "{}", r.text);

    let r = d.dig(&[ZONE, "MX"]);
    assert_eq!(r.status, "NOERROR");
    assert!(r.answer.is_empty());
    assert_eq!(r.authority.first().map(|x| x.rtype.as_str()), Some("SOA"), "{}", r.text);
}

#[test]
fn edns_version_and_opt_echo() {
    let Some(d) = daemon("edns") else { return };
    let r = d.dig(&[ZONE, "A", "+edns=1", "+noednsnegotiation"]);
    assert_eq!(r.status, "BADVERS", "{}", r.text);
    let r = d.dig(&[ZONE, "A"]);
    assert!(r.edns.as_deref().is_some_and(|e| e.contains("version: 0")), "OPT answered to OPT\n{}", r.text);
    let r = d.dig(&[ZONE, "A", "+noedns"]);
    assert!(r.edns.is_none(), "no OPT without OPT in the query\n{}", r.text);
    assert_eq!(r.answers("A").len(), 1);
}

#[test]
fn whoami_and_version_txt() {
    let Some(d) = daemon("txt") else { return };
    let r = d.dig(&[&format!("whoami.{ZONE}"), "TXT", "+subnet=58.60.0.0/24"]);
    let txt = r.answers("TXT").join(" ");
    assert!(txt.contains("127.0.0.1"), "whoami names the querying address: {txt}");
    assert!(txt.contains("58.60.0.0/24"), "whoami names the ECS subnet: {txt}");
    let r = d.dig(&[&format!("_version.{ZONE}"), "TXT"]);
    let txt = r.answers("TXT").join(" ");
    assert!(txt.contains("version="), "{txt}");
    assert!(txt.contains("generated_at="), "{txt}");
}

#[test]
fn truncation_and_tcp() {
    let Some(d) = daemon("tc") else { return };
    // A zone with many NS hosts: its NS answer does not fit 512 bytes.
    let hosts: Vec<_> = (0..24)
        .map(|i| json!({"name": format!("a-rather-long-name-server-host-{i:02}.big.example.org"), "ipv4": format!("198.51.100.{i}"), "ipv6": null}))
        .collect();
    let (s, body) = d.http("PUT", "/api/v1/zones/big.example.org", Some(json!({ "ns_hosts": hosts })), &[]);
    assert_eq!(s, 200, "{body}");
    let r = d.dig(&["big.example.org", "NS", "+noedns", "+ignore"]);
    assert!(r.has_flag("tc"), "a response over 512 bytes sets TC\n{}", r.text);
    let r = d.dig(&["big.example.org", "NS", "+tcp"]);
    assert_eq!(r.answers("NS").len(), 24, "TCP carries the whole answer\n{}", r.text);
    let r = d.dig(&[ZONE, "A", "+tcp", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "scheduled answers over TCP too\n{}", r.text);
}

#[test]
fn node_offline_moves_the_answer_at_once_and_back() {
    let Some(d) = daemon("offline") else { return };
    let q = [ZONE, "A", "+subnet=58.60.0.0/24"];
    assert_eq!(d.dig(&q).answers("A"), vec!["203.0.113.21"]);
    let (s, body) = d.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})), &[]);
    assert_eq!(s, 200, "{body}");
    let r = d.dig(&q);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "the next answer already reflects the PATCH\n{}", r.text);
    // One structured line explains the change: from, to, partitions, reason.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let line = loop {
        let log = d.log();
        let found =
            log.lines().find(|l| l.contains("answer changed") && l.contains("\"from\":\"gz-01\"")).map(str::to_string);
        if found.is_some() || std::time::Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let line = line.unwrap_or_else(|| panic!("no 'answer changed' line from gz-01:\n{}", d.log()));
    assert!(line.contains("\"to\":\"hk-01\"") && line.contains("CN/广东/深圳/电信"), "{line}");
    let (s, _) = d.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "online"})), &[]);
    assert_eq!(s, 200);
    assert_eq!(d.dig(&q).answers("A"), vec!["203.0.113.21"]);
}

#[test]
fn no_eligible_node_servfail_or_fallback() {
    let Some(d) = daemon("servfail") else { return };
    for n in ["gz-01", "hk-01", "kr-01"] {
        let (s, _) = d.http("PATCH", &format!("/api/v1/nodes/{n}"), Some(json!({"status": "disabled"})), &[]);
        assert_eq!(s, 200);
    }
    let r = d.dig(&[ZONE, "A"]);
    assert_eq!(r.status, "SERVFAIL", "no online node and no DNS_FALLBACK_IP: SERVFAIL\n{}", r.text);

    let f = Daemon::start(Options { env: vec![("DNS_FALLBACK_IP".into(), "192.0.2.99".into())], ..Options::default() });
    for n in ["gz-01", "hk-01", "kr-01"] {
        f.http("PATCH", &format!("/api/v1/nodes/{n}"), Some(json!({"status": "offline"})), &[]);
    }
    let r = f.dig(&[ZONE, "A"]);
    assert_eq!(r.answers("A"), vec!["192.0.2.99"], "DNS_FALLBACK_IP answers\n{}", r.text);
}

#[test]
fn dns_ttl_caps_the_route_ttl_and_answers_per_query_adds_backups() {
    if !have_tool("dig", "ttl") {
        return;
    }
    let d = Daemon::start(Options { env: vec![("DNS_TTL".into(), "12".into())], ..Options::default() });
    let r = d.dig(&[ZONE, "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answer[0].ttl, 12, "min(30, DNS_TTL=12)\n{}", r.text);
    let d = Daemon::start(Options { env: vec![("DNS_TTL".into(), "2".into())], ..Options::default() });
    let r = d.dig(&[ZONE, "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answer[0].ttl, 5, "never below 5 s\n{}", r.text);
}

/// A raw query with an ECS option whose bytes we choose.
fn query_with_ecs(id: u16, ecs: &[u8]) -> Vec<u8> {
    let mut p = vec![(id >> 8) as u8, id as u8, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in ZONE.split('.') {
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.extend_from_slice(&[0, 0, 1, 0, 1]); // root, A, IN
    p.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]); // OPT, udp 1232
    let rdlen = 4 + ecs.len();
    p.extend_from_slice(&[(rdlen >> 8) as u8, rdlen as u8, 0, 8, (ecs.len() >> 8) as u8, ecs.len() as u8]);
    p.extend_from_slice(ecs);
    p
}

fn rcode_of(d: &Daemon, packet: &[u8]) -> Option<u8> {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.send_to(packet, d.dns).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = s.recv_from(&mut buf).ok()?;
    (n >= 12).then(|| buf[3] & 0x0f)
}

#[test]
fn malformed_ecs_is_formerr_and_garbage_is_survived() {
    let d = Daemon::start(Options::default());
    assert_eq!(rcode_of(&d, &query_with_ecs(1, &[0, 1, 24, 0, 58, 60, 0])), Some(0), "a well-formed ECS");
    // prefix longer than the family allows
    assert_eq!(rcode_of(&d, &query_with_ecs(2, &[0, 1, 33, 0, 58, 60, 0, 0, 0])), Some(1));
    // address bits beyond the source prefix
    assert_eq!(rcode_of(&d, &query_with_ecs(3, &[0, 1, 24, 0, 58, 60, 0, 7])), Some(1));
    // unknown family
    assert_eq!(rcode_of(&d, &query_with_ecs(4, &[0, 9, 24, 0, 58, 60, 0])), Some(1));
    // garbage: no answer or FORMERR, and the server keeps answering
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..200u32 {
        let junk: Vec<u8> = (0..(i % 60)).map(|j| (i.wrapping_mul(31).wrapping_add(j * 7)) as u8).collect();
        let _ = s.send_to(&junk, d.dns);
    }
    assert_eq!(rcode_of(&d, &query_with_ecs(5, &[0, 1, 24, 0, 58, 60, 0])), Some(0), "still serving after garbage");
}

#[test]
fn no_geo_file_schedules_by_weight_and_load() {
    if !have_tool("dig", "no_geo") {
        return;
    }
    let d = Daemon::start(Options { geo: Geo::None, ..Options::default() });
    let r = d.dig(&[ZONE, "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "hk-01 has the best weight minus load\n{}", r.text);
    assert_eq!(r.ecs.as_deref(), Some("58.60.0.0/24/0"), "one answer for all: scope 0\n{}", r.text);
}
