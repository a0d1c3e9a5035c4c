//! Hostile traffic against the running daemon: 10⁵ mutated queries
//! over UDP, and some over TCP. Every response must be a well-formed DNS
//! message with QR set; junk gets no response at all; the daemon answers
//! normally afterwards.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::{Daemon, Options, XdpNamespaces, metric_value};

const ZONE: &str = "edge.lagran.net";

fn name(v: &mut Vec<u8>, name: &str) {
    for l in name.split('.').filter(|l| !l.is_empty()) {
        v.push(l.len() as u8);
        v.extend_from_slice(l.as_bytes());
    }
    v.push(0);
}

/// A plausible query (A, AAAA, SOA, NS, TXT, ANY; sometimes with an OPT,
/// ECS and a cookie), then 0–3 mutations: flipped or random octets,
/// truncation, extension, or a random section count.
fn mutated(rng: &mut StdRng, id: u16) -> Vec<u8> {
    let names = [ZONE, "pool-a.edge.lagran.net", "whoami.edge.lagran.net", "ns1.edge.lagran.net", "x.lagran.net"];
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    name(&mut q, names[rng.gen_range(0..names.len())]);
    let qtype = [1u16, 28, 6, 2, 16, 255][rng.gen_range(0..6)];
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if rng.gen_bool(0.5) {
        q[11] = 1;
        let mut opts = Vec::new();
        if rng.gen_bool(0.5) {
            opts.extend_from_slice(&[0, 8, 0, 7, 0, 1, 24, 0, rng.r#gen(), rng.r#gen(), 0]);
        }
        if rng.gen_bool(0.3) {
            opts.extend_from_slice(&[0, 10, 0, 8]);
            opts.extend((0..8).map(|_| rng.r#gen::<u8>()));
        }
        q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
        q.extend_from_slice(&(opts.len() as u16).to_be_bytes());
        q.extend_from_slice(&opts);
    }
    for _ in 0..rng.gen_range(0..4) {
        match rng.gen_range(0..6) {
            0 => {
                let i = rng.gen_range(0..q.len());
                q[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => {
                let i = rng.gen_range(0..q.len());
                q[i] = rng.r#gen();
            }
            2 => q.truncate(rng.gen_range(0..=q.len())),
            3 => q.extend((0..rng.gen_range(1..40)).map(|_| rng.r#gen::<u8>())),
            4 if q.len() >= 12 => {
                let i = 4 + 2 * rng.gen_range(0..4);
                q[i] = 0;
                q[i + 1] = rng.gen_range(0..4);
            }
            _ => {}
        }
        if q.is_empty() {
            break;
        }
    }
    if q.len() >= 2 {
        // Keep the ID, so replies can be matched.
        q[..2].copy_from_slice(&id.to_be_bytes());
    }
    q
}

/// A response must parse, have QR set and echo the query's ID.
fn check_response(query: &[u8], resp: &[u8]) {
    let m =
        Message::from_vec(resp).unwrap_or_else(|e| panic!("a malformed response ({e}) to {query:02x?}: {resp:02x?}"));
    assert_eq!(m.message_type(), MessageType::Response, "QR must be set: {resp:02x?}");
    assert!(query.len() >= 17 && query[2] & 0x80 == 0, "junk was answered: {query:02x?} -> {resp:02x?}");
}

fn metric(d: &Daemon, line_start: &str) -> u64 {
    let (_, v) = d.get("/metrics");
    let text = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
    text.lines().filter(|l| l.starts_with(line_start)).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
}

fn answers_normally(d: &Daemon) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut q = vec![0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    name(&mut q, ZONE);
    q.extend_from_slice(&[0, 1, 0, 1]);
    let mut buf = [0u8; 4096];
    for _ in 0..5 {
        s.send_to(&q, d.dns).unwrap();
        if let Ok((n, _)) = s.recv_from(&mut buf)
            && buf[..2] == [0xbe, 0xef]
        {
            let m = Message::from_vec(&buf[..n]).expect("a well-formed answer");
            assert_eq!(m.answers().len(), 1, "the daemon answers normally afterwards: {m:?}");
            return;
        }
    }
    panic!("the daemon no longer answers after the mutated queries\n{}", d.log());
}

/// Sends `total` mutated queries from `s` to `to` in batches of 200, checks
/// every reply against its query (matched by ID), and returns how many replied.
fn send_mutated(s: &UdpSocket, to: std::net::SocketAddr, rng: &mut StdRng, total: u32) -> u32 {
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let batch = 200u32;
    let (mut sent, mut replies) = (0u32, 0u32);
    let mut buf = [0u8; 65_536];
    let started = Instant::now();
    let mut previous: HashMap<u16, Vec<u8>> = HashMap::new();
    while sent < total {
        assert!(started.elapsed() < Duration::from_secs(600), "10⁵ queries took over 10 minutes");
        let mut outstanding: HashMap<u16, Vec<u8>> = HashMap::new();
        for _ in 0..batch.min(total - sent) {
            let id = (sent % 65_536) as u16;
            let q = mutated(rng, id);
            s.send_to(&q, to).unwrap();
            outstanding.insert(id, q);
            sent += 1;
        }
        // Drain: every reply is matched by ID; a 200 ms silence ends the batch.
        while let Ok((n, _)) = s.recv_from(&mut buf) {
            let resp = &buf[..n];
            let id = u16::from_be_bytes([resp.first().copied().unwrap_or(0), resp.get(1).copied().unwrap_or(0)]);
            // A late reply to the previous batch is checked against its query too.
            let Some(query) = outstanding.remove(&id).or_else(|| previous.remove(&id)) else {
                panic!("a reply to no query sent: {resp:02x?}");
            };
            check_response(&query, resp);
            replies += 1;
            if outstanding.is_empty() {
                break;
            }
        }
        previous = outstanding;
    }

    replies
}

#[test]
fn hundred_thousand_mutated_queries_get_well_formed_responses_or_none() {
    let d = Daemon::start(Options::default());
    let dropped_before = metric(&d, "lagran_dns_dropped_total");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rng = StdRng::seed_from_u64(0x11_ba5e);
    let total = 100_000u32;
    let replies = send_mutated(&s, d.dns, &mut rng, total);
    assert!(replies > total / 4, "only {replies} of {total} mutated queries answered\n{}", d.log());
    let dropped = metric(&d, "lagran_dns_dropped_total") - dropped_before;
    assert!(dropped > 0, "junk is dropped and counted");

    // TCP: 300 mutated queries on one connection (reconnecting when
    // the server closes it); answers framed and well-formed.
    let mut tcp_replies = 0;
    let mut conn: Option<TcpStream> = None;
    for i in 0..300u16 {
        let q = mutated(&mut rng, i);
        let stream = conn.get_or_insert_with(|| {
            let c = TcpStream::connect(d.dns).unwrap();
            c.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            c
        });
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        if stream.write_all(&framed).is_err() {
            conn = None;
            continue;
        }
        let mut len = [0u8; 2];
        match stream.read_exact(&mut len) {
            Ok(()) => {
                let mut resp = vec![0u8; u16::from_be_bytes(len) as usize];
                stream.read_exact(&mut resp).expect("a whole framed response");
                assert_eq!(resp[..2], q[..2], "TCP answers come in order");
                check_response(&q, &resp);
                tcp_replies += 1;
            }
            // Dropped junk: no reply; the next query goes on a fresh connection
            // so a partial frame cannot shift the framing.
            Err(_) => conn = None,
        }
    }
    assert!(tcp_replies > 50, "only {tcp_replies} of 300 TCP queries answered");
    answers_normally(&d);
}

/// A query for `qname`/`qtype` with an OPT carrying a COOKIE option of `cookie`
/// (a client cookie, maybe followed by a server cookie) and a Padding option of
/// 16 octets, which neither path echoes (RFC 7830 §3).
fn cookie_query(id: u16, qname: &str, qtype: u16, cookie: &[u8]) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1]);
    name(&mut q, qname);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1, 0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    q.extend_from_slice(&((cookie.len() + 4 + 20) as u16).to_be_bytes());
    q.extend_from_slice(&[0, 10]);
    q.extend_from_slice(&(cookie.len() as u16).to_be_bytes());
    q.extend_from_slice(cookie);
    q.extend_from_slice(&[0, 12, 0, 16]);
    q.extend_from_slice(&[0; 16]);
    q
}

fn plain_query(id: u16, qname: &str, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    name(&mut q, qname);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    q
}

fn cookie_of(m: &Message) -> Option<Vec<u8>> {
    use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    match m.extensions().as_ref()?.option(EdnsCode::Cookie)? {
        EdnsOption::Unknown(_, data) => Some(data.clone()),
        _ => None,
    }
}

/// What one flood saw.
#[derive(Debug, Default)]
struct Flood {
    /// Queries without a cookie sent, and responses to them.
    plain_sent: usize,
    plain_answered: usize,
    /// Queries with a valid server cookie sent, and the IDs answered (with our cookie echoed).
    cookie_sent: usize,
    cookie_answered: std::collections::HashSet<u16>,
    secs: f64,
}

/// From one address (this thread pinned to one CPU: the kernel's accounts are
/// per CPU), `per_ms` queries without a cookie each millisecond for `secs`
/// seconds (IDs below 0x8000), and every 50 ms one with `cookie` (IDs from
/// 0x8000); then waits 2 s for late responses. `plain(i)` and `with_cookie(i)`
/// give the question.
fn flood(
    to: std::net::SocketAddr,
    secs: u64,
    per_ms: usize,
    plain: impl Fn(usize) -> (String, u16),
    with_cookie: impl Fn(usize) -> (String, u16),
    cookie: &[u8],
) -> Flood {
    // SAFETY: a zeroed cpu_set_t with one bit set, passed by pointer with its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let mut f = Flood::default();
    let mut buf = [0u8; 4096];
    let mut receive = |f: &mut Flood| {
        while let Ok((n, _)) = sock.recv_from(&mut buf) {
            let Ok(m) = Message::from_vec(&buf[..n]) else { continue };
            if m.id() < 0x8000 {
                f.plain_answered += 1;
            } else if cookie_of(&m).as_deref() == Some(cookie) {
                f.cookie_answered.insert(m.id());
            }
        }
    };
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    while Instant::now() < end {
        let elapsed_ms = start.elapsed().as_millis() as usize;
        while f.plain_sent < elapsed_ms * per_ms {
            let (q, t) = plain(f.plain_sent);
            let _ = sock.send_to(&plain_query((f.plain_sent % 0x8000) as u16, &q, t), to);
            f.plain_sent += 1;
        }
        if f.cookie_sent < elapsed_ms / 50 {
            let (q, t) = with_cookie(f.cookie_sent);
            let _ = sock.send_to(&cookie_query(0x8000 + f.cookie_sent as u16, &q, t, cookie), to);
            f.cookie_sent += 1;
        }
        receive(&mut f);
        std::thread::sleep(Duration::from_micros(200));
    }
    f.secs = start.elapsed().as_secs_f64();
    let drain = Instant::now() + Duration::from_secs(2);
    while Instant::now() < drain {
        receive(&mut f);
        std::thread::sleep(Duration::from_millis(5));
    }
    f
}

/// With XDP on and `RRL_RPS=100 RRL_SLIP=0`, a flood of NXDOMAIN
/// queries (userspace) and one of A queries (XDP) from one address at more
/// than 10× the rate get at most 1.5× the rate in responses, while that
/// address's queries carrying a valid server cookie are all answered; `dig`
/// shows the server cookie as good from both paths.
#[test]
fn rate_limiting_and_server_cookies_with_xdp_in_namespaces() {
    let Some(ns) = XdpNamespaces::create("rrl_xdp") else { return };
    let pair = &ns.pair;
    let mut options = ns.daemon_options(&format!("/sys/fs/bpf/lagran-e2e-rrl-{}", std::process::id()));
    options.env.extend([("RRL_RPS".into(), "100".into()), ("RRL_SLIP".into(), "0".into())]);
    let d = Daemon::start(options);
    let metrics = || ns.metrics(&d);
    let value = metric_value;
    let dig = |args: &[&str]| -> String {
        let server = format!("@{}", pair.server_addr);
        let mut all = vec![server.as_str(), "+tries=2", "+time=2"];
        all.extend_from_slice(args);
        let out = pair.client_run("dig", &all).expect("running dig in the client namespace");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // dig sends a client cookie by default; both paths return our server cookie.
    // The answer is 32 octets longer than the query (the A record, and a server
    // cookie the query did not carry): on a veth the frame grows at its front.
    let fast = dig(&["edge.lagran.net", "A", "+subnet=58.60.0.0/24"]);
    assert!(fast.contains("COOKIE: ") && fast.contains("(good)"), "XDP: {fast}\n{}", d.log());
    let m = metrics();
    assert_eq!(value(&m, "lagran_xdp_packets_total{result=\"answered\"}"), 1, "XDP answered it:\n{m}");
    let slow = dig(&["edge.lagran.net", "NS"]);
    assert!(slow.contains("COOKIE: ") && slow.contains("(good)"), "userspace: {slow}");
    assert_eq!(value(&metrics(), "lagran_dns_queries_total{transport=\"udp\"}"), 1, "userspace answered NS");

    // Our server cookie for this client's address and client cookie.
    let to = std::net::SocketAddr::from((pair.server_addr, 53));
    let client_cookie = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
    let cookie = pair
        .client
        .enter(|| {
            let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 4096];
            for _ in 0..5 {
                sock.send_to(&cookie_query(7, "edge.lagran.net", 6, &client_cookie), to).unwrap();
                if let Ok((n, _)) = sock.recv_from(&mut buf)
                    && let Some(c) = Message::from_vec(&buf[..n]).ok().as_ref().and_then(cookie_of)
                {
                    return c;
                }
            }
            panic!("no COOKIE in the SOA response");
        })
        .expect("entering the client namespace");
    assert_eq!((cookie.len(), &cookie[..8]), (24, &client_cookie[..]));

    // 3 s of NXDOMAIN queries at 2000/s, 20× the rate (userspace answers these);
    // the cookie queries alternate NXDOMAIN (userspace) and A (XDP).
    let f = pair
        .client
        .enter(|| {
            flood(
                to,
                3,
                2,
                |i| (format!("nope-{i}.edge.lagran.net"), 1),
                |i| if i % 2 == 0 { (format!("gone-{i}.edge.lagran.net"), 1) } else { ("edge.lagran.net".into(), 1) },
                &cookie,
            )
        })
        .expect("entering the client namespace");
    let m = metrics();
    let rate = f.plain_sent as f64 / f.secs;
    assert!(rate >= 1000.0, "the flood reached only {rate:.0} queries/s: {f:?}");
    assert!(
        f.plain_answered as f64 <= 1.5 * 100.0 * f.secs,
        "{} responses to {} NXDOMAIN queries in {:.1} s at RRL_RPS=100:\n{f:?}\n{m}",
        f.plain_answered,
        f.plain_sent,
        f.secs
    );
    assert!(f.plain_answered >= 50, "the first second's credit is answered: {f:?}");
    assert_eq!(f.cookie_answered.len(), f.cookie_sent, "every query with a valid server cookie is answered: {f:?}");
    assert!(value(&m, "lagran_rrl_responses_total{path=\"userspace\",class=\"nxdomain\",action=\"limited\"}") > 1000);
    assert!(value(&m, "lagran_xdp_packets_total{result=\"answered\"}") > (f.cookie_sent / 2) as u64, "{m}");

    // 2 s of A queries at 2000/s: the kernel's own limit.
    let f = pair
        .client
        .enter(|| flood(to, 2, 2, |_| ("edge.lagran.net".into(), 1), |_| ("edge.lagran.net".into(), 1), &cookie))
        .expect("entering the client namespace");
    let m = metrics();
    assert!(
        f.plain_answered as f64 <= 1.5 * 100.0 * f.secs,
        "{} XDP answers to {} A queries in {:.1} s at RRL_RPS=100:\n{f:?}\n{m}",
        f.plain_answered,
        f.plain_sent,
        f.secs
    );
    assert_eq!(f.cookie_answered.len(), f.cookie_sent, "valid cookies are exempt in the kernel too: {f:?}");
    // The metrics are read from the program every second.
    std::thread::sleep(Duration::from_millis(1500));
    let m = metrics();
    assert!(value(&m, "lagran_rrl_responses_total{path=\"xdp\",class=\"answer\",action=\"limited\"}") > 1000, "{m}");

    // Afterwards, the same address is answered normally in another class.
    let after = dig(&["edge.lagran.net", "NS", "+nocookie"]);
    assert!(after.contains("status: NOERROR"), "{after}");
}

/// The 10⁵ mutated queries again, through the XDP fast path (namespaces, a
/// veth pair): what the program answers and what it passes to userspace must
/// both be well-formed replies to their queries, and the daemon answers
/// normally afterwards, in the kernel and in userspace.
#[test]
fn hundred_thousand_mutated_queries_through_xdp() {
    let Some(ns) = XdpNamespaces::create("mutated_xdp") else { return };
    let pair = &ns.pair;
    let d = Daemon::start(ns.daemon_options(&format!("/sys/fs/bpf/lagran-e2e-mut-{}", std::process::id())));
    let metrics = || ns.metrics(&d);
    let value = metric_value;
    let to = std::net::SocketAddr::from((pair.server_addr, 53));
    let total = 100_000u32;
    let replies = pair
        .client
        .enter(|| {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            send_mutated(&s, to, &mut StdRng::seed_from_u64(0x0001_1ba5_e0d9), total)
        })
        .expect("entering the client namespace");
    let m = metrics();
    assert!(replies > total / 4, "only {replies} of {total} mutated queries answered\n{m}");
    let xdp = value(&m, "lagran_xdp_packets_total{result=\"answered\"}");
    let user = value(&m, "lagran_dns_queries_total{transport=\"udp\"}");
    assert!(xdp > 500 && user > 1000, "both paths answered mutated queries (XDP {xdp}, userspace {user}):\n{m}");

    // Afterwards: the kernel (A) and userspace (NS) answer normally.
    let dig = |args: &[&str]| -> String {
        let server = format!("@{}", pair.server_addr);
        let mut all = vec![server.as_str(), "+tries=2", "+time=2", "+nocookie"];
        all.extend_from_slice(args);
        let out = pair.client_run("dig", &all).expect("running dig in the client namespace");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let a = dig(&["edge.lagran.net", "A"]);
    assert!(a.contains("status: NOERROR") && a.contains("ANSWER: 1"), "{a}");
    assert_eq!(value(&metrics(), "lagran_xdp_packets_total{result=\"answered\"}"), xdp + 1, "XDP answered it");
    let ns = dig(&["edge.lagran.net", "NS"]);
    assert!(ns.contains("status: NOERROR"), "{ns}");
}
