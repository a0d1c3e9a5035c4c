//! A whole edge (as the `lagran-edge` binary runs it) reporting measurements to a stand-in for the
//! control plane's measurement API: its own connections' RTTs (source `edge`) and
//! the beacons browsers post (source `rum`), with the beacon rules enforced.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lagran_edge::config::Config;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::{self, TIMEOUT};

const TOKEN: &str = "gz-01-node-token";

/// What the stand-in control plane received.
#[derive(Debug)]
enum Seen {
    Report { token: Option<String>, body: Value },
    Candidates { client: String },
}

/// Answers heartbeats, measurement reports and candidate lists (naming `gz-01`
/// and `sh-01`, both at `ping_host`).
async fn control_plane(ping_host: String) -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (tx, ping_host) = (tx.clone(), ping_host.clone());
            let svc = service_fn(move |req: Request<Incoming>| {
                let (tx, ping_host) = (tx.clone(), ping_host.clone());
                async move {
                    let path = req.uri().path().to_owned();
                    let query = req.uri().query().unwrap_or("").to_owned();
                    let token = req.headers().get("x-lagran-agent-token").map(|v| v.to_str().unwrap().to_owned());
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let answer = match path.as_str() {
                        "/api/v1/measurements" => {
                            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let _ = tx.send(Seen::Report { token, body });
                            json!({"accepted": 1})
                        }
                        "/api/v1/measurements/candidates" => {
                            let client = query.strip_prefix("client=").unwrap_or("").to_owned();
                            let _ = tx.send(Seen::Candidates { client });
                            json!({"partition": "p-test", "candidates": [
                                {"node": "gz-01", "hostname": ping_host},
                                {"node": "sh-01", "hostname": ping_host},
                            ]})
                        }
                        _ => json!({}),
                    };
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(answer.to_string()))))
                }
            });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc));
        }
    });
    (addr, rx)
}

/// A whole edge — listener, heartbeat agent, measurement reporter — as the
/// `lagran-edge` binary runs it (`lagran_edge::serve`), stopped on drop. In-process,
/// because the binary in a shared target directory may be another build's.
struct EdgeProcess {
    addr: SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start_edge(control: SocketAddr, origin: SocketAddr, port: u16, extra: &str) -> EdgeProcess {
    let text = format!(
        "listen_http = \"127.0.0.1:{port}\"\nnode_name = \"gz-01\"\ncontrol_url = \"http://{control}\"\n\
         agent_token = \"{TOKEN}\"\nheartbeat_secs = 1\nconfig_poll_secs = 3600\n{extra}\n\
         [[site]]\nhost = \"cdn.test\"\norigin = \"http://{origin}\"\n"
    );
    let config = Config::parse(&text, "test config").expect("the test config is valid");
    let shutdown = CancellationToken::new();
    tokio::spawn(lagran_edge::serve(config, shutdown.clone()));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + TIMEOUT;
    while TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "the edge did not listen on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    EdgeProcess { addr, shutdown }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One HTTP/1.1 request on its own connection, which the edge then closes.
async fn once(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nhost: cdn.test\r\nconnection: close\r\ncontent-type: text/plain\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, out)
    };
    tokio::time::timeout(TIMEOUT, exchange).await.expect("the edge answers in time")
}

/// Every measurement reported until `quiet` passes without a report (within `TIMEOUT`).
async fn reports_until_quiet(rx: &mut mpsc::UnboundedReceiver<Seen>, quiet: Duration) -> Vec<Value> {
    let mut all = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while let Ok(Some(seen)) = tokio::time::timeout(quiet, rx.recv()).await {
        if let Seen::Report { token, body } = seen {
            assert_eq!(token.as_deref(), Some(TOKEN), "reports carry the node's token");
            all.extend(body["measurements"].as_array().unwrap().iter().cloned());
        }
        assert!(Instant::now() < deadline, "reports never stopped");
    }
    all
}

#[tokio::test]
async fn the_edge_reports_its_connections_rtt_for_the_clients_24() {
    let origin = support::start_origin().await;
    let (control, mut rx) = control_plane("unused".into()).await;
    let edge = start_edge(control, origin.addr, free_port(), "").await;
    for _ in 0..5 {
        let (status, body) = once(edge.addr, "GET", "/static.txt", "").await;
        assert_eq!(status, 200, "{body}");
    }
    let deadline = Instant::now() + TIMEOUT;
    let entry = loop {
        assert!(Instant::now() < deadline, "no edge measurement for 127.0.0.0/24 arrived");
        let Some(Seen::Report { token, body }) = tokio::time::timeout(TIMEOUT, rx.recv()).await.unwrap() else {
            continue;
        };
        assert_eq!(token.as_deref(), Some(TOKEN));
        let found = body["measurements"].as_array().unwrap().iter().find(|m| m["source"] == "edge").cloned();
        if let Some(m) = found {
            break m;
        }
    };
    assert_eq!(entry["client_subnet"], "127.0.0.0/24");
    assert_eq!(entry["node"], "gz-01", "the node reports under its own name");
    let samples = entry["samples"].as_u64().unwrap();
    // The five requests, and the probe that waited for the edge to listen.
    assert!((1..=6).contains(&samples), "one sample per finished connection: {entry}");
    let rtt = entry["rtt_ms"].as_f64().unwrap();
    assert!(rtt > 0.0 && rtt < 100.0, "a loopback RTT: {entry}");
}

#[tokio::test]
async fn report_rtt_off_reports_no_connections() {
    let origin = support::start_origin().await;
    let (control, mut rx) = control_plane("unused".into()).await;
    let edge = start_edge(control, origin.addr, free_port(), "[agent]\nreport_rtt = false\n").await;
    for _ in 0..3 {
        assert_eq!(once(edge.addr, "GET", "/static.txt", "").await.0, 200);
    }
    let got = reports_until_quiet(&mut rx, Duration::from_millis(2500)).await;
    assert!(got.is_empty(), "nothing is reported with report_rtt = false: {got:?}");
}

fn beacon(node: &str, ms: &str) -> String {
    format!(r#"{{"timings":[{{"node":"{node}","samples_ms":[{ms}]}}]}}"#)
}

#[tokio::test]
async fn beacons_are_checked_rate_limited_and_forwarded_as_rum() {
    let origin = support::start_origin().await;
    let port = free_port();
    let (control, mut rx) = control_plane(format!("127.0.0.1:{port}")).await;
    let edge = start_edge(control, origin.addr, port, "[agent]\nreport_rtt = false\n").await;
    let started = Instant::now();

    let (status, script) = once(edge.addr, "GET", "/.well-known/lagran/rum.js", "").await;
    assert!(status == 200 && script.contains("text/javascript") && script.contains("samples_ms"), "{script}");
    let (status, ping) = once(edge.addr, "GET", "/.well-known/lagran/ping", "").await;
    assert_eq!(status, 204);
    let ping = ping.to_ascii_lowercase();
    assert!(ping.contains("access-control-allow-origin: *") && ping.contains("cache-control: no-store"), "{ping}");
    let (status, cands) = once(edge.addr, "GET", "/.well-known/lagran/candidates", "").await;
    assert!(status == 200 && cands.contains("\"gz-01\"") && cands.contains("\"sh-01\""), "{cands}");
    match rx.recv().await.unwrap() {
        Seen::Candidates { client } => assert_eq!(client, "127.0.0.1", "asked for the connection's own address"),
        other => panic!("expected a candidates request, got {other:?}"),
    }

    // Refused: a subnet named in the body, times out of range, a node not offered.
    let forged = r#"{"client_subnet":"58.60.0.0/24","timings":[{"node":"gz-01","samples_ms":[5]}]}"#;
    let refused = [forged.to_owned(), beacon("gz-01", "0"), beacon("gz-01", "10001"), beacon("bj-09", "5")];
    for body in &refused {
        let (status, text) = once(edge.addr, "POST", "/.well-known/lagran/beacon", body).await;
        assert_eq!(status, 422, "{body} → {text}");
    }
    // A flood of good beacons: the four refused ones already took four tokens.
    let mut accepted = 0u64;
    for i in 0..30 {
        let (status, text) =
            once(edge.addr, "POST", "/.well-known/lagran/beacon", &beacon("gz-01", &format!("{}", 20 + i))).await;
        match status {
            202 => accepted += 1,
            429 => {}
            _ => panic!("beacon {i}: {text}"),
        }
    }
    let refill = started.elapsed().as_secs() / 6;
    assert!((1..=6 + refill).contains(&accepted), "{accepted} of 30 accepted; the rate allows 6 (+{refill} refilled)");

    let got = reports_until_quiet(&mut rx, Duration::from_millis(2500)).await;
    assert!(got.iter().all(|m| m["source"] == "rum" && m["client_subnet"] == "127.0.0.0/24"), "{got:?}");
    assert!(got.iter().all(|m| m["node"] == "gz-01"), "only the node the accepted beacons timed: {got:?}");
    let samples: u64 = got.iter().map(|m| m["samples"].as_u64().unwrap()).sum();
    assert_eq!(samples, accepted, "every accepted beacon is forwarded, nothing else: {got:?}");
    let rtt = got[0]["rtt_ms"].as_f64().unwrap();
    assert!((20.0..50.0).contains(&rtt), "the median of the flood's times: {rtt}");
    assert_eq!(once(edge.addr, "PUT", "/.well-known/lagran/beacon", "").await.0, 405);
    assert_eq!(once(edge.addr, "GET", "/.well-known/lagran/nothing", "").await.0, 404);
}
