//! When a site's certificate is ordered: the renewal window and the pause
//! after a failed order. Pure: times are Unix seconds given by the caller.

use std::time::Duration;

/// The longest pause between two failed orders of one site.
pub const MAX_RETRY: Duration = Duration::from_secs(6 * 3600);

/// What to do about one site's certificate now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// No usable certificate: order one.
    Issue,
    /// The certificate expires within the renewal window: order a new one.
    Renew,
    /// Nothing until this time (Unix seconds): the window opens then.
    WaitUntil(i64),
}

/// The plan for a certificate expiring at `not_after` (`None`: there is
/// none, or it cannot be read), renewed `renew_before` ahead of its expiry.
pub fn plan(not_after: Option<i64>, now: i64, renew_before: Duration) -> Plan {
    let Some(not_after) = not_after else { return Plan::Issue };
    let opens = not_after.saturating_sub(i64::try_from(renew_before.as_secs()).unwrap_or(i64::MAX));
    if now >= opens { Plan::Renew } else { Plan::WaitUntil(opens) }
}

/// The pause after the `failures`-th failed order in a row: `first`, doubled
/// each time, at most [`MAX_RETRY`]. An ACME server limits failed
/// validations per name, and a fault rarely clears itself at once.
pub fn retry_after(failures: u32, first: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    first.saturating_mul(1 << doublings).min(MAX_RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    #[test]
    fn a_missing_certificate_is_issued() {
        assert_eq!(plan(None, 1000, Duration::from_secs(30 * 86_400)), Plan::Issue);
    }

    #[test]
    fn renewal_starts_when_the_window_opens() {
        let thirty = Duration::from_secs(30 * 86_400);
        let not_after = 100 * DAY;
        assert_eq!(plan(Some(not_after), 10 * DAY, thirty), Plan::WaitUntil(70 * DAY));
        assert_eq!(plan(Some(not_after), 70 * DAY - 1, thirty), Plan::WaitUntil(70 * DAY));
        assert_eq!(plan(Some(not_after), 70 * DAY, thirty), Plan::Renew, "the first second of the window");
        assert_eq!(plan(Some(not_after), 101 * DAY, thirty), Plan::Renew, "already expired");
    }

    #[test]
    fn a_window_longer_than_the_lifetime_renews_at_once() {
        let huge = Duration::from_secs(u64::MAX / 2);
        assert_eq!(plan(Some(100 * DAY), 0, huge), Plan::Renew);
        assert_eq!(plan(Some(100 * DAY), 0, Duration::ZERO), Plan::WaitUntil(100 * DAY));
    }

    #[test]
    fn failures_back_off_doubling_to_a_cap() {
        let first = Duration::from_secs(60);
        assert_eq!(retry_after(1, first), first);
        assert_eq!(retry_after(2, first), Duration::from_secs(120));
        assert_eq!(retry_after(4, first), Duration::from_secs(480));
        assert_eq!(retry_after(30, first), MAX_RETRY);
        assert_eq!(retry_after(u32::MAX, first), MAX_RETRY);
    }
}
