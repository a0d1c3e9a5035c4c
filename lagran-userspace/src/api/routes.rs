//! `GET /api/v1/routes` (the current table, summarised) and rollback.

use axum::Json;
use axum::extract::State;
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

pub async fn current(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(summary_with_state(&state.scheduler.table().load(), state.scheduler.frozen())))
}

pub async fn rollback(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let t = state.scheduler.rollback().await?;
    Ok(Json(json!({ "version": t.version, "generated_at_ms": t.generated_at_ms, "frozen": true })))
}

/// Ends a rollback's freeze and recomputes.
pub async fn resume(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.scheduler.resume().await?;
    let t = state.scheduler.recompute().await?;
    Ok(Json(json!({ "version": t.version, "generated_at_ms": t.generated_at_ms, "frozen": false })))
}

/// `GET /api/v1/routes/table` parameters ([`crate::table_stream`]).
#[derive(Debug, Default, serde::Deserialize)]
pub struct TableParams {
    /// The version the NS host serves; the call waits while the table is still that one.
    #[serde(default)]
    pub since: u64,
    /// The epoch of the NS host's table.
    #[serde(default)]
    pub epoch: u64,
    /// How long to wait for a newer table (at most 30 s).
    #[serde(default)]
    pub wait_ms: u64,
    /// `1`: answer a [`crate::table_stream::TableUpdate`] (delta or full).
    #[serde(default)]
    pub deltas: u8,
    /// `1`: a whole table even when a delta would do.
    #[serde(default)]
    pub full: u8,
    /// The NS host's report: its name, queries answered, confirmation age.
    pub host: Option<String>,
    #[serde(default)]
    pub queries: u64,
    #[serde(default)]
    pub confirmed_ms_ago: i64,
    /// The client prefixes the NS host answered most ([`crate::answered::wire`]).
    pub prefixes: Option<String>,
}

/// The route table stream for NS hosts ([`crate::table_stream`]): long-polls
/// for a table newer than the host's `(epoch, since)`, answers it (a delta
/// or the whole table), or 304 when none came within `wait_ms`.
///
/// Every answer confirms the table the NS host will be serving: a
/// 304 says "yours is still current". While the control plane itself has
/// stopped confirming (its recomputes fail, or no leader confirms), a 304
/// would be a false confirmation, so the stream answers 503 instead and the
/// NS host tries another control process; so it does when this process is
/// behind the NS host (a standby catching up, a deposed leader).
///
/// A report (`?host=`) is taken only from an NS host that authenticates
/// ([`super::auth::Auth::authenticates_ns_host`]): any other caller gets 401
/// and nothing is stored.
pub async fn table(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    axum::extract::Query(p): axum::extract::Query<TableParams>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    if p.host.is_some() && !state.auth.authenticates_ns_host(&headers) {
        return Err(ApiError::unauthorized(format!(
            "an NS host's report (`host`) needs the agent token in `{}`",
            super::auth::AGENT_TOKEN_HEADER
        )));
    }
    if let Some(host) = p.host.as_deref().filter(|h| !h.is_empty() && h.len() <= 255) {
        let report = crate::store::cluster::NsHostReport {
            name: host.to_string(),
            version: p.since,
            epoch: p.epoch,
            queries: p.queries,
            confirmed_ms_ago: p.confirmed_ms_ago,
            reported_to: state.api_url.to_string(),
            reported_at_ms: crate::clock::now_ms(),
        };
        // Recorded beside the long poll, not before it: a slow store (SQLite
        // fsyncing under load, a distant PostgreSQL) must not delay the answer
        // that confirms the NS host's table. Writes may finish out of order;
        // the store keeps the latest `reported_at_ms`, so a report never goes back.
        if let Some(text) = p.prefixes.as_deref() {
            // A bad list is logged and dropped; the report and the stream go on.
            match crate::answered::wire::decode(text) {
                Ok(list) => state.scheduler.answered().report(host, list, report.reported_at_ms),
                Err(e) => tracing::warn!(host, error = %e, "an NS host's answered prefixes are unreadable"),
            }
        }
        let store = state.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.record_ns_report(&report).await {
                tracing::warn!(host = %report.name, error = %e, "cannot record an NS host's report");
            }
        });
    }
    let from = (p.epoch, p.since);
    let mut rx = state.scheduler.subscribe();
    let wait = std::time::Duration::from_millis(p.wait_ms.min(30_000));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let t = state.scheduler.table().load_full();
        if t.version != 0 && (p.since == 0 || t.position() > from) {
            if p.deltas == 0 {
                return Ok(Json(&*t).into_response());
            }
            let base = if p.full == 0 { from } else { (0, 0) };
            let body = state.scheduler.history().update(base, &t).map_err(|e| ApiError::internal(&e))?;
            return Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response());
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => continue,
            _ => {
                let unavailable = |m: String| ApiError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, m);
                if t.version != 0 && t.position() < from {
                    return Err(unavailable(format!(
                        "this control process serves table {}/{}, behind the NS host's {}/{}",
                        t.epoch, t.version, p.epoch, p.since
                    )));
                }
                let confirmation = state.scheduler.confirmation();
                if confirmation.is_stale(state.dns.stale_secs, crate::clock::now_ms()) {
                    let ago = confirmation.ms_ago(crate::clock::now_ms()).unwrap_or(-1);
                    return Err(unavailable(format!(
                        "the control plane has not confirmed route table {} for {ago} ms",
                        t.version
                    )));
                }
                return Ok(axum::http::StatusCode::NOT_MODIFIED.into_response());
            }
        }
    }
}

/// `GET /api/v1/nshosts`: every NS host's last report on the stream, with
/// how far it is behind this control process's table. `lag_ms` is 0 for a
/// host serving the current table, else the time since the first table it
/// lacks was generated (as far as this process remembers; else the current one).
pub async fn nshosts(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let (current, rows) = reported_ns_hosts(&state).await?;
    let now = crate::clock::now_ms();
    let hosts: Vec<Value> = rows
        .into_iter()
        .map(|ReportedNsHost { report: r, current, lag_ms }| {
            json!({
                "name": r.name, "version": r.version, "epoch": r.epoch, "queries": r.queries,
                "confirmed_ms_ago": r.confirmed_ms_ago, "reported_to": r.reported_to,
                "reported_at_ms": r.reported_at_ms, "last_report_ms_ago": (now - r.reported_at_ms).max(0),
                "current": current, "lag_ms": lag_ms,
            })
        })
        .collect();
    Ok(Json(json!({
        "version": current.version, "epoch": current.epoch, "leading": state.scheduler.leading(), "nshosts": hosts,
    })))
}

/// An NS host's last report and how far it is behind this process's table.
pub struct ReportedNsHost {
    pub report: crate::store::cluster::NsHostReport,
    /// It serves this process's current table (or a newer one).
    pub current: bool,
    /// 0 when current, else ms since the first table it lacks was generated.
    pub lag_ms: i64,
}

/// Every NS host's last report on the stream (`GET /api/v1/nshosts`, the
/// console's NS-host view), with this process's current table.
pub async fn reported_ns_hosts(
    state: &AppState,
) -> Result<(std::sync::Arc<crate::route_table::RouteTable>, Vec<ReportedNsHost>), ApiError> {
    let reports = state.store.list_ns_reports().await?;
    let current = state.scheduler.table().load_full();
    let now = crate::clock::now_ms();
    let rows = reports
        .into_iter()
        .map(|report| {
            let behind = (report.epoch, report.version) < current.position();
            let lag_ms = if behind {
                let first_missing = state
                    .scheduler
                    .history()
                    .first_after((report.epoch, report.version))
                    .map_or(current.generated_at_ms, |t| t.generated_at_ms);
                (now - first_missing).max(0)
            } else {
                0
            };
            ReportedNsHost { report, current: !behind, lag_ms }
        })
        .collect();
    Ok((current, rows))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::{Method, StatusCode};

    use crate::api::auth::AGENT_TOKEN_HEADER;
    use crate::api::testing::{ADMIN, AGENT, call, router, state};

    const STREAM: &str = "/api/v1/routes/table?since=0&epoch=0&deltas=1&wait_ms=0&host=";

    /// Only an NS host that authenticates leaves a report; any other caller
    /// of the stream with `?host=` is refused and nothing is stored.
    #[tokio::test]
    async fn only_authenticated_ns_hosts_leave_reports() {
        let store = crate::store::Store::connect("sqlite::memory:").await.unwrap();
        let state = state(store.clone());
        let session = state.auth.sessions.open(state.auth.grants_of(Some(ADMIN)), crate::clock::now_ms());
        let r = router(state);
        let cookie = format!("lagran_session={session}");
        for (who, headers) in [
            ("nobody", vec![]),
            ("a wrong token", vec![(AGENT_TOKEN_HEADER, "not-the-agent-token")]),
            ("a console session", vec![("cookie", cookie.as_str())]),
        ] {
            let (status, body) = call(&r, Method::GET, &format!("{STREAM}forged-{}", who.len()), &headers, None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{who}: {body}");
        }
        let (status, _) = call(&r, Method::GET, "/api/v1/routes/table?wait_ms=0", &[("cookie", &cookie)], None).await;
        assert_ne!(status, StatusCode::UNAUTHORIZED, "a session still reads the stream without reporting");
        let bearer = format!("Bearer {ADMIN}");
        call(&r, Method::GET, &format!("{STREAM}ns1"), &[(AGENT_TOKEN_HEADER, AGENT)], None).await;
        call(&r, Method::GET, &format!("{STREAM}ns2"), &[("authorization", &bearer)], None).await;
        // Reports are written beside the answer: wait for both.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut names = Vec::new();
        while tokio::time::Instant::now() < deadline {
            names = store.list_ns_reports().await.unwrap().into_iter().map(|h| h.name).collect::<Vec<_>>();
            if names.len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(names, ["ns1", "ns2"], "only the authenticated reports are stored");
    }

    /// The answered prefixes of a report reach the geo reload's sample; a
    /// forged report's do not, and an unreadable list is dropped while the
    /// stream still answers.
    #[tokio::test]
    async fn answered_prefixes_ride_on_the_report() {
        let store = crate::store::Store::connect("sqlite::memory:").await.unwrap();
        let state = state(store);
        let scheduler = state.scheduler.clone();
        let r = router(state);
        let agent = [(AGENT_TOKEN_HEADER, AGENT)];
        let forged = format!("{STREAM}forged&prefixes=9.9.9.0/24_5000");
        assert_eq!(call(&r, Method::GET, &forged, &[], None).await.0, StatusCode::UNAUTHORIZED);
        let now = crate::clock::now_ms();
        assert_eq!(scheduler.answered().sample(now).queries_v4(), 0);
        let good = format!("{STREAM}ns1&prefixes=58.60.1.0/24_150,240e:1:2::/48_40");
        let (status, body) = call(&r, Method::GET, &good, &agent, None).await;
        assert_ne!(status, StatusCode::UNAUTHORIZED, "{body}");
        let sample = scheduler.answered().sample(now);
        assert_eq!((sample.queries_v4(), sample.queries_v6()), (150, 40));
        let bad = format!("{STREAM}ns2&prefixes=58.60.0.0/16_9");
        let (status, body) = call(&r, Method::GET, &bad, &agent, None).await;
        assert!(status != StatusCode::UNAUTHORIZED && status != StatusCode::UNPROCESSABLE_ENTITY, "{status} {body}");
        assert_eq!(scheduler.answered().sample(now).queries_v4(), 150, "the bad list was dropped");
    }
}
