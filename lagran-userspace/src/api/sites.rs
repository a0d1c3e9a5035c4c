//! `/api/v1/sites`: the edge's customer hosts, kept centrally. Edge nodes
//! read them with the agent token, or with their own (`?node=NAME` and the
//! node's token in `x-lagran-agent-token`), and pick up changes without a
//! restart; writes need the admin token.
//!
//! A site has one `origin` or several `origins` (with `origin_weights`,
//! `origin_host`, `origin_health_path` and a private CA in `origin_ca_pem`),
//! the same keys as an edge's `[[site]]`; as stored, `origin` is the first.
//!
//! A site's `pools` name the pools whose nodes serve it (absent: every node).
//! An answer for a node (`?node=NAME`) lists only the sites of that node's
//! pool, so one node's token does not reveal another pool's sites (nor, in
//! [`super::certificates`], their keys). Without `?node=` the agent and admin
//! tokens see every site.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;

use super::AppState;
use super::access::KeyQuery;
use super::error::{ApiError, parse_json};
use lagran_site::Site;

use crate::store::StoredSite;

/// `cdn.Example.com.` → `cdn.example.com`.
fn normalise(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// The sites `node` serves: those of its pool; every site without `node`,
/// or for a name no node has (only the agent and admin tokens get that far:
/// a node's own token names its node).
pub async fn sites_for(state: &AppState, node: Option<&str>) -> Result<Vec<StoredSite>, ApiError> {
    let mut sites = state.store.list_sites().await?;
    let pool = match node {
        Some(name) => state.store.get_node(name).await?.map(|n| n.pool),
        None => None,
    };
    if let Some(pool) = pool {
        sites.retain(|s| s.site.served_by_pool(&pool));
    }
    Ok(sites)
}

pub async fn list(State(state): State<AppState>, Query(q): Query<KeyQuery>) -> Result<Json<Vec<StoredSite>>, ApiError> {
    Ok(Json(sites_for(&state, q.node.as_deref()).await?))
}

pub async fn get_one(
    State(state): State<AppState>,
    Path(host): Path<String>,
    Query(q): Query<KeyQuery>,
) -> Result<Json<StoredSite>, ApiError> {
    let host = normalise(&host);
    match sites_for(&state, q.node.as_deref()).await?.into_iter().find(|s| s.site.host == host) {
        Some(s) => Ok(Json(s)),
        None => Err(ApiError::not_found(format!("no site {host}"))),
    }
}

/// `PUT /api/v1/sites/{host}`: creates or replaces the site; the body's
/// `host`, when given, must be the path's.
pub async fn put(
    State(state): State<AppState>,
    Path(host): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<StoredSite>), ApiError> {
    let host = normalise(&host);
    let mut value: serde_json::Value = parse_json(&body)?;
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "the body must be a JSON object"));
    };
    // The store's timestamps (as `GET` shows them) are ignored on input.
    obj.remove("created_at_ms");
    obj.remove("updated_at_ms");
    match obj.get("host").and_then(|h| h.as_str()).map(normalise) {
        Some(h) if h != host => {
            return Err(ApiError::bad_field("host", format!("the body names {h:?} but the path {host:?}")));
        }
        _ => {
            obj.insert("host".into(), serde_json::Value::String(host.clone()));
        }
    }
    let site: Site = parse_json(&serde_json::to_vec(&value).expect("a JSON value serializes"))?;
    let existed = state.store.get_site(&host).await?.is_some();
    let stored = state.store.upsert_site(&site).await?;
    tracing::info!(site = %stored.site.host, origin = %stored.site.origin, "site written");
    Ok((if existed { StatusCode::OK } else { StatusCode::CREATED }, Json(stored)))
}

pub async fn delete(State(state): State<AppState>, Path(host): Path<String>) -> Result<StatusCode, ApiError> {
    if !state.store.delete_site(&normalise(&host)).await? {
        return Err(ApiError::not_found(format!("no site {host}")));
    }
    tracing::info!(site = %host, "site deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
    use serde_json::{Value, json};

    use crate::api::auth::AGENT_TOKEN_HEADER;
    use crate::api::testing::{ADMIN, AGENT, call, router, state};
    use crate::model::Node;
    use crate::store::{Certificate, Store};

    const SOUTH_TOKEN: &str = "south-node-own-token";
    const NORTH_TOKEN: &str = "north-node-own-token";

    fn hosts(v: &Value, key: &str) -> Vec<String> {
        v.as_array().unwrap().iter().map(|s| s[key].as_str().unwrap().to_string()).collect()
    }

    /// A node's own token reads only the sites of its pool and their
    /// certificates; the agent and admin tokens still read every one.
    #[tokio::test]
    async fn a_node_reads_only_the_sites_and_certificates_of_its_pool() {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        for (name, pool, token) in [("gz-01", "south", SOUTH_TOKEN), ("bj-01", "north", NORTH_TOKEN)] {
            store.create_node(&Node { pool: pool.into(), ..Node::new(name) }, Some(token)).await.unwrap();
        }
        let r = router(state(store.clone()));
        let admin = format!("Bearer {ADMIN}");
        let put = |host: &str, body: Value| {
            let (r, admin, uri) = (r.clone(), admin.clone(), format!("/api/v1/sites/{host}"));
            async move { call(&r, Method::PUT, &uri, &[("authorization", &admin)], Some(body)).await }
        };
        let (s, body) = put("south.test", json!({"origin": "http://o", "pools": ["south"]})).await;
        assert_eq!(s, StatusCode::CREATED, "{body}");
        assert_eq!(put("all.test", json!({"origin": "http://o"})).await.0, StatusCode::CREATED);
        let (s, body) = put("none.test", json!({"origin": "http://o", "pools": []})).await;
        assert_eq!((s, body["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("pools")), "{body}");
        for domain in ["south.test", "all.test"] {
            let pem = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n";
            let key = "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n";
            let cert =
                Certificate { domain: domain.into(), cert_pem: pem.into(), key_pem: key.into(), updated_at_ms: 0 };
            store.upsert_certificate(&cert).await.unwrap();
        }

        let read = |uri: String, token: &'static str| {
            let r = r.clone();
            async move { call(&r, Method::GET, &uri, &[(AGENT_TOKEN_HEADER, token)], None).await }
        };
        let (s, north) = read("/api/v1/sites?node=bj-01".into(), NORTH_TOKEN).await;
        assert_eq!((s, hosts(&north, "host")), (StatusCode::OK, vec!["all.test".to_string()]));
        let (_, certs) = read("/api/v1/certificates?node=bj-01".into(), NORTH_TOKEN).await;
        assert_eq!(hosts(&certs, "domain"), ["all.test"], "no certificate of another pool's site");
        let (s, _) = read("/api/v1/certificates/south.test?node=bj-01".into(), NORTH_TOKEN).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        let (s, _) = read("/api/v1/sites/south.test?node=bj-01".into(), NORTH_TOKEN).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        let (_, south) = read("/api/v1/certificates?node=gz-01".into(), SOUTH_TOKEN).await;
        assert_eq!(hosts(&south, "domain"), ["all.test", "south.test"]);
        let (s, _) = read("/api/v1/certificates?node=gz-01".into(), NORTH_TOKEN).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "a node's token names its own node only");

        let (_, all) = read("/api/v1/sites".into(), AGENT).await;
        assert_eq!(hosts(&all, "host"), ["all.test", "south.test"], "the agent token reads every site");
        let (_, all) = call(&r, Method::GET, "/api/v1/certificates", &[("authorization", &admin)], None).await;
        assert_eq!(hosts(&all, "domain"), ["all.test", "south.test"], "the admin token reads every certificate");
        let (_, site) = read("/api/v1/sites/south.test".into(), AGENT).await;
        // `waf_case_insensitive` at its default (true) is left out, so an older edge reads the site.
        assert_eq!((site["pools"].clone(), site.get("waf_case_insensitive")), (json!(["south"]), None));
    }
}
