//! The client prefixes the responders actually answered, weighted by
//! queries: what a geo reload's `max_change_ratio` is judged on.
//!
//! - Each userspace responder counts its answers per client /24 or /48 in a
//!   fixed table ([`table::AnsweredPrefixes`], held by the responder's
//!   counters), one atomic update per answer.
//! - An NS host (`lagran dns`) sends its [`wire::MAX_REPORTED`] busiest
//!   prefixes with every report on the table stream (`&prefixes=`, see
//!   [`wire`]); the control process that takes the report keeps the latest
//!   list per host in memory ([`AnsweredTraffic`]), at most [`MAX_HOSTS`]
//!   hosts, each list forgotten [`REPORT_TTL_MS`] after it came. In `lagran
//!   serve` the control plane reads its own responder's table directly.
//! - A reload merges them into a [`sample::TrafficSample`] and draws its
//!   sample from it; a family with fewer than [`sample::MIN_QUERIES`] queries
//!   is sampled on random public addresses, as before there is traffic.
//!
//! The lists are not stored: a control process that took no report (a
//! restarted one, or a standby the NS hosts do not poll) checks a reload on
//! random addresses until the hosts have reported to it, which they do at
//! every long poll (at most 30 s apart).
//!
//! Answers the XDP fast path sends are not counted: its maps keep per-reason
//! packet counters, not clients. With the fast path on, the prefixes are those
//! of the queries userspace answered (TCP, DoT, DoQ, and what XDP passes up).

pub mod sample;
pub mod table;
pub mod wire;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ipnet::IpNet;

use sample::TrafficSample;
use table::AnsweredPrefixes;

/// NS hosts whose lists are kept; a report from one more drops the oldest.
pub const MAX_HOSTS: usize = 256;
/// A host's list counts this long after its report (an hour).
pub const REPORT_TTL_MS: i64 = 3_600_000;
/// Prefixes read from this process's own responder.
pub const LOCAL_TOP: usize = 1_024;

/// One NS host's latest list: when it came, and its (prefix, queries).
type HostList = (i64, Vec<(IpNet, u64)>);

/// See the module doc.
#[derive(Debug, Default)]
pub struct AnsweredTraffic {
    hosts: Mutex<HashMap<String, HostList>>,
    local: OnceLock<Arc<AnsweredPrefixes>>,
}

impl AnsweredTraffic {
    /// Counts the answers of this process's own responder.
    pub fn set_local(&self, table: Arc<AnsweredPrefixes>) {
        let _ = self.local.set(table);
    }

    /// Keeps `host`'s latest list, received at `now_ms`.
    pub fn report(&self, host: &str, prefixes: Vec<(IpNet, u64)>, now_ms: i64) {
        let mut hosts = self.hosts.lock().expect("answered traffic lock poisoned");
        if !hosts.contains_key(host)
            && hosts.len() >= MAX_HOSTS
            && let Some(oldest) = hosts.iter().min_by_key(|(_, (at, _))| *at).map(|(h, _)| h.clone())
        {
            hosts.remove(&oldest);
        }
        hosts.insert(host.to_string(), (now_ms, prefixes));
    }

    /// Every fresh list and the local responder's prefixes, merged.
    pub fn sample(&self, now_ms: i64) -> TrafficSample {
        let mut merged: HashMap<IpNet, u64> = HashMap::new();
        {
            let hosts = self.hosts.lock().expect("answered traffic lock poisoned");
            for (net, q) in hosts.values().filter(|(at, _)| now_ms - at <= REPORT_TTL_MS).flat_map(|(_, l)| l) {
                *merged.entry(*net).or_default() += q;
            }
        }
        for (net, q) in self.local.get().map(|t| t.top(LOCAL_TOP)).unwrap_or_default() {
            *merged.entry(net).or_default() += q;
        }
        let mut counts: Vec<(IpNet, u64)> = merged.into_iter().collect();
        // A fixed order, so the same reports give the same sample.
        counts.sort();
        TrafficSample::new(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn hosts_lists_merge_expire_and_stay_bounded() {
        let t = AnsweredTraffic::default();
        t.report("ns1", vec![(net("1.2.3.0/24"), 100)], 0);
        t.report("ns2", vec![(net("1.2.3.0/24"), 50), (net("240e:1:2::/48"), 7)], 10);
        let s = t.sample(20);
        assert_eq!((s.queries_v4(), s.queries_v6()), (150, 7));
        t.report("ns1", vec![(net("1.2.3.0/24"), 120)], 30);
        assert_eq!(t.sample(40).queries_v4(), 170, "a host's new list replaces its old one");
        assert_eq!(t.sample(10 + REPORT_TTL_MS + 1).queries_v4(), 120, "ns2's list expired");
        for i in 0..MAX_HOSTS + 10 {
            t.report(&format!("h{i}"), vec![(net("9.9.9.0/24"), 1)], 100 + i as i64);
        }
        assert_eq!(t.hosts.lock().unwrap().len(), MAX_HOSTS);
        assert_eq!(t.sample(1_000).queries_v4(), MAX_HOSTS as u64, "the oldest hosts were dropped");
    }

    #[test]
    fn the_local_responder_counts_too() {
        let t = AnsweredTraffic::default();
        let local = Arc::new(AnsweredPrefixes::default());
        t.set_local(local.clone());
        for _ in 0..3 {
            local.record("58.60.0.1".parse().unwrap());
        }
        t.report("ns1", vec![(net("58.60.0.0/24"), 2)], 0);
        assert_eq!(t.sample(0).queries_v4(), 5);
    }
}
