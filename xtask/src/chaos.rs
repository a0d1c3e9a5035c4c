//! `cargo xtask chaos`: the fault-injection suite at full length.
//!
//! Builds the binaries and the XDP object, then runs the end-to-end test
//! `chaos::chaos_full` (`tests/e2e/chaos/`): PostgreSQL, two control
//! processes, two NS hosts (one with XDP) and an edge under continuous
//! queries and heartbeats, one fault at a time — PostgreSQL read-only, killed
//! and restarted, the leader paused for 30 s, an NS host cut from the control
//! plane, a clock stepped by ±1 h, a forged table, 10 000 idle HTTP/2
//! connections, a spoofed DoQ Initial flood. It prints one row per fault
//! (queries, SERVFAIL, timeouts, wrong answers, nodes withdrawn, recovery
//! time) and writes the table to `target/chaos/latest.md`. Then
//! `fail_static::a_store_that_refuses_writes_withdraws_no_node` for five
//! minutes: a 100-node fleet heartbeating into `lagran control` whose SQLite
//! file's filesystem went read-only. Needs root. The short profiles of both
//! run in `cargo xtask test`.

use std::process::Command;

use crate::{build_ebpf, util};

#[derive(Debug, Clone, clap::Parser)]
pub struct Options {
    /// Skip `cargo xtask setup`.
    #[arg(long)]
    pub no_setup: bool,
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    let root = util::workspace_root();
    let obj = build_ebpf::setup_and_build(opts.no_setup)?;
    util::run(Command::new("cargo").current_dir(&root).args(["build", "--bins"]))?;
    util::run(
        Command::new("cargo")
            .current_dir(&root)
            .args(["test", "-p", "lagran-e2e", "--test", "e2e", "chaos::chaos_full", "--"])
            .args(["--ignored", "--exact", "--nocapture"])
            .env("LAGRAN_EBPF_OBJECT", &obj)
            .env("LAGRAN_REQUIRE_PG", "1")
            .env("LAGRAN_REQUIRE_TOOLS", "1"),
    )?;
    println!("==> chaos table: {}", root.join("target/chaos/latest.md").display());
    util::run(
        Command::new("cargo")
            .current_dir(&root)
            .args(["test", "-p", "lagran-e2e", "--test", "e2e", "fail_static::", "--", "--nocapture"])
            .env("LAGRAN_FAIL_STATIC_SECS", "300")
            .env("LAGRAN_FAIL_STATIC_NODES", "100")
            .env("LAGRAN_REQUIRE_TOOLS", "1"),
    )?;
    Ok(())
}
