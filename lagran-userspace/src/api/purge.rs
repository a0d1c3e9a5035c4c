//! `/api/v1/purge`: dropping objects from every edge's cache.
//!
//! - `POST /api/v1/purge` (admin) with `{"site": HOST}` and one of `"urls":
//!   [...]` (full URLs of the site or its paths), `"prefix": "/path/"` or
//!   `"tags": [...]` (the origin's `Surrogate-Key` / `Cache-Tag` values):
//!   recorded, answered `202` with the purge and its `id`. A bad field is `422`
//!   naming it. The site is a host name or `*.suffix`; full URLs must be of it.
//! - `GET /api/v1/purge/{id}`: the purge, each edge's confirmation, and the
//!   edges still to confirm (`pending`): the nodes that serve the site (those
//!   of its `pools`, every node when it has none or is not stored) and have
//!   not confirmed.
//! - `GET /api/v1/nodes/{name}/purges?after=ID&since_ms=MS` (the node's
//!   token): the purges an edge has not applied yet, after the last id it
//!   applied and no older than its oldest cached object, with the last id
//!   there is (`last_id`) so an edge with nothing to apply moves past them.
//! - `POST /api/v1/nodes/{name}/purges/{id}` with `{"removed": N}`: the
//!   edge's confirmation.
//!
//! Every edge applies every purge it reads (a site may also be in an edge's
//! own file), so an edge outside the site's pools may confirm one too.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use lagran_site::Site;

use super::AppState;
use super::error::{ApiError, parse_json};
use crate::model::Node;
use crate::store::purges::{Confirmation, Purge, Target};

/// The body of `POST /api/v1/purge`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    pub site: String,
    pub urls: Option<Vec<String>>,
    pub prefix: Option<String>,
    pub tags: Option<Vec<String>>,
}

/// A purge with each edge's confirmation and the edges yet to confirm.
#[derive(Debug, Serialize)]
pub struct PurgeStatus {
    #[serde(flatten)]
    pub purge: Purge,
    pub confirmations: Vec<Confirmation>,
    /// Names of the nodes serving the site that have not confirmed, sorted.
    pub pending: Vec<String>,
}

/// The nodes of `nodes` that serve `site` (every node when the site is not
/// stored) and are not among `confirmations`, sorted by name.
fn pending_nodes(nodes: &[Node], site: Option<&Site>, confirmations: &[Confirmation]) -> Vec<String> {
    let mut pending: Vec<String> = nodes
        .iter()
        .filter(|n| site.is_none_or(|s| s.served_by_pool(&n.pool)))
        .filter(|n| !confirmations.iter().any(|c| c.node == n.name))
        .map(|n| n.name.clone())
        .collect();
    pending.sort();
    pending
}

/// `cdn.Example.com.` → `cdn.example.com`.
fn normalise(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` is served by the site `pattern` (a name, or `*.suffix`:
/// one label before the suffix, as the edge reads it).
fn of_site(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.split_once('.').is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
        None => host == pattern,
    }
}

/// `url` as a path of `site`: a path as given, a full URL's path and query
/// when its host is the site's.
fn site_path(site: &str, url: &str) -> Result<String, ApiError> {
    if url.starts_with('/') {
        return Ok(url.to_owned());
    }
    let bad = |why: String| ApiError::bad_field("urls", format!("{url:?}: {why}"));
    let uri: axum::http::Uri = url.parse().map_err(|e| bad(format!("not a URL: {e}")))?;
    let (Some("http" | "https"), Some(host)) = (uri.scheme_str(), uri.host()) else {
        return Err(bad("neither a path nor an http(s) URL".into()));
    };
    if !of_site(site, &normalise(host)) {
        return Err(bad(format!("is not of the site {site:?}")));
    }
    Ok(uri.path_and_query().map_or("/", |pq| pq.as_str()).to_owned())
}

/// The request's target: exactly one of `urls`, `prefix`, `tags`.
fn target(site: &str, req: PurgeRequest) -> Result<Target, ApiError> {
    match (req.urls, req.prefix, req.tags) {
        (Some(urls), None, None) => {
            Ok(Target::Urls(urls.iter().map(|u| site_path(site, u)).collect::<Result<_, _>>()?))
        }
        (None, Some(prefix), None) => Ok(Target::Prefix(prefix)),
        (None, None, Some(tags)) => Ok(Target::Tags(tags)),
        (None, None, None) => Err(ApiError::bad_field("urls", "give one of `urls`, `prefix` or `tags`")),
        _ => Err(ApiError::bad_field("prefix", "give only one of `urls`, `prefix` or `tags`")),
    }
}

/// `POST /api/v1/purge`.
pub async fn create(State(state): State<AppState>, body: Bytes) -> Result<(StatusCode, Json<Purge>), ApiError> {
    let req: PurgeRequest = parse_json(&body)?;
    let site = normalise(&req.site);
    let target = target(&site, req)?;
    let purge = state.store.create_purge(&site, target).await?;
    tracing::info!(id = purge.id, site = %purge.site, target = ?purge.target, "purge recorded");
    Ok((StatusCode::ACCEPTED, Json(purge)))
}

fn purge_id(id: &str) -> Result<i64, ApiError> {
    id.parse().map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, format!("{id:?} is not a purge id")))
}

/// `GET /api/v1/purge/{id}`.
pub async fn get_one(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<PurgeStatus>, ApiError> {
    let id = purge_id(&id)?;
    let Some(purge) = state.store.get_purge(id).await? else {
        return Err(ApiError::not_found(format!("no purge {id}")));
    };
    let confirmations = state.store.purge_confirmations(id).await?;
    let site = state.store.get_site(&purge.site).await?.map(|s| s.site);
    let nodes = state.store.list_nodes().await?;
    let pending = pending_nodes(&nodes, site.as_ref(), &confirmations);
    Ok(Json(PurgeStatus { purge, confirmations, pending }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingQuery {
    #[serde(default)]
    pub after: i64,
    #[serde(default)]
    pub since_ms: i64,
}

#[derive(Debug, Serialize)]
pub struct Pending {
    pub purges: Vec<Purge>,
    pub last_id: i64,
}

/// `GET /api/v1/nodes/{name}/purges`.
pub async fn pending(
    State(state): State<AppState>,
    Path(_name): Path<String>,
    Query(q): Query<PendingQuery>,
) -> Result<Json<Pending>, ApiError> {
    let (purges, last_id) = state.store.purges_after(q.after, q.since_ms).await?;
    Ok(Json(Pending { purges, last_id }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmRequest {
    pub removed: u64,
}

/// `POST /api/v1/nodes/{name}/purges/{id}`.
pub async fn confirm(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Confirmation>, ApiError> {
    let id = purge_id(&id)?;
    let req: ConfirmRequest = parse_json(&body)?;
    let confirmation = state.store.confirm_purge(id, &name, req.removed).await?;
    tracing::debug!(id, node = %name, removed = req.removed, "purge confirmed");
    Ok(Json(confirmation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_paths_of_the_site() {
        assert_eq!(site_path("cdn.test", "/a?b=1").unwrap(), "/a?b=1");
        assert_eq!(site_path("cdn.test", "https://CDN.test/a/b?c").unwrap(), "/a/b?c");
        assert_eq!(site_path("*.wild.test", "http://x.wild.test/p").unwrap(), "/p");
        for bad in ["https://other.test/a", "ftp://cdn.test/a", "a/b", "https://wild.test/", "http://a.b.wild.test/"] {
            let site = if bad.contains("wild") { "*.wild.test" } else { "cdn.test" };
            let e = site_path(site, bad).unwrap_err();
            assert_eq!((e.status, e.field.as_deref()), (StatusCode::UNPROCESSABLE_ENTITY, Some("urls")), "{bad}");
        }
    }

    #[test]
    fn exactly_one_target() {
        let req = |urls: Option<Vec<String>>, prefix: Option<&str>, tags: Option<Vec<String>>| PurgeRequest {
            site: "cdn.test".into(),
            urls,
            prefix: prefix.map(str::to_owned),
            tags,
        };
        assert_eq!(target("cdn.test", req(None, Some("/i/"), None)).unwrap(), Target::Prefix("/i/".into()));
        assert_eq!(
            target("cdn.test", req(None, None, Some(vec!["t".into()]))).unwrap(),
            Target::Tags(vec!["t".into()])
        );
        assert!(target("cdn.test", req(None, None, None)).is_err());
        let both = target("cdn.test", req(Some(vec!["/a".into()]), Some("/b"), None)).unwrap_err();
        assert_eq!(both.status, StatusCode::UNPROCESSABLE_ENTITY);
    }

    /// `pending` lists the nodes of the site's pools (every node for a site
    /// without pools or not stored) until each confirms.
    #[tokio::test]
    async fn the_status_lists_the_edges_still_to_confirm() {
        use crate::api::auth::AGENT_TOKEN_HEADER;
        use crate::api::testing::{ADMIN, AGENT, call, router, state};
        use crate::store::Store;
        use axum::http::Method;
        use serde_json::json;

        let store = Store::connect("sqlite::memory:").await.unwrap();
        for (name, pool) in [("gz-01", "south"), ("sz-01", "south"), ("bj-01", "north")] {
            store.create_node(&Node { pool: pool.into(), ..Node::new(name) }, None).await.unwrap();
        }
        let r = router(state(store.clone()));
        let admin = format!("Bearer {ADMIN}");
        let admin = [("authorization", admin.as_str())];
        let site = json!({"origin": "http://o", "pools": ["south"]});
        assert_eq!(call(&r, Method::PUT, "/api/v1/sites/shop.test", &admin, Some(site)).await.0, StatusCode::CREATED);
        let mut ids = Vec::new();
        for site in ["shop.test", "other.test"] {
            let (s, purge) =
                call(&r, Method::POST, "/api/v1/purge", &admin, Some(json!({"site": site, "prefix": "/"}))).await;
            assert_eq!(s, StatusCode::ACCEPTED, "{purge}");
            ids.push(purge["id"].as_i64().unwrap());
        }
        let status = async |id: i64| call(&r, Method::GET, &format!("/api/v1/purge/{id}"), &admin, None).await.1;
        assert_eq!(status(ids[0]).await["pending"], json!(["gz-01", "sz-01"]), "the nodes of the site's pool");
        assert_eq!(status(ids[1]).await["pending"], json!(["bj-01", "gz-01", "sz-01"]), "not stored: every node");

        let confirm = format!("/api/v1/nodes/sz-01/purges/{}", ids[0]);
        let agent = [(AGENT_TOKEN_HEADER, AGENT)];
        let (s, body) = call(&r, Method::POST, &confirm, &agent, Some(json!({"removed": 3}))).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        let after = status(ids[0]).await;
        assert_eq!(
            (after["pending"].clone(), after["confirmations"][0]["node"].clone()),
            (json!(["gz-01"]), json!("sz-01"))
        );
        let (s, body) =
            call(&r, Method::POST, &confirm.replace("sz-01", "gz-01"), &agent, Some(json!({"removed": 0}))).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert_eq!(status(ids[0]).await["pending"], json!([]), "every edge of the pool confirmed");
    }
}
