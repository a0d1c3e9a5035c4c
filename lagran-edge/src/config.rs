//! The edge's TOML configuration: listeners, the agent's control-plane settings and
//! one `[[site]]` per customer host (the shared [`Site`] record, checked by
//! [`Site::validate`] like the control plane does, plus local certificate
//! files). Unknown keys are errors naming the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lagran_site::Site;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::host;
use crate::origin::{Origin, OriginClient, OriginError, Timeouts};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot parse config {origin}")]
    Parse { origin: String, source: toml::de::Error },
    #[error("config {origin}: `{key}`: {reason}")]
    Invalid { origin: String, key: String, reason: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_listen_http")]
    pub listen_http: SocketAddr,
    pub listen_https: Option<SocketAddr>,
    /// The node's name in the control plane; heartbeats go to `/api/v1/nodes/{node_name}`.
    #[serde(default = "default_node_name")]
    pub node_name: String,
    /// Control plane base URL (`https://host:port`, or `http://` to a loopback address
    /// unless `insecure_control`); without it no heartbeats are sent. An `https://` URL
    /// is spoken over TLS only ([`crate::control`]).
    pub control_url: Option<String>,
    /// PEM CA bundle trusted for an `https://` control_url (`--ca`, `LAGRAN_CA` win);
    /// none: the system's certificate store.
    #[serde(default)]
    pub ca: Option<std::path::PathBuf>,
    /// Accept an `http://` control_url to a non-loopback address (the token and
    /// the sites' keys then cross the network in cleartext; warned at every start).
    #[serde(default)]
    pub insecure_control: bool,
    /// Sent as `x-lagran-agent-token`; the `AGENT_TOKEN` environment variable wins.
    pub agent_token: Option<String>,
    #[serde(default = "default_heartbeat_secs")]
    pub heartbeat_secs: u64,
    /// Memory budget of the response cache (bodies, headers and keys).
    #[serde(default = "default_cache_max_bytes")]
    pub cache_max_bytes: usize,
    /// Directory of the cache's disk tier; without it the cache is in memory only.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Byte budget of the disk tier; 0 keeps the cache in memory only.
    #[serde(default = "default_cache_disk_max_bytes")]
    pub cache_disk_max_bytes: u64,
    /// Larger responses are streamed through and not stored.
    #[serde(default = "default_cache_max_object_bytes")]
    pub cache_max_object_bytes: usize,
    /// Deadline for an origin's response head (TLS handshake included).
    #[serde(default = "default_origin_timeout_secs")]
    pub origin_timeout_secs: u64,
    /// Deadline for the TCP connection to an origin.
    #[serde(default = "default_origin_connect_timeout_secs")]
    pub origin_connect_timeout_secs: u64,
    /// Deadline for a whole origin exchange, body included.
    #[serde(default = "default_origin_total_timeout_secs")]
    pub origin_total_timeout_secs: u64,
    /// How often sites with several origins have each one health-checked.
    #[serde(default = "default_origin_health_secs")]
    pub origin_health_secs: u64,
    /// File of the access log (JSON lines); none: no access log.
    #[serde(default)]
    pub access_log: Option<PathBuf>,
    /// Size past which the access log is rotated to `<access_log>.1`.
    #[serde(default = "default_access_log_max_bytes")]
    pub access_log_max_bytes: u64,
    /// Bearer token that opens `GET /metrics` to non-loopback clients.
    #[serde(default)]
    pub metrics_token: Option<String>,
    /// Client addresses each site's rate limiter remembers at most.
    #[serde(default = "default_rate_limit_max_clients")]
    pub rate_limit_max_clients: usize,
    /// Client connections open at once (HTTP and HTTPS together); past it new
    /// connections are closed at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Client connections open at once from one client (an IPv6 client by its /64).
    #[serde(default = "default_max_connections_per_client")]
    pub max_connections_per_client: usize,
    /// A client connection on which no byte moves either way for this long is closed.
    #[serde(default = "default_idle_timeout_secs")]
    pub idle_timeout_secs: u64,
    /// How often the sites and certificates are read from the control plane
    /// (`/api/v1/sites`, `/api/v1/certificates`) when `control_url` is set.
    #[serde(default = "default_config_poll_secs")]
    pub config_poll_secs: u64,
    /// `[agent]`: what the node reports besides its heartbeats.
    #[serde(default)]
    pub agent: AgentSection,
    #[serde(default, rename = "site")]
    pub sites: Vec<SiteConfig>,
}

/// The `[agent]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// Report client connections' RTTs per /24 (/48) to the control plane, on
    /// the heartbeat cadence (`POST /api/v1/measurements`, source `edge`).
    #[serde(default = "default_true")]
    pub report_rtt: bool,
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection { report_rtt: true }
    }
}

/// One `[[site]]` table: the keys of the shared [`Site`] (its origins, their
/// `Host`, weights, health-check path and CA included) plus what only the
/// edge's own file may say: the site's certificate files, and `origin_ca`, a
/// PEM file read into the site's `origin_ca_pem`. Origins are parsed once here.
#[derive(Debug, Clone)]
pub struct SiteConfig {
    site: Site,
    origins: Vec<Origin>,
    cert_pem: Option<PathBuf>,
    key_pem: Option<PathBuf>,
    /// The site's `origin_ca_pem`, as bytes.
    pub origin_ca_pem: Option<Arc<[u8]>>,
}

impl SiteConfig {
    pub fn new(site: Site, cert_pem: Option<PathBuf>, key_pem: Option<PathBuf>) -> Result<SiteConfig, OriginError> {
        let origins = site.origin_urls().map(Origin::parse).collect::<Result<Vec<_>, _>>()?;
        if origins.is_empty() {
            return Err(OriginError::Missing);
        }
        let origin_ca_pem = site.origin_ca_pem.as_deref().map(|pem| Arc::from(pem.as_bytes()));
        Ok(SiteConfig { site, origins, cert_pem, key_pem, origin_ca_pem })
    }

    pub fn site(&self) -> &Site {
        &self.site
    }

    /// The first origin.
    pub fn origin(&self) -> &Origin {
        &self.origins[0]
    }

    /// Every origin, in order of preference.
    pub fn origins(&self) -> &[Origin] {
        &self.origins
    }

    pub fn cert_pem(&self) -> Option<&Path> {
        self.cert_pem.as_deref()
    }

    pub fn key_pem(&self) -> Option<&Path> {
        self.key_pem.as_deref()
    }
}

/// Reads the table whole, takes out the edge's own keys, and reads the rest as
/// a [`Site`]; errors name the offending key.
impl<'de> Deserialize<'de> for SiteConfig {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(de)?;
        fn take<'de, T: Deserialize<'de>, E: serde::de::Error>(
            table: &mut toml::Table,
            key: &str,
        ) -> Result<Option<T>, E> {
            let value = table.remove(key);
            value.map(|v| T::deserialize(v).map_err(|e| E::custom(format!("{key}: {e}")))).transpose()
        }
        let (cert_pem, key_pem) = (take::<PathBuf, D::Error>(&mut table, "cert_pem")?, take(&mut table, "key_pem")?);
        if let Some(path) = take::<PathBuf, D::Error>(&mut table, "origin_ca")? {
            if table.contains_key("origin_ca_pem") {
                return Err(D::Error::custom("origin_ca: give `origin_ca` (a file) or `origin_ca_pem`, not both"));
            }
            let pem = std::fs::read_to_string(&path)
                .map_err(|e| D::Error::custom(format!("origin_ca: cannot read {}: {e}", path.display())))?;
            table.insert("origin_ca_pem".into(), toml::Value::String(pem));
        }
        // toml names the key in its errors ("… in `deny_cidrs`").
        let site = Site::deserialize(toml::Value::Table(table)).map_err(D::Error::custom)?;
        SiteConfig::new(site, cert_pem, key_pem).map_err(D::Error::custom)
    }
}

fn default_true() -> bool {
    true
}
fn default_listen_http() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8081))
}
fn default_node_name() -> String {
    "edge".to_owned()
}
fn default_heartbeat_secs() -> u64 {
    10
}
fn default_cache_max_bytes() -> usize {
    256 << 20
}
fn default_cache_max_object_bytes() -> usize {
    16 << 20
}
fn default_origin_timeout_secs() -> u64 {
    10
}
fn default_origin_connect_timeout_secs() -> u64 {
    5
}
fn default_origin_total_timeout_secs() -> u64 {
    300
}
fn default_origin_health_secs() -> u64 {
    5
}
fn default_cache_disk_max_bytes() -> u64 {
    1 << 30
}
fn default_access_log_max_bytes() -> u64 {
    100 << 20
}
fn default_rate_limit_max_clients() -> usize {
    100_000
}
fn default_max_connections() -> usize {
    10_000
}
fn default_max_connections_per_client() -> usize {
    64
}
fn default_idle_timeout_secs() -> u64 {
    60
}
fn default_config_poll_secs() -> u64 {
    10
}
impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses and validates `text`; `origin` names the source in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config =
            toml::from_str(text).map_err(|source| ConfigError::Parse { origin: origin.to_owned(), source })?;
        config.validate().map_err(|(key, reason)| ConfigError::Invalid { origin: origin.to_owned(), key, reason })?;
        Ok(config)
    }

    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_secs(self.heartbeat_secs)
    }

    /// The deadline of each phase of an origin exchange.
    pub fn origin_timeouts(&self) -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(self.origin_connect_timeout_secs),
            first_byte: Duration::from_secs(self.origin_timeout_secs),
            total: Duration::from_secs(self.origin_total_timeout_secs),
        }
    }

    /// Checks sites received from the control plane with the rules of the file.
    pub fn validate_sites(sites: &[SiteConfig], origin: &str) -> Result<(), ConfigError> {
        let mut c = Config::parse("", origin)?;
        c.sites = sites.to_vec();
        c.validate().map_err(|(key, reason)| ConfigError::Invalid { origin: origin.to_owned(), key, reason })
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let err = |key: &str, reason: &str| Err((key.to_owned(), reason.to_owned()));
        if self.heartbeat_secs == 0 {
            return err("heartbeat_secs", "must be at least 1");
        }
        for (key, secs) in [
            ("origin_timeout_secs", self.origin_timeout_secs),
            ("origin_connect_timeout_secs", self.origin_connect_timeout_secs),
            ("origin_total_timeout_secs", self.origin_total_timeout_secs),
            ("origin_health_secs", self.origin_health_secs),
        ] {
            if secs == 0 {
                return err(key, "must be at least 1");
            }
        }
        if self.origin_total_timeout_secs < self.origin_timeout_secs {
            return err("origin_total_timeout_secs", "must not be less than origin_timeout_secs");
        }
        if self.metrics_token.as_ref().is_some_and(|t| t.len() < 16) {
            return err("metrics_token", "must be at least 16 characters");
        }
        if self.rate_limit_max_clients == 0 {
            return err("rate_limit_max_clients", "must be at least 1");
        }
        if self.max_connections == 0 {
            return err("max_connections", "must be at least 1");
        }
        if self.max_connections_per_client == 0 {
            return err("max_connections_per_client", "must be at least 1");
        }
        if self.idle_timeout_secs == 0 {
            return err("idle_timeout_secs", "must be at least 1");
        }
        if self.config_poll_secs == 0 {
            return err("config_poll_secs", "must be at least 1");
        }
        if self.cache_max_object_bytes > self.cache_max_bytes {
            return err("cache_max_object_bytes", "must not exceed cache_max_bytes");
        }
        if !self.node_name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            || self.node_name.is_empty()
        {
            return err("node_name", "must be non-empty letters, digits, '-', '_' or '.'");
        }
        if let Some(url) = &self.control_url
            && (!(url.starts_with("http://") || url.starts_with("https://")) || url.parse::<hyper::Uri>().is_err())
        {
            return err("control_url", "must be an http:// or https:// URL such as https://10.0.0.1:8443");
        }
        // With a control plane the certificates may all come from it.
        if self.listen_https.is_some() && self.control_url.is_none() && !self.sites.iter().any(|s| s.cert_pem.is_some())
        {
            return err("listen_https", "is set but no [[site]] has cert_pem/key_pem (and there is no control_url)");
        }
        let mut seen = host::HostMap::default();
        for (i, entry) in self.sites.iter().enumerate() {
            let site = entry.site();
            let fail = |field: &str, reason: String| {
                Err((format!("site[{i}].{field}"), format!("{reason} (site {})", site.host)))
            };
            if let Err(e) = site.validate() {
                return fail(e.field, e.reason);
            }
            if seen.insert(&site.host, ()).is_some() {
                return fail("host", "is configured twice".into());
            }
            if entry.cert_pem.is_some() != entry.key_pem.is_some() {
                return fail("cert_pem", "cert_pem and key_pem go together".into());
            }
            if let Some(pem) = &entry.origin_ca_pem
                && let Err(e) = OriginClient::new(self.origin_timeouts(), Some(pem))
            {
                return fail("origin_ca", e.to_string());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../edge.example.toml");

    #[test]
    fn parses_the_documented_example() {
        let c = Config::parse(EXAMPLE, "example").unwrap();
        assert_eq!(c.sites.len(), 2);
        assert_eq!(c.node_name, "gz-01");
        assert_eq!(c.sites[0].site().rate_limit_rps, Some(50.0));
        assert_eq!(c.sites[1].site().cache_ttl_secs, 60, "the default TTL applies");
        assert_eq!(c.rate_limit_max_clients, 100_000);
    }

    #[test]
    fn several_origins_in_order() {
        let c = Config::parse(
            "[[site]]\nhost = \"a.test\"\norigins = [\"https://o1\", \"http://o2:8080\"]\norigin_host = \"www.a.test\"\n",
            "t",
        )
        .unwrap();
        let origins: Vec<String> = c.sites[0].origins().iter().map(|o| format!("{o:?}")).collect();
        assert_eq!(origins, ["https://o1", "http://o2:8080"]);
        assert_eq!(c.sites[0].site().primary_origin(), "https://o1");
        assert_eq!(c.sites[0].site().origin_host.as_deref(), Some("www.a.test"));
    }

    #[test]
    fn defaults_need_nothing() {
        let c = Config::parse("", "empty").unwrap();
        assert_eq!(c.listen_http, "127.0.0.1:8081".parse().unwrap());
        assert_eq!(c.heartbeat_secs, 10);
        assert!(c.agent.report_rtt, "RTTs are reported by default");
        assert!(c.sites.is_empty());
        let off = Config::parse("[agent]\nreport_rtt = false\n", "off").unwrap();
        assert!(!off.agent.report_rtt);
        let e = error("[agent]\nreport_rt = true\n");
        assert!(e.contains("report_rt"), "{e}");
    }

    fn error(text: &str) -> String {
        crate::error_chain(&Config::parse(text, "t").expect_err("config must be rejected"))
    }

    #[test]
    fn errors_name_the_bad_key() {
        let e = error("listen_htp = \"127.0.0.1:1\"");
        assert!(e.contains("listen_htp"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigin = \"http://o\"\ncache_tll = 1\n");
        assert!(e.contains("cache_tll"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigin = \"ftp://o\"\n");
        assert!(e.contains("origin") && e.contains("only http://"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigin = \"http://o\"\norigins = [\"http://p\"]\n");
        assert!(e.contains("site[0].origins") && e.contains("must start with `origin`"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigin_ca = \"/etc/hostname\"\norigin_ca_pem = \"x\"\n");
        assert!(e.contains("not both"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigins = [\"http://p\", \"gopher://q\"]\n");
        assert!(e.contains("origins"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigins = [\"http://p\", \"http://q\"]\norigin_weights = [1]\n");
        assert!(e.contains("site[0].origin_weights"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigin = \"https://o\"\norigin_ca = \"/nonexistent/ca.pem\"\n");
        assert!(e.contains("origin_ca") && e.contains("/nonexistent/ca.pem"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigin = \"http://o\"\ndeny_cidrs = [\"10.0.0.0/33\"]\n");
        assert!(e.contains("deny_cidrs"), "{e}");
        let e = error("[[site]]\nhost = \"a.test\"\norigin = \"http://o\"\nrate_limit_burst = 5\n");
        assert!(e.contains("site[0].rate_limit_burst"), "{e}");
        let e = error(
            "[[site]]\nhost = \"a.test\"\norigin = \"http://o\"\n[[site]]\nhost = \"A.test\"\norigin = \"http://o\"\n",
        );
        assert!(e.contains("site[1].host") && e.contains("twice"), "{e}");
        let e = error("listen_https = \"127.0.0.1:0\"\n[[site]]\nhost = \"a.test\"\norigin = \"http://o\"\n");
        assert!(e.contains("listen_https"), "{e}");
    }
}
