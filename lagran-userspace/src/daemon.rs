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
use crate::store::{Store, StoreError, redact_url};
use crate::supervisor::Supervisor;

/// Flags of `lagran serve` beyond the configuration file.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Create the demo zone and its nodes when missing.
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
    #[error("the zones of the configuration: {0}")]
    DeclaredZones(#[from] crate::declared_zones::DeclaredZoneError),
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
    #[error("the CA certificates for https:// agent probes: {0}")]
    HealthCa(String),
    #[error(transparent)]
    SqliteLock(#[from] crate::cluster::SqliteLockError),
    #[error("the control API's TLS (--api-tls-cert/--api-tls-key): {0}")]
    ApiTls(crate::control_tls::ControlTlsError),
    #[error("the TLS to the control plane (--ca/--client-cert/--client-key): {0}")]
    ClientTls(crate::control_tls::ControlTlsError),
    #[error(transparent)]
    CookieSecret(#[from] crate::dns::cookie::SecretError),
}

/// How often `[cookies] secret_file` is checked for a new secret.
const COOKIE_SECRET_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// Response rate limiting and server cookies of the responder.
struct Guards {
    rrl: Option<Arc<crate::dns::rrl::RateLimiter>>,
    cookies: Arc<crate::dns::cookie::CookieJar>,
    /// The XDP program's rate limiting counts (when it is attached).
    xdp_rrl: Arc<crate::dns::rrl::XdpCounts>,
    /// The query log (`[dnstap]`), when on.
    dnstap: Option<Arc<crate::dnstap::Tap>>,
}

impl Guards {
    /// Builds both from the configuration, adds `lagran_rrl_responses_total`
    /// to `/metrics`, and starts the task that re-reads the cookie secret file
    /// and the query log's writer (the task ends once both have).
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
        let (dnstap, dnstap_task) = crate::dnstap::start(&config.dnstap, shutdown.clone()).unzip();
        if let Some(tap) = dnstap.clone() {
            metrics.add_source(Box::new(move |out| tap.render_prometheus(out)));
        }
        let watched = jar.clone();
        let token = shutdown.clone();
        let secret_loop = async move {
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
        };
        let task = tokio::spawn(async move {
            let writer = async move {
                if let Some(t) = dnstap_task {
                    let _ = t.await;
                }
            };
            tokio::join!(secret_loop, writer);
        });
        Ok((Guards { rrl, cookies: jar, xdp_rrl, dnstap }, task))
    }

    fn apply(&self, server: DnsServer) -> DnsServer {
        server.with_rrl(self.rrl.clone()).with_cookies(self.cookies.clone()).with_dnstap(self.dnstap.clone())
    }
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
    /// The `--config` file, re-read on SIGHUP.
    pub config_path: Option<std::path::PathBuf>,
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

impl ControlPlane {
    /// The API's state over this control plane: what `serve` and `control` both hand to [`api::run`].
    fn api_state(
        &self,
        config: &Config,
        metrics: Arc<Metrics>,
        console: Arc<crate::console::Console>,
        tasks: Arc<Supervisor>,
        api_url: String,
    ) -> AppState {
        AppState {
            store: self.store.clone(),
            scheduler: self.scheduler.clone(),
            dns: Arc::new(config.dns.clone()),
            auth: Arc::new(self.auth.clone()),
            metrics,
            public_resolvers: Arc::new(config.public_resolvers.clone()),
            geo_max_change_ratio: config.geo.max_change_ratio,
            console,
            tasks,
            api_url: api_url.into(),
        }
    }
}

/// `clusterable`: `lagran control`, which on PostgreSQL joins a cluster of
/// control processes instead of publishing at once.
async fn start_control(config: &Config, opts: &ServeOptions, clusterable: bool) -> Result<ControlPlane, DaemonError> {
    let store = Store::connect(&config.database_url)
        .await
        .map_err(|source| DaemonError::Store { url: redact_url(&config.database_url), source })?;
    tracing::info!(database = %redact_url(&config.database_url), backend = store.backend().as_str(), "store ready");
    let sqlite_lock = match crate::store::sqlite_file(&config.database_url) {
        Some(path) => Some(crate::cluster::lock_sqlite(&path)?),
        None => None,
    };
    let clustered = clusterable && store.backend() == crate::store::Backend::Postgres;
    if opts.demo {
        crate::demo::install(&store).await.map_err(DaemonError::Demo)?;
    }
    crate::declared_zones::install(config, &store).await?;
    let mut sources = crate::geo::Sources::of_settings(&config.geo);
    sources.asn_carriers_api = store
        .asn_carrier_map()
        .await
        .map_err(|source| DaemonError::Store { url: redact_url(&config.database_url), source })?;
    let geo = GeoDb::load_sources(&sources);
    if geo.v4().is_none() && geo.v6().is_none() {
        tracing::warn!(
            "no geo database loaded: every client is scheduled by weight and load (run scripts/fetch-geoip.sh)"
        );
    }
    crate::health::probe_tls_config(config.health.ca.as_deref()).map_err(DaemonError::HealthCa)?;
    let health = HealthMonitor::new(config.health.clone());
    let scheduler =
        Arc::new(Scheduler::new(store.clone(), config.schedule.clone(), health.clone(), geo, empty_shared()));
    scheduler.set_dnssec(Arc::new(config.dnssec_signing(store.clone())));
    scheduler.measurements().set_settings(config.steering.clone());
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
    api::run(listener, state, tls, shutdown).await
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

/// The loops only a leader runs (recompute, probes), until `token`; each is
/// restarted by `tasks` should it panic.
fn spawn_leader_loops(
    scheduler: &Arc<Scheduler>,
    health: &Arc<HealthMonitor>,
    store: &Store,
    tasks: &Arc<Supervisor>,
    acme: Option<&Arc<crate::acme::Renewer>>,
    token: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (run_scheduler, run_token) = (scheduler.clone(), token.clone());
    let recompute = tasks.spawn("recompute", token.clone(), move || run_scheduler.clone().run(run_token.clone()));
    let (health, store, scheduler, probe_token) = (health.clone(), store.clone(), scheduler.clone(), token.clone());
    let probes = tasks.spawn("probes", token.clone(), move || {
        let (probe_store, on_change) = (store.clone(), scheduler.clone());
        health.clone().run(
            move || {
                let store = probe_store.clone();
                async move { store.list_nodes().await.unwrap_or_default() }
            },
            move || on_change.notify(crate::scheduler::Change::Liveness),
            probe_token.clone(),
        )
    });
    let mut loops = vec![recompute, probes];
    if let Some(renewer) = acme {
        let (renewer, acme_token) = (renewer.clone(), token.clone());
        loops.push(tasks.spawn("acme", token.clone(), move || renewer.clone().run(acme_token.clone())));
    }
    loops
}

/// Starts the control plane's background loops (recompute, probes, SIGHUP
/// reload), each restarted by `tasks` should it panic; in a cluster, the
/// election, which runs the leader's loops.
fn spawn_control_loops(
    cp: &ControlPlane,
    config: &Config,
    advertise: String,
    shutdown: &CancellationToken,
    tasks: &Arc<Supervisor>,
    metrics: &Metrics,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (acme, expiry_task) = crate::acme::start(&config.acme, &cp.store, metrics, tasks, shutdown);
    let mut loops = if cp.clustered {
        let (s, h, st, t) = (cp.scheduler.clone(), cp.health.clone(), cp.store.clone(), tasks.clone());
        let cluster = crate::cluster::Cluster {
            store: cp.store.clone(),
            scheduler: cp.scheduler.clone(),
            database_url: config.database_url.clone(),
            advertise,
        };
        let leader_loops: crate::cluster::LeaderLoops =
            Box::new(move |token| spawn_leader_loops(&s, &h, &st, &t, acme.as_ref(), &token));
        vec![tokio::spawn(cluster.run(leader_loops, shutdown.clone()))]
    } else {
        spawn_leader_loops(&cp.scheduler, &cp.health, &cp.store, tasks, acme.as_ref(), shutdown)
    };
    loops.push(expiry_task);
    // SIGHUP: reload the geo files, refused above GEO_MAX_CHANGE_RATIO (scheduler::geo_reload).
    let (scheduler, ratio, token) = (cp.scheduler.clone(), config.geo.max_change_ratio, shutdown.clone());
    loops.push(tasks.spawn("geo-reload", shutdown.clone(), move || {
        crate::scheduler::geo_reload::sighup_loop(scheduler.clone(), ratio, token.clone())
    }));
    let (store, retention, token) = (cp.store.clone(), config.cluster.retention(), shutdown.clone());
    loops.push(tasks.spawn("ns-report-prune", shutdown.clone(), move || {
        crate::ns_reports::prune_loop(store.clone(), retention, token.clone())
    }));
    loops
}

/// `lagran serve`: control plane and DNS responder in one process. Runs until `shutdown`.
pub async fn serve(config: Config, opts: ServeOptions, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let tls = api_tls(&config)?;
    let cp = start_control(&config, &opts, false).await?;
    let counters = Arc::new(DnsCounters::default());
    // The geo reload's check samples what this process's responder answers.
    cp.scheduler.answered().set_local(counters.answered_prefixes.clone());
    let metrics = Arc::new(Metrics::new(counters.clone()));
    let listeners = bind_dns(&config).await?;
    let (api_listener, api_addr) = bind_api(&config).await?;
    let table = cp.scheduler.table().clone();
    let tasks = Supervisor::new();
    add_task_metrics(&metrics, &tasks);
    let mut loops = spawn_control_loops(&cp, &config, api_url(api_addr, tls.is_some()), &shutdown, &tasks, &metrics);
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
                dnstap: guards.dnstap.clone().map(|t| (t, config.dnstap.xdp_sample.every())),
            },
            &metrics,
            shutdown.clone(),
        )
        .map_err(|source| DaemonError::Xdp { iface: iface.clone(), source })?;
        loops.push(task);
    }
    add_confirmation_metrics(&metrics, cp.scheduler.confirmation().clone(), &config);
    crate::geo_age::add_metrics(&metrics, &config.geo);
    let dns = Arc::new(guards.apply(DnsServer::new(
        table,
        Arc::new(config.dns.clone()),
        counters,
        cp.scheduler.confirmation().clone(),
    )));
    // DoT, DoQ and the HTTP 302 redirect, when configured.
    loops.extend(crate::entry::start(&config, dns.clone(), &metrics, shutdown.clone()).await?);
    // The console's NS-host view: the one responder in this process.
    let console = Arc::new(crate::console::Console::new(Arc::new(crate::console::nshosts::LocalNsHost {
        table: cp.scheduler.table().clone(),
        confirmation: cp.scheduler.confirmation().clone(),
    })));
    loops.push(console.spawn_sampler(metrics.clone(), shutdown.clone()));
    let state = cp.api_state(&config, metrics, console, tasks, api_url(api_addr, tls.is_some()));
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
    crate::geo_age::add_metrics(&metrics, &config.geo);
    let (api_listener, api_addr) = bind_api(&config).await?;
    let api_url = api_url(api_addr, tls.is_some());
    let tasks = Supervisor::new();
    add_task_metrics(&metrics, &tasks);
    let mut loops = spawn_control_loops(&cp, &config, api_url.clone(), &shutdown, &tasks, &metrics);
    // No responder here: the console lists the NS hosts that report on the table stream.
    let console = Arc::new(crate::console::Console::new(Arc::new(crate::console::nshosts::NoNsHosts)));
    loops.push(console.spawn_sampler(metrics.clone(), shutdown.clone()));
    let state = cp.api_state(&config, metrics, console, tasks, api_url);
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
    // First of all, so that a SIGHUP never kills the process (its default action).
    let agent_token = Arc::new(std::sync::Mutex::new(config.agent_token.clone()));
    let reload = Arc::new(tokio::sync::Notify::new());
    let sighup = tokio::spawn(crate::nshost_reload::sighup_loop(
        opts.config_path.clone(),
        agent_token.clone(),
        reload.clone(),
        shutdown.clone(),
    ));
    let tasks = Supervisor::new();
    let table = empty_shared();
    let counters = Arc::new(DnsCounters::default());
    let metrics = Arc::new(Metrics::new(counters.clone()));
    let stats = Arc::new(crate::nshost::FollowerStats::default());
    let confirmation = Arc::new(crate::confirmation::Confirmation::new());
    add_confirmation_metrics(&metrics, confirmation.clone(), &config);
    add_task_metrics(&metrics, &tasks);
    let client_tls = config.client_tls();
    if opts.control.iter().any(|c| c.starts_with("https://")) {
        // Checked at start: a bad --ca or client certificate is an error now, not a failing stream later.
        client_tls.config().map_err(DaemonError::ClientTls)?;
    }
    let listeners = bind_dns(&config).await?;
    let host_name = opts.name.clone().unwrap_or_else(|| format!("{}/{}", host_name(), listeners.display()));
    let versions = tokio::sync::watch::Sender::new(0);
    let follower = {
        let (control, table, versions) = (opts.control.clone(), table.clone(), versions.clone());
        let (state_file, stats, confirmation) = (opts.state_file.clone(), stats.clone(), confirmation.clone());
        let poll_wait = crate::nshost::Follower::poll_wait(config.dns.stale_secs);
        let (agent_token, client_tls) = (agent_token.clone(), client_tls.clone());
        let (host_name, counters) = (host_name.clone(), counters.clone());
        // A SIGHUP makes a new follower with the token re-read (nshost_reload).
        move || {
            let agent_token = agent_token.lock().unwrap_or_else(|e| e.into_inner()).clone();
            crate::nshost::Follower {
                clients: agent_clients(&control, &agent_token, &client_tls),
                host_name: host_name.clone(),
                counters: counters.clone(),
                table: table.clone(),
                versions: versions.clone(),
                state_file: state_file.clone(),
                stats: stats.clone(),
                confirmation: confirmation.clone(),
                poll_wait,
            }
        }
    };
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
                    versions: versions.subscribe(),
                    confirmation: confirmation.clone(),
                    cookies: Some(guards.cookies.clone()),
                    rrl: (config.rrl.clone(), guards.xdp_rrl.clone()),
                    dnstap: guards.dnstap.clone().map(|t| (t, config.dnstap.xdp_sample.every())),
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
    let follow_task = {
        let (token, reload) = (shutdown.clone(), reload.clone());
        let follower = Arc::new(follower);
        tasks.spawn("follower", shutdown.clone(), move || {
            crate::nshost_reload::follow_until_reload(follower.clone(), reload.clone(), token.clone())
        })
    };
    let ops = ns_router(table, metrics, stats, tasks.clone());
    let control = opts.control.join(",");
    tracing::info!(dns = %listeners.display(), api = %api_addr, control = %control, name = %host_name, "lagran NS host serving");
    let dns_task = tokio::spawn(serve_dns(dns, listeners.sockets, shutdown.clone()));
    let token = shutdown.clone();
    let api_task = tokio::spawn(crate::listener::http::serve(
        "metrics",
        api_listener,
        ops,
        crate::listener::http::API_LIMITS,
        token,
    ));
    let result = tokio::select! {
        r = dns_task => flatten("the DNS responder", r),
        r = api_task => flatten("the metrics listener", r),
        _ = shutdown.cancelled() => Ok(()),
    };
    shutdown.cancel();
    let _ = follow_task.await;
    let _ = sighup.await;
    for t in entry_tasks {
        let _ = t.await;
    }
    if let Some(t) = xdp_task {
        let _ = t.await;
    }
    let _ = guard_task.await;
    result
}

/// One API client per control URL, in order, reading with the agent token.
fn agent_clients(
    control: &[String],
    agent_token: &Option<String>,
    tls: &crate::control_tls::ClientTls,
) -> Vec<crate::api_client::ApiClient> {
    control
        .iter()
        .map(|base| crate::api_client::ApiClient {
            base: base.clone(),
            admin_token: None,
            agent_token: agent_token.clone(),
            tls: tls.clone(),
        })
        .collect()
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

/// `/metrics` lines for the table's confirmation (how stale the answers are).
fn add_confirmation_metrics(metrics: &Metrics, confirmation: Arc<crate::confirmation::Confirmation>, config: &Config) {
    let stale_secs = config.dns.stale_secs;
    metrics.add_source(Box::new(move |out| {
        confirmation.render_prometheus(stale_secs, crate::clock::now_ms(), out);
    }));
}

/// `/metrics` lines for the supervised tasks' panics.
fn add_task_metrics(metrics: &Metrics, tasks: &Arc<Supervisor>) {
    let tasks = tasks.clone();
    metrics.add_source(Box::new(move |out| tasks.render_prometheus(out)));
}

fn ns_router(
    table: crate::route_table::SharedRouteTable,
    metrics: Arc<Metrics>,
    stats: Arc<crate::nshost::FollowerStats>,
    tasks: Arc<Supervisor>,
) -> axum::Router {
    use axum::routing::get;
    let t = table.clone();
    axum::Router::new()
        .route(
            "/healthz",
            get(move || {
                let t = t.load();
                let panicked = tasks.recent_panics();
                let body = serde_json::json!({
                    "status": if t.version == 0 { "starting" } else if panicked.is_empty() { "ok" } else { "degraded" },
                    "route_table_version": t.version,
                    "generated_at_ms": t.generated_at_ms,
                    "panicked_tasks": panicked,
                });
                // An NS host with a table is healthy even when the control plane is gone;
                // a background task that just panicked (and was restarted) is not.
                let status = if t.version == 0 || !panicked.is_empty() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn healthz(router: axum::Router) -> (u16, serde_json::Value) {
        let req = axum::http::Request::get("/healthz").body(axum::body::Body::empty()).unwrap();
        let resp = router.oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn a_panicked_task_makes_the_ns_hosts_healthz_503() {
        let table = empty_shared();
        table.store(Arc::new(crate::route_table::RouteTable::new(7, 1, vec![])));
        let metrics = Arc::new(Metrics::new(Arc::new(DnsCounters::default())));
        let stats = Arc::new(crate::nshost::FollowerStats::default());
        let tasks = Supervisor::new();
        let router = ns_router(table, metrics, stats, tasks.clone());
        assert_eq!(healthz(router.clone()).await.0, 200);

        let shutdown = CancellationToken::new();
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = runs.clone();
        let token = shutdown.clone();
        let task = tasks.spawn("follower", shutdown.clone(), move || {
            let (runs, token) = (counted.clone(), token.clone());
            async move {
                if runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    panic!("the follower broke");
                }
                token.cancelled().await;
            }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while runs.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            assert!(std::time::Instant::now() < deadline, "the task was not restarted");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let (status, body) = healthz(router).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["status"], "degraded");
        assert_eq!(body["panicked_tasks"][0]["task"], "follower");
        assert_eq!(body["panicked_tasks"][0]["message"], "the follower broke");
        shutdown.cancel();
        task.await.unwrap();
    }
}
