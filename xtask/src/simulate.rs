//! `cargo xtask simulate`: scheduling quality at fleet scale.
//!
//! Builds the `simulate` example of lagran-userspace (release) and runs it on
//! the real ip2region xdb (`data/ip2region.xdb`, fetched by `cargo xtask
//! setup`): sampled real client /24s query through the responder's own
//! `answer()` against tables compiled by the real scheduler, for the `dense`
//! and `sparse` fleets under the default policy and `isp_must_match` with
//! distance scoring. Prints a table and writes `target/simulate/<fleet>.csv`.
//! `--fleet world` adds the MaxMind City and ASN files: a worldwide fleet.

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::util;

#[derive(Debug, Clone, clap::Parser)]
pub struct Options {
    /// `dense`, `sparse`, `both` or `world` (with the MaxMind City and ASN files).
    #[arg(long, default_value = "both")]
    pub fleet: String,
    /// The random seed (client sample, node loads, noise).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Client /24s sampled.
    #[arg(long, default_value_t = 100_000)]
    pub clients: usize,
    /// Rounds of ±10 % load noise.
    #[arg(long, default_value_t = 100)]
    pub rounds: usize,
    /// The distance penalty per 1 000 km under `isp+distance` (default: the
    /// product default), for sensitivity runs.
    #[arg(long)]
    pub distance_per_1000km: Option<f64>,
    /// `geo` and `latency` steering side by side on a latency model of the
    /// sparse fleet (`target/simulate/latency.csv`).
    #[arg(long)]
    pub latency: bool,
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    let root = util::workspace_root();
    let xdb = root.join("data/ip2region.xdb");
    if !xdb.is_file() {
        bail!("{} is missing: run `cargo xtask setup` (or scripts/fetch-geoip.sh)", xdb.display());
    }
    let mut build = Command::new("cargo");
    build.current_dir(&root).args(["build", "--release", "--package", "lagran-userspace", "--example", "simulate"]);
    util::run(&mut build)?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d));
    let mut sim = Command::new(target.join("release/examples/simulate"));
    sim.current_dir(&root)
        .arg("--xdb")
        .arg(&xdb)
        .args(["--fleet", &opts.fleet, "--seed", &opts.seed.to_string()])
        .args(["--clients", &opts.clients.to_string(), "--rounds", &opts.rounds.to_string()])
        .arg("--out")
        .arg(target.join("simulate"));
    if opts.fleet == "world" {
        crate::simulate_world::add_files(&root, &mut sim)?;
    }
    if opts.latency {
        sim.arg("--latency");
    }
    if let Some(d) = opts.distance_per_1000km {
        sim.args(["--distance-per-1000km", &d.to_string()]);
    }
    let status = sim.status().with_context(|| format!("running {}", util::display(&sim)))?;
    if !status.success() {
        bail!("{} failed: {status}", util::display(&sim));
    }
    Ok(())
}
