//! `/api/v1/nodes`: edge node CRUD. JSON fields are named as the node columns,
//! so `PATCH {"status":"offline"}` takes a node out of the answers at once.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::AppState;
use super::error::{ApiError, parse_json};
use crate::clock::now_ms;
use crate::model::Node;
use crate::scheduler::Change;
use crate::store::{Heartbeat, NodePatch};

use super::auth::AGENT_TOKEN_HEADER;

/// Applies every present field of a patch to a node in memory.
pub fn apply_patch(n: &mut Node, p: &NodePatch) {
    if let Some(v) = p.status {
        n.status = v;
    }
    if let Some(v) = p.public_ip {
        n.public_ip = v;
    }
    if let Some(v) = p.public_ipv6 {
        n.public_ipv6 = v;
    }
    if let Some(v) = &p.hostname {
        n.hostname = v.clone();
    }
    let text = |dst: &mut String, src: &Option<String>| {
        if let Some(v) = src {
            *dst = v.clone();
        }
    };
    text(&mut n.country, &p.country);
    text(&mut n.province, &p.province);
    text(&mut n.city, &p.city);
    text(&mut n.isp, &p.isp);
    text(&mut n.agent_url, &p.agent_url);
    text(&mut n.pool, &p.pool);
    if let Some(v) = p.weight {
        n.weight = v;
    }
    if let Some(v) = p.cpu_usage {
        n.cpu_usage = v;
    }
    if let Some(v) = p.memory_usage {
        n.memory_usage = v;
    }
    if let Some(v) = p.bandwidth_mbps {
        n.bandwidth_mbps = v;
    }
    if let Some(v) = p.max_bandwidth_mbps {
        n.max_bandwidth_mbps = v;
    }
    if let Some(v) = p.conns {
        n.conns = v;
    }
    if let Some(v) = p.max_conns {
        n.max_conns = v;
    }
    if let Some(v) = p.probe_port {
        n.probe_port = v;
    }
    if let Some(v) = p.lat {
        n.lat = v;
    }
    if let Some(v) = p.lon {
        n.lon = v;
    }
}

/// Splits a create body into the node's name and the rest (parsed as a patch).
pub fn parse_create(body: &[u8]) -> Result<(Node, Option<String>), ApiError> {
    let mut value: Value = parse_json(body)?;
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "the body must be a JSON object"));
    };
    let name = match obj.remove("name") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(ApiError::bad_field("name", "name must be a string")),
        None => return Err(ApiError::bad_field("name", "name is required")),
    };
    let rest = serde_json::to_vec(&value).map_err(|e| ApiError::internal(&e))?;
    let patch: NodePatch = parse_json(&rest)?;
    patch.validate()?;
    let mut node = Node::new(name);
    apply_patch(&mut node, &patch);
    Ok((node, patch.auth_token))
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<Node>>, ApiError> {
    Ok(Json(state.store.list_nodes().await?))
}

pub async fn get_one(State(state): State<AppState>, Path(name): Path<String>) -> Result<Json<Node>, ApiError> {
    match state.store.get_node(&name).await? {
        Some(n) => Ok(Json(n)),
        None => Err(ApiError::not_found(format!("no node {name}"))),
    }
}

pub async fn create(State(state): State<AppState>, body: Bytes) -> Result<(StatusCode, Json<Node>), ApiError> {
    let (node, token) = parse_create(&body)?;
    let node = state.store.create_node(&node, token.as_deref()).await?;
    tracing::info!(node = %node.name, "node created");
    state.after_write().await;
    Ok((StatusCode::CREATED, Json(node)))
}

pub async fn patch(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Node>, ApiError> {
    let patch: NodePatch = parse_json(&body)?;
    patch.validate()?;
    let node = state.store.update_node(&name, &patch).await?;
    tracing::info!(node = %node.name, status = node.status.as_str(), "node updated");
    state.after_change(Change::Node(node.name.clone())).await;
    Ok(Json(node))
}

pub async fn delete(State(state): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    if !state.store.delete_node(&name).await? {
        return Err(ApiError::not_found(format!("no node {name}")));
    }
    tracing::info!(node = %name, "node deleted");
    state.after_write().await;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/nodes/{name}/heartbeat`: an agent reports its load. Authenticated
/// by that node's own token (or the global agent token) in `x-lagran-agent-token`.
///
/// An authenticated heartbeat is noted in memory whatever the store does
/// with it ([`crate::fail_static`]): when the store refuses the write, the
/// node is read instead (its own token checked against the stored hash),
/// the report laid over it and passed to the scheduler, and the agent
/// answered as usual. A failing store must not make a fleet of live nodes
/// look silent.
pub async fn heartbeat(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Node>, ApiError> {
    let presented = headers.get(AGENT_TOKEN_HEADER).and_then(|v| v.to_str().ok());
    // Same answer whether the node exists or not: no probing for node names.
    let unauthorized =
        || ApiError::unauthorized(format!("heartbeats need the node's own token in `{AGENT_TOKEN_HEADER}`"));
    let Some(presented) = presented else { return Err(unauthorized()) };
    let hb: Heartbeat = parse_json(&body)?;
    hb.validate()?;
    let (store, now) = (&state.store, now_ms());
    let global = state.auth.agent_token_matches(presented);
    let fail_static = state.scheduler.health().fail_static();
    if global {
        fail_static.heard(&name, now);
    }
    let written = if global {
        store.record_heartbeat(&name, &hb, now).await.map(Some)
    } else {
        // The node's own token is checked in the statement that writes the heartbeat.
        store.record_heartbeat_of_token(&name, &hb, now, presented).await
    };
    let node = match written {
        Ok(node) => {
            state.scheduler.store_write_outcome(Ok(()));
            node
        }
        Err(e) if e.is_database_fault() => {
            state.scheduler.store_write_outcome(Err(&e));
            let token = (!global).then_some(presented);
            let node = store.heartbeat_unwritten(&name, &hb, now, token).await?;
            tracing::debug!(node = %name, error = %e, "heartbeat noted in memory only: the store refuses writes");
            node
        }
        Err(e) => return Err(e.into()),
    };
    let node = node.ok_or_else(unauthorized)?;
    fail_static.heard(&name, now);
    tracing::debug!(node = %name, cpu = hb.cpu_usage, memory = hb.memory_usage, "heartbeat");
    state.scheduler.notify_load(&node);
    Ok(Json(node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_body_needs_a_name_and_names_bad_fields() {
        let e = parse_create(br#"{"weight": 3}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("name"));
        let e = parse_create(br#"{"name": "a", "public_ip": "1.2.3"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("public_ip"), "{}", e.message);
        let e = parse_create(br#"{"name": "a", "colour": "red"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("colour"), "{}", e.message);
        let e = parse_create(br#"{"name": "a", "cpu_usage": 140}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("cpu_usage"), "{}", e.message);
        let (n, tok) =
            parse_create(br#"{"name": "a", "public_ip": "192.0.2.1", "auth_token": "t0k3n-long-enough"}"#).unwrap();
        assert_eq!(n.public_ip, Some("192.0.2.1".parse().unwrap()));
        assert_eq!(tok.as_deref(), Some("t0k3n-long-enough"));
        let (n, _) = parse_create(br#"{"name": "a", "hostname": "a-01.edge.lagran.net"}"#).unwrap();
        assert_eq!(n.hostname.as_deref(), Some("a-01.edge.lagran.net"), "a created node keeps its hostname");
    }
}
