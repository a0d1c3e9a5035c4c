//! `/api/v1/geo/suspects`: partitions whose measurements contradict their
//! location (see [`crate::steering::suspects`]), as overrides to accept.
//!
//! - `GET /api/v1/geo/suspects` (agent or admin token): `{"suspects": [{id,
//!   partition, located: {country, province, city, isp}, distance_km,
//!   measured: [{node, place, rtt_ms, samples, distance_km}], suggested:
//!   {country, province, city, isp}, prefixes}]}`; `prefixes` is how many
//!   CIDR prefixes accepting it overrides.
//! - `POST /api/v1/geo/suspects/{id}/accept` (admin): writes the suggested
//!   override for each of the partition's prefixes (through the overrides'
//!   own path: stored, re-read into the partitions, the table recomputed)
//!   and answers 201 with them; 404 when `id` is not a suspect now; 409 when
//!   the partition spans more than [`MAX_ACCEPTED_PREFIXES`] prefixes.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use ipnet::{IpNet, Ipv4Subnets, Ipv6Subnets};
use serde::Serialize;

use super::AppState;
use super::error::ApiError;
use super::geo::apply_overrides;
use super::measurements::label;
use crate::clock::now_ms;
use crate::location::Location;
use crate::model::GeoOverride;
use crate::partition::PartitionTable;
use crate::steering::suspects::{self, Suspect};

/// The most prefixes one accept writes.
pub const MAX_ACCEPTED_PREFIXES: usize = 256;

#[derive(Debug, Serialize)]
pub struct SuspectJson {
    #[serde(flatten)]
    pub suspect: Suspect,
    /// The partition as `country/province/city/isp`.
    pub partition: String,
    pub prefixes: usize,
}

#[derive(Debug, Serialize)]
pub struct SuspectsJson {
    pub suspects: Vec<SuspectJson>,
}

/// The CIDR prefixes of the partition at `location` (`None`: no such
/// partition, or none of its addresses left).
fn prefixes_of(table: &PartitionTable, location: &Location) -> Option<(u32, Vec<IpNet>)> {
    let key = crate::steering::matrix::key(location);
    let id = table.locations().iter().position(|l| *crate::steering::matrix::key(l) == *key)? as u32;
    let mut out: Vec<IpNet> = Vec::new();
    for &(s, e, _) in table.v4_ranges().iter().filter(|r| r.2 == id) {
        out.extend(Ipv4Subnets::new(s.into(), e.into(), 0).map(IpNet::V4));
    }
    for &(s, e, _) in table.v6_ranges().iter().filter(|r| r.2 == id) {
        out.extend(Ipv6Subnets::new(s.into(), e.into(), 0).map(IpNet::V6));
    }
    // A partition the overrides emptied covers no address any more.
    (!out.is_empty()).then_some((id, out))
}

/// The suspects now, with the partition each is.
async fn current(state: &AppState) -> Result<Vec<(Suspect, Location)>, ApiError> {
    let nodes: Vec<(String, Location)> = state
        .store
        .list_nodes()
        .await?
        .into_iter()
        .map(|n| {
            let l = Location::new(&n.country, &n.province, &n.city, &n.isp);
            (n.name, l)
        })
        .collect();
    let measurements = state.scheduler.measurements();
    let view = measurements.view(now_ms());
    let found = suspects::find(&view, &nodes, &view.settings.band());
    let by_id: std::collections::HashMap<String, &Location> =
        view.rows.keys().map(|l| (suspects::id_of(l), &**l)).collect();
    Ok(found
        .into_iter()
        .filter_map(|s| Some((by_id.get(&s.id).map(|l| (*l).clone())?, s)))
        .map(|(l, s)| (s, l))
        .collect())
}

pub async fn list(State(state): State<AppState>) -> Result<Json<SuspectsJson>, ApiError> {
    let table = state.scheduler.partitions();
    let mut out = Vec::new();
    for (suspect, location) in current(&state).await? {
        let Some((id, prefixes)) = prefixes_of(&table, &location) else { continue };
        out.push(SuspectJson { partition: label(id, &location), prefixes: prefixes.len(), suspect });
    }
    Ok(Json(SuspectsJson { suspects: out }))
}

pub async fn accept(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Vec<GeoOverride>>), ApiError> {
    let Some((suspect, location)) = current(&state).await?.into_iter().find(|(s, _)| s.id == id) else {
        return Err(ApiError::not_found(format!("{id:?} is not a geo suspect now")));
    };
    let table = state.scheduler.partitions();
    let Some((_, prefixes)) = prefixes_of(&table, &location) else {
        return Err(ApiError::not_found(format!("the partition of {id:?} is gone (the geo data was reloaded)")));
    };
    if prefixes.len() > MAX_ACCEPTED_PREFIXES {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "the partition spans {} prefixes, more than {MAX_ACCEPTED_PREFIXES}: write overrides for the ones meant",
                prefixes.len()
            ),
        ));
    }
    let best = &suspect.measured[0];
    let note = format!(
        "measured: {} at {:.1} ms, {:.0} km from {}/{}",
        best.node, best.rtt_ms, suspect.distance_km, suspect.located.province, suspect.located.city
    );
    let mut saved = Vec::with_capacity(prefixes.len());
    for prefix in prefixes {
        let s = &suspect.suggested;
        let o = GeoOverride {
            prefix,
            country: s.country.clone(),
            province: s.province.clone(),
            city: s.city.clone(),
            isp: s.isp.clone(),
            note: note.clone(),
            created_by: "geo suspects".into(),
            created_at_ms: 0,
        };
        o.validate()?;
        saved.push(state.store.upsert_geo_override(&o).await?);
    }
    tracing::info!(suspect = %id, overrides = saved.len(), "geo suspect accepted");
    apply_overrides(&state).await?;
    Ok((StatusCode::CREATED, Json(saved)))
}

#[cfg(test)]
#[path = "suspects_tests.rs"]
mod tests;
