//! Hostile traffic against the running daemon (issue 11): 10⁵ mutated queries
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

use crate::support::{Daemon, Options};

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

#[test]
fn hundred_thousand_mutated_queries_get_well_formed_responses_or_none() {
    let d = Daemon::start(Options::default());
    let dropped_before = metric(&d, "lagran_dns_dropped_total");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut rng = StdRng::seed_from_u64(0x11_ba5e);
    let total = 100_000u32;
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
            let q = mutated(&mut rng, id);
            s.send_to(&q, d.dns).unwrap();
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
