//! The rules every [`Site`] satisfies, on the control plane before it stores a
//! site and on the edge before it serves one.

use crate::origin::OriginUrl;
use crate::site::Site;

/// A site that breaks a rule: which site, which field, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("site {host}: `{field}` {reason}")]
pub struct SiteError {
    pub host: String,
    pub field: &'static str,
    pub reason: String,
}

/// `name` or `*.name`: dot-separated non-empty labels of letters, digits, `-`
/// and `_` (any case: hosts are compared case-insensitively).
pub fn valid_host_pattern(pattern: &str) -> bool {
    let name = pattern.strip_prefix("*.").unwrap_or(pattern);
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl Site {
    /// Checks the fields one by one; the first broken rule is the error.
    pub fn validate(&self) -> Result<(), SiteError> {
        let fail = |field, reason: String| Err(SiteError { host: self.host.clone(), field, reason });
        if !valid_host_pattern(&self.host) {
            return fail("host", "must be a host name or *.suffix".into());
        }
        if let Err(e) = OriginUrl::parse(&self.origin) {
            return fail("origin", format!("{:?} {e}", self.origin));
        }
        match (self.rate_limit_rps, self.rate_limit_burst) {
            (Some(rps), _) if !(rps.is_finite() && rps > 0.0) => {
                return fail("rate_limit_rps", "must be a positive number".into());
            }
            (None, Some(_)) => return fail("rate_limit_burst", "needs rate_limit_rps".into()),
            (_, Some(0)) => return fail("rate_limit_burst", "must be at least 1".into()),
            _ => {}
        }
        if let Some(p) = self.deny_paths.iter().find(|p| !p.starts_with('/')) {
            return fail("deny_paths", format!("{p:?} must start with '/'"));
        }
        if self.deny_user_agents.iter().any(String::is_empty) {
            return fail("deny_user_agents", "an empty pattern would match every client".into());
        }
        if let Some(p) = self.referer_allow.iter().find(|p| !valid_host_pattern(p)) {
            return fail("referer_allow", format!("{p:?} must be a host name or *.suffix"));
        }
        // An HTTP-01 answer proves one host name; ACME servers authorise a wildcard by DNS-01 only.
        if self.acme && self.host.starts_with("*.") {
            return fail("acme", "needs a host name: a wildcard cannot be proved by an HTTP-01 challenge".into());
        }
        match &self.pools {
            Some(pools) if pools.is_empty() => {
                return fail(
                    "pools",
                    "an empty list would have no node serve the site; leave it out for every node".into(),
                );
            }
            Some(pools) if pools.iter().any(|p| p.trim().is_empty()) => {
                return fail("pools", "a pool name cannot be empty".into());
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        serde_json::from_str(r#"{"host": "*.a.test", "origin": "http://o", "rate_limit_rps": 5}"#).unwrap()
    }

    fn field(site: Site) -> &'static str {
        site.validate().expect_err("the site must be refused").field
    }

    #[test]
    fn host_patterns() {
        assert!(valid_host_pattern("cdn.example.com"));
        assert!(valid_host_pattern("*.example.com"));
        assert!(valid_host_pattern("A.test"));
        assert!(!valid_host_pattern("*"));
        assert!(!valid_host_pattern("a..b"));
        assert!(!valid_host_pattern("foo.*.com"));
        assert!(!valid_host_pattern("http://x"));
    }

    #[test]
    fn each_rule_names_its_field() {
        assert_eq!(site().validate(), Ok(()));
        assert_eq!(field(Site { host: "a..b".into(), ..site() }), "host");
        assert_eq!(field(Site { origin: "ftp://o".into(), ..site() }), "origin");
        assert_eq!(field(Site { rate_limit_rps: Some(f64::NAN), ..site() }), "rate_limit_rps");
        assert_eq!(field(Site { rate_limit_rps: None, rate_limit_burst: Some(2), ..site() }), "rate_limit_burst");
        assert_eq!(field(Site { rate_limit_burst: Some(0), ..site() }), "rate_limit_burst");
        assert_eq!(field(Site { deny_paths: vec!["admin".into()], ..site() }), "deny_paths");
        assert_eq!(field(Site { deny_user_agents: vec![String::new()], ..site() }), "deny_user_agents");
        assert_eq!(field(Site { referer_allow: vec!["*".into()], ..site() }), "referer_allow");
        assert_eq!(field(Site { acme: true, ..site() }), "acme");
        assert_eq!(Site { acme: true, host: "a.test".into(), ..site() }.validate(), Ok(()));
        assert_eq!(field(Site { pools: Some(vec![]), ..site() }), "pools");
        assert_eq!(field(Site { pools: Some(vec![" ".into()]), ..site() }), "pools");
        assert!(Site { pools: Some(vec!["south".into()]), ..site() }.validate().is_ok());
    }

    #[test]
    fn the_error_names_site_field_and_reason() {
        let e = Site { origin: "ftp://o".into(), ..site() }.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "site *.a.test: `origin` \"ftp://o\" only http:// and https:// origins are supported"
        );
    }
}
