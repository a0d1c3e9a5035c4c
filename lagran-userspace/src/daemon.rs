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
    CookieSecret(#[from] crate::dns::cookie::SecretError),
}

/// How often `[cookies] secret_file` is checked for a new secret.
const COOKIE_SECRET_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// Response rate limiting and server cookies of the responder (issue: hostile traffic).
struct Guards {
    rrl: Option<Arc<crate::dns::rrl::RateLimiter>>,
    cookies: Arc<crate::dns::cookie::CookieJar>,
    /// The XDP program's rate limiting counts (when it is attached).
    xdp_rrl: Arc<crate::dns::rrl::XdpCounts>,
}

impl Guards {
    /// Builds both from the configuration, adds `lagran_rrl_responses_total`
    /// to `/metrics`, and starts the task that re-reads the cookie secret file.
    fn start(
        config: &Config,
        metrics: &Metrics,
        xdp: bool,
        shutdown: &CancellationToken,
    ) -> Result<(Guards, tokio::task::JoinHandle<()>), DaemonError> {
        use crate::dns::cookie::{self, CookieJar};
        use crate::dns::rrl::{self, RateLimiter, ResponseClass};
        let rrl = RateLimiter::new(&config.rrl).map(Arc::new);
        if rrl.is_some() {
            tracing::info!(
                responses_per_second = config.rrl.responses_per_second,
                slip = config.rrl.slip,
                window_secs = config.rrl.window_secs,
                "response rate limiting on"
            );
        }
        let jar = Arc::new(CookieJar::load(&config.cookies)?);
        match jar.file() {
            Some(p) => {
                tracing::info!(secret_file = %p.display(), grace_secs = config.cookies.grace_secs, "server cookies on")
            }
            None => tracing::info!(
                "server cookies on with a random secret made at start: NS hosts sharing an (anycast) address need one [cookies] secret_file"
            ),
        }
        let limiter = rrl.clone();
        let xdp_rrl = Arc::new(rrl::XdpCounts::default());
        let xdp_counts = xdp.then(|| xdp_rrl.clone());
        metrics.add_source(Box::new(move |out| {
            let counts = ResponseClass::ALL.map(|c| limiter.as_ref().map_or((0, 0), |l| l.counts(c)));
            match &xdp_counts {
                Some(x) => rrl::render_prometheus(out, &[("userspace", counts), ("xdp", x.by_class())]),
                None => rrl::render_prometheus(out, &[("userspace", counts)]),
            }
        }));
        let watched = jar.clone();
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            if watched.file().is_none() {
                return;
            }
            loop {
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(COOKIE_SECRET_POLL) => {}
                }
                match watched.reload_if_changed(cookie::unix_now()) {
                    Ok(true) => tracing::info!("cookie secret rotated; the previous one stays valid for grace_secs"),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "cookie secret file unusable; keeping the secret in force"),
                }
            }
        });
        Ok((Guards { rrl, cookies: jar, xdp_rrl }, task))
    }

    fn apply(&self, server: DnsServer) -> DnsServer {
        server.with_rrl(self.rrl.clone()).with_cookies(self.cookies.clone())
    }
}

/// Flags of `lagran dns` (an NS host following a control plane).
#[derive(Clone, Debug)]
pub struct DnsHostOptions {
    /// The control plane's API, e.g. `http://10.0.0.1:8080`.
    pub control: String,
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
}

async fn start_control(config: &Config, opts: &ServeOptions) -> Result<ControlPlane, DaemonError> {
    let store = Store::connect(&config.database_url)
        .await
        .map_err(|source| DaemonError::Store { url: redact(&config.database_url), source })?;
    tracing::info!(database = %redact(&config.database_url), backend = store.backend().as_str(), "store ready");
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
    if scheduler.restore_freeze().await.map_err(DaemonError::FirstRecompute)? {
        tracing::warn!("a rollback made before the restart still holds the route table");
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
    Ok(ControlPlane { store, scheduler, health, auth })
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

/// Starts the control plane's background loops (recompute, probes, SIGHUP reload).
fn spawn_control_loops(
    cp: &ControlPlane,
    config: &Config,
    shutdown: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let scheduler = cp.scheduler.clone();
    let probe_store = cp.store.clone();
    let on_change = scheduler.clone();
    vec![
        tokio::spawn(scheduler.clone().run(shutdown.clone())),
        tokio::spawn(cp.health.clone().run(
            move || {
                let store = probe_store.clone();
                async move { store.list_nodes().await.unwrap_or_default() }
            },
            move || on_change.notify(crate::scheduler::Change::Liveness),
            shutdown.clone(),
        )),
        // SIGHUP: reload the geo files, refused above GEO_MAX_CHANGE_RATIO (scheduler::geo_reload).
        tokio::spawn(crate::scheduler::geo_reload::sighup_loop(
            scheduler,
            config.geo.max_change_ratio,
            shutdown.clone(),
        )),
    ]
}

/// `lagran serve`: control plane and DNS responder in one process. Runs until `shutdown`.
pub async fn serve(config: Config, opts: ServeOptions, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let cp = start_control(&config, &opts).await?;
    let counters = Arc::new(DnsCounters::default());
    let metrics = Arc::new(Metrics::new(counters.clone()));
    let listeners = bind_dns(&config).await?;
    let (api_listener, api_addr) = bind_api(&config).await?;
    let table = cp.scheduler.table().clone();
    let mut loops = spawn_control_loops(&cp, &config, &shutdown);
    let (guards, guard_task) = Guards::start(&config, &metrics, opts.xdp.is_some(), &shutdown)?;
    loops.push(guard_task);
    if let Some(iface) = &opts.xdp {
        let task = crate::xdp::sync::start(
            iface,
            &listeners.addrs,
            config.dns.clone(),
            crate::xdp::sync::Follow {
                table: table.clone(),
                versions: cp.scheduler.subscribe(),
                confirmation: cp.scheduler.confirmation().clone(),
                cookies: Some(guards.cookies.clone()),
                rrl: (config.rrl.clone(), guards.xdp_rrl.clone()),
            },
            &metrics,
            shutdown.clone(),
        )
        .map_err(|source| DaemonError::Xdp { iface: iface.clone(), source })?;
        loops.push(task);
    }
    add_confirmation_metrics(&metrics, cp.scheduler.confirmation().clone(), &config);
    let dns = Arc::new(guards.apply(DnsServer::new(
        table,
        Arc::new(config.dns.clone()),
        counters,
        cp.scheduler.confirmation().clone(),
    )));
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
    };
    tracing::info!(dns = %listeners.display(), api = %api_addr, "lagran serving");

    let dns_task = tokio::spawn(serve_dns(dns, listeners.sockets, shutdown.clone()));
    let api_task = tokio::spawn(api::run(api_listener, state, shutdown.clone()));
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
    let cp = start_control(&config, &opts).await?;
    let metrics = Arc::new(Metrics::new(Arc::new(DnsCounters::default())));
    add_confirmation_metrics(&metrics, cp.scheduler.confirmation().clone(), &config);
    let (api_listener, api_addr) = bind_api(&config).await?;
    let loops = spawn_control_loops(&cp, &config, &shutdown);
    let state = AppState {
        store: cp.store.clone(),
        scheduler: cp.scheduler.clone(),
        dns: Arc::new(config.dns.clone()),
        auth: Arc::new(cp.auth),
        metrics,
        public_resolvers: Arc::new(config.public_resolvers.clone()),
        geo_max_change_ratio: config.geo.max_change_ratio,
    };
    tracing::info!(api = %api_addr, "lagran control plane serving");
    let result = flatten("the control API", tokio::spawn(api::run(api_listener, state, shutdown.clone())).await);
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
    let follower = crate::nshost::Follower {
        client: crate::api_client::ApiClient {
            base: opts.control.clone(),
            admin_token: None,
            agent_token: config.agent_token.clone(),
        },
        table: table.clone(),
        versions: tokio::sync::watch::Sender::new(0),
        state_file: opts.state_file.clone(),
        stats: stats.clone(),
        confirmation: confirmation.clone(),
        poll_wait: crate::nshost::Follower::poll_wait(config.dns.stale_secs),
    };
    let listeners = bind_dns(&config).await?;
    let (api_listener, api_addr) = bind_api(&config).await?;
    let (guards, guard_task) = Guards::start(&config, &metrics, opts.xdp.is_some(), &shutdown)?;
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
                    cookies: Some(guards.cookies.clone()),
                    rrl: (config.rrl.clone(), guards.xdp_rrl.clone()),
                },
                &metrics,
                shutdown.clone(),
            )
            .map_err(|source| DaemonError::Xdp { iface: iface.clone(), source })?,
        ),
        None => None,
    };
    let dns = Arc::new(guards.apply(DnsServer::new(
        table.clone(),
        Arc::new(config.dns.clone()),
        counters,
        confirmation.clone(),
    )));
    let entry_tasks = crate::entry::start(&config, dns.clone(), &metrics, shutdown.clone()).await?;
    let follow_task = tokio::spawn(follower.run(shutdown.clone()));
    let ops = ns_router(table, metrics, stats);
    tracing::info!(dns = %listeners.display(), api = %api_addr, control = %opts.control, "lagran NS host serving");
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
    let _ = guard_task.await;
    result
}

/// `/healthz` and `/metrics` of an NS host.
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
