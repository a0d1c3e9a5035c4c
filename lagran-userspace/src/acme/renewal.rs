//! The renewal scheduler, run by the leader only: every `check_secs` it looks
//! at each site with `acme` and its certificate, and orders one when there is
//! none, the renewal window is open ([`super::window`]) or an operator asked
//! for a renewal (`POST /api/v1/sites/{domain}/certificate/renew`, a row in the
//! store, looked for every [`ASKED_EVERY`] between two looks). A failed order
//! is retried after a pause that doubles; the account is loaded (or created)
//! on the first order of the term.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use instant_acme::Account;
use tokio_util::sync::CancellationToken;

use super::expiry::{ExpiryBoard, now_secs};
use super::not_after::not_after_of_pem;
use super::settings::AcmeSettings;
use super::window::{self, Plan};
use super::{AcmeError, account, order};
use crate::store::Store;

/// The shortest pause after a failed order, whatever `check_secs` is.
const FIRST_RETRY: Duration = Duration::from_secs(60);
/// Challenges older than this were left by a process that stopped mid-order.
const STALE_CHALLENGE_MS: i64 = 3600 * 1000;
/// The pseudo-site under which failures to reach the account are paced.
const ACCOUNT: &str = "";
/// How often the renewals asked for are looked for between two rounds.
pub const ASKED_EVERY: Duration = Duration::from_secs(1);

/// Orders and renews the certificates of the sites with `acme`.
pub struct Renewer {
    store: Store,
    settings: AcmeSettings,
    directory_url: String,
    board: Arc<ExpiryBoard>,
}

/// Failed attempts in a row, and when the next may start, by host.
type Failures = HashMap<String, (u32, Instant)>;

impl Renewer {
    /// `None` when no `acme.directory_url` is configured.
    pub fn new(settings: &AcmeSettings, store: Store, board: Arc<ExpiryBoard>) -> Option<Arc<Renewer>> {
        let directory_url = settings.directory_url.clone()?;
        Some(Arc::new(Renewer { store, settings: settings.clone(), directory_url, board }))
    }

    /// Runs until `token` (the end of the leadership term or shutdown).
    pub async fn run(self: Arc<Self>, token: CancellationToken) {
        tracing::info!(directory = %self.directory_url, every = ?self.settings.check_every(), "ACME renewals started");
        match self.store.delete_acme_challenges_before(crate::clock::now_ms() - STALE_CHALLENGE_MS).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(challenges = n, "stale ACME challenges withdrawn"),
            Err(e) => tracing::warn!(error = %e, "cannot withdraw stale ACME challenges"),
        }
        let (mut account, mut failures) = (None, Failures::new());
        loop {
            if let Err(e) = self.round(&mut account, &mut failures, &token).await {
                tracing::warn!(error = %e, "cannot read the sites for their ACME certificates");
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(self.settings.check_every()) => {}
                () = self.asked(&failures) => {}
            }
        }
    }

    /// One look at every ACME site; orders what is due, one site after another.
    async fn round(
        &self,
        account: &mut Option<Account>,
        failures: &mut Failures,
        token: &CancellationToken,
    ) -> Result<(), AcmeError> {
        let renewals = self.store.acme_renewals().await?;
        let sites: Vec<_> = self.store.list_sites().await?.into_iter().filter(|s| s.site.acme).collect();
        let mut asked = HashMap::new();
        for (host, at) in renewals {
            match sites.iter().any(|s| s.site.host == host) {
                true => _ = asked.insert(host, at),
                // Asked for a site that no longer has `acme` (or is gone): nothing to do.
                false => self.store.clear_acme_renewal(&host, at).await?,
            }
        }
        for site in sites {
            let host = site.site.host;
            let cert = self.store.get_certificate(&host).await?;
            let not_after = cert.as_ref().and_then(|c| not_after_of_pem(&c.cert_pem));
            let mut plan = window::plan(not_after, now_secs(), self.settings.renew_before());
            let asked_at = asked.get(&host).copied();
            if asked_at.is_some() && matches!(plan, Plan::WaitUntil(_)) {
                plan = Plan::Renew;
            }
            if matches!(plan, Plan::WaitUntil(_)) || paused(failures, &host) || token.is_cancelled() {
                continue;
            }
            if account.is_none() && !paused(failures, ACCOUNT) {
                match account::load_or_create(&self.settings, &self.directory_url, &self.store).await {
                    Ok(a) => *account = Some(a),
                    Err(e) => self.failed(failures, ACCOUNT, &e),
                }
            }
            let Some(acct) = account.as_ref() else { return Ok(()) };
            tracing::info!(host = %host, ?plan, asked = asked_at.is_some(), "ordering an ACME certificate");
            match self.order(acct, &host).await {
                Ok(not_after) => {
                    failures.remove(&host);
                    tracing::info!(host = %host, not_after, "ACME certificate issued and stored");
                    if let Some(at) = asked_at {
                        self.store.clear_acme_renewal(&host, at).await?;
                    }
                }
                Err(e) => self.failed(failures, &host, &e),
            }
        }
        Ok(())
    }

    /// Orders and stores `host`'s certificate; returns its `notAfter`.
    async fn order(&self, account: &Account, host: &str) -> Result<i64, AcmeError> {
        let result = async {
            let cert = order::issue(account, &self.store, host).await?;
            let not_after = not_after_of_pem(&cert.cert_pem).ok_or_else(|| AcmeError::Order {
                host: host.to_string(),
                reason: "the ACME server sent a certificate whose expiry cannot be read".into(),
            })?;
            self.store.upsert_certificate(&cert).await?;
            Ok(not_after)
        }
        .await;
        self.board.count_order(result.is_ok());
        if let Err(e) = self.board.refresh(&self.store).await {
            tracing::warn!(error = %e, "cannot re-read the certificates for their expiry metrics");
        }
        result
    }

    fn failed(&self, failures: &mut Failures, host: &str, e: &AcmeError) {
        let first = self.settings.check_every().max(FIRST_RETRY);
        let entry = failures.entry(host.to_string()).or_insert((0, Instant::now()));
        entry.0 += 1;
        let pause = window::retry_after(entry.0, first);
        entry.1 = Instant::now() + pause;
        let what = if host == ACCOUNT { "the ACME account" } else { host };
        tracing::warn!(site = what, failures = entry.0, retry_in = ?pause, error = %e, "ACME order failed");
    }
}

impl Renewer {
    /// Returns once a renewal is asked for a site not paused by failures
    /// (looked for every [`ASKED_EVERY`]; a store that cannot be read is
    /// looked at again at the next round).
    async fn asked(&self, failures: &Failures) {
        loop {
            tokio::time::sleep(ASKED_EVERY).await;
            match self.store.acme_renewals().await {
                Ok(asked) if asked.iter().any(|(host, _)| !paused(failures, host)) => return,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the ACME renewals asked for");
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

fn paused(failures: &Failures, host: &str) -> bool {
    failures.get(host).is_some_and(|(_, next)| Instant::now() < *next)
}
