//! A purge by tag reaches two edges and each confirms: a real `lagran
//! control`, two real `lagran-edge` processes with a disk cache each, and an
//! origin tagging its objects with `Surrogate-Key`. One edge is stopped when
//! the purge is asked and started again on the same cache directory: it
//! applies the purge it missed before confirming it, and keeps the rest of its
//! cache.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::edge_config::{Edge, free_port, start_edge, wait_for};
use crate::support::{Daemon, Options, Role};

const ADMIN: &str = "admin-token-for-purge";
const AGENT: &str = "global-agent-token-for-purge";

/// An origin whose `/red/…` objects are tagged `red` and the others `blue`,
/// counting the requests it answers (bounded by the test).
fn tagging_origin() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(100) {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
            if !head.starts_with("GET ") {
                continue;
            }
            counted.fetch_add(1, Ordering::SeqCst);
            let tag = if path.starts_with("/red/") { "red shared" } else { "blue, shared-too" };
            let body = format!("object {path}");
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncache-control: max-age=600\r\nsurrogate-key: {tag}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, hits)
}

/// `GET path` with `Host: shop.test` from the edge on `port`: its `x-cache`.
fn x_cache(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: shop.test\r\nconnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "GET {path}: {text}");
    let line = text.lines().find(|l| l.to_ascii_lowercase().starts_with("x-cache:")).unwrap_or("x-cache: -");
    line.split_once(':').unwrap().1.trim().to_owned()
}

fn edge_config(node: &str, http: u16, control: &Daemon, origin: u16, cache: &Path) -> String {
    format!(
        "listen_http = \"127.0.0.1:{http}\"\nnode_name = \"{node}\"\ncontrol_url = \"http://{}\"\n\
         agent_token = \"{AGENT}\"\nheartbeat_secs = 1\nconfig_poll_secs = 1\ncache_dir = \"{}\"\n\
         [[site]]\nhost = \"shop.test\"\norigin = \"http://127.0.0.1:{origin}\"\n",
        control.api,
        cache.display()
    )
}

fn ready(edge: &Edge, port: u16) {
    wait_for(
        "the edge's first poll of the control plane",
        Duration::from_secs(20),
        || {
            (TcpStream::connect(("127.0.0.1", port)).is_ok() && edge.log().contains("from the control plane applied"))
                .then_some(())
        },
        || edge.log(),
    );
}

/// SIGTERM (the edge writes its disk queue out), then waits for the exit.
fn stop(mut edge: Edge) {
    let pid = edge.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let stopped = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        edge.child.try_wait().unwrap().is_some()
    });
    assert!(stopped, "lagran-edge did not stop on SIGTERM; log:\n{}", edge.log());
}

/// Each node's `removed`, once `nodes` all confirmed purge `id`.
fn confirmations(control: &Daemon, id: i64, nodes: &[&str], log: impl Fn() -> String) -> Vec<(String, u64)> {
    let read = [("x-lagran-agent-token", AGENT)];
    wait_for(
        &format!("confirmations of purge {id} by {nodes:?}"),
        Duration::from_secs(20),
        || {
            let (s, v) = control.http("GET", &format!("/api/v1/purge/{id}"), None, &read);
            assert_eq!(s, 200, "{v}");
            let seen: Vec<(String, u64)> = v["confirmations"]
                .as_array()?
                .iter()
                .map(|c| (c["node"].as_str().unwrap().to_owned(), c["removed"].as_u64().unwrap()))
                .collect();
            (seen.len() == nodes.len()).then_some(seen)
        },
        log,
    )
}

#[test]
fn a_purge_by_tag_reaches_two_edges_and_each_confirms() {
    let env = vec![("ADMIN_TOKEN".to_string(), ADMIN.to_string()), ("AGENT_TOKEN".to_string(), AGENT.to_string())];
    let control = Daemon::start(Options { role: Role::Control, env, ..Options::default() });
    let admin = format!("Bearer {ADMIN}");
    let admin = [("authorization", admin.as_str())];
    let (origin, hits) = tagging_origin();
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (port_a, port_b) = (free_port(), free_port());
    let config_a = edge_config("gz-01", port_a, &control, origin, dirs.0.path());
    let config_b = edge_config("hk-01", port_b, &control, origin, dirs.1.path());
    let a = start_edge(&config_a);
    let b = start_edge(&config_b);
    ready(&a, port_a);
    ready(&b, port_b);
    for port in [port_a, port_b] {
        for path in ["/red/1", "/red/2", "/blue/1"] {
            assert_eq!(x_cache(port, path), "MISS");
            assert_eq!(x_cache(port, path), "HIT");
        }
    }
    assert_eq!(hits.load(Ordering::SeqCst), 6, "each edge fetched each object once");
    stop(b);

    // Bad requests name their field and record nothing.
    let bad = control.http("POST", "/api/v1/purge", Some(json!({"site": "shop.test", "tags": []})), &admin);
    assert_eq!((bad.0, &bad.1["field"]), (422, &Value::from("tags")), "{}", bad.1);
    let bad =
        control.http("POST", "/api/v1/purge", Some(json!({"site": "shop.test", "urls": ["https://x.test/a"]})), &admin);
    assert_eq!((bad.0, &bad.1["field"]), (422, &Value::from("urls")), "{}", bad.1);
    let agent = control.http(
        "POST",
        "/api/v1/purge",
        Some(json!({"site": "shop.test", "tags": ["red"]})),
        &[("x-lagran-agent-token", AGENT)],
    );
    assert_eq!(agent.0, 401, "purging needs the admin token: {}", agent.1);

    let (s, purge) = control.http("POST", "/api/v1/purge", Some(json!({"site": "shop.test", "tags": ["red"]})), &admin);
    assert_eq!(s, 202, "{purge}");
    let id = purge["id"].as_i64().expect("the purge has an id");
    assert_eq!(purge["tags"], json!(["red"]));

    let seen = confirmations(&control, id, &["gz-01"], || a.log());
    assert_eq!(seen, [("gz-01".to_owned(), 2)], "the running edge removed both red objects");
    let (_, status) = control.http("GET", &format!("/api/v1/purge/{id}"), None, &admin);
    // The site is in the edges' files only, so every node serves it: the
    // stopped edge and the demo's kr-01, which runs no edge here.
    assert_eq!(status["pending"], json!(["hk-01", "kr-01"]), "still to confirm: {status}");
    assert_eq!(x_cache(port_a, "/red/1"), "MISS", "purged");
    assert_eq!(x_cache(port_a, "/blue/1"), "HIT", "untagged red: kept");
    assert_eq!(hits.load(Ordering::SeqCst), 7);

    // The stopped edge returns on the same cache directory and catches up.
    let b = start_edge(&config_b);
    let seen = confirmations(&control, id, &["gz-01", "hk-01"], || b.log());
    assert_eq!(seen, [("gz-01".to_owned(), 2), ("hk-01".to_owned(), 2)], "both edges confirmed");
    assert_eq!(x_cache(port_b, "/blue/1"), "HIT", "kept on disk across the restart");
    assert_eq!(x_cache(port_b, "/red/2"), "MISS", "purged while the edge was away");
    assert_eq!(hits.load(Ordering::SeqCst), 8);
    let (_, v) = control.http("GET", &format!("/api/v1/purge/{id}"), None, &admin);
    assert!(v["confirmations"].as_array().unwrap().iter().all(|c| c["confirmed_at_ms"].as_i64() > Some(0)), "{v}");
    assert_eq!(v["pending"], json!(["kr-01"]), "only the node without an edge is left: {v}");
}
