//! The load during the faults: queriers checking every answer against the
//! oracle, the agent's heartbeats, and the monitor counting nodes missing
//! from the leader's table. All run on threads until [`Traffic::stop`] (at
//! most an hour); the counters are read as snapshots around each fault.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};
use serde_json::Value;

use super::cluster::{AGENT, api};
use crate::support::Dig;

pub const NAME: &str = "edge.lagran.net";
/// The probe subnets: Shenzhen Telecom and Beijing Unicom in the test geo file.
pub const PROBES: [&str; 2] = ["58.60.0.0/24", "123.112.0.0/24"];
const LIMIT: Duration = Duration::from_secs(3600);

/// What the clients saw (cumulative).
#[derive(Debug, Default)]
pub struct Counts {
    pub sent: AtomicU64,
    pub servfail: AtomicU64,
    pub timeouts: AtomicU64,
    pub wrong: AtomicU64,
    /// The most nodes missing from the leader's table at any one reading
    /// since the last [`Counts::reset_withdrawn`].
    pub withdrawn: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub sent: u64,
    pub servfail: u64,
    pub timeouts: u64,
    pub wrong: u64,
}

impl Snapshot {
    pub fn since(self, before: Snapshot) -> Snapshot {
        Snapshot {
            sent: self.sent - before.sent,
            servfail: self.servfail - before.servfail,
            timeouts: self.timeouts - before.timeouts,
            wrong: self.wrong - before.wrong,
        }
    }
}

impl Counts {
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            sent: self.sent.load(Ordering::SeqCst),
            servfail: self.servfail.load(Ordering::SeqCst),
            timeouts: self.timeouts.load(Ordering::SeqCst),
            wrong: self.wrong.load(Ordering::SeqCst),
        }
    }

    pub fn reset_withdrawn(&self) -> u64 {
        self.withdrawn.swap(0, Ordering::SeqCst)
    }

    fn record(&self, outcome: Outcome) {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let counter = match outcome {
            Outcome::Right => return,
            Outcome::Wrong => &self.wrong,
            Outcome::ServFail => &self.servfail,
            Outcome::Timeout => &self.timeouts,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Right,
    Wrong,
    ServFail,
    Timeout,
}

/// One probe: its ECS subnet and the answer the oracle expects.
#[derive(Debug, Clone)]
pub struct Probe {
    pub subnet: &'static str,
    pub expected: Vec<String>,
}

/// The query for `probe`, id `id`, with ECS.
fn query(probe: &Probe, id: u16) -> Vec<u8> {
    let (addr, len) = probe.subnet.split_once('/').unwrap();
    let mut m = Message::new();
    m.set_id(id).set_message_type(MessageType::Query).set_op_code(OpCode::Query);
    m.add_query(Query::query(Name::from_ascii(NAME).unwrap(), RecordType::A));
    let mut e = Edns::new();
    e.set_max_payload(1232);
    let ip: IpAddr = addr.parse().unwrap();
    e.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(ip, len.parse().unwrap(), 0)));
    m.set_edns(e);
    m.to_vec().unwrap()
}

/// Judges a response against the probe's expected answer.
fn judge(bytes: &[u8], id: u16, probe: &Probe) -> Option<Outcome> {
    let m = Message::from_vec(bytes).ok()?;
    if m.id() != id {
        return None;
    }
    if u16::from(m.response_code()) == 2 {
        return Some(Outcome::ServFail);
    }
    let mut got: Vec<String> = m
        .answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    got.sort();
    Some(if got == probe.expected { Outcome::Right } else { Outcome::Wrong })
}

fn ask_udp(sock: &UdpSocket, target: SocketAddr, probe: &Probe, id: u16) -> Outcome {
    if sock.send_to(&query(probe, id), target).is_err() {
        return Outcome::Timeout;
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                if let Some(o) = judge(&buf[..n], id, probe) {
                    return o;
                }
            }
            Err(_) => break,
        }
    }
    Outcome::Timeout
}

fn ask_tcp(target: SocketAddr, probe: &Probe, id: u16) -> Outcome {
    let run = || -> std::io::Result<Option<Outcome>> {
        let mut s = TcpStream::connect_timeout(&target, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        let q = query(probe, id);
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        s.write_all(&framed)?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len)?;
        let mut body = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut body)?;
        Ok(judge(&body, id, probe))
    };
    run().ok().flatten().unwrap_or(Outcome::Timeout)
}

fn ask_dot(target: SocketAddr, probe: &Probe) -> Outcome {
    let out = Command::new("kdig")
        .args([format!("@{}", target.ip()), "-p".into(), target.port().to_string()])
        .args(["+tls", "+time=2", "+retry=0", NAME, "A", &format!("+subnet={}", probe.subnet)])
        .output();
    let Ok(out) = out else { return Outcome::Timeout };
    let d = Dig::parse(&String::from_utf8_lossy(&out.stdout));
    // kdig's header line is `status: NOERROR; id: N` where dig's has a comma.
    match d.status.split(';').next().unwrap_or("").trim() {
        "SERVFAIL" => Outcome::ServFail,
        "NOERROR" => {
            let mut got = d.answers("A");
            got.sort();
            if got == probe.expected { Outcome::Right } else { Outcome::Wrong }
        }
        "" => Outcome::Timeout,
        _ => Outcome::Wrong,
    }
}

/// Whether `target` gives every probe its expected answer right now.
pub fn answers_right(target: SocketAddr, probes: &[Probe]) -> bool {
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    probes.iter().zip(1u16..).all(|(p, id)| matches!(ask_udp(&sock, target, p, id), Outcome::Right))
}

/// How a querier reaches its NS host.
#[derive(Debug, Clone, Copy)]
pub enum Transport {
    Udp,
    Tcp,
    Dot,
}

/// The threads of the load; stopped and joined on [`Traffic::stop`] or drop.
pub struct Traffic {
    pub counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// The last error the heartbeat agent saw, for the report.
    pub agent_errors: Arc<AtomicU64>,
}

impl Traffic {
    pub fn new() -> Traffic {
        Traffic {
            counts: Arc::new(Counts::default()),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            agent_errors: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A querier cycling through `probes` against `target`.
    pub fn querier(&mut self, target: SocketAddr, transport: Transport, probes: Vec<Probe>) {
        let (stop, counts) = (self.stop.clone(), self.counts.clone());
        self.threads.push(std::thread::spawn(move || {
            let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
            let (started, mut id) = (Instant::now(), 0u16);
            while !stop.load(Ordering::SeqCst) && started.elapsed() < LIMIT {
                id = id.wrapping_add(1);
                let probe = &probes[id as usize % probes.len()];
                let outcome = match transport {
                    Transport::Udp => ask_udp(&sock, target, probe, id),
                    Transport::Tcp => ask_tcp(target, probe, id),
                    Transport::Dot => ask_dot(target, probe),
                };
                counts.record(outcome);
                let pause = if matches!(transport, Transport::Dot) { 250 } else { 20 };
                std::thread::sleep(Duration::from_millis(pause));
            }
        }));
    }

    /// The agent: every node's heartbeat each second, to the first control
    /// process that takes it.
    pub fn heartbeats(&mut self, controls: Vec<SocketAddr>, nodes: Vec<String>) {
        let (stop, errors) = (self.stop.clone(), self.agent_errors.clone());
        self.threads.push(std::thread::spawn(move || {
            let started = Instant::now();
            let body = serde_json::json!({"cpu_usage": 20.0, "memory_usage": 30.0, "bandwidth_mbps": 5.0, "conns": 9});
            while !stop.load(Ordering::SeqCst) && started.elapsed() < LIMIT {
                for node in &nodes {
                    let path = format!("/api/v1/nodes/{node}/heartbeat");
                    let taken = controls.iter().any(|c| beat(*c, &path, &body));
                    if !taken {
                        errors.fetch_add(1, Ordering::SeqCst);
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }));
    }

    /// The monitor: twice a second, how many of `ips` the leader's table lacks.
    pub fn monitor(&mut self, controls: Vec<SocketAddr>, ips: Vec<String>) {
        let (stop, counts) = (self.stop.clone(), self.counts.clone());
        self.threads.push(std::thread::spawn(move || {
            let started = Instant::now();
            while !stop.load(Ordering::SeqCst) && started.elapsed() < LIMIT {
                if let Some(table) = leader_table(&controls) {
                    let missing = ips.iter().filter(|ip| !table.contains(&format!("\"{ip}\""))).count() as u64;
                    counts.withdrawn.fetch_max(missing, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }));
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop();
    }
}

fn beat(control: SocketAddr, path: &str, body: &Value) -> bool {
    let url = format!("http://127.0.0.1:{}{path}", control.port());
    ureq::post(&url).timeout(Duration::from_secs(2)).set("x-lagran-agent-token", AGENT).send_json(body.clone()).is_ok()
}

/// The leading control process's table as JSON text.
pub fn leader_table(controls: &[SocketAddr]) -> Option<String> {
    let leader = super::cluster::leader_of(controls)?;
    match api(controls[leader], "GET", "/api/v1/routes/table", None) {
        Ok((200, v)) => Some(v.to_string()),
        _ => None,
    }
}

/// The oracle: what each probe gets before any fault (a NOERROR answer with
/// addresses, the same over UDP from both NS hosts).
pub fn oracle(targets: &[SocketAddr]) -> Vec<Probe> {
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    PROBES
        .iter()
        .map(|subnet| {
            let answers: Vec<Vec<String>> = targets.iter().map(|t| first_answer(&sock, *t, subnet)).collect();
            assert!(answers.windows(2).all(|w| w[0] == w[1]), "the NS hosts disagree on {subnet}: {answers:?}");
            assert!(!answers[0].is_empty(), "no answer for {subnet}");
            Probe { subnet, expected: answers[0].clone() }
        })
        .collect()
}

fn first_answer(sock: &UdpSocket, target: SocketAddr, subnet: &'static str) -> Vec<String> {
    let probe = Probe { subnet, expected: Vec::new() };
    let q = query(&probe, 4242);
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let _ = sock.send_to(&q, target);
        if let Ok((n, _)) = sock.recv_from(&mut buf)
            && let Ok(m) = Message::from_vec(&buf[..n])
        {
            let mut got: Vec<String> = m
                .answers()
                .iter()
                .filter_map(|r| match r.data() {
                    RData::A(a) => Some(a.0.to_string()),
                    _ => None,
                })
                .collect();
            got.sort();
            if !got.is_empty() {
                return got;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Vec::new()
}
