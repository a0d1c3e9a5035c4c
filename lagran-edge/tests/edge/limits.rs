//! The edge's listener bounds: per-client connection caps, idle connections
//! (HTTP/1 and HTTP/2) closed, `/healthz` rate-limited.

use std::time::{Duration, Instant};

use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{TIMEOUT, get, sites, start_edge, start_origin};

/// Reads until the edge closes the connection; how long that took.
async fn until_closed(s: &mut TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let read = tokio::time::timeout_at((started + within).into(), s.read(&mut buf)).await;
        match read.expect("the edge closed the connection in time") {
            Ok(0) | Err(_) => return started.elapsed(),
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn one_client_gets_max_connections_per_client_and_no_more() {
    let origin = start_origin().await;
    let edge = start_edge(&format!("max_connections_per_client = 2\n{}", sites(origin.addr))).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(b"GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
        held.push(s);
    }
    let mut third = TcpStream::connect(edge.addr).await.unwrap();
    let _ = third.write_all(b"GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\n\r\n").await;
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(TIMEOUT, third.read(&mut buf)).await.expect("closed, not left hanging").unwrap_or(0);
    assert_eq!(n, 0, "the client's third connection is closed unanswered");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(edge.addr, "cdn.test", "/static.txt", &[]).await.status, StatusCode::OK, "slots come back");
}

#[tokio::test]
async fn idle_http1_and_http2_connections_are_closed() {
    let origin = start_origin().await;
    let edge = start_edge(&format!("idle_timeout_secs = 1\n{}", sites(origin.addr))).await;

    // HTTP/1.1 keep-alive: one request answered, then nothing; in hyper (a
    // miss), then on the hit path (a hit).
    for (path, hit_path) in [("/static.txt", 0), ("/static.txt", 1)] {
        let mut h1 = TcpStream::connect(edge.addr).await.unwrap();
        h1.write_all(format!("GET {path} HTTP/1.1\r\nhost: cdn.test\r\n\r\n").as_bytes()).await.unwrap();
        let mut buf = [0u8; 512];
        assert!(h1.read(&mut buf).await.unwrap() > 0, "answered");
        let took = until_closed(&mut h1, Duration::from_secs(5)).await;
        assert!(took >= Duration::from_millis(700), "closed for idleness, not at once: {took:?}");
        assert_eq!(edge.edge.stats.hit_path_requests.load(std::sync::atomic::Ordering::Relaxed), hit_path);
    }

    // HTTP/2 (prior knowledge): the preface and SETTINGS, then nothing.
    let mut h2 = TcpStream::connect(edge.addr).await.unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await.unwrap();
    let took = until_closed(&mut h2, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(700), "closed for idleness, not at once: {took:?}");
    assert_eq!(edge.edge.conn_slots.open(), 0, "their slots are back");
}

#[tokio::test]
async fn healthz_is_rate_limited_per_client() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    let mut statuses = Vec::new();
    for _ in 0..(lagran_edge::HEALTHZ_BURST + 3) {
        statuses.push(get(edge.addr, "nobody.test", "/healthz", &[]).await.status);
    }
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert!(ok >= lagran_edge::HEALTHZ_BURST as usize, "{statuses:?}");
    assert_eq!(statuses.last(), Some(&StatusCode::TOO_MANY_REQUESTS), "past the burst: {statuses:?}");
    // A site's own limiter applies too: limited.test allows a burst of 3.
    let limited = get(edge.addr, "limited.test", "/healthz", &[]).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS, "the edge's limiter is spent for this client");
}
