//! The fast path's packet counters (`lagran_counters`) summed over the CPUs,
//! and their Prometheus text.

use std::fmt::Write as _;

use lagran_common::counters::Counter;

/// The counters of the fast path, summed over the CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    values: Vec<(Counter, u64)>,
}

impl CounterSnapshot {
    /// Each counter with its sum, in index order.
    pub(super) fn new(values: Vec<(Counter, u64)>) -> CounterSnapshot {
        CounterSnapshot { values }
    }

    pub fn get(&self, c: Counter) -> u64 {
        self.values.iter().find(|(k, _)| *k == c).map_or(0, |(_, v)| *v)
    }

    /// Every counter in index order.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        self.values.iter().copied()
    }

    /// Packets answered with `XDP_TX`.
    pub fn answered(&self) -> u64 {
        self.get(Counter::Answered)
    }

    /// Packets passed to the kernel stack, all reasons.
    pub fn passed(&self) -> u64 {
        self.values.iter().filter(|(c, _)| !Self::not_passed(*c)).map(|(_, v)| v).sum()
    }

    /// Counters of packets the program did not pass: answered, or rate limited
    /// (dropped, or slipped with `XDP_TX`).
    fn not_passed(c: Counter) -> bool {
        matches!(c, Counter::Answered | Counter::RrlLimited | Counter::RrlSlipped)
    }

    /// The counters as Prometheus text: one `lagran_xdp_packets_total` series per
    /// counter, `result="answered"`, `"rrl_limited"`, `"rrl_slipped"` or
    /// `result="passed",reason="…"`.
    pub fn render_prometheus(&self, out: &mut String) {
        out.push_str("# HELP lagran_xdp_packets_total Packets seen by the XDP fast path, by outcome.\n");
        out.push_str("# TYPE lagran_xdp_packets_total counter\n");
        for (c, v) in self.iter() {
            if Self::not_passed(c) {
                let _ = writeln!(out, "lagran_xdp_packets_total{{result=\"{}\"}} {v}", c.name());
            } else {
                let _ = writeln!(out, "lagran_xdp_packets_total{{result=\"passed\",reason=\"{}\"}} {v}", c.name());
            }
        }
    }
}
