//! The real `lagran-edge` binary restarted on the same cache directory serves
//! what it cached before from disk, without asking the origin.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command};
use std::time::Duration;

use hyper::StatusCode;

use crate::origins::{handler, reply, scripted};
use crate::support::get;

/// The edge process; killed if a test fails before stopping it.
pub struct EdgeProcess(Child);

impl EdgeProcess {
    pub fn start(config: &std::path::Path) -> EdgeProcess {
        let child = Command::new(env!("CARGO_BIN_EXE_lagran-edge"))
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("lagran-edge starts");
        EdgeProcess(child)
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// SIGTERM, then waits for the exit.
    pub fn stop(mut self) {
        let pid = self.0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while self.0.try_wait().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "lagran-edge did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

pub async fn wait_ready(addr: SocketAddr) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "lagran-edge is not listening on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_restarted_edge_serves_its_disk_cache_without_the_origin() {
    let dir = tempfile::tempdir().unwrap();
    let body = "cached across restarts ".repeat(100);
    let served = body.clone();
    let origin = scripted(
        "127.0.0.1:0",
        None,
        Duration::ZERO,
        handler(move |_| reply(served.clone(), &[("cache-control", "max-age=600"), ("etag", "\"r1\"")])),
    )
    .await;
    let listen = free_port();
    let config = dir.path().join("edge.toml");
    std::fs::write(
        &config,
        format!(
            "listen_http = \"{listen}\"\ncache_max_bytes = 1048576\ncache_max_object_bytes = 65536\ncache_dir = \"{}\"\ncache_disk_max_bytes = 1048576\n\
             [[site]]\nhost = \"d.test\"\norigin = \"http://{}\"\n",
            dir.path().join("cache").display(),
            origin.addr
        ),
    )
    .unwrap();

    let edge = EdgeProcess::start(&config);
    wait_ready(listen).await;
    for path in ["/one", "/two"] {
        let r = get(listen, "d.test", path, &[]).await;
        assert_eq!((r.status, r.header("x-cache")), (StatusCode::OK, "MISS"));
    }
    edge.stop();
    origin.kill();

    let edge = EdgeProcess::start(&config);
    wait_ready(listen).await;
    for path in ["/one", "/two"] {
        let r = get(listen, "d.test", path, &[]).await;
        assert_eq!((r.status, r.header("x-cache"), r.header("etag")), (StatusCode::OK, "HIT", "\"r1\""));
        assert_eq!(r.text(), body);
    }
    let r = get(listen, "d.test", "/one", &[("range", "bytes=0-5")]).await;
    assert_eq!((r.status, r.text()), (StatusCode::PARTIAL_CONTENT, "cached"));
    assert_eq!(origin.hits(), 2, "after the restart the origin was not asked");
    edge.stop();
}
