//! `cargo xtask bench`: the numbers of SPEC §10, measured on this box, side by
//! side, each with how it was measured.
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
//!    failover`, run inside the daemon's namespaces).
//! 3. Kernel lookup cost at full real-database size: LPM trie entries after a
//!    sync with the real xdb and the demo nodes; `BPF_PROG_TEST_RUN` per-packet
//!    cost for a tiny, a 1 024-entry, the full real, and an unmerged
//!    (one answer per geo partition) table (`bench_helper tables`).
//! 4. Mean ECS scope over 10 000 random public IPv4 addresses (fixed seed) and
//!    the scope-correctness check against an independent oracle.
//! 5. Userspace: geo lookup ns/op on the real file; the full real xdb loaded,
//!    compiled and synced into the kernel maps; a route recompute for 1 000
//!    nodes × 5 000 partitions × 10 names.
//!
//! Everything it creates — namespaces, the veth pair, pinned maps, background
//! processes — is owned by a guard that removes it on drop, also on error,
//! panic or Ctrl-C. Needs root, `ip`, `taskset`, `nsenter` (and `cargo xtask
//! setup` for kxdpgun, dnsperf, the geo data, bpf-linker).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::{build_ebpf, busy, util};

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

// ------------------------------------------------------------------ guards

/// A background process, stopped (SIGTERM, then SIGKILL after 5 s) on drop.
struct Bg {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Bg {
    fn spawn(name: &str, cmd: &mut Command, log: &Path) -> anyhow::Result<Bg> {
        let line = util::display(cmd);
        eprintln!("+ {line} &> {}", log.display());
        let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("failed to start `{line}`"))?;
        Ok(Bg { name: name.to_string(), child: Some(child), log: log.to_path_buf() })
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Fails (with the log's tail) when the process has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(c) = &mut self.child
            && let Some(status) = c.try_wait()?
        {
            self.child = None;
            bail!(
                "{} exited early ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log, 20)
            );
        }
        Ok(())
    }

    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: {} did not stop on SIGTERM within 5 s; killing it", self.name);
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        self.stop();
    }
}

fn tail(path: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Two namespaces joined by a veth pair; both namespaces (and with them the
/// veth ends, their XDP programs and every process-less trace) are deleted on drop.
struct Topology {
    srv: String,
    cli: String,
    srv_mac: String,
    cli_mac: String,
    created: Vec<String>,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    util::output(Command::new("ip").args(args)).map(|_| ())
}

impl Topology {
    fn create(opts: &Options, helper: &Path) -> anyhow::Result<Topology> {
        let pid = std::process::id();
        let mut t = Topology {
            srv: format!("{NS_PREFIX}srv-{pid}"),
            cli: format!("{NS_PREFIX}cli-{pid}"),
            srv_mac: String::new(),
            cli_mac: String::new(),
            created: Vec::new(),
        };
        for ns in [t.srv.clone(), t.cli.clone()] {
            ip(&["netns", "add", &ns])?;
            t.created.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        ip(&["link", "add", SRV_IF, "netns", &t.srv, "type", "veth", "peer", "name", CLI_IF, "netns", &t.cli])?;
        ip(&["-n", &t.srv, "addr", "add", &format!("{SRV_IP}/30"), "dev", SRV_IF])?;
        ip(&["-n", &t.cli, "addr", "add", &format!("{CLI_IP}/30"), "dev", CLI_IF])?;
        ip(&["-n", &t.srv, "link", "set", SRV_IF, "up"])?;
        ip(&["-n", &t.cli, "link", "set", CLI_IF, "up"])?;
        t.srv_mac = t.exec_out(&t.srv, &["cat", &format!("/sys/class/net/{SRV_IF}/address")])?.trim().to_string();
        t.cli_mac = t.exec_out(&t.cli, &["cat", &format!("/sys/class/net/{CLI_IF}/address")])?.trim().to_string();
        // Static neighbours: the generators drop everything arriving at the client
        // veth (ARP replies too) while they run.
        ip(&["-n", &t.srv, "neigh", "replace", CLI_IP, "lladdr", &t.cli_mac, "dev", SRV_IF, "nud", "permanent"])?;
        ip(&["-n", &t.cli, "neigh", "replace", SRV_IP, "lladdr", &t.srv_mac, "dev", CLI_IF, "nud", "permanent"])?;
        // NAPI threading (with GRO, so the veths have NAPI without XDP too), the
        // NAPI kthreads pinned: the server's receive work on the server CPU.
        for (ns, dev, cpu) in [(&t.srv, SRV_IF, opts.server_cpu), (&t.cli, CLI_IF, opts.gen_cpu)] {
            let cpu = cpu.to_string();
            t.exec_out(ns, &[&helper.display().to_string(), "napi", "--iface", dev, "--cpu", &cpu])?;
        }
        Ok(t)
    }

    /// `ip netns exec NS args…`.
    fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }

    fn exec_out(&self, ns: &str, args: &[&str]) -> anyhow::Result<String> {
        util::output(&mut self.exec(ns, args))
    }

    /// Removes whatever XDP program a generator left on the client veth.
    fn client_xdp_off(&self) {
        let _ = util::output(Command::new("ip").args(["-n", &self.cli, "link", "set", "dev", CLI_IF, "xdp", "off"]));
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in self.created.drain(..).rev() {
            if let Err(e) = ip(&["netns", "delete", &ns]) {
                eprintln!("warning: {e}");
            }
        }
    }
}

/// Deletes namespaces left by a bench whose process is gone (killed with -9).
fn remove_stale_namespaces() {
    let Ok(list) = util::output(Command::new("ip").args(["netns", "list"])) else { return };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NS_PREFIX) else { continue };
        let pid = rest.rsplit('-').next().unwrap_or("");
        if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
            eprintln!("removing stale namespace {name} (its bench is gone)");
            let _ = ip(&["netns", "delete", name]);
        }
    }
}

// ------------------------------------------------------------------ results

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

/// One load run.
#[derive(Clone, Debug, Default)]
struct Run {
    target: u64,
    sent: u64,
    received: u64,
    secs: f64,
    /// Answered by XDP / by the userspace responder during the run (our daemon only).
    xdp_answered: Option<u64>,
    udp_queries: Option<u64>,
    /// The server core's busy time over the steady middle of the run.
    server_busy: Option<busy::Busy>,
}

impl Run {
    fn ratio(&self) -> f64 {
        if self.sent == 0 { 0.0 } else { self.received as f64 / self.sent as f64 }
    }
    fn answered_qps(&self) -> f64 {
        self.received.min(self.sent) as f64 / self.secs.max(1e-9)
    }
    fn sent_qps(&self) -> f64 {
        self.sent as f64 / self.secs.max(1e-9)
    }
    /// The server core's CPU per answered query, in ns, over the run's steady middle.
    fn server_ns_per_answer(&self) -> Option<f64> {
        let b = self.server_busy?;
        let answered = self.answered_qps() * b.window.as_secs_f64();
        (answered >= 1.0).then(|| b.busy.as_nanos() as f64 / answered)
    }
    /// ≥ 95 % answered and the generator kept (nearly) the asked rate.
    fn passed(&self) -> bool {
        self.ratio() >= 0.95 && self.sent_qps() >= 0.9 * self.target as f64
    }
}

/// The best rate of one (server, generator) pair.
#[derive(Clone, Debug, Default)]
struct Best {
    qps: f64,
    runs: Vec<Run>,
    /// The generator could not send faster, so the server's limit is above `qps`.
    generator_bound: bool,
}

impl Best {
    fn describe(&self) -> String {
        if self.runs.is_empty() {
            return "not measured".into();
        }
        format!(
            "{:.0} qps{}",
            self.qps,
            if self.generator_bound { " (generator-bound: server limit is higher)" } else { "" }
        )
    }
}

/// The highest offered rate both paths held (≥ 95 % answered) with the server
/// core's busy time read, and the XDP path's and the userspace path's runs
/// there: SPEC §10's "CPU per answered query", compared at one rate because
/// per-query costs fall as batches fill.
fn cpu_per_answer<'a>(xdp: &'a Best, userspace: &'a Best) -> Option<(u64, &'a Run, &'a Run)> {
    let held = |b: &'a Best, rate: u64| {
        b.runs.iter().find(|r| r.target == rate && r.passed() && r.server_ns_per_answer().is_some())
    };
    let mut rates: Vec<u64> = userspace.runs.iter().filter(|r| r.passed()).map(|r| r.target).collect();
    rates.sort_unstable_by(|a, b| b.cmp(a));
    rates.into_iter().find_map(|rate| Some((rate, held(xdp, rate)?, held(userspace, rate)?)))
}

/// Steps the rate up ×2 from `start` until a run fails, then bisects three times.
fn find_best(
    label: &str,
    start: u64,
    max: u64,
    mut run: impl FnMut(u64) -> anyhow::Result<Run>,
) -> anyhow::Result<Best> {
    let mut best = Best::default();
    let log = |r: &Run, best: &mut Best| {
        eprintln!(
            "    {label}: target {:>8} qps: sent {:>8.0} qps, answered {:>8.0} qps ({:5.1} %){}{}",
            r.target,
            r.sent_qps(),
            r.answered_qps(),
            r.ratio() * 100.0,
            r.xdp_answered.map_or(String::new(), |x| format!(", xdp answered {x}")),
            r.udp_queries.map_or(String::new(), |u| format!(", userspace queries {u}")),
        );
        if r.ratio() >= 0.95 && r.answered_qps() > best.qps {
            best.qps = r.answered_qps();
        }
        best.runs.push(r.clone());
    };
    let (mut lo, mut hi) = (0u64, 0u64);
    let mut rate = start;
    loop {
        check_interrupted()?;
        let r = run(rate)?;
        log(&r, &mut best);
        if r.passed() {
            lo = rate;
            if rate >= max {
                break;
            }
            rate = (rate * 2).min(max);
        } else {
            if r.ratio() >= 0.95 {
                // Answered everything it sent, but could not send the rate.
                best.generator_bound = true;
                return Ok(best);
            }
            hi = rate;
            break;
        }
    }
    if hi == 0 {
        best.generator_bound = true;
        return Ok(best);
    }
    for _ in 0..3 {
        check_interrupted()?;
        let mid = (lo + hi) / 2;
        if mid <= lo || hi - lo < hi / 16 {
            break;
        }
        let r = run(mid)?;
        log(&r, &mut best);
        if r.passed() {
            lo = mid;
        } else {
            if r.ratio() >= 0.95 {
                best.generator_bound = true;
                break;
            }
            hi = mid;
        }
    }
    Ok(best)
}

// ------------------------------------------------------------------ the bench

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

/// What a server under load is.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Server {
    LagranXdp,
    LagranUserspace,
    Knot,
    /// knotd answering from its own XDP path (AF_XDP, `xdp: listen`): the strongest peer.
    KnotXdp,
    /// A bare XDP_TX reflector (`lagran-ebpf/src/reflector.rs`): the ceiling of the box.
    Reflector,
}

impl Server {
    fn label(self) -> &'static str {
        match self {
            Server::LagranXdp => "lagran XDP",
            Server::LagranUserspace => "lagran userspace",
            Server::Knot => "knotd",
            Server::KnotXdp => "knotd XDP",
            Server::Reflector => "XDP_TX reflector",
        }
    }
}

impl Bench {
    fn helper_cmd(&self, t: &Topology, ns: &str, cpu: Option<u32>, args: &[&str]) -> Command {
        let mut all: Vec<String> = Vec::new();
        if let Some(cpu) = cpu {
            all.extend(["taskset".into(), "-c".into(), cpu.to_string()]);
        }
        all.push(self.helper.display().to_string());
        all.extend(args.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        t.exec(ns, &refs)
    }

    /// `bench_helper` in the daemon `pid`'s namespaces (`ns`: nsenter's `-n`,
    /// `-m`), on the generator's CPU: the daemon keeps its core to itself, as
    /// "on one core" says, and a poller or a heartbeat sender does not take
    /// turns with the daemon it measures.
    fn helper_beside(&self, pid: &str, ns: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", pid]).args(ns).args(["taskset", "-c", &self.opts.gen_cpu.to_string()]).arg(&self.helper);
        c
    }

    fn tables(&self) -> anyhow::Result<Results> {
        let xdb = self.xdb.display().to_string();
        let mut args = vec!["tables", "--xdb", &xdb, "--no-recompute"];
        if self.opts.no_unmerged {
            args.push("--no-unmerged");
        }
        // Pinned to one CPU: BPF_PROG_TEST_RUN timings without migrations.
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &self.opts.server_cpu.to_string()])
            .arg(&self.helper)
            .args(&args)
            .env("LAGRAN_EBPF_OBJECT", &self.obj);
        let mut results = parse_results(&util::output(&mut cmd)?);
        // The path's length, which no clock on a busy guest disturbs.
        let mut cmd = Command::new(&self.helper);
        cmd.args(["xdp-insns", "--object"]).arg(&self.obj);
        results.extend(parse_results(&util::output(&mut cmd).context("bench_helper xdp-insns")?));
        Ok(results)
    }

    /// The recompute benchmark in its own process, killed after the timeout.
    fn recompute(&self) -> anyhow::Result<Results> {
        let log = self.work.join("recompute.log");
        let xdb = self.xdb.display().to_string();
        let mut cmd = Command::new(&self.helper);
        cmd.args(["tables", "--xdb", &xdb, "--only-recompute", "--configs", "1pool,real", "--builds", "5"]);
        let mut bg = Bg::spawn("bench_helper tables --only-recompute", &mut cmd, &log)?;
        let t = Instant::now();
        let limit = Duration::from_secs(self.opts.recompute_timeout);
        loop {
            check_interrupted()?;
            if let Some(c) = &mut bg.child
                && let Some(status) = c.try_wait()?
            {
                bg.child = None;
                if !status.success() {
                    bail!("the recompute benchmark failed ({status}):\n{}", tail(&log, 20));
                }
                return Ok(parse_results(&std::fs::read_to_string(&log)?));
            }
            if t.elapsed() > limit {
                bg.stop();
                let mut r = Results::new();
                r.insert("recompute_1pool_ms".into(), format!(">{}", limit.as_secs() * 1000));
                return Ok(r);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The fleet step against the running XDP daemon: `--fleet-nodes` nodes at real
    /// client locations over the API, then PATCH → map entry for the node that
    /// serves the probe client (keys `fleet_*`), then heartbeats per second with
    /// the userspace responder's DNS p99 with and without them (alternating
    /// windows of each, so that both see the same minutes of the machine).
    fn fleet(&self, daemon: &Bg) -> anyhow::Result<Results> {
        let pid = daemon.pid().to_string();
        let xdb = self.xdb.display().to_string();
        let nodes = self.opts.fleet_nodes.to_string();
        let on_gen_cpu = |ns: &[&str]| self.helper_beside(&pid, ns);
        let mut add = on_gen_cpu(&["-n"]);
        add.args(["fleet-add", "--xdb", &xdb, "--nodes", &nodes]);
        let mut r = parse_results(&util::output(&mut add).context("adding the fleet over the API")?);
        let mut failover = on_gen_cpu(&["-m", "-n"]);
        failover.args(["failover", "--pin-dir", PIN_DIR, "--node", "auto", "--client", "58.60.1.1"]);
        let f = parse_results(&util::output(&mut failover).context("PATCH → map entry with the fleet")?);
        r.extend(f.into_iter().map(|(k, v)| (format!("fleet_{k}"), v)));
        let (dns, rate) = (format!("{SRV_IP}:53"), self.opts.heartbeat_rate.to_string());
        let mut hb = on_gen_cpu(&["-n"]);
        hb.args(["heartbeats", "--dns", &dns, "--nodes", &nodes, "--rate", &rate]);
        r.extend(parse_results(&util::output(&mut hb).context("heartbeats per second")?));
        Ok(r)
    }

    /// Starts `lagran serve --demo` in the server namespace, pinned to the server CPU.
    fn start_lagran(&self, t: &Topology, xdp: bool) -> anyhow::Result<(Bg, f64)> {
        let db = self.work.join("lagran.db");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let lagran = self.lagran.display().to_string();
        let cpu = self.opts.server_cpu.to_string();
        let mut args = vec!["taskset", "-c", &cpu, &lagran, "serve", "--demo"];
        if xdp {
            args.extend(["--xdp", SRV_IF]);
        }
        let dns = format!("{SRV_IP}:53");
        args.extend(["--dns-listen", &dns, "--api-listen", "127.0.0.1:8080"]);
        let mut cmd = t.exec(&t.srv, &args);
        cmd.current_dir(&self.work)
            .env("GEOIP_PATH", &self.xdb)
            .env("DATABASE_URL", format!("sqlite://{}", db.display()))
            .env("LAGRAN_PIN_DIR", PIN_DIR)
            .env("LAGRAN_EBPF_OBJECT", &self.obj)
            // LAGRAN_BENCH_LOG: the daemon's RUST_LOG (its log is target/bench/lagran-*.log).
            .env("RUST_LOG", std::env::var("LAGRAN_BENCH_LOG").unwrap_or_else(|_| "warn".into()));
        let name = if xdp { "lagran serve --xdp" } else { "lagran serve" };
        let log = self.work.join(if xdp { "lagran-xdp.log" } else { "lagran-userspace.log" });
        let started = Instant::now();
        let mut bg = Bg::spawn(name, &mut cmd, &log)?;
        let r = self.wait_answer(t, &mut bg, 90.0)?;
        let secs = started.elapsed().as_secs_f64();
        if r.get("answer").map(String::as_str) != Some(PROBE_ANSWER) {
            bail!("{name}: {PROBE_SUBNET} was answered {:?}, expected gz-01 ({PROBE_ANSWER})", r.get("answer"));
        }
        eprintln!("==> {name}: first answer after {secs:.2} s (scope /{})", r.get("scope").map_or("-", String::as_str));
        Ok((bg, secs))
    }

    /// Queries until the server answers (or `process` dies, or `wait` seconds pass).
    fn wait_answer(&self, t: &Topology, process: &mut Bg, wait: f64) -> anyhow::Result<Results> {
        let start = Instant::now();
        let server = format!("{SRV_IP}:53");
        loop {
            check_interrupted()?;
            process.check_alive()?;
            let mut cmd = self.helper_cmd(
                t,
                &t.cli,
                None,
                &["query", "--iface", CLI_IF, "--server", &server, "--subnet", PROBE_SUBNET, "--wait", "2"],
            );
            if let Ok(out) = util::output(&mut cmd) {
                return Ok(parse_results(&out));
            }
            if start.elapsed().as_secs_f64() > wait {
                bail!(
                    "{} did not answer within {wait} s; last lines of {}:\n{}",
                    process.name,
                    process.log.display(),
                    tail(&process.log, 20)
                );
            }
        }
    }

    /// (XDP answered, userspace UDP queries) from the daemon's /metrics.
    fn counters(&self, t: &Topology) -> (Option<u64>, Option<u64>) {
        let Ok(out) = util::output(&mut t.exec(&t.srv, &["curl", "-s", "-m", "2", "http://127.0.0.1:8080/metrics"]))
        else {
            return (None, None);
        };
        let get = |prefix: &str| {
            out.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .map(|v| v as u64)
        };
        (get("lagran_xdp_packets_total{result=\"answered\"}"), get("lagran_dns_queries_total{transport=\"udp\"}"))
    }

    /// One bounded load run of `generator` at `rate`.
    fn load_run(&self, t: &Topology, server: Server, generator: &str, rate: u64) -> anyhow::Result<Run> {
        let ours = matches!(server, Server::LagranXdp | Server::LagranUserspace);
        let before = if ours { self.counters(t) } else { (None, None) };
        // The server core's busy time, from after the generator's start-up to
        // before its end (runs of 2 s and more).
        let secs = self.opts.duration as f64;
        let watch = (secs >= 2.0).then(|| {
            busy::watch(self.opts.server_cpu, Duration::from_millis(700), Duration::from_secs_f64(secs - 1.0))
        });
        let mut run = match generator {
            "gun" => self.run_gun(t, rate)?,
            "kxdpgun" => self.run_kxdpgun(t, rate)?,
            "dnsperf" => self.run_dnsperf(t, rate)?,
            other => bail!("unknown generator {other:?} (gun, kxdpgun, dnsperf)"),
        };
        run.server_busy = watch.and_then(|w| w.join().ok().flatten());
        if ours {
            let after = self.counters(t);
            run.xdp_answered = after.0.zip(before.0).map(|(a, b)| a.saturating_sub(b));
            run.udp_queries = after.1.zip(before.1).map(|(a, b)| a.saturating_sub(b));
        }
        // Let queues drain between runs.
        std::thread::sleep(Duration::from_millis(300));
        Ok(run)
    }

    fn run_gun(&self, t: &Topology, rate: u64) -> anyhow::Result<Run> {
        let (rate_s, dur, xdb) = (rate.to_string(), self.opts.duration.to_string(), self.xdb.display().to_string());
        let mut cmd = self.helper_cmd(
            t,
            &t.cli,
            Some(self.opts.gen_cpu),
            &[
                "gun",
                "--iface",
                CLI_IF,
                "--src-ip",
                CLI_IP,
                "--dst-ip",
                SRV_IP,
                "--dst-mac",
                &t.srv_mac,
                "--rate",
                &rate_s,
                "--duration",
                &dur,
                "--xdb",
                &xdb,
            ],
        );
        let out = util::output(&mut cmd)?;
        let r = parse_results(&out);
        Ok(Run {
            target: rate,
            sent: num(&r, "sent").unwrap_or(0.0) as u64,
            received: num(&r, "received").unwrap_or(0.0) as u64,
            secs: num(&r, "send_secs").unwrap_or(1.0),
            ..Run::default()
        })
    }

    fn run_kxdpgun(&self, t: &Topology, rate: u64) -> anyhow::Result<Run> {
        let queries = self.work.join("kxdpgun-queries.txt");
        if !queries.exists() {
            // EDNS without options (no ECS: kxdpgun 3.2 cannot send it; no COOKIE).
            std::fs::write(&queries, "edge.lagran.net. A E\n")?;
        }
        let (rate_s, dur, cpu, q) = (
            rate.to_string(),
            self.opts.duration.to_string(),
            self.opts.gen_cpu.to_string(),
            queries.display().to_string(),
        );
        let mut cmd = t.exec(
            &t.cli,
            &["kxdpgun", "-t", &dur, "-Q", &rate_s, "-F", &cpu, "-i", &q, "-I", CLI_IF, "-R", &t.srv_mac, SRV_IP],
        );
        let res = util::output(&mut cmd);
        t.client_xdp_off();
        let out = res?;
        // "total queries:     2999990 (999996 pps) (100.0%)" / "total replies:     …"
        let field = |what: &str| -> Option<u64> {
            out.lines()
                .find(|l| l.trim_start().starts_with(what))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        let dur_s = out
            .lines()
            .find_map(|l| l.strip_prefix("duration:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok());
        let sent = field("total queries").with_context(|| format!("no `total queries` in kxdpgun output:\n{out}"))?;
        Ok(Run {
            target: rate,
            sent,
            received: field("total replies").unwrap_or(0),
            secs: dur_s.filter(|d| *d > 0.0).unwrap_or(self.opts.duration as f64),
            ..Run::default()
        })
    }

    fn run_dnsperf(&self, t: &Topology, rate: u64) -> anyhow::Result<Run> {
        let data = self.work.join("dnsperf-queries.bin");
        if !data.exists() {
            let mut cmd = Command::new(&self.helper);
            cmd.args(["queries", "--xdb"]).arg(&self.xdb).arg("--out").arg(&data);
            util::output(&mut cmd)?;
        }
        // The answers of the XDP path reach dnsperf's socket only with a program on the client veth.
        let mut hold = self.helper_cmd(t, &t.cli, None, &["hold-pass", "--iface", CLI_IF, "--secs", "60"]);
        let _pass = Bg::spawn("bench_helper hold-pass", &mut hold, &self.work.join("hold-pass.log"))?;
        std::thread::sleep(Duration::from_millis(200));
        let (rate_s, dur, d) = (rate.to_string(), self.opts.duration.to_string(), data.display().to_string());
        let cpu = self.opts.gen_cpu.to_string();
        let mut cmd = t.exec(
            &t.cli,
            &[
                "taskset", "-c", &cpu, "dnsperf", "-B", "-d", &d, "-s", SRV_IP, "-l", &dur, "-Q", &rate_s, "-c", "8",
                "-q", "10000", "-t", "1",
            ],
        );
        let out = util::output(&mut cmd)?;
        let field = |what: &str| -> Option<f64> {
            out.lines()
                .find(|l| l.trim_start().starts_with(what))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        Ok(Run {
            target: rate,
            sent: field("Queries sent").unwrap_or(0.0) as u64,
            received: field("Queries completed").unwrap_or(0.0) as u64,
            secs: field("Run time (s)").unwrap_or(self.opts.duration as f64),
            ..Run::default()
        })
    }

    fn start_knot(&self, t: &Topology, xdp: bool) -> anyhow::Result<Bg> {
        let dir = self.work.join(if xdp { "knot-xdp" } else { "knot" });
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let zone = "$ORIGIN edge.lagran.net.\n$TTL 30\n@ SOA ns1 hostmaster 1 3600 600 604800 60\n@ NS ns1\n@ NS ns2\nns1 A 198.51.100.53\nns2 A 198.51.100.54\n@ A 203.0.113.21\n";
        std::fs::write(dir.join("edge.lagran.net.zone"), zone)?;
        let d = dir.display();
        let conf = format!(
            "server:\n    rundir: \"{d}\"\n    listen: {SRV_IP}@53\n    udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n\
             database:\n    storage: \"{d}/db\"\ncontrol:\n    listen: \"{d}/knot.sock\"\n\
             log:\n  - target: stderr\n    any: warning\n\
             template:\n  - id: default\n    storage: \"{d}\"\n    semantic-checks: off\n\
             zone:\n  - domain: edge.lagran.net\n    file: edge.lagran.net.zone\n"
        );
        // Knot's own fast path: AF_XDP on the server veth, UDP only.
        let conf = if xdp { format!("{conf}xdp:\n    listen: {SRV_IF}@53\n    udp: on\n    tcp: off\n") } else { conf };
        std::fs::write(dir.join("knot.conf"), conf)?;
        let cpu = self.opts.server_cpu.to_string();
        let cfg = dir.join("knot.conf").display().to_string();
        let mut cmd = t.exec(&t.srv, &["taskset", "-c", &cpu, "knotd", "-c", &cfg]);
        let name = if xdp { "knotd (XDP)" } else { "knotd" };
        let log = self.work.join(if xdp { "knotd-xdp.log" } else { "knotd.log" });
        let mut bg = Bg::spawn(name, &mut cmd, &log)?;
        let r = self.wait_answer(t, &mut bg, 20.0)?;
        eprintln!("==> {name} answers {:?}", r.get("answer"));
        Ok(bg)
    }

    /// Attaches the bare XDP_TX reflector to the server veth; detached on drop.
    fn start_reflector(&self, t: &Topology) -> anyhow::Result<Reflector> {
        let obj = self.reflector.display().to_string();
        // -force: replace whatever a peer server left behind (knotd detaches as it exits).
        util::output(
            &mut t.exec(&t.srv, &["ip", "-force", "link", "set", "dev", SRV_IF, "xdp", "obj", &obj, "sec", "xdp"]),
        )
        .context("attaching the reflector")?;
        Ok(Reflector { ns: t.srv.clone() })
    }

    /// A real recursive resolver (Unbound, ECS on, a stub zone for the demo zone) in
    /// the client namespace as the client; every query carries a different client
    /// /24 so each goes upstream.
    fn resolver_share(&self, t: &Topology, queries: u32) -> anyhow::Result<ResolverShare> {
        let dir = self.work.join("unbound");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let conf = format!(
            "server:\n  interface: 127.0.0.1@5300\n  port: 5300\n  do-daemonize: no\n  username: \"\"\n  chroot: \"\"\n\
             \x20 directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n\
             \x20 do-not-query-localhost: no\n  access-control: 127.0.0.0/8 allow\n  module-config: \"subnetcache iterator\"\n\
             \x20 send-client-subnet: {SRV_IP}\n  client-subnet-always-forward: yes\n  max-client-subnet-ipv4: 24\n\
             \x20 cache-max-ttl: 0\n  msg-cache-size: 0\n  rrset-cache-size: 0\n  qname-minimisation: no\n\
             \x20 harden-referral-path: no\n  target-fetch-policy: \"0 0 0 0 0\"\n\
             stub-zone:\n  name: \"edge.lagran.net\"\n  stub-addr: {SRV_IP}\n",
            d = dir.display()
        );
        std::fs::write(dir.join("unbound.conf"), conf)?;
        let cfg = dir.join("unbound.conf").display().to_string();
        // XDP_TX on a veth reaches the peer only when the peer runs XDP too: the
        // reflector passes everything not addressed to port 53, so the client side
        // receives the kernel's answers (detached on return, also on error).
        let obj = self.reflector.display().to_string();
        util::output(
            &mut t.exec(&t.cli, &["ip", "-force", "link", "set", "dev", CLI_IF, "xdp", "obj", &obj, "sec", "xdp"]),
        )
        .context("a pass-through XDP program on the client veth")?;
        let _client_xdp = ClientXdpOff(t);
        let mut cmd = t.exec(&t.cli, &["unbound", "-d", "-c", &cfg]);
        let mut unbound = Bg::spawn("unbound", &mut cmd, &self.work.join("unbound.log"))?;
        std::thread::sleep(Duration::from_millis(500));
        let passed = |t: &Topology| -> BTreeMap<String, u64> {
            let out = util::output(&mut t.exec(&t.srv, &["curl", "-s", "-m", "2", "http://127.0.0.1:8080/metrics"]))
                .unwrap_or_default();
            out.lines()
                .filter_map(|l| l.strip_prefix("lagran_xdp_packets_total{result=\"passed\",reason=\""))
                .filter_map(|l| {
                    let (reason, v) = l.split_once("\"} ")?;
                    Some((reason.to_string(), v.trim().parse::<f64>().ok()? as u64))
                })
                .collect()
        };
        let (before, udp_before) = self.counters(t);
        let passed_before = passed(t);
        let mut answered = 0;
        for i in 0..queries {
            check_interrupted()?;
            unbound.check_alive()?;
            // /24s spread over the whole space (Unbound's subnet cache answers a second
            // query inside a returned scope itself, so close ones would not go upstream).
            let subnet = format!("+subnet={}.{}.{}.0/24", 1 + (i * 37) % 222, (i * 101) % 256, (i * 59) % 256);
            let out = util::output(&mut t.exec(
                &t.cli,
                &["dig", "@127.0.0.1", "-p", "5300", "+tries=1", "+time=2", "+short", &subnet, "edge.lagran.net", "A"],
            ))
            .unwrap_or_default();
            if out.lines().any(|l| l.parse::<std::net::Ipv4Addr>().is_ok()) {
                answered += 1;
            }
        }
        let (after, udp_after) = self.counters(t);
        let passed_after = passed(t);
        let moved = passed_after
            .into_iter()
            .filter_map(|(r, v)| {
                let d = v.saturating_sub(passed_before.get(&r).copied().unwrap_or(0));
                (d > 0).then_some((r, d))
            })
            .collect();
        unbound.check_alive()?;
        drop(unbound);
        let in_kernel = after.zip(before).map_or(0, |(a, b)| a.saturating_sub(b));
        let in_userspace = udp_after.zip(udp_before).map_or(0, |(a, b)| a.saturating_sub(b));
        Ok(ResolverShare { answered, upstream: in_kernel + in_userspace, in_kernel, passed: moved })
    }

    /// The XDP program's own accounting from the daemon's /metrics:
    /// (`lagran_xdp_run_time_ns_total`, `lagran_xdp_runs_total`).
    fn xdp_run_stats(&self, t: &Topology) -> Option<(u64, u64)> {
        let out =
            util::output(&mut t.exec(&t.srv, &["curl", "-s", "-m", "2", "http://127.0.0.1:8080/metrics"])).ok()?;
        let get = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|v| v as u64)
        };
        Some((get("lagran_xdp_run_time_ns_total")?, get("lagran_xdp_runs_total")?))
    }

    /// The program's nanoseconds per run under real traffic: one more run of
    /// `generator` at `rate` (the best rate found) with `kernel.bpf_stats_enabled`
    /// on for it alone (off for the QPS search, whose rates stay comparable),
    /// from the daemon's /metrics, as an SRE reads it live. `None` where the
    /// sysctl cannot be set or the daemon exports no accounting.
    fn live_cost(&self, t: &Topology, generator: &str, rate: u64) -> anyhow::Result<Option<(f64, u64)>> {
        const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
        let Ok(was) = std::fs::read_to_string(SYSCTL) else { return Ok(None) };
        if std::fs::write(SYSCTL, "1").is_err() {
            return Ok(None);
        }
        let before = self.xdp_run_stats(t);
        let run = self.load_run(t, Server::LagranXdp, generator, rate);
        let after = self.xdp_run_stats(t);
        let _ = std::fs::write(SYSCTL, was.trim());
        run?;
        Ok(match (before, after) {
            (Some((ns0, n0)), Some((ns1, n1))) if n1 > n0 => {
                Some((ns1.saturating_sub(ns0) as f64 / (n1 - n0) as f64, n1 - n0))
            }
            _ => None,
        })
    }

    /// Every generator against one running server.
    fn qps(
        &self,
        t: &Topology,
        server: Server,
        gens: &[String],
        out: &mut BTreeMap<(Server, String), Best>,
    ) -> anyhow::Result<()> {
        for g in gens {
            eprintln!("==> QPS: {} with {g}", server.label());
            let best = find_best(&format!("{} / {g}", server.label()), 25_000, self.opts.max_rate, |rate| {
                self.load_run(t, server, g, rate)
            })?;
            eprintln!("==> {} / {g}: {}", server.label(), best.describe());
            out.insert((server, g.clone()), best);
        }
        Ok(())
    }
}

/// What the resolver-as-client step saw.
struct ResolverShare {
    /// Queries answered through Unbound.
    answered: u64,
    /// The queries Unbound sent us: answered in the kernel or by the responder
    /// (its subnet cache answers the rest).
    upstream: u64,
    /// Of them, answered by the XDP path.
    in_kernel: u64,
    /// The pass reasons that moved meanwhile, and by how much.
    passed: Vec<(String, u64)>,
}

/// Takes the client veth's XDP program off on drop.
struct ClientXdpOff<'a>(&'a Topology);

impl Drop for ClientXdpOff<'_> {
    fn drop(&mut self) {
        self.0.client_xdp_off();
    }
}

/// The reflector attached to the server veth; detached on drop, also on failure.
struct Reflector {
    ns: String,
}

impl Drop for Reflector {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["-n", &self.ns, "link", "set", "dev", SRV_IF, "xdp", "off"]).status();
    }
}

// ------------------------------------------------------------------ report

struct Row {
    metric: String,
    value: String,
    target: String,
    ok: Option<bool>,
}

fn row(metric: impl Into<String>, value: impl Into<String>, target: impl Into<String>, ok: Option<bool>) -> Row {
    Row { metric: metric.into(), value: value.into(), target: target.into(), ok }
}

fn render(rows: &[Row]) -> (String, String) {
    let w = |f: fn(&Row) -> &str| rows.iter().map(|r| f(r).chars().count()).max().unwrap_or(0);
    let (w0, w1, w2) = (w(|r| &r.metric).max(6), w(|r| &r.value).max(5), w(|r| &r.target).max(6));
    let ok = |o: Option<bool>| match o {
        Some(true) => "ok",
        Some(false) => "MISS",
        None => "-",
    };
    let pad = |s: &str, n: usize| format!("{s}{}", " ".repeat(n.saturating_sub(s.chars().count())));
    let mut text = format!("{}  {}  {}  ok?\n", pad("metric", w0), pad("value", w1), pad("target", w2));
    let mut md = "| metric | value | target | ok? |\n|---|---|---|---|\n".to_string();
    for r in rows {
        let _ = writeln!(text, "{}  {}  {}  {}", pad(&r.metric, w0), pad(&r.value, w1), pad(&r.target, w2), ok(r.ok));
        let _ = writeln!(md, "| {} | {} | {} | {} |", r.metric, r.value, r.target, ok(r.ok));
    }
    (text, md)
}

fn fmt_ns(r: &Results, key: &str) -> String {
    r.get(key).map_or("-".into(), |v| format!("{v} ns"))
}

// ------------------------------------------------------------------ exec

pub fn exec(opts: Options) -> anyhow::Result<()> {
    // SAFETY: installing an async-signal-safe handler that only stores an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    // SAFETY: geteuid(2) has no preconditions.
    if !opts.only_recompute && unsafe { libc::geteuid() } != 0 {
        bail!("`cargo xtask bench` needs root (BPF, network namespaces, XDP): run it as root");
    }
    for tool in ["ip", "taskset", "nsenter"] {
        if !opts.only_recompute && util::which(tool).is_none() {
            bail!("`cargo xtask bench` needs `{tool}`: run `cargo xtask setup` (iproute2, util-linux)");
        }
    }
    let root = util::workspace_root();
    let xdb = root.join("data/ip2region.xdb");
    if !xdb.is_file() {
        bail!(
            "{} is missing: run `cargo xtask setup` (or scripts/fetch-geoip.sh) for the real ip2region file",
            xdb.display()
        );
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d));
    let (obj, reflector) = if opts.no_build {
        (
            target.join(build_ebpf::TARGET).join("release/lagran"),
            target.join(build_ebpf::TARGET).join("release/reflector"),
        )
    } else {
        let obj = build_ebpf::build_ebpf(&build_ebpf::Options { release: true, ..build_ebpf::Options::default() })?;
        let reflector = build_ebpf::build_reflector()?;
        util::run(Command::new("cargo").current_dir(&root).args([
            "build",
            "--release",
            "--package",
            "lagran-userspace",
            "--bin",
            "lagran",
            "--example",
            "bench_helper",
        ]))?;
        (obj, reflector)
    };
    let work = target.join("bench");
    std::fs::create_dir_all(&work)?;
    let b = Bench {
        helper: target.join("release/examples/bench_helper"),
        lagran: target.join("release/lagran"),
        obj,
        reflector,
        xdb,
        work: work.clone(),
        root: root.clone(),
        opts: opts.clone(),
    };
    for p in [&b.helper, &b.lagran, &b.obj, &b.reflector] {
        if !p.is_file() {
            bail!("{} is missing: run without --no-build", p.display());
        }
    }
    let started = Instant::now();
    remove_stale_namespaces();

    // ---- 3, 4, 5: tables, kernel cost, scopes, geo
    eprintln!("==> tables: real xdb, route table, LPM trie, BPF_PROG_TEST_RUN, ECS scopes (~30 s)");
    let tables = if opts.only_recompute || opts.only_fleet {
        Results::new()
    } else {
        b.tables().context("bench_helper tables")?
    };
    check_interrupted()?;
    let recompute = if opts.no_recompute || opts.only_fleet {
        Results::new()
    } else {
        eprintln!("==> recompute: 1 000 nodes × 5 000 partitions × 10 names (at most {} s)", opts.recompute_timeout);
        b.recompute()?
    };
    if !opts.no_property && !opts.only_fleet {
        // The planner against engine::rank, longer than `cargo xtask test` runs it.
        eprintln!("==> planner vs oracle: 5 000 random worlds × 10 events (release)");
        util::run(Command::new("cargo").current_dir(&root).args([
            "test",
            "--release",
            "--package",
            "lagran-userspace",
            "--lib",
            "planner_tables_equal_the_oracles_long_run",
            "--",
            "--ignored",
        ]))?;
    }

    // ---- 1, 2: load tests in namespaces
    let mut qps: BTreeMap<(Server, String), Best> = BTreeMap::new();
    let mut failover = Results::new();
    let mut fleet = Results::new();
    let mut startup = BTreeMap::new();
    let mut notes: Vec<String> = Vec::new();
    let mut resolver = None;
    // Per generator: the XDP program's ns per run and runs, under load.
    let mut live: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    let gens = generators(&opts, &mut notes);
    if !opts.no_load && !opts.only_recompute {
        let t = Topology::create(&opts, &b.helper).context("creating the namespaces and the veth pair")?;
        eprintln!(
            "==> namespaces {} / {} joined by {SRV_IF} ({SRV_IP}) <-> {CLI_IF} ({CLI_IP}); server CPU {}, generator CPU {}",
            t.srv, t.cli, opts.server_cpu, opts.gen_cpu
        );

        // XDP on.
        let (mut daemon, secs) = b.start_lagran(&t, true)?;
        startup.insert("xdp", secs);
        if opts.only_fleet {
            eprintln!(
                "==> fleet: {} nodes at real locations over the API; PATCH → map entry; {} heartbeats/s against DNS p99",
                opts.fleet_nodes, opts.heartbeat_rate
            );
            fleet = b.fleet(&daemon)?;
            daemon.check_alive()?;
            drop(daemon);
            drop(t);
            for (k, v) in &fleet {
                println!("{k} = {v}");
            }
            return Ok(());
        }
        eprintln!("==> failover: PATCH gz-01 offline/online, polling the pinned maps");
        let mut cmd = b.helper_beside(&daemon.pid().to_string(), &["-m", "-n"]);
        cmd.args([
            "failover",
            "--pin-dir",
            PIN_DIR,
            "--api",
            "127.0.0.1:8080",
            "--node",
            "gz-01",
            "--client",
            "58.60.1.1",
        ]);
        failover = parse_results(&util::output(&mut cmd).context("measuring node-down → map")?);
        daemon.check_alive()?;
        if util::which("unbound").is_none() {
            notes.push("resolver as client: skipped, unbound not installed (`cargo xtask setup`)".into());
        } else {
            eprintln!("==> resolver as client: Unbound with ECS, {RESOLVER_QUERIES} queries from distinct /24s");
            resolver = Some(b.resolver_share(&t, RESOLVER_QUERIES)?);
        }
        b.qps(&t, Server::LagranXdp, &gens, &mut qps)?;
        for g in &gens {
            if let Some(best) = qps.get(&(Server::LagranXdp, g.clone()))
                && best.qps > 0.0
            {
                eprintln!("==> lagran XDP / {g}: the program's own cost per packet at {:.0} qps (bpf_stats)", best.qps);
                match b.live_cost(&t, g, best.qps as u64)? {
                    Some(c) => {
                        live.insert(g.clone(), c);
                    }
                    None => notes.push(format!("XDP per packet under load [{g}]: no bpf_stats accounting")),
                }
            }
        }
        daemon.check_alive()?;
        if !opts.no_fleet {
            eprintln!(
                "==> fleet: {} nodes at real locations over the API; PATCH → map entry; {} heartbeats/s against DNS p99",
                opts.fleet_nodes, opts.heartbeat_rate
            );
            fleet = b.fleet(&daemon)?;
            daemon.check_alive()?;
        }
        daemon.stop();
        drop(daemon);

        // Same daemon, XDP off.
        let (mut daemon, secs) = b.start_lagran(&t, false)?;
        startup.insert("userspace", secs);
        b.qps(&t, Server::LagranUserspace, &gens, &mut qps)?;
        daemon.check_alive()?;
        drop(daemon);

        // A peer authoritative server on the same generator.
        if opts.no_peer {
            notes.push("peer authoritative server: skipped (--no-peer)".into());
        } else if util::which("knotd").is_none() {
            notes.push("peer authoritative server: skipped, knotd not installed (`apt-get install knot`)".into());
        } else {
            let mut knot = b.start_knot(&t, false)?;
            b.qps(&t, Server::Knot, &gens, &mut qps)?;
            knot.check_alive()?;
            drop(knot);
            // The strongest peer: knotd in its own XDP mode.
            match b.start_knot(&t, true) {
                Ok(mut knot) => {
                    b.qps(&t, Server::KnotXdp, &gens, &mut qps)?;
                    knot.check_alive()?;
                }
                Err(e) => notes.push(format!("knotd XDP: did not start ({e:#})")),
            }
        }
        // The ceiling of the box: a bare XDP_TX reflector, same generators, same pinning.
        {
            let _reflector = b.start_reflector(&t)?;
            b.qps(&t, Server::Reflector, &gens, &mut qps)?;
        }
        drop(t);
    }

    // ---- report
    let mut rows = Vec::new();
    for g in &gens {
        let x = qps.get(&(Server::LagranXdp, g.clone()));
        let u = qps.get(&(Server::LagranUserspace, g.clone()));
        let k = qps.get(&(Server::Knot, g.clone()));
        let how = match g.as_str() {
            "gun" => "ECS, 4 096 real /24s",
            "kxdpgun" => "EDNS, no ECS",
            _ => "ECS, real /24s",
        };
        if let Some(x) = x {
            rows.push(row(format!("QPS XDP path [{g}: {how}]"), x.describe(), "-", None));
        }
        if let Some(u) = u {
            rows.push(row(format!("QPS userspace path [{g}]"), u.describe(), "-", None));
        }
        if let (Some(x), Some(u)) = (x, u)
            && u.qps > 0.0
        {
            // Shown, not judged: where the XDP path reaches the box's ceiling
            // (the reflector's rate), its ratio to userspace says how fast the
            // generator is, not what a query costs; the row below judges that.
            let ratio = x.qps / u.qps;
            let bound = if x.generator_bound { " (XDP generator-bound: ≥)" } else { "" };
            rows.push(row(format!("XDP / userspace, QPS [{g}]"), format!("{ratio:.1}×{bound}"), "-", None));
            match cpu_per_answer(x, u) {
                Some((rate, xr, ur)) => {
                    let (xn, un) =
                        (xr.server_ns_per_answer().unwrap_or(f64::NAN), ur.server_ns_per_answer().unwrap_or(f64::NAN));
                    let share = |r: &Run| r.server_busy.map_or(0.0, |b| b.share() * 100.0);
                    // The floor under both: the bare reflector's core at the same
                    // rate (the veth's receive, the NAPI thread's wakeups, XDP_TX).
                    let floor = qps
                        .get(&(Server::Reflector, g.clone()))
                        .and_then(|r| r.runs.iter().find(|r| r.target == rate && r.passed()))
                        .and_then(Run::server_ns_per_answer)
                        .map_or(String::new(), |f| format!("; the bare reflector's {f:.0} ns"));
                    rows.push(row(
                        format!("server core's CPU per answered query at {rate} qps, userspace / XDP [{g}]"),
                        format!(
                            "{:.1}× ({un:.0} ns vs {xn:.0} ns; core busy {:.0} % vs {:.0} %{floor})",
                            un / xn,
                            share(ur),
                            share(xr)
                        ),
                        "≥ 5×",
                        Some(un / xn >= 5.0),
                    ))
                }
                None => notes.push(format!("CPU per answered query [{g}]: no rate both paths held with a busy time")),
            }
        }
        if let Some(kx) = qps.get(&(Server::KnotXdp, g.clone())) {
            rows.push(row(format!("QPS knotd XDP, static zone [{g}]"), kx.describe(), "-", None));
            if let Some(x) = x {
                let ratio = x.qps / kx.qps.max(1.0);
                rows.push(row(
                    format!("lagran-xdp / knot-XDP [{g}]"),
                    format!("{ratio:.2}×"),
                    "≥ 1.5×",
                    Some(ratio >= 1.5),
                ));
            }
        }
        if let Some(r) = qps.get(&(Server::Reflector, g.clone())) {
            rows.push(row(format!("QPS bare XDP_TX reflector [{g}]"), r.describe(), "-", None));
            if let Some(x) = x {
                let ratio = x.qps / r.qps.max(1.0);
                rows.push(row(
                    format!("lagran-xdp / reflector [{g}]"),
                    format!("{ratio:.2}×"),
                    "≥ 0.9×",
                    Some(ratio >= 0.9),
                ));
            }
        }
        if let Some(k) = k {
            rows.push(row(format!("QPS knotd, static zone [{g}]"), k.describe(), "-", None));
            if let Some(x) = x {
                rows.push(row(
                    format!("XDP / knotd [{g}]"),
                    format!("{:.1}×", x.qps / k.qps.max(1.0)),
                    "≥ 1×",
                    Some(x.qps >= k.qps),
                ));
            }
        }
    }
    if let Some(ResolverShare { answered, upstream, in_kernel, passed }) = &resolver {
        let share = if *upstream == 0 { 0.0 } else { 100.0 * *in_kernel as f64 / *upstream as f64 };
        let why = if passed.is_empty() {
            String::new()
        } else {
            format!(" (passed: {})", passed.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(", "))
        };
        rows.push(row(
            "Unbound (ECS) as the client: its upstream A queries answered in the kernel",
            format!("{in_kernel} / {upstream} = {share:.0} % ({answered} client queries answered){why}"),
            "100 %",
            Some(*upstream > 0 && in_kernel >= upstream),
        ));
    }
    if let Some(v) = num(&failover, "offline_median_ms") {
        let max = num(&failover, "offline_max_ms").unwrap_or(v);
        rows.push(row(
            "node offline → map entry (median / max)",
            format!("{v:.1} / {max:.1} ms"),
            "< 100 ms",
            Some(max < 100.0),
        ));
    }
    if let Some(v) = num(&failover, "online_median_ms") {
        let max = num(&failover, "online_max_ms").unwrap_or(v);
        rows.push(row(
            "node online → map entry (median / max)",
            format!("{v:.1} / {max:.1} ms"),
            "< 100 ms",
            Some(max < 100.0),
        ));
    }
    if let Some(v) = num(&fleet, "fleet_offline_median_ms") {
        let max = num(&fleet, "fleet_offline_max_ms").unwrap_or(v);
        let nodes = fleet.get("fleet_nodes_added").map_or("-", String::as_str);
        rows.push(row(
            format!("PATCH → map entry, {nodes} nodes on the real data (median / max)"),
            format!("{v:.1} / {max:.1} ms"),
            "< 20 ms median",
            Some(v < 20.0),
        ));
    }
    if let (Some(rate), Some(idle), Some(loaded)) =
        (num(&fleet, "heartbeats_per_s"), num(&fleet, "dns_p99_idle_us"), num(&fleet, "dns_p99_heartbeats_us"))
    {
        // "Unchanged": within a quarter of the idle p99 plus 100 µs of timer noise.
        let target = num(&fleet, "heartbeats_target_per_s").unwrap_or(1000.0);
        rows.push(row(
            "heartbeats absorbed on one core; userspace DNS p99 alone → under heartbeats (alternating windows)",
            format!("{rate:.0}/s (of {target:.0}/s); p99 {idle:.0} → {loaded:.0} µs"),
            "≥ 1 000/s, p99 unchanged",
            Some(rate >= 1000.0 && loaded <= idle * 1.25 + 100.0),
        ));
    }
    let t = &tables;
    rows.push(row(
        "LPM trie entries, real xdb + demo nodes",
        t.get("trie_entries").cloned().unwrap_or("-".into()),
        "-",
        None,
    ));
    rows.push(row(
        "  unmerged (one answer per geo partition)",
        t.get("unmerged_entries").or(t.get("prefixes_unmerged")).cloned().unwrap_or("-".into()),
        "-",
        None,
    ));
    for (label, what) in [
        ("tiny", "1 entry"),
        ("small", "1 024 entries"),
        ("full", "full real table"),
        ("unmerged", "unmerged partitions"),
    ] {
        if t.contains_key(&format!("{label}_answered_mean_ns")) {
            rows.push(row(
                format!("XDP per packet, {what} (answered: test-run median / bpf_stats mean; lookup-only)"),
                format!(
                    "{} / {}; {}",
                    fmt_ns(t, &format!("{label}_answered_median_ns")),
                    fmt_ns(t, &format!("{label}_answered_prog_ns")),
                    fmt_ns(t, &format!("{label}_lookup_mean_ns"))
                ),
                "-",
                None,
            ));
        }
    }
    // SPEC §10: ≤ 150 ns per answered packet at full real-table size, judged
    // on the test-run median; beside it the kernel's own accounting (bpf_stats,
    // what `/metrics` exports live), a mean, so every outlier run is in it.
    if let Some(median) = num(t, "full_answered_median_ns") {
        rows.push(row(
            "XDP per answered packet, full real table (test-run median; bpf_stats run_time_ns / run_cnt)",
            format!("{median:.1} ns; {}", fmt_ns(t, "full_answered_prog_ns")),
            "≤ 150 ns",
            Some(median <= 150.0),
        ));
    }
    // The same path counted, not timed: instructions the object executes per
    // answered query, interpreted (`bench_helper xdp-insns`).
    if let (Some(ecs), Some(plain), Some(cookie)) =
        (num(t, "xdp_insns_ecs"), num(t, "xdp_insns_no_opt"), num(t, "xdp_insns_cookie"))
    {
        rows.push(row(
            "  BPF instructions executed per answered query (interpreted: ECS /24; no OPT; dig's client cookie)",
            format!("{ecs:.0}; {plain:.0}; {cookie:.0}"),
            "-",
            None,
        ));
    }
    // Shown beside it, not subtracted: what each of those single runs carries
    // besides the program (a frame passed at the program's first check, one
    // run at a time): the harness's clock reads and bottom-half toggles, and
    // bpf_stats's two clock reads.
    if t.contains_key("testrun_single_baseline_ns") {
        rows.push(row(
            "  the same timing of a frame the program passes at its first check (test-run median; bpf_stats mean)",
            format!("{}; {}", fmt_ns(t, "testrun_single_baseline_ns"), fmt_ns(t, "single_baseline_prog_ns")),
            "-",
            None,
        ));
    }
    // The same accounting under real traffic (the daemon's full real table,
    // one run at the best rate per generator): what `/metrics` shows an SRE.
    // Shown, not judged: the goal's row above is the one earlier runs judged.
    for (g, (ns, runs)) in &live {
        rows.push(row(
            format!("XDP per packet under load [{g}] (bpf_stats over {runs} runs at the best rate, warm caches)"),
            format!("{ns:.1} ns"),
            "-",
            None,
        ));
    }
    if let (Some(full), Some(small)) = (num(t, "full_answered_median_ns"), num(t, "small_answered_median_ns")) {
        rows.push(row(
            "full real table vs 1 024-entry table (answered, median)",
            format!("{:.2}×", full / small),
            "≤ 1.5× (small-trie regime)",
            Some(full <= 1.5 * small),
        ));
    }
    if let (Some(cost), Some(on), Some(off)) =
        (num(t, "rrl_cost_median_ns"), num(t, "rrl_on_answered_median_ns"), num(t, "rrl_off_answered_median_ns"))
    {
        // Beside it, the difference of the kernel's own accounting (bpf_stats
        // means over alternating rounds, outliers included).
        let shown = match (num(t, "rrl_cost_prog_ns"), num(t, "rrl_on_prog_ns"), num(t, "rrl_off_prog_ns")) {
            (Some(p), Some(pon), Some(poff)) => {
                format!("{cost:.1} ns (medians {on:.0} vs {off:.0} ns); bpf_stats {p:.1} ns ({pon:.0} vs {poff:.0} ns)")
            }
            _ => format!("{cost:.1} ns (medians {on:.0} vs {off:.0} ns)"),
        };
        rows.push(row(
            "XDP per packet, full real table, RRL on − off (answered; median of per-packet differences, rounds alternating)",
            shown,
            "< 20 ns",
            Some(cost < 20.0),
        ));
    }
    let mism: f64 =
        ["tiny", "small", "full", "unmerged"].iter().filter_map(|l| num(t, &format!("{l}_parity_mismatches"))).sum();
    rows.push(row("XDP answers ≠ userspace (A, ECS scope)", format!("{mism:.0}"), "0", Some(mism == 0.0)));
    if let (Some(m), Some(u)) = (num(t, "ecs_mean_scope"), num(t, "ecs_mean_scope_unmerged")) {
        rows.push(row(
            format!("mean ECS scope, {} random public IPv4", t.get("ecs_samples").map_or("-", String::as_str)),
            format!("/{m:.2} (per-partition prefixes: /{u:.2})"),
            "≤ partition prefixes",
            Some(m <= u),
        ));
    }
    if let Some(v) = num(t, "ecs_scope_violations") {
        rows.push(row("ECS scope violations", format!("{v:.0}"), "0", Some(v == 0.0)));
    }
    if let Some(v) = num(t, "geo_lookup_ns") {
        rows.push(row("geo lookup (userspace, real xdb)", format!("{v:.0} ns"), "< 1 µs", Some(v < 1000.0)));
    }
    if let Some(v) = num(t, "full_load_ms") {
        rows.push(row(
            "real xdb loaded + compiled + synced to maps",
            format!(
                "{v:.0} ms (load {} + partitions {} + routes {} + sync {})",
                t.get("xdb_load_ms").map_or("-", String::as_str),
                t.get("partitions_build_ms").map_or("-", String::as_str),
                t.get("route_build_ms").map_or("-", String::as_str),
                t.get("map_sync_ms").map_or("-", String::as_str),
            ),
            "< 5 s",
            Some(v < 5000.0),
        ));
    }
    if let Some(s) = startup.get("xdp") {
        rows.push(row("daemon start → first XDP answer", format!("{s:.2} s"), "-", None));
    }
    match recompute.get("recompute_1pool_ms") {
        Some(v) => {
            let ok = v.parse::<f64>().ok().map(|ms| ms < 50.0);
            rows.push(row(
                "recompute 1 000 nodes × 5 000 partitions × 10 names",
                format!("{v} ms"),
                "< 50 ms",
                Some(ok.unwrap_or(false)),
            ));
        }
        None if opts.no_recompute => notes.push("recompute benchmark: skipped (--no-recompute)".into()),
        None => {}
    }
    // The real xdb's partitions, 10 names: a full recompute, and one node down
    // (incrementally: only the classes the node touches).
    let real = [
        ("recompute_1pool_one_down_ms", "one node down incrementally, 1 000 nodes × 5 000 partitions", 5.0),
        ("recompute_real_100nodes_ms", "recompute real xdb, 100 nodes × 10 names", 20.0),
        ("recompute_real_1000nodes_ms", "recompute real xdb, 1 000 nodes × 10 names", 50.0),
        ("recompute_real_1000nodes_one_down_ms", "one node down incrementally, 1 000 nodes, real xdb", 5.0),
        (
            "recompute_real_1000nodes_grown_one_down_ms",
            "the same after the fleet grew 20 nodes at a time (hysteresis holds)",
            5.0,
        ),
    ];
    for (key, label, goal) in real {
        if let Some(v) = recompute.get(key) {
            let ok = v.parse::<f64>().is_ok_and(|ms| ms < goal);
            rows.push(row(label, format!("{v} ms"), format!("< {goal} ms"), Some(ok)));
        }
    }

    let (text, md) = render(&rows);
    println!("\nLagran bench ({:.0} s, {} CPUs, kernel {})", started.elapsed().as_secs_f64(), cpus(), kernel_release());
    println!("{text}");
    for n in &notes {
        println!("note: {n}");
    }
    let report = work.join("latest.md");
    let mut doc = format!(
        "Measured {} on {} CPUs, kernel {}; `cargo xtask bench` ({:.0} s).\n\n{md}",
        date(),
        cpus(),
        kernel_release(),
        started.elapsed().as_secs_f64()
    );
    for n in &notes {
        let _ = writeln!(doc, "\n- {n}");
    }
    let _ = writeln!(doc, "\nRaw results:\n\n```");
    for (k, v) in tables.iter().chain(recompute.iter()).chain(failover.iter()).chain(fleet.iter()) {
        let _ = writeln!(doc, "{k} {v}");
    }
    for ((s, g), best) in &qps {
        for r in &best.runs {
            let _ = writeln!(
                doc,
                "load {} {g} target={} sent_qps={:.0} answered_qps={:.0} ratio={:.3}{}",
                s.label().replace(' ', "_"),
                r.target,
                r.sent_qps(),
                r.answered_qps(),
                r.ratio(),
                r.xdp_answered.map_or(String::new(), |x| format!(" xdp_answered={x}"))
                    + &r.udp_queries.map_or(String::new(), |u| format!(" userspace_udp={u}")),
            );
        }
    }
    let _ = writeln!(doc, "```");
    std::fs::write(&report, doc)?;
    println!("report: {} (copy into docs/bench.md)", report.display());
    let _ = &b.root;
    Ok(())
}

/// The generators to use: as asked, else gun plus kxdpgun (or dnsperf).
fn generators(opts: &Options, notes: &mut Vec<String>) -> Vec<String> {
    if !opts.generators.is_empty() {
        return opts.generators.clone();
    }
    let mut g = vec!["gun".to_string()];
    if util::which("kxdpgun").is_some() {
        g.push("kxdpgun".into());
    } else if util::which("dnsperf").is_some() {
        notes.push("kxdpgun not installed: dnsperf used as the second generator".into());
        g.push("dnsperf".into());
    } else {
        notes.push("neither kxdpgun nor dnsperf installed: only the built-in ECS generator".into());
    }
    g
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or("?".into(), |s| s.trim().to_string())
}

fn date() -> String {
    util::output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])).map_or("?".into(), |s| s.trim().to_string())
}
