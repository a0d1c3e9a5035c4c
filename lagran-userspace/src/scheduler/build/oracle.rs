//! The oracle: the route-table compiler as it was before the planner, one
//! [`engine::rank`] per (pool, partition). Slow and obviously right; the
//! property test holds the planner's tables to it.

use std::collections::HashMap;

use super::*;
use crate::engine::{self, Candidate, Family, NodeView, Policy, Ranking};

/// What the oracle carries from one build to the next.
#[derive(Clone, Debug, Default)]
pub(super) struct OracleState {
    pub name_ids: NameIds,
    /// The automatic primary per (name, partition location), for hysteresis.
    pub choices: HashMap<(String, Location), String>,
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
    let per_answer = settings.answers_per_query.clamp(1, 4) as usize;
    let rules: Vec<&Rule> = inputs.rules.iter().filter(|r| r.is_active(now)).collect();
    let region_rules: Vec<&Rule> = rules.iter().copied().filter(|r| r.prefix.is_none()).collect();
    // Automatic rankings depend on (pool, partition) only: names sharing a pool share them.
    let mut rankings: HashMap<String, Vec<(Ranking, Ranking)>> = HashMap::new();
    let mut new_choices = HashMap::new();
    let mut zones = Vec::with_capacity(inputs.zones.len());

    for zone in &inputs.zones {
        let apex = inputs.domains.iter().find(|d| d.name == zone.name);
        let mut specs = vec![NameSpec {
            name: zone.name.clone(),
            pool: apex.map_or(DEFAULT_POOL.to_string(), |d| d.pool.clone()),
            ttl: apex.and_then(|d| d.ttl),
            domain: apex,
        }];
        for d in inputs.domains.iter().filter(|d| d.zone == zone.name && d.name != zone.name) {
            specs.push(NameSpec { name: d.name.clone(), pool: d.pool.clone(), ttl: d.ttl, domain: Some(d) });
        }
        let mut scheduled = Vec::with_capacity(specs.len());
        for spec in specs {
            let pool = spec.pool.clone();
            let ranked = rankings.entry(pool.clone()).or_insert_with(|| {
                partitions
                    .locations()
                    .iter()
                    .map(|loc| {
                        (
                            engine::rank(&views, loc, Family::V4, &pool, policy),
                            engine::rank(&views, loc, Family::V6, &pool, policy),
                        )
                    })
                    .collect()
            });
            let steady_ttl = spec.ttl.unwrap_or(settings.ttl);
            let mut answers = Answers::default();
            let node_answer = |answers: &mut Answers, node: &str, why: &str, r4: &Ranking, r6: &Ranking, st| {
                let (mut a, mut b) = (r4.clone(), r6.clone());
                (pin(&mut a, node, why) || pin(&mut b, node, why)).then(|| {
                    let ttl = if st == AnswerState::Canary { settings.canary_ttl } else { steady_ttl };
                    answers.id(answer_of(&a, &b, per_answer, ttl, st))
                })
            };

            // Per partition: automatic (+ hysteresis), then region rules.
            let mut by_partition = Vec::with_capacity(ranked.len());
            for (pid, (r4, r6)) in ranked.iter().enumerate() {
                let loc = &partitions.locations()[pid];
                let key = (spec.name.clone(), loc.clone());
                // Clone the (possibly long) ranking only when hysteresis may reorder it.
                let previous = state.choices.get(&key).map(String::as_str);
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
                let failover = is_failover(&views, loc, &pool, r4.primary(), policy);
                let (st, ttl) = if failover {
                    (AnswerState::Failover, settings.failover_ttl.min(steady_ttl))
                } else {
                    (AnswerState::Steady, steady_ttl)
                };
                let mut id = answers.id(answer_of(r4, r6, per_answer, ttl, st));
                let matching: Vec<&&Rule> = region_rules.iter().filter(|r| rule_matches(r, &spec.name, loc)).collect();
                if let Some(rule) = matching.iter().find(|r| r.kind == RuleKind::Canary) {
                    let why = format!("canary rule {} {}%", rule.id, rule.percent);
                    if let Some(cid) = node_answer(&mut answers, &rule.node, &why, r4, r6, AnswerState::Canary) {
                        let mut base = answers.list[id as usize].clone();
                        base.ttl = base.ttl.min(settings.canary_ttl);
                        base.canary = Some(Canary { percent: rule.percent, answer: cid });
                        id = answers.id(base);
                    }
                }
                if let Some(rule) = matching.iter().find(|r| r.kind == RuleKind::Manual) {
                    let why = format!("manual rule {}", rule.id);
                    if let Some(mid) = node_answer(&mut answers, &rule.node, &why, r4, r6, AnswerState::Steady) {
                        id = mid;
                    }
                }
                by_partition.push(id);
            }

            // Prefix overrides: lines, then canary and manual prefix rules on top.
            let mut over4: Vec<(u128, u128, PrefixOverride)> = Vec::new();
            let mut over6: Vec<(u128, u128, PrefixOverride)> = Vec::new();
            let unknown = &ranked[0];
            for line in inputs.lines.iter().filter(|l| l.domains.is_empty() || l.domains.contains(&spec.name)) {
                let answer = match line.answer {
                    LineAnswer::Origin => spec.domain.and_then(|d| d.origin_ip).map(|ip| {
                        answers.id(Answer {
                            ttl: steady_ttl,
                            ipv4: vec![ip],
                            ipv6: vec![],
                            node: None,
                            reason: format!("line {}: origin", line.name),
                            state: AnswerState::Steady,
                            canary: None,
                            hostname: None,
                        })
                    }),
                    LineAnswer::Node => line.node.as_deref().and_then(|n| {
                        node_answer(
                            &mut answers,
                            n,
                            &format!("line {}", line.name),
                            &unknown.0,
                            &unknown.1,
                            AnswerState::Steady,
                        )
                    }),
                    LineAnswer::Schedule => {
                        let mut a = answer_of(&unknown.0, &unknown.1, per_answer, steady_ttl, AnswerState::Steady);
                        a.reason = format!("line {}: {}", line.name, a.reason);
                        Some(answers.id(a))
                    }
                };
                let Some(answer) = answer else {
                    tracing::warn!(line = %line.name, name = %spec.name, "line has nothing to answer (no origin_ip / node not eligible); skipped");
                    continue;
                };
                for p in &line.prefixes {
                    let (is4, s, e) = net_range(p);
                    let list = if is4 { &mut over4 } else { &mut over6 };
                    list.push((s, e, PrefixOverride::Fixed(answer)));
                }
            }
            // Prefix rules match by domain and prefix; their region filters do not apply.
            for rule in &rules {
                let Some(p) = &rule.prefix else { continue };
                if rule.domain.as_deref().is_some_and(|d| d.trim_end_matches('.').to_ascii_lowercase() != spec.name) {
                    continue;
                }
                let (is4, s, e) = net_range(p);
                let list = if is4 { &mut over4 } else { &mut over6 };
                let o = match rule.kind {
                    RuleKind::Canary => {
                        PrefixOverride::Canary { node: rule.node.clone(), percent: rule.percent, rule: rule.id }
                    }
                    RuleKind::Manual => PrefixOverride::Manual { node: rule.node.clone(), rule: rule.id },
                };
                list.push((s, e, o));
            }
            // Apply in priority order (lines, canary, manual), each layer sorted and
            // non-overlapping within itself (a later, more specific entry wins).
            let layer = |list: &[(u128, u128, PrefixOverride)], pick: fn(&PrefixOverride) -> bool| {
                let mut l: Vec<(u128, u128, PrefixOverride)> = list.iter().filter(|o| pick(&o.2)).cloned().collect();
                l.sort_by_key(|&(s, e, _)| (std::cmp::Reverse(e - s), s));
                l
            };
            // Seed 001 §3.4: unknown public ranges get the unknown answer flagged;
            // the special-purpose ranges keep the unknown answer itself.
            let unlocated =
                if over4.is_empty() && over6.is_empty() && by_partition.iter().all(|&a| a == by_partition[0]) {
                    by_partition[0]
                } else {
                    answers
                        .id(Answer { state: AnswerState::Resolver, ..answers.list[by_partition[0] as usize].clone() })
                };
            let answer = |p: u32| if p == UNKNOWN { unlocated } else { by_partition[p as usize] };
            let back = |under: u32, _: &()| if under == unlocated { by_partition[0] } else { under };
            let special4: Vec<(u128, u128, ())> =
                reserved::special_ranges_v4().iter().map(|&(s, e)| (s as u128, e as u128, ())).collect();
            let special6: Vec<(u128, u128, ())> =
                reserved::special_ranges_v6().iter().map(|&(s, e)| (s, e, ())).collect();
            let ranges4: Vec<(u128, u128, u32)> =
                partitions.v4_ranges().iter().map(|&(s, e, p)| (s as u128, e as u128, answer(p))).collect();
            let ranges6: Vec<(u128, u128, u32)> =
                partitions.v6_ranges().iter().map(|&(s, e, p)| (s, e, answer(p))).collect();
            let mut ranges4 = overlay_with(ranges4, &special4, back);
            let mut ranges6 = overlay_with(ranges6, &special6, back);
            let picks: [fn(&PrefixOverride) -> bool; 3] = [
                |o| matches!(o, PrefixOverride::Fixed(_)),
                |o| matches!(o, PrefixOverride::Canary { .. }),
                |o| matches!(o, PrefixOverride::Manual { .. }),
            ];
            for pick in picks {
                for (ranges, over) in [(&mut ranges4, &over4), (&mut ranges6, &over6)] {
                    for o in layer(over, pick) {
                        let taken = std::mem::take(ranges);
                        *ranges = overlay_with(taken, std::slice::from_ref(&o), |under, k| match k {
                            PrefixOverride::Fixed(a) => *a,
                            PrefixOverride::Manual { node, rule } => {
                                let (r4, r6) = unknown;
                                node_answer(
                                    &mut answers,
                                    node,
                                    &format!("manual rule {rule}"),
                                    r4,
                                    r6,
                                    AnswerState::Steady,
                                )
                                .unwrap_or(under)
                            }
                            PrefixOverride::Canary { node, percent, rule } => {
                                let (r4, r6) = unknown;
                                match node_answer(
                                    &mut answers,
                                    node,
                                    &format!("canary rule {rule} {percent}%"),
                                    r4,
                                    r6,
                                    AnswerState::Canary,
                                ) {
                                    Some(cid) => {
                                        let under = if under == unlocated { by_partition[0] } else { under };
                                        let mut base = answers.list[under as usize].clone();
                                        base.ttl = base.ttl.min(settings.canary_ttl);
                                        base.canary = Some(Canary { percent: *percent, answer: cid });
                                        answers.id(base)
                                    }
                                    None => under,
                                }
                            }
                        });
                    }
                }
            }
            let fill = by_partition[0];
            let v4 = PrefixMapV4::from_ranges(ranges4.into_iter().map(|(s, e, v)| (s as u32, e as u32, v)), fill);
            let v6 = PrefixMapV6::from_ranges(ranges6, fill);
            scheduled.push(ScheduledName {
                ecs: true,
                id: state.name_ids.id(&spec.name),
                name: spec.name,
                answers: Arc::new(answers.list),
                v4,
                v6,
            });
        }
        zones.push(ZoneRoutes { zone: zone.clone(), names: scheduled });
    }
    state.choices = new_choices;
    RouteTable::new(version, now, zones)
}

/// The planner's tables, full and after events, equal the oracle's: answers,
/// scopes (the prefix maps) and TTLs.
mod equivalence {
    use std::net::Ipv4Addr;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::geo::{GeoDb, IpVersion, Xdb, write_xdb};
    use crate::health::ProbeState;
    use crate::model::NodeStatus;

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
        let inputs = Inputs { nodes, zones: vec![Zone::new(APEX)], domains, rules, lines, liveness, now_ms: 1_000_000 };
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
                let p = super::super::build_route_table(version, &inputs, &parts, &settings, &policy, &mut ps);
                let i = super::super::build_route_table_after(
                    version, &inputs, &parts, &settings, &policy, &mut is, &change,
                );
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
                let p = super::super::build_route_table(version, &inputs, &parts, &settings, &policy, &mut ps);
                let i = super::super::build_route_table_after(
                    version, &inputs, &parts, &settings, &policy, &mut is, &change,
                );
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
