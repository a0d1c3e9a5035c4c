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
    fake_control_with(None).await
}

/// [`fake_control`], over TLS when `tls` is given.
async fn fake_control_with(
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Received>) {
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
            match tls.clone() {
                None => {
                    tokio::spawn(
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc),
                    );
                }
                Some(acceptor) => {
                    tokio::spawn(async move {
                        if let Ok(s) = acceptor.accept(stream).await {
                            let _ =
                                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
                        }
                    });
                }
            }
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
        ca: None,
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

/// A CA (PEM file) and a TLS acceptor for 127.0.0.1 with a certificate it signed.
fn tls_control(dir: &std::path::Path) -> (std::path::PathBuf, tokio_rustls::TlsAcceptor) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    (ca_path, tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[tokio::test]
async fn heartbeats_go_over_https_trusting_only_the_given_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, acceptor) = tls_control(dir.path());
    let (addr, mut rx) = fake_control_with(Some(acceptor.clone())).await;
    let cfg = |ca: Option<std::path::PathBuf>| AgentConfig {
        url: format!("https://{addr}/api/v1/nodes/gz-01/heartbeat"),
        token: "node-secret".into(),
        interval: Duration::from_millis(50),
        ca,
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(agent::run(cfg(Some(ca)), Arc::new(Stats::default()), shutdown.clone()));
    let got = tokio::time::timeout(TIMEOUT, rx.recv()).await.expect("a heartbeat over https").unwrap();
    assert_eq!(got.token.as_deref(), Some("node-secret"), "the token arrives, inside TLS");
    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, task).await.unwrap().unwrap();

    // Another CA: the handshake fails and nothing reaches the control plane.
    let other = tempfile::tempdir().unwrap();
    let (other_ca, _) = tls_control(other.path());
    let (addr2, mut rx2) = fake_control_with(Some(acceptor)).await;
    let mut wrong = cfg(Some(other_ca));
    wrong.url = format!("https://{addr2}/api/v1/nodes/gz-01/heartbeat");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(agent::run(wrong, Arc::new(Stats::default()), shutdown.clone()));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), rx2.recv()).await.is_err(),
        "no heartbeat to a control plane whose certificate the CA did not sign"
    );
    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, task).await.unwrap().unwrap();
}
