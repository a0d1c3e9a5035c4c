//! The measurements that need the real data but no network: xdb load and
//! compile, geo lookup, the route table on the real data with the demo nodes,
//! the kernel LPM trie it becomes, its per-packet cost (`BPF_PROG_TEST_RUN`),
//! ECS scopes and their correctness, and the recompute benchmark.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use lagran::config::ScheduleSettings;
use lagran::engine::{self, Family, NodeView};
use lagran::geo::{GeoDb, IpVersion, Xdb};
use lagran::model::{DEFAULT_POOL, Domain, Node, Zone};
use lagran::partition::PartitionTable;
use lagran::prefix_map::PrefixMapV4;
use lagran::route_table::{Answer, ScheduledName};
use lagran::scheduler::{BuildState, Change, Inputs, build_route_table};
use rand::{Rng as _, SeedableRng as _, rngs::StdRng};

mod kernel;

use crate::cost;
use crate::result;

/// The recompute benchmark's size: nodes, partitions, scheduled names.
#[derive(Clone, Copy, clap::Args)]
pub struct FleetSize {
    #[arg(long, default_value_t = 1_000)]
    pub nodes: usize,
    #[arg(long, default_value_t = 5_000)]
    pub partitions: usize,
    #[arg(long, default_value_t = 10)]
    pub names: usize,
}

#[derive(clap::Args)]
pub struct Args {
    /// The real ip2region file.
    #[arg(long)]
    xdb: PathBuf,
    /// Random public IPv4 addresses for the ECS scope statistics.
    #[arg(long, default_value_t = 10_000)]
    samples: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Query packets (one per real client /24) run through BPF_PROG_TEST_RUN per table.
    #[arg(long, default_value_t = 2_000)]
    packets: usize,
    /// BPF_PROG_TEST_RUN repeat count per packet for the lookup-only runs.
    #[arg(long, default_value_t = 2_000)]
    repeat: u32,
    /// Skip everything that needs the BPF object and root.
    #[arg(long)]
    no_kernel: bool,
    /// Skip the unmerged (one answer per geo partition) trie: the slowest part.
    #[arg(long)]
    no_unmerged: bool,
    /// Only the recompute benchmark.
    #[arg(long)]
    only_recompute: bool,
    /// Skip the recompute benchmark.
    #[arg(long)]
    no_recompute: bool,
    /// Recompute benchmark size.
    #[command(flatten)]
    size: FleetSize,
    /// Timed builds per recompute configuration (the median is reported).
    #[arg(long, default_value_t = 1)]
    builds: usize,
    /// Recompute configurations: `1pool` (every name in the default pool) and/or
    /// `10pools` (each name its own pool of a tenth of the nodes).
    /// `real`: the real xdb with 100 and 1 000 nodes, full and after one node goes down.
    #[arg(long, value_delimiter = ',', default_value = "1pool,real")]
    configs: Vec<String>,
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The demo's zone and nodes, as `lagran serve --demo` installs them.
fn demo_inputs() -> Inputs {
    Inputs {
        nodes: lagran::demo::demo_nodes(),
        zones: vec![lagran::demo::demo_zone()],
        now_ms: now_ms(),
        ..Inputs::default()
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.only_recompute {
        return recompute(&a);
    }
    // ---- 1. load and compile the real xdb
    let t = Instant::now();
    let xdb = Xdb::open(&a.xdb).with_context(|| format!("opening {}", a.xdb.display()))?;
    let load = t.elapsed();
    result("xdb_segments", xdb.len());
    result("xdb_load_ms", ms(load));

    let per_lookup = lagran::geo::bench::bench_lookup(&xdb, 2_000_000);
    result("geo_lookup_ns", per_lookup.as_nanos());

    let geo = GeoDb::from_xdbs(Some(xdb), None);
    let t = Instant::now();
    let partitions = PartitionTable::build(&geo, &[]);
    let compile = t.elapsed();
    result("partitions", partitions.locations().len());
    result("partition_ranges_v4", partitions.v4_ranges().len());
    result("partitions_build_ms", ms(compile));

    let inputs = demo_inputs();
    let settings = ScheduleSettings::default();
    let policy = settings.policy();
    let t = Instant::now();
    let table =
        build_route_table(1, &inputs, &partitions, &settings, &policy, &mut BuildState::default(), &Change::Everything);
    let route = t.elapsed();
    result("route_build_ms", ms(route));
    let edge = table.scheduled(lagran::demo::DEMO_ZONE).context("the demo zone apex is not scheduled")?;
    result("prefixes_merged", edge.v4.len());
    result("answers_distinct", edge.answers.len());
    let unmerged = unmerged_name(&partitions);
    result("prefixes_unmerged", unmerged.v4.len());

    // ---- 2. ECS scopes over real addresses, and their correctness
    ecs_scopes(&a, &partitions, &inputs, &settings, edge, &unmerged)?;

    // ---- 3. the kernel: trie size after a sync, per-packet cost
    if !a.no_kernel {
        kernel::run(&a, &geo, &table, unmerged, load + compile + route)?;
    }

    // ---- 4. recompute: 1 000 nodes × 5 000 partitions × 10 names
    if !a.no_recompute {
        recompute(&a)?;
    }
    Ok(())
}

/// One answer per geo partition, no merging by answer: what the trie would hold
/// without merging the partitions that share an answer (every partition its own
/// entry set).
fn unmerged_name(p: &PartitionTable) -> ScheduledName {
    const MAX_ANSWERS: u32 = 60_000; // lagran_answers holds 65 536
    let n = (p.locations().len() as u32).min(MAX_ANSWERS);
    let answers = (0..n)
        .map(|i| Answer {
            ttl: 30,
            ipv4: vec![Ipv4Addr::from(0x0a00_0000 + i)],
            reason: format!("partition {i}"),
            ..Answer::default()
        })
        .collect::<Vec<_>>();
    let v4 = PrefixMapV4::from_ranges(p.v4_ranges().iter().map(|&(s, e, id)| (s, e, id % n)), 0);
    ScheduledName {
        ecs: true,
        name: lagran::demo::DEMO_ZONE.into(),
        id: 1,
        answers: answers.into(),
        v4,
        v6: lagran::prefix_map::PrefixMapV6::uniform(0),
    }
}

fn random_public(rng: &mut StdRng) -> Ipv4Addr {
    loop {
        let ip = Ipv4Addr::from(rng.r#gen::<u32>());
        if !lagran::geo::reserved::is_special_v4(ip) {
            return ip;
        }
    }
}

fn ecs_scopes(
    a: &Args,
    partitions: &PartitionTable,
    inputs: &Inputs,
    settings: &ScheduleSettings,
    edge: &ScheduledName,
    unmerged: &ScheduledName,
) -> anyhow::Result<()> {
    // Independent oracle: partition → location → engine::rank → addresses.
    let views = NodeView::prepare_live(inputs.nodes.iter().cloned(), &inputs.liveness, inputs.now_ms);
    let policy = settings.policy();
    let per = settings.answers_per_query.clamp(1, 4) as usize;
    let oracle: Vec<Vec<Ipv4Addr>> = partitions
        .locations()
        .iter()
        .map(|loc| {
            engine::rank(&views, loc, Family::V4, DEFAULT_POOL, &policy)
                .candidates
                .iter()
                .filter_map(|c| c.public_ip)
                .take(per)
                .collect()
        })
        .collect();
    let ranges = partitions.v4_ranges();
    // run_end[i]: the last range index j ≥ i with the same oracle answer as range i.
    let mut run_end = vec![0usize; ranges.len()];
    for i in (0..ranges.len()).rev() {
        run_end[i] = if i + 1 < ranges.len() && oracle[ranges[i].2 as usize] == oracle[ranges[i + 1].2 as usize] {
            run_end[i + 1]
        } else {
            i
        };
    }

    let mut rng = StdRng::seed_from_u64(a.seed);
    let (mut sum, mut sum_unmerged, mut violations) = (0u64, 0u64, 0usize);
    let mut first_violation = None;
    for _ in 0..a.samples {
        let ip = random_public(&mut rng);
        let (ans, scope) = edge.answer_for(IpAddr::V4(ip));
        sum += scope as u64;
        sum_unmerged += unmerged.answer_for(IpAddr::V4(ip)).1 as u64;
        let host = 32 - scope as u32;
        let s = if host >= 32 { 0 } else { u32::from(ip) & !((1u32 << host) - 1) };
        let e = if host >= 32 { u32::MAX } else { s | ((1u32 << host) - 1) };
        // Every address in [s, e] must get `ans`: the partition ranges overlapping it
        // all have the oracle answer `ans.ipv4`, and both ends answer the same.
        let i0 = ranges.partition_point(|r| r.1 < s);
        let i1 = ranges.partition_point(|r| r.0 <= e) - 1;
        let ok = oracle[ranges[i0].2 as usize] == ans.ipv4
            && run_end[i0] >= i1
            && edge.answer_for(IpAddr::V4(Ipv4Addr::from(s))) == (ans, scope)
            && edge.answer_for(IpAddr::V4(Ipv4Addr::from(e))) == (ans, scope);
        if !ok {
            violations += 1;
            first_violation.get_or_insert(format!("{ip} scope /{scope} answer {:?}", ans.ipv4));
        }
    }
    let n = a.samples.max(1) as f64;
    result("ecs_samples", a.samples);
    result("ecs_mean_scope", format!("{:.2}", sum as f64 / n));
    result("ecs_mean_scope_unmerged", format!("{:.2}", sum_unmerged as f64 / n));
    result("ecs_scope_violations", violations);
    if let Some(v) = first_violation {
        eprintln!("tables: first ECS scope violation: {v}");
    }
    Ok(())
}

pub(crate) fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    (mean, v[v.len() / 2])
}

/// 1 000 nodes × 5 000 partitions × 10 names through `build_route_table`, with
/// the names sharing one pool and with ten pools (ten times the rankings).
/// Bench node `i` at `[country, province, city, isp]`, with a random weight
/// and load and the public address 10.0.0.0 + `i`.
pub(crate) fn bench_node(i: usize, [country, province, city, isp]: [&str; 4], rng: &mut StdRng) -> Node {
    let mut n = Node::new(format!("node-{i:04}"));
    n.country = country.into();
    n.province = province.into();
    n.city = city.into();
    n.isp = isp.into();
    n.weight = rng.gen_range(50..150);
    n.cpu_usage = rng.gen_range(0.0..80.0);
    n.memory_usage = rng.gen_range(0.0..80.0);
    n.public_ip = Some(Ipv4Addr::from(0x0a00_0000 + i as u32));
    n
}

/// `n` scheduled names in `zone`: the apex, then `n1.`, `n2.`, …; name `i` in
/// pool `pool(i)`.
pub(crate) fn bench_domains(zone: &Zone, n: usize, pool: impl Fn(usize) -> String) -> Vec<Domain> {
    (0..n)
        .map(|i| Domain {
            name: if i == 0 { zone.name.clone() } else { format!("n{i}.{}", zone.name) },
            zone: zone.name.clone(),
            pool: pool(i),
            ttl: None,
            origin_ip: None,
            answer_mode: Default::default(),
            ecs: true,
            steering: Default::default(),
            strategy: Default::default(),
        })
        .collect()
}

/// A synthetic partition's (province, city, ISP).
pub(crate) type Tuple = (String, String, String);

/// The fleet the signing and steering benchmarks build on: the synthetic
/// partitions of [`synthetic_partitions`] and `nodes` nodes, each at a
/// partition's location drawn from `seed`.
pub(crate) fn bench_fleet(partitions: usize, nodes: usize, seed: u64) -> anyhow::Result<(Vec<Node>, PartitionTable)> {
    let (tuples, partitions) = synthetic_partitions(partitions)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let nodes = (0..nodes)
        .map(|i| {
            let (p, c, isp) = &tuples[rng.gen_range(0..tuples.len())];
            bench_node(i, ["CN", p, c, isp], &mut rng)
        })
        .collect();
    Ok((nodes, partitions))
}

/// The recompute benchmark's synthetic geo data: `parts_n` distinct
/// (province, city, ISP) tuples, each over ten ranges of the IPv4 space.
pub(crate) fn synthetic_partitions(parts_n: usize) -> anyhow::Result<(Vec<Tuple>, PartitionTable)> {
    let tuples: Vec<Tuple> = (0..parts_n)
        .map(|i| (format!("P{}", i % 34), format!("C{}-{}", i % 34, (i / 34) % 40), format!("I{}", i / (34 * 40))))
        .collect();
    // 50 000 ranges over the address space, each tuple used ten times.
    let ranges_n = parts_n * 10;
    let step = (1u128 << 32) / ranges_n as u128;
    let ranges: Vec<(u128, u128, String)> = (0..ranges_n)
        .map(|i| {
            let (p, c, isp) = &tuples[(i * 7919) % parts_n];
            let end = if i + 1 == ranges_n { u32::MAX as u128 } else { (i as u128 + 1) * step - 1 };
            (i as u128 * step, end, format!("CN|{p}|{c}|{isp}"))
        })
        .collect();
    let xdb = Xdb::from_bytes(lagran::geo::write_xdb(IpVersion::V4, &ranges)?)?;
    Ok((tuples, PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[])))
}

fn recompute(a: &Args) -> anyhow::Result<()> {
    let (parts_n, nodes_n, names_n) = (a.size.partitions, a.size.nodes, a.size.names);
    let mut rng = StdRng::seed_from_u64(5000);
    let (tuples, partitions) = synthetic_partitions(parts_n)?;
    result("recompute_partitions", partitions.locations().len());
    result("recompute_nodes", nodes_n);
    result("recompute_names", names_n);

    let settings = ScheduleSettings::default();
    let policy = settings.policy();
    if a.configs.iter().any(|c| c == "real") {
        recompute_real(a)?;
    }
    for (label, pools) in [("recompute_1pool", false), ("recompute_10pools", true)] {
        if !a.configs.iter().any(|c| label.ends_with(c.as_str())) {
            continue;
        }
        let nodes: Vec<Node> = (0..nodes_n)
            .map(|i| {
                let (p, c, isp) = &tuples[rng.gen_range(0..parts_n)];
                let mut n = bench_node(i, ["CN", p, c, isp], &mut rng);
                if pools {
                    n.pool = format!("p{}", i % names_n);
                }
                n
            })
            .collect();
        let zone = Zone::new("bench.lagran.net");
        let domains = bench_domains(&zone, names_n, |i| if pools { format!("p{i}") } else { DEFAULT_POOL.to_string() });
        let mut inputs = Inputs { nodes, zones: vec![zone], domains, now_ms: now_ms(), ..Inputs::default() };
        let mut state = BuildState::default();
        let mut times = Vec::new();
        let mut costs = Vec::new();
        for v in 0..a.builds.max(1) as u64 {
            let t = Instant::now();
            let (table, c) = cost::measure(|| {
                build_route_table(v + 1, &inputs, &partitions, &settings, &policy, &mut state, &Change::Everything)
            });
            times.push(t.elapsed().as_secs_f64() * 1e3);
            costs.push(c);
            if table.scheduled_names().count() != names_n {
                bail!("{label}: expected {names_n} scheduled names, got {}", table.scheduled_names().count());
            }
        }
        let first = times[0];
        let (_, median) = stats(times.clone());
        result(&format!("{label}_first_ms"), format!("{first:.1}"));
        result(&format!("{label}_ms"), format!("{median:.1}"));
        cost::report(label, cost::median(&costs));
        // One node down, incrementally: each node in turn for a few builds.
        let mut down = Vec::new();
        let mut down_costs = Vec::new();
        for j in 0..a.builds.max(3) {
            let i = (j * 97) % nodes_n;
            inputs.nodes[i].status = lagran::model::NodeStatus::Offline;
            let change = Change::Node(inputs.nodes[i].name.clone());
            let t = Instant::now();
            let (_, c) = cost::measure(|| {
                build_route_table(100 + j as u64, &inputs, &partitions, &settings, &policy, &mut state, &change)
            });
            down.push(t.elapsed().as_secs_f64() * 1e3);
            down_costs.push(c);
            inputs.nodes[i].status = lagran::model::NodeStatus::Online;
            build_route_table(200 + j as u64, &inputs, &partitions, &settings, &policy, &mut state, &change);
        }
        let (_, down_median) = stats(down.clone());
        result(&format!("{label}_one_down_ms"), format!("{down_median:.1}"));
        cost::report(&format!("{label}_one_down"), cost::median(&down_costs));
        eprintln!(
            "tables: {label}: {nodes_n} nodes × {} partitions × {names_n} names: full {times:?} ms, one node down {down:?} ms",
            partitions.locations().len()
        );
    }
    Ok(())
}

/// One node down, incrementally, in a table whose fleet grew as a real one
/// (and the bench's fleet step) does: nodes added a few at a time, each
/// addition a full build, so hysteresis holds many partitions on the node
/// they had before a better one arrived (the held decisions the fleet step's
/// daemon carries; a table built in one go holds none). Then `rounds` nodes
/// go down in turn (and back up, unmeasured); each down build is timed.
fn one_down_grown(
    inputs: &Inputs,
    partitions: &PartitionTable,
    settings: &ScheduleSettings,
    policy: &lagran::engine::Policy,
    rounds: usize,
) -> anyhow::Result<(Vec<f64>, Vec<crate::cost::Cost>)> {
    const STEP: usize = 20;
    let all = &inputs.nodes;
    let mut inputs = Inputs { nodes: Vec::new(), ..inputs.clone() };
    let mut state = BuildState::default();
    let mut version = 1;
    for end in (STEP..=all.len()).step_by(STEP) {
        inputs.nodes = all[..end].to_vec();
        build_route_table(version, &inputs, partitions, settings, policy, &mut state, &Change::Everything);
        version += 1;
    }
    let (mut downs, mut costs) = (Vec::new(), Vec::new());
    let n = inputs.nodes.len();
    for j in 0..rounds {
        let i = (j * 97 + 13) % n;
        let change = Change::Node(inputs.nodes[i].name.clone());
        inputs.nodes[i].status = lagran::model::NodeStatus::Offline;
        let t0 = Instant::now();
        let (_, c) =
            cost::measure(|| grown_down_build(version, &inputs, partitions, settings, policy, &mut state, &change));
        downs.push(t0.elapsed().as_secs_f64() * 1e3);
        costs.push(c);
        inputs.nodes[i].status = lagran::model::NodeStatus::Online;
        build_route_table(version + 1, &inputs, partitions, settings, policy, &mut state, &change);
        version += 2;
    }
    Ok((downs, costs))
}

/// One timed build of [`one_down_grown`], a function of its own so a profiler
/// can collect it alone (`valgrind --tool=callgrind --toggle-collect=*grown_down_build*`).
#[inline(never)]
fn grown_down_build(
    version: u64,
    inputs: &Inputs,
    partitions: &PartitionTable,
    settings: &ScheduleSettings,
    policy: &lagran::engine::Policy,
    state: &mut BuildState,
    change: &Change,
) -> lagran::route_table::RouteTable {
    build_route_table(version, inputs, partitions, settings, policy, state, change)
}

/// The real xdb's partitions with `n` nodes placed at real client locations
/// (10 names, one pool): a full recompute, then one node down.
fn recompute_real(a: &Args) -> anyhow::Result<()> {
    let xdb = Xdb::open(&a.xdb).with_context(|| format!("opening {}", a.xdb.display()))?;
    let partitions = PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[]);
    let settings = ScheduleSettings::default();
    let policy = settings.policy();
    let locations = partitions.locations();
    for nodes_n in [100usize, 1_000] {
        let mut rng = StdRng::seed_from_u64(nodes_n as u64);
        let nodes: Vec<Node> = (0..nodes_n)
            .map(|i| {
                let loc = &locations[rng.gen_range(1..locations.len())];
                bench_node(i, [&loc.country, &loc.province, &loc.city, &loc.isp], &mut rng)
            })
            .collect();
        let zone = Zone::new("bench.lagran.net");
        let domains = bench_domains(&zone, a.size.names, |_| DEFAULT_POOL.to_string());
        let mut inputs = Inputs { nodes, zones: vec![zone], domains, now_ms: now_ms(), ..Inputs::default() };
        let mut state = BuildState::default();
        let mut full = Vec::new();
        let mut costs = Vec::new();
        for v in 0..a.builds.max(3) as u64 {
            let t = Instant::now();
            let (_, c) = cost::measure(|| {
                build_route_table(v + 1, &inputs, &partitions, &settings, &policy, &mut state, &Change::Everything)
            });
            full.push(t.elapsed().as_secs_f64() * 1e3);
            costs.push(c);
        }
        // One node down: the primary for Shenzhen China Telecom goes offline.
        let t = build_route_table(100, &inputs, &partitions, &settings, &policy, &mut state, &Change::Everything);
        let probe: IpAddr = "58.60.1.1".parse()?;
        let before = t.scheduled("bench.lagran.net").context("no apex")?.answer_for(probe).0.node.clone();
        let down = before.clone().context("no answer for the probe")?;
        let i = inputs.nodes.iter().position(|n| n.name == down).context("primary not a node")?;
        inputs.nodes[i].status = lagran::model::NodeStatus::Offline;
        let t0 = Instant::now();
        let change = Change::Node(down.clone());
        let (t, down_cost) =
            cost::measure(|| build_route_table(101, &inputs, &partitions, &settings, &policy, &mut state, &change));
        let one_down = t0.elapsed().as_secs_f64() * 1e3;
        let after = t.scheduled("bench.lagran.net").context("no apex")?.answer_for(probe).0.node.clone();
        if after == before {
            bail!("recompute_real: {down} went offline but the answer stayed");
        }
        // One build decides nothing on a shared machine: more nodes go down
        // (and back up, unmeasured) in turn, the probe's first; the median counts.
        let mut downs = vec![one_down];
        let mut down_costs = vec![down_cost];
        inputs.nodes[i].status = lagran::model::NodeStatus::Online;
        build_route_table(102, &inputs, &partitions, &settings, &policy, &mut state, &change);
        for j in 1..a.builds.max(3) * 2 {
            let n = (i + j * 97) % nodes_n;
            inputs.nodes[n].status = lagran::model::NodeStatus::Offline;
            let change = Change::Node(inputs.nodes[n].name.clone());
            let t0 = Instant::now();
            let (_, c) = cost::measure(|| {
                build_route_table(200 + 2 * j as u64, &inputs, &partitions, &settings, &policy, &mut state, &change)
            });
            downs.push(t0.elapsed().as_secs_f64() * 1e3);
            down_costs.push(c);
            inputs.nodes[n].status = lagran::model::NodeStatus::Online;
            build_route_table(201 + 2 * j as u64, &inputs, &partitions, &settings, &policy, &mut state, &change);
        }
        let (grown_downs, grown_costs) = one_down_grown(&inputs, &partitions, &settings, &policy, a.builds.max(3) * 2)?;
        let (_, median) = stats(full.clone());
        let (_, one_down) = stats(downs.clone());
        let label = format!("recompute_real_{nodes_n}nodes");
        let (_, grown) = stats(grown_downs.clone());
        result(&format!("{label}_grown_one_down_ms"), format!("{grown:.1}"));
        cost::report(&format!("{label}_grown_one_down"), cost::median(&grown_costs));
        eprintln!("tables: {label}: one node down after the fleet grew 20 nodes at a time {grown_downs:?} ms");
        result(&format!("{label}_ms"), format!("{median:.1}"));
        result(&format!("{label}_one_down_ms"), format!("{one_down:.1}"));
        cost::report(&label, cost::median(&costs));
        cost::report(&format!("{label}_one_down"), cost::median(&down_costs));
        eprintln!(
            "tables: {label}: {nodes_n} nodes × {} partitions × {} names: full {full:?} ms, one node down {downs:?} ms",
            locations.len(),
            a.size.names
        );
    }
    Ok(())
}
