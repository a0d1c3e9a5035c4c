//! Whether a control URL may carry a token in cleartext.
//!
//! Every request to the control API carries a token (the agent token, a
//! node's own token or the admin token), and what comes back — route tables,
//! sites, private keys — is what that token reads. Over `http://` anyone on
//! the path reads both and can answer in the control plane's place. So an
//! `http://` control URL is accepted only when it names a loopback address
//! (`127.0.0.0/8`, `::1`, `localhost`), where the bytes never leave the
//! machine; any other needs `--insecure-control` (TOML `insecure_control =
//! true`), and a process started with it says so in its log at every start.
//! `https://` URLs are always accepted (and spoken over TLS only, see
//! [`crate::control_tls`]).

use std::net::IpAddr;

/// Why a control URL is refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlUrlError {
    #[error("{url} is not a usable control URL: {reason}")]
    Invalid { url: String, reason: String },
    #[error(
        "refusing {url}: http:// to {host}, which is not a loopback address, would send the token and what it \
         reads (route tables, keys) in cleartext; use https:// (trusting --ca) or pass --insecure-control \
         (TOML insecure_control = true)"
    )]
    Cleartext { url: String, host: String },
}

/// Whether `host` (a URL's host, IPv6 with or without brackets) is this machine's loopback.
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.eq_ignore_ascii_case("localhost") {
        return true;
    }
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Accepts `https://` URLs, and `http://` ones to a loopback host or with
/// `insecure_control`; refuses anything else.
pub fn check(url: &str, insecure_control: bool) -> Result<(), ControlUrlError> {
    let invalid = |reason: String| ControlUrlError::Invalid { url: url.to_owned(), reason };
    let uri: hyper::Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| invalid(e.to_string()))?;
    let host = uri.host().ok_or_else(|| invalid("no host".into()))?;
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if insecure_control || is_loopback_host(host) => Ok(()),
        Some("http") => Err(ControlUrlError::Cleartext { url: url.to_owned(), host: host.to_owned() }),
        other => Err(invalid(format!("the scheme {other:?} is neither http nor https"))),
    }
}

/// Logs, at every start of a process allowed to, that it may speak cleartext.
pub fn warn_if_insecure(insecure_control: bool) {
    if insecure_control {
        tracing::warn!(
            "insecure_control is on: http:// control URLs to other machines are accepted, and tokens, route \
             tables and private keys may cross the network in cleartext"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleartext_only_to_loopback_unless_allowed() {
        for ok in
            ["http://127.0.0.1:8080", "http://127.3.2.1", "http://[::1]:80", "http://LocalHost:1", "https://10.0.0.1"]
        {
            check(ok, false).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for refused in
            ["http://10.0.0.1:8080", "http://[2001:db8::1]:80", "http://control.example", "http://0.0.0.0:80"]
        {
            let e = check(refused, false).expect_err(refused);
            assert!(e.to_string().contains("--insecure-control"), "{e}");
            check(refused, true).unwrap_or_else(|e| panic!("{refused} with insecure_control: {e}"));
        }
        assert!(matches!(check("ftp://127.0.0.1", true), Err(ControlUrlError::Invalid { .. })));
        assert!(matches!(check("not a url", true), Err(ControlUrlError::Invalid { .. })));
        assert!(is_loopback_host("::ffff:127.0.0.1"), "an IPv4-mapped loopback address");
    }
}
