//! Certificate expiry as the metrics show it: every stored certificate's
//! `notAfter`, re-read from the store every minute in every control process
//! (and at once after an order), and the ACME client's order counts.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::not_after::not_after_of_pem;
use crate::clock::now_ms;
use crate::store::{Store, StoreError};

/// How often the certificates are re-read for the metrics.
const REFRESH_EVERY: Duration = Duration::from_secs(60);

/// What `/metrics` reports about certificates.
#[derive(Debug, Default)]
pub struct ExpiryBoard {
    /// `notAfter` (Unix seconds) by domain; `None`: the certificate cannot be read.
    not_after: Mutex<BTreeMap<String, Option<i64>>>,
    issued: AtomicU64,
    failed: AtomicU64,
}

impl ExpiryBoard {
    /// Re-reads every certificate of the store.
    pub async fn refresh(&self, store: &Store) -> Result<(), StoreError> {
        let certs = store.list_certificates().await?;
        let fresh = certs.into_iter().map(|c| (c.domain, not_after_of_pem(&c.cert_pem))).collect();
        *self.not_after.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    /// Counts an order that ended with a certificate (`true`) or without.
    pub fn count_order(&self, issued: bool) {
        let counter = if issued { &self.issued } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Re-reads the store every [`REFRESH_EVERY`] until `shutdown`.
    pub async fn refresh_loop(&self, store: Store, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.refresh(&store).await {
                tracing::warn!(error = %e, "cannot read the certificates for their expiry metrics");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(REFRESH_EVERY) => {}
            }
        }
    }

    /// `/metrics` lines at `now` (Unix seconds).
    pub fn render_prometheus(&self, out: &mut String, now: i64) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "# HELP lagran_certificate_expiry_seconds Seconds until each stored certificate expires (negative: expired)."
        );
        let _ = writeln!(out, "# TYPE lagran_certificate_expiry_seconds gauge");
        let not_after = self.not_after.lock().unwrap_or_else(|e| e.into_inner());
        for (domain, at) in not_after.iter() {
            if let Some(at) = at {
                let _ = writeln!(out, "lagran_certificate_expiry_seconds{{domain=\"{domain}\"}} {}", at - now);
            }
        }
        let _ = writeln!(out, "# HELP lagran_acme_orders_total ACME orders of this process, by result.");
        let _ = writeln!(out, "# TYPE lagran_acme_orders_total counter");
        for (result, n) in [("issued", &self.issued), ("failed", &self.failed)] {
            let _ = writeln!(out, "lagran_acme_orders_total{{result=\"{result}\"}} {}", n.load(Ordering::Relaxed));
        }
    }
}

/// Now in Unix seconds.
pub fn now_secs() -> i64 {
    now_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_seconds_to_expiry_and_orders() {
        let board = ExpiryBoard::default();
        board.not_after.lock().unwrap().extend([("a.test".to_string(), Some(5_000)), ("bad.test".to_string(), None)]);
        board.count_order(true);
        board.count_order(false);
        board.count_order(false);
        let mut out = String::new();
        board.render_prometheus(&mut out, 1_000);
        assert!(out.contains("lagran_certificate_expiry_seconds{domain=\"a.test\"} 4000\n"), "{out}");
        assert!(!out.contains("bad.test"), "an unreadable certificate has no expiry: {out}");
        assert!(out.contains("lagran_acme_orders_total{result=\"issued\"} 1\n"), "{out}");
        assert!(out.contains("lagran_acme_orders_total{result=\"failed\"} 2\n"), "{out}");
    }
}
