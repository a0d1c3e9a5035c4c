//! `lagran monitor --watch N --listen ADDR`: the outside monitor as a service.
//! Every N seconds it asks each NS host, over UDP and over TCP (and over TLS
//! at each `--dot` address, for the hosts that enable DNS over TLS), for
//! `_version.<zone>` and for every expected answer (`--expect NAME@SUBNET`,
//! an A query carrying that ECS subnet), compares them with what the control
//! plane says it serves (`GET /api/v1/routes`, `GET /api/v1/schedule`), and
//! exports the result as `lagran_monitor_*` on its own `GET /metrics`. Run one
//! per vantage point: their series differ by `instance`.
//!
//! Lag is the time between the control plane's table and the one the NS host
//! serves (their `generated_at`), 0 when the host serves the newest.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::monitor::parse_version_txt;
use crate::api_client::ApiClient;

/// How long one NS host has to answer one query.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// A transport the NS hosts are asked over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Transport {
    Udp,
    Tcp,
    /// DNS over TLS (RFC 7858).
    Dot,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Dot => "dot",
        }
    }
}

/// An answer checked on every NS host: `NAME@SUBNET` (`edge.lagran.net@58.60.0.0/24`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectation {
    pub name: String,
    pub address: IpAddr,
    pub prefix: u8,
}

impl FromStr for Expectation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, subnet) = s.split_once('@').ok_or_else(|| format!("{s:?}: expected NAME@SUBNET"))?;
        let net: ipnet::IpNet = subnet.parse().map_err(|e| format!("{subnet:?}: {e}"))?;
        if name.trim().is_empty() {
            return Err(format!("{s:?}: the name is empty"));
        }
        Ok(Expectation {
            name: name.trim().trim_end_matches('.').to_string(),
            address: net.network(),
            prefix: net.prefix_len(),
        })
    }
}

/// An NS host's DNS-over-TLS address, `[NAME@]ADDR:PORT`: its certificate
/// must be valid for NAME (default: the address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DotTarget {
    pub name: ServerName<'static>,
    pub addr: SocketAddr,
}

impl FromStr for DotTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, addr) = match s.rsplit_once('@') {
            Some((name, addr)) => (Some(name.trim()), addr),
            None => (None, s),
        };
        let addr: SocketAddr = addr.trim().parse().map_err(|e| format!("{s:?}: {e} (expected [NAME@]ADDR:PORT)"))?;
        let name = match name {
            Some(n) => ServerName::try_from(n.to_string()).map_err(|e| format!("{s:?}: {e}"))?,
            None => ServerName::from(addr.ip()),
        };
        Ok(DotTarget { name, addr })
    }
}

/// What the monitor watches.
#[derive(Clone, Debug)]
pub struct Watch {
    pub ns: Vec<SocketAddr>,
    /// The NS hosts that enable DNS over TLS, asked over it too.
    pub dot: Vec<DotTarget>,
    /// Whom DoT certificates are checked against (`--ca` or the system's
    /// store); needed when `dot` is not empty.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub zone: String,
    pub expect: Vec<Expectation>,
    pub interval: Duration,
}

/// A client configuration for DNS over TLS from the TLS one of the control
/// API (its roots and client certificate), with the DoT ALPN (RFC 7858 §3.2).
pub fn dot_client_config(tls: &crate::control_tls::ClientTls) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut config = (*tls.config()?).clone();
    config.alpn_protocols = vec![crate::dns::cert::ALPN_DOT.to_vec()];
    Ok(Arc::new(config))
}

/// One NS host over one transport, as last seen.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Probe {
    pub up: bool,
    pub version: Option<u64>,
    pub generated_at_ms: Option<i64>,
    pub rtt: Duration,
    /// Expected answers that differed in the last round.
    pub answer_mismatches: u64,
    pub failures_total: u64,
}

/// Everything `/metrics` shows.
#[derive(Debug, Default)]
pub struct State {
    pub control_version: Option<u64>,
    pub control_generated_at_ms: Option<i64>,
    pub rounds_total: u64,
    pub probes: BTreeMap<(SocketAddr, Transport), Probe>,
}

impl State {
    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let gauge = |out: &mut String, name: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        };
        gauge(&mut out, "lagran_monitor_control_version", "The route-table version the control plane serves.");
        let _ = writeln!(out, "lagran_monitor_control_version {}", self.control_version.unwrap_or(0));
        let _ = writeln!(out, "# HELP lagran_monitor_rounds_total Rounds of queries since start.");
        let _ = writeln!(
            out,
            "# TYPE lagran_monitor_rounds_total counter\nlagran_monitor_rounds_total {}",
            self.rounds_total
        );
        let labels = |(ns, t): &(SocketAddr, Transport)| format!("ns=\"{ns}\",transport=\"{}\"", t.label());
        gauge(&mut out, "lagran_monitor_up", "1 when the NS host answered _version in the last round.");
        for (k, p) in &self.probes {
            let _ = writeln!(out, "lagran_monitor_up{{{}}} {}", labels(k), u8::from(p.up));
        }
        gauge(&mut out, "lagran_monitor_ns_version", "The route-table version the NS host answers in _version.");
        for (k, p) in self.probes.iter().filter(|(_, p)| p.up) {
            let _ = writeln!(out, "lagran_monitor_ns_version{{{}}} {}", labels(k), p.version.unwrap_or(0));
        }
        gauge(
            &mut out,
            "lagran_monitor_lag_seconds",
            "How much older the NS host's table is than the control plane's.",
        );
        for (k, p) in self.probes.iter().filter(|(_, p)| p.up) {
            if let Some(lag) = self.lag_seconds(p) {
                let _ = writeln!(out, "lagran_monitor_lag_seconds{{{}}} {lag}", labels(k));
            }
        }
        gauge(
            &mut out,
            "lagran_monitor_version_mismatch",
            "1 when the NS host serves another version than the control plane.",
        );
        for (k, p) in self.probes.iter().filter(|(_, p)| p.up) {
            let differs = self.control_version.is_some_and(|c| Some(c) != p.version);
            let _ = writeln!(out, "lagran_monitor_version_mismatch{{{}}} {}", labels(k), u8::from(differs));
        }
        gauge(
            &mut out,
            "lagran_monitor_answer_mismatches",
            "Expected answers (--expect) the NS host answered otherwise.",
        );
        for (k, p) in self.probes.iter().filter(|(_, p)| p.up) {
            let _ = writeln!(out, "lagran_monitor_answer_mismatches{{{}}} {}", labels(k), p.answer_mismatches);
        }
        gauge(&mut out, "lagran_monitor_rtt_seconds", "Round trip of the last _version query.");
        for (k, p) in self.probes.iter().filter(|(_, p)| p.up) {
            let _ = writeln!(out, "lagran_monitor_rtt_seconds{{{}}} {}", labels(k), p.rtt.as_secs_f64());
        }
        let _ = writeln!(out, "# HELP lagran_monitor_failures_total Queries that got no usable answer.");
        let _ = writeln!(out, "# TYPE lagran_monitor_failures_total counter");
        for (k, p) in &self.probes {
            let _ = writeln!(out, "lagran_monitor_failures_total{{{}}} {}", labels(k), p.failures_total);
        }
        out
    }

    fn lag_seconds(&self, p: &Probe) -> Option<f64> {
        let (cv, pv) = (self.control_version?, p.version?);
        if pv >= cv {
            return Some(0.0);
        }
        Some((self.control_generated_at_ms? - p.generated_at_ms?).max(0) as f64 / 1e3)
    }
}

/// Runs rounds every `watch.interval` and serves `/metrics` on `listen` until
/// `shutdown`.
pub async fn run(
    client: ApiClient,
    watch: Watch,
    listen: SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let state = Arc::new(Mutex::new(State::default()));
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding {listen}"))?;
    let for_http = state.clone();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let s = for_http.clone();
            async move { s.lock().unwrap_or_else(|e| e.into_inner()).render() }
        }),
    );
    tracing::info!(listen = %listener.local_addr()?, ns = ?watch.ns, "lagran monitor serving /metrics");
    let token = shutdown.clone();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned()).await;
    });
    while !shutdown.is_cancelled() {
        round(&client, &watch, &state).await;
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(watch.interval) => {}
        }
    }
    let _ = server.await;
    Ok(())
}

/// One round: the control plane's view, then every NS host over every transport.
pub async fn round(client: &ApiClient, watch: &Watch, state: &Mutex<State>) {
    let routes = client.call("GET", "/api/v1/routes", None).await.ok();
    let mut expected = Vec::with_capacity(watch.expect.len());
    for e in &watch.expect {
        let path = format!("/api/v1/schedule?domain={}&subnet={}/{}", e.name, e.address, e.prefix);
        let served = client.call("GET", &path, None).await.ok().map(|v| addresses(&v["served"]["a"]));
        expected.push(served);
    }
    let mut seen = Vec::new();
    for &ns in &watch.ns {
        for t in [Transport::Udp, Transport::Tcp] {
            let via = Via { ns, tls: None };
            seen.push(((ns, t), probe(&via, t, &watch.zone, &watch.expect, &expected).await));
        }
    }
    for d in &watch.dot {
        let via = Via { ns: d.addr, tls: watch.tls.clone().map(|c| (c, d.name.clone())) };
        seen.push(((d.addr, Transport::Dot), probe(&via, Transport::Dot, &watch.zone, &watch.expect, &expected).await));
    }
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = routes {
        s.control_version = r["version"].as_u64();
        s.control_generated_at_ms = r["generated_at_ms"].as_i64();
    }
    s.rounds_total += 1;
    for (key, (mut p, failures)) in seen {
        p.failures_total = s.probes.get(&key).map_or(0, |old| old.failures_total) + failures;
        s.probes.insert(key, p);
    }
}

fn addresses(v: &serde_json::Value) -> Vec<String> {
    let mut a: Vec<String> =
        v.as_array().into_iter().flatten().filter_map(|x| x.as_str().map(str::to_string)).collect();
    a.sort();
    a
}

/// Where a query goes: the NS host's address and, over TLS, the client
/// configuration and the name its certificate must have.
struct Via {
    ns: SocketAddr,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

/// One NS host over one transport: the probe and how many queries failed.
async fn probe(
    via: &Via,
    t: Transport,
    zone: &str,
    expect: &[Expectation],
    expected: &[Option<Vec<String>>],
) -> (Probe, u64) {
    let mut failures = 0;
    let started = Instant::now();
    let ns = via.ns;
    let version = ask(via, t, &format!("_version.{}", zone.trim_end_matches('.')), RecordType::TXT, None).await;
    let mut p = Probe { rtt: started.elapsed(), ..Probe::default() };
    match version {
        Ok(reply) => {
            let txt = records(&reply).join(" ");
            let field = |k: &str| txt.split_whitespace().find_map(|w| w.strip_prefix(k)).and_then(|v| v.parse().ok());
            p.version = parse_version_txt(&txt).0;
            p.generated_at_ms = field("generated_at=");
            p.up = p.version.is_some();
        }
        Err(e) => tracing::warn!(%ns, transport = t.label(), error = %e, "monitor: _version query failed"),
    }
    if !p.up {
        failures += 1;
    }
    for (e, want) in expect.iter().zip(expected) {
        let Some(want) = want else { continue };
        match ask(via, t, &e.name, RecordType::A, Some((e.address, e.prefix))).await {
            Ok(reply) => {
                let mut got = records(&reply);
                got.sort();
                if &got != want {
                    tracing::warn!(%ns, transport = t.label(), name = %e.name, ?got, ?want, "monitor: answer differs from the control plane's");
                    p.answer_mismatches += 1;
                }
            }
            Err(_) => failures += 1,
        }
    }
    (p, failures)
}

/// The answer records as text (TXT strings, A addresses).
fn records(reply: &Message) -> Vec<String> {
    reply
        .answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::TXT(t) => Some(t.to_string()),
            RData::A(a) => Some(a.to_string()),
            _ => None,
        })
        .collect()
}

/// One query, with an ECS option when `subnet` is given.
async fn ask(
    via: &Via,
    t: Transport,
    name: &str,
    rtype: RecordType,
    subnet: Option<(IpAddr, u8)>,
) -> Result<Message, String> {
    let name = Name::from_str(&format!("{}.", name.trim_end_matches('.'))).map_err(|e| e.to_string())?;
    let mut msg = Message::new();
    msg.set_id(rand::random())
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .add_query(Query::query(name, rtype));
    if let Some((addr, prefix)) = subnet {
        let mut edns = Edns::new();
        edns.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(addr, prefix, 0)));
        msg.set_edns(edns);
    }
    let bytes = msg.to_vec().map_err(|e| e.to_string())?;
    let reply = tokio::time::timeout(QUERY_TIMEOUT, exchange(via, t, &bytes))
        .await
        .map_err(|_| format!("no answer within {} ms", QUERY_TIMEOUT.as_millis()))??;
    Message::from_vec(&reply).map_err(|e| e.to_string())
}

async fn exchange(via: &Via, t: Transport, query: &[u8]) -> Result<Vec<u8>, String> {
    let e = |e: std::io::Error| e.to_string();
    let ns = via.ns;
    match t {
        Transport::Udp => {
            let bind: SocketAddr =
                if ns.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
            let sock = tokio::net::UdpSocket::bind(bind).await.map_err(e)?;
            sock.send_to(query, ns).await.map_err(e)?;
            let mut buf = vec![0u8; 4096];
            let (n, _) = sock.recv_from(&mut buf).await.map_err(e)?;
            buf.truncate(n);
            Ok(buf)
        }
        Transport::Tcp => framed(tokio::net::TcpStream::connect(ns).await.map_err(e)?, query).await,
        Transport::Dot => {
            let (config, name) = via.tls.clone().ok_or("no TLS client configuration for DoT")?;
            let tcp = tokio::net::TcpStream::connect(ns).await.map_err(e)?;
            let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.map_err(e)?;
            framed(tls, query).await
        }
    }
}

/// One query over a stream: RFC 1035 §4.2.2 (and RFC 7858 §3.3 over TLS):
/// a two-octet length before each message.
async fn framed<S: AsyncRead + AsyncWrite + Unpin>(mut conn: S, query: &[u8]) -> Result<Vec<u8>, String> {
    let e = |e: std::io::Error| e.to_string();
    let len = u16::try_from(query.len()).map_err(|_| "query too long".to_string())?;
    conn.write_all(&[&len.to_be_bytes()[..], query].concat()).await.map_err(e)?;
    conn.flush().await.map_err(e)?;
    let n = conn.read_u16().await.map_err(e)?;
    let mut buf = vec![0u8; n as usize];
    conn.read_exact(&mut buf).await.map_err(e)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_parse_and_bad_ones_are_refused() {
        let e: Expectation = "edge.lagran.net.@58.60.1.0/24".parse().unwrap();
        assert_eq!(
            e,
            Expectation { name: "edge.lagran.net".into(), address: "58.60.1.0".parse().unwrap(), prefix: 24 }
        );
        assert!("edge.lagran.net".parse::<Expectation>().is_err());
        assert!("edge.lagran.net@nonsense".parse::<Expectation>().is_err());
        assert!("@58.60.0.0/24".parse::<Expectation>().is_err());
    }

    #[test]
    fn dot_targets_parse_with_or_without_a_name() {
        let t: DotTarget = "ns1.example@192.0.2.53:853".parse().unwrap();
        assert_eq!((t.name.to_str().as_ref(), t.addr), ("ns1.example", "192.0.2.53:853".parse().unwrap()));
        let t: DotTarget = "[2001:db8::53]:853".parse().unwrap();
        assert_eq!(t.name, ServerName::from("2001:db8::53".parse::<IpAddr>().unwrap()));
        for bad in ["ns1.example", "ns1.example@192.0.2.53", "bad name!@192.0.2.53:853"] {
            assert!(bad.parse::<DotTarget>().is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_dot_host_is_asked_over_tls_and_a_certificate_for_another_name_fails() {
        use crate::dns::cert::{ALPN_DOT, Certificate, write_self_signed};
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = write_self_signed(dir.path(), &["dns.test"]);
        let cert = Certificate::load(&cert_path, &key_path).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config(ALPN_DOT).unwrap()));
        let dns = crate::dns::server::tests_support::server();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let running = tokio::spawn(crate::dns::tls::run(dns.clone(), listener, acceptor, shutdown.clone()));

        let tls = crate::control_tls::ClientTls { ca: Some(cert_path), ..Default::default() };
        let config = dot_client_config(&tls).unwrap();
        let target: DotTarget = format!("dns.test@{addr}").parse().unwrap();
        let via = Via { ns: addr, tls: Some((config.clone(), target.name)) };
        let (p, failures) = probe(&via, Transport::Dot, "edge.lagran.net", &[], &[]).await;
        assert!(p.up && p.version == Some(1) && failures == 0, "{p:?} {failures}");
        let snap: std::collections::HashMap<_, _> = dns.counters.snapshot().into_iter().collect();
        assert_eq!(snap["queries_dot"], 1, "asked over TLS");

        let wrong = Via { ns: addr, tls: Some((config, ServerName::try_from("other.test").unwrap())) };
        let (p, failures) = probe(&wrong, Transport::Dot, "edge.lagran.net", &[], &[]).await;
        assert!(!p.up && failures == 1, "a certificate for another name is a failure: {p:?}");
        let mut s = State::default();
        s.probes.insert((addr, Transport::Dot), Probe { failures_total: failures, ..p });
        assert!(s.render().contains(&format!("lagran_monitor_up{{ns=\"{addr}\",transport=\"dot\"}} 0\n")));
        shutdown.cancel();
        running.await.unwrap();
    }

    #[test]
    fn lag_and_mismatch_follow_the_versions() {
        let ns1: SocketAddr = "127.0.0.1:53".parse().unwrap();
        let ns2: SocketAddr = "127.0.0.2:53".parse().unwrap();
        let mut s = State { control_version: Some(20), control_generated_at_ms: Some(50_000), ..State::default() };
        let probe = |v, at| Probe { up: true, version: Some(v), generated_at_ms: Some(at), ..Probe::default() };
        s.probes.insert((ns1, Transport::Udp), probe(20, 50_000));
        s.probes.insert((ns2, Transport::Tcp), Probe { answer_mismatches: 1, ..probe(10, 20_000) });
        s.probes.insert((ns2, Transport::Udp), Probe { failures_total: 3, ..Probe::default() });
        let m = s.render();
        assert!(m.contains("lagran_monitor_lag_seconds{ns=\"127.0.0.1:53\",transport=\"udp\"} 0\n"), "{m}");
        assert!(m.contains("lagran_monitor_lag_seconds{ns=\"127.0.0.2:53\",transport=\"tcp\"} 30\n"), "{m}");
        assert!(m.contains("lagran_monitor_version_mismatch{ns=\"127.0.0.1:53\",transport=\"udp\"} 0\n"), "{m}");
        assert!(m.contains("lagran_monitor_version_mismatch{ns=\"127.0.0.2:53\",transport=\"tcp\"} 1\n"), "{m}");
        assert!(m.contains("lagran_monitor_answer_mismatches{ns=\"127.0.0.2:53\",transport=\"tcp\"} 1\n"), "{m}");
        assert!(m.contains("lagran_monitor_up{ns=\"127.0.0.2:53\",transport=\"udp\"} 0\n"), "{m}");
        assert!(m.contains("lagran_monitor_failures_total{ns=\"127.0.0.2:53\",transport=\"udp\"} 3\n"), "{m}");
    }
}
