//! The recompute step, in its own process under a time limit.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::process::{Bg, tail};
use super::{Bench, Results, check_interrupted, parse_results};
use crate::util;

impl Bench {
    /// The recompute benchmark in its own process, killed after the timeout.
    pub(super) fn recompute(&self) -> anyhow::Result<Results> {
        let log = self.work.join("recompute.log");
        let xdb = self.xdb.display().to_string();
        let mut cmd = Command::new(&self.helper);
        cmd.args(["tables", "--xdb", &xdb, "--only-recompute", "--configs", "1pool,real", "--builds", "5"]);
        let mut bg = Bg::spawn("bench_helper tables --only-recompute", &mut cmd, &log)?;
        let t = Instant::now();
        let limit = Duration::from_secs(self.opts.recompute_timeout);
        loop {
            check_interrupted()?;
            if let Some(c) = &mut bg.child
                && let Some(status) = c.try_wait()?
            {
                bg.child = None;
                if !status.success() {
                    bail!("the recompute benchmark failed ({status}):\n{}", tail(&log, 20));
                }
                return Ok(parse_results(&std::fs::read_to_string(&log)?));
            }
            if t.elapsed() > limit {
                bg.stop();
                let mut r = Results::new();
                r.insert("recompute_1pool_ms".into(), format!(">{}", limit.as_secs() * 1000));
                return Ok(r);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The planner against `engine::rank` over 5 000 random worlds × 10 events,
/// longer than `cargo xtask test` runs it.
pub(super) fn property(root: &Path) -> anyhow::Result<()> {
    eprintln!("==> planner vs oracle: 5 000 random worlds × 10 events (release)");
    util::run(Command::new("cargo").current_dir(root).args([
        "test",
        "--release",
        "--package",
        "lagran-userspace",
        "--lib",
        "planner_tables_equal_the_oracles_long_run",
        "--",
        "--ignored",
    ]))
}
