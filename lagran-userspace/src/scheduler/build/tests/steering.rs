//! Steering in the compiler: the latency policy (lowest measured RTT, the
//! stabilize band, the geo answer without enough fresh samples) and the
//! strategies, through full and incremental builds.

use super::*;
use crate::model::{Steering, Strategy};
use crate::steering::LatencyView;
use crate::steering::matrix::NodeRtt;

const CDN: &str = "cdn.edge.lagran.net";
const SHENZHEN: &str = "58.60.1.1";
const BEIJING: &str = "123.112.1.1";

fn steered_inputs(steering: Steering, strategy: Strategy) -> Inputs {
    let mut inputs = seed_inputs();
    inputs.domains.push(Domain {
        name: CDN.into(),
        zone: APEX.into(),
        pool: DEFAULT_POOL.into(),
        ttl: None,
        origin_ip: None,
        answer_mode: AnswerMode::A,
        ecs: true,
        steering,
        strategy,
    });
    inputs
}

/// Shenzhen's measurements: (node, RTT ms, samples).
fn measured(rows: &[(&str, f64, u32)]) -> Arc<LatencyView> {
    let shenzhen = partitions().lookup(SHENZHEN.parse().unwrap()).location.clone();
    let row = rows.iter().map(|&(n, rtt_ms, samples)| NodeRtt { node: n.into(), rtt_ms, samples }).collect();
    Arc::new(LatencyView { rows: [(Arc::new(shenzhen), row)].into(), settings: Default::default() })
}

/// A build after `change`, carrying `state`.
fn build_with(inputs: &Inputs, state: &mut BuildState, change: Change) -> RouteTable {
    let settings = ScheduleSettings::default();
    build_route_table(1, inputs, &partitions(), &settings, &settings.policy(), state, &change)
}

fn node_of(t: &RouteTable, name: &str, ip: &str) -> (String, String) {
    let (a, _) = answer(t, name, ip);
    (a.node.unwrap_or_default(), a.reason)
}

#[test]
fn the_fastest_node_wins_held_within_the_band_and_geo_returns_when_measurements_age_out() {
    let mut inputs = steered_inputs(Steering::Latency, Strategy::Best);
    let mut state = BuildState::default();
    let t = build_with(&inputs, &mut state, Change::Everything);
    assert_eq!(node_of(&t, CDN, SHENZHEN).0, "gz-01", "no measurements: the geo answer");
    inputs.latency = measured(&[("gz-01", 85.0, 20), ("hk-01", 9.0, 20)]);
    let t = build_with(&inputs, &mut state, Change::Liveness);
    assert_eq!(node_of(&t, CDN, SHENZHEN), ("hk-01".into(), steer::BY_LATENCY.into()));
    assert_eq!(node_of(&t, CDN, BEIJING).0, "hk-01", "an unmeasured partition keeps its geo answer");
    assert_eq!(node_of(&t, APEX, SHENZHEN).0, "gz-01", "a name steered by geo is untouched");
    // The same table as a full build from nothing.
    let full = build_with(&inputs, &mut BuildState::default(), Change::Everything);
    assert!(t.serves_same_as(&full), "the incremental build differs from the full one");
    // gz-01 is now 8 ms faster: less than the band (max(10 ms, 10 % of 12)), hk-01 stays.
    inputs.latency = measured(&[("gz-01", 12.0, 20), ("hk-01", 20.0, 20)]);
    let t = build_with(&inputs, &mut state, Change::Liveness);
    assert_eq!(node_of(&t, CDN, SHENZHEN).0, "hk-01", "a swap within the stabilize band keeps the answer");
    // 25 ms faster: past the band.
    inputs.latency = measured(&[("gz-01", 5.0, 20), ("hk-01", 30.0, 20)]);
    let t = build_with(&inputs, &mut state, Change::Liveness);
    assert_eq!(node_of(&t, CDN, SHENZHEN), ("gz-01".into(), steer::BY_LATENCY.into()));
    inputs.latency = measured(&[("gz-01", 85.0, 20), ("hk-01", 9.0, 20)]);
    assert_eq!(node_of(&build_with(&inputs, &mut state, Change::Liveness), CDN, SHENZHEN).0, "hk-01");
    // Every measurement aged out: the geo answer, exactly.
    inputs.latency = Arc::default();
    let t = build_with(&inputs, &mut state, Change::Liveness);
    let geo = build_with(&inputs, &mut BuildState::default(), Change::Everything);
    assert_eq!(answer(&t, CDN, SHENZHEN), answer(&geo, CDN, SHENZHEN));
    assert_eq!(node_of(&t, CDN, SHENZHEN).0, "gz-01");
}

#[test]
fn too_few_samples_and_ineligible_nodes_keep_the_geo_answer() {
    let mut inputs = steered_inputs(Steering::Latency, Strategy::Best);
    inputs.latency = measured(&[("hk-01", 9.0, 9)]);
    assert_eq!(node_of(&build(&inputs, &ScheduleSettings::default()), CDN, SHENZHEN).0, "gz-01", "9 of 10 samples");
    inputs.latency = measured(&[("hk-01", 9.0, 50)]);
    inputs.nodes[1].status = NodeStatus::Offline;
    assert_eq!(node_of(&build(&inputs, &ScheduleSettings::default()), CDN, SHENZHEN).0, "gz-01", "hk-01 is offline");
}

#[test]
fn manual_rules_win_over_latency() {
    let mut inputs = steered_inputs(Steering::Latency, Strategy::Best);
    inputs.latency = measured(&[("hk-01", 9.0, 50), ("gz-01", 80.0, 50)]);
    let mut manual = rule(RuleKind::Manual, "kr-01", 100);
    manual.province = Some("广东".into());
    inputs.rules.push(manual);
    let (node, reason) = node_of(&build(&inputs, &ScheduleSettings::default()), CDN, SHENZHEN);
    assert_eq!(node, "kr-01");
    assert!(reason.starts_with("manual rule"), "{reason}");
}

#[test]
fn the_hash_strategy_stays_in_the_best_region_and_weighted_within_the_band() {
    let mut inputs = steered_inputs(Steering::Geo, Strategy::Hash);
    inputs.nodes.push(node("gz-02", "CN", "广东", "广州", "电信", 100, 20.0, 30.0, [203, 0, 113, 24]));
    let t = build(&inputs, &ScheduleSettings::default());
    let (node, reason) = node_of(&t, CDN, SHENZHEN);
    assert!(node == "gz-01" || node == "gz-02", "{node} is outside Guangdong");
    assert_eq!(reason, steer::BY_HASH);
    let again = build(&inputs, &ScheduleSettings::default());
    assert_eq!(answer(&t, CDN, SHENZHEN), answer(&again, CDN, SHENZHEN), "the pick is stable");
    // Weighted: only nodes within the hysteresis band of Shenzhen's best take part.
    inputs.domains.last_mut().unwrap().strategy = Strategy::Weighted;
    let (node, reason) = node_of(&build(&inputs, &ScheduleSettings::default()), CDN, SHENZHEN);
    assert!(node == "gz-01" || node == "gz-02", "{node} is far outside the band");
    assert_eq!(reason, steer::BY_WEIGHT);
}

#[test]
fn names_steered_alike_share_a_build_and_part_when_their_held_choices_differ() {
    const IMG: &str = "img.edge.lagran.net";
    let mut inputs = steered_inputs(Steering::Latency, Strategy::Best);
    let mut state = BuildState::default();
    inputs.latency = measured(&[("gz-01", 85.0, 20), ("hk-01", 9.0, 20)]);
    build_with(&inputs, &mut state, Change::Everything);
    // A second name steered the same way joins once the first holds hk-01.
    let mut img = inputs.domains.iter().find(|d| d.name == CDN).unwrap().clone();
    img.name = IMG.into();
    inputs.domains.push(img);
    inputs.latency = measured(&[("gz-01", 12.0, 20), ("hk-01", 20.0, 20)]);
    let t = build_with(&inputs, &mut state, Change::Everything);
    assert_eq!(node_of(&t, CDN, SHENZHEN).0, "hk-01", "within the band, the held choice stays");
    assert_eq!(node_of(&t, IMG, SHENZHEN).0, "gz-01", "a name holding nothing takes the best");
    // Past the band both move to gz-01, hold the same choices, and build alike from then on.
    inputs.latency = measured(&[("gz-01", 5.0, 20), ("hk-01", 30.0, 20)]);
    build_with(&inputs, &mut state, Change::Everything);
    let cdn = state.steered.get(CDN).cloned().unwrap();
    assert_eq!(state.steered.get(IMG).map(|h| h == &cdn), Some(true));
    inputs.latency = measured(&[("gz-01", 20.0, 20), ("hk-01", 12.0, 20)]);
    let t = build_with(&inputs, &mut state, Change::Everything);
    assert!(Arc::ptr_eq(&state.steered[CDN], &state.steered[IMG]), "the second name copied the first's build");
    for name in [CDN, IMG] {
        assert_eq!(node_of(&t, name, SHENZHEN), ("gz-01".into(), steer::BY_LATENCY.into()), "{name}");
        assert_eq!(answer(&t, name, BEIJING), answer(&t, APEX, BEIJING), "{name}: unmeasured, the geo answer");
    }
}
