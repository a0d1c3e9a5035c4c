//! A man in the middle on one of `ns2`'s control URLs: a TCP relay to its
//! control process while honest; while forging, it cuts every relayed connection
//! and answers each table request itself with a forged table — a copy of the
//! real one with every answer moved to 192.0.2.0/24 under an epoch a million
//! above the real one (what an attacker on a cleartext path would send to
//! lock the NS host onto its table).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The address every forged answer points to (TEST-NET-1: never a real node).
pub const FORGED_PREFIX: &str = "192.0.2.";

pub struct Mitm {
    addr: SocketAddr,
    upstream: SocketAddr,
    token: String,
    state: Arc<State>,
}

struct State {
    /// Bumped to cut every relayed connection.
    generation: AtomicU64,
    /// The forged answer's body while forging.
    forged: Mutex<Option<Vec<u8>>>,
    stop: AtomicBool,
    /// Forged tables sent.
    pub sent: AtomicU64,
}

impl Mitm {
    pub fn start(upstream: SocketAddr, token: &str) -> Mitm {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(State {
            generation: AtomicU64::new(0),
            forged: Mutex::new(None),
            stop: AtomicBool::new(false),
            sent: AtomicU64::new(0),
        });
        let s = state.clone();
        std::thread::spawn(move || accept_loop(listener, upstream, s));
        Mitm { addr, upstream, token: token.to_string(), state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts forging: reads the real table, forges it, cuts the relay. The
    /// table is edited as text: it holds 128-bit numbers a JSON value
    /// round trip would turn into floats.
    pub fn forge(&self) {
        let url = format!("http://{}/api/v1/routes/table", self.upstream);
        let real = ureq::get(&url)
            .set("x-lagran-agent-token", &self.token)
            .timeout(Duration::from_secs(5))
            .call()
            .expect("the man in the middle reads the real table")
            .into_string()
            .expect("the real table is text");
        let head: Value = serde_json::from_str(&real).expect("the table is JSON");
        let (version, epoch) = (head["version"].as_u64().unwrap(), head["epoch"].as_u64().unwrap());
        let was = format!("{{\"version\":{version},\"epoch\":{epoch},");
        let forged_head = format!("{{\"version\":{},\"epoch\":{},", version + 1, epoch + 1_000_000);
        assert!(real.starts_with(&was), "the table starts with its version and epoch: {}", &real[..80.min(real.len())]);
        let forged = real.replacen(&was, &forged_head, 1).replace("\"203.0.113.", &format!("\"{FORGED_PREFIX}"));
        *self.state.forged.lock().unwrap() = Some(format!("{{\"full\":{forged}}}").into_bytes());
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Back to relaying honestly.
    pub fn stop_forging(&self) {
        *self.state.forged.lock().unwrap() = None;
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }

    pub fn forged_sent(&self) -> u64 {
        self.state.sent.load(Ordering::SeqCst)
    }
}

impl Drop for Mitm {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }
}

fn accept_loop(listener: TcpListener, upstream: SocketAddr, state: Arc<State>) {
    let started = Instant::now();
    while !state.stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(3600) {
        let Ok((client, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let _ = client.set_nonblocking(false);
        let forged = state.forged.lock().unwrap().clone();
        let s = state.clone();
        match forged {
            Some(body) => {
                std::thread::spawn(move || answer_forged(client, &body, &s));
            }
            None => {
                std::thread::spawn(move || relay(client, upstream, &s));
            }
        }
    }
}

/// Reads one request head and answers it with the forged table.
fn answer_forged(mut client: TcpStream, body: &[u8], state: &State) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
        match client.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    if client.write_all(reply.as_bytes()).and_then(|()| client.write_all(body)).is_ok() {
        state.sent.fetch_add(1, Ordering::SeqCst);
    }
}

/// Copies both ways until either side closes or the generation changes.
fn relay(client: TcpStream, upstream: SocketAddr, state: &Arc<State>) {
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) else { return };
    let generation = state.generation.load(Ordering::SeqCst);
    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let st = state.clone();
    let up = std::thread::spawn(move || pump(client, server, &st, generation));
    pump(s2, c2, state, generation);
    let _ = up.join();
}

fn pump(mut from: TcpStream, mut to: TcpStream, state: &State, generation: u64) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 16_384];
    while state.generation.load(Ordering::SeqCst) == generation {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
