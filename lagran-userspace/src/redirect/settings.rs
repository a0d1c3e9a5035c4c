//! The HTTP redirect entry point's settings (`[http_redirect]`).

use std::net::SocketAddr;

use serde::Deserialize;

use crate::settings::{InvalidSetting, Key, KeyDefault, no_repeated_address, one_or_many};

/// Where plain HTTP is answered with a 302 to the chosen node, and whom to believe.
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

impl HttpRedirectSettings {
    /// No address listed twice.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        no_repeated_address("http_redirect.listen", &self.listen)
    }
}

/// The keys of `[http_redirect]`.
pub const HTTP_REDIRECT_KEYS: &[Key] = &[
    Key::toml(
        "http_redirect.listen",
        KeyDefault::Described("none"),
        "[\"127.0.0.1:80\", \"[::1]:80\"]",
        "HTTP listeners (a string or an array; `--http-listen` repeatable, the variable comma-separated) \
         answering `GET`/`HEAD` for a scheduled Host with `302` to `http://<chosen node>/<same path and query>` \
         — the node's hostname for a name in CNAME mode, else its address (`Cache-Control: no-store`; \
         unknown Host → 404)",
    )
    .env("HTTP_LISTEN")
    .flags(&["--http-listen"]),
    Key::toml(
        "http_redirect.trusted_proxies",
        KeyDefault::Toml("[]"),
        "[\"10.0.0.0/8\"]",
        "CIDRs whose `X-Forwarded-For` is believed: the rightmost address that is not itself a trusted proxy \
         is the client; from anyone else the TCP peer is",
    ),
];
