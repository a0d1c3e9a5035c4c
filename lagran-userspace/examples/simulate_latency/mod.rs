//! `simulate --latency`: the `geo` and `latency` steering policies side by
//! side, on a latency model ([`model`]) of the fleet.
//!
//! Every report period each client partition's edge reports the round trip
//! of the connections it served (the answered node; `TCP_INFO` as
//! `lagran-edge` reads it) and the partition's RUM beacons time the three
//! candidates the control plane names (the geo ranking's first three), each
//! report off by up to ±10 % (measurement noise). The reports go into the
//! real measurement matrix ([`Matrix`]); the real scheduler
//! (`build_route_table`, its build state carried from period to period as
//! the running scheduler carries it) compiles the table, and each partition
//! is answered what the table answers its clients.
//!
//! After a warm-up of one window and two periods, `noise_rounds` periods
//! count answer changes; the steady-state RTTs are compared with the
//! oracle's (the node with the lowest true RTT, among every node). Then a
//! link congests (the latency policy's busiest node, for its commonest
//! carrier, +80 ms) and, after it clears, a node degrades (the next
//! busiest, +40 ms for everyone): each reports how long until the last
//! client that should leave (its node worse than the best of its measured
//! nodes by more than the stabilize band) had left.

mod model;
mod report;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use lagran::config::ScheduleSettings;
use lagran::location::Location;
use lagran::model::{DEFAULT_POOL, Domain, Node, Steering, Zone};
use lagran::partition::PartitionTable;
use lagran::route_table::RouteTable;
use lagran::scheduler::{BuildState, Change, Inputs, build_route_table};
use lagran::steering::LatencyView;
use lagran::steering::estimate::{Report, Source};
use lagran::steering::matrix::Matrix;
use lagran::steering::settings::SteeringSettings;
use model::{Model, Place};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
pub use report::{Row, csv, table};

const ZONE: &str = "sim.lagran.net";
/// An edge's report for one partition per period: its connections' samples.
const EDGE_SAMPLES: u32 = 20;
/// A beacon's timings of one candidate per period.
const RUM_SAMPLES: u32 = 3;
/// The RUM beacon's candidates.
const CANDIDATES: u8 = 3;
const CONGESTION_MS: f64 = 80.0;
const DEGRADATION_MS: f64 = 40.0;
const START_MS: i64 = 1_700_000_000_000;

/// How a run goes.
#[derive(Clone, Debug)]
pub struct Params {
    pub seed: u64,
    /// How often the edges report, in seconds.
    pub period_secs: i64,
    /// Periods of steady state under noise.
    pub noise_rounds: usize,
    pub settings: ScheduleSettings,
    pub steering: SteeringSettings,
}

/// One client partition: a client address in it, its place, its clients.
struct Partition {
    addr: Ipv4Addr,
    location: Location,
    place: Place,
    clients: usize,
}

/// Groups `clients` by partition.
fn partitions_of(clients: &[Ipv4Addr], table: &PartitionTable) -> Vec<Partition> {
    let mut by_id: HashMap<u32, Partition> = HashMap::new();
    for &addr in clients {
        let hit = table.lookup(IpAddr::V4(addr));
        by_id
            .entry(hit.id)
            .or_insert_with(|| Partition {
                addr,
                location: hit.location.clone(),
                place: Place::of(hit.location),
                clients: 0,
            })
            .clients += 1;
    }
    let mut out: Vec<(u32, Partition)> = by_id.into_iter().collect();
    out.sort_by_key(|(id, _)| *id);
    out.into_iter().map(|(_, p)| p).collect()
}

/// The simulation's state between periods.
struct Sim<'a> {
    nodes: &'a [Node],
    by_ip: HashMap<Ipv4Addr, usize>,
    parts: Vec<Partition>,
    table: &'a PartitionTable,
    model: Model,
    params: &'a Params,
    matrix: Matrix,
    state: BuildState,
    now_ms: i64,
    version: u64,
    rng: StdRng,
    candidates: Vec<Vec<usize>>,
    served: Vec<Option<usize>>,
}

impl<'a> Sim<'a> {
    fn new(nodes: &'a [Node], clients: &[Ipv4Addr], table: &'a PartitionTable, params: &'a Params) -> Sim<'a> {
        let mut sim = Sim {
            nodes,
            by_ip: nodes.iter().enumerate().filter_map(|(i, n)| Some((n.public_ip?, i))).collect(),
            parts: partitions_of(clients, table),
            table,
            model: Model::new(nodes),
            params,
            matrix: Matrix::default(),
            state: BuildState::default(),
            now_ms: START_MS,
            version: 0,
            rng: StdRng::seed_from_u64(params.seed ^ 0x1a7e),
            candidates: Vec::new(),
            served: Vec::new(),
        };
        let three = ScheduleSettings { answers_per_query: CANDIDATES, ..params.settings.clone() };
        let geo = sim.build(Steering::Geo, &three, LatencyView::default());
        sim.candidates = sim.answers(&geo, CANDIDATES as usize);
        sim
    }

    fn build(&mut self, steering: Steering, settings: &ScheduleSettings, view: LatencyView) -> RouteTable {
        let domains = vec![Domain {
            name: ZONE.into(),
            zone: ZONE.into(),
            pool: DEFAULT_POOL.into(),
            ttl: None,
            origin_ip: None,
            answer_mode: Default::default(),
            ecs: true,
            steering,
            strategy: Default::default(),
        }];
        let inputs = Inputs {
            nodes: self.nodes.to_vec(),
            zones: vec![Zone::new(ZONE)],
            domains,
            now_ms: self.now_ms,
            latency: Arc::new(view),
            ..Inputs::default()
        };
        self.version += 1;
        let policy = settings.policy();
        build_route_table(self.version, &inputs, self.table, settings, &policy, &mut self.state, &Change::Everything)
    }

    /// The first `n` nodes each partition is answered.
    fn answers(&self, t: &RouteTable, n: usize) -> Vec<Vec<usize>> {
        let name = t.scheduled(ZONE).expect("the simulated name is scheduled");
        self.parts
            .iter()
            .map(|p| {
                let (a, _) = name.answer_for(IpAddr::V4(p.addr));
                a.ipv4.iter().take(n).filter_map(|ip| self.by_ip.get(ip).copied()).collect()
            })
            .collect()
    }

    /// One report period: the reports in, then a latency build.
    fn period(&mut self) {
        self.now_ms += self.params.period_secs * 1_000;
        for (i, p) in self.parts.iter().enumerate() {
            let mut report = |node: usize, samples: u32, source: Source| {
                let rtt = self.model.rtt(&p.place, node) * self.rng.gen_range(0.9..1.1);
                let r = Report { at_ms: self.now_ms, rtt_ms: rtt as f32, samples, source };
                self.matrix.record(&p.location, &self.nodes[node].name, r);
            };
            if let Some(s) = self.served.get(i).copied().flatten() {
                report(s, EDGE_SAMPLES, Source::Edge);
            }
            for &c in &self.candidates[i] {
                report(c, RUM_SAMPLES, Source::Rum);
            }
        }
        let window = self.params.steering.window_ms();
        self.matrix.prune(self.now_ms, window);
        let view = LatencyView { rows: self.matrix.fresh(self.now_ms, window), settings: self.params.steering.clone() };
        let settings = self.params.settings.clone();
        let t = self.build(Steering::Latency, &settings, view);
        self.served = self.answers(&t, 1).into_iter().map(|a| a.first().copied()).collect();
    }

    fn rtt(&self, part: usize, node: Option<usize>) -> f64 {
        node.map_or(f64::NAN, |n| self.model.rtt(&self.parts[part].place, n))
    }

    /// The steady-state columns of `served`.
    fn steady(&self, policy: &'static str, served: &[Option<usize>]) -> Row {
        let (mut got, mut best, mut within, mut clients) = (Vec::new(), Vec::new(), 0, 0);
        for (i, p) in self.parts.iter().enumerate() {
            let (rtt, opt) = (self.rtt(i, served[i]), self.model.optimum(&p.place).1);
            got.push((rtt, p.clients));
            best.push((opt, p.clients));
            within += if rtt <= 1.1 * opt { p.clients } else { 0 };
            clients += p.clients;
        }
        let mean = |v: &[(f64, usize)]| v.iter().map(|(r, c)| r * *c as f64).sum::<f64>() / clients.max(1) as f64;
        Row {
            policy,
            clients,
            mean_ms: mean(&got),
            optimum_mean_ms: mean(&best),
            p95_ms: report::weighted_quantile(&mut got, 0.95),
            optimum_p95_ms: report::weighted_quantile(&mut best, 0.95),
            within_10pct: 100.0 * within as f64 / clients.max(1) as f64,
            ..Row::default()
        }
    }

    /// The partitions on `node` (under `served`) that should leave it: a
    /// measured node is better by more than the stabilize band.
    fn should_leave(&self, node: usize, served: &[Option<usize>]) -> Vec<usize> {
        let s = &self.params.steering;
        (0..self.parts.len())
            .filter(|&i| served[i] == Some(node))
            .filter(|&i| {
                let here = self.rtt(i, Some(node));
                let best = self.candidates[i].iter().map(|&c| self.rtt(i, Some(c))).fold(here, f64::min);
                here - best > s.stabilize_ms.max(s.stabilize_ratio * best)
            })
            .collect()
    }

    fn clients(&self, parts: &[usize]) -> usize {
        parts.iter().map(|&i| self.parts[i].clients).sum()
    }

    /// Periods until none of `parts` is on `node` any more, within two windows.
    fn time_to_leave(&mut self, node: usize, parts: &[usize]) -> Option<i64> {
        let limit = 2 * self.params.steering.window_ms() / 1_000 / self.params.period_secs;
        for k in 1..=limit {
            self.period();
            if parts.iter().all(|&i| self.served[i] != Some(node)) {
                return Some(k * self.params.period_secs);
            }
        }
        None
    }

    /// The node serving the most clients under `served`, other than `not`.
    fn busiest(&self, served: &[Option<usize>], not: Option<usize>) -> Option<usize> {
        let mut load = vec![0usize; self.nodes.len()];
        for (i, s) in served.iter().enumerate() {
            if let Some(n) = s.filter(|&n| Some(n) != not) {
                load[n] += self.parts[i].clients;
            }
        }
        (0..load.len()).filter(|&n| load[n] > 0).max_by_key(|&n| (load[n], std::cmp::Reverse(n)))
    }
}

/// Runs `geo` and `latency` on `nodes` for `clients`; returns their rows.
pub fn run(nodes: &[Node], clients: &[Ipv4Addr], table: &PartitionTable, params: &Params) -> Vec<Row> {
    let mut sim = Sim::new(nodes, clients, table, params);
    let geo_served: Vec<Option<usize>> = sim.candidates.iter().map(|c| c.first().copied()).collect();
    let warmup = params.steering.window_ms() / 1_000 / params.period_secs + 2;
    for _ in 0..warmup {
        sim.period();
    }
    let mut changes = 0;
    for _ in 0..params.noise_rounds {
        let before = sim.served.clone();
        sim.period();
        changes +=
            (0..before.len()).filter(|&i| before[i] != sim.served[i]).map(|i| sim.parts[i].clients).sum::<usize>();
    }
    let mut geo = Row { noise_rounds: params.noise_rounds, ..sim.steady("geo", &geo_served) };
    let mut latency =
        Row { noise_rounds: params.noise_rounds, noise_changes: changes, ..sim.steady("latency", &sim.served) };

    let Some(hot) = sim.busiest(&sim.served, None) else { return vec![geo, latency] };
    let carrier = busiest_carrier(&sim, hot);
    sim.model.congest(&carrier, hot, CONGESTION_MS);
    let (geo_leave, lat_leave) = (sim.should_leave(hot, &geo_served), sim.should_leave(hot, &sim.served.clone()));
    geo.congested_clients = sim.clients(&geo_leave);
    latency.congested_clients = sim.clients(&lat_leave);
    latency.congested_moved_secs = sim.time_to_leave(hot, &lat_leave);
    sim.model.congest(&carrier, hot, 0.0);
    for _ in 0..warmup {
        sim.period();
    }

    if let Some(slow) = sim.busiest(&sim.served, Some(hot)) {
        sim.model.degrade(slow, DEGRADATION_MS);
        let (geo_leave, lat_leave) = (sim.should_leave(slow, &geo_served), sim.should_leave(slow, &sim.served.clone()));
        geo.degraded_clients = sim.clients(&geo_leave);
        latency.degraded_clients = sim.clients(&lat_leave);
        latency.degraded_moved_secs = sim.time_to_leave(slow, &lat_leave);
    }
    vec![geo, latency]
}

/// The carrier of most of `node`'s clients under the latency policy.
fn busiest_carrier(sim: &Sim, node: usize) -> String {
    let mut by: HashMap<&str, usize> = HashMap::new();
    for (i, p) in sim.parts.iter().enumerate() {
        if sim.served[i] == Some(node) {
            *by.entry(p.place.isp.as_str()).or_default() += p.clients;
        }
    }
    by.into_iter().max_by_key(|(c, n)| (*n, std::cmp::Reverse(*c))).map(|(c, _)| c.to_string()).unwrap_or_default()
}
