//! Steering by measured latency, end to end: RTT reports posted with the
//! agent token move a partition's `dig` answer to the faster node; `explain`
//! and `/api/v1/schedule` show the RTTs; the answer returns to the geo one
//! once the reports age out of the window.

use std::time::Duration;

use serde_json::json;

use crate::support::{Daemon, Options, have_tool};

const ZONE: &str = "edge.lagran.net";
const SHENZHEN: [&str; 3] = [ZONE, "A", "+subnet=58.60.0.0/24"];
const AGENT: &str = "steering-agent-token";

#[test]
fn measurements_move_a_partition_to_the_faster_node_and_ageing_brings_geo_back() {
    if !have_tool("dig", "steering") {
        return;
    }
    let d = Daemon::start(Options {
        config: Some(format!(
            "agent_token = \"{AGENT}\"\n[schedule]\nrecompute_secs = 1\n[steering]\nwindow_secs = 4\n"
        )),
        ..Options::default()
    });
    let agent = [("x-lagran-agent-token", AGENT)];
    let (s, v) =
        d.http("PUT", &format!("/api/v1/domains/{ZONE}"), Some(json!({"zone": ZONE, "steering": "latency"})), &[]);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["steering"], "latency");
    assert_eq!(d.dig(&SHENZHEN).answers("A"), vec!["203.0.113.21"], "no measurements: gz-01 by geo");

    let batch = json!({"measurements": [
        {"client_subnet": "58.60.0.0/24", "node": "gz-01", "rtt_ms": 85.0, "samples": 20, "source": "edge"},
        {"client_subnet": "58.60.1.0/24", "node": "hk-01", "rtt_ms": 9.0, "samples": 20, "source": "edge"},
    ]});
    let (s, v) = d.http("POST", "/api/v1/measurements", Some(batch.clone()), &agent);
    assert_eq!((s, &v), (200, &json!({"accepted": 2, "unlocated": 0})));
    let r = d.dig_until(&SHENZHEN, Duration::from_secs(3), |r| r.answers("A") == vec!["203.0.113.22"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "hk-01 is faster for Shenzhen\n{}", d.log());
    let scope = r.answers("A");
    assert!(!scope.is_empty());
    // Other partitions keep their geo answers.
    let (_, us) = d.http("GET", "/api/v1/schedule?domain=edge.lagran.net&subnet=8.8.8.0/24", None, &agent);
    assert_eq!(us["decided_by"], "geo", "{us}");

    let (_, v) = d.http("GET", "/api/v1/measurements?subnet=58.60.0.0/24", None, &agent);
    assert_eq!(v["nodes"][0]["node"], "hk-01", "{v}");
    assert_eq!(v["nodes"][0]["sources"], json!(["edge"]));
    let (_, v) = d.http("GET", "/api/v1/schedule?domain=edge.lagran.net&subnet=58.60.0.0/24", None, &agent);
    assert_eq!(v["decided_by"], "latency", "{v}");
    assert_eq!(v["primary"]["name"], "hk-01");
    assert_eq!((v["primary"]["rtt_ms"].clone(), v["primary"]["rtt_samples"].clone()), (json!(9.0), json!(20)));
    // explain asks the daemon: the operator's configuration carries its agent token.
    let run = std::process::Command::new(crate::support::lagran_bin())
        .args(["explain", "--subnet", "58.60.0.0/24"])
        .env("LAGRAN_API", format!("http://{}", d.api))
        .env("LAGRAN_CONFIG", d.config_path())
        .env_remove("AGENT_TOKEN")
        .env("RUST_LOG", "warn")
        .output()
        .expect("running lagran explain");
    let (out, err) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{err}");
    assert!(out.contains("via       the daemon"), "{out}");
    assert!(out.contains("rtt_ms 9.0 (20 samples)") && out.contains("rtt_ms 85.0"), "{out}");
    assert!(out.contains("decided   by latency"), "{out}");

    // Nothing reported for a window (4 s): the geo answer again.
    let r = d.dig_until(&SHENZHEN, Duration::from_secs(8), |r| r.answers("A") == vec!["203.0.113.21"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "the reports aged out\n{}", d.log());
    let (_, v) = d.http("GET", "/api/v1/schedule?domain=edge.lagran.net&subnet=58.60.0.0/24", None, &agent);
    assert_eq!(v["decided_by"], "geo", "{v}");
}
