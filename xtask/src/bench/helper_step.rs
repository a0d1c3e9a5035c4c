//! Steps that are one `bench_helper` subcommand needing no root and no data
//! files (steering, signing): run it, read its `RESULT` lines, and turn them
//! into report rows. `--only-<step>` runs one such step alone and writes
//! `target/bench/<step>.md`, leaving the results document (a full run's)
//! alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::row::{Row, render};
use super::{Options, Results, parse_results};
use crate::util;

/// `bench_helper <subcommand>`'s results.
pub(super) fn run(helper: &Path, subcommand: &str) -> anyhow::Result<Results> {
    Ok(parse_results(&util::output(Command::new(helper).arg(subcommand))?))
}

/// `cargo xtask bench --only-<subcommand>`: builds the helper (unless
/// `--no-build`), runs the step, prints its rows and writes them with the
/// raw results to `target/bench/<subcommand>.md`.
pub(super) fn exec_only(
    opts: &Options,
    subcommand: &str,
    heading: &str,
    rows: fn(&Results, &mut Vec<Row>),
) -> anyhow::Result<()> {
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
    eprintln!("==> {subcommand}: {heading}");
    let results = run(&helper, subcommand)?;
    let mut table = Vec::new();
    rows(&results, &mut table);
    let (text, md) = render(&table);
    print!("{text}");
    let work = target.join("bench");
    std::fs::create_dir_all(&work)?;
    let raw: String = results.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    let report = work.join(format!("{subcommand}.md"));
    std::fs::write(&report, format!("{md}\n```\n{raw}```\n"))?;
    println!("report: {}", report.display());
    Ok(())
}
