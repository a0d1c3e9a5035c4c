//! Certificates without hand work: the control plane gets and renews the
//! certificate of every site with `"acme": true` from an ACME server
//! (RFC 8555), and stores it with its private key like any other certificate,
//! so the edges pick it up on their next read of `/api/v1/certificates`.
//!
//! - [`settings`]: `[acme]` (directory, contact, CA, renewal window).
//! - [`client`]: the HTTPS client the ACME library speaks through.
//! - [`account`]: the ACME account, kept in the store.
//! - [`order`]: one order, its HTTP-01 challenge and the certificate.
//! - [`window`]: when to order (pure).
//! - [`renewal`]: the leader's loop over the sites.
//! - [`not_after`], [`expiry`]: when each certificate expires, for the metrics.
//!
//! HTTP-01, not DNS-01: the edges already serve every site's host on port 80,
//! and the challenge answer comes from the store through the control API
//! (`GET /api/v1/acme/challenges/{token}`, which the edges ask when
//! `GET /.well-known/acme-challenge/{token}` reaches them), so the answer is
//! at every edge the moment it is stored and the ACME server is told to look
//! only after that. DNS-01 would need TXT records in zones that the sites'
//! owners, not Lagran, usually serve.

pub mod account;
pub mod client;
pub mod expiry;
pub mod not_after;
pub mod order;
pub mod renewal;
pub mod settings;
pub mod window;

pub use expiry::ExpiryBoard;
pub use renewal::Renewer;
pub use settings::{ACME_KEYS, AcmeSettings};

use crate::store::StoreError;

/// Why an ACME order or the account failed.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("{what}: {source}")]
    Acme { what: &'static str, source: instant_acme::Error },
    #[error("the ACME HTTP client: {0}")]
    Client(String),
    #[error("the ACME account kept in the store cannot be used: {0}")]
    StoredAccount(String),
    #[error("the order for {host}: {reason}")]
    Order { host: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AcmeError {
    fn acme(what: &'static str, source: instant_acme::Error) -> AcmeError {
        AcmeError::Acme { what, source }
    }
}

/// Starts the expiry metrics of every control process (`certificate-expiry`,
/// restarted by `tasks` should it panic) and returns the leader's renewer, if
/// `[acme]` names a directory.
pub fn start(
    settings: &AcmeSettings,
    store: &crate::store::Store,
    metrics: &crate::metrics::Metrics,
    tasks: &std::sync::Arc<crate::supervisor::Supervisor>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> (Option<std::sync::Arc<Renewer>>, tokio::task::JoinHandle<()>) {
    let board = std::sync::Arc::new(ExpiryBoard::default());
    let shown = board.clone();
    metrics.add_source(Box::new(move |out| shown.render_prometheus(out, expiry::now_secs())));
    let (refreshed, store_copy, token) = (board.clone(), store.clone(), shutdown.clone());
    let task = tasks.spawn("certificate-expiry", shutdown.clone(), move || {
        let (board, store, token) = (refreshed.clone(), store_copy.clone(), token.clone());
        async move { board.refresh_loop(store, token).await }
    });
    (Renewer::new(settings, store.clone(), board), task)
}
