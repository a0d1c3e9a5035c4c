//! The control API (axum, JSON): schedule decisions, CRUD for the control
//! plane's records, route tables, `/metrics` and `/healthz` (SPEC §6).
//!
//! Every write goes to the store first, then triggers a recompute and waits
//! for it, so the next DNS answer already reflects the change.

pub mod auth;
pub mod browser_guard;
pub mod certificates;
pub mod console;
pub mod error;
pub mod geo;
pub mod listener;
pub mod names;
pub mod nodes;
pub mod routes;
pub mod rules;
pub mod schedule;
pub mod sites;
pub mod zones;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::DnsSettings;
use crate::metrics::ControlStats;
use crate::metrics::Metrics;
use crate::scheduler::Scheduler;
use crate::store::Store;

pub use auth::Auth;
pub use error::ApiError;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The control plane's records; handlers read and write them here.
    pub store: Store,
    /// Recomputes after writes, decisions, route tables.
    pub scheduler: Arc<Scheduler>,
    /// The responders' settings (the served TTL reported by `/api/v1/schedule`).
    pub dns: Arc<DnsSettings>,
    pub auth: Arc<Auth>,
    pub metrics: Arc<Metrics>,
    /// Public-resolver prefixes beyond the built-in list (config `public_resolvers`);
    /// a line covering one needs `force`.
    pub public_resolvers: Arc<Vec<ipnet::IpNet>>,
    /// `geo.max_change_ratio`: the threshold of `POST /api/v1/geo/reload`.
    pub geo_max_change_ratio: f64,
    /// The operator console (`/ui`): traffic history, NS-host reports.
    pub console: Arc<crate::console::Console>,
    /// The supervised background tasks; a recent panic makes `/healthz` 503.
    pub tasks: Arc<crate::supervisor::Supervisor>,
    /// This control process's API URL (NS-host reports name who took them).
    pub api_url: Arc<str>,
}

impl AppState {
    /// Recomputes after a write; a failure is logged, the write stands.
    pub async fn after_write(&self) {
        self.after_change(crate::scheduler::Change::Everything).await;
    }

    /// Recomputes after a write that changed only `change` (incrementally).
    pub async fn after_change(&self, change: crate::scheduler::Change) {
        if let Err(e) = self.scheduler.recompute_after(change).await {
            tracing::error!(error = %e, "recompute after a write failed; the periodic recompute will retry");
        }
    }
}

/// The router with every route.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/schedule", get(schedule::get_schedule))
        .route("/api/v1/schedule/what-if", post(console::what_if))
        .route("/ui", get(console::page))
        .route("/ui/login", post(console::login))
        .route("/ui/logout", post(console::logout))
        .route("/api/v1/console/session", get(console::session))
        .route("/api/v1/console/matrix", get(console::matrix))
        .route("/api/v1/console/nodes", get(console::nodes))
        .route("/api/v1/console/traffic", get(console::traffic))
        .route("/api/v1/nodes", get(nodes::list).post(nodes::create))
        .route("/api/v1/nodes/{name}", get(nodes::get_one).patch(nodes::patch).delete(nodes::delete))
        .route("/api/v1/nodes/{name}/heartbeat", post(nodes::heartbeat))
        .route("/api/v1/rules", get(rules::list_rules).post(rules::create_rule))
        .route("/api/v1/rules/{id}", axum::routing::delete(rules::delete_rule))
        .route("/api/v1/lines", get(rules::list_lines))
        .route("/api/v1/lines/{name}", put(rules::put_line).delete(rules::delete_line))
        .route("/api/v1/zones", get(zones::list_zones))
        .route("/api/v1/zones/{name}", put(zones::put_zone).get(zones::get_zone).delete(zones::delete_zone))
        .route("/api/v1/domains", get(zones::list_domains))
        .route("/api/v1/domains/{name}", put(zones::put_domain).delete(zones::delete_domain))
        .route("/api/v1/routes", get(routes::current))
        .route("/api/v1/routes/rollback", post(routes::rollback))
        .route("/api/v1/routes/resume", post(routes::resume))
        .route("/api/v1/routes/table", get(routes::table))
        .route("/api/v1/nshosts", get(routes::nshosts))
        .route("/api/v1/geo/overrides", get(geo::list_overrides).post(geo::upsert_override))
        .route("/api/v1/geo/overrides/{prefix}", axum::routing::delete(geo::delete_override))
        .route("/api/v1/geo/reload", post(geo::reload))
        .route("/api/v1/geo/partitions", get(geo::partitions))
        .route("/api/v1/sites", get(sites::list))
        .route("/api/v1/sites/{host}", get(sites::get_one).put(sites::put).delete(sites::delete))
        .route("/api/v1/certificates", get(certificates::list))
        .route(
            "/api/v1/certificates/{domain}",
            get(certificates::get_one).put(certificates::put).delete(certificates::delete),
        )
        .fallback(|| async { ApiError::not_found("no such API route") })
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown`, behind the Host/Origin check
/// ([`browser_guard`]) and the listener's timeouts and connection cap ([`listener`]),
/// over TLS when `tls` is given (`--api-tls-cert`/`--api-tls-key`).
pub async fn run(
    listener: TcpListener,
    state: AppState,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let guard = browser_guard::BrowserGuard {
        listen: listener.local_addr()?,
        open: state.auth.writes_open() || state.auth.reads_open(),
    };
    let app = router(state).layer(axum::middleware::from_fn_with_state(guard, browser_guard::layer));
    let limits = listener::Limits::default();
    match tls {
        Some(config) => listener::serve_tls(listener, app, limits, config, shutdown).await,
        None => listener::serve(listener, app, limits, shutdown).await,
    }
}

async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let table = state.scheduler.table().load();
    let panicked = state.tasks.recent_panics();
    let body = serde_json::json!({
        "status": if table.version == 0 { "starting" } else if panicked.is_empty() { "ok" } else { "degraded" },
        "route_table_version": table.version,
        "generated_at_ms": table.generated_at_ms,
        "panicked_tasks": panicked,
    });
    let healthy = table.version != 0 && panicked.is_empty();
    let status = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(body))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let table = state.scheduler.table().load_full();
    let (last_recompute_us, recomputes) = state.scheduler.stats();
    let nodes = state.store.list_nodes().await.ok();
    let body = state.metrics.render(&table, Some(&ControlStats { last_recompute_us, recomputes, nodes }));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
}
