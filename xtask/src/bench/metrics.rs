//! What the daemon's `/metrics` says around a run.

use super::Bench;
use super::topology::Topology;
use crate::util;

impl Bench {
    /// (XDP answered, userspace UDP queries) from the daemon's /metrics.
    pub(super) fn counters(&self, t: &Topology) -> (Option<u64>, Option<u64>) {
        let Ok(out) = util::output(&mut t.exec(&t.srv, &["curl", "-s", "-m", "2", "http://127.0.0.1:8080/metrics"]))
        else {
            return (None, None);
        };
        let get = |prefix: &str| {
            out.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .map(|v| v as u64)
        };
        (get("lagran_xdp_packets_total{result=\"answered\"}"), get("lagran_dns_queries_total{transport=\"udp\"}"))
    }

    /// The XDP program's own accounting from the daemon's /metrics:
    /// (`lagran_xdp_run_time_ns_total`, `lagran_xdp_runs_total`).
    pub(super) fn xdp_run_stats(&self, t: &Topology) -> Option<(u64, u64)> {
        let out =
            util::output(&mut t.exec(&t.srv, &["curl", "-s", "-m", "2", "http://127.0.0.1:8080/metrics"])).ok()?;
        let get = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|v| v as u64)
        };
        Some((get("lagran_xdp_run_time_ns_total")?, get("lagran_xdp_runs_total")?))
    }
}
