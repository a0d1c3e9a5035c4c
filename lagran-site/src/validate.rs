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
    /// The origin keys: `origin` or `origins` (both only when `origins`
    /// starts with `origin`), each a usable URL, a weight per origin, a path
    /// to check, a `Host` to send.
    fn validate_origins(&self) -> Result<(), (&'static str, String)> {
        match (self.origin.is_empty(), self.origins.first()) {
            (true, None) => return Err(("origin", "is missing: give `origin` or `origins`".into())),
            (false, Some(first)) if *first != self.origin => {
                return Err(("origins", format!("must start with `origin` ({:?}) when both are given", self.origin)));
            }
            _ => {}
        }
        let field = if self.origins.is_empty() { "origin" } else { "origins" };
        for url in self.origin_urls() {
            OriginUrl::parse(url).map_err(|e| (field, format!("{url:?} {e}")))?;
        }
        let count = self.origin_urls().count();
        let weights = &self.origin_weights;
        if !weights.is_empty() && (weights.len() != count || weights.iter().all(|&w| w == 0)) {
            return Err(("origin_weights", format!("needs one weight per origin ({count}), not all 0")));
        }
        if !self.origin_health_path.starts_with('/') || self.origin_health_path.parse::<http::Uri>().is_err() {
            return Err(("origin_health_path", "must be a path starting with '/'".into()));
        }
        let host_ok = |h: &str| !h.is_empty() && h.parse::<http::uri::Authority>().is_ok_and(|a| a.as_str() == h);
        if self.origin_host.as_deref().is_some_and(|h| !host_ok(h) || h.contains('@')) {
            return Err(("origin_host", "must be a host name, with an optional :port".into()));
        }
        if self.origin_ca_pem.as_deref().is_some_and(|pem| !pem.contains("-----BEGIN CERTIFICATE-----")) {
            return Err(("origin_ca_pem", "must hold PEM certificates (-----BEGIN CERTIFICATE-----)".into()));
        }
        Ok(())
    }

    /// Checks the fields one by one; the first broken rule is the error.
    pub fn validate(&self) -> Result<(), SiteError> {
        let fail = |field, reason: String| Err(SiteError { host: self.host.clone(), field, reason });
        if !valid_host_pattern(&self.host) {
            return fail("host", "must be a host name or *.suffix".into());
        }
        if let Err((field, reason)) = self.validate_origins() {
            return fail(field, reason);
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
        assert_eq!(field(Site { origin: String::new(), ..site() }), "origin");
        let two = || Site { origins: vec!["http://o".into(), "https://p:8443".into()], ..site() };
        assert_eq!(two().validate(), Ok(()));
        assert_eq!(Site { origin: String::new(), ..two() }.validate(), Ok(()), "`origins` alone");
        assert_eq!(field(Site { origin: "http://x".into(), ..two() }), "origins");
        assert_eq!(field(Site { origins: vec!["http://o".into(), "ftp://p".into()], ..site() }), "origins");
        assert_eq!(field(Site { origin_weights: vec![1], ..two() }), "origin_weights");
        assert_eq!(field(Site { origin_weights: vec![0, 0], ..two() }), "origin_weights");
        assert_eq!(Site { origin_weights: vec![0, 1], ..two() }.validate(), Ok(()));
        assert_eq!(field(Site { origin_health_path: "healthz".into(), ..site() }), "origin_health_path");
        assert_eq!(field(Site { origin_host: Some("a b".into()), ..site() }), "origin_host");
        assert_eq!(field(Site { origin_host: Some("u@h".into()), ..site() }), "origin_host");
        assert_eq!(Site { origin_host: Some("www.a.test:8080".into()), ..site() }.validate(), Ok(()));
        assert_eq!(field(Site { origin_ca_pem: Some("not pem".into()), ..site() }), "origin_ca_pem");
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
