//! `/api/v1/dnssec` and `/api/v1/zones/{zone}/dnssec/rollover`: the signed
//! zones' keys, states, next events and DS records, and rollovers by hand.
//!
//! - `GET /api/v1/dnssec` — per zone with keys: each key (role, tag,
//!   algorithm, state, the times it entered each state, its DNSKEY and DS),
//!   the coming key events with their times, the DS records the parent should
//!   hold (those of the KSKs in CDS) (agent or admin token).
//! - `POST /api/v1/zones/{zone}/dnssec/rollover` `{"role": "zsk"}` or
//!   `{"role": "ksk"}` — makes a new key, stored `generated`; the leader
//!   publishes it in its next table and the rollover runs on the zone's
//!   timers (admin). 202 with the new key; 404 when the zone does not exist;
//!   422 when it is not signed; 409 while a rollover of that role is running.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::{ApiError, parse_json};
use crate::clock::now_ms;
use crate::dnssec::ZonesView;
use crate::dnssec::rollover::{self, Timing};
use crate::model::{KeyRole, KeyState};
use crate::store::dnssec_keys::StoredKey;

/// One zone's keys and what is coming.
#[derive(Debug, Serialize, Deserialize)]
pub struct ZoneKeysStatus {
    pub zone: String,
    /// `true` while the zone's policy signs it.
    pub signed: bool,
    pub keys: Vec<StoredKey>,
    /// `(Unix ms, what)`, soonest first (`at_ms` 0: at the next full build).
    pub events: Vec<EventStatus>,
    /// The DS records (presentation data) the parent should hold.
    pub ds: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct EventStatus {
    pub at_ms: i64,
    pub what: String,
}

/// `GET /api/v1/dnssec`.
pub async fn status(State(state): State<AppState>) -> Result<Json<Vec<ZoneKeysStatus>>, ApiError> {
    let keys = state.store.list_dnssec_keys().await?;
    let zones = state.store.list_zones().await?;
    let domains = state.store.list_domains().await?;
    let view = ZonesView { zones: &zones, domains: &domains, default_ttl: state.scheduler.settings().ttl };
    let delete_wait =
        state.scheduler.dnssec().map_or(crate::dnssec::DEFAULT_DELETE_WAIT_SECS, |s| s.keeper.delete_wait_secs());
    let mut out = Vec::new();
    for zone in &zones {
        let of_zone: Vec<StoredKey> = keys.iter().filter(|k| k.zone == zone.name).cloned().collect();
        if zone.dnssec.is_none() && of_zone.is_empty() {
            continue;
        }
        let timing: Timing = view.timing(zone, delete_wait);
        let events = rollover::events(&of_zone, zone.dnssec.is_some(), &timing)
            .into_iter()
            .map(|e| EventStatus { at_ms: e.at_ms.max(0), what: e.what })
            .collect();
        let ds = of_zone
            .iter()
            .filter(|k| k.role == KeyRole::Ksk && matches!(k.state, KeyState::Published | KeyState::Active))
            .map(|k| k.ds.clone())
            .collect();
        out.push(ZoneKeysStatus { zone: zone.name.clone(), signed: zone.dnssec.is_some(), keys: of_zone, events, ds });
    }
    Ok(Json(out))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloverBody {
    pub role: String,
}

/// `POST /api/v1/zones/{zone}/dnssec/rollover`.
pub async fn rollover(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<StoredKey>), ApiError> {
    let body: RolloverBody = parse_json(&body)?;
    let role = KeyRole::parse(&body.role)
        .ok_or_else(|| ApiError::bad_field("role", format!("{:?} is neither \"zsk\" nor \"ksk\"", body.role)))?;
    let name = zone.trim_end_matches('.').to_ascii_lowercase();
    let zones = state.store.list_zones().await?;
    let zone = zones.iter().find(|z| z.name == name).ok_or_else(|| ApiError::not_found(format!("no zone {name}")))?;
    let policy = zone.dnssec.clone().ok_or_else(|| ApiError::bad_field("zone", format!("{name} is not signed")))?;
    let signing = state
        .scheduler
        .dnssec()
        .ok_or_else(|| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "DNSSEC signing is not set up here"))?;
    let keys = state.store.list_dnssec_keys().await?;
    let running = keys
        .iter()
        .any(|k| k.zone == name && k.role == role && matches!(k.state, KeyState::Generated | KeyState::Published));
    if running {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("a {} rollover of {name} is already running (lagran dnssec status)", role.as_str()),
        ));
    }
    let key = signing
        .keeper
        .generate(&name, role, policy.algorithm, KeyState::Generated, now_ms())
        .await
        .map_err(|e| ApiError::internal(&e))?;
    state.after_write().await;
    Ok((StatusCode::ACCEPTED, Json(key)))
}

/// `GET /api/v1/console/dnssec`: the DNSSEC warnings of the console's banner
/// (a signature served near expiry, a key rollover stuck).
pub async fn console_warnings(State(state): State<AppState>) -> Json<Vec<crate::console::dnssec::DnssecWarning>> {
    use crate::console::dnssec::{ZoneState, warnings};
    let table = state.scheduler.table().load_full();
    let snapshot = state.scheduler.dnssec().and_then(|s| s.keeper.last());
    let zones = table.zones.iter().filter_map(|z| {
        let signatures = table.signatures.get(&z.zone.name)?;
        let oldest = crate::signature_expiry::oldest(signatures);
        let refresh_secs = z.zone.dnssec.as_ref().map_or(crate::model::DEFAULT_REFRESH_SECS, |p| p.refresh_secs);
        let next = snapshot.as_ref().and_then(|s| s.next.get(&z.zone.name));
        Some(ZoneState {
            zone: &z.zone.name,
            oldest_expiry: oldest.map(i64::from),
            refresh_secs,
            next_event: next.map(|e| (e.at_ms.max(0) / 1000, e.what.as_str())),
        })
    });
    Json(warnings(zones, now_ms() / 1000))
}
