//! `lagran serve`: everything in one process — store, scheduler, DNS responder,
//! control API — wired together and stopped by one cancellation token.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, Auth};
use crate::config::Config;
use crate::dns::counters::DnsCounters;
use crate::dns::server::{DnsServer, bind};
use crate::geo::GeoDb;
use crate::health::HealthMonitor;
use crate::metrics::Metrics;
use crate::route_table::empty_shared;
use crate::scheduler::{Scheduler, SchedulerError};
use crate::store::{Store, StoreError};

/// Flags of `lagran serve` beyond the configuration file.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Create the demo zone and seed 000's nodes when missing.
    pub demo: bool,
    /// Allow an open (token-less) API on a non-loopback address.
    pub insecure_open_api: bool,
}

/// Why the daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("opening the database {url}: {source}")]
    Store { url: String, source: StoreError },
    #[error("installing the demo data: {0}")]
    Demo(StoreError),
    #[error("the first route computation failed: {0}")]
    FirstRecompute(SchedulerError),
    #[error("binding the DNS listener on {addr} (UDP and TCP): {source}")]
    BindDns { addr: SocketAddr, source: std::io::Error },
    #[error("binding the API listener on {addr}: {source}")]
    BindApi { addr: SocketAddr, source: std::io::Error },
    #[error(
        "the API on {0} is not on loopback and has no ADMIN_TOKEN/AGENT_TOKEN: set the tokens, or pass --insecure-open-api"
    )]
    OpenApi(SocketAddr),
    #[error("{what} stopped: {source}")]
    Task { what: &'static str, source: std::io::Error },
}

/// Runs until `shutdown` is cancelled.
pub async fn serve(config: Config, opts: ServeOptions, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let store = Store::connect(&config.database_url)
        .await
        .map_err(|source| DaemonError::Store { url: redact(&config.database_url), source })?;
    tracing::info!(database = %redact(&config.database_url), backend = store.backend().as_str(), "store ready");
    if opts.demo {
        crate::demo::install(&store).await.map_err(DaemonError::Demo)?;
    }

    let geo = GeoDb::load(config.geo.ipv4_path.as_deref(), config.geo.ipv6_path.as_deref());
    if geo.v4().is_none() && geo.v6().is_none() {
        tracing::warn!("no geo database loaded: every client is scheduled by weight and load (run scripts/fetch-geoip.sh)");
    }

    let table = empty_shared();
    let health = HealthMonitor::new(config.health.clone());
    let scheduler = Arc::new(Scheduler::new(store, config.schedule.clone(), health.clone(), geo, table.clone()));
    let overrides = scheduler.reload_overrides().await.map_err(DaemonError::FirstRecompute)?;
    if overrides > 0 {
        tracing::info!(overrides, "geo overrides applied");
    }
    let first = scheduler.recompute().await.map_err(DaemonError::FirstRecompute)?;
    tracing::info!(version = first.version, names = first.scheduled_names().count(), "first route table ready");

    let auth = Auth::new(config.agent_token.as_deref(), config.admin_token.as_deref());
    if auth.writes_open() || auth.reads_open() {
        if !config.api_listen.ip().is_loopback() && !opts.insecure_open_api {
            return Err(DaemonError::OpenApi(config.api_listen));
        }
        tracing::warn!(
            api = %config.api_listen,
            writes_open = auth.writes_open(),
            reads_open = auth.reads_open(),
            "the control API runs OPEN: set ADMIN_TOKEN and AGENT_TOKEN to require tokens"
        );
    }

    let counters = Arc::new(DnsCounters::default());
    let metrics = Arc::new(Metrics::new(counters.clone()));
    let (udp, tcp) =
        bind(config.dns_listen).await.map_err(|source| DaemonError::BindDns { addr: config.dns_listen, source })?;
    let dns_addr = udp.local_addr().map_err(|source| DaemonError::BindDns { addr: config.dns_listen, source })?;
    let api_listener = TcpListener::bind(config.api_listen)
        .await
        .map_err(|source| DaemonError::BindApi { addr: config.api_listen, source })?;
    let api_addr = api_listener.local_addr().map_err(|source| DaemonError::BindApi { addr: config.api_listen, source })?;

    let dns = Arc::new(DnsServer { table, settings: Arc::new(config.dns.clone()), counters });
    let state = AppState { scheduler: scheduler.clone(), auth: Arc::new(auth), metrics };
    // SIGHUP: reload the geo files, refused above GEO_MAX_CHANGE_RATIO (geo::reload); listening before "lagran serving".
    tokio::spawn(crate::geo::reload::sighup_loop(scheduler.clone(), shutdown.clone()));
    tracing::info!(dns = %dns_addr, api = %api_addr, "lagran serving");

    let sched_task = tokio::spawn(scheduler.clone().run(shutdown.clone()));
    let probe_store = scheduler.store().clone();
    let on_change = scheduler.clone();
    let health_task = tokio::spawn(health.run(
        move || {
            let store = probe_store.clone();
            async move { store.list_nodes().await.unwrap_or_default() }
        },
        move || on_change.trigger(),
        shutdown.clone(),
    ));
    let dns_task = tokio::spawn(dns.run(udp, tcp, shutdown.clone()));
    let api_task = tokio::spawn(api::run(api_listener, state, shutdown.clone()));

    let result = tokio::select! {
        r = dns_task => flatten("the DNS responder", r),
        r = api_task => flatten("the control API", r),
        _ = shutdown.cancelled() => Ok(()),
    };
    shutdown.cancel();
    let _ = sched_task.await;
    let _ = health_task.await;
    tracing::info!("lagran stopped");
    result
}

fn flatten(what: &'static str, r: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), DaemonError> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(DaemonError::Task { what, source }),
        Err(join) => Err(DaemonError::Task { what, source: std::io::Error::other(join.to_string()) }),
    }
}

/// A database URL with any password replaced, for logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(super::redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(super::redact("sqlite://./x.db"), "sqlite://./x.db");
    }
}
