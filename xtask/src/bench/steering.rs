//! The latency-steering step: `bench_helper steering` (no root, no data
//! files): measurements ingested per second on one thread, a full recompute
//! with a populated measurement matrix (1 000 nodes, every partition measured
//! for 10 nodes), and the matrix's memory. `--only-steering` runs just this
//! step (see [`super::helper_step`]).

use super::row::{Row, row};
use super::{Bench, Options, Results, num};

/// "ingest ≥ 100 000 measurements/s on one core".
const INGEST_GOAL: f64 = 100_000.0;
/// "a full recompute with a populated matrix … under 100 ms".
const RECOMPUTE_GOAL_MS: f64 = 100.0;

impl Bench {
    /// `bench_helper steering`.
    pub(super) fn steering(&self) -> anyhow::Result<Results> {
        super::helper_step::run(&self.helper, "steering")
    }
}

/// The step's rows, target beside result.
pub(super) fn rows(r: &Results, rows: &mut Vec<Row>) {
    if let Some(v) = num(r, "steering_ingest_per_s") {
        rows.push(row(
            "steering: measurements ingested into the matrix, 1 thread (API checks, partition, Matrix::record)",
            format!("{v:.0}/s"),
            format!("≥ {INGEST_GOAL:.0}/s"),
            Some(v >= INGEST_GOAL),
        ));
    }
    if let Some(v) = num(r, "steering_ingest_stored_per_s") {
        rows.push(row(
            "steering: the same with the handler's store write (SQLite in memory)",
            format!("{v:.0}/s"),
            "-",
            None,
        ));
    }
    if let Some(v) = num(r, "steering_recompute_ms") {
        let cells = r.get("steering_matrix_cells").map_or("?", String::as_str);
        rows.push(row(
            format!("steering: recompute, matrix populated (1 000 nodes, {cells} cells), latency, 10 names"),
            format!("{v:.1} ms"),
            format!("< {RECOMPUTE_GOAL_MS:.0} ms"),
            Some(v < RECOMPUTE_GOAL_MS),
        ));
    }
    if let Some(v) = num(r, "steering_recompute_geo_ms") {
        rows.push(row("steering: the same build steered by geo", format!("{v:.1} ms"), "-", None));
    }
    if let Some(v) = num(r, "steering_matrix_bytes") {
        let cells = r.get("steering_matrix_cells").map_or("?", String::as_str);
        rows.push(row(
            format!("steering: matrix memory, {cells} cells (1 000 nodes, 10 per partition)"),
            format!("{:.1} MB", v / 1e6),
            "-",
            None,
        ));
    }
}

/// `cargo xtask bench --only-steering`.
pub(super) fn exec_only(opts: &Options) -> anyhow::Result<()> {
    super::helper_step::exec_only(opts, "steering", "ingest, recompute with a populated matrix, its memory", rows)
}
