//! The kernel's own accounting of a BPF program (`kernel.bpf_stats_enabled`):
//! `run_time_ns / run_cnt` is the program alone, without the
//! `BPF_PROG_TEST_RUN` harness around it (its two clock reads, the bottom-half
//! toggles), the same figure `/metrics` exports live as
//! `lagran_xdp_run_time_ns_total / lagran_xdp_runs_total`.

use anyhow::Context as _;
use aya::programs::Xdp;

/// Turns `kernel.bpf_stats_enabled` on for its lifetime (restoring the old
/// value); `None` inside when the sysctl could not be written.
pub struct BpfStats(Option<String>);

impl BpfStats {
    const PATH: &str = "/proc/sys/kernel/bpf_stats_enabled";

    pub fn on() -> BpfStats {
        let old = std::fs::read_to_string(Self::PATH).ok();
        if std::fs::write(Self::PATH, "1").is_err() {
            return BpfStats(None);
        }
        BpfStats(old)
    }

    /// Whether the kernel is counting.
    pub fn counting(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write(Self::PATH, old.trim());
        }
    }
}

/// (run time ns, runs) of `prog` as the kernel accounts them so far.
pub fn read(prog: &Xdp) -> anyhow::Result<(u64, u64)> {
    let info = prog.info().context("BPF_OBJ_GET_INFO_BY_FD")?;
    Ok((info.run_time().as_nanos() as u64, info.run_count()))
}

/// Nanoseconds per run between two readings of [`read`] (`None` without runs).
pub fn per_run(before: (u64, u64), after: (u64, u64)) -> Option<f64> {
    let runs = after.1.checked_sub(before.1).filter(|&n| n > 0)?;
    Some(after.0.saturating_sub(before.0) as f64 / runs as f64)
}
