//! Zones (SOA + NS set + glue) and scheduled domains (name -> pool).

use std::net::Ipv4Addr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::AppState;
use super::error::{ApiError, parse_json};
use crate::model::{AnswerMode, DEFAULT_POOL, Domain, Steering, Strategy, Zone, ZoneSpec, normalise_name};

/// `PUT /api/v1/domains/{name}` body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainBody {
    pub zone: String,
    pub pool: Option<String>,
    pub ttl: Option<u32>,
    pub origin_ip: Option<Ipv4Addr>,
    /// `"a"` (default) or `"cname"`; a zone apex cannot be `"cname"` (422).
    #[serde(default)]
    pub answer_mode: AnswerMode,
    /// ECS decides (default `true`); `false`: the resolver's address decides.
    pub ecs: Option<bool>,
    /// `"geo"` (default) or `"latency"`.
    #[serde(default)]
    pub steering: Steering,
    /// `"best"` (default), `"weighted"` or `"hash"`.
    #[serde(default)]
    pub strategy: Strategy,
}

pub async fn list_zones(State(state): State<AppState>) -> Result<Json<Vec<Zone>>, ApiError> {
    Ok(Json(state.store.list_zones().await?))
}

pub async fn get_zone(State(state): State<AppState>, Path(name): Path<String>) -> Result<Json<Zone>, ApiError> {
    let name = normalise_name(&name);
    let zones = state.store.list_zones().await?;
    zones.into_iter().find(|z| z.name == name).map(Json).ok_or_else(|| ApiError::not_found(format!("no zone {name}")))
}

pub async fn put_zone(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Zone>, ApiError> {
    let zone = parse_json::<ZoneSpec>(&body)?.into_zone(&name)?;
    state.store.upsert_zone(&zone).await?;
    state.after_write().await;
    Ok(Json(zone))
}

pub async fn delete_zone(State(state): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let name = normalise_name(&name);
    if !state.store.delete_zone(&name).await? {
        return Err(ApiError::not_found(format!("no zone {name}")));
    }
    state.after_write().await;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_domains(State(state): State<AppState>) -> Result<Json<Vec<Domain>>, ApiError> {
    Ok(Json(state.store.list_domains().await?))
}

pub async fn put_domain(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Domain>, ApiError> {
    let body: DomainBody = parse_json(&body)?;
    let domain = Domain {
        name: normalise_name(&name),
        zone: normalise_name(&body.zone),
        pool: body.pool.unwrap_or_else(|| DEFAULT_POOL.to_string()),
        ttl: body.ttl,
        origin_ip: body.origin_ip,
        answer_mode: body.answer_mode,
        ecs: body.ecs.unwrap_or(true),
        steering: body.steering,
        strategy: body.strategy,
    };
    if domain.name != domain.zone && !domain.name.ends_with(&format!(".{}", domain.zone)) {
        return Err(ApiError::bad_field("zone", format!("{} is not inside zone {}", domain.name, domain.zone)));
    }
    if domain.ttl == Some(0) {
        return Err(ApiError::bad_field("ttl", "ttl must be at least 1 (answers never go below 5 s anyway)"));
    }
    state.store.upsert_domain(&domain).await?;
    state.after_write().await;
    Ok(Json(domain))
}

pub async fn delete_domain(State(state): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let name = normalise_name(&name);
    if !state.store.delete_domain(&name).await? {
        return Err(ApiError::not_found(format!("no domain {name}")));
    }
    state.after_write().await;
    Ok(StatusCode::NO_CONTENT)
}
