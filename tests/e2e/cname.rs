//! CNAME scheduling end to end (for content providers whose own authoritative
//! servers cannot do ECS): a domain with
//! `answer_mode = "cname"` answers `CNAME <hostname of the chosen node>` and,
//! the hostname lying in the served zone, its address; node hostnames answer A.

use std::time::Duration;

use serde_json::json;

use crate::support::{Daemon, Geo, Options, have_tool, lagran_cli, tools_required, workspace_root};

const CDN: &str = "cdn.edge.lagran.net";

/// Gives every demo node a hostname in the zone and puts `cdn.<zone>` in CNAME mode.
fn cname_mode(d: &Daemon) {
    for node in ["gz-01", "hk-01", "kr-01"] {
        let body = json!({ "hostname": format!("{node}.edge.lagran.net") });
        let (s, v) = d.http("PATCH", &format!("/api/v1/nodes/{node}"), Some(body), &[]);
        assert_eq!(s, 200, "PATCH hostname of {node} is accepted: {v}");
    }
    let body = json!({ "zone": "edge.lagran.net", "answer_mode": "cname" });
    let (s, v) = d.http("PUT", &format!("/api/v1/domains/{CDN}"), Some(body), &[]);
    assert_eq!(s, 200, "PUT {CDN} in CNAME mode is accepted: {v}");
}

/// The `served` object of `/api/v1/schedule` (or `lagran explain --json`) says what `dig` got.
fn agrees_with_dig(served: &serde_json::Value, dig: &crate::support::Dig, scope: u8) {
    let cname = dig.answers("CNAME").first().map(|c| c.trim_end_matches('.').to_string());
    assert_eq!(served["cname"].as_str().map(str::to_string), cname, "the CNAME dig got: {served}");
    let a: Vec<String> = served["a"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert_eq!(a, dig.answers("A"), "the A records dig got: {served}");
    assert_eq!(served["scope"], scope, "the scope dig got: {served}");
}

fn shenzhen_telecom_gets_the_cname_of_gz01(geo: Geo) {
    let d = Daemon::start(Options { geo, ..Options::default() });
    cname_mode(&d);
    let q = [CDN, "A", "+subnet=58.60.0.0/24"];
    let r = d.dig_until(&q, Duration::from_secs(10), |r| !r.answers("CNAME").is_empty());
    assert_eq!(r.status, "NOERROR", "{}", r.text);
    assert!(r.flags.iter().any(|f| f == "aa"), "authoritative: {}", r.text);
    assert_eq!(r.answer[0].rtype, "CNAME", "the CNAME comes first (RFC 1034 §4.3.2): {}", r.text);
    assert_eq!(r.answers("CNAME"), vec!["gz-01.edge.lagran.net."], "Shenzhen Telecom → gz-01: {}", r.text);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "then gz-01's own A record: {}", r.text);
    assert_eq!(r.answer[1].name, "gz-01.edge.lagran.net.", "owned by the hostname: {}", r.text);
    let ecs = r.ecs.clone().expect("ECS echoed");
    let scope: u8 = ecs.rsplit('/').next().unwrap().parse().unwrap();
    assert!(scope > 0 && scope <= 24, "the scope is the partition's prefix, as for A: {ecs}");

    // `/api/v1/schedule` and `lagran explain` show what dig got: the CNAME, its A record, the scope.
    let (s, v) = d.get(&format!("/api/v1/schedule?domain={CDN}&subnet=58.60.0.0/24"));
    assert_eq!(s, 200, "{v}");
    agrees_with_dig(&v["served"], &r, scope);
    let (ok, out, err) = lagran_cli(&d, &["explain", "--subnet", "58.60.0.0/24", "--domain", CDN, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("explain --json");
    agrees_with_dig(&v["served"], &r, scope);
    let (ok, out, err) = lagran_cli(&d, &["explain", "--subnet", "58.60.0.0/24", "--domain", CDN]);
    assert!(ok && out.contains("CNAME gz-01.edge.lagran.net., A 203.0.113.21"), "{out}{err}");

    // A node hostname may not take a name the zone answers otherwise (409), from either side.
    for taken in [CDN, "edge.lagran.net", "ns1.edge.lagran.net", "gz-01.edge.lagran.net"] {
        let body = json!({ "hostname": taken });
        let (s, v) = d.http("PATCH", "/api/v1/nodes/hk-01", Some(body), &[]);
        assert_eq!(s, 409, "hk-01 may not take {taken}: {v}");
        assert_eq!(v["field"], "hostname", "{v}");
    }
    let body = json!({ "zone": "edge.lagran.net" });
    let (s, v) = d.http("PUT", "/api/v1/domains/gz-01.edge.lagran.net", Some(body), &[]);
    assert_eq!(s, 409, "a scheduled name may not take gz-01's hostname: {v}");
    assert!(v["error"].as_str().unwrap_or_default().contains("gz-01"), "the message names the node: {v}");

    // QTYPE CNAME: the CNAME alone.
    let r = d.dig(&[CDN, "CNAME", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answers("CNAME"), vec!["gz-01.edge.lagran.net."], "{}", r.text);
    assert_eq!(r.answer.len(), 1, "no chase for QTYPE CNAME: {}", r.text);
    // The hostname itself answers A, the same for everyone.
    let r = d.dig(&["gz-01.edge.lagran.net", "A", "+subnet=123.112.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "{}", r.text);
    // The apex stays in address mode, and a zone apex cannot be a CNAME.
    let r = d.dig(&["edge.lagran.net", "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "{}", r.text);
    assert!(r.answers("CNAME").is_empty(), "{}", r.text);
    let body = json!({ "zone": "edge.lagran.net", "answer_mode": "cname" });
    let (s, v) = d.http("PUT", "/api/v1/domains/edge.lagran.net", Some(body), &[]);
    assert_eq!(s, 422, "a CNAME cannot live at a zone apex: {v}");
}

#[test]
fn cname_mode_answers_the_chosen_nodes_hostname() {
    if !have_tool("dig", "cname") {
        return;
    }
    shenzhen_telecom_gets_the_cname_of_gz01(Geo::Small);
}

#[test]
fn cname_mode_with_the_real_database() {
    let path = workspace_root().join("data/ip2region.xdb");
    if !path.is_file() {
        assert!(!tools_required(), "{} is missing: run scripts/fetch-geoip.sh", path.display());
        eprintln!("note: skipped, no real geo database at {}", path.display());
        return;
    }
    if !have_tool("dig", "cname_real") {
        return;
    }
    shenzhen_telecom_gets_the_cname_of_gz01(Geo::Real(path));
}
