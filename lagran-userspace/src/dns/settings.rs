//! The responder's settings: the `[dns]` table and the `[tls]` certificate of
//! DNS over TLS and DNS over QUIC.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::Deserialize;

use crate::settings::{InvalidSetting, Key, KeyDefault, no_repeated_address, one_or_many};

/// What the DNS responder needs to know (`[dns]`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsSettings {
    /// Upper bound of the TTL answered for scheduled names (DNS_TTL).
    pub ttl: u32,
    /// Lower bound of every scheduled TTL (5 s unless configured).
    pub min_ttl: u32,
    /// How long the route table may go unconfirmed before DNS_FALLBACK_IP
    /// replaces answers (DNS_STALE_SECS).
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
    /// The TTL a scheduled answer is served with: `max(min(route TTL, DNS_TTL), min_ttl)`.
    /// The one place this policy lives: the responder, the XDP map writer,
    /// `lagran explain` and `/api/v1/schedule` all call it.
    pub fn served_ttl(&self, route_ttl: u32) -> u32 {
        route_ttl.min(self.ttl).max(self.min_ttl)
    }

    /// Checks the values together; `tls` is the certificate DoT and DoQ need.
    pub fn validate(&self, tls: &TlsSettings) -> Result<(), InvalidSetting> {
        no_repeated_address("dns.dot_listen", &self.dot_listen)?;
        no_repeated_address("dns.doq_listen", &self.doq_listen)?;
        if self.max_udp_payload < 512 {
            return Err(InvalidSetting::new("dns.max_udp_payload", "must be at least 512"));
        }
        for (key, zero) in [
            ("dns.tcp_max_connections", self.tcp_max_connections == 0),
            ("dns.tcp_max_per_client", self.tcp_max_per_client == 0),
            ("dns.tcp_idle_secs", self.tcp_idle_secs == 0),
            ("dns.tcp_max_queries_per_connection", self.tcp_max_queries_per_connection == 0),
        ] {
            if zero {
                return Err(InvalidSetting::new(key, "must be > 0"));
            }
        }
        if self.tcp_max_per_client > self.tcp_max_connections {
            return Err(InvalidSetting::new(
                "dns.tcp_max_per_client",
                format!("{} is above dns.tcp_max_connections ({})", self.tcp_max_per_client, self.tcp_max_connections),
            ));
        }
        let encrypted = !self.dot_listen.is_empty() || !self.doq_listen.is_empty();
        if encrypted && (tls.cert.is_none() || tls.key.is_none()) {
            return Err(InvalidSetting::new(
                "tls",
                "dns.dot_listen / dns.doq_listen need a certificate: set tls.cert and tls.key \
                 (--tls-cert, --tls-key; TLS_CERT, TLS_KEY)",
            ));
        }
        Ok(())
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

/// The certificate of DoT and DoQ (`[tls]`, PEM files, reloaded on SIGHUP).
/// The control API's TLS is configured apart ([`crate::control_tls`]).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// Certificate chain, leaf first.
    pub cert: Option<PathBuf>,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
}

/// The keys of `[dns]`.
pub const DNS_KEYS: &[Key] = &[
    Key::toml("dns.ttl", KeyDefault::Toml("30"), "60", "upper bound of answered TTLs").env("DNS_TTL"),
    Key::toml("dns.min_ttl", KeyDefault::Toml("5"), "3", "lower bound of every answered scheduled TTL"),
    Key::toml(
        "dns.stale_secs",
        KeyDefault::Toml("600"),
        "300",
        "how long a table may go unconfirmed by the control plane (this host's clock, not the table's age) \
         before `DNS_FALLBACK_IP` replaces answers",
    )
    .env("DNS_STALE_SECS"),
    Key::toml(
        "dns.fallback_ip",
        KeyDefault::Described("none"),
        "\"192.0.2.1\"",
        "answered when no node is eligible or the table is stale",
    )
    .env("DNS_FALLBACK_IP"),
    Key::toml(
        "dns.max_udp_payload",
        KeyDefault::Toml("1232"),
        "1400",
        "largest UDP response, whatever the client advertises (at least 512)",
    ),
    Key::toml(
        "dns.dot_listen",
        KeyDefault::Described("none"),
        "[\"127.0.0.1:853\", \"[::1]:853\"]",
        "DNS over TLS (RFC 7858) listeners; needs `[tls]`. A string or an array, like `dns_listen` \
         (`--dot-listen` repeatable, the variable comma-separated)",
    )
    .env("DOT_LISTEN")
    .flags(&["--dot-listen"]),
    Key::toml(
        "dns.doq_listen",
        KeyDefault::Described("none"),
        "\"127.0.0.1:8853\"",
        "DNS over QUIC (RFC 9250, UDP) listeners; needs `[tls]`; likewise",
    )
    .env("DOQ_LISTEN")
    .flags(&["--doq-listen"]),
    Key::toml(
        "dns.tcp_max_connections",
        KeyDefault::Toml("1024"),
        "2048",
        "DNS-over-TCP connections, all clients together; more are closed at once (raise `ulimit -n` above it)",
    ),
    Key::toml(
        "dns.tcp_max_per_client",
        KeyDefault::Toml("16"),
        "8",
        "TCP connections from one IPv4 address or IPv6 /64, so one host cannot take every slot",
    ),
    Key::toml(
        "dns.tcp_idle_secs",
        KeyDefault::Toml("10"),
        "5",
        "time to deliver a whole query, from the accept or the previous response; trickled bytes do not extend it",
    ),
    Key::toml(
        "dns.tcp_max_queries_per_connection",
        KeyDefault::Toml("100"),
        "50",
        "queries answered on one connection before the server closes it",
    ),
];

/// The keys of `[tls]`.
pub const TLS_KEYS: &[Key] = &[
    Key::toml(
        "tls.cert",
        KeyDefault::Described("none"),
        "\"/etc/lagran/dns.pem\"",
        "PEM certificate chain of DoT and DoQ only (not the control API), reloaded on SIGHUP; \
         a failed reload keeps the old one",
    )
    .env("TLS_CERT")
    .flags(&["--tls-cert"]),
    Key::toml("tls.key", KeyDefault::Described("none"), "\"/etc/lagran/dns.key\"", "the private key of `tls.cert`")
        .env("TLS_KEY")
        .flags(&["--tls-key"]),
];
