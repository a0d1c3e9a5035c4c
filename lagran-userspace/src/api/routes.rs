//! `GET /api/v1/routes` (the current table, summarised) and rollback.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use crate::route_table::RouteTable;

/// A JSON summary of a route table: per name, its distinct answers and prefix counts.
pub fn summary(t: &RouteTable) -> Value {
    let names: Vec<Value> = t
        .scheduled_names()
        .map(|n| {
            let answers: Vec<Value> = n
                .answers
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let v4_prefixes = n.v4.iter().filter(|p| p.value as usize == i).count();
                    json!({
                        "ttl": a.ttl, "ipv4": a.ipv4, "ipv6": a.ipv6, "node": a.node,
                        "reason": a.reason, "state": a.state, "v4_prefixes": v4_prefixes,
                    })
                })
                .collect();
            json!({ "name": n.name, "id": n.id, "v4_prefixes": n.v4.len(), "v6_prefixes": n.v6.len(), "answers": answers })
        })
        .collect();
    json!({ "version": t.version, "generated_at_ms": t.generated_at_ms, "names": names })
}

/// The summary plus whether a rollback froze the table.
pub fn summary_with_state(t: &RouteTable, frozen: bool) -> Value {
    let mut v = summary(t);
    v["frozen"] = json!(frozen);
    v
}

pub async fn current(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    state.auth.check_agent(&headers)?;
    Ok(Json(summary_with_state(&state.scheduler.table().load(), state.scheduler.frozen())))
}

pub async fn rollback(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    state.auth.check_admin(&headers)?;
    let t = state.scheduler.rollback().await?;
    Ok(Json(json!({ "version": t.version, "generated_at_ms": t.generated_at_ms, "frozen": true })))
}

/// Ends a rollback's freeze and recomputes.
pub async fn resume(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    state.auth.check_admin(&headers)?;
    state.scheduler.resume().await?;
    let t = state.scheduler.recompute().await?;
    Ok(Json(json!({ "version": t.version, "generated_at_ms": t.generated_at_ms, "frozen": false })))
}

/// `GET /api/v1/routes/table?since=V&wait_ms=M` parameters.
#[derive(Debug, Default, serde::Deserialize)]
pub struct TableParams {
    /// The version the NS host serves; the call waits while the table is still that one.
    #[serde(default)]
    pub since: u64,
    /// How long to wait for a newer table (at most 30 s).
    #[serde(default)]
    pub wait_ms: u64,
}

/// The route table stream for NS hosts: long-polls for a table newer than
/// `since`, answers it whole (JSON), or 304 when none came within `wait_ms`.
///
/// Every answer confirms the table the NS host will be serving (SPEC §7): a
/// 304 says "yours is still current". While the scheduler itself has stopped
/// confirming (its recomputes fail), a 304 would be a false confirmation, so
/// the stream answers 503 instead and the NS host's table ages towards stale.
pub async fn table(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::extract::Query(p): axum::extract::Query<TableParams>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    state.auth.check_agent(&headers)?;
    let mut rx = state.scheduler.subscribe();
    let wait = std::time::Duration::from_millis(p.wait_ms.min(30_000));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let t = state.scheduler.table().load_full();
        if t.version != 0 && t.version != p.since {
            return Ok(Json(&*t).into_response());
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => continue,
            _ => {
                let confirmation = state.scheduler.confirmation();
                if confirmation.is_stale(&state.dns, crate::clock::now_ms()) {
                    let ago = confirmation.ms_ago(crate::clock::now_ms()).unwrap_or(-1);
                    return Err(ApiError::new(
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        format!("the scheduler has not confirmed route table {} for {ago} ms", t.version),
                    ));
                }
                return Ok(axum::http::StatusCode::NOT_MODIFIED.into_response());
            }
        }
    }
}
