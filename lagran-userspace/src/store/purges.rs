//! Cache purges: what an operator asked the edges to drop from their caches,
//! in the order asked (ids grow), and which edge applied each one, when, and
//! how many objects it removed.
//!
//! Edges read the purges after the last id they applied, so an edge that was
//! offline applies what it missed when it returns.

use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Cols, DbContext, ReturningOne, Store, StoreError, now_ms, validate};

/// The most targets (URLs or tags) one purge may name.
pub const MAX_TARGETS: usize = 1000;
/// The most purges one read returns.
pub const MAX_PAGE: usize = 500;

/// What a purge removes from one site's cached objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// These paths (with their query), every variant of each.
    Urls(Vec<String>),
    /// Every path that starts with this.
    Prefix(String),
    /// Every object the origin tagged with one of these (`Surrogate-Key`, `Cache-Tag`).
    Tags(Vec<String>),
}

impl Target {
    fn kind(&self) -> &'static str {
        match self {
            Target::Urls(_) => "urls",
            Target::Prefix(_) => "prefix",
            Target::Tags(_) => "tags",
        }
    }

    fn targets_json(&self) -> String {
        let list = match self {
            Target::Urls(v) | Target::Tags(v) => v.clone(),
            Target::Prefix(p) => vec![p.clone()],
        };
        serde_json::to_string(&list).expect("strings serialize")
    }

    /// Checks the paths and tags (the API turns full URLs into paths first).
    pub fn validate(&self) -> Result<(), StoreError> {
        let path = |field: &'static str, p: &str| {
            if !p.starts_with('/') || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(StoreError::invalid(field, format!("{p:?} is not a path (it starts with `/`)")));
            }
            Ok(())
        };
        match self {
            Target::Urls(urls) => {
                count("urls", urls.len())?;
                urls.iter().try_for_each(|u| path("urls", u))
            }
            Target::Prefix(p) => path("prefix", p),
            Target::Tags(tags) => {
                count("tags", tags.len())?;
                for t in tags {
                    if t.is_empty() || t.contains(',') || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                        return Err(StoreError::invalid("tags", format!("{t:?} is not one tag")));
                    }
                }
                Ok(())
            }
        }
    }
}

fn count(field: &'static str, n: usize) -> Result<(), StoreError> {
    match n {
        0 => Err(StoreError::invalid(field, "names nothing")),
        n if n > MAX_TARGETS => Err(StoreError::invalid(field, format!("{n} entries: at most {MAX_TARGETS}"))),
        _ => Ok(()),
    }
}

/// A stored purge. Serializes as `{"id", "site", "urls"|"prefix"|"tags", "created_at_ms"}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Purge {
    pub id: i64,
    pub site: String,
    #[serde(flatten)]
    pub target: Target,
    pub created_at_ms: i64,
}

/// One edge's confirmation of a purge.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Confirmation {
    pub node: String,
    pub confirmed_at_ms: i64,
    /// Cached objects the edge removed.
    pub removed: u64,
}

const PURGE_COLUMNS: &str = "id, site, kind, targets, created_at_ms";

fn purge_from_row(row: &AnyRow) -> Result<Purge, StoreError> {
    let id: i64 = row.try_get("id").ctx(|| "reading the id of a purge".to_string())?;
    let c = Cols::with_key(row, "purge", id.to_string());
    let kind: String = c.get("kind")?;
    let text: String = c.get("targets")?;
    let mut list: Vec<String> =
        serde_json::from_str(&text).map_err(|e| c.corrupt("targets", format!("{text:?} is not a JSON list: {e}")))?;
    let target = match kind.as_str() {
        "urls" => Target::Urls(list),
        "tags" => Target::Tags(list),
        "prefix" if list.len() == 1 => Target::Prefix(list.remove(0)),
        _ => return Err(c.corrupt("kind", format!("{kind:?} with {} targets", list.len()))),
    };
    Ok(Purge { id, site: c.get("site")?, target, created_at_ms: c.get("created_at_ms")? })
}

impl Store {
    /// Records a purge of `site`'s cached objects; returns it with its id.
    pub async fn create_purge(&self, site: &str, target: Target) -> Result<Purge, StoreError> {
        validate::dns_name("site", site.strip_prefix("*.").unwrap_or(site))?;
        target.validate()?;
        let row = sqlx::query(&format!(
            "INSERT INTO purges (site, kind, targets, created_at_ms) VALUES ($1, $2, $3, $4) RETURNING {PURGE_COLUMNS}"
        ))
        .bind(site)
        .bind(target.kind())
        .bind(target.targets_json())
        .bind(now_ms())
        .returning_one(self.pool())
        .await
        .ctx(|| format!("recording a purge of {site:?}"))?;
        purge_from_row(&row)
    }

    /// The purge `id`, `None` when there is none.
    pub async fn get_purge(&self, id: i64) -> Result<Option<Purge>, StoreError> {
        let row = sqlx::query(&format!("SELECT {PURGE_COLUMNS} FROM purges WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading purge {id}"))?;
        row.as_ref().map(purge_from_row).transpose()
    }

    /// Up to [`MAX_PAGE`] purges after `after` created at or after
    /// `since_ms`, by id; and the highest purge id there is (0: none).
    pub async fn purges_after(&self, after: i64, since_ms: i64) -> Result<(Vec<Purge>, i64), StoreError> {
        let mut tx = self.begin_read().await?;
        let rows = sqlx::query(&format!(
            "SELECT {PURGE_COLUMNS} FROM purges WHERE id > $1 AND created_at_ms >= $2 ORDER BY id LIMIT {MAX_PAGE}"
        ))
        .bind(after)
        .bind(since_ms)
        .fetch_all(&mut *tx)
        .await
        .ctx(|| format!("listing the purges after {after}"))?;
        let purges = rows.iter().map(purge_from_row).collect::<Result<Vec<_>, _>>()?;
        let last: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM purges")
            .fetch_one(&mut *tx)
            .await
            .ctx(|| "reading the last purge id".to_string())?;
        tx.commit().await.ctx(|| "listing purges".to_string())?;
        Ok((purges, last.unwrap_or(0)))
    }

    /// Records that `node` applied purge `id`, removing `removed` objects (a
    /// second confirmation replaces the first).
    pub async fn confirm_purge(&self, id: i64, node: &str, removed: u64) -> Result<Confirmation, StoreError> {
        let mut tx = self.begin().await?;
        let purge = sqlx::query("SELECT id FROM purges WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| format!("reading purge {id}"))?;
        if purge.is_none() {
            return Err(StoreError::not_found("purge", id.to_string()));
        }
        let known = sqlx::query("SELECT name FROM nodes WHERE name = $1")
            .bind(node)
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| format!("reading node {node:?}"))?;
        if known.is_none() {
            return Err(StoreError::not_found("node", node));
        }
        let removed_db = i64::try_from(removed).map_err(|_| StoreError::invalid("removed", "is too large"))?;
        let confirmed_at_ms = now_ms();
        sqlx::query(
            "INSERT INTO purge_confirmations (purge_id, node, confirmed_at_ms, removed) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (purge_id, node) DO UPDATE SET \
             confirmed_at_ms = excluded.confirmed_at_ms, removed = excluded.removed",
        )
        .bind(id)
        .bind(node)
        .bind(confirmed_at_ms)
        .bind(removed_db)
        .execute(&mut *tx)
        .await
        .ctx(|| format!("confirming purge {id} for {node:?}"))?;
        tx.commit().await.ctx(|| format!("confirming purge {id}"))?;
        Ok(Confirmation { node: node.to_owned(), confirmed_at_ms, removed })
    }

    /// Each edge's confirmation of purge `id`, by node name.
    pub async fn purge_confirmations(&self, id: i64) -> Result<Vec<Confirmation>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, confirmed_at_ms, removed FROM purge_confirmations WHERE purge_id = $1 ORDER BY node",
        )
        .bind(id)
        .fetch_all(self.pool())
        .await
        .ctx(|| format!("reading the confirmations of purge {id}"))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let c = Cols::keyed(row, "purge confirmation", "node")?;
            out.push(Confirmation {
                node: c.key().to_owned(),
                confirmed_at_ms: c.get("confirmed_at_ms")?,
                removed: c.int("removed")?,
            });
        }
        out.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn purges_are_logged_read_after_a_cursor_and_confirmed(store: Store) {
        store.create_node(&crate::model::Node::new("edge-a"), None).await.unwrap();
        store.create_node(&crate::model::Node::new("edge-b"), None).await.unwrap();
        let urls = store.create_purge("cdn.test", Target::Urls(vec!["/a?x=1".into(), "/b".into()])).await.unwrap();
        let tags = store.create_purge("*.wild.test", Target::Tags(vec!["product-7".into()])).await.unwrap();
        let prefix = store.create_purge("cdn.test", Target::Prefix("/img/".into())).await.unwrap();
        assert!(urls.id < tags.id && tags.id < prefix.id, "ids grow in the order asked");
        assert_eq!(store.get_purge(tags.id).await.unwrap().as_ref(), Some(&tags));
        assert_eq!(store.get_purge(prefix.id + 1).await.unwrap(), None);

        let (all, last) = store.purges_after(0, 0).await.unwrap();
        assert_eq!((all, last), (vec![urls.clone(), tags.clone(), prefix.clone()], prefix.id));
        let (after, last) = store.purges_after(urls.id, 0).await.unwrap();
        assert_eq!((after.len(), last), (2, prefix.id));
        let (newer, last) = store.purges_after(0, prefix.created_at_ms + 1).await.unwrap();
        assert_eq!((newer, last), (vec![], prefix.id), "purges older than `since` are left out, the last id is not");

        store.confirm_purge(tags.id, "edge-b", 3).await.unwrap();
        store.confirm_purge(tags.id, "edge-a", 0).await.unwrap();
        store.confirm_purge(tags.id, "edge-a", 2).await.unwrap();
        let confirmed = store.purge_confirmations(tags.id).await.unwrap();
        let seen: Vec<_> = confirmed.iter().map(|c| (c.node.as_str(), c.removed)).collect();
        assert_eq!(seen, [("edge-a", 2), ("edge-b", 3)], "one row per edge, the last confirmation kept");
        assert!(store.purge_confirmations(urls.id).await.unwrap().is_empty());
        let missing = store.confirm_purge(prefix.id + 9, "edge-a", 0).await.unwrap_err();
        assert!(matches!(missing, StoreError::NotFound { what: "purge", .. }), "{missing}");
        let stranger = store.confirm_purge(urls.id, "nobody", 0).await.unwrap_err();
        assert!(matches!(stranger, StoreError::NotFound { what: "node", .. }), "{stranger}");
    }

    async fn bad_purges_name_their_field(store: Store) {
        let bad = [
            ("", Target::Urls(vec!["/a".into()]), "site"),
            ("cdn.test", Target::Urls(vec![]), "urls"),
            ("cdn.test", Target::Urls(vec!["a".into()]), "urls"),
            ("cdn.test", Target::Prefix("img/".into()), "prefix"),
            ("cdn.test", Target::Tags(vec!["a b".into()]), "tags"),
            ("cdn.test", Target::Tags(vec!["x".into(); MAX_TARGETS + 1]), "tags"),
        ];
        for (site, target, field) in bad {
            match store.create_purge(site, target.clone()).await {
                Err(StoreError::Invalid { field: f, .. }) => assert_eq!(f, field, "{target:?}"),
                other => panic!("{target:?} gave {other:?}"),
            }
        }
        assert_eq!(store.purges_after(0, 0).await.unwrap(), (vec![], 0), "nothing was written");
    }

    #[tokio::test]
    async fn sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&crate::testkit::temp_sqlite_url(dir.path())).await.unwrap();
        purges_are_logged_read_after_a_cursor_and_confirmed(store.clone()).await;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&crate::testkit::temp_sqlite_url(dir.path())).await.unwrap();
        bad_purges_name_their_field(store).await;
    }

    #[tokio::test]
    async fn postgres() {
        let Some(pg) = crate::testkit::TempPostgres::shared_or_skip("store::purges::tests::postgres") else {
            return;
        };
        purges_are_logged_read_after_a_cursor_and_confirmed(Store::connect(&pg.fresh_database().await).await.unwrap())
            .await;
        bad_purges_name_their_field(Store::connect(&pg.fresh_database().await).await.unwrap()).await;
    }
}
