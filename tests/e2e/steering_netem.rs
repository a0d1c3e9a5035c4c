//! Steering by latency the edges measure, end to end in namespaces: a real
//! `lagran serve` in a server namespace, two real `lagran-edge` processes
//! (gz-01 and hk-01, each with its own token) in namespaces of their own, and a
//! client namespace at 58.60.0.2 (Shenzhen China Telecom: gz-01 by geo) joined
//! to each edge by a [`DelayLine`], which delays the client's packets as
//! `tc netem delay` would on a veth (and works on kernels without `sch_netem`).
//! `curl` from the client through both edges; the edges read each
//! connection's RTT from the kernel and report it with their heartbeats.
//!
//! ```text
//!            netem35-ca ─(delay)→ netem35-ac  [A: gz-01] netem35-as ── netem35-sa
//!  [client]                                                                 [server: lagran serve]
//!            netem35-cb ─(delay)→ netem35-bc  [B: hk-01] netem35-bs ── netem35-sb
//! ```
//!
//! 80 ms towards gz-01 and 5 ms towards hk-01 move the Shenzhen answer to
//! hk-01 within two recompute periods of both being measured; a swap that
//! leaves hk-01 within the stabilize band keeps it; one past the band moves
//! the answer back to gz-01, by latency. Beijing Unicom, measured by nobody,
//! keeps its geo answer throughout.
//!
//! The browser's half, through the same real control plane: headless Chromium
//! loads a page through a real `lagran-edge` that includes
//! `/.well-known/lagran/rum.js`; the timings land in the control plane's matrix
//! with source `rum` for the browser's /24, and a flood of forged beacons from
//! that /24 adds no more than the beacon rate, and nothing for anyone else.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lagran::xdp::netns::NetNs;
use serde_json::{Value, json};

use crate::console::{Driver, have_browser};
use crate::delay_line::{DelayLine, End};
use crate::edge_config::{Edge, start_edge};
use crate::rum::{rum_outcome, start_origin};
use crate::support::{Daemon, Dig, Options, have_tool, lagran_bin};

const ZONE: &str = "edge.lagran.net";
const AGENT: &str = "netem35-agent-token";
const ADMIN: &str = "netem35-admin-token";
const SHENZHEN: [&str; 3] = [ZONE, "A", "+subnet=58.60.0.0/24"];
const BEIJING: [&str; 3] = [ZONE, "A", "+subnet=123.112.0.0/24"];
const GZ: &str = "203.0.113.21";
const HK: &str = "203.0.113.22";
/// The client's address: Shenzhen China Telecom in the small geo file.
const CLIENT: &str = "58.60.0.2";
/// The control plane's address, on the server namespace's loopback.
const CONTROL: &str = "198.18.9.1";
/// The edges' addresses on their links to the client.
const EDGE_A: &str = "198.18.1.1";
const EDGE_B: &str = "198.18.2.1";
const RECOMPUTE_SECS: u64 = 2;
const MIN_SAMPLES: u64 = 5;
/// The stabilize band's floor, in milliseconds (the ratio stays at 0.1).
const STABILIZE_MS: f64 = 25.0;
/// Requests each client loop makes at most.
const MAX_REQUESTS: u32 = 3_000;
/// How long a client loop runs at most.
const MAX_LOAD: Duration = Duration::from_secs(240);

/// The four namespaces and the two delay lines from the client to the edges.
/// Fields drop in order: the lines (and their devices) first, then the
/// namespaces, with the veths inside them.
struct Netem {
    to_a: DelayLine,
    to_b: DelayLine,
    server: NetNs,
    edge_a: NetNs,
    edge_b: NetNs,
    client: NetNs,
}

fn ok(what: std::io::Result<()>) {
    what.unwrap_or_else(|e| panic!("setting up the netem35 topology: {e}"));
}

/// A veth pair `x_if`/`y_if` between `x` and `y`, addressed (`/30`s) and up.
fn link(x: &NetNs, x_if: &str, x_addr: &str, y: &NetNs, y_if: &str, y_addr: &str) {
    let status = Command::new("ip")
        .args(["link", "add", x_if, "netns", x.name(), "type", "veth", "peer", "name", y_if, "netns", y.name()])
        .status()
        .expect("running ip");
    assert!(status.success(), "creating veth {x_if}/{y_if}");
    ok(x.ip(&["addr", "add", &format!("{x_addr}/30"), "dev", x_if]));
    ok(y.ip(&["addr", "add", &format!("{y_addr}/30"), "dev", y_if]));
    ok(x.ip(&["link", "set", x_if, "up"]));
    ok(y.ip(&["link", "set", y_if, "up"]));
}

impl Netem {
    fn create() -> Netem {
        let server = NetNs::create("netem35-s").expect("a server namespace (root needed)");
        let edge_a = NetNs::create("netem35-a").expect("edge A's namespace");
        let edge_b = NetNs::create("netem35-b").expect("edge B's namespace");
        let client = NetNs::create("netem35-c").expect("the client namespace");
        let line = |edge: &NetNs, c_if, c_addr, e_if, e_addr| {
            let c = End { ns: &client, device: c_if, addr: c_addr };
            DelayLine::create(c, End { ns: edge, device: e_if, addr: e_addr }, Duration::from_millis(1))
        };
        let to_a = line(&edge_a, "netem35-ca", "198.18.1.2", "netem35-ac", EDGE_A);
        let to_b = line(&edge_b, "netem35-cb", "198.18.2.2", "netem35-bc", EDGE_B);
        link(&server, "netem35-sa", "198.18.3.1", &edge_a, "netem35-as", "198.18.3.2");
        link(&server, "netem35-sb", "198.18.4.1", &edge_b, "netem35-bs", "198.18.4.2");
        ok(server.ip(&["addr", "add", &format!("{CONTROL}/32"), "dev", "lo"]));
        ok(client.ip(&["addr", "add", &format!("{CLIENT}/32"), "dev", "lo"]));
        ok(edge_a.ip(&["route", "add", &format!("{CONTROL}/32"), "via", "198.18.3.1"]));
        ok(edge_b.ip(&["route", "add", &format!("{CONTROL}/32"), "via", "198.18.4.1"]));
        ok(edge_a.ip(&["route", "add", "58.60.0.0/24", "dev", "netem35-ac"]));
        ok(edge_b.ip(&["route", "add", "58.60.0.0/24", "dev", "netem35-bc"]));
        Netem { to_a, to_b, server, edge_a, edge_b, client }
    }

    /// The delay the client's packets take towards edge A and edge B, in milliseconds.
    fn delays(&self, a: u64, b: u64) {
        self.to_a.set_delay(Duration::from_millis(a));
        self.to_b.set_delay(Duration::from_millis(b));
    }

    fn in_server<T>(&self, f: impl FnOnce() -> T) -> T {
        self.server.enter(f).expect("entering the server namespace")
    }
}

/// Real HTTP clients: `curl` from the client's address to `url` in a loop,
/// each request a new connection (one RTT sample), until `stop` (bounded in
/// count and time). Returns the requests that succeeded.
fn client_loop(ns: String, url: String, stop: Arc<AtomicBool>) -> JoinHandle<u32> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut served = 0;
        for _ in 0..MAX_REQUESTS {
            if stop.load(Ordering::SeqCst) || started.elapsed() > MAX_LOAD {
                break;
            }
            let out = Command::new("ip")
                .args(["netns", "exec", &ns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"])
                .args(["--max-time", "3", "--interface", CLIENT, &url])
                .output();
            if out.is_ok_and(|o| o.stdout.starts_with(b"2")) {
                served += 1;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        served
    })
}

fn edge_config(node: &str, token: &str) -> String {
    format!(
        "listen_http = \"0.0.0.0:8080\"\nnode_name = \"{node}\"\ncontrol_url = \"http://{CONTROL}:8080\"\n\
         insecure_control = true\nagent_token = \"{token}\"\nheartbeat_secs = 1\nconfig_poll_secs = 3600\n\
         [agent]\nreport_rtt = true\n"
    )
}

/// Each node's (rtt_ms, samples) for the subnet, as the control plane's matrix holds them.
fn measured(net: &Netem, d: &Daemon, subnet: &str) -> Vec<(String, f64, u64)> {
    let agent = [("x-lagran-agent-token", AGENT)];
    let (s, v) = net.in_server(|| d.http("GET", &format!("/api/v1/measurements?subnet={subnet}"), None, &agent));
    assert_eq!(s, 200, "{v}");
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (n["node"].as_str().unwrap().to_owned(), n["rtt_ms"].as_f64().unwrap(), n["samples"].as_u64().unwrap())
        })
        .collect()
}

/// Waits (bounded) until the matrix holds at least `MIN_SAMPLES` fresh samples
/// for both nodes and `fits(gz-01's ms, hk-01's ms)`; returns them.
fn wait_measured(net: &Netem, d: &Daemon, what: &str, fits: impl Fn(f64, f64) -> bool) -> (f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let row = measured(net, d, "58.60.0.0/24");
        let rtt = |node: &str| row.iter().find(|(n, _, s)| n == node && *s >= MIN_SAMPLES).map(|(_, ms, _)| *ms);
        if let (Some(gz), Some(hk)) = (rtt("gz-01"), rtt("hk-01"))
            && fits(gz, hk)
        {
            return (gz, hk);
        }
        assert!(Instant::now() < deadline, "the matrix never showed {what}: {row:?}\n{}", d.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The schedule's JSON for Shenzhen.
fn schedule(net: &Netem, d: &Daemon) -> Value {
    let agent = [("x-lagran-agent-token", AGENT)];
    let (s, v) =
        net.in_server(|| d.http("GET", &format!("/api/v1/schedule?domain={ZONE}&subnet=58.60.0.0/24"), None, &agent));
    assert_eq!(s, 200, "{v}");
    v
}

fn dig(net: &Netem, d: &Daemon, args: &[&str]) -> Vec<String> {
    net.in_server(|| d.dig(args)).answers("A")
}

/// `lagran explain --subnet 58.60.0.0/24` (inside the server namespace): its
/// text, asked of the daemon with the agent token of its configuration, over
/// http:// to the namespace's address (`--insecure-control`: it never leaves
/// the namespaces the test made).
fn explain(net: &Netem, d: &Daemon) -> String {
    let out = net.in_server(|| {
        Command::new(lagran_bin())
            .args(["--insecure-control", "explain", "--subnet", "58.60.0.0/24"])
            .env("LAGRAN_CONFIG", d.config_path())
            .env("LAGRAN_API", format!("http://{}", d.api))
            .env_remove("AGENT_TOKEN")
            .env_remove("ADMIN_TOKEN")
            .env("RUST_LOG", "warn")
            .output()
            .expect("running lagran explain")
    });
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `rtt_ms` explain prints on `node`'s candidate line.
fn explained_rtt(text: &str, node: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.split_whitespace().nth(1) == Some(node))?;
    line.split("rtt_ms ").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// Digs Shenzhen for `hold`, asserting every answer is `want`; Beijing too, against `beijing`.
fn holds(net: &Netem, d: &Daemon, want: &str, beijing: &[String], hold: Duration) {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        assert_eq!(dig(net, d, &SHENZHEN), vec![want], "Shenzhen moved\n{}", d.log());
        assert_eq!(dig(net, d, &BEIJING), beijing, "Beijing (no measurements) moved");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn edges_measuring_netem_delays_move_the_answer_and_the_stabilize_band_holds_it() {
    if !["dig", "ip", "curl"].into_iter().all(|t| have_tool(t, "steering_netem")) {
        return;
    }
    let net = Netem::create();
    let config = format!(
        "agent_token = \"{AGENT}\"\n[schedule]\nrecompute_secs = {RECOMPUTE_SECS}\n[steering]\nwindow_secs = 6\n\
         min_samples = {MIN_SAMPLES}\nstabilize_ms = {STABILIZE_MS}\nstabilize_ratio = 0.1\n"
    );
    let d = Daemon::start(Options {
        config: Some(config),
        netns: Some(net.server.name().to_owned()),
        api_listen: Some(format!("{CONTROL}:8080")),
        dns_listen: Some(format!("{CONTROL}:53")),
        env: vec![("ADMIN_TOKEN".into(), ADMIN.into())],
        ..Options::default()
    });
    let bearer = format!("Bearer {ADMIN}");
    let admin = [("authorization", bearer.as_str())];
    for (node, token) in [("gz-01", "netem35-gz-01-token"), ("hk-01", "netem35-hk-01-token")] {
        let (s, v) = net.in_server(|| {
            d.http("PATCH", &format!("/api/v1/nodes/{node}"), Some(json!({"auth_token": token})), &admin)
        });
        assert_eq!(s, 200, "{v}");
    }
    let domain = json!({"zone": ZONE, "steering": "latency"});
    let (s, v) = net.in_server(|| d.http("PUT", &format!("/api/v1/domains/{ZONE}"), Some(domain), &admin));
    assert_eq!((s, &v["steering"]), (200, &json!("latency")), "{v}");
    assert_eq!(dig(&net, &d, &SHENZHEN), vec![GZ], "no measurements: gz-01 by geo");
    let beijing = dig(&net, &d, &BEIJING);
    assert_eq!(beijing.len(), 1, "Beijing has a geo answer");

    let a = net.edge_a.enter(|| start_edge(&edge_config("gz-01", "netem35-gz-01-token"))).unwrap();
    let b = net.edge_b.enter(|| start_edge(&edge_config("hk-01", "netem35-hk-01-token"))).unwrap();
    let edges: [&Edge; 2] = [&a, &b];
    net.delays(80, 5);
    let stop = Arc::new(AtomicBool::new(false));
    let ns = net.client.name().to_owned();
    let clients = [
        client_loop(ns.clone(), format!("http://{EDGE_A}:8080/.well-known/lagran/ping"), stop.clone()),
        client_loop(ns, format!("http://{EDGE_B}:8080/.well-known/lagran/ping"), stop.clone()),
    ];
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let _stop_on_panic = Stop(stop.clone());

    // 80 ms towards gz-01, 5 ms towards hk-01: hk-01 within two recompute periods.
    let (gz, hk) = wait_measured(&net, &d, "gz-01 at 80 ms and hk-01 at 5 ms", |gz, hk| gz >= 80.0 && hk < 30.0);
    eprintln!("measured: gz-01 {gz} ms, hk-01 {hk} ms");
    let measured_at = Instant::now();
    let periods = Duration::from_secs(2 * RECOMPUTE_SECS);
    let r = net.in_server(|| d.dig_until(&SHENZHEN, periods, |r: &Dig| r.answers("A") == vec![HK]));
    assert_eq!(
        r.answers("A"),
        vec![HK],
        "hk-01 is faster (gz {gz} ms, hk {hk} ms), still gz-01 {:?} after both were measured\n{}",
        measured_at.elapsed(),
        edges_log(&edges)
    );
    let v = schedule(&net, &d);
    assert_eq!((&v["decided_by"], &v["primary"]["name"]), (&json!("latency"), &json!("hk-01")), "{v}");
    let text = explain(&net, &d);
    assert!(text.contains("decided   by latency"), "{text}");
    let (e_gz, e_hk) = (explained_rtt(&text, "gz-01"), explained_rtt(&text, "hk-01"));
    assert!(e_gz.is_some_and(|ms| ms >= 80.0) && e_hk.is_some_and(|ms| ms < 30.0), "{text}");
    assert_eq!(dig(&net, &d, &BEIJING), beijing, "Beijing keeps its geo answer");
    let (_, bj) = net.in_server(|| {
        d.http("GET", "/api/v1/measurements?subnet=123.112.0.0/24", None, &[("x-lagran-agent-token", AGENT)])
    });
    assert_eq!(bj["nodes"], json!([]), "nobody measured Beijing: {bj}");

    // Swapped by less than the band: gz-01 is now faster, but hk-01 stays within the 25 ms band.
    net.delays(5, 15);
    let (gz, hk) = wait_measured(&net, &d, "gz-01 at 5 ms and hk-01 at 15 ms", |gz, hk| {
        gz < 15.0 && (13.0..35.0).contains(&hk) && (3.0..STABILIZE_MS).contains(&(hk - gz))
    });
    eprintln!("measured after the small swap: gz-01 {gz} ms, hk-01 {hk} ms");
    holds(&net, &d, HK, &beijing, Duration::from_secs(3 * RECOMPUTE_SECS));
    let v = schedule(&net, &d);
    assert_eq!((&v["decided_by"], &v["primary"]["name"]), (&json!("latency"), &json!("hk-01")), "{gz} {hk}: {v}");

    // Swapped by more than the band: back to gz-01, by latency this time.
    net.delays(5, 80);
    let (gz, hk) = wait_measured(&net, &d, "gz-01 at 5 ms and hk-01 at 80 ms", |gz, hk| gz < 12.0 && hk >= 80.0);
    eprintln!("measured after the large swap: gz-01 {gz} ms, hk-01 {hk} ms");
    let r = net.in_server(|| d.dig_until(&SHENZHEN, periods, |r: &Dig| r.answers("A") == vec![GZ]));
    assert_eq!(r.answers("A"), vec![GZ], "gz-01 is faster by more than the band (gz {gz}, hk {hk})");
    let v = schedule(&net, &d);
    assert_eq!((&v["decided_by"], &v["primary"]["name"]), (&json!("latency"), &json!("gz-01")), "{v}");
    assert_eq!(dig(&net, &d, &BEIJING), beijing, "Beijing keeps its geo answer throughout");

    stop.store(true, Ordering::SeqCst);
    let served: Vec<u32> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert!(served.iter().all(|&n| n >= MIN_SAMPLES as u32), "requests served by gz-01, hk-01: {served:?}");
}

fn edges_log(edges: &[&Edge]) -> String {
    edges.iter().map(|e| e.log()).collect::<Vec<_>>().join("\n----\n")
}

/// The browser's address (Shenzhen China Telecom) and the edge's, on the
/// veth between their namespaces; the edge serves port 80 (a node's hostname
/// carries no port, and the beacon script fetches `http://{hostname}/…`).
const BROWSER: &str = "58.60.0.2";
const BROWSER_NET: &str = "58.60.0.0/24";
const RUM_EDGE: &str = "58.60.0.1";
/// The edge's beacon rate per /24, a minute.
const BEACONS_PER_MINUTE: u64 = 10;
/// The node the browser-facing edge runs as; the other candidates are timed by the browser only.
const RUM_NODE: &str = "kr-01";
const RUM_NODE_TOKEN: &str = "netem35-kr-01-token";

/// The browser's namespace and the edge's (which runs the control plane too),
/// joined by a veth; dropped, both go.
struct RumNet {
    browser: NetNs,
    edge: NetNs,
}

impl RumNet {
    fn create() -> RumNet {
        let browser = NetNs::create("netem35-rb").expect("the browser's namespace (root needed)");
        let edge = NetNs::create("netem35-re").expect("the edge's namespace");
        let status = Command::new("ip")
            .args(["link", "add", "netem35-rb0", "netns", browser.name(), "type", "veth"])
            .args(["peer", "name", "netem35-re0", "netns", edge.name()])
            .status()
            .expect("running ip");
        assert!(status.success(), "creating veth netem35-rb0/netem35-re0");
        ok(browser.ip(&["addr", "add", &format!("{BROWSER}/24"), "dev", "netem35-rb0"]));
        ok(edge.ip(&["addr", "add", &format!("{RUM_EDGE}/24"), "dev", "netem35-re0"]));
        ok(browser.ip(&["link", "set", "netem35-rb0", "up"]));
        ok(edge.ip(&["link", "set", "netem35-re0", "up"]));
        RumNet { browser, edge }
    }

    fn in_edge<T>(&self, f: impl FnOnce() -> T) -> T {
        self.edge.enter(f).expect("entering the edge's namespace")
    }
}

/// `POST`s `body` as a beacon from the browser's namespace, with extra `headers`; the status.
fn forged_beacon(net: &RumNet, body: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req = ureq::post(&format!("http://{RUM_EDGE}/.well-known/lagran/beacon"))
        .timeout(Duration::from_secs(5))
        .set("content-type", "text/plain")
        .set("host", "cdn.rum.test");
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let send = || match req.send_string(body) {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("posting a beacon: {e}"),
    };
    net.browser.enter(send).expect("entering the browser's namespace")
}

type Row = std::collections::BTreeMap<String, (u64, Vec<String>)>;

/// The control plane's row for `subnet`: node → (samples, sources).
fn row(net: &RumNet, d: &Daemon, subnet: &str) -> Row {
    let path = format!("/api/v1/measurements?subnet={subnet}");
    let (s, v) = net.in_edge(|| d.http("GET", &path, None, &[("x-lagran-agent-token", AGENT)]));
    assert_eq!(s, 200, "{v}");
    let sources = |n: &Value| n["sources"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect();
    let nodes = v["nodes"].as_array().unwrap().iter();
    nodes.map(|n| (n["node"].as_str().unwrap().to_owned(), (n["samples"].as_u64().unwrap(), sources(n)))).collect()
}

/// Waits (bounded) until `done` returns something for the browser's row.
fn wait_row<T>(net: &RumNet, d: &Daemon, edge: &Edge, what: &str, done: impl Fn(&Row) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = row(net, d, BROWSER_NET);
        if let Some(v) = done(&r) {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {r:?}\n{}\n{}", d.log(), edge.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Headless Chromium in the browser's namespace loads
/// `http://cdn.rum.test/page.html` (every `*.rum.test` mapped to the edge) and
/// waits for `rum.js`'s outcome.
fn browse(net: &RumNet) -> String {
    let run = || {
        let driver = Driver::start();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async { rum_outcome(&driver, RUM_EDGE, "http://cdn.rum.test/page.html").await })
    };
    net.browser.enter(run).expect("entering the browser's namespace")
}

/// The control plane and an edge (node kr-01, its own token) in the edge's
/// namespace, every demo node's hostname under `rum.test`.
fn start_rum_side(net: &RumNet) -> (Daemon, Edge) {
    let d = Daemon::start(Options {
        config: Some(format!("agent_token = \"{AGENT}\"\n[schedule]\nrecompute_secs = 1\n")),
        netns: Some(net.edge.name().to_owned()),
        api_listen: Some("127.0.0.1:8080".into()),
        dns_listen: Some("127.0.0.1:53".into()),
        ..Options::default()
    });
    for node in ["gz-01", "hk-01", "kr-01"] {
        let mut patch = json!({"hostname": format!("{node}.rum.test")});
        if node == RUM_NODE {
            patch["auth_token"] = json!(RUM_NODE_TOKEN);
        }
        let (s, v) = net.in_edge(|| d.http("PATCH", &format!("/api/v1/nodes/{node}"), Some(patch), &[]));
        assert_eq!(s, 200, "{v}");
    }
    let origin = net.in_edge(start_origin);
    let edge = net.in_edge(|| {
        start_edge(&format!(
            "listen_http = \"{RUM_EDGE}:80\"\nnode_name = \"{RUM_NODE}\"\ncontrol_url = \"http://{}\"\n\
             agent_token = \"{RUM_NODE_TOKEN}\"\nheartbeat_secs = 1\nconfig_poll_secs = 3600\n\
             [[site]]\nhost = \"cdn.rum.test\"\norigin = \"http://127.0.0.1:{origin}\"\ncache_ttl_secs = 0\n",
            d.api
        ))
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    while net.in_edge(|| std::net::TcpStream::connect((RUM_EDGE, 80))).is_err() {
        assert!(Instant::now() < deadline, "lagran-edge did not listen on {RUM_EDGE}:80\n{}", edge.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    (d, edge)
}

/// Forty beacons from the browser's /24, forged every way a page could: a
/// body naming another subnet, forwarding headers naming other clients, a
/// node not offered, absurd times; well-formed ones name `target` with times
/// near the maximum. Returns how many the edge took (202).
fn flood(net: &RumNet, target: &str) -> u64 {
    let mut accepted = 0;
    for i in 0..40 {
        let (body, headers): (String, Vec<(&str, &str)>) = match i % 5 {
            0 => (
                format!(r#"{{"client_subnet":"123.112.0.0/24","timings":[{{"node":"{target}","samples_ms":[1]}}]}}"#),
                vec![],
            ),
            1 => (r#"{"timings":[{"node":"bj-09","samples_ms":[1]}]}"#.to_owned(), vec![]),
            2 => (format!(r#"{{"timings":[{{"node":"{target}","samples_ms":[1e12,-5]}}]}}"#), vec![]),
            _ => (
                format!(r#"{{"timings":[{{"node":"{target}","samples_ms":[{}]}}]}}"#, 9_000 + i),
                vec![("x-forwarded-for", "123.112.0.7"), ("x-real-ip", "8.8.8.8")],
            ),
        };
        match forged_beacon(net, &body, &headers) {
            202 => accepted += 1,
            422 | 429 => {}
            other => panic!("beacon {i}: status {other}"),
        }
    }
    accepted
}

#[test]
fn a_browser_beacon_reaches_the_real_matrix_as_rum_and_a_forged_flood_moves_nothing_else() {
    if !have_browser("steering_netem rum") || !have_tool("ip", "steering_netem rum") {
        return;
    }
    let net = RumNet::create();
    let (d, edge) = start_rum_side(&net);
    let started = Instant::now();
    let others = ["123.112.0.0/24", "8.8.8.0/24"];
    for subnet in others.into_iter().chain([BROWSER_NET]) {
        assert!(row(&net, &d, subnet).is_empty(), "{subnet} is measured by nobody yet");
    }

    assert_eq!(browse(&net), "sent", "the script's outcome\n{}", edge.log());
    // The browser's timings, forwarded by the edge, in the real matrix with source `rum`.
    let timed = wait_row(&net, &d, &edge, "the browser's rum timings", |r| {
        let rum = r.values().filter(|(_, src)| src.iter().any(|s| s == "rum")).count();
        (rum >= 2).then(|| r.clone())
    });
    let only_rum: Vec<&String> =
        timed.iter().filter(|(n, (_, src))| *n != RUM_NODE && src == &["rum"]).map(|(n, _)| n).collect();
    assert!(!only_rum.is_empty(), "a candidate besides the edge's own node, timed by the browser only: {timed:?}");
    let target = only_rum[0].clone();

    let accepted = flood(&net, &target);
    // The browser's beacon took one of the bucket's tokens; the rest refill at the rate.
    let refill = started.elapsed().as_secs() * BEACONS_PER_MINUTE / 60 + 1;
    assert!(accepted >= 1, "well-formed beacons for the browser's own /24 are taken while the bucket lasts");
    assert!(accepted < BEACONS_PER_MINUTE + refill, "{accepted} of 40 forged beacons accepted after the browser's");
    let want = timed[&target].0 + accepted;
    wait_row(&net, &d, &edge, "the accepted beacons in the matrix", |r| (r[&target].0 >= want).then_some(()));
    std::thread::sleep(Duration::from_millis(2500));
    let settled = row(&net, &d, BROWSER_NET);
    assert_eq!(settled[&target].0, want, "exactly the accepted beacons, for the browser's own /24: {settled:?}");
    for (node, (samples, _)) in &timed {
        if *node != target && node != RUM_NODE {
            assert_eq!(settled[node].0, *samples, "{node} was named by no accepted beacon");
        }
    }
    assert!(settled.keys().all(|n| n != "bj-09"), "no node outside the candidates: {settled:?}");
    for subnet in others {
        assert!(row(&net, &d, subnet).is_empty(), "the flood reached {subnet}");
    }
}
