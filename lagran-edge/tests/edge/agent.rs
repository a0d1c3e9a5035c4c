//! The heartbeat loop against a fake control plane.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lagran_edge::Stats;
use lagran_edge::agent::{self, AgentConfig};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::TIMEOUT;

struct Received {
    path: String,
    token: Option<String>,
    json: Value,
}

/// A control plane that fails its first heartbeat with 503, then accepts.
async fn fake_control() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let seen = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (tx, seen) = (tx.clone(), seen.clone());
            let svc = service_fn(move |req: Request<Incoming>| {
                let (tx, seen) = (tx.clone(), seen.clone());
                async move {
                    let path = req.uri().path().to_owned();
                    let token = req.headers().get("x-lagran-agent-token").map(|v| v.to_str().unwrap().to_owned());
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let first = seen.fetch_add(1, Ordering::SeqCst) == 0;
                    let _ = tx.send(Received { path, token, json });
                    let status = if first { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
                    let mut resp = Response::new(Full::new(Bytes::from_static(b"{}")));
                    *resp.status_mut() = status;
                    Ok::<_, Infallible>(resp)
                }
            });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc));
        }
    });
    (addr, rx)
}

#[tokio::test]
async fn heartbeats_carry_token_and_load_and_survive_failures() {
    let (addr, mut rx) = fake_control().await;
    let stats = Arc::new(Stats::default());
    stats.open_conns.store(7, Ordering::Relaxed);
    let cfg = AgentConfig {
        url: format!("http://{addr}/api/v1/nodes/gz-01/heartbeat"),
        token: "node-secret".into(),
        interval: Duration::from_millis(50),
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(agent::run(cfg, stats.clone(), shutdown.clone()));

    for n in 0..3 {
        if n == 2 {
            stats.bytes_served.fetch_add(10_000_000, Ordering::Relaxed);
        }
        let got = tokio::time::timeout(TIMEOUT, rx.recv()).await.expect("a heartbeat arrives in time").unwrap();
        assert_eq!(got.path, "/api/v1/nodes/gz-01/heartbeat");
        assert_eq!(got.token.as_deref(), Some("node-secret"), "the node's token is sent");
        let f = |k: &str| got.json.get(k).unwrap_or_else(|| panic!("heartbeat {n} lacks {k}: {}", got.json)).clone();
        for k in ["cpu_usage", "memory_usage"] {
            let v = f(k).as_f64().unwrap();
            assert!((0.0..=100.0).contains(&v), "{k} = {v} is a percentage");
        }
        assert!(f("bandwidth_mbps").as_f64().unwrap() >= 0.0);
        assert_eq!(f("conns").as_i64(), Some(7), "conns is the open-connection counter, an integer");
        if n == 2 {
            assert!(f("bandwidth_mbps").as_f64().unwrap() > 0.0, "bytes served show as bandwidth");
        }
    }
    // The first heartbeat was refused with 503; the loop kept going.
    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, task).await.expect("the agent stops on shutdown").unwrap();
}
