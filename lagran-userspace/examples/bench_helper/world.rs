//! `world`: the real ip2region file alone, then with the MaxMind City and ASN
//! files merged over it, side by side: load (and merge), geo lookup ns/op on
//! one fixed-seed address sample, the partition cut, the route table for the
//! demo nodes and for the world fleet (entries per family), and the kernel
//! maps after a sync from empty (time, trie entries, memory).
//!
//! Every key is printed as `RESULT <data>_<what> <value>` with `<data>` `ip2r`
//! (the ip2region file alone) or `world` (ip2region + MaxMind + ASN).

mod maps;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use lagran::config::ScheduleSettings;
use lagran::engine::DistancePolicy;
use lagran::geo::world::{AsnCarriers, WorldData, merged_xdb};
use lagran::geo::{GeoDb, Sources, Xdb};
use lagran::model::{Node, Zone};
use lagran::partition::PartitionTable;
use lagran::route_table::RouteTable;
use lagran::scheduler::{BuildState, Change, Inputs, build_route_table};
use rand::SeedableRng as _;
use rand::rngs::StdRng;

use crate::result;

#[derive(clap::Args)]
pub struct Args {
    /// The real ip2region file.
    #[arg(long)]
    xdb: PathBuf,
    /// MaxMind DB files (GEOIP_MMDB_PATH); repeat for IPv4 and IPv6.
    #[arg(long, required = true)]
    mmdb: Vec<PathBuf>,
    /// ASN files (GEOIP_ASN_PATH); repeat for IPv4 and IPv6.
    #[arg(long, required = true)]
    asn: Vec<PathBuf>,
    /// Lookups timed per data set and family.
    #[arg(long, default_value_t = 2_000_000)]
    lookups: usize,
    /// Seed of the world fleet's loads.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Skip the kernel maps (no BPF object, no root).
    #[arg(long)]
    no_kernel: bool,
}

/// One data set's geo data and what building from it took.
struct DataSet {
    label: &'static str,
    geo: GeoDb,
    load: Duration,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ip2r = load_ip2region(&a)?;
    let world = load_world(&a)?;
    let mut kernel = if a.no_kernel { None } else { Some(maps::Kernel::load()?) };
    for set in [&ip2r, &world] {
        lookups(set, &a);
        let t = Instant::now();
        let partitions = PartitionTable::build(&set.geo, &[]);
        let cut = t.elapsed();
        let l = set.label;
        result(&format!("{l}_partitions"), partitions.locations().len());
        result(&format!("{l}_partition_ranges_v4"), partitions.v4_ranges().len());
        result(&format!("{l}_partition_ranges_v6"), partitions.v6_ranges().len());
        result(&format!("{l}_partitions_build_ms"), ms(cut));
        for fleet in Fleet::ALL {
            let key = format!("{l}_{}", fleet.label());
            let (table, route) = route_table(&partitions, fleet, a.seed, &key)?;
            let sync = match kernel.as_mut() {
                Some(k) => k.measure(&key, &table)?,
                None => Duration::ZERO,
            };
            if fleet == Fleet::World {
                // What a daemon starting on this data spends before its maps answer.
                result(&format!("{l}_full_load_ms"), ms(set.load + cut + route + sync));
            }
        }
    }
    if let Some(k) = kernel.as_mut() {
        k.drain()?;
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// The ip2region file alone, as today's figures load it.
fn load_ip2region(a: &Args) -> anyhow::Result<DataSet> {
    let t = Instant::now();
    let xdb = Xdb::open(&a.xdb).with_context(|| format!("opening {}", a.xdb.display()))?;
    let load = t.elapsed();
    result("ip2r_load_ms", ms(load));
    let geo = GeoDb::from_xdbs(Some(xdb), None);
    segments("ip2r", &geo);
    Ok(DataSet { label: "ip2r", geo, load })
}

/// The same file with the MaxMind City and ASN data merged over it, step by
/// step as `GeoDb::try_load_sources` does (read, then one merge per family).
fn load_world(a: &Args) -> anyhow::Result<DataSet> {
    let sources = Sources { v4: Some(a.xdb.clone()), mmdb: a.mmdb.clone(), asn: a.asn.clone(), ..Sources::default() };
    let t = Instant::now();
    let base = Xdb::open(&a.xdb).with_context(|| format!("opening {}", a.xdb.display()))?;
    let world = WorldData::load(&sources.mmdb, &sources.asn).context("reading the MaxMind and ASN files")?;
    let read = t.elapsed();
    let carriers = AsnCarriers::new(&sources.operator_carriers());
    let v4 = merged_xdb(Some(&base), &world, &carriers, false).context("merging IPv4")?;
    let merged_v4 = t.elapsed() - read;
    let v6 = merged_xdb(None, &world, &carriers, true).context("merging IPv6")?;
    let load = t.elapsed();
    result("world_read_ms", ms(read));
    result("world_merge_v4_ms", ms(merged_v4));
    result("world_merge_v6_ms", ms(load - read - merged_v4));
    result("world_load_ms", ms(load));
    result("world_city_ranges", world.city.v4.len() + world.city.v6.len());
    result("world_asn_ranges", world.asn.v4.len() + world.asn.v6.len());
    let geo = GeoDb::from_xdbs(v4, v6).with_sources(sources);
    segments("world", &geo);
    Ok(DataSet { label: "world", geo, load })
}

/// Segments and bytes of each family's (merged) xdb: the geo data a daemon holds.
fn segments(label: &str, geo: &GeoDb) {
    result(&format!("{label}_segments_v4"), geo.v4().map_or(0, Xdb::len));
    result(&format!("{label}_segments_v6"), geo.v6().map_or(0, Xdb::len));
    let bytes = geo.v4().map_or(0, Xdb::byte_len) + geo.v6().map_or(0, Xdb::byte_len);
    result(&format!("{label}_xdb_bytes"), bytes);
}

/// ns per lookup: IPv4 on the same uniform fixed-seed addresses for both data
/// sets (`geo::bench`), IPv6 on addresses drawn from the file's segments.
fn lookups(set: &DataSet, a: &Args) {
    if let Some(x) = set.geo.v4() {
        result(&format!("{}_lookup_v4_ns", set.label), lagran::geo::bench::bench_lookup(x, a.lookups).as_nanos());
    }
    if let Some(x) = set.geo.v6() {
        result(&format!("{}_lookup_v6_ns", set.label), lagran::geo::bench::bench_lookup(x, a.lookups).as_nanos());
    }
}

/// The nodes a route table is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fleet {
    /// The demo's three nodes, as today's table figures use.
    Demo,
    /// About forty PoPs on six continents plus the Chinese carriers' nodes,
    /// `[schedule.distance]` at its defaults (`cargo xtask simulate --fleet world`).
    World,
}

impl Fleet {
    const ALL: [Fleet; 2] = [Fleet::Demo, Fleet::World];

    fn label(self) -> &'static str {
        match self {
            Fleet::Demo => "demo",
            Fleet::World => "fleet",
        }
    }

    fn nodes(self, seed: u64) -> (Vec<Node>, Zone, ScheduleSettings) {
        match self {
            Fleet::Demo => (lagran::demo::demo_nodes(), lagran::demo::demo_zone(), ScheduleSettings::default()),
            Fleet::World => (
                lagran::world_fleet::fleet(&mut StdRng::seed_from_u64(seed)),
                Zone::new(lagran::world_fleet::ZONE),
                ScheduleSettings { distance: Some(DistancePolicy::default()), ..ScheduleSettings::default() },
            ),
        }
    }
}

/// The route table of `fleet` on `partitions`, built once from nothing; its
/// build time, the apex's entries per family and its distinct answers printed
/// under `key`.
fn route_table(
    partitions: &PartitionTable,
    fleet: Fleet,
    seed: u64,
    key: &str,
) -> anyhow::Result<(RouteTable, Duration)> {
    let (nodes, zone, settings) = fleet.nodes(seed);
    let apex = zone.name.clone();
    let inputs = Inputs { nodes, zones: vec![zone], now_ms: 1_700_000_000_000, ..Inputs::default() };
    let policy = settings.policy();
    let t = Instant::now();
    let table =
        build_route_table(1, &inputs, partitions, &settings, &policy, &mut BuildState::default(), &Change::Everything);
    let build = t.elapsed();
    let name = table.scheduled(&apex).with_context(|| format!("{apex} is not scheduled"))?;
    result(&format!("{key}_nodes"), inputs.nodes.len());
    result(&format!("{key}_route_build_ms"), ms(build));
    result(&format!("{key}_routes_v4"), name.v4.len());
    result(&format!("{key}_routes_v6"), name.v6.len());
    result(&format!("{key}_answers"), name.answers.len());
    Ok((table, build))
}
