//! The measurement matrix's cells, kept so that a new leader (and `lagran
//! explain`, which builds its own table) starts from the matrix the last
//! leader had: one row per (partition location, node), the cell as JSON.
//! Cells with nothing inside the window are deleted as reports arrive.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;

use super::{Cols, DbContext, Store, StoreError};
use crate::location::Location;
use crate::steering::estimate::{Cell, Report};

/// One stored cell.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredCell {
    pub location: Location,
    pub node: String,
    pub cell: Cell,
}

const CELL_COLUMNS: &str = "country, province, city, isp, node, cell_json";

fn cell_from_row(row: &AnyRow) -> Result<StoredCell, StoreError> {
    let c = Cols::keyed(row, "measurement cell", "node")?;
    let json: String = c.get("cell_json")?;
    let cell = serde_json::from_str(&json).map_err(|e| c.corrupt("cell_json", e.to_string()))?;
    let (country, province, city, isp) = (c.get("country")?, c.get("province")?, c.get("city")?, c.get("isp")?);
    let location = Location { country, province, city, isp, coords: None };
    Ok(StoredCell { location, node: c.key().to_string(), cell })
}

impl Store {
    /// Adds `reports` to their stored cells in one transaction (each cell read,
    /// extended, written back) and deletes the cells last written before
    /// `stale_before_ms`. Returns the cells as written.
    pub async fn add_measurements(
        &self,
        reports: &[(Location, String, Report)],
        stale_before_ms: i64,
    ) -> Result<Vec<StoredCell>, StoreError> {
        let mut by_cell: BTreeMap<(&Location, &str), Vec<Report>> = BTreeMap::new();
        for (location, node, report) in reports {
            by_cell.entry((location, node.as_str())).or_default().push(*report);
        }
        let mut tx = self.begin().await?;
        let mut written = Vec::with_capacity(by_cell.len());
        for ((location, node), reports) in by_cell {
            let what = || format!("adding measurements of {node} for {location:?}");
            let row = sqlx::query(&format!(
                "SELECT {CELL_COLUMNS} FROM measurement_cells \
                 WHERE country = $1 AND province = $2 AND city = $3 AND isp = $4 AND node = $5"
            ))
            .bind(&location.country)
            .bind(&location.province)
            .bind(&location.city)
            .bind(&location.isp)
            .bind(node)
            .fetch_optional(&mut *tx)
            .await
            .ctx(what)?;
            let mut cell = row.as_ref().map(cell_from_row).transpose()?.map(|s| s.cell).unwrap_or_default();
            for r in reports {
                cell.add(r);
            }
            let json = serde_json::to_string(&cell).expect("a cell serializes");
            sqlx::query(
                "INSERT INTO measurement_cells (country, province, city, isp, node, cell_json, updated_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (country, province, city, isp, node) DO UPDATE SET \
                 cell_json = excluded.cell_json, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(&location.country)
            .bind(&location.province)
            .bind(&location.city)
            .bind(&location.isp)
            .bind(node)
            .bind(json)
            .bind(cell.newest_ms().unwrap_or(0))
            .execute(&mut *tx)
            .await
            .ctx(what)?;
            written.push(StoredCell { location: location.clone(), node: node.to_string(), cell });
        }
        sqlx::query("DELETE FROM measurement_cells WHERE updated_at_ms < $1")
            .bind(stale_before_ms)
            .execute(&mut *tx)
            .await
            .ctx(|| "deleting stale measurement cells".to_string())?;
        tx.commit().await.ctx(|| "adding measurements".to_string())?;
        Ok(written)
    }

    /// Every cell last written at or after `since_ms`.
    pub async fn list_measurements(&self, since_ms: i64) -> Result<Vec<StoredCell>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {CELL_COLUMNS} FROM measurement_cells WHERE updated_at_ms >= $1"))
            .bind(since_ms)
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing measurement cells".to_string())?;
        rows.iter().map(cell_from_row).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steering::estimate::Source;

    async fn cells_are_merged_kept_and_aged(store: Store) {
        let sz = Location::new("CN", "广东", "深圳", "电信");
        let report = |at_ms, rtt_ms| Report { at_ms, rtt_ms, samples: 10, source: Source::Edge };
        let first = vec![(sz.clone(), "gz-01".to_string(), report(1_000, 40.0))];
        store.add_measurements(&first, 0).await.unwrap();
        let more = vec![
            (sz.clone(), "gz-01".to_string(), report(2_000, 42.0)),
            (sz.clone(), "hk-01".to_string(), report(2_000, 9.0)),
        ];
        let written = store.add_measurements(&more, 0).await.unwrap();
        assert_eq!(written.len(), 2);
        let mut all = store.list_measurements(0).await.unwrap();
        all.sort_by(|a, b| a.node.cmp(&b.node));
        assert_eq!(all, written, "what was written is what is read");
        assert_eq!(all[0].cell.estimate(2_000, 10_000).unwrap().samples, 20, "gz-01's two reports, merged");
        assert_eq!(store.list_measurements(2_001).await.unwrap(), vec![]);
        // hk-01 reported again; gz-01's cell is older than the cut and goes.
        store.add_measurements(&[(sz, "hk-01".to_string(), report(9_000, 9.0))], 5_000).await.unwrap();
        let left: Vec<String> = store.list_measurements(0).await.unwrap().into_iter().map(|c| c.node).collect();
        assert_eq!(left, ["hk-01"]);
    }

    #[tokio::test]
    async fn sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&crate::testkit::temp_sqlite_url(dir.path())).await.unwrap();
        cells_are_merged_kept_and_aged(store).await;
    }

    #[tokio::test]
    async fn postgres() {
        let Some(pg) = crate::testkit::TempPostgres::shared_or_skip("store::measurements::tests::postgres") else {
            return;
        };
        let store = Store::connect(&pg.fresh_database().await).await.unwrap();
        cells_are_merged_kept_and_aged(store).await;
    }
}
