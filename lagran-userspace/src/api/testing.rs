//! The API's test harness: a router over an in-memory SQLite store with
//! configured tokens, and one call with its answer.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use super::{AppState, Auth};
use crate::store::Store;

pub const AGENT: &str = "the-agent-token-0123";
pub const ADMIN: &str = "the-admin-token-0123";

/// The state of a control process over `store`, with [`AGENT`] and [`ADMIN`] configured.
pub fn state(store: Store) -> AppState {
    let scheduler = Arc::new(crate::scheduler::Scheduler::new(
        store.clone(),
        Default::default(),
        crate::health::HealthMonitor::new(Default::default()),
        crate::geo::GeoDb::load(None, None),
        crate::route_table::empty_shared(),
    ));
    let counters = Arc::new(crate::dns::counters::DnsCounters::new());
    AppState {
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
    }
}

/// The router of [`state`].
pub fn router(state: AppState) -> Router {
    super::endpoints::all(state).into_router()
}

/// `(status, JSON body or Null)` of `method uri` with the `headers` given.
pub async fn call(
    r: &Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri).header("host", "127.0.0.1");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let res = r.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 24).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}
