//! One load run's counts and the search for the highest rate a server holds.

use super::check_interrupted;
use crate::busy;

/// One load run.
#[derive(Clone, Debug, Default)]
pub(super) struct Run {
    pub(super) target: u64,
    pub(super) sent: u64,
    pub(super) received: u64,
    pub(super) secs: f64,
    /// Answered by XDP / by the userspace responder during the run (our daemon only).
    pub(super) xdp_answered: Option<u64>,
    pub(super) udp_queries: Option<u64>,
    /// The server core's busy time over the steady middle of the run.
    pub(super) server_busy: Option<busy::Busy>,
}

impl Run {
    pub(super) fn ratio(&self) -> f64 {
        if self.sent == 0 { 0.0 } else { self.received as f64 / self.sent as f64 }
    }
    pub(super) fn answered_qps(&self) -> f64 {
        self.received.min(self.sent) as f64 / self.secs.max(1e-9)
    }
    pub(super) fn sent_qps(&self) -> f64 {
        self.sent as f64 / self.secs.max(1e-9)
    }
    /// The server core's CPU per answered query, in ns, over the run's steady middle.
    pub(super) fn server_ns_per_answer(&self) -> Option<f64> {
        let b = self.server_busy?;
        let answered = self.answered_qps() * b.window.as_secs_f64();
        (answered >= 1.0).then(|| b.busy.as_nanos() as f64 / answered)
    }
    /// ≥ 95 % answered and the generator kept (nearly) the asked rate.
    pub(super) fn passed(&self) -> bool {
        self.ratio() >= 0.95 && self.sent_qps() >= 0.9 * self.target as f64
    }
}

/// The best rate of one (server, generator) pair.
#[derive(Clone, Debug, Default)]
pub(super) struct Best {
    pub(super) qps: f64,
    pub(super) runs: Vec<Run>,
    /// The generator could not send faster, so the server's limit is above `qps`.
    pub(super) generator_bound: bool,
}

impl Best {
    pub(super) fn describe(&self) -> String {
        if self.runs.is_empty() {
            return "not measured".into();
        }
        format!(
            "{:.0} qps{}",
            self.qps,
            if self.generator_bound { " (generator-bound: server limit is higher)" } else { "" }
        )
    }
}

/// The highest offered rate both paths held (≥ 95 % answered) with the server
/// core's busy time read, and the XDP path's and the userspace path's runs
/// there, for the goal "CPU per answered query", compared at one rate because
/// per-query costs fall as batches fill.
pub(super) fn cpu_per_answer<'a>(xdp: &'a Best, userspace: &'a Best) -> Option<(u64, &'a Run, &'a Run)> {
    let held = |b: &'a Best, rate: u64| {
        b.runs.iter().find(|r| r.target == rate && r.passed() && r.server_ns_per_answer().is_some())
    };
    let mut rates: Vec<u64> = userspace.runs.iter().filter(|r| r.passed()).map(|r| r.target).collect();
    rates.sort_unstable_by(|a, b| b.cmp(a));
    rates.into_iter().find_map(|rate| Some((rate, held(xdp, rate)?, held(userspace, rate)?)))
}

/// Steps the rate up ×2 from `start` until a run fails, then bisects three times.
pub(super) fn find_best(
    label: &str,
    start: u64,
    max: u64,
    mut run: impl FnMut(u64) -> anyhow::Result<Run>,
) -> anyhow::Result<Best> {
    let mut best = Best::default();
    let log = |r: &Run, best: &mut Best| {
        eprintln!(
            "    {label}: target {:>8} qps: sent {:>8.0} qps, answered {:>8.0} qps ({:5.1} %){}{}",
            r.target,
            r.sent_qps(),
            r.answered_qps(),
            r.ratio() * 100.0,
            r.xdp_answered.map_or(String::new(), |x| format!(", xdp answered {x}")),
            r.udp_queries.map_or(String::new(), |u| format!(", userspace queries {u}")),
        );
        if r.ratio() >= 0.95 && r.answered_qps() > best.qps {
            best.qps = r.answered_qps();
        }
        best.runs.push(r.clone());
    };
    let (mut lo, mut hi) = (0u64, 0u64);
    let mut rate = start;
    loop {
        check_interrupted()?;
        let r = run(rate)?;
        log(&r, &mut best);
        if r.passed() {
            lo = rate;
            if rate >= max {
                break;
            }
            rate = (rate * 2).min(max);
        } else {
            if r.ratio() >= 0.95 {
                // Answered everything it sent, but could not send the rate.
                best.generator_bound = true;
                return Ok(best);
            }
            hi = rate;
            break;
        }
    }
    if hi == 0 {
        best.generator_bound = true;
        return Ok(best);
    }
    for _ in 0..3 {
        check_interrupted()?;
        let mid = (lo + hi) / 2;
        if mid <= lo || hi - lo < hi / 16 {
            break;
        }
        let r = run(mid)?;
        log(&r, &mut best);
        if r.passed() {
            lo = mid;
        } else {
            if r.ratio() >= 0.95 {
                best.generator_bound = true;
                break;
            }
            hi = mid;
        }
    }
    Ok(best)
}
