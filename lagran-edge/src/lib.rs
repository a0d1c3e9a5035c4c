//! `lagran-edge`: the CDN edge node clients reach after Lagran's GeoDNS answered.
//!
//! A request goes Host/SNI → site → WAF → rate limit → hotlink check → cache → origin
//! (see [`server`]); the [`agent`] reports the node's load to the control plane, and
//! [`remote`] reads the sites and certificates kept there, swapping them in without a
//! restart (the TOML's own sites stay, for standalone use).

pub mod agent;
pub mod body;
pub mod cache;
pub mod config;
pub mod conn_limit;
pub mod control;
pub mod host;
pub mod idle;
pub mod origin;
pub mod rate_limit;
pub mod remote;
pub mod server;
pub mod tls;
pub mod waf;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cache::Cache;
use crate::config::{Config, ConfigError, SiteConfig};
use crate::conn_limit::ConnLimit;
use crate::host::HostMap;
use crate::origin::{Origin, OriginClient};
use crate::rate_limit::RateLimiter;
use crate::tls::{SniResolver, TlsError};
use crate::waf::Waf;

#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot listen on {addr}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("a listener failed")]
    Serve(#[source] std::io::Error),
}

/// `error: cause: cause…` — an error with its whole `source()` chain, for logs.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

/// Counters shared by the servers and the agent.
#[derive(Debug, Default)]
pub struct Stats {
    pub bytes_served: AtomicU64,
    pub open_conns: AtomicI64,
    pub requests: AtomicU64,
}

/// One customer host as the request path sees it.
#[derive(Debug)]
pub struct Site {
    pub host: String,
    pub origin: Origin,
    pub cache_ttl: Duration,
    pub waf: Waf,
    pub limiter: Option<RateLimiter>,
}

/// Everything a request handler needs.
pub struct Edge {
    sites: ArcSwap<HostMap<Arc<Site>>>,
    rate_limit_max_clients: usize,
    /// The HTTPS listener's certificates, by SNI name.
    pub certs: Arc<SniResolver>,
    pub cache: Cache,
    pub origin: OriginClient,
    pub stats: Arc<Stats>,
    /// Slots for client connections, HTTP and HTTPS together (`max_connections`,
    /// `max_connections_per_client`).
    pub conn_slots: Arc<ConnLimit>,
    /// A connection without traffic for this long is closed (`idle_timeout_secs`).
    pub idle_timeout: Duration,
    /// `/healthz`, answered on any host, is limited per client by this (besides a site's own).
    pub healthz_limiter: RateLimiter,
}

/// Requests per second (and burst) one client may make to `/healthz`: ample
/// for the control plane's probe every few seconds.
pub const HEALTHZ_RPS: f64 = 5.0;
pub const HEALTHZ_BURST: u32 = 10;

impl Edge {
    pub fn new(config: &Config) -> Edge {
        let edge = Edge {
            sites: ArcSwap::default(),
            rate_limit_max_clients: config.rate_limit_max_clients,
            certs: Arc::default(),
            cache: Cache::new(config.cache_max_bytes, config.cache_max_object_bytes),
            origin: OriginClient::new(config.origin_timeout()),
            stats: Arc::default(),
            conn_slots: Arc::new(ConnLimit::new(config.max_connections, config.max_connections_per_client)),
            idle_timeout: Duration::from_secs(config.idle_timeout_secs),
            healthz_limiter: RateLimiter::new(HEALTHZ_RPS, HEALTHZ_BURST, config.rate_limit_max_clients),
        };
        edge.replace_sites(&config.sites);
        edge
    }

    /// Serves `sites` from the next request on (rate limiter state starts afresh).
    pub fn replace_sites(&self, sites: &[SiteConfig]) {
        let mut map = HostMap::default();
        for entry in sites {
            let s = entry.site();
            let limiter = s.rate_limit_rps.map(|rps| {
                let burst = s.rate_limit_burst.unwrap_or(rps.ceil() as u32);
                RateLimiter::new(rps, burst, self.rate_limit_max_clients)
            });
            let site = Site {
                host: s.host.clone(),
                origin: entry.origin().clone(),
                cache_ttl: Duration::from_secs(s.cache_ttl_secs),
                waf: Waf::new(s),
                limiter,
            };
            map.insert(&s.host, Arc::new(site));
        }
        self.sites.store(Arc::new(map));
    }

    /// The site serving `host` (any case, port ignored).
    pub fn site(&self, host: &str) -> Option<Arc<Site>> {
        self.sites.load().get(host).cloned()
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, EdgeError> {
    TcpListener::bind(addr).await.map_err(|source| EdgeError::Bind { addr, source })
}

/// Runs the HTTP listener, the HTTPS listener when configured and the heartbeat
/// agent until `shutdown`, then drains connections.
pub async fn serve(config: Config, shutdown: CancellationToken) -> Result<(), EdgeError> {
    let edge = Arc::new(Edge::new(&config));
    let local_certs = tls::local_certs(&config.sites)?;
    let mut certs = tls::CertMap::default();
    for (host, key) in &local_certs {
        certs.insert(host, key.clone());
    }
    edge.certs.replace(certs);
    let acceptor = match config.listen_https {
        Some(_) => Some(tokio_rustls::TlsAcceptor::from(tls::server_config_with(edge.certs.clone())?)),
        None => None,
    };
    let mut tasks = JoinSet::new();

    let http = bind(config.listen_http).await?;
    let addr = http.local_addr().map_err(EdgeError::Serve)?;
    info!(%addr, sites = config.sites.len(), "serving http");
    tasks.spawn(server::run(http, edge.clone(), shutdown.clone()));
    if let (Some(addr), Some(acceptor)) = (config.listen_https, acceptor) {
        let https = bind(addr).await?;
        let addr = https.local_addr().map_err(EdgeError::Serve)?;
        info!(%addr, "serving https");
        tasks.spawn(server::run_tls(https, acceptor, edge.clone(), shutdown.clone()));
    }
    match agent::AgentConfig::from_config(&config) {
        Some(agent) => {
            let (stats, shutdown) = (edge.stats.clone(), shutdown.clone());
            tasks.spawn(async move {
                agent::run(agent, stats, shutdown).await;
                Ok(())
            });
        }
        None => info!("no control_url: heartbeats are off"),
    }
    if let Some(remote) = remote::RemoteConfig::from_config(&config) {
        let layers = remote::Local { sites: config.sites.clone(), certs: local_certs };
        let (edge, shutdown) = (edge.clone(), shutdown.clone());
        tasks.spawn(async move {
            remote::run(remote, layers, edge, shutdown).await;
            Ok(())
        });
    }

    let mut result = Ok(());
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done.unwrap_or_else(|join| Err(std::io::Error::other(join))) {
            shutdown.cancel();
            result = result.and(Err(EdgeError::Serve(e)));
        }
    }
    result
}
