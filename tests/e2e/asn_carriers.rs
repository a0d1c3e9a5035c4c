//! The ASN → carrier entries through the API, on SQLite and PostgreSQL: read with
//! either token, written with the admin token, laid over `[geo.asn_carriers]` and
//! the built-in table, applied at the next geo reload without a restart.

use serde_json::{Value, json};

use crate::support::{Daemon, Options};
use lagran::testkit::TempPostgres;

const ADMIN: (&str, &str) = ("authorization", "Bearer carriers-admin-secret");
const AGENT: (&str, &str) = ("x-lagran-agent-token", "carriers-agent-secret");

/// The region the daemon gives `ip` (the merged data's region text: fields, sources).
fn region(d: &Daemon, ip: &str) -> String {
    let (s, v) = d.http("GET", &format!("/api/v1/schedule?domain=edge.lagran.net&ip={ip}"), None, &[AGENT]);
    assert_eq!(s, 200, "{v}");
    v["region"].as_str().unwrap_or_default().to_string()
}

fn reload(d: &Daemon) {
    let (s, v) = d.http("POST", "/api/v1/geo/reload", Some(json!({"force": true})), &[ADMIN]);
    assert_eq!(s, 200, "{v}");
}

fn carriers_through_the_api(database_url: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let asn = dir.path().join("asn-ipv4.csv");
    std::fs::write(&asn, "100.0.0.0,100.0.255.255,64500,Example Net\n100.1.0.0,100.1.255.255,64501,Other Net\n")
        .unwrap();
    let d = Daemon::start(Options {
        database_url,
        config: Some("[geo.asn_carriers]\nAS64501 = \"TOML Carrier\"\n".into()),
        env: vec![
            ("GEOIP_ASN_PATH".into(), asn.display().to_string()),
            ("ADMIN_TOKEN".into(), ADMIN.1.trim_start_matches("Bearer ").into()),
            ("AGENT_TOKEN".into(), AGENT.1.into()),
        ],
        ..Options::default()
    });
    assert!(region(&d, "100.0.0.1").contains("|Example Net|"), "the organisation name: {}", region(&d, "100.0.0.1"));
    assert!(region(&d, "100.1.0.1").contains("|TOML Carrier|"), "{}", region(&d, "100.1.0.1"));

    let body = json!({"carrier": "Example Carrier", "note": "ticket 7"});
    assert_eq!(d.http("PUT", "/api/v1/geo/asn-carriers/AS64500", Some(body.clone()), &[]).0, 401);
    assert_eq!(d.http("PUT", "/api/v1/geo/asn-carriers/AS64500", Some(body.clone()), &[AGENT]).0, 401);
    let (s, v) = d.http("PUT", "/api/v1/geo/asn-carriers/AS64500", Some(body.clone()), &[ADMIN]);
    assert_eq!(
        (s, &v["asn"], &v["carrier"], &v["updated_by"]),
        (201, &json!(64500), &json!("Example Carrier"), &json!("api"))
    );
    assert_eq!(d.http("PUT", "/api/v1/geo/asn-carriers/64500", Some(body), &[ADMIN]).0, 200, "replaced");
    // The API's entry wins over the TOML one.
    let (s, _) = d.http("PUT", "/api/v1/geo/asn-carriers/64501", Some(json!({"carrier": "API Carrier"})), &[ADMIN]);
    assert_eq!(s, 201);
    let (s, v) = d.http("PUT", "/api/v1/geo/asn-carriers/ASx", Some(json!({"carrier": "x"})), &[ADMIN]);
    assert_eq!((s, &v["field"]), (422, &json!("asn")), "{v}");
    let (s, v) = d.http("PUT", "/api/v1/geo/asn-carriers/1", Some(json!({"carrier": "a|b"})), &[ADMIN]);
    assert_eq!((s, &v["field"]), (422, &json!("carrier")), "{v}");

    let (s, list) = d.http("GET", "/api/v1/geo/asn-carriers", None, &[AGENT]);
    assert_eq!(s, 200);
    let asns: Vec<&Value> = list.as_array().unwrap().iter().map(|e| &e["asn"]).collect();
    assert_eq!(asns, [&json!(64500), &json!(64501)]);
    let (s, v) = d.http("GET", "/api/v1/geo/asn-carriers/AS64500", None, &[AGENT]);
    assert_eq!((s, &v["note"]), (200, &json!("ticket 7")));

    // Stored, not yet applied: the serving data changes at the next reload.
    assert!(region(&d, "100.0.0.1").contains("|Example Net|"));
    reload(&d);
    let r = region(&d, "100.0.0.1");
    assert!(r.contains("|Example Carrier|") && r.contains("isp=asn-carriers"), "{r}");
    assert!(region(&d, "100.1.0.1").contains("|API Carrier|"), "{}", region(&d, "100.1.0.1"));

    // Deleting the API's entries brings back the TOML entry and the organisation name.
    for asn in ["AS64500", "64501"] {
        assert_eq!(d.http("DELETE", &format!("/api/v1/geo/asn-carriers/{asn}"), None, &[ADMIN]).0, 204);
    }
    assert_eq!(d.http("DELETE", "/api/v1/geo/asn-carriers/64500", None, &[ADMIN]).0, 404);
    assert_eq!(d.http("GET", "/api/v1/geo/asn-carriers/64500", None, &[AGENT]).0, 404);
    reload(&d);
    assert!(region(&d, "100.0.0.1").contains("|Example Net|"), "{}", region(&d, "100.0.0.1"));
    assert!(region(&d, "100.1.0.1").contains("|TOML Carrier|"), "{}", region(&d, "100.1.0.1"));
}

#[test]
fn asn_carriers_through_the_api_on_sqlite() {
    carriers_through_the_api(None);
}

#[test]
fn asn_carriers_through_the_api_on_postgres() {
    let Some(pg) = TempPostgres::shared_or_skip("asn_carriers_on_postgres") else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = rt.block_on(pg.fresh_database());
    carriers_through_the_api(Some(url));
}
