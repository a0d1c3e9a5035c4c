//! The HTTP(S) front: accept loops, per-connection hyper service and the request flow
//! of an edge node — find the site by Host (and SNI), WAF, rate limit, hotlink check,
//! cache, origin on a miss. `GET /healthz` answers `ok` on any host for the control
//! plane's L7 probe. Every response carries `via` and, when it reached the cache
//! stage, `x-cache: HIT|MISS|BYPASS`.
//!
//! - A path with a `.` or `..` segment (also percent-encoded, also after `\`) is
//!   answered 400 and never reaches the WAF or the origin: RFC 3986 §5.2.4 would
//!   resolve it, but origins differ in whether and how they do, and a deny rule
//!   must see the path the origin will serve.
//! - Requests with a `Cookie` are not answered from the cache nor stored
//!   (`x-cache: BYPASS`): what the origin sends them may be personal.
//! - A `Range` request that misses fetches the whole object to fill the cache and
//!   cuts the range from it; when the object turns out too large to store, or not
//!   storable, that fetch is abandoned and the range itself is asked from the
//!   origin, so the client never receives more than it asked for.
//! - At most `max_connections` client connections are open at once (HTTP and HTTPS
//!   together), and `max_connections_per_client` from one client; a connection past
//!   either is closed at once ([`crate::conn_limit`]). A connection, HTTP/1 or
//!   HTTP/2, on which nothing moves for `idle_timeout_secs` is closed ([`crate::idle`]).
//! - `GET /healthz` is rate-limited per client like every request: by the site's
//!   limiter when the host is a site, and by the edge's own ([`crate::HEALTHZ_RPS`]),
//!   since it is answered on any host.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::http::uri::Scheme;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::body::{self, Counted, EdgeBody, Read};
use crate::cache::{self, ByteRange, CachedObject};
use crate::conn_limit::ConnLimit;
use crate::idle::{Activity, Watched};
use crate::origin::OriginError;
use crate::{Edge, Site, Stats, host};

/// How long open connections may finish their requests after shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What the handler knows about the connection a request came on.
#[derive(Debug)]
struct Conn {
    peer: SocketAddr,
    /// Normalized TLS server name, for HTTPS connections that sent one.
    sni: Option<String>,
    scheme: Scheme,
}

/// Serves plain HTTP on `listener` until `shutdown`, then drains open connections.
pub async fn run(listener: TcpListener, state: Arc<Edge>, shutdown: CancellationToken) -> io::Result<()> {
    let token = shutdown.clone();
    let slots = state.conn_slots.clone();
    accept_loop(listener, &token, slots, move |stream, peer| {
        let conn = Conn { peer, sni: None, scheme: Scheme::HTTP };
        serve_conn(stream, conn, state.clone(), shutdown.clone())
    })
    .await
}

/// Serves HTTPS on `listener`: TLS with a certificate chosen by SNI, then as [`run`].
pub async fn run_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<Edge>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let token = shutdown.clone();
    let slots = state.conn_slots.clone();
    accept_loop(listener, &token, slots, move |stream, peer| {
        let (acceptor, state, shutdown) = (acceptor.clone(), state.clone(), shutdown.clone());
        async move {
            let tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return debug!(%peer, "TLS handshake timed out"),
            };
            let sni = tls.get_ref().1.server_name().map(host::normalize);
            serve_conn(tls, Conn { peer, sni, scheme: Scheme::HTTPS }, state, shutdown).await
        }
    })
    .await
}

async fn accept_loop<F, Fut>(
    listener: TcpListener,
    shutdown: &CancellationToken,
    slots: Arc<ConnLimit>,
    mut on_conn: F,
) -> io::Result<()>
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let local = listener.local_addr()?;
    let tracker = TaskTracker::new();
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let permit = match slots.claim(peer.ip()) {
                    Ok(permit) => permit,
                    Err(why) => {
                        if refused.is_multiple_of(1000) {
                            warn!(%local, %peer, refused, ?why, "connection caps reached; closing new connections");
                        }
                        refused += 1;
                        drop(stream);
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let conn = on_conn(stream, peer);
                tracker.spawn(async move {
                    let _permit = permit;
                    conn.await
                });
            }
            // Out of descriptors or a connection that died in the backlog: keep serving.
            Err(e) => {
                warn!(%local, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    tracker.close();
    info!(%local, open = tracker.len(), "listener closed, draining connections");
    if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait()).await.is_err() {
        warn!(%local, open = tracker.len(), "connections still open after {DRAIN_TIMEOUT:?}; closing them");
    }
    Ok(())
}

/// Counts a connection as open for as long as it lives.
struct OpenConn(Arc<Stats>);

impl OpenConn {
    fn new(stats: &Arc<Stats>) -> OpenConn {
        stats.open_conns.fetch_add(1, Ordering::Relaxed);
        OpenConn(stats.clone())
    }
}

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.open_conns.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve_conn<I>(io: I, conn: Conn, edge: Arc<Edge>, shutdown: CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let _open = OpenConn::new(&edge.stats);
    let peer = conn.peer;
    let conn = Arc::new(conn);
    let (activity, idle_timeout) = (Activity::new(), edge.idle_timeout);
    let io = Watched::new(io, activity.clone());
    let service = service_fn(move |req| {
        let (edge, conn) = (edge.clone(), conn.clone());
        async move { Ok::<_, Infallible>(respond(&edge, &conn, req).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    let served = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(served);
    let result = tokio::select! {
        result = served.as_mut() => result,
        () = shutdown.cancelled() => {
            served.as_mut().graceful_shutdown();
            served.await
        }
        () = activity.idle(idle_timeout) => {
            debug!(%peer, idle = ?idle_timeout, "connection idle; closed");
            return;
        }
    };
    if let Err(e) = result {
        debug!(%peer, error = %crate::error_chain(&*e), "connection ended with an error");
    }
}

async fn respond(edge: &Edge, conn: &Conn, req: Request<Incoming>) -> Response<EdgeBody> {
    edge.stats.requests.fetch_add(1, Ordering::Relaxed);
    let version = req.version();
    let mut resp = handle(edge, conn, req).await;
    let via = match version {
        Version::HTTP_2 => "2 lagran-edge",
        Version::HTTP_10 => "1.0 lagran-edge",
        _ => "1.1 lagran-edge",
    };
    resp.headers_mut().append(header::VIA, HeaderValue::from_static(via));
    resp.map(|b| Counted::new(b, edge.stats.clone()).boxed())
}

#[derive(Debug, Clone, Copy)]
enum XCache {
    Hit,
    Miss,
    Bypass,
}

impl XCache {
    fn set(self, headers: &mut HeaderMap) {
        let v = match self {
            XCache::Hit => "HIT",
            XCache::Miss => "MISS",
            XCache::Bypass => "BYPASS",
        };
        headers.insert("x-cache", HeaderValue::from_static(v));
    }
}

fn text(status: StatusCode, msg: impl Into<String>) -> Response<EdgeBody> {
    let mut resp = Response::new(body::full(msg.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The request's host: the URI authority (HTTP/2, absolute-form) or the Host header.
fn request_host(req: &Request<Incoming>) -> Option<String> {
    let host = match req.uri().host() {
        Some(h) => h,
        None => req.headers().get(header::HOST)?.to_str().ok()?,
    };
    Some(host::normalize(host)).filter(|h| !h.is_empty())
}

/// Whether a path has a `.` or `..` segment, also percent-encoded or split by `\\`.
pub fn has_dot_segment(path: &str) -> bool {
    let decoded = percent_decode(path);
    decoded.split(['/', '\\']).any(|seg| seg == "." || seg == "..")
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

async fn handle(edge: &Edge, conn: &Conn, req: Request<Incoming>) -> Response<EdgeBody> {
    if req.uri().path() == "/healthz" {
        return healthz(edge, conn, &req);
    }
    if has_dot_segment(req.uri().path()) {
        return text(StatusCode::BAD_REQUEST, "a path with \".\" or \"..\" segments is not served\n");
    }
    let Some(host) = request_host(&req) else {
        return text(StatusCode::BAD_REQUEST, "missing Host header\n");
    };
    let Some(site) = edge.site(&host) else {
        return text(StatusCode::MISDIRECTED_REQUEST, format!("no site is configured for host {host}\n"));
    };
    // A connection's certificate vouches for its SNI's site only (no domain fronting).
    if let Some(sni) = &conn.sni
        && edge.site(sni).is_none_or(|s| s.host != site.host)
    {
        return text(StatusCode::MISDIRECTED_REQUEST, format!("host {host} does not match TLS server name {sni}\n"));
    }

    let ip = conn.peer.ip().to_canonical();
    let user_agent = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok());
    if let Err(block) = site.waf.check(ip, req.uri().path(), user_agent) {
        debug!(%ip, %host, path = req.uri().path(), %block, "waf block");
        return text(StatusCode::FORBIDDEN, format!("forbidden: {block}\n"));
    }
    if let Some(limiter) = &site.limiter
        && !limiter.allow(ip, Instant::now())
    {
        debug!(%ip, %host, "rate limited");
        let mut resp = text(StatusCode::TOO_MANY_REQUESTS, "too many requests\n");
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return resp;
    }
    if let Err(block) = site.waf.check_referer(req.headers().get(header::REFERER).map(HeaderValue::as_bytes)) {
        debug!(%ip, %host, "hotlink block");
        return text(StatusCode::FORBIDDEN, format!("forbidden: {block}\n"));
    }

    let method = req.method().clone();
    let cacheable = (method == Method::GET || method == Method::HEAD)
        && !site.cache_ttl.is_zero()
        && !req.headers().contains_key(header::AUTHORIZATION)
        && !req.headers().contains_key(header::COOKIE);
    if !cacheable {
        return proxy(edge, &site, conn, &host, req, XCache::Bypass).await;
    }
    let key = cache::key(&host, req.uri());
    let range = RangeRequest::from(req.headers());
    if let Some(object) = edge.cache.get(&key, Instant::now()) {
        return from_cache(&object, method == Method::HEAD, &range, XCache::Hit);
    }
    if method == Method::HEAD {
        return proxy(edge, &site, conn, &host, req, XCache::Miss).await;
    }

    // Fetch the whole object so it can be stored; the range is cut here. Should it
    // not be storable after all, the range is asked from the origin instead.
    let ranged = range.range.is_some().then(|| (req.uri().clone(), req.headers().clone()));
    let mut req = req.map(body::incoming);
    req.headers_mut().remove(header::RANGE);
    req.headers_mut().remove(header::IF_RANGE);
    let resp = match edge.origin.fetch(&site.origin, req, &host, ip, &conn.scheme).await {
        Ok(resp) => resp,
        Err(e) => return origin_failed(&host, e),
    };
    let ttl = if resp.status() == StatusCode::OK { cache::storable_for(resp.headers(), site.cache_ttl) } else { None };
    let too_large = resp
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|len| len > edge.cache.max_object_bytes() as u64);
    let Some(ttl) = ttl.filter(|_| !too_large || ranged.is_none()) else {
        return match ranged {
            Some((uri, headers)) if resp.status() == StatusCode::OK => {
                drop(resp);
                range_from_origin(edge, &site, conn, &host, uri, headers).await
            }
            _ => passthrough(resp, XCache::Miss),
        };
    };
    let (parts, incoming) = resp.into_parts();
    match body::read_up_to(incoming, edge.cache.max_object_bytes()).await {
        Ok(Read::Whole(bytes)) => {
            let now = Instant::now();
            let mut headers = parts.headers;
            headers.remove(header::AGE);
            let object = Arc::new(CachedObject { headers, body: bytes, stored: now, expires: now + ttl });
            edge.cache.insert(key, object.clone());
            from_cache(&object, false, &range, XCache::Miss)
        }
        Ok(Read::Partial(rest)) => {
            if let Some((uri, headers)) = ranged {
                drop(rest);
                return range_from_origin(edge, &site, conn, &host, uri, headers).await;
            }
            let mut resp = Response::from_parts(parts, rest.map_err(Into::into).boxed());
            XCache::Miss.set(resp.headers_mut());
            resp
        }
        Err(e) => {
            warn!(%host, error = %crate::error_chain(&e), "origin body failed");
            text(StatusCode::BAD_GATEWAY, "origin response failed\n")
        }
    }
}

/// `ok`, unless this client asks too often (the site's limiter, then the edge's).
fn healthz(edge: &Edge, conn: &Conn, req: &Request<Incoming>) -> Response<EdgeBody> {
    let (ip, now) = (conn.peer.ip().to_canonical(), Instant::now());
    let site = request_host(req).and_then(|h| edge.site(&h));
    let site_allows = site.as_ref().and_then(|s| s.limiter.as_ref()).is_none_or(|l| l.allow(ip, now));
    if !site_allows || !edge.healthz_limiter.allow(ip, now) {
        let mut resp = text(StatusCode::TOO_MANY_REQUESTS, "too many requests\n");
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return resp;
    }
    text(StatusCode::OK, "ok")
}

async fn proxy(
    edge: &Edge,
    site: &Site,
    conn: &Conn,
    host: &str,
    req: Request<Incoming>,
    x: XCache,
) -> Response<EdgeBody> {
    let ip = conn.peer.ip().to_canonical();
    match edge.origin.fetch(&site.origin, req.map(body::incoming), host, ip, &conn.scheme).await {
        Ok(resp) => passthrough(resp, x),
        Err(e) => origin_failed(host, e),
    }
}

/// Asks the origin for just the range a client wants (`GET` with its `Range` and
/// `If-Range`), passed through uncached.
async fn range_from_origin(
    edge: &Edge,
    site: &Site,
    conn: &Conn,
    host: &str,
    uri: hyper::Uri,
    headers: HeaderMap,
) -> Response<EdgeBody> {
    let mut req = Request::new(body::empty());
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let ip = conn.peer.ip().to_canonical();
    match edge.origin.fetch(&site.origin, req, host, ip, &conn.scheme).await {
        Ok(resp) => passthrough(resp, XCache::Miss),
        Err(e) => origin_failed(host, e),
    }
}

fn passthrough(resp: Response<Incoming>, x: XCache) -> Response<EdgeBody> {
    let mut resp = resp.map(body::incoming);
    x.set(resp.headers_mut());
    resp
}

fn origin_failed(host: &str, e: OriginError) -> Response<EdgeBody> {
    warn!(%host, error = %crate::error_chain(&e), "origin fetch failed");
    match e {
        OriginError::Timeout { .. } => text(StatusCode::GATEWAY_TIMEOUT, "origin timed out\n"),
        _ => text(StatusCode::BAD_GATEWAY, "origin unreachable\n"),
    }
}

/// A request's `Range` and `If-Range`.
struct RangeRequest {
    range: Option<String>,
    if_range: Option<HeaderValue>,
}

impl From<&HeaderMap> for RangeRequest {
    fn from(h: &HeaderMap) -> Self {
        RangeRequest {
            range: h.get(header::RANGE).and_then(|v| v.to_str().ok()).map(str::to_owned),
            if_range: h.get(header::IF_RANGE).cloned(),
        }
    }
}

impl RangeRequest {
    fn resolve(&self, object: &CachedObject) -> ByteRange {
        let Some(range) = &self.range else {
            return ByteRange::Full;
        };
        // RFC 9110 §13.1.5: a range applies only if the validator still matches.
        if let Some(v) = &self.if_range {
            let matches = |name| object.headers.get(name) == Some(v);
            let strong_etag = !v.as_bytes().starts_with(b"W/") && matches(header::ETAG);
            if !strong_etag && !matches(header::LAST_MODIFIED) {
                return ByteRange::Full;
            }
        }
        cache::byte_range(range, object.body.len() as u64)
    }
}

fn from_cache(object: &CachedObject, head_only: bool, range: &RangeRequest, x: XCache) -> Response<EdgeBody> {
    let len = object.body.len();
    let (status, body, content_range) = match range.resolve(object) {
        ByteRange::Full => (StatusCode::OK, object.body.clone(), None),
        ByteRange::Part(first, last) => {
            let part = object.body.slice(first as usize..=last as usize);
            (StatusCode::PARTIAL_CONTENT, part, Some(format!("bytes {first}-{last}/{len}")))
        }
        ByteRange::Unsatisfiable => {
            let mut resp = text(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable\n");
            let cr = HeaderValue::from_str(&format!("bytes */{len}")).expect("digits are a valid header value");
            resp.headers_mut().insert(header::CONTENT_RANGE, cr);
            x.set(resp.headers_mut());
            return resp;
        }
    };
    let body_len = body.len();
    let mut resp = Response::new(if head_only { body::empty() } else { body::full(body) });
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    *headers = object.headers.clone();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(header::AGE, HeaderValue::from(object.stored.elapsed().as_secs()));
    if let Some(cr) = content_range {
        headers.insert(header::CONTENT_RANGE, HeaderValue::from_str(&cr).expect("digits are a valid header value"));
    }
    x.set(headers);
    resp
}
