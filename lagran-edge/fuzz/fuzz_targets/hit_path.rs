//! Arbitrary request heads into `lagran_edge::hit_path::answer`, against an
//! edge holding one fresh 1 KiB object at `bench.test/1k.bin`: never a panic;
//! what it answers is a `GET` or `HEAD` in HTTP/1.1 with an origin-form
//! target and one `Host`, the site's; its answer is a whole `200` head that
//! parses, with the object's length, and the body (none for `HEAD`).
//!
//! The input is the head itself when its first byte is even; when odd, the
//! rest is a target and extra header lines put into a `GET` (or `HEAD`) for
//! the site, so that hits are reached as well as refusals.
#![no_main]

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::Scheme;
use lagran_edge::Edge;
use lagran_edge::cache::CachedObject;
use lagran_edge::config::Config;
use lagran_edge::freshness::Freshness;
use lagran_edge::hit_path::{Head, answer};
use lagran_edge::request::Conn;
use libfuzzer_sys::fuzz_target;

static EDGE: LazyLock<Edge> = LazyLock::new(|| {
    let config = Config::parse("[[site]]\nhost = \"bench.test\"\norigin = \"http://127.0.0.1:9\"\n", "fuzz").unwrap();
    let edge = Edge::new(&config).unwrap();
    let headers: HeaderMap = [("content-type", "text/plain"), ("date", "Sat, 05 Dec 2026 10:00:00 GMT")]
        .into_iter()
        .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
        .collect();
    let object = CachedObject {
        headers,
        body: Bytes::from(vec![b'a'; 1024]).into(),
        response_time: SystemTime::now(),
        initial_age: Duration::ZERO,
        // Fresh for as long as the fuzzer runs.
        freshness: Freshness {
            lifetime: Duration::from_secs(1 << 30),
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
        },
        primary: "bench.test/1k.bin".into(),
        vary: Vec::new(),
    };
    edge.cache.insert(&HeaderMap::new(), object.into());
    edge
});

/// The request head the input stands for.
fn request(data: &[u8]) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else { return Vec::new() };
    if mode & 1 == 0 {
        return rest.to_vec();
    }
    let (target, extra) =
        rest.iter().position(|&b| b == b'\n').map_or((rest, &[][..]), |i| (&rest[..i], &rest[i + 1..]));
    let target = if target.is_empty() { &b"/1k.bin"[..] } else { target };
    let method = if mode & 2 == 0 { &b"GET "[..] } else { &b"HEAD "[..] };
    [method, target, b" HTTP/1.1\r\nHost: bench.test\r\n", extra, b"\r\n"].concat()
}

fuzz_target!(|data: &[u8]| {
    let raw = request(data);
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = req.parse(&raw) else { return };
    let (Some(method), Some(target), Some(minor_version)) = (req.method, req.path, req.version) else { return };
    let head = Head { method, target, minor_version, headers: req.headers };
    let conn = Conn { peer: ([127, 0, 0, 1], 40000).into(), sni: None, scheme: Scheme::HTTP, tls_version: None };
    let mut out = Vec::new();
    let Some(body) = answer(&EDGE, &conn, &head, &mut out) else {
        assert!(out.is_empty(), "declined, yet written: {raw:?}");
        return;
    };
    assert!(matches!(method, "GET" | "HEAD") && minor_version == 1, "{raw:?}");
    assert!(target.starts_with('/') && !target.contains(['#', ' ']), "{raw:?}");
    let hosts: Vec<_> = head.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host")).collect();
    assert_eq!(hosts.len(), 1, "{raw:?}");
    assert_eq!(body.len(), if method == "HEAD" { 0 } else { 1024 }, "{raw:?}");
    let mut answer_headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut answer_headers);
    assert_eq!(resp.parse(&out), Ok(httparse::Status::Complete(out.len())), "{raw:?} -> {out:?}");
    assert_eq!(resp.code, Some(200));
    let length = resp.headers.iter().filter(|h| h.name == "content-length").map(|h| h.value).collect::<Vec<_>>();
    assert_eq!(length, [&b"1024"[..]], "{raw:?}");
});
