//! Configuration: a TOML file, then the seed's environment names, which win.
//!
//! | TOML key            | environment        | default                     |
//! |---------------------|--------------------|-----------------------------|
//! | `dns_listen`        | `DNS_LISTEN`       | `127.0.0.1:5353` (a string or an array; the environment a comma-separated list) |
//! | `api_listen`        | `API_LISTEN`       | `127.0.0.1:8080`            |
//! | `database_url`      | `DATABASE_URL`     | `sqlite://./lagran-data/lagran.db` |
//! | `dns.ttl`           | `DNS_TTL`          | 30                          |
//! | `dns.stale_secs`    | `DNS_STALE_SECS`   | 600                         |
//! | `dns.fallback_ip`   | `DNS_FALLBACK_IP`  | none                        |
//! | `dns.tcp_max_connections` | —            | 1024 (DNS over TCP, all clients) |
//! | `dns.tcp_max_per_client`  | —            | 16 (per IPv4 address / IPv6 /64) |
//! | `dns.tcp_idle_secs`       | —            | 10 (to read a whole query; trickling does not extend it) |
//! | `dns.tcp_max_queries_per_connection` | — | 100 (then the connection is closed) |
//! | `schedule.ttl`      | `SCHEDULE_TTL`     | 30                          |
//! | `agent_token`       | `AGENT_TOKEN`      | none                        |
//! | `admin_token`       | `ADMIN_TOKEN`      | none                        |
//! | `geo.ipv4_path`     | `GEOIP_PATH`       | `data/ip2region.xdb` if present |
//! | `geo.ipv6_path`     | `GEOIP_IPV6_PATH`  | none                        |
//! | `dns.dot_listen`    | `DOT_LISTEN`, `--dot-listen` | none (DNS over TLS, RFC 7858; a string or an array, like `dns_listen`) |
//! | `dns.doq_listen`    | `DOQ_LISTEN`, `--doq-listen` | none (DNS over QUIC, RFC 9250; likewise) |
//! | `tls.cert`, `tls.key` | `TLS_CERT`, `TLS_KEY`, `--tls-cert`, `--tls-key` | none (PEM; DoT and DoQ only, reloaded on SIGHUP) |
//! | `http_redirect.listen` | `HTTP_LISTEN`, `--http-listen` | none (HTTP 302 to the chosen node; likewise) |
//! | `http_redirect.trusted_proxies` |        | none (CIDRs whose X-Forwarded-For is believed) |
//! | `geo.max_change_ratio` | `GEO_MAX_CHANGE_RATIO` | 0.01 (a geo reload changing more sampled addresses is refused unless forced) |
//! | `api.tls.cert`, `api.tls.key` | `--api-tls-cert`, `--api-tls-key` | none (PEM; the control API serves HTTPS only) |
//! | `api.tls.client_ca` | `--api-tls-client-ca` | none (PEM; then every API client must present a certificate it signed) |
//! | `ca`                | `LAGRAN_CA`, `--ca` | the system store (PEM CA bundle trusted for `https://` control URLs) |
//! | `client_cert`, `client_key` | `--client-cert`, `--client-key` | none (PEM; presented to an `https://` control API) |
//! | `rrl.responses_per_second` | `RRL_RPS` | 0 = off (UDP responses per client /24 or /56 and response class) |
//! | `rrl.slip`          | `RRL_SLIP`         | 2 (every 2nd limited response goes out with TC=1; 0 = drop all) |
//! | `rrl.window_secs`   | —                  | 15 (how far below zero a flood drives the account) |
//! | `cookies.secret_file` | —                | none: a random secret made at start (server cookies, RFC 7873/9018; 16 octets, raw or 32 hex digits) |
//! | `cookies.grace_secs` | —                 | 3600 (the previous secret is still accepted after the file changes) |

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A configuration value that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("environment variable {name}={value:?} is not valid: {reason}")]
    Env { name: &'static str, value: String, reason: String },
    #[error("config value {key} is not valid: {reason}")]
    Invalid { key: &'static str, reason: String },
}

/// What the DNS responder needs to know (SPEC §3, §7).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsSettings {
    /// Upper bound of the TTL answered for scheduled names (DNS_TTL).
    pub ttl: u32,
    /// Lower bound of every scheduled TTL; the seed fixes it at 5 s.
    pub min_ttl: u32,
    /// Age of the route table after which DNS_FALLBACK_IP replaces answers (DNS_STALE_SECS).
    pub stale_secs: u64,
    /// Answered when no node is eligible or the table is stale (DNS_FALLBACK_IP).
    pub fallback_ip: Option<Ipv4Addr>,
    /// Largest UDP response we ever send, whatever the client advertises (RFC 9715 suggests 1232).
    pub max_udp_payload: u16,
    /// DNS over TLS (RFC 7858) listen addresses; need `[tls]`. TOML takes a
    /// string or an array of strings.
    #[serde(deserialize_with = "one_or_many")]
    pub dot_listen: Vec<SocketAddr>,
    /// DNS over QUIC (RFC 9250) listen addresses (UDP); need `[tls]`.
    #[serde(deserialize_with = "one_or_many")]
    pub doq_listen: Vec<SocketAddr>,
    /// Concurrent DNS-over-TCP connections, all clients together (RFC 7766 §6.2.2).
    pub tcp_max_connections: usize,
    /// Concurrent TCP connections from one client (an IPv4 address, an IPv6 /64),
    /// so that one host holding idle connections cannot keep others out.
    pub tcp_max_per_client: usize,
    /// Seconds a connection may take to deliver a whole query, counted from the
    /// previous response (or the accept): trickled bytes do not extend it.
    pub tcp_idle_secs: u64,
    /// Queries answered on one connection before it is closed.
    pub tcp_max_queries_per_connection: u32,
}

impl DnsSettings {
    /// The TTL a scheduled answer is served with: `max(min(route TTL, DNS_TTL), min_ttl)`
    /// (SPEC §3). The one place this policy lives: the responder, the XDP map writer,
    /// `lagran explain` and `/api/v1/schedule` all call it.
    pub fn served_ttl(&self, route_ttl: u32) -> u32 {
        route_ttl.min(self.ttl).max(self.min_ttl)
    }
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            ttl: 30,
            min_ttl: 5,
            stale_secs: 600,
            fallback_ip: None,
            max_udp_payload: 1232,
            dot_listen: Vec::new(),
            doq_listen: Vec::new(),
            tcp_max_connections: 1024,
            tcp_max_per_client: 16,
            tcp_idle_secs: 10,
            tcp_max_queries_per_connection: 100,
        }
    }
}

/// Scheduling knobs (SPEC §4). The optional stages are on when their table is present.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleSettings {
    /// Route TTL in the steady state (SCHEDULE_TTL).
    pub ttl: u32,
    /// Route TTL while a partition is served by a failover node (its best node is down).
    pub failover_ttl: u32,
    /// Route TTL of answers under a canary split.
    pub canary_ttl: u32,
    /// Addresses per answer: the primary plus backups (1–4).
    pub answers_per_query: u8,
    /// Seconds between full recomputes.
    pub recompute_secs: u64,
    /// Keep the current answer unless the new best beats it by this share (0 = off).
    pub hysteresis: f64,
    /// ... and by more than this many score points (seed 002 §5.3's absolute
    /// threshold), so that a point or two of load jitter cannot flip the
    /// answer of a partition whose scores are small. Applies when `hysteresis` > 0.
    pub hysteresis_points: i64,
    /// Only nodes of the client's ISP, when at least one is eligible.
    pub isp_must_match: bool,
    /// `[schedule.caps]`: bandwidth / connection caps as penalties.
    pub caps: Option<crate::engine::CapPolicy>,
    /// `[schedule.distance]`: haversine distance penalty.
    pub distance: Option<crate::engine::DistancePolicy>,
    /// `[schedule.spill]`: overload spill to the next best same-ISP node.
    pub spill: Option<crate::engine::SpillPolicy>,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        ScheduleSettings {
            ttl: 30,
            failover_ttl: 10,
            canary_ttl: 20,
            answers_per_query: 1,
            recompute_secs: 30,
            hysteresis: 0.15,
            hysteresis_points: 20,
            isp_must_match: false,
            caps: None,
            distance: None,
            spill: None,
        }
    }
}

impl ScheduleSettings {
    /// The engine policy these settings ask for.
    pub fn policy(&self) -> crate::engine::Policy {
        crate::engine::Policy {
            caps: self.caps.clone(),
            distance: self.distance.clone(),
            isp_must_match: self.isp_must_match,
            spill: self.spill.clone(),
            ..Default::default()
        }
    }
}

/// Geo database files (SPEC §5).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GeoSettings {
    pub ipv4_path: Option<PathBuf>,
    pub ipv6_path: Option<PathBuf>,
    /// A reload changing the partition of more than this share of the sampled
    /// addresses is refused unless forced (seed 001 §5.2; GEO_MAX_CHANGE_RATIO).
    pub max_change_ratio: f64,
}

impl Default for GeoSettings {
    fn default() -> Self {
        GeoSettings {
            ipv4_path: None,
            ipv6_path: None,
            max_change_ratio: crate::scheduler::geo_reload::DEFAULT_MAX_CHANGE_RATIO,
        }
    }
}

/// The certificate of DoT and DoQ (PEM files, reloaded on SIGHUP). The
/// control API's TLS is configured apart.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// Certificate chain, leaf first.
    pub cert: Option<PathBuf>,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
}

/// The control API's own settings (`[api]`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    pub tls: ApiTlsSettings,
}

/// The control API's certificate (`[api.tls]`): with one, it speaks HTTPS only.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiTlsSettings {
    /// Certificate chain, leaf first (PEM).
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// With it, every client must present a certificate this CA signed (PEM).
    pub client_ca: Option<PathBuf>,
}

/// The HTTP 302 entry point (seed 002 §3.4).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpRedirectSettings {
    /// Where plain HTTP requests are answered with a redirect to the chosen
    /// node. TOML takes a string or an array of strings.
    #[serde(deserialize_with = "one_or_many")]
    pub listen: Vec<SocketAddr>,
    /// Peers whose `X-Forwarded-For` is believed (load balancers in front of us).
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// Response rate limiting (BIND/Knot RRL) of UDP responses, in userspace and
/// in the XDP program alike (see `dns::rrl`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RrlSettings {
    /// Responses per second per client prefix and response class; 0 = off (RRL_RPS).
    pub responses_per_second: u32,
    /// Every `slip`-th limited response is sent truncated (TC=1); 0 drops all (RRL_SLIP).
    pub slip: u32,
    /// A flood drives an account down to `-window_secs × responses_per_second`,
    /// so the client is limited until its rate has been below the limit for that long.
    pub window_secs: u32,
}

impl Default for RrlSettings {
    fn default() -> Self {
        RrlSettings { responses_per_second: 0, slip: 2, window_secs: 15 }
    }
}

/// DNS server cookies (RFC 7873, RFC 9018), in userspace and the XDP program.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CookieSettings {
    /// The 16-octet secret (raw, or 32 hex digits), shared by every NS host of a
    /// cluster; replacing the file rotates it. None: a random secret made at start.
    pub secret_file: Option<PathBuf>,
    /// Seconds the previous secret is still accepted after a rotation.
    pub grace_secs: u64,
}

impl Default for CookieSettings {
    fn default() -> Self {
        CookieSettings { secret_file: None, grace_secs: 3600 }
    }
}

/// The whole configuration.
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
    pub health: crate::health::HealthSettings,
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
    pub rrl: RrlSettings,
    pub cookies: CookieSettings,
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
            health: crate::health::HealthSettings::default(),
            public_resolvers: Vec::new(),
            tls: TlsSettings::default(),
            http_redirect: HttpRedirectSettings::default(),
            api: ApiSettings::default(),
            ca: None,
            client_cert: None,
            client_key: None,
            rrl: RrlSettings::default(),
            cookies: CookieSettings::default(),
        }
    }
}

/// `dns_listen = "127.0.0.1:53"` or `dns_listen = ["10.0.0.2:53", "[2001:db8::2]:53"]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(SocketAddr),
        Many(Vec<SocketAddr>),
    }
    match OneOrMany::deserialize(d)
        .map_err(|_| serde::de::Error::custom("expected an address such as \"127.0.0.1:53\" or an array of them"))?
    {
        OneOrMany::One(a) => Ok(vec![a]),
        OneOrMany::Many(v) => Ok(v),
    }
}

/// The default location of the real ip2region file fetched by `scripts/fetch-geoip.sh`.
pub const DEFAULT_GEOIP_PATH: &str = "data/ip2region.xdb";

impl Config {
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

    /// Applies the seed's environment names; `get` is `std::env::var` outside tests.
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
        if let Some(v) = non_empty("LAGRAN_CA") {
            self.ca = Some(PathBuf::from(v));
        }
        if let Some(v) = non_empty("GEO_MAX_CHANGE_RATIO") {
            self.geo.max_change_ratio = parse("GEO_MAX_CHANGE_RATIO", v)?;
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
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.api.tls;
        if t.cert.is_some() != t.key.is_some() || (t.client_ca.is_some() && t.cert.is_none()) {
            return Err(ConfigError::Invalid {
                key: "api.tls",
                reason: "set both api.tls.cert and api.tls.key (--api-tls-cert, --api-tls-key); client_ca needs them"
                    .into(),
            });
        }
        if self.client_cert.is_some() != self.client_key.is_some() {
            return Err(ConfigError::Invalid {
                key: "client_cert",
                reason: "set both client_cert and client_key (--client-cert, --client-key)".into(),
            });
        }
        if self.dns_listen.is_empty() {
            return Err(ConfigError::Invalid { key: "dns_listen", reason: "needs at least one address".into() });
        }
        for (key, list) in [
            ("dns_listen", &self.dns_listen),
            ("dns.dot_listen", &self.dns.dot_listen),
            ("dns.doq_listen", &self.dns.doq_listen),
            ("http_redirect.listen", &self.http_redirect.listen),
        ] {
            for (i, a) in list.iter().enumerate() {
                if list[..i].contains(a) {
                    return Err(ConfigError::Invalid { key, reason: format!("{a} is listed twice") });
                }
            }
        }
        if !(1..=4).contains(&self.schedule.answers_per_query) {
            return Err(ConfigError::Invalid {
                key: "schedule.answers_per_query",
                reason: format!("{} is outside 1..=4", self.schedule.answers_per_query),
            });
        }
        if self.dns.max_udp_payload < 512 {
            return Err(ConfigError::Invalid { key: "dns.max_udp_payload", reason: "must be at least 512".into() });
        }
        let d = &self.dns;
        for (key, zero) in [
            ("dns.tcp_max_connections", d.tcp_max_connections == 0),
            ("dns.tcp_max_per_client", d.tcp_max_per_client == 0),
            ("dns.tcp_idle_secs", d.tcp_idle_secs == 0),
            ("dns.tcp_max_queries_per_connection", d.tcp_max_queries_per_connection == 0),
        ] {
            if zero {
                return Err(ConfigError::Invalid { key, reason: "must be > 0".into() });
            }
        }
        if d.tcp_max_per_client > d.tcp_max_connections {
            return Err(ConfigError::Invalid {
                key: "dns.tcp_max_per_client",
                reason: format!(
                    "{} is above dns.tcp_max_connections ({})",
                    d.tcp_max_per_client, d.tcp_max_connections
                ),
            });
        }
        if !(self.database_url.starts_with("sqlite:") || self.database_url.starts_with("postgres")) {
            return Err(ConfigError::Invalid {
                key: "database_url",
                reason: format!("{:?} is neither sqlite://… nor postgres://…", self.database_url),
            });
        }
        if !(0.0..=10.0).contains(&self.schedule.hysteresis) {
            return Err(ConfigError::Invalid { key: "schedule.hysteresis", reason: "must be within 0..=10".into() });
        }
        if !(0..=1000).contains(&self.schedule.hysteresis_points) {
            return Err(ConfigError::Invalid {
                key: "schedule.hysteresis_points",
                reason: "must be within 0..=1000".into(),
            });
        }
        if self.health.fall == 0 || self.health.rise == 0 || self.health.interval_secs == 0 {
            return Err(ConfigError::Invalid {
                key: "health",
                reason: "interval_secs, fall and rise must be > 0".into(),
            });
        }
        let encrypted = !self.dns.dot_listen.is_empty() || !self.dns.doq_listen.is_empty();
        if encrypted && (self.tls.cert.is_none() || self.tls.key.is_none()) {
            return Err(ConfigError::Invalid {
                key: "tls",
                reason: "dns.dot_listen / dns.doq_listen need a certificate: set tls.cert and tls.key \
                         (--tls-cert, --tls-key; TLS_CERT, TLS_KEY)"
                    .into(),
            });
        }
        if !(0.0..=1.0).contains(&self.geo.max_change_ratio) {
            return Err(ConfigError::Invalid {
                key: "geo.max_change_ratio",
                reason: format!("{} is not a fraction within 0..=1", self.geo.max_change_ratio),
            });
        }
        if self.rrl.responses_per_second > 0 && self.rrl.window_secs == 0 {
            return Err(ConfigError::Invalid { key: "rrl.window_secs", reason: "must be > 0 when RRL is on".into() });
        }
        if self.rrl.responses_per_second > crate::dns::rrl::MAX_RATE {
            return Err(ConfigError::Invalid {
                key: "rrl.responses_per_second",
                reason: format!("{} is above {}", self.rrl.responses_per_second, crate::dns::rrl::MAX_RATE),
            });
        }
        if self.rrl.window_secs > crate::dns::rrl::MAX_WINDOW_SECS {
            return Err(ConfigError::Invalid {
                key: "rrl.window_secs",
                reason: format!("{} is above {}", self.rrl.window_secs, crate::dns::rrl::MAX_WINDOW_SECS),
            });
        }
        if self.schedule.recompute_secs == 0 {
            return Err(ConfigError::Invalid { key: "schedule.recompute_secs", reason: "must be > 0".into() });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_wins_over_file() {
        let mut cfg: Config = toml::from_str("[dns]\nttl = 60\n").unwrap();
        assert_eq!(cfg.dns.ttl, 60);
        cfg.apply_env(|k| (k == "DNS_TTL").then(|| "20".to_string())).unwrap();
        assert_eq!(cfg.dns.ttl, 20);
    }

    #[test]
    fn bad_environment_value_names_the_variable() {
        let mut cfg = Config::default();
        let err = cfg.apply_env(|k| (k == "DNS_FALLBACK_IP").then(|| "not-an-ip".to_string())).unwrap_err();
        assert!(err.to_string().contains("DNS_FALLBACK_IP"), "{err}");
    }

    #[test]
    fn rrl_has_toml_keys_and_the_environment_wins() {
        let mut cfg: Config =
            toml::from_str("[rrl]\nresponses_per_second = 5\nslip = 3\nwindow_secs = 4\n[cookies]\ngrace_secs = 60\n")
                .unwrap();
        assert_eq!((cfg.rrl.responses_per_second, cfg.rrl.slip, cfg.rrl.window_secs), (5, 3, 4));
        assert_eq!(cfg.cookies.grace_secs, 60);
        cfg.apply_env(|k| match k {
            "RRL_RPS" => Some("100".to_string()),
            "RRL_SLIP" => Some("0".to_string()),
            _ => None,
        })
        .unwrap();
        assert_eq!((cfg.rrl.responses_per_second, cfg.rrl.slip), (100, 0));
        cfg.validate().unwrap();
        assert_eq!(Config::default().rrl.responses_per_second, 0, "RRL is off by default");
        cfg.rrl.window_secs = 0;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn unknown_toml_key_is_an_error() {
        assert!(toml::from_str::<Config>("dns_ttl = 3\n").is_err());
    }

    #[test]
    fn dns_listen_takes_one_address_or_many() {
        let one: Config = toml::from_str("dns_listen = \"10.0.0.2:53\"\n").unwrap();
        assert_eq!(one.dns_listen, vec!["10.0.0.2:53".parse::<SocketAddr>().unwrap()]);
        let many: Config = toml::from_str("dns_listen = [\"10.0.0.2:53\", \"[2001:db8::2]:53\"]\n").unwrap();
        assert_eq!(many.dns_listen.len(), 2, "both addresses kept: {:?}", many.dns_listen);
        assert!(many.dns_listen[1].is_ipv6());
        let err = toml::from_str::<Config>("dns_listen = \"not an address\"\n").unwrap_err().to_string();
        assert!(err.contains("dns_listen") || err.contains("address"), "the error says what is expected: {err}");
        let mut env = Config::default();
        env.apply_env(|k| (k == "DNS_LISTEN").then(|| "127.0.0.1:53, [::1]:53".to_string())).unwrap();
        assert_eq!(env.dns_listen.len(), 2, "DNS_LISTEN is a comma-separated list: {:?}", env.dns_listen);
        env.dns_listen.push(env.dns_listen[0]);
        assert!(env.validate().unwrap_err().to_string().contains("twice"));
        env.dns_listen.clear();
        assert!(env.validate().is_err(), "no address at all is refused");
    }

    #[test]
    fn entry_points_parse_and_need_a_certificate() {
        let text = "[dns]\ndot_listen = \"127.0.0.1:853\"\ndoq_listen = \"127.0.0.1:853\"\n\
                    [http_redirect]\nlisten = \"127.0.0.1:80\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n";
        let mut cfg: Config = toml::from_str(text).unwrap();
        assert_eq!(cfg.dns.dot_listen, vec!["127.0.0.1:853".parse::<SocketAddr>().unwrap()]);
        assert_eq!(cfg.http_redirect.trusted_proxies.len(), 1);
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("tls.cert"), "DoT without a certificate is refused, naming the keys: {err}");
        cfg.tls = toml::from_str("cert = \"c.pem\"\nkey = \"k.pem\"\n").unwrap();
        cfg.validate().unwrap();
        // Arrays, like dns_listen; a repeated address is refused.
        let many: Config = toml::from_str("[http_redirect]\nlisten = [\"127.0.0.1:80\", \"[::1]:80\"]\n").unwrap();
        assert_eq!(many.http_redirect.listen.len(), 2);
        let twice: Config = toml::from_str("[http_redirect]\nlisten = [\"127.0.0.1:80\", \"127.0.0.1:80\"]\n").unwrap();
        assert!(twice.validate().unwrap_err().to_string().contains("http_redirect.listen"));
    }

    #[test]
    fn entry_points_take_the_environment_like_dns_listen() {
        let env = |k: &str| {
            let v = match k {
                "DOT_LISTEN" => "127.0.0.1:853, [::1]:853",
                "DOQ_LISTEN" => "127.0.0.1:8853",
                "HTTP_LISTEN" => "127.0.0.1:80",
                "TLS_CERT" => "/etc/lagran/dns.pem",
                "TLS_KEY" => "/etc/lagran/dns.key",
                _ => return None,
            };
            Some(v.to_string())
        };
        let mut cfg: Config = toml::from_str("[dns]\ndot_listen = \"10.0.0.1:853\"\n").unwrap();
        cfg.apply_env(env).unwrap();
        assert_eq!(cfg.dns.dot_listen.len(), 2, "the environment wins over TOML: {:?}", cfg.dns.dot_listen);
        assert_eq!(cfg.dns.doq_listen, vec!["127.0.0.1:8853".parse::<SocketAddr>().unwrap()]);
        assert_eq!(cfg.http_redirect.listen, vec!["127.0.0.1:80".parse::<SocketAddr>().unwrap()]);
        assert_eq!(cfg.tls.cert.as_deref(), Some(Path::new("/etc/lagran/dns.pem")));
        assert_eq!(cfg.tls.key.as_deref(), Some(Path::new("/etc/lagran/dns.key")));
        cfg.validate().unwrap();
        let err =
            Config::default().apply_env(|k| (k == "HTTP_LISTEN").then(|| "80".to_string())).unwrap_err().to_string();
        assert!(err.contains("HTTP_LISTEN"), "a bad value names the variable: {err}");
    }

    #[test]
    fn answers_per_query_is_bounded() {
        let mut cfg = Config::default();
        cfg.schedule.answers_per_query = 5;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn geo_max_change_ratio_has_a_toml_key_and_the_environment_wins() {
        let mut cfg: Config = toml::from_str("[geo]\nmax_change_ratio = 0.05\n").unwrap();
        assert_eq!(cfg.geo.max_change_ratio, 0.05);
        assert_eq!(Config::default().geo.max_change_ratio, 0.01, "the default is seed 001's 1 %");
        cfg.apply_env(|k| (k == "GEO_MAX_CHANGE_RATIO").then(|| "0.2".to_string())).unwrap();
        assert_eq!(cfg.geo.max_change_ratio, 0.2);
        cfg.geo.max_change_ratio = 1.5;
        assert!(cfg.validate().unwrap_err().to_string().contains("geo.max_change_ratio"));
        assert!(toml::from_str::<Config>("[dns]\ncache_secs = 3\n").is_err(), "DNS_CACHE_SECS had no effect: gone");
    }
}
