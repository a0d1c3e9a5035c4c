//! How the edge talks to the control plane: one verified rustls client for the
//! heartbeats ([`crate::agent`]) and the sites and certificates
//! ([`crate::remote`]), and the rule for `http://` control URLs.
//!
//! Every request carries the agent token, and the certificates' answer carries
//! private keys. An `https://` `control_url` is spoken over TLS only, trusting
//! `ca` (`--ca`, `LAGRAN_CA`) or the system's store: a failed handshake is an
//! error, never a cleartext retry. An `http://` one is accepted only to a
//! loopback address (`127.0.0.0/8`, `::1`, `localhost`), where the bytes never
//! leave the machine; any other needs `insecure_control = true`
//! (`--insecure-control`), and the edge then warns at every start.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The control plane's client: `https://` over verified TLS, `http://` as checked by [`check_url`].
pub type ControlClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("the TLS settings for the control plane: {0}")]
    Tls(String),
    #[error(
        "control_url {url}: http:// to {host}, which is not a loopback address, would send the agent token and \
         the sites' private keys in cleartext; use https:// (trusting `ca`/--ca) or set insecure_control = true \
         (--insecure-control)"
    )]
    Cleartext { url: String, host: String },
}

/// Whether `host` (a URL's host, IPv6 with or without brackets) is this machine's loopback.
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost") || bare.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Refuses an `http://` `url` to a non-loopback host unless `insecure_control`.
/// (The URL's form is checked with the rest of the configuration.)
pub fn check_url(url: &str, insecure_control: bool) -> Result<(), ControlError> {
    let Ok(uri) = url.parse::<hyper::Uri>() else { return Ok(()) };
    match (uri.scheme_str(), uri.host()) {
        (Some("http"), Some(host)) if !insecure_control && !is_loopback_host(host) => {
            Err(ControlError::Cleartext { url: url.to_owned(), host: host.to_owned() })
        }
        _ => Ok(()),
    }
}

/// The client, trusting the PEM bundle `ca` or, without it, the system's store.
pub fn client(ca: Option<&Path>) -> Result<ControlClient, ControlError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let tls = |e: &dyn std::fmt::Display| ControlError::Tls(e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| tls(&format!("{}: {e}", path.display())))?;
            for c in certs {
                roots.add(c).map_err(|e| tls(&e))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector =
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_or_http().enable_http1().build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleartext_only_to_loopback_unless_allowed() {
        for ok in ["http://127.0.0.1:8080", "http://[::1]:1", "http://localhost", "https://10.0.0.1:8443"] {
            check_url(ok, false).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for refused in ["http://10.0.0.1:8080", "http://[2001:db8::1]", "http://control.example"] {
            let e = check_url(refused, false).expect_err(refused).to_string();
            assert!(e.contains("insecure_control") && e.contains("cleartext"), "{e}");
            check_url(refused, true).unwrap();
        }
    }
}
