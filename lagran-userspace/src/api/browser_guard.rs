//! Keeps web pages the operator visits from driving the API through their
//! browser (DNS rebinding, cross-site requests).
//!
//! A request that carries a token (`Authorization` or `x-lagran-agent-token`)
//! is the token's business: a page cannot add those headers to a cross-origin
//! request without a CORS preflight, which this API never grants. A request
//! without one may rely on ambient authority — the API being open on
//! loopback, or a browser cookie — so:
//! - while the API is open (no admin or no agent token), its `Host` must be a
//!   loopback name or address, or the address the API listens on (any IP
//!   literal when that is a wildcard address). A rebinding attack reaches us
//!   under the attacker's DNS name, never under one of these;
//! - if it has an `Origin` header, the origin must be this same host and port
//!   ("null" and other sites are refused): browsers send `Origin` on every
//!   cross-origin request that could change something (Fetch standard, §3.1).
//!
//! Refusals are `403` with a JSON error saying which header was refused and
//! what to do instead.

use std::net::{IpAddr, SocketAddr};

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::AGENT_TOKEN_HEADER;
use super::error::ApiError;

/// What the guard knows of the listener.
#[derive(Clone, Copy, Debug)]
pub struct BrowserGuard {
    /// The address the API is bound to.
    pub listen: SocketAddr,
    /// Whether the API has no admin or no agent token (ambient authority).
    pub open: bool,
}

/// `host[:port]` → host without brackets, lowercased, and the port.
fn split_host(authority: &str) -> (String, Option<u16>) {
    let a = authority.trim();
    if let Some(rest) = a.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (host.to_ascii_lowercase(), after.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match a.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h.to_ascii_lowercase(), p.parse().ok()),
        _ => (a.to_ascii_lowercase(), None),
    }
}

impl BrowserGuard {
    /// Whether `host` (a `Host` header's value) names this API without DNS.
    pub fn host_allowed(&self, host: &str) -> bool {
        let (name, _) = split_host(host);
        let name = name.trim_end_matches('.');
        if name == "localhost" || name.ends_with(".localhost") {
            return true; // RFC 6761 §6.3: always loopback
        }
        match name.parse::<IpAddr>() {
            Ok(ip) => {
                let ip = ip.to_canonical();
                ip.is_loopback() || ip == self.listen.ip().to_canonical() || self.listen.ip().is_unspecified()
            }
            Err(_) => false,
        }
    }

    /// Whether `origin` (an `Origin` header's value) is the page of this very `host`.
    pub fn origin_matches(origin: &str, host: &str) -> bool {
        let Some((scheme, rest)) = origin.trim().split_once("://") else {
            return false; // "null" (sandboxed frames, file: pages) and garbage
        };
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            _ => return false,
        };
        let (o_host, o_port) = split_host(rest.trim_end_matches('/'));
        let (h_host, h_port) = split_host(host);
        o_host == h_host && o_port.unwrap_or(default_port) == h_port.unwrap_or(default_port)
    }

    /// Checks one request's headers (`authority`: the URI's, for HTTP/2, where there is no `Host`).
    pub fn check(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), ApiError> {
        let has_token = headers.contains_key(header::AUTHORIZATION) || headers.contains_key(AGENT_TOKEN_HEADER);
        if has_token {
            return Ok(());
        }
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).or(authority).unwrap_or("");
        if self.open && !self.host_allowed(host) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "Host {host:?} refused: the open API answers only requests addressed to localhost, a loopback \
                     address or {} (protection against DNS rebinding); use one of those, or configure tokens",
                    self.listen.ip()
                ),
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            if !Self::origin_matches(origin, host) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Origin {origin:?} refused: requests from another web page (cross-site) are not accepted \
                         without a token; only pages served by this API itself may call it"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The axum middleware: `router.layer(axum::middleware::from_fn_with_state(guard, browser_guard::layer))`.
pub async fn layer(
    axum::extract::State(guard): axum::extract::State<BrowserGuard>,
    req: Request,
    next: Next,
) -> Response {
    if let Err(e) = guard.check(req.headers(), req.uri().authority().map(|a| a.as_str())) {
        tracing::warn!(error = %e.message, "API request refused by the Host/Origin check");
        return e.into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    const LOOPBACK: BrowserGuard =
        BrowserGuard { listen: SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080), open: true };

    #[test]
    fn the_open_api_refuses_foreign_host_names() {
        for ok in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "api.localhost:8080", "127.1.2.3"] {
            assert!(LOOPBACK.check(&h(&[("host", ok)]), None).is_ok(), "{ok}");
        }
        for bad in ["evil.example:8080", "10.0.0.1:8080", "localhost.evil.example", ""] {
            let e = LOOPBACK.check(&h(&[("host", bad)]), None).unwrap_err();
            assert_eq!(e.status, StatusCode::FORBIDDEN, "{bad}");
            assert!(e.message.contains("DNS rebinding"), "{}", e.message);
        }
        let no_host = LOOPBACK.check(&HeaderMap::new(), None).unwrap_err();
        assert_eq!(no_host.status, StatusCode::FORBIDDEN);
    }

    #[test]
    fn the_listen_address_is_allowed_and_a_wildcard_allows_ip_literals_only() {
        let g = BrowserGuard { listen: "10.0.0.1:8080".parse().unwrap(), open: true };
        assert!(g.check(&h(&[("host", "10.0.0.1:8080")]), None).is_ok());
        assert!(g.check(&h(&[("host", "10.0.0.2:8080")]), None).is_err());
        let any = BrowserGuard { listen: "0.0.0.0:8080".parse().unwrap(), open: true };
        assert!(any.check(&h(&[("host", "192.0.2.7:8080")]), None).is_ok());
        assert!(any.check(&h(&[("host", "rebind.evil.example:8080")]), None).is_err());
    }

    #[test]
    fn cross_site_origins_are_refused_same_origin_passes() {
        let same = h(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")]);
        assert!(LOOPBACK.check(&same, None).is_ok(), "the API's own pages (the /ui console) still work");
        for bad in ["http://evil.example", "null", "http://127.0.0.1:9999", "file://"] {
            let e = LOOPBACK.check(&h(&[("host", "127.0.0.1:8080"), ("origin", bad)]), None).unwrap_err();
            assert_eq!(e.status, StatusCode::FORBIDDEN, "{bad}");
            assert!(e.message.contains("Origin"), "{}", e.message);
        }
        assert!(BrowserGuard::origin_matches("http://localhost", "localhost:80"));
        assert!(BrowserGuard::origin_matches("https://[::1]:8443", "[::1]:8443"));
    }

    #[test]
    fn token_bearing_requests_and_closed_apis() {
        let foreign = [("host", "evil.example"), ("origin", "http://evil.example")];
        let mut with_token = h(&foreign);
        with_token.insert(header::AUTHORIZATION, "Bearer x".parse().unwrap());
        assert!(LOOPBACK.check(&with_token, None).is_ok(), "a token is its own proof");
        let closed = BrowserGuard { open: false, ..LOOPBACK };
        assert!(
            closed.check(&h(&[("host", "control.example.net")]), None).is_ok(),
            "a DNS name works once tokens are set"
        );
        let cross = h(&[("host", "control.example.net"), ("origin", "http://evil.example")]);
        assert!(closed.check(&cross, None).is_err(), "but a cookie-carrying cross-site request does not");
    }
}
