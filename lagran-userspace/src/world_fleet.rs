//! The world fleet simulation behind `cargo xtask simulate --fleet world`: about
//! forty PoPs on six continents plus the Chinese carriers' nodes, client /24s
//! sampled from the merged geo data (ip2region, MaxMind City, ASN), answered by
//! route tables the real scheduler compiles; the share of clients answered
//! within 10 % of the nearest eligible node by great-circle distance.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::location::Location;
use crate::location::coords::{coordinates, haversine_km};
use crate::model::{Node, Zone};
use crate::partition::PartitionTable;
use crate::scheduler::settings::ScheduleSettings;
use crate::scheduler::{BuildState, Change, Inputs, build_route_table};

/// The zone the simulated clients query.
pub const ZONE: &str = "world.sim.lagran.net";

/// The PoPs outside mainland China: (name, ISO country, city as the shipped
/// coordinate table spells it).
const POPS: [(&str, &str, &str); 41] = [
    ("fra", "DE", "Frankfurt"),
    ("lhr", "GB", "London"),
    ("ams", "NL", "Amsterdam"),
    ("cdg", "FR", "Paris"),
    ("mad", "ES", "Madrid"),
    ("mxp", "IT", "Milan"),
    ("arn", "SE", "Stockholm"),
    ("waw", "PL", "Warsaw"),
    ("ist", "TR", "Istanbul"),
    ("dxb", "AE", "Dubai"),
    ("bom", "IN", "Mumbai"),
    ("maa", "IN", "Chennai"),
    ("del", "IN", "New Delhi"),
    ("sin", "SG", "Singapore"),
    ("cgk", "ID", "Jakarta"),
    ("bkk", "TH", "Bangkok"),
    ("nrt", "JP", "Tokyo"),
    ("kix", "JP", "Osaka"),
    ("icn", "KR", "Seoul"),
    ("tpe", "TW", "Taipei"),
    ("hkg", "HK", "香港"),
    ("syd", "AU", "Sydney"),
    ("mel", "AU", "Melbourne"),
    ("per", "AU", "Perth"),
    ("akl", "NZ", "Auckland"),
    ("iad", "US", "Ashburn"),
    ("jfk", "US", "New York"),
    ("mia", "US", "Miami"),
    ("ord", "US", "Chicago"),
    ("dfw", "US", "Dallas"),
    ("den", "US", "Denver"),
    ("sea", "US", "Seattle"),
    ("sjc", "US", "San Jose"),
    ("lax", "US", "Los Angeles"),
    ("yyz", "CA", "Toronto"),
    ("mex", "MX", "Mexico City"),
    ("gru", "BR", "São Paulo"),
    ("eze", "AR", "Buenos Aires"),
    ("scl", "CL", "Santiago"),
    ("jnb", "ZA", "Johannesburg"),
    ("los", "NG", "Lagos"),
];

/// The Chinese carriers' nodes: these cities × 电信, 联通, 移动.
const CHINA: [(&str, &str); 6] =
    [("北京", "北京"), ("上海", "上海"), ("广东", "广州"), ("四川", "成都"), ("湖北", "武汉"), ("陕西", "西安")];
const CARRIERS: [&str; 3] = ["电信", "联通", "移动"];

/// A PoP's carrier name: a transit mix that matches no client's carrier.
const BGP: &str = "BGP";

/// The fleet, loads drawn from `rng` (10–60 % CPU and memory, weight 100).
pub fn fleet(rng: &mut StdRng) -> Vec<Node> {
    let mut nodes = Vec::new();
    let mut push = |name: String, country: &str, province: &str, city: &str, isp: &str, rng: &mut StdRng| {
        let i = nodes.len() as u32;
        let mut n = Node::new(name);
        (n.country, n.province, n.city, n.isp) = (country.into(), province.into(), city.into(), isp.into());
        n.weight = 100;
        n.cpu_usage = rng.gen_range(10.0..60.0);
        n.memory_usage = rng.gen_range(10.0..60.0);
        n.public_ip = Some(Ipv4Addr::from(0xC612_0000 + i)); // 198.18.0.0/15
        nodes.push(n);
    };
    for (name, country, city) in POPS {
        push(format!("{name}-01"), country, "", city, BGP, rng);
    }
    for (province, city) in CHINA {
        for isp in CARRIERS {
            push(format!("{city}-{isp}"), "CN", province, city, isp, rng);
        }
    }
    nodes
}

/// A sampled client /24: its address, where the data places it, its coordinates.
#[derive(Clone, Debug)]
pub struct Client {
    pub addr: Ipv4Addr,
    pub location: Location,
    pub coords: (f64, f64),
}

/// `n` client /24s drawn uniformly from the public IPv4 space (so each country
/// weighs what its address space weighs), keeping those the data places with
/// coordinates.
pub fn sample_clients(partitions: &PartitionTable, n: usize, seed: u64) -> Vec<Client> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n.saturating_mul(200) {
        if out.len() == n {
            break;
        }
        let addr = Ipv4Addr::from(rng.r#gen::<u32>() & 0xffff_ff00);
        if crate::geo::reserved::is_special_v4(addr) {
            continue;
        }
        let location = partitions.lookup(IpAddr::V4(addr)).location.clone();
        if location.country.is_empty() {
            continue;
        }
        if let Some(coords) = coordinates(&location) {
            out.push(Client { addr: Ipv4Addr::from(u32::from(addr) | 1), location, coords });
        }
    }
    out
}

/// What the simulation measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub nodes: usize,
    pub clients: usize,
    /// Clients answered by an eligible node within 10 % (plus 1 km) of the
    /// nearest eligible node's great-circle distance.
    pub within_10pct: usize,
    /// Clients on a Chinese carrier the fleet has nodes of.
    pub carrier_clients: usize,
    /// The farthest misses: (client, its place, answered node, km, nearest node, km).
    pub worst: Vec<(Ipv4Addr, String, String, f64, String, f64)>,
}

impl Report {
    /// The share within 10 %, in percent.
    pub fn within_pct(&self) -> f64 {
        if self.clients == 0 { 0.0 } else { 100.0 * self.within_10pct as f64 / self.clients as f64 }
    }
}

/// The nodes eligible for a client: those of its carrier when the fleet has
/// any (the same-ISP term keeps a carrier's clients on its network), else all.
fn eligible<'a>(nodes: &'a [(Node, (f64, f64))], client: &Location) -> Vec<&'a (Node, (f64, f64))> {
    let same: Vec<_> = nodes.iter().filter(|(n, _)| n.isp == client.isp).collect();
    if same.is_empty() { nodes.iter().collect() } else { same }
}

/// Compiles the fleet's route table under `settings` and measures each
/// client's answer against the nearest eligible node.
pub fn simulate(
    nodes: &[Node],
    clients: &[Client],
    partitions: &PartitionTable,
    settings: &ScheduleSettings,
) -> Report {
    let inputs =
        Inputs { nodes: nodes.to_vec(), zones: vec![Zone::new(ZONE)], now_ms: 1_700_000_000_000, ..Default::default() };
    let policy = settings.policy();
    let table =
        build_route_table(1, &inputs, partitions, settings, &policy, &mut BuildState::default(), &Change::Everything);
    let placed: Vec<(Node, (f64, f64))> = nodes
        .iter()
        .filter_map(|n| {
            let loc = Location::new(&n.country, &n.province, &n.city, &n.isp);
            Some((n.clone(), coordinates(&loc)?))
        })
        .collect();
    let by_name: HashMap<&str, &(Node, (f64, f64))> = placed.iter().map(|p| (p.0.name.as_str(), p)).collect();
    let scheduled = table.scheduled(ZONE).expect("the zone is scheduled");
    let mut r = Report { nodes: nodes.len(), clients: clients.len(), ..Report::default() };
    let mut misses = Vec::new();
    for c in clients {
        let pool = eligible(&placed, &c.location);
        r.carrier_clients += usize::from(pool.len() < placed.len());
        let Some((nearest, nearest_km)) =
            pool.iter().map(|(n, p)| (n, haversine_km(c.coords, *p))).min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            continue;
        };
        let answered = scheduled.answer_for(IpAddr::V4(c.addr)).0.node.as_deref().and_then(|a| by_name.get(a));
        let km = answered.map_or(f64::INFINITY, |(_, p)| haversine_km(c.coords, *p));
        let is_eligible = answered.is_some_and(|(n, _)| pool.iter().any(|(m, _)| m.name == n.name));
        if is_eligible && km <= nearest_km * 1.1 + 1.0 {
            r.within_10pct += 1;
        } else {
            let name = answered.map_or("-".to_string(), |(n, _)| n.name.clone());
            let place =
                format!("{}/{}/{}/{}", c.location.country, c.location.province, c.location.city, c.location.isp);
            misses.push((c.addr, place, name, km, nearest.name.clone(), nearest_km));
        }
    }
    misses.sort_by(|a, b| (b.3 - b.5).total_cmp(&(a.3 - a.5)));
    misses.truncate(10);
    r.worst = misses;
    r
}
