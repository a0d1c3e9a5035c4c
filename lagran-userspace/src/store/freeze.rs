//! A rollback's freeze: the held route table, so the freeze and what it holds
//! survive a control-plane restart (table `route_freeze`, at most one row).

use sqlx::Row;

use super::{DbContext, Store, StoreError, now_ms};

/// The held table as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Freeze {
    /// The version the held table was republished under.
    pub version: u64,
    /// The held table, in the route-table stream's JSON form.
    pub table_json: String,
    pub frozen_at_ms: i64,
}

impl Store {
    /// Records (or replaces) the freeze.
    pub async fn save_freeze(&self, version: u64, table_json: &str) -> Result<(), StoreError> {
        let version = i64::try_from(version).map_err(|_| StoreError::invalid("version", "above i64::MAX"))?;
        sqlx::query(
            "INSERT INTO route_freeze (id, version, table_json, frozen_at_ms) VALUES (1, $1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET version = excluded.version, table_json = excluded.table_json, \
             frozen_at_ms = excluded.frozen_at_ms",
        )
        .bind(version)
        .bind(table_json)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .ctx(|| format!("recording the route-table freeze at version {version}"))?;
        Ok(())
    }

    /// The freeze in force, `None` when the table is not frozen.
    pub async fn load_freeze(&self) -> Result<Option<Freeze>, StoreError> {
        let row = sqlx::query("SELECT version, table_json, frozen_at_ms FROM route_freeze WHERE id = 1")
            .fetch_optional(self.pool())
            .await
            .ctx(|| "reading the route-table freeze".to_string())?;
        let Some(row) = row else { return Ok(None) };
        let version: i64 = row.try_get("version").ctx(|| "reading route_freeze.version".to_string())?;
        Ok(Some(Freeze {
            version: version.max(0) as u64,
            table_json: row.try_get("table_json").ctx(|| "reading route_freeze.table_json".to_string())?,
            frozen_at_ms: row.try_get("frozen_at_ms").ctx(|| "reading route_freeze.frozen_at_ms".to_string())?,
        }))
    }

    /// Ends the freeze (nothing to do when there is none).
    pub async fn clear_freeze(&self) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM route_freeze WHERE id = 1")
            .execute(self.pool())
            .await
            .ctx(|| "ending the route-table freeze".to_string())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_freeze_round_trips_and_clears() {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        assert_eq!(store.load_freeze().await.unwrap(), None, "a new database is not frozen");
        store.save_freeze(7, "{\"a\":1}").await.unwrap();
        store.save_freeze(9, "{\"b\":2}").await.unwrap();
        let f = store.load_freeze().await.unwrap().expect("frozen");
        assert_eq!((f.version, f.table_json.as_str()), (9, "{\"b\":2}"), "the last freeze replaces the first");
        store.clear_freeze().await.unwrap();
        assert_eq!(store.load_freeze().await.unwrap(), None);
    }
}
