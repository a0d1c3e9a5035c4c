//! Heap allocations per cached hit, counted by a counting allocator around the
//! system one on the test's own thread: what [`lagran_edge::cached::serve`]
//! (hyper's flow) and [`lagran_edge::hit_path::answer`] (the HTTP/1.1 hit
//! path) cost for a fresh object in memory, the request head already parsed
//! and the response not sent. Bounds, so the hot paths do not grow.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper::Request;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::Scheme;
use lagran_edge::Edge;
use lagran_edge::cache::CachedObject;
use lagran_edge::config::Config;
use lagran_edge::freshness::Freshness;
use lagran_edge::hit_path::{self, Head};
use lagran_edge::origin::Forward;
use lagran_edge::request::Conn;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// The headers a static file server sends with a 1 KiB object, as the cache
/// stores them (with room for what an answer adds).
fn origin_headers() -> HeaderMap {
    let mut headers: HeaderMap = [
        ("content-type", "application/octet-stream"),
        ("cache-control", "max-age=3600"),
        ("etag", "\"6570a1b2-400\""),
        ("last-modified", "Wed, 06 Dec 2023 10:00:00 GMT"),
        ("date", "Sat, 05 Dec 2026 10:00:00 GMT"),
        ("server", "nginx"),
        ("content-length", "1024"),
    ]
    .into_iter()
    .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
    .collect();
    headers.reserve(lagran_edge::cache::ANSWER_HEADERS);
    headers
}

/// An edge with a fresh 1 KiB object under `bench.test/1k.bin`.
fn edge_with_object() -> Arc<Edge> {
    let config = Config::parse("[[site]]\nhost = \"bench.test\"\norigin = \"http://127.0.0.1:9\"\n", "test").unwrap();
    let edge = Arc::new(Edge::new(&config).unwrap());
    let object = CachedObject {
        headers: origin_headers(),
        body: Bytes::from(vec![b'a'; 1024]).into(),
        response_time: SystemTime::now(),
        initial_age: Duration::ZERO,
        freshness: Freshness {
            lifetime: Duration::from_secs(3600),
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
        },
        primary: "bench.test/1k.bin".into(),
        vary: Vec::new(),
    };
    edge.cache.insert(&HeaderMap::new(), Arc::new(object));
    edge
}

#[test]
fn a_cached_hit_allocates_little() {
    let edge = edge_with_object();
    let site = edge.site("bench.test").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let scheme = Scheme::HTTP;
    let forward = Forward { host: "bench.test", client_ip: [127, 0, 0, 1].into(), scheme: &scheme };
    let heads: Vec<_> = (0..1100)
        .map(|_| Request::get("/1k.bin").header("host", "bench.test").body(()).unwrap().into_parts().0)
        .collect();
    let mut heads = heads.into_iter();
    runtime.block_on(async {
        for parts in heads.by_ref().take(100) {
            let serving = lagran_edge::cached::serve(&edge, &site, parts, forward);
            // HTTP/2 moves every request's future into a task: the origin's
            // paths are boxed so a hit's stays small.
            let size = std::mem::size_of_val(&serving);
            assert!(size <= 900, "the future of a cached hit is {size} bytes (880 when this was written)");
            let answer = serving.await;
            assert_eq!(answer.response.headers()["x-cache"], "HIT");
            assert_eq!(answer.outcome.cache, lagran_edge::outcome::CacheResult::Hit);
        }
        let before = allocations();
        for parts in heads {
            drop(lagran_edge::cached::serve(&edge, &site, parts, forward).await);
        }
        let per_hit = (allocations() - before) as f64 / 1000.0;
        eprintln!("allocations per cached hit: {per_hit:.1}");
        assert!(per_hit <= 7.0, "{per_hit} allocations per cached hit (7 when this was written)");
    });
}

#[test]
fn a_hit_on_the_hit_path_allocates_only_its_key() {
    let edge = edge_with_object();
    let conn = Conn { peer: ([127, 0, 0, 1], 40000).into(), sni: None, scheme: Scheme::HTTP, tls_version: None };
    let raw = b"GET /1k.bin HTTP/1.1\r\nhost: bench.test\r\nuser-agent: wrk\r\n\r\n";
    let mut headers = [httparse::EMPTY_HEADER; 8];
    let mut req = httparse::Request::new(&mut headers);
    assert!(req.parse(raw).unwrap().is_complete());
    let head = Head { method: req.method.unwrap(), target: req.path.unwrap(), minor_version: 1, headers: req.headers };
    let mut out = Vec::with_capacity(4096);
    let body = hit_path::answer(&edge, &conn, &head, &mut out).expect("a hit the path answers");
    assert_eq!(body.len(), 1024);
    assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n") && out.ends_with(b"via: 1.1 lagran-edge\r\n\r\n"));
    let before = allocations();
    for _ in 0..1000 {
        out.clear();
        drop(hit_path::answer(&edge, &conn, &head, &mut out));
    }
    let per_hit = (allocations() - before) as f64 / 1000.0;
    eprintln!("allocations per hit on the hit path: {per_hit:.1}");
    assert!(per_hit <= 1.0, "{per_hit} allocations per hit on the hit path (1, its key, when this was written)");
}
