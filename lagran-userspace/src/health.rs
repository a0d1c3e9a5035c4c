//! Node liveness: heartbeat timeouts and active probes.
//!
//! - Heartbeats: a node that has reported (`last_heartbeat_ms` set) and then
//!   stays silent for `heartbeat_timeout_secs` is treated as offline until it
//!   reports again. Nodes that never had an agent (the demo's) never time out.
//! - Probes: L7 `GET {agent_url}/healthz` (200 within `timeout_ms`; `http://` or
//!   `https://`, the latter verified against the system's CA certificates plus
//!   `health.ca`) and L4 TCP connect to `{public_ip}:{probe_port}`, every `interval_secs`;
//!   `fall` consecutive failures mark a node down, `rise` successes bring it up.
//!   A node's own heartbeat never overrides a failed probe.
//!
//! The verdicts are an input of the pure engine ([`Liveness`]); this module
//! only observes and reports changes to the scheduler.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::fail_static::FailStatic;
use crate::model::Node;
use crate::settings::{InvalidSetting, Key, KeyDefault};

/// Probe and heartbeat knobs (`[health]`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthSettings {
    pub interval_secs: u64,
    pub timeout_ms: u64,
    /// Consecutive failures that mark a node down.
    pub fall: u32,
    /// Consecutive successes that bring a down node back.
    pub rise: u32,
    pub heartbeat_timeout_secs: u64,
    /// PEM CA certificates trusted for `https://` agent URLs besides the system's.
    pub ca: Option<PathBuf>,
    /// Above this share of a pool's nodes timing out by heartbeat in one
    /// recompute, none of them is withdrawn until a probe confirms it.
    pub max_withdraw_ratio: f64,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            interval_secs: 5,
            timeout_ms: 2000,
            fall: 3,
            rise: 2,
            heartbeat_timeout_secs: 60,
            ca: None,
            max_withdraw_ratio: 0.5,
        }
    }
}

impl HealthSettings {
    /// A probe period and thresholds of zero would never decide anything.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.fall == 0 || self.rise == 0 || self.interval_secs == 0 {
            return Err(InvalidSetting::new("health", "interval_secs, fall and rise must be > 0"));
        }
        if !(0.0..=1.0).contains(&self.max_withdraw_ratio) {
            return Err(InvalidSetting::new("health.max_withdraw_ratio", "must be between 0 and 1"));
        }
        Ok(())
    }
}

/// The keys of `[health]`.
pub const HEALTH_KEYS: &[Key] = &[
    Key::toml(
        "health.interval_secs",
        KeyDefault::Toml("5"),
        "10",
        "probe interval (L7 `GET {agent_url}/healthz`, `http://` or `https://` — verified, never cleartext —, \
         L4 connect to `public_ip:probe_port`)",
    ),
    Key::toml("health.timeout_ms", KeyDefault::Toml("2000"), "1000", "a probe must succeed within this"),
    Key::toml("health.fall", KeyDefault::Toml("3"), "5", "consecutive failures that take a node down"),
    Key::toml("health.rise", KeyDefault::Toml("2"), "4", "consecutive successes that bring it back"),
    Key::toml(
        "health.heartbeat_timeout_secs",
        KeyDefault::Toml("60"),
        "120",
        "a node that reported and then stays silent this long is out",
    ),
    Key::toml(
        "health.ca",
        KeyDefault::Described("none"),
        "\"/etc/lagran/agents-ca.pem\"",
        "PEM CA certificates trusted for `https://` agent URLs besides the system's \
         (an unreadable file stops the start)",
    ),
    Key::toml(
        "health.max_withdraw_ratio",
        KeyDefault::Toml("0.5"),
        "0.3",
        "when more than this share of a pool's nodes time out by heartbeat in one recompute, none is withdrawn \
         until a probe confirms it (1: no guard)",
    ),
];

/// The TLS client of `https://` probes: the system's CA certificates, plus
/// those in `ca` (PEM) when given. An unreadable `ca` is an error naming it.
pub fn probe_tls_config(ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(error = %e, "a system CA certificate could not be read");
    }
    let (_added, _ignored) = roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("health.ca {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("health.ca {}: holds no certificate", path.display()));
        }
        for c in certs {
            roots.add(c).map_err(|e| format!("health.ca {}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// What the probes currently say of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProbeState {
    pub up: bool,
    pub consecutive_failures: u32,
    pub consecutive_successes: u32,
    pub last_error: Option<String>,
}

impl ProbeState {
    /// Folds one probe result in; returns true when `up` flipped.
    pub fn record(&mut self, ok: Result<(), String>, settings: &HealthSettings) -> bool {
        match ok {
            Ok(()) => {
                self.consecutive_successes += 1;
                self.consecutive_failures = 0;
                self.last_error = None;
                if !self.up && self.consecutive_successes >= settings.rise {
                    self.up = true;
                    return true;
                }
            }
            Err(e) => {
                self.consecutive_failures += 1;
                self.consecutive_successes = 0;
                self.last_error = Some(e);
                if self.up && self.consecutive_failures >= settings.fall {
                    self.up = false;
                    return true;
                }
            }
        }
        false
    }
}

/// Liveness verdicts the engine reads: probe states by node name, and what
/// the heartbeats say ([`crate::fail_static`]).
#[derive(Clone, Debug, Default)]
pub struct Liveness {
    pub probes: HashMap<String, ProbeState>,
    pub heartbeat_timeout_ms: i64,
    /// When this process last heard from each node, whatever the store did with it.
    pub heard: HashMap<String, i64>,
    /// The store refuses writes: no node times out by heartbeat.
    pub timeouts_suspended: bool,
    /// Nodes timed out by heartbeat that stay in the answers until a probe confirms them down.
    pub held: HashSet<String>,
    /// Silence counts from no earlier than this (wall-clock ms): the store
    /// accepted writes again, or this process took the lead, then (`None`:
    /// neither happened).
    pub silence_counts_from_ms: Option<i64>,
}

/// Why a node is not alive, if it is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Dead {
    ProbeDown,
    HeartbeatTimeout,
}

impl Liveness {
    pub fn verdict(&self, node: &Node, now_ms: i64) -> Option<Dead> {
        if self.probes.get(&node.name).is_some_and(|p| !p.up) {
            return Some(Dead::ProbeDown);
        }
        if !self.timeouts_suspended && !self.held.contains(&node.name) && self.heartbeat_timed_out(node, now_ms) {
            return Some(Dead::HeartbeatTimeout);
        }
        None
    }

    /// When the node was last heard from: the newer of its stored
    /// `last_heartbeat_ms` and this process's record (`None`: never).
    pub fn last_heard(&self, node: &Node) -> Option<i64> {
        let heard = self.heard.get(&node.name).copied();
        let last = node.last_heartbeat_ms.max(heard);
        last.map(|t| self.silence_counts_from_ms.map_or(t, |from| t.max(from)))
    }

    /// Whether the node reported and then stayed silent longer than the
    /// timeout, whatever the suspension and the guard say.
    pub fn heartbeat_timed_out(&self, node: &Node, now_ms: i64) -> bool {
        self.heartbeat_timeout_ms > 0
            && self.last_heard(node).is_some_and(|t| now_ms.saturating_sub(t) > self.heartbeat_timeout_ms)
    }

    /// When the next of `nodes` alive by its heartbeats at `now_ms` times out
    /// (the first millisecond its verdict is [`Dead::HeartbeatTimeout`]), if
    /// any: the scheduler builds again then, so a silent node leaves the
    /// answers when its timeout ends, not at the next periodic recompute.
    pub fn next_timeout_ms<'a>(&self, nodes: impl IntoIterator<Item = &'a Node>, now_ms: i64) -> Option<i64> {
        if self.heartbeat_timeout_ms <= 0 || self.timeouts_suspended {
            return None;
        }
        nodes
            .into_iter()
            .filter_map(|n| self.last_heard(n))
            .map(|t| t.saturating_add(self.heartbeat_timeout_ms).saturating_add(1))
            .filter(|&at| at > now_ms)
            .min()
    }
}

/// Whether a node has anything to probe.
pub fn probe_targets(node: &Node) -> (Option<String>, Option<SocketAddr>) {
    let l7 =
        (!node.agent_url.trim().is_empty()).then(|| format!("{}/healthz", node.agent_url.trim().trim_end_matches('/')));
    let l4 = match (node.public_ip, node.probe_port) {
        (Some(ip), Some(port)) => Some(SocketAddr::from((ip, port))),
        _ => None,
    };
    (l7, l4)
}

/// One L4 probe: a TCP connect within the timeout.
pub async fn probe_tcp(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("tcp {addr}: {e}")),
        Err(_) => Err(format!("tcp {addr}: no connection within {} ms", timeout.as_millis())),
    }
}

/// One L7 probe: `GET url` answering 200 within the timeout, over plain HTTP or,
/// for `https://`, TLS verified with `tls` (never a fallback to cleartext).
pub async fn probe_http(url: &str, timeout: Duration, tls: &Arc<rustls::ClientConfig>) -> Result<(), String> {
    let fut = async {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: bad URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(format!("{url}: only http:// and https:// agent URLs are probed")),
        };
        let host = uri.host().ok_or_else(|| format!("{url}: no host"))?.trim_matches(['[', ']']).to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| format!("{url}: {e}"))?;
        let authority = uri.authority().map_or(host.clone(), |a| a.to_string());
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        if https {
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| format!("{url}: {host} is not a TLS server name: {e}"))?;
            let tls = tokio_rustls::TlsConnector::from(tls.clone())
                .connect(name, stream)
                .await
                .map_err(|e| format!("{url}: TLS: {e}"))?;
            get_200(url, tls, authority, path).await
        } else {
            get_200(url, stream, authority, path).await
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(format!("{url}: no 200 within {} ms", timeout.as_millis())),
    }
}

/// `GET path` on an open connection; `Ok` on 200.
async fn get_200<I>(url: &str, io: I, host: String, path: String) -> Result<(), String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    {
        let io = hyper_util::rt::TokioIo::new(io);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(io).await.map_err(|e| format!("{url}: handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, host)
            .header(hyper::header::USER_AGENT, "lagran-probe")
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .map_err(|e| format!("{url}: {e}"))?;
        let resp = sender.send_request(req).await.map_err(|e| format!("{url}: {e}"))?;
        if resp.status() == hyper::StatusCode::OK { Ok(()) } else { Err(format!("{url}: status {}", resp.status())) }
    }
}

/// The probe loop's shared state.
pub struct HealthMonitor {
    settings: HealthSettings,
    states: Mutex<HashMap<String, ProbeState>>,
    /// The TLS client of `https://` agent URLs.
    tls: Arc<rustls::ClientConfig>,
    /// What was heard from the agents and whether the store writes.
    fail_static: FailStatic,
}

impl HealthMonitor {
    /// An unusable `health.ca` is logged and left out (the daemon checks it
    /// first with [`probe_tls_config`] and refuses to start).
    pub fn new(settings: HealthSettings) -> Arc<Self> {
        let tls = probe_tls_config(settings.ca.as_deref()).unwrap_or_else(|e| {
            tracing::error!(error = %e, "https:// probes trust the system's CA certificates only");
            probe_tls_config(None).expect("a TLS client with the system's roots builds")
        });
        Arc::new(HealthMonitor {
            settings,
            states: Mutex::new(HashMap::new()),
            tls,
            fail_static: FailStatic::default(),
        })
    }

    pub fn settings(&self) -> &HealthSettings {
        &self.settings
    }

    /// The in-memory record of heartbeats and the store's write state.
    pub fn fail_static(&self) -> &FailStatic {
        &self.fail_static
    }

    /// The current verdicts, for the engine, with the nodes the scheduler's
    /// guard held at its last recompute.
    pub fn liveness(&self) -> Liveness {
        Liveness {
            probes: self.states.lock().expect("health lock poisoned").clone(),
            heartbeat_timeout_ms: (self.settings.heartbeat_timeout_secs * 1000) as i64,
            heard: self.fail_static.heard_times(),
            timeouts_suspended: !self.fail_static.writes.writable(),
            held: self.fail_static.held().into_iter().collect(),
            silence_counts_from_ms: Some(self.fail_static.silence_counts_from()).filter(|&t| t > 0),
        }
    }

    /// Probes every node once; returns the names whose verdict flipped.
    pub async fn probe_all(&self, nodes: &[Node]) -> Vec<String> {
        let timeout = Duration::from_millis(self.settings.timeout_ms);
        let mut tasks = Vec::new();
        for n in nodes {
            let (l7, l4) = probe_targets(n);
            if l7.is_none() && l4.is_none() {
                continue;
            }
            let name = n.name.clone();
            let tls = self.tls.clone();
            tasks.push(tokio::spawn(async move {
                let mut result = Ok(());
                if let Some(url) = l7 {
                    result = probe_http(&url, timeout, &tls).await;
                }
                if result.is_ok()
                    && let Some(addr) = l4
                {
                    result = probe_tcp(addr, timeout).await;
                }
                (name, result)
            }));
        }
        let mut flipped = Vec::new();
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let mut results = Vec::new();
        for t in tasks {
            if let Ok(r) = t.await {
                results.push(r);
            }
        }
        let mut states = self.states.lock().expect("health lock poisoned");
        states.retain(|k, _| names.contains(&k.as_str()));
        for (name, result) in results {
            // A node starts "up": the first probes can only take it down after `fall` failures.
            let st = states.entry(name.clone()).or_insert_with(|| ProbeState { up: true, ..Default::default() });
            let err = result.as_ref().err().cloned();
            if st.record(result, &self.settings) {
                if st.up {
                    tracing::info!(node = %name, "probe: node is up again");
                } else {
                    tracing::warn!(node = %name, error = err.as_deref().unwrap_or(""), "probe: node is down");
                }
                flipped.push(name);
            }
        }
        flipped
    }

    /// Runs the probes every `interval_secs` until shutdown, calling `on_change`
    /// when a verdict flips.
    pub async fn run<F, Fut>(
        self: Arc<Self>,
        nodes: impl Fn() -> Fut + Send + 'static,
        on_change: F,
        shutdown: CancellationToken,
    ) where
        F: Fn() + Send + 'static,
        Fut: std::future::Future<Output = Vec<Node>> + Send,
    {
        let mut tick = tokio::time::interval(Duration::from_secs(self.settings.interval_secs.max(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let list = nodes().await;
            if !self.probe_all(&list).await.is_empty() {
                on_change();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_failures_down_two_successes_up() {
        let s = HealthSettings::default();
        let mut st = ProbeState { up: true, ..Default::default() };
        assert!(!st.record(Err("x".into()), &s));
        assert!(!st.record(Err("x".into()), &s));
        assert!(st.record(Err("x".into()), &s), "third failure flips");
        assert!(!st.up);
        assert!(!st.record(Ok(()), &s));
        assert!(st.record(Ok(()), &s), "second success flips back");
        assert!(st.up);
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let s = HealthSettings::default();
        let mut st = ProbeState { up: true, ..Default::default() };
        st.record(Err("x".into()), &s);
        st.record(Err("x".into()), &s);
        st.record(Ok(()), &s);
        assert!(!st.record(Err("x".into()), &s));
        assert!(st.up);
    }

    #[test]
    fn heartbeat_timeout_only_for_nodes_that_reported() {
        let l = Liveness { heartbeat_timeout_ms: 60_000, ..Default::default() };
        let mut n = Node::new("a");
        assert_eq!(l.verdict(&n, 1_000_000), None, "never had an agent");
        n.last_heartbeat_ms = Some(1_000_000);
        assert_eq!(l.verdict(&n, 1_059_000), None);
        assert_eq!(l.verdict(&n, 1_061_000), Some(Dead::HeartbeatTimeout));
    }

    #[test]
    fn the_next_timeout_is_the_first_millisecond_a_reporting_node_is_dead() {
        let l = Liveness { heartbeat_timeout_ms: 60_000, ..Default::default() };
        let at = |name: &str, t: Option<i64>| {
            let mut n = Node::new(name.to_string());
            n.last_heartbeat_ms = t;
            n
        };
        let nodes = [at("never", None), at("late", Some(50_000)), at("early", Some(10_000)), at("dead", Some(1_000))];
        let next = l.next_timeout_ms(&nodes, 65_000).expect("two nodes alive by their heartbeats");
        assert_eq!(next, 70_001, "the earlier of the two alive, one millisecond past its timeout");
        assert_eq!(l.verdict(&nodes[2], next - 1), None, "alive until then");
        assert_eq!(l.verdict(&nodes[2], next), Some(Dead::HeartbeatTimeout), "dead from then on");
        assert_eq!(l.next_timeout_ms(&nodes, 200_000), None, "every reporting node already timed out");
        assert_eq!(l.next_timeout_ms(&nodes[..1], 0), None, "a node that never reported never times out");
        let off = Liveness { heartbeat_timeout_ms: 0, ..l };
        assert_eq!(off.next_timeout_ms(&nodes, 65_000), None, "timeouts off");
    }

    #[test]
    fn silence_counts_from_the_store_coming_back_or_the_lead_taken() {
        let mut node = Node::new("a");
        node.last_heartbeat_ms = Some(1_000);
        let l = Liveness { heartbeat_timeout_ms: 3_000, ..Default::default() };
        assert_eq!(l.verdict(&node, 10_000), Some(Dead::HeartbeatTimeout), "silent for 9 s");
        let l = Liveness { silence_counts_from_ms: Some(8_000), ..l };
        assert_eq!(l.verdict(&node, 10_000), None, "silent for 2 s since the store came back");
        assert_eq!(l.verdict(&node, 11_001), Some(Dead::HeartbeatTimeout), "a whole timeout since then");
        node.last_heartbeat_ms = None;
        assert_eq!(l.last_heard(&node), None, "a node never heard of stays unheard");
    }

    #[test]
    fn liveness_takes_the_heartbeats_heard_in_memory_and_suspends_timeouts_while_the_store_fails() {
        let mut n = Node::new("a");
        n.last_heartbeat_ms = Some(1_000_000);
        let mut l = Liveness { heartbeat_timeout_ms: 60_000, ..Default::default() };
        assert_eq!(l.verdict(&n, 1_100_000), Some(Dead::HeartbeatTimeout), "the stored time alone: timed out");
        l.heard.insert("a".into(), 1_090_000);
        assert_eq!(l.verdict(&n, 1_100_000), None, "heard in memory 10 s ago, whatever the store holds");
        assert_eq!(l.next_timeout_ms([&n], 1_100_000), Some(1_150_001), "the timeout runs from the time heard");
        let mut never_stored = Node::new("b");
        never_stored.last_heartbeat_ms = None;
        l.heard.insert("b".into(), 1_000_000);
        assert_eq!(l.verdict(&never_stored, 1_100_000), Some(Dead::HeartbeatTimeout), "heard, never stored, silent");
        l.timeouts_suspended = true;
        assert_eq!(l.verdict(&never_stored, 9_999_999), None, "no timeout while the store refuses writes");
        assert_eq!(l.verdict(&n, 9_999_999), None);
        assert_eq!(l.next_timeout_ms([&n], 1_100_000), None, "and no timeout to wake up for");
        let mut probes = HashMap::new();
        probes.insert("a".to_string(), ProbeState { up: false, ..Default::default() });
        l.probes = probes;
        assert_eq!(l.verdict(&n, 1_100_000), Some(Dead::ProbeDown), "probes still take a node out at once");
        l.probes.clear();
        l.timeouts_suspended = false;
        l.held.insert("b".into());
        assert_eq!(l.verdict(&never_stored, 1_100_000), None, "a held node stays");
        assert!(l.heartbeat_timed_out(&never_stored, 1_100_000), "though its heartbeats timed out");
    }

    #[test]
    fn a_failed_probe_wins_over_a_fresh_heartbeat() {
        let mut probes = HashMap::new();
        probes.insert("a".to_string(), ProbeState { up: false, ..Default::default() });
        let l = Liveness { probes, heartbeat_timeout_ms: 60_000, ..Default::default() };
        let mut n = Node::new("a");
        n.last_heartbeat_ms = Some(1_000);
        assert_eq!(l.verdict(&n, 1_001), Some(Dead::ProbeDown));
    }

    #[tokio::test]
    async fn probes_against_real_sockets() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else { return };
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut buf = [0u8; 1024];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]);
                    let resp = if req.starts_with("GET /healthz") {
                        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                    } else {
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"
                    };
                    let _ = s.write_all(resp.as_bytes()).await;
                });
            }
        });
        let t = Duration::from_secs(2);
        assert_eq!(probe_tcp(addr, t).await, Ok(()));
        let tls = probe_tls_config(None).unwrap();
        assert_eq!(probe_http(&format!("http://{addr}/healthz"), t, &tls).await, Ok(()));
        assert!(probe_http(&format!("http://{addr}/other"), t, &tls).await.unwrap_err().contains("503"));
        // a closed port
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert!(probe_tcp(closed, t).await.is_err());
    }

    #[tokio::test]
    async fn https_agent_urls_are_probed_over_verified_tls() {
        let dir = tempfile::tempdir().unwrap();
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let ca = dir.path().join("agent-ca.pem");
        std::fs::write(&ca, ck.cert.pem()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::try_from(ck.key_pair.serialize_der()).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![ck.cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let plain_seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = plain_seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else { return };
                let (acceptor, seen) = (acceptor.clone(), seen.clone());
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut first = [0u8; 1];
                    if s.peek(&mut first).await.is_ok() && first[0] != 0x16 {
                        seen.store(true, std::sync::atomic::Ordering::SeqCst); // not a TLS handshake
                    }
                    let Ok(mut tls) = acceptor.accept(s).await else { return };
                    let mut buf = [0u8; 1024];
                    let _ = tls.read(&mut buf).await;
                    let _ = tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        let t = Duration::from_secs(5);
        let url = format!("https://localhost:{port}/healthz");
        let trusting = probe_tls_config(Some(&ca)).unwrap();
        assert_eq!(probe_http(&url, t, &trusting).await, Ok(()), "https:// agent URLs work");
        let system_only = probe_tls_config(None).unwrap();
        let err = probe_http(&url, t, &system_only).await.unwrap_err();
        assert!(err.contains("TLS") && err.contains("certificate"), "an unknown issuer fails the probe: {err}");
        assert!(!plain_seen.load(std::sync::atomic::Ordering::SeqCst), "never a cleartext request to an https URL");
        let missing = probe_tls_config(Some(&dir.path().join("nope.pem"))).unwrap_err();
        assert!(missing.contains("health.ca") && missing.contains("nope.pem"), "{missing}");
    }
}
