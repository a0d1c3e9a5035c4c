//! The entry points beside plain DNS, each optional and each on any number
//! of addresses: DNS over TLS (`dns.dot_listen`), DNS over QUIC
//! (`dns.doq_listen`) and the HTTP 302
//! redirect (`http_redirect.listen`, [`crate::redirect`]). Every one answers from the same route
//! table as the UDP responder; this module only binds them and starts them.
//!
//! Each bound address is logged as `entry point listening` with `entry`
//! (`dot`, `doq`, `http`) and `addr`, so a configured port 0 can be found.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::dns::cert::{ALPN_DOT, CertError, Certificate};
use crate::dns::server::DnsServer;
use crate::metrics::Metrics;
use crate::redirect::{RedirectCounters, Redirector};

/// Why an entry point could not start.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error("loading the DoT/DoQ certificate: {0}")]
    Cert(#[from] CertError),
    #[error("DoT/DoQ need --tls-cert and --tls-key (TOML [tls] cert, key)")]
    NoCertificate,
    #[error("starting DNS over QUIC: {0}")]
    Doq(#[from] crate::dns::quic::DoqError),
    #[error("binding the {what} listener on {addr}: {source}")]
    Bind { what: &'static str, addr: SocketAddr, source: std::io::Error },
}

/// Binds and starts every configured entry point; the tasks end with
/// `shutdown`. The redirect counters join `metrics`.
pub async fn start(
    config: &Config,
    dns: Arc<DnsServer>,
    metrics: &Metrics,
    shutdown: CancellationToken,
) -> Result<Vec<JoinHandle<()>>, EntryError> {
    let mut tasks = Vec::new();
    let encrypted = !config.dns.dot_listen.is_empty() || !config.dns.doq_listen.is_empty();
    let cert = match (&config.tls.cert, &config.tls.key) {
        (Some(c), Some(k)) if encrypted => Some(Certificate::load(c, k)?),
        _ if encrypted => return Err(EntryError::NoCertificate),
        _ => None,
    };
    if let Some(cert) = &cert {
        tasks.push(tokio::spawn(cert.clone().reload_on_sighup(shutdown.clone())));
    }
    // `cert` is there whenever an encrypted address is (checked above).
    for (&addr, cert) in config.dns.dot_listen.iter().filter_map(|a| Some((a, cert.as_ref()?))) {
        let bind_err = |source| EntryError::Bind { what: "DNS over TLS", addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_err)?;
        log_bound("dot", listener.local_addr().map_err(bind_err)?);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config(ALPN_DOT)?));
        tasks.push(tokio::spawn(crate::dns::tls::run(dns.clone(), listener, acceptor, shutdown.clone())));
    }
    for (&addr, cert) in config.dns.doq_listen.iter().filter_map(|a| Some((a, cert.as_ref()?))) {
        let bind_err = |source| EntryError::Bind { what: "DNS over QUIC", addr, source };
        let socket = std::net::UdpSocket::bind(addr).map_err(bind_err)?;
        log_bound("doq", socket.local_addr().map_err(bind_err)?);
        let endpoint = crate::dns::quic::endpoint(cert, socket)?;
        tasks.push(tokio::spawn(crate::dns::quic::run(dns.clone(), endpoint, shutdown.clone())));
    }
    // One redirector (one set of counters) for every HTTP address.
    let redirector = (!config.http_redirect.listen.is_empty()).then(|| {
        let counters = Arc::new(RedirectCounters::default());
        let rendered = counters.clone();
        metrics.add_source(Box::new(move |out| rendered.render_prometheus(out)));
        Arc::new(Redirector {
            table: dns.table.clone(),
            settings: dns.settings.clone(),
            confirmation: dns.confirmation.clone(),
            trusted_proxies: config.http_redirect.trusted_proxies.clone(),
            counters,
        })
    });
    for (&addr, redirector) in config.http_redirect.listen.iter().filter_map(|a| Some((a, redirector.clone()?))) {
        let bind_err = |source| EntryError::Bind { what: "HTTP redirect", addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_err)?;
        log_bound("http", listener.local_addr().map_err(bind_err)?);
        let shutdown = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = redirector.run(listener, shutdown.clone()).await {
                tracing::error!(error = %e, "the HTTP redirect listener stopped");
            }
        }));
    }
    Ok(tasks)
}

fn log_bound(entry: &'static str, addr: SocketAddr) {
    tracing::info!(entry, addr = %addr, "entry point listening");
}
