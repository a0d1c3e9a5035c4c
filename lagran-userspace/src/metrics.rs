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
    /// Whether this process builds and publishes the tables (always true
    /// outside a cluster; in one, only the leader's).
    pub leading: bool,
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
        if let Some(c) = control {
            let _ = writeln!(
                out,
                "# HELP lagran_control_leading 1 when this control process builds and publishes the tables."
            );
            let _ = writeln!(out, "# TYPE lagran_control_leading gauge");
            let _ = writeln!(out, "lagran_control_leading {}", u8::from(c.leading));
        }
        if let Some(nodes) = control.and_then(|c| c.nodes.as_deref()) {
            let _ = writeln!(out, "# HELP lagran_nodes Edge nodes by status.");
            let _ = writeln!(out, "# TYPE lagran_nodes gauge");
            for status in ["online", "offline", "disabled"] {
                let n = nodes.iter().filter(|n| n.status.as_str() == status).count();
                let _ = writeln!(out, "lagran_nodes{{status=\"{status}\"}} {n}");
            }
            render_nodes(&mut out, nodes, now_ms());
        }
        crate::signature_expiry::render_prometheus(table, now_ms() / 1000, &mut out);
        self.dns.render_prometheus(&mut out);
        for source in self.sources.lock().expect("metrics sources lock poisoned").iter() {
            source(&mut out);
        }
        out
    }
}

/// Per node and per pool: heartbeat age, CPU and cap usage (the spill stage's
/// inputs), nodes by status. Node and pool names are operators' strings:
/// escaped as the exposition format asks.
fn render_nodes(out: &mut String, nodes: &[Node], now_ms: i64) {
    let _ = writeln!(out, "# HELP lagran_pool_nodes Edge nodes by pool and status.");
    let _ = writeln!(out, "# TYPE lagran_pool_nodes gauge");
    let mut pools: Vec<&str> = nodes.iter().map(|n| n.pool.as_str()).collect();
    pools.sort_unstable();
    pools.dedup();
    for pool in pools {
        for state in ["online", "offline", "disabled"] {
            let n = nodes.iter().filter(|n| n.pool == pool && n.status.as_str() == state).count();
            let _ = writeln!(out, "lagran_pool_nodes{{pool=\"{}\",state=\"{state}\"}} {n}", escape(pool));
        }
    }
    let _ = writeln!(
        out,
        "# HELP lagran_node_heartbeat_age_seconds Time since the node's last heartbeat (nodes that never sent one have none)."
    );
    let _ = writeln!(out, "# TYPE lagran_node_heartbeat_age_seconds gauge");
    for n in nodes {
        if let Some(t) = n.last_heartbeat_ms {
            let age = (now_ms - t).max(0) as f64 / 1e3;
            let _ = writeln!(out, "lagran_node_heartbeat_age_seconds{{{}}} {age}", node_labels(n));
        }
    }
    let _ = writeln!(out, "# HELP lagran_node_cpu_percent The node's CPU usage from its last heartbeat, percent.");
    let _ = writeln!(out, "# TYPE lagran_node_cpu_percent gauge");
    for n in nodes {
        let _ = writeln!(out, "lagran_node_cpu_percent{{{}}} {}", node_labels(n), n.cpu_usage);
    }
    let _ = writeln!(
        out,
        "# HELP lagran_node_cap_ratio Usage of the node's tighter cap, bandwidth or connections (0 when uncapped)."
    );
    let _ = writeln!(out, "# TYPE lagran_node_cap_ratio gauge");
    for n in nodes {
        let ratio = crate::engine::NodeView::new(n.clone()).cap_ratio();
        let _ = writeln!(out, "lagran_node_cap_ratio{{{}}} {ratio}", node_labels(n));
    }
}

fn node_labels(n: &Node) -> String {
    format!("node=\"{}\",pool=\"{}\"", escape(&n.name), escape(&n.pool))
}

/// A label value as the text exposition format writes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_leadership_pools_heartbeats_and_load() {
        let mut gz = Node::new("gz-01");
        gz.pool = "cn".into();
        gz.last_heartbeat_ms = Some(now_ms() - 90_000);
        gz.cpu_usage = 75.0;
        gz.max_conns = 100;
        gz.conns = 95;
        let mut hk = Node::new("hk-\"01");
        hk.pool = "cn".into();
        hk.status = crate::model::NodeStatus::Offline;
        let metrics = Metrics::new(Arc::new(DnsCounters::default()));
        let stats = ControlStats { nodes: Some(vec![gz, hk]), leading: true, ..ControlStats::default() };
        let text = metrics.render(&RouteTable::default(), Some(&stats));
        assert!(text.contains("\nlagran_control_leading 1\n"), "{text}");
        assert!(text.contains("lagran_pool_nodes{pool=\"cn\",state=\"online\"} 1\n"), "{text}");
        assert!(text.contains("lagran_pool_nodes{pool=\"cn\",state=\"offline\"} 1\n"), "{text}");
        let age = text
            .lines()
            .find_map(|l| l.strip_prefix("lagran_node_heartbeat_age_seconds{node=\"gz-01\",pool=\"cn\"} "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("gz-01's heartbeat age");
        assert!((90.0..100.0).contains(&age), "{age}");
        assert!(!text.contains("lagran_node_heartbeat_age_seconds{node=\"hk"), "no heartbeat, no age: {text}");
        assert!(text.contains("lagran_node_cpu_percent{node=\"gz-01\",pool=\"cn\"} 75\n"), "{text}");
        assert!(text.contains("lagran_node_cap_ratio{node=\"gz-01\",pool=\"cn\"} 0.95\n"), "{text}");
        assert!(text.contains("node=\"hk-\\\"01\""), "quotes escaped: {text}");
        let ns_host = metrics.render(&RouteTable::default(), None);
        assert!(!ns_host.contains("lagran_control_leading"), "an NS host leads nothing");
    }
}
