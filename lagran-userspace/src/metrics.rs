//! `GET /metrics`: Prometheus text exposition of the daemon's counters.

use std::fmt::Write;
use std::sync::Arc;

use crate::clock::now_ms;
use crate::dns::counters::DnsCounters;
use crate::model::Node;
use crate::route_table::RouteTable;

/// Extra metric sources registered at start-up (the XDP counters, for one).
pub type Source = Box<dyn Fn(&mut String) + Send + Sync>;

/// Extra counter sources, read by the console's traffic sampler: `(name, value)`
/// pairs, e.g. `("xdp_answered", n)` and `("xdp_passed:<reason>", n)`.
pub type CounterSource = Box<dyn Fn() -> Vec<(String, u64)> + Send + Sync>;

/// What only a control plane knows, for [`Metrics::render`].
#[derive(Clone, Debug, Default)]
pub struct ControlStats {
    /// Duration of the last recompute, in microseconds.
    pub last_recompute_us: u64,
    /// Recomputes since start.
    pub recomputes: u64,
    /// The nodes, when the store could be read.
    pub nodes: Option<Vec<Node>>,
}

/// Everything `/metrics` renders.
pub struct Metrics {
    pub dns: Arc<DnsCounters>,
    sources: std::sync::Mutex<Vec<Source>>,
    counter_sources: std::sync::Mutex<Vec<CounterSource>>,
}

impl Metrics {
    pub fn new(dns: Arc<DnsCounters>) -> Self {
        Metrics { dns, sources: std::sync::Mutex::new(Vec::new()), counter_sources: std::sync::Mutex::new(Vec::new()) }
    }

    /// Adds a counter source read by [`Metrics::counters`].
    pub fn add_counter_source(&self, source: CounterSource) {
        self.counter_sources.lock().expect("metrics sources lock poisoned").push(source);
    }

    /// The registered sources' counters (the XDP fast path's, when attached).
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.counter_sources.lock().expect("metrics sources lock poisoned").iter().flat_map(|s| s()).collect()
    }

    /// Adds a renderer called on every scrape.
    pub fn add_source(&self, source: Source) {
        self.sources.lock().expect("metrics sources lock poisoned").push(source);
    }

    /// Renders everything; `control` is `None` on an NS host (`lagran dns`).
    pub fn render(&self, table: &RouteTable, control: Option<&ControlStats>) -> String {
        let mut out = String::with_capacity(4096);
        let (last_us, recomputes) = control.map_or((0, 0), |c| (c.last_recompute_us, c.recomputes));
        let _ = writeln!(out, "# HELP lagran_route_table_version Version of the route table being served.");
        let _ = writeln!(out, "# TYPE lagran_route_table_version gauge");
        let _ = writeln!(out, "lagran_route_table_version {}", table.version);
        let _ = writeln!(out, "# HELP lagran_route_table_age_seconds Age of the route table being served.");
        let _ = writeln!(out, "# TYPE lagran_route_table_age_seconds gauge");
        let age = if table.version == 0 { 0.0 } else { (now_ms() - table.generated_at_ms).max(0) as f64 / 1e3 };
        let _ = writeln!(out, "lagran_route_table_age_seconds {age}");
        let _ = writeln!(out, "# HELP lagran_recompute_duration_seconds Duration of the last route recompute.");
        let _ = writeln!(out, "# TYPE lagran_recompute_duration_seconds gauge");
        let _ = writeln!(out, "lagran_recompute_duration_seconds {}", last_us as f64 / 1e6);
        let _ = writeln!(out, "# HELP lagran_recomputes_total Route recomputes since start.");
        let _ = writeln!(out, "# TYPE lagran_recomputes_total counter");
        let _ = writeln!(out, "lagran_recomputes_total {recomputes}");
        let prefixes: usize = table.scheduled_names().map(|n| n.v4.len() + n.v6.len()).sum();
        let _ = writeln!(out, "# HELP lagran_route_prefixes Client prefixes in the route table, all names.");
        let _ = writeln!(out, "# TYPE lagran_route_prefixes gauge");
        let _ = writeln!(out, "lagran_route_prefixes {prefixes}");
        if let Some(nodes) = control.and_then(|c| c.nodes.as_deref()) {
            let _ = writeln!(out, "# HELP lagran_nodes Edge nodes by status.");
            let _ = writeln!(out, "# TYPE lagran_nodes gauge");
            for status in ["online", "offline", "disabled"] {
                let n = nodes.iter().filter(|n| n.status.as_str() == status).count();
                let _ = writeln!(out, "lagran_nodes{{status=\"{status}\"}} {n}");
            }
        }
        self.dns.render_prometheus(&mut out);
        for source in self.sources.lock().expect("metrics sources lock poisoned").iter() {
            source(&mut out);
        }
        out
    }
}
