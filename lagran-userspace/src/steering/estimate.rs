//! One cell of the measurement matrix: the last few reports of one node's
//! round-trip time to one partition's clients, and the robust estimate over
//! those still inside the window.
//!
//! A report is already an aggregate (an edge's or a beacon's timings of one
//! client subnet, `samples` of them), so the cell keeps reports, not single
//! timings: a ring of [`RING`] of them, the oldest overwritten. The estimate
//! is their median weighted by sample count, each report's weight capped at
//! [`WEIGHT_CAP`]: one report, however slow or however many samples it
//! claims, cannot move it past the reports around it, as a mean would.

use serde::{Deserialize, Serialize};

/// Reports kept per cell.
pub const RING: usize = 8;

/// The most one report weighs in the median, whatever its sample count.
pub const WEIGHT_CAP: u32 = 64;

/// Where a measurement comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The edge's own client connections (the kernel's `TCP_INFO`).
    Edge,
    /// Real browsers timing the edges (the RUM beacon).
    Rum,
    /// Anything else posted to the API.
    #[default]
    Api,
}

impl Source {
    pub const ALL: [Source; 3] = [Source::Edge, Source::Rum, Source::Api];

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Edge => "edge",
            Source::Rum => "rum",
            Source::Api => "api",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Source::Edge => 1,
            Source::Rum => 2,
            Source::Api => 4,
        }
    }
}

/// One report: `samples` timings of `rtt_ms` (their aggregate), at `at_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub at_ms: i64,
    pub rtt_ms: f32,
    pub samples: u32,
    pub source: Source,
}

/// The last [`RING`] reports (`samples == 0`: an empty slot).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    reports: [Report; RING],
    /// The slot the next report overwrites.
    next: u8,
}

/// What a cell says at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The sample-weighted median of the fresh reports.
    pub rtt_ms: f64,
    /// Timings behind the fresh reports.
    pub samples: u32,
    /// Since the newest report.
    pub age_ms: i64,
    /// The sources of the fresh reports, as bits ([`Estimate::sources`]).
    sources: u8,
}

impl Estimate {
    /// The sources of the fresh reports.
    pub fn sources(&self) -> Vec<Source> {
        Source::ALL.into_iter().filter(|s| self.sources & s.bit() != 0).collect()
    }
}

impl Cell {
    /// Adds a report, overwriting the oldest when the ring is full.
    pub fn add(&mut self, report: Report) {
        let slot = self.next as usize % RING;
        self.reports[slot] = report;
        self.next = ((slot + 1) % RING) as u8;
    }

    /// The newest report's time (`None`: empty).
    pub fn newest_ms(&self) -> Option<i64> {
        self.reports.iter().filter(|r| r.samples > 0).map(|r| r.at_ms).max()
    }

    /// The estimate from the reports not older than `window_ms` at `now_ms`;
    /// `None` when none is.
    pub fn estimate(&self, now_ms: i64, window_ms: i64) -> Option<Estimate> {
        let mut fresh = [(0f32, 0u32); RING];
        let (mut n, mut samples, mut newest, mut sources) = (0, 0u32, i64::MIN, 0u8);
        for r in self.reports.iter().filter(|r| r.samples > 0 && now_ms - r.at_ms <= window_ms) {
            fresh[n] = (r.rtt_ms, r.samples.min(WEIGHT_CAP));
            n += 1;
            samples = samples.saturating_add(r.samples);
            newest = newest.max(r.at_ms);
            sources |= r.source.bit();
        }
        if n == 0 {
            return None;
        }
        let fresh = &mut fresh[..n];
        fresh.sort_by(|a, b| a.0.total_cmp(&b.0));
        Some(Estimate { rtt_ms: weighted_median(fresh), samples, age_ms: (now_ms - newest).max(0), sources })
    }
}

/// The median of `sorted` (value, weight) pairs: the value where half the
/// weight is reached, the mean of the two neighbours when it falls exactly
/// between them.
fn weighted_median(sorted: &[(f32, u32)]) -> f64 {
    let total: u64 = sorted.iter().map(|&(_, w)| w as u64).sum();
    let mut below = 0u64;
    for (i, &(v, w)) in sorted.iter().enumerate() {
        below += w as u64;
        if 2 * below > total {
            return v as f64;
        }
        if 2 * below == total {
            let next = sorted.get(i + 1).map_or(v, |n| n.0);
            return (v as f64 + next as f64) / 2.0;
        }
    }
    sorted.last().map_or(0.0, |l| l.0 as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: i64 = 300_000;

    fn report(at_ms: i64, rtt_ms: f32, samples: u32) -> Report {
        Report { at_ms, rtt_ms, samples, source: Source::Edge }
    }

    #[test]
    fn one_outlier_does_not_move_the_estimate() {
        let mut c = Cell::default();
        for (i, rtt) in [40.0, 42.0, 41.0, 43.0].into_iter().enumerate() {
            c.add(report(i as i64, rtt, 20));
        }
        let before = c.estimate(10, WINDOW).unwrap().rtt_ms;
        // A report a hundred times slower, claiming a thousand samples.
        c.add(report(5, 4_000.0, 1_000));
        let after = c.estimate(10, WINDOW).unwrap();
        assert!((41.0..=43.0).contains(&before), "{before}");
        assert!((41.0..=43.0).contains(&after.rtt_ms), "the outlier moved the median to {}", after.rtt_ms);
        assert_eq!(after.samples, 1_080, "the count is every sample reported");
    }

    #[test]
    fn a_consistent_shift_moves_it() {
        let mut c = Cell::default();
        for i in 0..4 {
            c.add(report(i, 40.0, 20));
        }
        for i in 4..9 {
            c.add(report(i, 90.0, 20));
        }
        assert_eq!(c.estimate(10, WINDOW).unwrap().rtt_ms, 90.0, "most fresh reports say 90 ms");
    }

    #[test]
    fn reports_age_out_of_the_window() {
        let mut c = Cell::default();
        c.add(report(1_000, 80.0, 10));
        c.add(report(200_000, 20.0, 10));
        let e = c.estimate(250_000, WINDOW).unwrap();
        assert_eq!((e.samples, e.age_ms), (20, 50_000));
        let later = c.estimate(1_000 + WINDOW + 1, WINDOW).unwrap();
        assert_eq!((later.rtt_ms, later.samples), (20.0, 10), "the first report aged out");
        assert_eq!(c.estimate(200_000 + WINDOW + 1, WINDOW), None, "nothing fresh is left");
    }

    #[test]
    fn the_ring_keeps_the_last_reports_and_their_sources() {
        let mut c = Cell::default();
        c.add(Report { source: Source::Rum, ..report(0, 10.0, 1) });
        for i in 1..=RING as i64 {
            c.add(report(i, 50.0, 1));
        }
        let e = c.estimate(RING as i64, WINDOW).unwrap();
        assert_eq!((e.rtt_ms, e.samples), (50.0, RING as u32), "the oldest report was overwritten");
        assert_eq!(e.sources(), vec![Source::Edge]);
        c.add(Report { source: Source::Api, ..report(20, 50.0, 1) });
        assert_eq!(c.estimate(20, WINDOW).unwrap().sources(), vec![Source::Edge, Source::Api]);
    }
}
