//! The control API (axum, JSON): schedule decisions, CRUD for the control
//! plane's records, route tables, `/metrics` and `/healthz`. Every endpoint
//! is declared in [`endpoints`] with who may call it ([`access`]).
//!
//! Every write goes to the store first, then triggers a recompute and waits
//! for it, so the next DNS answer already reflects the change.

pub mod access;
pub mod acme;
pub mod asn_carriers;
pub mod auth;
pub mod browser_guard;
pub mod certificates;
pub mod console;
pub mod dnssec;
pub mod endpoints;
pub mod error;
pub mod explain;
pub mod geo;
pub mod measurements;
pub mod nodes;
pub mod purge;
pub mod routes;
pub mod rules;
pub mod schedule;
pub mod sessions;
pub mod sites;
pub mod suspects;
#[cfg(test)]
mod testing;
pub mod zones;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::dns::settings::DnsSettings;
use crate::listener::http;
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

/// The router with every endpoint ([`endpoints::all`]).
pub fn router(state: AppState) -> Router {
    endpoints::all(state).into_router()
}

/// Serves the API on `listener` until `shutdown`, behind the Host/Origin check
/// ([`browser_guard`]) and the shared listener's timeouts and connection caps ([`http::API_LIMITS`]),
/// over TLS when `tls` is given (`--api-tls-cert`/`--api-tls-key`).
pub async fn run(
    listener: TcpListener,
    state: AppState,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    // Console cookies carry `Secure` when the API is served over TLS.
    state.auth.sessions.set_secure(tls.is_some());
    let guard = browser_guard::BrowserGuard {
        listen: listener.local_addr()?,
        open: state.auth.writes_open() || state.auth.reads_open(),
    };
    let app = router(state).layer(axum::middleware::from_fn_with_state(guard, browser_guard::layer));
    let limits = http::API_LIMITS;
    match tls {
        Some(config) => http::serve_tls("API", listener, app, limits, config, shutdown).await,
        None => http::serve("API", listener, app, limits, shutdown).await,
    }
}

async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let table = state.scheduler.table().load();
    let panicked = state.tasks.recent_panics();
    // The store refusing writes, nodes held by the withdrawal guard: degraded, and why.
    let fail_static = state.scheduler.health().fail_static().report();
    let fine = panicked.is_empty() && fail_static.is_none();
    let body = serde_json::json!({
        "status": if table.version == 0 { "starting" } else if fine { "ok" } else { "degraded" },
        "route_table_version": table.version,
        "generated_at_ms": table.generated_at_ms,
        "panicked_tasks": panicked,
        "fail_static": fail_static,
    });
    let healthy = table.version != 0 && fine;
    let status = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(body))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let table = state.scheduler.table().load_full();
    let (last_recompute_us, recomputes) = state.scheduler.stats();
    let nodes = state.store.list_nodes().await.ok();
    let mut body = state.metrics.render(
        &table,
        Some(&ControlStats { last_recompute_us, recomputes, nodes, leading: state.scheduler.leading() }),
    );
    state.scheduler.health().fail_static().render_metrics(&mut body);
    if let Some(signing) = state.scheduler.dnssec() {
        crate::dnssec::metrics::render_signing(signing, &mut body);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
}
