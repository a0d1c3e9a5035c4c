//! One `NAME A` query with ECS from the client namespace, retried until an
//! answer arrives or `--wait` runs out. A PASS program is attached to the client
//! veth meanwhile, so answers sent with `XDP_TX` reach the socket.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::{frames, rawxdp, result};

#[derive(clap::Args)]
pub struct Args {
    /// The client veth (a PASS program is attached while querying).
    #[arg(long)]
    iface: String,
    #[arg(long)]
    server: SocketAddr,
    /// ECS subnet, e.g. 58.60.1.0/24.
    #[arg(long)]
    subnet: String,
    #[arg(long, default_value = "edge.lagran.net")]
    name: String,
    /// Keep trying for this many seconds.
    #[arg(long, default_value_t = 5.0)]
    wait: f64,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let (addr, len) = a.subnet.split_once('/').ok_or_else(|| anyhow::anyhow!("--subnet ADDR/LEN"))?;
    let (addr, len): (Ipv4Addr, u8) = (addr.parse()?, len.parse()?);
    let _pass = rawxdp::attach(&a.iface, rawxdp::XDP_PASS)?;
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let start = Instant::now();
    let mut id: u16 = 0x4c47;
    let mut buf = [0u8; 1500];
    while start.elapsed().as_secs_f64() < a.wait {
        id = id.wrapping_add(1);
        let q = frames::dns_query(&a.name, id, Some((addr, len)));
        let t = Instant::now();
        if sock.send_to(&q, a.server).is_err() {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        while let Ok((n, _)) = sock.recv_from(&mut buf) {
            let Some(r) = frames::parse_reply(&buf[..n]) else { continue };
            if r.id != id {
                continue;
            }
            result("rtt_us", t.elapsed().as_micros());
            result("rcode", r.rcode);
            result("aa", u8::from(r.aa));
            result("answer", r.a.first().map_or("-".to_string(), |a| a.to_string()));
            result("ttl", r.ttl.map_or("-".to_string(), |t| t.to_string()));
            result("scope", r.scope.map_or("-".to_string(), |s| s.to_string()));
            return Ok(());
        }
    }
    bail!("no answer from {} for {} A (ECS {}) within {} s", a.server, a.name, a.subnet, a.wait)
}

#[derive(clap::Args)]
pub struct HoldArgs {
    #[arg(long)]
    iface: String,
    /// At most this long (the caller normally stops it sooner).
    #[arg(long, default_value_t = 60)]
    secs: u64,
}

pub fn hold(a: HoldArgs) -> anyhow::Result<()> {
    let _pass = rawxdp::attach(&a.iface, rawxdp::XDP_PASS)?;
    std::thread::sleep(Duration::from_secs(a.secs.min(600)));
    Ok(())
}
