//! The edge as a CDN edge: TLS origins, failover, freshness, stale serving,
//! collapsing, revalidation, Vary, and what operators watch.

use std::time::Duration;

use hyper::Request;
use hyper::StatusCode;
use hyper::body::Incoming;

use crate::origins::{Scripted, handler, private_ca, reply, scripted};
use crate::support::{get, start_edge};

fn header<'a>(req: &'a Request<Incoming>, name: &str) -> &'a str {
    req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

async fn plain(body: &'static str, cache_control: &'static str) -> Scripted {
    scripted("127.0.0.1:0", None, Duration::ZERO, handler(move |_| reply(body, &[("cache-control", cache_control)])))
        .await
}

#[tokio::test]
async fn https_origin_verified_by_a_private_ca_over_http2() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, tls) = private_ca(dir.path(), "localhost");
    let ok = handler(|_| reply("over tls", &[("cache-control", "no-store")]));
    let origin = scripted("127.0.0.1:0", Some(tls), Duration::ZERO, ok).await;
    let port = origin.addr.port();
    let edge = start_edge(&format!(
        r#"
        [[site]]
        host = "private.test"
        origins = ["https://localhost:{port}"]
        origin_ca = "{ca}"
        [[site]]
        host = "public.test"
        origin = "https://localhost:{port}"
        "#
    ))
    .await;
    let r = get(edge.addr, "private.test", "/x", &[]).await;
    assert_eq!((r.status, r.text()), (StatusCode::OK, "over tls"));
    assert_eq!(origin.seen.sni.lock().unwrap().first().map(String::as_str), Some("localhost"), "SNI names the origin");
    assert_eq!(origin.seen.versions.lock().unwrap().first(), Some(&hyper::Version::HTTP_2), "h2 by ALPN");

    let hits = origin.hits();
    let r = get(edge.addr, "public.test", "/x", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "the system roots do not trust the private CA");
    assert_eq!(origin.hits(), hits, "no request went to an unverified origin");
}

#[tokio::test]
async fn a_killed_primary_fails_over_to_the_second_and_comes_back() {
    let primary = plain("primary", "no-store").await;
    let secondary = plain("secondary", "no-store").await;
    let (p, s) = (primary.addr, secondary.addr);
    let edge = start_edge(&format!(
        "origin_health_secs = 1\n[[site]]\nhost = \"ha.test\"\norigins = [\"http://{p}\", \"http://{s}\"]\norigin_host = \"www.ha.test\"\n"
    ))
    .await;
    tokio::spawn(lagran_edge::origin::run_health_checks(
        edge.edge.clone(),
        Duration::from_secs(1),
        edge.shutdown.clone(),
    ));
    for _ in 0..5 {
        assert_eq!(get(edge.addr, "ha.test", "/", &[]).await.text(), "primary");
    }
    primary.kill();
    let mut bodies = Vec::new();
    for _ in 0..30 {
        let r = get(edge.addr, "ha.test", "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK, "no error while the second origin answers");
        bodies.push(r.text().to_owned());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(bodies.iter().all(|b| b == "secondary"), "{bodies:?}");

    // The primary returns on its address; a health check brings it back.
    let back =
        scripted(&p.to_string(), None, Duration::ZERO, handler(|req| reply(header(req, "host").to_owned(), &[]))).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(edge.addr, "ha.test", "/", &[]).await;
        if r.text() == "www.ha.test" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the primary was not taken back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back.hits() >= 2, "health checks and requests reach the revived primary");
}

#[tokio::test]
async fn weights_share_requests_among_origins() {
    let (a, b) = (plain("a", "no-store").await, plain("b", "no-store").await);
    let edge = start_edge(&format!(
        "[[site]]\nhost = \"w.test\"\norigins = [\"http://{}\", \"http://{}\"]\norigin_weights = [3, 1]\n",
        a.addr, b.addr
    ))
    .await;
    let mut bodies = String::new();
    for _ in 0..8 {
        bodies += get(edge.addr, "w.test", "/", &[]).await.text();
    }
    assert_eq!(bodies, "aabaaaba", "smooth weighted round-robin, 3:1");
    b.kill();
    for _ in 0..4 {
        assert_eq!(get(edge.addr, "w.test", "/", &[]).await.text(), "a", "a dead origin's turns go to the others");
    }
}

#[tokio::test]
async fn stale_if_error_serves_the_stored_object_when_the_origin_is_down() {
    let origin = scripted(
        "127.0.0.1:0",
        None,
        Duration::ZERO,
        handler(|req| match req.uri().path() {
            "/sie" => reply("kept", &[("cache-control", "max-age=1, stale-if-error=60")]),
            _ => reply("strict", &[("cache-control", "max-age=1")]),
        }),
    )
    .await;
    let edge = start_edge(&format!("[[site]]\nhost = \"s.test\"\norigin = \"http://{}\"\n", origin.addr)).await;
    assert_eq!(get(edge.addr, "s.test", "/sie", &[]).await.header("x-cache"), "MISS");
    assert_eq!(get(edge.addr, "s.test", "/strict", &[]).await.header("x-cache"), "MISS");
    origin.kill();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = get(edge.addr, "s.test", "/sie", &[]).await;
    assert_eq!((r.status, r.header("x-cache"), r.text()), (StatusCode::OK, "STALE", "kept"));
    let r = get(edge.addr, "s.test", "/strict", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "without stale-if-error the failure shows");
}

#[tokio::test]
async fn stale_while_revalidate_answers_at_once_and_refreshes_behind() {
    // The first copy goes stale after a second; the refreshed one stays fresh
    // for the rest of the test, however slowly the machine polls it.
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    let versions = handler(move |_| {
        let first = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        let cc = if first { "max-age=1, stale-while-revalidate=30" } else { "max-age=60" };
        reply("v", &[("cache-control", cc)])
    });
    let origin = scripted("127.0.0.1:0", None, Duration::ZERO, versions).await;
    let edge = start_edge(&format!("[[site]]\nhost = \"s.test\"\norigin = \"http://{}\"\n", origin.addr)).await;
    assert_eq!(get(edge.addr, "s.test", "/a", &[]).await.header("x-cache"), "MISS");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(get(edge.addr, "s.test", "/a", &[]).await.header("x-cache"), "STALE");
    // The refreshed object is stored once the background request has its body.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while get(edge.addr, "s.test", "/a", &[]).await.header("x-cache") != "HIT" {
        assert!(tokio::time::Instant::now() < deadline, "the background revalidation never refreshed the object");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(origin.hits(), 2, "one background request refreshed it");
}

#[tokio::test]
async fn a_thousand_concurrent_misses_make_one_origin_fetch() {
    let slow = handler(|_| reply("x".repeat(4096), &[("cache-control", "max-age=60")]));
    let origin = scripted("127.0.0.1:0", None, Duration::from_millis(300), slow).await;
    // One test client opens all 1 000 connections: lift the per-client cap.
    let config = format!(
        "max_connections_per_client = 2000\n[[site]]\nhost = \"c.test\"\norigin = \"http://{}\"\n",
        origin.addr
    );
    let edge = start_edge(&config).await;
    let addr = edge.addr;
    let clients: Vec<_> =
        (0..1000).map(|_| tokio::spawn(async move { get(addr, "c.test", "/storm", &[]).await })).collect();
    for c in clients {
        let r = c.await.unwrap();
        assert_eq!((r.status, r.body.len()), (StatusCode::OK, 4096));
    }
    assert_eq!(origin.hits(), 1, "one origin fetch for the whole storm");
}

#[tokio::test]
async fn a_purge_during_a_miss_keeps_the_fetched_object_out_of_the_cache() {
    let slow = handler(|_| reply("before the purge", &[("cache-control", "max-age=600")]));
    let origin = scripted("127.0.0.1:0", None, Duration::from_millis(500), slow).await;
    let edge = start_edge(&format!("[[site]]\nhost = \"p.test\"\norigin = \"http://{}\"\n", origin.addr)).await;
    let addr = edge.addr;
    let miss = tokio::spawn(async move { get(addr, "p.test", "/page", &[]).await });
    // The purge lands while the origin is still answering the miss.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(origin.hits(), 1, "the miss reached the origin before the purge");
    let order = serde_json::from_value(serde_json::json!({
        "id": 1, "site": "p.test", "urls": ["/page"], "created_at_ms": 0
    }))
    .unwrap();
    lagran_edge::purge::apply(&edge.edge, order).await;
    let r = miss.await.unwrap();
    assert_eq!((r.status, r.text()), (StatusCode::OK, "before the purge"), "its client still gets the answer");
    assert!(edge.edge.cache.is_empty(), "what the origin sent before the purge was not stored");
    let r = get(addr, "p.test", "/page", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(origin.hits(), 2, "the next request fetched again");
    assert_eq!(edge.edge.cache.len(), 1, "and that fetch is stored");
}

#[tokio::test]
async fn a_stale_object_is_revalidated_with_304() {
    let origin = scripted(
        "127.0.0.1:0",
        None,
        Duration::ZERO,
        handler(|req| {
            let cc = ("cache-control", "max-age=1");
            if header(req, "if-none-match") == "\"v1\"" {
                let mut r = reply("", &[cc, ("etag", "\"v1\""), ("x-revalidated", "yes")]);
                *r.status_mut() = StatusCode::NOT_MODIFIED;
                return r;
            }
            reply("the body", &[cc, ("etag", "\"v1\"")])
        }),
    )
    .await;
    let edge = start_edge(&format!("[[site]]\nhost = \"r.test\"\norigin = \"http://{}\"\n", origin.addr)).await;
    assert_eq!(get(edge.addr, "r.test", "/o", &[]).await.header("x-cache"), "MISS");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = get(edge.addr, "r.test", "/o", &[]).await;
    assert_eq!((r.status, r.header("x-cache"), r.text()), (StatusCode::OK, "REVALIDATED", "the body"));
    assert_eq!(r.header("x-revalidated"), "yes", "the 304's headers replace the stored ones");
    assert_eq!(get(edge.addr, "r.test", "/o", &[]).await.header("x-cache"), "HIT", "fresh again");
    let r = get(edge.addr, "r.test", "/o", &[("if-none-match", "\"v1\"")]).await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED, "the client's own validator is answered from the cache");
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn vary_keeps_one_variant_per_header_value() {
    let origin = scripted(
        "127.0.0.1:0",
        None,
        Duration::ZERO,
        handler(|req| {
            reply(
                header(req, "accept-language").to_owned(),
                &[("cache-control", "max-age=60"), ("vary", "Accept-Language")],
            )
        }),
    )
    .await;
    let edge = start_edge(&format!("[[site]]\nhost = \"v.test\"\norigin = \"http://{}\"\n", origin.addr)).await;
    let lang = async |l: &str| {
        let r = get(edge.addr, "v.test", "/page", &[("accept-language", l)]).await;
        (r.header("x-cache").to_owned(), r.text().to_owned())
    };
    assert_eq!(lang("fr").await, ("MISS".into(), "fr".into()));
    assert_eq!(lang("de").await, ("MISS".into(), "de".into()));
    assert_eq!(lang("fr").await, ("HIT".into(), "fr".into()));
    assert_eq!(lang("de").await, ("HIT".into(), "de".into()));
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn access_log_lines_and_metrics_count_each_request() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let origin = plain("0123456789", "max-age=60").await;
    let edge = start_edge(&format!(
        "access_log = \"{}\"\n[[site]]\nhost = \"m.test\"\norigin = \"http://{}\"\n",
        log.display(),
        origin.addr
    ))
    .await;
    assert_eq!(get(edge.addr, "m.test", "/a", &[]).await.header("x-cache"), "MISS");
    assert_eq!(get(edge.addr, "m.test", "/a", &[]).await.header("x-cache"), "HIT");
    assert_eq!(get(edge.addr, "m.test", "/a", &[("range", "bytes=2-4")]).await.text(), "234", "ranges from the cache");

    // A request is counted when its body is done, which may trail the reply a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let metrics = loop {
        let metrics = get(edge.addr, "any.host", "/metrics", &[]).await;
        assert_eq!(metrics.status, StatusCode::OK);
        if metrics.text().contains("lagran_edge_requests_total{site=\"m.test\"} 3")
            || tokio::time::Instant::now() > deadline
        {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for line in [
        "lagran_edge_requests_total{site=\"m.test\"} 3",
        "lagran_edge_cache_total{site=\"m.test\",result=\"hit\"} 2",
        "lagran_edge_cache_total{site=\"m.test\",result=\"miss\"} 1",
        "lagran_edge_bytes_out_total{site=\"m.test\"} 23",
        "lagran_edge_origin_seconds_count{site=\"m.test\"} 1",
        "lagran_edge_origin_errors_total{site=\"m.test\"} 0",
    ] {
        assert!(metrics.text().lines().any(|l| l == line), "missing {line:?} in\n{}", metrics.text());
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 3 {
            break text;
        }
        assert!(tokio::time::Instant::now() < deadline, "the access log was not written: {text:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let parsed: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let by = |cache: &str, status: u64| {
        parsed
            .iter()
            .find(|l| l["cache"] == cache && l["status"] == status)
            .unwrap_or_else(|| panic!("no {cache} {status} in {lines}"))
    };
    let (miss, hit) = (by("MISS", 200), by("HIT", 200));
    assert_eq!(by("HIT", 206)["bytes"].as_u64(), Some(3));
    assert_eq!((miss["site"].as_str(), miss["client"].as_str()), (Some("m.test"), Some("127.0.0.1")));
    assert_eq!(
        (miss["method"].as_str(), miss["path"].as_str(), miss["bytes"].as_u64()),
        (Some("GET"), Some("/a"), Some(10))
    );
    assert!(miss["origin_ms"].as_f64().is_some() && hit["origin_ms"].is_null());
    assert!(miss["tls"].is_null() && miss["time"].as_str().is_some_and(|t| t.ends_with('Z')));
}
