//! `/api/v1/sites`: the edge's customer hosts, kept centrally. Edge nodes
//! read them with the agent token, or with their own (`?node=NAME` and the
//! node's token in `x-lagran-agent-token`), and pick up changes without a
//! restart; writes need the admin token.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;

use super::AppState;
use super::access::KeyQuery;
use super::error::{ApiError, parse_json};
use lagran_site::Site;

use crate::store::StoredSite;

/// `cdn.Example.com.` → `cdn.example.com`.
fn normalise(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

pub async fn list(State(state): State<AppState>, Query(_): Query<KeyQuery>) -> Result<Json<Vec<StoredSite>>, ApiError> {
    Ok(Json(state.store.list_sites().await?))
}

pub async fn get_one(
    State(state): State<AppState>,
    Path(host): Path<String>,
    Query(_): Query<KeyQuery>,
) -> Result<Json<StoredSite>, ApiError> {
    match state.store.get_site(&normalise(&host)).await? {
        Some(s) => Ok(Json(s)),
        None => Err(ApiError::not_found(format!("no site {host}"))),
    }
}

/// `PUT /api/v1/sites/{host}`: creates or replaces the site; the body's
/// `host`, when given, must be the path's.
pub async fn put(
    State(state): State<AppState>,
    Path(host): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<StoredSite>), ApiError> {
    let host = normalise(&host);
    let mut value: serde_json::Value = parse_json(&body)?;
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "the body must be a JSON object"));
    };
    // The store's timestamps (as `GET` shows them) are ignored on input.
    obj.remove("created_at_ms");
    obj.remove("updated_at_ms");
    match obj.get("host").and_then(|h| h.as_str()).map(normalise) {
        Some(h) if h != host => {
            return Err(ApiError::bad_field("host", format!("the body names {h:?} but the path {host:?}")));
        }
        _ => {
            obj.insert("host".into(), serde_json::Value::String(host.clone()));
        }
    }
    let site: Site = parse_json(&serde_json::to_vec(&value).expect("a JSON value serializes"))?;
    let existed = state.store.get_site(&host).await?.is_some();
    let stored = state.store.upsert_site(&site).await?;
    tracing::info!(site = %stored.site.host, origin = %stored.site.origin, "site written");
    Ok((if existed { StatusCode::OK } else { StatusCode::CREATED }, Json(stored)))
}

pub async fn delete(State(state): State<AppState>, Path(host): Path<String>) -> Result<StatusCode, ApiError> {
    if !state.store.delete_site(&normalise(&host)).await? {
        return Err(ApiError::not_found(format!("no site {host}")));
    }
    tracing::info!(site = %host, "site deleted");
    Ok(StatusCode::NO_CONTENT)
}
