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
    /// `http(s)://host[:port][/base]` (see [`crate::OriginUrl`]).
    pub origin: String,
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

// The defaults are left out of the JSON so that an edge that does not know a
// newer key still reads the sites that do not use it (unknown keys are refused).
fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Site {
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
    fn defaults_and_unknown_keys() {
        let site: Site = serde_json::from_str(r#"{"host": "a.test", "origin": "http://o"}"#).unwrap();
        assert_eq!((site.cache_ttl_secs, site.rate_limit_rps, site.rate_limit_burst), (60, None, None));
        assert!(site.allow_cidrs.is_empty() && site.referer_allow.is_empty() && !site.acme);
        assert!(site.waf_case_insensitive, "path rules ignore case unless told otherwise");
        assert!(site.pools.is_none() && site.served_by_pool("any"), "absent pools: every node");
        let south = Site { pools: Some(vec!["south".into()]), ..site.clone() };
        assert!(south.served_by_pool("south") && !south.served_by_pool("north"));
        let e = serde_json::from_str::<Site>(r#"{"host": "a.test", "origin": "http://o", "cert_pem": "/x"}"#);
        assert!(e.unwrap_err().to_string().contains("cert_pem"));
    }
}
