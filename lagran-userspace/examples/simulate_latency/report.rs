//! What `simulate --latency` reports per steering policy, and the targets
//! the `latency` policy is held to.

/// One policy's results.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub policy: &'static str,
    pub clients: usize,
    /// Client RTT (true, not measured) at steady state, and the oracle's.
    pub mean_ms: f64,
    pub optimum_mean_ms: f64,
    pub p95_ms: f64,
    pub optimum_p95_ms: f64,
    /// Share of clients within 10 % of their optimum.
    pub within_10pct: f64,
    /// Client answer changes over the noise rounds (each report ±10 %).
    pub noise_changes: usize,
    pub noise_rounds: usize,
    /// A congested link: the clients that should leave it, and the seconds
    /// until the last of them had (`None`: not within the event).
    pub congested_clients: usize,
    pub congested_moved_secs: Option<i64>,
    /// A degraded node: likewise.
    pub degraded_clients: usize,
    pub degraded_moved_secs: Option<i64>,
}

impl Row {
    pub fn mean_ratio(&self) -> f64 {
        self.mean_ms / self.optimum_mean_ms
    }

    pub fn p95_ratio(&self) -> f64 {
        self.p95_ms / self.optimum_p95_ms
    }

    /// The targets the row misses, as sentences (empty: all met): within
    /// 5 % of the optimum mean and 10 % of its p95, ≥ 90 % of clients within
    /// 10 %, no answer change under noise, off a congested link within one
    /// window.
    pub fn misses(&self, window_secs: i64) -> Vec<String> {
        let mut out = Vec::new();
        if self.mean_ratio() > 1.05 {
            out.push(format!("mean RTT {:.1} ms is {:.3}× the optimum (> 1.05)", self.mean_ms, self.mean_ratio()));
        }
        if self.p95_ratio() > 1.10 {
            out.push(format!("p95 RTT {:.1} ms is {:.3}× the optimum's (> 1.10)", self.p95_ms, self.p95_ratio()));
        }
        if self.within_10pct < 90.0 {
            out.push(format!("{:.1} % of clients within 10 % of the optimum (< 90 %)", self.within_10pct));
        }
        if self.noise_changes > 0 {
            out.push(format!("{} answer changes under ±10 % noise", self.noise_changes));
        }
        if self.congested_clients > 0 && self.congested_moved_secs.is_none_or(|s| s > window_secs) {
            out.push(format!(
                "the congested link's clients moved after {:?} s (window {window_secs} s)",
                self.congested_moved_secs
            ));
        }
        out
    }
}

/// Seconds, or `never` (`-` when no client had to move).
fn moved(clients: usize, secs: Option<i64>) -> String {
    match (clients, secs) {
        (0, _) => "-".into(),
        (_, Some(s)) => format!("{s} s"),
        (_, None) => "never".into(),
    }
}

/// The rows as a table, `geo` beside `latency`.
pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>6} {:>7} {:>9} {:>14} {:>14}\n",
        "policy",
        "clients",
        "mean ms",
        "opt ms",
        "×opt",
        "p95 ms",
        "opt p95",
        "×opt",
        "≤1.1×%",
        "noise-ch",
        "congest→off",
        "degrade→off"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<8} {:>8} {:>8.1} {:>8.1} {:>6.3} {:>8.1} {:>8.1} {:>6.3} {:>7.1} {:>9} {:>14} {:>14}\n",
            r.policy,
            r.clients,
            r.mean_ms,
            r.optimum_mean_ms,
            r.mean_ratio(),
            r.p95_ms,
            r.optimum_p95_ms,
            r.p95_ratio(),
            r.within_10pct,
            r.noise_changes,
            format!("{} ({})", moved(r.congested_clients, r.congested_moved_secs), r.congested_clients),
            format!("{} ({})", moved(r.degraded_clients, r.degraded_moved_secs), r.degraded_clients),
        ));
    }
    out
}

/// The rows as CSV.
pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "policy,clients,mean_ms,optimum_mean_ms,p95_ms,optimum_p95_ms,within_10pct_of_optimum_pct,noise_rounds,noise_answer_changes,congested_clients,congested_moved_secs,degraded_clients,degraded_moved_secs\n",
    );
    let secs = |s: Option<i64>| s.map_or(String::new(), |s| s.to_string());
    for r in rows {
        out.push_str(&format!(
            "{},{},{:.2},{:.2},{:.2},{:.2},{:.2},{},{},{},{},{},{}\n",
            r.policy,
            r.clients,
            r.mean_ms,
            r.optimum_mean_ms,
            r.p95_ms,
            r.optimum_p95_ms,
            r.within_10pct,
            r.noise_rounds,
            r.noise_changes,
            r.congested_clients,
            secs(r.congested_moved_secs),
            r.degraded_clients,
            secs(r.degraded_moved_secs),
        ));
    }
    out
}

/// The value at which `share` of the total weight is reached, of (value, weight).
pub fn weighted_quantile(values: &mut [(f64, usize)], share: f64) -> f64 {
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: usize = values.iter().map(|v| v.1).sum();
    let mut below = 0;
    for &(v, w) in values.iter() {
        below += w;
        if below as f64 >= share * total as f64 {
            return v;
        }
    }
    values.last().map_or(f64::NAN, |v| v.0)
}
