//! NS-host reports: how long they are kept.
//!
//! An NS host reports on the table stream (`?host=`) which table it serves;
//! only one that authenticates leaves a report
//! ([`crate::api::auth::Auth::authenticates_ns_host`]). A report is kept [`ClusterSettings::ns_host_report_retention_secs`] after
//! the host last reported; [`prune_loop`] deletes the older ones, so names
//! that stopped reporting (renamed, retired hosts) do not pile up.

use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::settings::{InvalidSetting, Key, KeyDefault};
use crate::store::Store;

/// `[cluster]`: what control processes keep about the NS hosts they serve.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// A report older than this is deleted.
    pub ns_host_report_retention_secs: u64,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings { ns_host_report_retention_secs: 7 * 24 * 3600 }
    }
}

impl ClusterSettings {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.ns_host_report_retention_secs == 0 {
            return Err(InvalidSetting::new("cluster.ns_host_report_retention_secs", "must be > 0"));
        }
        Ok(())
    }

    pub fn retention(&self) -> Duration {
        Duration::from_secs(self.ns_host_report_retention_secs)
    }
}

/// The keys of `[cluster]`.
pub const CLUSTER_KEYS: &[Key] = &[Key::toml(
    "cluster.ns_host_report_retention_secs",
    KeyDefault::Toml("604800"),
    "86400",
    "an NS host's report (`GET /api/v1/nshosts`) is deleted this long after its last one",
)];

/// How often [`prune_loop`] deletes old reports: a tenth of the retention,
/// between a minute and an hour.
fn prune_period(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(60), Duration::from_secs(3600))
}

/// Deletes the reports older than `retention`, now and then every
/// [`prune_period`], until `shutdown`. A failing store is logged and tried
/// again next period.
pub async fn prune_loop(store: Store, retention: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(prune_period(retention));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let before = crate::clock::now_ms() - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        match store.prune_ns_reports(before).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "NS-host reports older than the retention deleted"),
            Err(e) => tracing::warn!(error = %e, "cannot delete old NS-host reports; trying again later"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_is_checked_and_pruning_paced() {
        assert_eq!(ClusterSettings::default().retention(), Duration::from_secs(604_800));
        assert!(ClusterSettings { ns_host_report_retention_secs: 0 }.validate().is_err());
        assert_eq!(prune_period(Duration::from_secs(604_800)), Duration::from_secs(3600));
        assert_eq!(prune_period(Duration::from_secs(30)), Duration::from_secs(60));
    }
}
