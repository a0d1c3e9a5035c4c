//! A real-size fleet against the running daemon, over its HTTP API:
//!
//! - `fleet-add`: `POST /api/v1/nodes` for N nodes at real client locations of
//!   the xdb (each with its own agent token), as an operator would add them;
//! - `heartbeats`: heartbeats at a target rate over keep-alive connections
//!   (`POST /api/v1/nodes/{name}/heartbeat`, loads jittered as agents report
//!   them) while a prober measures the userspace responder's DNS latency; the
//!   same probe runs in windows without heartbeats between the windows with
//!   them, so p99 with and without load come from one run and from the same
//!   minutes (on a guest whose wake-up latency drifts, a phase before the
//!   other compared the drift).
//!
//! Run inside the daemon's network namespace (`nsenter -t PID -n`), where its
//! API listens on loopback. Every loop is bounded in count and time.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use lagran::geo::{GeoDb, Xdb};
use lagran::partition::PartitionTable;
use rand::{Rng as _, SeedableRng as _, rngs::StdRng};

use crate::{frames, result};

/// The token of bench node `i` (its own agent token).
fn token(i: usize) -> String {
    format!("bench-agent-token-{i:05}")
}

fn node_name(i: usize) -> String {
    format!("fleet-{i:05}")
}

/// One HTTP/1.1 connection kept alive across requests.
pub struct Http {
    api: SocketAddr,
    stream: BufReader<TcpStream>,
}

impl Http {
    pub fn connect(api: SocketAddr) -> anyhow::Result<Http> {
        let s =
            TcpStream::connect_timeout(&api, Duration::from_secs(2)).with_context(|| format!("connecting {api}"))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.set_nodelay(true)?;
        Ok(Http { api, stream: BufReader::new(s) })
    }

    /// One request; the status code and the body.
    pub fn request(&mut self, method: &str, path: &str, headers: &str, body: &str) -> anyhow::Result<(u16, String)> {
        let api = self.api;
        let s = self.stream.get_mut();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {api}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut line = String::new();
        self.stream.read_line(&mut line)?;
        let status: u16 = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("no HTTP status line")?;
        let mut length = 0usize;
        loop {
            line.clear();
            if self.stream.read_line(&mut line)? == 0 {
                bail!("connection closed in the headers");
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().context("bad Content-Length")?;
            }
        }
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body)?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

pub fn admin_header() -> String {
    std::env::var("ADMIN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"))
}

#[derive(clap::Args)]
pub struct AddArgs {
    #[arg(long, default_value = "127.0.0.1:8080")]
    api: SocketAddr,
    /// The real ip2region file (node locations are drawn from its partitions).
    #[arg(long)]
    xdb: PathBuf,
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    #[arg(long, default_value_t = 1_000)]
    seed: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
}

/// `POST /api/v1/nodes` for `--nodes` nodes at real client locations.
pub fn add(a: AddArgs) -> anyhow::Result<()> {
    let xdb = Xdb::open(&a.xdb).with_context(|| format!("opening {}", a.xdb.display()))?;
    let partitions = PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[]);
    let locations = partitions.locations();
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut http = Http::connect(a.api)?;
    let auth = admin_header();
    let started = Instant::now();
    for i in 0..a.nodes {
        if started.elapsed().as_secs() > a.timeout_s {
            bail!("only {i} of {} nodes added in {} s", a.nodes, a.timeout_s);
        }
        let loc = &locations[rng.gen_range(1..locations.len())];
        let body = serde_json::json!({
            "name": node_name(i),
            "country": loc.country,
            "province": loc.province,
            "city": loc.city,
            "isp": loc.isp,
            "weight": rng.gen_range(50..150),
            "cpu_usage": rng.gen_range(0.0..80.0),
            "memory_usage": rng.gen_range(0.0..80.0),
            "public_ip": Ipv4Addr::from(0x0a40_0000 + i as u32).to_string(),
            "auth_token": token(i),
        });
        let (code, resp) = http.request("POST", "/api/v1/nodes", &auth, &body.to_string())?;
        if code != 201 {
            bail!("POST /api/v1/nodes {} answered HTTP {code}: {resp}", node_name(i));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!("fleet-add: {} nodes added in {secs:.1} s", a.nodes);
    result("fleet_nodes_added", a.nodes);
    result("fleet_add_s", format!("{secs:.1}"));
    Ok(())
}

#[derive(clap::Args)]
pub struct HeartbeatArgs {
    #[arg(long, default_value = "127.0.0.1:8080")]
    api: SocketAddr,
    /// The responder the prober queries (userspace: not the XDP interface).
    #[arg(long)]
    dns: SocketAddr,
    #[arg(long, default_value = "edge.lagran.net")]
    name: String,
    /// Nodes `fleet-00000` … that `fleet-add` created.
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    /// Target heartbeats per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Connections sending heartbeats.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Seconds per phase (probe alone, probe with heartbeats), each split into `--windows`.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Windows per phase, alternating: alone, with heartbeats, alone, …
    #[arg(long, default_value_t = 5)]
    windows: u32,
    /// DNS probes per second.
    #[arg(long, default_value_t = 500)]
    probe_qps: u64,
}

/// DNS round trips (µs) at a fixed rate for `window`, closed loop, appended
/// to `rtts`; lost queries (no answer within 1 s) count as 1 s.
fn probe(a: &HeartbeatArgs, window: Duration, rtts: &mut Vec<u64>) -> anyhow::Result<()> {
    // The heartbeat senders share this CPU: the prober, like the responder it
    // measures, asks to run as soon as its reply lands, so that the p99 is the
    // server's and not the senders' turns on the client's core.
    if let Err(e) = lagran::wakeup_slice::set_own_slice(lagran::wakeup_slice::RESPONDER_SLICE_NS) {
        eprintln!("heartbeats: the prober keeps the default scheduler slice ({e})");
    }
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    sock.set_read_timeout(Some(Duration::from_millis(1000)))?;
    let gap = Duration::from_secs_f64(1.0 / a.probe_qps.max(1) as f64);
    let start = Instant::now();
    let mut buf = [0u8; 1500];
    let mut id: u16 = 0;
    let subnets =
        [(Ipv4Addr::new(58, 60, 1, 0), 24u8), (Ipv4Addr::new(123, 112, 0, 0), 24), (Ipv4Addr::new(8, 8, 8, 0), 24)];
    let mut next = start;
    while start.elapsed() < window {
        id = id.wrapping_add(1);
        let q = frames::dns_query(&a.name, id, Some(subnets[id as usize % subnets.len()]));
        let t = Instant::now();
        sock.send_to(&q, a.dns)?;
        let rtt = loop {
            match sock.recv_from(&mut buf) {
                Ok((n, _)) if frames::parse_reply(&buf[..n]).is_some_and(|r| r.id == id) => break t.elapsed(),
                Ok(_) => continue,
                Err(_) => break Duration::from_secs(1),
            }
        };
        rtts.push(rtt.as_micros() as u64);
        next += gap;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    Ok(())
}

/// Each fleet node's (cpu, memory) load as the API has it now.
fn current_loads(api: SocketAddr, nodes: usize) -> anyhow::Result<Vec<(f64, f64)>> {
    let (code, body) = Http::connect(api)?.request("GET", "/api/v1/nodes", &admin_header(), "")?;
    if code != 200 {
        bail!("GET /api/v1/nodes answered HTTP {code}: {body}");
    }
    let listed: Vec<serde_json::Value> = serde_json::from_str(&body).context("GET /api/v1/nodes")?;
    let mut loads = vec![(30.0, 40.0); nodes];
    for n in &listed {
        let index = n["name"].as_str().and_then(|s| s.strip_prefix("fleet-")).and_then(|d| d.parse::<usize>().ok());
        if let Some(i) = index.filter(|&i| i < nodes) {
            loads[i] = (n["cpu_usage"].as_f64().unwrap_or(30.0), n["memory_usage"].as_f64().unwrap_or(40.0));
        }
    }
    Ok(loads)
}

fn p99(v: &[u64]) -> u64 {
    v.get((v.len() * 99 / 100).min(v.len().saturating_sub(1))).copied().unwrap_or(0)
}

/// Heartbeats at `--rate` across `--connections` in every other window while
/// the prober runs; DNS p99 alone and under the heartbeats, each over all its
/// windows. After a window of heartbeats the prober waits [`SETTLE`] (not
/// counted), so builds a window's last heartbeats start are not taken for quiet.
pub fn heartbeats(a: HeartbeatArgs) -> anyhow::Result<()> {
    const SETTLE: Duration = Duration::from_secs(1);
    let loads = Arc::new(current_loads(a.api, a.nodes.max(1))?);
    let windows = a.windows.max(1);
    let window = Duration::from_secs(a.seconds) / windows;
    // Senders run while `sending`; they stop for good at `stop`.
    let (sending, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let per_conn = a.rate as f64 / a.connections.max(1) as f64;
    let limit = Duration::from_secs(2 * a.seconds) + SETTLE * windows + Duration::from_secs(30);
    let started = Instant::now();
    let mut workers = Vec::new();
    for c in 0..a.connections.max(1) {
        let (sending, stop, ok, failed) = (sending.clone(), stop.clone(), ok.clone(), failed.clone());
        let (api, nodes, loads) = (a.api, a.nodes.max(1), loads.clone());
        workers.push(std::thread::spawn(move || -> anyhow::Result<()> {
            // The senders share the prober's CPU: they take only what it leaves
            // (SCHED_IDLE), so a probe's reply never waits for a sender's turn.
            // SAFETY: plain syscall on the calling thread with a valid parameter.
            let param = libc::sched_param { sched_priority: 0 };
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
                eprintln!("heartbeats: sender {c} keeps the normal policy ({})", std::io::Error::last_os_error());
            }
            let mut http = Http::connect(api)?;
            let mut rng = StdRng::seed_from_u64(c as u64);
            let gap = Duration::from_secs_f64(1.0 / per_conn.max(0.001));
            let mut next: Option<Instant> = None;
            let mut i = c;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < limit {
                if !sending.load(Ordering::Relaxed) {
                    // A quiet window: no catching up on the heartbeats it skipped.
                    next = None;
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let n = i % nodes;
                i += a.connections.max(1);
                // Loads as agents report them in a steady state: up to one point of
                // jitter around the node's own level.
                let (cpu, mem) = loads[n];
                let jitter = |level: f64, rng: &mut StdRng| (level + rng.gen_range(-1.0..1.0)).clamp(0.0, 100.0);
                let body = format!(
                    "{{\"cpu_usage\":{:.1},\"memory_usage\":{:.1}}}",
                    jitter(cpu, &mut rng),
                    jitter(mem, &mut rng)
                );
                let headers = format!("x-lagran-agent-token: {}\r\n", token(n));
                match http.request("POST", &format!("/api/v1/nodes/{}/heartbeat", node_name(n)), &headers, &body) {
                    Ok((200, _)) => ok.fetch_add(1, Ordering::Relaxed),
                    Ok(_) => failed.fetch_add(1, Ordering::Relaxed),
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        http = Http::connect(api)?;
                        0
                    }
                };
                let due = next.unwrap_or_else(Instant::now) + gap;
                next = Some(due);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            Ok(())
        }));
    }
    let (mut idle, mut loaded) = (Vec::new(), Vec::new());
    let mut sending_for = Duration::ZERO;
    let probed = (|| -> anyhow::Result<()> {
        for _ in 0..windows {
            probe(&a, window, &mut idle)?;
            sending.store(true, Ordering::Relaxed);
            let t = Instant::now();
            let r = probe(&a, window, &mut loaded);
            sending.store(false, Ordering::Relaxed);
            sending_for += t.elapsed();
            r?;
            std::thread::sleep(SETTLE);
        }
        Ok(())
    })();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().map_err(|_| anyhow::anyhow!("a heartbeat thread panicked"))??;
    }
    probed?;
    idle.sort_unstable();
    loaded.sort_unstable();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let rate = ok as f64 / sending_for.as_secs_f64().max(1e-3);
    eprintln!(
        "heartbeats: {ok} accepted, {failed} failed in {:.1} s of {windows} windows ({rate:.0}/s, target {}/s); DNS p99 {} µs alone, {} µs under heartbeats ({} / {} probes)",
        sending_for.as_secs_f64(),
        a.rate,
        p99(&idle),
        p99(&loaded),
        idle.len(),
        loaded.len()
    );
    result("heartbeats_target_per_s", a.rate);
    result("heartbeats_per_s", format!("{rate:.0}"));
    result("heartbeats_failed", failed);
    result("heartbeat_windows", windows);
    result("dns_p99_idle_us", p99(&idle));
    result("dns_p99_heartbeats_us", p99(&loaded));
    result("dns_probes", idle.len() + loaded.len());
    Ok(())
}
