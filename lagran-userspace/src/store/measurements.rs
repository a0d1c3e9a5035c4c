//! The measurement matrix's cells, kept so that a new leader (and `lagran
//! explain`, which builds its own table) starts from the matrix the last
//! leader had: one row per (partition location, node), the cell as JSON.
//! Cells with nothing inside the window are deleted as reports arrive.

use std::collections::{BTreeMap, HashMap};

use sqlx::any::AnyRow;
use sqlx::{Any, Transaction};

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
const CELL_COLUMNS_OF_M: &str = "m.country, m.province, m.city, m.isp, m.node, m.cell_json";

fn cell_from_row(row: &AnyRow) -> Result<StoredCell, StoreError> {
    let c = Cols::keyed(row, "measurement cell", "node")?;
    let json: String = c.get("cell_json")?;
    let cell = serde_json::from_str(&json).map_err(|e| c.corrupt("cell_json", e.to_string()))?;
    let (country, province, city, isp) = (c.get("country")?, c.get("province")?, c.get("city")?, c.get("isp")?);
    let location = Location { country, province, city, isp, coords: None };
    Ok(StoredCell { location, node: c.key().to_string(), cell })
}

/// Cells read or written by one statement: a batch of reports costs two
/// statements per this many cells, not two per cell. Not more: binding a
/// statement's parameters through sqlx's SQLite driver looks each `$N` up
/// among all of them, so a statement's cost grows with the square of its
/// parameters (7 a cell); 32 was the fastest of 16, 32 and 256 measured.
const CELLS_PER_STATEMENT: usize = 32;

/// The stored cells among `keys` (sorted), by key.
async fn stored_cells<'k>(
    tx: &mut Transaction<'static, Any>,
    keys: &[(&'k Location, &'k str)],
) -> Result<HashMap<(&'k Location, &'k str), Cell>, StoreError> {
    let rows: Vec<String> = (0..keys.len())
        .map(|i| {
            let p = i * 5;
            format!("(${}, ${}, ${}, ${}, ${})", p + 1, p + 2, p + 3, p + 4, p + 5)
        })
        .collect();
    // A join, not a row-value `IN`: SQLite plans the latter as a scan of
    // the whole table, the join as one primary-key search per key.
    let sql = format!(
        "SELECT {CELL_COLUMNS_OF_M} FROM (VALUES {}) AS k JOIN measurement_cells m \
         ON m.country = k.column1 AND m.province = k.column2 AND m.city = k.column3 \
         AND m.isp = k.column4 AND m.node = k.column5",
        rows.join(", ")
    );
    let mut q = sqlx::query(&sql);
    for (l, node) in keys {
        q = q.bind(&l.country).bind(&l.province).bind(&l.city).bind(&l.isp).bind(*node);
    }
    let found = q.fetch_all(&mut **tx).await.ctx(|| format!("reading {} measurement cells", keys.len()))?;
    let mut out = HashMap::with_capacity(found.len());
    for row in &found {
        let c = cell_from_row(row)?;
        if let Ok(i) = keys.binary_search(&(&c.location, c.node.as_str())) {
            out.insert(keys[i], c.cell);
        }
    }
    Ok(out)
}

/// Writes `cells` (inserted, or replacing the stored ones) in one statement.
async fn write_cells(tx: &mut Transaction<'static, Any>, cells: &[StoredCell]) -> Result<(), StoreError> {
    let rows: Vec<String> = (0..cells.len())
        .map(|i| {
            let p = i * 7;
            format!("(${}, ${}, ${}, ${}, ${}, ${}, ${})", p + 1, p + 2, p + 3, p + 4, p + 5, p + 6, p + 7)
        })
        .collect();
    let sql = format!(
        "INSERT INTO measurement_cells (country, province, city, isp, node, cell_json, updated_at_ms) VALUES {} \
         ON CONFLICT (country, province, city, isp, node) DO UPDATE SET \
         cell_json = excluded.cell_json, updated_at_ms = excluded.updated_at_ms",
        rows.join(", ")
    );
    let mut q = sqlx::query(&sql);
    for c in cells {
        let json = serde_json::to_string(&c.cell).expect("a cell serializes");
        let l = &c.location;
        q = q.bind(&l.country).bind(&l.province).bind(&l.city).bind(&l.isp).bind(&c.node);
        q = q.bind(json).bind(c.cell.newest_ms().unwrap_or(0));
    }
    q.execute(&mut **tx).await.ctx(|| format!("writing {} measurement cells", cells.len()))?;
    Ok(())
}

impl Store {
    /// Adds `reports` to their stored cells in one transaction (the cells
    /// read, extended and written back, [`CELLS_PER_STATEMENT`] per
    /// statement) and deletes the cells last written before
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
        let by_cell: Vec<_> = by_cell.into_iter().collect();
        let mut tx = self.begin().await?;
        let mut written = Vec::with_capacity(by_cell.len());
        for chunk in by_cell.chunks(CELLS_PER_STATEMENT) {
            let keys: Vec<(&Location, &str)> = chunk.iter().map(|(k, _)| *k).collect();
            let mut stored = stored_cells(&mut tx, &keys).await?;
            let cells: Vec<StoredCell> = chunk
                .iter()
                .map(|((location, node), reports)| {
                    let mut cell = stored.remove(&(*location, *node)).unwrap_or_default();
                    reports.iter().for_each(|r| cell.add(*r));
                    StoredCell { location: (*location).clone(), node: node.to_string(), cell }
                })
                .collect();
            write_cells(&mut tx, &cells).await?;
            written.extend(cells);
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

    /// More cells than one statement takes, half of them already stored.
    async fn a_batch_spans_several_statements(store: Store) {
        let sz = Location::new("CN", "广东", "深圳", "电信");
        let report = |at_ms| Report { at_ms, rtt_ms: 30.0, samples: 10, source: Source::Edge };
        let n = CELLS_PER_STATEMENT * 2 + 7;
        let batch = |at_ms| -> Vec<_> { (0..n).map(|i| (sz.clone(), format!("n{i:04}"), report(at_ms))).collect() };
        store.add_measurements(&batch(1_000)[..n / 2], 0).await.unwrap();
        let written = store.add_measurements(&batch(2_000), 0).await.unwrap();
        assert_eq!(written.len(), n);
        let all = store.list_measurements(0).await.unwrap();
        assert_eq!(all.len(), n);
        let merged = all.iter().filter(|c| c.cell.estimate(2_000, 10_000).unwrap().samples == 20).count();
        assert_eq!(merged, n / 2, "the cells stored before got the new report added, the others were made");
    }

    #[tokio::test]
    async fn sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&crate::testkit::temp_sqlite_url(dir.path())).await.unwrap();
        cells_are_merged_kept_and_aged(store.clone()).await;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&crate::testkit::temp_sqlite_url(dir.path())).await.unwrap();
        a_batch_spans_several_statements(store).await;
    }

    #[tokio::test]
    async fn postgres() {
        let Some(pg) = crate::testkit::TempPostgres::shared_or_skip("store::measurements::tests::postgres") else {
            return;
        };
        let store = Store::connect(&pg.fresh_database().await).await.unwrap();
        cells_are_merged_kept_and_aged(store).await;
        let store = Store::connect(&pg.fresh_database().await).await.unwrap();
        a_batch_spans_several_statements(store).await;
    }
}
