//! Origin fetch: forwards a request to an origin over HTTP/1.1, or HTTP/2 when a TLS
//! origin offers it by ALPN, through a pooled client.
//!
//! `https://` origins are verified against the system's roots, or against the
//! site's own CA when it names one, under the origin's host name as SNI. Each
//! phase has its deadline: connecting (TCP and TLS), the response head, and the
//! whole exchange including the body.
//!
//! The request keeps its method, path, query and body; `Host` becomes the origin's
//! authority (or the site's `origin_host`), the client address is appended to
//! `x-forwarded-for`, and hop-by-hop headers are dropped in both directions (RFC 9110
//! §7.6.1: "a proxy or gateway MUST parse a received Connection header field before a
//! message is forwarded and, for each connection-option in this field, remove any
//! header or trailer field(s) from the message with the same name", plus the fixed
//! list below).

mod health;
mod set;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::{Authority, PathAndQuery, Scheme};
use hyper::{Request, Response, Uri, Version};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lagran_site::OriginUrl;

use crate::body::{self, EdgeBody};

pub use health::run as run_health_checks;
pub use set::{OriginSet, OriginSetConfig, RequestHead};

#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("no origin: give `origin` or `origins`")]
    Missing,
    #[error("invalid origin {url:?}: {reason}")]
    InvalidUrl { url: String, reason: lagran_site::OriginError },
    #[error("origin CA: {0}")]
    Ca(String),
    #[error("origin {origin} did not answer within {after:?}")]
    Timeout { origin: Authority, after: Duration },
    #[error("origin {origin} failed")]
    Request { origin: Authority, source: hyper_util::client::legacy::Error },
}

impl OriginError {
    /// Whether the request cannot have reached the origin's application (no
    /// connection, or no answer at all), so another origin may be asked.
    pub fn origin_unreachable(&self) -> bool {
        match self {
            OriginError::Timeout { .. } => true,
            OriginError::Request { source, .. } => source.is_connect(),
            OriginError::Missing | OriginError::InvalidUrl { .. } | OriginError::Ca(_) => false,
        }
    }
}

/// A parsed `http(s)://host[:port][/base]` origin.
#[derive(Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: Scheme,
    authority: Authority,
    base_path: String,
}

impl Origin {
    /// Parses with the site schema's rules ([`OriginUrl`]).
    pub fn parse(url: &str) -> Result<Origin, OriginError> {
        let OriginUrl { scheme, authority, base_path } =
            OriginUrl::parse(url).map_err(|reason| OriginError::InvalidUrl { url: url.to_owned(), reason })?;
        Ok(Origin { scheme, authority, base_path })
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The absolute URI for a request path (and query) on this origin.
    fn uri_for(&self, path_and_query: Option<&PathAndQuery>) -> Uri {
        let pq = path_and_query.map_or("/", PathAndQuery::as_str);
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{pq}", self.base_path))
            .build()
            .expect("scheme, authority and an origin-form path make a valid URI")
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1, RFC 9112).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers, including those named in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(&HOP_BY_HOP) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// The deadline of each phase of an origin exchange.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// TCP connect (the TLS handshake counts against `first_byte`).
    pub connect: Duration,
    /// From sending the request to the response head.
    pub first_byte: Duration,
    /// From sending the request to the end of the response body.
    pub total: Duration,
}

/// Who the request is forwarded for.
#[derive(Debug, Clone, Copy)]
pub struct Forward<'a> {
    /// The site's host as the client named it.
    pub host: &'a str,
    pub client_ip: IpAddr,
    /// The scheme the client used.
    pub scheme: &'a Scheme,
}

/// A pooled HTTP/1.1 and HTTP/2 client for plain and TLS origins.
#[derive(Clone)]
pub struct OriginClient {
    client: Client<HttpsConnector<HttpConnector>, EdgeBody>,
    timeouts: Timeouts,
}

impl fmt::Debug for OriginClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OriginClient").field("timeouts", &self.timeouts).finish_non_exhaustive()
    }
}

impl OriginClient {
    /// A client trusting the system's roots, or only the certificates of `ca_pem`.
    pub fn new(timeouts: Timeouts, ca_pem: Option<&[u8]>) -> Result<OriginClient, OriginError> {
        let mut roots = rustls::RootCertStore::empty();
        match ca_pem {
            Some(mut pem) => {
                let certs = rustls_pemfile_certs(&mut pem)?;
                if certs.is_empty() {
                    return Err(OriginError::Ca("no certificate in the PEM".into()));
                }
                for c in certs {
                    roots.add(c).map_err(|e| OriginError::Ca(e.to_string()))?;
                }
            }
            None => {
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| OriginError::Ca(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeouts.connect));
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(90)).build(connector);
        Ok(OriginClient { client, timeouts })
    }

    /// Sends `req` to `origin`; `host_header` replaces the origin's authority as `Host`.
    pub async fn send(
        &self,
        origin: &Origin,
        mut req: Request<EdgeBody>,
        forward: Forward<'_>,
        host_header: Option<&HeaderValue>,
    ) -> Result<Response<EdgeBody>, OriginError> {
        let start = Instant::now();
        *req.uri_mut() = origin.uri_for(req.uri().path_and_query());
        *req.version_mut() = Version::HTTP_11;
        let headers = req.headers_mut();
        strip_hop_by_hop(headers);
        let forwarded_for = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(prior) => format!("{prior}, {}", forward.client_ip),
            None => forward.client_ip.to_string(),
        };
        let set = |headers: &mut HeaderMap, name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(name, v);
            }
        };
        set(headers, "x-forwarded-for", &forwarded_for);
        set(headers, "x-forwarded-host", forward.host);
        set(headers, "x-forwarded-proto", forward.scheme.as_str());
        match host_header {
            Some(h) => {
                headers.insert(header::HOST, h.clone());
            }
            None => set(headers, "host", origin.authority.as_str()),
        }

        let origin_name = || origin.authority.clone();
        let after = self.timeouts.first_byte;
        match tokio::time::timeout(after, self.client.request(req)).await {
            Err(_) => Err(OriginError::Timeout { origin: origin_name(), after }),
            Ok(Err(source)) => Err(OriginError::Request { origin: origin_name(), source }),
            Ok(Ok(mut resp)) => {
                strip_hop_by_hop(resp.headers_mut());
                let deadline = start + self.timeouts.total;
                Ok(resp.map(|b| body::until(body::incoming(b), deadline.into())))
            }
        }
    }
}

/// The certificates of a PEM bundle.
fn rustls_pemfile_certs(pem: &mut &[u8]) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, OriginError> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| OriginError::Ca(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_origins() {
        let o = Origin::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(o.uri_for(Some(&"/a?b=1".parse().unwrap())).to_string(), "http://127.0.0.1:9000/a?b=1");
        let o = Origin::parse("https://origin.internal/static/").unwrap();
        assert_eq!(o.uri_for(Some(&"/x.js".parse().unwrap())).to_string(), "https://origin.internal/static/x.js");
        for bad in ["ftp://o", "o:80", "http://u@o", "http://o/?q", "nonsense url"] {
            assert!(Origin::parse(bad).is_err(), "{bad} must be rejected");
        }
    }

    #[test]
    fn strips_connection_named_and_fixed_hop_by_hop_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("close, x-secret"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "only content-type survives: {h:?}");
    }

    #[test]
    fn a_ca_without_certificates_is_refused() {
        let t = Duration::from_secs(1);
        let timeouts = Timeouts { connect: t, first_byte: t, total: t };
        assert!(matches!(OriginClient::new(timeouts, Some(b"nothing")), Err(OriginError::Ca(_))));
    }
}
