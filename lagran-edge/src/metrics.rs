//! Per-site counters in Prometheus' text format, for the edge's `GET /metrics`.
//!
//! The endpoint answers clients on a loopback address, or presenting
//! `Authorization: Bearer <metrics_token>`; other requests for `/metrics` go to
//! the site like any path.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::outcome::CacheResult;

/// Upper bounds of the origin latency histogram, in seconds.
const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// The counters of one site.
#[derive(Debug, Default)]
pub struct SiteMetrics {
    requests: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    stale: AtomicU64,
    revalidated: AtomicU64,
    bypass: AtomicU64,
    bytes_out: AtomicU64,
    bytes_in: AtomicU64,
    origin_errors: AtomicU64,
    origin_buckets: [AtomicU64; BUCKETS.len()],
    origin_count: AtomicU64,
    origin_micros: AtomicU64,
}

impl SiteMetrics {
    /// A request answered with `bytes_out` body bytes.
    pub fn request(&self, cache: CacheResult, bytes_out: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        let counter = match cache {
            CacheResult::Hit => &self.hits,
            CacheResult::Miss => &self.misses,
            CacheResult::Stale => &self.stale,
            CacheResult::Revalidated => &self.revalidated,
            CacheResult::Bypass => &self.bypass,
            CacheResult::None => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// An origin response head after `took`.
    pub fn origin_answered(&self, took: Duration) {
        let secs = took.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|&b| secs <= b) {
            self.origin_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.origin_count.fetch_add(1, Ordering::Relaxed);
        self.origin_micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Body bytes read from an origin into the cache.
    pub fn origin_bytes(&self, n: u64) {
        self.bytes_in.fetch_add(n, Ordering::Relaxed);
    }

    pub fn origin_failed(&self) {
        self.origin_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Every site's counters by host pattern, kept across site reloads.
#[derive(Debug, Default)]
pub struct Metrics {
    sites: Mutex<BTreeMap<String, Arc<SiteMetrics>>>,
}

impl Metrics {
    /// The counters of `host` (created on first use).
    pub fn site(&self, host: &str) -> Arc<SiteMetrics> {
        self.sites.lock().unwrap_or_else(|e| e.into_inner()).entry(host.to_owned()).or_default().clone()
    }

    /// The exposition text; the `extra` edge-wide values (name, help, type,
    /// value) go at the end.
    pub fn render(&self, extra: &[(&str, &str, &str, u64)]) -> String {
        let sites = self.sites.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut counter = |name: &str, help: &str, value: &dyn Fn(&SiteMetrics) -> Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (host, m) in &sites {
                for (labels, v) in value(m) {
                    let _ = writeln!(out, "{name}{{site=\"{host}\"{labels}}} {v}");
                }
            }
        };
        counter("lagran_edge_requests_total", "Requests answered per site.", &|m| {
            vec![(String::new(), load(&m.requests))]
        });
        counter("lagran_edge_cache_total", "Cacheable requests per site by cache result.", &|m| {
            [
                ("hit", &m.hits),
                ("miss", &m.misses),
                ("stale", &m.stale),
                ("revalidated", &m.revalidated),
                ("bypass", &m.bypass),
            ]
            .into_iter()
            .map(|(r, a)| (format!(",result=\"{r}\""), load(a)))
            .collect()
        });
        counter("lagran_edge_bytes_out_total", "Response body bytes sent to clients.", &|m| {
            vec![(String::new(), load(&m.bytes_out))]
        });
        counter("lagran_edge_bytes_in_total", "Body bytes read from origins into the cache.", &|m| {
            vec![(String::new(), load(&m.bytes_in))]
        });
        counter("lagran_edge_origin_errors_total", "Origin fetches that failed.", &|m| {
            vec![(String::new(), load(&m.origin_errors))]
        });
        let name = "lagran_edge_origin_seconds";
        let _ = writeln!(out, "# HELP {name} Time to the origin's response head.\n# TYPE {name} histogram");
        for (host, m) in &sites {
            let mut cumulative = 0;
            for (bound, n) in BUCKETS.iter().zip(&m.origin_buckets) {
                cumulative += load(n);
                let _ = writeln!(out, "{name}_bucket{{site=\"{host}\",le=\"{bound}\"}} {cumulative}");
            }
            let count = load(&m.origin_count);
            let _ = writeln!(out, "{name}_bucket{{site=\"{host}\",le=\"+Inf\"}} {count}");
            let _ = writeln!(out, "{name}_sum{{site=\"{host}\"}} {}", load(&m.origin_micros) as f64 / 1e6);
            let _ = writeln!(out, "{name}_count{{site=\"{host}\"}} {count}");
        }
        for (name, help, kind, value) in extra {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let metrics = Metrics::default();
        let site = metrics.site("a.test");
        site.request(CacheResult::Hit, 10);
        site.request(CacheResult::Miss, 5);
        site.origin_answered(Duration::from_millis(3));
        site.origin_answered(Duration::from_secs(1));
        let text = metrics.render(&[("lagran_edge_access_log_dropped", "Lines dropped.", "gauge", 2)]);
        for line in [
            "lagran_edge_requests_total{site=\"a.test\"} 2",
            "lagran_edge_cache_total{site=\"a.test\",result=\"hit\"} 1",
            "lagran_edge_bytes_out_total{site=\"a.test\"} 15",
            "lagran_edge_origin_seconds_bucket{site=\"a.test\",le=\"0.0025\"} 0",
            "lagran_edge_origin_seconds_bucket{site=\"a.test\",le=\"0.005\"} 1",
            "lagran_edge_origin_seconds_bucket{site=\"a.test\",le=\"1\"} 2",
            "lagran_edge_origin_seconds_count{site=\"a.test\"} 2",
            "lagran_edge_access_log_dropped 2",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
