//! CNAME scheduling end to end (issue 13 item 3, seed 004 §4.3): a domain with
//! `answer_mode = "cname"` answers `CNAME <hostname of the chosen node>` and,
//! the hostname lying in the served zone, its address; node hostnames answer A.

use std::time::Duration;

use serde_json::json;

use crate::support::{Daemon, Geo, Options, have_tool, tools_required, workspace_root};

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
