//! Queries per second over the last 15 minutes, split by who answered: the XDP
//! fast path, the userspace responder, and the packets XDP passed to
//! userspace, by reason. The daemon samples its counters into a ring buffer
//! ([`TrafficHistory::sample`]); rates are differences of adjacent samples.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;

/// How far back the history reaches.
pub const WINDOW_MS: i64 = 15 * 60 * 1000;
/// How often the daemon samples (the console's "live" resolution).
pub const SAMPLE_EVERY_MS: u64 = 2000;

/// The counters at one instant (monotonic totals).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub at_ms: i64,
    /// Queries the userspace responder received (UDP, TCP, DoT, DoQ).
    pub userspace: u64,
    /// Packets answered in the kernel (`XDP_TX`).
    pub xdp: u64,
    /// Packets XDP passed to the kernel stack, by reason.
    pub passed: BTreeMap<String, u64>,
}

impl Sample {
    /// A sample from the responder's query total and the counter sources'
    /// `(name, value)` pairs (`xdp_answered`, `xdp_passed:<reason>`).
    pub fn new(at_ms: i64, userspace: u64, counters: &[(String, u64)]) -> Sample {
        let mut s = Sample { at_ms, userspace, ..Sample::default() };
        for (k, v) in counters {
            if k == "xdp_answered" {
                s.xdp += v;
            } else if let Some(reason) = k.strip_prefix("xdp_passed:") {
                *s.passed.entry(reason.to_string()).or_default() += v;
            }
        }
        s
    }
}

/// Rates between two samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    /// The end of the interval (unix ms).
    pub at_ms: i64,
    pub userspace_qps: f64,
    pub xdp_qps: f64,
    /// Passed to userspace, per reason (reasons with no packets left out).
    pub passed_qps: BTreeMap<String, f64>,
}

/// The ring buffer of samples.
#[derive(Debug, Default)]
pub struct TrafficHistory {
    samples: Mutex<VecDeque<Sample>>,
}

impl TrafficHistory {
    /// Adds a sample and drops those older than [`WINDOW_MS`] before it
    /// (keeping one just outside, so the first rate spans the window's start).
    pub fn sample(&self, s: Sample) {
        let mut q = self.samples.lock().expect("traffic history lock poisoned");
        while q.len() >= 2 && q[1].at_ms <= s.at_ms - WINDOW_MS {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// Rates over the window, oldest first. A counter that went backwards (a
    /// restart of the fast path) counts from zero.
    pub fn points(&self) -> Vec<Point> {
        let q = self.samples.lock().expect("traffic history lock poisoned");
        q.iter().zip(q.iter().skip(1)).map(|(a, b)| rate(a, b)).collect()
    }
}

fn rate(a: &Sample, b: &Sample) -> Point {
    let secs = ((b.at_ms - a.at_ms).max(1)) as f64 / 1e3;
    let d = |x: u64, y: u64| if y >= x { (y - x) as f64 / secs } else { y as f64 / secs };
    let passed_qps = b
        .passed
        .iter()
        .map(|(k, &v)| (k.clone(), d(a.passed.get(k).copied().unwrap_or(0), v)))
        .filter(|(_, r)| *r > 0.0)
        .collect();
    Point { at_ms: b.at_ms, userspace_qps: d(a.userspace, b.userspace), xdp_qps: d(a.xdp, b.xdp), passed_qps }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: i64, user: u64, xdp: u64, passed: &[(&str, u64)]) -> Sample {
        let mut c: Vec<(String, u64)> = vec![("xdp_answered".into(), xdp)];
        c.extend(passed.iter().map(|(k, v)| (format!("xdp_passed:{k}"), *v)));
        c.push(("something_else".into(), 99));
        Sample::new(at, user, &c)
    }

    #[test]
    fn rates_are_differences_over_time() {
        let h = TrafficHistory::default();
        h.sample(s(0, 0, 0, &[("not_dns", 0)]));
        h.sample(s(2000, 20, 200, &[("not_dns", 4), ("ecs_unlocated", 2)]));
        h.sample(s(4000, 20, 100, &[("not_dns", 4), ("ecs_unlocated", 6)]));
        let p = h.points();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].at_ms, p[0].userspace_qps, p[0].xdp_qps), (2000, 10.0, 100.0));
        assert_eq!(p[0].passed_qps.get("not_dns"), Some(&2.0));
        assert_eq!(p[0].passed_qps.get("ecs_unlocated"), Some(&1.0));
        assert_eq!(p[1].userspace_qps, 0.0);
        assert_eq!(p[1].xdp_qps, 50.0, "a counter that went back (re-attach) counts from zero");
        assert_eq!(p[1].passed_qps.get("not_dns"), None, "idle reasons are left out");
        assert_eq!(p[1].passed_qps.get("ecs_unlocated"), Some(&2.0));
    }

    #[test]
    fn the_window_is_fifteen_minutes() {
        let h = TrafficHistory::default();
        for i in 0..1000 {
            h.sample(s(i * 2000, i as u64, 0, &[]));
        }
        let p = h.points();
        let span = p.last().unwrap().at_ms - p.first().unwrap().at_ms;
        assert!((WINDOW_MS - 2 * 2000..=WINDOW_MS).contains(&span), "span {span}");
        assert!(p.iter().all(|x| x.userspace_qps == 0.5));
    }
}
