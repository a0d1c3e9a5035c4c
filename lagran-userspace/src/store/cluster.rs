//! The control-plane cluster's records (migration 0005): the leadership term,
//! the published route tables and the NS hosts' reports. The election itself
//! (advisory lock, LISTEN/NOTIFY on dedicated connections) lives in the
//! daemon's cluster module, above the store.

use sqlx::Row;

use super::{Backend, DbContext, ReturningOne, Store, StoreError};

/// How many published tables the database keeps (the newest).
pub const KEPT_TABLES: i64 = 16;

/// The leadership term in force (`control_leader`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderTerm {
    pub epoch: u64,
    /// The leader's advertised control API URL.
    pub holder: String,
    pub since_ms: i64,
    /// The leader's last confirmation of its table (its own clock; 0: none yet).
    pub confirmed_at_ms: i64,
}

/// A route table as stored by a leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTable {
    pub epoch: u64,
    pub version: u64,
    pub table_json: String,
}

/// What an NS host last reported on the route-table stream.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NsHostReport {
    pub name: String,
    pub version: u64,
    pub epoch: u64,
    /// DNS queries answered since the NS host started.
    pub queries: u64,
    /// How long before the report its table was last confirmed.
    pub confirmed_ms_ago: i64,
    /// The control process that took the report.
    pub reported_to: String,
    pub reported_at_ms: i64,
}

fn to_i64(v: u64, field: &'static str) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::invalid(field, "above i64::MAX"))
}

fn to_u64(v: i64) -> u64 {
    v.max(0) as u64
}

impl Store {
    /// Starts a new leadership term for `holder` and returns its epoch (one
    /// above the last). Call only while holding the cluster's advisory lock.
    pub async fn begin_leader_term(&self, holder: &str, now_ms: i64) -> Result<u64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO control_leader (id, epoch, holder, since_ms, confirmed_at_ms) VALUES (1, 1, $1, $2, 0) \
             ON CONFLICT (id) DO UPDATE SET epoch = control_leader.epoch + 1, holder = excluded.holder, \
             since_ms = excluded.since_ms, confirmed_at_ms = 0 RETURNING epoch",
        )
        .bind(holder)
        .bind(now_ms)
        .returning_one(self.pool())
        .await
        .ctx(|| format!("starting a leadership term for {holder}"))?;
        let epoch: i64 = row.try_get("epoch").ctx(|| "reading control_leader.epoch".to_string())?;
        Ok(to_u64(epoch))
    }

    /// The leadership term in force, `None` before the first leader.
    pub async fn leader_term(&self) -> Result<Option<LeaderTerm>, StoreError> {
        let row = sqlx::query("SELECT epoch, holder, since_ms, confirmed_at_ms FROM control_leader WHERE id = 1")
            .fetch_optional(self.pool())
            .await
            .ctx(|| "reading the leadership term".to_string())?;
        let Some(row) = row else { return Ok(None) };
        let get = |c: &str| -> Result<i64, StoreError> { row.try_get(c).ctx(|| format!("reading control_leader.{c}")) };
        Ok(Some(LeaderTerm {
            epoch: to_u64(get("epoch")?),
            holder: row.try_get("holder").ctx(|| "reading control_leader.holder".to_string())?,
            since_ms: get("since_ms")?,
            confirmed_at_ms: get("confirmed_at_ms")?,
        }))
    }

    /// Stores a table published under `epoch`, fenced: nothing is stored (and
    /// `false` returned) when `epoch` is no longer the term in force, so a
    /// deposed leader cannot publish. On PostgreSQL the term's row is locked
    /// for the insert, so a takeover waits for it (and then numbers its
    /// versions above it); the standbys are told (`NOTIFY lagran_tables`).
    /// Keeps the newest [`KEPT_TABLES`].
    pub async fn store_route_table(&self, epoch: u64, version: u64, table_json: &str) -> Result<bool, StoreError> {
        let (e, v) = (to_i64(epoch, "epoch")?, to_i64(version, "version")?);
        let lock = match self.backend() {
            Backend::Postgres => " FOR SHARE",
            Backend::Sqlite => "",
        };
        let mut tx = self.begin().await?;
        let sql = format!(
            "INSERT INTO route_tables (version, epoch, table_json, published_at_ms) SELECT $1, $2, $3, $4 \
             WHERE EXISTS (SELECT 1 FROM control_leader WHERE id = 1 AND epoch = $2{lock})"
        );
        let done = sqlx::query(&sql)
            .bind(v)
            .bind(e)
            .bind(table_json)
            .bind(super::now_ms())
            .execute(&mut *tx)
            .await
            .ctx(|| format!("storing route table {version} of epoch {epoch}"))?;
        if done.rows_affected() == 0 {
            tx.rollback().await.ctx(|| "abandoning a fenced table".to_string())?;
            return Ok(false);
        }
        sqlx::query(
            "DELETE FROM route_tables WHERE version < \
             (SELECT MIN(version) FROM (SELECT version FROM route_tables ORDER BY version DESC LIMIT $1) AS kept)",
        )
        .bind(KEPT_TABLES)
        .execute(&mut *tx)
        .await
        .ctx(|| "pruning old route tables".to_string())?;
        if self.backend() == Backend::Postgres {
            sqlx::query("SELECT pg_notify('lagran_tables', $1)")
                .bind(format!("{epoch}/{version}"))
                .execute(&mut *tx)
                .await
                .ctx(|| "telling the standbys about a new table".to_string())?;
        }
        tx.commit().await.ctx(|| format!("committing route table {version}"))?;
        Ok(true)
    }

    /// The newest stored table (highest epoch, then version).
    pub async fn latest_route_table(&self) -> Result<Option<StoredTable>, StoreError> {
        let row = sqlx::query(
            "SELECT epoch, version, table_json FROM route_tables ORDER BY epoch DESC, version DESC LIMIT 1",
        )
        .fetch_optional(self.pool())
        .await
        .ctx(|| "reading the newest route table".to_string())?;
        let Some(row) = row else { return Ok(None) };
        let epoch: i64 = row.try_get("epoch").ctx(|| "reading route_tables.epoch".to_string())?;
        let version: i64 = row.try_get("version").ctx(|| "reading route_tables.version".to_string())?;
        Ok(Some(StoredTable {
            epoch: to_u64(epoch),
            version: to_u64(version),
            table_json: row.try_get("table_json").ctx(|| "reading route_tables.table_json".to_string())?,
        }))
    }

    /// The highest version any leader stored (0: none).
    pub async fn max_route_table_version(&self) -> Result<u64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM route_tables")
            .fetch_one(self.pool())
            .await
            .ctx(|| "reading the highest stored version".to_string())?;
        let v: i64 = row.try_get("v").ctx(|| "reading the highest stored version".to_string())?;
        Ok(to_u64(v))
    }

    /// Tells the leader that the records changed (`NOTIFY lagran_changes`);
    /// nothing to do on SQLite, where the writer is the leader.
    pub async fn notify_change(&self, what: &str) -> Result<(), StoreError> {
        if self.backend() == Backend::Postgres {
            sqlx::query("SELECT pg_notify('lagran_changes', $1)")
                .bind(what)
                .execute(self.pool())
                .await
                .ctx(|| "telling the leader about a change".to_string())?;
        }
        Ok(())
    }

    /// Records (replaces) an NS host's report.
    pub async fn record_ns_report(&self, r: &NsHostReport) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO ns_host_reports (name, version, epoch, queries, confirmed_ms_ago, reported_to, reported_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name) DO UPDATE SET version = excluded.version, \
             epoch = excluded.epoch, queries = excluded.queries, confirmed_ms_ago = excluded.confirmed_ms_ago, \
             reported_to = excluded.reported_to, reported_at_ms = excluded.reported_at_ms \
             WHERE ns_host_reports.reported_at_ms <= excluded.reported_at_ms",
        )
        .bind(&r.name)
        .bind(to_i64(r.version, "version")?)
        .bind(to_i64(r.epoch, "epoch")?)
        .bind(to_i64(r.queries, "queries")?)
        .bind(r.confirmed_ms_ago)
        .bind(&r.reported_to)
        .bind(r.reported_at_ms)
        .execute(self.pool())
        .await
        .ctx(|| format!("recording the report of NS host {:?}", r.name))?;
        Ok(())
    }

    /// Deletes the reports last made before `before_ms`; how many.
    pub async fn prune_ns_reports(&self, before_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM ns_host_reports WHERE reported_at_ms < $1")
            .bind(before_ms)
            .execute(self.pool())
            .await
            .ctx(|| "deleting old NS-host reports".to_string())?;
        Ok(done.rows_affected())
    }

    /// Every NS host's last report, by name.
    pub async fn list_ns_reports(&self) -> Result<Vec<NsHostReport>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, version, epoch, queries, confirmed_ms_ago, reported_to, reported_at_ms FROM ns_host_reports \
             ORDER BY name",
        )
        .fetch_all(self.pool())
        .await
        .ctx(|| "listing the NS hosts".to_string())?;
        rows.iter()
            .map(|row| {
                let c = super::Cols::keyed(row, "NS host", "name")?;
                Ok(NsHostReport {
                    name: c.key().to_string(),
                    version: to_u64(c.get("version")?),
                    epoch: to_u64(c.get("epoch")?),
                    queries: to_u64(c.get("queries")?),
                    confirmed_ms_ago: c.get("confirmed_ms_ago")?,
                    reported_to: c.get("reported_to")?,
                    reported_at_ms: c.get("reported_at_ms")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn terms_fence_tables(store: Store) {
        assert_eq!(store.leader_term().await.unwrap(), None);
        let e1 = store.begin_leader_term("http://a", 1).await.unwrap();
        assert!(store.store_route_table(e1, 10, "{\"v\":10}").await.unwrap());
        let e2 = store.begin_leader_term("http://b", 2).await.unwrap();
        assert_eq!(e2, e1 + 1, "each term takes the next epoch");
        assert!(!store.store_route_table(e1, 11, "{}").await.unwrap(), "the deposed leader is fenced");
        assert_eq!(store.max_route_table_version().await.unwrap(), 10);
        assert!(store.store_route_table(e2, 11, "{\"v\":11}").await.unwrap());
        for v in 12..(12 + KEPT_TABLES as u64) {
            assert!(store.store_route_table(e2, v, "{}").await.unwrap());
        }
        let latest = store.latest_route_table().await.unwrap().unwrap();
        assert_eq!((latest.epoch, latest.version), (e2, 11 + KEPT_TABLES as u64));
        let kept: i64 = sqlx::query("SELECT COUNT(*) AS n FROM route_tables")
            .fetch_one(store.pool())
            .await
            .unwrap()
            .try_get("n")
            .unwrap();
        assert_eq!(kept, KEPT_TABLES, "old tables are pruned");
        let term = store.leader_term().await.unwrap().unwrap();
        assert_eq!((term.epoch, term.holder.as_str()), (e2, "http://b"));

        let mut r = NsHostReport {
            name: "ns1".into(),
            version: 5,
            epoch: 2,
            queries: 100,
            confirmed_ms_ago: 20,
            reported_to: "http://a".into(),
            reported_at_ms: 1,
        };
        store.record_ns_report(&r).await.unwrap();
        r.version = 6;
        store.record_ns_report(&r).await.unwrap();
        assert_eq!(store.list_ns_reports().await.unwrap(), vec![r.clone()]);
        let old = NsHostReport { name: "retired".into(), reported_at_ms: 0, ..r.clone() };
        store.record_ns_report(&old).await.unwrap();
        assert_eq!(store.list_ns_reports().await.unwrap().len(), 2);
        assert_eq!(store.prune_ns_reports(1).await.unwrap(), 1, "only the report older than the cut");
        assert_eq!(store.list_ns_reports().await.unwrap(), vec![r]);
        assert_eq!(store.prune_ns_reports(1).await.unwrap(), 0);
        store.notify_change("everything").await.unwrap();
    }

    #[tokio::test]
    async fn sqlite_terms_fence_tables() {
        terms_fence_tables(Store::connect("sqlite::memory:").await.unwrap()).await;
    }

    #[tokio::test]
    async fn postgres_terms_fence_tables() {
        let Some(pg) = crate::testkit::TempPostgres::shared_or_skip("store::cluster") else { return };
        terms_fence_tables(Store::connect(&pg.fresh_database().await).await.unwrap()).await;
    }
}
