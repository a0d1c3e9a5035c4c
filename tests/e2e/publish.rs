//! What the control plane publishes: nothing when nothing changed (identical
//! heartbeats publish nothing), and the staleness rule: a table is stale when the
//! control plane stopped confirming it for DNS_STALE_SECS, not when it is old.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Daemon, Options, have_tool};

const AGENT: &str = "e2e-agent-token-0123456789abcdef";
const PROVINCES: [&str; 8] = ["广东", "北京", "上海", "浙江", "江苏", "四川", "湖北", "山东"];

/// `(version, confirmed_ms_ago)` from `_version.edge.lagran.net TXT`.
fn version_txt(d: &Daemon) -> (u64, i64) {
    let r = d.dig(&["_version.edge.lagran.net", "TXT"]);
    let txt = r.answers("TXT").join(" ").replace('"', "");
    let field = |k: &str| -> Option<i64> {
        txt.split_whitespace().find_map(|w| w.strip_prefix(k)).and_then(|v| v.parse().ok())
    };
    let version = field("version=").unwrap_or_else(|| panic!("no version= in _version TXT: {}", r.text));
    let confirmed =
        field("confirmed_ms_ago=").unwrap_or_else(|| panic!("no confirmed_ms_ago= in _version TXT: {}", r.text));
    (version as u64, confirmed)
}

fn metric(d: &Daemon, name: &str) -> f64 {
    let (_, m) = d.get("/metrics");
    let text = m.as_str().unwrap_or_default().to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

/// Waits (bounded) until `_version` reports the same version for `quiet`.
fn settled_version(d: &Daemon, quiet: Duration, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    let (mut v, _) = version_txt(d);
    let mut since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let (now, _) = version_txt(d);
        if now != v {
            v = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return v;
        }
    }
    panic!("the route-table version kept moving for {within:?}");
}

fn heartbeat_all(d: &Daemon, nodes: usize) {
    let hb = json!({"cpu_usage": 20.0, "memory_usage": 30.0, "bandwidth_mbps": 100.0, "conns": 50});
    for i in 0..nodes {
        let (s, v) = d.http(
            "POST",
            &format!("/api/v1/nodes/n{i:04}/heartbeat"),
            Some(hb.clone()),
            &[("x-lagran-agent-token", AGENT)],
        );
        assert_eq!(s, 200, "heartbeat of n{i:04}: {v}");
    }
}

#[test]
fn a_thousand_identical_heartbeats_publish_no_version() {
    if !have_tool("dig", "identical_heartbeats") {
        return;
    }
    const NODES: usize = 1_000;
    let d = Daemon::start(Options { env: vec![("AGENT_TOKEN".into(), AGENT.into())], ..Options::default() });
    for i in 0..NODES {
        let node = json!({
            "name": format!("n{i:04}"),
            "public_ip": format!("198.18.{}.{}", i / 250, i % 250 + 1),
            "country": "CN",
            "province": PROVINCES[i % PROVINCES.len()],
            "isp": "电信",
            "weight": 100,
        });
        let (s, v) = d.http("POST", "/api/v1/nodes", Some(node), &[]);
        assert_eq!(s, 201, "creating node {i}: {v}");
    }
    // The first heartbeats change the load (from nothing): they may publish.
    heartbeat_all(&d, NODES);
    let before = settled_version(&d, Duration::from_secs(2), Duration::from_secs(60));
    let recomputes_before = metric(&d, "lagran_recomputes_total");

    // The same heartbeats again: they trigger recomputes (folded together), none publishes.
    heartbeat_all(&d, NODES);
    let after = settled_version(&d, Duration::from_secs(2), Duration::from_secs(60));
    let recomputes_after = metric(&d, "lagran_recomputes_total");
    assert!(recomputes_after > recomputes_before, "the heartbeats did trigger recomputes");
    assert_eq!(after, before, "1 000 identical heartbeats published no version (_version version= stays put)");
    let (_, v) = d.http("GET", "/api/v1/routes", None, &[("x-lagran-agent-token", AGENT)]);
    assert_eq!(v["version"].as_u64(), Some(before), "the control plane agrees: {v}");
}

#[test]
fn a_quiet_table_does_not_go_stale_in_serve() {
    if !have_tool("dig", "quiet_table") {
        return;
    }
    let env = vec![
        ("DNS_STALE_SECS".to_string(), "2".to_string()),
        ("DNS_FALLBACK_IP".to_string(), "192.0.2.99".to_string()),
    ];
    let d = Daemon::start(Options { env, ..Options::default() });
    let shenzhen = ["edge.lagran.net", "A", "+subnet=58.60.0.0/24"];
    let (first, _) = version_txt(&d);
    std::thread::sleep(Duration::from_millis(3_500));
    assert_eq!(
        d.dig(&shenzhen).answers("A"),
        vec!["203.0.113.21"],
        "a quiet table older than DNS_STALE_SECS still answers"
    );
    let (version, confirmed) = version_txt(&d);
    assert_eq!(version, first, "nothing changed, nothing published");
    assert!((0..2_000).contains(&confirmed), "the running scheduler keeps confirming the table: {confirmed} ms ago");
    assert_eq!(metric(&d, "lagran_route_table_stale"), 0.0);
}
