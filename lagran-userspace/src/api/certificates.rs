//! `/api/v1/certificates`: the TLS certificates the edge serves, one per SNI
//! name. Anyone who may read the API sees the certificates; the private keys
//! only the admin token or a node's own agent token reveals — an edge asks
//! with `?node=NAME` and that node's token in `x-lagran-agent-token`, so a
//! leaked global agent token does not leak every site's key. Without them,
//! `key_pem` is absent from the answer.

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
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

/// `GET /api/v1/certificates`; `?node=` is read by [`Requirement::ReadOrQueriedNode`].
///
/// [`Requirement::ReadOrQueriedNode`]: super::access::Requirement::ReadOrQueriedNode
pub async fn list(
    State(state): State<AppState>,
    Extension(KeyAccess(keys)): Extension<KeyAccess>,
    Query(_): Query<KeyQuery>,
) -> Result<Json<Vec<CertificateView>>, ApiError> {
    let certs = state.store.list_certificates().await?;
    Ok(Json(certs.into_iter().map(|c| CertificateView::new(c, keys)).collect()))
}

pub async fn get_one(
    State(state): State<AppState>,
    Extension(KeyAccess(keys)): Extension<KeyAccess>,
    Path(domain): Path<String>,
    Query(_): Query<KeyQuery>,
) -> Result<Json<CertificateView>, ApiError> {
    match state.store.get_certificate(&normalise(&domain)).await? {
        Some(c) => Ok(Json(CertificateView::new(c, keys))),
        None => Err(ApiError::not_found(format!("no certificate for {domain}"))),
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
