//! `/api/v1/geo/asn-carriers`: the operator's ASN → carrier entries beside
//! `[geo.asn_carriers]`.
//!
//! - `GET /api/v1/geo/asn-carriers` — every stored entry, by ASN (agent or admin token).
//! - `GET /api/v1/geo/asn-carriers/{asn}` — one entry; `{asn}` is `3320` or `AS3320`.
//! - `PUT /api/v1/geo/asn-carriers/{asn}` — create or replace (admin):
//!   `{"carrier": "Deutsche Telekom", "note": "ticket 7", "updated_by": "alice"}`;
//!   201 when new, 200 when replaced. An empty carrier removes the entry of
//!   `[geo.asn_carriers]` or the built-in table (the ASN's organisation name is then
//!   the carrier).
//! - `DELETE /api/v1/geo/asn-carriers/{asn}` — 204, or 404 when there is none (admin).
//!
//! Precedence: these entries win over `[geo.asn_carriers]`, which wins over the
//! built-in table of the Chinese carriers' ASNs. They apply when the geo data is
//! next loaded — `POST /api/v1/geo/reload`, `lagran geo reload`, SIGHUP or a
//! restart — since the carrier is merged into the range list then.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::AppState;
use super::error::{ApiError, parse_json};
use crate::geo::world::parse_asn;
use crate::store::asn_carriers::AsnCarrier;

/// The body of a `PUT`: the ASN comes from the path.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CarrierBody {
    pub carrier: String,
    #[serde(default)]
    pub note: String,
    #[serde(default)]
    pub updated_by: String,
}

fn asn_of(path: &str) -> Result<u32, ApiError> {
    parse_asn(path).ok_or_else(|| ApiError::bad_field("asn", format!("{path:?} is not an ASN like 3320 or AS3320")))
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<AsnCarrier>>, ApiError> {
    Ok(Json(state.store.list_asn_carriers().await?))
}

pub async fn get_one(State(state): State<AppState>, Path(asn): Path<String>) -> Result<Json<AsnCarrier>, ApiError> {
    let asn = asn_of(&asn)?;
    match state.store.get_asn_carrier(asn).await? {
        Some(e) => Ok(Json(e)),
        None => Err(ApiError::not_found(format!("no carrier entry for AS{asn}"))),
    }
}

pub async fn put(
    State(state): State<AppState>,
    Path(asn): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<AsnCarrier>), ApiError> {
    let asn = asn_of(&asn)?;
    let b: CarrierBody = parse_json(&body)?;
    let by = if b.updated_by.trim().is_empty() { "api".to_string() } else { b.updated_by };
    let entry =
        AsnCarrier { asn, carrier: b.carrier.trim().to_string(), note: b.note, updated_by: by, updated_at_ms: 0 };
    let existed = state.store.get_asn_carrier(asn).await?.is_some();
    let saved = state.store.upsert_asn_carrier(&entry).await?;
    tracing::info!(asn, carrier = %saved.carrier, by = %saved.updated_by, "ASN carrier entry written; applies at the next geo reload");
    Ok((if existed { StatusCode::OK } else { StatusCode::CREATED }, Json(saved)))
}

pub async fn delete(State(state): State<AppState>, Path(asn): Path<String>) -> Result<StatusCode, ApiError> {
    let asn = asn_of(&asn)?;
    if !state.store.delete_asn_carrier(asn).await? {
        return Err(ApiError::not_found(format!("no carrier entry for AS{asn}")));
    }
    tracing::info!(asn, "ASN carrier entry deleted; applies at the next geo reload");
    Ok(StatusCode::NO_CONTENT)
}
