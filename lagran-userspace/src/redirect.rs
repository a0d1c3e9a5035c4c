//! The HTTP 302 entry point on `--http-listen`.
//!
//! A `GET` or `HEAD` whose Host is a scheduled name is answered
//! `302 Found` with `Location: http://<node>/<same path and query>`, the node
//! being the one the DNS responder would answer for the same client
//! ([`ScheduledName::served`] on the same route table, the same staleness and
//! fallback policy). `<node>` is what DNS answers: for a name in CNAME mode
//! the chosen node's hostname, else its address. The
//! hostname keeps what the operator chose to publish (the node's own name,
//! so its virtual host and TLS certificate match, and a later address change
//! needs no new redirect); a node without a hostname is reached by address,
//! as DNS answers it. Everything carries `Cache-Control:
//! no-store`: the answer is per client and per moment.
//!
//! | request | response |
//! |---|---|
//! | `GET`/`HEAD`, Host a scheduled name | 302 to the primary's hostname in CNAME mode, else its IPv4 address (else IPv6), counted per node |
//! | the same, table older than DNS_STALE_SECS with DNS_FALLBACK_IP set | 302 to the fallback |
//! | the same, no table / no eligible node | 302 to DNS_FALLBACK_IP, else 503 |
//! | any other Host (or none) | 404 |
//! | another method | 405, `Allow: GET, HEAD` |
//!
//! The client is the TCP peer, unless the peer is one of
//! `[http_redirect] trusted_proxies`: then `X-Forwarded-For` is read from the
//! right, and the first address that is not itself a trusted proxy is the
//! client (see [`client_address`]).
//!
//! [`ScheduledName::served`]: crate::route_table::ScheduledName::served

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;
use std::time::Duration;
use tokio::net::TcpListener;

use crate::listener::Limits;
use tokio_util::sync::CancellationToken;

use crate::dns::answer::is_stale;
use crate::dns::settings::DnsSettings;
use crate::route_table::SharedRouteTable;

pub mod settings;

/// The redirector's listener: 4096 connections, 64 from one client, a
/// request head within 10 s, nothing moving for 30 s closes a connection.
pub const REDIRECT_LIMITS: Limits = Limits {
    max_connections: 4096,
    max_per_client: 64,
    header_timeout: Duration::from_secs(10),
    idle_timeout: Duration::from_secs(30),
};

/// What became of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// 302 to `location`; `node` names the answer (`fallback` for DNS_FALLBACK_IP).
    Redirect { location: String, node: String },
    /// The Host is not a scheduled name: 404.
    UnknownHost,
    /// A scheduled name, but nothing to send the client to: 503.
    Unavailable,
}

/// Redirects counted per node, rendered for `/metrics`.
#[derive(Debug, Default)]
pub struct RedirectCounters {
    by_node: std::sync::Mutex<BTreeMap<String, u64>>,
    unknown_host: AtomicU64,
    unavailable: AtomicU64,
}

impl RedirectCounters {
    fn record(&self, d: &Decision) {
        match d {
            Decision::Redirect { node, .. } => {
                let mut m = self.by_node.lock().expect("redirect counters lock poisoned");
                *m.entry(node.clone()).or_default() += 1;
            }
            Decision::UnknownHost => {
                self.unknown_host.fetch_add(1, Ordering::Relaxed);
            }
            Decision::Unavailable => {
                self.unavailable.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `lagran_http_redirects_total{node}`, `lagran_http_unknown_host_total`,
    /// `lagran_http_unavailable_total`.
    pub fn render_prometheus(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP lagran_http_redirects_total HTTP 302 redirects by the node chosen.");
        let _ = writeln!(out, "# TYPE lagran_http_redirects_total counter");
        for (node, n) in self.by_node.lock().expect("redirect counters lock poisoned").iter() {
            let _ = writeln!(out, "lagran_http_redirects_total{{node=\"{}\"}} {n}", escape(node));
        }
        let _ = writeln!(
            out,
            "# HELP lagran_http_unknown_host_total HTTP requests for a Host that is not scheduled (404)."
        );
        let _ = writeln!(out, "# TYPE lagran_http_unknown_host_total counter");
        let _ = writeln!(out, "lagran_http_unknown_host_total {}", self.unknown_host.load(Ordering::Relaxed));
        let _ = writeln!(out, "# HELP lagran_http_unavailable_total HTTP requests with no node and no fallback (503).");
        let _ = writeln!(out, "# TYPE lagran_http_unavailable_total counter");
        let _ = writeln!(out, "lagran_http_unavailable_total {}", self.unavailable.load(Ordering::Relaxed));
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The redirect service.
pub struct Redirector {
    pub table: SharedRouteTable,
    pub settings: Arc<DnsSettings>,
    /// When the control plane last confirmed the table (the DNS responder's staleness).
    pub confirmation: Arc<crate::confirmation::Confirmation>,
    pub trusted_proxies: Vec<IpNet>,
    pub counters: Arc<RedirectCounters>,
}

impl Redirector {
    /// Where a request for `host` + `path_and_query` from `client` goes, at `now_ms`.
    pub fn decide(&self, host: &str, path_and_query: &str, client: IpAddr, now_ms: i64) -> Decision {
        let Some(name) = host_name(host) else { return Decision::UnknownHost };
        let table = self.table.load();
        let Some(scheduled) = table.scheduled(&name) else { return Decision::UnknownHost };
        let fallback = self.settings.fallback_ip.map(IpAddr::V4);
        let to_host = |host: &str, node: &str| {
            let path = if path_and_query.starts_with('/') { path_and_query } else { "/" };
            Decision::Redirect { location: format!("http://{host}{path}"), node: node.to_string() }
        };
        let to = |addr: IpAddr, node: &str| match addr {
            IpAddr::V4(a) => to_host(&a.to_string(), node),
            IpAddr::V6(a) => to_host(&format!("[{a}]"), node),
        };
        let or_fallback = || fallback.map_or(Decision::Unavailable, |a| to(a, "fallback"));
        // The DNS responder's policy, in the same order: no table, no answer
        // for this client, stale with a fallback, then the scheduled answer.
        if table.version == 0 {
            return or_fallback();
        }
        // An HTTP client is its own resolver: there is no ECS option to pass.
        let Some(served) = scheduled.served(client, None) else { return or_fallback() };
        let answer = served.answer;
        if is_stale(self.confirmation.last_ms(), &self.settings, now_ms) && fallback.is_some() {
            return or_fallback();
        }
        let node = answer.node.as_deref().unwrap_or("-");
        if let Some(host) = answer.hostname.as_deref() {
            return to_host(host, node);
        }
        match (answer.ipv4.first(), answer.ipv6.first()) {
            (Some(&a), _) => to(IpAddr::V4(a), node),
            (None, Some(&a)) => to(IpAddr::V6(a), node),
            (None, None) => or_fallback(),
        }
    }

    /// Serves HTTP on `listener` until `shutdown`, under [`REDIRECT_LIMITS`].
    pub async fn run(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) -> std::io::Result<()> {
        let app = axum::Router::new().fallback(handle).with_state(self);
        crate::listener::http::serve("HTTP redirector", listener, app, REDIRECT_LIMITS, shutdown).await
    }
}

async fn handle(
    State(r): State<Arc<Redirector>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let no_store = [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))];
    // RFC 9110 §9.1: "All general-purpose servers MUST support the methods GET
    // and HEAD." Nothing else has a meaning here.
    if method != Method::GET && method != Method::HEAD {
        let allow = (header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return (StatusCode::METHOD_NOT_ALLOWED, no_store, [allow]).into_response();
    }
    // RFC 9112 §3.2.2: an absolute-form target's authority wins over Host.
    let host = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_string));
    let xff: Vec<&str> = headers.get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok()).collect();
    let client = client_address(peer.ip(), &xff, &r.trusted_proxies);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let decision = match host {
        Some(h) => r.decide(&h, path, client, crate::clock::now_ms()),
        None => Decision::UnknownHost,
    };
    r.counters.record(&decision);
    match decision {
        Decision::Redirect { location, node } => {
            tracing::debug!(client = %client, node = %node, location = %location, "http redirect");
            match HeaderValue::from_str(&location) {
                Ok(loc) => (StatusCode::FOUND, no_store, [(header::LOCATION, loc)]).into_response(),
                Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, no_store).into_response(),
            }
        }
        Decision::UnknownHost => (StatusCode::NOT_FOUND, no_store, "not a scheduled name\n").into_response(),
        Decision::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, no_store, "no node available\n").into_response(),
    }
}

/// The client of a request from `peer` carrying the `X-Forwarded-For`
/// header values `xff` (in order).
///
/// Only a trusted peer's header is believed. Each proxy appends the address
/// it received the request from, so the list is read from the right: trusted
/// proxies are skipped, and the first address that is not one is the client
/// (anything to its left was written by that client and proves nothing). An
/// entry that is not an address ends the walk at the last hop believed; a
/// list made only of trusted proxies names its leftmost one.
pub fn client_address(peer: IpAddr, xff: &[&str], trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |a: IpAddr| trusted.iter().any(|n| n.contains(&a));
    let mut client = peer.to_canonical();
    if !is_trusted(client) {
        return client;
    }
    let hops = xff.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|h| !h.is_empty());
    for hop in hops.collect::<Vec<_>>().into_iter().rev() {
        let Some(addr) = parse_hop(hop) else { return client };
        client = addr.to_canonical();
        if !is_trusted(client) {
            return client;
        }
    }
    client
}

/// `203.0.113.7`, `2001:db8::7`, `203.0.113.7:4711` or `[2001:db8::7]:4711`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>().ok().or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// The name a Host header asks for: lowercase, without port or trailing dot;
/// `None` for an address literal.
fn host_name(host: &str) -> Option<String> {
    let host = host.trim();
    if host.starts_with('[') {
        return None;
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        Some(_) => return None,
        None => host,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty() && name.parse::<IpAddr>().is_err()).then_some(name)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::dns::server::tests_support::table;

    fn redirector(settings: DnsSettings) -> Redirector {
        let shared = crate::route_table::empty_shared();
        shared.store(Arc::new(table()));
        let confirmation = Arc::new(crate::confirmation::Confirmation::new());
        confirmation.confirm(crate::clock::now_ms());
        Redirector {
            table: shared,
            settings: Arc::new(settings),
            confirmation,
            trusted_proxies: vec!["127.0.0.0/8".parse().unwrap(), "10.9.0.0/16".parse().unwrap()],
            counters: Arc::new(RedirectCounters::default()),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_rightmost_untrusted_forwarded_address_is_the_client() {
        let trusted: Vec<IpNet> = vec!["127.0.0.0/8".parse().unwrap(), "10.9.0.0/16".parse().unwrap()];
        let c = |peer: &str, xff: &[&str]| client_address(ip(peer), xff, &trusted);
        assert_eq!(c("198.51.100.1", &["58.60.1.1"]), ip("198.51.100.1"), "an untrusted peer's header is ignored");
        assert_eq!(c("127.0.0.1", &["58.60.1.1"]), ip("58.60.1.1"), "a trusted peer's header is believed");
        assert_eq!(c("127.0.0.1", &[]), ip("127.0.0.1"), "no header: the peer");
        assert_eq!(
            c("127.0.0.1", &["6.6.6.6, 58.60.1.1", "10.9.1.1"]),
            ip("58.60.1.1"),
            "trusted hops are skipped from the right; what the client wrote on the left is not believed"
        );
        assert_eq!(c("127.0.0.1", &["10.9.1.1, 10.9.1.2"]), ip("10.9.1.1"), "only proxies: the leftmost");
        assert_eq!(c("127.0.0.1", &["58.60.1.1, garbage"]), ip("127.0.0.1"), "garbage ends the walk");
        assert_eq!(c("127.0.0.1", &["[2001:db8::1]:443"]), ip("2001:db8::1"), "ports and brackets are read");
        assert_eq!(c("::ffff:127.0.0.1", &["58.60.1.1"]), ip("58.60.1.1"), "an IPv4-mapped peer is trusted as IPv4");
    }

    #[test]
    fn hosts_are_read_without_port_case_or_trailing_dot() {
        assert_eq!(host_name("Edge.Lagran.NET.:8080").as_deref(), Some("edge.lagran.net"));
        assert_eq!(host_name("edge.lagran.net").as_deref(), Some("edge.lagran.net"));
        assert_eq!(host_name("[::1]:80"), None);
        assert_eq!(host_name("127.0.0.1"), None);
        assert_eq!(host_name(""), None);
    }

    #[test]
    fn decides_like_the_dns_responder() {
        let r = redirector(DnsSettings::default());
        let now = crate::clock::now_ms();
        let d = r.decide("edge.lagran.net", "/video/a.mp4?x=1", ip("10.1.2.3"), now);
        assert_eq!(
            d,
            Decision::Redirect { location: "http://203.0.113.1/video/a.mp4?x=1".into(), node: "gz-01".into() },
            "the partition of 10.1/16 goes to gz-01, path and query kept"
        );
        let d = r.decide("EDGE.lagran.net:80", "/", ip("127.0.0.1"), now);
        assert!(matches!(&d, Decision::Redirect { node, .. } if node == "default-01"), "{d:?}");
        assert_eq!(r.decide("other.example", "/", ip("10.1.2.3"), now), Decision::UnknownHost);
        assert_eq!(r.decide("whoami.edge.lagran.net", "/", ip("10.1.2.3"), now), Decision::UnknownHost);

        // Stale with a fallback: the fallback, like DNS.
        let fallback = DnsSettings { fallback_ip: Some(Ipv4Addr::new(198, 51, 100, 1)), ..DnsSettings::default() };
        let r = redirector(fallback);
        let later = now + 601_000;
        assert_eq!(
            r.decide("edge.lagran.net", "/", ip("10.1.2.3"), later),
            Decision::Redirect { location: "http://198.51.100.1/".into(), node: "fallback".into() }
        );
        // No table yet: no name is known, so nothing is a scheduled Host.
        r.table.store(Arc::new(crate::route_table::RouteTable::default()));
        assert_eq!(r.decide("edge.lagran.net", "/", ip("10.1.2.3"), now), Decision::UnknownHost);
    }

    #[test]
    fn a_cname_mode_host_redirects_to_the_chosen_nodes_hostname() {
        let r = redirector(DnsSettings::default());
        let mut t = table();
        // gz-01's answer in CNAME mode, as the builder makes it for a node with a hostname.
        Arc::make_mut(&mut t.zones[0].names[0].answers)[1].hostname = Some("gz-01.edge.lagran.net".into());
        r.table.store(Arc::new(t));
        let now = crate::clock::now_ms();
        assert_eq!(
            r.decide("edge.lagran.net", "/a.mp4?x=1", ip("10.1.2.3"), now),
            Decision::Redirect { location: "http://gz-01.edge.lagran.net/a.mp4?x=1".into(), node: "gz-01".into() },
            "what DNS answers: the CNAME target, the chosen node's hostname"
        );
        assert_eq!(
            r.decide("edge.lagran.net", "/", ip("127.0.0.1"), now),
            Decision::Redirect { location: "http://203.0.113.10/".into(), node: "default-01".into() },
            "a node without a hostname is answered by address, in DNS and here"
        );
    }

    #[test]
    fn counts_redirects_per_node() {
        let c = RedirectCounters::default();
        c.record(&Decision::Redirect { location: "http://x/".into(), node: "gz-01".into() });
        c.record(&Decision::Redirect { location: "http://x/".into(), node: "gz-01".into() });
        c.record(&Decision::UnknownHost);
        let mut s = String::new();
        c.render_prometheus(&mut s);
        assert!(s.contains("lagran_http_redirects_total{node=\"gz-01\"} 2"), "{s}");
        assert!(s.contains("lagran_http_unknown_host_total 1"), "{s}");
    }
}
