//! The latency-steering step: `bench_helper steering` (no root, no data
//! files): measurements ingested per second on one thread, a full recompute
//! with a populated measurement matrix (1 000 nodes, every partition measured
//! for 10 nodes), and the matrix's memory. `--only-steering` runs just this
//! step and writes `target/bench/steering.md`, leaving the results document
//! (a full run's) alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Bench, Options, Results, num, parse_results};
use crate::util;

/// "ingest ≥ 100 000 measurements/s on one core".
const INGEST_GOAL: f64 = 100_000.0;
/// "a full recompute with a populated matrix … under 100 ms".
const RECOMPUTE_GOAL_MS: f64 = 100.0;

impl Bench {
    /// `bench_helper steering`.
    pub(super) fn steering(&self) -> anyhow::Result<Results> {
        run_helper(&self.helper)
    }
}

fn run_helper(helper: &Path) -> anyhow::Result<Results> {
    Ok(parse_results(&util::output(Command::new(helper).arg("steering"))?))
}

/// One row of the report: metric, value, target, met (`None`: no target).
pub(super) type Row = (String, String, String, Option<bool>);

fn row(metric: impl Into<String>, value: impl Into<String>, target: impl Into<String>, ok: Option<bool>) -> Row {
    (metric.into(), value.into(), target.into(), ok)
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
    let root = util::workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d));
    if !opts.no_build {
        util::run(Command::new("cargo").current_dir(&root).args([
            "build",
            "--release",
            "--package",
            "lagran-userspace",
            "--example",
            "bench_helper",
        ]))?;
    }
    let helper: PathBuf = target.join("release/examples/bench_helper");
    if !helper.is_file() {
        anyhow::bail!("{} is missing: run without --no-build", helper.display());
    }
    eprintln!("==> steering: ingest, recompute with a populated matrix, its memory");
    let results = run_helper(&helper)?;
    let mut table = Vec::new();
    rows(&results, &mut table);
    let mut md = "| metric | value | target | ok? |\n|---|---|---|---|\n".to_string();
    for (metric, value, target, ok) in &table {
        let ok = ok.map_or("-", |o| if o { "ok" } else { "MISS" });
        println!("{metric}: {value} (target {target}) {ok}");
        md += &format!("| {metric} | {value} | {target} | {ok} |\n");
    }
    let work = target.join("bench");
    std::fs::create_dir_all(&work)?;
    let raw: String = results.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    let report = work.join("steering.md");
    std::fs::write(&report, format!("{md}\n```\n{raw}```\n"))?;
    println!("report: {}", report.display());
    Ok(())
}
