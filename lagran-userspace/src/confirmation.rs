//! When the control plane last confirmed the route table being served (SPEC §7).
//!
//! A table is stale when the control plane has not confirmed it for
//! DNS_STALE_SECS, measured on *this* host's clock from the last confirmation
//! it received — not by the table's age: a quiet, healthy cluster publishes
//! nothing new and a held rollback keeps an old table, and neither may age
//! into the fallback answer.
//!
//! Who confirms:
//! - `lagran serve` and `lagran control`: the scheduler, while it runs and its
//!   recomputes succeed (it confirms whether or not a recompute publishes).
//! - `lagran dns --control URL`: the NS-host follower, on every answer of the
//!   route-table stream (a new table, or "yours is still current").
//!
//! Who reads: the responder (`dns::answer`), the XDP staleness switch and
//! `/metrics` — all through [`crate::dns::answer::is_stale`].

use std::sync::atomic::{AtomicI64, Ordering};

use crate::config::DnsSettings;

/// The last confirmation, unix ms on this host's clock (0: never).
#[derive(Debug, Default)]
pub struct Confirmation {
    at_ms: AtomicI64,
}

impl Confirmation {
    /// Never confirmed.
    pub fn new() -> Self {
        Confirmation::default()
    }

    /// Confirmed at `now_ms` (this host's clock). Never moves backwards.
    pub fn confirm(&self, now_ms: i64) {
        self.at_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// Unix ms of the last confirmation, 0 when there was none.
    pub fn last_ms(&self) -> i64 {
        self.at_ms.load(Ordering::Relaxed)
    }

    /// Milliseconds since the last confirmation; `None` when there was none.
    pub fn ms_ago(&self, now_ms: i64) -> Option<i64> {
        match self.last_ms() {
            0 => None,
            at => Some(now_ms.saturating_sub(at).max(0)),
        }
    }

    /// Whether the table is stale at `now_ms` ([`crate::dns::answer::is_stale`]).
    pub fn is_stale(&self, settings: &DnsSettings, now_ms: i64) -> bool {
        crate::dns::answer::is_stale(self.last_ms(), settings, now_ms)
    }

    /// `/metrics` lines: seconds since the last confirmation and the stale flag.
    pub fn render_prometheus(&self, settings: &DnsSettings, now_ms: i64, out: &mut String) {
        use std::fmt::Write;
        let ago = self.ms_ago(now_ms).map_or(-1.0, |ms| ms as f64 / 1e3);
        let _ = writeln!(
            out,
            "# HELP lagran_route_table_confirmed_seconds_ago Seconds since the control plane last confirmed the table (-1: never)."
        );
        let _ = writeln!(out, "# TYPE lagran_route_table_confirmed_seconds_ago gauge");
        let _ = writeln!(out, "lagran_route_table_confirmed_seconds_ago {ago}");
        let _ = writeln!(
            out,
            "# HELP lagran_route_table_stale 1 when the table has not been confirmed for DNS_STALE_SECS."
        );
        let _ = writeln!(out, "# TYPE lagran_route_table_stale gauge");
        let _ = writeln!(out, "lagran_route_table_stale {}", u8::from(self.is_stale(settings, now_ms)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(stale_secs: u64) -> DnsSettings {
        DnsSettings { stale_secs, ..DnsSettings::default() }
    }

    #[test]
    fn stale_only_when_confirmations_stop() {
        let c = Confirmation::new();
        assert!(c.is_stale(&settings(10), 1_000_000), "never confirmed is stale");
        assert_eq!(c.ms_ago(1_000_000), None);
        c.confirm(1_000_000);
        assert!(!c.is_stale(&settings(10), 1_010_000), "exactly DNS_STALE_SECS is not stale yet");
        assert!(c.is_stale(&settings(10), 1_010_001), "past DNS_STALE_SECS without a confirmation");
        c.confirm(1_009_000);
        assert!(!c.is_stale(&settings(10), 1_010_001), "a new confirmation makes it fresh again");
        c.confirm(5);
        assert_eq!(c.last_ms(), 1_009_000, "confirmations never move backwards");
        assert_eq!(c.ms_ago(1_009_250), Some(250));
    }

    #[test]
    fn metrics_show_the_confirmation() {
        let c = Confirmation::new();
        c.confirm(1_000);
        let mut out = String::new();
        c.render_prometheus(&settings(1), 3_500, &mut out);
        assert!(out.contains("lagran_route_table_confirmed_seconds_ago 2.5\n"), "{out}");
        assert!(out.contains("lagran_route_table_stale 1\n"), "{out}");
    }
}
