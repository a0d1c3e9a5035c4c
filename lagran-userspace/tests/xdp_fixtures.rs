//! Packet fixtures for the XDP fast path, run through `BPF_PROG_TEST_RUN` on the
//! real object built by `cargo xtask build-ebpf --release` (katran style: input
//! packet → expected action → expected output packet).
//!
//! Every answered fixture is also answered by the userspace responder
//! (`lagran::dns::answer`) from the same route table, with the
//! same server cookie secret and a fixed clock ([`COOKIE_SECRET`],
//! [`COOKIE_NOW`]), and the two DNS messages must be identical byte for byte
//! (the fast path and userspace give the same answer).
//!
//! Needs root (CAP_BPF) and the object; without them the tests fail with a
//! message saying what to do (they never skip).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lagran::config::DnsSettings;
use lagran::dns::{self, AnswerContext, Transport};
use lagran::model::Zone;
use lagran::prefix_map::{PrefixMapV4, PrefixMapV6};
use lagran::route_table::{Answer, Canary, RouteTable, ScheduledName, ZoneRoutes};
use lagran::xdp::{LoadedXdp, MapWriter, TestRunOutput};
use lagran_common::counters::Counter;
use rand::{Rng, SeedableRng, rngs::StdRng};

const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const DNS_PORT: u16 = 53;
/// The server cookie secret both sides use, and the Unix second they stamp cookies with.
const COOKIE_SECRET: [u8; 16] = *b"lagran-fixtures!";
const COOKIE_NOW: u32 = 1_700_000_000;

fn cookie_check() -> dns::cookie::CookieCheck {
    dns::cookie::CookieCheck { current: COOKIE_SECRET, previous: None, now: COOKIE_NOW }
}

// ---------------------------------------------------------------- the table

const RESOLVER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 53);
const SERVER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x53);

fn v6(a: &str) -> u128 {
    u128::from(a.parse::<Ipv6Addr>().unwrap())
}

/// An answer with IPv4 and IPv6 addresses.
fn answer46(ttl: u32, ips: &[&str], ips6: &[&str]) -> Answer {
    Answer { ipv6: ips6.iter().map(|s| s.parse().unwrap()).collect(), ..answer(ttl, ips) }
}

fn v4(a: &str) -> u32 {
    u32::from(a.parse::<Ipv4Addr>().unwrap())
}

fn answer(ttl: u32, ips: &[&str]) -> Answer {
    Answer {
        ttl,
        ipv4: ips.iter().map(|s| s.parse().unwrap()).collect(),
        reason: "fixture".into(),
        ..Answer::default()
    }
}

/// `edge.lagran.net` (id 1): 10/8 → two addresses (TTL 10), 58.60/16 → nobody
/// eligible, the rest → one address (route TTL 300, answered as DNS_TTL 30).
/// `pool-a.edge.lagran.net` (id 2): four addresses everywhere.
/// `canary.edge.lagran.net` (id 3): 50 % of the /24s get the canary answer.
fn table() -> RouteTable {
    let edge = ScheduledName {
        ecs: true,
        name: "edge.lagran.net".into(),
        id: 1,
        answers: std::sync::Arc::new(vec![
            answer(300, &["192.0.2.10"]),
            answer(10, &["192.0.2.20", "192.0.2.21"]),
            answer(30, &[]),
        ]),
        v4: PrefixMapV4::from_ranges(
            [(v4("10.0.0.0"), v4("10.255.255.255"), 1), (v4("58.60.0.0"), v4("58.60.255.255"), 2)],
            0,
        ),
        v6: PrefixMapV6::uniform(0),
    };
    let pool = ScheduledName {
        ecs: true,
        name: "pool-a.edge.lagran.net".into(),
        id: 2,
        answers: std::sync::Arc::new(vec![answer(
            20,
            &["198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"],
        )]),
        v4: PrefixMapV4::uniform(0),
        v6: PrefixMapV6::uniform(0),
    };
    let mut primary = answer(30, &["192.0.2.100"]);
    primary.canary = Some(Canary { percent: 50, answer: 1 });
    let canary = ScheduledName {
        ecs: true,
        name: "canary.edge.lagran.net".into(),
        id: 3,
        answers: std::sync::Arc::new(vec![primary, answer(30, &["192.0.2.200"])]),
        v4: PrefixMapV4::from_ranges([(v4("100.0.0.0"), v4("100.255.255.255"), 0)], 0),
        v6: PrefixMapV6::uniform(0),
    };
    // `dual.edge.lagran.net` (id 4): 10/8 and 2001:db8:1::/48 → two A and two
    // AAAA (TTL 10); 2001:db8:2::/48 → A only (AAAA is NODATA upstairs);
    // 2001:db8:3::/48 → four AAAA; the rest → one of each (TTL 300 → 30).
    let dual = ScheduledName {
        ecs: true,
        name: "dual.edge.lagran.net".into(),
        id: 4,
        answers: std::sync::Arc::new(vec![
            answer46(300, &["192.0.2.10"], &["2001:db8:53::10"]),
            answer46(10, &["192.0.2.20", "192.0.2.21"], &["2001:db8:53::20", "2001:db8:53::21"]),
            answer46(30, &["192.0.2.30"], &[]),
            answer46(20, &["192.0.2.40"], &["2001:db8:53::1", "2001:db8:53::2", "2001:db8:53::3", "2001:db8:53::4"]),
        ]),
        v4: PrefixMapV4::from_ranges([(v4("10.0.0.0"), v4("10.255.255.255"), 1)], 0),
        v6: PrefixMapV6::from_ranges(
            [
                (v6("2001:db8:1::"), v6("2001:db8:1:ffff:ffff:ffff:ffff:ffff"), 1),
                (v6("2001:db8:2::"), v6("2001:db8:2:ffff:ffff:ffff:ffff:ffff"), 2),
                (v6("2001:db8:3::"), v6("2001:db8:3:ffff:ffff:ffff:ffff:ffff"), 3),
            ],
            0,
        ),
    };
    // `canary6.edge.lagran.net` (id 5): 50 % of the IPv6 /48s (and IPv4 /24s) get the canary.
    let mut primary6 = answer46(30, &["192.0.2.100"], &["2001:db8:53::100"]);
    primary6.canary = Some(Canary { percent: 50, answer: 1 });
    let canary6 = ScheduledName {
        ecs: true,
        name: "canary6.edge.lagran.net".into(),
        id: 5,
        answers: std::sync::Arc::new(vec![primary6, answer46(30, &["192.0.2.200"], &["2001:db8:53::200"])]),
        v4: PrefixMapV4::uniform(0),
        v6: PrefixMapV6::from_ranges([(v6("2001:db8:100::"), v6("2001:db8:1ff:ffff:ffff:ffff:ffff:ffff"), 0)], 0),
    };
    let zone = ZoneRoutes { zone: Zone::new("edge.lagran.net"), names: vec![edge, pool, canary, dual, canary6] };
    RouteTable::new(7, now_ms(), vec![zone])
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn settings() -> DnsSettings {
    DnsSettings::default()
}

// ------------------------------------------------------------ the program

struct Fixture {
    prog: LoadedXdp,
    writer: MapWriter,
    table: RouteTable,
}

impl Fixture {
    /// Loads the real object (the verifier runs here) and syncs the fixture table.
    fn new() -> Fixture {
        let obj = lagran::xdp::object_bytes().unwrap_or_else(|e| {
            panic!("the XDP fixture tests need the BPF object: {e} (`cargo xtask test` builds it first)")
        });
        let prog = LoadedXdp::load(&obj).unwrap_or_else(|e| {
            panic!("loading the XDP program must succeed (root/CAP_BPF needed; verifier output follows): {e}")
        });
        Fixture::with(prog, table())
    }

    /// A loaded program with `table` synced.
    fn with(mut prog: LoadedXdp, table: RouteTable) -> Fixture {
        let mut writer = prog.map_writer(DNS_PORT, 1232).expect("map writer");
        writer.sync(&table, &settings()).expect("first sync");
        let secrets = dns::cookie::Secrets { current: COOKIE_SECRET, previous: None };
        writer
            .set_cookie(&lagran::xdp::maps::cookie_config(&secrets, u64::from(COOKIE_NOW), Some(COOKIE_NOW)))
            .expect("cookie secret");
        assert!(writer.enabled(), "a synced table with a version enables the fast path");
        Fixture { prog, writer, table }
    }

    /// Runs one frame; checks that exactly `expect` was counted.
    fn run(&self, frame: &[u8], expect: Counter) -> TestRunOutput {
        let before = self.writer.counters().unwrap();
        let out = self.prog.test_run(frame).expect("BPF_PROG_TEST_RUN");
        let after = self.writer.counters().unwrap();
        let moved: Vec<(Counter, u64)> =
            after.iter().zip(before.iter()).filter(|(a, b)| a.1 != b.1).map(|(a, b)| (a.0, a.1 - b.1)).collect();
        assert_eq!(moved, vec![(expect, 1)], "exactly one counter ({expect:?}) moves for this packet");
        let want = if expect == Counter::Answered { XDP_TX } else { XDP_PASS };
        assert_eq!(out.action, want, "action for a packet counted as {expect:?}");
        if want == XDP_PASS {
            assert_eq!(out.frame, frame, "a passed packet is not modified");
        }
        out
    }

    /// Runs an answerable frame and returns the response's DNS message after
    /// checking every header below it and the parity with userspace.
    fn answered(&self, frame: &[u8]) -> Vec<u8> {
        let out = self.run(frame, Counter::Answered);
        let dns_out = check_tx_headers(frame, &out.frame);
        let parsed_in = parse_frame(frame).unwrap();
        let now = now_ms();
        let (settings, check) = (settings(), cookie_check());
        let ctx =
            AnswerContext::new(&self.table, &settings, parsed_in.src, Transport::Udp, now).with_cookies(Some(&check));
        let reply = dns::answer(parsed_in.dns, &ctx);
        let user = reply.bytes.expect("userspace answers what XDP answers");
        assert_eq!(hex(dns_out), hex(&user), "the XDP response must equal the userspace response byte for byte");
        dns_out.to_vec()
    }

    fn pass(&self, frame: &[u8], reason: Counter) {
        self.run(frame, reason);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

// ------------------------------------------------------------ packet building

fn wire(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for l in name.trim_end_matches('.').split('.').filter(|l| !l.is_empty()) {
        out.push(l.len() as u8);
        out.extend_from_slice(l.as_bytes());
    }
    out.push(0);
    out
}

/// A DNS query message.
#[derive(Clone)]
struct Dns {
    id: u16,
    flags: u16,
    counts: Option<[u16; 4]>,
    qname: Vec<u8>,
    qtype: u16,
    qclass: u16,
    additional: Vec<u8>,
    arcount: u16,
}

impl Dns {
    fn a(name: &str) -> Dns {
        Dns {
            id: 0xbeef,
            flags: 0x0100,
            counts: None,
            qname: wire(name),
            qtype: 1,
            qclass: 1,
            additional: vec![],
            arcount: 0,
        }
    }
    fn flags(mut self, f: u16) -> Dns {
        self.flags = f;
        self
    }
    fn qtype(mut self, t: u16) -> Dns {
        self.qtype = t;
        self
    }
    fn qclass(mut self, c: u16) -> Dns {
        self.qclass = c;
        self
    }
    fn counts(mut self, c: [u16; 4]) -> Dns {
        self.counts = Some(c);
        self
    }
    /// Adds an OPT record: payload size, version, DO, raw options.
    fn opt(mut self, payload: u16, version: u8, do_bit: bool, options: &[u8]) -> Dns {
        self.additional.extend_from_slice(&opt_rr(payload, 0, version, do_bit, options));
        self.arcount += 1;
        self
    }
    fn raw_additional(mut self, rr: &[u8]) -> Dns {
        self.additional.extend_from_slice(rr);
        self.arcount += 1;
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let [qd, an, ns, ar] = self.counts.unwrap_or([1, 0, 0, self.arcount]);
        let mut m = Vec::new();
        for v in [self.id, self.flags, qd, an, ns, ar] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        m.extend_from_slice(&self.qname);
        m.extend_from_slice(&self.qtype.to_be_bytes());
        m.extend_from_slice(&self.qclass.to_be_bytes());
        m.extend_from_slice(&self.additional);
        m
    }
}

fn opt_rr(payload: u16, ext_rcode: u8, version: u8, do_bit: bool, options: &[u8]) -> Vec<u8> {
    let mut r = vec![0, 0, 41];
    r.extend_from_slice(&payload.to_be_bytes());
    r.extend_from_slice(&[ext_rcode, version, if do_bit { 0x80 } else { 0 }, 0]);
    r.extend_from_slice(&(options.len() as u16).to_be_bytes());
    r.extend_from_slice(options);
    r
}

/// An ECS option (RFC 7871 §6) with the address bytes as given.
fn ecs(family: u16, source: u8, scope: u8, addr: &[u8]) -> Vec<u8> {
    let mut o = vec![0, 8];
    o.extend_from_slice(&((4 + addr.len()) as u16).to_be_bytes());
    o.extend_from_slice(&family.to_be_bytes());
    o.extend_from_slice(&[source, scope]);
    o.extend_from_slice(addr);
    o
}

/// A COOKIE option with a client cookie only (RFC 7873 §4), as `dig` sends it.
fn cookie() -> Vec<u8> {
    vec![0, 10, 0, 8, 0x5a, 0x1e, 0x9c, 0x3d, 0x21, 0x07, 0xe4, 0x88]
}

/// A COOKIE option with client and server cookies (8 + 16 octets).
fn cookie_with_server() -> Vec<u8> {
    let mut o = vec![0, 10, 0, 24];
    o.extend((0..24u8).map(|i| i.wrapping_mul(37)));
    o
}

/// A COOKIE option with the client cookie of [`cookie`] and our server cookie
/// for `src`, stamped `age` seconds before [`COOKIE_NOW`].
fn cookie_valid(src: IpAddr, age: i64) -> Vec<u8> {
    let client: [u8; 8] = cookie()[4..].try_into().unwrap();
    let ts = (i64::from(COOKIE_NOW) - age) as u32;
    let server = dns::cookie::server_cookie(&COOKIE_SECRET, &client, ts, src);
    [&[0u8, 10, 0, 24][..], &client, &server].concat()
}

/// A Padding option (RFC 7830) of `n` zero octets.
fn padding(n: u16) -> Vec<u8> {
    let mut o = vec![0, 12];
    o.extend_from_slice(&n.to_be_bytes());
    o.extend(std::iter::repeat_n(0, n as usize));
    o
}

/// An ECS option for an IPv4 subnet, address truncated to the prefix.
fn ecs4(subnet: &str) -> Vec<u8> {
    let (a, l) = subnet.split_once('/').unwrap();
    let a: Ipv4Addr = a.parse().unwrap();
    let l: u8 = l.parse().unwrap();
    let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
    let a = Ipv4Addr::from(u32::from(a) & mask);
    ecs(1, l, 0, &a.octets()[..(l as usize).div_ceil(8)])
}

/// Everything below DNS.
/// An ECS option's (family, source prefix, scope prefix, address bytes).
type EcsFields = (u16, u8, u8, Vec<u8>);

#[derive(Clone)]
struct Frame {
    vlan: Option<u16>,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    proto: u8,
    frags: u16,
    ip_options: bool,
    /// Bytes after the IP datagram (Ethernet padding).
    padding: usize,
    /// IPv6 transport: (source, destination) instead of the IPv4 addresses.
    v6: Option<(Ipv6Addr, Ipv6Addr)>,
    /// IPv6 next header (17 = UDP directly after the fixed header).
    next: u8,
    /// Send the UDP checksum as 0 (none).
    no_udp_checksum: bool,
}

impl Frame {
    fn new() -> Frame {
        Frame {
            vlan: None,
            src: RESOLVER,
            dst: SERVER,
            sport: 40000,
            dport: DNS_PORT,
            proto: 17,
            frags: 0x4000,
            ip_options: false,
            padding: 0,
            v6: None,
            next: 17,
            no_udp_checksum: false,
        }
    }
    /// The same query over IPv6, from `src` to the server's IPv6 address.
    fn v6(mut self, src: &str) -> Frame {
        self.v6 = Some((src.parse().unwrap(), SERVER6));
        self
    }
    fn from(mut self, src: &str) -> Frame {
        self.src = src.parse().unwrap();
        self
    }
    fn build(&self, dns: &[u8]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
        if let Some(vid) = self.vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&vid.to_be_bytes());
        }
        if let Some((src, dst)) = self.v6 {
            f.extend_from_slice(&[0x86, 0xdd]);
            let ulen = (8 + dns.len()) as u16;
            f.extend_from_slice(&[0x60, 0x01, 0x23, 0x45]);
            f.extend_from_slice(&ulen.to_be_bytes());
            f.extend_from_slice(&[self.next, 61]);
            f.extend_from_slice(&src.octets());
            f.extend_from_slice(&dst.octets());
            let mut udp = Vec::new();
            udp.extend_from_slice(&self.sport.to_be_bytes());
            udp.extend_from_slice(&self.dport.to_be_bytes());
            udp.extend_from_slice(&ulen.to_be_bytes());
            udp.extend_from_slice(&[0, 0]);
            udp.extend_from_slice(dns);
            if !self.no_udp_checksum {
                let c = checksum(&udp, pseudo6(src, dst, ulen));
                udp[6..8].copy_from_slice(&c.to_be_bytes());
            }
            f.extend_from_slice(&udp);
            f.extend(std::iter::repeat_n(0, self.padding));
            return f;
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let opts: &[u8] = if self.ip_options { &[1, 1, 1, 0] } else { &[] };
        let ihl = 5 + opts.len() / 4;
        let total = ihl * 4 + 8 + dns.len();
        let mut ip = vec![0x40 | ihl as u8, 0];
        ip.extend_from_slice(&(total as u16).to_be_bytes());
        ip.extend_from_slice(&[0x12, 0x34]);
        ip.extend_from_slice(&self.frags.to_be_bytes());
        ip.extend_from_slice(&[61, self.proto, 0, 0]);
        ip.extend_from_slice(&self.src.octets());
        ip.extend_from_slice(&self.dst.octets());
        ip.extend_from_slice(opts);
        let c = checksum(&ip, 0);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let ulen = (8 + dns.len()) as u16;
        let mut udp = Vec::new();
        udp.extend_from_slice(&self.sport.to_be_bytes());
        udp.extend_from_slice(&self.dport.to_be_bytes());
        udp.extend_from_slice(&ulen.to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(dns);
        let c = checksum(&udp, pseudo(self.src, self.dst, ulen));
        udp[6..8].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&udp);
        f.extend(std::iter::repeat_n(0, self.padding));
        f
    }
}

/// Recomputes the IPv4 header checksum of an untagged frame after an edit.
fn fix_ip_checksum(f: &mut [u8]) {
    f[24..26].copy_from_slice(&[0, 0]);
    let c = checksum(&f[14..34], 0);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

fn sum16(b: &[u8], mut s: u32) -> u32 {
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    s
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn checksum(b: &[u8], seed: u32) -> u16 {
    !fold(sum16(b, seed))
}

/// RFC 8200 §8.1: source, destination, upper-layer length (32 bits), next header.
fn pseudo6(src: Ipv6Addr, dst: Ipv6Addr, ulen: u16) -> u32 {
    let mut p = Vec::new();
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&ulen.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 17]);
    sum16(&p, 0)
}

fn pseudo(src: Ipv4Addr, dst: Ipv4Addr, ulen: u16) -> u32 {
    let mut p = Vec::new();
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[0, 17]);
    p.extend_from_slice(&ulen.to_be_bytes());
    sum16(&p, 0)
}

struct Parsed<'a> {
    l2: usize,
    src: IpAddr,
    dst: IpAddr,
    dns: &'a [u8],
}

fn parse_frame(f: &[u8]) -> Option<Parsed<'_>> {
    let l2 = if f.get(12..14)? == [0x81, 0x00] { 18 } else { 14 };
    if f.get(l2 - 2..l2)? == [0x86, 0xdd] {
        let ip = f.get(l2..l2 + 40)?;
        let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
        let dns = f.get(l2 + 48..l2 + 40 + plen)?;
        return Some(Parsed { l2, src: IpAddr::V6(src), dst: IpAddr::V6(dst), dns });
    }
    let ip = f.get(l2..l2 + 20)?;
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let dns = f.get(l2 + 28..l2 + total)?;
    Some(Parsed { l2, src: IpAddr::V4(src), dst: IpAddr::V4(dst), dns })
}

/// Checks Ethernet, IPv4 and UDP of a response against its query; returns the DNS message.
fn check_tx_headers<'a>(input: &[u8], out: &'a [u8]) -> &'a [u8] {
    let q = parse_frame(input).unwrap();
    let l2 = q.l2;
    assert_eq!(&out[0..6], &input[6..12], "destination MAC = query's source MAC");
    assert_eq!(&out[6..12], &input[0..6], "source MAC = query's destination MAC");
    assert_eq!(&out[12..l2], &input[12..l2], "ethertype and VLAN tag kept");
    if let (IpAddr::V6(qsrc), IpAddr::V6(qdst)) = (q.src, q.dst) {
        let ip = &out[l2..l2 + 40];
        assert_eq!(&ip[0..4], &input[l2..l2 + 4], "version, traffic class and flow label kept");
        let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
        assert_eq!(l2 + 40 + plen, out.len(), "payload length covers the frame exactly (no padding left)");
        assert_eq!((ip[6], ip[7]), (17, 64), "next header UDP, hop limit 64");
        assert_eq!(&ip[8..24], &qdst.octets(), "source IP = query's destination");
        assert_eq!(&ip[24..40], &qsrc.octets(), "destination IP = query's source");
        let udp = &out[l2 + 40..];
        assert_eq!(&udp[0..2], &input[l2 + 42..l2 + 44], "source port = query's destination port");
        assert_eq!(&udp[2..4], &input[l2 + 40..l2 + 42], "destination port = query's source port");
        let ulen = u16::from_be_bytes([udp[4], udp[5]]);
        assert_eq!(ulen as usize, plen, "UDP length");
        assert_ne!(&udp[6..8], &[0, 0], "UDP checksum is computed (mandatory over IPv6)");
        assert_eq!(
            fold(sum16(udp, pseudo6(qdst, qsrc, ulen))),
            0xffff,
            "UDP checksum verifies over the IPv6 pseudo-header and the whole datagram"
        );
        return &out[l2 + 48..];
    }
    let (IpAddr::V4(qsrc), IpAddr::V4(qdst)) = (q.src, q.dst) else { unreachable!("one family") };
    let ip = &out[l2..l2 + 20];
    assert_eq!(ip[0], 0x45);
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    assert_eq!(l2 + total, out.len(), "IP total length covers the frame exactly (no padding left)");
    assert_eq!(&ip[12..16], &qdst.octets(), "source IP = query's destination");
    assert_eq!(&ip[16..20], &qsrc.octets(), "destination IP = query's source");
    assert_eq!(ip[8], 64, "IP TTL");
    assert_eq!(ip[9], 17);
    assert_eq!(fold(sum16(ip, 0)), 0xffff, "IPv4 header checksum verifies");
    let udp = &out[l2 + 20..];
    assert_eq!(&udp[0..2], &input[l2 + 22..l2 + 24], "source port = query's destination port");
    assert_eq!(&udp[2..4], &input[l2 + 20..l2 + 22], "destination port = query's source port");
    let ulen = u16::from_be_bytes([udp[4], udp[5]]);
    assert_eq!(ulen as usize, total - 20, "UDP length");
    assert_ne!(&udp[6..8], &[0, 0], "UDP checksum is computed, not omitted");
    assert_eq!(
        fold(sum16(udp, pseudo(qdst, qsrc, ulen))),
        0xffff,
        "UDP checksum verifies over the pseudo-header and the whole datagram"
    );
    &out[l2 + 28..]
}

// ----------------------------------------------------------- response reading

struct Resp {
    flags: u16,
    ancount: u16,
    arcount: u16,
    /// (ttl, address) of the A records
    answers: Vec<(u32, Ipv4Addr)>,
    /// (ttl, address) of the AAAA records
    answers6: Vec<(u32, Ipv6Addr)>,
    /// OPT: (payload, ttl field, ECS (family, source, scope, addr bytes))
    opt: Option<(u16, u32, Option<EcsFields>)>,
}

fn read_resp(m: &[u8], qlen: usize) -> Resp {
    let be16 = |o: usize| u16::from_be_bytes([m[o], m[o + 1]]);
    let flags = be16(2);
    let ancount = be16(6);
    let arcount = be16(10);
    let mut o = 12 + qlen + 4;
    let mut answers = Vec::new();
    let mut answers6 = Vec::new();
    for _ in 0..ancount {
        assert_eq!(&m[o..o + 2], &[0xc0, 0x0c], "answer owner is a pointer to the question");
        let ttl = u32::from_be_bytes([m[o + 6], m[o + 7], m[o + 8], m[o + 9]]);
        if be16(o + 2) == 28 {
            assert_eq!(&m[o + 4..o + 6], &[0, 1], "AAAA IN");
            assert_eq!(be16(o + 10), 16);
            answers6.push((ttl, Ipv6Addr::from(<[u8; 16]>::try_from(&m[o + 12..o + 28]).unwrap())));
            o += 28;
            continue;
        }
        assert_eq!(&m[o + 2..o + 6], &[0, 1, 0, 1], "A IN");
        assert_eq!(be16(o + 10), 4);
        answers.push((ttl, Ipv4Addr::new(m[o + 12], m[o + 13], m[o + 14], m[o + 15])));
        o += 16;
    }
    let mut opt = None;
    if arcount == 1 {
        assert_eq!(&m[o..o + 3], &[0, 0, 41], "OPT record");
        let payload = be16(o + 3);
        let ttl = u32::from_be_bytes([m[o + 5], m[o + 6], m[o + 7], m[o + 8]]);
        let rdlen = be16(o + 9) as usize;
        let mut rd = &m[o + 11..o + 11 + rdlen];
        // Our COOKIE option, when there is one, is the last (28 octets).
        if rd.len() >= 28 && rd[rd.len() - 28..rd.len() - 24] == [0, 10, 0, 24] {
            rd = &rd[..rd.len() - 28];
        }
        let ecs = (!rd.is_empty()).then(|| {
            assert_eq!(&rd[0..2], &[0, 8]);
            let len = be16(o + 11 + 2) as usize;
            (u16::from_be_bytes([rd[4], rd[5]]), rd[6], rd[7], rd[8..4 + len].to_vec())
        });
        opt = Some((payload, ttl, ecs));
        o += 11 + rdlen;
    }
    assert_eq!(o, m.len(), "nothing after the last record");
    Resp { flags, ancount, arcount, answers, answers6, opt }
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[path = "xdp_fixtures/repoint.rs"]
mod repoint;
#[path = "xdp_fixtures/signed.rs"]
mod signed;

// ------------------------------------------------------------------ fixtures

/// `[dnstap] xdp_sample = "1/2"`: every second answer reaches the query log
/// ring with its addresses, ports, the query as received and the response as
/// sent; with sampling off nothing does.
#[test]
fn every_nth_answer_reaches_the_query_log_ring_with_both_messages() {
    let mut fx = Fixture::new();
    let mut tap = fx.prog.take_tap().expect("the ring").expect("the object has the query log ring");
    let query = |id: u16| Dns { id, ..Dns::a("edge.lagran.net") }.bytes();
    fx.answered(&Frame::new().from("10.1.2.3").build(&query(1)));
    assert!(tap.next_record().is_none(), "sampling is off until the writer turns it on");

    fx.writer.set_tap_every(2).expect("sampling on");
    let v4 = Frame::new().from("10.1.2.3");
    let v6 = Frame::new().v6("2001:db8:9::1");
    let first = fx.answered(&v4.build(&query(2)));
    let second = fx.answered(&v4.build(&query(3)));
    let third = fx.answered(&v6.build(&query(4)));
    let fourth = fx.answered(&v6.build(&query(5)));
    let records: Vec<_> = std::iter::from_fn(|| tap.next_record()).collect();
    assert_eq!(records.len(), 2, "one answer in two is sampled (BPF_PROG_TEST_RUN runs on one CPU)");
    let (r, e) = (&records[0], lagran::xdp::tap::exchange(&records[0], 0));
    assert_ne!(first, second);
    assert_eq!(r.query(), &query(3)[..], "the second answer's query, as received");
    assert_eq!(r.response(), &second[..], "and its response, as sent");
    assert_eq!(e.client, "10.1.2.3:40000".parse().unwrap());
    assert_eq!(e.server, Some(std::net::SocketAddr::from((SERVER, DNS_PORT))));
    let (r, e) = (&records[1], lagran::xdp::tap::exchange(&records[1], 0));
    assert_ne!(third, fourth);
    assert_eq!((r.query(), r.response()), (&query(5)[..], &fourth[..]), "the fourth, over IPv6");
    assert_eq!(e.client, "[2001:db8:9::1]:40000".parse().unwrap());
    assert_eq!(e.server, Some(std::net::SocketAddr::from((SERVER6, DNS_PORT))));
    assert!(r.time_ns > 0);
    assert_eq!(tap.dropped(), 0, "the ring had room");
}

#[test]
fn plain_query_is_answered_in_place() {
    let fx = Fixture::new();
    let dns = Dns::a("edge.lagran.net").bytes();
    let m = fx.answered(&Frame::new().from("10.1.2.3").build(&dns));
    let r = read_resp(&m, wire("edge.lagran.net").len());
    assert_eq!(&m[0..2], &[0xbe, 0xef], "ID kept");
    assert_eq!(r.flags, 0x8500, "QR AA RD, RCODE 0");
    assert_eq!(&m[12..12 + 17], &dns[12..12 + 17], "question as received");
    assert_eq!(r.answers, vec![(10, ip("192.0.2.20")), (10, ip("192.0.2.21"))], "10/8 gets the two-address answer");
    assert_eq!(r.arcount, 0);
    assert!(r.opt.is_none(), "no OPT without one in the query");
}

#[test]
fn ttl_is_capped_by_dns_ttl_and_rd_cd_are_copied() {
    let fx = Fixture::new();
    let dns = Dns::a("edge.lagran.net").flags(0x0010).bytes(); // CD, no RD
    let m = fx.answered(&Frame::new().build(&dns));
    let r = read_resp(&m, 17);
    assert_eq!(r.flags, 0x8410, "QR AA CD");
    assert_eq!(r.answers, vec![(30, ip("192.0.2.10"))], "route TTL 300 is answered as DNS_TTL 30");
}

#[test]
fn four_addresses_and_mixed_case_names() {
    let fx = Fixture::new();
    let dns = Dns::a("Pool-A.EDGE.lagran.Net").bytes();
    let m = fx.answered(&Frame::new().build(&dns));
    let qlen = wire("pool-a.edge.lagran.net").len();
    assert_eq!(&m[12..12 + qlen], &wire("Pool-A.EDGE.lagran.Net")[..], "question keeps the client's case");
    let r = read_resp(&m, qlen);
    assert_eq!(r.ancount, 4);
    assert_eq!(r.answers.iter().map(|a| a.1.octets()[3]).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
}

#[test]
fn edns_without_ecs_echoes_opt_and_do() {
    let fx = Fixture::new();
    let dns = Dns::a("edge.lagran.net").opt(4096, 0, true, &[]).bytes();
    let m = fx.answered(&Frame::new().build(&dns));
    let r = read_resp(&m, 17);
    assert_eq!(r.arcount, 1);
    let (payload, ttl, ecs) = r.opt.unwrap();
    assert_eq!(payload, 1232, "our UDP payload size");
    assert_eq!(ttl, 0x0000_8000, "EXTENDED-RCODE 0, VERSION 0, DO copied");
    assert!(ecs.is_none());
}

#[test]
fn ecs_address_is_used_and_scope_is_the_matched_block() {
    let fx = Fixture::new();
    let dns = Dns::a("edge.lagran.net").opt(1232, 0, false, &ecs4("10.9.0.0/16")).bytes();
    let m = fx.answered(&Frame::new().from("198.51.100.77").build(&dns));
    let r = read_resp(&m, 17);
    assert_eq!(r.answers.len(), 2, "the ECS subnet (10/8), not the resolver, decides");
    let (_, ttl, ecs) = r.opt.unwrap();
    assert_eq!(ttl, 0);
    assert_eq!(ecs, Some((1, 16, 8, vec![10, 9])), "family, SOURCE echoed, SCOPE = /8 block, address echoed");
}

#[test]
fn ecs_source_zero_uses_the_packet_source_and_scope_zero() {
    let fx = Fixture::new();
    let dns = Dns::a("edge.lagran.net").opt(1232, 0, false, &ecs(1, 0, 0, &[])).bytes();
    let m = fx.answered(&Frame::new().from("10.7.7.7").build(&dns));
    let r = read_resp(&m, 17);
    assert_eq!(r.answers.len(), 2, "source 10.7.7.7 is in 10/8");
    assert_eq!(r.opt.unwrap().2, Some((1, 0, 0, vec![])), "SCOPE 0 when SOURCE is 0");
}

#[test]
fn ecs_with_odd_sizes() {
    let fx = Fixture::new();
    for subnet in ["10.0.0.0/1", "10.128.0.0/9", "10.1.2.0/23", "10.1.2.3/32", "100.1.2.0/24", "58.61.0.0/17"] {
        let dns = Dns::a("edge.lagran.net").opt(512, 0, true, &ecs4(subnet)).bytes();
        fx.answered(&Frame::new().build(&dns));
    }
}

#[test]
fn vlan_tagged_query_is_answered_with_the_tag() {
    let fx = Fixture::new();
    let mut f = Frame::new();
    f.vlan = Some(42);
    fx.answered(&f.build(&Dns::a("edge.lagran.net").opt(1232, 0, false, &ecs4("10.0.0.0/24")).bytes()));
}

#[test]
fn ethernet_padding_is_trimmed() {
    let fx = Fixture::new();
    let mut f = Frame::new();
    f.padding = 7;
    fx.answered(&f.build(&Dns::a("edge.lagran.net").bytes()));
}

#[test]
fn canary_split_is_per_slash_24_like_userspace() {
    let fx = Fixture::new();
    let mut seen = std::collections::HashSet::new();
    for third in 0..16u8 {
        let src = format!("100.20.{third}.9");
        let dns = Dns::a("canary.edge.lagran.net").opt(1232, 0, false, &ecs(1, 0, 0, &[])).bytes();
        let m = fx.answered(&Frame::new().from(&src).build(&dns));
        let r = read_resp(&m, wire("canary.edge.lagran.net").len());
        seen.insert(r.answers[0].1);
        // The name has one /0 block; the split narrows the scope to /24.
        let dns = Dns::a("canary.edge.lagran.net").opt(1232, 0, false, &ecs4(&format!("{src}/32"))).bytes();
        let m = fx.answered(&Frame::new().build(&dns));
        let r = read_resp(&m, wire("canary.edge.lagran.net").len());
        assert_eq!(r.opt.unwrap().2.unwrap().2, 24, "scope: max(block /0, split /24)");
        let dns = Dns::a("canary.edge.lagran.net").opt(1232, 0, false, &ecs4(&format!("100.20.{third}.0/24"))).bytes();
        let m = fx.answered(&Frame::new().build(&dns));
        let r = read_resp(&m, wire("canary.edge.lagran.net").len());
        assert_eq!(r.opt.unwrap().2.unwrap().2, 24, "a split answers at least scope /24");
    }
    assert_eq!(seen.len(), 2, "16 subnets at 50 % see both answers");
}

#[test]
fn cookies_and_padding_are_answered_like_userspace() {
    let fx = Fixture::new();
    let f = Frame::new().from("10.1.2.3");
    let a = || Dns::a("edge.lagran.net");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("client cookie (dig's default)", cookie()),
        ("client and server cookie", cookie_with_server()),
        ("padding", padding(37)),
        ("empty padding", padding(0)),
        ("cookie, ECS", [cookie(), ecs4("10.9.0.0/16")].concat()),
        ("ECS, cookie", [ecs4("10.9.0.0/16"), cookie()].concat()),
        ("cookie, ECS /0, padding", [cookie(), ecs(1, 0, 0, &[]), padding(100)].concat()),
        ("ECS /23, padding, cookie", [ecs4("10.1.2.0/23"), padding(3), cookie_with_server()].concat()),
        ("our cookie, 10 minutes old: echoed", cookie_valid(ip("10.1.2.3").into(), 600)),
        (
            "our cookie, 40 minutes old: reissued",
            [ecs4("10.9.0.0/16"), cookie_valid(ip("10.1.2.3").into(), 2400)].concat(),
        ),
        ("our cookie, 2 hours old: a fresh one", cookie_valid(ip("10.1.2.3").into(), 7200)),
        ("our cookie, 4 minutes ahead", cookie_valid(ip("10.1.2.3").into(), -240)),
        ("another address's cookie", cookie_valid(ip("10.1.2.4").into(), 10)),
        ("ECS /0, our cookie", [ecs(1, 0, 0, &[]), cookie_valid(ip("10.1.2.3").into(), 1)].concat()),
    ];
    for (what, options) in cases {
        eprintln!("case: {what}");
        let m = fx.answered(&f.build(&a().opt(1232, 0, true, &options).bytes()));
        let r = read_resp(&m, 17);
        let (payload, ttl, _) = r.opt.expect("an OPT answers an OPT");
        assert_eq!((payload, ttl), (1232, 0x8000), "{what}: our payload size, DO copied");
        assert_eq!(r.answers.len(), 2, "{what}: 10/8 answered");
        if options.windows(2).any(|w| w == [0, 10]) {
            // The COOKIE option ends the OPT: client cookie, then a 16-octet server cookie.
            assert_eq!(&m[m.len() - 28..m.len() - 24], &[0, 10, 0, 24], "{what}: our COOKIE option");
            assert_eq!(m[m.len() - 16], 1, "{what}: server cookie version 1");
        }
    }
    // IPv6 sources hash 16 octets.
    let src6: Ipv6Addr = "2001:db8:100::7".parse().unwrap();
    for options in
        [cookie(), cookie_valid(src6.into(), 60), [ecs4("10.9.0.0/16"), cookie_valid(src6.into(), 3000)].concat()]
    {
        fx.answered(&Frame::new().v6("2001:db8:100::7").build(&a().opt(1232, 0, false, &options).bytes()));
    }
    // COOKIE options userspace answers otherwise (FORMERR) or checks itself are passed.
    for (what, options) in [
        ("a 7-octet cookie", vec![0, 10, 0, 7, 1, 2, 3, 4, 5, 6, 7]),
        ("a 12-octet cookie", [vec![0, 10, 0, 12], vec![9; 12]].concat()),
        ("a 40-octet cookie", [vec![0, 10, 0, 40], vec![9; 40]].concat()),
        ("two cookies", [cookie(), cookie()].concat()),
    ] {
        eprintln!("case: {what}");
        fx.pass(&f.build(&a().opt(1232, 0, false, &options).bytes()), Counter::Cookie);
    }
    // Cookie and padding around a canary split and on a four-address answer.
    fx.answered(
        &Frame::new()
            .from("100.1.2.3")
            .build(&Dns::a("canary.edge.lagran.net").opt(4096, 0, false, &[cookie(), padding(11)].concat()).bytes()),
    );
    fx.answered(&Frame::new().build(&Dns::a("pool-a.edge.lagran.net").opt(512, 0, false, &cookie()).bytes()));
}

/// Pins this thread to one CPU: the program's rate limiting accounts are per CPU.
fn pin_to_one_cpu() {
    // SAFETY: a zeroed cpu_set_t with one bit set, passed by pointer with its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set), 0);
    }
}

/// The userspace response to the DNS message of `frame` (the fixture's secret and clock).
fn userspace_reply(fx: &Fixture, frame: &[u8]) -> dns::Reply {
    let p = parse_frame(frame).unwrap();
    let now = now_ms();
    let (settings, check) = (settings(), cookie_check());
    dns::answer(p.dns, &AnswerContext::new(&fx.table, &settings, p.src, Transport::Udp, now).with_cookies(Some(&check)))
}

/// RRL in the kernel: the account arithmetic of `dns::rrl`, slipped answers
/// byte for byte what userspace slips (TC=1, or BADCOOKIE after a client
/// cookie), and a valid server cookie exempts the query.
#[test]
fn rate_limiting_drops_and_slips_like_userspace() {
    pin_to_one_cpu();
    let mut fx = Fixture::new();
    let rrl = lagran::config::RrlSettings { responses_per_second: 5, slip: 2, window_secs: 15 };
    fx.writer.set_rrl(&rrl).unwrap();
    let a = || Dns::a("edge.lagran.net");
    let counted = |fx: &Fixture, c: Counter| fx.writer.counters().unwrap().get(c);
    for (src, options, badcookie) in
        [("10.1.2.3", None, false), ("10.1.3.3", Some(cookie()), true), ("10.1.5.3", Some(cookie_with_server()), true)]
    {
        let d = match &options {
            Some(o) => a().opt(1232, 0, false, o),
            None => a(),
        };
        let frame = Frame::new().from(src).build(&d.bytes());
        let full = userspace_reply(&fx, &frame).bytes.unwrap();
        let slipped = dns::rrl::slipped(&full, badcookie).unwrap();
        let (limited0, slipped0) = (counted(&fx, Counter::RrlLimited), counted(&fx, Counter::RrlSlipped));
        let mut actions = Vec::new();
        for i in 0..20 {
            let out = fx.prog.test_run(&frame).unwrap();
            actions.push(out.action);
            if out.action == XDP_TX {
                let dns_out = check_tx_headers(&frame, &out.frame);
                let want = if i < 5 { &full } else { &slipped };
                assert_eq!(hex(dns_out), hex(want), "{src}: response {i} as userspace sends it");
            }
        }
        let want: Vec<u32> = (0..20).map(|i| if i < 5 || (i - 5) % 2 == 1 { XDP_TX } else { 1 }).collect();
        assert_eq!(actions, want, "{src}: 5 answers, then every 2nd limited one slips (XDP_DROP = 1)");
        assert_eq!(counted(&fx, Counter::RrlLimited) - limited0, 8);
        assert_eq!(counted(&fx, Counter::RrlSlipped) - slipped0, 7);
    }
    // Our valid server cookie: never limited.
    let src: IpAddr = ip("10.1.4.3").into();
    let frame = Frame::new().from("10.1.4.3").build(&a().opt(1232, 0, false, &cookie_valid(src, 5)).bytes());
    for _ in 0..20 {
        fx.answered(&frame);
    }
    // Off again: answered.
    fx.writer.set_rrl(&lagran::config::RrlSettings::default()).unwrap();
    fx.answered(&Frame::new().from("10.1.2.3").build(&a().bytes()));
}

/// RRL credit comes back at the configured rate by the program's interval
/// clock (the tick counter times the tick length the loader found, or the
/// clock helper): 5 answers per second, so 0.7 s after the account ran dry
/// 3.5 answers' credit is back — two or three answers (the sleep may run
/// long), not none, not dozens (a tick length wrong by a factor shows here).
#[test]
fn rate_limiting_credit_returns_at_the_rate() {
    pin_to_one_cpu();
    let mut fx = Fixture::new();
    let rrl = lagran::config::RrlSettings { responses_per_second: 5, slip: 0, window_secs: 15 };
    fx.writer.set_rrl(&rrl).unwrap();
    let frame = Frame::new().from("10.1.6.3").build(&Dns::a("edge.lagran.net").bytes());
    let actions =
        |fx: &Fixture, n: usize| -> Vec<u32> { (0..n).map(|_| fx.prog.test_run(&frame).unwrap().action).collect() };
    assert_eq!(actions(&fx, 6), [XDP_TX, XDP_TX, XDP_TX, XDP_TX, XDP_TX, 1], "a second's credit, then dropped");
    let t = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let slept = t.elapsed();
    let after = actions(&fx, 10);
    let answered = after.iter().take_while(|&&a| a == XDP_TX).count();
    assert!(after[answered..].iter().all(|&a| a == 1), "answers, then drops: {after:?}");
    assert!(
        (2..=3).contains(&answered),
        "{answered} answers after {slept:?} at 5/s (tick {:?})",
        lagran::xdp::tick::kernel_tick()
    );
    fx.writer.set_rrl(&lagran::config::RrlSettings::default()).unwrap();
}

/// Names of every length modulo 8 (the hash reads 8-octet words; the last one is
/// read ending at the name's end), a name shorter than one word, and a name of
/// the full 255 octets, each asked in mixed case.
#[test]
fn names_of_every_word_alignment_and_case() {
    let mut fx = Fixture::new();
    let mut t = table();
    let mut names: Vec<String> = (1..=16).map(|n| format!("{}.edge.lagran.net", "k".repeat(n))).collect();
    let long = format!("{}.{}.{}.{}.edge.lagran.net", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(45));
    assert_eq!(wire(&long).len(), 255);
    names.push(long);
    for (i, n) in names.iter().enumerate() {
        t.zones[0].names.push(ScheduledName {
            ecs: true,
            name: n.clone(),
            id: 100 + i as u32,
            answers: std::sync::Arc::new(vec![answer(30, &[&format!("198.51.100.{}", i + 1)])]),
            v4: PrefixMapV4::uniform(0),
            v6: PrefixMapV6::uniform(0),
        });
    }
    let short = ScheduledName {
        ecs: true,
        name: "x.y".into(),
        id: 99,
        answers: std::sync::Arc::new(vec![answer(30, &["198.51.100.99"])]),
        v4: PrefixMapV4::uniform(0),
        v6: PrefixMapV6::uniform(0),
    };
    t.zones.push(ZoneRoutes { zone: Zone::new("x.y"), names: vec![short] });
    names.push("x.y".into());
    let t = RouteTable::new(20, now_ms(), t.zones);
    fx.writer.sync(&t, &settings()).unwrap();
    fx.table = t;
    for n in &names {
        // Alternate the case of every other letter, starting with the first.
        let mixed: String =
            n.chars().enumerate().map(|(i, c)| if i % 2 == 0 { c.to_ascii_uppercase() } else { c }).collect();
        for q in [n.clone(), mixed, n.to_ascii_uppercase()] {
            eprintln!("case: {q} ({} octets)", wire(&q).len());
            let m = fx.answered(&Frame::new().build(&Dns::a(&q).opt(1232, 0, false, &cookie()).bytes()));
            assert_eq!(&m[12..12 + wire(&q).len()], &wire(&q)[..], "question echoed as received");
            fx.answered(&Frame::new().build(&Dns::a(&q).bytes()));
        }
        // One letter more or less is another name.
        let mut other = wire(n);
        other[1] ^= 0x01;
        let mut d = Dns::a(n);
        d.qname = other;
        fx.pass(&Frame::new().build(&d.bytes()), Counter::NameUnknown);
    }
}

/// A table whose names share their maps with the synced one (an incremental
/// build left them alone) writes nothing for them; a name with a new map, or
/// with the same map and other answers, is patched.
#[test]
fn shared_maps_write_nothing_and_changed_names_are_patched() {
    let mut fx = Fixture::new();
    let mut zones = fx.table.zones.clone();
    let names = &mut zones[0].names;
    // edge: a new map, 10/8 now gets answer 0 like the rest.
    names[0].v4 = PrefixMapV4::from_ranges([(v4("58.60.0.0"), v4("58.60.255.255"), 2)], 0);
    // pool-a: the very same map, other addresses.
    names[1].answers = vec![answer(20, &["198.51.100.9"])].into();
    let t = RouteTable::new(8, now_ms(), zones.clone());
    let stats = fx.writer.sync(&t, &settings()).unwrap();
    assert!(stats.routes_upserted + stats.routes_deleted > 0, "{stats:?}");
    fx.table = t;
    let m = fx.answered(&Frame::new().from("10.1.2.3").build(&Dns::a("edge.lagran.net").bytes()));
    assert_eq!(read_resp(&m, wire("edge.lagran.net").len()).answers, vec![(30, ip("192.0.2.10"))], "10/8 moved");
    let m = fx.answered(&Frame::new().build(&Dns::a("pool-a.edge.lagran.net").bytes()));
    assert_eq!(read_resp(&m, wire("pool-a.edge.lagran.net").len()).answers, vec![(20, ip("198.51.100.9"))]);
    fx.answered(&Frame::new().from("100.1.2.3").build(&Dns::a("canary.edge.lagran.net").bytes()));

    // The same names again under a new version: nothing to write.
    let t = RouteTable::new(9, now_ms(), zones);
    let stats = fx.writer.sync(&t, &settings()).unwrap();
    assert_eq!((stats.routes_upserted, stats.routes_deleted, stats.names_upserted), (0, 0, 0), "{stats:?}");
    assert!(stats.routes_total > 0);
    fx.table = t;
    let m = fx.answered(&Frame::new().from("10.1.2.3").build(&Dns::a("edge.lagran.net").bytes()));
    assert_eq!(read_resp(&m, wire("edge.lagran.net").len()).answers, vec![(30, ip("192.0.2.10"))]);
}

/// A name whose hash finds an entry for another name is passed: the stored wire
/// name decides, never the hash alone.
#[test]
fn hash_collisions_pass_never_answer() {
    use lagran_common::names::{NameValue, hash_wire};
    let mut fx = Fixture::new();
    // Plant entries as if other names had these queries' hashes.
    let cases = [
        ("edgf.lagran.net", "edge.lagran.net", 1), // same length, one octet differs
        ("q.edge.lagran.net", "pool-a.edge.lagran.net", 2), // different length
        ("pool-a.edge.lagran.nex", "pool-a.edge.lagran.net", 2), // differs in the last word
    ];
    for (query, stored, id) in cases {
        let hash = hash_wire(&wire(query));
        fx.writer.maps_mut().put_name_raw(hash, NameValue::new(id, &wire(stored))).unwrap();
        eprintln!("case: {query} hashing onto {stored}");
        fx.pass(&Frame::new().from("10.1.2.3").build(&Dns::a(query).bytes()), Counter::NameUnknown);
    }
    // The real names still answer.
    fx.answered(&Frame::new().from("10.1.2.3").build(&Dns::a("edge.lagran.net").bytes()));
}

/// Names whose hashes share a probe window of `lagran_names` are all found,
/// also past a name given up (a tombstone); a window with no free slot leaves
/// the last name in table order to userspace, and a given-up slot takes a name
/// again only from the next sync on.
#[test]
fn names_sharing_a_probe_window() {
    use lagran_common::names::{PROBES, hash_wire, slot};
    // PROBES + 1 names with one home slot.
    let mut by_home: std::collections::HashMap<u32, Vec<String>> = std::collections::HashMap::new();
    let crowd = (0..)
        .find_map(|i| {
            let n = format!("n{i}.edge.lagran.net");
            let v = by_home.entry(slot(hash_wire(&wire(&n)), 0)).or_default();
            v.push(n);
            (v.len() == PROBES as usize + 1).then(|| v.clone())
        })
        .unwrap();
    let named = |i: usize, n: &str| ScheduledName {
        ecs: true,
        name: n.into(),
        id: 100 + i as u32,
        answers: std::sync::Arc::new(vec![answer(30, &[&format!("192.0.2.{}", 100 + i)])]),
        v4: PrefixMapV4::uniform(0),
        v6: PrefixMapV6::uniform(0),
    };
    let mut fx = Fixture::new();
    let with = |names: &[usize], version: u64| {
        let zone = ZoneRoutes {
            zone: Zone::new("edge.lagran.net"),
            names: names.iter().map(|&i| named(i, &crowd[i])).collect(),
        };
        RouteTable::new(version, now_ms(), vec![zone])
    };
    let query = |n: &str| Frame::new().from("10.1.2.3").build(&Dns::a(n).bytes());
    let check = |fx: &Fixture, served: &[usize], left: &[usize]| {
        for &i in served {
            let m = fx.answered(&query(&crowd[i]));
            let want = vec![(30, format!("192.0.2.{}", 100 + i).parse().unwrap())];
            assert_eq!(read_resp(&m, wire(&crowd[i]).len()).answers, want, "{}", crowd[i]);
        }
        for &i in left {
            fx.pass(&query(&crowd[i]), Counter::NameUnknown);
        }
    };
    let all: Vec<usize> = (0..=PROBES as usize).collect();
    let last = PROBES as usize;
    let t = with(&all, 10);
    let stats = fx.writer.sync(&t, &settings()).unwrap();
    assert_eq!(stats.names_skipped, 1, "{stats:?}");
    fx.table = t;
    check(&fx, &all[..last], &[last]);

    // The first name (in the home slot) goes: the others are found past its tombstone,
    // and its slot is not reused in the same sync.
    let rest: Vec<usize> = (1..=last).collect();
    let t = with(&rest, 11);
    let stats = fx.writer.sync(&t, &settings()).unwrap();
    assert_eq!((stats.names_deleted, stats.names_skipped), (1, 1), "{stats:?}");
    fx.table = t;
    check(&fx, &rest[..last - 1], &[0, last]);

    // One sync later the slot takes the name left out.
    let t = with(&rest, 12);
    let stats = fx.writer.sync(&t, &settings()).unwrap();
    assert_eq!((stats.names_upserted, stats.names_skipped), (1, 0), "{stats:?}");
    fx.table = t;
    check(&fx, &rest, &[0]);
    assert_eq!(fx.writer.maps().name(&wire(&crowd[last])).map(|v| v.id), Some(100 + last as u32));
}

/// Only packets to a listen address and port are answered; the set is exact,
/// and the unspecified address of a family matches every address of it.
#[test]
fn only_listen_addresses_are_answered() {
    use std::net::SocketAddr;
    let mut fx = Fixture::new();
    let q = Dns::a("edge.lagran.net").opt(1232, 0, false, &cookie()).bytes();
    let to = |dst: &str, port: u16| {
        let mut f = Frame::new().from("10.1.2.3");
        f.dst = dst.parse().unwrap();
        f.dport = port;
        f.build(&q)
    };
    // The fixture's writer listens on 0.0.0.0:53: any address, port 53 only.
    fx.answered(&to("198.51.100.9", 53));
    fx.pass(&to("198.51.100.9", 5353), Counter::NotListenAddress);
    let set: Vec<SocketAddr> = vec!["192.0.2.53:53".parse().unwrap(), "192.0.2.54:5353".parse().unwrap()];
    fx.writer.set_listen(&set).unwrap();
    assert_eq!(fx.writer.maps().listen().unwrap(), set);
    fx.answered(&to("192.0.2.53", 53));
    fx.answered(&to("192.0.2.54", 5353));
    fx.pass(&to("192.0.2.53", 5353), Counter::NotListenAddress);
    fx.pass(&to("192.0.2.54", 53), Counter::NotListenAddress);
    fx.pass(&to("192.0.2.55", 53), Counter::NotListenAddress);
    fx.pass(&to("198.51.100.9", 53), Counter::NotListenAddress);
    // An IPv6 wildcard does not open IPv4.
    fx.writer.set_listen(&["[::]:53".parse().unwrap()]).unwrap();
    fx.pass(&to("192.0.2.53", 53), Counter::NotListenAddress);
    fx.writer.set_listen(&["0.0.0.0:53".parse().unwrap()]).unwrap();
    fx.answered(&to("192.0.2.55", 53));
}

#[test]
fn queries_userspace_must_answer_are_passed() {
    let fx = Fixture::new();
    let f = Frame::new();
    let a = || Dns::a("edge.lagran.net");
    let cases: Vec<(&str, Vec<u8>, Counter)> = vec![
        ("AAAA, no IPv6 address (NODATA upstairs)", f.build(&a().qtype(28).bytes()), Counter::NoAnswer),
        ("MX", f.build(&a().qtype(15).bytes()), Counter::Qtype),
        ("ANY", f.build(&a().qtype(255).bytes()), Counter::Qtype),
        ("class CH", f.build(&a().qclass(3).bytes()), Counter::Qclass),
        ("unknown name", f.build(&Dns::a("nope.edge.lagran.net").bytes()), Counter::NameUnknown),
        ("root name", f.build(&Dns::a(".").bytes()), Counter::NameUnknown),
        ("no eligible node (58.60/16)", f.clone().from("58.60.1.1").build(&a().bytes()), Counter::NoAnswer),
        ("response", f.build(&a().flags(0x8100).bytes()), Counter::IsResponse),
        ("NOTIFY", f.build(&a().flags(4 << 11).bytes()), Counter::Opcode),
        ("two questions", f.build(&a().counts([2, 0, 0, 0]).bytes()), Counter::Qdcount),
        ("no question", f.build(&a().counts([0, 0, 0, 0]).bytes()), Counter::Qdcount),
        ("answer section", f.build(&a().counts([1, 1, 0, 0]).bytes()), Counter::OtherSections),
        ("authority section", f.build(&a().counts([1, 0, 1, 0]).bytes()), Counter::OtherSections),
        (
            "two additional",
            f.build(&a().opt(1232, 0, false, &[]).opt(1232, 0, false, &[]).bytes()),
            Counter::OtherSections,
        ),
        (
            "additional not OPT",
            f.build(&a().raw_additional(&[0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 1, 2, 3, 4]).bytes()),
            Counter::OtherSections,
        ),
        ("EDNS version 1", f.build(&a().opt(1232, 1, false, &[]).bytes()), Counter::OptUnsupported),
        (
            "extended rcode",
            f.build(&a().raw_additional(&opt_rr(1232, 1, 0, false, &[])).bytes()),
            Counter::OptUnsupported,
        ),
        ("NSID option", f.build(&a().opt(1232, 0, false, &[0, 3, 0, 0]).bytes()), Counter::OptUnsupported),
        (
            "COOKIE then NSID",
            f.build(&a().opt(1232, 0, false, &[cookie(), vec![0, 3, 0, 0]].concat()).bytes()),
            Counter::OptUnsupported,
        ),
        (
            "five options",
            f.build(
                &a().opt(1232, 0, false, &[padding(0), padding(1), padding(2), padding(3), padding(0)].concat())
                    .bytes(),
            ),
            Counter::OptUnsupported,
        ),
        (
            "option overruns RDATA",
            f.build(&a().opt(1232, 0, false, &[0, 10, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8]).bytes()),
            Counter::OptMalformed,
        ),
        (
            "two ECS options",
            f.build(&a().opt(1232, 0, false, &[ecs4("10.0.0.0/8"), cookie(), ecs4("10.0.0.0/8")].concat()).bytes()),
            Counter::EcsBad,
        ),
        (
            "ECS source 33",
            f.build(&a().opt(1232, 0, false, &ecs(1, 33, 0, &[10, 0, 0, 0, 0])).bytes()),
            Counter::EcsBad,
        ),
        ("ECS bits past source", f.build(&a().opt(1232, 0, false, &ecs(1, 7, 0, &[10 | 1])).bytes()), Counter::EcsBad),
        (
            "ECS bits past /20",
            f.build(&a().opt(1232, 0, false, &ecs(1, 20, 0, &[10, 1, 0x18])).bytes()),
            Counter::EcsBad,
        ),
        ("ECS scope set", f.build(&a().opt(1232, 0, false, &ecs(1, 8, 8, &[10])).bytes()), Counter::EcsBad),
        ("ECS address too long", f.build(&a().opt(1232, 0, false, &ecs(1, 8, 0, &[10, 0])).bytes()), Counter::EcsBad),
        ("ECS address too short", f.build(&a().opt(1232, 0, false, &ecs(1, 24, 0, &[10, 0])).bytes()), Counter::EcsBad),
        ("ECS family 3", f.build(&a().opt(1232, 0, false, &ecs(3, 8, 0, &[10])).bytes()), Counter::EcsBad),
        ("ECS option too short", f.build(&a().opt(1232, 0, false, &[0, 8, 0, 2, 0, 1]).bytes()), Counter::EcsBad),
        (
            "ECS length past RDATA",
            f.build(&a().opt(1232, 0, false, &[0, 8, 0, 9, 0, 1, 8, 0, 10]).bytes()),
            Counter::OptMalformed,
        ),
        ("ECS IPv6 /129", f.build(&a().opt(1232, 0, false, &ecs(2, 129, 0, &[0x20; 17])).bytes()), Counter::EcsBad),
        (
            "ECS IPv6 bits past /47",
            f.build(&a().opt(1232, 0, false, &ecs(2, 47, 0, &[0x20, 1, 0xd, 0xb8, 0, 1])).bytes()),
            Counter::EcsBad,
        ),
        (
            "ECS IPv6 scope set",
            f.build(&a().opt(1232, 0, false, &ecs(2, 48, 48, &[0x20, 1, 0xd, 0xb8, 0, 0])).bytes()),
            Counter::EcsBad,
        ),
        (
            "ECS IPv6 address too long",
            f.build(&a().opt(1232, 0, false, &ecs(2, 40, 0, &[0x20, 1, 0xd, 0xb8, 0, 0])).bytes()),
            Counter::EcsBad,
        ),
        (
            "ECS IPv6 bits past /121 in the last octet",
            f.build(&a().opt(1232, 0, false, &ecs(2, 121, 0, &[0xff; 16])).bytes()),
            Counter::EcsBad,
        ),
        ("OPT RDLEN short", f.build(&a().opt(1232, 0, false, &[0, 8]).bytes()), Counter::OptMalformed),
        ("trailing bytes", f.build(&[a().bytes(), vec![0; 5]].concat()), Counter::TrailingData),
        (
            "trailing after OPT",
            f.build(&[a().opt(1232, 0, false, &[]).bytes(), vec![0]].concat()),
            Counter::TrailingData,
        ),
        ("oversized payload", f.build(&[a().bytes(), vec![0xaa; 1400]].concat()), Counter::TrailingData),
    ];
    for (what, frame, reason) in cases {
        eprintln!("case: {what}");
        fx.pass(&frame, reason);
    }
}

#[test]
fn malformed_names_are_passed() {
    let fx = Fixture::new();
    let f = Frame::new();
    // A compression pointer in the question.
    let mut d = Dns::a("x.edge.lagran.net");
    d.qname = vec![1, b'x', 0xc0, 0x0c];
    fx.pass(&f.build(&d.bytes()), Counter::NameCompressed);
    // Extended label type 0x40.
    d.qname = vec![0x41, 0];
    fx.pass(&f.build(&d.bytes()), Counter::NameCompressed);
    // 256 octets of labels without the root: longer than any name.
    let mut long = Vec::new();
    for _ in 0..4 {
        long.push(63);
        long.extend(std::iter::repeat_n(b'a', 63));
    }
    long.push(0);
    d.qname = long.clone();
    fx.pass(&f.build(&d.bytes()), Counter::NameTooLong);
    // Exactly 255 octets: a valid name, just not ours.
    let mut ok = Vec::new();
    for _ in 0..3 {
        ok.push(63);
        ok.extend(std::iter::repeat_n(b'b', 63));
    }
    ok.push(61);
    ok.extend(std::iter::repeat_n(b'c', 61));
    ok.push(0);
    assert_eq!(ok.len(), 255);
    d.qname = ok;
    fx.pass(&f.build(&d.bytes()), Counter::NameUnknown);
    // A label running past the end of the message.
    d.qname = vec![20, b'a', b'b'];
    let mut m = d.bytes();
    m.truncate(12 + 3);
    fx.pass(&f.build(&m), Counter::TooShort);
    // A zero octet inside a label, ahead of a served name's octets: the program
    // reads a name up to its first zero octet, so it reads `03 61 00` and then
    // QTYPE from the octets after it, and passes the query (userspace answers
    // it). Counted under what the misread QTYPE fails, not as an unknown name:
    // the label walk that would tell is kept off that reason's path.
    let mut zero = vec![3, b'a', 0, b'b'];
    zero.extend(wire("edge.lagran.net"));
    d.qname = zero;
    fx.pass(&f.build(&d.bytes()), Counter::Qtype);
    fx.pass(&f.build(&d.clone().opt(1232, 0, false, &cookie()).bytes()), Counter::Qtype);
    // A compression pointer with the name's root octets after it (`\0` of QTYPE).
    d.qname = vec![4, b'e', b'd', b'g', b'e', 0xc0, 0x0c];
    fx.pass(&f.build(&d.bytes()), Counter::NameCompressed);
    // The question ends inside QTYPE: a truncated question, not a name fault.
    let mut m = Dns::a("edge.lagran.net").bytes();
    m.truncate(m.len() - 3);
    fx.pass(&f.build(&m), Counter::TooShort);
}

#[test]
fn truncated_frames_are_passed() {
    let fx = Fixture::new();
    let full = Frame::new().build(&Dns::a("edge.lagran.net").opt(1232, 0, false, &ecs4("10.0.0.0/8")).bytes());
    // Cut anywhere (BPF_PROG_TEST_RUN wants at least an Ethernet header): the
    // headers still announce the full length.
    for cut in 14..full.len() {
        let frame = &full[..cut];
        let before = fx.writer.counters().unwrap();
        let out = fx.prog.test_run(frame).expect("test run");
        assert_eq!(out.action, XDP_PASS, "a frame cut at {cut} bytes is passed");
        let after = fx.writer.counters().unwrap();
        assert_eq!(after.passed(), before.passed() + 1, "and counted once");
    }
    // Consistent lengths, but the DNS message ends inside the question.
    let dns = Dns::a("edge.lagran.net").bytes();
    for cut in [12, 13, 20, 28, 30] {
        fx.pass(&Frame::new().build(&dns[..cut]), Counter::TooShort);
    }
    // DNS header shorter than 12 octets.
    fx.pass(&Frame::new().build(&dns[..11]), Counter::TooShort);
}

#[test]
fn other_traffic_is_passed() {
    let fx = Fixture::new();
    let dns = Dns::a("edge.lagran.net").bytes();
    let mut f = Frame::new();
    f.dport = 5353;
    fx.pass(&f.build(&dns), Counter::NotListenAddress);
    let mut f = Frame::new();
    f.proto = 6;
    fx.pass(&f.build(&dns), Counter::NotUdp);
    let mut f = Frame::new();
    f.ip_options = true;
    fx.pass(&f.build(&dns), Counter::IpOptions);
    let mut f = Frame::new();
    f.frags = 0x2000; // MF
    fx.pass(&f.build(&dns), Counter::Fragment);
    f.frags = 0x0010; // offset
    fx.pass(&f.build(&dns), Counter::Fragment);
    // An IPv4 packet labelled IPv6, ARP, QinQ.
    let mut v6 = Frame::new().build(&dns);
    v6[12..14].copy_from_slice(&[0x86, 0xdd]);
    fx.pass(&v6, Counter::NotIp);
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend(std::iter::repeat_n(0, 28));
    fx.pass(&arp, Counter::NotIp);
    let mut qinq = Frame::new();
    qinq.vlan = Some(7);
    let mut q = qinq.build(&dns);
    q[16..18].copy_from_slice(&[0x81, 0x00]);
    fx.pass(&q, Counter::NotIp);
    // IP total length larger than the frame; UDP length disagreeing with IP.
    let mut bad = Frame::new().build(&dns);
    bad[16..18].copy_from_slice(&2000u16.to_be_bytes());
    fx.pass(&bad, Counter::IpChecksum);
    fix_ip_checksum(&mut bad);
    fx.pass(&bad, Counter::Malformed);
    let mut bad = Frame::new().build(&dns);
    bad[38..40].copy_from_slice(&9u16.to_be_bytes());
    fx.pass(&bad, Counter::Malformed);
}

#[test]
fn disabled_fast_path_passes_everything() {
    let fx = Fixture::new();
    let mut fx = fx;
    fx.writer.set_allowed(false).unwrap();
    assert!(!fx.writer.enabled());
    fx.pass(&Frame::new().build(&Dns::a("edge.lagran.net").bytes()), Counter::Disabled);
    fx.writer.set_allowed(true).unwrap();
    fx.answered(&Frame::new().build(&Dns::a("edge.lagran.net").bytes()));
}

#[test]
fn resync_changes_answers_without_touching_unchanged_entries() {
    let mut fx = Fixture::new();
    let frame = Frame::new().from("10.1.2.3").build(&Dns::a("edge.lagran.net").bytes());
    fx.answered(&frame);
    // Same table again: nothing to write.
    let stats = fx.writer.sync(&fx.table, &settings()).unwrap();
    assert_eq!(stats.writes(), 0, "an unchanged table writes nothing: {stats:?}");
    // One answer's addresses change: one answer written, no trie entry touched.
    let mut t = table();
    std::sync::Arc::make_mut(&mut t.zones[0].names[0].answers)[1].ipv4 = vec![ip("192.0.2.99")];
    let t = RouteTable::new(8, now_ms(), t.zones);
    let stats = fx.writer.sync(&t, &settings()).unwrap();
    assert_eq!((stats.answers_written, stats.routes_upserted, stats.routes_deleted), (1, 1, 0), "{stats:?}");
    fx.table = t;
    let m = fx.answered(&frame);
    assert_eq!(read_resp(&m, 17).answers, vec![(10, ip("192.0.2.99"))]);
    // A name disappears: its name entry and trie entries go, the others stay.
    let mut t = table();
    t.zones[0].names.remove(1);
    let t = RouteTable::new(9, now_ms(), t.zones);
    let stats = fx.writer.sync(&t, &settings()).unwrap();
    assert_eq!(stats.names_deleted, 1, "{stats:?}");
    assert_eq!(stats.routes_deleted, 2, "pool-a had one /0 entry per family: {stats:?}");
    fx.table = t;
    fx.pass(&Frame::new().build(&Dns::a("pool-a.edge.lagran.net").bytes()), Counter::NameUnknown);
    fx.answered(&Frame::new().from("10.1.2.3").build(&Dns::a("edge.lagran.net").bytes()));
}

/// Packets of the differential fuzz: `LAGRAN_XDP_FUZZ_PACKETS`, 10⁴ by default
/// (`cargo xtask test`); `cargo xtask fuzz` sends 10⁶.
fn fuzz_packets() -> u64 {
    match std::env::var("LAGRAN_XDP_FUZZ_PACKETS") {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("LAGRAN_XDP_FUZZ_PACKETS={v:?} is not a count")),
        Err(_) => 10_000,
    }
}

/// The differential fuzz: mutated queries through BPF_PROG_TEST_RUN. Every
/// XDP_TX carries, byte for byte, the DNS message userspace would send, under
/// headers with valid checksums ([`Fixture::answered`]); everything else is
/// passed untouched. Once against the unsigned fixture table, once against
/// the same zone signed, with DO set in most queries, `AAAA` and upper-case
/// letters among them.
#[test]
fn random_packets_are_passed_or_answered_correctly() {
    let seed = std::env::var("LAGRAN_XDP_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x1a9a4);
    let names = ["edge.lagran.net", "pool-a.edge.lagran.net", "canary.edge.lagran.net", "nope.lagran.net"];
    fuzz(&Fixture::new(), seed, &names, false);
    let names = ["edge.lagran.net", "pool-a.edge.lagran.net", "canary.edge.lagran.net", "dual.edge.lagran.net"];
    fuzz(&Fixture::signed(), seed ^ 0x5197, &names, true);
}

/// [`fuzz_packets`] mutated queries for `names` to `fx`; `signed`: DO in
/// most, some `AAAA`, some with an upper-case letter.
fn fuzz(fx: &Fixture, seed: u64, names: &[&str], signed: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut tx, mut pass) = (0u64, 0u64);
    let packets = fuzz_packets();
    let do_odds = if signed { 0.8 } else { 0.0 };
    for i in 0..packets {
        let name = names[rng.gen_range(0..names.len())];
        let src = Ipv4Addr::from(rng.r#gen::<u32>());
        let mut d = Dns::a(name);
        if signed && rng.gen_bool(0.3) {
            d = d.qtype(28);
        }
        if signed && rng.gen_bool(0.1) {
            let at = rng.gen_range(0..d.qname.len());
            d.qname[at] = d.qname[at].to_ascii_uppercase();
        }
        if rng.gen_bool(0.5) {
            let subnet =
                format!("{}.{}.0.0/{}", rng.gen_range(0..=255u8), rng.gen_range(0..=255u8), rng.gen_range(0..=32u8));
            let (a, l) = subnet.split_once('/').unwrap();
            let l: u8 = l.parse().unwrap();
            let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
            let a = Ipv4Addr::from(u32::from(a.parse::<Ipv4Addr>().unwrap()) & mask);
            let mut options = ecs4(&format!("{a}/{l}"));
            if rng.gen_bool(0.3) {
                options = [cookie(), options].concat();
            } else if rng.gen_bool(0.3) {
                options = [options, cookie_valid(IpAddr::V4(src), rng.gen_range(-400..4000))].concat();
            }
            d = d.opt(rng.gen_range(0..=4096), 0, rng.gen_bool(0.5), &options);
        } else if rng.gen_bool(0.3) {
            d = d.opt(1232, 0, rng.gen_bool(do_odds), &[]);
        } else if rng.gen_bool(0.3) {
            d = d.opt(1232, 0, rng.gen_bool(do_odds), &[cookie(), padding(rng.gen_range(0..20))].concat());
        } else if rng.gen_bool(0.3 + do_odds / 2.0) {
            d = d.opt(
                rng.gen_range(0..=1232),
                0,
                rng.gen_bool(do_odds),
                &cookie_valid(IpAddr::V4(src), rng.gen_range(-400..4000)),
            );
        }
        let mut dns = d.bytes();
        // Mutate: flip bytes, truncate or extend.
        match rng.gen_range(0..4) {
            0 => {}
            1 => {
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(0..dns.len());
                    dns[at] = rng.r#gen();
                }
            }
            2 => dns.truncate(rng.gen_range(0..dns.len())),
            _ => dns.extend((0..rng.gen_range(1..40)).map(|_| rng.r#gen::<u8>())),
        }
        let mut frame = Frame::new();
        frame.src = src;
        frame.vlan = rng.gen_bool(0.1).then_some(5);
        let mut bytes = frame.build(&dns);
        if rng.gen_bool(0.1) {
            // Corrupt the lower layers too.
            let at = rng.gen_range(0..bytes.len().min(50));
            bytes[at] = rng.r#gen();
        }
        let out = fx.prog.test_run(&bytes).unwrap_or_else(|e| panic!("packet {i} (seed {seed}): {e}"));
        match out.action {
            XDP_PASS => {
                assert_eq!(out.frame, bytes, "packet {i} (seed {seed}): passed packets are untouched");
                pass += 1;
            }
            XDP_TX => {
                // Must be exactly what userspace answers.
                fx.answered(&bytes);
                tx += 1;
            }
            other => panic!("packet {i} (seed {seed}): unexpected action {other}"),
        }
    }
    assert!(
        tx > packets / 10 && pass > packets / 10,
        "the mutations exercise both outcomes (tx {tx}, pass {pass} of {packets}, signed: {signed})"
    );
}

#[test]
fn large_tables_sync_by_difference() {
    // 50 000 blocks with 64 distinct answers: what one node going down touches.
    let mut fx = Fixture::new();
    let answers: Vec<Answer> = (0..64u8).map(|i| answer(30, &[&format!("192.0.2.{i}")])).collect();
    let ranges = |shift: u32| {
        (0..50_000u32).map(move |i| {
            let start = i << 14;
            (start, start + (1 << 13) - 1, (i.wrapping_mul(2_654_435_761) >> 26).wrapping_add(shift) % 64)
        })
    };
    let big = |version, answers: Vec<Answer>, shift| {
        let name = ScheduledName {
            ecs: true,
            name: "big.edge.lagran.net".into(),
            id: 9,
            answers: answers.into(),
            v4: PrefixMapV4::from_ranges(ranges(shift), 0),
            v6: PrefixMapV6::uniform(0),
        };
        RouteTable::new(version, now_ms(), vec![ZoneRoutes { zone: Zone::new("edge.lagran.net"), names: vec![name] }])
    };
    let t = big(10, answers.clone(), 0);
    let blocks = t.zones[0].names[0].v4.len();
    let s = fx.writer.sync(&t, &settings()).unwrap();
    eprintln!("initial sync of {blocks} blocks: {s:?}");
    assert_eq!(s.routes_total, blocks + 1, "and one IPv6 /0");
    // One node's address changes: one answer written under a new id, and only the
    // trie entries of that answer re-pointed (ids are content-addressed).
    let mut changed = answers.clone();
    changed[5].ipv4 = vec![ip("198.51.100.5")];
    let t = big(11, changed, 0);
    let with_5 = t.zones[0].names[0].v4.iter().filter(|p| p.value == 5).count();
    let s = fx.writer.sync(&t, &settings()).unwrap();
    eprintln!("one answer changed: {s:?}");
    assert_eq!((s.answers_written, s.routes_upserted, s.routes_deleted), (1, with_5, 0), "{s:?}");
    assert_eq!(s.answers_freed, 1, "the old content's id is freed");
    // Every range moves to another answer: blocks that stay are updated in place;
    // only blocks that merge or split are deleted. Never a rebuild.
    let s = fx.writer.sync(&big(12, answers, 1), &settings()).unwrap();
    eprintln!("every range re-assigned: {s:?}");
    assert!(s.routes_deleted < blocks / 10, "updates, not delete-and-insert: {s:?}");
    let frame = Frame::new().from("0.0.0.1").build(&Dns::a("big.edge.lagran.net").bytes());
    fx.table = big(12, (0..64u8).map(|i| answer(30, &[&format!("192.0.2.{i}")])).collect(), 1);
    fx.answered(&frame);
}

/// A table whose map the build spliced from the one written last (answers
/// renumbered, as a build does) is diffed over the re-split blocks only, and
/// packets inside and outside the change get the table's answers.
#[test]
fn a_spliced_map_syncs_over_its_changed_blocks_only() {
    let mut fx = Fixture::new();
    let answers: Vec<Answer> = (0..8u8).map(|i| answer(30, &[&format!("192.0.2.{i}")])).collect();
    let ranges = (0..20_000u32).map(|i| (i << 16, (i << 16) + 0xffff, i % 7));
    let v4 = PrefixMapV4::from_ranges(ranges, 0);
    let table = |version, answers: Vec<Answer>, v4: PrefixMapV4| {
        let v6 = PrefixMapV6::uniform(0);
        let name =
            ScheduledName { ecs: true, name: "big.edge.lagran.net".into(), id: 9, answers: answers.into(), v4, v6 };
        RouteTable::new(version, now_ms(), vec![ZoneRoutes { zone: Zone::new("edge.lagran.net"), names: vec![name] }])
    };
    let t = table(10, answers.clone(), v4.clone());
    fx.writer.sync(&t, &settings()).unwrap();
    // The build renumbers the answers (v -> 7 - v) and 10.0.0.0/9 (plus a /25
    // of 10.200.0.0) moves to answer 7, the one nothing had.
    let remap: Vec<u32> = (0..8).map(|v| 7 - v).collect();
    let renumbered: Vec<Answer> = (0..8).map(|v| answers[7 - v].clone()).collect();
    let changes = [(0x0a00_0000, 0x0a7f_ffff, 0), (0x0ac8_0000, 0x0ac8_007f, 0)];
    let spliced = v4.splice(&changes, Some(&remap));
    let t = table(11, renumbered, spliced);
    let s = fx.writer.sync(&t, &settings()).unwrap();
    eprintln!("spliced: {s:?}");
    assert_eq!(s.names_spliced, 1, "{s:?}");
    // 10.0.0.0/9 was 128 /16 blocks and is now one; the /25 splits its /16.
    assert!(s.routes_upserted + s.routes_deleted < 200, "only the changed blocks are written: {s:?}");
    assert!(s.visible <= s.elapsed);
    fx.table = t;
    for client in ["10.1.2.3", "10.127.255.1", "10.128.0.1", "10.200.0.5", "10.200.0.200", "11.0.0.1", "0.0.0.1"] {
        fx.answered(&Frame::new().from(client).build(&Dns::a("big.edge.lagran.net").bytes()));
    }
}

/// Per-packet cost as the kernel measures it (`BPF_PROG_TEST_RUN`); prints, never
/// fails on time (a shared machine is no benchmark). `cargo test … per_packet_cost
/// -- --nocapture` shows the numbers; the same method ran on the object before
/// and after a change gives the comparison in docs/xdp.md.
#[test]
fn per_packet_cost() {
    let mut fx = Fixture::new();
    let repeat = 200_000;
    let median_single = |prog: &LoadedXdp, frame: &[u8]| {
        let mut v: Vec<u128> = (0..4000)
            .map(|_| {
                let (action, d) = prog.test_run_repeat(frame, 1).unwrap();
                assert_eq!(action, XDP_TX, "timed frames are answered");
                d.as_nanos()
            })
            .collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x08, 0x06]);
    arp.resize(60, 0);
    let (_, base) = fx.prog.test_run_repeat(&arp, repeat).unwrap();
    let frames = [
        ("plain", Frame::new().from("10.1.2.3").build(&Dns::a("edge.lagran.net").bytes())),
        ("ecs", Frame::new().build(&Dns::a("edge.lagran.net").opt(1232, 0, false, &ecs4("10.9.0.0/16")).bytes())),
        (
            "long-name-ecs",
            Frame::new().build(&Dns::a("pool-a.edge.lagran.net").opt(1232, 0, false, &ecs4("10.9.0.0/16")).bytes()),
        ),
    ];
    eprintln!("verified_insns: {:?}", fx.prog.verified_insns());
    eprintln!("cost: pass at L2 (ARP): {} ns/run (repeat {repeat})", base.as_nanos());
    for (what, f) in &frames {
        eprintln!("cost: {what} answered: median {} ns/run (4000 single runs)", median_single(&fx.prog, f));
    }
    // The same ECS query with DO, its zone signed: the answer and its RRSIG.
    let do_ecs = Frame::new().build(&Dns::a("edge.lagran.net").opt(1232, 0, true, &ecs4("10.9.0.0/16")).bytes());
    let unsigned = median_single(&fx.prog, &do_ecs);
    fx.writer.sync(&signed::signed_table(), &settings()).unwrap();
    let signed = median_single(&fx.prog, &do_ecs);
    eprintln!("cost: ecs-do unsigned zone answered: median {unsigned} ns/run (4000 single runs)");
    eprintln!("cost: ecs-do signed zone answered (with RRSIG): median {signed} ns/run (4000 single runs)");
    // Lookup only: every answer emptied, so the program walks every lookup and passes.
    let mut t = table();
    for z in &mut t.zones {
        for n in &mut z.names {
            for a in std::sync::Arc::make_mut(&mut n.answers) {
                a.ipv4.clear();
                a.canary = None;
            }
        }
    }
    let t = RouteTable::new(100, now_ms(), t.zones);
    fx.writer.sync(&t, &settings()).unwrap();
    for (what, f) in &frames {
        let (action, d) = fx.prog.test_run_repeat(f, repeat).unwrap();
        assert_eq!(action, XDP_PASS);
        eprintln!("cost: {what} parse+lookups, passed: {} ns/run (repeat {repeat})", d.as_nanos());
    }
}

// ------------------------------------------------------------------ IPv6

/// IPv6 transport: `A` and `AAAA` from the IPv6 trie (the packet's source), with
/// and without OPT, cookies and padding; the four-address AAAA answer.
#[test]
fn ipv6_transport_answers_a_and_aaaa_like_userspace() {
    let fx = Fixture::new();
    let aaaa = |n: &str| Dns::a(n).qtype(28);
    let from = |src: &str| Frame::new().v6(src);
    // 2001:db8:1::/48 → answer 1 (two of each, TTL 10).
    let m = fx.answered(&from("2001:db8:1::5").build(&aaaa("dual.edge.lagran.net").bytes()));
    let r = read_resp(&m, 22);
    assert_eq!(r.flags, 0x8500, "QR AA RD");
    assert_eq!(
        r.answers6,
        vec![(10, "2001:db8:53::20".parse().unwrap()), (10, "2001:db8:53::21".parse().unwrap())],
        "AAAA of the /48's answer, TTL 10"
    );
    let m = fx.answered(&from("2001:db8:1::5").build(&Dns::a("dual.edge.lagran.net").bytes()));
    assert_eq!(read_resp(&m, 22).answers, vec![(10, ip("192.0.2.20")), (10, ip("192.0.2.21"))], "A over IPv6");
    // The rest of the space → answer 0; four AAAA in 2001:db8:3::/48.
    let m =
        fx.answered(&from("2001:db8:9::1").build(&aaaa("Dual.Edge.Lagran.NET").opt(1232, 0, true, &cookie()).bytes()));
    let r = read_resp(&m, 22);
    assert_eq!(r.answers6, vec![(30, "2001:db8:53::10".parse().unwrap())], "DNS_TTL caps 300");
    assert_eq!(r.opt.map(|o| (o.0, o.1)), Some((1232, 0x8000)), "OPT with DO copied");
    let m = fx.answered(&from("2001:db8:3:1::1").build(
        &aaaa("dual.edge.lagran.net").opt(512, 0, false, &[cookie_with_server(), padding(20)].concat()).bytes(),
    ));
    assert_eq!(read_resp(&m, 22).answers6.len(), 4);
    // A over IPv6 for a name that has no IPv6 blocks of its own: the uniform map.
    fx.answered(&from("2001:db8:1::5").build(&Dns::a("pool-a.edge.lagran.net").bytes()));
    // A VLAN tag and Ethernet padding.
    let mut f = from("2001:db8:1::5");
    f.vlan = Some(42);
    f.padding = 9;
    fx.answered(&f.build(&aaaa("dual.edge.lagran.net").bytes()));
    // No AAAA for this block: NODATA from userspace.
    fx.pass(&from("2001:db8:2::1").build(&aaaa("dual.edge.lagran.net").bytes()), Counter::NoAnswer);
    fx.answered(&from("2001:db8:2::1").build(&Dns::a("dual.edge.lagran.net").bytes()));
    // An IPv4-mapped source is an IPv4 client, as in userspace (10/8 → answer 1).
    let m = fx.answered(&from("::ffff:10.1.2.3").build(&Dns::a("dual.edge.lagran.net").bytes()));
    assert_eq!(read_resp(&m, 22).answers.len(), 2, "::ffff:10.1.2.3 is 10.1.2.3");
}

/// IPv6 ECS over either transport, IPv4 ECS over IPv6, and IPv4-mapped ECS
/// addresses (looked up as IPv4, scope counting the 96 mapped bits).
#[test]
fn ipv6_ecs_is_used_and_scoped_like_userspace() {
    let fx = Fixture::new();
    let q = |t: u16, opts: &[u8]| Dns::a("dual.edge.lagran.net").qtype(t).opt(1232, 0, false, opts).bytes();
    let e6 = |a: &str, l: u8| {
        let a = v6(a) & if l == 0 { 0 } else { u128::MAX << (128 - l) };
        ecs(2, l, 0, &a.to_be_bytes()[..(l as usize).div_ceil(8)])
    };
    let scope = |m: &[u8]| read_resp(m, 22).opt.and_then(|o| o.2).map(|e| (e.0, e.1, e.2));
    for f in [Frame::new(), Frame::new().v6("2001:db8:9::1")] {
        for t in [1, 28] {
            // Source lengths whose address ends at every offset of a word, and the
            // edges of the shift: few enough for the TCG kernel matrix.
            let lens: &[u8] =
                if t == 28 { &[1, 9, 17, 26, 34, 42, 48, 56, 63, 64, 65, 100, 127, 128] } else { &[8, 47, 72] };
            for &l in lens {
                eprintln!("case: 2001:db8:1::/{l}, qtype {t}");
                let m = fx.answered(&f.build(&q(t, &e6("2001:db8:1::", l))));
                let (family, src, _) = scope(&m).expect("ECS echoed");
                assert_eq!((family, src), (2, l), "the option echoed as received");
            }
            let m = fx.answered(&f.build(&q(t, &[cookie(), e6("2001:db8:3:4::", 64), padding(5)].concat())));
            assert_eq!(scope(&m), Some((2, 64, 48)), "scope = the /48 block");
            let m = fx.answered(&f.build(&q(t, &e6("::", 0))));
            assert_eq!(scope(&m).map(|s| s.2), Some(0), "SOURCE 0: the packet's source, scope 0");
            if t == 1 {
                // IPv4-mapped: 10/8 of the IPv4 map, scope 8 + 96.
                let m = fx.answered(&f.build(&q(t, &e6("::ffff:10.1.2.0", 120))));
                assert_eq!(scope(&m), Some((2, 120, 104)));
                assert_eq!(read_resp(&m, 22).answers.len(), 2);
                // IPv4 ECS over either transport.
                let m = fx.answered(&f.build(&q(t, &ecs4("10.9.0.0/16"))));
                assert_eq!(scope(&m), Some((1, 16, 8)));
            }
        }
    }
}

/// The canary split of an IPv6 client is per /48, like userspace.
#[test]
fn ipv6_canary_split_is_per_slash_48() {
    let fx = Fixture::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..16u16 {
        let src = format!("2001:db8:1{i:02x}:7::1");
        let m = fx.answered(&Frame::new().v6(&src).build(&Dns::a("canary6.edge.lagran.net").qtype(28).bytes()));
        seen.insert(read_resp(&m, 25).answers6[0].1);
        let e = ecs(2, 56, 0, &"2001:db8:1ff:ab00::".parse::<Ipv6Addr>().unwrap().octets()[..7]);
        fx.answered(
            &Frame::new().v6(&src).build(&Dns::a("canary6.edge.lagran.net").qtype(28).opt(1232, 0, false, &e).bytes()),
        );
    }
    assert_eq!(seen.len(), 2, "16 /48s at 50 % see both answers");
}

/// AAAA over IPv6 for names of every length modulo 8 and the longest name.
#[test]
fn ipv6_aaaa_names_of_every_word_alignment() {
    let mut fx = Fixture::new();
    let mut t = table();
    let mut names: Vec<String> = (1..=16).map(|n| format!("{}.edge.lagran.net", "q".repeat(n))).collect();
    names.push(format!("{}.{}.{}.{}.edge.lagran.net", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(45)));
    for (i, n) in names.iter().enumerate() {
        t.zones[0].names.push(ScheduledName {
            ecs: true,
            name: n.clone(),
            id: 200 + i as u32,
            answers: std::sync::Arc::new(vec![answer46(
                30,
                &["198.51.100.1"],
                &[&format!("2001:db8:aa::{:x}", i + 1)],
            )]),
            v4: PrefixMapV4::uniform(0),
            v6: PrefixMapV6::uniform(0),
        });
    }
    let t = RouteTable::new(21, now_ms(), t.zones);
    fx.writer.sync(&t, &settings()).unwrap();
    fx.table = t;
    for n in &names {
        let mixed: String =
            n.chars().enumerate().map(|(i, c)| if i % 2 == 1 { c.to_ascii_uppercase() } else { c }).collect();
        eprintln!("case: {mixed} ({} octets)", wire(&mixed).len());
        let e = ecs(2, 40, 0, &[0x20, 1, 0xd, 0xb8, 0x77]);
        let q = Dns::a(&mixed).qtype(28).opt(1232, 0, false, &[cookie(), e].concat()).bytes();
        fx.answered(&Frame::new().v6("2001:db8:9::1").build(&q));
        fx.answered(&Frame::new().build(&Dns::a(n).qtype(28).opt(1232, 0, false, &cookie()).bytes()));
    }
}

/// IPv6 packets userspace (or the stack) must handle are passed.
#[test]
fn ipv6_packets_the_kernel_cannot_answer_are_passed() {
    let mut fx = Fixture::new();
    let dns = Dns::a("dual.edge.lagran.net").qtype(28).bytes();
    let f = || Frame::new().v6("2001:db8:1::5");
    let mut zero = f();
    zero.no_udp_checksum = true;
    fx.pass(&zero.build(&dns), Counter::UdpZeroChecksum);
    let mut hop = f();
    hop.next = 0; // a hop-by-hop options header
    fx.pass(&hop.build(&dns), Counter::NotUdp);
    let mut frag = f();
    frag.next = 44;
    fx.pass(&frag.build(&dns), Counter::Fragment);
    let mut port = f();
    port.dport = 5353;
    fx.pass(&port.build(&dns), Counter::NotListenAddress);
    let mut short = f().build(&dns);
    short[18..20].copy_from_slice(&2000u16.to_be_bytes());
    fx.pass(&short, Counter::Malformed);
    let mut ver = f().build(&dns);
    ver[14] = 0x40;
    fx.pass(&ver, Counter::NotIp);
    // Listen addresses over IPv6: exact, and `::` for every IPv6 address.
    let set: Vec<std::net::SocketAddr> = vec![format!("[{SERVER6}]:53").parse().unwrap()];
    fx.writer.set_listen(&set).unwrap();
    fx.answered(&f().build(&dns));
    let mut other = f();
    other.v6 = Some(("2001:db8:1::5".parse().unwrap(), "2001:db8::99".parse().unwrap()));
    fx.pass(&other.build(&dns), Counter::NotListenAddress);
    fx.writer.set_listen(&["0.0.0.0:53".parse().unwrap()]).unwrap();
    fx.pass(&f().build(&dns), Counter::NotListenAddress);
    fx.writer.set_listen(&["[::]:53".parse().unwrap()]).unwrap();
    fx.answered(&other.build(&dns));
}

/// A CNAME answer and a block answered for the
/// resolver's address get no trie entry, so the program passes them; the rest
/// of the same name is still answered in the kernel.
#[test]
fn cname_and_unlocated_blocks_are_passed_to_userspace() {
    let mut fx = Fixture::new();
    let plain = answer(30, &["192.0.2.1"]);
    let unlocated = Answer { state: lagran::route_table::AnswerState::Resolver, ..answer(30, &["192.0.2.9"]) };
    let edge = ScheduledName {
        ecs: true,
        name: "edge.lagran.net".into(),
        id: 1,
        answers: std::sync::Arc::new(vec![plain, unlocated]),
        v4: PrefixMapV4::from_ranges([(v4("58.60.0.0"), v4("58.60.255.255"), 0)], 1),
        v6: PrefixMapV6::uniform(0),
    };
    let cname = ScheduledName {
        ecs: true,
        name: "pool-a.edge.lagran.net".into(),
        id: 2,
        answers: std::sync::Arc::new(vec![Answer {
            hostname: Some("gz-01.edge.lagran.net".into()),
            ..answer(30, &["192.0.2.21"])
        }]),
        v4: PrefixMapV4::uniform(0),
        v6: PrefixMapV6::uniform(0),
    };
    let zone = ZoneRoutes { zone: Zone::new("edge.lagran.net"), names: vec![edge, cname] };
    fx.table = RouteTable::new(8, now_ms(), vec![zone]);
    fx.writer.sync(&fx.table, &settings()).expect("sync");
    let f = Frame::new();
    fx.run(&f.clone().from("58.60.1.1").build(&Dns::a("edge.lagran.net").bytes()), Counter::Answered);
    fx.run(&f.clone().from("11.1.2.3").build(&Dns::a("edge.lagran.net").bytes()), Counter::NoAnswer);
    fx.run(&f.clone().from("58.60.1.1").build(&Dns::a("pool-a.edge.lagran.net").bytes()), Counter::NoAnswer);
}

/// The IPv4 listen set is scanned from `lagran_listen4` up to its size and looked
/// up in `lagran_listen` beyond it: both give the same answers.
#[test]
fn listen_sets_larger_than_the_scan_and_mapped_addresses() {
    use std::net::SocketAddr;
    let mut fx = Fixture::new();
    let q = Dns::a("edge.lagran.net").bytes();
    let to = |dst: &str, port: u16| {
        let mut f = Frame::new().from("10.1.2.3");
        f.dst = dst.parse().unwrap();
        f.dport = port;
        f.build(&q)
    };
    let slots = lagran_common::listen::V4_SLOTS;
    // Up to `slots` IPv4 pairs are scanned; more go to the hash map.
    for n in [slots - 2, slots - 1, slots, 3 * slots] {
        // n addresses 192.0.2.1.. on port 53, and an IPv4-mapped one on port 5353.
        let mut set: Vec<SocketAddr> = (1..=n).map(|i| format!("192.0.2.{i}:53").parse().unwrap()).collect();
        set.push("[::ffff:198.51.100.7]:5353".parse().unwrap());
        fx.writer.set_listen(&set).unwrap();
        for i in 1..=n {
            fx.answered(&to(&format!("192.0.2.{i}"), 53));
        }
        fx.pass(&to(&format!("192.0.2.{}", n + 1), 53), Counter::NotListenAddress);
        fx.pass(&to("192.0.2.1", 5353), Counter::NotListenAddress);
        fx.answered(&to("198.51.100.7", 5353));
        fx.pass(&to("198.51.100.7", 53), Counter::NotListenAddress);
        // The wildcard among many: every address on its port.
        set.push("0.0.0.0:54".parse().unwrap());
        fx.writer.set_listen(&set).unwrap();
        fx.answered(&to("203.0.113.200", 54));
        fx.pass(&to("203.0.113.200", 53), Counter::NotListenAddress);
    }
}

/// The IPv6 listen set likewise: scanned from `lagran_listen6` up to its size,
/// looked up in `lagran_listen` beyond it; IPv4 pairs never match an IPv6 packet.
#[test]
fn ipv6_listen_sets_larger_than_the_scan() {
    use std::net::SocketAddr;
    let mut fx = Fixture::new();
    let q = Dns::a("edge.lagran.net").bytes();
    let to = |dst: &str, port: u16| {
        let mut f = Frame::new().v6("2001:db8:1::5");
        f.v6 = Some(("2001:db8:1::5".parse().unwrap(), dst.parse().unwrap()));
        f.dport = port;
        f.build(&q)
    };
    let slots = lagran_common::listen::V6_SLOTS;
    for n in [slots - 1, slots, slots + 1, 3 * slots] {
        let mut set: Vec<SocketAddr> = (1..=n).map(|i| format!("[2001:db8:5::{i}]:53").parse().unwrap()).collect();
        set.push("[2001:db8:6::1]:5353".parse().unwrap());
        set.push("192.0.2.1:53".parse().unwrap());
        fx.writer.set_listen(&set).unwrap();
        for i in 1..=n {
            fx.answered(&to(&format!("2001:db8:5::{i}"), 53));
        }
        fx.pass(&to(&format!("2001:db8:5::{}", n + 1), 53), Counter::NotListenAddress);
        // Same address, other port; same high half, other low half.
        fx.pass(&to("2001:db8:5::1", 5353), Counter::NotListenAddress);
        fx.pass(&to("2001:db8:6::2", 5353), Counter::NotListenAddress);
        fx.pass(&to("2001:db8:7::1", 5353), Counter::NotListenAddress);
        fx.answered(&to("2001:db8:6::1", 5353));
        fx.pass(&to("::ffff:192.0.2.1", 53), Counter::NotListenAddress);
        // The wildcard among many: every IPv6 address on its port.
        set.push("[::]:54".parse().unwrap());
        fx.writer.set_listen(&set).unwrap();
        fx.answered(&to("2001:db8:ff::200", 54));
        fx.pass(&to("2001:db8:ff::200", 53), Counter::NotListenAddress);
    }
}

// ------------------------------------------------ flat IPv4 route arrays

/// `flat.edge.lagran.net` (id 9): blocks of every kind the flat arrays hold —
/// /8 and /15 (whole /16s), exactly /16, /17 and /24 (inside a split /16),
/// longer than /24 (their /24 asks the trie), and an odd range that decomposes
/// into blocks of many lengths — each with its own answer where neighbours meet.
fn flat_name(ranges: &[(&str, &str, u32)]) -> ScheduledName {
    ScheduledName {
        ecs: true,
        name: "flat.edge.lagran.net".into(),
        id: 9,
        answers: std::sync::Arc::new(vec![
            answer(30, &["192.0.2.1"]),
            answer(30, &["192.0.2.2"]),
            answer(30, &["192.0.2.3", "192.0.2.33"]),
            answer(30, &["192.0.2.4"]),
        ]),
        v4: PrefixMapV4::from_ranges(ranges.iter().map(|&(s, e, v)| (v4(s), v4(e), v)), 0),
        v6: PrefixMapV6::uniform(0),
    }
}

const FLAT_RANGES: [(&str, &str, u32); 10] = [
    ("20.0.0.0", "20.0.255.255", 1),
    ("20.1.0.0", "20.1.127.255", 2),
    ("20.1.128.0", "20.1.128.255", 3),
    ("20.1.129.0", "20.1.129.127", 1),
    ("20.1.129.128", "20.1.129.131", 2),
    ("20.1.129.132", "20.1.129.132", 3),
    ("20.1.129.133", "20.1.129.200", 1),
    ("20.2.0.0", "20.3.255.255", 2),
    ("21.0.0.0", "21.255.255.255", 3),
    ("22.5.3.7", "22.9.1.2", 1),
];

fn flat_table(version: u64, ranges: &[(&str, &str, u32)]) -> RouteTable {
    let zone = ZoneRoutes { zone: Zone::new("edge.lagran.net"), names: vec![flat_name(ranges)] };
    RouteTable::new(version, now_ms(), vec![zone])
}

/// Client addresses at and beside every block edge of the name's IPv4 map.
fn edges(name: &ScheduledName) -> Vec<u32> {
    let mut out = Vec::new();
    for p in name.v4.iter() {
        let size = if p.len == 0 { 1u64 << 32 } else { 1u64 << (32 - p.len) };
        let (first, last) = (u64::from(p.addr), u64::from(p.addr) + size - 1);
        for a in [first.wrapping_sub(1), first, first + 1, (first + last) / 2, last.saturating_sub(1), last, last + 1] {
            if a <= u64::from(u32::MAX) {
                out.push(a as u32);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Every edge client, as the sender and as ECS /32, /24 and /16, answered exactly
/// like userspace (addresses, TTL and the ECS scope, byte for byte).
fn check_edges(fx: &Fixture) -> usize {
    let name = fx.table.scheduled("flat.edge.lagran.net").expect("flat name").clone();
    let mut n = 0;
    for a in edges(&name) {
        let addr = Ipv4Addr::from(a);
        if lagran::geo::reserved::is_special_v4(addr) || a == 0 {
            continue;
        }
        let src = addr.to_string();
        fx.answered(&Frame::new().from(&src).build(&Dns::a("flat.edge.lagran.net").bytes()));
        for len in [32, 24, 16] {
            let dns = Dns::a("flat.edge.lagran.net").opt(1232, 0, false, &ecs4(&format!("{src}/{len}"))).bytes();
            let m = fx.answered(&Frame::new().build(&dns));
            let scope = read_resp(&m, wire("flat.edge.lagran.net").len()).opt.unwrap().2.unwrap().2;
            let (_, want) = name.answer_for(IpAddr::V4(Ipv4Addr::from(a & (u32::MAX << (32 - len)))));
            assert_eq!(scope, want, "ECS {src}/{len}: the scope is the route's exact length");
        }
        n += 1;
    }
    n
}

#[test]
fn flat_route_arrays_keep_every_block_edge_and_scope() {
    let obj = lagran::xdp::object_bytes().expect("the BPF object");
    let prog = LoadedXdp::load(&obj).expect("load");
    let fx = Fixture::with(prog, flat_table(1, &FLAT_RANGES));
    assert!(
        fx.writer.maps().flat_groups().is_some_and(|g| g >= 2),
        "the split /16s (20.1, 22.5–22.9) use l2 groups: {:?}",
        fx.writer.maps().flat_groups()
    );
    let checked = check_edges(&fx);
    assert!(checked > 100, "{checked} edge clients");
}

#[test]
fn flat_route_arrays_follow_resyncs_and_removals() {
    let obj = lagran::xdp::object_bytes().expect("the BPF object");
    let prog = LoadedXdp::load(&obj).expect("load");
    let mut fx = Fixture::with(prog, flat_table(1, &FLAT_RANGES));
    check_edges(&fx);
    // The split /16 20.1 changes inside, 20.0 becomes split, 21/8 is split at /24
    // and past /24, 22.x becomes one /16 block.
    let changed: [(&str, &str, u32); 7] = [
        ("20.0.0.0", "20.0.0.255", 3),
        ("20.1.0.0", "20.1.63.255", 1),
        ("20.1.128.0", "20.1.129.255", 2),
        ("21.0.0.0", "21.0.0.127", 1),
        ("21.0.1.0", "21.0.1.255", 2),
        ("21.0.2.0", "21.255.255.255", 3),
        ("22.5.0.0", "22.5.255.255", 2),
    ];
    let t = flat_table(2, &changed);
    fx.writer.sync(&t, &settings()).expect("resync");
    fx.table = t;
    check_edges(&fx);
    // Back again: groups given up in the last sync are reused now.
    let t = flat_table(3, &FLAT_RANGES);
    fx.writer.sync(&t, &settings()).expect("resync");
    fx.table = t;
    check_edges(&fx);
    // The name gone: passed as unknown; its block cleared.
    let t = RouteTable::new(4, now_ms(), vec![]);
    fx.writer.sync(&t, &settings()).expect("resync");
    fx.table = t;
    fx.pass(&Frame::new().from("20.1.129.132").build(&Dns::a("flat.edge.lagran.net").bytes()), Counter::NameUnknown);
    assert_eq!(fx.writer.maps().flat_groups(), Some(0));
}
