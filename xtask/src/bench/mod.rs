//! `cargo xtask bench`: the performance goals (QPS of the XDP path against the
//! userspace path and its peers, CPU per answered query, per-packet cost at
//! full table size, node change → map entry, ECS scopes, recompute times),
//! measured on this box, side by side, each with how it was measured; the
//! table goes to the terminal, `target/bench/latest.md` and `docs/bench-results.md`.
//!
//! 1. QPS of the XDP path vs the userspace path, same box, same generator: two
//!    network namespaces joined by a veth pair; `lagran serve --demo` (release
//!    build, real xdb) in the server namespace, first with `--xdp`, then
//!    restarted without; the generator in the client namespace. Generators:
//!    `gun` (bench_helper's AF_PACKET generator: `edge.lagran.net A` with ECS for
//!    4 096 real client /24s, no COOKIE), `kxdpgun` (knot-dnsutils; its 3.2 query
//!    file has no ECS, so EDNS without options and the lookup is by source
//!    address), or `dnsperf` (ECS queries in its binary format) when kxdpgun is
//!    missing. Each load run is bounded (`--duration` seconds, rate × duration
//!    queries); the rate steps up ×2 until fewer than 95 % are answered, then
//!    bisects; the highest rate answered at ≥ 95 % is reported. A peer
//!    authoritative server (`knotd`, Debian package `knot`) serving an
//!    equivalent static zone is measured beside it when installed.
//! 2. Node-state change → updated map entry: `PATCH /api/v1/nodes/gz-01`
//!    `{"status":"offline"}` and back, polling the pinned maps (`bench_helper
//!    failover`, run inside the daemon's namespaces); again with the demo zone
//!    signed, timing the new answer's RRSIG in `lagran_rrsig` too.
//! 3. Kernel lookup cost at full real-database size: LPM trie entries after a
//!    sync with the real xdb and the demo nodes; `BPF_PROG_TEST_RUN` per-packet
//!    cost for a tiny, a 1 024-entry, the full real, and an unmerged
//!    (one answer per geo partition) table (`bench_helper tables`).
//! 4. Mean ECS scope over 10 000 random public IPv4 addresses (fixed seed) and
//!    the scope-correctness check against an independent oracle.
//! 5. Userspace: geo lookup ns/op on the real file; the full real xdb loaded,
//!    compiled and synced into the kernel maps; a route recompute for 1 000
//!    nodes × 5 000 partitions × 10 names.
//! 6. The world data: the same figures with the MaxMind City and ASN files
//!    merged over the ip2region file, beside the ip2region file alone, plus
//!    route-table entries and map memory (`bench_helper world`, see `world`).
//! 7. Latency steering: measurements ingested per second, a recompute with
//!    every partition measured for 10 of 1 000 nodes, the matrix's memory
//!    (`bench_helper steering`; `--only-steering` alone, without root).
//! 8. DNSSEC signing: a full route table for 1 000 nodes signed, signatures
//!    per second, the next table after one node down (`bench_helper signing`;
//!    `--only-signing` alone, without root).
//!
//! Everything it creates — namespaces, the veth pair, pinned maps, background
//! processes — is owned by a guard that removes it on drop, also on error,
//! panic or Ctrl-C. Needs root, `ip`, `taskset`, `nsenter` (and `cargo xtask
//! setup` for kxdpgun, dnsperf, the geo data, bpf-linker).

mod build;
mod edge;
mod edge_latency;
mod edge_load;
mod edge_peers;
mod edge_section;
mod fleet;
mod generators;
mod helper_step;
mod knot_signed;
mod load;
mod metrics;
mod peers;
mod process;
mod recompute;
mod report;
mod resolver;
mod row;
mod search;
mod servers;
mod signed;
mod signing;
mod steering;
mod tables;
mod topology;
mod world;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context as _, bail};

use resolver::ResolverShare;
use search::Best;
use servers::Server;

/// Server and client namespace ends of the veth pair (fixed names: they exist
/// only inside the bench's own namespaces).
const SRV_IF: &str = "lgb-s";
const CLI_IF: &str = "lgb-c";
const SRV_IP: &str = "198.18.0.1";
const CLI_IP: &str = "198.18.0.2";
/// Where the daemon pins its maps, inside its own mount namespace (`ip netns
/// exec` gives it a private /sys, where it mounts a bpffs that disappears with it).
const PIN_DIR: &str = "/sys/fs/bpf/lagran-bench";
const NS_PREFIX: &str = "lagran-bench-";
/// A Shenzhen China Telecom subnet: the demo answers gz-01 (203.0.113.21) there.
const PROBE_SUBNET: &str = "58.60.1.0/24";
/// Queries the resolver-as-client step sends through Unbound.
const RESOLVER_QUERIES: u32 = 300;
const PROBE_ANSWER: &str = "203.0.113.21";
/// The key marking the signed failover measured after the fleet step.
const AFTER_FLEET: &str = "after_fleet";

#[derive(Debug, Clone, clap::Parser)]
pub struct Options {
    /// Seconds per load run.
    #[arg(long, default_value_t = 3)]
    pub duration: u32,
    /// CPU of the server (daemon and the server veth's NAPI thread).
    #[arg(long, default_value_t = 1)]
    pub server_cpu: u32,
    /// CPU of the generator (and the client veth's NAPI thread).
    #[arg(long, default_value_t = 0)]
    pub gen_cpu: u32,
    /// Load generators, comma-separated: gun, kxdpgun, dnsperf.
    /// Default: gun, plus kxdpgun when installed (else dnsperf when installed).
    #[arg(long, value_delimiter = ',')]
    pub generators: Vec<String>,
    /// Skip the load tests (namespaces, daemon, generators, failover).
    #[arg(long)]
    pub no_load: bool,
    /// Skip the peer authoritative server.
    #[arg(long)]
    pub no_peer: bool,
    /// Skip the recompute benchmark (it takes minutes while it misses its target).
    #[arg(long)]
    pub no_recompute: bool,
    /// Only the recompute benchmark and the long planner-vs-oracle property run
    /// (no root, no namespaces, no kernel).
    #[arg(long)]
    pub only_recompute: bool,
    /// Skip the long planner-vs-oracle property run.
    #[arg(long)]
    pub no_property: bool,
    /// Give the recompute benchmark at most this many seconds.
    #[arg(long, default_value_t = 150)]
    pub recompute_timeout: u64,
    /// Skip the unmerged-partition trie (1M entries; ~10 s).
    #[arg(long)]
    pub no_unmerged: bool,
    /// Do not build; use the release binaries and BPF object already there.
    #[arg(long)]
    pub no_build: bool,
    /// Highest rate tried, queries per second.
    #[arg(long, default_value_t = 3_200_000)]
    pub max_rate: u64,
    /// Skip the fleet step (1 000 nodes over the API, PATCH → map entry, heartbeats/s).
    #[arg(long)]
    pub no_fleet: bool,
    /// Only the fleet step (the XDP daemon, then `--fleet-nodes` nodes, PATCH → map
    /// entry and heartbeats/s): no tables, recompute, load tests or peers.
    #[arg(long, conflicts_with_all = ["no_fleet", "only_recompute"])]
    pub only_fleet: bool,
    /// Nodes the fleet step adds over the API.
    #[arg(long, default_value_t = 1_000)]
    pub fleet_nodes: usize,
    /// Heartbeats per second the fleet step sends (the goal: ≥ 1 000/s absorbed).
    /// (Sent a little above the goal: the rate absorbed is counted over the
    /// whole phase, start-up included.)
    #[arg(long, default_value_t = 1_100)]
    pub heartbeat_rate: u64,
    /// Only the edge comparison: lagran-edge, nginx `proxy_cache` and Varnish
    /// (no root-only DNS steps, no namespaces).
    #[arg(long, conflicts_with_all = ["only_fleet", "only_recompute"])]
    pub edge: bool,
    /// Seconds per load run of the edge comparison.
    #[arg(long, default_value_t = 10)]
    pub seconds: u32,
    /// Rounds of the edge comparison's fixed-rate latency runs, each running
    /// every server once (in an order rotated from round to round); the latency
    /// rows are the medians over the rounds.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..))]
    pub latency_rounds: u32,
    /// Skip the world step (MaxMind City + ASN merged over ip2region).
    #[arg(long)]
    pub no_world: bool,
    /// Only the world step; its rows go to the terminal and `target/bench/world.md`.
    #[arg(long, conflicts_with_all = ["no_world", "only_fleet", "only_recompute", "only_steering", "edge"])]
    pub only_world: bool,
    /// Skip the latency-steering step (ingest, recompute with measurements).
    #[arg(long)]
    pub no_steering: bool,
    /// Only the latency-steering step (no root, no namespaces, no data files).
    #[arg(long, conflicts_with_all = ["no_steering", "only_fleet", "only_recompute", "edge"])]
    pub only_steering: bool,
    /// Skip the signing step (a route table signed for 1 000 nodes).
    #[arg(long)]
    pub no_signing: bool,
    /// Only the signing step (no root, no namespaces, no data files).
    #[arg(long, conflicts_with_all = ["no_signing", "only_fleet", "only_recompute", "only_steering", "edge"])]
    pub only_signing: bool,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn check_interrupted() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted (Ctrl-C): cleaning up");
    }
    Ok(())
}

type Results = BTreeMap<String, String>;

/// The `RESULT key value` lines of a helper's output.
fn parse_results(out: &str) -> Results {
    out.lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn num(r: &Results, key: &str) -> Option<f64> {
    r.get(key).and_then(|v| v.parse().ok())
}

struct Bench {
    opts: Options,
    root: PathBuf,
    helper: PathBuf,
    lagran: PathBuf,
    obj: PathBuf,
    /// The bare XDP_TX reflector object.
    reflector: PathBuf,
    xdb: PathBuf,
    work: PathBuf,
}

/// Everything the steps measured, for the report.
#[derive(Default)]
struct Measured {
    tables: Results,
    recompute: Results,
    failover: Results,
    /// The same with the demo zone signed, and its RRSIG timings (with
    /// [`AFTER_FLEET`] when measured with the fleet in, as the fleet step's).
    failover_signed: Results,
    fleet: Results,
    world: Results,
    steering: Results,
    signing: Results,
    qps: BTreeMap<(Server, String), Best>,
    /// Seconds from the daemon's start to its first answer, by mode.
    startup: BTreeMap<&'static str, f64>,
    /// Per generator: the XDP program's ns per run and runs, under load.
    live: BTreeMap<String, (f64, u64)>,
    resolver: Option<ResolverShare>,
    notes: Vec<String>,
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    // SAFETY: installing an async-signal-safe handler that only stores an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    if opts.edge {
        return edge::exec(&opts);
    }
    if opts.only_steering {
        return steering::exec_only(&opts);
    }
    if opts.only_signing {
        return signing::exec_only(&opts);
    }
    let b = build::prepare(&opts)?;
    let started = Instant::now();
    topology::remove_stale_namespaces();
    if opts.only_world {
        return b.only_world(started);
    }
    let mut m = Measured::default();
    eprintln!("==> tables: real xdb, route table, LPM trie, BPF_PROG_TEST_RUN, ECS scopes (~30 s)");
    if !opts.only_recompute && !opts.only_fleet {
        m.tables = b.tables().context("bench_helper tables")?;
    }
    if !opts.no_world && !opts.only_recompute && !opts.only_fleet {
        eprintln!("==> world: ip2region alone vs + MaxMind City + ASN: load, lookup, routes, maps (~2 min)");
        m.world = b.world().context("bench_helper world")?;
    }
    check_interrupted()?;
    if !opts.no_recompute && !opts.only_fleet {
        eprintln!("==> recompute: 1 000 nodes × 5 000 partitions × 10 names (at most {} s)", opts.recompute_timeout);
        m.recompute = b.recompute()?;
    }
    if !opts.no_steering && !opts.only_fleet {
        eprintln!("==> steering: ingest, recompute with a populated measurement matrix, its memory");
        m.steering = b.steering()?;
    }
    if !opts.no_signing && !opts.only_fleet {
        eprintln!("==> signing: a route table for 1 000 nodes signed, one node down");
        m.signing = b.signing()?;
    }
    if !opts.no_property && !opts.only_fleet {
        recompute::property(&b.root)?;
    }
    let gens = generators::choose(&opts, &mut m.notes);
    if !opts.no_load && !opts.only_recompute {
        let t = b.topology()?;
        if opts.only_fleet {
            return b.only_fleet(&t);
        }
        b.xdp_phase(&t, &gens, &mut m)?;
        b.userspace_phase(&t, &gens, &mut m)?;
        b.peers(&t, &gens, &mut m)?;
        b.reflector_phase(&t, &gens, &mut m)?;
    }
    report::write(&b, &gens, m, started)
}
