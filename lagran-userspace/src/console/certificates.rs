//! The console's certificate warning: every stored certificate that expires
//! within [`WARN_WITHIN`] (or already has), soonest first, and those whose
//! expiry cannot be read.

use serde::Serialize;

/// How far ahead the console warns.
pub const WARN_WITHIN: std::time::Duration = std::time::Duration::from_secs(14 * 86_400);

/// One certificate the page warns about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Expiring {
    pub domain: String,
    /// Seconds until it expires (negative: expired); `None`: unreadable.
    pub expires_in_secs: Option<i64>,
}

/// The warnings for `(domain, notAfter)` pairs at `now` (Unix seconds).
pub fn expiring(certs: impl IntoIterator<Item = (String, Option<i64>)>, now: i64) -> Vec<Expiring> {
    let within = i64::try_from(WARN_WITHIN.as_secs()).unwrap_or(i64::MAX);
    let mut out: Vec<Expiring> = certs
        .into_iter()
        .map(|(domain, at)| Expiring { domain, expires_in_secs: at.map(|at| at - now) })
        .filter(|e| e.expires_in_secs.is_none_or(|left| left < within))
        .collect();
    out.sort_by_key(|e| (e.expires_in_secs.unwrap_or(i64::MIN), e.domain.clone()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_fourteen_days_ahead_soonest_first() {
        let day = 86_400;
        let certs = [
            ("far.test".to_string(), Some(30 * day)),
            ("edge.test".to_string(), Some(14 * day)),
            ("soon.test".to_string(), Some(14 * day - 1)),
            ("gone.test".to_string(), Some(-day)),
            ("bad.test".to_string(), None),
        ];
        let got = expiring(certs, 0);
        let domains: Vec<&str> = got.iter().map(|e| e.domain.as_str()).collect();
        assert_eq!(domains, ["bad.test", "gone.test", "soon.test"]);
        assert_eq!(got[1].expires_in_secs, Some(-day));
    }
}
