//! `/api/v1/geo/…`: geo overrides (CIDR → tuple, a correction table
//! that wins over the files) and reloading the geo files without a restart.
//!
//! - `GET /api/v1/geo/overrides` — every override (agent or admin token).
//! - `POST /api/v1/geo/overrides` — create or replace the override of a prefix
//!   (admin): `{"prefix": "1.2.3.0/24", "country": "CN", "province": "广东",
//!   "city": "深圳", "isp": "电信", "note": "ticket 42", "created_by": "alice"}`.
//! - `DELETE /api/v1/geo/overrides/{prefix}` — the prefix URL-encoded
//!   (`1.2.3.0%2F24`) (admin).
//! - `GET /api/v1/geo/partitions?offset=&limit=` — the serving partition table, the
//!   rows of `lagran geo partitions` (largest first), paged (agent or admin token):
//!   `{total, offset, limit, v4_ranges, v6_ranges, prefixes, rows: [{id, ranges,
//!   prefixes, v4_addresses, location: {country, province, city, isp}, unknown}]}`.
//!   `limit` defaults to 100 and is at most 10 000.
//! - `POST /api/v1/geo/reload` — re-read GEOIP_PATH / GEOIP_IPV6_PATH (admin); body
//!   optional, `{"force": true}` skips the change-ratio check. 200 with the report
//!   when the new data serves, 409 with the report when refused, 422 naming the file
//!   and position when a file cannot be used. The serving data stays unless 200.
//!
//! After an override write the overrides are re-read into the partitions and the
//! route table is recomputed before answering, so the next DNS answer (and the XDP
//! maps) already use it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::{ApiError, parse_json};
use crate::geo::GeoError;
use crate::model::GeoOverride;
use crate::scheduler::geo_reload::reload_configured;

/// Re-reads the overrides into the partitions and publishes a new route table.
pub(super) async fn apply_overrides(state: &AppState) -> Result<(), ApiError> {
    let n = state.scheduler.reload_overrides().await?;
    // A standby tells the leader to read the overrides again (crate::cluster).
    if !state.scheduler.leading() {
        state.store.notify_change("overrides").await?;
    }
    tracing::debug!(overrides = n, "geo overrides applied");
    state.after_write().await;
    Ok(())
}

pub async fn list_overrides(State(state): State<AppState>) -> Result<Json<Vec<GeoOverride>>, ApiError> {
    Ok(Json(state.store.list_geo_overrides().await?))
}

pub async fn upsert_override(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<(StatusCode, Json<GeoOverride>), ApiError> {
    let mut o: GeoOverride = parse_json(&body)?;
    o.validate()?;
    if o.created_by.trim().is_empty() {
        o.created_by = "api".into();
    }
    let store = &state.store;
    let existed = store.get_geo_override(&o.prefix).await?.is_some();
    let saved = store.upsert_geo_override(&o).await?;
    tracing::info!(
        prefix = %saved.prefix,
        country = %saved.country,
        province = %saved.province,
        city = %saved.city,
        isp = %saved.isp,
        by = %saved.created_by,
        "geo override written"
    );
    apply_overrides(&state).await?;
    Ok((if existed { StatusCode::OK } else { StatusCode::CREATED }, Json(saved)))
}

pub async fn delete_override(
    State(state): State<AppState>,
    Path(prefix): Path<String>,
) -> Result<StatusCode, ApiError> {
    let net: IpNet = prefix.parse().map_err(|_| {
        ApiError::bad_field("prefix", format!("{prefix:?} is not a CIDR prefix (URL-encode the '/': 1.2.3.0%2F24)"))
    })?;
    if !state.store.delete_geo_override(&net).await? {
        return Err(ApiError::not_found(format!("no geo override for {net}")));
    }
    tracing::info!(prefix = %net, "geo override deleted");
    apply_overrides(&state).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReloadBody {
    #[serde(default)]
    force: bool,
}

pub async fn reload(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let req: ReloadBody =
        if body.iter().all(u8::is_ascii_whitespace) { ReloadBody::default() } else { parse_json(&body)? };
    match reload_configured(&state.scheduler, req.force, state.geo_max_change_ratio).await {
        Ok(report) => {
            let status = if report.accepted { StatusCode::OK } else { StatusCode::CONFLICT };
            Ok((status, Json(report)).into_response())
        }
        Err(e @ GeoError::Usage(_)) | Err(e @ GeoError::Reload(_)) => {
            Err(ApiError::new(StatusCode::CONFLICT, e.to_string()))
        }
        Err(e) => {
            tracing::warn!(error = %e, "geo reload failed; the serving data stays");
            Err(ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "file", e.to_string()))
        }
    }
}

/// `GET /api/v1/geo/partitions` paging.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionPage {
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

/// Rows per page when `limit` is not given, and the largest `limit`.
const DEFAULT_PARTITION_LIMIT: usize = 100;
const MAX_PARTITION_LIMIT: usize = 10_000;

#[derive(Debug, Serialize)]
pub struct PartitionRowJson {
    id: u32,
    ranges: usize,
    prefixes: usize,
    v4_addresses: u64,
    location: crate::location::Location,
    /// The unknown partition (no data, special-purpose ranges).
    unknown: bool,
}

#[derive(Debug, Serialize)]
pub struct PartitionsJson {
    /// Partitions in all.
    total: usize,
    offset: usize,
    limit: usize,
    v4_ranges: usize,
    v6_ranges: usize,
    /// CIDR prefixes over all partitions.
    prefixes: usize,
    rows: Vec<PartitionRowJson>,
}

pub async fn partitions(
    State(state): State<AppState>,
    page: Result<Query<PartitionPage>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PartitionsJson>, ApiError> {
    let Query(page) = page.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let limit = page.limit.unwrap_or(DEFAULT_PARTITION_LIMIT);
    if limit == 0 || limit > MAX_PARTITION_LIMIT {
        return Err(ApiError::bad_field("limit", format!("{limit} is outside 1..={MAX_PARTITION_LIMIT}")));
    }
    let t = state.scheduler.partitions();
    let json = tokio::task::spawn_blocking(move || {
        let rows = crate::partition::partition_rows(&t);
        let prefixes = rows.iter().map(|r| r.prefixes).sum();
        PartitionsJson {
            total: rows.len(),
            offset: page.offset,
            limit,
            v4_ranges: t.v4_ranges().len(),
            v6_ranges: t.v6_ranges().len(),
            prefixes,
            rows: rows
                .iter()
                .skip(page.offset)
                .take(limit)
                .map(|r| PartitionRowJson {
                    id: r.id,
                    ranges: r.ranges,
                    prefixes: r.prefixes,
                    v4_addresses: r.v4_addresses,
                    location: t.locations()[r.id as usize].clone(),
                    unknown: r.id == crate::partition::UNKNOWN,
                })
                .collect(),
        }
    })
    .await
    .map_err(|e| ApiError::internal(&e))?;
    Ok(Json(json))
}
