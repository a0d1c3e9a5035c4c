//! `lagran-edge`: the CDN edge node clients reach after Lagran's GeoDNS answered.
//!
//! A request goes Host/SNI → site → WAF → rate limit → hotlink check → cache → origin
//! (see [`request`] and [`cached`]); the [`agent`] reports the node's load to the control plane, and
//! [`remote`] reads the sites and certificates kept there, swapping them in without a
//! restart (the TOML's own sites stay, for standalone use).

pub mod access_log;
pub mod acme_challenge;
pub mod agent;
pub mod beacon;
pub mod body;
pub mod cache;
pub mod cached;
pub mod client_subnet;
pub mod collapse;
pub mod config;
pub mod conn_limit;
pub mod control;
pub mod control_api;
pub mod file_body;
pub mod freshness;
pub mod hit_path;
pub mod host;
pub mod idle;
pub mod measured_conn;
pub mod measurement_report;
pub mod metrics;
pub mod origin;
pub mod outcome;
pub mod purge;
pub mod range;
pub mod rate_limit;
pub mod remote;
pub mod reply;
pub mod request;
pub mod rtt;
pub mod rum;
pub mod server;
#[cfg(unix)]
pub mod tcp_info;
pub mod tee;
pub mod tls;
pub mod waf;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::access_log::AccessLog;
use crate::cache::Cache;
use crate::collapse::Collapser;
use crate::config::{Config, ConfigError, SiteConfig};
use crate::conn_limit::ConnLimit;
use crate::host::HostMap;
use crate::metrics::{Metrics, SiteMetrics};
use crate::origin::{OriginClient, OriginSet, OriginSetConfig, Timeouts};
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
    #[error("cannot open the cache directory {path}")]
    CacheDir { path: std::path::PathBuf, source: std::io::Error },
    #[error("cannot open the access log {path}")]
    AccessLog { path: std::path::PathBuf, source: std::io::Error },
    #[error(transparent)]
    Origin(#[from] origin::OriginError),
    #[error("the control plane client for ACME challenges")]
    AcmeChallenges(#[source] control::ControlError),
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

/// Client subnets whose connection RTTs are gathered between two reports.
pub const MAX_RTT_SUBNETS: usize = 20_000;

/// Counters shared by the servers and the agent.
#[derive(Debug, Default)]
pub struct Stats {
    pub bytes_served: AtomicU64,
    pub open_conns: AtomicI64,
    pub requests: AtomicU64,
    /// Requests answered on the HTTP/1.1 hit path ([`hit_path`]), of `requests`.
    pub hit_path_requests: AtomicU64,
}

/// One customer host as the request path sees it.
#[derive(Debug)]
pub struct Site {
    pub host: String,
    pub origins: OriginSet,
    pub cache_ttl: Duration,
    pub waf: Waf,
    pub limiter: Option<RateLimiter>,
    pub metrics: Arc<SiteMetrics>,
}

/// Everything a request handler needs.
pub struct Edge {
    sites: ArcSwap<HostMap<Arc<Site>>>,
    rate_limit_max_clients: usize,
    /// The HTTPS listener's certificates, by SNI name.
    pub certs: Arc<SniResolver>,
    pub cache: Cache,
    pub collapser: Collapser,
    /// The origin client of sites without a CA of their own.
    origin_client: OriginClient,
    origin_timeouts: Timeouts,
    pub stats: Arc<Stats>,
    pub metrics: Metrics,
    pub access_log: Option<AccessLog>,
    pub metrics_token: Option<String>,
    /// Slots for client connections, HTTP and HTTPS together (`max_connections`,
    /// `max_connections_per_client`).
    pub conn_slots: Arc<ConnLimit>,
    /// A connection without traffic for this long is closed (`idle_timeout_secs`).
    pub idle_timeout: Duration,
    /// `/healthz`, answered on any host, is limited per client by this (besides a site's own).
    pub healthz_limiter: RateLimiter,
    /// Client connections' RTTs per subnet, when `[agent] report_rtt` is on and
    /// there is a control plane to report them to.
    pub subnet_rtts: Option<Arc<measured_conn::SubnetRtts>>,
    /// The `/.well-known/lagran/` paths.
    pub rum: rum::Rum,
    /// `/.well-known/acme-challenge/`, answered from the control plane (when there is one).
    pub acme: Option<acme_challenge::AcmeChallenges>,
}

/// Requests per second (and burst) one client may make to `/healthz`: ample
/// for the control plane's probe every few seconds.
pub const HEALTHZ_RPS: f64 = 5.0;
pub const HEALTHZ_BURST: u32 = 10;

impl Edge {
    /// The edge of `config`: its cache (reading the disk tier's objects back), its
    /// access log and its sites.
    pub fn new(config: &Config) -> Result<Edge, EdgeError> {
        let (max, max_object) = (config.cache_max_bytes, config.cache_max_object_bytes);
        let cache = match &config.cache_dir {
            Some(dir) if config.cache_disk_max_bytes > 0 => {
                Cache::with_disk(max, max_object, dir, config.cache_disk_max_bytes)
                    .map_err(|source| EdgeError::CacheDir { path: dir.clone(), source })?
            }
            _ => Cache::new(max, max_object),
        };
        let access_log = match &config.access_log {
            Some(path) => Some(
                AccessLog::open(path, config.access_log_max_bytes)
                    .map_err(|source| EdgeError::AccessLog { path: path.clone(), source })?,
            ),
            None => None,
        };
        let edge = Edge {
            sites: ArcSwap::default(),
            rate_limit_max_clients: config.rate_limit_max_clients,
            certs: Arc::default(),
            cache,
            collapser: Collapser::default(),
            origin_client: OriginClient::new(config.origin_timeouts(), None)?,
            origin_timeouts: config.origin_timeouts(),
            stats: Arc::default(),
            metrics: Metrics::default(),
            access_log,
            metrics_token: config.metrics_token.clone(),
            conn_slots: Arc::new(ConnLimit::new(config.max_connections, config.max_connections_per_client)),
            idle_timeout: Duration::from_secs(config.idle_timeout_secs),
            healthz_limiter: RateLimiter::new(HEALTHZ_RPS, HEALTHZ_BURST, config.rate_limit_max_clients),
            subnet_rtts: (config.agent.report_rtt && config.control_url.is_some())
                .then(|| Arc::new(rtt::RttTable::new(MAX_RTT_SUBNETS))),
            rum: rum::Rum::default(),
            acme: acme_challenge::AcmeChallenges::from_config(config).transpose().map_err(EdgeError::AcmeChallenges)?,
        };
        edge.replace_sites(&config.sites);
        Ok(edge)
    }

    /// Serves `sites` from the next request on (rate limiter and origin health
    /// state start afresh). A site whose origin CA cannot be used is left out.
    pub fn replace_sites(&self, sites: &[SiteConfig]) {
        let mut map = HostMap::default();
        for entry in sites {
            let s = entry.site();
            let limiter = s.rate_limit_rps.map(|rps| {
                let burst = s.rate_limit_burst.unwrap_or(rps.ceil() as u32);
                RateLimiter::new(rps, burst, self.rate_limit_max_clients)
            });
            let client = match &entry.origin_ca_pem {
                Some(pem) => match OriginClient::new(self.origin_timeouts, Some(pem)) {
                    Ok(client) => client,
                    Err(e) => {
                        tracing::error!(site = %s.host, error = %e, "site not served: its origin CA is unusable");
                        continue;
                    }
                },
                None => self.origin_client.clone(),
            };
            let origins = OriginSetConfig {
                origins: entry.origins().to_vec(),
                host_header: s.origin_host.as_deref().and_then(|h| h.parse().ok()),
                health_path: s.origin_health_path.clone(),
                weights: s.origin_weights.clone(),
            };
            let site = Site {
                host: s.host.clone(),
                origins: OriginSet::new(origins, client),
                cache_ttl: Duration::from_secs(s.cache_ttl_secs),
                waf: Waf::new(s),
                limiter,
                metrics: self.metrics.site(&s.host),
            };
            map.insert(&s.host, Arc::new(site));
        }
        self.sites.store(Arc::new(map));
    }

    /// Every site served now.
    pub fn sites(&self) -> Vec<Arc<Site>> {
        self.sites.load().values().cloned().collect()
    }

    /// The site serving `host` (any case, port ignored).
    pub fn site(&self, host: &str) -> Option<Arc<Site>> {
        self.sites.load().get(host).cloned()
    }

    /// Wraps an accepted client connection so its RTT is recorded when it ends.
    pub fn measure(&self, stream: TcpStream, peer: SocketAddr) -> measured_conn::Measured {
        measured_conn::Measured::new(stream, client_subnet::ClientSubnet::of(peer.ip()), self.subnet_rtts.clone())
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, EdgeError> {
    TcpListener::bind(addr).await.map_err(|source| EdgeError::Bind { addr, source })
}

/// Connects the RUM paths to the control plane and starts the measurement reporter.
fn start_measurements(
    config: &Config,
    edge: &Arc<Edge>,
    tasks: &mut JoinSet<std::io::Result<()>>,
    shutdown: &CancellationToken,
) {
    let api = match control_api::ControlApi::from_config(config) {
        None => return info!("no control_url: measurements are not reported"),
        Some(Err(e)) => return tracing::error!(error = %e, "measurement reporter cannot start"),
        Some(Ok(api)) => Arc::new(api),
    };
    edge.rum.connect(api.clone());
    let sources = measurement_report::Sources { edge: edge.subnet_rtts.clone(), rum: edge.rum.rtts.clone() };
    let (interval, shutdown) = (config.heartbeat_interval(), shutdown.clone());
    tasks.spawn(async move {
        measurement_report::run(api, sources, interval, shutdown).await;
        Ok(())
    });
}

/// What applies the control plane's purges; `None` without a control plane.
fn purger(config: &Config) -> Option<purge::Purger> {
    let api = match control_api::ControlApi::from_config(config)? {
        Ok(api) => api,
        Err(e) => {
            tracing::error!(error = %e, "purges from the control plane cannot be read");
            return None;
        }
    };
    let dir = config.cache_dir.as_deref().filter(|_| config.cache_disk_max_bytes > 0);
    Some(purge::Purger::new(api, purge::Cursor::load(dir)))
}

/// Runs the HTTP listener, the HTTPS listener when configured and the heartbeat
/// agent until `shutdown`, then drains connections.
pub async fn serve(config: Config, shutdown: CancellationToken) -> Result<(), EdgeError> {
    let edge = Arc::new(Edge::new(&config)?);
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
    let health =
        origin::run_health_checks(edge.clone(), Duration::from_secs(config.origin_health_secs), shutdown.clone());
    tasks.spawn(async move {
        health.await;
        Ok(())
    });
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
    start_measurements(&config, &edge, &mut tasks, &shutdown);
    if let Some(remote) = remote::RemoteConfig::from_config(&config) {
        let layers = remote::Local { sites: config.sites.clone(), certs: local_certs };
        let purger = purger(&config);
        let (edge, shutdown) = (edge.clone(), shutdown.clone());
        tasks.spawn(async move {
            remote::run(remote, layers, purger, edge, shutdown).await;
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
    edge.cache.flush().await;
    result
}
