//! The request flow over plain HTTP: cache, ranges, WAF, rate limit, hotlink, routing.

use std::time::Duration;

use hyper::{Method, StatusCode};

use crate::support::{STATIC_BODY, TIMEOUT, get, request, sites, start_edge, start_origin};

#[tokio::test]
async fn miss_then_hit_and_head_from_cache() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;

    let first = get(edge.addr, "cdn.test", "/static.txt", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("x-cache"), "MISS", "the first request goes to the origin");
    assert_eq!(first.text(), STATIC_BODY);
    assert_eq!(first.header("via"), "1.1 lagran-edge");

    let second = get(edge.addr, "CDN.test:80", "/static.txt", &[]).await;
    assert_eq!(second.header("x-cache"), "HIT", "the second is served from the cache");
    assert_eq!(second.text(), STATIC_BODY);
    assert_eq!(second.header("cache-control"), "max-age=60", "origin headers are kept");
    assert!(second.headers.contains_key("age"));

    let head = request(edge.addr, Method::HEAD, "cdn.test", "/static.txt", &[]).await;
    assert_eq!((head.status, head.header("x-cache")), (StatusCode::OK, "HIT"));
    assert_eq!(head.header("content-length"), "20");
    assert!(head.body.is_empty(), "HEAD has no body");

    let other_query = get(edge.addr, "cdn.test", "/static.txt?v=2", &[]).await;
    assert_eq!(other_query.header("x-cache"), "MISS", "the query is part of the key");
    assert_eq!(origin.hits("/static.txt"), 2, "one origin fetch per key");
}

#[tokio::test]
async fn no_store_is_not_cached() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    for _ in 0..2 {
        let r = get(edge.addr, "cdn.test", "/nostore", &[]).await;
        assert_eq!((r.status, r.header("x-cache")), (StatusCode::OK, "MISS"));
    }
    assert_eq!(origin.hits("/nostore"), 2, "no-store responses reach the origin every time");
    assert!(edge.edge.cache.is_empty());
}

#[tokio::test]
async fn ranges_are_cut_from_cached_objects() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;

    let miss = get(edge.addr, "cdn.test", "/static.txt", &[("range", "bytes=0-4")]).await;
    assert_eq!((miss.status, miss.header("x-cache")), (StatusCode::PARTIAL_CONTENT, "MISS"));
    assert_eq!(miss.text(), "01234");
    assert_eq!(miss.header("content-range"), "bytes 0-4/20");

    let tail = get(edge.addr, "cdn.test", "/static.txt", &[("range", "bytes=5-")]).await;
    assert_eq!((tail.status, tail.header("x-cache")), (StatusCode::PARTIAL_CONTENT, "HIT"));
    assert_eq!(tail.text(), &STATIC_BODY[5..]);
    assert_eq!(tail.header("content-range"), "bytes 5-19/20");
    assert_eq!(tail.header("content-length"), "15");

    let suffix = get(edge.addr, "cdn.test", "/static.txt", &[("range", "bytes=-3")]).await;
    assert_eq!(suffix.text(), "hij");

    let beyond = get(edge.addr, "cdn.test", "/static.txt", &[("range", "bytes=100-")]).await;
    assert_eq!(beyond.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(beyond.header("content-range"), "bytes */20");

    let stale_validator =
        get(edge.addr, "cdn.test", "/static.txt", &[("range", "bytes=0-1"), ("if-range", "\"v0\"")]).await;
    assert_eq!(stale_validator.status, StatusCode::OK, "If-Range with another ETag gets the whole object");
    let same_validator =
        get(edge.addr, "cdn.test", "/static.txt", &[("range", "bytes=0-1"), ("if-range", "\"v1\"")]).await;
    assert_eq!(same_validator.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(origin.hits("/static.txt"), 1, "every range came from one origin fetch");
}

#[tokio::test]
async fn waf_denies_cidr_path_and_user_agent() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;

    let cidr = get(edge.addr, "blocked.test", "/static.txt", &[]).await;
    assert_eq!(cidr.status, StatusCode::FORBIDDEN, "127.0.0.0/8 is denied on blocked.test");
    for path in ["/admin", "/admin/users", "/%61dmin"] {
        let r = get(edge.addr, "cdn.test", path, &[]).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path} is under the denied /admin prefix");
    }
    let dots = get(edge.addr, "cdn.test", "/x/../admin", &[]).await;
    assert_eq!(dots.status, StatusCode::BAD_REQUEST, "dot segments are refused before the WAF even looks");
    let ua = get(edge.addr, "cdn.test", "/static.txt", &[("user-agent", "Mozilla/5.0 (compatible; badbot/2.1)")]).await;
    assert_eq!(ua.status, StatusCode::FORBIDDEN, "user-agent substrings match case-insensitively");
    let fine = get(edge.addr, "cdn.test", "/static.txt", &[("user-agent", "curl/8.0")]).await;
    assert_eq!(fine.status, StatusCode::OK);
    assert_eq!(origin.hits("/admin"), 0, "blocked requests never reach the origin");
}

#[tokio::test]
async fn rate_limit_refuses_after_the_burst() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    for i in 0..3 {
        let r = get(edge.addr, "limited.test", "/static.txt", &[]).await;
        assert_eq!(r.status, StatusCode::OK, "request {i} is within the burst of 3");
    }
    let refused = get(edge.addr, "limited.test", "/static.txt", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "the fourth exceeds the burst");
    assert_eq!(refused.header("retry-after"), "1");
    let other_site = get(edge.addr, "cdn.test", "/static.txt", &[]).await;
    assert_eq!(other_site.status, StatusCode::OK, "limits are per site");
}

#[tokio::test]
async fn hotlink_protection_checks_the_referer() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    let cases = [
        (None, StatusCode::OK),
        (Some("https://www.good.test/page.html"), StatusCode::OK),
        (Some("https://cdn.test/index.html"), StatusCode::OK),
        (Some("https://evil.test/steal.html"), StatusCode::FORBIDDEN),
    ];
    for (referer, want) in cases {
        let headers: Vec<(&str, &str)> = referer.map(|r| ("referer", r)).into_iter().collect();
        let r = get(edge.addr, "cdn.test", "/static.txt", &headers).await;
        assert_eq!(r.status, want, "referer {referer:?}");
    }
}

#[tokio::test]
async fn routing_unknown_host_wildcard_and_healthz() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;

    let unknown = get(edge.addr, "nobody.test", "/static.txt", &[]).await;
    assert_eq!(unknown.status, StatusCode::MISDIRECTED_REQUEST);
    assert!(unknown.text().contains("nobody.test"), "{}", unknown.text());
    assert_eq!(unknown.header("content-type"), "text/plain; charset=utf-8");

    let wild = get(edge.addr, "img.wild.test", "/static.txt", &[]).await;
    assert_eq!(wild.status, StatusCode::OK, "*.wild.test covers img.wild.test");
    let too_deep = get(edge.addr, "a.b.wild.test", "/static.txt", &[]).await;
    assert_eq!(too_deep.status, StatusCode::MISDIRECTED_REQUEST, "a wildcard covers one label");

    for host in ["nobody.test", "blocked.test", "cdn.test"] {
        let health = get(edge.addr, host, "/healthz", &[]).await;
        assert_eq!((health.status, health.text()), (StatusCode::OK, "ok"), "healthz on {host}");
    }
}

#[tokio::test]
async fn origin_request_is_rewritten_and_non_get_bypasses_the_cache() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;

    let headers = [("x-forwarded-for", "198.51.100.7"), ("connection", "x-private-hop"), ("x-private-hop", "1")];
    let echo = get(edge.addr, "cdn.test", "/echo?a=1&b=2", &headers).await;
    let want = format!(
        "method=GET pq=/echo?a=1&b=2 host={} xff=198.51.100.7, 127.0.0.1 xfh=cdn.test range=- conn=-",
        origin.addr
    );
    assert_eq!(echo.text(), want, "Host is the origin's, XFF gains the client, hop-by-hop headers are dropped");

    let post = request(edge.addr, Method::POST, "cdn.test", "/echo", &[]).await;
    assert_eq!(post.header("x-cache"), "BYPASS");
    assert!(post.text().starts_with("method=POST"), "{}", post.text());

    let missing = get(edge.addr, "cdn.test", "/missing", &[]).await;
    assert_eq!((missing.status, missing.header("x-cache")), (StatusCode::NOT_FOUND, "MISS"));
    let again = get(edge.addr, "cdn.test", "/missing", &[]).await;
    assert_eq!(again.header("x-cache"), "MISS", "only 200s are cached");
}

#[tokio::test]
async fn objects_over_the_size_limit_stream_through() {
    let origin = start_origin().await;
    let config = format!("cache_max_object_bytes = 64\n{}", sites(origin.addr));
    let edge = start_edge(&config).await;
    for _ in 0..2 {
        let r = get(edge.addr, "cdn.test", "/big", &[]).await;
        assert_eq!((r.status, r.header("x-cache")), (StatusCode::OK, "MISS"));
        assert_eq!(r.body.len(), 1000, "the whole body arrives");
    }
    assert_eq!(origin.hits("/big"), 2, "too large to store");
}

#[tokio::test]
async fn unreachable_origin_is_a_bad_gateway() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let edge = start_edge(&format!("[[site]]\nhost = \"down.test\"\norigin = \"http://{addr}\"\n")).await;
    let r = get(edge.addr, "down.test", "/x", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY);
}

#[tokio::test]
async fn shutdown_stops_the_listener() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    assert_eq!(get(edge.addr, "cdn.test", "/static.txt", &[]).await.status, StatusCode::OK);
    assert!(edge.edge.stats.bytes_served.load(std::sync::atomic::Ordering::Relaxed) >= 20, "bytes are counted");
    edge.shutdown.cancel();
    let result = tokio::time::timeout(TIMEOUT, edge.task).await.expect("run returns after shutdown");
    result.unwrap().unwrap();
    let refused =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(edge.addr)).await.unwrap();
    assert!(refused.is_err(), "the listener is closed");
}

#[tokio::test]
async fn a_range_of_an_uncached_large_object_is_asked_from_the_origin() {
    let origin = start_origin().await;
    let config = format!("cache_max_object_bytes = 64\n{}", sites(origin.addr));
    let edge = start_edge(&config).await;
    let r = get(edge.addr, "cdn.test", "/big", &[("range", "bytes=10-19")]).await;
    assert_eq!((r.status, r.header("x-cache")), (StatusCode::PARTIAL_CONTENT, "MISS"));
    assert_eq!(r.text(), "0123456789", "only the range, never the whole object");
    assert_eq!(r.header("content-range"), "bytes 10-19/1000");
    assert_eq!(origin.hits("/big bytes=10-19"), 1, "the range itself went to the origin");
    // An object small enough is fetched whole once, stored, and every range cut from it.
    let small = get(edge.addr, "cdn.test", "/static.txt", &[("range", "bytes=2-3")]).await;
    assert_eq!((small.status, small.text()), (StatusCode::PARTIAL_CONTENT, "23"));
    assert_eq!(get(edge.addr, "cdn.test", "/static.txt", &[]).await.header("x-cache"), "HIT");
}

#[tokio::test]
async fn requests_with_cookies_bypass_the_cache() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    let alice = get(edge.addr, "cdn.test", "/me", &[("cookie", "user=alice")]).await;
    assert_eq!((alice.text(), alice.header("x-cache")), ("hello user=alice", "BYPASS"));
    let bob = get(edge.addr, "cdn.test", "/me", &[("cookie", "user=bob")]).await;
    assert_eq!(bob.text(), "hello user=bob", "never alice's page");
    let anon = get(edge.addr, "cdn.test", "/me", &[]).await;
    assert_eq!((anon.text(), anon.header("x-cache")), ("hello -", "MISS"), "nothing was stored from them");
    assert_eq!(origin.hits("/me"), 3);
}

/// Sends raw bytes, returns the whole answer (the edge closes after `connection: close`).
async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn dot_segments_never_reach_the_origin() {
    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    for path in ["/x/../admin", "/./admin", "/x/%2e%2E/admin", "/x/%252e%252e/admin", "/x\\..\\admin", "/.."] {
        let answer =
            raw(edge.addr, &format!("GET {path} HTTP/1.1\r\nhost: cdn.test\r\nconnection: close\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
    }
    assert_eq!(origin.hits("/admin") + origin.hits("/x/../admin"), 0, "nothing was forwarded");
    let fine =
        raw(edge.addr, "GET /static.txt?a=..&b=.x HTTP/1.1\r\nhost: cdn.test\r\nconnection: close\r\n\r\n").await;
    assert!(fine.starts_with("HTTP/1.1 200"), "dots in the query or inside names are fine: {fine}");
}

#[tokio::test]
async fn connections_past_max_connections_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = start_origin().await;
    let edge = start_edge(&format!("max_connections = 2\n{}", sites(origin.addr))).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(b"GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(s);
    }
    let mut third = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    let _ = third.write_all(b"GET /static.txt HTTP/1.1\r\nhost: cdn.test\r\n\r\n").await;
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(TIMEOUT, third.read(&mut buf)).await.expect("closed, not left hanging").unwrap_or(0);
    assert_eq!(n, 0, "the third connection is closed unanswered");
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(get(edge.addr, "cdn.test", "/static.txt", &[]).await.status, StatusCode::OK, "slots come back");
}

/// HTTP/2 (prior knowledge): many streams at once on one connection, misses
/// (answered later, from the origin) and hits (answered at once), each with
/// its own body.
#[tokio::test]
async fn concurrent_http2_streams_each_get_their_answer() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let origin = start_origin().await;
    let edge = start_edge(&sites(origin.addr)).await;
    let tcp = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.expect("h2 handshake");
    tokio::spawn(conn);
    let fetch = |path: &'static str| {
        let req = hyper::Request::get(format!("http://cdn.test{path}")).body(Empty::<bytes::Bytes>::new()).unwrap();
        let mut sender = sender.clone();
        async move {
            let resp = sender.send_request(req).await.expect("the edge answers");
            let cache = resp.headers().get("x-cache").map(|v| v.to_str().unwrap().to_owned());
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (path, cache, body)
        }
    };
    for round in 0..2 {
        let paths = ["/static.txt", "/big", "/nostore"].into_iter().cycle().take(24);
        let streams: Vec<_> = paths.map(|path| tokio::spawn(fetch(path))).collect();
        for stream in streams {
            let (path, cache, body) = tokio::time::timeout(TIMEOUT, stream).await.unwrap().unwrap();
            let want = match path {
                "/static.txt" => STATIC_BODY.to_owned(),
                "/big" => "0123456789".repeat(100),
                _ => "fresh every time".to_owned(),
            };
            assert_eq!(body, want.as_bytes(), "{path} in round {round}");
            if round == 1 && path != "/nostore" {
                assert_eq!(cache.as_deref(), Some("HIT"), "{path} is cached by the second round");
            }
        }
    }
    assert_eq!(origin.hits("/nostore"), 16, "every uncacheable stream reached the origin");
}
