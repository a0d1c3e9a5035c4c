//! The two resource faults: idle HTTP/2 connections held on the edge while a
//! client from another address keeps fetching, and spoofed QUIC Initials
//! sent to a DoQ listener while a real DoQ client keeps asking.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The HTTP/2 client preface and an empty SETTINGS frame: a connection that
/// has said hello and then says nothing.
const H2_HELLO: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Idle connections held open.
pub struct IdleConns {
    conns: Vec<TcpStream>,
    /// Connections that could not be opened (refused, or not accepted in time).
    pub not_opened: usize,
}

impl IdleConns {
    pub fn held(&self) -> usize {
        self.conns.len()
    }

    /// How many of the held connections the server has closed.
    pub fn closed_by_server(&self) -> usize {
        let mut buf = [0u8; 1];
        self.conns
            .iter()
            .filter(|c| {
                let _ = c.set_nonblocking(true);
                matches!(c.peek(&mut buf), Ok(0))
                    || c.peek(&mut buf).is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock)
            })
            .count()
    }
}

/// Opens up to `n` connections to `target` from 8 threads, each giving up
/// after 20 failures in a row or at `within`.
pub fn open_idle_h2(target: SocketAddr, n: usize, within: Duration) -> IdleConns {
    let deadline = Instant::now() + within;
    let per_thread = n.div_ceil(8);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let (mut conns, mut failed, mut in_a_row) = (Vec::new(), 0, 0);
                while conns.len() + failed < per_thread && in_a_row < 20 && Instant::now() < deadline {
                    match TcpStream::connect_timeout(&target, Duration::from_millis(200)) {
                        Ok(mut c) => {
                            let _ = c.write_all(H2_HELLO);
                            conns.push(c);
                            in_a_row = 0;
                        }
                        Err(_) => {
                            failed += 1;
                            in_a_row += 1;
                        }
                    }
                }
                let untried = per_thread.saturating_sub(conns.len() + failed);
                (conns, failed + untried)
            })
        })
        .collect();
    let mut idle = IdleConns { conns: Vec::new(), not_opened: 0 };
    for t in threads {
        let (conns, failed) = t.join().expect("an idle-connection thread panicked");
        idle.conns.extend(conns);
        idle.not_opened += failed;
    }
    idle.conns.truncate(n);
    idle
}

/// One fetch of the chaos site through the edge from 127.0.0.2 (another
/// client than the idle connections'): whether it got a 200.
pub fn fetch_from_another_client(edge: SocketAddr) -> bool {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "3", "--interface", "127.0.0.2"])
        .args(["-H", "Host: chaos.test"])
        .arg(format!("http://{edge}/object"))
        .output();
    out.is_ok_and(|o| o.stdout == b"200")
}

/// What the DoQ flood script reports.
#[derive(Debug, Default, Clone, Copy)]
pub struct DoqFlood {
    pub initials: u64,
    pub ok: u64,
    pub failed: u64,
}

/// Spoofed Initials and real queries, run by dnspython and aioquic: each
/// Initial is a real client hello (a fresh connection ID) sent from its own
/// address in 127.0.0.0/8 by a socket closed at once, so nothing answers the
/// server's Retry or handshake — what a spoofed source looks like.
const DOQ_FLOOD: &str = r#"
import json, socket, ssl, sys, threading, time
import dns.message, dns.query
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

host, port, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
target = (host, port)
stop = time.time() + seconds
sent = 0

def flood():
    global sent
    i = 0
    while sent < count and time.time() < stop:
        src = "127.%d.%d.%d" % (1 + (i // 60000) % 200, (i // 240) % 250, 10 + i % 240)
        i += 1
        cfg = QuicConfiguration(is_client=True, alpn_protocols=["doq"])
        cfg.verify_mode = ssl.CERT_NONE
        conn = QuicConnection(configuration=cfg)
        now = time.time()
        conn.connect(target, now=now)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((src, 0))
            for data, _ in conn.datagrams_to_send(now=now):
                s.sendto(data, target)
            sent += 1
        except OSError:
            pass
        finally:
            s.close()

t = threading.Thread(target=flood)
t.start()
ok = failed = 0
while time.time() < stop:
    q = dns.message.make_query("edge.lagran.net", "A")
    try:
        r = dns.query.quic(q, host, port=port, timeout=3, verify=False)
        if r.answer:
            ok += 1
        else:
            failed += 1
    except Exception:
        failed += 1
    time.sleep(0.5)
t.join()
print(json.dumps({"initials": sent, "ok": ok, "failed": failed}))
"#;

/// Runs the flood against `doq` for `seconds`.
pub fn doq_flood(python: &Path, dir: &Path, doq: SocketAddr, initials: usize, seconds: u64) -> DoqFlood {
    let script = dir.join("doq_flood.py");
    std::fs::write(&script, DOQ_FLOOD).unwrap();
    let out = Command::new(python)
        .arg(&script)
        .args([doq.ip().to_string(), doq.port().to_string(), initials.to_string(), seconds.to_string()])
        .output()
        .expect("running the DoQ flood");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|_| panic!("the DoQ flood's report: {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    DoqFlood {
        initials: v["initials"].as_u64().unwrap_or(0),
        ok: v["ok"].as_u64().unwrap_or(0),
        failed: v["failed"].as_u64().unwrap_or(0),
    }
}
