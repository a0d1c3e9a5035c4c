//! Origin fetch: forwards a request to the site's origin over plain HTTP/1.1.
//!
//! The request keeps its method, path, query and body; `Host` becomes the origin's
//! authority, the client address is appended to `x-forwarded-for`, and hop-by-hop
//! headers are dropped in both directions (RFC 9110 §7.6.1: "a proxy or gateway MUST
//! parse a received Connection header field before a message is forwarded and, for
//! each connection-option in this field, remove any header or trailer field(s) from the
//! message with the same name", plus the fixed list below).

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::{Authority, PathAndQuery, Scheme};
use hyper::{Request, Response, Uri, Version};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lagran_site::OriginUrl;

use crate::body::EdgeBody;

#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("invalid origin {url:?}: {reason}")]
    InvalidUrl { url: String, reason: lagran_site::OriginError },
    #[error("origin {origin} did not answer within {after:?}")]
    Timeout { origin: Authority, after: Duration },
    #[error("origin {origin} failed")]
    Request { origin: Authority, source: hyper_util::client::legacy::Error },
}

/// A parsed `http://host[:port][/base]` origin.
#[derive(Clone, PartialEq, Eq)]
pub struct Origin {
    authority: Authority,
    base_path: String,
}

impl Origin {
    /// Parses with the site schema's rules ([`OriginUrl`]).
    pub fn parse(url: &str) -> Result<Origin, OriginError> {
        let OriginUrl { authority, base_path } =
            OriginUrl::parse(url).map_err(|reason| OriginError::InvalidUrl { url: url.to_owned(), reason })?;
        Ok(Origin { authority, base_path })
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The absolute URI for a request path (and query) on this origin.
    fn uri_for(&self, path_and_query: Option<&PathAndQuery>) -> Uri {
        let pq = path_and_query.map_or("/", PathAndQuery::as_str);
        Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(format!("{}{pq}", self.base_path))
            .build()
            .expect("scheme, authority and an origin-form path make a valid URI")
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.base_path)
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

/// A pooled HTTP/1.1 client with a deadline on the origin's response head.
#[derive(Clone)]
pub struct OriginClient {
    client: Client<HttpConnector, EdgeBody>,
    timeout: Duration,
}

impl OriginClient {
    pub fn new(timeout: Duration) -> OriginClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(90)).build(connector);
        OriginClient { client, timeout }
    }

    /// Sends `req` (as received from the client at `client_ip` for `host`) to `origin`.
    pub async fn fetch(
        &self,
        origin: &Origin,
        mut req: Request<EdgeBody>,
        host: &str,
        client_ip: IpAddr,
        scheme: &Scheme,
    ) -> Result<Response<Incoming>, OriginError> {
        *req.uri_mut() = origin.uri_for(req.uri().path_and_query());
        *req.version_mut() = Version::HTTP_11;
        let headers = req.headers_mut();
        strip_hop_by_hop(headers);
        let forwarded_for = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(prior) => format!("{prior}, {client_ip}"),
            None => client_ip.to_string(),
        };
        let set = |headers: &mut HeaderMap, name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(name, v);
            }
        };
        set(headers, "x-forwarded-for", &forwarded_for);
        set(headers, "x-forwarded-host", host);
        set(headers, "x-forwarded-proto", scheme.as_str());
        set(headers, "host", origin.authority.as_str());

        match tokio::time::timeout(self.timeout, self.client.request(req)).await {
            Err(_) => Err(OriginError::Timeout { origin: origin.authority.clone(), after: self.timeout }),
            Ok(Err(source)) => Err(OriginError::Request { origin: origin.authority.clone(), source }),
            Ok(Ok(mut resp)) => {
                strip_hop_by_hop(resp.headers_mut());
                Ok(resp)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_origins() {
        let o = Origin::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(o.uri_for(Some(&"/a?b=1".parse().unwrap())).to_string(), "http://127.0.0.1:9000/a?b=1");
        let o = Origin::parse("http://origin.internal/static/").unwrap();
        assert_eq!(o.uri_for(Some(&"/x.js".parse().unwrap())).to_string(), "http://origin.internal/static/x.js");
        for bad in ["https://o", "o:80", "http://u@o", "http://o/?q", "nonsense url"] {
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
}
