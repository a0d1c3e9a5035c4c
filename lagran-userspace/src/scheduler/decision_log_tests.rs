use super::*;
use crate::geo::{GeoDb, IpVersion, Xdb, write_xdb};
use crate::model::{NodeStatus, Zone};
use crate::scheduler::settings::ScheduleSettings;
use crate::scheduler::{BuildState, Change, build_route_table};

fn partitions() -> PartitionTable {
    let ip = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap()) as u128;
    let ranges = vec![
        (0, ip("58.59.255.255"), "美国|0|0|0|0".to_string()),
        (ip("58.60.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
        (ip("58.62.0.0"), ip("58.62.255.255"), "中国|0|广东省|广州市|电信".to_string()),
        (ip("58.63.0.0"), ip("123.111.255.255"), "美国|0|0|0|0".to_string()),
        (ip("123.112.0.0"), ip("123.127.255.255"), "中国|0|北京|北京市|联通".to_string()),
        (ip("123.128.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
    ];
    let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
    PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[])
}

fn node(name: &str, country: &str, province: &str, city: &str, isp: &str, ip: [u8; 4]) -> Node {
    let mut n = Node::new(name);
    n.country = country.into();
    n.province = province.into();
    n.city = city.into();
    n.isp = isp.into();
    n.public_ip = Some(ip.into());
    n
}

/// Two tables of the same world, gd-01 going offline between them.
fn tables() -> (PartitionTable, RouteTable, RouteTable, Inputs) {
    let p = partitions();
    let s = ScheduleSettings::default();
    let mut world = crate::scheduler::Inputs {
        nodes: vec![
            node("gd-01", "CN", "广东", "深圳", "电信", [192, 0, 2, 1]),
            node("bj-01", "CN", "北京", "北京", "联通", [192, 0, 2, 2]),
            node("hk-01", "HK", "", "", "", [192, 0, 2, 3]),
        ],
        zones: vec![Zone::new("edge.lagran.net")],
        now_ms: 1_000,
        ..Default::default()
    };
    world.nodes[2].weight = 150;
    let mut state = BuildState::default();
    let t1 = build_route_table(1, &world, &p, &s, &s.policy(), &mut state, &Change::Everything);
    world.nodes[0].status = NodeStatus::Offline;
    let t2 = build_route_table(2, &world, &p, &s, &s.policy(), &mut state, &Change::Everything);
    let inputs = Inputs { nodes: world.nodes, liveness: Liveness::default(), now_ms: 1_000, policy: s.policy() };
    (p, t1, t2, inputs)
}

#[test]
fn each_moved_partition_gets_one_line_with_nodes_reason_terms_and_versions() {
    let (p, t1, t2, inputs) = tables();
    let (lines, total) = decisions(&p, &t1, &t2, &inputs, MAX_LINES_PER_TABLE);
    assert_eq!(total, 2, "Shenzhen and Guangzhou moved, nothing else: {lines:#?}");
    assert_eq!(lines.len(), 2);
    let partitions: Vec<&str> = lines.iter().map(|l| l.partition.as_str()).collect();
    assert!(
        partitions.iter().any(|p| p.contains("深圳")) && partitions.iter().any(|p| p.contains("广州")),
        "{partitions:?}"
    );
    for l in &lines {
        assert_eq!((l.version, l.previous_version), (2, 1));
        assert_eq!(l.name, "edge.lagran.net");
        assert_eq!(l.previous.node.as_deref(), Some("gd-01"), "{l:#?}");
        assert_eq!(l.previous.ipv4, vec![Ipv4Addr::new(192, 0, 2, 1)]);
        assert_eq!(l.new.node.as_deref(), Some("hk-01"), "{l:#?}");
        assert!(!l.reason.is_empty(), "the new answer's reason: {l:#?}");
        // gd-01 is offline: the two others compete, each with its terms.
        let ranked: Vec<&str> = l.candidates.iter().map(|c| c.node.as_str()).collect();
        assert_eq!(ranked, vec!["hk-01", "bj-01"], "{l:#?}");
        let hk = &l.candidates[0];
        assert!(hk.terms.iter().any(|(t, v)| t == "weight" && *v == 150), "{hk:?}");
        assert_eq!(hk.terms.iter().map(|(_, v)| v).sum::<i64>(), hk.score, "the terms add up to the score: {hk:?}");
    }
}

#[test]
fn above_the_limit_the_rest_is_only_counted_and_nothing_moved_writes_nothing() {
    let (p, t1, t2, inputs) = tables();
    let (lines, total) = decisions(&p, &t1, &t2, &inputs, 1);
    assert_eq!((lines.len(), total), (1, 2));
    let (lines, total) = decisions(&p, &t2, &t2, &inputs, MAX_LINES_PER_TABLE);
    assert!(lines.is_empty() && total == 0, "{lines:?}");
}

#[test]
fn a_line_serialises_as_one_json_object() {
    let (p, t1, t2, inputs) = tables();
    let (lines, _) = decisions(&p, &t1, &t2, &inputs, 1);
    let v: serde_json::Value = serde_json::from_str(&serde_json::to_string(&lines[0]).unwrap()).unwrap();
    assert_eq!(v["previous"]["node"], "gd-01");
    assert_eq!(v["candidates"][0]["node"], "hk-01");
    assert_eq!(v["version"], 2);
}
