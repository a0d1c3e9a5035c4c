//! `/api/v1/rules` (manual pins and canary splits) and `/api/v1/lines`
//! (named prefix lists that override the geo partition).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use ipnet::IpNet;
use serde::Deserialize;

use super::AppState;
use super::error::{ApiError, parse_json};
use crate::model::{Line, Rule};
use crate::store::NewRule;

/// Prefixes of well-known public resolvers. A line covering one would send
/// every user of that resolver to the line's answer, so adding such
/// a prefix to a line needs `force`.
pub const PUBLIC_RESOLVERS: &[&str] = &[
    "8.8.8.0/24",
    "8.8.4.0/24",
    "1.1.1.0/24",
    "1.0.0.0/24",
    "9.9.9.0/24",
    "149.112.112.0/24",
    "208.67.222.0/24",
    "208.67.220.0/24",
    "114.114.114.0/24",
    "114.114.115.0/24",
    "223.5.5.0/24",
    "223.6.6.0/24",
    "119.29.29.0/24",
    "180.76.76.0/24",
    "180.184.1.0/24",
    "101.226.4.0/24",
    "2001:4860:4860::/48",
    "2606:4700:4700::/48",
    "2620:fe::/48",
    "2400:3200::/32",
    "240c::6666/128",
];

/// The public-resolver prefixes a list of prefixes overlaps.
pub fn resolver_overlaps(prefixes: &[IpNet], extra: &[IpNet]) -> Vec<(IpNet, IpNet)> {
    let known: Vec<IpNet> =
        PUBLIC_RESOLVERS.iter().filter_map(|s| s.parse::<IpNet>().ok()).chain(extra.iter().copied()).collect();
    let mut out = Vec::new();
    for p in prefixes {
        for r in &known {
            if p.contains(r) || r.contains(p) {
                out.push((*p, *r));
            }
        }
    }
    out
}

pub async fn list_rules(State(state): State<AppState>) -> Result<Json<Vec<Rule>>, ApiError> {
    Ok(Json(state.store.list_rules().await?))
}

pub async fn create_rule(State(state): State<AppState>, body: Bytes) -> Result<(StatusCode, Json<Rule>), ApiError> {
    let rule: NewRule = parse_json(&body)?;
    let rule = state.store.create_rule(&rule).await?;
    tracing::info!(id = rule.id, kind = rule.kind.as_str(), node = %rule.node, percent = rule.percent, "rule created");
    state.after_write().await;
    Ok((StatusCode::CREATED, Json(rule)))
}

pub async fn delete_rule(State(state): State<AppState>, Path(id): Path<i64>) -> Result<StatusCode, ApiError> {
    if !state.store.delete_rule(id).await? {
        return Err(ApiError::not_found(format!("no rule {id}")));
    }
    tracing::info!(id, "rule deleted");
    state.after_write().await;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_lines(State(state): State<AppState>) -> Result<Json<Vec<Line>>, ApiError> {
    Ok(Json(state.store.list_lines().await?))
}

#[derive(Debug, Default, Deserialize)]
pub struct ForceParam {
    #[serde(default)]
    pub force: bool,
}

pub async fn put_line(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<ForceParam>,
    body: Bytes,
) -> Result<Json<Line>, ApiError> {
    // The name comes from the path; a body may repeat it but not contradict it.
    let mut value: serde_json::Value = parse_json(&body)?;
    match value.get("name").and_then(|n| n.as_str()) {
        Some(n) if n != name => {
            return Err(ApiError::bad_field("name", format!("body names line {n:?} but the path names {name:?}")));
        }
        _ => {}
    }
    if let Some(obj) = value.as_object_mut() {
        obj.insert("name".into(), serde_json::Value::String(name));
    }
    let line: Line = parse_json(value.to_string().as_bytes())?;
    let overlaps = resolver_overlaps(&line.prefixes, &state.public_resolvers);
    if !overlaps.is_empty() && !q.force {
        let list: Vec<String> = overlaps.iter().map(|(p, r)| format!("{p} overlaps public resolver {r}")).collect();
        return Err(ApiError::field(
            StatusCode::CONFLICT,
            "prefixes",
            format!(
                "{}; every user of that resolver would get this line's answer (add ?force=true to insist)",
                list.join(", ")
            ),
        ));
    }
    for (p, r) in &overlaps {
        tracing::warn!(line = %line.name, prefix = %p, resolver = %r, "line prefix overlaps a public resolver (forced)");
    }
    let line = state.store.upsert_line(&line).await?;
    state.after_write().await;
    Ok(Json(line))
}

pub async fn delete_line(State(state): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    if !state.store.delete_line(&name).await? {
        return Err(ApiError::not_found(format!("no line {name}")));
    }
    state.after_write().await;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlaps_with_public_resolvers_are_found() {
        let p: Vec<IpNet> = vec!["8.8.0.0/16".parse().unwrap(), "58.60.0.0/16".parse().unwrap()];
        let o = resolver_overlaps(&p, &[]);
        assert_eq!(o.len(), 2, "8.8.8.0/24 and 8.8.4.0/24 are inside 8.8.0.0/16: {o:?}");
        assert!(resolver_overlaps(&["58.60.0.0/16".parse().unwrap()], &[]).is_empty());
        assert_eq!(resolver_overlaps(&["1.1.1.1/32".parse().unwrap()], &[]).len(), 1, "a host inside a resolver /24");
    }
}
