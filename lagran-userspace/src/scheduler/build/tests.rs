//! The compiler's tests: answers, scopes, rules, lines, hysteresis,
//! failover and the partition maps.

use std::net::Ipv4Addr;

use super::*;
use crate::demo::node;
use crate::geo::GeoDb;
use crate::health::ProbeState;
use crate::model::{LineAnswer, NodeStatus, NsHost, RuleKind};
use crate::partition::UNKNOWN;
use crate::route_table::AnswerState;

mod cname;
mod steering;
mod unlocated;

const APEX: &str = "edge.lagran.net";

fn seed_inputs() -> Inputs {
    let mut zone = Zone::new(APEX);
    zone.ns_hosts = vec![NsHost { name: "ns1.edge.lagran.net".into(), ipv4: Some([192, 0, 2, 53].into()), ipv6: None }];
    Inputs {
        nodes: vec![
            node("gz-01", "CN", "广东", "深圳", "电信", 100, 20.0, 30.0, [203, 0, 113, 21]),
            node("hk-01", "HK", "香港", "", "BGP", 120, 10.0, 10.0, [203, 0, 113, 22]),
            node("kr-01", "KR", "", "", "BGP", 100, 10.0, 20.0, [203, 0, 113, 23]),
        ],
        zones: vec![zone],
        now_ms: 1_000_000,
        ..Default::default()
    }
}

fn partitions() -> PartitionTable {
    use crate::geo::{IpVersion, Xdb, write_xdb};
    let ip = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap()) as u128;
    let ranges = vec![
        (0, ip("58.59.255.255"), "美国|0|0|0|0".to_string()),
        (ip("58.60.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
        (ip("58.62.0.0"), ip("123.111.255.255"), "美国|0|0|0|0".to_string()),
        (ip("123.112.0.0"), ip("123.127.255.255"), "中国|0|北京|北京市|联通".to_string()),
        (ip("123.128.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
    ];
    let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
    PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[])
}

fn build(inputs: &Inputs, settings: &ScheduleSettings) -> RouteTable {
    build_route_table(
        1,
        inputs,
        &partitions(),
        settings,
        &settings.policy(),
        &mut BuildState::default(),
        &Change::Everything,
    )
}

fn answer(t: &RouteTable, name: &str, ip: &str) -> (Answer, u8) {
    let (a, s) = t.scheduled(name).unwrap().answer_for(ip.parse().unwrap());
    (a.clone(), s)
}

fn rule(kind: RuleKind, node: &str, percent: u8) -> Rule {
    Rule {
        id: 1,
        kind,
        domain: None,
        country: None,
        province: None,
        city: None,
        isp: None,
        prefix: None,
        node: node.into(),
        percent,
        priority: 0,
        expires_at_ms: None,
        note: String::new(),
        created_at_ms: 0,
    }
}

/// The maps built as the runs come equal the runs listed, then built.
#[test]
fn partition_maps_equal_the_maps_of_the_listed_runs() {
    use crate::geo::{IpVersion, Xdb, write_xdb};
    use rand::{Rng, SeedableRng, rngs::StdRng};
    let mut rng = StdRng::seed_from_u64(7);
    let regions = [
        "中国|0|广东省|深圳市|电信",
        "中国|0|北京|北京市|联通",
        "美国|0|0|0|0",
        "0|0|0|0|0",
        "中国|0|广东省|广州市|移动",
    ];
    let mut cuts: Vec<u128> = (0..2_000).map(|_| rng.gen_range(1..u32::MAX as u128)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut ranges = Vec::new();
    let mut start = 0;
    for &c in cuts.iter().chain(std::iter::once(&(u32::MAX as u128 + 1))) {
        ranges.push((start, c - 1, regions[rng.gen_range(0..regions.len())].to_string()));
        start = c;
    }
    let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
    let p = PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[]);
    for round in 0..20 {
        let by_partition: Vec<u32> = (0..p.locations().len()).map(|_| rng.gen_range(0..3)).collect();
        let unlocated = if round % 2 == 0 { 3 } else { by_partition[UNKNOWN as usize] };
        let (r4, r6) = partition_runs(&p, &by_partition, unlocated);
        let fill = by_partition[0];
        let want4 = PrefixMapV4::from_ranges(r4.into_iter().map(|(s, e, v)| (s as u32, e as u32, v)), fill);
        let want6 = PrefixMapV6::from_ranges(r6, fill);
        let (v4, v6) = partition_maps(&p, &by_partition, unlocated);
        assert_eq!(v4, want4, "round {round}");
        assert_eq!(v6, want6, "round {round}");
        v4.check(4).unwrap();
        // And both say what the partitions say, at both ends of every located range.
        for &(s, e, pid) in p.v4_ranges().iter().filter(|r| r.2 != UNKNOWN) {
            let want = by_partition[pid as usize];
            assert_eq!((v4.lookup(s).0, v4.lookup(e).0), (want, want), "round {round}: {s}..={e}");
        }
    }
}

#[test]
fn shenzhen_gets_gz01_with_a_wide_scope_and_the_rest_hk01() {
    let t = build(&seed_inputs(), &ScheduleSettings::default());
    let (a, scope) = answer(&t, APEX, "58.60.1.1");
    assert_eq!(a.ipv4, vec![Ipv4Addr::new(203, 0, 113, 21)]);
    assert_eq!(scope, 15, "58.60.0.0/15 is one partition");
    assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("hk-01"));
    let (a, scope) = answer(&t, APEX, "10.1.1.1");
    assert_eq!(a.node.as_deref(), Some("hk-01"), "private sources are unknown: weight and load");
    assert!(scope <= 8, "unknown and US merge into wide blocks, got /{scope}");
    let apex = t.scheduled(APEX).unwrap();
    for p in apex.v4.iter() {
        let host = 32 - p.len as u32;
        let last = (p.addr as u64 + (1u64 << host) - 1) as u32;
        assert_eq!(apex.v4.lookup(last).0, p.value, "every address in a scope gets its answer");
    }
}

#[test]
fn answers_per_query_adds_backups() {
    let settings = ScheduleSettings { answers_per_query: 2, ..Default::default() };
    let (a, _) = answer(&build(&seed_inputs(), &settings), APEX, "58.60.1.1");
    assert_eq!(a.ipv4, vec![Ipv4Addr::new(203, 0, 113, 21), Ipv4Addr::new(203, 0, 113, 22)]);
}

#[test]
fn no_eligible_node_gives_empty_answers() {
    let mut inputs = seed_inputs();
    inputs.nodes.iter_mut().for_each(|n| n.status = NodeStatus::Offline);
    let (a, scope) = answer(&build(&inputs, &ScheduleSettings::default()), APEX, "58.60.1.1");
    assert!(a.ipv4.is_empty());
    assert_eq!(a.state, AnswerState::Empty);
    assert_eq!(scope, 0, "one empty answer everywhere");
}

#[test]
fn pool_names_answer_from_their_pool_and_keep_their_ids() {
    let mut inputs = seed_inputs();
    inputs.nodes[2].pool = "pool-a".into();
    inputs.domains.push(Domain {
        name: "pool-a.edge.lagran.net".into(),
        zone: APEX.into(),
        pool: "pool-a".into(),
        ttl: Some(10),
        origin_ip: None,
        answer_mode: Default::default(),
        ecs: true,
        steering: Default::default(),
        strategy: Default::default(),
    });
    let mut state = BuildState::default();
    let s = ScheduleSettings::default();
    let t = build_route_table(1, &inputs, &partitions(), &s, &s.policy(), &mut state, &Change::Everything);
    let n = t.scheduled("pool-a.edge.lagran.net").unwrap();
    let (a, _) = n.answer_for("58.60.1.1".parse().unwrap());
    assert_eq!(a.node.as_deref(), Some("kr-01"));
    assert_eq!(a.ttl, 10);
    let id = n.id;
    let t2 = build_route_table(2, &inputs, &partitions(), &s, &s.policy(), &mut state, &Change::Everything);
    assert_eq!(t2.scheduled("pool-a.edge.lagran.net").unwrap().id, id);
}

#[test]
fn canary_5_percent_of_10000_subnets_and_sticky() {
    let mut inputs = seed_inputs();
    inputs.rules.push(rule(RuleKind::Canary, "kr-01", 5));
    let t = build(&inputs, &ScheduleSettings::default());
    let name = t.scheduled(APEX).unwrap();
    let mut canary = 0;
    for i in 0..10_000u32 {
        // 10 000 distinct US /24s
        let a = Ipv4Addr::from(0x4000_0000u32 + (i << 8) + 7);
        let (ans, scope) = name.answer_for(a.into());
        assert!(scope >= 24, "a split answer is only valid for its /24, got /{scope}");
        if ans.node.as_deref() == Some("kr-01") {
            canary += 1;
            assert_eq!(ans.state, AnswerState::Canary);
        }
        let again = name.answer_for(Ipv4Addr::from(0x4000_0000u32 + (i << 8) + 200).into()).0;
        assert_eq!(again.node, ans.node, "the same /24 always gets the same node");
    }
    assert!((400..=600).contains(&canary), "5 ± 1 % of 10 000 subnets, got {canary}");
}

#[test]
fn manual_beats_canary_beats_automatic() {
    let mut inputs = seed_inputs();
    let mut manual = rule(RuleKind::Manual, "kr-01", 100);
    manual.province = Some("广东省".into());
    inputs.rules.push(manual);
    inputs.rules.push(rule(RuleKind::Canary, "gz-01", 100));
    let t = build(&inputs, &ScheduleSettings::default());
    assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("kr-01"), "manual pin for 广东");
    assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("gz-01"), "100 % canary elsewhere");
    assert!(answer(&t, APEX, "58.60.1.1").0.reason.contains("manual rule"));
}

#[test]
fn expired_rules_do_not_apply() {
    let mut inputs = seed_inputs();
    let mut r = rule(RuleKind::Manual, "kr-01", 100);
    r.expires_at_ms = Some(inputs.now_ms - 1);
    inputs.rules.push(r);
    let t = build(&inputs, &ScheduleSettings::default());
    assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("gz-01"));
}

#[test]
fn prefix_rules_pin_only_their_prefix() {
    let mut inputs = seed_inputs();
    let mut r = rule(RuleKind::Manual, "kr-01", 100);
    r.prefix = Some("58.60.7.0/24".parse().unwrap());
    inputs.rules.push(r);
    let t = build(&inputs, &ScheduleSettings::default());
    let (a, scope) = answer(&t, APEX, "58.60.7.9");
    assert_eq!(a.node.as_deref(), Some("kr-01"));
    assert_eq!(scope, 24);
    assert_eq!(answer(&t, APEX, "58.60.8.9").0.node.as_deref(), Some("gz-01"));
}

#[test]
fn a_line_beats_geo_and_answers_the_origin() {
    let mut inputs = seed_inputs();
    inputs.domains.push(Domain {
        name: APEX.into(),
        zone: APEX.into(),
        pool: DEFAULT_POOL.into(),
        ttl: None,
        origin_ip: Some(Ipv4Addr::new(198, 51, 100, 80)),
        answer_mode: Default::default(),
        ecs: true,
        steering: Default::default(),
        strategy: Default::default(),
    });
    inputs.lines.push(Line::new("spiders", LineAnswer::Origin, vec!["58.60.0.0/20".parse().unwrap()]));
    let t = build(&inputs, &ScheduleSettings::default());
    let (a, scope) = answer(&t, APEX, "58.60.1.1");
    assert_eq!(a.ipv4, vec![Ipv4Addr::new(198, 51, 100, 80)], "the spider line answers the origin");
    assert_eq!(scope, 20);
    assert_eq!(answer(&t, APEX, "58.61.0.1").0.node.as_deref(), Some("gz-01"), "outside the line: geo");
}

#[test]
fn hysteresis_holds_under_10_percent_and_moves_under_30() {
    let settings = ScheduleSettings::default(); // 15 %
    let mut inputs = seed_inputs();
    inputs.nodes = vec![
        node("a", "", "", "", "", 100, 0.0, 0.0, [192, 0, 2, 1]),
        node("b", "", "", "", "", 90, 0.0, 0.0, [192, 0, 2, 2]),
    ];
    let mut state = BuildState::default();
    let policy = settings.policy();
    let t = build_route_table(1, &inputs, &partitions(), &settings, &policy, &mut state, &Change::Everything);
    assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("a"));
    // b is now 10 % better than a: keep a
    inputs.nodes[1].weight = 110;
    let t = build_route_table(2, &inputs, &partitions(), &settings, &policy, &mut state, &Change::Everything);
    let (a, _) = answer(&t, APEX, "8.8.8.8");
    assert_eq!(a.node.as_deref(), Some("a"), "a 10 % swing holds");
    assert!(a.reason.contains("hysteresis"), "{}", a.reason);
    // b is now 30 % better: move
    inputs.nodes[1].weight = 130;
    let t = build_route_table(3, &inputs, &partitions(), &settings, &policy, &mut state, &Change::Everything);
    assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("b"), "a 30 % swing moves");
}

#[test]
fn hysteresis_holds_a_swing_of_a_few_points_where_scores_are_small() {
    let mut inputs = seed_inputs();
    inputs.nodes = vec![
        node("a", "", "", "", "", 10, 0.0, 0.0, [192, 0, 2, 1]),
        node("b", "", "", "", "", 8, 0.0, 0.0, [192, 0, 2, 2]),
    ];
    for (points, moves) in [(20, false), (0, true)] {
        let settings = ScheduleSettings { hysteresis_points: points, ..Default::default() };
        let policy = settings.policy();
        let mut state = BuildState::default();
        inputs.nodes[1].weight = 8;
        let t = build_route_table(1, &inputs, &partitions(), &settings, &policy, &mut state, &Change::Everything);
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("a"));
        // b is now 40 % better, by 4 points: load jitter on small scores.
        inputs.nodes[1].weight = 14;
        let t = build_route_table(2, &inputs, &partitions(), &settings, &policy, &mut state, &Change::Everything);
        let expect = if moves { "b" } else { "a" };
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some(expect), "4 points, floor {points}");
        // By more than 20 points (and 15 %), b takes over under either floor.
        inputs.nodes[1].weight = 31;
        let t = build_route_table(3, &inputs, &partitions(), &settings, &policy, &mut state, &Change::Everything);
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("b"), "21 points, floor {points}");
    }
}

#[test]
fn an_all_overloaded_pool_still_answers() {
    let settings = ScheduleSettings { caps: Some(Default::default()), ..Default::default() };
    let mut inputs = seed_inputs();
    for n in &mut inputs.nodes {
        n.max_bandwidth_mbps = 100.0;
        n.bandwidth_mbps = 150.0;
        n.max_conns = 10;
        n.conns = 50;
    }
    let t = build(&inputs, &settings);
    let (a, _) = answer(&t, APEX, "58.60.1.1");
    assert_eq!(a.node.as_deref(), Some("gz-01"), "caps penalise, never veto");
    assert!(a.reason.contains("over-cap"), "{}", a.reason);
}

#[test]
fn over_cap_node_loses_to_one_under_cap() {
    let settings = ScheduleSettings { caps: Some(Default::default()), ..Default::default() };
    let mut inputs = seed_inputs();
    inputs.nodes[0].max_bandwidth_mbps = 100.0;
    inputs.nodes[0].bandwidth_mbps = 100.0;
    let t = build(&inputs, &settings);
    assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("hk-01"));
}

#[test]
fn overload_spills_to_the_next_same_isp_node() {
    let settings = ScheduleSettings { spill: Some(Default::default()), ..Default::default() };
    let mut inputs = seed_inputs();
    inputs.nodes[0].cpu_usage = 95.0; // gz-01 overloaded: 100+145-28-6 = 211 still best
    inputs.nodes.push(node("fs-01", "CN", "广东", "佛山", "电信", 50, 0.0, 0.0, [203, 0, 113, 24]));
    let t = build(&inputs, &settings);
    let (a, _) = answer(&t, APEX, "58.60.1.1");
    assert_eq!(a.node.as_deref(), Some("fs-01"), "{}", a.reason);
    assert!(a.reason.contains("spill"), "{}", a.reason);
}

#[test]
fn isp_must_match_keeps_only_the_clients_isp() {
    let settings = ScheduleSettings { isp_must_match: true, ..Default::default() };
    let mut inputs = seed_inputs();
    inputs.nodes.push(node("bj-01", "CN", "北京", "北京", "联通", 10, 0.0, 0.0, [203, 0, 113, 25]));
    let t = build(&inputs, &settings);
    assert_eq!(answer(&t, APEX, "123.112.0.1").0.node.as_deref(), Some("bj-01"));
    // nobody has the client's ISP: everyone stays eligible
    assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("hk-01"));
}

#[test]
fn distance_prefers_the_nearer_node() {
    let settings = ScheduleSettings {
        distance: Some(crate::engine::DistancePolicy { per_1000km: 20.0, max_penalty: 200, same_continent: 0 }),
        ..Default::default()
    };
    let mut inputs = seed_inputs();
    inputs.nodes = vec![
        node("far", "CN", "新疆", "", "", 100, 0.0, 0.0, [192, 0, 2, 1]),
        node("near", "CN", "河北", "", "", 100, 0.0, 0.0, [192, 0, 2, 2]),
    ];
    let t = build(&inputs, &settings);
    assert_eq!(answer(&t, APEX, "123.112.0.1").0.node.as_deref(), Some("near"), "Beijing is nearer Hebei");
}

#[test]
fn a_dead_best_node_is_failover_with_its_ttl() {
    let settings = ScheduleSettings::default();
    let mut inputs = seed_inputs();
    inputs.liveness.probes.insert("gz-01".into(), ProbeState { up: false, ..Default::default() });
    let t = build(&inputs, &settings);
    let (a, _) = answer(&t, APEX, "58.60.1.1");
    assert_eq!(a.node.as_deref(), Some("hk-01"));
    assert_eq!(a.state, AnswerState::Failover);
    assert_eq!(a.ttl, settings.failover_ttl);
    assert_eq!(answer(&t, APEX, "8.8.8.8").0.state, AnswerState::Steady, "hk-01 is the best there anyway");
}

#[test]
fn heartbeat_timeout_takes_a_node_out() {
    let mut inputs = seed_inputs();
    inputs.liveness.heartbeat_timeout_ms = 60_000;
    inputs.nodes[0].last_heartbeat_ms = Some(inputs.now_ms - 61_000);
    let t = build(&inputs, &ScheduleSettings::default());
    assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("hk-01"));
    inputs.nodes[0].last_heartbeat_ms = Some(inputs.now_ms - 1_000);
    let t = build(&inputs, &ScheduleSettings::default());
    assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("gz-01"), "back when it reports");
}
