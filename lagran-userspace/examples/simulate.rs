//! `simulate`: scheduling quality at fleet scale, driven by
//! `cargo xtask simulate`.
//!
//! The real xdb and sampled real client /24s (located in mainland China on a
//! major carrier, from a fixed random seed) query `edge.lagran.net A` with ECS
//! through `lagran::dns::answer` — the responder's own function — against
//! tables compiled by the real scheduler (`build_route_table`), for two fleets
//! (`dense`: every province × 电信/联通/移动 plus Hong Kong and overseas;
//! `sparse`: 30 nodes in ten major cities) under two policies (`default`;
//! `isp+distance`: `isp_must_match` with distance scoring). Per run it reports
//! same-province, same-carrier and cross-carrier shares, how often the node is
//! within 10 % of the nearest eligible same-carrier node's great-circle
//! distance, answer changes over rounds of ±10 % load noise, and what moves
//! when the busiest node fails. Prints a table and writes CSV files.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use lagran::config::{DnsSettings, ScheduleSettings};
use lagran::dns::{AnswerContext, Transport, answer};
use lagran::engine::DistancePolicy;
use lagran::geo::GeoDb;
use lagran::location::Location;
use lagran::location::coords::{coordinates, haversine_km};
use lagran::model::{DEFAULT_POOL, Domain, Node, NodeStatus, Zone};
use lagran::partition::PartitionTable;
use lagran::route_table::RouteTable;
use lagran::scheduler::{BuildState, Change, Inputs, build_route_table};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[path = "simulate_latency/mod.rs"]
mod latency;
#[path = "simulate/world.rs"]
mod world;

const ZONE: &str = "sim.lagran.net";
const CARRIERS: [&str; 3] = ["电信", "联通", "移动"];
/// Mainland provinces with the city the node sits in (the capital).
const PROVINCES: [(&str, &str); 31] = [
    ("北京", "北京"),
    ("天津", "天津"),
    ("上海", "上海"),
    ("重庆", "重庆"),
    ("河北", "石家庄"),
    ("山西", "太原"),
    ("辽宁", "沈阳"),
    ("吉林", "长春"),
    ("黑龙江", "哈尔滨"),
    ("江苏", "南京"),
    ("浙江", "杭州"),
    ("安徽", "合肥"),
    ("福建", "福州"),
    ("江西", "南昌"),
    ("山东", "济南"),
    ("河南", "郑州"),
    ("湖北", "武汉"),
    ("湖南", "长沙"),
    ("广东", "广州"),
    ("海南", "海口"),
    ("四川", "成都"),
    ("贵州", "贵阳"),
    ("云南", "昆明"),
    ("陕西", "西安"),
    ("甘肃", "兰州"),
    ("青海", "西宁"),
    ("内蒙古", "呼和浩特"),
    ("广西", "南宁"),
    ("西藏", "拉萨"),
    ("宁夏", "银川"),
    ("新疆", "乌鲁木齐"),
];
/// A young CDN's ten cities.
const SPARSE: [(&str, &str); 10] = [
    ("北京", "北京"),
    ("上海", "上海"),
    ("广东", "广州"),
    ("广东", "深圳"),
    ("浙江", "杭州"),
    ("江苏", "南京"),
    ("四川", "成都"),
    ("湖北", "武汉"),
    ("陕西", "西安"),
    ("山东", "济南"),
];

#[derive(Parser)]
#[command(name = "simulate", about = "Scheduling quality at fleet scale (cargo xtask simulate)")]
struct Args {
    /// The ip2region xdb (IPv4).
    #[arg(long)]
    xdb: PathBuf,
    /// `dense`, `sparse`, `both` or `world`.
    #[arg(long, default_value = "both")]
    fleet: String,
    /// MaxMind City data for `--fleet world` (repeatable).
    #[arg(long)]
    mmdb: Vec<PathBuf>,
    /// ASN data for `--fleet world` (repeatable).
    #[arg(long)]
    asn: Vec<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Client /24s sampled.
    #[arg(long, default_value_t = 100_000)]
    clients: usize,
    /// Rounds of load noise.
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// The distance policy's penalty per 1 000 km under `isp+distance`
    /// (default: the product default); for sensitivity runs.
    #[arg(long)]
    distance_per_1000km: Option<f64>,
    /// The distance policy's cap under `isp+distance` (default: the product default).
    #[arg(long)]
    distance_max_penalty: Option<i64>,
    /// Where the CSV files go.
    #[arg(long, default_value = "target/simulate")]
    out: PathBuf,
    /// Steering by latency instead: `geo` and `latency` side by side on a
    /// latency model of the sparse fleet (`latency.csv`).
    #[arg(long)]
    latency: bool,
}

struct Client {
    addr: Ipv4Addr,
    loc: Location,
    coords: Option<(f64, f64)>,
}

struct Fleet {
    name: &'static str,
    nodes: Vec<Node>,
}

fn node(name: String, country: &str, province: &str, city: &str, isp: &str, ip: u32, rng: &mut StdRng) -> Node {
    let mut n = Node::new(name);
    n.country = country.into();
    n.province = province.into();
    n.city = city.into();
    n.isp = isp.into();
    n.weight = 100;
    n.cpu_usage = rng.gen_range(10.0..60.0);
    n.memory_usage = rng.gen_range(10.0..60.0);
    n.public_ip = Some(Ipv4Addr::from(0xC612_0000 + ip)); // 198.18.0.0/15
    n
}

fn fleets(which: &str, rng: &mut StdRng) -> anyhow::Result<Vec<Fleet>> {
    let mut out = Vec::new();
    if which == "dense" || which == "both" {
        let mut nodes = Vec::new();
        for (p, c) in PROVINCES {
            for isp in CARRIERS {
                let i = nodes.len() as u32;
                nodes.push(node(format!("{c}-{isp}"), "CN", p, c, isp, i, rng));
            }
        }
        for (name, country, province, city) in
            [("hk", "HK", "香港", "香港"), ("us", "US", "", ""), ("jp", "JP", "", ""), ("sg", "SG", "", "")]
        {
            let i = nodes.len() as u32;
            nodes.push(node(name.to_string(), country, province, city, "BGP", i, rng));
        }
        out.push(Fleet { name: "dense", nodes });
    }
    if which == "sparse" || which == "both" {
        let mut nodes = Vec::new();
        for (p, c) in SPARSE {
            for isp in CARRIERS {
                let i = nodes.len() as u32;
                nodes.push(node(format!("{c}-{isp}"), "CN", p, c, isp, i, rng));
            }
        }
        out.push(Fleet { name: "sparse", nodes });
    }
    if out.is_empty() {
        bail!("--fleet must be dense, sparse or both, not {which:?}");
    }
    Ok(out)
}

/// `edge A` with ECS for a client /24.
fn ecs_query(addr: Ipv4Addr, id: u16) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
    for label in ZONE.split('.') {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.extend_from_slice(&[0, 0, 1, 0, 1]);
    m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 11, 0, 8, 0, 7, 0, 1, 24, 0]);
    m.extend_from_slice(&addr.octets()[..3]);
    m
}

/// The primary node each client is answered, through `dns::answer`.
fn answers(table: &RouteTable, clients: &[Client], dns: &DnsSettings) -> Vec<Option<String>> {
    let source = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 53)); // a resolver; ECS carries the client
    clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let bytes = ecs_query(c.addr, i as u16);
            let r = answer(&bytes, &AnswerContext::new(table, dns, source, Transport::Udp, 0));
            r.client.and_then(|ci| ci.node)
        })
        .collect()
}

fn build(
    nodes: &[Node],
    settings: &ScheduleSettings,
    partitions: &PartitionTable,
    state: &mut BuildState,
    v: u64,
) -> RouteTable {
    let zone = Zone::new(ZONE);
    let domains = vec![Domain {
        name: ZONE.into(),
        zone: ZONE.into(),
        pool: DEFAULT_POOL.into(),
        ttl: None,
        origin_ip: None,
        answer_mode: Default::default(),
        ecs: true,
        steering: Default::default(),
        strategy: Default::default(),
    }];
    let inputs =
        Inputs { nodes: nodes.to_vec(), zones: vec![zone], domains, now_ms: 1_700_000_000_000, ..Inputs::default() };
    build_route_table(v, &inputs, partitions, settings, &settings.policy(), state, &Change::Everything)
}

#[derive(Default)]
struct Report {
    fleet: &'static str,
    policy: &'static str,
    clients: usize,
    same_province: f64,
    same_carrier: f64,
    cross_carrier: f64,
    same_carrier_when_eligible: f64,
    within_10pct: f64,
    /// Of the clients measured for distance, the share answered farther than
    /// 1.1× the nearest same-carrier node by a node of their own province
    /// while the nearest is in another (the province term decided) ...
    farther_province_term: f64,
    /// ... and the share answered farther otherwise: load and weight
    /// outweighed the distance term (capped at `max_penalty`).
    farther_load_term: f64,
    noise_changed_clients: usize,
    noise_changes: usize,
    failed_node: String,
    failed_clients: usize,
    failed_to_next_best: f64,
    others_moved: usize,
}

/// The widths of the [`Report::shares`] columns in the printed table.
const SHARE_WIDTHS: [usize; 7] = [7, 7, 7, 9, 9, 7, 7];

impl Report {
    /// The percentages, in column order: same province, same carrier, cross
    /// carrier, same carrier when eligible, within 10%, farther by the
    /// province term, farther by the load term.
    fn shares(&self) -> [f64; 7] {
        [
            self.same_province,
            self.same_carrier,
            self.cross_carrier,
            self.same_carrier_when_eligible,
            self.within_10pct,
            self.farther_province_term,
            self.farther_load_term,
        ]
    }
}

fn pct(n: usize, d: usize) -> f64 {
    if d == 0 { 0.0 } else { 100.0 * n as f64 / d as f64 }
}

fn run_one(
    fleet: &Fleet,
    policy: &'static str,
    settings: ScheduleSettings,
    clients: &[Client],
    partitions: &PartitionTable,
    rounds: usize,
    seed: u64,
) -> Report {
    let dns = DnsSettings::default();
    let by_name: HashMap<&str, &Node> = fleet.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let node_coords: HashMap<&str, Option<(f64, f64)>> = fleet
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), coordinates(&Location::new(&n.country, &n.province, &n.city, &n.isp))))
        .collect();
    let mut state = BuildState::default();
    let base_table = build(&fleet.nodes, &settings, partitions, &mut state, 1);
    let base = answers(&base_table, clients, &dns);

    let mut r = Report { fleet: fleet.name, policy, clients: clients.len(), ..Report::default() };
    let (mut sp, mut sc, mut cc, mut eligible, mut sc_el, mut dist_n, mut within) = (0, 0, 0, 0, 0, 0, 0);
    let (mut far_province, mut far_load) = (0, 0);
    for (c, a) in clients.iter().zip(&base) {
        let Some(n) = a.as_deref().and_then(|a| by_name.get(a)) else { continue };
        sp += usize::from(n.province == c.loc.province);
        sc += usize::from(n.isp == c.loc.isp);
        cc += usize::from(n.isp != c.loc.isp);
        let same: Vec<&Node> = fleet.nodes.iter().filter(|m| m.isp == c.loc.isp).collect();
        if !same.is_empty() {
            eligible += 1;
            sc_el += usize::from(n.isp == c.loc.isp);
            if let Some(cc_) = c.coords {
                let nearest = same
                    .iter()
                    .filter_map(|m| node_coords[m.name.as_str()].map(|p| (haversine_km(cc_, p), *m)))
                    .min_by(|a, b| a.0.total_cmp(&b.0));
                if let (Some(p), Some((nearest, closest))) = (node_coords[n.name.as_str()], nearest) {
                    dist_n += 1;
                    let near = n.isp == c.loc.isp && haversine_km(cc_, p) <= nearest * 1.1 + 1.0;
                    within += usize::from(near);
                    if !near && n.isp == c.loc.isp {
                        // The province term decided when it took the client to its own
                        // province although the nearest node is in another one; else
                        // load and weight outweighed the distance term.
                        let province = |m: &Node| Location::new(&m.country, &m.province, &m.city, &m.isp).province;
                        if province(n) == c.loc.province && province(closest) != c.loc.province {
                            far_province += 1;
                        } else {
                            far_load += 1;
                        }
                    }
                }
            }
        }
    }
    let answered = base.iter().filter(|a| a.is_some()).count();
    r.same_province = pct(sp, answered);
    r.same_carrier = pct(sc, answered);
    r.cross_carrier = pct(cc, answered);
    r.same_carrier_when_eligible = pct(sc_el, eligible);
    r.within_10pct = pct(within, dist_n);
    r.farther_province_term = pct(far_province, dist_n);
    r.farther_load_term = pct(far_load, dist_n);

    // ±10 % relative load noise, rounds in a row, the build state carried over
    // as the running scheduler carries it.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut changed = vec![false; clients.len()];
    let mut noisy = fleet.nodes.clone();
    for round in 0..rounds {
        for (n, orig) in noisy.iter_mut().zip(&fleet.nodes) {
            n.cpu_usage = (orig.cpu_usage * rng.gen_range(0.9..1.1)).clamp(0.0, 100.0);
            n.memory_usage = (orig.memory_usage * rng.gen_range(0.9..1.1)).clamp(0.0, 100.0);
        }
        let t = build(&noisy, &settings, partitions, &mut state, round as u64 + 2);
        for (i, a) in answers(&t, clients, &dns).into_iter().enumerate() {
            if a != base[i] {
                r.noise_changes += 1;
                changed[i] = true;
            }
        }
    }
    r.noise_changed_clients = changed.iter().filter(|c| **c).count();

    fail_busiest(fleet, &settings, clients, partitions, &dns, &base, &mut r);
    r
}

/// The busiest node fails: only its clients move, each to its next best.
fn fail_busiest(
    fleet: &Fleet,
    settings: &ScheduleSettings,
    clients: &[Client],
    partitions: &PartitionTable,
    dns: &DnsSettings,
    base: &[Option<String>],
    r: &mut Report,
) {
    let mut load: HashMap<&str, usize> = HashMap::new();
    for a in base.iter().flatten() {
        *load.entry(a.as_str()).or_default() += 1;
    }
    let Some((&busiest, &n_clients)) = load.iter().max_by_key(|(k, v)| (**v, std::cmp::Reverse(**k))) else { return };
    let backups = {
        let s = ScheduleSettings { answers_per_query: 2, ..settings.clone() };
        let t = build(&fleet.nodes, &s, partitions, &mut BuildState::default(), 1);
        clients
            .iter()
            .map(|c| {
                let (a, _) = t.scheduled(ZONE).expect("scheduled").answer_for(IpAddr::V4(c.addr));
                a.ipv4.get(1).copied()
            })
            .collect::<Vec<_>>()
    };
    let ip_to_name: HashMap<Ipv4Addr, &str> =
        fleet.nodes.iter().filter_map(|n| n.public_ip.map(|ip| (ip, n.name.as_str()))).collect();
    let mut failed = fleet.nodes.clone();
    failed.iter_mut().filter(|n| n.name == busiest).for_each(|n| n.status = NodeStatus::Offline);
    let t = build(&failed, settings, partitions, &mut BuildState::default(), 1);
    let after = answers(&t, clients, dns);
    let mut next_best = 0;
    for i in 0..clients.len() {
        if base[i].as_deref() == Some(busiest) {
            let want = backups[i].and_then(|ip| ip_to_name.get(&ip).copied());
            next_best += usize::from(after[i].as_deref() == want);
        } else if after[i] != base[i] {
            r.others_moved += 1;
        }
    }
    r.failed_node = busiest.to_string();
    r.failed_clients = n_clients;
    r.failed_to_next_best = pct(next_best, n_clients);
}

fn sample_clients(partitions: &PartitionTable, n: usize, seed: u64) -> Vec<Client> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    let mut tries = 0u64;
    while out.len() < n && tries < 200_000_000 {
        tries += 1;
        let addr = Ipv4Addr::from(rng.r#gen::<u32>() & 0xffff_ff00);
        if lagran::geo::reserved::is_special_v4(addr) {
            continue;
        }
        let loc = partitions.lookup(IpAddr::V4(addr)).location.clone();
        if loc.country != "CN" || loc.province.is_empty() || !CARRIERS.contains(&loc.isp.as_str()) {
            continue;
        }
        let coords = coordinates(&loc);
        out.push(Client { addr: Ipv4Addr::from(u32::from(addr) | 1), loc, coords });
    }
    out
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.fleet == "world" {
        return world::run(&a);
    }
    let geo = GeoDb::load(Some(&a.xdb), None);
    if geo.v4().is_none() {
        bail!("cannot load {} (run `cargo xtask setup`)", a.xdb.display());
    }
    let partitions = PartitionTable::build(&geo, &[]);
    let clients = sample_clients(&partitions, a.clients, a.seed);
    eprintln!("simulate: {} client /24s (seed {}), {} partitions", clients.len(), a.seed, partitions.locations().len());
    let mut rng = StdRng::seed_from_u64(a.seed);
    if a.latency {
        return simulate_latency(&a, &partitions, &clients, &mut rng);
    }
    let mut reports = Vec::new();
    for fleet in fleets(&a.fleet, &mut rng)? {
        let policies: [(&'static str, ScheduleSettings); 2] = [
            ("default", ScheduleSettings::default()),
            (
                "isp+distance",
                ScheduleSettings {
                    isp_must_match: true,
                    distance: Some(DistancePolicy {
                        per_1000km: a.distance_per_1000km.unwrap_or(DistancePolicy::default().per_1000km),
                        max_penalty: a.distance_max_penalty.unwrap_or(DistancePolicy::default().max_penalty),
                        ..DistancePolicy::default()
                    }),
                    ..ScheduleSettings::default()
                },
            ),
        ];
        for (policy, settings) in policies {
            eprintln!("simulate: {} fleet ({} nodes), {policy}", fleet.name, fleet.nodes.len());
            reports.push(run_one(&fleet, policy, settings, &clients, &partitions, a.rounds, a.seed));
        }
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let header = "fleet,policy,clients,same_province_pct,same_carrier_pct,cross_carrier_pct,same_carrier_when_eligible_pct,within_10pct_of_nearest_same_carrier_pct,farther_by_province_term_pct,farther_by_load_term_pct,noise_rounds,noise_changed_clients,noise_answer_changes,failed_node,failed_node_clients,failed_clients_to_next_best_pct,other_clients_moved";
    println!(
        "{:<7} {:<13} {:>8} {:>7} {:>7} {:>7} {:>9} {:>9} {:>7} {:>7} {:>8} {:>8} {:>9} {:>7}",
        "fleet",
        "policy",
        "clients",
        "same-P%",
        "same-C%",
        "cross%",
        "C|elig%",
        "≤1.1×d%",
        ">d,prov%",
        ">d,load%",
        "noise-cl",
        "noise-ch",
        "fail→2nd%",
        "others"
    );
    for r in &reports {
        let shares: String = r.shares().iter().zip(SHARE_WIDTHS).map(|(v, w)| format!(" {v:>w$.1}")).collect();
        println!(
            "{:<7} {:<13} {:>8}{shares} {:>8} {:>8} {:>9.1} {:>7}",
            r.fleet,
            r.policy,
            r.clients,
            r.noise_changed_clients,
            r.noise_changes,
            r.failed_to_next_best,
            r.others_moved
        );
    }
    for fleet in ["dense", "sparse"] {
        let rows: Vec<&Report> = reports.iter().filter(|r| r.fleet == fleet).collect();
        if rows.is_empty() {
            continue;
        }
        let mut csv = format!("{header}\n");
        for r in rows {
            let shares: String = r.shares().iter().map(|v| format!(",{v:.2}")).collect();
            csv.push_str(&format!(
                "{},{},{}{shares},{},{},{},{},{},{:.2},{}\n",
                r.fleet,
                r.policy,
                r.clients,
                a.rounds,
                r.noise_changed_clients,
                r.noise_changes,
                r.failed_node,
                r.failed_clients,
                r.failed_to_next_best,
                r.others_moved
            ));
        }
        let path = a.out.join(format!("{fleet}.csv"));
        std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("simulate: wrote {}", path.display());
    }
    Ok(())
}

/// `--latency`: the sparse fleet, with distance scoring on for both policies.
fn simulate_latency(a: &Args, partitions: &PartitionTable, clients: &[Client], rng: &mut StdRng) -> anyhow::Result<()> {
    let fleet = fleets("sparse", rng)?.remove(0);
    let params = latency::Params {
        seed: a.seed,
        period_secs: 30,
        noise_rounds: a.rounds,
        settings: ScheduleSettings { distance: Some(DistancePolicy::default()), ..ScheduleSettings::default() },
        steering: Default::default(),
    };
    let addrs: Vec<Ipv4Addr> = clients.iter().map(|c| c.addr).collect();
    let rows = latency::run(&fleet.nodes, &addrs, partitions, &params);
    print!("{}", latency::table(&rows));
    for miss in rows.iter().filter(|r| r.policy == "latency").flat_map(|r| r.misses(params.steering.window_secs as i64))
    {
        println!("latency misses a target: {miss}");
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let path = a.out.join("latency.csv");
    std::fs::write(&path, latency::csv(&rows)).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("simulate: wrote {}", path.display());
    Ok(())
}
