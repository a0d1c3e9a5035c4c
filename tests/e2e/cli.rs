//! The operator commands against a running daemon.

use crate::support::{Daemon, Options, lagran_cli};

#[test]
fn explain_prints_the_ranked_decision_with_reasons() {
    let d = Daemon::start(Options::default());
    let (ok, out, err) = lagran_cli(&d, &["explain", "--subnet", "58.60.0.0/24"]);
    assert!(ok, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.contains("203.0.113.")).collect();
    assert!(rows[0].contains("gz-01") && rows[0].contains("233"), "gz-01 first with 233:\n{out}");
    assert!(rows[1].contains("hk-01") && rows[1].contains("115"), "hk-01 second with 115:\n{out}");
    assert!(rows[2].contains("kr-01") && rows[2].contains("93"), "kr-01 third with 93:\n{out}");
    assert!(out.contains("same-province same-city same-isp"), "{out}");
    assert!(out.contains("广东") && out.contains("电信"), "the client's partition is shown:\n{out}");
    let (ok, json, err) = lagran_cli(&d, &["explain", "--ip", "8.8.8.8", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("--json prints JSON");
    assert_eq!(v["primary"]["name"], "hk-01");
    let (ok, _, err) = lagran_cli(&d, &["explain"]);
    assert!(!ok && err.contains("--ip"), "explain without a client says what it needs: {err}");
}

#[test]
fn rules_routes_and_monitor_through_the_api() {
    let d = Daemon::start(Options::default());
    let (ok, out, err) = lagran_cli(&d, &["rule", "add", "--kind", "manual", "--node", "kr-01", "--province", "广东"]);
    assert!(ok, "{err}");
    assert!(out.contains("\"kind\": \"manual\""), "{out}");
    let (ok, out, _) = lagran_cli(&d, &["rule", "list"]);
    assert!(ok && out.contains("kr-01") && out.contains("province=广东"), "{out}");
    let r = d.dig(&["edge.lagran.net", "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.23"], "{}", r.text);
    let (ok, _, err) = lagran_cli(&d, &["rule", "add", "--kind", "canary", "--node", "nope", "--percent", "5"]);
    assert!(!ok && err.contains("node"), "a bad rule names the field: {err}");

    let (ok, out, err) = lagran_cli(&d, &["node", "set", "hk-01", "weight=500"]);
    assert!(ok, "{err}");
    assert!(out.contains("\"weight\": 500"), "{out}");

    let (ok, out, err) = lagran_cli(&d, &["routes", "show"]);
    assert!(ok, "{err}");
    assert!(out.contains("\"version\""), "{out}");

    let ns = d.dns.to_string();
    let (ok, out, err) = lagran_cli(&d, &["monitor", "--ns", &ns]);
    assert!(ok, "{err}");
    let line = out.lines().find(|l| l.starts_with(&ns)).unwrap_or_else(|| panic!("a row for {ns}:\n{out}"));
    assert!(line.ends_with("ok"), "{out}");
    assert!(line.split_whitespace().nth(2) == Some("0"), "the single-process NS is 0 versions behind:\n{out}");
}
