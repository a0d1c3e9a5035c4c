//! The configuration: a TOML file, then the environment, which wins; the
//! command line (`main.rs`) overrides a few keys after both.
//!
//! Each subsystem owns its settings type, their defaults and their
//! validation, and documents its keys as rows of [`KEY_GROUPS`]; this module reads
//! the file and the environment and puts the parts together. README's
//! configuration table is generated from [`KEY_GROUPS`], and the tests of this
//! module check it against the README, the deserializer, the environment and
//! the command line.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::control_tls::{ApiSettings, ApiTlsSettings};
pub use crate::dns::cookie::CookieSettings;
pub use crate::dns::rrl::RrlSettings;
pub use crate::dns::settings::{DnsSettings, TlsSettings};
pub use crate::dnstap::DnstapSettings;
pub use crate::geo::settings::{DEFAULT_GEOIP_PATH, GeoSettings};
pub use crate::health::HealthSettings;
use crate::model::{Zone, ZoneSpec};
pub use crate::redirect::settings::HttpRedirectSettings;
pub use crate::scheduler::settings::ScheduleSettings;
use crate::settings::{InvalidSetting, no_repeated_address, one_or_many};

mod keys;
pub use keys::{KEY_GROUPS, all_keys, markdown_table};

/// A configuration value that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("environment variable {name}={value:?} is not valid: {reason}")]
    Env { name: &'static str, value: String, reason: String },
    #[error(transparent)]
    Invalid(#[from] InvalidSetting),
}

/// The whole configuration: the top-level keys and each subsystem's table.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Every address the responder listens on (UDP and TCP), IPv4 and IPv6; the XDP
    /// fast path answers only packets addressed to these. TOML takes a string or an
    /// array of strings.
    #[serde(deserialize_with = "one_or_many")]
    pub dns_listen: Vec<SocketAddr>,
    pub api_listen: SocketAddr,
    pub database_url: String,
    pub agent_token: Option<String>,
    pub admin_token: Option<String>,
    pub dns: DnsSettings,
    pub schedule: ScheduleSettings,
    pub geo: GeoSettings,
    pub health: HealthSettings,
    /// Public-resolver prefixes beyond the built-in list; a line covering one needs `force`.
    pub public_resolvers: Vec<ipnet::IpNet>,
    pub tls: TlsSettings,
    pub http_redirect: HttpRedirectSettings,
    /// The control API's TLS.
    pub api: ApiSettings,
    /// The CA bundle trusted for `https://` control URLs (NS hosts, operator
    /// commands); none: the system store.
    pub ca: Option<PathBuf>,
    /// A client certificate presented to an `https://` control API.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// `http://` control URLs to non-loopback addresses are accepted ([`crate::control_url`]).
    pub insecure_control: bool,
    pub rrl: RrlSettings,
    pub cookies: CookieSettings,
    /// `[dnstap]`: query logs.
    pub dnstap: DnstapSettings,
    /// Where the control plane keeps the DNSSEC keys of the signed zones.
    pub dnssec_key_dir: PathBuf,
    /// The 32-byte key the DNSSEC private keys are sealed with in the database.
    pub dnssec_key_file: PathBuf,
    /// How long a zone whose signing was turned off serves the CDS/CDNSKEY
    /// DELETE records, still signed, before it is served unsigned.
    pub dnssec_delete_wait_secs: u32,
    /// `[steering]`: the latency policy's window, sample floor and stabilize band.
    pub steering: crate::steering::settings::SteeringSettings,
    /// `[acme]`: certificates of the sites with `acme`, from an ACME server.
    pub acme: crate::acme::AcmeSettings,
    /// `[cluster]`: NS-host report retention.
    pub cluster: crate::ns_reports::ClusterSettings,
    /// `[zones."name"]`: zones a control process declares when it starts,
    /// each as `PUT /api/v1/zones/{name}` with the same fields would.
    pub zones: BTreeMap<String, ZoneSpec>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dns_listen: vec!["127.0.0.1:5353".parse().expect("static address")],
            api_listen: "127.0.0.1:8080".parse().expect("static address"),
            database_url: "sqlite://./lagran-data/lagran.db".to_string(),
            agent_token: None,
            admin_token: None,
            dns: DnsSettings::default(),
            schedule: ScheduleSettings::default(),
            geo: GeoSettings::default(),
            health: HealthSettings::default(),
            public_resolvers: Vec::new(),
            tls: TlsSettings::default(),
            http_redirect: HttpRedirectSettings::default(),
            api: ApiSettings::default(),
            ca: None,
            client_cert: None,
            client_key: None,
            insecure_control: false,
            rrl: RrlSettings::default(),
            cookies: CookieSettings::default(),
            dnstap: DnstapSettings::default(),
            dnssec_key_dir: PathBuf::from("./lagran-data/dnssec"),
            dnssec_key_file: PathBuf::from("./lagran-data/dnssec.key"),
            dnssec_delete_wait_secs: crate::model::DEFAULT_DELETE_WAIT_SECS,
            steering: Default::default(),
            acme: Default::default(),
            cluster: Default::default(),
            zones: BTreeMap::new(),
        }
    }
}

impl Config {
    /// DNSSEC signing as this configuration sets it up: keys sealed with
    /// `dnssec_key_file`, the old `dnssec_key_dir` imported.
    pub fn dnssec_signing(&self, store: crate::store::Store) -> crate::dnssec::Signing {
        let import = Some(crate::dnssec::KeyDirectory::new(&self.dnssec_key_dir));
        let keeper =
            crate::dnssec::KeyKeeper::new(store, self.dnssec_key_file.clone(), import, self.dnssec_delete_wait_secs);
        crate::dnssec::Signing::new(keeper)
    }

    /// The zones of `[zones."name"]`, checked as the API checks a zone.
    pub fn declared_zones(&self) -> Result<Vec<Zone>, InvalidSetting> {
        self.zones
            .iter()
            .map(|(name, spec)| {
                spec.clone().into_zone(name).map_err(|e| InvalidSetting::new("zones", format!("zone {name:?}: {e}")))
            })
            .collect()
    }

    /// Reads `path` (if given), then applies the environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut cfg = match path {
            Some(p) => Self::from_file(p)?,
            None => Config::default(),
        };
        cfg.apply_env(|k| std::env::var(k).ok())?;
        if cfg.geo.ipv4_path.is_none() && Path::new(DEFAULT_GEOIP_PATH).exists() {
            cfg.geo.ipv4_path = Some(PathBuf::from(DEFAULT_GEOIP_PATH));
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse { path: path.to_path_buf(), source })
    }

    /// Applies the environment variables of [`KEY_GROUPS`]; `get` is `std::env::var` outside tests.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        fn parse<T: std::str::FromStr>(name: &'static str, value: String) -> Result<T, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            value.trim().parse().map_err(|e: T::Err| ConfigError::Env { name, value, reason: e.to_string() })
        }
        let non_empty = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        // A comma-separated list of addresses.
        let addresses = |name: &'static str, v: String| -> Result<Vec<SocketAddr>, ConfigError> {
            v.split(',').filter(|a| !a.trim().is_empty()).map(|a| parse(name, a.to_string())).collect()
        };
        if let Some(v) = non_empty("DNS_LISTEN") {
            self.dns_listen = addresses("DNS_LISTEN", v)?;
        }
        if let Some(v) = non_empty("DOT_LISTEN") {
            self.dns.dot_listen = addresses("DOT_LISTEN", v)?;
        }
        if let Some(v) = non_empty("DOQ_LISTEN") {
            self.dns.doq_listen = addresses("DOQ_LISTEN", v)?;
        }
        if let Some(v) = non_empty("HTTP_LISTEN") {
            self.http_redirect.listen = addresses("HTTP_LISTEN", v)?;
        }
        if let Some(v) = non_empty("TLS_CERT") {
            self.tls.cert = Some(PathBuf::from(v));
        }
        if let Some(v) = non_empty("TLS_KEY") {
            self.tls.key = Some(PathBuf::from(v));
        }
        if let Some(v) = non_empty("API_LISTEN") {
            self.api_listen = parse("API_LISTEN", v)?;
        }
        if let Some(v) = non_empty("DATABASE_URL") {
            self.database_url = v;
        }
        if let Some(v) = non_empty("DNS_TTL") {
            self.dns.ttl = parse("DNS_TTL", v)?;
        }
        if let Some(v) = non_empty("DNS_STALE_SECS") {
            self.dns.stale_secs = parse("DNS_STALE_SECS", v)?;
        }
        if let Some(v) = non_empty("DNS_FALLBACK_IP") {
            self.dns.fallback_ip = Some(parse("DNS_FALLBACK_IP", v)?);
        }
        if let Some(v) = non_empty("SCHEDULE_TTL") {
            self.schedule.ttl = parse("SCHEDULE_TTL", v)?;
        }
        if let Some(v) = non_empty("AGENT_TOKEN") {
            self.agent_token = Some(v);
        }
        if let Some(v) = non_empty("ADMIN_TOKEN") {
            self.admin_token = Some(v);
        }
        if let Some(v) = non_empty("GEOIP_PATH") {
            self.geo.ipv4_path = Some(PathBuf::from(v));
        }
        if let Some(v) = non_empty("GEOIP_IPV6_PATH") {
            self.geo.ipv6_path = Some(PathBuf::from(v));
        }
        if let Some(v) = non_empty("GEOIP_MMDB_PATH") {
            self.geo.mmdb_path = crate::geo::settings::path_list(&v);
        }
        if let Some(v) = non_empty("GEOIP_ASN_PATH") {
            self.geo.asn_path = crate::geo::settings::path_list(&v);
        }
        if let Some(v) = non_empty("LAGRAN_CA") {
            self.ca = Some(PathBuf::from(v));
        }
        if let Some(v) = non_empty("GEO_MAX_CHANGE_RATIO") {
            self.geo.max_change_ratio = parse("GEO_MAX_CHANGE_RATIO", v)?;
        }
        if let Some(v) = non_empty("DNSSEC_KEY_DIR") {
            self.dnssec_key_dir = PathBuf::from(v);
        }
        if let Some(v) = non_empty("DNSSEC_KEY_FILE") {
            self.dnssec_key_file = PathBuf::from(v);
        }
        if let Some(v) = non_empty("DNSSEC_DELETE_WAIT_SECS") {
            self.dnssec_delete_wait_secs = parse("DNSSEC_DELETE_WAIT_SECS", v)?;
        }
        if let Some(v) = non_empty("RRL_RPS") {
            self.rrl.responses_per_second = parse("RRL_RPS", v)?;
        }
        if let Some(v) = non_empty("RRL_SLIP") {
            self.rrl.slip = parse("RRL_SLIP", v)?;
        }
        Ok(())
    }

    /// What this process's clients of an `https://` control API trust and present.
    pub fn client_tls(&self) -> crate::control_tls::ClientTls {
        crate::control_tls::ClientTls {
            ca: self.ca.clone(),
            cert: self.client_cert.clone(),
            key: self.client_key.clone(),
            insecure_control: self.insecure_control,
        }
    }

    /// Checks the top-level keys, then asks each subsystem to check its own.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.api.validate()?;
        tokens::check_token("agent_token", self.agent_token.as_deref())?;
        tokens::check_token("admin_token", self.admin_token.as_deref())?;
        self.client_tls().validate()?;
        if self.dns_listen.is_empty() {
            return Err(InvalidSetting::new("dns_listen", "needs at least one address").into());
        }
        no_repeated_address("dns_listen", &self.dns_listen)?;
        self.dns.validate(&self.tls)?;
        self.http_redirect.validate()?;
        self.schedule.validate()?;
        self.steering.validate()?;
        if !(self.database_url.starts_with("sqlite:") || self.database_url.starts_with("postgres")) {
            return Err(InvalidSetting::new(
                "database_url",
                format!("{:?} is neither sqlite://… nor postgres://…", self.database_url),
            )
            .into());
        }
        self.health.validate()?;
        self.geo.validate()?;
        self.rrl.validate()?;
        self.acme.validate()?;
        self.cluster.validate()?;
        self.declared_zones()?;
        Ok(())
    }
}

#[cfg(test)]
mod keys_tests;
#[cfg(test)]
mod tests;
mod tokens;
