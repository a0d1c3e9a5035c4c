//! Scheduling that operators can trust, end to end: probes, heartbeats,
//! rules, lines, rollback — observed through `dig` and the API.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Daemon, FakeEdge, Options, have_tool};

const ZONE: &str = "edge.lagran.net";
const SHENZHEN: [&str; 3] = [ZONE, "A", "+subnet=58.60.0.0/24"];

#[test]
fn a_probed_node_that_stops_loses_its_partitions_and_wins_them_back() {
    if !have_tool("dig", "probes") {
        return;
    }
    let mut a = FakeEdge::start(0);
    let b = FakeEdge::start(0);
    let d = Daemon::start(Options {
        demo: true,
        config: Some("[health]\ninterval_secs = 1\ntimeout_ms = 500\nfall = 3\nrise = 2\n".into()),
        ..Options::default()
    });
    for n in ["gz-01", "hk-01", "kr-01"] {
        d.http("DELETE", &format!("/api/v1/nodes/{n}"), None, &[]);
    }
    let mk = |name: &str, ip: &str, port: u16, weight: i64, province: &str| {
        json!({"name": name, "public_ip": ip, "agent_url": format!("http://127.0.0.1:{port}"), "weight": weight,
               "country": "CN", "province": province, "isp": "电信"})
    };
    assert_eq!(d.http("POST", "/api/v1/nodes", Some(mk("edge-a", "203.0.113.31", a.port, 100, "广东")), &[]).0, 201);
    assert_eq!(d.http("POST", "/api/v1/nodes", Some(mk("edge-b", "203.0.113.32", b.port, 100, "北京")), &[]).0, 201);
    assert_eq!(d.dig(&SHENZHEN).answers("A"), vec!["203.0.113.31"]);

    a.stop();
    let stopped = Instant::now();
    // 3 failed probes at 1 s intervals, plus one second.
    let r = d.dig_until(&SHENZHEN, Duration::from_secs(6), |r| r.answers("A") == vec!["203.0.113.32"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.32"], "edge-a's clients move to edge-b\n{}", d.log());
    let took = stopped.elapsed();
    assert!(
        took <= Duration::from_secs(4) + Duration::from_millis(900),
        "moved after {took:?}, not within 3 intervals + 1 s"
    );
    let (_, v) = d.get("/api/v1/schedule?domain=edge.lagran.net&subnet=58.60.0.0/24");
    assert!(v["excluded"].to_string().contains("probe"), "the explanation names the probe: {v}");

    let a2 = FakeEdge::start(a.port);
    let r = d.dig_until(&SHENZHEN, Duration::from_secs(6), |r| r.answers("A") == vec!["203.0.113.31"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.31"], "back after 2 successful probes\n{}", d.log());
    drop(a2);
}

#[test]
fn heartbeats_take_the_nodes_own_token_and_move_load() {
    let d = Daemon::start(Options::default());
    let (s, v) = d.http(
        "POST",
        "/api/v1/nodes",
        Some(json!({"name": "ag-01", "public_ip": "203.0.113.41", "auth_token": "node-secret-0123456789"})),
        &[],
    );
    assert_eq!(s, 201, "{v}");
    let hb = json!({"cpu_usage": 50.0, "memory_usage": 40.0, "bandwidth_mbps": 12.5, "conns": 7});
    assert_eq!(d.http("POST", "/api/v1/nodes/ag-01/heartbeat", Some(hb.clone()), &[]).0, 401);
    assert_eq!(
        d.http("POST", "/api/v1/nodes/ag-01/heartbeat", Some(hb.clone()), &[("x-lagran-agent-token", "wrong")]).0,
        401
    );
    let (s, v) = d.http(
        "POST",
        "/api/v1/nodes/ag-01/heartbeat",
        Some(hb),
        &[("x-lagran-agent-token", "node-secret-0123456789")],
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["cpu_usage"], 50.0);
    assert_eq!(v["conns"], 7);
    assert!(v["last_heartbeat_ms"].as_i64().is_some());
    let (s, v) = d.http(
        "POST",
        "/api/v1/nodes/ag-01/heartbeat",
        Some(json!({"cpu_usage": 500.0, "memory_usage": 1.0})),
        &[("x-lagran-agent-token", "node-secret-0123456789")],
    );
    assert!((400..500).contains(&s));
    assert_eq!(v["field"], "cpu_usage", "{v}");
}

#[test]
fn rules_through_the_api_reach_dig() {
    if !have_tool("dig", "rules") {
        return;
    }
    let d = Daemon::start(Options::default());
    let (s, rule) = d.http(
        "POST",
        "/api/v1/rules",
        Some(json!({"kind": "manual", "node": "kr-01", "province": "广东", "note": "maintenance"})),
        &[],
    );
    assert_eq!(s, 201, "{rule}");
    let r = d.dig(&SHENZHEN);
    assert_eq!(r.answers("A"), vec!["203.0.113.23"], "manual pin\n{}", r.text);
    assert_eq!(d.dig(&[ZONE, "A", "+subnet=8.8.8.0/24"]).answers("A"), vec!["203.0.113.22"], "others unaffected");
    let (s, _) = d.http("DELETE", &format!("/api/v1/rules/{}", rule["id"]), None, &[]);
    assert_eq!(s, 204);
    assert_eq!(d.dig(&SHENZHEN).answers("A"), vec!["203.0.113.21"]);

    let (s, _) = d.http("POST", "/api/v1/rules", Some(json!({"kind": "canary", "node": "kr-01", "percent": 100})), &[]);
    assert_eq!(s, 201);
    let r = d.dig(&[ZONE, "A", "+subnet=8.8.8.0/22"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.23"], "100 % canary\n{}", r.text);
    assert_eq!(r.ecs.as_deref(), Some("8.8.8.0/22/24"), "a split answer is valid for one /24\n{}", r.text);
    let (s, v) = d.http("POST", "/api/v1/rules", Some(json!({"kind": "canary", "node": "nope", "percent": 5})), &[]);
    assert!((400..500).contains(&s), "{v}");
    assert_eq!(v["field"], "node");
}

#[test]
fn lines_beat_geo_and_public_resolvers_need_force() {
    if !have_tool("dig", "lines") {
        return;
    }
    let d = Daemon::start(Options::default());
    let (s, v) = d.http(
        "PUT",
        "/api/v1/domains/edge.lagran.net",
        Some(json!({"zone": "edge.lagran.net", "origin_ip": "198.51.100.80"})),
        &[],
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) =
        d.http("PUT", "/api/v1/lines/spiders", Some(json!({"answer": "origin", "prefixes": ["58.60.0.0/20"]})), &[]);
    assert_eq!(s, 200, "{v}");
    let r = d.dig(&SHENZHEN);
    assert_eq!(r.answers("A"), vec!["198.51.100.80"], "the spider line answers the origin\n{}", r.text);
    assert_eq!(r.ecs.as_deref(), Some("58.60.0.0/24/20"));

    let (s, v) = d.http("PUT", "/api/v1/lines/bad", Some(json!({"answer": "origin", "prefixes": ["8.8.8.0/24"]})), &[]);
    assert_eq!(s, 409, "a public resolver prefix is refused: {v}");
    assert_eq!(v["field"], "prefixes");
    let (s, v) = d.http(
        "PUT",
        "/api/v1/lines/bad?force=true",
        Some(json!({"answer": "origin", "prefixes": ["8.8.8.0/24"]})),
        &[],
    );
    assert_eq!(s, 200, "forced: {v}");
}

#[test]
fn rollback_restores_the_previous_table_until_resumed() {
    if !have_tool("dig", "rollback") {
        return;
    }
    let d = Daemon::start(Options::default());
    d.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})), &[]);
    assert_eq!(d.dig(&SHENZHEN).answers("A"), vec!["203.0.113.22"]);
    let (s, v) = d.http("POST", "/api/v1/routes/rollback", None, &[]);
    assert_eq!(s, 200, "{v}");
    assert_eq!(d.dig(&SHENZHEN).answers("A"), vec!["203.0.113.21"], "the previous table is back");
    let (_, v) = d.get("/api/v1/routes");
    assert_eq!(v["frozen"], true);
    let (s, _) = d.http("POST", "/api/v1/routes/resume", None, &[]);
    assert_eq!(s, 200);
    assert_eq!(d.dig(&SHENZHEN).answers("A"), vec!["203.0.113.22"], "recomputes publish again");
}

#[test]
fn an_l4_probed_node_whose_port_closes_loses_its_partitions_and_wins_them_back() {
    if !have_tool("dig", "l4_probes") {
        return;
    }
    // Two nodes probed only at L4 (no agent_url): a TCP connect to public_ip:probe_port.
    let listen = |addr: &str| std::net::TcpListener::bind(addr).expect("a loopback listener for the L4 probe");
    let a = listen("127.0.0.1:0");
    let a_port = a.local_addr().unwrap().port();
    let b = listen("127.0.0.2:0");
    let b_port = b.local_addr().unwrap().port();
    let d = Daemon::start(Options {
        demo: true,
        config: Some("[health]\ninterval_secs = 1\ntimeout_ms = 500\nfall = 3\nrise = 2\n".into()),
        ..Options::default()
    });
    for n in ["gz-01", "hk-01", "kr-01"] {
        d.http("DELETE", &format!("/api/v1/nodes/{n}"), None, &[]);
    }
    let mk = |name: &str, ip: &str, port: u16, province: &str| {
        json!({"name": name, "public_ip": ip, "probe_port": port, "weight": 100,
               "country": "CN", "province": province, "isp": "电信"})
    };
    assert_eq!(d.http("POST", "/api/v1/nodes", Some(mk("l4-a", "127.0.0.1", a_port, "广东")), &[]).0, 201);
    assert_eq!(d.http("POST", "/api/v1/nodes", Some(mk("l4-b", "127.0.0.2", b_port, "北京")), &[]).0, 201);
    let r = d.dig_until(&SHENZHEN, Duration::from_secs(6), |r| r.answers("A") == vec!["127.0.0.1"]);
    assert_eq!(r.answers("A"), vec!["127.0.0.1"], "the Guangdong node serves Shenzhen\n{}", d.log());

    // The port closes: connects are refused; 3 failures take the node down.
    drop(a);
    let r = d.dig_until(&SHENZHEN, Duration::from_secs(10), |r| r.answers("A") == vec!["127.0.0.2"]);
    assert_eq!(r.answers("A"), vec!["127.0.0.2"], "l4-a's clients move to l4-b once its port is closed\n{}", d.log());
    let (_, v) = d.get("/api/v1/schedule?domain=edge.lagran.net&subnet=58.60.0.0/24");
    assert!(v["excluded"].to_string().contains("probe"), "the explanation names the probe: {v}");

    // The port opens again: 2 successes bring it back.
    let a2 = listen(&format!("127.0.0.1:{a_port}"));
    let r = d.dig_until(&SHENZHEN, Duration::from_secs(10), |r| r.answers("A") == vec!["127.0.0.1"]);
    assert_eq!(r.answers("A"), vec!["127.0.0.1"], "back after 2 successful connects\n{}", d.log());
    drop((a2, b));
}
