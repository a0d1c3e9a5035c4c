//! `/api/v1/certificates`: the TLS certificates the edge serves, one per SNI
//! name. Anyone who may read the API sees the certificates; the private keys
//! only the admin token or a node's own agent token reveals — an edge asks
//! with `?node=NAME` and that node's token in `x-lagran-agent-token`, so a
//! leaked global agent token does not leak every site's key. Without them,
//! `key_pem` is absent from the answer.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::AGENT_TOKEN_HEADER;
use super::error::{ApiError, parse_json};
use crate::store::{Certificate, verify_token};

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

/// `?node=NAME`: whose agent token is presented.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyQuery {
    pub node: Option<String>,
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

/// Whether this request may read private keys: the admin token (or writes
/// open: no admin token configured), or `node`'s own agent token.
async fn may_read_keys(state: &AppState, headers: &HeaderMap, node: Option<&str>) -> Result<bool, ApiError> {
    let admin = state.auth.check_admin(headers).is_ok();
    if admin {
        return Ok(true);
    }
    let (Some(node), Some(presented)) = (node, headers.get(AGENT_TOKEN_HEADER).and_then(|v| v.to_str().ok())) else {
        return Ok(false);
    };
    let own = state.store.node_token_hash(node).await?;
    Ok(own.as_deref().is_some_and(|h| verify_token(h, presented)))
}

/// Reads need the agent token, a node's own token (with `?node=`) or the admin
/// token; returns whether the reader may see private keys.
pub(super) async fn check_read(state: &AppState, headers: &HeaderMap, node: Option<&str>) -> Result<bool, ApiError> {
    let keys = may_read_keys(state, headers, node).await?;
    if !keys {
        state.auth.check_agent(headers)?;
    }
    Ok(keys)
}

pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Result<Json<Vec<CertificateView>>, ApiError> {
    let keys = check_read(&state, &headers, q.node.as_deref()).await?;
    let certs = state.store.list_certificates().await?;
    Ok(Json(certs.into_iter().map(|c| CertificateView::new(c, keys)).collect()))
}

pub async fn get_one(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(domain): Path<String>,
    Query(q): Query<KeyQuery>,
) -> Result<Json<CertificateView>, ApiError> {
    let keys = check_read(&state, &headers, q.node.as_deref()).await?;
    match state.store.get_certificate(&normalise(&domain)).await? {
        Some(c) => Ok(Json(CertificateView::new(c, keys))),
        None => Err(ApiError::not_found(format!("no certificate for {domain}"))),
    }
}

pub async fn put(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(domain): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<CertificateView>), ApiError> {
    state.auth.check_admin(&headers)?;
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

pub async fn delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(domain): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.auth.check_admin(&headers)?;
    if !state.store.delete_certificate(&normalise(&domain)).await? {
        return Err(ApiError::not_found(format!("no certificate for {domain}")));
    }
    tracing::info!(domain = %domain, "certificate deleted");
    Ok(StatusCode::NO_CONTENT)
}
