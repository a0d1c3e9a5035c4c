//! Objects over `cache_max_object_bytes`: streamed to their client and into the
//! disk tier at once, never held whole in the edge's memory, served from disk
//! (whole and by range) afterwards and across a restart.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
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

fn config(dir: &Path, listen: std::net::SocketAddr, origin: std::net::SocketAddr) -> std::path::PathBuf {
    let path = dir.join("edge.toml");
    std::fs::write(
        &path,
        format!(
            "listen_http = \"{listen}\"\ncache_max_bytes = 1048576\ncache_max_object_bytes = 65536\ncache_dir = \"{}\"\ncache_disk_max_bytes = 67108864\n\
             [[site]]\nhost = \"big.test\"\norigin = \"http://{origin}\"\n",
            dir.join("cache").display(),
        ),
    )
    .unwrap();
    path
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
    let listen = free_port();
    let config = config(dir.path(), listen, origin.addr);
    let cache = dir.path().join("cache");

    let edge = EdgeProcess::start(&config);
    wait_ready(listen).await;
    get(listen, "unknown.test", "/", &[]).await;
    let before = peak_rss(edge.pid());
    let r = get(listen, "big.test", "/big", &[]).await;
    assert_eq!((r.status, r.header("x-cache")), (StatusCode::OK, "MISS"));
    assert!(r.body == body, "the miss streams the whole body");
    until_on_disk(&cache, 1).await;
    assert_served(listen, &body, "HIT").await;
    assert_eq!(origin.hits(), 1, "served from disk, whole and by range");
    let growth = peak_rss(edge.pid()).saturating_sub(before);
    assert!(growth < 10 * MIB, "the edge's peak memory grew by {growth} bytes for a 20 MiB object");
    edge.stop();
    origin.kill();

    let edge = EdgeProcess::start(&config);
    wait_ready(listen).await;
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
    let edge = start_edge(&format!(
        "cache_max_bytes = 1048576\ncache_max_object_bytes = 65536\ncache_dir = \"{}\"\ncache_disk_max_bytes = 67108864\n\
         [[site]]\nhost = \"big.test\"\norigin = \"http://{}\"\n",
        cache.display(),
        origin.addr
    ))
    .await;

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
    assert!((2..=7).contains(&fetched), "{fetched} origin fetches");
    let r = get(edge.addr, "big.test", "/big", &[("range", "bytes=-10")]).await;
    assert_eq!((r.status, r.header("x-cache")), (StatusCode::PARTIAL_CONTENT, "HIT"));
    assert_eq!(r.body, body.slice(body.len() - 10..));
    assert_eq!(origin.hits(), fetched);
    assert_eq!(edge.edge.cache.disk_usage().0, 1);
    edge.shutdown.cancel();
}
