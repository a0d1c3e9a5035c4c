//! The oracle: the route-table compiler without the planner, one
//! [`engine::rank`] per (pool, partition). Slow and obviously right; the
//! property test holds the planner's tables to it.
//!
//! It ranks, applies hysteresis, judges failover, matches region rules and
//! lays out the partition ranges on its own (what it checks); it shares with
//! the compiler what is plain: the answer interner, how a pinned or canary
//! answer is made, the prefix overrides of lines and prefix rules, and the
//! names of a zone.

use std::collections::HashMap;

use super::answers::{Pinned, after_region_rules, answer_of};
use super::maps::{Runs, maps_of_runs, overlay_with};
use super::*;
use crate::engine::{self, Candidate, Family, NodeView, Policy, Ranking};
use crate::geo::reserved;
use crate::model::RuleKind;
use crate::partition::UNKNOWN;
use crate::route_table::AnswerState;

/// The node each (name, partition location) was last answered with, for hysteresis.
type Choices = HashMap<(String, Location), String>;

/// What the oracle carries from one build to the next.
#[derive(Clone, Debug, Default)]
pub(super) struct OracleState {
    pub name_ids: NameIds,
    /// The automatic primary per (name, partition location), for hysteresis.
    pub choices: Choices,
}

/// Does a rule's region filter match a location (canonical comparison)?
fn rule_matches(rule: &Rule, name: &str, loc: &Location) -> bool {
    if rule.domain.as_deref().is_some_and(|d| d.trim_end_matches('.').to_ascii_lowercase() != name) {
        return false;
    }
    let want = Location::new(
        rule.country.as_deref().unwrap_or(""),
        rule.province.as_deref().unwrap_or(""),
        rule.city.as_deref().unwrap_or(""),
        rule.isp.as_deref().unwrap_or(""),
    );
    let ok = |filter: &Option<String>, want: &str, have: &str| filter.is_none() || want == have;
    ok(&rule.country, &want.country, &loc.country)
        && ok(&rule.province, &want.province, &loc.province)
        && ok(&rule.city, &want.city, &loc.city)
        && ok(&rule.isp, &want.isp, &loc.isp)
}

/// Whether a dead node (probe down, heartbeat timeout) would have beaten `chosen`.
fn is_failover(views: &[NodeView], loc: &Location, pool: &str, chosen: Option<&Candidate>, policy: &Policy) -> bool {
    let Some(chosen) = chosen else { return false };
    views.iter().any(|v| {
        v.dead.is_some() && {
            let alive = NodeView { dead: None, ..v.clone() };
            engine::exclusion(&alive, Family::V4, pool).is_none()
                && engine::score(&alive, loc, None, policy).score > chosen.score
        }
    })
}

/// The oracle's pin: the node put first in the partition's own full rankings.
fn pinned_in<'a>((r4, r6): (&'a Ranking, &'a Ranking), shape: AnswerShape) -> impl Pinned + 'a {
    move |answers: &mut Answers, node: &str, why: &str, state: AnswerState| {
        shape.pinned(answers, (r4.clone(), r6.clone()), node, why, state)
    }
}

/// What every name of one oracle build reads.
struct Oracle<'a> {
    inputs: &'a Inputs,
    partitions: &'a PartitionTable,
    settings: &'a ScheduleSettings,
    policy: &'a Policy,
    views: &'a [NodeView],
    rules: &'a [&'a Rule],
    region_rules: &'a [&'a Rule],
    per_answer: usize,
}

/// Computes a route table: one answer per (scheduled name, partition), stored
/// as the coarsest client prefixes that share an answer. Stage order, lowest
/// priority first: automatic ranking (with hysteresis) → lines → canary → manual.
pub(super) fn build_route_table(
    version: u64,
    inputs: &Inputs,
    partitions: &PartitionTable,
    settings: &ScheduleSettings,
    policy: &Policy,
    state: &mut OracleState,
) -> RouteTable {
    let now = inputs.now_ms;
    let views = NodeView::prepare_live(inputs.nodes.iter().cloned(), &inputs.liveness, now);
    let rules: Vec<&Rule> = inputs.rules.iter().filter(|r| r.is_active(now)).collect();
    let region_rules: Vec<&Rule> = rules.iter().copied().filter(|r| r.prefix.is_none()).collect();
    let per_answer = settings.answers_per_query.clamp(1, 4) as usize;
    let oracle = Oracle {
        inputs,
        partitions,
        settings,
        policy,
        views: &views,
        rules: &rules,
        region_rules: &region_rules,
        per_answer,
    };
    // Automatic rankings depend on (pool, partition) only: names sharing a pool share them.
    let mut rankings: HashMap<String, Vec<(Ranking, Ranking)>> = HashMap::new();
    let mut new_choices = HashMap::new();
    let mut zones = Vec::with_capacity(inputs.zones.len());
    for zone in &inputs.zones {
        let mut scheduled = Vec::new();
        for spec in name_specs(zone, &inputs.domains) {
            let ranked = rankings.entry(spec.pool.clone()).or_insert_with(|| oracle.rank_pool(&spec.pool));
            scheduled.push(oracle.name(spec, ranked, state, &mut new_choices));
        }
        zones.push(ZoneRoutes { zone: zone.clone(), names: scheduled });
    }
    state.choices = new_choices;
    RouteTable::new(version, now, zones)
}

impl Oracle<'_> {
    /// `engine::rank` of `pool` for every partition.
    fn rank_pool(&self, pool: &str) -> Vec<(Ranking, Ranking)> {
        self.partitions
            .locations()
            .iter()
            .map(|loc| {
                (
                    engine::rank(self.views, loc, Family::V4, pool, self.policy),
                    engine::rank(self.views, loc, Family::V6, pool, self.policy),
                )
            })
            .collect()
    }

    /// One scheduled name: per partition, then the prefix overrides.
    fn name(
        &self,
        spec: NameSpec,
        ranked: &[(Ranking, Ranking)],
        state: &mut OracleState,
        new_choices: &mut Choices,
    ) -> ScheduledName {
        let settings = self.settings;
        let shape = AnswerShape {
            steady_ttl: spec.ttl.unwrap_or(settings.ttl),
            canary_ttl: settings.canary_ttl,
            per_answer: self.per_answer,
        };
        let mut answers = Answers::default();
        let by_partition = self.decide_partitions(&spec, ranked, shape, &mut answers, &state.choices, new_choices);
        let unknown = (&ranked[0].0, &ranked[0].1);
        let scope = OverrideScope { name: &spec.name, domain: spec.domain, shape, unknown };
        let over = Overrides::collect(&scope, &self.inputs.lines, self.rules, &mut answers, pinned_in(unknown, shape));
        // Unknown public ranges get the unknown answer flagged; the
        // special-purpose ranges keep the unknown answer itself.
        let unlocated = unlocated_answer(&mut answers, &by_partition, over.is_empty());
        let (mut ranges4, mut ranges6) = self.partition_ranges(&by_partition, unlocated);
        let fallback = (unlocated, by_partition[0], settings.canary_ttl);
        over.apply((&mut ranges4, &mut ranges6), &mut answers, fallback, pinned_in(unknown, shape));
        let (v4, v6) = maps_of_runs(ranges4, ranges6, by_partition[0]);
        let id = state.name_ids.id(&spec.name);
        ScheduledName { ecs: true, id, name: spec.name, answers: Arc::new(answers.list), v4, v6 }
    }

    /// Per partition: automatic (+ hysteresis), then region rules.
    fn decide_partitions(
        &self,
        spec: &NameSpec,
        ranked: &[(Ranking, Ranking)],
        shape: AnswerShape,
        answers: &mut Answers,
        choices: &Choices,
        new_choices: &mut Choices,
    ) -> Vec<u32> {
        let settings = self.settings;
        let mut by_partition = Vec::with_capacity(ranked.len());
        for (pid, (r4, r6)) in ranked.iter().enumerate() {
            let loc = &self.partitions.locations()[pid];
            let key = (spec.name.clone(), loc.clone());
            // Clone the (possibly long) ranking only when hysteresis may reorder it.
            let previous = choices.get(&key).map(String::as_str);
            let held;
            let r4: &Ranking = match (settings.hysteresis > 0.0, previous, r4.primary()) {
                (true, Some(prev), Some(best)) if best.name != prev => {
                    let mut r = r4.clone();
                    engine::apply_hysteresis(&mut r, Some(prev), settings.hysteresis, settings.hysteresis_points);
                    held = r;
                    &held
                }
                _ => r4,
            };
            if let Some(p) = r4.primary() {
                new_choices.insert(key, p.name.clone());
            }
            let failover = is_failover(self.views, loc, &spec.pool, r4.primary(), self.policy);
            let (st, ttl) = if failover {
                (AnswerState::Failover, settings.failover_ttl.min(shape.steady_ttl))
            } else {
                (AnswerState::Steady, shape.steady_ttl)
            };
            let id = answers.id(answer_of(r4, r6, shape.per_answer, ttl, st));
            let matching: Vec<&Rule> =
                self.region_rules.iter().copied().filter(|r| rule_matches(r, &spec.name, loc)).collect();
            let canary = matching.iter().copied().find(|r| r.kind == RuleKind::Canary);
            let manual = matching.iter().copied().find(|r| r.kind == RuleKind::Manual);
            by_partition.push(after_region_rules(answers, &shape, id, canary, manual, pinned_in((r4, r6), shape)));
        }
        by_partition
    }

    /// The partition ranges with their answers: `unlocated` on unknown
    /// ranges, the unknown partition's own answer back on the special-purpose
    /// ranges inside them.
    fn partition_ranges(&self, by_partition: &[u32], unlocated: u32) -> (Runs, Runs) {
        let answer = |p: u32| if p == UNKNOWN { unlocated } else { by_partition[p as usize] };
        let back = |under: u32, _: &()| if under == unlocated { by_partition[0] } else { under };
        let special4: Vec<(u128, u128, ())> =
            reserved::special_ranges_v4().iter().map(|&(s, e)| (s as u128, e as u128, ())).collect();
        let special6: Vec<(u128, u128, ())> = reserved::special_ranges_v6().iter().map(|&(s, e)| (s, e, ())).collect();
        let ranges4: Runs =
            self.partitions.v4_ranges().iter().map(|&(s, e, p)| (s as u128, e as u128, answer(p))).collect();
        let ranges6: Runs = self.partitions.v6_ranges().iter().map(|&(s, e, p)| (s, e, answer(p))).collect();
        (overlay_with(ranges4, &special4, back), overlay_with(ranges6, &special6, back))
    }
}

/// The planner's tables, full and after events, equal the oracle's: answers,
/// scopes (the prefix maps) and TTLs.
mod equivalence {
    use std::net::Ipv4Addr;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// The planner under test (this module's `build_route_table` is the oracle).
    use super::super::build_route_table as planned;
    use super::*;
    use crate::geo::{GeoDb, IpVersion, Xdb, write_xdb};
    use crate::health::ProbeState;
    use crate::model::{LineAnswer, NodeStatus};

    const COUNTRIES: &[&str] = &["中国", "美国", "0", "香港"];
    const PROVINCES: &[&str] = &["广东省", "北京", "浙江省", "0", "香港"];
    const CITIES: &[&str] = &["深圳市", "广州市", "北京市", "杭州市", "0"];
    const ISPS: &[&str] = &["电信", "联通", "移动", "BGP", "0"];
    const NODE_COUNTRIES: &[&str] = &["CN", "US", "", "HK", "KR"];
    const NODE_PROVINCES: &[&str] = &["广东", "北京", "浙江", "", "香港", "首尔"];
    const NODE_CITIES: &[&str] = &["深圳", "广州", "北京", "杭州", ""];
    const NODE_ISPS: &[&str] = &["电信", "联通", "移动", "BGP", ""];
    const APEX: &str = "edge.lagran.net";

    fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
        from[rng.gen_range(0..from.len())]
    }

    fn partitions(rng: &mut StdRng) -> PartitionTable {
        partitions_of(rng, 12)
    }

    /// Up to `max_ranges` ranges over the IPv4 space, each at a random location.
    fn partitions_of(rng: &mut StdRng, max_ranges: u128) -> PartitionTable {
        let n = rng.gen_range(1..max_ranges);
        let step = (1u128 << 32) / n;
        let ranges: Vec<(u128, u128, String)> = (0..n)
            .map(|i| {
                let end = if i + 1 == n { u32::MAX as u128 } else { (i + 1) * step - 1 };
                let region = format!(
                    "{}|0|{}|{}|{}",
                    pick(rng, COUNTRIES),
                    pick(rng, PROVINCES),
                    pick(rng, CITIES),
                    pick(rng, ISPS)
                );
                (i * step, end, region)
            })
            .collect();
        let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
        PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[])
    }

    fn random_node(rng: &mut StdRng, i: usize) -> Node {
        let mut n = Node::new(format!("n{}", rng.gen_range(0..100) * 10 + i));
        n.country = pick(rng, NODE_COUNTRIES).into();
        n.province = pick(rng, NODE_PROVINCES).into();
        n.city = pick(rng, NODE_CITIES).into();
        n.isp = pick(rng, NODE_ISPS).into();
        n.weight = rng.gen_range(-20..1100);
        if rng.gen_bool(0.3) {
            n.weight = 100; // ties
        }
        n.cpu_usage = if rng.gen_bool(0.3) { 0.0 } else { rng.gen_range(0.0..100.0) };
        n.memory_usage = if rng.gen_bool(0.3) { 0.0 } else { rng.gen_range(0.0..100.0) };
        if rng.gen_bool(0.3) {
            n.max_bandwidth_mbps = 100.0;
            n.bandwidth_mbps = rng.gen_range(0.0..150.0);
        }
        if rng.gen_bool(0.9) {
            n.public_ip = Some(Ipv4Addr::new(192, 0, 2, i as u8 + 1));
        }
        if rng.gen_bool(0.5) {
            n.public_ipv6 = Some(format!("2001:db8::{}", i + 1).parse().unwrap());
        }
        if rng.gen_bool(0.2) {
            n.pool = "pool-a".into();
        }
        if rng.gen_bool(0.1) {
            n.status = NodeStatus::Offline;
        }
        if rng.gen_bool(0.2) {
            n.lat = Some(rng.gen_range(-60.0..60.0));
            n.lon = Some(rng.gen_range(-170.0..170.0));
        }
        if rng.gen_bool(0.3) {
            n.last_heartbeat_ms = Some(1_000_000 - rng.gen_range(0..120_000));
        }
        n
    }

    fn random_rule(rng: &mut StdRng, id: i64, nodes: &[Node]) -> Rule {
        let opt = |rng: &mut StdRng, from: &[&str]| rng.gen_bool(0.4).then(|| pick(rng, from).to_string());
        Rule {
            id,
            kind: if rng.gen_bool(0.5) { RuleKind::Manual } else { RuleKind::Canary },
            domain: rng
                .gen_bool(0.3)
                .then(|| if rng.gen_bool(0.5) { APEX.into() } else { "A.Edge.Lagran.Net.".into() }),
            country: opt(rng, NODE_COUNTRIES),
            province: opt(rng, PROVINCES),
            city: opt(rng, CITIES),
            isp: opt(rng, ISPS),
            prefix: rng.gen_bool(0.25).then(|| {
                format!("{}.0.0.0/{}", rng.gen_range(1..224), rng.gen_range(8..25))
                    .parse::<ipnet::IpNet>()
                    .unwrap()
                    .trunc()
            }),
            node: if nodes.is_empty() || rng.gen_bool(0.1) {
                "ghost".into()
            } else {
                nodes[rng.gen_range(0..nodes.len())].name.clone()
            },
            percent: rng.gen_range(1..=100),
            priority: 0,
            expires_at_ms: rng.gen_bool(0.3).then(|| 1_000_000 + rng.gen_range(-10_000..30_000)),
            note: String::new(),
            created_at_ms: 0,
        }
    }

    fn random_world(rng: &mut StdRng) -> (Inputs, ScheduleSettings) {
        let nodes: Vec<Node> = (0..rng.gen_range(0..8)).map(|i| random_node(rng, i)).collect();
        let rules = (0..rng.gen_range(0..4)).map(|i| random_rule(rng, i + 1, &nodes)).collect();
        let mut lines = Vec::new();
        for i in 0..rng.gen_range(0..3) {
            let answer = [LineAnswer::Origin, LineAnswer::Node, LineAnswer::Schedule][rng.gen_range(0..3)];
            let prefix = format!("{}.{}.0.0/{}", rng.gen_range(1..224), rng.gen_range(0..256), rng.gen_range(12..25));
            let mut l = Line::new(format!("line{i}"), answer, vec![prefix.parse::<ipnet::IpNet>().unwrap().trunc()]);
            if answer == LineAnswer::Node {
                l.node = nodes.first().map(|n| n.name.clone());
            }
            if rng.gen_bool(0.3) {
                l.domains = vec![APEX.into()];
            }
            lines.push(l);
        }
        let mut domains = vec![];
        if rng.gen_bool(0.5) {
            domains.push(Domain {
                name: APEX.into(),
                zone: APEX.into(),
                pool: DEFAULT_POOL.into(),
                ttl: rng.gen_bool(0.5).then_some(20),
                origin_ip: Some(Ipv4Addr::new(198, 51, 100, 80)),
                answer_mode: Default::default(),
                ecs: true,
                steering: Default::default(),
                strategy: Default::default(),
            });
        }
        domains.push(Domain {
            name: "a.edge.lagran.net".into(),
            zone: APEX.into(),
            pool: if rng.gen_bool(0.5) { "pool-a".into() } else { DEFAULT_POOL.into() },
            ttl: None,
            origin_ip: None,
            answer_mode: Default::default(),
            ecs: true,
            steering: Default::default(),
            strategy: Default::default(),
        });
        let mut liveness =
            Liveness { heartbeat_timeout_ms: if rng.gen_bool(0.5) { 60_000 } else { 0 }, ..Default::default() };
        for n in &nodes {
            if rng.gen_bool(0.15) {
                liveness.probes.insert(n.name.clone(), ProbeState { up: false, ..Default::default() });
            }
        }
        let settings = ScheduleSettings {
            answers_per_query: rng.gen_range(1..4),
            hysteresis: if rng.gen_bool(0.6) { 0.15 } else { 0.0 },
            hysteresis_points: rng.gen_range(0..=30),
            isp_must_match: rng.gen_bool(0.3),
            caps: rng.gen_bool(0.3).then(Default::default),
            distance: rng.gen_bool(0.3).then(Default::default),
            spill: rng.gen_bool(0.3).then(Default::default),
            ..Default::default()
        };
        let inputs = Inputs {
            nodes,
            zones: vec![Zone::new(APEX)],
            domains,
            rules,
            lines,
            liveness,
            now_ms: 1_000_000,
            latency: Default::default(),
        };
        (inputs, settings)
    }

    /// One event: a node's load, weight, status, addresses, place or probe
    /// changes, or time passes. Returns the change as a writer would name it.
    fn random_event(rng: &mut StdRng, inputs: &mut Inputs) -> Change {
        inputs.now_ms += rng.gen_range(0..20_000);
        if inputs.nodes.is_empty() {
            return Change::Liveness;
        }
        let i = rng.gen_range(0..inputs.nodes.len());
        let n = &mut inputs.nodes[i];
        let change = Change::Node(n.name.clone());
        match rng.gen_range(0..9) {
            5 => n.bandwidth_mbps = rng.gen_range(0.0..150.0),
            6 => n.public_ip = if n.public_ip.is_some() { None } else { Some(Ipv4Addr::new(192, 0, 2, 200)) },
            7 => n.isp = pick(rng, NODE_ISPS).into(),
            8 => n.memory_usage = rng.gen_range(0.0..100.0),
            0 => n.status = if n.status == NodeStatus::Online { NodeStatus::Offline } else { NodeStatus::Online },
            1 => n.cpu_usage = rng.gen_range(0.0..100.0),
            2 => n.weight = rng.gen_range(0..300),
            3 => {
                let down = inputs.liveness.probes.get(&n.name).is_none_or(|p| p.up);
                inputs.liveness.probes.insert(n.name.clone(), ProbeState { up: !down, ..Default::default() });
            }
            _ => n.last_heartbeat_ms = Some(inputs.now_ms),
        }
        change
    }

    fn assert_same(seed: u64, step: usize, planner: &RouteTable, oracle: &RouteTable) {
        let names: Vec<&str> = oracle.scheduled_names().map(|n| n.name.as_str()).collect();
        assert_eq!(planner.scheduled_names().map(|n| n.name.as_str()).collect::<Vec<_>>(), names, "seed {seed}");
        for o in oracle.scheduled_names() {
            let p = planner.scheduled(&o.name).unwrap();
            assert_eq!(p.answers, o.answers, "seed {seed} step {step} {}: answers differ from the oracle's", o.name);
            assert_eq!(p.v4, o.v4, "seed {seed} step {step} {}: IPv4 prefixes (scopes) differ", o.name);
            assert_eq!(p.v6, o.v6, "seed {seed} step {step} {}: IPv6 prefixes differ", o.name);
            assert_eq!(p.id, o.id, "seed {seed} {}: name ids differ", o.name);
        }
    }

    /// Runs `worlds` random worlds of `steps` events each from `first_seed`.
    pub(crate) fn run(first_seed: u64, worlds: u64, steps: usize) {
        for seed in first_seed..first_seed + worlds {
            let mut rng = StdRng::seed_from_u64(seed);
            let parts = partitions(&mut rng);
            let (mut inputs, settings) = random_world(&mut rng);
            let policy = settings.policy();
            let (mut ps, mut is, mut os) = (BuildState::default(), BuildState::default(), OracleState::default());
            let mut change = Change::Everything;
            for step in 0..steps {
                let version = step as u64 + 1;
                let p = planned(version, &inputs, &parts, &settings, &policy, &mut ps, &Change::Everything);
                let i = planned(version, &inputs, &parts, &settings, &policy, &mut is, &change);
                let o = build_route_table(version, &inputs, &parts, &settings, &policy, &mut os);
                assert_same(seed, step, &p, &o);
                assert_same(seed, step, &i, &o);
                change = random_event(&mut rng, &mut inputs);
            }
        }
    }

    /// Incremental builds equal full ones on partition tables with many
    /// ranges per partition, where an incremental build splices the changed
    /// partitions' ranges into the last maps instead of building them again.
    #[test]
    fn incremental_tables_equal_full_ones_on_many_ranges() {
        for seed in 0..300u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let parts = partitions_of(&mut rng, 400);
            let (mut inputs, settings) = random_world(&mut rng);
            if rng.gen_bool(0.7) {
                // Mostly no prefix overrides: the names whose maps are spliced.
                inputs.lines.clear();
                inputs.rules.retain(|r| r.prefix.is_none());
            }
            let policy = settings.policy();
            let (mut ps, mut is) = (BuildState::default(), BuildState::default());
            let mut change = Change::Everything;
            for step in 0..8 {
                let version = step as u64 + 1;
                let p = planned(version, &inputs, &parts, &settings, &policy, &mut ps, &Change::Everything);
                let i = planned(version, &inputs, &parts, &settings, &policy, &mut is, &change);
                assert_same(seed, step, &i, &p);
                change = random_event(&mut rng, &mut inputs);
            }
        }
    }

    #[test]
    fn planner_tables_equal_the_oracles_over_1000_random_worlds() {
        run(0, 1000, 4);
    }

    /// The longer run (`cargo xtask bench` runs it with `--ignored`).
    #[test]
    #[ignore = "long: run by cargo xtask bench"]
    fn planner_tables_equal_the_oracles_long_run() {
        run(1_000_000, 5_000, 10);
    }
}
