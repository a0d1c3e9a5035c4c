//! The same daemon on PostgreSQL (a throwaway server started by the testkit).

use serde_json::json;

use crate::support::{Daemon, Options, have_tool};
use lagran::testkit::TempPostgres;

#[test]
fn serve_on_postgres_answers_and_follows_patches() {
    let Some(pg) = TempPostgres::shared_or_skip("serve_on_postgres") else { return };
    if !have_tool("dig", "serve_on_postgres") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = rt.block_on(pg.fresh_database());
    let d = Daemon::start(Options { database_url: Some(url.clone()), ..Options::default() });
    let q = ["edge.lagran.net", "A", "+subnet=58.60.0.0/24"];
    let r = d.dig(&q);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "{}\n{}", r.text, d.log());
    let (s, v) = d.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})), &[]);
    assert_eq!(s, 200, "{v}");
    assert_eq!(d.dig(&q).answers("A"), vec!["203.0.113.22"]);
    let (s, v) = d.http(
        "POST",
        "/api/v1/nodes",
        Some(json!({"name": "pg-01", "public_ip": "203.0.113.40", "weight": 1000})),
        &[],
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(d.dig(&q).answers("A"), vec!["203.0.113.40"], "weight 1000 wins everywhere");
    let (s, v) = d.http("POST", "/api/v1/nodes", Some(json!({"name": "pg-01"})), &[]);
    assert_eq!(s, 409, "{v}");
    drop(d);
    // the data survives a restart on the same database
    let d = Daemon::start(Options { database_url: Some(url), ..Options::default() });
    let (s, v) = d.get("/api/v1/nodes/pg-01");
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "online");
    let (_, v) = d.get("/api/v1/nodes/gz-01");
    assert_eq!(v["status"], "offline", "demo install does not overwrite operator changes");
}
