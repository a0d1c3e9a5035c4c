//! When the control plane last confirmed the route table being served, and
//! whether that makes the table stale.
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
//! `/metrics` — all through [`is_stale`].

use std::sync::atomic::{AtomicI64, Ordering};

/// The one staleness policy (the responder, the XDP staleness switch and
/// `/metrics` all ask this): the table is stale when the control plane last
/// confirmed it (`confirmed_at_ms`, this host's clock, 0 = never) more than
/// `stale_secs` (DNS_STALE_SECS) before `now_ms`. The table's own age plays no
/// part: a quiet, healthy cluster and a held rollback keep old tables that are
/// not stale.
pub fn is_stale(confirmed_at_ms: i64, stale_secs: u64, now_ms: i64) -> bool {
    let limit = i64::try_from(stale_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    now_ms.saturating_sub(confirmed_at_ms) > limit
}

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

    /// Whether the table is stale at `now_ms` ([`is_stale`]).
    pub fn is_stale(&self, stale_secs: u64, now_ms: i64) -> bool {
        is_stale(self.last_ms(), stale_secs, now_ms)
    }

    /// `/metrics` lines: seconds since the last confirmation and the stale flag.
    pub fn render_prometheus(&self, stale_secs: u64, now_ms: i64, out: &mut String) {
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
        let _ = writeln!(out, "lagran_route_table_stale {}", u8::from(self.is_stale(stale_secs, now_ms)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_only_when_confirmations_stop() {
        let c = Confirmation::new();
        assert!(c.is_stale(10, 1_000_000), "never confirmed is stale");
        assert_eq!(c.ms_ago(1_000_000), None);
        c.confirm(1_000_000);
        assert!(!c.is_stale(10, 1_010_000), "exactly DNS_STALE_SECS is not stale yet");
        assert!(c.is_stale(10, 1_010_001), "past DNS_STALE_SECS without a confirmation");
        c.confirm(1_009_000);
        assert!(!c.is_stale(10, 1_010_001), "a new confirmation makes it fresh again");
        c.confirm(5);
        assert_eq!(c.last_ms(), 1_009_000, "confirmations never move backwards");
        assert_eq!(c.ms_ago(1_009_250), Some(250));
    }

    #[test]
    fn metrics_show_the_confirmation() {
        let c = Confirmation::new();
        c.confirm(1_000);
        let mut out = String::new();
        c.render_prometheus(1, 3_500, &mut out);
        assert!(out.contains("lagran_route_table_confirmed_seconds_ago 2.5\n"), "{out}");
        assert!(out.contains("lagran_route_table_stale 1\n"), "{out}");
    }
}
