//! Purges from the control plane, applied to the cache and confirmed.
//!
//! On each poll of the control plane ([`crate::remote`]) the edge asks
//! `GET {control_url}/api/v1/nodes/{node_name}/purges?after=ID&since_ms=MS` for
//! the purges after the last one it applied (`ID`) and no older than its
//! oldest cached object, less a minute for clocks that disagree (`MS`: a purge
//! asked before everything the cache holds arrived has nothing to remove).
//! Each purge is applied to the memory and disk tiers, then confirmed with
//! `POST {control_url}/api/v1/nodes/{node_name}/purges/{id}` and
//! `{"removed": N}`; the answer's `last_id` says up to where it was complete.
//!
//! The last id applied is kept in `purge-cursor` in the cache directory, so an
//! edge that was offline applies what it missed when it returns. Without a
//! disk tier the cache starts empty at every start, and so does the cursor.
//!
//! A purge names a site (a host or `*.suffix`) and one of: paths (each with
//! every variant stored for it), a path prefix, or tags (the origin's
//! `Surrogate-Key` / `Cache-Tag` values, see [`crate::cache`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use tracing::{info, warn};

use crate::Edge;
use crate::control_api::{ControlApi, ControlApiError};

/// The file, in the cache directory, holding the last purge id applied.
pub const CURSOR_FILE: &str = "purge-cursor";
/// How far the edge's and the control plane's clocks may disagree.
const CLOCK_SLACK: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum PurgeError {
    #[error(transparent)]
    Control(#[from] ControlApiError),
    #[error("the control plane's purges are not usable JSON")]
    Json(#[source] serde_json::Error),
    #[error("cannot record the last purge applied in {path}")]
    Cursor { path: PathBuf, source: io::Error },
}

/// One purge as the control plane sends it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PurgeOrder {
    pub id: i64,
    pub site: String,
    #[serde(default)]
    pub urls: Option<Vec<String>>,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    pub created_at_ms: i64,
}

#[derive(Debug, Deserialize)]
struct Pending {
    purges: Vec<PurgeOrder>,
    last_id: i64,
}

/// A cache key's host and its path with query (without the Vary part).
fn split_key(key: &str) -> (&str, &str) {
    let url = key.split('\n').next().unwrap_or(key);
    match url.find('/') {
        Some(i) => url.split_at(i),
        None => (url, ""),
    }
}

impl PurgeOrder {
    /// Whether the object stored under `key`, tagged `tags`, is to go.
    pub fn matches(&self, key: &str, tags: &[String]) -> bool {
        let (host, path) = split_key(key);
        if !crate::host::matches(&self.site, host) {
            return false;
        }
        if let Some(urls) = &self.urls {
            return urls.iter().any(|u| u == path);
        }
        if let Some(prefix) = &self.prefix {
            return path.starts_with(prefix.as_str());
        }
        self.tags.as_ref().is_some_and(|wanted| wanted.iter().any(|t| tags.contains(t)))
    }
}

/// The last purge id applied, kept in a file when there is a cache directory.
#[derive(Debug)]
pub struct Cursor {
    file: Option<PathBuf>,
    last: i64,
}

impl Cursor {
    /// The cursor kept in `dir` (0 when there is none yet or it is unreadable).
    pub fn load(dir: Option<&Path>) -> Cursor {
        let file = dir.map(|d| d.join(CURSOR_FILE));
        let last = file
            .as_deref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0);
        Cursor { file, last }
    }

    pub fn last(&self) -> i64 {
        self.last
    }

    /// Records `id` as applied (written to a temporary file, then renamed).
    pub fn advance(&mut self, id: i64) -> Result<(), PurgeError> {
        if id <= self.last {
            return Ok(());
        }
        if let Some(path) = &self.file {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, format!("{id}\n"))
                .and_then(|()| std::fs::rename(&tmp, path))
                .map_err(|source| PurgeError::Cursor { path: path.clone(), source })?;
        }
        self.last = id;
        Ok(())
    }
}

/// Applies `order` to both tiers of the cache; returns the objects removed.
pub async fn apply(edge: &Arc<Edge>, order: PurgeOrder) -> usize {
    let edge = edge.clone();
    // Deleting many files may wait for the disk writer's queue.
    tokio::task::spawn_blocking(move || edge.cache.purge(|key, tags| order.matches(key, tags)))
        .await
        .unwrap_or_default()
}

/// Fetches, applies and confirms the purges an edge has not applied yet.
pub struct Purger {
    api: ControlApi,
    cursor: Cursor,
}

impl Purger {
    pub fn new(api: ControlApi, cursor: Cursor) -> Purger {
        Purger { api, cursor }
    }

    /// One round; returns how many purges were applied.
    pub async fn sync(&mut self, edge: &Arc<Edge>) -> Result<usize, PurgeError> {
        let mut applied = 0;
        loop {
            let since = edge.cache.oldest().unwrap_or_else(SystemTime::now) - CLOCK_SLACK;
            let since_ms = since.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
            let body = self.api.pending_purges(self.cursor.last(), since_ms).await?;
            let pending: Pending = serde_json::from_slice(&body).map_err(PurgeError::Json)?;
            let more = pending.purges.last().is_some_and(|p| p.id < pending.last_id);
            for order in pending.purges {
                let id = order.id;
                let site = order.site.clone();
                let removed = apply(edge, order).await;
                self.api.confirm_purge(id, removed).await?;
                info!(id, %site, removed, "purge applied");
                self.cursor.advance(id)?;
                applied += 1;
            }
            if !more {
                self.cursor.advance(pending.last_id)?;
                return Ok(applied);
            }
        }
    }
}

/// Runs one round, logging a failure (the next poll tries again).
pub async fn sync_logged(purger: &mut Purger, edge: &Arc<Edge>) {
    if let Err(e) = purger.sync(edge).await {
        warn!(error = %crate::error_chain(&e), "purges from the control plane not applied; retried at the next poll");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(json: &str) -> PurgeOrder {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn orders_match_by_site_and_url_prefix_or_tag() {
        let urls = order(r#"{"id":1,"site":"cdn.test","urls":["/a?x=1","/b"],"created_at_ms":0}"#);
        assert!(urls.matches("cdn.test/a?x=1", &[]));
        assert!(urls.matches("cdn.test/b\naccept-language:fr", &[]), "every variant of the URL");
        assert!(!urls.matches("cdn.test/a", &[]) && !urls.matches("cdn.test/b/c", &[]));
        assert!(!urls.matches("other.test/b", &[]), "another site's objects stay");

        let prefix = order(r#"{"id":2,"site":"*.wild.test","prefix":"/img/","created_at_ms":0}"#);
        assert!(prefix.matches("a.wild.test/img/x.png", &[]));
        assert!(!prefix.matches("a.wild.test/css/x.css", &[]) && !prefix.matches("wild.test/img/x", &[]));

        let tags = order(r#"{"id":3,"site":"cdn.test","tags":["p7","home"],"created_at_ms":0}"#);
        assert!(tags.matches("cdn.test/x", &["home".into()]));
        assert!(!tags.matches("cdn.test/x", &["p8".into()]) && !tags.matches("cdn.test/x", &[]));
    }

    #[test]
    fn the_cursor_survives_a_restart_and_never_goes_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut cursor = Cursor::load(Some(dir.path()));
        assert_eq!(cursor.last(), 0);
        cursor.advance(7).unwrap();
        cursor.advance(3).unwrap();
        assert_eq!(Cursor::load(Some(dir.path())).last(), 7);
        let mut memory = Cursor::load(None);
        memory.advance(4).unwrap();
        assert_eq!(memory.last(), 4);
    }

    #[tokio::test]
    async fn a_purge_by_tag_empties_both_tiers_across_a_restart() {
        use crate::cache::{Cache, CachedObject};
        use hyper::header::{HeaderMap, HeaderValue};
        let object = |primary: &str, tags: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert("surrogate-key", HeaderValue::from_static(tags));
            Arc::new(CachedObject::fresh(primary, headers, bytes::Bytes::from_static(b"body").into()))
        };
        let dir = tempfile::tempdir().unwrap();
        {
            let cache = Cache::with_disk(1 << 20, 1 << 16, dir.path(), 1 << 20).unwrap();
            cache.insert(&HeaderMap::new(), object("cdn.test/a", "p7 home"));
            cache.insert(&HeaderMap::new(), object("cdn.test/b", "p8,home"));
            cache.insert(&HeaderMap::new(), object("cdn.test/c", "p9"));
            cache.flush().await;
        }
        let cache = Cache::with_disk(1 << 20, 1 << 16, dir.path(), 1 << 20).unwrap();
        assert!(cache.get("cdn.test/a").await.is_some(), "a is read back into memory; b stays on disk only");
        let home = order(r#"{"id":1,"site":"cdn.test","tags":["home"],"created_at_ms":0}"#);
        assert_eq!(cache.purge(|k, t| home.matches(k, t)), 2, "a (in both tiers) and b (on disk) counted once each");
        cache.flush().await;
        assert!(cache.get("cdn.test/a").await.is_none() && cache.get("cdn.test/b").await.is_none());
        assert!(cache.get("cdn.test/c").await.is_some());
        let reopened = Cache::with_disk(1 << 20, 1 << 16, dir.path(), 1 << 20).unwrap();
        assert_eq!(reopened.disk_usage().0, 1, "the purged files are gone from disk");
        assert!(reopened.oldest().is_some_and(|t| t <= SystemTime::now()));
    }
}
