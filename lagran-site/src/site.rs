//! The [`Site`] record and its serde shape: the same keys in the API's JSON and
//! in the edge's `[[site]]` TOML tables. Unknown keys are errors.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The cache TTL of a site that does not set `cache_ttl_secs`.
pub const DEFAULT_CACHE_TTL_SECS: u64 = 60;

fn default_cache_ttl_secs() -> u64 {
    DEFAULT_CACHE_TTL_SECS
}

/// One customer host served by the edge nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    /// `cdn.example.com` or `*.example.com` (one label).
    pub host: String,
    /// `http(s)://host[:port][/base]` (see [`crate::OriginUrl`]): the site's
    /// origin, or the first of `origins`. It may be left out when `origins` is given.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub origin: String,
    /// Several origins, in order of preference (the first is `origin`): each
    /// is health-checked, and a request goes to the first healthy one, or is
    /// shared by `origin_weights` among the healthy ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origins: Vec<String>,
    /// The `Host` sent to the origins (`name[:port]`); absent: each origin's own authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_host: Option<String>,
    /// One weight per origin, to share requests among the healthy ones by
    /// weight; absent: the origins are tried in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origin_weights: Vec<u32>,
    /// The path the origins' health checks ask for.
    #[serde(default = "default_health_path", skip_serializing_if = "is_default_health_path")]
    pub origin_health_path: String,
    /// PEM certificates of the CAs the site's `https://` origins are verified
    /// with, instead of the system's roots (a private CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_ca_pem: Option<String>,
    /// TTL of responses without `max-age`; 0 disables caching for the site.
    #[serde(default = "default_cache_ttl_secs")]
    pub cache_ttl_secs: u64,
    /// When non-empty, only these client networks are served.
    #[serde(default)]
    pub allow_cidrs: Vec<IpNet>,
    #[serde(default)]
    pub deny_cidrs: Vec<IpNet>,
    /// Path prefixes answered 403, matched regardless of ASCII case unless
    /// `waf_case_insensitive` is false.
    #[serde(default)]
    pub deny_paths: Vec<String>,
    /// Case-insensitive substrings of `User-Agent` answered 403.
    #[serde(default)]
    pub deny_user_agents: Vec<String>,
    /// Requests per second per client address (IPv6: per /64); absent = unlimited.
    #[serde(default)]
    pub rate_limit_rps: Option<f64>,
    /// Bucket size; defaults to one second's worth (at least 1).
    #[serde(default)]
    pub rate_limit_burst: Option<u32>,
    /// Hotlink protection: when non-empty, a `Referer` must name one of these host
    /// patterns or the site itself; requests without `Referer` pass.
    #[serde(default)]
    pub referer_allow: Vec<String>,
    /// The control plane gets and renews the site's certificate by ACME
    /// (HTTP-01, answered by the edges); the edge serves the site the same either way.
    #[serde(default, skip_serializing_if = "is_false")]
    pub acme: bool,
    /// `deny_paths` match regardless of ASCII case (the default): where the
    /// origin folds case (IIS, Windows and macOS file systems), a rule a
    /// client defeats with `/ADMIN` would protect nothing. An origin that
    /// tells `/Admin` from `/admin` may turn it off, so a path differing
    /// from a denied one only in case is served.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub waf_case_insensitive: bool,
    /// The pools whose nodes serve the site: the control plane gives the
    /// site and its certificate only to nodes of these pools. Absent: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<String>>,
}

fn default_true() -> bool {
    true
}

/// The health checks' path when a site names none.
pub const DEFAULT_HEALTH_PATH: &str = "/";

fn default_health_path() -> String {
    DEFAULT_HEALTH_PATH.to_owned()
}

fn is_default_health_path(path: &str) -> bool {
    path == DEFAULT_HEALTH_PATH
}

// The defaults are left out of the JSON so that an edge that does not know a
// newer key still reads the sites that do not use it (unknown keys are refused).
fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Site {
    /// Every origin URL in order of preference: `origins`, or else `origin` alone.
    pub fn origin_urls(&self) -> impl Iterator<Item = &str> {
        let single = self.origins.is_empty().then_some(self.origin.as_str());
        self.origins.iter().map(String::as_str).chain(single)
    }

    /// The first origin.
    pub fn primary_origin(&self) -> &str {
        self.origins.first().unwrap_or(&self.origin)
    }

    /// Whether a node of `pool` serves this site.
    pub fn served_by_pool(&self, pool: &str) -> bool {
        self.pools.as_ref().is_none_or(|pools| pools.iter().any(|p| p == pool))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"host":"*.img.example.com","origin":"http://10.0.0.6:8000/static","cache_ttl_secs":300,"allow_cidrs":[],"deny_cidrs":["203.0.113.0/24"],"deny_paths":["/admin"],"deny_user_agents":["sqlmap"],"rate_limit_rps":50.5,"rate_limit_burst":100,"referer_allow":["*.example.com"],"waf_case_insensitive":false,"pools":["south"]}"#;

    #[test]
    fn json_round_trips_with_every_key() {
        let site: Site = serde_json::from_str(JSON).unwrap();
        assert_eq!(serde_json::to_string(&site).unwrap(), JSON);
    }

    #[test]
    fn toml_and_json_read_the_same_site() {
        let toml_site: Site = toml::from_str(
            "host = \"*.img.example.com\"\norigin = \"http://10.0.0.6:8000/static\"\ncache_ttl_secs = 300\n\
             deny_cidrs = [\"203.0.113.0/24\"]\ndeny_paths = [\"/admin\"]\ndeny_user_agents = [\"sqlmap\"]\n\
             rate_limit_rps = 50.5\nrate_limit_burst = 100\nreferer_allow = [\"*.example.com\"]\n\
             waf_case_insensitive = false\npools = [\"south\"]\n",
        )
        .unwrap();
        assert_eq!(toml_site, serde_json::from_str::<Site>(JSON).unwrap());
    }

    #[test]
    fn several_origins_with_or_without_origin() {
        let both = r#"{"host":"a.test","origin":"https://o1","origins":["https://o1","http://o2:8080"],"origin_host":"www.a.test","origin_weights":[3,1],"origin_health_path":"/healthz","origin_ca_pem":"-----BEGIN CERTIFICATE-----\n"}"#;
        let site: Site = serde_json::from_str(both).unwrap();
        assert_eq!(site.origin_urls().collect::<Vec<_>>(), ["https://o1", "http://o2:8080"]);
        let json = serde_json::to_string(&site).unwrap();
        assert_eq!(serde_json::from_str::<Site>(&json).unwrap(), site, "every origin key round-trips");
        assert!(json.starts_with(&both[..both.len() - 1]), "{json}");
        let alone: Site = toml::from_str("host = \"a.test\"\norigins = [\"https://o1\", \"http://o2\"]\n").unwrap();
        assert_eq!((alone.primary_origin(), alone.origin.as_str()), ("https://o1", ""));
    }

    #[test]
    fn defaults_and_unknown_keys() {
        let site: Site = serde_json::from_str(r#"{"host": "a.test", "origin": "http://o"}"#).unwrap();
        assert_eq!((site.cache_ttl_secs, site.rate_limit_rps, site.rate_limit_burst), (60, None, None));
        assert!(site.allow_cidrs.is_empty() && site.referer_allow.is_empty() && !site.acme);
        assert!(site.waf_case_insensitive, "path rules ignore case unless told otherwise");
        assert_eq!(site.origin_urls().collect::<Vec<_>>(), ["http://o"]);
        assert_eq!((site.origin_health_path.as_str(), site.origin_host.as_deref()), ("/", None));
        assert!(site.origin_weights.is_empty() && site.origin_ca_pem.is_none());
        assert!(site.pools.is_none() && site.served_by_pool("any"), "absent pools: every node");
        let south = Site { pools: Some(vec!["south".into()]), ..site.clone() };
        assert!(south.served_by_pool("south") && !south.served_by_pool("north"));
        let e = serde_json::from_str::<Site>(r#"{"host": "a.test", "origin": "http://o", "cert_pem": "/x"}"#);
        assert!(e.unwrap_err().to_string().contains("cert_pem"));
    }
}
