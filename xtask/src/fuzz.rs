//! `cargo xtask fuzz [--seconds N]`: every cargo-fuzz target, then the
//! differential XDP fuzz.
//!
//! 1. The fuzz crates ([`FUZZ_CRATES`]: the responder's in `lagran-userspace/fuzz`,
//!    the edge's in `lagran-edge/fuzz`, each beside the code it fuzzes) are built
//!    once with `cargo +nightly fuzz build` into one shared target directory
//!    (`target/fuzz`), so the dependencies they share compile once.
//! 2. Each target (`cargo fuzz list`) runs for `--seconds` with libFuzzer's
//!    `-max_total_time`, on its corpus under `<crate>/fuzz/corpus/<target>`
//!    (kept between runs, git-ignored). A crash fails the command and names
//!    the artifact to reproduce it with `cargo +nightly fuzz run <target> <file>`.
//! 3. `--packets` mutated packets through `BPF_PROG_TEST_RUN`
//!    (`lagran-userspace/tests/xdp_fixtures.rs`,
//!    `random_packets_are_passed_or_answered_correctly`): every XDP_TX must
//!    carry byte for byte what userspace answers, with valid checksums; the
//!    rest is passed untouched. Needs root and the XDP object (built here).
//!
//! `cargo xtask test` calls [`exec`] with [`Options::brief`]: a few seconds per
//! target; its own `cargo test` already sends 10⁴ packets through the XDP fuzz.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use crate::{build_ebpf, util};

/// The cargo-fuzz crates, relative to the workspace root.
pub const FUZZ_CRATES: &[&str] = &["lagran-userspace/fuzz", "lagran-edge/fuzz"];

#[derive(Debug, Clone, clap::Parser)]
pub struct Options {
    /// Seconds each cargo-fuzz target runs.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Mutated packets sent through BPF_PROG_TEST_RUN (0: skip the XDP fuzz).
    #[arg(long, default_value_t = 1_000_000)]
    pub packets: u64,
    /// Only the targets whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Skip `cargo xtask setup` (cargo-fuzz must then be installed).
    #[arg(long)]
    pub no_setup: bool,
}

impl Options {
    /// What `cargo xtask test` runs: 3 s per target, no extra XDP packets.
    pub fn brief() -> Options {
        Options { seconds: 3, packets: 0, only: None, no_setup: true }
    }
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    let root = util::workspace_root();
    if !opts.no_setup {
        crate::setup::exec(crate::setup::Options { no_apt: true, no_geo: true, ..Default::default() })?;
    }
    crate::setup::cargo_fuzz()?;
    let target_dir = root.join("target/fuzz");
    let mut ran = 0;
    build_targets(&root, None)?;
    for krate in FUZZ_CRATES {
        let dir = root.join(krate);
        let mut list = fuzz_cmd(&dir, &target_dir);
        list.arg("list");
        let targets = util::output(&mut list)?;
        for target in targets.lines().map(str::trim).filter(|t| !t.is_empty()) {
            if opts.only.as_deref().is_some_and(|o| !target.contains(o)) {
                continue;
            }
            run_target(&dir, &target_dir, target, opts.seconds)
                .with_context(|| format!("`cargo xtask fuzz`: target {target} of {krate} failed"))?;
            ran += 1;
        }
    }
    anyhow::ensure!(ran > 0 || opts.only.is_some(), "no fuzz target found in {FUZZ_CRATES:?}");
    if opts.packets > 0 {
        xdp_differential(&root, opts.packets)?;
    }
    Ok(())
}

/// Builds every fuzz crate's targets into `target/fuzz` (a no-op when they are
/// up to date); with `log`, the output goes to that file instead of the terminal,
/// so a build running beside other steps does not interleave with them.
pub fn build_targets(root: &Path, log: Option<&Path>) -> anyhow::Result<()> {
    let target_dir = root.join("target/fuzz");
    for krate in FUZZ_CRATES {
        let mut build = fuzz_cmd(&root.join(krate), &target_dir);
        build.arg("build");
        let built = match log {
            None => util::run(&mut build),
            Some(log) => util::run_logged(&mut build, log),
        };
        built.with_context(|| format!("building the fuzz targets of {krate}"))?;
    }
    Ok(())
}

/// `cargo +nightly fuzz` in `dir`, building into `target_dir`.
fn fuzz_cmd(dir: &Path, target_dir: &Path) -> Command {
    let mut cmd = util::nightly_cargo();
    cmd.current_dir(dir).arg("fuzz").env("CARGO_TARGET_DIR", target_dir);
    cmd
}

fn run_target(dir: &Path, target_dir: &Path, target: &str, seconds: u64) -> anyhow::Result<()> {
    let corpus: PathBuf = dir.join("corpus").join(target);
    std::fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
    let mut run = fuzz_cmd(dir, target_dir);
    run.args(["run", target])
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        // Bounded per input and in all, so a slow or greedy input is a finding, not a hang.
        .args(["-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1"]);
    util::run(&mut run)
}

/// The differential XDP fuzz with `packets` packets (root, the XDP object).
fn xdp_differential(root: &Path, packets: u64) -> anyhow::Result<()> {
    let obj = build_ebpf::setup_and_build(true)?;
    let mut test = Command::new("cargo");
    test.current_dir(root)
        .args(["test", "-p", "lagran-userspace", "--test", "xdp_fixtures"])
        .args(["random_packets_are_passed_or_answered_correctly", "--", "--exact", "--nocapture"])
        .env("LAGRAN_EBPF_OBJECT", &obj)
        .env("LAGRAN_XDP_FUZZ_PACKETS", packets.to_string());
    util::run(&mut test).context("the differential XDP fuzz failed (needs root for BPF_PROG_TEST_RUN)")
}
