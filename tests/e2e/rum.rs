//! Real-user measurement in a real browser: headless Chromium loads a page (served
//! through a real `lagran-edge`) that includes `/.well-known/lagran/rum.js`; the
//! script times two candidate nodes and posts a beacon, which the edge forwards to
//! a stand-in for the control plane's measurement API with source `rum` for the
//! browser's own /24. A flood of beacons from that /24, forged ones among them,
//! forwards no more than the beacon rate and nothing for any other subnet or node.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::console::{Driver, have_browser, headless_chromium, js, wait_for};
use crate::support::lagran_bin;

/// The edge's beacon rate per /24, a minute.
const BEACONS_PER_MINUTE: u64 = 10;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One HTTP/1.1 request read from `s`: (request line, body).
fn read_request(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut reader = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        if h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some((line, body))
}

fn respond(s: &mut TcpStream, content_type: &str, body: &str) {
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\ncache-control: no-store\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A stand-in for the control plane: heartbeats, measurement reports (kept in the
/// returned list) and candidates `gz-01` and `sh-01`, both served by the edge on `edge_port`.
fn start_control(edge_port: u16) -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let reports: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = reports.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(2000) {
            let Ok(mut s) = stream else { continue };
            let Some((line, body)) = read_request(&mut s) else { continue };
            let answer = if line.starts_with("POST /api/v1/measurements ") {
                let report: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                kept.lock().unwrap().extend(report["measurements"].as_array().cloned().unwrap_or_default());
                json!({})
            } else if line.starts_with("GET /api/v1/measurements/candidates?client=") {
                json!({"partition": "p-e2e", "candidates": [
                    {"node": "gz-01", "hostname": format!("gz-01.rum.test:{edge_port}")},
                    {"node": "sh-01", "hostname": format!("sh-01.rum.test:{edge_port}")},
                ]})
            } else {
                json!({})
            };
            respond(&mut s, "application/json", &answer.to_string());
        }
    });
    (addr, reports)
}

/// An origin serving the page that includes the script.
pub(crate) fn start_origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(200) {
            let Ok(mut s) = stream else { continue };
            if read_request(&mut s).is_some() {
                let page = "<!doctype html><html><head><title>rum</title>\
                            <script src=\"/.well-known/lagran/rum.js\"></script></head><body>hello</body></html>";
                respond(&mut s, "text/html; charset=utf-8", page);
            }
        }
    });
    port
}

struct EdgeProcess {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_edge(port: u16, control: SocketAddr, origin: u16) -> EdgeProcess {
    let bin = lagran_bin().with_file_name("lagran-edge");
    assert!(bin.is_file(), "{} is not built: run `cargo build --bins`", bin.display());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.toml");
    let config = format!(
        "listen_http = \"127.0.0.1:{port}\"\nnode_name = \"gz-01\"\ncontrol_url = \"http://{control}\"\n\
         agent_token = \"gz-01-token\"\nheartbeat_secs = 1\nconfig_poll_secs = 3600\n\
         [[site]]\nhost = \"cdn.rum.test\"\norigin = \"http://127.0.0.1:{origin}\"\ncache_ttl_secs = 0\n"
    );
    std::fs::write(&path, config).unwrap();
    let child = Command::new(bin)
        .arg("--config")
        .arg(&path)
        .env_remove("AGENT_TOKEN")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("starting lagran-edge");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "lagran-edge did not listen on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    EdgeProcess { child, _dir: dir }
}

/// The `rum` entries for `node` so far: (subnets seen, samples summed).
fn rum_samples(reports: &Mutex<Vec<Value>>, node: &str) -> u64 {
    let all = reports.lock().unwrap();
    all.iter().filter(|m| m["source"] == "rum" && m["node"] == node).map(|m| m["samples"].as_u64().unwrap()).sum()
}

/// Headless Chromium, every `*.rum.test` mapped to `edge`, loads `page` and
/// waits for `rum.js`'s outcome (`data-lagran-rum` on the document: "sent",
/// or why not).
pub(crate) async fn rum_outcome(driver: &Driver, edge: &str, page: &str) -> String {
    let c = headless_chromium(driver, &[format!("--host-resolver-rules=MAP *.rum.test {edge}")]).await;
    c.goto(page).await.unwrap();
    let state = wait_for(Duration::from_secs(30), "rum.js to finish", || async {
        let v = js(&c, "return document.documentElement.dataset.lagranRum || ''").await;
        v.as_str().filter(|s| !s.is_empty() && *s != "running").map(str::to_owned)
    })
    .await;
    let _ = c.close().await;
    state
}

/// POSTs `body` as a beacon from 127.0.0.1; the status.
fn post_beacon(port: u16, body: &str) -> u16 {
    let url = format!("http://127.0.0.1:{port}/.well-known/lagran/beacon");
    match ureq::post(&url).timeout(Duration::from_secs(5)).set("content-type", "text/plain").send_string(body) {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("posting a beacon: {e}"),
    }
}

#[test]
fn a_browser_beacon_is_forwarded_as_rum_and_a_flood_only_up_to_the_rate() {
    if !have_browser("rum") {
        return;
    }
    let port = free_port();
    let (control, reports) = start_control(port);
    let _edge = start_edge(port, control, start_origin());
    let started = Instant::now();
    let driver = Driver::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let state = rum_outcome(&driver, "127.0.0.1", &format!("http://cdn.rum.test:{port}/page.html")).await;
        assert_eq!(state, "sent", "the script's outcome");
    });
    drop(driver);

    // Both candidates were timed by the browser and forwarded for its own /24.
    wait_for_reports(&reports, "the browser's timings", |r| {
        rum_samples(r, "sh-01") >= 1 && rum_samples(r, "gz-01") >= 1
    });
    assert_eq!(rum_samples(&reports, "sh-01"), 1, "one beacon, one time for sh-01");
    assert_eq!(rum_samples(&reports, "gz-01"), 1);

    // The flood: good beacons, and forged ones naming another subnet or a node not offered.
    let mut accepted = 0u64;
    for i in 0..40 {
        let body = match i % 4 {
            0 => r#"{"client_subnet":"58.60.0.0/24","timings":[{"node":"gz-01","samples_ms":[1]}]}"#.to_owned(),
            1 => r#"{"timings":[{"node":"bj-09","samples_ms":[1]}]}"#.to_owned(),
            _ => format!(r#"{{"timings":[{{"node":"gz-01","samples_ms":[{}]}}]}}"#, 30 + i),
        };
        match post_beacon(port, &body) {
            202 => accepted += 1,
            422 | 429 => {}
            other => panic!("beacon {i}: status {other}"),
        }
    }
    let refill = started.elapsed().as_secs() * BEACONS_PER_MINUTE / 60;
    assert!(accepted < BEACONS_PER_MINUTE + refill, "{accepted} of 40 accepted after the browser's");
    let want = 1 + accepted;
    wait_for_reports(&reports, "the flood's accepted beacons", |r| rum_samples(r, "gz-01") >= want);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(rum_samples(&reports, "gz-01"), want, "exactly the accepted beacons are forwarded");
    let all = reports.lock().unwrap().clone();
    let rum: Vec<&Value> = all.iter().filter(|m| m["source"] == "rum").collect();
    assert!(rum.iter().all(|m| m["client_subnet"] == "127.0.0.0/24"), "only the browser's own /24: {rum:?}");
    assert!(rum.iter().all(|m| m["node"] == "gz-01" || m["node"] == "sh-01"), "only offered nodes: {rum:?}");
    assert_eq!(rum_samples(&reports, "sh-01"), 1, "the flood moved nothing else");
    assert!(
        all.iter().any(|m| m["source"] == "edge" && m["client_subnet"] == "127.0.0.0/24" && m["node"] == "gz-01"),
        "the browser's connections are reported with source edge too: {all:?}"
    );
}

/// Waits (bounded) until `done` holds for the reports received.
fn wait_for_reports(reports: &Mutex<Vec<Value>>, what: &str, done: impl Fn(&Mutex<Vec<Value>>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done(reports) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {:?}", reports.lock().unwrap());
        std::thread::sleep(Duration::from_millis(100));
    }
}
