//! Steering by measured latency: the round-trip times the edges (their own
//! client connections), real browsers (the RUM beacon) and API callers
//! report, kept per (partition, node) as a robust estimate over a sliding
//! window ([`matrix`], [`estimate`]), and the policy and strategies that
//! turn them into answers ([`policy`], [`strategy`]).
//!
//! **Where it lives.** The matrix is held in memory by the process that
//! builds the tables ([`Measurements`]). Each batch of reports is also added
//! to the database's `measurement_cells` (one row per cell: its last
//! [`estimate::RING`] reports), in the same request, before it is answered.
//! The stored cells are what survives a leader change: a new leader, and
//! `lagran explain` (which compiles its own table from the database), load
//! them, so a partition keeps its latency answer across a failover instead
//! of falling back to geo until the edges have reported for a whole window
//! again. Reports sent to a standby are written to the database the same
//! way, and the leader reloads the cells when the standby tells it.
//!
//! **Memory.** A [`estimate::Cell`] is 200 bytes (8 reports of 24 bytes; a
//! test pins it); with its node name a row entry is about 240 bytes. A row
//! holds at most [`matrix::MAX_NODES_PER_PARTITION`] (32) nodes whatever the
//! fleet's size, so at 1 000 nodes and every partition measured (5 000
//! partitions, the bench's table) the matrix is bounded by 5 000 × 32 × 240 B
//! ≈ 38 MB, plus a location key per row (about 150 bytes: 0.75 MB). Counted
//! from the structures ([`matrix::Matrix::memory_bytes`]: the row table over
//! its capacity, the keys, each row's spare capacity), `cargo xtask bench`
//! measures 19.4 MB with 10 nodes measured for each of 5 000 partitions
//! (50 000 cells, about 390 bytes each), so the 32-node bound is nearer
//! 62 MB. The stored form is the same cells as JSON (about 600 bytes each).

pub mod estimate;
pub mod matrix;
pub mod policy;
pub mod settings;
pub mod strategy;
pub mod subnet;
pub mod suspects;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};

use crate::location::Location;
use estimate::Cell;
use matrix::{Matrix, NodeRtt};
use settings::SteeringSettings;

/// What decides a scheduled name's answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Steering {
    /// The location scoring (the engine's ranking).
    #[default]
    Geo,
    /// The lowest measured round-trip time where a partition is measured
    /// enough, the location scoring elsewhere.
    Latency,
}

impl Steering {
    pub fn as_str(self) -> &'static str {
        match self {
            Steering::Geo => "geo",
            Steering::Latency => "latency",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "geo" => Some(Steering::Geo),
            "latency" => Some(Steering::Latency),
            _ => None,
        }
    }
}

/// What a build reads of the matrix: every partition's fresh estimates by
/// location, and the policy's settings.
#[derive(Clone, Debug, Default)]
pub struct LatencyView {
    pub rows: HashMap<Arc<Location>, Vec<NodeRtt>>,
    pub settings: SteeringSettings,
}

impl LatencyView {
    /// `node`'s fresh estimate for `location`.
    pub fn of(&self, location: &Location, node: &str) -> Option<&NodeRtt> {
        self.rows.get(&*matrix::key(location))?.iter().find(|m| *m.node == *node)
    }
}

/// The matrix in memory and its settings (see the module doc).
#[derive(Debug, Default)]
pub struct Measurements {
    matrix: Mutex<Matrix>,
    settings: RwLock<SteeringSettings>,
}

impl Measurements {
    pub fn settings(&self) -> SteeringSettings {
        self.settings.read().expect("steering settings lock poisoned").clone()
    }

    pub fn set_settings(&self, settings: SteeringSettings) {
        *self.settings.write().expect("steering settings lock poisoned") = settings;
    }

    /// Puts cells (partition location, node, cell; as stored) into the
    /// matrix, replacing those it holds.
    pub fn restore(&self, cells: impl IntoIterator<Item = (Location, String, Cell)>) {
        let mut m = self.matrix.lock().expect("measurement matrix lock poisoned");
        for (location, node, cell) in cells {
            m.restore(location, node, cell);
        }
    }

    /// Replaces the whole matrix with `cells` (loaded from the database).
    pub fn replace(&self, cells: impl IntoIterator<Item = (Location, String, Cell)>) {
        *self.matrix.lock().expect("measurement matrix lock poisoned") = Matrix::default();
        self.restore(cells);
    }

    /// Each node's fresh estimate for `location`, lowest RTT first.
    pub fn row(&self, location: &Location, now_ms: i64) -> Vec<(String, estimate::Estimate)> {
        let window = self.settings().window_ms();
        self.matrix.lock().expect("measurement matrix lock poisoned").row(location, now_ms, window)
    }

    /// What a build at `now_ms` reads; cells with nothing fresh left are dropped.
    pub fn view(&self, now_ms: i64) -> Arc<LatencyView> {
        let settings = self.settings();
        let mut m = self.matrix.lock().expect("measurement matrix lock poisoned");
        m.prune(now_ms, settings.window_ms());
        Arc::new(LatencyView { rows: m.fresh(now_ms, settings.window_ms()), settings })
    }

    /// How many cells the matrix holds.
    pub fn cells(&self) -> usize {
        self.matrix.lock().expect("measurement matrix lock poisoned").cells()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cell_is_as_large_as_the_module_doc_says() {
        assert_eq!(std::mem::size_of::<super::estimate::Cell>(), 200);
    }
}
