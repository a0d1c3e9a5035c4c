//! The tables step: `bench_helper tables` (real xdb, trie, BPF_PROG_TEST_RUN, ECS scopes, geo) and the path's instruction count.

use std::process::Command;

use anyhow::Context as _;

use super::{Bench, Results, parse_results};
use crate::util;

impl Bench {
    pub(super) fn tables(&self) -> anyhow::Result<Results> {
        let xdb = self.xdb.display().to_string();
        let mut args = vec!["tables", "--xdb", &xdb, "--no-recompute"];
        if self.opts.no_unmerged {
            args.push("--no-unmerged");
        }
        // Pinned to one CPU: BPF_PROG_TEST_RUN timings without migrations.
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &self.opts.server_cpu.to_string()])
            .arg(&self.helper)
            .args(&args)
            .env("LAGRAN_EBPF_OBJECT", &self.obj);
        let mut results = parse_results(&util::output(&mut cmd)?);
        // The path's length, which no clock on a busy guest disturbs.
        let mut cmd = Command::new(&self.helper);
        cmd.args(["xdp-insns", "--object"]).arg(&self.obj);
        results.extend(parse_results(&util::output(&mut cmd).context("bench_helper xdp-insns")?));
        Ok(results)
    }
}
