//! The control API over real HTTP: the seed's schedule shape, node CRUD,
//! errors that name the field, tokens, metrics.

use serde_json::json;

use crate::support::{Daemon, Options};

#[test]
fn schedule_has_the_seed_shape_and_numbers() {
    let d = Daemon::start(Options::default());
    let (s, v) = d.get("/api/v1/schedule?domain=edge.lagran.net&subnet=58.60.0.0/24");
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["domain"], "edge.lagran.net");
    assert_eq!(v["ttl"], 30);
    assert_eq!(v["client"], json!({"country": "CN", "province": "广东", "city": "深圳", "isp": "电信"}));
    assert_eq!(v["primary"]["name"], "gz-01");
    assert_eq!(v["primary"]["public_ip"], "203.0.113.21");
    assert_eq!(v["primary"]["score"], 233);
    assert_eq!(v["primary"]["reason"], "same-province same-city same-isp");
    assert_eq!(v["backup"]["name"], "hk-01");
    let scores: Vec<(String, i64)> = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["score"].as_i64().unwrap()))
        .collect();
    assert_eq!(scores, vec![("gz-01".into(), 233), ("hk-01".into(), 115), ("kr-01".into(), 93)]);

    // explicit tuple overrides (country/province/city/isp in the query win over
    // the geo lookup; for DNS plugins and tests)
    let (_, v) = d.get("/api/v1/schedule?domain=edge.lagran.net&ip=8.8.8.8&province=%E5%B9%BF%E4%B8%9C%E7%9C%81");
    assert_eq!(v["client"]["province"], "广东");
    assert_eq!(v["primary"]["name"], "gz-01", "{v}");
    assert_eq!(v["primary"]["score"], 168, "weight 100 + same-province 80 - load 12: {v}");
}

#[test]
fn no_eligible_node_gives_nulls_and_a_note() {
    let d = Daemon::start(Options::default());
    for n in ["gz-01", "hk-01", "kr-01"] {
        let (s, _) = d.http("DELETE", &format!("/api/v1/nodes/{n}"), None, &[]);
        assert_eq!(s, 204);
    }
    let (s, v) = d.get("/api/v1/schedule?domain=edge.lagran.net&ip=1.2.3.4");
    assert_eq!(s, 200);
    assert!(v["primary"].is_null() && v["backup"].is_null(), "{v}");
    assert!(v["note"].as_str().is_some_and(|n| !n.is_empty()), "{v}");
}

#[test]
fn node_crud_and_errors_that_name_the_field() {
    let d = Daemon::start(Options::default());
    let (s, v) = d.http(
        "POST",
        "/api/v1/nodes",
        Some(json!({"name": "sh-01", "public_ip": "203.0.113.31", "country": "CN", "province": "上海", "city": "上海", "isp": "联通", "weight": 90, "pool": "pool-a"})),
        &[],
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["name"], "sh-01");
    let (s, v) = d.get("/api/v1/nodes/sh-01");
    assert_eq!(s, 200);
    assert_eq!(v["province"], "上海");
    let (s, list) = d.get("/api/v1/nodes");
    assert_eq!(s, 200);
    assert_eq!(list.as_array().unwrap().len(), 4);

    let (s, v) = d.http("POST", "/api/v1/nodes", Some(json!({"name": "sh-01"})), &[]);
    assert_eq!(s, 409, "duplicate name: {v}");
    let (s, v) = d.http("POST", "/api/v1/nodes", Some(json!({"name": "x1", "public_ip": "not-an-ip"})), &[]);
    assert!((400..500).contains(&s), "{v}");
    assert_eq!(v["field"], "public_ip", "{v}");
    let (s, v) = d.http("PATCH", "/api/v1/nodes/sh-01", Some(json!({"memory_usage": 250})), &[]);
    assert!((400..500).contains(&s));
    assert_eq!(v["field"], "memory_usage", "{v}");
    let (s, v) = d.http("PATCH", "/api/v1/nodes/sh-01", Some(json!({"colour": "blue"})), &[]);
    assert!((400..500).contains(&s));
    assert_eq!(v["field"], "colour", "{v}");
    // nothing half-written: the node is unchanged
    let (_, v) = d.get("/api/v1/nodes/sh-01");
    assert_eq!(v["memory_usage"], 0.0);
    let (s, _) = d.http("PATCH", "/api/v1/nodes/nope", Some(json!({"weight": 1})), &[]);
    assert_eq!(s, 404);

    let (s, v) = d.http("PATCH", "/api/v1/nodes/sh-01", Some(json!({"public_ip": null})), &[]);
    assert_eq!(s, 200, "{v}");
    assert!(v["public_ip"].is_null(), "null clears: {v}");
    let (s, _) = d.http("DELETE", "/api/v1/nodes/sh-01", None, &[]);
    assert_eq!(s, 204);
    let (s, _) = d.get("/api/v1/nodes/sh-01");
    assert_eq!(s, 404);
    let (s, v) = d.get("/api/v1/schedule?subnet=58.60.0.0/24");
    assert_eq!(s, 422, "{v}");
    assert_eq!(v["field"], "domain");
    let (s, v) = d.get("/api/v1/schedule?domain=edge.lagran.net&subnet=banana");
    assert_eq!(v["field"], "subnet", "{s} {v}");
}

#[test]
fn tokens_guard_reads_and_writes() {
    let d = Daemon::start(Options {
        env: vec![
            ("ADMIN_TOKEN".into(), "admin-secret-0123456".into()),
            ("AGENT_TOKEN".into(), "agent-secret-0123456".into()),
        ],
        ..Options::default()
    });
    let path = "/api/v1/schedule?domain=edge.lagran.net&ip=1.2.3.4";
    assert_eq!(d.get(path).0, 401, "reads need the agent token");
    assert_eq!(d.http("GET", path, None, &[("x-lagran-agent-token", "wrong")]).0, 401);
    assert_eq!(d.http("GET", path, None, &[("x-lagran-agent-token", "agent-secret-0123456")]).0, 200);
    let body = Some(json!({"weight": 5}));
    assert_eq!(d.http("PATCH", "/api/v1/nodes/gz-01", body.clone(), &[]).0, 401, "writes need the admin token");
    assert_eq!(
        d.http("PATCH", "/api/v1/nodes/gz-01", body.clone(), &[("authorization", "Bearer agent-secret-0123456")]).0,
        401,
        "the agent token does not write"
    );
    assert_eq!(
        d.http("PATCH", "/api/v1/nodes/gz-01", body, &[("authorization", "Bearer admin-secret-0123456")]).0,
        200
    );
    assert_eq!(d.get("/healthz").0, 200, "healthz is open");
}

#[test]
fn metrics_and_healthz() {
    let d = Daemon::start(Options::default());
    let (s, v) = d.get("/healthz");
    assert_eq!(s, 200);
    assert_eq!(v["status"], "ok");
    let _ = d.dig(&["edge.lagran.net", "A"]);
    let (s, v) = d.get("/metrics");
    assert_eq!(s, 200);
    let text = v.as_str().expect("metrics are text");
    assert!(text.contains("lagran_route_table_version "), "{text}");
    assert!(text.contains("lagran_nodes{status=\"online\"} 3"), "{text}");
    assert!(text.contains("lagran_dns_"), "DNS counters are exported: {text}");
}

#[test]
fn pools_and_domains_through_the_api() {
    let d = Daemon::start(Options::default());
    let (s, v) = d.http("PATCH", "/api/v1/nodes/kr-01", Some(json!({"pool": "pool-a"})), &[]);
    assert_eq!(s, 200, "{v}");
    let (s, v) = d.http(
        "PUT",
        "/api/v1/domains/pool-a.edge.lagran.net",
        Some(json!({"zone": "edge.lagran.net", "pool": "pool-a", "ttl": 20})),
        &[],
    );
    assert_eq!(s, 200, "{v}");
    let r = d.dig(&["pool-a.edge.lagran.net", "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.23"], "pool-a holds only kr-01\n{}", r.text);
    assert_eq!(r.answer[0].ttl, 20);
    let (s, v) = d.http("PUT", "/api/v1/domains/x.other.net", Some(json!({"zone": "edge.lagran.net"})), &[]);
    assert!((400..500).contains(&s), "{v}");
    assert_eq!(v["field"], "zone");
}

/// `curl -s -w '\n%{http_code}' -X METHOD URL -H …`: `(status, body)`.
fn curl(method: &str, url: &str, headers: &[&str]) -> (u16, String) {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "--max-time", "5", "-w", "\n%{http_code}", "-X", method, url]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.output().expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("curl printed the status");
    (code.parse().expect("a status code"), body.to_string())
}

/// The open (token-less, loopback) API cannot be driven by a web page the
/// operator visits: a rebound DNS name or a cross-site Origin gets 403.
#[test]
fn the_open_api_refuses_dns_rebinding_and_cross_site_requests() {
    if !crate::support::have_tool("curl", "browser_guard") {
        return;
    }
    let d = Daemon::start(Options::default());
    let url = format!("http://{}/api/v1/nodes/gz-01", d.api);
    let patch = ["content-type: text/plain", "Host: rebind.evil.example"];
    let (s, body) = curl("PATCH", &url, &patch);
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("DNS rebinding"), "the refusal says why: {body}");
    let cross = ["Origin: http://evil.example"];
    let (s, body) = curl("DELETE", &url, &cross);
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("Origin"), "{body}");
    let (s, v) = d.get("/api/v1/nodes/gz-01");
    assert_eq!((s, v["name"].as_str()), (200, Some("gz-01")), "nothing was deleted");
    // The API's own pages (same origin) and plain loopback clients still work.
    let same = [format!("Origin: http://{}", d.api)];
    let (s, body) = curl("GET", &url, &[same[0].as_str()]);
    assert_eq!(s, 200, "{body}");
    let (s, body) = curl("GET", &format!("http://localhost:{}/healthz", d.api.port()), &[]);
    assert_eq!(s, 200, "{body}");
}
