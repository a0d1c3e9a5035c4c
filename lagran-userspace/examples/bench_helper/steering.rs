//! `steering`: what steering by measured latency costs the control plane.
//!
//! - **Ingest**: batches of 1 000 measurements (an edge's report, as JSON)
//!   through the per-entry work of `POST /api/v1/measurements` on one thread:
//!   decode, the checks the handler makes (node known, RTT and samples in
//!   range, source), the client subnet, its partition, and
//!   `steering::matrix::Matrix::record`. Not included: HTTP and the store
//!   write; `steering_ingest_stored_per_s` is the same batches through
//!   `Store::add_measurements` (SQLite in memory), the write the handler
//!   makes before it answers.
//! - **Recompute**: the recompute benchmark's fleet and partitions (1 000
//!   nodes, 5 000 partitions, 10 names, all steered by `latency`), every
//!   partition measured for 10 nodes: the build's view of the matrix (what
//!   `Measurements::view` does: prune, then every fresh row) and a full
//!   `build_route_table`, beside the same build under `geo`.
//! - **Memory**: `Matrix::memory_bytes` of the populated matrix (the row
//!   table's slots over its capacity, the keys' strings, each row's cells
//!   over its capacity and the node names; allocator overhead not counted).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use lagran::api::measurements::{Batch, MAX_RTT_MS, MAX_SAMPLES};
use lagran::config::ScheduleSettings;
use lagran::location::Location;
use lagran::model::{DEFAULT_POOL, Node, Steering, Zone};
use lagran::partition::{PartitionTable, UNKNOWN};
use lagran::scheduler::{BuildState, Change, Inputs, build_route_table};
use lagran::steering::LatencyView;
use lagran::steering::estimate::{Report, Source};
use lagran::steering::matrix::Matrix;
use lagran::steering::settings::SteeringSettings;
use lagran::steering::subnet::client_subnet;
use rand::{Rng as _, SeedableRng as _, rngs::StdRng};

use crate::result;
use crate::tables::{FleetSize, bench_domains, bench_fleet, now_ms, stats};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    size: FleetSize,
    /// Nodes measured per partition.
    #[arg(long, default_value_t = 10)]
    measured: usize,
    /// Measurements ingested for the rate.
    #[arg(long, default_value_t = 1_000_000)]
    ingest: usize,
    /// Measurements per batch.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Measurements written through the store (fewer: it is slower).
    #[arg(long, default_value_t = 20_000)]
    stored: usize,
    /// Timed builds per configuration (the median is reported).
    #[arg(long, default_value_t = 5)]
    builds: usize,
}

/// What the benchmark measures against: a /24 per partition, the nodes
/// measured for each, and the fleet.
struct World {
    partitions: PartitionTable,
    nodes: Vec<Node>,
    /// Per partition (by id): a client /24 inside it.
    subnets: Vec<Option<String>>,
}

impl World {
    fn build(a: &Args) -> anyhow::Result<World> {
        let (nodes, partitions) = bench_fleet(a.size.partitions, a.size.nodes, 35)?;
        let mut subnets = vec![None; partitions.locations().len()];
        for &(start, end, id) in partitions.v4_ranges() {
            let net = (start.saturating_add(255)) & !0xff;
            if id != UNKNOWN && subnets[id as usize].is_none() && net.saturating_add(255) <= end {
                subnets[id as usize] = Some(format!("{}/24", Ipv4Addr::from(net)));
            }
        }
        Ok(World { partitions, nodes, subnets })
    }

    /// The `k`-th node measured for partition `id`.
    fn measured_node(&self, id: usize, k: usize) -> &str {
        &self.nodes[(id * 7919 + k * 104_729) % self.nodes.len()].name
    }

    /// `count` measurements as JSON batches of `per_batch`, over every partition.
    fn batches(&self, count: usize, per_batch: usize, measured: usize, rng: &mut StdRng) -> Vec<Vec<u8>> {
        let located: Vec<usize> = (0..self.subnets.len()).filter(|&i| self.subnets[i].is_some()).collect();
        let mut out = Vec::new();
        let mut left = count;
        while left > 0 {
            let n = left.min(per_batch);
            left -= n;
            let entries: Vec<serde_json::Value> = (0..n)
                .map(|_| {
                    let id = located[rng.gen_range(0..located.len())];
                    serde_json::json!({
                        "client_subnet": self.subnets[id],
                        "node": self.measured_node(id, rng.gen_range(0..measured)),
                        "rtt_ms": rng.gen_range(5.0..200.0f64),
                        "samples": rng.gen_range(1..50u32),
                        "source": "edge",
                    })
                })
                .collect();
            out.push(serde_json::to_vec(&serde_json::json!({ "measurements": entries })).expect("JSON"));
        }
        out
    }
}

/// One batch as the API handler reads it, into `(location, node, report)`.
fn read_batch(
    body: &[u8],
    nodes: &HashSet<String>,
    partitions: &PartitionTable,
    now: i64,
    mut add: impl FnMut(&Location, &str, Report),
) -> anyhow::Result<usize> {
    let batch: Batch = serde_json::from_slice(body)?;
    let mut added = 0;
    for e in &batch.measurements {
        let valid = nodes.contains(&e.node)
            && e.rtt_ms.is_finite()
            && e.rtt_ms > 0.0
            && e.rtt_ms <= MAX_RTT_MS
            && (1..=MAX_SAMPLES).contains(&e.samples);
        if !valid {
            bail!("a generated entry was refused: {e:?}");
        }
        let source = match e.source.as_deref() {
            None => Source::Api,
            Some(s) => Source::ALL.into_iter().find(|x| x.as_str() == s).context("unknown source")?,
        };
        let net = client_subnet(&e.client_subnet)?;
        let hit = partitions.lookup(net.network());
        if hit.id == UNKNOWN {
            continue;
        }
        add(hit.location, &e.node, Report { at_ms: now, rtt_ms: e.rtt_ms as f32, samples: e.samples, source });
        added += 1;
    }
    Ok(added)
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let world = World::build(&a)?;
    let names: HashSet<String> = world.nodes.iter().map(|n| n.name.clone()).collect();
    let mut rng = StdRng::seed_from_u64(3535);
    let batches = world.batches(a.ingest, a.batch, a.measured, &mut rng);
    let now = now_ms();

    // Ingest, one thread.
    let mut matrix = Matrix::default();
    let t = Instant::now();
    let mut ingested = 0;
    for body in &batches {
        ingested += read_batch(body, &names, &world.partitions, now, |l, n, r| {
            matrix.record(l, n, r);
        })?;
    }
    let secs = t.elapsed().as_secs_f64();
    result("steering_ingest_measurements", ingested);
    result("steering_ingest_per_s", format!("{:.0}", ingested as f64 / secs));
    eprintln!("steering: {ingested} measurements in {} batches in {secs:.3} s", batches.len());
    stored_ingest(&a, &world, &names, &mut rng)?;

    // Every partition measured for `measured` nodes, fresh and above min_samples.
    let settings = SteeringSettings::default();
    for (id, location) in world.partitions.locations().iter().enumerate() {
        if world.subnets[id].is_none() {
            continue;
        }
        for k in 0..a.measured {
            for r in 0..3 {
                let report = Report {
                    at_ms: now - r * 1_000,
                    rtt_ms: 5.0 + (k * 7 % 90) as f32,
                    samples: 20,
                    source: Source::Edge,
                };
                matrix.record(location, world.measured_node(id, k), report);
            }
        }
    }
    result("steering_matrix_cells", matrix.cells());
    result("steering_matrix_bytes", matrix.memory_bytes());
    recompute(&a, &world, &mut matrix, settings, now)
}

/// The same batches through the store write the handler makes.
fn stored_ingest(a: &Args, world: &World, names: &HashSet<String>, rng: &mut StdRng) -> anyhow::Result<()> {
    if a.stored == 0 {
        return Ok(());
    }
    let batches = world.batches(a.stored, a.batch, a.measured, rng);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let store = lagran::store::Store::connect("sqlite::memory:").await?;
        let now = now_ms();
        let t = Instant::now();
        let mut n = 0;
        for body in &batches {
            let mut reports = Vec::new();
            read_batch(body, names, &world.partitions, now, |l, node, r| {
                reports.push((l.clone(), node.to_string(), r))
            })?;
            n += reports.len();
            store.add_measurements(&reports, now - 300_000).await?;
        }
        let secs = t.elapsed().as_secs_f64();
        result("steering_ingest_stored_per_s", format!("{:.0}", n as f64 / secs));
        eprintln!("steering: {n} measurements through the store (SQLite in memory) in {secs:.3} s");
        Ok::<(), anyhow::Error>(())
    })
}

/// Full builds with the matrix's view, steered by latency and by geo.
fn recompute(a: &Args, world: &World, matrix: &mut Matrix, settings: SteeringSettings, now: i64) -> anyhow::Result<()> {
    let zone = Zone::new("bench.lagran.net");
    let schedule = ScheduleSettings::default();
    let policy = schedule.policy();
    for steering in [Steering::Latency, Steering::Geo] {
        let mut domains = bench_domains(&zone, a.size.names, |_| DEFAULT_POOL.to_string());
        for d in &mut domains {
            d.steering = steering;
        }
        let mut inputs =
            Inputs { nodes: world.nodes.clone(), zones: vec![zone.clone()], domains, now_ms: now, ..Inputs::default() };
        let mut state = BuildState::default();
        let (mut views, mut builds) = (Vec::new(), Vec::new());
        let mut table = None;
        for v in 0..a.builds.max(1) as u64 {
            let t = Instant::now();
            matrix.prune(now, settings.window_ms());
            inputs.latency =
                Arc::new(LatencyView { rows: matrix.fresh(now, settings.window_ms()), settings: settings.clone() });
            views.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            table = Some(build_route_table(
                v + 1,
                &inputs,
                &world.partitions,
                &schedule,
                &policy,
                &mut state,
                &Change::Everything,
            ));
            builds.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let table = table.context("no build")?;
        let apex = table.scheduled(&zone.name).context("the apex is not scheduled")?;
        let steered = world
            .subnets
            .iter()
            .flatten()
            .filter(|s| {
                let ip: IpAddr = s.trim_end_matches("/24").parse().expect("a generated subnet");
                apex.answer_for(ip).0.reason == "lowest measured RTT"
            })
            .count();
        let located = world.subnets.iter().flatten().count();
        let (_, view) = stats(views.clone());
        let (_, build) = stats(builds.clone());
        match steering {
            Steering::Latency => {
                if steered * 2 < located {
                    bail!("only {steered} of {located} partitions were steered by latency");
                }
                result("steering_view_ms", format!("{view:.1}"));
                result("steering_recompute_ms", format!("{:.1}", view + build));
                result("steering_steered_partitions", steered);
            }
            Steering::Geo => result("steering_recompute_geo_ms", format!("{build:.1}")),
        }
        eprintln!(
            "steering: {} names by {}: view {views:?} ms, build {builds:?} ms; {steered} of {located} partitions by latency",
            a.size.names,
            steering.as_str()
        );
    }
    Ok(())
}
