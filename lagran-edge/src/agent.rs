//! The node agent: every `heartbeat_secs`, POST the node's load to the control plane
//! (`/api/v1/nodes/{node}/heartbeat`, header `x-lagran-agent-token`). CPU and memory
//! come from `/proc`, bandwidth from the bytes served since the last report, `conns`
//! from the open-connection counter. A failed report is logged and retried with a
//! doubling wait (capped at a minute, so a recovered control plane hears from the node
//! before its 60 s heartbeat timeout matters twice); it never stops the edge.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::Stats;
use crate::config::Config;
use crate::control::{self, ControlClient};

pub const TOKEN_HEADER: &str = "x-lagran-agent-token";
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("heartbeat to {url} failed")]
    Request { url: String, source: hyper_util::client::legacy::Error },
    #[error("heartbeat to {url} timed out after {REQUEST_TIMEOUT:?}")]
    Timeout { url: String },
    #[error("heartbeat to {url} answered {status}: {body}")]
    Status { url: String, status: StatusCode, body: String },
    #[error("heartbeat URL {url} is invalid")]
    Url { url: String, source: hyper::http::Error },
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// `{control_url}/api/v1/nodes/{node_name}/heartbeat`.
    pub url: String,
    pub token: String,
    pub interval: Duration,
    /// The CA bundle trusted for an `https://` URL.
    pub ca: Option<std::path::PathBuf>,
}

impl AgentConfig {
    /// `None` when no `control_url` is configured.
    pub fn from_config(config: &Config) -> Option<AgentConfig> {
        let base = config.control_url.as_deref()?.trim_end_matches('/');
        Some(AgentConfig {
            url: format!("{base}/api/v1/nodes/{}/heartbeat", config.node_name),
            token: config.agent_token.clone().unwrap_or_default(),
            interval: config.heartbeat_interval(),
            ca: config.ca.clone(),
        })
    }
}

/// The heartbeat body the control plane reads into the node's load columns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Heartbeat {
    /// Percent, 0–100, over the last interval.
    pub cpu_usage: f64,
    /// Percent of memory not available, 0–100.
    pub memory_usage: f64,
    /// Megabits per second served over the last interval.
    pub bandwidth_mbps: f64,
    /// Client connections open now.
    pub conns: i64,
}

/// Cumulative CPU jiffies from the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub busy: u64,
    pub total: u64,
}

/// Parses the aggregate `cpu` line: idle and iowait count as not busy; guest time is
/// already inside user and nice, so it is not added twice.
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).take(8).map(str::parse).collect::<Result<_, _>>().ok()?;
    if v.len() < 4 {
        return None;
    }
    let total: u64 = v.iter().sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some(CpuTimes { busy: total - idle, total })
}

/// Used memory in percent: `100 × (1 − MemAvailable / MemTotal)`.
pub fn parse_meminfo(text: &str) -> Option<f64> {
    let field = |name: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    (total > 0.0).then(|| (100.0 * (1.0 - available / total)).clamp(0.0, 100.0))
}

fn cpu_percent(prev: CpuTimes, now: CpuTimes) -> f64 {
    let total = now.total.saturating_sub(prev.total);
    if total == 0 {
        return 0.0;
    }
    (100.0 * now.busy.saturating_sub(prev.busy) as f64 / total as f64).clamp(0.0, 100.0)
}

/// Turns successive samples into heartbeats.
struct Sampler {
    stats: Arc<Stats>,
    cpu: CpuTimes,
    bytes: u64,
    at: Instant,
}

impl Sampler {
    fn new(stats: Arc<Stats>) -> Sampler {
        // Starting from zero makes the first report the average since boot.
        Sampler {
            bytes: stats.bytes_served.load(Ordering::Relaxed),
            stats,
            cpu: CpuTimes::default(),
            at: Instant::now(),
        }
    }

    fn sample(&mut self) -> Heartbeat {
        let read = |p| std::fs::read_to_string(p).ok();
        let cpu = read("/proc/stat").as_deref().and_then(parse_proc_stat).unwrap_or(self.cpu);
        let memory_usage = read("/proc/meminfo").as_deref().and_then(parse_meminfo).unwrap_or(0.0);
        let bytes = self.stats.bytes_served.load(Ordering::Relaxed);
        let now = Instant::now();
        let secs = now.duration_since(self.at).as_secs_f64();
        let bandwidth_mbps = if secs > 0.0 { bytes.saturating_sub(self.bytes) as f64 * 8.0 / 1e6 / secs } else { 0.0 };
        let beat = Heartbeat {
            cpu_usage: cpu_percent(self.cpu, cpu),
            memory_usage,
            bandwidth_mbps,
            conns: self.stats.open_conns.load(Ordering::Relaxed),
        };
        (self.cpu, self.bytes, self.at) = (cpu, bytes, now);
        beat
    }
}

async fn send(client: &ControlClient, cfg: &AgentConfig, beat: &Heartbeat) -> Result<(), AgentError> {
    let url = &cfg.url;
    let body = serde_json::to_vec(beat).expect("a heartbeat serializes");
    let req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("content-type", "application/json")
        .header(TOKEN_HEADER, &cfg.token)
        .body(Full::new(Bytes::from(body)))
        .map_err(|source| AgentError::Url { url: url.clone(), source })?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|source| AgentError::Request { url: url.clone(), source })?;
        let status = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        if status.is_success() {
            Ok(())
        } else {
            let body = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            Err(AgentError::Status { url: url.clone(), status, body })
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange).await.map_err(|_| AgentError::Timeout { url: url.clone() })?
}

/// Reports until `shutdown`; the first report goes out at once.
pub async fn run(cfg: AgentConfig, stats: Arc<Stats>, shutdown: CancellationToken) {
    let client = match control::client(cfg.ca.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "heartbeat agent cannot start");
            return;
        }
    };
    let mut sampler = Sampler::new(stats);
    let mut failures: u32 = 0;
    info!(url = %cfg.url, interval = ?cfg.interval, "heartbeat agent started");
    loop {
        let beat = sampler.sample();
        let wait = match send(&client, &cfg, &beat).await {
            Ok(()) => {
                if failures > 0 {
                    info!(after_failures = failures, "heartbeats delivered again");
                }
                debug!(?beat, "heartbeat sent");
                failures = 0;
                cfg.interval
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = cfg.interval.saturating_mul(1 << failures.min(6)).min(MAX_BACKOFF.max(cfg.interval));
                warn!(error = %crate::error_chain(&e), failures, retry_in = ?wait, "heartbeat failed");
                wait
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(wait) => {}
        }
    }
    info!("heartbeat agent stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_from_proc_stat() {
        let a = parse_proc_stat("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(a, CpuTimes { busy: 200, total: 1000 });
        let b = parse_proc_stat("cpu  150 0 150 800 100 0 0 0 0 0\n").unwrap();
        assert!((cpu_percent(a, b) - 50.0).abs() < 1e-9, "100 busy of 200 jiffies");
        assert_eq!(cpu_percent(b, b), 0.0);
        assert_eq!(parse_proc_stat("intr 1 2 3"), None);
    }

    #[test]
    fn memory_from_meminfo() {
        let text = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n";
        assert!((parse_meminfo(text).unwrap() - 75.0).abs() < 1e-9);
        assert_eq!(parse_meminfo("MemTotal: 1000 kB\n"), None);
    }

    #[test]
    fn samples_this_machine() {
        let mut s = Sampler::new(Arc::new(Stats::default()));
        let beat = s.sample();
        assert!((0.0..=100.0).contains(&beat.cpu_usage) && (0.0..=100.0).contains(&beat.memory_usage), "{beat:?}");
    }
}
