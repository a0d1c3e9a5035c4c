//! When the client's location cannot be found, the resolver's decides, end to
//! end: an ECS address the geo file
//! cannot locate is answered for the resolver's address, SCOPE the width of
//! the unlocated block; a private ECS address stays in the unknown partition.

use std::time::Duration;

use lagran::geo::{IpVersion, write_xdb};
use serde_json::json;

use crate::support::{Daemon, Geo, Options, have_tool, lagran_cli};

fn v4(s: &str) -> u128 {
    u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128
}

fn scope(ecs: &Option<String>) -> u8 {
    ecs.as_deref().expect("ECS echoed").rsplit('/').next().unwrap().parse().unwrap()
}

#[test]
fn an_unlocated_ecs_address_is_answered_for_the_resolver() {
    if !have_tool("dig", "unlocated") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 11.0.0.0/8: the file says nothing ("0|0|0|0|0"); 58.60.0.0/14 Shenzhen Telecom; the rest the US.
    let ranges = vec![
        (0, v4("10.255.255.255"), "美国|0|0|0|0".to_string()),
        (v4("11.0.0.0"), v4("11.255.255.255"), "0|0|0|0|0".to_string()),
        (v4("12.0.0.0"), v4("58.59.255.255"), "美国|0|0|0|0".to_string()),
        (v4("58.60.0.0"), v4("58.63.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
        (v4("58.64.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
    ];
    let path = dir.path().join("hole.xdb");
    std::fs::write(&path, write_xdb(IpVersion::V4, &ranges).expect("the project's writer")).unwrap();
    let d = Daemon::start(Options { geo: Geo::Real(path), ..Options::default() });

    // The resolver (dig on 127.0.0.1, reserved) cannot be located either: the unknown answer (hk-01).
    let q = ["edge.lagran.net", "A", "+subnet=11.1.2.0/24"];
    let r = d.dig(&q);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "unknown partition's answer: {}", r.text);
    assert_eq!(scope(&r.ecs), 8, "SCOPE = the unlocated /8: {}", r.text);

    // Locate the resolver in Shenzhen: the unlocated ECS now follows it (gz-01).
    let body = json!({"prefix": "127.0.0.0/8", "country": "CN", "province": "广东", "city": "深圳",
                      "isp": "电信", "note": "the test's resolver"});
    let (s, v) = d.http("POST", "/api/v1/geo/overrides", Some(body), &[]);
    assert_eq!(s, 201, "{v}");
    let r = d.dig_until(&q, Duration::from_secs(10), |r| r.answers("A") == vec!["203.0.113.21"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "scheduled by the resolver: {}", r.text);
    assert_eq!(scope(&r.ecs), 8, "still the unlocated block's width: {}", r.text);
    // `/api/v1/schedule` and `lagran explain` with the resolver dig used (127.0.0.1) say the same.
    let (s, v) = d.get("/api/v1/schedule?domain=edge.lagran.net&subnet=11.1.2.0/24&resolver=127.0.0.1");
    assert_eq!(s, 200, "{v}");
    let served = &v["served"];
    assert_eq!(served["a"], json!(["203.0.113.21"]), "dig's answer: {v}");
    assert_eq!(served["scope"], 8, "dig's scope: {v}");
    assert_eq!((&served["state"], &served["decided_for"]), (&json!("resolver"), &json!("127.0.0.1")), "{v}");
    assert_eq!(v["primary"]["name"], "gz-01", "the served node ranks first: {v}");
    let args = ["explain", "--subnet", "11.1.2.0/24", "--resolver", "127.0.0.1", "--json"];
    let (ok, out, err) = lagran_cli(&d, &args);
    assert!(ok, "{err}");
    let e: serde_json::Value = serde_json::from_str(&out).expect("explain --json");
    assert_eq!(e["served"], v["served"], "explain and the API agree");
    // Without the resolver, the API says who decides rather than guessing.
    let (_, v) = d.get("/api/v1/schedule?domain=edge.lagran.net&subnet=11.1.2.0/24");
    assert_eq!(v["served"]["state"], "resolver", "{v}");
    assert!(v["note"].as_str().unwrap().contains("resolver"), "{v}");

    // A located ECS address is answered for itself; a private one stays unknown.
    let r = d.dig(&["edge.lagran.net", "A", "+subnet=8.8.8.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "a US client gets hk-01: {}", r.text);
    let r = d.dig(&["edge.lagran.net", "A", "+subnet=10.1.2.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "RFC 1918 stays in the unknown partition: {}", r.text);
}
