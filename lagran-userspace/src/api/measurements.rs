//! `/api/v1/measurements`: round-trip times in, per client subnet and node
//! (from the edges, the RUM beacon they forward, or any API caller); the
//! matrix's view of one subnet out; and the candidate nodes a RUM beacon
//! times for a client.
//!
//! Who may report for whom: the agent token (and the admin token) for any
//! node, a node's own token only for that node (403 otherwise), except for
//! entries with source `rum`: an edge forwards the browsers' timings of the
//! candidate nodes the control plane named, which are other nodes by design
//! (and which the edge has bounded per client subnet). A batch is
//! taken whole or refused whole: 413 past [`MAX_BATCH`] entries, 422 naming
//! the first bad field.

use std::net::IpAddr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::AGENT_TOKEN_HEADER;
use super::error::{ApiError, parse_json};
use crate::clock::now_ms;
use crate::location::Location;
use crate::partition::UNKNOWN;
use crate::scheduler::ClientQuery;
use crate::steering::estimate::{Report, Source};
use crate::steering::subnet::client_subnet;

/// The most entries one batch may carry.
pub const MAX_BATCH: usize = 10_000;
/// The largest RTT taken, in milliseconds.
pub const MAX_RTT_MS: f64 = 10_000.0;
/// The most samples one entry may claim.
pub const MAX_SAMPLES: u32 = 1_000_000;
/// Candidates named for a beacon.
const CANDIDATES: usize = 3;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    pub measurements: Vec<Entry>,
}

/// One entry of a batch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub client_subnet: String,
    pub node: String,
    pub rtt_ms: f64,
    pub samples: u32,
    /// `"edge"`, `"rum"` or `"api"` (the default).
    pub source: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Accepted {
    /// Entries added to the matrix.
    pub accepted: usize,
    /// Entries whose subnet the geo data cannot locate (they steer nothing).
    pub unlocated: usize,
}

/// `POST /api/v1/measurements`.
pub async fn post(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Result<Json<Accepted>, ApiError> {
    let batch: Batch = parse_json(&body)?;
    if batch.measurements.len() > MAX_BATCH {
        return Err(ApiError::field(
            StatusCode::PAYLOAD_TOO_LARGE,
            "measurements",
            format!("{} entries: a batch holds at most {MAX_BATCH}", batch.measurements.len()),
        ));
    }
    let only = reporter(&state, &headers).await?;
    let nodes: std::collections::HashSet<String> =
        state.store.list_nodes().await?.into_iter().map(|n| n.name).collect();
    let partitions = state.scheduler.partitions();
    let now = now_ms();
    let mut reports = Vec::with_capacity(batch.measurements.len());
    let mut unlocated = 0;
    for (i, e) in batch.measurements.iter().enumerate() {
        let report = checked(i, e, only.as_deref(), &nodes, now)?;
        let net = client_subnet(&e.client_subnet)
            .map_err(|err| ApiError::bad_field(format!("measurements[{i}].client_subnet"), err.to_string()))?;
        let hit = partitions.lookup(net.network());
        if hit.id == UNKNOWN {
            unlocated += 1;
            continue;
        }
        reports.push((hit.location.clone(), e.node.clone(), report));
    }
    if !reports.is_empty() {
        state.scheduler.add_measurements(&reports, now).await?;
    }
    Ok(Json(Accepted { accepted: reports.len(), unlocated }))
}

/// `None`: the caller may report for any node; `Some(node)`: only for `node`
/// (it presented that node's own token).
async fn reporter(state: &AppState, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    if state.auth.check_agent(headers).is_ok() {
        return Ok(None);
    }
    let token = headers.get(AGENT_TOKEN_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    match state.store.node_of_token(token).await? {
        Some(node) => Ok(Some(node)),
        None => Err(ApiError::unauthorized("measurements need the agent token or a node's own token")),
    }
}

/// Entry `i` as a report, or the error naming its bad field.
fn checked(
    i: usize,
    e: &Entry,
    only: Option<&str>,
    nodes: &std::collections::HashSet<String>,
    now: i64,
) -> Result<Report, ApiError> {
    let field = |f: &str| format!("measurements[{i}].{f}");
    let source = match e.source.as_deref() {
        None => Source::Api,
        Some(s) => Source::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| ApiError::bad_field(field("source"), format!("{s:?} is not edge, rum or api")))?,
    };
    if let Some(own) = only
        && e.node != own
        && source != Source::Rum
    {
        return Err(ApiError::field(
            StatusCode::FORBIDDEN,
            field("node"),
            format!("node {own}'s token reports for {own} only (and browsers' `rum` timings), not for {}", e.node),
        ));
    }
    if !nodes.contains(&e.node) {
        return Err(ApiError::bad_field(field("node"), format!("no node {:?}", e.node)));
    }
    if !(e.rtt_ms.is_finite() && e.rtt_ms > 0.0 && e.rtt_ms <= MAX_RTT_MS) {
        return Err(ApiError::bad_field(field("rtt_ms"), format!("{} is outside (0, {MAX_RTT_MS}] ms", e.rtt_ms)));
    }
    if !(1..=MAX_SAMPLES).contains(&e.samples) {
        return Err(ApiError::bad_field(field("samples"), format!("{} is outside 1..={MAX_SAMPLES}", e.samples)));
    }
    Ok(Report { at_ms: now, rtt_ms: e.rtt_ms as f32, samples: e.samples, source })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubnetParams {
    pub subnet: Option<String>,
}

/// `GET /api/v1/measurements?subnet=CIDR`.
#[derive(Debug, Serialize)]
pub struct SubnetJson {
    pub subnet: String,
    /// The subnet's partition: `country/province/city/isp`, or `unknown`.
    pub partition: String,
    /// Each node's fresh estimate, lowest RTT first.
    pub nodes: Vec<NodeJson>,
}

#[derive(Debug, Serialize)]
pub struct NodeJson {
    pub node: String,
    pub rtt_ms: f64,
    pub samples: u32,
    pub age_ms: i64,
    pub sources: Vec<Source>,
}

/// `GET /api/v1/measurements?subnet=CIDR`.
pub async fn get(
    State(state): State<AppState>,
    params: Result<Query<SubnetParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SubnetJson>, ApiError> {
    let Query(p) = params.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let Some(subnet) = p.subnet else { return Err(ApiError::bad_field("subnet", "subnet is required")) };
    let net = client_subnet(&subnet).map_err(|e| ApiError::bad_field("subnet", e.to_string()))?;
    let partitions = state.scheduler.partitions();
    let hit = partitions.lookup(net.network());
    let nodes = match hit.id {
        UNKNOWN => Vec::new(),
        _ => state.scheduler.measurements().row(hit.location, now_ms()),
    };
    let nodes = nodes
        .into_iter()
        .map(|(node, e)| NodeJson {
            node,
            rtt_ms: e.rtt_ms,
            samples: e.samples,
            age_ms: e.age_ms,
            sources: e.sources(),
        })
        .collect();
    Ok(Json(SubnetJson { subnet: net.to_string(), partition: label(hit.id, hit.location), nodes }))
}

/// A partition as text: `country/province/city/isp`, or `unknown`.
pub fn label(id: u32, location: &Location) -> String {
    if id == UNKNOWN {
        return "unknown".into();
    }
    [&location.country, &location.province, &location.city, &location.isp].map(String::as_str).join("/")
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateParams {
    pub client: Option<String>,
    /// The scheduled name whose ranking names the candidates (default: the first zone's apex).
    pub domain: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct CandidatesJson {
    pub partition: String,
    pub candidates: Vec<CandidateJson>,
}

#[derive(Debug, Serialize)]
pub struct CandidateJson {
    pub node: String,
    pub hostname: Option<String>,
}

/// `GET /api/v1/measurements/candidates?client=IP`: the geo best for the
/// client's partition and the next eligible nodes, up to three.
pub async fn candidates(
    State(state): State<AppState>,
    params: Result<Query<CandidateParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<CandidatesJson>, ApiError> {
    let Query(p) = params.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let Some(client) = p.client else { return Err(ApiError::bad_field("client", "client is required")) };
    let ip: IpAddr =
        client.trim().parse().map_err(|_| ApiError::bad_field("client", format!("{client:?} is not an IP address")))?;
    let domain = match p.domain {
        Some(d) => d,
        None => match state.store.list_zones().await?.into_iter().next() {
            Some(z) => z.name,
            None => return Err(ApiError::bad_field("domain", "no zone configured; pass domain")),
        },
    };
    let query = ClientQuery { address: Some(ip), ..Default::default() };
    let decision = state.scheduler.decide(&domain, &query, &state.dns).await?;
    let hostnames: std::collections::HashMap<String, Option<String>> =
        state.store.list_nodes().await?.into_iter().map(|n| (n.name, n.hostname)).collect();
    let candidates = decision
        .ranking
        .candidates
        .iter()
        .take(CANDIDATES)
        .map(|c| CandidateJson { node: c.name.clone(), hostname: hostnames.get(&c.name).cloned().flatten() })
        .collect();
    let partitions = state.scheduler.partitions();
    let hit = partitions.lookup(ip);
    Ok(Json(CandidatesJson { partition: label(hit.id, hit.location), candidates }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Method, Request};
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::*;
    use crate::api::Auth;

    const AGENT: &str = "the-agent-token";
    const EDGE_TOKEN: &str = "edge-1-own-token";

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

    async fn router() -> axum::Router {
        let store = crate::store::Store::connect("sqlite::memory:").await.unwrap();
        crate::demo::install(&store).await.unwrap();
        store.create_node(&crate::model::Node::new("edge-1"), Some(EDGE_TOKEN)).await.unwrap();
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
            auth: Arc::new(Auth::new(Some(AGENT), Some("the-admin-token"))),
            metrics: Arc::new(crate::metrics::Metrics::new(counters)),
            public_resolvers: Arc::new(Vec::new()),
            geo_max_change_ratio: 0.5,
            console: Arc::new(crate::console::Console::new(Arc::new(crate::console::nshosts::NoNsHosts))),
            tasks: crate::supervisor::Supervisor::new(),
            api_url: "http://127.0.0.1:0".into(),
        };
        crate::api::endpoints::all(state).into_router()
    }

    /// `(status, body)` of `method uri` with `token` in the agent header.
    async fn call(
        r: &axum::Router,
        method: Method,
        uri: &str,
        token: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "127.0.0.1")
            .header(AGENT_TOKEN_HEADER, token)
            .header("content-type", "application/json");
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        let resp = r.clone().oneshot(req.body(body).unwrap()).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    fn entry(node: &str, rtt_ms: f64) -> Value {
        json!({"client_subnet": "58.60.0.0/24", "node": node, "rtt_ms": rtt_ms, "samples": 20, "source": "edge"})
    }

    async fn post(r: &axum::Router, token: &str, entries: Vec<Value>) -> (StatusCode, Value) {
        call(r, Method::POST, "/api/v1/measurements", token, Some(json!({ "measurements": entries }))).await
    }

    #[tokio::test]
    async fn reports_are_read_back_per_partition() {
        let r = router().await;
        let (s, body) = post(&r, AGENT, vec![entry("gz-01", 85.0), entry("hk-01", 9.5)]).await;
        assert_eq!((s, &body), (StatusCode::OK, &json!({"accepted": 2, "unlocated": 0})));
        // Another subnet of the same partition, and one the geo data places in the US.
        let other = json!({"client_subnet": "58.61.7.0/24", "node": "hk-01", "rtt_ms": 10.5, "samples": 5});
        let us = json!({"client_subnet": "8.8.8.0/24", "node": "hk-01", "rtt_ms": 150.0, "samples": 5});
        assert_eq!(post(&r, AGENT, vec![other, us]).await.0, StatusCode::OK);
        let (s, body) = call(&r, Method::GET, "/api/v1/measurements?subnet=58.60.0.9/24", AGENT, None).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert_eq!(body["subnet"], "58.60.0.0/24");
        assert_eq!(body["partition"], "CN/广东/深圳/电信");
        let nodes = body["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0]["node"], "hk-01");
        assert_eq!(nodes[0]["samples"], 25, "both subnets of the partition count");
        assert_eq!(nodes[0]["sources"], json!(["edge", "api"]));
        assert!(nodes[0]["age_ms"].as_i64().unwrap() >= 0);
        assert_eq!((nodes[1]["node"].clone(), nodes[1]["rtt_ms"].clone()), (json!("gz-01"), json!(85.0)));
        let (s, body) = call(&r, Method::GET, "/api/v1/measurements?subnet=58.60.0.0/16", AGENT, None).await;
        assert_eq!((s, body["field"].clone()), (StatusCode::UNPROCESSABLE_ENTITY, json!("subnet")));
    }

    #[tokio::test]
    async fn a_node_token_reports_for_its_own_node_only() {
        let r = router().await;
        let (s, body) = post(&r, EDGE_TOKEN, vec![entry("edge-1", 30.0), entry("gz-01", 5.0)]).await;
        assert_eq!((s, body["field"].clone()), (StatusCode::FORBIDDEN, json!("measurements[1].node")));
        assert_eq!(post(&r, EDGE_TOKEN, vec![entry("edge-1", 30.0)]).await.0, StatusCode::OK);
        assert_eq!(post(&r, "no-such-token", vec![entry("edge-1", 30.0)]).await.0, StatusCode::UNAUTHORIZED);
        let (_, body) = call(&r, Method::GET, "/api/v1/measurements?subnet=58.60.0.0/24", AGENT, None).await;
        let nodes: Vec<&str> = body["nodes"].as_array().unwrap().iter().map(|n| n["node"].as_str().unwrap()).collect();
        assert_eq!(nodes, ["edge-1"], "the refused batch left nothing");
    }

    #[tokio::test]
    async fn a_node_token_forwards_browser_timings_of_other_nodes() {
        let r = router().await;
        let rum = |node: &str| json!({"client_subnet": "58.60.0.0/24", "node": node, "rtt_ms": 12.0, "samples": 1, "source": "rum"});
        let (s, body) = post(&r, EDGE_TOKEN, vec![entry("edge-1", 30.0), rum("gz-01"), rum("edge-1")]).await;
        assert_eq!((s, &body), (StatusCode::OK, &json!({"accepted": 3, "unlocated": 0})));
        let mut api = rum("hk-01");
        api["source"] = json!("api");
        let (s, body) = post(&r, EDGE_TOKEN, vec![rum("hk-01"), api]).await;
        assert_eq!((s, body["field"].clone()), (StatusCode::FORBIDDEN, json!("measurements[1].node")));
        let (_, body) = call(&r, Method::GET, "/api/v1/measurements?subnet=58.60.0.0/24", AGENT, None).await;
        let nodes: Vec<(&str, &Value)> =
            body["nodes"].as_array().unwrap().iter().map(|n| (n["node"].as_str().unwrap(), &n["sources"])).collect();
        assert_eq!(nodes, [("gz-01", &json!(["rum"])), ("edge-1", &json!(["edge", "rum"]))], "{body}");
    }

    #[tokio::test]
    async fn bad_entries_are_named_and_big_batches_refused() {
        let r = router().await;
        let bad = [
            (json!({"client_subnet": "58.60.0.0/16", "node": "gz-01", "rtt_ms": 9.0, "samples": 20}), "client_subnet"),
            (json!({"client_subnet": "nonsense", "node": "gz-01", "rtt_ms": 9.0, "samples": 20}), "client_subnet"),
            (json!({"client_subnet": "58.60.0.0/24", "node": "gz-99", "rtt_ms": 9.0, "samples": 20}), "node"),
            (json!({"client_subnet": "58.60.0.0/24", "node": "gz-01", "rtt_ms": 0.0, "samples": 20}), "rtt_ms"),
            (json!({"client_subnet": "58.60.0.0/24", "node": "gz-01", "rtt_ms": 10_001.0, "samples": 20}), "rtt_ms"),
            (json!({"client_subnet": "58.60.0.0/24", "node": "gz-01", "rtt_ms": 9.0, "samples": 0}), "samples"),
            (
                json!({"client_subnet": "58.60.0.0/24", "node": "gz-01", "rtt_ms": 9.0, "samples": 1, "source": "x"}),
                "source",
            ),
        ];
        for (e, field) in bad {
            let (s, body) = post(&r, AGENT, vec![entry("gz-01", 40.0), e.clone()]).await;
            assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}: {body}");
            assert_eq!(body["field"], format!("measurements[1].{field}"), "{e}");
        }
        let (s, _) = post(&r, AGENT, vec![entry("gz-01", 40.0); MAX_BATCH + 1]).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(post(&r, AGENT, vec![entry("gz-01", 40.0); MAX_BATCH]).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn candidates_name_the_geo_best_and_the_next_ones() {
        let r = router().await;
        let (s, body) =
            call(&r, Method::GET, "/api/v1/measurements/candidates?client=58.60.1.1", EDGE_TOKEN, None).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert_eq!(body["partition"], "CN/广东/深圳/电信");
        let names: Vec<&str> =
            body["candidates"].as_array().unwrap().iter().map(|c| c["node"].as_str().unwrap()).collect();
        assert_eq!(names.first(), Some(&"gz-01"));
        assert!(names.len() <= 3 && names.len() >= 2, "{names:?}");
        let (s, _) = call(&r, Method::GET, "/api/v1/measurements/candidates?client=banana", AGENT, None).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    }
}
