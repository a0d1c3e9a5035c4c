//! Objects over `cache_max_object_bytes`: streamed to their client and into the
//! disk tier at once (with or without a `Content-Length`), never held whole in
//! the edge's memory, served from disk (whole and by range) afterwards and
//! across a restart; concurrent misses make one origin fetch and are served
//! from the file as it is written.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::StatusCode;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::origins::{Scripted, handler, reply, scripted};
use crate::restart::{EdgeProcess, free_port, wait_ready};
use crate::support::{get, start_edge};

const MIB: usize = 1 << 20;

/// `len` bytes that differ from one offset to the next.
fn pattern(len: usize) -> Bytes {
    (0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into()
}

async fn origin_of(body: Bytes) -> Scripted {
    let h = handler(move |_| reply(body.clone(), &[("cache-control", "max-age=600"), ("etag", "\"big\"")]));
    scripted("127.0.0.1:0", None, Duration::ZERO, h).await
}

/// Cache files in `dir` by suffix: (`.obj`, `.tmp`).
fn cache_files(dir: &Path) -> (usize, usize) {
    let names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().into_string().unwrap()).collect(),
        Err(_) => Vec::new(),
    };
    (names.iter().filter(|n| n.ends_with(".obj")).count(), names.iter().filter(|n| n.ends_with(".tmp")).count())
}

/// Waits until `dir` holds `objects` finished files and none half-written.
async fn until_on_disk(dir: &Path, objects: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while cache_files(dir) != (objects, 0) {
        assert!(tokio::time::Instant::now() < deadline, "cache files: {:?}", cache_files(dir));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The peak resident memory of process `pid` (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/<pid>/status");
    line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
}

/// The edge's settings for these tests: 1 MiB in memory, objects over 64 KiB
/// to the disk tier under `cache`, one site `big.test` on `origin`.
fn settings(cache: &Path, origin: std::net::SocketAddr) -> String {
    format!(
        "cache_max_bytes = 1048576\ncache_max_object_bytes = 65536\ncache_dir = \"{}\"\ncache_disk_max_bytes = 67108864\n\
         [[site]]\nhost = \"big.test\"\norigin = \"http://{origin}\"\n",
        cache.display(),
    )
}

/// [`settings`] with a listener, as a file for an edge process.
fn config(dir: &Path, listen: std::net::SocketAddr, origin: std::net::SocketAddr) -> std::path::PathBuf {
    let path = dir.join("edge.toml");
    std::fs::write(&path, format!("listen_http = \"{listen}\"\n{}", settings(&dir.join("cache"), origin))).unwrap();
    path
}

/// An edge process for these tests, in `dir`, on a free port.
struct Process {
    listen: std::net::SocketAddr,
    /// Its configuration file, to start it again with.
    config: std::path::PathBuf,
    cache: std::path::PathBuf,
}

impl Process {
    fn new(dir: &Path, origin: std::net::SocketAddr) -> Process {
        let listen = free_port();
        Process { listen, config: config(dir, listen, origin), cache: dir.join("cache") }
    }

    /// Starts the edge and waits until it answers.
    async fn start(&self) -> EdgeProcess {
        let edge = EdgeProcess::start(&self.config);
        wait_ready(self.listen).await;
        edge
    }

    /// The peak memory of a started `edge` once it has served a request: the
    /// baseline a large object's growth is measured from.
    async fn baseline_rss(&self, edge: &EdgeProcess) -> usize {
        get(self.listen, "unknown.test", "/", &[]).await;
        peak_rss(edge.pid())
    }
}

/// Asserts a whole answer and a range of `body` from the edge at `listen`.
async fn assert_served(listen: std::net::SocketAddr, body: &Bytes, cache: &str) {
    let r = get(listen, "big.test", "/big", &[]).await;
    assert_eq!((r.status, r.header("x-cache"), r.header("etag")), (StatusCode::OK, cache, "\"big\""));
    assert!(r.body == *body, "the whole body, {} bytes of {}", r.body.len(), body.len());
    let r = get(listen, "big.test", "/big", &[("range", "bytes=10000000-10000099")]).await;
    assert_eq!(
        (r.status, r.header("content-range")),
        (StatusCode::PARTIAL_CONTENT, "bytes 10000000-10000099/20971520")
    );
    assert_eq!(r.body, body.slice(10_000_000..10_000_100));
}

#[tokio::test]
async fn a_20_mib_object_lands_on_disk_and_is_served_from_it_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let body = pattern(20 * MIB);
    let origin = origin_of(body.clone()).await;
    let process = Process::new(dir.path(), origin.addr);
    let (listen, cache) = (process.listen, &process.cache);

    let edge = process.start().await;
    let before = process.baseline_rss(&edge).await;
    let r = get(listen, "big.test", "/big", &[]).await;
    assert_eq!((r.status, r.header("x-cache")), (StatusCode::OK, "MISS"));
    assert!(r.body == body, "the miss streams the whole body");
    until_on_disk(cache, 1).await;
    assert_served(listen, &body, "HIT").await;
    assert_eq!(origin.hits(), 1, "served from disk, whole and by range");
    let growth = peak_rss(edge.pid()).saturating_sub(before);
    assert!(growth < 10 * MIB, "the edge's peak memory grew by {growth} bytes for a 20 MiB object");
    edge.stop();
    origin.kill();

    let edge = process.start().await;
    assert_served(listen, &body, "HIT").await;
    assert_eq!(origin.hits(), 1, "after the restart the origin was not asked");
    edge.stop();
}

#[tokio::test]
async fn concurrent_misses_and_a_client_that_goes_away_leave_one_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let body = pattern(4 * MIB);
    let origin = origin_of(body.clone()).await;
    let cache = dir.path().join("cache");
    let edge = start_edge(&settings(&cache, origin.addr)).await;

    // A client that reads the head and a little of the body, then hangs up.
    let mut conn = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    conn.write_all(b"GET /big HTTP/1.1\r\nhost: big.test\r\n\r\n").await.unwrap();
    let mut some = vec![0; 64 * 1024];
    conn.read_exact(&mut some).await.unwrap();
    drop(conn);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cache_files(&cache) != (0, 0) || edge.edge.cache.disk_usage() != (0, 0) {
        assert!(tokio::time::Instant::now() < deadline, "an abandoned fill is removed: {:?}", cache_files(&cache));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let answers: Vec<_> = (0..6).map(|_| tokio::spawn(get(edge.addr, "big.test", "/big", &[]))).collect();
    for answer in answers {
        let r = answer.await.unwrap();
        assert_eq!(r.status, StatusCode::OK);
        assert!(r.body == body, "every waiter gets the whole body ({} bytes)", r.body.len());
    }
    until_on_disk(&cache, 1).await;
    let fetched = origin.hits();
    assert_eq!(fetched, 2, "the abandoned fetch, then one for the six");
    let r = get(edge.addr, "big.test", "/big", &[("range", "bytes=-10")]).await;
    assert_eq!((r.status, r.header("x-cache")), (StatusCode::PARTIAL_CONTENT, "HIT"));
    assert_eq!(r.body, body.slice(body.len() - 10..));
    assert_eq!(origin.hits(), fetched);
    assert_eq!(edge.edge.cache.disk_usage().0, 1);
    edge.shutdown.cancel();
}

/// An origin sending a body a chunk at a time, spread over a while; counts
/// its requests. Aborted when dropped.
struct Paced {
    addr: std::net::SocketAddr,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Paced {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Paced {
    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// How a [`Paced`] origin answers.
#[derive(Clone, Copy)]
struct Pace {
    /// Chunks the body is sent in.
    chunks: usize,
    /// Time between two chunks.
    every: Duration,
    /// With `Content-Length` (else chunked).
    with_length: bool,
    /// The first answer breaks off after half its body.
    first_fails: bool,
}

struct PacedBody {
    body: Bytes,
    pos: usize,
    chunk: usize,
    tick: tokio::time::Interval,
    fail_at: Option<usize>,
    with_length: bool,
}

impl hyper::body::Body for PacedBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if this.pos >= this.body.len() {
            return Poll::Ready(None);
        }
        if this.fail_at.is_some_and(|at| this.pos >= at) {
            return Poll::Ready(Some(Err(std::io::Error::other("the origin breaks off"))));
        }
        std::task::ready!(this.tick.poll_tick(cx));
        let end = (this.pos + this.chunk).min(this.body.len());
        let data = this.body.slice(this.pos..end);
        this.pos = end;
        Poll::Ready(Some(Ok(hyper::body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.pos >= self.body.len()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self.with_length {
            true => hyper::body::SizeHint::with_exact((self.body.len() - self.pos) as u64),
            false => hyper::body::SizeHint::default(),
        }
    }
}

async fn paced(body: Bytes, pace: Pace) -> Paced {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (body, hits) = (body.clone(), counted.clone());
            conns.spawn(async move {
                let svc = hyper::service::service_fn(move |_req| {
                    let first = hits.fetch_add(1, Ordering::SeqCst) == 0;
                    let mut tick = tokio::time::interval(pace.every);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    let paced = PacedBody {
                        chunk: body.len().div_ceil(pace.chunks),
                        fail_at: (first && pace.first_fails).then_some(body.len() / 2),
                        body: body.clone(),
                        pos: 0,
                        tick,
                        with_length: pace.with_length,
                    };
                    let mut resp = hyper::Response::new(paced);
                    let headers = resp.headers_mut();
                    headers.insert("cache-control", "max-age=600".parse().unwrap());
                    headers.insert("etag", "\"big\"".parse().unwrap());
                    if pace.with_length {
                        headers.insert("content-length", body.len().into());
                    }
                    async move { Ok::<_, std::convert::Infallible>(resp) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
            });
        }
    });
    Paced { addr, hits, task }
}

/// What a client streaming a body got, checked against [`pattern`] as it
/// came, without keeping it.
#[derive(Debug)]
struct Streamed {
    status: StatusCode,
    x_cache: String,
    len: usize,
    /// Every byte received is the pattern's at its offset.
    matches: bool,
    /// The body ended cleanly (not cut short).
    complete: bool,
}

async fn stream_get(addr: std::net::SocketAddr, path: &str) -> Streamed {
    use http_body_util::BodyExt;
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let req =
        hyper::Request::get(format!("http://{addr}{path}")).header("host", "big.test").body(Empty::new()).unwrap();
    let exchange = async {
        let resp = client.request(req).await.expect("the edge answers");
        let x_cache = resp.headers().get("x-cache").map_or("", |v| v.to_str().unwrap()).to_owned();
        let mut got = Streamed { status: resp.status(), x_cache, len: 0, matches: true, complete: false };
        let mut body = resp.into_body();
        loop {
            match body.frame().await {
                None => {
                    got.complete = true;
                    return got;
                }
                Some(Err(_)) => return got,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        got.matches &= data.iter().enumerate().all(|(i, b)| *b == ((got.len + i) % 251) as u8);
                        got.len += data.len();
                    }
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), exchange).await.expect("the edge answers within the timeout")
}

#[tokio::test]
async fn fifty_concurrent_misses_of_a_20_mib_object_make_one_fetch_and_are_served_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let len = 20 * MIB;
    let pace = Pace { chunks: 200, every: Duration::from_millis(5), with_length: true, first_fails: false };
    let origin = paced(pattern(len), pace).await;
    let process = Process::new(dir.path(), origin.addr);
    let (listen, cache) = (process.listen, &process.cache);

    let edge = process.start().await;
    let before = process.baseline_rss(&edge).await;
    let clients: Vec<_> = (0..50).map(|_| tokio::spawn(stream_get(listen, "/big"))).collect();
    let mut misses = 0;
    for client in clients {
        let got = client.await.unwrap();
        assert_eq!(got.status, StatusCode::OK);
        assert!(got.complete && got.matches && got.len == len, "every client gets the whole body: {got:?}");
        misses += usize::from(got.x_cache == "MISS");
    }
    assert_eq!(origin.hits(), 1, "one origin fetch for fifty misses");
    assert_eq!(misses, 1, "the others were served from the fill");
    until_on_disk(cache, 1).await;
    let growth = peak_rss(edge.pid()).saturating_sub(before);
    assert!(growth < 100 * MIB, "the edge's peak memory grew by {growth} bytes for fifty readers of 20 MiB");
    edge.stop();
}

#[tokio::test]
async fn a_chunked_large_body_lands_on_disk_and_is_served_from_it_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let body = pattern(8 * MIB);
    let pace = Pace { chunks: 128, every: Duration::from_millis(1), with_length: false, first_fails: false };
    let origin = paced(body.clone(), pace).await;
    let process = Process::new(dir.path(), origin.addr);
    let (listen, cache) = (process.listen, &process.cache);

    let edge = process.start().await;
    let r = get(listen, "big.test", "/big", &[]).await;
    assert_eq!((r.status, r.header("x-cache"), r.header("content-length")), (StatusCode::OK, "MISS", ""));
    assert!(r.body == body, "the miss streams the whole body");
    until_on_disk(cache, 1).await;
    let hit = async || {
        let r = get(listen, "big.test", "/big", &[]).await;
        assert_eq!((r.status, r.header("x-cache"), r.header("content-length")), (StatusCode::OK, "HIT", "8388608"));
        assert!(r.body == body, "the whole body from disk, {} bytes", r.body.len());
    };
    hit().await;
    assert_eq!(origin.hits(), 1, "served from disk");
    edge.stop();

    let edge = process.start().await;
    hit().await;
    assert_eq!(origin.hits(), 1, "after the restart the origin was not asked");
    edge.stop();
}

#[tokio::test]
async fn a_fetch_that_fails_mid_body_cuts_its_readers_short_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let len = 4 * MIB;
    let pace = Pace { chunks: 100, every: Duration::from_millis(10), with_length: true, first_fails: true };
    let origin = paced(pattern(len), pace).await;
    let cache = dir.path().join("cache");
    let edge = start_edge(&settings(&cache, origin.addr)).await;

    let leader = tokio::spawn(stream_get(edge.addr, "/big"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while origin.hits() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the origin is asked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let followers: Vec<_> = (0..3).map(|_| tokio::spawn(stream_get(edge.addr, "/big"))).collect();
    for client in std::iter::once(leader).chain(followers) {
        let got = client.await.unwrap();
        assert_eq!(got.status, StatusCode::OK);
        assert!(got.matches && !got.complete && got.len < len, "cut short, never a wrong whole body: {got:?}");
    }
    assert_eq!(origin.hits(), 1, "the followers waited for the one fetch");
    until_on_disk(&cache, 0).await;
    assert_eq!(edge.edge.cache.disk_usage(), (0, 0));

    let got = stream_get(edge.addr, "/big").await;
    assert!(got.complete && got.matches && got.len == len, "the next request fetches again: {got:?}");
    assert_eq!((got.x_cache.as_str(), origin.hits()), ("MISS", 2));
    until_on_disk(&cache, 1).await;
    edge.shutdown.cancel();
}

#[tokio::test]
async fn a_fill_goes_on_for_its_readers_when_the_first_client_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let len = 4 * MIB;
    let pace = Pace { chunks: 100, every: Duration::from_millis(5), with_length: true, first_fails: false };
    let origin = paced(pattern(len), pace).await;
    let cache = dir.path().join("cache");
    let edge = start_edge(&settings(&cache, origin.addr)).await;

    // The first client reads a little of the body, then stops reading.
    let mut conn = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    conn.write_all(b"GET /big HTTP/1.1\r\nhost: big.test\r\n\r\n").await.unwrap();
    let mut some = vec![0; 64 * 1024];
    conn.read_exact(&mut some).await.unwrap();
    let filling = edge.edge.cache.filling("big.test/big").expect("its file is being written");
    let readers: Vec<_> = (0..3).map(|_| tokio::spawn(stream_get(edge.addr, "/big"))).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !filling.is_read() {
        assert!(tokio::time::Instant::now() < deadline, "the others read the file");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(conn);
    for reader in readers {
        let got = reader.await.unwrap();
        assert!(got.complete && got.matches && got.len == len, "the readers get the whole body: {got:?}");
        assert_eq!(got.x_cache, "HIT");
    }
    until_on_disk(&cache, 1).await;
    assert_eq!(origin.hits(), 1);
    edge.shutdown.cancel();
}
