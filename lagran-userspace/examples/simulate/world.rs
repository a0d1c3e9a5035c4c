//! `--fleet world`: about forty PoPs on six continents plus the Chinese
//! carriers' nodes ([`lagran::world_fleet`]), client /24s sampled from the
//! merged ip2region, MaxMind City and ASN data, `[schedule.distance]` at its
//! defaults. Prints the share of clients within 10 % of the nearest eligible
//! node by great-circle distance and writes `world.csv`.

use std::path::Path;

use anyhow::{Context, bail};
use lagran::config::ScheduleSettings;
use lagran::engine::DistancePolicy;
use lagran::geo::{GeoDb, Sources};
use lagran::partition::PartitionTable;
use lagran::world_fleet::{fleet, sample_clients, simulate};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::Args;

pub fn run(a: &Args) -> anyhow::Result<()> {
    if a.mmdb.is_empty() || a.asn.is_empty() {
        bail!("--fleet world needs --mmdb and --asn (the files `cargo xtask setup` fetches into data/)");
    }
    let sources = Sources { v4: Some(a.xdb.clone()), mmdb: a.mmdb.clone(), asn: a.asn.clone(), ..Sources::default() };
    let geo = GeoDb::try_load_sources(&sources).context("loading the world data")?;
    let partitions = PartitionTable::build(&geo, &[]);
    let clients = sample_clients(&partitions, a.clients, a.seed);
    let nodes = fleet(&mut StdRng::seed_from_u64(a.seed));
    let settings = ScheduleSettings { distance: Some(DistancePolicy::default()), ..ScheduleSettings::default() };
    eprintln!("simulate: world fleet ({} nodes), {} client /24s (seed {})", nodes.len(), clients.len(), a.seed);
    let r = simulate(&nodes, &clients, &partitions, &settings);
    println!("{:<7} {:<9} {:>6} {:>8} {:>8}", "fleet", "policy", "nodes", "clients", "≤1.1×d%");
    println!("{:<7} {:<9} {:>6} {:>8} {:>8.1}", "world", "distance", r.nodes, r.clients, r.within_pct());
    for (addr, place, node, km, nearest, nearest_km) in &r.worst {
        println!("  miss: {addr} {place}: {node} at {km:.0} km, nearest {nearest} at {nearest_km:.0} km");
    }
    write_csv(&a.out, a.seed, &r)
}

fn write_csv(out: &Path, seed: u64, r: &lagran::world_fleet::Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let csv = format!(
        "fleet,policy,seed,nodes,clients,carrier_clients,within_10pct_of_nearest_eligible_pct\n\
         world,distance,{seed},{},{},{},{:.2}\n",
        r.nodes,
        r.clients,
        r.carrier_clients,
        r.within_pct()
    );
    let path = out.join("world.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("simulate: wrote {}", path.display());
    Ok(())
}
