//! The measurement matrix: per (partition, node), a [`Cell`] of reports.
//!
//! Rows are keyed by the partition's location tuple, not by its number, so
//! a geo reload that renumbers the partitions keeps every measurement of a
//! location that still exists. A row holds at most
//! [`MAX_NODES_PER_PARTITION`] nodes: a report for one more replaces the
//! node heard from least recently.

use std::collections::HashMap;
use std::sync::Arc;

use super::estimate::{Cell, Estimate, Report};
use crate::location::Location;

/// The most nodes one partition keeps measurements of.
pub const MAX_NODES_PER_PARTITION: usize = 32;

/// See the module doc. Keys and node names are shared with the views a
/// build reads ([`Matrix::fresh`]), which are made at every recompute.
#[derive(Clone, Debug, Default)]
pub struct Matrix {
    rows: HashMap<Arc<Location>, Vec<(Arc<str>, Cell)>>,
}

/// One node's fresh estimate for one partition, as a build reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRtt {
    pub node: Arc<str>,
    pub rtt_ms: f64,
    pub samples: u32,
}

/// The matrix's key for a partition: its place and carrier, without the
/// coordinates the geo data may carry (the database keeps cells by place and
/// carrier only, so a cell loaded from it must meet the same key).
pub fn key(location: &Location) -> std::borrow::Cow<'_, Location> {
    match location.coords {
        None => std::borrow::Cow::Borrowed(location),
        Some(_) => std::borrow::Cow::Owned(Location { coords: None, ..location.clone() }),
    }
}

impl Matrix {
    /// Adds `report` to the cell of (`location`, `node`); returns the cell.
    pub fn record(&mut self, location: &Location, node: &str, report: Report) -> &Cell {
        let location = &*key(location);
        if !self.rows.contains_key(location) {
            self.rows.insert(Arc::new(location.clone()), Vec::new());
        }
        let row = self.rows.get_mut(location).expect("the row was just made");
        let i = match row.iter().position(|(n, _)| **n == *node) {
            Some(i) => i,
            None if row.len() < MAX_NODES_PER_PARTITION => {
                row.push((node.into(), Cell::default()));
                row.len() - 1
            }
            None => {
                let stalest = (0..row.len()).min_by_key(|&i| row[i].1.newest_ms().unwrap_or(i64::MIN)).unwrap_or(0);
                row[stalest] = (node.into(), Cell::default());
                stalest
            }
        };
        row[i].1.add(report);
        &row[i].1
    }

    /// Puts a stored cell back (a leader loading the matrix).
    pub fn restore(&mut self, location: Location, node: String, cell: Cell) {
        let row = self.rows.entry(Arc::new(key(&location).into_owned())).or_default();
        match row.iter().position(|(n, _)| **n == *node) {
            Some(i) => row[i].1 = cell,
            None if row.len() < MAX_NODES_PER_PARTITION => row.push((node.into(), cell)),
            None => {}
        }
    }

    /// Each node's fresh estimate for `location`, lowest RTT first.
    pub fn row(&self, location: &Location, now_ms: i64, window_ms: i64) -> Vec<(String, Estimate)> {
        let mut out: Vec<(String, Estimate)> = self
            .rows
            .get(&*key(location))
            .into_iter()
            .flatten()
            .filter_map(|(n, c)| Some((n.to_string(), c.estimate(now_ms, window_ms)?)))
            .collect();
        out.sort_by(|a, b| a.1.rtt_ms.total_cmp(&b.1.rtt_ms).then_with(|| a.0.cmp(&b.0)));
        out
    }

    /// Every partition's fresh estimates, for a build.
    pub fn fresh(&self, now_ms: i64, window_ms: i64) -> HashMap<Arc<Location>, Vec<NodeRtt>> {
        let mut out = HashMap::with_capacity(self.rows.len());
        for (location, cells) in &self.rows {
            let mut row: Vec<NodeRtt> = cells
                .iter()
                .filter_map(|(node, c)| {
                    let e = c.estimate(now_ms, window_ms)?;
                    Some(NodeRtt { node: node.clone(), rtt_ms: e.rtt_ms, samples: e.samples })
                })
                .collect();
            if !row.is_empty() {
                row.sort_by(|a, b| a.rtt_ms.total_cmp(&b.rtt_ms).then_with(|| a.node.cmp(&b.node)));
                out.insert(location.clone(), row);
            }
        }
        out
    }

    /// Drops the cells with nothing left inside the window; returns them.
    pub fn prune(&mut self, now_ms: i64, window_ms: i64) -> Vec<(Location, String)> {
        let mut gone = Vec::new();
        self.rows.retain(|location, row| {
            row.retain(|(node, cell)| {
                let keep = cell.newest_ms().is_some_and(|t| now_ms - t <= window_ms);
                if !keep {
                    gone.push((Location::clone(location), node.to_string()));
                }
                keep
            });
            !row.is_empty()
        });
        gone
    }

    /// How many cells are held.
    pub fn cells(&self) -> usize {
        self.rows.values().map(Vec::len).sum()
    }

    /// The bytes the matrix holds, counted from its structures: the row
    /// table's slots (key, row vector and one control byte each, over its
    /// whole capacity), each key's shared allocation and strings, each
    /// row's cells over its capacity and each node name's shared
    /// allocation. Allocator overhead is not counted.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let slot = size_of::<(Arc<Location>, Vec<(Arc<str>, Cell)>)>() + 1;
        let rows: usize = self
            .rows
            .iter()
            .map(|(l, row)| {
                let strings = l.country.capacity() + l.province.capacity() + l.city.capacity() + l.isp.capacity();
                let key = size_of::<Location>() + 2 * size_of::<usize>() + strings;
                let names: usize = row.iter().map(|(n, _)| 2 * size_of::<usize>() + n.len()).sum();
                key + row.capacity() * size_of::<(Arc<str>, Cell)>() + names
            })
            .sum();
        self.rows.capacity() * slot + rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steering::estimate::Source;

    fn report(at_ms: i64, rtt_ms: f32) -> Report {
        Report { at_ms, rtt_ms, samples: 10, source: Source::Api }
    }

    #[test]
    fn a_row_is_bounded_and_evicts_the_stalest_node() {
        let sz = Location::new("CN", "广东", "深圳", "电信");
        let mut m = Matrix::default();
        for i in 0..MAX_NODES_PER_PARTITION {
            m.record(&sz, &format!("n{i}"), report(1_000 + i as i64, 30.0));
        }
        m.record(&sz, "late", report(5_000, 20.0));
        assert_eq!(m.cells(), MAX_NODES_PER_PARTITION);
        let row = m.row(&sz, 5_000, 300_000);
        assert_eq!(row[0].0, "late");
        assert!(!row.iter().any(|(n, _)| n == "n0"), "n0 was heard from least recently");
    }

    #[test]
    fn fresh_rows_sort_by_rtt_and_prune_drops_stale_cells() {
        let (sz, bj) = (Location::new("CN", "广东", "深圳", "电信"), Location::new("CN", "北京", "北京", "联通"));
        let mut m = Matrix::default();
        m.record(&sz, "slow", report(0, 80.0));
        m.record(&sz, "fast", report(0, 8.0));
        m.record(&bj, "fast", report(-400_000, 8.0));
        let fresh = m.fresh(1_000, 300_000);
        let names: Vec<&str> = fresh[&sz].iter().map(|r| &*r.node).collect();
        assert_eq!(names, ["fast", "slow"]);
        assert!(!fresh.contains_key(&bj), "bj's only report is out of the window");
        assert_eq!(m.prune(1_000, 300_000), vec![(bj, "fast".to_string())]);
        assert_eq!(m.cells(), 2);
    }

    #[test]
    fn memory_counts_every_cell_and_name() {
        let mut m = Matrix::default();
        let empty = m.memory_bytes();
        let sz = Location::new("CN", "广东", "深圳", "电信");
        m.record(&sz, "a", report(0, 8.0));
        let one = m.memory_bytes();
        assert!(one > empty + std::mem::size_of::<Cell>(), "{empty} -> {one}");
        m.record(&sz, "node-with-a-long-name", report(0, 8.0));
        assert!(m.memory_bytes() > one, "the second cell and its name count");
    }
}
