//! `/api/v1/geo/suspects` against a real store and scheduler: measurements
//! posted through the API make a suspect, accepting it writes the override.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::api::auth::AGENT_TOKEN_HEADER;
use crate::api::{AppState, Auth};
use crate::model::Node;

const AGENT: &str = "the-agent-token";
const ADMIN: &str = "the-admin-token";

/// Shenzhen Telecom at 58.60.0.0/15, the US elsewhere.
fn geo() -> crate::geo::GeoDb {
    use crate::geo::{IpVersion, Xdb, write_xdb};
    let ip = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128;
    let ranges = vec![
        (0, ip("58.59.255.255"), "美国|0|0|0|0".to_string()),
        (ip("58.60.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
        (ip("58.62.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
    ];
    let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
    crate::geo::GeoDb::from_xdbs(Some(xdb), None)
}

fn node(name: &str, province: &str, city: &str) -> Node {
    let mut n = Node::new(name);
    (n.country, n.province, n.city, n.isp) = ("CN".into(), province.into(), city.into(), "电信".into());
    n
}

async fn router() -> axum::Router {
    let store = crate::store::Store::connect("sqlite::memory:").await.unwrap();
    store.create_node(&node("sz-01", "广东", "深圳"), None).await.unwrap();
    store.create_node(&node("bj-01", "北京", "北京"), None).await.unwrap();
    let scheduler = Arc::new(crate::scheduler::Scheduler::new(
        store.clone(),
        Default::default(),
        crate::health::HealthMonitor::new(Default::default()),
        geo(),
        crate::route_table::empty_shared(),
    ));
    let counters = Arc::new(crate::dns::counters::DnsCounters::new());
    let state = AppState {
        store,
        scheduler,
        dns: Arc::new(Default::default()),
        auth: Arc::new(Auth::new(Some(AGENT), Some(ADMIN))),
        metrics: Arc::new(crate::metrics::Metrics::new(counters)),
        public_resolvers: Arc::new(Vec::new()),
        geo_max_change_ratio: 0.5,
        console: Arc::new(crate::console::Console::new(Arc::new(crate::console::nshosts::NoNsHosts))),
        tasks: crate::supervisor::Supervisor::new(),
        api_url: "http://127.0.0.1:0".into(),
    };
    crate::api::endpoints::all(state).into_router()
}

/// `(status, body)`; `admin` sends the admin bearer token, else the agent token.
async fn call(r: &axum::Router, method: Method, uri: &str, admin: bool, body: Option<Value>) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri).header("host", "127.0.0.1");
    req = if admin {
        req.header("authorization", format!("Bearer {ADMIN}"))
    } else {
        req.header(AGENT_TOKEN_HEADER, AGENT)
    };
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let resp = r.clone().oneshot(req.header("content-type", "application/json").body(body).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn measure(r: &axum::Router, sz_ms: f64, bj_ms: f64) {
    let entry = |node: &str, rtt_ms: f64| json!({"client_subnet": "58.60.3.0/24", "node": node, "rtt_ms": rtt_ms, "samples": 20});
    let body = json!({"measurements": [entry("sz-01", sz_ms), entry("bj-01", bj_ms)]});
    let (s, b) = call(r, Method::POST, "/api/v1/measurements", false, Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

#[tokio::test]
async fn clients_faster_to_a_far_node_are_listed_and_accepted_in_one_call() {
    let r = router().await;
    // Located in Shenzhen, yet Shenzhen's node is slow and Beijing's fast.
    measure(&r, 52.0, 7.0).await;
    let (s, body) = call(&r, Method::GET, "/api/v1/geo/suspects", false, None).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let suspects = body["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 1, "{body}");
    let sus = &suspects[0];
    assert_eq!(sus["partition"], "CN/广东/深圳/电信");
    assert_eq!(sus["located"], json!({"country": "CN", "province": "广东", "city": "深圳", "isp": "电信"}));
    assert_eq!(sus["suggested"], json!({"country": "CN", "province": "北京", "city": "北京", "isp": "电信"}));
    assert_eq!(sus["prefixes"], 1, "58.60.0.0/15 is one prefix");
    let km = sus["distance_km"].as_f64().unwrap();
    assert!((1_800.0..2_300.0).contains(&km), "Beijing to Shenzhen: {km} km");
    let measured: Vec<(&str, f64)> = sus["measured"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["node"].as_str().unwrap(), m["rtt_ms"].as_f64().unwrap()))
        .collect();
    assert_eq!(measured, [("bj-01", 7.0), ("sz-01", 52.0)]);

    let id = sus["id"].as_str().unwrap();
    let uri = format!("/api/v1/geo/suspects/{id}/accept");
    assert_eq!(call(&r, Method::POST, &uri, false, None).await.0, StatusCode::UNAUTHORIZED, "accepting is a write");
    let (s, saved) = call(&r, Method::POST, &uri, true, None).await;
    assert_eq!(s, StatusCode::CREATED, "{saved}");
    assert_eq!(saved[0]["prefix"], "58.60.0.0/15");
    assert_eq!((saved[0]["province"].clone(), saved[0]["city"].clone()), (json!("北京"), json!("北京")));
    let (_, overrides) = call(&r, Method::GET, "/api/v1/geo/overrides", false, None).await;
    assert_eq!(overrides.as_array().unwrap().len(), 1, "{overrides}");
    // The clients are in Beijing now: nothing contradicts their location.
    let (_, body) = call(&r, Method::GET, "/api/v1/geo/suspects", false, None).await;
    assert_eq!(body["suspects"], json!([]), "{body}");
    assert_eq!(call(&r, Method::POST, &uri, true, None).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn measurements_that_agree_with_the_location_make_no_suspect() {
    let r = router().await;
    measure(&r, 6.0, 48.0).await;
    let (s, body) = call(&r, Method::GET, "/api/v1/geo/suspects", false, None).await;
    assert_eq!((s, body["suspects"].clone()), (StatusCode::OK, json!([])));
    let (s, _) = call(&r, Method::POST, "/api/v1/geo/suspects/0123456789abcdef/accept", true, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}
