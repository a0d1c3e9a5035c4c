//! An ECS load generator: `edge.lagran.net A` with ECS for a spread of real
//! client /24s, sent at a fixed rate for a bounded time from an AF_PACKET socket
//! (qdisc bypassed) on the client veth; replies are counted by the veth's
//! `rx_packets` and dropped at XDP (see `rawxdp`).
//!
//! Bounded: at most `rate × duration` packets, and the send loop stops at
//! `duration + 1 s` whatever it managed to send.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rand::{Rng as _, SeedableRng as _, rngs::StdRng};

use crate::frames::{self, Addrs};
use crate::{rawxdp, result};

#[derive(clap::Args)]
pub struct Args {
    /// The client veth (run inside the client namespace).
    #[arg(long)]
    iface: String,
    #[arg(long)]
    src_ip: Ipv4Addr,
    #[arg(long)]
    dst_ip: Ipv4Addr,
    /// The server veth's MAC address.
    #[arg(long)]
    dst_mac: String,
    #[arg(long, default_value_t = 53)]
    port: u16,
    /// Queries per second.
    #[arg(long)]
    rate: u64,
    /// Seconds of sending.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    #[command(flatten)]
    queries: QuerySet,
    /// Packets per sendmmsg(2).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Send plain queries (no OPT/ECS) instead.
    #[arg(long)]
    no_ecs: bool,
    /// Set the DO bit (RFC 3225) in the OPT: a signed zone answers with RRSIGs.
    #[arg(long, conflicts_with = "no_ecs")]
    dnssec_ok: bool,
}

/// The DNS queries a command sends: one a real client /24 of the geo file,
/// each with that /24 as its ECS subnet.
#[derive(clap::Args)]
pub struct QuerySet {
    /// The real geo file the client subnets are drawn from.
    #[arg(long)]
    xdb: PathBuf,
    /// Distinct client /24s (each its own query packet).
    #[arg(long, default_value_t = 4096)]
    subnets: usize,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The name asked for.
    #[arg(long, default_value = "edge.lagran.net")]
    name: String,
}

impl QuerySet {
    /// The client /24s ([`real_subnets`] of the geo file).
    fn subnets(&self) -> anyhow::Result<Vec<Ipv4Addr>> {
        let xdb = lagran::geo::Xdb::open(&self.xdb).with_context(|| format!("opening {}", self.xdb.display()))?;
        Ok(real_subnets(&xdb, self.subnets, self.seed))
    }
}

/// `n` distinct public /24s that the geo file locates (a region other than unknown),
/// from a fixed seed: real client subnets spread over the address space.
pub fn real_subnets(xdb: &lagran::geo::Xdb, n: usize, seed: u64) -> Vec<Ipv4Addr> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    let mut tries = 0usize;
    while out.len() < n && tries < n * 1000 {
        tries += 1;
        let a = rng.r#gen::<u32>() & 0xffff_ff00;
        let ip = Ipv4Addr::from(a);
        if lagran::geo::reserved::is_special_v4(ip) || !seen.insert(a) {
            continue;
        }
        let Some(seg) = xdb.search_u128(u128::from(a)) else { continue };
        if lagran::location::Location::from_region(seg.region).is_unknown() {
            continue;
        }
        out.push(ip);
    }
    out
}

fn rx_packets(iface: &str) -> anyhow::Result<u64> {
    let path = format!("/sys/class/net/{iface}/statistics/rx_packets");
    let s = std::fs::read_to_string(&path).with_context(|| format!("reading {path} (run in the client namespace)"))?;
    Ok(s.trim().parse()?)
}

/// An AF_PACKET socket bound to `iface` that sends whole frames past the qdisc.
struct PacketSocket {
    fd: std::os::fd::OwnedFd,
}

impl PacketSocket {
    fn open(iface: &str) -> anyhow::Result<PacketSocket> {
        use std::os::fd::{AsRawFd as _, FromRawFd as _};
        // SAFETY: plain socket(2); protocol 0 = send only, nothing is received on it.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        if fd < 0 {
            bail!("socket(AF_PACKET): {}", std::io::Error::last_os_error());
        }
        // SAFETY: a new descriptor we own.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let cname = std::ffi::CString::new(iface)?;
        // SAFETY: NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            bail!("no interface {iface} in this namespace");
        }
        // SAFETY: sockaddr_ll is plain data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: bind(2) with a sockaddr_ll of the right size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            bail!("bind(AF_PACKET, {iface}): {}", std::io::Error::last_os_error());
        }
        let one: libc::c_int = 1;
        // SAFETY: setsockopt with an int option.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_QDISC_BYPASS,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        if rc != 0 {
            bail!("PACKET_QDISC_BYPASS: {}", std::io::Error::last_os_error());
        }
        Ok(PacketSocket { fd })
    }

    /// Sends `frames` with one sendmmsg(2); returns how many the kernel took.
    fn send(&self, frames: &[&[u8]]) -> usize {
        use std::os::fd::AsRawFd as _;
        let mut iov: Vec<libc::iovec> = frames
            .iter()
            .map(|f| libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: msghdr is plain data; zero is "no address, no control".
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_iov = v as *mut libc::iovec;
                h.msg_iovlen = 1;
                libc::mmsghdr { msg_hdr: h, msg_len: 0 }
            })
            .collect();
        // SAFETY: `msgs` and the iovecs/frames they point at outlive the call.
        let n = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, 0) };
        n.max(0) as usize
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.rate == 0 || a.duration <= 0.0 || a.duration > 30.0 {
        bail!("--rate must be > 0 and --duration in (0, 30] seconds");
    }
    let subnets = a.queries.subnets()?;
    if subnets.is_empty() {
        bail!("no located public /24 found in {}", a.queries.xdb.display());
    }
    let src_mac = frames::iface_mac(&a.iface)?;
    let dst_mac = frames::parse_mac(&a.dst_mac)?;
    let packets: Vec<Vec<u8>> = subnets
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let addrs = Addrs {
                src_mac,
                dst_mac,
                src_ip: a.src_ip,
                dst_ip: a.dst_ip,
                src_port: 10_000 + (i % 50_000) as u16,
                dst_port: a.port,
            };
            let ecs = (!a.no_ecs).then_some((*s, 24));
            let mut q = frames::dns_query(&a.queries.name, i as u16, ecs);
            if a.dnssec_ok {
                frames::set_dnssec_ok(&mut q);
            }
            frames::udp_frame(&addrs, &q)
        })
        .collect();
    let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();

    let _drop = rawxdp::attach(&a.iface, rawxdp::XDP_DROP)?;
    let sock = PacketSocket::open(&a.iface)?;
    let total = (a.rate as f64 * a.duration) as u64;
    let deadline = Duration::from_secs_f64(a.duration + 1.0);
    let rx0 = rx_packets(&a.iface)?;
    let start = Instant::now();
    let mut sent = 0u64;
    let mut next = 0usize;
    // Never spin: the client veth's NAPI thread, which receives (and drops) the
    // answers, shares this CPU. Batches grow with the rate so that one batch is
    // sent about every 100 µs.
    let batch_n = a.batch.max((a.rate / 10_000) as usize).min(256);
    let mut batch: Vec<&[u8]> = Vec::with_capacity(batch_n);
    while sent < total {
        let elapsed = start.elapsed();
        if elapsed > deadline {
            break;
        }
        let allowed = ((a.rate as f64 * elapsed.as_secs_f64()) as u64).min(total);
        if allowed < sent + batch_n as u64 && allowed < total {
            let ahead = (sent + batch_n as u64 - allowed) as f64 / a.rate as f64;
            std::thread::sleep(Duration::from_secs_f64(ahead.max(0.000_02)));
            continue;
        }
        let n = ((allowed - sent) as usize).min(batch_n);
        batch.clear();
        for _ in 0..n {
            batch.push(refs[next]);
            next = (next + 1) % refs.len();
        }
        let took = sock.send(&batch);
        sent += took as u64;
        if took < n {
            // The kernel refused part of the batch (socket buffer full): go on from there.
            next = (next + refs.len() - (n - took)) % refs.len();
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let send_secs = start.elapsed().as_secs_f64();
    // Late replies still in flight.
    std::thread::sleep(Duration::from_millis(300));
    let received = rx_packets(&a.iface)?.saturating_sub(rx0);
    result("target_qps", a.rate);
    result("subnets", subnets.len());
    result("sent", sent);
    result("received", received);
    result("send_secs", format!("{send_secs:.4}"));
    result("sent_qps", format!("{:.0}", sent as f64 / send_secs));
    result("answered_qps", format!("{:.0}", received.min(sent) as f64 / send_secs));
    result("answered_ratio", format!("{:.4}", if sent == 0 { 0.0 } else { received as f64 / sent as f64 }));
    Ok(())
}

#[derive(clap::Args)]
pub struct QueriesArgs {
    #[command(flatten)]
    queries: QuerySet,
    #[arg(long)]
    out: PathBuf,
}

/// dnsperf `-B`: each query as a 2-byte big-endian length and the DNS message.
pub fn queries(a: QueriesArgs) -> anyhow::Result<()> {
    let mut out = Vec::new();
    let subnets = a.queries.subnets()?;
    for (i, s) in subnets.iter().enumerate() {
        let q = frames::dns_query(&a.queries.name, i as u16, Some((*s, 24)));
        out.extend_from_slice(&(q.len() as u16).to_be_bytes());
        out.extend_from_slice(&q);
    }
    std::fs::write(&a.out, out).with_context(|| format!("writing {}", a.out.display()))?;
    result("queries", subnets.len());
    Ok(())
}
