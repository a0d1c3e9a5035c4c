//! The request flow of an edge node: find the site by Host (and SNI), WAF, rate
//! limit, hotlink check, then the cache ([`crate::cached`]) or straight to the
//! origin. `GET /healthz` answers `ok` on any host for the control plane's L7
//! probe; `GET /metrics` answers the edge's metrics to loopback clients and to
//! holders of the metrics token (see [`crate::metrics`]). Every response carries
//! `via` and, when it reached the cache stage, `x-cache`
//! (`HIT|MISS|STALE|REVALIDATED|BYPASS`); each is logged when its body is done.
//!
//! - A path with a `.` or `..` segment (also percent-encoded, also after `\`) is
//!   answered 400 and never reaches the WAF or the origin: RFC 3986 §5.2.4 would
//!   resolve it, but origins differ in whether and how they do, and a deny rule
//!   must see the path the origin will serve.
//! - `GET /.well-known/acme-challenge/{token}` over plain HTTP is answered on
//!   any host, before the WAF, from the control plane ([`crate::acme_challenge`]).
//! - Requests with a `Cookie` or `Authorization` are not answered from the cache
//!   nor stored (`x-cache: BYPASS`): what the origin sends them may be personal.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::http::uri::Scheme;
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use tracing::debug;

use crate::access_log::Line;
use crate::body::{self, Counted, EdgeBody, OnDone};
use crate::origin::Forward;
use crate::outcome::{Answer, CacheResult, Outcome};
use crate::reply::{proxy, text};
use crate::{Edge, Site, acme_challenge, cached, host, rum};

/// What the handler knows about the connection a request came on.
#[derive(Debug)]
pub struct Conn {
    pub peer: SocketAddr,
    /// Normalized TLS server name, for HTTPS connections that sent one.
    pub sni: Option<String>,
    pub scheme: Scheme,
    /// `TLSv1.3` or `TLSv1.2` on HTTPS connections.
    pub tls_version: Option<&'static str>,
}

/// Answers `req`, then counts and logs it when its body is done. The counting
/// body is the response's own type, not boxed again: one allocation less per request.
pub async fn respond(edge: &Arc<Edge>, conn: &Conn, req: Request<Incoming>) -> Response<Counted> {
    edge.stats.requests.fetch_add(1, Ordering::Relaxed);
    let start = Instant::now();
    let version = req.version();
    // The URI and the Host value share the request head's buffer: references,
    // not copies; the host is borrowed from them unless it needs lower-casing.
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let host_header = req.headers().get(header::HOST).cloned();
    let host = request_host(&uri, host_header.as_ref());
    let site = host.as_deref().and_then(|h| edge.site(h));
    let Answer { response: mut resp, outcome } = handle(edge, conn, req, host.as_deref(), site.as_ref()).await;
    let via = match version {
        Version::HTTP_2 => "2 lagran-edge",
        Version::HTTP_10 => "1.0 lagran-edge",
        _ => "1.1 lagran-edge",
    };
    resp.headers_mut().append(header::VIA, HeaderValue::from_static(via));
    let status = resp.status().as_u16();
    let on_done: Option<OnDone> = match site.is_none() && edge.access_log.is_none() {
        true => None,
        false => {
            let (edge, client, tls) = (edge.clone(), conn.peer.ip().to_canonical(), conn.tls_version);
            Some(Box::new(move |bytes| {
                let done = Done { client, method: method.as_str(), path: uri.path(), status, outcome, tls, start };
                record(&edge, site.as_deref(), &done, bytes);
            }))
        }
    };
    resp.map(|b| Counted::new(b, edge.stats.clone(), on_done))
}

/// A request whose response body is done, as its site's counters and the
/// access log record it.
#[derive(Debug)]
pub struct Done<'a> {
    pub client: IpAddr,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub outcome: Outcome,
    pub tls: Option<&'static str>,
    /// When its head was read.
    pub start: Instant,
}

/// Counts `done` for its site (when it had one) and logs it, with the
/// `bytes` of body sent.
pub fn record(edge: &Edge, site: Option<&Site>, done: &Done<'_>, bytes: u64) {
    if let Some(site) = site {
        site.metrics.request(done.outcome.cache, bytes);
    }
    let Some(log) = &edge.access_log else { return };
    log.log(&Line {
        time: SystemTime::now(),
        site: site.map_or("-", |s| s.host.as_str()),
        client: done.client,
        method: done.method,
        path: done.path,
        status: done.status,
        bytes,
        cache: done.outcome.cache.as_str(),
        origin: done.outcome.origin_time,
        tls: done.tls,
        duration: done.start.elapsed(),
    });
}

/// The request's host, normalized: the URI authority (HTTP/2, absolute-form)
/// or the Host header.
fn request_host<'a>(uri: &'a Uri, host_header: Option<&'a HeaderValue>) -> Option<Cow<'a, str>> {
    let host = match uri.host() {
        Some(h) => h,
        None => host_header?.to_str().ok()?,
    };
    Some(host::normalized(host)).filter(|h| !h.is_empty())
}

/// The TLS server name of `conn` when it names another site than `site`, the
/// site of the request's `host`: a connection's certificate vouches for its
/// SNI's site only (no domain fronting).
pub fn fronted_by<'c>(edge: &Edge, conn: &'c Conn, host: &str, site: &Site) -> Option<&'c str> {
    let sni = conn.sni.as_deref()?;
    (sni != host && edge.site(sni).is_none_or(|s| s.host != site.host)).then_some(sni)
}

/// Whether `path` is one answered on any host, before the site's flow:
/// `/healthz`, `/metrics`, the measurement and ACME challenge paths.
pub fn answered_on_any_host(path: &str) -> bool {
    path == "/healthz"
        || path == "/metrics"
        || path.starts_with(rum::PREFIX)
        || path.starts_with(acme_challenge::PREFIX)
}

/// Whether a path has a `.` or `..` segment, also percent-encoded or split by `\\`.
pub fn has_dot_segment(path: &str) -> bool {
    let is_dot = |seg: &str| seg == "." || seg == "..";
    // Nothing to decode: the segments as they are (no copy).
    if !path.contains('%') {
        return path.split(['/', '\\']).any(is_dot);
    }
    let decoded = percent_decode(path);
    decoded.split(['/', '\\']).any(is_dot)
}

/// `%XX` decoded (twice, so `%252e` is caught too); invalid escapes stay as they are.
fn percent_decode(path: &str) -> String {
    fn once(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if b[i] == b'%'
                && let (Some(h), Some(l)) = (b.get(i + 1).and_then(|&c| hex(c)), b.get(i + 2).and_then(|&c| hex(c)))
            {
                out.push((h * 16 + l) as u8);
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    once(&once(path))
}

/// Whether the client may read `/metrics`: on loopback, or with the token.
fn may_read_metrics(edge: &Edge, conn: &Conn, req: &Request<Incoming>) -> bool {
    if conn.peer.ip().to_canonical().is_loopback() {
        return true;
    }
    let Some(token) = &edge.metrics_token else { return false };
    let presented = req.headers().get(header::AUTHORIZATION).and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    presented.is_some_and(|p| subtle::ConstantTimeEq::ct_eq(p, token.as_bytes()).into())
}

fn metrics(edge: &Edge) -> Response<EdgeBody> {
    let dropped = edge.access_log.as_ref().map_or(0, |l| l.dropped());
    let (disk_objects, disk_bytes) = edge.cache.disk_usage();
    let gauges = [
        ("lagran_edge_access_log_dropped", "Access log lines dropped because the writer fell behind.", dropped),
        ("lagran_edge_cache_memory_bytes", "Bytes charged in the memory tier.", edge.cache.bytes() as u64),
        ("lagran_edge_cache_memory_objects", "Objects in the memory tier.", edge.cache.len() as u64),
        ("lagran_edge_cache_disk_bytes", "Bytes of the disk tier's files.", disk_bytes),
        ("lagran_edge_cache_disk_objects", "Objects in the disk tier.", disk_objects as u64),
    ];
    let hit_path = edge.stats.hit_path_requests.load(Ordering::Relaxed);
    let mut extra: Vec<_> = gauges.iter().map(|&(name, help, v)| (name, help, "gauge", v)).collect();
    extra.push((
        "lagran_edge_hit_path_requests_total",
        "Requests answered on the HTTP/1.1 hit path, without hyper (counted in the sites' requests too).",
        "counter",
        hit_path,
    ));
    let mut resp = Response::new(body::full(edge.metrics.render(&extra)));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    resp
}

/// `ok`, unless this client asks too often (the site's limiter, then the edge's).
fn healthz(edge: &Edge, conn: &Conn, req: &Request<Incoming>) -> Response<EdgeBody> {
    let (ip, now) = (conn.peer.ip().to_canonical(), Instant::now());
    let site = request_host(req.uri(), req.headers().get(header::HOST)).and_then(|h| edge.site(&h));
    let site_allows = site.as_ref().and_then(|s| s.limiter.as_ref()).is_none_or(|l| l.allow(ip, now));
    if !site_allows || !edge.healthz_limiter.allow(ip, now) {
        let mut resp = text(StatusCode::TOO_MANY_REQUESTS, "too many requests\n");
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return resp;
    }
    text(StatusCode::OK, "ok")
}

/// Answers `req`, whose host (normalized) and site the caller looked up. Paths
/// other than the cache's are boxed, as in [`cached::serve`], so the future of
/// a cached hit stays small.
async fn handle(
    edge: &Arc<Edge>,
    conn: &Conn,
    req: Request<Incoming>,
    host: Option<&str>,
    site: Option<&Arc<Site>>,
) -> Answer {
    if req.uri().path() == "/healthz" {
        return healthz(edge, conn, &req).into();
    }
    if req.uri().path() == "/metrics" && req.method() == Method::GET && may_read_metrics(edge, conn, &req) {
        return metrics(edge).into();
    }
    if let Some(name) = req.uri().path().strip_prefix(rum::PREFIX) {
        let name = name.to_owned();
        return Box::pin(edge.rum.respond(&name, conn.peer.ip(), req)).await.map(body::full).into();
    }
    if let (Some(acme), Some(token)) = (&edge.acme, req.uri().path().strip_prefix(acme_challenge::PREFIX))
        && conn.scheme == Scheme::HTTP
        && (req.method() == Method::GET || req.method() == Method::HEAD)
    {
        return Box::pin(acme.answer(token, conn.peer.ip().to_canonical())).await.into();
    }
    if has_dot_segment(req.uri().path()) {
        return text(StatusCode::BAD_REQUEST, "a path with \".\" or \"..\" segments is not served\n").into();
    }
    let Some(host) = host else {
        return text(StatusCode::BAD_REQUEST, "missing Host header\n").into();
    };
    let Some(site) = site else {
        return text(StatusCode::MISDIRECTED_REQUEST, format!("no site is configured for host {host}\n")).into();
    };
    if let Some(sni) = fronted_by(edge, conn, host, site) {
        let msg = format!("host {host} does not match TLS server name {sni}\n");
        return text(StatusCode::MISDIRECTED_REQUEST, msg).into();
    }

    let ip = conn.peer.ip().to_canonical();
    let user_agent = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok());
    if let Err(block) = site.waf.check(ip, req.uri().path(), user_agent) {
        debug!(%ip, %host, path = req.uri().path(), %block, "waf block");
        return text(StatusCode::FORBIDDEN, format!("forbidden: {block}\n")).into();
    }
    if let Some(limiter) = &site.limiter
        && !limiter.allow(ip, Instant::now())
    {
        debug!(%ip, %host, "rate limited");
        let mut resp = text(StatusCode::TOO_MANY_REQUESTS, "too many requests\n");
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return resp.into();
    }
    if let Err(block) = site.waf.check_referer(req.headers().get(header::REFERER).map(HeaderValue::as_bytes)) {
        debug!(%ip, %host, "hotlink block");
        return text(StatusCode::FORBIDDEN, format!("forbidden: {block}\n")).into();
    }

    let method = req.method().clone();
    let cacheable = (method == Method::GET || method == Method::HEAD)
        && !site.cache_ttl.is_zero()
        && !req.headers().contains_key(header::AUTHORIZATION)
        && !req.headers().contains_key(header::COOKIE);
    let forward = Forward { host, client_ip: ip, scheme: &conn.scheme };
    if !cacheable {
        return Box::pin(proxy(site, req.map(body::incoming), forward, CacheResult::Bypass)).await;
    }
    let (parts, _) = req.into_parts();
    cached::serve(edge, site, parts, forward).await
}
