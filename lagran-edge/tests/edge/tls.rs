//! TLS: the certificate follows the SNI (exact, then wildcard), over a real handshake.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use lagran_edge::Edge;
use lagran_edge::config::Config;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::support::{STATIC_BODY, TIMEOUT, start_origin};

/// Writes a self-signed certificate for `names` and returns (cert path, key path, DER).
fn make_cert(dir: &Path, file: &str, names: &[&str]) -> (String, String, CertificateDer<'static>) {
    let ck = rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = dir.join(format!("{file}.pem"));
    let key = dir.join(format!("{file}.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    (cert.display().to_string(), key.display().to_string(), ck.cert.der().clone())
}

async fn connect(addr: SocketAddr, roots: &RootCertStore, sni: &str) -> std::io::Result<TlsStream<TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    tokio::time::timeout(TIMEOUT, TlsConnector::from(Arc::new(config)).connect(name, tcp))
        .await
        .expect("handshake finishes")
}

async fn get_over(tls: TlsStream<TcpStream>, host: &str, path: &str) -> (StatusCode, Bytes) {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::get(path).header("host", host).body(Empty::<Bytes>::new()).unwrap();
    let resp = tokio::time::timeout(TIMEOUT, sender.send_request(req)).await.unwrap().unwrap();
    let status = resp.status();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

#[tokio::test]
async fn certificate_follows_sni() {
    let dir = tempfile::tempdir().unwrap();
    let origin = start_origin().await;
    let (a_cert, a_key, a_der) = make_cert(dir.path(), "a", &["a.tls.test"]);
    let (w_cert, w_key, w_der) = make_cert(dir.path(), "wild", &["*.wild.test"]);
    let config = Config::parse(
        &format!(
            r#"
            listen_https = "127.0.0.1:0"
            [[site]]
            host = "a.tls.test"
            origin = "http://{o}"
            cert_pem = "{a_cert}"
            key_pem = "{a_key}"
            [[site]]
            host = "*.wild.test"
            origin = "http://{o}"
            cert_pem = "{w_cert}"
            key_pem = "{w_key}"
            [[site]]
            host = "plain.test"
            origin = "http://{o}"
            "#,
            o = origin.addr
        ),
        "tls test",
    )
    .unwrap();
    let acceptor = lagran_edge::tls::acceptor(&config.sites).expect("certificates load");
    let edge = Arc::new(Edge::new(&config).expect("the test edge starts"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(lagran_edge::server::run_tls(listener, acceptor, edge.clone(), shutdown.clone()));

    let mut roots = RootCertStore::empty();
    roots.add(a_der.clone()).unwrap();
    roots.add(w_der.clone()).unwrap();

    let tls = connect(addr, &roots, "a.tls.test").await.expect("the exact-name certificate verifies");
    assert_eq!(tls.get_ref().1.peer_certificates().unwrap()[0], a_der, "SNI a.tls.test gets its own certificate");
    let (status, body) = get_over(tls, "a.tls.test", "/static.txt").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, STATIC_BODY.as_bytes()));
    // HTTP/1.1 by ALPN: the hit is answered on the hit path.
    let tls = connect(addr, &roots, "a.tls.test").await.unwrap();
    let (status, body) = get_over(tls, "a.tls.test", "/static.txt").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, STATIC_BODY.as_bytes()));
    assert_eq!(edge.stats.hit_path_requests.load(std::sync::atomic::Ordering::Relaxed), 1);

    let tls = connect(addr, &roots, "img.wild.test").await.expect("the wildcard certificate verifies");
    assert_eq!(tls.get_ref().1.peer_certificates().unwrap()[0], w_der, "SNI img.wild.test gets *.wild.test");

    let fronted = connect(addr, &roots, "img.wild.test").await.unwrap();
    let (status, _) = get_over(fronted, "a.tls.test", "/static.txt").await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "Host must belong to the SNI's site, also for a cached hit");

    assert!(connect(addr, &roots, "plain.test").await.is_err(), "a site without a certificate gets no handshake");
    assert!(connect(addr, &roots, "unknown.test").await.is_err(), "an unknown SNI gets no handshake");

    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, task).await.unwrap().unwrap().unwrap();
}

#[test]
fn mismatched_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, _, _) = make_cert(dir.path(), "one", &["one.test"]);
    let (_, other_key, _) = make_cert(dir.path(), "two", &["two.test"]);
    let config = Config::parse(
        &format!(
            "[[site]]\nhost = \"one.test\"\norigin = \"http://o\"\ncert_pem = \"{cert}\"\nkey_pem = \"{other_key}\"\n"
        ),
        "t",
    )
    .unwrap();
    let err = lagran_edge::tls::server_config(&config.sites)
        .expect_err("a key of another certificate is refused")
        .to_string();
    assert!(err.contains("one.test") && err.contains("two.key"), "{err}");
}
