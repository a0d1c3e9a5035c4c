//! `/api/v1/certificates`: the TLS certificates the edge serves, one per SNI
//! name. Anyone who may read the API sees the certificates; the private keys
//! only the admin token or a node's own agent token reveals — an edge asks
//! with `?node=NAME` and that node's token in `x-lagran-agent-token`, so a
//! leaked global agent token does not leak every site's key. Without them,
//! `key_pem` is absent from the answer.
//!
//! A key also never crosses the network in cleartext: it is in the answer only
//! when the request came over TLS (`[api.tls]`) or from a loopback address.
//!
//! An answer for a node (`?node=`) lists only the certificates of the sites
//! that node serves ([`super::sites::sites_for`]: the sites of its pool): the
//! certificates whose domain is such a site's host, or a name such a wildcard
//! site covers. A certificate kept for anything else is not sent to any node,
//! and one node's token does not reveal the keys of another pool's sites.

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::access::{KeyAccess, KeyQuery};
use super::error::{ApiError, parse_json};
use crate::store::Certificate;

/// A certificate as answered: `key_pem` only for those allowed to see it.
#[derive(Serialize)]
pub struct CertificateView {
    pub domain: String,
    pub cert_pem: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_pem: Option<String>,
    pub updated_at_ms: i64,
}

impl CertificateView {
    fn new(c: Certificate, with_key: bool) -> Self {
        CertificateView {
            domain: c.domain,
            cert_pem: c.cert_pem,
            key_pem: with_key.then_some(c.key_pem),
            updated_at_ms: c.updated_at_ms,
        }
    }
}

/// `PUT /api/v1/certificates/{domain}` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateBody {
    /// Optional; must be the path's when given.
    pub domain: Option<String>,
    pub cert_pem: String,
    pub key_pem: String,
}

fn normalise(domain: &str) -> String {
    domain.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// How a request reached the API: whether a private key may travel on it.
pub struct Channel {
    /// The connection is TLS ([`crate::listener::http::OverTls`]).
    pub tls: bool,
    /// The client's address, when the listener recorded it.
    pub peer: Option<SocketAddr>,
}

impl Channel {
    /// Over TLS, or from this machine: the key does not cross a network in cleartext.
    pub fn private(&self) -> bool {
        self.tls || self.peer.is_some_and(|p| p.ip().to_canonical().is_loopback())
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Channel {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Channel {
            tls: parts.extensions.get::<crate::listener::http::OverTls>().is_some(),
            peer: parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0),
        })
    }
}

/// Whether `domain` (normalised) is served by one of `site_hosts`: the same
/// name, or one label under a `*.` site.
pub fn served_by_a_site(domain: &str, site_hosts: &[String]) -> bool {
    site_hosts.iter().any(|h| {
        let h = normalise(h);
        h == domain
            || h.strip_prefix("*.").is_some_and(|suffix| {
                domain
                    .strip_suffix(suffix)
                    .and_then(|l| l.strip_suffix('.'))
                    .is_some_and(|l| !l.is_empty() && !l.contains('.'))
            })
    })
}

/// The hosts of the sites `node` serves.
async fn site_hosts(state: &AppState, node: &str) -> Result<Vec<String>, ApiError> {
    Ok(super::sites::sites_for(state, Some(node)).await?.into_iter().map(|s| s.site.host).collect())
}

/// `GET /api/v1/certificates`; `?node=` is read by [`Requirement::ReadOrQueriedNode`].
///
/// [`Requirement::ReadOrQueriedNode`]: super::access::Requirement::ReadOrQueriedNode
pub async fn list(
    State(state): State<AppState>,
    Extension(KeyAccess(keys)): Extension<KeyAccess>,
    channel: Channel,
    Query(query): Query<KeyQuery>,
) -> Result<Json<Vec<CertificateView>>, ApiError> {
    let mut certs = state.store.list_certificates().await?;
    if let Some(node) = query.node.as_deref() {
        let hosts = site_hosts(&state, node).await?;
        certs.retain(|c| served_by_a_site(&c.domain, &hosts));
    }
    let keys = keys && channel.private();
    Ok(Json(certs.into_iter().map(|c| CertificateView::new(c, keys)).collect()))
}

pub async fn get_one(
    State(state): State<AppState>,
    Extension(KeyAccess(keys)): Extension<KeyAccess>,
    channel: Channel,
    Path(domain): Path<String>,
    Query(query): Query<KeyQuery>,
) -> Result<Json<CertificateView>, ApiError> {
    let domain = normalise(&domain);
    let for_node_without_site = match query.node.as_deref() {
        Some(node) => !served_by_a_site(&domain, &site_hosts(&state, node).await?),
        None => false,
    };
    match state.store.get_certificate(&domain).await? {
        Some(c) if !for_node_without_site => Ok(Json(CertificateView::new(c, keys && channel.private()))),
        _ => Err(ApiError::not_found(format!("no certificate for {domain}"))),
    }
}

pub async fn put(
    State(state): State<AppState>,
    Path(domain): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<CertificateView>), ApiError> {
    let domain = normalise(&domain);
    let b: CertificateBody = parse_json(&body)?;
    if let Some(d) = b.domain.as_deref().map(normalise)
        && d != domain
    {
        return Err(ApiError::bad_field("domain", format!("the body names {d:?} but the path {domain:?}")));
    }
    let cert = Certificate { domain: domain.clone(), cert_pem: b.cert_pem, key_pem: b.key_pem, updated_at_ms: 0 };
    let existed = state.store.get_certificate(&domain).await?.is_some();
    let stored = state.store.upsert_certificate(&cert).await?;
    tracing::info!(domain = %stored.domain, "certificate written");
    // The key was just sent by the caller; it is not echoed back.
    Ok((if existed { StatusCode::OK } else { StatusCode::CREATED }, Json(CertificateView::new(stored, false))))
}

pub async fn delete(State(state): State<AppState>, Path(domain): Path<String>) -> Result<StatusCode, ApiError> {
    if !state.store.delete_certificate(&normalise(&domain)).await? {
        return Err(ApiError::not_found(format!("no certificate for {domain}")));
    }
    tracing::info!(domain = %domain, "certificate deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_travel_over_tls_or_loopback_only() {
        let at = |ip: &str| Some(SocketAddr::new(ip.parse().unwrap(), 40000));
        assert!(Channel { tls: false, peer: at("127.0.0.1") }.private());
        assert!(Channel { tls: false, peer: at("::1") }.private());
        assert!(Channel { tls: false, peer: at("::ffff:127.0.0.1") }.private());
        assert!(Channel { tls: true, peer: at("10.0.0.2") }.private());
        assert!(!Channel { tls: false, peer: at("10.0.0.2") }.private());
        assert!(!Channel { tls: false, peer: None }.private(), "unknown: not private");
    }

    #[test]
    fn a_node_gets_the_certificates_of_sites_only() {
        let hosts = vec!["shop.test".to_string(), "*.img.test".to_string()];
        assert!(served_by_a_site("shop.test", &hosts));
        assert!(served_by_a_site("a.img.test", &hosts));
        assert!(served_by_a_site("*.img.test", &hosts), "the wildcard certificate itself");
        assert!(!served_by_a_site("a.b.img.test", &hosts), "a wildcard covers one label");
        assert!(!served_by_a_site("img.test", &hosts));
        assert!(!served_by_a_site("bank.test", &hosts), "a certificate no site uses");
    }
}
