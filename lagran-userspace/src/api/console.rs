//! The operator console's routes: `/ui` (the page, its login and logout) and
//! the read calls it makes (`/api/v1/console/*`), plus the what-if
//! (`POST /api/v1/schedule/what-if`), which scripts can call as well.
//!
//! The page authenticates with the console cookie ([`SESSION_COOKIE`]); the
//! node actions it offers go through the ordinary `PATCH /api/v1/nodes/{name}`.

use axum::Json;
use axum::body::Bytes;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::{Grants, SESSION_COOKIE};
use super::error::{ApiError, parse_json};
use super::nodes::apply_patch;
use crate::clock::now_ms;
use crate::console::nshosts::NsHostStatus;
use crate::console::page;
use crate::console::traffic::Point;
use crate::console::{MatrixView, WhatIf};
use crate::health::{Dead, ProbeState};
use crate::model::{Node, NodeStatus};
use crate::scheduler::ChangeEvent;
use crate::store::NodePatch;

/// `GET /ui`: the console, or the login form when the request carries no token that reads.
pub async fn page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let grants = state.auth.grants(&headers);
    if !grants.read {
        return Html(page::login(None)).into_response();
    }
    no_store(Html(page::console()).into_response())
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /ui/login`: a token that reads opens a console session, kept in the
/// console cookie (its random id, never the token). Failed logins from one
/// address beyond the limit wait a minute (429).
pub async fn login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Form(form): Form<LoginForm>,
) -> Response {
    let sessions = &state.auth.sessions;
    let now = now_ms();
    if !sessions.login_allowed(peer.ip(), now) {
        tracing::warn!(client = %peer.ip(), "console login refused: too many failed attempts");
        let text = "Too many failed sign-ins from this address: wait a minute.";
        return (StatusCode::TOO_MANY_REQUESTS, Html(page::login(Some(text)))).into_response();
    }
    let token = form.token.trim();
    let grants = state.auth.grants_of(Some(token));
    if token.is_empty() || !grants.read {
        sessions.login_failed(peer.ip(), now);
        return (
            StatusCode::UNAUTHORIZED,
            Html(page::login(Some("That token is neither the admin nor the agent token."))),
        )
            .into_response();
    }
    tracing::info!(write = grants.write, "console login");
    let id = sessions.open(grants, now);
    let max_age = crate::api::sessions::SESSION_TTL_MS / 1000;
    let cookie = format!("{SESSION_COOKIE}={id}; {}; Max-Age={max_age}", sessions.cookie_attributes());
    let mut r = Redirect::to("/ui").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `POST /ui/logout`: ends the session and forgets the cookie.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(id) = super::Auth::cookie(&headers) {
        state.auth.sessions.revoke(id);
    }
    let mut r = Redirect::to("/ui").into_response();
    let cookie = format!("{SESSION_COOKIE}=; {}; Max-Age=0", state.auth.sessions.cookie_attributes());
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn no_store(mut r: Response) -> Response {
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `GET /api/v1/console/session`: what the caller's credentials grant.
pub async fn session(State(state): State<AppState>, headers: HeaderMap) -> Json<SessionJson> {
    let g = state.auth.grants(&headers);
    Json(SessionJson { grants: g, open: state.auth.reads_open(), writes_open: state.auth.writes_open() })
}

#[derive(Serialize)]
pub struct SessionJson {
    #[serde(flatten)]
    grants: Grants,
    /// Reads need no token (no tokens configured).
    open: bool,
    writes_open: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixParams {
    domain: Option<String>,
}

/// `GET /api/v1/console/matrix?domain=`: the answer matrix of a scheduled name
/// (the first one when none is given).
pub async fn matrix(
    State(state): State<AppState>,
    params: Result<Query<MatrixParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<MatrixView>, ApiError> {
    let Query(p) = params.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let domain = match p.domain.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => d.to_string(),
        None => {
            let table = state.scheduler.table().load();
            let first = table.scheduled_names().next().map(|n| n.name.clone());
            first.ok_or_else(|| ApiError::not_found("no scheduled name yet: add a zone"))?
        }
    };
    match state.console.matrix(&state.scheduler, &domain).await? {
        Some(m) => Ok(Json(m)),
        None => Err(ApiError::bad_field("domain", format!("{domain:?} is not a scheduled name"))),
    }
}

/// One node as the console's nodes view shows it.
#[derive(Serialize)]
pub struct NodeRow {
    #[serde(flatten)]
    node: Node,
    /// The health probe's state (none when the node has nothing to probe).
    probe: Option<ProbeState>,
    /// Why the node is not alive, if it is not.
    dead: Option<Dead>,
    /// Milliseconds since its last heartbeat (none when it never sent one).
    heartbeat_age_ms: Option<i64>,
    /// Usage of the tighter of its caps (0..1; 0 when uncapped).
    cap_ratio: f64,
    /// Weight 0: answers only when nothing else is eligible.
    drained: bool,
}

/// `GET /api/v1/console/nodes`: nodes with probe results and heartbeat ages.
pub async fn nodes(State(state): State<AppState>) -> Result<Json<Vec<NodeRow>>, ApiError> {
    let now = now_ms();
    let liveness = state.scheduler.health().liveness();
    let rows = state
        .store
        .list_nodes()
        .await?
        .into_iter()
        .map(|n| {
            let view = crate::engine::NodeView::new(n.clone());
            NodeRow {
                probe: liveness.probes.get(&n.name).cloned(),
                dead: liveness.verdict(&n, now),
                heartbeat_age_ms: liveness.last_heard(&n).map(|t| (now - t).max(0)),
                cap_ratio: view.cap_ratio(),
                drained: view.drained(),
                node: n,
            }
        })
        .collect();
    Ok(Json(rows))
}

/// `GET /api/v1/console/faults`: the control plane's own faults the page
/// shows as a banner (`null`: none): the store refusing writes, nodes held
/// in the answers by the withdrawal guard.
pub async fn faults(State(state): State<AppState>) -> Json<Option<crate::fail_static::FailStaticReport>> {
    Json(state.scheduler.health().fail_static().report())
}

/// `GET /api/v1/console/certificates`: the certificates the page warns about
/// (expiring within 14 days, expired, or unreadable).
pub async fn certificates(
    State(state): State<AppState>,
) -> Result<Json<Vec<crate::console::certificates::Expiring>>, ApiError> {
    let certs = state.store.list_certificates().await?;
    let pairs = certs.into_iter().map(|c| (c.domain, crate::acme::not_after::not_after_of_pem(&c.cert_pem)));
    Ok(Json(crate::console::certificates::expiring(pairs, crate::acme::expiry::now_secs())))
}

/// `GET /api/v1/console/traffic`: rates, answer changes and NS hosts.
#[derive(Serialize)]
pub struct TrafficJson {
    points: Vec<Point>,
    changes: Vec<ChangeEvent>,
    ns_hosts: Vec<NsHostStatus>,
    version: u64,
    generated_at_ms: i64,
    now_ms: i64,
}

pub async fn traffic(State(state): State<AppState>) -> Result<Json<TrafficJson>, ApiError> {
    let table = state.scheduler.table().load();
    let current = (table.version, table.generated_at_ms);
    // The in-process responder (in `serve`), then every NS host that reports on the table stream.
    let mut ns_hosts = state.console.ns_hosts.ns_hosts(current);
    let (_, reported) = super::routes::reported_ns_hosts(&state).await?;
    ns_hosts.extend(reported.into_iter().map(|h| NsHostStatus {
        host: h.report.name,
        version: h.report.version,
        versions_behind: if h.current { 0 } else { table.version.saturating_sub(h.report.version).max(1) },
        lag_ms: h.lag_ms,
        reported_at_ms: h.report.reported_at_ms,
    }));
    Ok(Json(TrafficJson {
        points: state.console.traffic.points(),
        changes: state.scheduler.change_log(),
        ns_hosts,
        version: table.version,
        generated_at_ms: table.generated_at_ms,
        now_ms: now_ms(),
    }))
}

/// One hypothetical change of a what-if.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeChange {
    pub node: String,
    pub status: Option<NodeStatus>,
    pub weight: Option<i64>,
}

/// The what-if's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhatIfRequest {
    pub domain: String,
    pub changes: Vec<NodeChange>,
}

/// `POST /api/v1/schedule/what-if`: which cells would move, and to which
/// node, if the changes were made. A read: nothing is stored or published.
pub async fn what_if(State(state): State<AppState>, body: Bytes) -> Result<Json<WhatIf>, ApiError> {
    let req: WhatIfRequest = parse_json(&body)?;
    let patches = validate_changes(&req, &state.store.list_nodes().await?)?;
    let domain = req.domain.trim();
    let edit = move |nodes: &mut Vec<Node>| {
        for (name, patch) in &patches {
            if let Some(n) = nodes.iter_mut().find(|n| &n.name == name) {
                apply_patch(n, patch);
            }
        }
    };
    match state.console.what_if(&state.scheduler, domain, edit).await? {
        Some(w) => Ok(Json(w)),
        None => Err(ApiError::bad_field("domain", format!("{domain:?} is not a scheduled name"))),
    }
}

/// The changes as node patches; names every bad field.
pub fn validate_changes(req: &WhatIfRequest, nodes: &[Node]) -> Result<Vec<(String, NodePatch)>, ApiError> {
    if req.domain.trim().is_empty() {
        return Err(ApiError::bad_field("domain", "domain is required"));
    }
    if req.changes.is_empty() {
        return Err(ApiError::bad_field("changes", "give at least one change: {\"node\", \"status\"?, \"weight\"?}"));
    }
    let mut out = Vec::with_capacity(req.changes.len());
    for (i, c) in req.changes.iter().enumerate() {
        if !nodes.iter().any(|n| n.name == c.node) {
            return Err(ApiError::bad_field(format!("changes[{i}].node"), format!("no node {:?}", c.node)));
        }
        if c.status.is_none() && c.weight.is_none() {
            return Err(ApiError::bad_field(format!("changes[{i}]"), "a change needs status or weight"));
        }
        let patch = NodePatch { status: c.status, weight: c.weight, ..NodePatch::default() };
        patch.validate().map_err(|e| {
            let mut e = ApiError::from(e);
            e.field = e.field.map(|f| format!("changes[{i}].{f}"));
            e
        })?;
        out.push((c.node.clone(), patch));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<Node> {
        vec![Node::new("gz-01")]
    }

    #[test]
    fn what_if_changes_are_checked() {
        let parse = |s: &str| -> Result<WhatIfRequest, ApiError> { parse_json(s.as_bytes()) };
        let ok = parse(r#"{"domain":"edge.lagran.net","changes":[{"node":"gz-01","status":"offline"}]}"#).unwrap();
        let p = validate_changes(&ok, &nodes()).unwrap();
        assert_eq!(p[0].1.status, Some(NodeStatus::Offline));
        let e = validate_changes(&parse(r#"{"domain":"d","changes":[{"node":"nope","weight":0}]}"#).unwrap(), &nodes())
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("changes[0].node"));
        let e =
            validate_changes(&parse(r#"{"domain":"d","changes":[{"node":"gz-01"}]}"#).unwrap(), &nodes()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("changes[0]"));
        let e = validate_changes(&parse(r#"{"domain":"d","changes":[]}"#).unwrap(), &nodes()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("changes"));
        let drain = parse(r#"{"domain":"d","changes":[{"node":"gz-01","weight":0}]}"#).unwrap();
        assert_eq!(validate_changes(&drain, &nodes()).unwrap()[0].1.weight, Some(0));
        assert!(parse(r#"{"domain":"d","changes":[{"node":"gz-01","status":"asleep"}]}"#).is_err());
        assert!(parse(r#"{"domain":"d","changes":[{"node":"gz-01","colour":"red"}]}"#).is_err());
    }
}
