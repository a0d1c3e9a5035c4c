//! AAAA end to end: nodes with `public_ipv6` answer AAAA through the scheduler,
//! for IPv4 and IPv6 ECS, with an IPv6 ip2region file written by the project's own
//! writer. Also the partitions read over the API, and `/api/v1/schedule` read with
//! a node's own token.

use std::time::Duration;

use lagran::geo::{IpVersion, write_xdb};
use serde_json::json;

use crate::support::{Daemon, Geo, Options, have_tool, tools_required, workspace_root};

const GZ_V6: &str = "2001:db8:21::1";
const HK_V6: &str = "2001:db8:22::1";

fn give_ipv6(d: &Daemon, node: &str, ip: &str) {
    let (s, v) = d.http("PATCH", &format!("/api/v1/nodes/{node}"), Some(json!({ "public_ipv6": ip })), &[]);
    assert_eq!(s, 200, "PATCH public_ipv6 of {node} is accepted: {v}");
}

#[test]
fn aaaa_for_beijing_unicom_is_hk01_ipv6_with_the_real_database() {
    let path = workspace_root().join("data/ip2region.xdb");
    if !path.is_file() {
        assert!(!tools_required(), "{} is missing: run scripts/fetch-geoip.sh", path.display());
        eprintln!("note: skipped, no real geo database at {}", path.display());
        return;
    }
    if !have_tool("dig", "aaaa_real") {
        return;
    }
    let d = Daemon::start(Options { geo: Geo::Real(path), ..Options::default() });
    // Beijing Unicom (`lagran geo lookup 123.112.0.1` on the real file: 中国|0|北京|北京市|联通).
    let q = ["edge.lagran.net", "AAAA", "+subnet=123.112.0.0/24"];
    let before = d.dig(&q);
    assert!(before.answers("AAAA").is_empty(), "no node has an IPv6 address yet: {}", before.text);
    give_ipv6(&d, "hk-01", HK_V6);
    give_ipv6(&d, "gz-01", GZ_V6);
    let r = d.dig_until(&q, Duration::from_secs(10), |r| !r.answers("AAAA").is_empty());
    assert_eq!(r.answers("AAAA"), vec![HK_V6], "Beijing Unicom gets hk-01's IPv6 address: {}", r.text);
    let ecs = r.ecs.clone().expect("ECS echoed");
    let scope: u8 = ecs.rsplit('/').next().unwrap().parse().unwrap();
    assert!(scope > 0 && scope <= 24, "the scope is the partition's prefix: {ecs}");
    let r = d.dig(&["edge.lagran.net", "AAAA", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answers("AAAA"), vec![GZ_V6], "Shenzhen Telecom gets gz-01's IPv6 address: {}", r.text);
    // A stays what it was.
    let r = d.dig(&["edge.lagran.net", "A", "+subnet=123.112.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "{}", r.text);
}

#[test]
fn aaaa_with_an_ipv6_geo_file_from_geoip_ipv6_path() {
    if !have_tool("dig", "aaaa_v6_geo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let v6 = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().unwrap());
    // 2408:8000::/20 Beijing Unicom, 240e::/20 Shenzhen China Telecom, the rest the US.
    let ranges = vec![
        (0, v6("2408:7fff:ffff:ffff:ffff:ffff:ffff:ffff"), "美国|0|0|0|0".to_string()),
        (v6("2408:8000::"), v6("2408:8fff:ffff:ffff:ffff:ffff:ffff:ffff"), "中国|0|北京|北京市|联通".to_string()),
        (v6("2408:9000::"), v6("240d:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), "美国|0|0|0|0".to_string()),
        (v6("240e::"), v6("240e:fff:ffff:ffff:ffff:ffff:ffff:ffff"), "中国|0|广东省|深圳市|电信".to_string()),
        (v6("240e:1000::"), u128::MAX, "美国|0|0|0|0".to_string()),
    ];
    let path = dir.path().join("v6.xdb");
    std::fs::write(&path, write_xdb(IpVersion::V6, &ranges).expect("the project's writer")).unwrap();
    let d = Daemon::start(Options {
        env: vec![("GEOIP_IPV6_PATH".into(), path.display().to_string())],
        ..Options::default()
    });
    give_ipv6(&d, "hk-01", HK_V6);
    give_ipv6(&d, "gz-01", GZ_V6);
    let q = ["edge.lagran.net", "AAAA", "+subnet=240e:1:2::/48"];
    let r = d.dig_until(&q, Duration::from_secs(10), |r| !r.answers("AAAA").is_empty());
    assert_eq!(r.answers("AAAA"), vec![GZ_V6], "Shenzhen Telecom over IPv6 ECS gets gz-01: {}", r.text);
    let ecs = r.ecs.clone().expect("ECS echoed");
    let scope: u8 = ecs.rsplit('/').next().unwrap().parse().unwrap();
    assert!(scope > 0 && scope <= 20, "the scope is the IPv6 partition's prefix (at most /20): {ecs}");
    let r = d.dig(&["edge.lagran.net", "AAAA", "+subnet=2408:8001::/48"]);
    assert_eq!(r.answers("AAAA"), vec![HK_V6], "Beijing Unicom over IPv6 ECS gets hk-01: {}", r.text);
    // IPv6 ECS for A works the same way.
    let r = d.dig(&["edge.lagran.net", "A", "+subnet=240e:1:2::/48"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "{}", r.text);
}

#[test]
fn partitions_are_readable_over_the_api_and_schedule_takes_a_node_token() {
    let d = Daemon::start(Options::default());
    let (s, v) = d.get("/api/v1/geo/partitions?limit=2");
    assert_eq!(s, 200, "{v}");
    assert!(v["total"].as_u64().unwrap() >= 3, "unknown, the US, Shenzhen Telecom, Beijing Unicom: {v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 2, "paged: {v}");
    let (s, all) = d.get("/api/v1/geo/partitions?offset=1&limit=10");
    assert_eq!(s, 200);
    assert_eq!(all["rows"][0], v["rows"][1], "offset pages through the same order");
    let (s, e) = d.get("/api/v1/geo/partitions?limit=0");
    assert_eq!(s, 422, "a limit of 0 is refused, naming the field: {e}");
    assert_eq!(e["field"], "limit");
}

#[test]
fn schedule_accepts_a_nodes_own_token_for_reads() {
    let d = Daemon::start(Options {
        env: vec![
            ("AGENT_TOKEN".into(), "agent-secret-0123456".into()),
            ("ADMIN_TOKEN".into(), "admin-secret-0123456".into()),
        ],
        ..Options::default()
    });
    let admin = [("authorization", "Bearer admin-secret-0123456")];
    let (s, v) = d.http("PATCH", "/api/v1/nodes/hk-01", Some(json!({"auth_token": "hk-01-secret"})), &admin);
    assert_eq!(s, 200, "{v}");
    let path = "/api/v1/schedule?domain=edge.lagran.net&ip=58.60.0.1";
    let (s, v) = d.http("GET", path, None, &[("x-lagran-agent-token", "hk-01-secret")]);
    assert_eq!(s, 200, "a node's own token reads /api/v1/schedule (as a DNS plugin or agent would): {v}");
    assert_eq!(v["primary"]["name"], "gz-01", "{v}");
    let (s, _) = d.http("GET", path, None, &[("x-lagran-agent-token", "not-a-token")]);
    assert_eq!(s, 401, "an unknown token is refused");
    let (s, _) = d.http("GET", "/api/v1/nodes", None, &[("x-lagran-agent-token", "hk-01-secret")]);
    assert_eq!(s, 401, "a node's token reads the schedule only");
}
