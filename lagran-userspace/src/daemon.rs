//! The daemon's roles, each stopped by one cancellation token:
//! - `lagran serve`: everything in one process (store, scheduler, DNS, API);
//! - `lagran control`: the control plane only;
//! - `lagran dns`: an NS host following a control plane's route-table stream.

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
    /// Attach the XDP fast path to this interface.
    pub xdp: Option<String>,
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
    #[error("attaching the XDP fast path to {iface}: {source}")]
    Xdp { iface: String, source: crate::xdp::XdpError },
    #[error(transparent)]
    Entry(#[from] crate::entry::EntryError),
    #[error(transparent)]
    SqliteLock(#[from] crate::cluster::SqliteLockError),
    #[error("the control API's TLS (--api-tls-cert/--api-tls-key): {0}")]
    ApiTls(crate::control_tls::ControlTlsError),
    #[error("the TLS to the control plane (--ca/--client-cert/--client-key): {0}")]
    ClientTls(crate::control_tls::ControlTlsError),
}

/// Flags of `lagran dns` (an NS host following a control plane).
#[derive(Clone, Debug)]
pub struct DnsHostOptions {
    /// The control processes' APIs, e.g. `http://10.0.0.1:8080`, in the order tried.
    pub control: Vec<String>,
    /// This NS host's name in its reports to the control plane (default: host name and DNS address).
    pub name: Option<String>,
    /// Where the last received table is saved, so a restart without the control plane still answers.
    pub state_file: Option<std::path::PathBuf>,
    /// Attach the XDP fast path to this interface.
    pub xdp: Option<String>,
}

/// The control plane's running parts.
struct ControlPlane {
    store: Store,
    scheduler: Arc<Scheduler>,
    health: Arc<HealthMonitor>,
    auth: Auth,
    /// `lagran control` on PostgreSQL: one of a cluster (`crate::cluster`).
    clustered: bool,
    /// On SQLite: the lock that keeps a second control process off the file.
    _sqlite_lock: Option<std::fs::File>,
}

/// `clusterable`: `lagran control`, which on PostgreSQL joins a cluster of
/// control processes instead of publishing at once.
async fn start_control(config: &Config, opts: &ServeOptions, clusterable: bool) -> Result<ControlPlane, DaemonError> {
    let store = Store::connect(&config.database_url)
        .await
        .map_err(|source| DaemonError::Store { url: redact(&config.database_url), source })?;
    tracing::info!(database = %redact(&config.database_url), backend = store.backend().as_str(), "store ready");
    let sqlite_lock = match crate::store::sqlite_file(&config.database_url) {
        Some(path) => Some(crate::cluster::lock_sqlite(&path)?),
        None => None,
    };
    let clustered = clusterable && store.backend() == crate::store::Backend::Postgres;
    if opts.demo {
        crate::demo::install(&store).await.map_err(DaemonError::Demo)?;
    }
    let geo = GeoDb::load(config.geo.ipv4_path.as_deref(), config.geo.ipv6_path.as_deref());
    if geo.v4().is_none() && geo.v6().is_none() {
        tracing::warn!(
            "no geo database loaded: every client is scheduled by weight and load (run scripts/fetch-geoip.sh)"
        );
    }
    let health = HealthMonitor::new(config.health.clone());
    let scheduler =
        Arc::new(Scheduler::new(store.clone(), config.schedule.clone(), health.clone(), geo, empty_shared()));
    let overrides = scheduler.reload_overrides().await.map_err(DaemonError::FirstRecompute)?;
    if overrides > 0 {
        tracing::info!(overrides, "geo overrides applied");
    }
    if clustered {
        // The leader, once elected, publishes the first table (crate::cluster).
        scheduler.join_cluster();
    } else {
        if scheduler.restore_freeze().await.map_err(DaemonError::FirstRecompute)? {
            tracing::warn!("a rollback made before the restart still holds the route table");
        }
        let first = scheduler.recompute().await.map_err(DaemonError::FirstRecompute)?;
        tracing::info!(version = first.version, names = first.scheduled_names().count(), "first route table ready");
    }

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
    Ok(ControlPlane { store, scheduler, health, auth, clustered, _sqlite_lock: sqlite_lock })
}

/// The control API's TLS configuration, when `[api.tls]` names a certificate.
fn api_tls(config: &Config) -> Result<Option<Arc<rustls::ServerConfig>>, DaemonError> {
    let t = &config.api.tls;
    match (&t.cert, &t.key) {
        (Some(cert), Some(key)) => {
            crate::control_tls::server_config(cert, key, t.client_ca.as_deref()).map(Some).map_err(DaemonError::ApiTls)
        }
        _ => Ok(None),
    }
}

/// Serves the control API, over TLS when configured, until `shutdown`.
async fn serve_api(
    listener: TcpListener,
    state: AppState,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    match tls {
        Some(config) => api::tls::run(listener, config, api::router(state), shutdown).await,
        None => api::run(listener, state, shutdown).await,
    }
}

/// The control API's URL as clients reach it.
fn api_url(addr: SocketAddr, tls: bool) -> String {
    format!("{}://{addr}", if tls { "https" } else { "http" })
}

async fn bind_api(config: &Config) -> Result<(TcpListener, SocketAddr), DaemonError> {
    let l = TcpListener::bind(config.api_listen)
        .await
        .map_err(|source| DaemonError::BindApi { addr: config.api_listen, source })?;
    let addr = l.local_addr().map_err(|source| DaemonError::BindApi { addr: config.api_listen, source })?;
    Ok((l, addr))
}

/// The DNS listeners, one UDP socket and one TCP listener per `dns_listen` address.
struct DnsListeners {
    sockets: Vec<(tokio::net::UdpSocket, TcpListener)>,
    /// The bound addresses (a port 0 in the configuration resolved).
    addrs: Vec<SocketAddr>,
}

impl DnsListeners {
    /// For logs: `127.0.0.1:53, [::1]:53`.
    fn display(&self) -> String {
        self.addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(", ")
    }
}

async fn bind_dns(config: &Config) -> Result<DnsListeners, DaemonError> {
    let mut l = DnsListeners { sockets: Vec::new(), addrs: Vec::new() };
    for &addr in &config.dns_listen {
        let (udp, tcp) = bind(addr).await.map_err(|source| DaemonError::BindDns { addr, source })?;
        let bound = udp.local_addr().map_err(|source| DaemonError::BindDns { addr, source })?;
        l.sockets.push((udp, tcp));
        l.addrs.push(bound);
    }
    Ok(l)
}

/// Runs the responder on every listener until `shutdown`; the first listener to fail ends it.
async fn serve_dns(
    dns: Arc<DnsServer>,
    sockets: Vec<(tokio::net::UdpSocket, TcpListener)>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut set = tokio::task::JoinSet::new();
    for (udp, tcp) in sockets {
        set.spawn(dns.clone().run(udp, tcp, shutdown.clone()));
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|join| std::io::Error::other(join.to_string()))??;
    }
    Ok(())
}

/// The loops only a leader runs (recompute, probes), until `token`.
fn spawn_leader_loops(
    scheduler: &Arc<Scheduler>,
    health: &Arc<HealthMonitor>,
    store: &Store,
    token: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let probe_store = store.clone();
    let on_change = scheduler.clone();
    vec![
        tokio::spawn(scheduler.clone().run(token.clone())),
        tokio::spawn(health.clone().run(
            move || {
                let store = probe_store.clone();
                async move { store.list_nodes().await.unwrap_or_default() }
            },
            move || on_change.notify(crate::scheduler::Change::Liveness),
            token.clone(),
        )),
    ]
}

/// Starts the control plane's background loops (recompute, probes, SIGHUP
/// reload); in a cluster, the election, which runs the leader's loops.
fn spawn_control_loops(
    cp: &ControlPlane,
    config: &Config,
    advertise: String,
    shutdown: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let scheduler = cp.scheduler.clone();
    let mut loops = if cp.clustered {
        let (s, h, st) = (cp.scheduler.clone(), cp.health.clone(), cp.store.clone());
        let cluster = crate::cluster::Cluster {
            store: cp.store.clone(),
            scheduler: cp.scheduler.clone(),
            database_url: config.database_url.clone(),
            advertise,
        };
        let leader_loops: crate::cluster::LeaderLoops = Box::new(move |token| spawn_leader_loops(&s, &h, &st, &token));
        vec![tokio::spawn(cluster.run(leader_loops, shutdown.clone()))]
    } else {
        spawn_leader_loops(&cp.scheduler, &cp.health, &cp.store, shutdown)
    };
    // SIGHUP: reload the geo files, refused above GEO_MAX_CHANGE_RATIO (scheduler::geo_reload).
    loops.push(tokio::spawn(crate::scheduler::geo_reload::sighup_loop(
        scheduler,
        config.geo.max_change_ratio,
        shutdown.clone(),
    )));
    loops
}

/// `lagran serve`: control plane and DNS responder in one process. Runs until `shutdown`.
pub async fn serve(config: Config, opts: ServeOptions, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let tls = api_tls(&config)?;
    let cp = start_control(&config, &opts, false).await?;
    let counters = Arc::new(DnsCounters::default());
    let metrics = Arc::new(Metrics::new(counters.clone()));
    let listeners = bind_dns(&config).await?;
    let (api_listener, api_addr) = bind_api(&config).await?;
    let table = cp.scheduler.table().clone();
    let mut loops = spawn_control_loops(&cp, &config, api_url(api_addr, tls.is_some()), &shutdown);
    if let Some(iface) = &opts.xdp {
        let task = crate::xdp::sync::start(
            iface,
            &listeners.addrs,
            config.dns.clone(),
            crate::xdp::sync::Follow {
                table: table.clone(),
                versions: cp.scheduler.subscribe(),
                confirmation: cp.scheduler.confirmation().clone(),
            },
            &metrics,
            shutdown.clone(),
        )
        .map_err(|source| DaemonError::Xdp { iface: iface.clone(), source })?;
        loops.push(task);
    }
    add_confirmation_metrics(&metrics, cp.scheduler.confirmation().clone(), &config);
    let dns =
        Arc::new(DnsServer::new(table, Arc::new(config.dns.clone()), counters, cp.scheduler.confirmation().clone()));
    // DoT, DoQ and the HTTP 302 redirect, when configured.
    loops.extend(crate::entry::start(&config, dns.clone(), &metrics, shutdown.clone()).await?);
    let state = AppState {
        store: cp.store.clone(),
        scheduler: cp.scheduler.clone(),
        dns: Arc::new(config.dns.clone()),
        auth: Arc::new(cp.auth),
        metrics,
        public_resolvers: Arc::new(config.public_resolvers.clone()),
        geo_max_change_ratio: config.geo.max_change_ratio,
        api_url: api_url(api_addr, tls.is_some()).into(),
    };
    tracing::info!(dns = %listeners.display(), api = %api_addr, tls = tls.is_some(), "lagran serving");

    let dns_task = tokio::spawn(serve_dns(dns, listeners.sockets, shutdown.clone()));
    let api_task = tokio::spawn(serve_api(api_listener, state, tls, shutdown.clone()));
    let result = tokio::select! {
        r = dns_task => flatten("the DNS responder", r),
        r = api_task => flatten("the control API", r),
        _ = shutdown.cancelled() => Ok(()),
    };
    shutdown.cancel();
    for l in loops {
        let _ = l.await;
    }
    tracing::info!("lagran stopped");
    result
}

/// `lagran control`: the control plane without a DNS responder (production:
/// one control plane with PostgreSQL, N NS hosts running `lagran dns`).
pub async fn control(config: Config, opts: ServeOptions, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let tls = api_tls(&config)?;
    let cp = start_control(&config, &opts, true).await?;
    let metrics = Arc::new(Metrics::new(Arc::new(DnsCounters::default())));
    add_confirmation_metrics(&metrics, cp.scheduler.confirmation().clone(), &config);
    let (api_listener, api_addr) = bind_api(&config).await?;
    let api_url = api_url(api_addr, tls.is_some());
    let loops = spawn_control_loops(&cp, &config, api_url.clone(), &shutdown);
    let state = AppState {
        store: cp.store.clone(),
        scheduler: cp.scheduler.clone(),
        dns: Arc::new(config.dns.clone()),
        auth: Arc::new(cp.auth),
        metrics,
        public_resolvers: Arc::new(config.public_resolvers.clone()),
        geo_max_change_ratio: config.geo.max_change_ratio,
        api_url: api_url.into(),
    };
    tracing::info!(api = %api_addr, clustered = cp.clustered, tls = tls.is_some(), "lagran control plane serving");
    let result = flatten("the control API", tokio::spawn(serve_api(api_listener, state, tls, shutdown.clone())).await);
    shutdown.cancel();
    for l in loops {
        let _ = l.await;
    }
    result
}

/// `lagran dns --control URL`: an NS host. Answers from the tables the control
/// plane streams, keeps the last one when it is gone, and serves `/metrics`
/// and `/healthz` on the API address.
pub async fn dns_host(config: Config, opts: DnsHostOptions, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let table = empty_shared();
    let counters = Arc::new(DnsCounters::default());
    let metrics = Arc::new(Metrics::new(counters.clone()));
    let stats = Arc::new(crate::nshost::FollowerStats::default());
    let confirmation = Arc::new(crate::confirmation::Confirmation::new());
    add_confirmation_metrics(&metrics, confirmation.clone(), &config);
    let client_tls = config.client_tls();
    if opts.control.iter().any(|c| c.starts_with("https://")) {
        // Checked at start: a bad --ca or client certificate is an error now, not a failing stream later.
        client_tls.config().map_err(DaemonError::ClientTls)?;
    }
    let listeners = bind_dns(&config).await?;
    let host_name = opts.name.clone().unwrap_or_else(|| format!("{}/{}", host_name(), listeners.display()));
    let follower = crate::nshost::Follower {
        clients: opts
            .control
            .iter()
            .map(|base| crate::api_client::ApiClient {
                base: base.clone(),
                admin_token: None,
                agent_token: config.agent_token.clone(),
                tls: client_tls.clone(),
            })
            .collect(),
        host_name: host_name.clone(),
        counters: counters.clone(),
        table: table.clone(),
        versions: tokio::sync::watch::Sender::new(0),
        state_file: opts.state_file.clone(),
        stats: stats.clone(),
        confirmation: confirmation.clone(),
        poll_wait: crate::nshost::Follower::poll_wait(config.dns.stale_secs),
    };
    let (api_listener, api_addr) = bind_api(&config).await?;
    let xdp_task = match &opts.xdp {
        Some(iface) => Some(
            crate::xdp::sync::start(
                iface,
                &listeners.addrs,
                config.dns.clone(),
                crate::xdp::sync::Follow {
                    table: table.clone(),
                    versions: follower.versions.subscribe(),
                    confirmation: confirmation.clone(),
                },
                &metrics,
                shutdown.clone(),
            )
            .map_err(|source| DaemonError::Xdp { iface: iface.clone(), source })?,
        ),
        None => None,
    };
    let dns = Arc::new(DnsServer::new(table.clone(), Arc::new(config.dns.clone()), counters, confirmation.clone()));
    let entry_tasks = crate::entry::start(&config, dns.clone(), &metrics, shutdown.clone()).await?;
    let follow_task = tokio::spawn(follower.run(shutdown.clone()));
    let ops = ns_router(table, metrics, stats);
    let control = opts.control.join(",");
    tracing::info!(dns = %listeners.display(), api = %api_addr, control = %control, name = %host_name, "lagran NS host serving");
    let dns_task = tokio::spawn(serve_dns(dns, listeners.sockets, shutdown.clone()));
    let token = shutdown.clone();
    let api_task = tokio::spawn(async move {
        axum::serve(api_listener, ops).with_graceful_shutdown(async move { token.cancelled().await }).await
    });
    let result = tokio::select! {
        r = dns_task => flatten("the DNS responder", r),
        r = api_task => flatten("the metrics listener", r),
        _ = shutdown.cancelled() => Ok(()),
    };
    shutdown.cancel();
    let _ = follow_task.await;
    for t in entry_tasks {
        let _ = t.await;
    }
    if let Some(t) = xdp_task {
        let _ = t.await;
    }
    result
}

/// This machine's host name (`localhost` when it has none).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if rc == 0 && !name.is_empty() => name.to_string(),
        _ => "localhost".to_string(),
    }
}

/// `/metrics` lines for the table's confirmation (SPEC §7 staleness).
fn add_confirmation_metrics(metrics: &Metrics, confirmation: Arc<crate::confirmation::Confirmation>, config: &Config) {
    let settings = config.dns.clone();
    metrics.add_source(Box::new(move |out| {
        confirmation.render_prometheus(&settings, crate::clock::now_ms(), out);
    }));
}

fn ns_router(
    table: crate::route_table::SharedRouteTable,
    metrics: Arc<Metrics>,
    stats: Arc<crate::nshost::FollowerStats>,
) -> axum::Router {
    use axum::routing::get;
    let t = table.clone();
    axum::Router::new()
        .route(
            "/healthz",
            get(move || {
                let t = t.load();
                let body =
                    serde_json::json!({ "route_table_version": t.version, "generated_at_ms": t.generated_at_ms });
                // An NS host with a table is healthy even when the control plane is gone.
                let status = if t.version == 0 {
                    axum::http::StatusCode::SERVICE_UNAVAILABLE
                } else {
                    axum::http::StatusCode::OK
                };
                async move { (status, axum::Json(body)) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let table = table.load_full();
                let metrics = metrics.clone();
                let stats = stats.clone();
                async move {
                    let mut body = metrics.render(&table, None);
                    stats.render_prometheus(&mut body);
                    body
                }
            }),
        )
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
